/* emu.c: a device emulated on the host (device.h), for machines without a
 * GPU.
 *
 * Memory: segments are host pages (counted as device bytes, not as the
 * host's), handed out with bit 62 flipped: a non-canonical address on
 * x86-64 and AArch64, so a host load or store through a device pointer
 * faults at once, as it would on a GPU. Only this file turns them back
 * into host addresses. The allocator never touches a non-host-visible
 * provider's bytes (mem/alloc.h), and it only adds offsets below a
 * segment's size to its base, which keeps bit 62.
 *
 * Kernels: plain C loops computing exactly what kernels/ew.cu computes,
 * with the C library's math: the naive reference of the GPU kernels.
 * Everything runs synchronously on the calling thread, which is one
 * in-order stream.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "device/dev_blas.h"
#include "device/dev_conv.h"
#include "device/device.h"
#include "device/dev_move.h"
#include "device/dev_norm.h"
#include "device/dev_attn.h"
#include "device/dev_rnn.h"
#include "device/emu.h"

#define EMU_TAG ((uintptr_t)1 << 62)

static void *host_of(const void *p) { return (void *)((uintptr_t)p ^ EMU_TAG); }
void *keel_emu_host(const void *p) { return host_of(p); }

typedef struct emu {
  keel_mem_provider prov;
  char name[32];
} emu;

static void *emu_pages(void *ctx, size_t size) {
  (void)ctx;
  void *p = NULL;
  if (posix_memalign(&p, 4096, size)) return NULL;
  keel_device_bytes_add((int64_t)size);
  return (void *)((uintptr_t)p ^ EMU_TAG);
}

static void emu_pages_free(void *ctx, void *p, size_t size) {
  (void)ctx;
  if (!p) return;
  free(host_of(p));
  keel_device_bytes_add(-(int64_t)size);
}

static void emu_close(void *impl) { keel_sys_free(impl, sizeof(emu)); }
static const keel_mem_provider *emu_provider(void *impl) { return &((emu *)impl)->prov; }

static keel_status emu_to_device(void *impl, void *dst, const void *src, size_t n) {
  (void)impl;
  if (n) memcpy(host_of(dst), src, n);
  return KEEL_OK;
}
static keel_status emu_to_host(void *impl, void *dst, const void *src, size_t n) {
  (void)impl;
  if (n) memcpy(dst, host_of(src), n);
  return KEEL_OK;
}
static keel_status emu_sync(void *impl) {
  (void)impl;
  return KEEL_OK;
}

static float binop(keel_dev_binop op, float a, float b) {
  switch (op) {
    case KEEL_DEV_ADD: return a + b;
    case KEEL_DEV_SUB: return a - b;
    case KEEL_DEV_MUL: return a * b;
    case KEEL_DEV_DIV: return a / b;
    case KEEL_DEV_MAX: return a != a || b != b ? a + b : fmaxf(a, b);
    case KEEL_DEV_MIN: return a != a || b != b ? a + b : fminf(a, b);
    default: return powf(a, b);
  }
}

static keel_status emu_binary(void *impl, keel_dev_binop op, int rank, const int64_t *dims,
                              const int64_t *a_dims, const float *a, const int64_t *b_dims,
                              const float *b, float *y) {
  (void)impl;
  if (rank < 0 || rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "emu: element-wise ops of rank %d (at most %d)", rank,
                    KEEL_DEV_MAX_RANK);
  int64_t sa[KEEL_DEV_MAX_RANK], sb[KEEL_DEV_MAX_RANK], n = 1, na = 1, nb = 1;
  for (int i = rank - 1; i >= 0; i--) {
    if ((a_dims[i] != 1 && a_dims[i] != dims[i]) || (b_dims[i] != 1 && b_dims[i] != dims[i]))
      return keel_err(KEEL_ERR_SHAPE, "emu: operand dims do not broadcast to the output's at axis %d", i);
    sa[i] = a_dims[i] == 1 ? 0 : na;
    sb[i] = b_dims[i] == 1 ? 0 : nb;
    n *= dims[i], na *= a_dims[i], nb *= b_dims[i];
  }
  const float *ha = host_of(a), *hb = host_of(b);
  float *hy = host_of(y);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, ia = 0, ib = 0;
    for (int d = rank - 1; d >= 0; d--) {
      int64_t c = r % dims[d];
      r /= dims[d];
      ia += c * sa[d], ib += c * sb[d];
    }
    hy[i] = binop(op, ha[ia], hb[ib]);
  }
  return KEEL_OK;
}

/* The formulas of ops/math/unary.c and ops/common/activation.c (NaN
 * propagates through every comparison as there), with libm's functions. */
