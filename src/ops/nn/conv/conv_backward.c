/* conv_backward.c: the backward kernels of Conv and ConvTranspose (forward
 * kernels in conv.c; rules in autodiff/grad_nn.c), in the domain
 * "ai.keel.internal":
 *   ConvGradX, ConvGradW              dX and dW of Conv
 *   ConvTransposeGradX/W              dX and dW of ConvTranspose
 *
 * Every kernel takes float and double. The products go through
 * keel_gemm_f32/f64 with conv.c's im2col/col2im, on the session's pool.
 * One picture serves all four kernels: an "image" (Conv's X,
 * ConvTranspose's Y) and a "grid" (Conv's Y, ConvTranspose's X) related by
 * a window (keel_win: image sizes in w.in, grid sizes in w.out) and a
 * weight of (group * ca, cr, k...): ca grid and cr image channels per
 * group. Conv is grid = W x im2col(image); its adjoints are
 *   image = col2im(W^T x grid)           (Conv's dX)
 *   dW    = sum_n grid x im2col(image)^T (Conv's dW; ConvTranspose's dW
 *                                         with grid = X, image = gY)
 *   grid  = W x im2col(image)            (ConvTranspose's dX)
 */
#include "base/pool.h"
#include "ops/common/backward_util.h"
#include "ops/common/conv_util.h"

#define COL_BUDGET ((int64_t)4 << 20)
/* Bound on the per-worker dW partial sums, in bytes: a larger weight has
 * large products, which run one by one, each split over the pool. */
#define PARTS_BUDGET ((int64_t)32 << 20)

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
    for (int p = 0; p < parts; p++) v += keel_bw_ld(pb, g->dbl, (int64_t)p * out_numel + i);
    keel_bw_st(out, g->dbl, i, v);
  }
  return KEEL_OK;
}

/* Inputs (gY, X, W) of every conv gradient kernel; `want` is what the
 * kernel computes: 0 dX, 1 dW. */
static keel_status op_conv_grad(keel_kctx *k, bool tr, int want) {
  const keel_tensor *gy, *x, *wt;
  KEEL_TRY(keel_bw_fd_input(k, 1, -1, &x));
  KEEL_TRY(keel_bw_fd_input(k, 0, x->dtype, &gy));
  KEEL_TRY(keel_bw_fd_input(k, 2, x->dtype, &wt));
  gconv g;
  KEEL_TRY(gc_setup(k, x, wt, tr, &g));
  int64_t ys[KEEL_MAX_RANK];
  memcpy(ys, g.gshape, sizeof ys);
  if (tr) { /* gY is the image */
    ys[1] = g.cr * g.group;
    memcpy(ys + 2, g.w.in, sizeof(int64_t) * (size_t)g.w.nd);
  }
  KEEL_TRY(keel_bw_same_shape(k, gy, "the gradient", x->rank, ys));
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

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_conv[] = {
    {D, "ConvGradX", 1, KEEL_OPSET_MAX, op_conv_grad_x, 0, FD},
    {D, "ConvGradW", 1, KEEL_OPSET_MAX, op_conv_grad_w, 0, FD},
    {D, "ConvTransposeGradX", 1, KEEL_OPSET_MAX, op_convtr_grad_x, 0, FD},
    {D, "ConvTransposeGradW", 1, KEEL_OPSET_MAX, op_convtr_grad_w, 0, FD},
    {0},
};
#undef FD
#undef D
