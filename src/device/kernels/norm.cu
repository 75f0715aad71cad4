/* norm.cu: the `norm` group (device/dev_norm.h): LayerNormalization and
 * the reductions over the last axis. One block of 256 threads per row (a
 * grid-stride loop over rows); sums by warp shuffles, then across the
 * block's warps in shared memory, as ew.cu's softmax. Sums in float (the
 * reference, emu_norm.c, sums in double: the tests allow for it). */
#include "prelude.h"

extern "C" __global__ void keel_norm_layernorm(i64 rows, i64 cols, const float *x, const float *s,
                                               const float *b, float eps, float *y, float *mean,
                                               float *inv_std) {
  __shared__ float sh[33];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float acc = 0.0f;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) acc += xr[c];
    float m = f_div(block_reduce(acc, RED_SUM, sh), (float)cols);
    float v = 0.0f;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
      float dv = xr[c] - m;
      v += dv * dv;
    }
    v = block_reduce(v, RED_SUM, sh);
    float inv = f_div(1.0f, f_sqrt(f_div(v, (float)cols) + eps));
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x)
      yr[c] = (xr[c] - m) * inv * s[c] + (b ? b[c] : 0.0f);
    if (threadIdx.x == 0) {
      if (mean) mean[row] = m;
      if (inv_std) inv_std[row] = inv;
    }
  }
}

/* op: 0 sum, 1 mean, 2 max (dev_norm.h's keel_dev_reduce) */
extern "C" __global__ void keel_norm_reduce(int op, i64 rows, i64 cols, const float *x, float *y) {
  __shared__ float sh[33];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *xr = x + row * cols;
    int is_max = op == 2;
    float acc = is_max ? xr[0] : 0.0f;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x)
      acc = is_max ? (acc != acc || xr[c] != xr[c] ? acc + xr[c] : f_max(acc, xr[c])) : acc + xr[c];
    acc = block_reduce(acc, is_max ? RED_MAX_NAN : RED_SUM, sh);
    if (threadIdx.x == 0) y[row] = op == 1 ? f_div(acc, (float)cols) : acc;
  }
}

/* X (outer, n, inner) reduced over n, one thread per output (o, i): a
 * warp reads adjacent floats of each row j; the sum in float in j order
 * (the reference sums in double: the tests allow for it). */
extern "C" __global__ void keel_norm_reduce_mid(int op, i64 outer, i64 n, i64 inner, const float *x,
                                                float *y) {
  i64 total = outer * inner;
  for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
    i64 i = t % inner, o = t / inner;
    const float *xr = x + o * n * inner + i;
    int is_max = op == 2;
    float acc = is_max ? xr[0] : 0.0f;
    for (i64 j = is_max ? 1 : 0; j < n; j++) {
      float v = xr[j * inner];
      acc = is_max ? (acc != acc || v != v ? acc + v : f_max(acc, v)) : acc + v;
    }
    y[t] = op == 1 ? f_div(acc, (float)n) : acc;
  }
}
