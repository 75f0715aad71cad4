/* grad_nn.c: helper kernels for the derivative rules of the neural-network
 * ops (autodiff/grad_nn.c), in the domain "ai.keel.internal":
 *   ConvGradX, ConvGradW              dX and dW of Conv
 *   ConvTransposeGradX/W              dX and dW of ConvTranspose
 *   MaxPoolGrad, AveragePoolGrad      (attribute global=1: the Global* ops)
 *   BatchNormGrad, LayerNormGrad,     dX, dScale, dB
 *   GroupNormGrad (also InstanceNormalization's)
 *   DropoutGrad, ResizeGrad
 *
 * Every kernel takes float and double. The conv products go through
 * keel_gemm_f32/f64 with conv.c's im2col/col2im, on the session's pool.
 * One picture serves all four conv kernels: an "image" (Conv's X,
 * ConvTranspose's Y) and a "grid" (Conv's Y, ConvTranspose's X) related by
 * a window (keel_win: image sizes in w.in, grid sizes in w.out) and a
 * weight of (group * ca, cr, k...): ca grid and cr image channels per
 * group. Conv is grid = W x im2col(image); its adjoints are
 *   image = col2im(W^T x grid)           (Conv's dX)
 *   dW    = sum_n grid x im2col(image)^T (Conv's dW; ConvTranspose's dW
 *                                         with grid = X, image = gY)
 *   grid  = W x im2col(image)            (ConvTranspose's dX)
 * The statistics kernels work in double and split rows (LayerNorm) or
 * channels (BatchNorm) over the pool.
 */
#include <math.h>

#include "base/pool.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

#define COL_BUDGET ((int64_t)4 << 20)
/* Bound on the per-worker dW partial sums, in bytes: a larger weight has
 * large products, which run one by one, each split over the pool. */
#define PARTS_BUDGET ((int64_t)32 << 20)

static keel_status fd_input(keel_kctx *k, int i, int dtype, const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if ((*t)->dtype != KEEL_FLOAT && (*t)->dtype != KEEL_DOUBLE)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: input %d is %s; float and double are supported",
                    k->node->op_type, i, keel_dtype_name((keel_dtype)(*t)->dtype));
  if (dtype >= 0 && (*t)->dtype != dtype)
    return keel_err(KEEL_ERR_SHAPE, "%s: input %d is %s, expected %s", k->node->op_type, i,
                    keel_dtype_name((keel_dtype)(*t)->dtype), keel_dtype_name((keel_dtype)dtype));
  return KEEL_OK;
}

static inline double ld(const void *p, bool dbl, int64_t i) {
  return dbl ? ((const double *)p)[i] : (double)((const float *)p)[i];
}
static inline void st(void *p, bool dbl, int64_t i, double v) {
  if (dbl) ((double *)p)[i] = v;
  else ((float *)p)[i] = (float)v;
}

static keel_status same_shape(const keel_kctx *k, const keel_tensor *a, const char *what,
                              int rank, const int64_t *shape) {
  bool ok = a->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = a->shape[i] == shape[i];
  if (ok) return KEEL_OK;
  char s1[128], s2[128];
  return keel_err(KEEL_ERR_SHAPE, "%s: %s has shape %s, expected %s", k->node->op_type, what,
                  keel_shape_str(a->rank, a->shape, s1, sizeof s1),
                  keel_shape_str(rank, shape, s2, sizeof s2));
}

/* ====================================================== conv geometry */

typedef struct gconv {
  keel_win w;                  /* image sizes in w.in, grid sizes in w.out */
  int64_t n, group, ca, cr;    /* images, groups, channels per group       */
  bool dbl, pointwise;
  size_t es;
  int64_t R;                   /* cr * k_size: rows of a column matrix     */
  int64_t gshape[KEEL_MAX_RANK]; /* the grid tensor's shape                */
} gconv;

/* Kernel sizes from W (checked against kernel_shape) and the attributes. */
static keel_status gc_kernel(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt,
                             keel_win *w) {
  if (x->rank < 3 || wt->rank != x->rank)
    return keel_err(KEEL_ERR_SHAPE, "%s: X has rank %d and W rank %d (need equal, >= 3)",
                    k->node->op_type, x->rank, wt->rank);
  memset(w, 0, sizeof *w);
  w->nd = x->rank - 2;
  int nk;
  const int64_t *ks = keel_k_attr_ints(k, "kernel_shape", &nk);
  if (nk && nk != w->nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: kernel_shape has %d values for %d spatial dims",
                    k->node->op_type, nk, w->nd);
  for (int i = 0; i < w->nd; i++) {
    w->in[i] = x->shape[i + 2], w->k[i] = wt->shape[i + 2];
    if (w->k[i] < 1 || (nk && ks[i] != w->k[i]))
      return keel_err(KEEL_ERR_SHAPE, "%s: W's kernel dim %d is %lld", k->node->op_type, i,
                      (long long)w->k[i]);
  }
  return keel_win_read(k, w);
}

/* Conv: image X (N, C, in), W (M, C/G, k), grid Y (N, M, out).
 * ConvTranspose: grid X (N, C, in), W (C, M/G, k), image Y (N, M, out). */
static keel_status gc_setup(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt, bool tr,
                            gconv *g) {
  memset(g, 0, sizeof *g);
  KEEL_TRY(gc_kernel(k, x, wt, &g->w));
  g->group = keel_k_attr_i(k, "group", 1);
  int64_t c = x->shape[1], m;
  if (g->group < 1 || g->group > INT32_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: group %lld is out of range", k->node->op_type,
                    (long long)g->group);
  g->n = x->shape[0];
  if (!tr) {
    m = wt->shape[0], g->cr = wt->shape[1];
    if (g->cr * g->group != c || m % g->group)
      return keel_err(KEEL_ERR_SHAPE, "%s: X has %lld channels, W is (%lld, %lld) for group %lld",
                      k->node->op_type, (long long)c, (long long)m, (long long)g->cr,
                      (long long)g->group);
    g->ca = m / g->group;
    KEEL_TRY(keel_win_forward(&g->w, false));
  } else {
    if (wt->shape[0] != c || c % g->group)
      return keel_err(KEEL_ERR_SHAPE, "%s: X has %lld channels, W has %lld (group %lld)",
                      k->node->op_type, (long long)c, (long long)wt->shape[0], (long long)g->group);
    g->ca = c / g->group, g->cr = wt->shape[1], m = g->cr * g->group;
    KEEL_TRY(keel_win_transposed(k, &g->w));
    for (int i = 0; i < g->w.nd; i++) { /* X is the grid: swap the roles */
      int64_t t = g->w.in[i];
      g->w.in[i] = g->w.out[i], g->w.out[i] = t;
    }
    KEEL_TRY(keel_win_sizes(&g->w));
  }
  g->gshape[0] = g->n, g->gshape[1] = tr ? c : m;
  memcpy(g->gshape + 2, g->w.out, sizeof(int64_t) * (size_t)g->w.nd);
  g->dbl = x->dtype == KEEL_DOUBLE, g->es = g->dbl ? sizeof(double) : sizeof(float);
  g->R = g->cr * g->w.k_size;
  g->pointwise = g->w.in_size == g->w.out_size;
  for (int i = 0; i < g->w.nd; i++)
    if (g->w.k[i] != 1 || g->w.s[i] != 1 || g->w.pb[i] || g->w.pe[i]) g->pointwise = false;
  return keel_blas_fits(KEEL_MAX(KEEL_MAX(g->R, g->w.out_size), KEEL_MAX(g->ca, g->w.in_size)));
}

