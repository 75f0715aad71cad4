/* conv_dense.c: group-1 2-D float Conv with a constant W as a blocked
 * product, Y (M, P) = W (M, K) x X (K, P) + B per image, P the output
 * pixels. A 1x1, stride-1, unpadded conv multiplies X itself: in NCHW each
 * of its K = C rows is P contiguous floats. Any other window goes through
 * conv.c's im2col, one column chunk (K = C*kh*kw rows, near 1 MB) at a
 * time, per worker. A tile of MR = 8 output channels x NR = 32 pixels
 * keeps its sixteen 16-float sums in vector registers; each k step is two
 * loads of X, eight broadcasts of W and sixteen multiply-adds. W was
 * regrouped at bind (prepared state) into blocks of MR channels, k-major,
 * so the eight weights of a step are adjacent. K goes in slices of KB
 * rows, the tile's sums going back to Y between slices; the first slice
 * starts from the bias. A pixel tail shorter than NR is copied to a
 * zero-padded panel and computed the same way. A fused activation
 * (passes/pass_fuse.c) is applied to each chunk's rows once its last slice is
 * done, while hot. Tasks (image, column chunk, part of the channel
 * blocks) are spread over the session's pool. Compiled for AVX-512;
 * without it the node keeps conv.c's im2col + GEMM reference (which also
 * handles every other shape and words the errors).
 */
#include <stdatomic.h>

#include "ops/common/activation.h"
#include "ops/common/conv_util.h"
#include "base/pool.h"

#define MR 8                    /* output channels per tile               */
#define NR 32                   /* pixels per tile: two 16-float vectors  */
#define KB 256                  /* rows of X per slice                    */
#define MIN_PIXELS 16            /* fewer: the reference (see pw_run)      */
#define NC 256                  /* pixels per chunk straight from X       */

typedef float pw_v __attribute__((vector_size(16 * sizeof(float))));

/* Prepared state: W (M, C, kh, kw) as [ceil(M/MR)][K = C*kh*kw][MR], the
 * tail rows zero. */
typedef struct pw_prep {
  int64_t m, k, c, kh, kw, nblocks; /* k = c * kh * kw                    */
  const float *w;
} pw_prep;

typedef struct pw_job {
  keel_win w;                   /* the conv's 2 spatial dims              */
  bool cols;                    /* not 1x1 stride 1 unpadded: im2col      */
  int64_t m, k, c, p;           /* channels out; rows of X (c * taps), channels in; output pixels */
  int64_t nc, nchunks, nparts, per_part; /* tasks = images x chunks x parts */
  const float *x, *b;           /* (N, C, H, W), (M) or NULL              */
  const pw_prep *prep;
  float *y;                     /* (N, M, P)                              */
  float *scratch;               /* per worker: KB x NR panel, MR x NR, col (k, nc) */
  size_t per_worker;            /* floats of scratch per worker           */
  keel_act act;
} pw_job;

/* ============================================================= tiles */

/* One tile: rows r < mr of y (stride ldy), NR columns, += (or, when
 * first, bias +) the kn-step product of the packed weights w (kn, MR)
 * and x (kn rows of stride ldx). */
