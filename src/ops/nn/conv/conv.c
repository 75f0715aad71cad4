/* conv.c: the convolution family (Conv, ConvTranspose, ConvInteger,
 * QLinearConv) and the window geometry it shares with the pools
 * (conv_util.h).
 *
 * Conv lowers each (image, group) to im2col + GEMM: the input patch under
 * every output position becomes one column of `col` (Cg*kernel rows), and
 * Y_g (Mg, P) += W_g (Mg, Cg*kernel) x col. Columns are built in chunks of
 * output positions so that col stays under COL_BUDGET bytes whatever the
 * image size (one column at least: a single column is never bigger than W).
 * A 1x1, stride-1, unpadded conv needs no col at all: X_g already is the
 * column matrix, so it is one plain GEMM.
 *
 * ConvTranspose is Conv's adjoint: col = W_g^T x X_g, then col2im adds each
 * column into the output positions its taps reach.
 *
 * Both directions are type-erased behind conv_ty (element size, im2col,
 * col2im, GEMM, bias fill), instantiated for float, double and int32. The
 * quantized ops shift X and W by their zero points into int32 first (so
 * padding, a zero in the shifted domain, stands for the zero point) and
 * run the int32 instance; QLinearConv then requantizes per output channel.
 * float16/bfloat16 run in float on staged copies.
 */
#include <limits.h>

#include "base/pool.h"
#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"
#include "ops/nn/conv/conv_gpu.h"
#include "ops/nn/conv/select.h"

/* Upper bound on one im2col chunk, in bytes. */
#define COL_BUDGET ((int64_t)4 << 20)
/* Groups with at most this many output channels skip im2col (see
 * DEF_DIRECT). */
#ifndef DIRECT_MAX_M
#define DIRECT_MAX_M 2
#endif

/* ================================================== window geometry */

/* An INTS attribute of `count` values in [lo, KEEL_WIN_ATTR_MAX]; `def`
 * everywhere when absent (an empty list counts as absent). */
static keel_status read_ints(keel_kctx *k, const char *name, int count, int64_t def, int64_t lo,
                             int64_t *out) {
  int n;
  const int64_t *v = keel_k_attr_ints(k, name, &n);
  if (n == 0) v = NULL;
  if (v && n != count)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s has %d values, expected %d", name, n, count);
  for (int i = 0; i < count; i++) {
    int64_t x = v ? v[i] : def;
    if (x < lo || x > KEEL_WIN_ATTR_MAX)
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s[%d] = %lld is out of range [%lld, %d]", name,
                      i, (long long)x, (long long)lo, KEEL_WIN_ATTR_MAX);
    out[i] = x;
  }
  return KEEL_OK;
}

keel_status keel_win_read(keel_kctx *k, keel_win *w) {
  int nd = w->nd;
  int64_t pads[2 * KEEL_MAX_RANK];
  KEEL_TRY(read_ints(k, "strides", nd, 1, 1, w->s));
  KEEL_TRY(read_ints(k, "dilations", nd, 1, 1, w->d));
  KEEL_TRY(read_ints(k, "pads", 2 * nd, 0, 0, pads));
  for (int i = 0; i < nd; i++) w->pb[i] = pads[i], w->pe[i] = pads[nd + i];
  const char *ap = keel_k_attr_s(k, "auto_pad", "NOTSET");
  if (!strcmp(ap, "NOTSET") || !ap[0]) w->auto_pad = KEEL_PAD_NOTSET;
  else if (!strcmp(ap, "SAME_UPPER")) w->auto_pad = KEEL_PAD_SAME_UPPER;
  else if (!strcmp(ap, "SAME_LOWER")) w->auto_pad = KEEL_PAD_SAME_LOWER;
  else if (!strcmp(ap, "VALID")) w->auto_pad = KEEL_PAD_VALID;
  else
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", ap);
  return KEEL_OK;
}

keel_status keel_win_sizes(keel_win *w) {
  int64_t a = 1, b = 1, c = 1;
  for (int i = 0; i < w->nd; i++)
    if (keel_mul64_ovf(a, w->in[i], &a) || keel_mul64_ovf(b, w->out[i], &b) ||
        keel_mul64_ovf(c, w->k[i], &c))
      return keel_err(KEEL_ERR_SHAPE, "window sizes overflow");
  w->in_size = a, w->out_size = b, w->k_size = c;
  return KEEL_OK;
}

/* One dim of a forward window with explicit (or VALID) pads. */
static keel_status win_dim_explicit(keel_win *w, int i, bool ceil_mode) {
  int64_t ext = keel_win_ext(w, i), s = w->s[i], span;
  if (w->auto_pad == KEEL_PAD_VALID) w->pb[i] = w->pe[i] = 0;
  if (__builtin_add_overflow(w->in[i], w->pb[i] + w->pe[i], &span) || span - ext < 0)
    return keel_err(KEEL_ERR_SHAPE,
                    "spatial dim %d: input %lld plus pads %lld+%lld is smaller than the "
                    "kernel span %lld",
                    i, (long long)w->in[i], (long long)w->pb[i], (long long)w->pe[i],
                    (long long)ext);
  span -= ext;
  int64_t out = span / s + 1;
  if (ceil_mode && w->auto_pad != KEEL_PAD_VALID && span % s) { /* VALID ignores ceil_mode */
    out++;
    /* a last window that would start inside the end padding is dropped
     * (PyTorch and onnxruntime do the same) */
    if ((out - 1) * s >= w->in[i] + w->pb[i]) out--;
  }
  w->out[i] = out;
  return KEEL_OK;
}

