/* im2col.c: the column-image ops. Col2Im (opset 18) folds a column matrix
 * back into an image, summing overlapping blocks (PyTorch's fold);
 * DeformConv (opsets 19 and 22) samples its input at learned offsets from
 * the regular conv grid, optionally scaled by a mask, into a column matrix,
 * then multiplies it with the weights per group through the GEMM layer.
 *
 * Both use the sliding-window geometry of conv_util.h (strides, dilations,
 * pads, output sizes) over any number of spatial dims. A column row is one
 * (channel, kernel tap) pair and a column one output position:
 *     cols[(c, k), o]   with input position  o * s - pb + k * d  per dim.
 * DeformConv adds the offsets to that position and reads the input by
 * multilinear interpolation (zero outside), as ONNX's reference does
 * through GridSample with align_corners=1. Arithmetic runs in float for
 * float, float16 and bfloat16 (staged, rounded once) and in double for
 * double.
 */
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

/* ====================================================== shared pieces */

/* Advances a row-major odometer idx over n dims of `dims`. */
static void ic_step(int n, const int64_t *dims, int64_t *idx) {
  for (int i = n - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return;
    idx[i] = 0;
  }
}

/* Input i (optional or not) as float or double: halves become a float
 * scratch copy, other types are refused. */
static keel_status ic_stage(keel_kctx *k, const keel_tensor *t, const char *op, const char *what,
                            keel_tensor *out) {
  if (!keel_dtype_is_float(t->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s is %s; only float types are supported", op,
                    what, keel_dtype_name((keel_dtype)t->dtype));
  if (keel_is_half(t->dtype)) return keel_k_to_f32(k, t, out);
  *out = *t;
  return KEEL_OK;
}

/* The work type of a float dtype: double, or float for the rest. */
static int ic_work(int dtype) { return dtype == KEEL_DOUBLE ? KEEL_DOUBLE : KEEL_FLOAT; }

/* Output 0 (dtype, shape) and a work buffer in the work type: the output's
 * own bytes, or float scratch that ic_out_end rounds into it. */
static keel_status ic_out_begin(keel_kctx *k, int dtype, int rank, const int64_t *shape,
                                keel_tensor **y, void **work) {
  KEEL_TRY(keel_k_out(k, 0, dtype, rank, shape, y));
  if (!keel_is_half(dtype)) {
    *work = (*y)->data;
    return KEEL_OK;
  }
  return keel_k_scratch_n(k, keel_tensor_numel(*y), sizeof(float), work);
}

static void ic_out_end(keel_tensor *y, const void *work) {
  if (keel_is_half(y->dtype) && keel_tensor_numel(y) > 0) keel_f32_store(work, y);
}

/* A 1-D int list input of exactly `want` values (want < 0: any count up to
 * the rank limit), each >= lo. */
static keel_status ic_ints(keel_kctx *k, int i, const char *what, int want, int64_t lo,
                           int64_t *buf, int *n) {
  KEEL_TRY(keel_k_in_ints(k, i, buf, KEEL_MAX_RANK - 2, n));
  if (want >= 0 && *n != want)
    return keel_err(KEEL_ERR_SHAPE, "Col2Im: %s has %d values, expected %d", what, *n, want);
  if (*n < 1) return keel_err(KEEL_ERR_SHAPE, "Col2Im: %s is empty", what);
  for (int j = 0; j < *n; j++)
    if (buf[j] < lo || buf[j] > KEEL_WIN_ATTR_MAX)
      return keel_err(KEEL_ERR_SHAPE, "Col2Im: %s[%d] = %lld is out of range", what, j,
                      (long long)buf[j]);
  return KEEL_OK;
}

/* ============================================================ Col2Im */

/* image (C, in...) += the blocks of cols (C * K, L): every (channel, tap,
 * block) adds to the pixel it covers, when that pixel is inside. */
#define DEF_COL2IM(T)                                                                    \
  static void col2im_##T(const keel_win *w, int64_t C, const T *cols, T *img) {          \
    int nd = w->nd;                                                                      \
    int64_t K = w->k_size, L = w->out_size, kk[KEEL_MAX_RANK] = {0};                     \
    memset(img, 0, (size_t)(C * w->in_size) * sizeof(T));                                \
    for (int64_t kf = 0; kf < K; kf++, ic_step(nd, w->k, kk)) {                          \
      int64_t lo[KEEL_MAX_RANK] = {0};                                                   \
      for (int64_t l = 0; l < L; l++, ic_step(nd, w->out, lo)) {                         \
        int64_t pos = 0;                                                                 \
        for (int i = 0; i < nd && pos >= 0; i++) {                                       \
          int64_t p = lo[i] * w->s[i] - w->pb[i] + kk[i] * w->d[i];                      \
          pos = p < 0 || p >= w->in[i] ? -1 : pos * w->in[i] + p;                        \
        }                                                                                \
        if (pos < 0) continue;                                                           \
        for (int64_t c = 0; c < C; c++)                                                  \
          img[c * w->in_size + pos] += cols[(c * K + kf) * L + l];                       \
      }                                                                                  \
    }                                                                                    \
  }
