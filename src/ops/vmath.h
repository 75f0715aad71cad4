/* vmath.h: vectorized float32 math for the hot elementwise kernels, each
 * written once as scalar C (the reference, and the path on CPUs without
 * AVX2) and once with AVX2+FMA intrinsics, chosen at run time. Results of
 * the two paths are identical: the vector code performs the same float
 * operations in the same order (FMA contraction is not used in either).
 */
#ifndef KEEL_VMATH_H
#define KEEL_VMATH_H

#include "../base/common.h"

/* y[i] = erf(x[i]) by a rational approximation (within 3e-7 absolute plus
 * 2 ulp of erf(); NaN stays NaN, +-inf gives +-1). x and y may alias. */
KEEL_INTERNAL void keel_vm_erf(const float *x, float *y, int64_t n);

/* The scalar form, for tests. */
KEEL_INTERNAL float keel_vm_erf1(float x);

#endif /* KEEL_VMATH_H */