keel_status keel_win_forward(keel_win *w, bool ceil_mode) {
  for (int i = 0; i < w->nd; i++) {
    if (w->auto_pad == KEEL_PAD_SAME_UPPER || w->auto_pad == KEEL_PAD_SAME_LOWER) {
      int64_t s = w->s[i], in = w->in[i];
      int64_t out = in / s + (in % s != 0);
      int64_t total = out > 0 ? (out - 1) * s + keel_win_ext(w, i) - in : 0;
      if (total < 0) total = 0;
      /* an odd total puts the extra pad at the end for SAME_UPPER */
      w->pb[i] = w->auto_pad == KEEL_PAD_SAME_UPPER ? total / 2 : total - total / 2;
      w->pe[i] = total - w->pb[i];
      w->out[i] = out;
    } else {
      KEEL_TRY(win_dim_explicit(w, i, ceil_mode));
    }
    if (w->out[i] < 1)
      return keel_err(KEEL_ERR_SHAPE, "spatial dim %d: output size %lld (input %lld)", i,
                      (long long)w->out[i], (long long)w->in[i]);
  }
  return keel_win_sizes(w);
}

/* ==================================================== column walker */

/* im2col and col2im both walk a "grid" (the positions that index col's
 * columns: Conv's output, ConvTranspose's input) against an "image" (the
 * tensor read or written: Conv's input, ConvTranspose's output). For kernel
 * tap kc, grid coordinate g meets image coordinate
 *     g * s - pb + kc * d
 * which may fall into the padding. The walker yields runs along the last
 * grid dim: inside a run the image coordinate steps by s, and the positions
 * that land inside the image form one sub-range [lo, hi). */
typedef struct win_run {
  int64_t at, n;      /* first col column of the run (from the chunk start), length */
  int64_t lo, hi;     /* the run's positions [lo, hi) land inside the image        */
  int64_t src;        /* image offset of position lo; -1 when none lands            */
} win_run;

typedef struct win_iter {
  const keel_win *w;
  const int64_t *grid, *img;   /* sizes per spatial dim                  */
  int64_t kc[KEEL_MAX_RANK];   /* the row's kernel tap                   */
  int64_t g[KEEL_MAX_RANK];    /* grid coordinate of the next position   */
  int64_t at, left;
  int64_t base;                /* the row's channel offset in the image  */
  int64_t o, lo, hi;           /* last dim: image coordinate g * s + o;
                                  grid positions [lo, hi) land inside    */
} win_iter;

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/* Starts a walk of col row r (channel r / k_size, tap r % k_size) over grid
 * positions [p0, p0 + len). */
static void win_begin(win_iter *it, const keel_win *w, const int64_t *grid, const int64_t *img,
                      int64_t img_size, int64_t r, int64_t p0, int64_t len) {
  it->w = w, it->grid = grid, it->img = img;
  it->base = (r / w->k_size) * img_size;
  int64_t t = r % w->k_size;
  for (int d = w->nd - 1; d >= 0; d--) {
    it->kc[d] = t % w->k[d], t /= w->k[d];
    it->g[d] = p0 % grid[d], p0 /= grid[d];
  }
  int L = w->nd - 1;
  it->o = it->kc[L] * w->d[L] - w->pb[L]; /* the divisions happen once per row */
  it->lo = ceil_div(-it->o, w->s[L]);
  it->hi = ceil_div(img[L] - it->o, w->s[L]);
  it->at = 0, it->left = len;
}

static bool win_next(win_iter *it, win_run *u) {
  if (it->left <= 0) return false;
  const keel_win *w = it->w;
  int L = w->nd - 1;
  int64_t g0 = it->g[L], n = KEEL_MIN(it->grid[L] - g0, it->left), off = 0;
  bool hit = true;
  for (int d = 0; d < L && hit; d++) { /* outer dims: all in range, or the run misses */
    int64_t c = it->g[d] * w->s[d] - w->pb[d] + it->kc[d] * w->d[d];
    hit = c >= 0 && c < it->img[d];
    off = off * it->img[d] + c;
  }
  int64_t lo = KEEL_MIN(KEEL_MAX(g0, it->lo), g0 + n);
  int64_t hi = KEEL_MAX(KEEL_MIN(g0 + n, it->hi), lo);
  u->at = it->at, u->n = n, u->lo = lo - g0, u->hi = hi - g0;
  u->src = hit && hi > lo ? it->base + off * it->img[L] + lo * w->s[L] + it->o : -1;
  it->at += n, it->left -= n;
  if ((it->g[L] += n) == it->grid[L]) { /* odometer over the outer dims */
    it->g[L] = 0;
    for (int d = L - 1; d >= 0 && ++it->g[d] == it->grid[d]; d--) it->g[d] = 0;
  }
  return true;
}

/* ============================================== typed col routines */

/* col (ch*k_size, len) = the patches of x (ch, in...) under output
 * positions [p0, p0 + len); padding reads as 0. */
#define DEF_IM2COL(name, T)                                                              \
  static void name(const keel_win *w, const void *px, int64_t ch, int64_t p0, int64_t len, \
                   void *pcol) {                                                         \
    const T *x = px;                                                                     \
    int64_t s = w->s[w->nd - 1];                                                         \
    for (int64_t r = 0; r < ch * w->k_size; r++) {                                       \
      T *row = (T *)pcol + r * len;                                                      \
      win_iter it;                                                                       \
      win_run u;                                                                         \
      win_begin(&it, w, w->out, w->in, w->in_size, r, p0, len);                          \
      while (win_next(&it, &u)) {                                                        \
        T *o = row + u.at;                                                               \
        if (u.src < 0) {                                                                 \
          memset(o, 0, sizeof(T) * (size_t)u.n);                                         \
          continue;                                                                      \
        }                                                                                \
        const T *xi = x + u.src - u.lo * s;                                              \
        memset(o, 0, sizeof(T) * (size_t)u.lo);                                          \
        if (s == 1) memcpy(o + u.lo, xi + u.lo, sizeof(T) * (size_t)(u.hi - u.lo));      \
        else                                                                             \
          for (int64_t j = u.lo; j < u.hi; j++) o[j] = xi[j * s];                        \
        memset(o + u.hi, 0, sizeof(T) * (size_t)(u.n - u.hi));                           \
      }                                                                                  \
    }                                                                                    \
  }

