/* emu_rnn.c: the `rnn` group (dev_rnn.h) on the emulated device: plain C
 * loops over the host addresses behind the device pointers, the naive
 * reference of kernels/rnn.cu (libm's tanhf, keel_emu_sigmoid). */
#include <math.h>

#include "base/status.h"
#include "device/dev_rnn.h"
#include "device/emu.h"

/* gate g's pre-activation at (b, j) of G gates */
static float pre(const float *xw, const float *hr, const float *wb, int64_t G, int64_t H,
                 int64_t b, int64_t g, int64_t j) {
  int64_t col = g * H + j;
  float a = xw[b * G * H + col];
  if (hr) a += hr[b * G * H + col];
  if (wb) a += wb[col] + wb[G * H + col];
  return a;
}

static const float *host(const void *p) { return p ? keel_emu_host(p) : NULL; }

static keel_status emu_lstm_cell(keel_device *d, int64_t B, int64_t H, const float *xw,
                                 const float *hr, const float *wb, const float *c_prev, float *c,
                                 float *h) {
  (void)d;
  const float *x = host(xw), *r = host(hr), *w = host(wb), *cp = host(c_prev);
  float *hc = keel_emu_host(c), *hh = keel_emu_host(h);
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < H; j++) {
      float i = keel_emu_sigmoid(pre(x, r, w, 4, H, b, 0, j));
      float o = keel_emu_sigmoid(pre(x, r, w, 4, H, b, 1, j));
      float f = keel_emu_sigmoid(pre(x, r, w, 4, H, b, 2, j));
      float g = tanhf(pre(x, r, w, 4, H, b, 3, j));
      float cn = f * (cp ? cp[b * H + j] : 0.0f) + i * g;
      hc[b * H + j] = cn;
      hh[b * H + j] = o * tanhf(cn);
    }
  return KEEL_OK;
}

static keel_status emu_gru_gates(keel_device *d, int64_t B, int64_t H, const float *xw,
                                 const float *hr, const float *wb, const float *h_prev, int lbr,
                                 float *z, float *rh) {
  (void)d;
  const float *x = host(xw), *r = host(hr), *w = host(wb), *hp = host(h_prev);
  float *hz = keel_emu_host(z), *hrh = keel_emu_host(rh);
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < H; j++) {
      float zz = keel_emu_sigmoid(pre(x, r, w, 3, H, b, 0, j));
      float rr = keel_emu_sigmoid(pre(x, r, w, 3, H, b, 1, j));
      hz[b * H + j] = zz;
      hrh[b * H + j] = lbr ? rr : rr * (hp ? hp[b * H + j] : 0.0f);
    }
  return KEEL_OK;
}

static keel_status emu_gru_out(keel_device *d, int64_t B, int64_t H, const float *xw,
                               const float *hr, const float *hrh, const float *wb,
                               const float *z, const float *rh, const float *h_prev, int lbr,
                               float *h) {
  (void)d;
  const float *x = host(xw), *r = host(hr), *r2 = host(hrh), *w = host(wb), *hz = host(z);
  const float *hq = host(rh), *hp = host(h_prev);
  float *hh = keel_emu_host(h);
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < H; j++) {
      int64_t col = 2 * H + j;
      float a = x[b * 3 * H + col] + (w ? w[col] : 0.0f), rbh = w ? w[3 * H + col] : 0.0f, t;
      if (lbr) t = hq[b * H + j] * ((r ? r[b * 3 * H + col] : 0.0f) + rbh);
      else t = (r2 ? r2[b * H + j] : 0.0f) + rbh;
      float ht = tanhf(a + t), zz = hz[b * H + j];
      hh[b * H + j] = (1 - zz) * ht + zz * (hp ? hp[b * H + j] : 0.0f);
    }
  return KEEL_OK;
}

const keel_dev_rnn keel_emu_rnn = {emu_lstm_cell, emu_gru_gates, emu_gru_out};