DEF_COL2IM(float)
DEF_COL2IM(double)

/* The geometry from image_shape (input 1), block_shape (input 2) and the
 * strides / dilations / pads attributes; L blocks must match. */
static keel_status col2im_geometry(keel_kctx *k, const keel_tensor *x, keel_win *w, int64_t *C) {
  int nd, nb;
  int64_t img[KEEL_MAX_RANK], blk[KEEL_MAX_RANK];
  KEEL_TRY(ic_ints(k, 1, "image_shape", -1, 1, img, &nd));
  KEEL_TRY(ic_ints(k, 2, "block_shape", nd, 1, blk, &nb));
  memset(w, 0, sizeof *w);
  w->nd = nd;
  KEEL_TRY(keel_win_read(k, w));
  w->auto_pad = KEEL_PAD_NOTSET;
  memcpy(w->in, img, sizeof(int64_t) * (size_t)nd);
  memcpy(w->k, blk, sizeof(int64_t) * (size_t)nd);
  KEEL_TRY(keel_win_forward(w, false));
  KEEL_TRY(keel_win_sizes(w));
  char s[128];
  if (x->shape[1] % w->k_size != 0 || x->shape[2] != w->out_size)
    return keel_err(KEEL_ERR_SHAPE,
                    "Col2Im: input %s does not hold (C * %lld, %lld) columns for these blocks",
                    keel_shape_str(x->rank, x->shape, s, sizeof s), (long long)w->k_size,
                    (long long)w->out_size);
  *C = x->shape[1] / w->k_size;
  return KEEL_OK;
}

static keel_status op_col2im(keel_kctx *k) {
  const keel_tensor *x0;
  KEEL_TRY(keel_k_in(k, 0, &x0));
  if (x0->rank != 3) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "Col2Im: input must be (N, C * prod(block_shape), L), got %s",
                    keel_shape_str(x0->rank, x0->shape, s, sizeof s));
  }
  keel_win w;
  int64_t C, shape[KEEL_MAX_RANK];
  KEEL_TRY(col2im_geometry(k, x0, &w, &C));
  keel_tensor x;
  KEEL_TRY(ic_stage(k, x0, "Col2Im", "input", &x));
  shape[0] = x0->shape[0], shape[1] = C;
  memcpy(shape + 2, w.in, sizeof(int64_t) * (size_t)w.nd);
  keel_tensor *y;
  void *work;
  KEEL_TRY(ic_out_begin(k, x0->dtype, w.nd + 2, shape, &y, &work));
  int64_t xs = C * w.k_size * w.out_size, ys = C * w.in_size;
  for (int64_t n = 0; n < x0->shape[0] && ys > 0; n++) {
    if (x.dtype == KEEL_DOUBLE) col2im_double(&w, C, (const double *)x.data + n * xs, (double *)work + n * ys);
    else col2im_float(&w, C, (const float *)x.data + n * xs, (float *)work + n * ys);
  }
  ic_out_end(y, work);
  return KEEL_OK;
}

/* ======================================================== DeformConv */

typedef struct dconv {
  keel_win w;
  int64_t n, c, m, group, og;     /* batch, in/out channels, groups, offset groups */
  const void *x, *wt, *off, *b, *mask;
} dconv;

/* The taps of fractional position p: the in-bounds pixels among the 2^nd
 * surrounding ones, with their multilinear weights (a pixel outside
 * counts as 0, so it is left out). Shared by every channel of the offset
 * group. */