/* y (ch, out...) += col (ch*k_size, len), the columns of input positions
 * [q0, q0 + len) of a transposed conv; taps that land in the padding are
 * dropped. */
#define DEF_COL2IM(name, T)                                                                \
  static void name(const keel_win *w, const void *pcol, int64_t ch, int64_t q0, int64_t len, \
                   void *py) {                                                             \
    T *y = py;                                                                             \
    int64_t s = w->s[w->nd - 1];                                                           \
    for (int64_t r = 0; r < ch * w->k_size; r++) {                                         \
      const T *row = (const T *)pcol + r * len;                                            \
      win_iter it;                                                                         \
      win_run u;                                                                           \
      win_begin(&it, w, w->in, w->out, w->out_size, r, q0, len);                           \
      while (win_next(&it, &u)) {                                                          \
        if (u.src < 0) continue;                                                           \
        T *yo = y + u.src - u.lo * s;                                                      \
        const T *c = row + u.at;                                                           \
        for (int64_t j = u.lo; j < u.hi; j++) yo[j * s] += c[j];                          \
      }                                                                                    \
    }                                                                                      \
  }

/* y (m, p): row i = b[i], or zeros without a bias. */
/* y (m rows of p values, rows ld apart) = b[row], or 0 without b. */
#define DEF_BIAS(name, T)                                                            \
  static void name(void *py, const void *pb, int64_t m, int64_t p, int64_t ld) {     \
    T *y = py;                                                                       \
    const T *b = pb;                                                                 \
    for (int64_t i = 0; i < m; i++) {                                                \
      T v = b ? b[i] : (T)0, *row = y + i * ld;                                      \
      for (int64_t j = 0; j < p; j++) row[j] = v;                                    \
    }                                                                                \
  }

/* y (mg, P) += w (mg, cg*k) * x (cg, in...) with no col buffer: for each
 * (channel, tap) row, every output channel adds w times the input run the
 * walker yields. For small mg (depthwise convs) im2col would cost as much
 * as the product itself. U: the type the sums are made in (wraps for
 * int32). */
