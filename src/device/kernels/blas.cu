/* blas.cu: the blas group's own kernels (device/dev_blas.h): what cuBLAS
 * does not do for keel. Compiled to PTX by clang at build time
 * (cmake/ptx.cmake), launched by name from cuda_blas.c. */
#include "prelude.h"

/* C[b] = beta * C[b] over `batch` M x N matrices (rows ldc apart, batches
 * sc apart): a product with K = 0, whose sums are empty (cuBLAS's
 * leading-dimension rules do not admit K = 0). beta 0 writes zeros
 * without reading C, which may hold NaN. */
extern "C" __global__ void keel_blas_scale(i64 batch, i64 M, i64 N, i64 ldc, i64 sc, float beta,
                                           float *c) {
  i64 mn = M * N, n_all = batch * mn;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (i64)gridDim.x * blockDim.x) {
    i64 b = i / mn, r = i - b * mn, m = r / N, n = r - m * N;
    float *p = c + b * sc + m * ldc + n;
    *p = beta == 0.0f ? 0.0f : beta * *p;
  }
}

/* y[m*N + n] = src[m*s0 + n*s1]: Gemm's C broadcast onto [M, N]. */
extern "C" __global__ void keel_blas_fill2d(i64 M, i64 N, const float *src, i64 s0, i64 s1, float *y) {
  i64 n_all = M * N;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (i64)gridDim.x * blockDim.x) {
    i64 m = i / N, n = i - m * N;
    y[i] = src[m * s0 + n * s1];
  }
}