static float unop(keel_dev_unop op, float a, float b, float x) {
  float t;
  switch (op) {
    case KEEL_DEV_RELU: return x > 0.0f ? x : (x != x ? x : 0.0f);
    case KEEL_DEV_NEG: return -x;
    case KEEL_DEV_ABS: return fabsf(x);
    case KEEL_DEV_SQRT: return sqrtf(x);
    case KEEL_DEV_EXP: return expf(x);
    case KEEL_DEV_SIGMOID: return keel_emu_sigmoid(x);
    case KEEL_DEV_TANH: return tanhf(x);
    case KEEL_DEV_LOG: return logf(x);
    case KEEL_DEV_ERF: return erff(x);
    case KEEL_DEV_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    case KEEL_DEV_GELU_TANH:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
    case KEEL_DEV_RECIP: return 1.0f / x;
    case KEEL_DEV_FLOOR: return floorf(x);
    case KEEL_DEV_CEIL: return ceilf(x);
    case KEEL_DEV_SOFTPLUS: return (x > 0 ? x : 0) + log1pf(expf(-fabsf(x)));
    case KEEL_DEV_LEAKY: return x < 0 ? a * x : x;
    case KEEL_DEV_ELU: return x < 0 ? a * expm1f(x) : x;
    case KEEL_DEV_HSIGMOID: t = a * x + b; return t < 0 ? 0 : t > 1 ? 1 : t;
    case KEEL_DEV_HSWISH: t = x / 6 + 0.5f; return x * (t < 0 ? 0 : t > 1 ? 1 : t);
    case KEEL_DEV_CLIP: t = x < a ? a : x; return t > b ? b : t; /* lower bound first, as numpy */
    case KEEL_DEV_COS: return cosf(x);
    case KEEL_DEV_SIN: return sinf(x);
    case KEEL_DEV_SILU: return x / (1 + expf(-x));
    case KEEL_DEV_HSIGMOID_MUL: t = a * x + b; return x * (t < 0 ? 0 : t > 1 ? 1 : t);
    default: return NAN; /* not a code: the caller checked */
  }
}

static keel_status emu_unary(void *impl, keel_dev_unop op, float a, float b, int64_t n,
                             const float *x, float *y) {
  (void)impl;
  if ((unsigned)op >= KEEL_DEV_UNOP_COUNT)
    return keel_err(KEEL_ERR_INTERNAL, "emu: unary op code %d", (int)op);
  const float *hx = host_of(x);
  float *hy = host_of(y);
  for (int64_t i = 0; i < n; i++) hy[i] = unop(op, a, b, hx[i]);
  return KEEL_OK;
}

static keel_status emu_softmax(void *impl, int64_t rows, int64_t cols, const float *x, float *y) {
  (void)impl;
  const float *hx = host_of(x);
  float *hy = host_of(y);
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = hx + r * cols;
    float *yr = hy + r * cols, m = -INFINITY, s = 0.0f;
    for (int64_t c = 0; c < cols; c++) m = fmaxf(m, xr[c]);
    for (int64_t c = 0; c < cols; c++) s += (yr[c] = expf(xr[c] - m));
    float inv = 1.0f / s;
    for (int64_t c = 0; c < cols; c++) yr[c] *= inv;
  }
  return KEEL_OK;
}

static const keel_device_ops g_emu_ops = {emu_close, emu_provider, emu_to_device, emu_to_host,
                                          emu_sync,  emu_binary,   emu_unary,     emu_softmax};

keel_status keel_emu_open(int ordinal, keel_device *d) {
  if (ordinal != 0)
    return keel_err(KEEL_ERR_UNSUPPORTED, "device emu:%d: there is one emulated device, emu:0", ordinal);
  emu *e = keel_sys_calloc(1, sizeof *e);
  if (!e) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "emu device");
  snprintf(e->name, sizeof e->name, "%s", d->name);
  e->prov = (keel_mem_provider){.name = e->name, .pages = emu_pages, .pages_free = emu_pages_free,
                                .ctx = e, .host_visible = false};
  d->ops = &g_emu_ops, d->impl = e;
  d->blas = &keel_emu_blas; /* stateless: no handle to make or free */
  d->move = &keel_emu_move; /* the kernel groups (dev_<group>.h) */
  d->norm = &keel_emu_norm;
  d->conv = &keel_emu_conv;
  d->attn = &keel_emu_attn;
  d->rnn = &keel_emu_rnn;
  snprintf(d->desc, sizeof d->desc, "a GPU emulated on the host (device pointers fault on the host)");
  return KEEL_OK;
}