#define DEF_DIRECT(name, T, U)                                                          \
  static void name(const keel_win *w, const void *px, const void *pw, int64_t cg,      \
                   int64_t mg, void *py) {                                              \
    const T *x = px, *wt = pw;                                                          \
    int64_t R = cg * w->k_size, P = w->out_size, s = w->s[w->nd - 1];                   \
    for (int64_t r = 0; r < R; r++) {                                                   \
      win_iter it;                                                                      \
      win_run u;                                                                        \
      win_begin(&it, w, w->out, w->in, w->in_size, r, 0, P);                            \
      while (win_next(&it, &u)) {                                                       \
        if (u.src < 0) continue;                                                        \
        const T *xi = x + u.src - u.lo * s;                                             \
        for (int64_t m = 0; m < mg; m++) {                                              \
          U wv = (U)wt[m * R + r], *yo = (U *)py + m * P + u.at;                        \
          if (s == 1)                                                                   \
            for (int64_t j = u.lo; j < u.hi; j++) yo[j] += wv * (U)xi[j];               \
          else                                                                          \
            for (int64_t j = u.lo; j < u.hi; j++) yo[j] += wv * (U)xi[j * s];           \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  }

DEF_IM2COL(im2col_f32, float)
DEF_IM2COL(im2col_f64, double)
DEF_IM2COL(im2col_i32, int32_t)
DEF_COL2IM(col2im_f32, float)
DEF_COL2IM(col2im_f64, double)
DEF_BIAS(bias_f32, float)
DEF_BIAS(bias_f64, double)
DEF_BIAS(bias_i32, int32_t)
DEF_DIRECT(direct_f32, float, float)
DEF_DIRECT(direct_f64, double, double)
DEF_DIRECT(direct_i32, int32_t, uint32_t)

/* The float and double column routines, for the derivative kernels
 * (conv_backward.c). */
void keel_conv_im2col(const keel_win *w, bool dbl, const void *x, int64_t ch, int64_t p0,
                      int64_t len, void *col) {
  (dbl ? im2col_f64 : im2col_f32)(w, x, ch, p0, len, col);
}
void keel_conv_col2im(const keel_win *w, bool dbl, const void *col, int64_t ch, int64_t q0,
                      int64_t len, void *y) {
  (dbl ? col2im_f64 : col2im_f32)(w, col, ch, q0, len, y);
}

/* C (M x N) = op(A) x B, or += when acc; split over the pool when one is
 * given (the few-task case of conv_run), else on the calling thread. */
static void gemm_f32(keel_pool *pool, bool ta, bool acc, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t lda, const void *B, int64_t ldb, void *C,
                     int64_t ldc) {
  keel_gemm_f32(pool, ta, false, M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f, C, ldc);
}
static void gemm_f64(keel_pool *pool, bool ta, bool acc, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t lda, const void *B, int64_t ldb, void *C,
                     int64_t ldc) {
  keel_gemm_f64(pool, ta, false, M, N, K, 1.0, A, lda, B, ldb, acc ? 1.0 : 0.0, C, ldc);
}
static void gemm_i32(keel_pool *pool, bool ta, bool acc, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t lda, const void *B, int64_t ldb, void *C,
                     int64_t ldc) {
  (void)ta, (void)pool; /* never asked: there is no integer ConvTranspose */
  keel_gemm_i32(M, N, K, A, lda, B, ldb, acc, C, ldc);
}

typedef struct conv_ty {
  size_t es;
  void (*im2col)(const keel_win *w, const void *x, int64_t ch, int64_t p0, int64_t len,
                 void *col);
  void (*col2im)(const keel_win *w, const void *col, int64_t ch, int64_t q0, int64_t len,
                 void *y);
  void (*gemm)(keel_pool *pool, bool ta, bool acc, int64_t M, int64_t N, int64_t K,
               const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc);
  void (*bias)(void *y, const void *b, int64_t m, int64_t p, int64_t ld);
  void (*direct)(const keel_win *w, const void *x, const void *wt, int64_t cg, int64_t mg,
                 void *y);
} conv_ty;

static const conv_ty TY_F32 = {sizeof(float), im2col_f32, col2im_f32, gemm_f32, bias_f32,
                               direct_f32};
static const conv_ty TY_F64 = {sizeof(double), im2col_f64, col2im_f64, gemm_f64, bias_f64,
                               direct_f64};
static const conv_ty TY_I32 = {sizeof(int32_t), im2col_i32, NULL, gemm_i32, bias_i32,
                               direct_i32};

/* ================================================== conv geometry */

typedef struct conv_geom {
  keel_win w;
  int64_t n, c, m;            /* images, input channels, output channels   */
  int64_t group, cg, mg;      /* groups; input / output channels per group */
  int rank;
  int64_t yshape[KEEL_MAX_RANK]; /* (N, M, out...)                          */
} conv_geom;

/* Channel bookkeeping. Conv's W is (M, C/group, k...); ConvTranspose's is
 * (C, M/group, k...). */
static keel_status conv_channels(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt,
                                 bool tr, conv_geom *g) {
  g->group = keel_k_attr_i(k, "group", 1);
  if (g->group < 1 || g->group > INT32_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL, "group %lld is out of range", (long long)g->group);
  g->n = x->shape[0], g->c = x->shape[1];
  int64_t want;
  if (!tr) {
    g->m = wt->shape[0], g->cg = wt->shape[1];
    if (keel_mul64_ovf(g->cg, g->group, &want) || want != g->c)
      return keel_err(KEEL_ERR_SHAPE, "X has %lld channels, W expects %lld per group x group %lld",
                      (long long)g->c, (long long)g->cg, (long long)g->group);
    if (g->m % g->group)
      return keel_err(KEEL_ERR_SHAPE, "W has %lld output channels, not a multiple of group %lld",
                      (long long)g->m, (long long)g->group);
    g->mg = g->m / g->group;
    return KEEL_OK;
  }
  if (wt->shape[0] != g->c || g->c % g->group)
    return keel_err(KEEL_ERR_SHAPE, "X has %lld channels, W has %lld (group %lld)",
                    (long long)g->c, (long long)wt->shape[0], (long long)g->group);
  g->cg = g->c / g->group, g->mg = wt->shape[1];
  if (keel_mul64_ovf(g->mg, g->group, &g->m))
    return keel_err(KEEL_ERR_SHAPE, "output channels overflow");
  return KEEL_OK;
}

/* Ranks, channels, kernel (from W, checked against kernel_shape) and the
 * window attributes; output sizes are left to the caller. */
static keel_status conv_setup(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt, bool tr,
                              conv_geom *g) {
  if (x->rank < 3)
    return keel_err(KEEL_ERR_SHAPE, "X must be (N, C, D1, ...), got rank %d", x->rank);
  if (wt->rank != x->rank)
    return keel_err(KEEL_ERR_SHAPE, "W has rank %d but X has rank %d", wt->rank, x->rank);
  KEEL_TRY(conv_channels(k, x, wt, tr, g));
  keel_win *w = &g->w;
  w->nd = x->rank - 2;
  int nk;
  const int64_t *ks = keel_k_attr_ints(k, "kernel_shape", &nk);
  if (nk && nk != w->nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "kernel_shape has %d values for %d spatial dims", nk,
                    w->nd);
  for (int i = 0; i < w->nd; i++) {
    w->in[i] = x->shape[i + 2], w->k[i] = wt->shape[i + 2];
    if (w->k[i] < 1 || w->k[i] > KEEL_WIN_ATTR_MAX)
      return keel_err(KEEL_ERR_SHAPE, "W's kernel dim %d is %lld", i, (long long)w->k[i]);
    if (nk && ks[i] != w->k[i])
      return keel_err(KEEL_ERR_INVALID_MODEL, "kernel_shape[%d] = %lld but W's kernel has %lld", i,
                      (long long)ks[i], (long long)w->k[i]);
  }
  return keel_win_read(k, w);
}

static void conv_yshape(conv_geom *g) {
  g->rank = g->w.nd + 2;
  g->yshape[0] = g->n, g->yshape[1] = g->m;
  memcpy(g->yshape + 2, g->w.out, sizeof(int64_t) * (size_t)g->w.nd);
}

static keel_status check_bias(const keel_tensor *b, int64_t m, int dtype) {
  if (!b) return KEEL_OK;
  if (b->dtype != dtype)
    return keel_err(KEEL_ERR_SHAPE, "B is %s, expected %s", keel_dtype_name((keel_dtype)b->dtype),
                    keel_dtype_name((keel_dtype)dtype));
  if (b->rank != 1 || b->shape[0] != m) {
    char sb[128];
    return keel_err(KEEL_ERR_SHAPE, "B has shape %s, expected [%lld]",
                    keel_shape_str(b->rank, b->shape, sb, sizeof sb), (long long)m);
  }
  return KEEL_OK;
}

/* Columns per im2col chunk for `rows` rows of `es`-byte elements. */
static int64_t col_chunk(int64_t rows, int64_t cols, size_t es) {
  int64_t c = COL_BUDGET / (rows * (int64_t)es);
  return KEEL_MAX(1, KEEL_MIN(c, cols));
}

/* ============================================================ Conv */

/* How one group's product is formed. */
enum { CONV_GEMM, CONV_IM2COL, CONV_DIRECT };

static int conv_mode(const conv_geom *g) {
  const keel_win *w = &g->w;
  bool pointwise = true; /* 1x1, stride 1, no pads: x_g is the column matrix */
  for (int i = 0; i < w->nd; i++)
    if (w->k[i] != 1 || w->s[i] != 1 || w->pb[i] || w->pe[i]) pointwise = false;
  return pointwise ? CONV_GEMM : g->mg <= DIRECT_MAX_M ? CONV_DIRECT : CONV_IM2COL;
}

/* Conv runs as independent tasks (image, group, chunk of output
 * positions) on the session's pool: each task fills its slice of Y with
 * the bias, then adds W_g x (its columns), through its worker's own col
 * buffer in im2col mode. Direct mode (few output channels per group)
 * takes a whole (image, group) plane per task. */
typedef struct conv_job {
  const conv_ty *ty;
  const conv_geom *g;
  int mode;
  bool taps;                    /* the input has data to multiply         */
  const char *x, *wt, *b;
  char *y, *col;                /* col: one chunk buffer per worker       */
  int64_t chunk, nchunks;
  size_t col_bytes;
  keel_pool *gemm_pool;         /* few tasks: they run one by one, each
                                   GEMM split over the pool; else NULL   */
} conv_job;

static keel_status conv_task(void *ctx, int64_t t0, int64_t t1, int worker) {
  const conv_job *j = ctx;
  const conv_geom *g = j->g;
  const keel_win *w = &g->w;
  size_t es = j->ty->es;
  int64_t R = g->cg * w->k_size, P = w->out_size;
  for (int64_t t = t0; t < t1; t++) {
    int64_t n = t / (g->group * j->nchunks), r = t % (g->group * j->nchunks);
    int64_t gi = r / j->nchunks, p0 = (r % j->nchunks) * j->chunk;
    int64_t len = KEEL_MIN(j->chunk, P - p0);
    char *yg = j->y + (size_t)((n * g->m + gi * g->mg) * P) * es;               /* (Mg, P)   */
    j->ty->bias(yg + (size_t)p0 * es, j->b ? j->b + (size_t)(gi * g->mg) * es : NULL, g->mg,
                len, P);
    if (!j->taps) continue; /* (X or W may then have no data pointer) */
    const char *xg = j->x + (size_t)((n * g->c + gi * g->cg) * w->in_size) * es; /* (Cg, in) */
    const char *wg = j->wt + (size_t)(gi * g->mg * R) * es;                      /* (Mg, R)   */
    if (j->mode == CONV_GEMM) {
      j->ty->gemm(j->gemm_pool, false, true, g->mg, len, g->cg, wg, R, xg + (size_t)p0 * es, P,
                  yg + (size_t)p0 * es, P);
    } else if (j->mode == CONV_DIRECT) {
      j->ty->direct(w, xg, wg, g->cg, g->mg, yg);
    } else {
      char *col = j->col + (size_t)worker * j->col_bytes;
      j->ty->im2col(w, xg, g->cg, p0, len, col);
      j->ty->gemm(j->gemm_pool, false, true, g->mg, len, R, wg, R, col, len,
                  yg + (size_t)p0 * es, P);
    }
  }
  return KEEL_OK;
}

/* Chunks of output positions: small enough that col stays in budget and
 * that there are a few tasks per split (keel_pool_splits), large enough
 * for GEMM to run on full tiles (64 columns). */
static int64_t conv_chunk(const conv_geom *g, int mode, size_t es, int splits) {
  int64_t P = g->w.out_size, R = KEEL_MAX(g->cg * g->w.k_size, 1);
  if (mode == CONV_DIRECT) return P;
  int64_t c = mode == CONV_IM2COL ? col_chunk(R, P, es) : P;
  int64_t planes = g->n * g->group, want = 4 * (int64_t)splits;
  if (splits > 1 && planes < want) {
    int64_t per = (want + planes - 1) / planes;
    c = KEEL_MIN(c, KEEL_MAX((P + per - 1) / per, 64));
  }
  return KEEL_MAX(c, 1);
}

/* Y (N, M, out...) = conv(X (N, C, in...), W (M, Cg, k...)) + B (M). */
static keel_status conv_run(keel_kctx *k, const conv_ty *ty, const conv_geom *g, const void *x,
                            const void *wt, const void *b, void *y) {
  const keel_win *w = &g->w;
  int64_t R = g->cg * w->k_size, P = w->out_size;
  KEEL_TRY(keel_blas_fits(KEEL_MAX(KEEL_MAX(R, P), g->mg)));
  int threads = keel_pool_threads(k->pool), splits = keel_pool_splits(k->pool);
  conv_job j = {ty, g, conv_mode(g), R > 0 && w->in_size > 0, x, wt, b, y, NULL, 0, 0, 0, NULL};
  /* An empty spatial input (in_size 0, padded to a non-empty output) has
   * no data pointer (NULL + 0 is UB) and adds nothing: Y is the bias. */
  j.chunk = conv_chunk(g, j.mode, ty->es, splits);
  j.nchunks = (P + j.chunk - 1) / j.chunk;
  if (j.taps && j.mode == CONV_IM2COL) {
    void *col;
    j.col_bytes = (size_t)(R * j.chunk) * ty->es;
    KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * R * j.chunk, ty->es, &col));
    j.col = col;
  }
  int64_t tasks = g->n * g->group * j.nchunks;
  /* Fewer tasks than threads (a late layer: 7x7 outputs, hundreds of
   * channels): the tasks run one by one and each GEMM is split over the
   * pool by rows instead, so no thread idles. */
  if (splits > 1 && tasks < splits && j.mode != CONV_DIRECT) {
    j.gemm_pool = k->pool;
    return conv_task(&j, 0, tasks, 0);
  }
  return keel_pool_for(k->pool, tasks, 1, conv_task, &j);
}

typedef keel_status (*run_fn)(keel_kctx *k, const conv_ty *ty, const conv_geom *g, const void *x,
                              const void *wt, const void *b, void *y);

/* float16/bfloat16: run in float on staged copies, round once. */
static keel_status run_half(keel_kctx *k, run_fn run, const conv_geom *g, const keel_tensor *x,
                            const keel_tensor *wt, const keel_tensor *b, keel_tensor *y) {
  keel_tensor fx, fw, fb;
  void *fy;
  KEEL_TRY(keel_k_to_f32(k, x, &fx));
  KEEL_TRY(keel_k_to_f32(k, wt, &fw));
  if (b) KEEL_TRY(keel_k_to_f32(k, b, &fb));
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(y), sizeof(float), &fy));
  KEEL_TRY(run(k, &TY_F32, g, fx.data, fw.data, b ? fb.data : NULL, fy));
  keel_f32_store(fy, y);
  return KEEL_OK;
}