static void gc_gemm(const gconv *g, keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N,
                    int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb, bool acc,
                    void *C, int64_t ldc) {
  if (g->dbl)
    keel_gemm_f64(pool, ta, tb, M, N, K, 1.0, A, lda, B, ldb, acc ? 1.0 : 0.0, C, ldc);
  else
    keel_gemm_f32(pool, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f, C, ldc);
}

/* ========================================================= conv jobs */

enum { GC_IMAGE, GC_GRID, GC_WEIGHT };

typedef struct gjob {
  const gconv *g;
  int kind;
  const char *grid, *img, *wt;  /* inputs (the one being computed: NULL) */
  char *out;                    /* image, grid, or per-worker dW parts   */
  char *col;                    /* per-worker column buffers             */
  size_t col_bytes, w_bytes;
  int64_t chunk, nchunks;
  keel_pool *gemm_pool;
} gjob;

static size_t gc_img_off(const gconv *g, int64_t n, int64_t gi) {
  return (size_t)((n * g->group + gi) * g->cr * g->w.in_size) * g->es;
}
static size_t gc_grid_off(const gconv *g, int64_t n, int64_t gi) {
  return (size_t)((n * g->group + gi) * g->ca * g->w.out_size) * g->es;
}

/* image_g = col2im(W_g^T x grid_g), chunk by chunk of grid positions. */
static void gc_image_plane(const gjob *j, int64_t n, int64_t gi, char *col) {
  const gconv *g = j->g;
  int64_t P = g->w.out_size;
  const char *wg = j->wt + (size_t)(gi * g->ca * g->R) * g->es;  /* (ca, cr * k)  */
  const char *gr = j->grid + gc_grid_off(g, n, gi);                /* (ca, P)       */
  char *im = j->out + gc_img_off(g, n, gi);                        /* (cr, in...)   */
  if (g->pointwise) {
    gc_gemm(g, j->gemm_pool, true, false, g->cr, P, g->ca, wg, g->cr, gr, P, false, im, P);
    return;
  }
  memset(im, 0, (size_t)(g->cr * g->w.in_size) * g->es);
  keel_win sw = g->w; /* col2im walks w.in as its grid: swap back */
  memcpy(sw.in, g->w.out, sizeof sw.in);
  memcpy(sw.out, g->w.in, sizeof sw.out);
  sw.in_size = g->w.out_size, sw.out_size = g->w.in_size;
  for (int64_t p0 = 0; p0 < P; p0 += j->chunk) {
    int64_t len = KEEL_MIN(j->chunk, P - p0);
    gc_gemm(g, j->gemm_pool, true, false, g->R, len, g->ca, wg, g->R, gr + (size_t)p0 * g->es, P,
            false, col, len);
    keel_conv_col2im(&sw, g->dbl, col, g->cr, p0, len, im);
  }
}

/* grid_g = W_g x im2col(image_g). */
static void gc_grid_plane(const gjob *j, int64_t n, int64_t gi, char *col) {
  const gconv *g = j->g;
  int64_t P = g->w.out_size;
  const char *wg = j->wt + (size_t)(gi * g->ca * g->R) * g->es;  /* (ca, cr * k)  */
  const char *im = j->img + gc_img_off(g, n, gi);                  /* (cr, in...)   */
  char *gr = j->out + gc_grid_off(g, n, gi);                       /* (ca, P)       */
  if (g->pointwise) {
    gc_gemm(g, j->gemm_pool, false, false, g->ca, P, g->cr, wg, g->R, im, P, false, gr, P);
    return;
  }
  for (int64_t p0 = 0; p0 < P; p0 += j->chunk) {
    int64_t len = KEEL_MIN(j->chunk, P - p0);
    keel_conv_im2col(&g->w, g->dbl, im, g->cr, p0, len, col);
    gc_gemm(g, j->gemm_pool, false, false, g->ca, len, g->R, wg, g->R, col, len, false,
            gr + (size_t)p0 * g->es, P);
  }
}

/* part_g += grid_g[:, chunk] x im2col(image_g)[:, chunk]^T. */
static void gc_weight_chunk(const gjob *j, int64_t n, int64_t gi, int64_t p0, char *col,
                            char *part) {
  const gconv *g = j->g;
  int64_t P = g->w.out_size, len = KEEL_MIN(j->chunk, P - p0);
  keel_assert_internal(len > 0 && gi < g->group && n < g->n);
  const char *im = j->img + gc_img_off(g, n, gi);
  const char *gr = j->grid + gc_grid_off(g, n, gi) + (size_t)p0 * g->es;
  char *pg = part + (size_t)(gi * g->ca * g->R) * g->es;
  if (g->pointwise) {
    gc_gemm(g, j->gemm_pool, false, true, g->ca, g->R, len, gr, P, im + (size_t)p0 * g->es, P,
            true, pg, g->R);
    return;
  }
  keel_conv_im2col(&g->w, g->dbl, im, g->cr, p0, len, col);
  gc_gemm(g, j->gemm_pool, false, true, g->ca, g->R, len, gr, P, col, len, true, pg, g->R);
}

static keel_status gc_task(void *ctx, int64_t t0, int64_t t1, int worker) {
  const gjob *j = ctx;
  const gconv *g = j->g;
  keel_assert_internal(j->gemm_pool == NULL || worker == 0);
  char *col = j->col ? j->col + (size_t)worker * j->col_bytes : NULL;
  for (int64_t t = t0; t < t1; t++) {
    if (j->kind == GC_WEIGHT) {
      int64_t c = t % j->nchunks, r = t / j->nchunks;
      gc_weight_chunk(j, r / g->group, r % g->group, c * j->chunk, col,
                      j->out + (size_t)worker * j->w_bytes);
    } else if (j->kind == GC_IMAGE) {
      gc_image_plane(j, t / g->group, t % g->group, col);
    } else {
      gc_grid_plane(j, t / g->group, t % g->group, col);
    }
  }
  return KEEL_OK;
}

/* Chunk of grid positions: col within budget; for dW also a few tasks per
 * thread (not below 64 columns). */
