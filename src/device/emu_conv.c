/* emu_conv.c: the `conv` group (dev_conv.h) on the emulated device: plain
 * C loops over the host addresses behind the device pointers, the naive
 * reference of kernels/conv.cu.
 *
 * Conv is the direct definition, one output at a time, its sum over
 * (input channel, ky, kx) in double (the reference is the accurate side;
 * the CPU's im2col + GEMM and the GPU's float sums are tested against it
 * with a tolerance), then + bias, rounded to float, then the activation
 * in float with the C library's math, as ops/common/activation.c writes
 * each one. The pools follow ops/nn/pool/pool.c tap for tap (average:
 * float sums in row-major tap order), so they match the CPU exactly; the
 * global mean sums in double, as the CPU's global pools do. */
#include <math.h>

#include "base/status.h"
#include "device/dev_conv.h"
#include "device/emu.h"

static float act(const keel_dev_conv2 *g, float x) {
  float t;
  switch (g->act) {
    case KEEL_DEV_ACT_RELU: return x < 0 ? 0 : x;
    case KEEL_DEV_ACT_LEAKY: return x < 0 ? g->act_a * x : x;
    case KEEL_DEV_ACT_CLIP: t = x < g->act_a ? g->act_a : x; return t > g->act_b ? g->act_b : t;
    case KEEL_DEV_ACT_HSIGMOID: t = g->act_a * x + g->act_b; return t < 0 ? 0 : t > 1 ? 1 : t;
    case KEEL_DEV_ACT_HSWISH: t = x / 6 + 0.5f; return x * (t < 0 ? 0 : t > 1 ? 1 : t);
    case KEEL_DEV_ACT_HSIGMOID_MUL: t = g->act_a * x + g->act_b; return x * (t < 0 ? 0 : t > 1 ? 1 : t);
    case KEEL_DEV_ACT_SIGMOID: return keel_emu_sigmoid(x);
    case KEEL_DEV_ACT_SILU: return x * keel_emu_sigmoid(x);
    case KEEL_DEV_ACT_TANH: return tanhf(x);
    default: return x;
  }
}

static keel_status emu_conv2d(keel_device *d, const keel_dev_conv2 *g, const float *x,
                              const float *w, const float *b, float *y) {
  (void)d;
  const keel_dev_win2 *v = &g->w;
  if (g->group < 1 || g->c % g->group || g->m % g->group)
    return keel_err(KEEL_ERR_INTERNAL, "emu conv: %lld input and %lld output channels in %lld groups",
                    (long long)g->c, (long long)g->m, (long long)g->group);
  const float *hx = keel_emu_host(x), *hw = keel_emu_host(w), *hb = b ? keel_emu_host(b) : NULL;
  float *hy = keel_emu_host(y);
  int64_t cg = g->c / g->group, mg = g->m / g->group;
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t m = 0; m < g->m; m++) {
      int64_t c0 = m / mg * cg;
      const float *wm = hw + m * cg * v->kh * v->kw;
      float *ym = hy + (n * g->m + m) * v->oh * v->ow;
      for (int64_t oy = 0; oy < v->oh; oy++)
        for (int64_t ox = 0; ox < v->ow; ox++) {
          double acc = 0;
          for (int64_t c = 0; c < cg; c++) {
            const float *xc = hx + (n * g->c + c0 + c) * v->ih * v->iw;
            for (int64_t ky = 0; ky < v->kh; ky++) {
              int64_t iy = oy * v->sh - v->ph + ky * v->dh;
              if (iy < 0 || iy >= v->ih) continue;
              for (int64_t kx = 0; kx < v->kw; kx++) {
                int64_t ix = ox * v->sw - v->pw + kx * v->dw;
                if (ix < 0 || ix >= v->iw) continue;
                acc += (double)xc[iy * v->iw + ix] * wm[(c * v->kh + ky) * v->kw + kx];
              }
            }
          }
          ym[oy * v->ow + ox] = act(g, (float)(acc + (hb ? hb[m] : 0.0)));
        }
    }
  return KEEL_OK;
}

static int64_t cdiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* The valid taps [lo, hi) of output o along one dim, and those inside the
 * padded extent (pool.c, win_taps). */
static void span(int64_t o, int64_t in, int64_t k, int64_t s, int64_t dl, int64_t pb, int64_t pe,
                 int64_t *lo, int64_t *hi, int64_t *inside) {
  int64_t s0 = o * s - pb;
  *lo = cdiv(-s0, dl) > 0 ? cdiv(-s0, dl) : 0;
  *hi = cdiv(in - s0, dl) < k ? cdiv(in - s0, dl) : k;
  int64_t plo = cdiv(-pb - s0, dl) > 0 ? cdiv(-pb - s0, dl) : 0;
  int64_t phi = cdiv(in + pe - s0, dl) < k ? cdiv(in + pe - s0, dl) : k;
  *inside = phi > plo ? phi - plo : 0;
}

