/* norm.cu: the `norm` group (device/dev_norm.h): LayerNormalization and
 * the reductions over the last axis. One block of 256 threads per row (a
 * grid-stride loop over rows); sums by warp shuffles, then across the
 * block's warps in shared memory, as ew.cu's softmax. Sums in float (the
 * reference, emu_norm.c, sums in double: the tests allow for it). */
#include "prelude.h"

/* kind 0: sum, 1: max (NaN wins) */
static __device__ float nblock_reduce(float v, int is_max, float *sh) {
  for (int m = 16; m > 0; m >>= 1) {
    float o = shfl_xor(v, m);
    v = is_max ? (v != v || o != o ? v + o : f_max(v, o)) : v + o;
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[warp] = v;
  sync_threads();
  if (threadIdx.x == 0) {
    float r = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
      r = is_max ? (r != r || sh[w] != sh[w] ? r + sh[w] : f_max(r, sh[w])) : r + sh[w];
    sh[32] = r;
  }
  sync_threads();
  float r = sh[32];
  sync_threads();
  return r;
}

extern "C" __global__ void keel_norm_layernorm(i64 rows, i64 cols, const float *x, const float *s,
                                               const float *b, float eps, float *y, float *mean,
                                               float *inv_std) {
  __shared__ float sh[33];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float acc = 0.0f;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) acc += xr[c];
    float m = f_div(nblock_reduce(acc, 0, sh), (float)cols);
    float v = 0.0f;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
      float dv = xr[c] - m;
      v += dv * dv;
    }
    v = nblock_reduce(v, 0, sh);
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
    acc = nblock_reduce(acc, is_max, sh);
    if (threadIdx.x == 0) y[row] = op == 1 ? f_div(acc, (float)cols) : acc;
  }
}
