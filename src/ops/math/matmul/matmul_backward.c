/* matmul_backward.c: the backward kernel of MatMul (forward kernel in
 * matmul.c; rule in autodiff/grad_math.c), in the domain "ai.keel.internal":
 *   MatMulGrad(gy, A, B) -> (dA, dB)   MatMul's gradients for every rank
 *       (1-D operands, batches, broadcast batch dims summed away), one GEMM
 *       per batch through keel_gemm_f32/f64 with the transposes folded in.
 *
 * Float32 runs in float, float64 in double. It exists because the rule
 * would otherwise need the operands' ranks at load.
 */
#include "base/pool.h"
#include "ops/common/backward_util.h"
#include "ops/common/conv_util.h"

/* =========================================================== MatMulGrad */

/* MatMul's operands as batches of matrices: a 1-D A is [1, K], a 1-D B
 * is [K, 1]; batch dims broadcast. */
typedef struct mm_geom {
  int64_t M, K, N, nb;                    /* nb: broadcast batch count       */
  int br;                                 /* batch rank                      */
  int64_t bshape[KEEL_MAX_RANK], sa[KEEL_MAX_RANK], sb[KEEL_MAX_RANK];
  bool a_full, b_full, b_none;            /* A's (B's) batch is all of it; B has none */
} mm_geom;

static keel_status mm_geometry(const keel_tensor *gy, const keel_tensor *a, const keel_tensor *b,
                               mm_geom *g) {
  if (a->rank < 1 || b->rank < 1)
    return keel_err(KEEL_ERR_SHAPE, "MatMulGrad: MatMul's operands have rank >= 1");
  g->M = a->rank == 1 ? 1 : a->shape[a->rank - 2];
  g->K = a->shape[a->rank - 1];
  int64_t kb = b->rank == 1 ? b->shape[0] : b->shape[b->rank - 2];
  g->N = b->rank == 1 ? 1 : b->shape[b->rank - 1];
  if (kb != g->K) return keel_err(KEEL_ERR_SHAPE, "MatMulGrad: inner dims %lld and %lld differ",
                                  (long long)g->K, (long long)kb);
  int ar = a->rank > 2 ? a->rank - 2 : 0, brk = b->rank > 2 ? b->rank - 2 : 0;
  KEEL_TRY(keel_broadcast_shape(ar, a->shape, brk, b->shape, &g->br, g->bshape));
  keel_broadcast_strides(ar, a->shape, g->br, g->bshape, g->sa);
  keel_broadcast_strides(brk, b->shape, g->br, g->bshape, g->sb);
  g->nb = 1;
  for (int d = 0; d < g->br; d++) g->nb *= g->bshape[d];
  int64_t na = 1;
  for (int d = 0; d < ar; d++) na *= a->shape[d];
  int64_t nbb = 1;
  for (int d = 0; d < brk; d++) nbb *= b->shape[d];
  g->a_full = na == g->nb;
  g->b_full = nbb == g->nb;
  g->b_none = brk == 0;
  if (keel_tensor_numel(gy) != g->nb * g->M * g->N)
    return keel_err(KEEL_ERR_SHAPE, "MatMulGrad: the gradient has %lld elements, MatMul's output %lld",
                    (long long)keel_tensor_numel(gy), (long long)(g->nb * g->M * g->N));
  return KEEL_OK;
}

/* Offset (in matrices) of batch i in an operand with broadcast strides st. */
static int64_t mm_batch_off(const mm_geom *g, const int64_t *st, int64_t i) {
  int64_t off = 0;
  for (int d = g->br - 1; d >= 0; d--) {
    off += (i % g->bshape[d]) * st[d];
    i /= g->bshape[d];
  }
  return off;
}

typedef void (*mm_gemm_fn)(keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                           const void *A, int64_t lda, const void *B, int64_t ldb, bool acc,
                           void *C, int64_t ldc);
static void mm_gemm32(keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, const void *B, int64_t ldb, bool acc, void *C,
                      int64_t ldc) {
  keel_gemm_f32(pool, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, acc ? 1.0f : 0.0f, C, ldc);
}
static void mm_gemm64(keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, const void *B, int64_t ldb, bool acc, void *C,
                      int64_t ldc) {
  keel_gemm_f64(pool, ta, tb, M, N, K, 1.0, A, lda, B, ldb, acc ? 1.0 : 0.0, C, ldc);
}

/* How the batches run: stacked into one GEMM each (A fills the batch, B
 * has none), split over the pool (neither broadcasts, enough batches), or
 * one after another accumulating (a broadcast operand's gradient sums). */
