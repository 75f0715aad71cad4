/* attn.cu: the `attn` group's kernels (src/device/dev_attn.h).
 * Compiled to PTX by clang at build time (cmake/ptx.cmake). */
#include "prelude.h"

/* Row r = h * Sq + i of s (Skv floats), masked and softmaxed in place:
 * kind 0 none, 1 add (float mask), 2 where (cond ? fill : s), 3 where_not
 * (cond ? s : fill), the mask's element (h, i, j) at h*sh + i*ss + j*sk;
 * causal != 0: keys j > i (i = row % Sq) are -inf as well.
 * A row whose every x is -inf becomes NaN (emu_attn.c is the reference;
 * f_max skips a NaN as the CPU's max does). */
extern "C" __global__ void keel_attn_masked_softmax(i64 rows, i64 Sq, i64 Skv, int kind,
                                                    const void *mask, i64 sh, i64 ss, i64 sk,
                                                    float fill, int causal, float *s) {
  __shared__ float red[33];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    float *x = s + row * Skv;
    i64 off = (row / Sq) * sh + (row % Sq) * ss;
    const float *ma = (const float *)mask + off;
    const unsigned char *mc = (const unsigned char *)mask + off;
    i64 last = causal ? row % Sq : Skv; /* the last key kept */
    float m = -__builtin_inff();
    for (i64 j = threadIdx.x; j < Skv; j += blockDim.x) {
      float v = x[j];
      if (kind == 1) v += ma[j * sk];
      else if (kind == 2) v = mc[j * sk] ? fill : v;
      else if (kind == 3) v = mc[j * sk] ? v : fill;
      if (j > last) v = -__builtin_inff();
      x[j] = v;
      m = f_max(m, v);
    }
    m = block_reduce(m, RED_MAX, red);
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
    sum = block_reduce(sum, RED_SUM, red);
    float inv = f_div(1.0f, sum);
    for (i64 j = threadIdx.x; j < Skv; j += blockDim.x) x[j] *= inv;
  }
}