/* ==================================================== ConvTranspose */

/* Output sizes and begin pads of a transposed conv (X is the "grid", the
 * output the "image"). Along dim i the full output is
 *     s * (in - 1) + output_padding + (k - 1) * d + 1;
 * explicit pads trim it. output_shape (or SAME_*, which asks for in * s)
 * fixes the size and derives the pads instead: the odd one goes to the end
 * for SAME_UPPER and to the start otherwise, with floor division as in the
 * ONNX reference, since output_shape may exceed the full size (negative
 * pads: the extra positions get only the bias). */
keel_status keel_win_transposed(keel_kctx *k, keel_win *w) {
  int64_t opad[KEEL_MAX_RANK], out;
  KEEL_TRY(read_ints(k, "output_padding", w->nd, 0, 0, opad));
  int nos;
  const int64_t *os = keel_k_attr_ints(k, "output_shape", &nos);
  if (nos == w->nd + 2) os += 2, nos = w->nd; /* given with N and C */
  if (nos && nos != w->nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "output_shape has %d values for %d spatial dims", nos,
                    w->nd);
  bool same = w->auto_pad == KEEL_PAD_SAME_UPPER || w->auto_pad == KEEL_PAD_SAME_LOWER;
  for (int i = 0; i < w->nd; i++) {
    int64_t full;
    if (w->in[i] < 1)
      return keel_err(KEEL_ERR_SHAPE, "spatial dim %d of X is empty", i);
    if (keel_mul64_ovf(w->in[i] - 1, w->s[i], &full) ||
        __builtin_add_overflow(full, opad[i] + keel_win_ext(w, i), &full) ||
        (same && !nos && keel_mul64_ovf(w->in[i], w->s[i], &out)))
      return keel_err(KEEL_ERR_SHAPE, "spatial dim %d: output size overflows", i);
    if (nos || same) {
      if (nos) out = os[i];
      if (out < 1 || out > KEEL_WIN_ATTR_MAX)
        return keel_err(KEEL_ERR_INVALID_MODEL, "output_shape[%d] = %lld is out of range", i,
                        (long long)out);
      int64_t total = full - out, half = floor_div(total, 2);
      w->pb[i] = w->auto_pad == KEEL_PAD_SAME_UPPER ? half : total - half;
      w->pe[i] = total - w->pb[i];
    } else {
      if (w->auto_pad == KEEL_PAD_VALID) w->pb[i] = w->pe[i] = 0;
      out = full - w->pb[i] - w->pe[i];
    }
    if (out < 1)
      return keel_err(KEEL_ERR_SHAPE, "spatial dim %d: output size %lld (pads %lld+%lld)", i,
                      (long long)out, (long long)w->pb[i], (long long)w->pe[i]);
    w->out[i] = out;
  }
  return keel_win_sizes(w);
}