enum { MM_STACKED, MM_PARALLEL, MM_LOOP };
static int mm_plan(const mm_geom *g, keel_pool *pool) {
  if (g->a_full && g->b_none) return MM_STACKED;
  if (g->a_full && g->b_full && g->nb >= 2 * keel_pool_splits(pool)) return MM_PARALLEL;
  return MM_LOOP;
}

/* Batches split over the pool when neither operand broadcasts (every
 * batch writes its own dA and dB slices). */
typedef struct mm_job {
  const mm_geom *g;
  mm_gemm_fn gemm;
  size_t es;
  const char *gy, *a, *b;
  char *da, *db;
} mm_job;

static keel_status mm_batches(void *ctx, int64_t begin, int64_t end, int w) {
  (void)w;
  const mm_job *j = ctx;
  int64_t M = j->g->M, K = j->g->K, N = j->g->N;
  size_t es = j->es;
  for (int64_t i = begin; i < end; i++) {
    const char *gi = j->gy + (size_t)(i * M * N) * es, *ai = j->a + (size_t)(i * M * K) * es,
               *bi = j->b + (size_t)(i * K * N) * es;
    if (j->da) j->gemm(NULL, false, true, M, K, N, gi, N, bi, N, false, j->da + (size_t)(i * M * K) * es, K);
    if (j->db) j->gemm(NULL, true, false, K, N, M, ai, K, gi, N, false, j->db + (size_t)(i * K * N) * es, N);
  }
  return KEEL_OK;
}

/* dA[a(i)] += gy_i B_i^T; dB[b(i)] += A_i^T gy_i over the batches i. When A
 * fills the batch and B has none, each is one GEMM over the stacked rows. */
static void mm_grads(keel_pool *pool, const mm_geom *g, mm_gemm_fn gemm, size_t es, const char *gy,
                     const char *a, const char *b, char *da, char *db) {
  int64_t M = g->M, K = g->K, N = g->N;
  int plan = mm_plan(g, pool);
  if (plan == MM_STACKED) {
    if (da) gemm(pool, false, true, g->nb * M, K, N, gy, N, b, N, false, da, K);
    if (db) gemm(pool, true, false, K, N, g->nb * M, a, K, gy, N, false, db, N);
    return;
  }
  if (plan == MM_PARALLEL) {
    mm_job j = {g, gemm, es, gy, a, b, da, db};
    (void)keel_pool_for(pool, g->nb, 1, mm_batches, &j); /* the jobs cannot fail */
    return;
  }
  for (int64_t i = 0; i < g->nb; i++) {
    int64_t oa = mm_batch_off(g, g->sa, i), ob = mm_batch_off(g, g->sb, i);
    const char *gi = gy + (size_t)(i * M * N) * es, *ai = a + (size_t)(oa * M * K) * es,
               *bi = b + (size_t)(ob * K * N) * es;
    if (da) gemm(pool, false, true, M, K, N, gi, N, bi, N, true, da + (size_t)(oa * M * K) * es, K);
    if (db) gemm(pool, true, false, K, N, M, ai, K, gi, N, true, db + (size_t)(ob * K * N) * es, N);
  }
}

static keel_status op_matmul_grad(keel_kctx *k) {
  const keel_tensor *gy, *a, *b;
  KEEL_TRY(keel_bw_fd_input(k, 0, -1, &gy));
  KEEL_TRY(keel_bw_fd_input(k, 1, gy->dtype, &a));
  KEEL_TRY(keel_bw_fd_input(k, 2, gy->dtype, &b));
  mm_geom g;
  KEEL_TRY(mm_geometry(gy, a, b, &g));
  keel_tensor *da = NULL, *db = NULL; /* an omitted output is not computed */
  if (keel_k_has_out(k, 0)) KEEL_TRY(keel_k_out(k, 0, a->dtype, a->rank, a->shape, &da));
  if (keel_k_has_out(k, 1)) KEEL_TRY(keel_k_out(k, 1, b->dtype, b->rank, b->shape, &db));
  bool zero = !g.M || !g.N || !g.K || !g.nb || mm_plan(&g, k->pool) == MM_LOOP;
  if (zero && da && da->data) memset(da->data, 0, keel_tensor_nbytes(da));
  if (zero && db && db->data) memset(db->data, 0, keel_tensor_nbytes(db));
  if (!g.M || !g.N || !g.K || !g.nb) return KEEL_OK;
  bool f32 = a->dtype == KEEL_FLOAT;
  mm_grads(k->pool, &g, f32 ? mm_gemm32 : mm_gemm64, f32 ? sizeof(float) : sizeof(double),
           gy->data, a->data, b->data, da ? da->data : NULL, db ? db->data : NULL);
  return KEEL_OK;
}

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_matmul[] = {
    {D, "MatMulGrad", 1, KEEL_OPSET_MAX, op_matmul_grad, 0, FD},
    {0},
};
#undef FD
#undef D
