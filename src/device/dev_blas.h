/* dev_blas.h: the `blas` kernel group (device.h): float32 matrix products
 * on a device, for MatMul, Gemm and FusedMatMul (ops/math/matmul/
 * matmul_gpu.c).
 *
 * One call is a strided batch of products over row-major matrices, as
 * keel stores tensors:
 *
 *     C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],   b < batch
 *
 * with A[b] at a + b * sa, B[b] at b + b * sb, C[b] at c + b * sc
 * (elements). A stride of 0 gives every product the same matrix: that is
 * how one operand broadcasts over the other's batch. A MatMul whose batch
 * dims broadcast in a pattern one stride per operand cannot express
 * ([2,1,M,K] x [1,3,K,N]) is a loop on the host over the outer batch dims,
 * one call per slice (matmul_gpu.c). Gemm's C goes into Y first (fill_2d,
 * its broadcast over [M, N]), then the product with beta.
 *
 * Backends: emu_blas.c (the naive reference: triple loops, accumulation in
 * double) and cuda_blas.c (cuBLAS, loaded with dlopen; no TF32: float32
 * products as the CPU computes them, up to the order of the sums). A
 * device whose backend has no BLAS (cuBLAS not found) has d->blas NULL
 * and the place pass keeps MatMul and Gemm on the CPU
 * (keel_model.gpu_no_blas).
 */
#ifndef KEEL_DEV_BLAS_H
#define KEEL_DEV_BLAS_H

#include "device/device.h"

/* One strided batch of products (see above). */
typedef struct keel_dev_gemm {
  bool ta, tb;                 /* op(A) = A^T, op(B) = B^T                 */
  int64_t M, N, K;             /* op(A) is M x K, op(B) K x N, C M x N     */
  int64_t lda, ldb, ldc;       /* row strides (elements) of A, B, C as
                                  stored: A is M x K (K x M when ta)      */
  int64_t batch;               /* products, >= 1                           */
  int64_t sa, sb, sc;          /* batch strides in elements; sa, sb may be
                                  0 (broadcast), sc not when batch > 1    */
  float alpha, beta;           /* beta 0: C is written, never read (it may
                                  hold NaN); K 0: C = beta * C            */
} keel_dev_gemm;

typedef struct keel_dev_blas {
  const char *name;            /* "cuBLAS 12.8", "emu"                     */
  /* the products of g: device pointers */
  keel_status (*sgemm)(keel_device *d, const keel_dev_gemm *g, const float *a, const float *b,
                       float *c);
  /* y[m*N + n] = src[m*s0 + n*s1] for m < M, n < N: a [M, N] operand
   * broadcast from a smaller one (strides 0 on broadcast axes) */
  keel_status (*fill_2d)(keel_device *d, int64_t M, int64_t N, const float *src, int64_t s0,
                         int64_t s1, float *y);
  /* frees d->blas_state (the library's handle) before the device closes;
   * NULL: nothing to free */
  void (*close)(keel_device *d);
  /* the library's workspace, from keel's allocator: `bytes` is what it
   * wants (0: none), set_workspace hands it the block a session allocated
   * on the device's heap (tagged, counted, freed by the session before
   * the device closes); NULL when the library takes no workspace */
  size_t workspace_bytes;
  keel_status (*set_workspace)(keel_device *d, void *p, size_t bytes);
} keel_dev_blas;

/* The emulated device's table (emu_blas.c). */
extern const keel_dev_blas keel_emu_blas;

/* cuBLAS for an opened CUDA device: sets d->blas and d->blas_state, or
 * leaves them NULL with the reason in d->desc when cuBLAS cannot be
 * loaded or set up (the device still opens; MatMul and Gemm stay on the
 * CPU). cuda_blas.c. */
KEEL_INTERNAL void keel_cuda_blas_open(keel_device *d);

#endif /* KEEL_DEV_BLAS_H */
