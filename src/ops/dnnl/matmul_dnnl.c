/* matmul_dnnl.c: FusedMatMul (ops/math/matmul/matmul_fused.h) on oneDNN's matmul, the
 * implementation "onednn".
 *
 * Which path a run takes, and how the work is cut, is decided in
 * ops/math/matmul/select.c; this file executes it. Prepared once per node:
 * B packed into the layout oneDNN's kernel asks for (a block of the
 * session's allocator; the file's pages under the original go back when no
 * other node reads it). Per row count M, on the first run that meets it:
 * the primitives. A's rows are cut into bands (rows are contiguous in A and
 * in Y, so a band is a whole product of its own); bands of equal height
 * share a primitive. The
 * bias, the residual Z (a sum post-op: the band of Y starts as Z's, or Y
 * takes Z's buffer) and the activation (an eltwise post-op where oneDNN
 * has it, else keel's on the band while it is hot) are applied in the
 * same pass. A Z that broadcasts is added by keel after a plain product.
 * Primitives per M are kept in the node's shape cache (dnnl_glue.h).
 *
 * A node whose first run takes keel's gemv keeps B as the file has it
 * (never packed for those runs, its pages never given back), streamed once
 * per run in small chunks over the pool. Taller products of such a node
 * still go to oneDNN (which then packs its own copy).
 */
#include <stdatomic.h>

#include "base/pool.h"
#include "base/sysmem.h"
#include "onnx/onnx.h"
#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/common/gemv.h"
#include "ops/math/matmul/matmul_fused.h"
#include "ops/math/matmul/select.h"
#include "ops/dnnl/dnnl_glue.h"

#define PRIMS 8                 /* bands of two heights at most, or parts  */

/* key: M, bare. Row mode (one part of B): bands of rows, a primitive per
 * band height; column mode: band q is part q of B's columns over every
 * row, a primitive each. */
typedef struct mm_entry {
  keel_dnnl_entry base;
  bool bare;
  int nbands, nprims;
  int64_t r0[KEEL_MM_MAX_BANDS + 1];    /* band b: rows [r0[b], r0[b+1])            */
  int64_t rows[PRIMS];
  uint8_t prim_of[KEEL_MM_MAX_BANDS];
  keel_dnnl_prim prim[PRIMS];
  const void *w[PRIMS];
  void *w_own[PRIMS];
  bool act_in_post[PRIMS];
  size_t scratch;
} mm_entry;

typedef struct mm_state {
  keel_dnnl_cache cache;
  keel_dnnl_figures *fig;
  int splits;                   /* parts the work is cut into (keel_pool_splits) */
  int64_t K, N;
  bool transb, has_bias;
  bool keep_b;                  /* B's bytes were not given back           */
  keel_act act;
  /* B in parts of columns: one part (row mode) unless the first run's M
   * is too small to give every thread rows (then one part per thread:
   * a classifier's M = 1 product splits its columns) */
  int nparts;                   /* 0 until the first run decides           */
  int64_t n0[KEEL_MM_MAX_PARTS + 1];    /* part q: columns [n0[q], n0[q+1])         */
  keel_dnnl_store store;
  keel_dnnl_packed pk[KEEL_MM_MAX_PARTS]; /* part q packed by its first primitive in
                                   the layout it wants                     */
  int packed;                   /* parts packed so far                     */
  const keel_tensor *orig;      /* B as the file has it, until then        */
  const struct keel_model *model;
  bool drop_orig;
  _Atomic int mode;             /* keel_mm_path: the first run's M decides  */
} mm_state;

/* B's part q as the file has it: a view of the plain [K, N] (or, with
 * transB, [N, K]) matrix. */
static keel_status plain_part(const mm_state *s, int q, dnnl_memory_desc_t *md, const float **data) {
  int64_t nq = s->n0[q + 1] - s->n0[q];
  dnnl_dims_t d = {s->K, nq};
  dnnl_dims_t st_ab = {s->N, 1}, st_ba = {1, s->K};
  *data = (const float *)s->orig->data + (s->transb ? s->n0[q] * s->K : s->n0[q]);
  return keel_dnnl_check(dnnl_memory_desc_init_by_strides(md, 2, d, dnnl_f32, s->transb ? st_ba : st_ab),
                         "plain weights");
}

/* The primitive of `rows` rows by B's part q (a band of rows in row mode,
 * every row in column mode), with B's part in the layout it wants: the
 * part's packed copy, made now when it is the part's first primitive, or
 * (when no kernel as good takes that) a copy of its own. */