#define DC_MAXTAPS (1 << (KEEL_MAX_RANK - 2))
typedef struct dtaps {
  int n;
  int64_t off[DC_MAXTAPS];
  double w[DC_MAXTAPS];
} dtaps;

static void dtaps_at(const keel_win *w, const double *p, dtaps *t) {
  int nd = w->nd;
  int64_t base[KEEL_MAX_RANK];
  double fr[KEEL_MAX_RANK];
  t->n = 0;
  for (int i = 0; i < nd; i++) {
    if (!(p[i] > -1 && p[i] < (double)w->in[i])) return; /* NaN too */
    double f = floor(p[i]);
    base[i] = (int64_t)f, fr[i] = p[i] - f;
  }
  for (int corner = 0; corner < (1 << nd); corner++) {
    double wgt = 1;
    int64_t pos = 0;
    for (int i = 0; i < nd && pos >= 0; i++) {
      int hi = (corner >> (nd - 1 - i)) & 1;
      int64_t q = base[i] + hi;
      wgt *= hi ? fr[i] : 1 - fr[i];
      pos = q < 0 || q >= w->in[i] ? -1 : pos * w->in[i] + q;
    }
    if (pos >= 0 && wgt != 0) t->off[t->n] = pos, t->w[t->n++] = wgt;
  }
}

/* cols (C * K, O) for image n: tap kf of channel c at output o samples
 * o * s - pb + kk * d + offset[n, g, kf, i, o] (g = c's offset group),
 * times mask[n, g, kf, o] when given. */
