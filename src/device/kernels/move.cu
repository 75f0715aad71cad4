/* move.cu: the `move` group (device/dev_move.h): strided copy, gather,
 * where, cast. Grid-stride loops of one output element per step, each
 * finding its source from its index, as emu_move.c's reference does. */
#include "prelude.h"

#define MAX_RANK 8

/* A strided copy's geometry, passed by value (dev_move.h: copy). */
struct move_geom {
  i64 dims[MAX_RANK];
  i64 xs[MAX_RANK], ys[MAX_RANK];
  int rank;
};

#define COPY_LOOP(T)                                                                       \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;                          \
       i += (i64)gridDim.x * blockDim.x) {                                                 \
    i64 r = i, ix = 0, iy = 0;                                                             \
    for (int k = g.rank - 1; k >= 0; k--) {                                                \
      i64 c = r % g.dims[k];                                                               \
      r /= g.dims[k];                                                                      \
      ix += c * g.xs[k];                                                                   \
      iy += c * g.ys[k];                                                                   \
    }                                                                                      \
    ((T *)y)[iy] = ((const T *)x)[ix];                                                     \
  }

extern "C" __global__ void keel_move_copy(int es, i64 n, struct move_geom g, const void *x,
                                          void *y) {
  switch (es) {
    case 1: COPY_LOOP(unsigned char) break;
    case 2: COPY_LOOP(unsigned short) break;
    case 4: COPY_LOOP(unsigned int) break;
    default: COPY_LOOP(unsigned long long) break;
  }
}

#define GATHER_LOOP(T)                                                                     \
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;                          \
       i += (i64)gridDim.x * blockDim.x) {                                                 \
    i64 e = i % inner, t = i / inner, j = t % n_idx, o = t / n_idx;                        \
    i64 p = idx64 ? ((const i64 *)idx)[j] : (i64)((const int *)idx)[j];                    \
    if (p < 0) p += axis_n;                                                                \
    ((T *)y)[i] = p < 0 || p >= axis_n ? (T)0 : ((const T *)x)[(o * axis_n + p) * inner + e]; \
  }

extern "C" __global__ void keel_move_gather(int es, i64 n, i64 axis_n, i64 inner, const void *x,
                                            const void *idx, int idx64, i64 n_idx, void *y) {
  switch (es) {
    case 1: GATHER_LOOP(unsigned char) break;
    case 2: GATHER_LOOP(unsigned short) break;
    case 4: GATHER_LOOP(unsigned int) break;
    default: GATHER_LOOP(unsigned long long) break;
  }
}

/* Where's geometry: y's dims and each operand's element strides. */
struct where_geom {
  i64 dims[MAX_RANK];
  i64 cs[MAX_RANK], as[MAX_RANK], bs[MAX_RANK];
  int rank;
};

extern "C" __global__ void keel_move_where(i64 n, struct where_geom g, const unsigned char *c,
                                           const float *a, const float *b, float *y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    i64 r = i, ic = 0, ia = 0, ib = 0;
    for (int k = g.rank - 1; k >= 0; k--) {
      i64 q = r % g.dims[k];
      r /= g.dims[k];
      ic += q * g.cs[k];
      ia += q * g.as[k];
      ib += q * g.bs[k];
    }
    y[i] = c[ic] ? a[ia] : b[ib];
  }
}

/* keel_dtype codes (ONNX's): 1 float32, 6 int32, 7 int64, 9 bool */
extern "C" __global__ void keel_move_cast(int from, int to, i64 n, const void *x, void *y) {
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
    if (from == 1) {
      float v = ((const float *)x)[i];
      if (to == 7) ((i64 *)y)[i] = (i64)v;
      else if (to == 6) ((int *)y)[i] = (int)v;
      else if (to == 9) ((unsigned char *)y)[i] = v != 0.0f;
      else ((float *)y)[i] = v;
    } else {
      float v = from == 7 ? (float)((const i64 *)x)[i]
                : from == 6 ? (float)((const int *)x)[i]
                            : (float)(((const unsigned char *)x)[i] != 0);
      ((float *)y)[i] = v;
    }
  }
}
