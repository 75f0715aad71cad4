/* conv_util.h: what the matmul, conv and pool families share: the sliding-
 * window geometry (kernel, strides, dilations, pads, auto_pad, output sizes),
 * the GEMM layer, and the requantization step of the QLinear ops.
 *
 * A keel_win describes one N-d window op over a (N, C, spatial...) tensor.
 * keel_win_read() fills strides, dilations and pads from the node's
 * attributes and validates them; keel_win_forward() resolves auto_pad and
 * computes the output sizes of a forward window (Conv, the pools).
 * ConvTranspose computes its own output sizes (conv.c). Both are defined in
 * conv.c.
 *
 * The GEMM helpers are defined in matmul.c: cblas for float and double, and
 * a plain wrapping loop for int32 (the quantized ops). All matrices are
 * row-major; callers check sizes with keel_blas_fits() first because BLAS
 * indexes with `int`. MatMul, MatMulInteger's int32 product, Conv and
 * DynamicQuantizeLinear's step are also callable here, for the fused
 * com.microsoft ops (contrib.c, contrib_quant.c).
 */
#ifndef KEEL_CONV_UTIL_H
#define KEEL_CONV_UTIL_H

#include <math.h>

#include "ops/kernel.h"

/* ================================================== window geometry */

enum { KEEL_PAD_NOTSET = 0, KEEL_PAD_SAME_UPPER, KEEL_PAD_SAME_LOWER, KEEL_PAD_VALID };

/* Attribute values (strides, dilations, pads, kernel sizes) above this are
 * rejected, so that products of two of them cannot overflow int64. */
#define KEEL_WIN_ATTR_MAX INT32_MAX

typedef struct keel_win {
  int nd;                       /* spatial dims (tensor rank - 2), >= 1     */
  int auto_pad;                 /* KEEL_PAD_*                               */
  int64_t in[KEEL_MAX_RANK];    /* input spatial sizes                      */
  int64_t k[KEEL_MAX_RANK];     /* kernel taps per dim, >= 1                */
  int64_t s[KEEL_MAX_RANK];     /* strides, >= 1                            */
  int64_t d[KEEL_MAX_RANK];     /* dilations, >= 1                          */
  int64_t pb[KEEL_MAX_RANK];    /* pads before; ConvTranspose may make them
                                   negative (output_shape larger than full) */
  int64_t pe[KEEL_MAX_RANK];    /* pads after                               */
  int64_t out[KEEL_MAX_RANK];   /* output spatial sizes                     */
  int64_t in_size, out_size, k_size; /* products of in, out, k              */
} keel_win;

/* Reads "strides", "dilations", "pads" and "auto_pad" (each optional) for
 * w->nd spatial dims. KEEL_ERR_INVALID_MODEL on a wrong count, a value out
 * of range (strides and dilations >= 1, pads >= 0) or an unknown auto_pad. */
KEEL_INTERNAL keel_status keel_win_read(keel_kctx *k, keel_win *w);

/* Forward window (Conv, pools): w->in, k, s, d and the explicit pads set.
 * Resolves SAME_* / VALID into pads, computes w->out (floor, or ceil when
 * ceil_mode, dropping a last window that would start inside the end pad),
 * and the sizes. KEEL_ERR_SHAPE when an output size would be < 1. */
KEEL_INTERNAL keel_status keel_win_forward(keel_win *w, bool ceil_mode);

/* A pool's window (pool.c): kernel_shape (required, one value per
 * spatial dim of X's rank - 2), the window attributes, no window of
 * padding only, and the output sizes (ceil_mode). X's spatial dims start
 * at index sp: 2 for NCHW, 1 for NHWC (pool_nhwc.c). */
KEEL_INTERNAL keel_status keel_pool_setup(keel_kctx *k, const keel_tensor *x, int sp, keel_win *w);

/* Sets in_size, out_size and k_size; KEEL_ERR_SHAPE on overflow. */
KEEL_INTERNAL keel_status keel_win_sizes(keel_win *w);

/* Transposed window (ConvTranspose): w->in, k, s, d and the explicit pads
 * set; reads output_padding and output_shape, resolves auto_pad and sets
 * w->out and the sizes (conv.c). */
KEEL_INTERNAL keel_status keel_win_transposed(keel_kctx *k, keel_win *w);

/* conv.c's column routines in float (dbl false) or double: im2col writes
 * col (ch * k_size, len) from x (ch, in...) for the grid positions
 * [p0, p0 + len) of w->out; col2im adds col (ch * k_size, len), the grid
 * positions [q0, q0 + len) of w->in, into y (ch, out...). */
KEEL_INTERNAL void keel_conv_im2col(const keel_win *w, bool dbl, const void *x, int64_t ch,
                                    int64_t p0, int64_t len, void *col);
KEEL_INTERNAL void keel_conv_col2im(const keel_win *w, bool dbl, const void *col, int64_t ch,
                                    int64_t q0, int64_t len, void *y);