static keel_status make_prim(mm_state *s, mm_entry *e, int p, int64_t rows, int q, bool sum) {
  int64_t nq = s->n0[q + 1] - s->n0[q];
  dnnl_dims_t sd = {rows, s->K}, wd = {s->K, nq}, dd = {rows, nq}, ds_ = {s->N, 1}, bd = {1, nq};
  dnnl_memory_desc_t src, dst, wany, bmd;
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&src, 2, sd, dnnl_f32, dnnl_ab), "src"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_strides(&dst, 2, dd, dnnl_f32, ds_), "dst"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&wany, 2, wd, dnnl_f32, dnnl_format_tag_any),
                           "weights"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab), "bias"));
  /* B's layout, in order: the part's packed one, so that every row count
   * shares it; else (the part's first primitive) B plain with
   * keel_matmul_ld's stride where that pads it; else any layout, padded
   * when it is plain. A reference kernel is never worth a layout: the
   * next one is tried. A row count whose kernel does not take the part's
   * layout gets a copy of its own. */
  dnnl_matmul_desc_t md, md_any;
  KEEL_TRY(keel_dnnl_check(dnnl_matmul_desc_init(&md_any, &src, &wany, s->has_bias ? &bmd : NULL,
                                                 &dst),
                           "matmul descriptor"));
  dnnl_primitive_attr_t attr;
  KEEL_TRY(keel_dnnl_attr_post(&attr, &s->act, sum, e->bare, &e->act_in_post[p]));
  keel_status st = KEEL_OK;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_memory_desc_t wpad;
  dnnl_dims_t pad_st = {keel_matmul_ld(nq), 1};
  if (s->pk[q].w) {
    if (dnnl_matmul_desc_init(&md, &src, &s->pk[q].md, s->has_bias ? &bmd : NULL, &dst) ==
        dnnl_success)
      pd = keel_dnnl_pd_fast(&md, attr);
  } else if (pad_st[0] != nq &&
             dnnl_memory_desc_init_by_strides(&wpad, 2, wd, dnnl_f32, pad_st) == dnnl_success &&
             dnnl_matmul_desc_init(&md, &src, &wpad, s->has_bias ? &bmd : NULL, &dst) ==
                 dnnl_success) {
    pd = keel_dnnl_pd_fast(&md, attr);
  }
  if (!pd) {
    st = keel_dnnl_pd_make(&pd, &md_any, attr, "matmul primitive descriptor");
    if (!st && !s->pk[q].w &&
        keel_dnnl_plain_padded(dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &wpad) &&
        dnnl_matmul_desc_init(&md, &src, &wpad, s->has_bias ? &bmd : NULL, &dst) == dnnl_success)
      pd = keel_dnnl_pd_prefer(pd, &md, attr, &wpad);
  }
  dnnl_primitive_attr_destroy(attr);
  if (st) return st;
  const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  e->scratch = KEEL_MAX(e->scratch, keel_dnnl_scratch_bytes(pd));
  dnnl_memory_desc_t plain;
  const float *from = NULL;
  bool packed_now = false;
  st = plain_part(s, q, &plain, &from);
  if (!st)
    st = keel_dnnl_weights(&s->store, &s->pk[q], &plain, from, wq, &e->w[p], &e->w_own[p],
                           &packed_now);
  /* nothing reads the original any more when this node alone did */
  if (!st && packed_now && ++s->packed == s->nparts && s->drop_orig &&
      atomic_load(&s->mode) == KEEL_MM_LIB) {
    keel_model_drop_const(s->model, s->orig, NULL, NULL);
    s->drop_orig = false;
  }
  if (!st) st = keel_dnnl_prim_make(pd, s->fig, &e->prim[p]);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static void entry_free(mm_state *s, mm_entry *e) {
  if (!e) return;
  for (int p = 0; p < PRIMS; p++) {
    keel_dnnl_prim_free(&e->prim[p], s->fig);
    keel_prep_free_counted(e->w_own[p], s->store.heap, s->store.bytes);
  }
  keel_sys_free(e, sizeof *e);
}

static void entry_drop(void *ctx, keel_dnnl_entry *e) { entry_free(ctx, (mm_entry *)e); }

/* Bands as keel_matmul_bands cuts them, equal heights sharing a primitive. */
static void cut_bands(mm_entry *e, int64_t M, int splits) {
  int nb = keel_matmul_bands(M, splits);
  e->nbands = nb, e->nprims = 0;
  for (int b = 0; b <= nb; b++) e->r0[b] = M * b / nb;
  for (int b = 0; b < nb; b++) {
    int64_t rows = e->r0[b + 1] - e->r0[b];
    int p = 0;
    while (p < e->nprims && e->rows[p] != rows) p++;
    if (p == e->nprims) e->rows[e->nprims++] = rows;
    e->prim_of[b] = (uint8_t)p;
  }
}