static void gc_chunks(const gconv *g, int kind, int threads, gjob *j) {
  int64_t P = g->w.out_size, R = KEEL_MAX(g->R, 1);
  int64_t c = g->pointwise && kind != GC_WEIGHT ? P : KEEL_MAX(1, COL_BUDGET / (R * (int64_t)g->es));
  c = KEEL_MIN(c, P);
  int64_t planes = g->n * g->group, want = 4 * (int64_t)threads;
  if (kind == GC_WEIGHT && threads > 1 && planes < want) {
    int64_t per = (want + planes - 1) / planes;
    c = KEEL_MIN(c, KEEL_MAX((P + per - 1) / per, 64));
  }
  j->chunk = KEEL_MAX(c, 1);
  j->nchunks = (P + j->chunk - 1) / j->chunk;
}

/* Runs one of the three products; out: image, grid or dW (zeroed first). */
static keel_status gc_run(keel_kctx *k, const gconv *g, int kind, const void *grid,
                          const void *img, const void *wt, void *out, int64_t out_numel) {
  gjob j = {g, kind, grid, img, wt, NULL, NULL, 0, 0, 0, 0, NULL};
  int threads = keel_pool_threads(k->pool);
  gc_chunks(g, kind, threads, &j);
  int64_t tasks = g->n * g->group * (kind == GC_WEIGHT ? j.nchunks : 1);
  /* Per-worker columns and dW parts cost memory beside the activations a
   * training step keeps: past a quarter of the image and grid the op reads,
   * one worker's buffers are used and the products split over the pool. */
  int64_t act = g->n * g->group * (g->cr * g->w.in_size + g->ca * g->w.out_size) * (int64_t)g->es;
  int64_t per_worker = (g->pointwise ? 0 : g->R * j.chunk * (int64_t)g->es) +
                       (kind == GC_WEIGHT ? out_numel * (int64_t)g->es : 0);
  bool serial = threads > 1 && (tasks < threads || (int64_t)threads * per_worker > act / 4 ||
                                (kind == GC_WEIGHT &&
                                 (int64_t)threads * out_numel * (int64_t)g->es > PARTS_BUDGET));
  int parts = serial ? 1 : threads;
  if (serial) j.gemm_pool = k->pool;
  if (!g->pointwise) {
    void *col;
    j.col_bytes = (size_t)(g->R * j.chunk) * g->es;
    KEEL_TRY(keel_k_scratch_n(k, (int64_t)parts * g->R * j.chunk, g->es, &col));
    j.col = col;
  }
  if (kind != GC_WEIGHT) {
    j.out = out;
    return serial ? gc_task(&j, 0, tasks, 0) : keel_pool_for(k->pool, tasks, 1, gc_task, &j);
  }
  /* dW: one part per worker, summed into out at the end */
  void *pb = out;
  j.w_bytes = (size_t)out_numel * g->es;
  if (parts > 1) KEEL_TRY(keel_k_scratch_n(k, (int64_t)parts * out_numel, g->es, &pb));
  memset(pb, 0, j.w_bytes * (size_t)parts);
  j.out = pb;
  KEEL_TRY(serial ? gc_task(&j, 0, tasks, 0) : keel_pool_for(k->pool, tasks, 1, gc_task, &j));
  if (parts == 1) return KEEL_OK;
  for (int64_t i = 0; i < out_numel; i++) {
    double v = 0;
    for (int p = 0; p < parts; p++) v += ld(pb, g->dbl, (int64_t)p * out_numel + i);
    st(out, g->dbl, i, v);
  }
  return KEEL_OK;
}

/* Inputs (gY, X, W) of every conv gradient kernel; `want` is what the
 * kernel computes: 0 dX, 1 dW. */
static keel_status op_conv_grad(keel_kctx *k, bool tr, int want) {
  const keel_tensor *gy, *x, *wt;
  KEEL_TRY(fd_input(k, 1, -1, &x));
  KEEL_TRY(fd_input(k, 0, x->dtype, &gy));
  KEEL_TRY(fd_input(k, 2, x->dtype, &wt));
  gconv g;
  KEEL_TRY(gc_setup(k, x, wt, tr, &g));
  int64_t ys[KEEL_MAX_RANK];
  memcpy(ys, g.gshape, sizeof ys);
  if (tr) { /* gY is the image */
    ys[1] = g.cr * g.group;
    memcpy(ys + 2, g.w.in, sizeof(int64_t) * (size_t)g.w.nd);
  }
  KEEL_TRY(same_shape(k, gy, "the gradient", x->rank, ys));
  const keel_tensor *like = want ? wt : x;
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, like->rank, like->shape, &o));
  int64_t on = keel_tensor_numel(o);
  if (!on) return KEEL_OK;
  if (!keel_tensor_numel(gy) || !keel_tensor_numel(x) || !keel_tensor_numel(wt)) {
    memset(o->data, 0, keel_tensor_nbytes(o));
    return KEEL_OK;
  }
  if (want == 1)
    return tr ? gc_run(k, &g, GC_WEIGHT, x->data, gy->data, NULL, o->data, on)
              : gc_run(k, &g, GC_WEIGHT, gy->data, x->data, NULL, o->data, on);
  return tr ? gc_run(k, &g, GC_GRID, NULL, gy->data, wt->data, o->data, on)
            : gc_run(k, &g, GC_IMAGE, gy->data, NULL, wt->data, o->data, on);
}

static keel_status op_conv_grad_x(keel_kctx *k) { return op_conv_grad(k, false, 0); }
static keel_status op_conv_grad_w(keel_kctx *k) { return op_conv_grad(k, false, 1); }
static keel_status op_convtr_grad_x(keel_kctx *k) { return op_conv_grad(k, true, 0); }
static keel_status op_convtr_grad_w(keel_kctx *k) { return op_conv_grad(k, true, 1); }

/* ============================================================ pools */

/* The window of MaxPool / AveragePool (as ops/nn/pool/pool.c reads it), or of the
 * Global* ops (attribute global=1): the whole plane. */
static keel_status pg_setup(keel_kctx *k, const keel_tensor *x, keel_win *w) {
  if (x->rank < 3)
    return keel_err(KEEL_ERR_SHAPE, "%s: X must be (N, C, D1, ...), got rank %d",
                    k->node->op_type, x->rank);
  memset(w, 0, sizeof *w);
  w->nd = x->rank - 2;
  bool global = keel_k_attr_i(k, "global", 0) != 0;
  int nk = 0;
  const int64_t *ks = global ? NULL : keel_k_attr_ints(k, "kernel_shape", &nk);
  if (!global && nk != w->nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: kernel_shape has %d values for %d spatial dims",
                    k->node->op_type, nk, w->nd);
  for (int i = 0; i < w->nd; i++) {
    w->in[i] = x->shape[i + 2];
    w->k[i] = global ? KEEL_MAX(w->in[i], 1) : ks[i];
    if (w->k[i] < 1 || w->k[i] > KEEL_WIN_ATTR_MAX)
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: kernel_shape[%d] = %lld is out of range",
                      k->node->op_type, i, (long long)w->k[i]);
  }
  if (global) {
    for (int i = 0; i < w->nd; i++) w->s[i] = w->d[i] = 1;
    return keel_win_forward(w, false);
  }
  KEEL_TRY(keel_win_read(k, w));
  for (int i = 0; i < w->nd && w->auto_pad == KEEL_PAD_NOTSET; i++)
    if (w->pb[i] >= keel_win_ext(w, i) || w->pe[i] >= keel_win_ext(w, i))
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: pads of spatial dim %d reach the kernel span",
                      k->node->op_type, i);
  return keel_win_forward(w, keel_k_attr_i(k, "ceil_mode", 0) != 0);
}

