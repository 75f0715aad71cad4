/* ew.cu: element-wise float32 kernels (src/device/cuda.h's codes).
 * Compiled to PTX by clang at build time (cmake/ptx.cmake). */
#include "prelude.h"

#define MAX_RANK 8

/* Broadcast geometry, passed by value: y's dims and each operand's element
 * strides (0 on a broadcast axis). */
struct bcast {
  i64 dims[MAX_RANK];
  i64 sa[MAX_RANK], sb[MAX_RANK];
  int rank;
};

static __device__ __forceinline__ float binop(int op, float a, float b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return f_div(a, b);
    case 4: return a != a || b != b ? a + b : f_max(a, b); /* NaN wins, as std::max in ONNX Runtime */
    case 5: return a != a || b != b ? a + b : f_min(a, b);
    default: return f_pow(a, b);
  }
}

/* Same shapes (or a scalar operand): no index arithmetic. */
extern "C" __global__ void keel_ew_binary_flat(int op, i64 n, const float *a, int a_scalar,
                                               const float *b, int b_scalar, float *y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
    y[i] = binop(op, a[a_scalar ? 0 : i], b[b_scalar ? 0 : i]);
}

extern "C" __global__ void keel_ew_binary_bcast(int op, i64 n, struct bcast g, const float *a,
                                                const float *b, float *y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 r = i, ia = 0, ib = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
      i64 c = r % g.dims[d];
      r /= g.dims[d];
      ia += c * g.sa[d];
      ib += c * g.sb[d];
    }
    y[i] = binop(op, a[ia], b[ib]);
  }
}

/* device.h's keel_dev_unop codes, with parameters a and b; the formulas
 * are emu.c's (ops/math/unary.c's), NaN propagation included. */
static __device__ __forceinline__ float unop(int op, float a, float b, float x) {
  float t;
  switch (op) {
    case 0: return x > 0.0f ? x : (x != x ? x : 0.0f);
    case 1: return -x;
    case 2: return f_abs(x);
    case 3: return f_sqrt(x);
    case 4: return f_exp(x);
    case 5: return f_sigmoid(x);
    case 6: return f_tanh(x);
    case 7: return f_log(x);
    case 8: return f_erf(x);
    case 9: return 0.5f * x * (1.0f + f_erf(x * 0.70710678118654752440f));
    case 10: return 0.5f * x * (1.0f + f_tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
    case 11: return f_div(1.0f, x);
    case 12: return f_floor(x);
    case 13: return f_ceil(x);
    case 14: return (x > 0 ? x : 0) + f_log1p(f_exp(-f_abs(x)));
    case 15: return x < 0 ? a * x : x;
    case 16: return x < 0 ? a * f_expm1(x) : x;
    case 17: t = a * x + b; return t < 0 ? 0 : t > 1 ? 1 : t;
    case 18: t = f_div(x, 6.0f) + 0.5f; return x * (t < 0 ? 0 : t > 1 ? 1 : t);
    case 19: t = x < a ? a : x; return t > b ? b : t;
    case 20: return f_cos(x);
    case 21: return f_sin(x);
    case 22: return f_div(x, 1.0f + f_exp(-x));
    default: t = a * x + b; return x * (t < 0 ? 0 : t > 1 ? 1 : t); /* 23 */
  }
}

extern "C" __global__ void keel_ew_unary(int op, float a, float b, i64 n, const float *x, float *y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
    y[i] = unop(op, a, b, x[i]);
}

/* Softmax over rows of `cols`: one block of 256 threads per row; max and
 * sum by the prelude's block_reduce. */

extern "C" __global__ void keel_softmax_rows(i64 rows, i64 cols, const float *x, float *y) {
  __shared__ float sh[33];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float m = -__builtin_inff();
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) m = f_max(m, xr[c]);
    m = block_reduce(m, RED_MAX, sh);
    float s = 0.0f;
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
      float e = f_exp(xr[c] - m);
      yr[c] = e;
      s += e;
    }
    s = block_reduce(s, RED_SUM, sh);
    float inv = f_div(1.0f, s);
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) yr[c] *= inv;
  }
}