#define PW_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define PW_LD(v, q) memcpy(&(v), (q), sizeof(v))
#define PW_DECL(r) pw_v c##r##a, c##r##b;
#define PW_INIT(r)                                                                      \
  if (first || r >= mr) c##r##a = c##r##b = (pw_v){0} + bias[r];                        \
  else PW_LD(c##r##a, y + r * ldy), PW_LD(c##r##b, y + r * ldy + 16);
#define PW_FMA(r)                                                                       \
  {                                                                                     \
    float f = w[k * MR + r];                                                            \
    c##r##a += f * xa, c##r##b += f * xb;                                               \
  }
#define PW_ST(r)                                                                        \
  if (r < mr) memcpy(y + r * ldy, &c##r##a, sizeof c##r##a),                            \
              memcpy(y + r * ldy + 16, &c##r##b, sizeof c##r##b);
#define PW_TILE_BODY                                                                    \
  PW_ROWS(PW_DECL)                                                                      \
  PW_ROWS(PW_INIT)                                                                      \
  for (int64_t k = 0; k < kn; k++) {                                                    \
    pw_v xa, xb;                                                                        \
    PW_LD(xa, x + k * ldx), PW_LD(xb, x + k * ldx + 16);                                \
    PW_ROWS(PW_FMA)                                                                     \
  }                                                                                     \
  PW_ROWS(PW_ST)

typedef void (*pw_tile_fn)(const float *w, const float *x, int64_t ldx, int64_t kn, float *y,
                           int64_t ldy, const float *bias, int first, int mr);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PW_HAVE_SIMD 1
/* AVX-512 only: the 16 sums need 16 of its 32 vector registers; in AVX2
 * they would be 32 halves and spill (OpenBLAS does better there). */
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void pw_tile_avx512(
    const float *w, const float *x, int64_t ldx, int64_t kn, float *y, int64_t ldy,
    const float *bias, int first, int mr) {
  PW_TILE_BODY
}
#endif

/* NULL without AVX-512: the reference then. */
static pw_tile_fn pw_pick(void) {
#ifdef PW_HAVE_SIMD
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return pw_tile_avx512;
#endif
  return NULL;
}

static _Atomic(pw_tile_fn) g_pw_tile; /* picked once, at the first bind */
static atomic_int g_pw_picked;

/* ============================================================= tasks */

/* Rows [k0, k0+kn) of x, columns [n0, n0+nt) (nt < NR), into the panel
 * xt (kn, NR) with zeros right of nt. */
static void pw_panel(const float *x, int64_t ldx, int64_t kn, int64_t nt, float *xt) {
  for (int64_t k = 0; k < kn; k++) {
    memcpy(xt + k * NR, x + k * ldx, sizeof(float) * (size_t)nt);
    memset(xt + k * NR + nt, 0, sizeof(float) * (size_t)(NR - nt));
  }
}

/* The tail tile through the panel: y's nt columns staged in yt. */
static void pw_tail(pw_tile_fn tile, const float *w, const float *xt, int64_t kn, float *y,
                    int64_t ldy, int64_t nt, const float *bias, int first, int mr, float *yt) {
  for (int r = 0; r < mr && !first; r++)
    memcpy(yt + r * NR, y + r * ldy, sizeof(float) * (size_t)nt);
  tile(w, xt, NR, kn, yt, NR, bias, first, mr);
  for (int r = 0; r < mr; r++) memcpy(y + r * ldy, yt + r * NR, sizeof(float) * (size_t)nt);
}

/* Channel blocks [mb0, mb1) of ncols columns, one K slice [k0, k0+kn):
 * x (K, ncols) with row stride ldx, y (M, ncols) with row stride ldy. */
static void pw_slice(const pw_job *j, pw_tile_fn tile, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int64_t mb0, int64_t mb1, int64_t ncols, int64_t k0,
                     int64_t kn, float *xt, float *yt) {
  int64_t full = ncols / NR * NR, nt = ncols - full;
  int first = k0 == 0;
  if (nt) pw_panel(x + k0 * ldx + full, ldx, kn, nt, xt);
  for (int64_t mb = mb0; mb < mb1; mb++) {
    int mr = (int)KEEL_MIN(MR, j->m - mb * MR);
    float bias[MR] = {0};
    if (j->b) memcpy(bias, j->b + mb * MR, sizeof(float) * (size_t)mr);
    const float *w = j->prep->w + (mb * j->k + k0) * MR;
    float *ym = y + mb * MR * ldy;
    for (int64_t n0 = 0; n0 < full; n0 += NR)
      tile(w, x + k0 * ldx + n0, ldx, kn, ym + n0, ldy, bias, first, mr);
    if (nt) pw_tail(tile, w, xt, kn, ym + full, ldy, nt, bias, first, mr, yt);
  }
}

static keel_status pw_tasks(void *ctx, int64_t b, int64_t e, int worker) {
  const pw_job *j = ctx;
  pw_tile_fn tile = atomic_load_explicit(&g_pw_tile, memory_order_relaxed);
  float *xt = j->scratch + (size_t)worker * j->per_worker, *yt = xt + KB * NR;
  float *col = yt + MR * NR;
  for (int64_t t = b; t < e; t++) {
    int64_t n = t / (j->nchunks * j->nparts), r = t % (j->nchunks * j->nparts);
    int64_t c0 = (r / j->nparts) * j->nc, c1 = KEEL_MIN(j->p, c0 + j->nc);
    int64_t mb0 = (r % j->nparts) * j->per_part;
    int64_t mb1 = KEEL_MIN(j->prep->nblocks, mb0 + j->per_part);
    const float *x = j->x + n * j->c * j->w.in_size + c0; /* X's chunk, row stride p */
    int64_t ldx = j->p;
    if (j->cols) { /* the chunk's columns, (k, c1 - c0) */
      keel_conv_im2col(&j->w, false, j->x + n * j->c * j->w.in_size, j->c, c0, c1 - c0, col);
      x = col, ldx = c1 - c0;
    }
    float *y = j->y + n * j->m * j->p + c0;
    for (int64_t k0 = 0; k0 < j->k; k0 += KB)
      pw_slice(j, tile, x, ldx, y, j->p, mb0, mb1, c1 - c0, k0, KEEL_MIN(KB, j->k - k0), xt, yt);
    for (int64_t m = mb0 * MR; m < KEEL_MIN(j->m, mb1 * MR); m++)
      keel_act_apply_f32(&j->act, y + m * j->p, c1 - c0);
  }
  return KEEL_OK;
}

/* ======================================================= the kernel */

/* The window as the reference reads it (a malformed attribute gives
 * false: the reference then, with its error); kernel_shape, when given,
 * must be W's. */
static bool pw_window(keel_kctx *k, const keel_tensor *x, const pw_prep *prep, keel_win *w) {
  int n;
  const int64_t *v = keel_k_attr_ints(k, "kernel_shape", &n);
  if (n && (n != 2 || v[0] != prep->kh || v[1] != prep->kw)) return false;
  *w = (keel_win){.nd = 2};
  w->in[0] = x->shape[2], w->in[1] = x->shape[3], w->k[0] = prep->kh, w->k[1] = prep->kw;
  if (keel_win_read(k, w) || keel_win_forward(w, false)) {
    keel_err_clear();
    return false;
  }
  return true;
}

/* Column chunk: NC pixels straight from X; through im2col, as many
 * whole tiles as keep col (k, nc) near 1 MB (the L2), one at least. */
static int64_t pw_chunk(const pw_job *j) {
  if (!j->cols) return NC;
  int64_t nc = ((int64_t)1 << 20) / (4 * j->k) / NR * NR;
  return KEEL_MIN(KEEL_MAX(nc, NR), j->p);
}

static keel_status pw_start(keel_kctx *k, pw_job *j, int64_t images) {
  int threads = keel_pool_threads(k->pool), splits = keel_pool_splits(k->pool);
  const pw_prep *prep = j->prep;
  j->nc = pw_chunk(j);
  j->nchunks = (j->p + j->nc - 1) / j->nc;
  int64_t tasks = images * j->nchunks, want = 4 * (int64_t)splits;
  j->nparts = splits > 1 && tasks < want ? KEEL_MIN((want + tasks - 1) / tasks, prep->nblocks) : 1;
  j->per_part = (prep->nblocks + j->nparts - 1) / j->nparts;
  j->nparts = (prep->nblocks + j->per_part - 1) / j->per_part;
  j->per_worker = (size_t)(KB * NR + MR * NR + (j->cols ? j->k * j->nc : 0));
  void *s;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * (int64_t)j->per_worker, sizeof(float), &s));
  j->scratch = s;
  return keel_pool_for(k->pool, tasks * j->nparts, 1, pw_tasks, j);
}

static keel_status pw_run(keel_kctx *k) {
  const keel_tensor *x, *wt, *b;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &wt));
  KEEL_TRY(keel_k_in_opt(k, 2, &b));
  const pw_prep *prep = k->prep;
  pw_job j = {.m = prep->m, .k = prep->k, .c = prep->c, .prep = prep};
  /* anything unusual gets the reference, which also words the errors */
  if (x->dtype != KEEL_FLOAT || x->rank != 4 || wt->rank != 4 || x->shape[1] != prep->c ||
      wt->shape[0] != prep->m || wt->shape[1] != prep->c || wt->shape[2] != prep->kh ||
      wt->shape[3] != prep->kw || (b && (b->rank != 1 || b->shape[0] != prep->m)) ||
      keel_k_attr_i(k, "group", 1) != 1 || (b && b->dtype != KEEL_FLOAT) ||
      !pw_window(k, x, prep, &j.w))
    return keel_op_conv_ref(k);
  const keel_win *w = &j.w;
  j.cols = w->k_size != 1;
  for (int i = 0; i < 2; i++) j.cols |= w->s[i] != 1 || w->pb[i] || w->pe[i];
  j.p = w->out_size, j.x = x->data, j.b = b ? b->data : NULL;
  KEEL_TRY(keel_act_of(k->node, &j.act));
  /* Y is the bias (no channels, or an empty input padded to an output):
   * the reference's case; and a few pixels (a squeeze-excite block's 1x1
   * convs on pooled 1x1 maps): a tile would be mostly padding, the
   * reference's GEMM is a matrix-vector product there. Decided before
   * the output exists: the reference makes its own. */
  bool empty = x->shape[0] == 0 || j.p == 0;
  if (!empty && (j.c == 0 || w->in_size == 0 || j.p < MIN_PIXELS)) return keel_op_conv_ref(k);
  keel_tensor *y;
  int64_t shape[4] = {x->shape[0], prep->m, w->out[0], w->out[1]};
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, shape, &y));
  if (empty) return KEEL_OK;
  j.y = y->data;
  return pw_start(k, &j, x->shape[0]);
}

