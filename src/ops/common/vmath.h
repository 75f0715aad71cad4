/* vmath.h: vectorized float32 math for the hot elementwise kernels, each
 * written once as scalar C (the reference, and the path on CPUs without
 * AVX2) and once with AVX2+FMA intrinsics, chosen at run time. Results of
 * the two paths are identical: the vector code performs the same float
 * operations in the same order (FMA contraction is not used in either).
 */
#ifndef KEEL_VMATH_H
#define KEEL_VMATH_H

#include "base/common.h"

/* y[i] = erf(x[i]) by a rational approximation (within 3e-7 absolute plus
 * 2 ulp of erf(); NaN stays NaN, +-inf gives +-1). x and y may alias. */
KEEL_INTERNAL void keel_vm_erf(const float *x, float *y, int64_t n);

/* The scalar form, for tests. */
KEEL_INTERNAL float keel_vm_erf1(float x);

/* exp(x) for x <= 0 (x may be -inf, giving 0; NaN stays NaN), branch-free
 * so loops over it vectorize (an AVX2+FMA copy is picked at run time);
 * relative error below 4e-7 down to exp(-87), 0 below. x and y may alias. */
KEEL_INTERNAL void keel_exp_neg_f32(const float *x, float *y, int64_t n);

/* y[i] = 1 / (1 + exp(-x[i])) through keel_exp_neg_f32 of -|x| (no
 * overflow for large |x|; within 1e-6 relative of the libm form, 0 where
 * that form is a float denormal, below sigmoid(-87); NaN
 * stays NaN). x and y may alias. */
KEEL_INTERNAL void keel_vm_sigmoid(const float *x, float *y, int64_t n);

/* y[i] = y[i] / (1 + exp(-y[i])) in place, fast: the exp of keel_exp_neg_f32's
 * polynomial over the whole range (2^n by scaling) and a reciprocal
 * estimate refined by one Newton step instead of a division; within 3e-7
 * relative (plus 1e-30 absolute) of the libm form, NaN stays NaN. Not
 * bit-identical across instruction sets: for kernels that are not (the
 * oneDNN convolutions' fused SiLU), not for the Sigmoid/Mul ops. */
KEEL_INTERNAL void keel_vm_silu_fast(float *y, int64_t n);

/* y[i] = Gelu(y[i]) (the exact form, 0.5 y (1 + erf(y / sqrt 2))) in
 * place, fast: keel_vm_erf's rational form with fused multiply-adds and a
 * refined reciprocal estimate instead of the division; within 3e-7
 * relative plus 2e-7 |y| of the exact Gelu (erf's absolute error, which
 * 1 + erf keeps for negative y; tests/test_fastpaths.c), NaN stays NaN. AVX-512 only: false (y untouched) on other CPUs, which
 * take the exact form. Not bit-identical to the Gelu op: for fused
 * activations (FusedMatMul's), as keel_vm_silu_fast. */
KEEL_INTERNAL bool keel_vm_gelu_fast(float *y, int64_t n);
KEEL_INTERNAL bool keel_vm_gelu_fast_available(void);

/* y[i] = tanh(x[i]) by a rational approximation (within 3.5e-7 relative
 * of tanh(); NaN stays NaN, +-inf gives +-1). x and y may alias. The
 * vector paths may differ from the scalar form by FMA contraction. */
KEEL_INTERNAL void keel_vm_tanh(const float *x, float *y, int64_t n);
KEEL_INTERNAL float keel_vm_tanh1(float x);

/* One row of LayerNormalization over its D elements: the mean and the
 * variance in double (16 partial sums, then their total), then
 * y[j] = (x[j] - mean) * (1 / sqrt(var + eps)) * s[j] + b[j] in float (b
 * may be NULL). y may alias x. Like keel_vm_silu_fast, and unlike the
 * functions above, not bit-identical across instruction sets (the
 * AVX-512 copy sums in another order and uses FMAs). */
KEEL_INTERNAL void keel_vm_layernorm_row(const float *x, float *y, int64_t D, const float *s,
                                         const float *b, double eps);

/* Softmax of one row of n scores in place: exp(s - max) (keel_exp_neg_f32's
 * polynomial) over their sum. False, and s untouched, when every score is
 * -inf (or n is 0); a NaN score makes the whole row NaN. Not bit-identical
 * across instruction sets (as keel_vm_layernorm_row). */
KEEL_INTERNAL bool keel_vm_softmax_row(float *s, int64_t n);

#endif /* KEEL_VMATH_H */