static int64_t pg_cdiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* The plane offsets under the window of output position o (ops/nn/pool/pool.c's
 * win_taps, in the same order); *inside: the taps inside the padded
 * extent (count_include_pad's divisor). */
static int64_t pg_taps(const keel_win *w, const int64_t *o, int64_t *taps, int64_t *inside) {
  int64_t lo[KEEL_MAX_RANK], hi[KEEL_MAX_RANK], s0[KEEL_MAX_RANK], j[KEEL_MAX_RANK];
  int nd = w->nd;
  bool empty = false;
  *inside = 1;
  for (int d = 0; d < nd; d++) {
    int64_t dl = w->d[d];
    s0[d] = o[d] * w->s[d] - w->pb[d];
    lo[d] = KEEL_MAX(0, pg_cdiv(-s0[d], dl));
    hi[d] = KEEL_MIN(w->k[d], pg_cdiv(w->in[d] - s0[d], dl));
    int64_t plo = KEEL_MAX(0, pg_cdiv(-w->pb[d] - s0[d], dl));
    int64_t phi = KEEL_MIN(w->k[d], pg_cdiv(w->in[d] + w->pe[d] - s0[d], dl));
    *inside *= KEEL_MAX(0, phi - plo);
    empty |= hi[d] <= lo[d];
    j[d] = lo[d];
  }
  if (empty) return 0;
  int64_t n = 0;
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off = off * w->in[d] + s0[d] + j[d] * w->d[d];
    taps[n++] = off;
    int d = nd - 1;
    while (d >= 0 && ++j[d] == hi[d]) j[d] = lo[d], d--;
    if (d < 0) return n;
  }
}

typedef struct pg_job {
  const keel_win *w;
  bool max, include_pad, dbl;
  const void *gy, *x;
  void *dx;
  int64_t *taps, max_taps;      /* per-worker tap lists                  */
} pg_job;

/* Planes [c0, c1): dx = 0, then each output's gradient goes to the first
 * maximal tap (Max, the forward's choice; NaN as there) or to every tap
 * divided by the forward's divisor (Average). */
static keel_status pg_task(void *ctx, int64_t c0, int64_t c1, int worker) {
  const pg_job *j = ctx;
  const keel_win *w = j->w;
  int64_t *taps = j->taps + (int64_t)worker * j->max_taps, o[KEEL_MAX_RANK] = {0}, inside;
  for (int64_t c = c0; c < c1; c++)
    for (int64_t i = 0; i < w->in_size; i++) st(j->dx, j->dbl, c * w->in_size + i, 0);
  for (int64_t p = 0; p < w->out_size; p++) {
    int64_t n = pg_taps(w, o, taps, &inside), div = j->include_pad ? inside : n;
    for (int i = w->nd - 1; i >= 0; i--) { /* next output coordinate */
      if (++o[i] < w->out[i]) break;
      o[i] = 0;
    }
    if (!n || (!j->max && !div)) continue;
    for (int64_t c = c0; c < c1; c++) {
      int64_t xp = c * w->in_size;
      double g = ld(j->gy, j->dbl, c * w->out_size + p);
      if (j->max) {
        double best = 0;
        int64_t bi = -1;
        for (int64_t t = 0; t < n; t++) {
          double v = ld(j->x, j->dbl, xp + taps[t]);
          if (bi < 0 || v > best || best != best) best = v, bi = taps[t];
        }
        keel_assert_internal(bi >= 0 && bi < w->in_size);
        st(j->dx, j->dbl, xp + bi, ld(j->dx, j->dbl, xp + bi) + g);
      } else {
        double gd = g / (double)div;
        for (int64_t t = 0; t < n; t++)
          st(j->dx, j->dbl, xp + taps[t], ld(j->dx, j->dbl, xp + taps[t]) + gd);
      }
    }
  }
  return KEEL_OK;
}

/* Inputs (gY, X); output dX. */
static keel_status op_pool_grad(keel_kctx *k, bool max) {
  const keel_tensor *gy, *x;
  KEEL_TRY(fd_input(k, 1, -1, &x));
  KEEL_TRY(fd_input(k, 0, x->dtype, &gy));
  keel_win w;
  KEEL_TRY(pg_setup(k, x, &w));
  int64_t ys[KEEL_MAX_RANK];
  ys[0] = x->shape[0], ys[1] = x->shape[1];
  memcpy(ys + 2, w.out, sizeof(int64_t) * (size_t)w.nd);
  KEEL_TRY(same_shape(k, gy, "the gradient", x->rank, ys));
  keel_tensor *dx;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &dx));
  int64_t planes = x->shape[0] * x->shape[1];
  if (!keel_tensor_numel(dx)) return KEEL_OK;
  pg_job j = {&w, max, keel_k_attr_i(k, "count_include_pad", 0) != 0, x->dtype == KEEL_DOUBLE,
              gy->data, x->data, dx->data, NULL, 1};
  for (int i = 0; i < w.nd; i++) j.max_taps *= KEEL_MIN(w.k[i], w.in[i]);
  int threads = keel_pool_threads(k->pool);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * j.max_taps, sizeof(int64_t), &p));
  j.taps = p;
  return keel_pool_for(k->pool, planes, 1, pg_task, &j);
}

static keel_status op_maxpool_grad(keel_kctx *k) { return op_pool_grad(k, true); }
static keel_status op_avgpool_grad(keel_kctx *k) { return op_pool_grad(k, false); }

/* ======================================================= BatchNorm */

typedef struct bn_job {
  int64_t n, c, l;              /* X viewed as (N, C, L)                 */
  bool dbl, training;
  double eps;
  const void *gy, *x, *scale, *mean, *var;
  void *dx, *dscale, *db;       /* NULL when not asked for               */
} bn_job;

/* Channels [c0, c1): the statistics (the batch's, or the inputs'), then
 * dScale = sum(gY * xhat), dB = sum(gY), and dX: gY * scale * inv, or in
 * training mode PyTorch's scale * inv * (gY - mean(gY) - xhat * mean(gY * xhat)). */
