/* emu_norm.c: the `norm` group (dev_norm.h) on the emulated device: plain
 * C loops over the host addresses behind the device pointers, the naive
 * reference of kernels/norm.cu. Sums in double (the reference is the
 * accurate side; the GPU's float block sums are tested against it). */
#include <math.h>

#include "base/status.h"
#include "device/dev_norm.h"
#include "device/emu.h"

static keel_status emu_layernorm(keel_device *d, int64_t rows, int64_t cols, const float *x,
                                 const float *scale, const float *bias, float eps, float *y,
                                 float *mean, float *inv_std) {
  (void)d;
  const float *hx = keel_emu_host(x), *hs = keel_emu_host(scale);
  const float *hb = bias ? keel_emu_host(bias) : NULL;
  float *hy = keel_emu_host(y), *hm = mean ? keel_emu_host(mean) : NULL;
  float *hi = inv_std ? keel_emu_host(inv_std) : NULL;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = hx + r * cols;
    double s = 0, v = 0;
    for (int64_t c = 0; c < cols; c++) s += xr[c];
    float m = (float)(s / (double)cols);
    for (int64_t c = 0; c < cols; c++) v += ((double)xr[c] - m) * ((double)xr[c] - m);
    float inv = (float)(1.0 / sqrt(v / (double)cols + (double)eps));
    for (int64_t c = 0; c < cols; c++) hy[r * cols + c] = (xr[c] - m) * inv * hs[c] + (hb ? hb[c] : 0.0f);
    if (hm) hm[r] = m;
    if (hi) hi[r] = inv;
  }
  return KEEL_OK;
}

static keel_status emu_reduce(keel_device *d, keel_dev_reduce op, int64_t rows, int64_t cols,
                              const float *x, float *y) {
  (void)d;
  if (cols < 1) return keel_err(KEEL_ERR_UNSUPPORTED, "emu: a reduction over an empty axis");
  const float *hx = keel_emu_host(x);
  float *hy = keel_emu_host(y);
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = hx + r * cols;
    if (op == KEEL_DEV_RMAX) {
      float m = xr[0];
      for (int64_t c = 1; c < cols; c++) m = m != m || xr[c] != xr[c] ? m + xr[c] : fmaxf(m, xr[c]);
      hy[r] = m;
    } else {
      double s = 0;
      for (int64_t c = 0; c < cols; c++) s += xr[c];
      hy[r] = (float)(op == KEEL_DEV_RMEAN ? s / (double)cols : s);
    }
  }
  return KEEL_OK;
}

static keel_status emu_reduce_mid(keel_device *d, keel_dev_reduce op, int64_t outer, int64_t n,
                                  int64_t inner, const float *x, float *y) {
  (void)d;
  if (n < 1) return keel_err(KEEL_ERR_UNSUPPORTED, "emu: a reduction over an empty axis");
  const float *hx = keel_emu_host(x);
  float *hy = keel_emu_host(y);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *xr = hx + o * n * inner + i;
      if (op == KEEL_DEV_RMAX) {
        float m = xr[0];
        for (int64_t j = 1; j < n; j++)
          m = m != m || xr[j * inner] != xr[j * inner] ? m + xr[j * inner] : fmaxf(m, xr[j * inner]);
        hy[o * inner + i] = m;
      } else {
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += xr[j * inner];
        hy[o * inner + i] = (float)(op == KEEL_DEV_RMEAN ? s / (double)n : s);
      }
    }
  return KEEL_OK;
}

const keel_dev_norm keel_emu_norm = {emu_layernorm, emu_reduce, emu_reduce_mid};