static keel_status entry_make(void *ctx, const int64_t *key, const void *arg,
                              keel_dnnl_entry **out) {
  mm_state *s = ctx;
  bool sum = *(const bool *)arg;
  int64_t M = key[0];
  if (!s->nparts) { /* the first run decides how B is cut */
    s->nparts = keel_matmul_parts(M, s->N, s->splits);
    for (int q = 0; q <= s->nparts; q++) s->n0[q] = s->N * q / s->nparts;
  }
  mm_entry *e = keel_sys_calloc(1, sizeof *e);
  if (!e) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a matrix product's primitives");
  e->bare = key[1] != 0;
  keel_status st = KEEL_OK;
  if (s->nparts == 1) {
    cut_bands(e, M, s->splits);
    for (int p = 0; p < e->nprims && !st; p++) st = make_prim(s, e, p, e->rows[p], 0, sum);
  } else { /* column mode: band q = part q over every row */
    e->nbands = e->nprims = s->nparts;
    for (int q = 0; q < s->nparts && !st; q++) {
      e->prim_of[q] = (uint8_t)q, e->rows[q] = M;
      st = make_prim(s, e, q, M, q, sum);
    }
  }
  if (st) {
    entry_free(s, e);
    return st;
  }
  *out = &e->base;
  return KEEL_OK;
}

/* ============================================================== run */

typedef struct mm_job {
  const mm_state *s;
  const mm_entry *e;
  const float *a, *bias, *z;    /* z: copied into each band first (sum)    */
  float *y;
  uint8_t *scratch;
} mm_job;

/* Rows [r, r + rows) x columns [c, c + cols) of a row-major [., N]
 * matrix: copies from src, or applies the activation in place. */
static void rect_copy(float *dst, const float *src, int64_t N, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; i++) memcpy(dst + i * N, src + i * N, (size_t)cols * sizeof(float));
}

static keel_status mm_band(void *ctx, int64_t b0, int64_t b1, int worker) {
  const mm_job *j = ctx;
  const mm_entry *e = j->e;
  const mm_state *s = j->s;
  bool cols = s->nparts > 1;
  for (int64_t b = b0; b < b1; b++) {
    int p = e->prim_of[b];
    int64_t r = cols ? 0 : e->r0[b], c = cols ? s->n0[b] : 0;
    int64_t rows = e->rows[p], width = cols ? s->n0[b + 1] - s->n0[b] : s->N;
    float *y = j->y + r * s->N + c;
    if (j->z) rect_copy(y, j->z + r * s->N + c, s->N, rows, width);
    keel_dnnl_op_args o = {j->a + r * s->K,
                           e->w[p], j->bias ? j->bias + c : NULL, y,
                           e->scratch ? j->scratch + (size_t)worker * e->scratch : NULL,
                           e->scratch};
    KEEL_TRY(keel_dnnl_exec_op(e->prim[p].p, &o));
    if (!e->act_in_post[p] && !e->bare)
      for (int64_t i = 0; i < rows; i++) keel_act_apply_fast_f32(&s->act, y + i * s->N, width);
  }
  return KEEL_OK;
}

