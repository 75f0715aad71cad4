/* conv.cu: the `conv` group (device/dev_conv.h): 2-D convolution with its
 * bias and fused activation, the windowed pools and the global pools,
 * float32 NCHW. Correctness first, mirroring the reference (emu_conv.c):
 *   - keel_conv_direct: one thread per output (a grid-stride loop), the
 *     direct sum over (input channel, ky, kx) in float, in the
 *     reference's order (which sums in double: the tests allow for it);
 *   - keel_conv_pool: one thread per output, the taps in row-major order
 *     as pool.c takes them (the same results as the CPU's, bit for bit);
 *   - keel_conv_global: one block of 256 threads per plane (a grid-stride
 *     loop over planes), partial sums in double in shared memory; the max
 *     ignores NaN unless every element is one, which no order changes.
 * No shared-memory tiling of the convolution yet: a tiled implicit GEMM
 * (or cuDNN) is the fast path still to come. */
#include "prelude.h"

/* dev_conv.h's keel_dev_win2 and keel_dev_conv2, passed by value: the
 * same members in the same order (int64 first, so no padding differs). */
struct win2 {
  i64 ih, iw, oh, ow;
  i64 kh, kw, sh, sw, dh, dw;
  i64 ph, pw, peh, pew;
};
struct conv2 {
  struct win2 w;
  i64 n, c, m, group;
  int act;
  float act_a, act_b;
};

static __device__ __forceinline__ float clamp01(float t) { return t < 0 ? 0 : t > 1 ? 1 : t; }

/* activation.h's formulas; codes are keel_dev_act_kind */
static __device__ __forceinline__ float act(int kind, float a, float b, float x) {
  switch (kind) {
    case 1: return x < 0 ? 0 : x;
    case 2: return x < 0 ? a * x : x;
    case 3: { float t = x < a ? a : x; return t > b ? b : t; }
    case 4: return clamp01(a * x + b);
    case 5: return x * clamp01(f_div(x, 6.0f) + 0.5f);
    case 6: return f_sigmoid(x);
    case 7: return f_tanh(x);
    case 8: return x * f_sigmoid(x);
    case 9: return x * clamp01(a * x + b);
    default: return x;
  }
}

extern "C" __global__ void keel_conv_direct(struct conv2 g, const float *x, const float *w,
                                            const float *b, float *y) {
  const struct win2 v = g.w;
  i64 cg = g.c / g.group, mg = g.m / g.group, plane = v.oh * v.ow;
  i64 total = g.n * g.m * plane;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    i64 ox = i % v.ow, oy = i / v.ow % v.oh, m = i / plane % g.m, n = i / plane / g.m;
    i64 c0 = m / mg * cg, y0 = oy * v.sh - v.ph, x0 = ox * v.sw - v.pw;
    const float *wm = w + m * cg * v.kh * v.kw;
    float acc = 0.0f;
    for (i64 c = 0; c < cg; c++) {
      const float *xc = x + (n * g.c + c0 + c) * v.ih * v.iw;
      const float *wc = wm + c * v.kh * v.kw;
      for (i64 ky = 0; ky < v.kh; ky++) {
        i64 iy = y0 + ky * v.dh;
        if (iy < 0 || iy >= v.ih) continue;
        for (i64 kx = 0; kx < v.kw; kx++) {
          i64 ix = x0 + kx * v.dw;
          if (ix < 0 || ix >= v.iw) continue;
          acc += xc[iy * v.iw + ix] * wc[ky * v.kw + kx];
        }
      }
    }
    y[i] = act(g.act, g.act_a, g.act_b, acc + (b ? b[m] : 0.0f));
  }
}

static __device__ __forceinline__ i64 cdiv(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static __device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }
static __device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }

