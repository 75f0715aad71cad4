/* emu_move.c: the `move` group (dev_move.h) on the emulated device: plain
 * C loops over the host addresses behind the device pointers, the naive
 * reference of kernels/move.cu (one output element per step, its source
 * found from its index, as each GPU thread finds it). */
#include <string.h>

#include "base/status.h"
#include "device/dev_move.h"
#include "device/emu.h"

static keel_status emu_copy(keel_device *d, size_t es, int rank, const int64_t *dims,
                            const void *x, const int64_t *xs, void *y, const int64_t *ys) {
  (void)d;
  if (rank < 0 || rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "emu: a copy of rank %d (at most %d)", rank, KEEL_DEV_MAX_RANK);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return keel_err(KEEL_ERR_UNSUPPORTED, "emu: a copy of %zu-byte elements", es);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  if (n <= 0) return KEEL_OK;
  const char *hx = keel_emu_host(x);
  char *hy = keel_emu_host(y);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, ix = 0, iy = 0;
    for (int k = rank - 1; k >= 0; k--) {
      int64_t c = r % dims[k];
      r /= dims[k];
      ix += c * xs[k], iy += c * ys[k];
    }
    /* strides may be negative (Slice with a negative step): signed offsets */
    memcpy(hy + iy * (int64_t)es, hx + ix * (int64_t)es, es);
  }
  return KEEL_OK;
}

static keel_status emu_gather(keel_device *d, size_t es, int64_t outer, int64_t axis_n,
                              int64_t inner, const void *x, const void *idx, int idx64,
                              int64_t n_idx, void *y) {
  (void)d;
  const char *hx = keel_emu_host(x);
  const void *hi = keel_emu_host(idx);
  char *hy = keel_emu_host(y);
  size_t row = (size_t)inner * es;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n_idx; j++) {
      int64_t p = idx64 ? ((const int64_t *)hi)[j] : ((const int32_t *)hi)[j];
      if (p < 0) p += axis_n;
      char *dst = hy + (size_t)(o * n_idx + j) * row;
      if (p < 0 || p >= axis_n) memset(dst, 0, row);
      else memcpy(dst, hx + (size_t)(o * axis_n + p) * row, row);
    }
  return KEEL_OK;
}

static keel_status emu_where(keel_device *d, int rank, const int64_t *dims, const uint8_t *c,
                             const int64_t *cs, const float *a, const int64_t *as, const float *b,
                             const int64_t *bs, float *y) {
  (void)d;
  if (rank < 0 || rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "emu: Where of rank %d (at most %d)", rank, KEEL_DEV_MAX_RANK);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  const uint8_t *hc = keel_emu_host(c);
  const float *ha = keel_emu_host(a), *hb = keel_emu_host(b);
  float *hy = keel_emu_host(y);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, ic = 0, ia = 0, ib = 0;
    for (int k = rank - 1; k >= 0; k--) {
      int64_t q = r % dims[k];
      r /= dims[k];
      ic += q * cs[k], ia += q * as[k], ib += q * bs[k];
    }
    hy[i] = hc[ic] ? ha[ia] : hb[ib];
  }
  return KEEL_OK;
}

/* One element of dtype t at p as a double (exact for int32, float32 and
 * bool; int64 beyond 2^53 goes through float anyway). */
static double load(int t, const void *p, int64_t i) {
  switch (t) {
    case KEEL_FLOAT: return ((const float *)p)[i];
    case KEEL_INT64: return (double)((const int64_t *)p)[i];
    case KEEL_INT32: return ((const int32_t *)p)[i];
    default: return ((const uint8_t *)p)[i] != 0;
  }
}

static keel_status emu_cast(keel_device *d, int from, int to, int64_t n, const void *x, void *y) {
  (void)d;
  const void *hx = keel_emu_host(x);
  void *hy = keel_emu_host(y);
  for (int64_t i = 0; i < n; i++) {
    if (from == KEEL_FLOAT) { /* float to int as C converts it */
      float v = ((const float *)hx)[i];
      switch (to) {
        case KEEL_FLOAT: ((float *)hy)[i] = v; break;
        case KEEL_INT64: ((int64_t *)hy)[i] = (int64_t)v; break;
        case KEEL_INT32: ((int32_t *)hy)[i] = (int32_t)v; break;
        default: ((uint8_t *)hy)[i] = v != 0.0f;
      }
    } else if (to == KEEL_FLOAT) {
      ((float *)hy)[i] = from == KEEL_INT64 ? (float)((const int64_t *)hx)[i] : (float)load(from, hx, i);
    } else {
      return keel_err(KEEL_ERR_UNSUPPORTED, "emu: Cast from %d to %d (one side must be float32)", from, to);
    }
  }
  return KEEL_OK;
}

const keel_dev_move keel_emu_move = {emu_copy, emu_gather, emu_where, emu_cast};