static keel_status mm_run(keel_kctx *k) {
  mm_state *s = (mm_state *)(uintptr_t)k->prep; /* the shape cache is behind its lock */
  const keel_tensor *a, *b, *bias, *z;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(keel_k_in_opt(k, 2, &bias));
  KEEL_TRY(keel_k_in_opt(k, 3, &z));
  keel_fmm_geom g;
  KEEL_TRY(keel_fmm_geom_of(k, a, b, bias, &g));
  keel_mm_facts f = {g.M, g.N, g.K, s->keep_b};
  int mode = atomic_load(&s->mode);
  keel_mm_path path = keel_matmul_select_path((keel_mm_path)mode, &f);
  if (path == KEEL_MM_SMALL) return keel_op_fused_matmul_ref(k);
  if ((bias != NULL) != s->has_bias)
    return keel_err(KEEL_ERR_INVALID_MODEL, "the bias is %s at run time but was %s at binding",
                    bias ? "given" : "omitted", s->has_bias ? "given" : "omitted");
  /* the first run that is not small sets the node's mode; a racing run
   * that lost takes the winner's */
  if (mode == KEEL_MM_UNDECIDED && !atomic_compare_exchange_strong(&s->mode, &mode, (int)path))
    path = keel_matmul_select_path((keel_mm_path)mode, &f);
  bool gemv = path == KEEL_MM_GEMV;
  int rank = g.yrank;
  int64_t shape[KEEL_MAX_RANK];
  bool same = true;
  memcpy(shape, g.yshape, sizeof(int64_t) * (size_t)rank);
  if (z) KEEL_TRY(keel_fmm_z_shape(&g, z, &rank, shape, &same));
  keel_tensor *y;
  if (z && same) KEEL_TRY(keel_k_reuse(k, 0, 3, KEEL_FLOAT, rank, shape, &y));
  else KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, rank, shape, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  bool bare = z && !same;
  float *c = y->data;
  if (bare) {
    void *t;
    KEEL_TRY(keel_k_scratch_n(k, g.M * g.N, sizeof(float), &t));
    c = t;
  }
  if (gemv) {
    keel_gemv_args ga = {g.M,         g.K, g.N,  a->data, g.K,  s->orig->data, s->transb,
                         bias ? bias->data : NULL, z && same ? z->data : NULL, c, g.N,
                         bare ? NULL : &s->act};
    KEEL_TRY(keel_gemv(k->pool, &ga));
  } else {
    keel_dnnl_entry *ent;
    bool tmp, sum = z && same;
    int64_t key[KEEL_DNNL_KEY] = {g.M, bare};
    KEEL_TRY(keel_dnnl_cache_get(&s->cache, key, &sum, &ent, &tmp));
    mm_entry *e = (mm_entry *)ent;
    mm_job j = {s, e, a->data, bias ? bias->data : NULL,
                sum && y->data != z->data ? z->data : NULL, c, NULL};
    void *sp = NULL;
    keel_status st =
        e->scratch ? keel_k_scratch_n(k, keel_pool_threads(k->pool), e->scratch, &sp) : KEEL_OK;
    j.scratch = sp;
    if (!st) st = keel_pool_for(k->pool, e->nbands, 1, mm_band, &j);
    keel_dnnl_cache_put(&s->cache, ent, tmp);
    KEEL_TRY(st);
  }
  if (bare) {
    keel_bcast_add_f32(c, g.yrank, g.yshape, z, y);
    keel_act_apply_fast_f32(&s->act, y->data, keel_tensor_numel(y));
  }
  return KEEL_OK;
}

/* ========================================================== binding */

static bool mm_supports(const keel_prep_ctx *p) {
  const keel_tensor *b = p->node->n_in > 1 ? p->consts[1] : NULL;
  return !p->no_library && keel_dnnl_available() && b && b->dtype == KEEL_FLOAT && b->rank == 2 &&
         keel_tensor_numel(b) > 0;
}

static void mm_release(void *state, keel_heap *heap) {
  mm_state *s = state;
  if (!s) return;
  keel_dnnl_cache_free(&s->cache);
  for (int q = 0; q < KEEL_MM_MAX_PARTS; q++) keel_prep_free_counted(s->pk[q].w, heap, s->store.bytes);
  keel_sys_free(s, sizeof *s);
}

static keel_status mm_prepare(const keel_prep_ctx *p, void **state) {
  const keel_node *n = p->node;
  const keel_tensor *b = p->consts[1];
  mm_state *s = keel_sys_calloc(1, sizeof *s);
  if (!s) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a matrix product's prepared state");
  s->fig = p->lib;
  s->store = (keel_dnnl_store){p->heap, p->owner, p->bytes};
  keel_dnnl_cache_init(&s->cache, entry_make, entry_drop, s, p->lib);
  s->splits = KEEL_MAX(1, p->splits);
  const keel_attr *tb = keel_node_attr(n, "transB");
  s->transb = tb && tb->i;
  s->K = s->transb ? b->shape[1] : b->shape[0];
  s->N = s->transb ? b->shape[0] : b->shape[1];
  s->has_bias = n->n_in > 2 && n->in_names[2][0];
  keel_status st = keel_act_of(n, &s->act);
  /* B stays as the file has it until the first run picks its parts and
   * their layouts */
  if (st) {
    mm_release(s, p->heap);
    return st;
  }
  const keel_attr *own = keel_node_attr(n, "keel.weights_private");
  s->keep_b = keel_tensor_nbytes(b) <= KEEL_MM_KEEP_B_BYTES;
  s->orig = b, s->model = p->model, s->drop_orig = !s->keep_b && own && own->i && p->model;
  *state = s;
  return KEEL_OK;
}

const keel_impl keel_matmul_fused_dnnl = {
    "onednn", mm_supports, mm_prepare, mm_release, mm_run,
    "B a constant 2-D float matrix and oneDNN allowed; each run: under 2^18 multiply-adds with "
    "a small B on keel's GEMM, at most 4 rows on keel's gemv (when the first run was), else "
    "oneDNN's matmul in bands of rows or column parts of B (ops/math/matmul/select.c)"};