static keel_status bn_task(void *ctx, int64_t c0, int64_t c1, int worker) {
  (void)worker;
  const bn_job *j = ctx;
  double m = (double)(j->n * j->l);
  for (int64_t c = c0; c < c1; c++) {
    double mu = 0, var = 0, sg = 0, sgx = 0;
    if (j->training) {
      for (int64_t n = 0; n < j->n; n++)
        for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) mu += ld(j->x, j->dbl, b + i);
      mu = m > 0 ? mu / m : 0;
      for (int64_t n = 0; n < j->n; n++)
        for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) {
          double d = ld(j->x, j->dbl, b + i) - mu;
          var += d * d;
        }
      var = m > 0 ? var / m : 0;
    } else {
      mu = ld(j->mean, j->dbl, c), var = ld(j->var, j->dbl, c);
    }
    double inv = 1 / sqrt(var + j->eps), sc = ld(j->scale, j->dbl, c);
    for (int64_t n = 0; n < j->n; n++)
      for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) {
        double g = ld(j->gy, j->dbl, b + i);
        sg += g, sgx += g * (ld(j->x, j->dbl, b + i) - mu) * inv;
      }
    if (j->dscale) st(j->dscale, j->dbl, c, sgx);
    if (j->db) st(j->db, j->dbl, c, sg);
    if (!j->dx) continue;
    for (int64_t n = 0; n < j->n; n++)
      for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) {
        double g = ld(j->gy, j->dbl, b + i), v;
        if (j->training) {
          double xh = (ld(j->x, j->dbl, b + i) - mu) * inv;
          v = sc * inv * (g - sg / m - xh * sgx / m);
        } else {
          v = g * sc * inv;
        }
        st(j->dx, j->dbl, b + i, v);
      }
  }
  return KEEL_OK;
}

/* A per-channel input of shape (C). */
static keel_status bn_vec(keel_kctx *k, int i, int dtype, int64_t c, const keel_tensor **t) {
  KEEL_TRY(fd_input(k, i, dtype, t));
  return same_shape(k, *t, i == 2 ? "scale" : i == 3 ? "mean" : "var", 1, &c);
}

/* Inputs (gY, X, scale, mean, var; mean and var unread in training mode,
 * attribute training=1); outputs dX, dScale, dB. */
static keel_status op_bn_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *sc, *mean = NULL, *var = NULL;
  KEEL_TRY(fd_input(k, 1, -1, &x));
  KEEL_TRY(fd_input(k, 0, x->dtype, &gy));
  if (x->rank < 2) return keel_err(KEEL_ERR_SHAPE, "BatchNormGrad: X must be (N, C, ...)");
  KEEL_TRY(same_shape(k, gy, "the gradient", x->rank, x->shape));
  bn_job j = {x->shape[0], x->shape[1], keel_shape_numel(x->rank - 2, x->shape + 2),
              x->dtype == KEEL_DOUBLE, keel_k_attr_i(k, "training", 0) != 0,
              keel_k_attr_f(k, "epsilon", 1e-5f), gy->data, x->data, NULL, NULL, NULL,
              NULL, NULL, NULL};
  KEEL_TRY(bn_vec(k, 2, x->dtype, j.c, &sc));
  if (!j.training) {
    KEEL_TRY(bn_vec(k, 3, x->dtype, j.c, &mean));
    KEEL_TRY(bn_vec(k, 4, x->dtype, j.c, &var));
    j.mean = mean->data, j.var = var->data;
  }
  j.scale = sc->data;
  keel_tensor *o;
  void **dst[3] = {&j.dx, &j.dscale, &j.db};
  for (int i = 0; i < 3; i++) {
    if (!keel_k_has_out(k, i)) continue;
    KEEL_TRY(keel_k_out(k, i, x->dtype, i ? 1 : x->rank, i ? &j.c : x->shape, &o));
    *dst[i] = o->data;
  }
  if (!j.c) return KEEL_OK;
  return keel_pool_for(k->pool, j.c, 1, bn_task, &j);
}

/* ======================================================= LayerNorm */

typedef struct ln_job {
  int64_t rows, d;
  bool dbl;
  double eps;
  const void *gy, *x, *gmean, *ginv;
  const double *scale;          /* expanded to D values                  */
  void *dx;
  double *parts;                /* per worker: dScale then dB (2 D)      */
} ln_job;

/* Rows [r0, r1): with xhat = (x - mean) * inv and g = gY * scale,
 * dX = inv * (g - mean(g) - xhat * mean(g * xhat)), plus the gradients
 * reaching the Mean output (1/D each) and InvStdDev (-inv^3 (x - mean) / D). */
static keel_status ln_task(void *ctx, int64_t r0, int64_t r1, int worker) {
  const ln_job *j = ctx;
  double *ds = j->parts + (size_t)worker * 2 * (size_t)j->d, *db = ds + j->d, D = (double)j->d;
  for (int64_t r = r0; r < r1; r++) {
    int64_t b = r * j->d;
    double mu = 0, var = 0, mg = 0, mgx = 0;
    for (int64_t i = 0; i < j->d; i++) mu += ld(j->x, j->dbl, b + i);
    mu /= D;
    for (int64_t i = 0; i < j->d; i++) {
      double t = ld(j->x, j->dbl, b + i) - mu;
      var += t * t;
    }
    double inv = 1 / sqrt(var / D + j->eps);
    for (int64_t i = 0; i < j->d; i++) {
      double g = ld(j->gy, j->dbl, b + i), xh = (ld(j->x, j->dbl, b + i) - mu) * inv;
      ds[i] += g * xh, db[i] += g;
      mg += g * j->scale[i], mgx += g * j->scale[i] * xh;
    }
    mg /= D, mgx /= D;
    double gm = j->gmean ? ld(j->gmean, j->dbl, r) / D : 0;
    double gi = j->ginv ? -ld(j->ginv, j->dbl, r) * inv * inv * inv / D : 0;
    for (int64_t i = 0; i < j->d; i++) {
      double x = ld(j->x, j->dbl, b + i), xh = (x - mu) * inv;
      double g = ld(j->gy, j->dbl, b + i) * j->scale[i];
      st(j->dx, j->dbl, b + i, inv * (g - mg - xh * mgx) + gm + gi * (x - mu));
    }
  }
  return KEEL_OK;
}

/* scale (broadcastable to X's normalized dims) as D doubles. */
static keel_status ln_scale(keel_kctx *k, const keel_tensor *sc, int r, const int64_t *dims,
                            int64_t d, double *out) {
  int rr;
  int64_t shape[KEEL_MAX_RANK], strides[KEEL_MAX_RANK];
  KEEL_TRY(keel_broadcast_shape(sc->rank, sc->shape, r, dims, &rr, shape));
  if (rr != r || memcmp(shape, dims, sizeof(int64_t) * (size_t)r))
    return keel_err(KEEL_ERR_SHAPE, "%s: Scale does not broadcast to the normalized dims",
                    k->node->op_type);
  keel_broadcast_strides(sc->rank, sc->shape, r, dims, strides);
  for (int64_t i = 0; i < d; i++) {
    int64_t rem = i, off = 0;
    for (int q = r - 1; q >= 0; q--) off += (rem % dims[q]) * strides[q], rem /= dims[q];
    out[i] = ld(sc->data, sc->dtype == KEEL_DOUBLE, off);
  }
  return KEEL_OK;
}