#define DEF_DCOLS(T)                                                                     \
  static void dcols_##T(const dconv *g, int64_t n, T *cols) {                            \
    const keel_win *w = &g->w;                                                           \
    int nd = w->nd;                                                                      \
    int64_t K = w->k_size, O = w->out_size, cpg = g->c / g->og;                          \
    const T *x = (const T *)g->x + n * g->c * w->in_size;                                \
    const T *off = (const T *)g->off + n * g->og * K * nd * O;                           \
    const T *mask = g->mask ? (const T *)g->mask + n * g->og * K * O : NULL;             \
    dtaps t;                                                                             \
    for (int64_t og = 0; og < g->og; og++) {                                             \
      int64_t kk[KEEL_MAX_RANK] = {0};                                                   \
      for (int64_t kf = 0; kf < K; kf++, ic_step(nd, w->k, kk)) {                        \
        const T *of = off + (og * K + kf) * nd * O;                                      \
        int64_t oi[KEEL_MAX_RANK] = {0};                                                 \
        for (int64_t o = 0; o < O; o++, ic_step(nd, w->out, oi)) {                       \
          double p[KEEL_MAX_RANK];                                                       \
          for (int i = 0; i < nd; i++)                                                   \
            p[i] = (double)(oi[i] * w->s[i] - w->pb[i] + kk[i] * w->d[i]) +              \
                   (double)of[i * O + o];                                                \
          dtaps_at(w, p, &t);                                                            \
          double mk = mask ? (double)mask[(og * K + kf) * O + o] : 1;                    \
          for (int64_t c = og * cpg; c < (og + 1) * cpg; c++) {                          \
            const T *xc = x + c * w->in_size;                                            \
            double acc = 0;                                                              \
            for (int q = 0; q < t.n; q++) acc += t.w[q] * (double)xc[t.off[q]];          \
            cols[(c * K + kf) * O + o] = (T)(mk * acc);                                  \
          }                                                                              \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  }
DEF_DCOLS(float)
DEF_DCOLS(double)

/* y (N, M, O) = per group W_g (M/G, C/G * K) x cols_g (C/G * K, O) + B. */
static void dconv_run(const dconv *g, bool dbl, void *cols, void *y) {
  const keel_win *w = &g->w;
  int64_t K = w->k_size, O = w->out_size, cg = g->c / g->group, mg = g->m / g->group, R = cg * K;
  size_t es = dbl ? sizeof(double) : sizeof(float);
  for (int64_t n = 0; n < g->n; n++) {
    char *yn = (char *)y + (size_t)(n * g->m * O) * es;
    for (int64_t j = 0; j < g->m * O; j++) { /* the bias, or 0 */
      double b = g->b ? (dbl ? ((const double *)g->b)[j / O] : ((const float *)g->b)[j / O]) : 0;
      if (dbl) ((double *)yn)[j] = b;
      else ((float *)yn)[j] = (float)b;
    }
    if (w->in_size == 0) continue; /* nothing to sample: Y is the bias (X has no data) */
    if (dbl) dcols_double(g, n, cols);
    else dcols_float(g, n, cols);
    for (int64_t gi = 0; gi < g->group; gi++) {
      const char *wg = (const char *)g->wt + (size_t)(gi * mg * R) * es;
      const char *cgp = (const char *)cols + (size_t)(gi * R * O) * es;
      char *yg = yn + (size_t)(gi * mg * O) * es;
      if (dbl)
        keel_gemm_f64(NULL, false, false, mg, O, R, 1, (const double *)wg, R, (const double *)cgp, O, 1,
                      (double *)yg, O);
      else
        keel_gemm_f32(NULL, false, false, mg, O, R, 1, (const float *)wg, R, (const float *)cgp, O, 1,
                      (float *)yg, O);
    }
  }
}

/* Input i must have exactly this shape. */
static keel_status dconv_shape(const keel_tensor *t, const char *what, int rank,
                               const int64_t *want) {
  bool ok = t->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = t->shape[i] == want[i];
  if (ok) return KEEL_OK;
  char a[128], b[128];
  return keel_err(KEEL_ERR_SHAPE, "DeformConv: %s has shape %s, expected %s", what,
                  keel_shape_str(t->rank, t->shape, a, sizeof a), keel_shape_str(rank, want, b, sizeof b));
}

/* Channels and groups: C = group * W's C/G, M % group == 0, C % offset_group == 0. */
static keel_status dconv_channels(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt,
                                  dconv *g) {
  g->n = x->shape[0], g->c = x->shape[1], g->m = wt->shape[0];
  g->group = keel_k_attr_i(k, "group", 1), g->og = keel_k_attr_i(k, "offset_group", 1);
  if (g->group < 1 || g->og < 1 || g->group > KEEL_WIN_ATTR_MAX || g->og > KEEL_WIN_ATTR_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL, "DeformConv: group %lld and offset_group %lld must be >= 1",
                    (long long)g->group, (long long)g->og);
  if (wt->rank != x->rank || g->c != wt->shape[1] * g->group || g->m % g->group || g->c % g->og)
    return keel_err(KEEL_ERR_SHAPE,
                    "DeformConv: X has %lld channels, W is %lld x %lld per group for %lld groups "
                    "(%lld offset groups)",
                    (long long)g->c, (long long)g->m, (long long)wt->shape[1], (long long)g->group,
                    (long long)g->og);
  return KEEL_OK;
}

/* The window: kernel from W (kernel_shape must agree), the attributes,
 * the output sizes; offset (and mask) must cover them. */
static keel_status dconv_geometry(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt,
                                  dconv *g) {
  keel_win *w = &g->w;
  memset(w, 0, sizeof *w);
  w->nd = x->rank - 2;
  int nk;
  const int64_t *ks = keel_k_attr_ints(k, "kernel_shape", &nk);
  if (nk && nk != w->nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "DeformConv: kernel_shape has %d values for %d spatial dims",
                    nk, w->nd);
  for (int i = 0; i < w->nd; i++) {
    w->in[i] = x->shape[i + 2], w->k[i] = wt->shape[i + 2];
    if (w->k[i] < 1 || (nk && ks[i] != w->k[i]))
      return keel_err(KEEL_ERR_SHAPE, "DeformConv: W's kernel dim %d is %lld (kernel_shape says %lld)",
                      i, (long long)w->k[i], (long long)(nk ? ks[i] : w->k[i]));
  }
  KEEL_TRY(keel_win_read(k, w));
  KEEL_TRY(keel_win_forward(w, false));
  return keel_win_sizes(w);
}

/* offset (N, og * K * nd, out...), B (M), mask (N, og * K, out...). */
static keel_status dconv_inputs(keel_kctx *k, const dconv *g, const keel_tensor *x,
                                const keel_tensor **t) {
  const keel_win *w = &g->w;
  int64_t want[KEEL_MAX_RANK], ch;
  want[0] = g->n;
  memcpy(want + 2, w->out, sizeof(int64_t) * (size_t)w->nd);
  if (keel_mul64_ovf(g->og, w->k_size, &ch) || keel_mul64_ovf(ch, w->nd, &want[1]))
    return keel_err(KEEL_ERR_SHAPE, "DeformConv: offset channels overflow");
  KEEL_TRY(keel_k_in(k, 2, &t[0]));
  KEEL_TRY(dconv_shape(t[0], "offset", x->rank, want));
  KEEL_TRY(keel_k_in_opt(k, 3, &t[1]));
  if (t[1]) KEEL_TRY(dconv_shape(t[1], "B", 1, &g->m));
  KEEL_TRY(keel_k_in_opt(k, 4, &t[2]));
  want[1] = ch;
  if (t[2]) KEEL_TRY(dconv_shape(t[2], "mask", x->rank, want));
  for (int i = 0; i < 3; i++)
    if (t[i] && t[i]->dtype != x->dtype)
      return keel_err(KEEL_ERR_SHAPE, "DeformConv: input %d is %s, X is %s", i + 2,
                      keel_dtype_name((keel_dtype)t[i]->dtype), keel_dtype_name((keel_dtype)x->dtype));
  return KEEL_OK;
}

static keel_status op_deform_conv(keel_kctx *k) {
  const keel_tensor *x0, *w0, *t[3];
  KEEL_TRY(keel_k_in(k, 0, &x0));
  KEEL_TRY(keel_k_in(k, 1, &w0));
  if (x0->rank < 3 || x0->rank > KEEL_MAX_RANK)
    return keel_err(KEEL_ERR_SHAPE, "DeformConv: X must be (N, C, spatial...), got rank %d", x0->rank);
  if (w0->dtype != x0->dtype)
    return keel_err(KEEL_ERR_SHAPE, "DeformConv: W is %s, X is %s",
                    keel_dtype_name((keel_dtype)w0->dtype), keel_dtype_name((keel_dtype)x0->dtype));
  dconv g;
  KEEL_TRY(dconv_channels(k, x0, w0, &g));
  KEEL_TRY(dconv_geometry(k, x0, w0, &g));
  KEEL_TRY(dconv_inputs(k, &g, x0, t));
  keel_tensor sx, sw, st[3];
  KEEL_TRY(ic_stage(k, x0, "DeformConv", "X", &sx));
  KEEL_TRY(ic_stage(k, w0, "DeformConv", "W", &sw));
  for (int i = 0; i < 3; i++)
    if (t[i]) KEEL_TRY(ic_stage(k, t[i], "DeformConv", "offset, B or mask", &st[i]));
  g.x = sx.data, g.wt = sw.data, g.off = st[0].data;
  g.b = t[1] ? st[1].data : NULL, g.mask = t[2] ? st[2].data : NULL;
  int64_t shape[KEEL_MAX_RANK], rows;
  shape[0] = g.n, shape[1] = g.m;
  memcpy(shape + 2, g.w.out, sizeof(int64_t) * (size_t)g.w.nd);
  keel_tensor *y;
  void *work, *cols;
  KEEL_TRY(ic_out_begin(k, x0->dtype, x0->rank, shape, &y, &work));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  bool dbl = ic_work(x0->dtype) == KEEL_DOUBLE;
  if (keel_mul64_ovf(g.c, g.w.k_size, &rows) || keel_mul64_ovf(rows, g.w.out_size, &rows))
    return keel_err(KEEL_ERR_SHAPE, "DeformConv: the column matrix overflows");
  KEEL_TRY(keel_blas_fits(KEEL_MAX(KEEL_MAX(g.c * g.w.k_size, g.w.out_size), g.m)));
  KEEL_TRY(keel_k_scratch_n(k, rows > 0 ? rows : 1, dbl ? sizeof(double) : sizeof(float), &cols));
  dconv_run(&g, dbl, cols, work);
  ic_out_end(y, work);
  return KEEL_OK;
}

/* ============================================================= table */

const keel_opdef keel_ops_im2col[] = {
    {"", "Col2Im", 18, KEEL_OPSET_MAX, op_col2im, 0, KEEL_TS_FLOAT},
    {"", "DeformConv", 19, KEEL_OPSET_MAX, op_deform_conv, 0, KEEL_TS_FLOAT},
    {0},
};
