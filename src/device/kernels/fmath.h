/* fmath.h: the kernels' float math beyond the hardware's approximations:
 * the logistic, erf, expm1, log1p, sin, cos, written over the primitives
 * the includer defines first (F_FN, the functions' qualifiers; f_exp, f_log, f_abs,
 * f_div, f_fma, f_floor). prelude.h includes it for the kernels; a host
 * test includes it over libm's primitives to check the formulas
 * (tests/test_device_attn.c), since the emulated device computes with
 * libm and not with these.
 *
 * Each keeps float precision (a few ulp) where a kernel needs it: the
 * node tests' tolerance and the GPU tests' 1e-5 relative. */
#ifndef KEEL_KERNEL_FMATH_H
#define KEEL_KERNEL_FMATH_H

/* The logistic as ops/common/activation.c writes it: the exponential of
 * -|x| only, which never overflows (ew.cu's Sigmoid, conv.cu's
 * activations, rnn.cu's gates). */
F_FN float f_sigmoid(float x) {
  float t = f_exp(-f_abs(x));
  return x >= 0 ? f_div(1.0f, 1.0f + t) : f_div(t, 1.0f + t);
}

/* e^x - 1: Taylor's series near 0, where exp(x) - 1 cancels. */
F_FN float f_expm1(float x) {
  if (f_abs(x) < 0.35f) {
    float p = 1.0f / 362880.0f;
    p = f_fma(p, x, 1.0f / 40320.0f);
    p = f_fma(p, x, 1.0f / 5040.0f);
    p = f_fma(p, x, 1.0f / 720.0f);
    p = f_fma(p, x, 1.0f / 120.0f);
    p = f_fma(p, x, 1.0f / 24.0f);
    p = f_fma(p, x, 1.0f / 6.0f);
    p = f_fma(p, x, 0.5f);
    return f_fma(p * x, x, x);
  }
  return f_exp(x) - 1.0f;
}

/* log(1 + u) = 2 atanh(s), s = u / (2 + u): an odd series in s, |s| <=
 * 1/3 for u in (-1/2, 1]; beyond, 1 + u loses nothing that matters. */
F_FN float f_log1p(float u) {
  if (!(u > -0.5f && u <= 1.0f)) return f_log(1.0f + u);
  float s = f_div(u, 2.0f + u), z = s * s;
  float p = 1.0f / 17.0f;
  p = f_fma(p, z, 1.0f / 15.0f);
  p = f_fma(p, z, 1.0f / 13.0f);
  p = f_fma(p, z, 1.0f / 11.0f);
  p = f_fma(p, z, 1.0f / 9.0f);
  p = f_fma(p, z, 1.0f / 7.0f);
  p = f_fma(p, z, 1.0f / 5.0f);
  p = f_fma(p, z, 1.0f / 3.0f);
  return 2.0f * f_fma(p * z, s, s);
}

/* erf: Taylor's series below 1/2 (relative precision near 0), then
 * 1 - erfc with erfc from Numerical Recipes' Chebyshev fit (fractional
 * error under 1.2e-7). */
F_FN float f_erf(float x) {
  float ax = f_abs(x);
  if (ax < 0.5f) {
    float z = x * x, p = -1.0f / 75600.0f;
    p = f_fma(p, z, 1.0f / 9360.0f);
    p = f_fma(p, z, -1.0f / 1320.0f);
    p = f_fma(p, z, 1.0f / 216.0f);
    p = f_fma(p, z, -1.0f / 42.0f);
    p = f_fma(p, z, 1.0f / 10.0f);
    p = f_fma(p, z, -1.0f / 3.0f);
    p = f_fma(p, z, 1.0f);
    return 1.1283791670955126f * x * p; /* 2 / sqrt(pi) */
  }
  if (ax != ax) return x;
  if (ax > 4.0f) return x < 0 ? -1.0f : 1.0f; /* erfc(4) < float's step at 1 */
  float t = f_div(1.0f, f_fma(0.5f, ax, 1.0f));
  float p = 0.17087277f;
  p = f_fma(p, t, -0.82215223f);
  p = f_fma(p, t, 1.48851587f);
  p = f_fma(p, t, -1.13520398f);
  p = f_fma(p, t, 0.27886807f);
  p = f_fma(p, t, -0.18628806f);
  p = f_fma(p, t, 0.09678418f);
  p = f_fma(p, t, 0.37409196f);
  p = f_fma(p, t, 1.00002368f);
  p = f_fma(p, t, -1.26551223f);
  float erfc = t * f_exp(p - ax * ax);
  return x < 0 ? erfc - 1.0f : 1.0f - erfc;
}

/* sin and cos: x reduced by pi/2 (Cody and Waite's three-part constant:
 * exact products for |x| up to about 1e5; beyond, precision falls as
 * |x| grows), then Cephes' minimax polynomials on [-pi/4, pi/4]. */
F_FN float f_sincos_q(float x, float *r) {
  float k = f_floor(f_fma(x, 0.63661977236758134f, 0.5f));
  float t = f_fma(-k, 1.5703125f, x);
  t = f_fma(-k, 4.837512969970703125e-4f, t);
  *r = f_fma(-k, 7.54978995489188216e-8f, t);
  return k;
}
F_FN float f_sin_poly(float r) {
  float z = r * r, p = -1.9515295891e-4f;
  p = f_fma(p, z, 8.3321608736e-3f);
  p = f_fma(p, z, -1.6666654611e-1f);
  return f_fma(p * z, r, r);
}
F_FN float f_cos_poly(float r) {
  float z = r * r, p = 2.443315711809948e-5f;
  p = f_fma(p, z, -1.388731625493765e-3f);
  p = f_fma(p, z, 4.166664568298827e-2f);
  return f_fma(p * z, z, f_fma(-0.5f, z, 1.0f));
}
F_FN float f_sin(float x) {
  float r, k = f_sincos_q(x, &r);
  if (k != k || f_abs(x) == __builtin_inff()) return x - x; /* NaN */
  int q = (int)(k - 4.0f * f_floor(k * 0.25f)); /* k mod 4, also for k < 0 */
  float v = q & 1 ? f_cos_poly(r) : f_sin_poly(r);
  return q & 2 ? -v : v;
}
F_FN float f_cos(float x) {
  float r, k = f_sincos_q(x, &r);
  if (k != k || f_abs(x) == __builtin_inff()) return x - x;
  int q = (int)(k - 4.0f * f_floor(k * 0.25f));
  float v = q & 1 ? f_sin_poly(r) : f_cos_poly(r);
  return (q == 1 || q == 2) ? -v : v;
}

#endif