/* An optional per-row gradient (of Mean or InvStdDev): `rows` values. */
static keel_status ln_row_grad(keel_kctx *k, int i, int dtype, int64_t rows, const void **p) {
  *p = NULL;
  if (!keel_k_has_in(k, i)) return KEEL_OK;
  const keel_tensor *t;
  KEEL_TRY(fd_input(k, i, dtype, &t));
  if (keel_tensor_numel(t) != rows)
    return keel_err(KEEL_ERR_SHAPE, "LayerNormGrad: input %d has %lld values for %lld rows", i,
                    (long long)keel_tensor_numel(t), (long long)rows);
  *p = t->data;
  return KEEL_OK;
}

/* Inputs (gY, X, Scale, gMean?, gInvStdDev?), attributes axis, epsilon;
 * outputs dX, dScale and dB, the latter two of X's normalized shape (the
 * rule sums them down to Scale's and B's). */
static keel_status op_ln_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *sc;
  KEEL_TRY(fd_input(k, 1, -1, &x));
  KEEL_TRY(fd_input(k, 0, x->dtype, &gy));
  KEEL_TRY(fd_input(k, 2, x->dtype, &sc));
  KEEL_TRY(same_shape(k, gy, "the gradient", x->rank, x->shape));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", -1), x->rank, "LayerNormGrad: axis", &axis));
  int r = x->rank - axis;
  const int64_t *dims = x->shape + axis;
  ln_job j = {keel_shape_numel(axis, x->shape), keel_shape_numel(r, dims),
              x->dtype == KEEL_DOUBLE, keel_k_attr_f(k, "epsilon", 1e-5f), gy->data, x->data,
              NULL, NULL, NULL, NULL, NULL};
  KEEL_TRY(ln_row_grad(k, 3, x->dtype, j.rows, &j.gmean));
  KEEL_TRY(ln_row_grad(k, 4, x->dtype, j.rows, &j.ginv));
  keel_tensor *dx, *ds, *db;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &dx));
  KEEL_TRY(keel_k_out(k, 1, x->dtype, r, dims, &ds));
  KEEL_TRY(keel_k_out(k, 2, x->dtype, r, dims, &db));
  if (!j.d) return KEEL_OK;
  int threads = keel_pool_threads(k->pool);
  void *p, *q;
  KEEL_TRY(keel_k_scratch_n(k, j.d, sizeof(double), &p));
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * 2 * j.d, sizeof(double), &q));
  KEEL_TRY(ln_scale(k, sc, r, dims, j.d, p));
  memset(q, 0, sizeof(double) * (size_t)(threads * 2 * j.d));
  j.scale = p, j.parts = q, j.dx = dx->data;
  KEEL_TRY(keel_pool_for(k->pool, j.rows, 1, ln_task, &j));
  for (int64_t i = 0; i < j.d; i++) {
    double s = 0, b = 0;
    for (int t = 0; t < threads; t++) s += j.parts[(size_t)t * 2 * (size_t)j.d + (size_t)i],
                                      b += j.parts[(size_t)t * 2 * (size_t)j.d + (size_t)(j.d + i)];
    st(ds->data, j.dbl, i, s);
    st(db->data, j.dbl, i, b);
  }
  return KEEL_OK;
}

/* ============================================ Instance/GroupNorm */

typedef struct gn_job {
  int64_t n, c, g, l;           /* X as (N, G, C / G, L)                 */
  bool dbl;
  double eps;
  const void *gy, *x;
  const double *scale;          /* per channel                           */
  void *dx;
  double *parts;                /* per worker: dScale then dB (2 C)      */
} gn_job;

/* Rows (n, group) [r0, r1): LayerNorm's formula over the group's C / G * L
 * values, with each channel's scale. */
static keel_status gn_task(void *ctx, int64_t r0, int64_t r1, int worker) {
  const gn_job *j = ctx;
  int64_t cg = j->c / j->g, D = cg * j->l;
  double *ds = j->parts + (size_t)worker * 2 * (size_t)j->c, *db = ds + j->c;
  for (int64_t r = r0; r < r1; r++) {
    int64_t b = r * D, c0 = (r % j->g) * cg;
    double mu = 0, var = 0, mg = 0, mgx = 0;
    for (int64_t i = 0; i < D; i++) mu += ld(j->x, j->dbl, b + i);
    mu /= (double)D;
    for (int64_t i = 0; i < D; i++) {
      double t = ld(j->x, j->dbl, b + i) - mu;
      var += t * t;
    }
    double inv = 1 / sqrt(var / (double)D + j->eps);
    for (int64_t i = 0; i < D; i++) {
      int64_t c = c0 + i / j->l;
      double g = ld(j->gy, j->dbl, b + i), xh = (ld(j->x, j->dbl, b + i) - mu) * inv;
      ds[c] += g * xh, db[c] += g;
      mg += g * j->scale[c], mgx += g * j->scale[c] * xh;
    }
    mg /= (double)D, mgx /= (double)D;
    for (int64_t i = 0; i < D; i++) {
      double xh = (ld(j->x, j->dbl, b + i) - mu) * inv;
      double g = ld(j->gy, j->dbl, b + i) * j->scale[c0 + i / j->l];
      st(j->dx, j->dbl, b + i, inv * (g - mg - xh * mgx));
    }
  }
  return KEEL_OK;
}

/* Inputs (gY, X, scale); attributes num_groups (0: InstanceNormalization,
 * one group per channel), per_group (scale and B per group, as
 * GroupNormalization before opset 21), epsilon. Outputs dX, dScale, dB
 * shaped as scale. */