/* Tasks (image, group, block of output channels [m0, m1)): for each chunk
 * of input positions, col ((m1-m0)*k, len) = the block's rows of W_g^T x
 * X_g[:, chunk], then col2im adds it into those channels of y_g (Mg, P).
 * Blocks write disjoint channels, so they run on the pool at once; one
 * thread makes one block per group (the whole GEMM, as before). */
typedef struct convtr_job {
  const conv_ty *ty;
  const conv_geom *g;
  const char *x, *wt;
  char *y;
  char *col;                  /* per worker: col_bytes                  */
  size_t col_bytes;
  int64_t chunk, mb, nmb;     /* positions per chunk; channels per block, blocks */
} convtr_job;

static keel_status convtr_task(void *ctx, int64_t t0, int64_t t1, int worker) {
  const convtr_job *j = ctx;
  const conv_geom *g = j->g;
  const keel_win *w = &g->w;
  size_t es = j->ty->es;
  int64_t K = w->k_size, R = g->mg * K, Q = w->in_size, P = w->out_size;
  char *col = j->col + (size_t)worker * j->col_bytes;
  for (int64_t t = t0; t < t1; t++) {
    int64_t n = t / (g->group * j->nmb), r = t % (g->group * j->nmb);
    int64_t gi = r / j->nmb, m0 = r % j->nmb * j->mb, m1 = KEEL_MIN(g->mg, m0 + j->mb);
    if (m1 <= m0) continue;
    const char *xg = j->x + (size_t)((n * g->c + gi * g->cg) * Q) * es;   /* (Cg, Q)    */
    const char *wg = j->wt + (size_t)(gi * g->cg * R + m0 * K) * es;     /* its rows of W_g^T */
    char *yg = j->y + (size_t)((n * g->m + gi * g->mg + m0) * P) * es;   /* (m1-m0, P) */
    for (int64_t q0 = 0; q0 < Q; q0 += j->chunk) {
      int64_t len = KEEL_MIN(j->chunk, Q - q0);
      j->ty->gemm(NULL, true, false, (m1 - m0) * K, len, g->cg, wg, R, xg + (size_t)q0 * es, Q, col,
                  len);
      j->ty->col2im(w, col, m1 - m0, q0, len, yg);
    }
  }
  return KEEL_OK;
}

