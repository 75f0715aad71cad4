/* prelude.h: what CUDA's headers would give keel's kernels, for clang's
 * CUDA mode with -nocudainc -nocudalib (no CUDA SDK on the build machine):
 * the address-space attributes, the built-in index variables, and the few
 * intrinsics the kernels use, as clang's NVVM builtins. */
#ifndef KEEL_KERNEL_PRELUDE_H
#define KEEL_KERNEL_PRELUDE_H

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __attribute__((always_inline))
#include "__clang_cuda_builtin_vars.h"

typedef long long i64;

/* each .cu file uses some of the helpers below, not all */
#pragma clang diagnostic ignored "-Wunused-function"

static __device__ __forceinline__ void sync_threads(void) { __syncthreads(); }
static __device__ __forceinline__ float f_sqrt(float x) { return __nvvm_sqrt_rn_f(x); }
static __device__ __forceinline__ float f_div(float a, float b) { return __nvvm_div_rn_f(a, b); }
static __device__ __forceinline__ float f_max(float a, float b) { return __nvvm_fmax_f(a, b); }
static __device__ __forceinline__ float f_min(float a, float b) { return __nvvm_fmin_f(a, b); }
static __device__ __forceinline__ float f_abs(float x) { return __nvvm_fabs_f(x); }
static __device__ __forceinline__ float f_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
static __device__ __forceinline__ float f_floor(float x) { return __builtin_floorf(x); }
static __device__ __forceinline__ float f_ceil(float x) { return __builtin_ceilf(x); }
static __device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  return __nvvm_shfl_sync_bfly_f32(0xffffffffu, v, lane_mask, 31);
}

/* exp and log from the hardware's base-2 approximations (ex2.approx,
 * lg2.approx: about 2 ulp), with the argument split so that the result
 * keeps float precision over the whole range: e^x = 2^(x log2 e). */
static __device__ __forceinline__ float f_exp(float x) {
  if (x > 88.72283f) return __builtin_inff();
  if (x < -103.97208f) return 0.0f;
  return __nvvm_ex2_approx_f(x * 1.4426950408889634f);
}
static __device__ __forceinline__ float f_log(float x) {
  return __nvvm_lg2_approx_f(x) * 0.6931471805599453f;
}
static __device__ __forceinline__ float f_tanh(float x) {
  float ax = f_abs(x);
  if (ax < 0.0004f) return x; /* tanh x = x - x^3/3: below float's step */
  float e = f_exp(-2.0f * ax);
  float t = f_div(1.0f - e, 1.0f + e);
  return x < 0 ? -t : t;
}
static __device__ __forceinline__ float f_pow(float a, float b) {
  if (b == 0.0f) return 1.0f;
  if (b == 1.0f) return a;
  if (b == 2.0f) return a * a;
  if (b == 0.5f) return f_sqrt(a);
  float r = __nvvm_ex2_approx_f(b * __nvvm_lg2_approx_f(f_abs(a)));
  if (a < 0) {
    /* an integer exponent keeps the sign of a^b; another gives NaN */
    float bi = __builtin_truncf(b);
    if (bi != b) return __builtin_nanf("");
    if (__builtin_fmodf(bi, 2.0f) != 0.0f) r = -r;
  }
  return r;
}

/* erf, expm1, log1p, sin, cos over the helpers above */
#define F_FN static __device__ __forceinline__
#include "fmath.h"

/* A reduction over a block (a multiple of 32 threads, at most 1024): warp
 * shuffles, then the warps' values in shared memory sh (33 floats); every
 * thread gets the result. RED_MAX skips a NaN (f_max, as the CPU's max and
 * softmax do); RED_MAX_NAN lets a NaN win (ReduceMax). */
enum { RED_SUM = 0, RED_MAX = 1, RED_MAX_NAN = 2 };
static __device__ __forceinline__ float red_op(int op, float a, float b) {
  return op == RED_SUM ? a + b : op == RED_MAX ? f_max(a, b) : (a != a || b != b ? a + b : f_max(a, b));
}
static __device__ float block_reduce(float v, int op, float *sh) {
  for (int m = 16; m > 0; m >>= 1) v = red_op(op, v, shfl_xor(v, m));
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[warp] = v;
  sync_threads();
  if (threadIdx.x == 0) {
    float r = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) r = red_op(op, r, sh[w]);
    sh[32] = r;
  }
  sync_threads();
  float r = sh[32];
  sync_threads();
  return r;
}

#endif