static keel_status op_gn_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *sc;
  KEEL_TRY(fd_input(k, 1, -1, &x));
  KEEL_TRY(fd_input(k, 0, x->dtype, &gy));
  KEEL_TRY(fd_input(k, 2, x->dtype, &sc));
  if (x->rank < 2) return keel_err(KEEL_ERR_SHAPE, "%s: X must be (N, C, ...)", k->node->op_type);
  KEEL_TRY(same_shape(k, gy, "the gradient", x->rank, x->shape));
  int64_t C = x->shape[1], G = keel_k_attr_i(k, "num_groups", 0);
  if (G == 0) G = C;
  if (G < 1 || C % G)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: num_groups %lld does not divide %lld channels",
                    k->node->op_type, (long long)G, (long long)C);
  bool per_group = keel_k_attr_i(k, "per_group", 0) != 0;
  int64_t ns = per_group ? G : C;
  KEEL_TRY(same_shape(k, sc, "scale", 1, &ns));
  gn_job j = {x->shape[0], C, G, keel_shape_numel(x->rank - 2, x->shape + 2),
              x->dtype == KEEL_DOUBLE, keel_k_attr_f(k, "epsilon", 1e-5f), gy->data, x->data,
              NULL, NULL, NULL};
  keel_tensor *dx, *ds, *db;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &dx));
  KEEL_TRY(keel_k_out(k, 1, x->dtype, 1, &ns, &ds));
  KEEL_TRY(keel_k_out(k, 2, x->dtype, 1, &ns, &db));
  int threads = keel_pool_threads(k->pool);
  void *p, *q;
  KEEL_TRY(keel_k_scratch_n(k, C + 1, sizeof(double), &p));
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * 2 * C + 1, sizeof(double), &q));
  double *scale = p, *parts = q;
  for (int64_t c = 0; c < C; c++) scale[c] = ld(sc->data, j.dbl, per_group ? c / (C / G) : c);
  memset(parts, 0, sizeof(double) * (size_t)(threads * 2 * C));
  j.scale = scale, j.parts = parts, j.dx = dx->data;
  if (keel_tensor_numel(x)) KEEL_TRY(keel_pool_for(k->pool, j.n * G, 1, gn_task, &j));
  for (int64_t i = 0; i < ns; i++) st(ds->data, j.dbl, i, 0), st(db->data, j.dbl, i, 0);
  for (int t = 0; t < threads; t++)
    for (int64_t c = 0; c < C; c++) {
      int64_t o = per_group ? c / (C / G) : c;
      st(ds->data, j.dbl, o, ld(ds->data, j.dbl, o) + parts[(size_t)t * 2 * (size_t)C + (size_t)c]);
      st(db->data, j.dbl, o, ld(db->data, j.dbl, o) + parts[(size_t)t * 2 * (size_t)C + (size_t)(C + c)]);
    }
  return KEEL_OK;
}

/* ========================================================= Dropout */

/* Inputs (gY, mask, ratio?, training_mode?); attributes ratio and training
 * stand in for the inputs before opset 12. dX = gY * mask / (1 - ratio)
 * when training with ratio > 0, else gY. */
static keel_status op_dropout_grad(keel_kctx *k) {
  const keel_tensor *gy, *mask;
  KEEL_TRY(fd_input(k, 0, -1, &gy));
  KEEL_TRY(keel_k_in(k, 1, &mask));
  KEEL_TRY(same_shape(k, mask, "the mask", gy->rank, gy->shape));
  double ratio = keel_k_attr_f(k, "ratio", 0.5f);
  int64_t t = keel_k_attr_i(k, "training", 0);
  if (keel_k_has_in(k, 2)) KEEL_TRY(keel_k_in_scalar_f64(k, 2, &ratio));
  if (keel_k_has_in(k, 3)) KEEL_TRY(keel_k_in_scalar_i64(k, 3, &t));
  bool on = t != 0 && ratio != 0;
  if (on && !(ratio > 0 && ratio < 1))
    return keel_err(KEEL_ERR_RUNTIME, "DropoutGrad: ratio %g is outside [0, 1)", ratio);
  keel_tensor *dx;
  KEEL_TRY(keel_k_out(k, 0, gy->dtype, gy->rank, gy->shape, &dx));
  bool dbl = gy->dtype == KEEL_DOUBLE;
  double scale = on ? 1 / (1 - ratio) : 1;
  for (int64_t i = 0; i < keel_tensor_numel(gy); i++) {
    bool keep = !on || keel_elem_get_f64(mask->dtype, mask->data, (size_t)i) != 0;
    st(dx->data, dbl, i, keep ? ld(gy->data, dbl, i) * scale : 0);
  }
  return KEEL_OK;
}

/* ========================================================== Resize */

enum { RG_HALF, RG_PYTORCH, RG_ALIGN, RG_ASYM };
enum { RG_NEAR_FLOOR_PREF, RG_NEAR_CEIL_PREF, RG_NEAR_FLOOR, RG_NEAR_CEIL, RG_NEAR_SIMPLE };

typedef struct rg_axis {
  int64_t in, out, n;           /* sizes; taps per output (1 or 2)       */
  double scale;
  int64_t *idx;                 /* out * n input indices                 */
  double *w;                    /* out * n weights                       */
} rg_axis;