/* Y (N, M, out...) = convT(X (N, C, in...), W (C, Mg, k...)) + B (M). */
static keel_status convtr_run(keel_kctx *k, const conv_ty *ty, const conv_geom *g, const void *x,
                              const void *wt, const void *b, void *y) {
  const keel_win *w = &g->w;
  int64_t R = g->mg * w->k_size, Q = w->in_size, P = w->out_size;
  size_t es = ty->es, ys = (size_t)(g->m * P) * es;
  KEEL_TRY(keel_blas_fits(KEEL_MAX(KEEL_MAX(R, Q), g->cg)));
  for (size_t n = 0; n < (size_t)g->n; n++) ty->bias((char *)y + n * ys, b, g->m, P, P);
  if (R <= 0 || g->cg <= 0) return KEEL_OK;
  int threads = keel_pool_threads(k->pool), splits = keel_pool_splits(k->pool);
  /* channel blocks: about 4 tasks per split when images x groups are fewer */
  int64_t planes = g->n * g->group, want = 4 * (int64_t)splits, nmb = 1;
  if (splits > 1 && planes < want) nmb = KEEL_MIN(g->mg, (want + planes - 1) / planes);
  convtr_job j = {ty, g, x, wt, y, NULL, 0, 0, (g->mg + nmb - 1) / nmb, 0};
  j.nmb = (g->mg + j.mb - 1) / j.mb;
  j.chunk = col_chunk(KEEL_MAX(j.mb * w->k_size, 1), Q, es);
  j.col_bytes = (size_t)(j.mb * w->k_size * j.chunk) * es;
  void *col;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * j.mb * w->k_size * j.chunk, es, &col));
  j.col = col;
  return keel_pool_for(k->pool, planes * j.nmb, 1, convtr_task, &j);
}

/* ======================================================= float ops */

/* Shared by Conv and ConvTranspose: inputs, types, geometry, dispatch. */
static keel_status conv_float(keel_kctx *k, bool tr, keel_tensor **yout) {
  const keel_tensor *x, *wt, *b;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &wt));
  KEEL_TRY(keel_k_in_opt(k, 2, &b));
  if (!keel_dtype_is_float(x->dtype) || wt->dtype != x->dtype)
    return keel_err(KEEL_ERR_UNSUPPORTED, "X %s and W %s: expected one floating-point type",
                    keel_dtype_name((keel_dtype)x->dtype), keel_dtype_name((keel_dtype)wt->dtype));
  conv_geom g;
  KEEL_TRY(conv_setup(k, x, wt, tr, &g));
  KEEL_TRY(tr ? keel_win_transposed(k, &g.w) : keel_win_forward(&g.w, false));
  KEEL_TRY(check_bias(b, g.m, x->dtype));
  conv_yshape(&g);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, g.rank, g.yshape, &y));
  if (yout) *yout = y;
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  run_fn run = tr ? convtr_run : conv_run;
  keel_act act;
  KEEL_TRY(keel_act_of(k->node, &act));
  if (keel_is_half(x->dtype)) KEEL_TRY(run_half(k, run, &g, x, wt, b, y));
  else
    KEEL_TRY(run(k, x->dtype == KEEL_FLOAT ? &TY_F32 : &TY_F64, &g, x->data, wt->data,
                 b ? b->data : NULL, y->data));
  return keel_act_apply(&act, y);
}

keel_status keel_op_conv_ref(keel_kctx *k) { return conv_float(k, false, NULL); }
static keel_status op_conv_transpose(keel_kctx *k) { return conv_float(k, true, NULL); }
keel_status keel_conv_forward(keel_kctx *k, keel_tensor **y) { return conv_float(k, false, y); }

/* ================================================== quantized convs */

/* t - zp as int32, t (uint8 or int8) seen as (rows, numel / rows); zp is
 * absent, one value, or a 1-D list of one per row (W's output channels). */
static keel_status q_stage(keel_kctx *k, const keel_tensor *t, const keel_tensor *zp,
                           int64_t rows, const char *what, int32_t **out) {
  int64_t n = keel_tensor_numel(t), nz = zp ? keel_tensor_numel(zp) : 1;
  if (zp && zp->dtype != t->dtype)
    return keel_err(KEEL_ERR_SHAPE, "%s is %s but its tensor is %s", what,
                    keel_dtype_name((keel_dtype)zp->dtype), keel_dtype_name((keel_dtype)t->dtype));
  if (nz != 1 && (nz != rows || zp->rank != 1))
    return keel_err(KEEL_ERR_SHAPE, "%s has %lld values, expected 1%s", what, (long long)nz,
                    rows > 1 ? " or one per output channel" : "");
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, n, sizeof(int32_t), &p));
  int32_t *dst = p;
  const uint8_t *u8 = t->data;
  const int8_t *s8 = t->data;
  int64_t per = rows > 0 ? n / rows : 0;
  for (int64_t r = 0; r < rows; r++) {
    int32_t z = zp ? (int32_t)keel_elem_get_i64(zp->dtype, zp->data, nz == 1 ? 0 : (size_t)r) : 0;
    for (int64_t i = r * per; i < (r + 1) * per; i++)
      dst[i] = (t->dtype == KEEL_UINT8 ? (int32_t)u8[i] : (int32_t)s8[i]) - z;
  }
  *out = dst;
  return KEEL_OK;
}