/* The span of a dilated kernel along dim i. */
static inline int64_t keel_win_ext(const keel_win *w, int i) {
  return (w->k[i] - 1) * w->d[i] + 1;
}

/* ============================================================ Conv */

/* Conv's reference kernel (conv.c: im2col + GEMM, every case the op
 * allows) and its faster implementations (conv_fast.c, conv_dense.c),
 * which fall back
 * to the reference for inputs they do not take. */
KEEL_INTERNAL keel_status keel_op_conv_ref(keel_kctx *k);
/* conv_fast.c: depthwise convs; conv_dense.c: group-1 convs as blocked
 * products. Listed in keel_conv_impls (ops/nn/conv/select.c). */
extern const keel_impl keel_conv_dw;
extern const keel_impl keel_conv_dense;

/* ============================================================ GEMM */

/* KEEL_ERR_UNSUPPORTED when `largest` (the biggest dimension or leading
 * dimension of a product) does not fit BLAS's int indexing. */
KEEL_INTERNAL keel_status keel_blas_fits(int64_t largest);
/* Turns OpenBLAS's own threads off (once per process): keel's pool is the
 * only source of parallelism. */
KEEL_INTERNAL void keel_blas_init(void);

/* C (M x N) = alpha * op(A) * op(B) + beta * C, op = transpose when ta/tb.
 * lda/ldb/ldc are row strides of the stored matrices. beta == 0 never reads
 * C. M, N or K may be 0. With a pool, a large product is split into row
 * (or column) panels run on the pool's threads, OpenBLAS single-threaded
 * in each. */
struct keel_pool;
KEEL_INTERNAL void keel_gemm_f32(struct keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                 float alpha, const float *A, int64_t lda, const float *B,
                                 int64_t ldb, float beta, float *C, int64_t ldc);
KEEL_INTERNAL void keel_gemm_f64(struct keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                 double alpha, const double *A, int64_t lda, const double *B,
                                 int64_t ldb, double beta, double *C, int64_t ldc);

/* C (M x N) = A (M x K) * B (K x N), or C += when acc, in int32 arithmetic
 * that wraps on overflow (ONNX: "accumulation may overflow if and only if
 * in 32 bits"). */
KEEL_INTERNAL void keel_gemm_i32(int64_t M, int64_t N, int64_t K, const int32_t *A, int64_t lda,
                                 const int32_t *B, int64_t ldb, bool acc, int32_t *C,
                                 int64_t ldc);

/* ================================================ MatMul as a call */

/* Output 0 = MatMul(a, b) with numpy broadcasting (a and b of one type;
 * they need not be the node's inputs). *y: the output. */
KEEL_INTERNAL keel_status keel_matmul(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                                      keel_tensor **y);

/* MatMulInteger's product in scratch: acc = (a - az) x (b - bz) in int32
 * (az, bz: NULL, one value, a's per-row or b's per-column zero points of
 * the operand's type), with MatMul's broadcasting. */
typedef struct keel_mm_int {
  int rank;
  int64_t shape[KEEL_MAX_RANK];      /* output shape                       */
  int64_t N, numel;                  /* columns; elements of acc           */
  int32_t *acc;                      /* NULL when numel == 0               */
} keel_mm_int;
KEEL_INTERNAL keel_status keel_matmul_int32(keel_kctx *k, const keel_tensor *a,
                                            const keel_tensor *b, const keel_tensor *az,
                                            const keel_tensor *bz, keel_mm_int *r);

/* Output 0 = Conv(input 0, input 1, input 2) with Conv's attributes
 * (float types); *y: the output. */
KEEL_INTERNAL keel_status keel_conv_forward(keel_kctx *k, keel_tensor **y);

/* =================================================== requantization */

/* The 8-bit types the quantized ops take. */
static inline bool keel_is_q8(int dt) { return dt == KEEL_UINT8 || dt == KEEL_INT8; }

/* The QLinear ops' output step: round(acc * scale) + zp, saturated to the
 * output type's range [lo, hi]. Rounds half to even (rintf under the
 * default rounding mode) like onnxruntime's MlasRequantizeOutput, and
 * clamps before converting so that no out-of-range float reaches a cast. */
static inline int32_t keel_requant(int32_t acc, float scale, int32_t zp, int32_t lo,
                                   int32_t hi) {
  float v = rintf((float)acc * scale) + (float)zp;
  if (!(v >= (float)lo)) return lo; /* also NaN */
  if (v > (float)hi) return hi;
  return (int32_t)v;
}

/* DynamicQuantizeLinear's step (quant.c): uint8 scale and zero point from
 * x's range widened to include 0, and q[i] = saturate(rint(x[i] / scale)
 * + zp). All-zero x gives scale 0 and q = zp. */
KEEL_INTERNAL void keel_dynq_u8(const float *x, int64_t n, uint8_t *q, float *scale,
                                uint8_t *zp);

#endif /* KEEL_CONV_UTIL_H */