static int rg_pick(const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

/* x_original of output index x (ops/image/image.c's formulas for these modes). */
static double rg_coord(const rg_axis *a, int ctm, int64_t x) {
  double in = (double)a->in, s = a->scale, xf = (double)x, v;
  bool one = a->out == 1;
  switch (ctm) {
    case RG_ALIGN: v = one ? 0 : xf * (in - 1) / (s * in - 1); break;
    case RG_ASYM: v = xf / s; break;
    case RG_PYTORCH: v = one ? 0 : (xf + 0.5) / s - 0.5; break;
    default: v = (xf + 0.5) / s - 0.5; break;
  }
  double lim = 4 * in + 8;
  return v >= -lim ? (v <= lim ? v : lim) : -lim;
}

static int64_t rg_clamp(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* One axis's taps, as the forward picks them. */
static void rg_fill(rg_axis *a, bool linear, int ctm, int nmode, bool exclude) {
  for (int64_t j = 0; j < a->out; j++) {
    double x = rg_coord(a, ctm, j), f = floor(x), r = x - f;
    int64_t *idx = a->idx + j * a->n;
    double *w = a->w + j * a->n;
    if (!linear) {
      int64_t i = (int64_t)f;
      if (r != 0) switch (nmode) {
          case RG_NEAR_FLOOR_PREF: i += r > 0.5; break;
          case RG_NEAR_CEIL_PREF: i += r >= 0.5; break;
          case RG_NEAR_CEIL: i += 1; break;
          case RG_NEAR_SIMPLE: i += a->scale < 1; break;
          default: break;
        }
      idx[0] = rg_clamp(i, a->in), w[0] = 1;
      continue;
    }
    if (r == 0) f -= 1, r = 1;
    int64_t base = (int64_t)f;
    double sum = 0;
    for (int q = 0; q < 2; q++) {
      int64_t pos = base + q;
      double wq = q ? r : 1 - r;
      if (exclude && (pos < 0 || pos >= a->in)) wq = 0;
      idx[q] = rg_clamp(pos, a->in), w[q] = wq, sum += wq;
    }
    if (exclude && sum != 0) w[0] /= sum, w[1] /= sum;
  }
}

typedef struct rg_job {
  const rg_axis *h, *w;
  bool dbl;
  const void *gy;
  void *dx;
} rg_job;

/* Planes [c0, c1): every output's gradient spread over its taps. */
static keel_status rg_task(void *ctx, int64_t c0, int64_t c1, int worker) {
  (void)worker;
  const rg_job *j = ctx;
  const rg_axis *h = j->h, *w = j->w;
  int64_t ip = h->in * w->in, op = h->out * w->out;
  for (int64_t c = c0; c < c1; c++) {
    for (int64_t i = 0; i < ip; i++) st(j->dx, j->dbl, c * ip + i, 0);
    for (int64_t oh = 0; oh < h->out; oh++)
      for (int64_t ow = 0; ow < w->out; ow++) {
        double g = ld(j->gy, j->dbl, c * op + oh * w->out + ow);
        for (int64_t a = 0; a < h->n; a++)
          for (int64_t b = 0; b < w->n; b++) {
            int64_t at = c * ip + h->idx[oh * h->n + a] * w->in + w->idx[ow * w->n + b];
            keel_assert_internal(at >= c * ip && at < (c + 1) * ip);
            double v = g * h->w[oh * h->n + a] * w->w[ow * w->n + b];
            st(j->dx, j->dbl, at, ld(j->dx, j->dbl, at) + v);
          }
      }
  }
  return KEEL_OK;
}

/* Output sizes and scales from scales (input 2) or sizes (input 3), as
 * the forward reads them; N and C must keep their size. */
static keel_status rg_geometry(keel_kctx *k, const keel_tensor *x, rg_axis *ax) {
  const keel_tensor *sc, *sz;
  KEEL_TRY(keel_k_in_opt(k, 2, &sc));
  KEEL_TRY(keel_k_in_opt(k, 3, &sz));
  int64_t nsc = sc ? keel_tensor_numel(sc) : 0, nsz = sz ? keel_tensor_numel(sz) : 0;
  if ((nsc != 0) == (nsz != 0) || (nsc && nsc != 4) || (nsz && nsz != 4))
    return keel_err(KEEL_ERR_SHAPE, "ResizeGrad: needs 4 scales or 4 sizes (got %lld and %lld)",
                    (long long)nsc, (long long)nsz);
  for (int d = 0; d < 4; d++) {
    ax[d].in = x->shape[d];
    if (nsc) {
      ax[d].scale = keel_elem_get_f64(sc->dtype, sc->data, (size_t)d);
      if (!(ax[d].scale > 0) || !isfinite(ax[d].scale) || ax[d].scale * (double)ax[d].in > 1e15)
        return keel_err(KEEL_ERR_SHAPE, "ResizeGrad: scales[%d] = %g is out of range", d, ax[d].scale);
      ax[d].out = (int64_t)floor(ax[d].scale * (double)ax[d].in);
    } else {
      ax[d].out = keel_elem_get_i64(sz->dtype, sz->data, (size_t)d);
      if (ax[d].out < 0) return keel_err(KEEL_ERR_SHAPE, "ResizeGrad: sizes[%d] is negative", d);
      ax[d].scale = ax[d].in ? (double)ax[d].out / (double)ax[d].in : 1;
    }
  }
  if (ax[0].out != ax[0].in || ax[1].out != ax[1].in)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of Resize: only H and W may change size");
  return KEEL_OK;
}

/* Inputs (gY, X, scales?, sizes?) for a 4-D X; attributes mode,
 * coordinate_transformation_mode, nearest_mode, exclude_outside. */
static keel_status op_resize_grad(keel_kctx *k) {
  static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                     "asymmetric", NULL};
  static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil",
                                    "simple", NULL};
  const keel_tensor *gy, *x;
  KEEL_TRY(fd_input(k, 1, -1, &x));
  KEEL_TRY(fd_input(k, 0, x->dtype, &gy));
  if (x->rank != 4) return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of Resize: X must be 4-D");
  const char *mode = keel_k_attr_s(k, "mode", "nearest");
  const char *cs = keel_k_attr_s(k, "coordinate_transformation_mode", "half_pixel");
  const char *ns = keel_k_attr_s(k, "nearest_mode", "round_prefer_floor");
  int ctm = rg_pick(cs, ctms), nmode = rg_pick(ns, nms);
  bool linear = !strcmp(mode, "linear");
  if (ctm < 0 || nmode < 0 || (!linear && strcmp(mode, "nearest")))
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of Resize: mode %s, %s, %s", mode, cs, ns);
  rg_axis ax[4];
  KEEL_TRY(rg_geometry(k, x, ax));
  int64_t ys[4] = {ax[0].out, ax[1].out, ax[2].out, ax[3].out};
  KEEL_TRY(same_shape(k, gy, "the gradient", 4, ys));
  keel_tensor *dx;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, 4, x->shape, &dx));
  if (!keel_tensor_numel(dx)) return KEEL_OK;
  int64_t nt = linear ? 2 : 1;
  void *pi, *pw;
  KEEL_TRY(keel_k_scratch_n(k, (ax[2].out + ax[3].out) * nt + 1, sizeof(int64_t), &pi));
  KEEL_TRY(keel_k_scratch_n(k, (ax[2].out + ax[3].out) * nt + 1, sizeof(double), &pw));
  bool exclude = keel_k_attr_i(k, "exclude_outside", 0) != 0;
  for (int d = 2; d < 4; d++) {
    ax[d].n = nt;
    ax[d].idx = (int64_t *)pi + (d == 3 ? ax[2].out * nt : 0);
    ax[d].w = (double *)pw + (d == 3 ? ax[2].out * nt : 0);
    rg_fill(&ax[d], linear, ctm, nmode, exclude);
  }
  rg_job j = {&ax[2], &ax[3], x->dtype == KEEL_DOUBLE, gy->data, dx->data};
  return keel_pool_for(k->pool, ax[0].in * ax[1].in, 1, rg_task, &j);
}

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_nn[] = {
    {D, "ConvGradX", 1, KEEL_OPSET_MAX, op_conv_grad_x, 0, FD},
    {D, "ConvGradW", 1, KEEL_OPSET_MAX, op_conv_grad_w, 0, FD},
    {D, "ConvTransposeGradX", 1, KEEL_OPSET_MAX, op_convtr_grad_x, 0, FD},
    {D, "ConvTransposeGradW", 1, KEEL_OPSET_MAX, op_convtr_grad_w, 0, FD},
    {D, "MaxPoolGrad", 1, KEEL_OPSET_MAX, op_maxpool_grad, 0, FD},
    {D, "AveragePoolGrad", 1, KEEL_OPSET_MAX, op_avgpool_grad, 0, FD},
    {D, "BatchNormGrad", 1, KEEL_OPSET_MAX, op_bn_grad, 0, FD},
    {D, "LayerNormGrad", 1, KEEL_OPSET_MAX, op_ln_grad, 0, FD},
    {D, "GroupNormGrad", 1, KEEL_OPSET_MAX, op_gn_grad, 0, FD},
    {D, "DropoutGrad", 1, KEEL_OPSET_MAX, op_dropout_grad, 0, FD},
    {D, "ResizeGrad", 1, KEEL_OPSET_MAX, op_resize_grad, 0, FD},
    {0},
};
#undef FD
#undef D