/* kind 0: max, 1: average */
extern "C" __global__ void keel_conv_pool(int kind, int include_pad, i64 planes, struct win2 w,
                                          const float *x, float *y) {
  i64 total = planes * w.oh * w.ow;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    i64 ox = i % w.ow, oy = i / w.ow % w.oh, p = i / (w.ow * w.oh);
    i64 y0 = oy * w.sh - w.ph, x0 = ox * w.sw - w.pw;
    i64 ylo = imax(0, cdiv(-y0, w.dh)), yhi = imin(w.kh, cdiv(w.ih - y0, w.dh));
    i64 xlo = imax(0, cdiv(-x0, w.dw)), xhi = imin(w.kw, cdiv(w.iw - x0, w.dw));
    i64 yin = imin(w.kh, cdiv(w.ih + w.peh - y0, w.dh)) - imax(0, cdiv(-w.ph - y0, w.dh));
    i64 xin = imin(w.kw, cdiv(w.iw + w.pew - x0, w.dw)) - imax(0, cdiv(-w.pw - x0, w.dw));
    const float *xp = x + p * w.ih * w.iw;
    float best = -__builtin_inff(), acc = 0.0f;
    i64 taps = 0;
    for (i64 ky = ylo; ky < yhi; ky++)
      for (i64 kx = xlo; kx < xhi; kx++) {
        float v = xp[(y0 + ky * w.dh) * w.iw + x0 + kx * w.dw];
        if (kind == 0) {
          if (!taps || v > best || best != best) best = v;
        } else {
          acc += v;
        }
        taps++;
      }
    i64 div = include_pad ? imax(0, yin) * imax(0, xin) : taps;
    y[i] = kind == 0 ? best : div ? f_div(acc, (float)div) : 0.0f;
  }
}

/* the max that ignores NaN (NaN only when both are) */
static __device__ __forceinline__ double gmax(double a, double b) {
  return a != a ? b : b != b ? a : (b > a ? b : a);
}

extern "C" __global__ void keel_conv_global(int kind, i64 planes, i64 n, const float *x, float *y) {
  __shared__ double sh[256];
  for (i64 p = blockIdx.x; p < planes; p += gridDim.x) {
    const float *xp = x + p * n;
    double acc = kind == 0 ? (double)xp[0] : 0.0;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) acc = kind == 0 ? gmax(acc, xp[i]) : acc + xp[i];
    sh[threadIdx.x] = acc;
    sync_threads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s)
        sh[threadIdx.x] = kind == 0 ? gmax(sh[threadIdx.x], sh[threadIdx.x + s]) : sh[threadIdx.x] + sh[threadIdx.x + s];
      sync_threads();
    }
    if (threadIdx.x == 0) y[p] = (float)(kind == 0 ? sh[0] : sh[0] / (double)n);
    sync_threads();
  }
}

/* The transposed conv, one thread per output (emu_conv.c's order: input
 * channels, then taps in row-major order), float sums, + bias. */
extern "C" __global__ void keel_conv_transpose(struct conv2 g, const float *x, const float *w,
                                               const float *b, float *y) {
  const struct win2 v = g.w;
  i64 cg = g.c / g.group, mg = g.m / g.group, plane = v.oh * v.ow;
  i64 total = g.n * g.m * plane;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
    i64 ox = i % v.ow, oy = i / v.ow % v.oh, m = i / plane % g.m, n = i / plane / g.m;
    i64 c0 = m / mg * cg, mi = m % mg;
    float acc = 0.0f;
    for (i64 c = c0; c < c0 + cg; c++) {
      const float *xc = x + (n * g.c + c) * v.ih * v.iw;
      const float *wc = w + (c * mg + mi) * v.kh * v.kw;
      for (i64 ky = 0; ky < v.kh; ky++) {
        i64 ty = oy + v.ph - ky * v.dh;
        if (ty < 0 || ty % v.sh || ty / v.sh >= v.ih) continue;
        for (i64 kx = 0; kx < v.kw; kx++) {
          i64 tx = ox + v.pw - kx * v.dw;
          if (tx < 0 || tx % v.sw || tx / v.sw >= v.iw) continue;
          acc += xc[ty / v.sh * v.iw + tx / v.sw] * wc[ky * v.kw + kx];
        }
      }
    }
    y[i] = acc + (b ? b[m] : 0.0f);
  }
}

/* One axis of Resize's separable resampling (dev_conv.h), one thread per
 * output: the taps in order from 0, weight-0 taps skipped; nearest (no w)
 * a plain copy; an out-of-range output (oob) the extrapolation value. */
extern "C" __global__ void keel_conv_resample(i64 outer, i64 nin, i64 nout, i64 inner, i64 taps,
                                              const i64 *idx, const float *w,
                                              const unsigned char *oob, float extrap,
                                              const float *x, float *y) {
  i64 total = outer * nout * inner;
  for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
    i64 i = t % inner, j = t / inner % nout, o = t / inner / nout;
    const float *s = x + o * nin * inner + i;
    float acc = 0.0f;
    if (oob && oob[j]) {
      acc = extrap;
    } else if (!w) {
      acc = s[idx[j] * inner];
    } else {
      for (i64 q = 0; q < taps; q++) {
        float wq = w[j * taps + q];
        if (wq != 0.0f) acc += wq * s[idx[j * taps + q] * inner];
      }
    }
    y[t] = acc;
  }
}