static keel_status emu_pool2d(keel_device *d, keel_dev_pool_kind kind, bool include_pad,
                              int64_t planes, const keel_dev_win2 *w, const float *x, float *y) {
  (void)d;
  const float *hx = keel_emu_host(x);
  float *hy = keel_emu_host(y);
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oy = 0; oy < w->oh; oy++)
      for (int64_t ox = 0; ox < w->ow; ox++) {
        int64_t ylo, yhi, yin, xlo, xhi, xin;
        span(oy, w->ih, w->kh, w->sh, w->dh, w->ph, w->peh, &ylo, &yhi, &yin);
        span(ox, w->iw, w->kw, w->sw, w->dw, w->pw, w->pew, &xlo, &xhi, &xin);
        const float *xp = hx + p * w->ih * w->iw;
        int64_t y0 = oy * w->sh - w->ph, x0 = ox * w->sw - w->pw, taps = 0;
        float best = -INFINITY, acc = 0;
        for (int64_t ky = ylo; ky < yhi; ky++)
          for (int64_t kx = xlo; kx < xhi; kx++) {
            float v = xp[(y0 + ky * w->dh) * w->iw + x0 + kx * w->dw];
            if (kind == KEEL_DEV_POOL_MAX) {
              if (!taps || v > best || best != best) best = v; /* NaN loses */
            } else {
              acc += v;
            }
            taps++;
          }
        int64_t div = include_pad ? yin * xin : taps;
        hy[(p * w->oh + oy) * w->ow + ox] =
            kind == KEEL_DEV_POOL_MAX ? best : div ? acc / (float)div : 0.0f;
      }
  return KEEL_OK;
}

static keel_status emu_global_pool(keel_device *d, keel_dev_pool_kind kind, int64_t planes,
                                   int64_t n, const float *x, float *y) {
  (void)d;
  if (n < 1) return keel_err(KEEL_ERR_UNSUPPORTED, "emu: a global pool over empty planes");
  const float *hx = keel_emu_host(x);
  float *hy = keel_emu_host(y);
  for (int64_t p = 0; p < planes; p++) {
    const float *xp = hx + p * n;
    double acc = kind == KEEL_DEV_POOL_MAX ? xp[0] : 0;
    for (int64_t i = 0; i < n; i++) {
      if (kind == KEEL_DEV_POOL_MAX) acc = xp[i] > acc || acc != acc ? xp[i] : acc;
      else acc += xp[i];
    }
    hy[p] = (float)(kind == KEEL_DEV_POOL_MAX ? acc : acc / (double)n);
  }
  return KEEL_OK;
}

/* The transposed conv by its definition, one output at a time: the
 * inputs whose window reaches it, summed in double over (input channel,
 * ky, kx), + bias, rounded to float. */
static keel_status emu_conv_transpose2d(keel_device *d, const keel_dev_conv2 *g, const float *x,
                                        const float *w, const float *b, float *y) {
  (void)d;
  const keel_dev_win2 *v = &g->w;
  if (g->group < 1 || g->c % g->group || g->m % g->group || g->act != KEEL_DEV_ACT_NONE)
    return keel_err(KEEL_ERR_INTERNAL, "emu conv_transpose: %lld input and %lld output channels in "
                    "%lld groups, activation %d", (long long)g->c, (long long)g->m,
                    (long long)g->group, (int)g->act);
  const float *hx = keel_emu_host(x), *hw = keel_emu_host(w), *hb = b ? keel_emu_host(b) : NULL;
  float *hy = keel_emu_host(y);
  int64_t cg = g->c / g->group, mg = g->m / g->group;
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t m = 0; m < g->m; m++) {
      int64_t c0 = m / mg * cg, mi = m % mg;
      float *ym = hy + (n * g->m + m) * v->oh * v->ow;
      for (int64_t oy = 0; oy < v->oh; oy++)
        for (int64_t ox = 0; ox < v->ow; ox++) {
          double acc = 0;
          for (int64_t c = c0; c < c0 + cg; c++) {
            const float *xc = hx + (n * g->c + c) * v->ih * v->iw;
            const float *wc = hw + (c * mg + mi) * v->kh * v->kw;
            for (int64_t ky = 0; ky < v->kh; ky++) {
              int64_t ty = oy + v->ph - ky * v->dh;
              if (ty < 0 || ty % v->sh || ty / v->sh >= v->ih) continue;
              for (int64_t kx = 0; kx < v->kw; kx++) {
                int64_t tx = ox + v->pw - kx * v->dw;
                if (tx < 0 || tx % v->sw || tx / v->sw >= v->iw) continue;
                acc += (double)xc[ty / v->sh * v->iw + tx / v->sw] * wc[ky * v->kw + kx];
              }
            }
          }
          ym[oy * v->ow + ox] = (float)(acc + (hb ? hb[m] : 0.0));
        }
    }
  return KEEL_OK;
}

/* image.c's RS_PASS in float, tap for tap: the same results. */
static keel_status emu_resample(keel_device *d, int64_t outer, int64_t nin, int64_t nout,
                                int64_t inner, int64_t taps, const int64_t *idx, const float *w,
                                const uint8_t *oob, float extrap, const float *x, float *y) {
  (void)d;
  const int64_t *hi = keel_emu_host(idx);
  const float *hw = w ? keel_emu_host(w) : NULL, *hx = keel_emu_host(x);
  const uint8_t *ho = oob ? keel_emu_host(oob) : NULL;
  float *hy = keel_emu_host(y);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < nout; j++)
      for (int64_t i = 0; i < inner; i++) {
        const float *s = hx + o * nin * inner + i;
        float acc = 0;
        if (ho && ho[j]) acc = extrap;
        else if (!hw) acc = s[hi[j] * inner];
        else
          for (int64_t q = 0; q < taps; q++)
            if (hw[j * taps + q] != 0) acc += hw[j * taps + q] * s[hi[j * taps + q] * inner];
        hy[(o * nout + j) * inner + i] = acc;
      }
  return KEEL_OK;
}

const keel_dev_conv keel_emu_conv = {emu_conv2d, emu_pool2d, emu_global_pool,
                                     emu_conv_transpose2d, emu_resample};