/* Dense when W is a constant float (M, C, kh, kw) with taps, group 1, and
 * the CPU has AVX-512. */
static bool pw_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  const keel_attr *g = keel_node_attr(n, "group");
  if (!wt || wt->dtype != KEEL_FLOAT || wt->rank != 4 || keel_tensor_numel(wt) == 0) return false;
  if (g && g->i != 1) return false;
  if (!atomic_load(&g_pw_picked)) { /* same on every thread */
    atomic_store(&g_pw_tile, pw_pick());
    atomic_store(&g_pw_picked, 1);
  }
  return atomic_load(&g_pw_tile) != NULL;
}

/* Regroups the constant W, as (M, K = C*kh*kw), into [M/MR][K][MR]. */
static keel_status pw_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *wt = p->consts[1];
  int64_t m = wt->shape[0], kk = wt->shape[1] * wt->shape[2] * wt->shape[3];
  int64_t nb = (m + MR - 1) / MR;
  size_t bytes = sizeof(pw_prep) + KEEL_ALIGN + (size_t)(nb * kk * MR) * sizeof(float);
  void *blk;
  KEEL_TRY(keel_prep_alloc(p, bytes, &blk));
  pw_prep *d = blk;
  float *w = (float *)(void *)((uint8_t *)blk + KEEL_ALIGN);
  *d = (pw_prep){m, kk, wt->shape[1], wt->shape[2], wt->shape[3], nb, w};
  const float *src = wt->data;
  memset(w, 0, (size_t)(nb * kk * MR) * sizeof(float));
  for (int64_t o = 0; o < m; o++)
    for (int64_t i = 0; i < kk; i++) w[((o / MR) * kk + i) * MR + o % MR] = src[o * kk + i];
  *state = d;
  return KEEL_OK;
}

const keel_impl keel_conv_dense = {"dense", pw_supports, pw_prepare, keel_prep_block_release,
                                   pw_run, "one group, a constant W, AVX-512"};