/* Shared front of the two quantized convs: types, geometry, output. */
static keel_status qconv_setup(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt,
                               int ydt, conv_geom *g, keel_tensor **y) {
  if (!keel_is_q8(x->dtype) || !keel_is_q8(wt->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "x and w must be uint8 or int8, got %s and %s",
                    keel_dtype_name((keel_dtype)x->dtype), keel_dtype_name((keel_dtype)wt->dtype));
  KEEL_TRY(conv_setup(k, x, wt, false, g));
  KEEL_TRY(keel_win_forward(&g->w, false));
  conv_yshape(g);
  return keel_k_out(k, 0, ydt, g->rank, g->yshape, y);
}

static keel_status op_conv_integer(keel_kctx *k) {
  const keel_tensor *x, *wt, *xz, *wz;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &wt));
  KEEL_TRY(keel_k_in_opt(k, 2, &xz));
  KEEL_TRY(keel_k_in_opt(k, 3, &wz));
  conv_geom g;
  keel_tensor *y;
  KEEL_TRY(qconv_setup(k, x, wt, KEEL_INT32, &g, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  int32_t *xs, *ws;
  KEEL_TRY(q_stage(k, x, xz, 1, "x_zero_point", &xs));
  KEEL_TRY(q_stage(k, wt, wz, g.m, "w_zero_point", &ws));
  return conv_run(k, &TY_I32, &g, xs, ws, NULL, y->data);
}

/* QLinearConv's scales and output zero point. */
typedef struct qconv_q {
  float xs, ys;
  const keel_tensor *ws;       /* one value or one per output channel */
  int32_t zp, lo, hi;
} qconv_q;

static keel_status qconv_read(keel_kctx *k, int64_t m, qconv_q *q, int *ydt) {
  const keel_tensor *xs, *ws, *ys, *yz;
  KEEL_TRY(keel_k_in(k, 1, &xs));
  KEEL_TRY(keel_k_in(k, 4, &ws));
  KEEL_TRY(keel_k_in(k, 6, &ys));
  KEEL_TRY(keel_k_in_opt(k, 7, &yz));
  int64_t nw = keel_tensor_numel(ws);
  if (keel_tensor_numel(xs) != 1 || keel_tensor_numel(ys) != 1 || (yz && keel_tensor_numel(yz) != 1))
    return keel_err(KEEL_ERR_SHAPE, "x_scale, y_scale and y_zero_point must hold one value each");
  if (nw != 1 && nw != m)
    return keel_err(KEEL_ERR_SHAPE, "w_scale has %lld values, expected 1 or %lld", (long long)nw,
                    (long long)m);
  if (!keel_dtype_is_float(xs->dtype) || !keel_dtype_is_float(ws->dtype) ||
      !keel_dtype_is_float(ys->dtype))
    return keel_err(KEEL_ERR_SHAPE, "scales must be floating point");
  *ydt = yz ? yz->dtype : KEEL_UINT8;
  if (!keel_is_q8(*ydt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "y type %s is not uint8 or int8",
                    keel_dtype_name((keel_dtype)*ydt));
  q->xs = (float)keel_elem_get_f64(xs->dtype, xs->data, 0);
  q->ys = (float)keel_elem_get_f64(ys->dtype, ys->data, 0);
  q->ws = ws;
  q->zp = yz ? (int32_t)keel_elem_get_i64(yz->dtype, yz->data, 0) : 0;
  q->lo = *ydt == KEEL_UINT8 ? 0 : -128;
  q->hi = *ydt == KEEL_UINT8 ? 255 : 127;
  return KEEL_OK;
}

/* y = requant(acc, x_scale * w_scale[m] / y_scale) per output channel. */
static void qconv_requant(const conv_geom *g, const qconv_q *q, const int32_t *acc, keel_tensor *y) {
  int64_t P = g->w.out_size, nw = keel_tensor_numel(q->ws);
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t m = 0; m < g->m; m++) {
      float ws = (float)keel_elem_get_f64(q->ws->dtype, q->ws->data, nw == 1 ? 0 : (size_t)m);
      float scale = q->xs * ws / q->ys;
      int64_t at = (n * g->m + m) * P;
      for (int64_t p = at; p < at + P; p++) {
        int32_t v = keel_requant(acc[p], scale, q->zp, q->lo, q->hi);
        if (y->dtype == KEEL_UINT8) ((uint8_t *)y->data)[p] = (uint8_t)v;
        else ((int8_t *)y->data)[p] = (int8_t)v;
      }
    }
}

static keel_status op_qlinear_conv(keel_kctx *k) {
  const keel_tensor *x, *xz, *wt, *wz, *b;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in_opt(k, 2, &xz));
  KEEL_TRY(keel_k_in(k, 3, &wt));
  KEEL_TRY(keel_k_in_opt(k, 5, &wz));
  KEEL_TRY(keel_k_in_opt(k, 8, &b));
  if (wt->rank < 1) return keel_err(KEEL_ERR_SHAPE, "w must be (M, C/group, k...)");
  qconv_q q;
  int ydt;
  KEEL_TRY(qconv_read(k, wt->shape[0], &q, &ydt));
  conv_geom g;
  keel_tensor *y;
  KEEL_TRY(check_bias(b, wt->shape[0], KEEL_INT32));
  KEEL_TRY(qconv_setup(k, x, wt, ydt, &g, &y));
  int64_t ny = keel_tensor_numel(y);
  if (ny == 0) return KEEL_OK;
  int32_t *xs, *ws;
  void *acc;
  KEEL_TRY(q_stage(k, x, xz, 1, "x_zero_point", &xs));
  KEEL_TRY(q_stage(k, wt, wz, g.m, "w_zero_point", &ws));
  KEEL_TRY(keel_k_scratch_n(k, ny, sizeof(int32_t), &acc));
  KEEL_TRY(conv_run(k, &TY_I32, &g, xs, ws, b ? b->data : NULL, acc));
  qconv_requant(&g, &q, acc, y);
  return KEEL_OK;
}

/* ============================================================ table */

/* Element-type sets used in the table below. */
#define Q8 (KEEL_T(KEEL_INT8) | KEEL_T(KEEL_UINT8))
const keel_opdef keel_ops_conv[] = {
    {"", "Conv", 1, KEEL_OPSET_MAX, keel_op_conv_ref, 0, KEEL_TS_FLOAT, keel_conv_impls},
    {"", "ConvTranspose", 1, KEEL_OPSET_MAX, op_conv_transpose, 0, KEEL_TS_FLOAT,
     keel_gpu_conv_transpose_impls},
    {"", "ConvInteger", 10, KEEL_OPSET_MAX, op_conv_integer, 0, Q8},
    {"", "QLinearConv", 10, KEEL_OPSET_MAX, op_qlinear_conv, 0, Q8},
    {0},
};
#undef Q8
