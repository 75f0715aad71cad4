/* attn.cu: the `attn` group's kernels (src/device/dev_attn.h).
 * Compiled to PTX by clang at build time (cmake/ptx.cmake). */
#include "prelude.h"

/* Max and sum over a block of 256 threads: warp shuffles, then the 8
 * warps' values in shared memory (as ew.cu's softmax). */
static __device__ float block_reduce(float v, int is_max, float *sh) {
  for (int m = 16; m > 0; m >>= 1) {
    float o = shfl_xor(v, m);
    v = is_max ? f_max(v, o) : v + o;
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) sh[warp] = v;
  sync_threads();
  if (threadIdx.x == 0) {
    float r = sh[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) r = is_max ? f_max(r, sh[w]) : r + sh[w];
    sh[32] = r;
  }
  sync_threads();
  float r = sh[32];
  sync_threads();
  return r;
}

/* Row r = h * Sq + i of s (Skv floats), masked and softmaxed in place:
 * kind 0 none, 1 add (float mask), 2 where (cond ? fill : s), 3 where_not
 * (cond ? s : fill), the mask's element (h, i, j) at h*sh + i*ss + j*sk.
 * A row whose every x is -inf becomes NaN (emu_attn.c is the reference;
 * f_max skips a NaN as the CPU's max does). */
extern "C" __global__ void keel_attn_masked_softmax(i64 rows, i64 Sq, i64 Skv, int kind,
                                                    const void *mask, i64 sh, i64 ss, i64 sk,
                                                    float fill, float *s) {
  __shared__ float red[33];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    float *x = s + row * Skv;
    i64 off = (row / Sq) * sh + (row % Sq) * ss;
    const float *ma = (const float *)mask + off;
    const unsigned char *mc = (const unsigned char *)mask + off;
    float m = -__builtin_inff();
    for (i64 j = threadIdx.x; j < Skv; j += blockDim.x) {
      float v = x[j];
      if (kind == 1) v += ma[j * sk];
      else if (kind == 2) v = mc[j * sk] ? fill : v;
      else if (kind == 3) v = mc[j * sk] ? v : fill;
      x[j] = v;
      m = f_max(m, v);
    }
    m = block_reduce(m, 1, red);
    if (m == -__builtin_inff()) {
      for (i64 j = threadIdx.x; j < Skv; j += blockDim.x) x[j] = __builtin_nanf("");
      continue;
    }
    float sum = 0.0f;
    for (i64 j = threadIdx.x; j < Skv; j += blockDim.x) {
      float e = f_exp(x[j] - m);
      x[j] = e;
      sum += e;
    }
    sum = block_reduce(sum, 0, red);
    float inv = f_div(1.0f, sum);
    for (i64 j = threadIdx.x; j < Skv; j += blockDim.x) x[j] *= inv;
  }
}
