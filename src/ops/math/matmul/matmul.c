/* matmul.c: the matrix-product family (MatMul, Gemm, MatMulInteger,
 * QLinearMatMul) and the GEMM layer the conv family shares (conv_util.h).
 *
 * MatMul follows numpy: a 1-D operand is promoted to a matrix (and the
 * added dim dropped from the result), the leading "batch" dims broadcast,
 * and each batch is one GEMM. When B is shared by every batch and A is not
 * broadcast, the batches fold into one tall GEMM (the common "activations x
 * weights" case). float and double go to OpenBLAS; integer types run a
 * wrapping i-k-j loop (ONNX leaves overflow undefined, keel must not trap);
 * float16/bfloat16 run in float on staged copies and round once at the end.
 *
 * The quantized ops shift their operands by the zero points into int32,
 * multiply with the int32 loop and, for QLinearMatMul, requantize each
 * output with its row and column scales.
 */
#include <cblas.h>
#include <stdatomic.h>
#include <limits.h>

#include "ops/math/matmul/select.h"
#include "ops/math/matmul/matmul_gpu.h"
#include "ops/math/matmul/matmul_plan.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"
#include "base/pool.h"
#include "ops/dnnl/dnnl_glue.h"

/* ======================================================= GEMM layer */

keel_status keel_blas_fits(int64_t largest) {
  if (largest > INT_MAX)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "a matrix dimension of %lld exceeds what BLAS can index (%d)",
                    (long long)largest, INT_MAX);
  return KEEL_OK;
}

/* BLAS rejects K == 0 (its leading dimensions must be >= 1), so the empty
 * product is done here: C = beta * C, and beta == 0 writes zeros without
 * reading C (which may hold garbage or NaN). */
#define DEF_SCALE(name, T)                                             \
  static void name(int64_t M, int64_t N, T beta, T *C, int64_t ldc) { \
    for (int64_t m = 0; m < M; m++)                                    \
      for (int64_t n = 0; n < N; n++)                                  \
        C[m * ldc + n] = beta == 0 ? (T)0 : beta * C[m * ldc + n];     \
  }
DEF_SCALE(scale_f32, float)
DEF_SCALE(scale_f64, double)

static enum CBLAS_TRANSPOSE blas_t(bool t) { return t ? CblasTrans : CblasNoTrans; }

/* One GEMM call split into panels for the pool: rows of C when M is the
 * larger side, else columns. */
typedef struct gemm_job {
  bool ta, tb, f64, by_rows;
  int64_t M, N, K, lda, ldb, ldc;
  double alpha, beta;
  const void *A, *B;
  void *C;
} gemm_job;

/* One row of A (M == 1, A not transposed) against B: a matrix-vector
 * product, memory bound, which sgemv streams and sgemm packs first. C is
 * cleared first when beta is 0, so that garbage in C never reaches it. */
static void gemv_call(const gemm_job *j, int64_t N, size_t ao, size_t bo, size_t co) {
  if (j->f64) {
    double *c = (double *)j->C + co;
    if (j->beta == 0) memset(c, 0, sizeof(double) * (size_t)N);
    cblas_dgemv(CblasRowMajor, j->tb ? CblasNoTrans : CblasTrans, j->tb ? (blasint)N : (blasint)j->K,
                j->tb ? (blasint)j->K : (blasint)N, j->alpha, (const double *)j->B + bo,
                (blasint)j->ldb, (const double *)j->A + ao, 1, j->beta, c, 1);
  } else {
    float *c = (float *)j->C + co;
    if (j->beta == 0) memset(c, 0, sizeof(float) * (size_t)N);
    cblas_sgemv(CblasRowMajor, j->tb ? CblasNoTrans : CblasTrans, j->tb ? (blasint)N : (blasint)j->K,
                j->tb ? (blasint)j->K : (blasint)N, (float)j->alpha, (const float *)j->B + bo,
                (blasint)j->ldb, (const float *)j->A + ao, 1, (float)j->beta, c, 1);
  }
}

static void gemm_call(const gemm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  int64_t M = m1 - m0, N = n1 - n0;
  /* A's row m is at m*lda (or column m when transposed), B's column n at n
   * (or row n when transposed) */
  size_t ao = (size_t)(j->ta ? m0 : m0 * j->lda), bo = (size_t)(j->tb ? n0 * j->ldb : n0);
  size_t co = (size_t)(m0 * j->ldc + n0);
  if (!j->f64 && keel_dnnl_sgemm(j->ta, j->tb, M, N, j->K, (float)j->alpha,
                                  (const float *)j->A + ao, j->lda, (const float *)j->B + bo,
                                  j->ldb, (float)j->beta, (float *)j->C + co, j->ldc))
    return;
  if (M == 1 && !j->ta) {
    gemv_call(j, N, ao, bo, co);
    return;
  }
  if (j->f64)
    cblas_dgemm(CblasRowMajor, blas_t(j->ta), blas_t(j->tb), (blasint)M, (blasint)N,
                (blasint)j->K, j->alpha, (const double *)j->A + ao, (blasint)j->lda,
                (const double *)j->B + bo, (blasint)j->ldb, j->beta, (double *)j->C + co,
                (blasint)j->ldc);
  else
    cblas_sgemm(CblasRowMajor, blas_t(j->ta), blas_t(j->tb), (blasint)M, (blasint)N,
                (blasint)j->K, (float)j->alpha, (const float *)j->A + ao, (blasint)j->lda,
                (const float *)j->B + bo, (blasint)j->ldb, (float)j->beta, (float *)j->C + co,
                (blasint)j->ldc);
}

static keel_status gemm_panel(void *ctx, int64_t b, int64_t e, int worker) {
  (void)worker;
  const gemm_job *j = ctx;
  if (j->by_rows) gemm_call(j, b, e, 0, j->N);
  else gemm_call(j, 0, j->M, b, e);
  return KEEL_OK;
}

/* One call, or panels over the pool as keel_gemm_split (select.c) says. */
static void gemm_run(keel_pool *pool, gemm_job *j) {
  int64_t grain;
  if (!keel_gemm_split(j->M, j->N, j->K, keel_pool_splits(pool), &j->by_rows, &grain)) {
    gemm_call(j, 0, j->M, 0, j->N);
    return;
  }
  (void)keel_pool_for(pool, j->by_rows ? j->M : j->N, grain, gemm_panel, j);
}

void keel_gemm_f32(keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                   float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    scale_f32(M, N, beta, C, ldc);
    return;
  }
  gemm_job j = {ta, tb, false, false, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
  gemm_run(pool, &j);
}

void keel_gemm_f64(keel_pool *pool, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   double alpha, const double *A, int64_t lda, const double *B, int64_t ldb,
                   double beta, double *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    scale_f64(M, N, beta, C, ldc);
    return;
  }
  gemm_job j = {ta, tb, true, false, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
  gemm_run(pool, &j);
}

void openblas_set_num_threads(int n);
/* OpenBLAS's pthread build (Debian's default) starts its server threads
 * when the library loads, and they spin in sched_yield for about 0.2 s
 * before they sleep, although with one thread set they never get work
 * (perf: a tenth of a 1-thread `keel bench` run's samples, all in its first
 * 0.2 s, on a core keel's own workers want). Its exported shutdown joins
 * them (the OpenMP build's frees its per-thread buffers, made again if
 * ever needed); the serial build and other BLASes lack the symbol (weak:
 * NULL then). */
void blas_thread_shutdown_(void) __attribute__((weak));

void keel_blas_init(void) {
  static atomic_flag done = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&done)) return;
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_) blas_thread_shutdown_();
}

/* i-k-j order so the inner loop streams a row of B into a row of C (it
 * vectorizes); uint32 arithmetic makes the wrap-around defined. */
void keel_gemm_i32(int64_t M, int64_t N, int64_t K, const int32_t *A, int64_t lda,
                   const int32_t *B, int64_t ldb, bool acc, int32_t *C, int64_t ldc) {
  for (int64_t m = 0; m < M; m++) {
    uint32_t *c = (uint32_t *)(C + m * ldc);
    if (!acc)
      for (int64_t n = 0; n < N; n++) c[n] = 0;
    for (int64_t kk = 0; kk < K; kk++) {
      uint32_t a = (uint32_t)A[m * lda + kk];
      if (a == 0) continue; /* zero-point-shifted data is often sparse */
      const uint32_t *b = (const uint32_t *)(B + kk * ldb);
      for (int64_t n = 0; n < N; n++) c[n] += a * b[n];
    }
  }
}

/* ===================================================== MatMul plans */

typedef keel_mm_plan mm_plan; /* matmul_plan.h */

static int64_t mm_count(int n, const int64_t *d) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= d[i];
  return p;
}

keel_status keel_mm_plan_make(const keel_tensor *a, const keel_tensor *b, mm_plan *p) {
  if (a->rank < 1 || b->rank < 1)
    return keel_err(KEEL_ERR_SHAPE, "inputs must have rank >= 1, got ranks %d and %d", a->rank,
                    b->rank);
  p->ra = a->rank == 1 ? 2 : a->rank;
  p->rb = b->rank == 1 ? 2 : b->rank;
  if (a->rank == 1) p->as[0] = 1, p->as[1] = a->shape[0]; /* [K] -> [1, K] */
  else memcpy(p->as, a->shape, sizeof(int64_t) * (size_t)a->rank);
  if (b->rank == 1) p->bs[0] = b->shape[0], p->bs[1] = 1; /* [K] -> [K, 1] */
  else memcpy(p->bs, b->shape, sizeof(int64_t) * (size_t)b->rank);
  p->M = p->as[p->ra - 2], p->K = p->as[p->ra - 1], p->N = p->bs[p->rb - 1];
  if (p->bs[p->rb - 2] != p->K) {
    char sa[128], sb[128];
    return keel_err(KEEL_ERR_SHAPE, "A %s has %lld columns but B %s has %lld rows",
                    keel_shape_str(a->rank, a->shape, sa, sizeof sa), (long long)p->K,
                    keel_shape_str(b->rank, b->shape, sb, sizeof sb),
                    (long long)p->bs[p->rb - 2]);
  }
  KEEL_TRY(keel_broadcast_shape(p->ra - 2, p->as, p->rb - 2, p->bs, &p->nb, p->batch));
  keel_broadcast_strides(p->ra - 2, p->as, p->nb, p->batch, p->sa);
  keel_broadcast_strides(p->rb - 2, p->bs, p->nb, p->batch, p->sb);
  p->nbatch = mm_count(p->nb, p->batch);
  p->na = mm_count(p->ra - 2, p->as);
  p->nbm = mm_count(p->rb - 2, p->bs);
  p->fold = p->nbm == 1 && p->na == p->nbatch;
  p->rank = p->nb;
  memcpy(p->shape, p->batch, sizeof(int64_t) * (size_t)p->nb);
  if (a->rank > 1) p->shape[p->rank++] = p->M;
  if (b->rank > 1) p->shape[p->rank++] = p->N;
  return KEEL_OK;
}

/* Matrix offsets (in matrices) of A and B for output batch i. */
static void mm_offsets(const mm_plan *p, int64_t i, int64_t *oa, int64_t *ob) {
  int64_t a = 0, b = 0;
  for (int d = p->nb - 1; d >= 0; d--) {
    int64_t c = i % p->batch[d];
    i /= p->batch[d];
    a += c * p->sa[d];
    b += c * p->sb[d];
  }
  *oa = a;
  *ob = b;
}

static keel_status mm_check_blas(const mm_plan *p) {
  int64_t m = p->fold ? p->M * p->nbatch : p->M;
  return keel_blas_fits(KEEL_MAX(KEEL_MAX(m, p->N), p->K));
}

/* C (M x N) = A (M x K) * B (K x N), all dense. */
typedef void (*mm_fn)(keel_pool *pool, int64_t M, int64_t N, int64_t K, const void *A,
                      const void *B, void *C);

/* Runs the plan with one typed product per batch (or one folded).
 * A (A's batch..., M, K), B (B's batch..., K, N), C (batch..., M, N). */
typedef struct mm_job {
  const mm_plan *p;
  size_t es;
  mm_fn fn;
  const void *A, *B;
  void *C;
} mm_job;

static void mm_batch(const mm_job *j, keel_pool *pool, int64_t i) {
  const mm_plan *p = j->p;
  size_t ma = (size_t)(p->M * p->K) * j->es, mb = (size_t)(p->K * p->N) * j->es;
  size_t mc = (size_t)(p->M * p->N) * j->es;
  int64_t oa, ob;
  mm_offsets(p, i, &oa, &ob);
  j->fn(pool, p->M, p->N, p->K, (const char *)j->A + (size_t)oa * ma,
        (const char *)j->B + (size_t)ob * mb, (char *)j->C + (size_t)i * mc);
}

static keel_status mm_batches(void *ctx, int64_t b, int64_t e, int worker) {
  (void)worker;
  for (int64_t i = b; i < e; i++) mm_batch(ctx, NULL, i);
  return KEEL_OK;
}

/* Batches of a product with as many batches as splits or more run one per
 * task (each product single-threaded: attention's many small matrices);
 * fewer, larger batches split each product instead. */
static void mm_run(keel_pool *pool, const mm_plan *p, size_t es, mm_fn fn, const void *A,
                   const void *B, void *C) {
  if (p->fold) {
    fn(pool, p->nbatch * p->M, p->N, p->K, A, B, C);
    return;
  }
  mm_job j = {p, es, fn, A, B, C};
  if (p->nbatch >= keel_pool_splits(pool)) {
    (void)keel_pool_for(pool, p->nbatch, 1, mm_batches, &j);
    return;
  }
  for (int64_t i = 0; i < p->nbatch; i++) mm_batch(&j, pool, i);
}

/* ================================================= MatMul products */

static void mm_f32(keel_pool *pool, int64_t M, int64_t N, int64_t K, const void *A,
                   const void *B, void *C) {
  keel_gemm_f32(pool, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}
static void mm_f64(keel_pool *pool, int64_t M, int64_t N, int64_t K, const void *A,
                   const void *B, void *C) {
  keel_gemm_f64(pool, false, false, M, N, K, 1.0, A, K, B, N, 0.0, C, N);
}
static void mm_i32(keel_pool *pool, int64_t M, int64_t N, int64_t K, const void *A,
                   const void *B, void *C) {
  (void)pool;
  keel_gemm_i32(M, N, K, A, K, B, N, false, C, N);
}

/* Integer MatMul: computed modulo 2^width in unsigned arithmetic, which
 * wraps instead of overflowing (products in uint64: narrow unsigned types
 * would promote to int, where they can overflow). */
#define DEF_MM_INT(name, T, U)                                                          \
  static void name(keel_pool *pool, int64_t M, int64_t N, int64_t K, const void *pa,  \
                   const void *pb, void *pc) {                                          \
    (void)pool;                                                                         \
    const T *a = pa, *b = pb;                                                           \
    for (int64_t m = 0; m < M; m++) {                                                   \
      U *c = (U *)pc + m * N;                                                           \
      for (int64_t n = 0; n < N; n++) c[n] = 0;                                         \
      for (int64_t kk = 0; kk < K; kk++) {                                              \
        uint64_t av = (U)a[m * K + kk];                                                 \
        const T *brow = b + kk * N;                                                     \
        for (int64_t n = 0; n < N; n++) c[n] = (U)(c[n] + av * (uint64_t)(U)brow[n]);  \
      }                                                                                 \
    }                                                                                   \
  }
DEF_MM_INT(mm_s8, int8_t, uint8_t)
DEF_MM_INT(mm_s16, int16_t, uint16_t)
DEF_MM_INT(mm_s32, int32_t, uint32_t)
DEF_MM_INT(mm_s64, int64_t, uint64_t)
DEF_MM_INT(mm_u8, uint8_t, uint8_t)
DEF_MM_INT(mm_u16, uint16_t, uint16_t)
DEF_MM_INT(mm_u32, uint32_t, uint32_t)
DEF_MM_INT(mm_u64, uint64_t, uint64_t)

static mm_fn mm_pick(int dt) {
  switch (dt) {
    case KEEL_FLOAT: return mm_f32;
    case KEEL_DOUBLE: return mm_f64;
    case KEEL_INT8: return mm_s8;
    case KEEL_INT16: return mm_s16;
    case KEEL_INT32: return mm_s32;
    case KEEL_INT64: return mm_s64;
    case KEEL_UINT8: return mm_u8;
    case KEEL_UINT16: return mm_u16;
    case KEEL_UINT32: return mm_u32;
    case KEEL_UINT64: return mm_u64;
    default: return NULL;
  }
}

/* ============================================================ MatMul */

keel_status keel_matmul(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                        keel_tensor **yout) {
  if (a->dtype != b->dtype)
    return keel_err(KEEL_ERR_SHAPE, "A is %s but B is %s", keel_dtype_name((keel_dtype)a->dtype),
                    keel_dtype_name((keel_dtype)b->dtype));
  int dt = a->dtype;
  bool half = keel_is_half(dt);
  mm_fn fn = mm_pick(half ? KEEL_FLOAT : dt);
  if (!fn)
    return keel_err(KEEL_ERR_UNSUPPORTED, "MatMul does not support %s",
                    keel_dtype_name((keel_dtype)dt));
  mm_plan p;
  KEEL_TRY(keel_mm_plan_make(a, b, &p));
  if (keel_dtype_is_float(dt)) KEEL_TRY(mm_check_blas(&p));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, dt, p.rank, p.shape, &y));
  *yout = y;
  size_t ny = keel_tensor_nbytes(y);
  if (ny == 0) return KEEL_OK;
  if (p.K == 0) { /* empty sums; A and B may have no buffer at all */
    memset(y->data, 0, ny);
    return KEEL_OK;
  }
  if (!half) {
    mm_run(k->pool, &p, keel_dtype_size((keel_dtype)dt), fn, a->data, b->data, y->data);
    return KEEL_OK;
  }
  keel_tensor fa, fb;
  void *fy;
  KEEL_TRY(keel_k_to_f32(k, a, &fa));
  KEEL_TRY(keel_k_to_f32(k, b, &fb));
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(y), sizeof(float), &fy));
  mm_run(k->pool, &p, sizeof(float), fn, fa.data, fb.data, fy);
  keel_f32_store(fy, y);
  return KEEL_OK;
}

static keel_status op_matmul(keel_kctx *k) {
  const keel_tensor *a, *b;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  keel_tensor *y;
  return keel_matmul(k, a, b, &y);
}

/* ============================================================== Gemm */

typedef keel_gemm_args gemm_args; /* matmul_plan.h */

/* C must broadcast one way onto (M, N). Before opset 7, broadcast=0 asks
 * for an exact (M, N) shape. */
static keel_status gemm_check_c(keel_kctx *k, const keel_tensor *c, gemm_args *g) {
  int64_t mn[2] = {g->M, g->N};
  bool exact = keel_k_opset(k) < 7 && !keel_k_attr_i(k, "broadcast", 0);
  bool ok = exact ? c->rank == 2 : c->rank <= 2;
  for (int i = 0; ok && i < c->rank; i++) {
    int64_t d = c->shape[i], want = mn[2 - c->rank + i];
    ok = d == want || (d == 1 && !exact);
  }
  if (!ok) {
    char sc[128];
    return keel_err(KEEL_ERR_SHAPE, "C %s does not %s the output [%lld,%lld]",
                    keel_shape_str(c->rank, c->shape, sc, sizeof sc),
                    exact ? "match (broadcast=0)" : "broadcast to", (long long)g->M,
                    (long long)g->N);
  }
  keel_broadcast_strides(c->rank, c->shape, 2, mn, g->cst);
  return KEEL_OK;
}

keel_status keel_gemm_setup(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                     const keel_tensor *c, gemm_args *g) {
  if (a->rank != 2 || b->rank != 2)
    return keel_err(KEEL_ERR_SHAPE, "A and B must be matrices, got ranks %d and %d", a->rank,
                    b->rank);
  if (a->dtype != b->dtype || (c && c->dtype != a->dtype))
    return keel_err(KEEL_ERR_SHAPE, "A, B and C must have one type");
  g->ta = keel_k_attr_i(k, "transA", 0) != 0;
  g->tb = keel_k_attr_i(k, "transB", 0) != 0;
  g->alpha = keel_k_attr_f(k, "alpha", 1.0f);
  g->beta = keel_k_attr_f(k, "beta", 1.0f);
  g->M = a->shape[g->ta ? 1 : 0];
  g->K = a->shape[g->ta ? 0 : 1];
  g->N = b->shape[g->tb ? 0 : 1];
  int64_t kb = b->shape[g->tb ? 1 : 0];
  if (kb != g->K)
    return keel_err(KEEL_ERR_SHAPE, "op(A) is [%lld,%lld] but op(B) is [%lld,%lld]",
                    (long long)g->M, (long long)g->K, (long long)kb, (long long)g->N);
  g->c = NULL;
  if (c) KEEL_TRY(gemm_check_c(k, c, g));
  if (c && g->beta != 0) g->c = c;
  return KEEL_OK;
}

/* float/double: Y = broadcast(C), then one BLAS call with beta. */
static keel_status gemm_blas(keel_pool *pool, const gemm_args *g, const keel_tensor *a, const keel_tensor *b,
                             keel_tensor *y) {
  int64_t lda = a->shape[1], ldb = b->shape[1];
  KEEL_TRY(keel_blas_fits(KEEL_MAX(KEEL_MAX(g->M, g->N), KEEL_MAX(g->K, KEEL_MAX(lda, ldb)))));
  if (g->c) KEEL_TRY(keel_bcast_copy(g->c, y));
  float beta = g->c ? g->beta : 0.0f;
  if (y->dtype == KEEL_FLOAT)
    keel_gemm_f32(pool, g->ta, g->tb, g->M, g->N, g->K, g->alpha, a->data, lda, b->data, ldb, beta,
                  y->data, g->N);
  else
    keel_gemm_f64(pool, g->ta, g->tb, g->M, g->N, g->K, g->alpha, a->data, lda, b->data, ldb, beta,
                  y->data, g->N);
  return KEEL_OK;
}

/* Integer Gemm in the unsigned type of the same width (wraps). alpha and
 * beta arrive as floats; they are applied as the integers they must be. */
#define DEF_GEMM_INT(name, T, U)                                                       \
  static void name(const gemm_args *g, const void *pa, const void *pb, void *py) {    \
    const T *a = pa, *b = pb;          /* (M, K) or (K, M); (K, N) or (N, K) */        \
    const T *c = g->c ? g->c->data : NULL; /* broadcast to (M, N) by cst      */        \
    T *y = py;                         /* (M, N)                                */     \
    U al = (U)(int64_t)g->alpha, be = (U)(int64_t)g->beta;                             \
    int64_t M = g->M, N = g->N, K = g->K;                                              \
    for (int64_t m = 0; m < M; m++)                                                    \
      for (int64_t n = 0; n < N; n++) {                                                \
        U acc = 0;                                                                     \
        for (int64_t kk = 0; kk < K; kk++)                                             \
          acc += (U)a[g->ta ? kk * M + m : m * K + kk] * (U)b[g->tb ? n * K + kk : kk * N + n]; \
        U v = acc * al;                                                                \
        if (c) v += (U)c[m * g->cst[0] + n * g->cst[1]] * be;                          \
        y[m * N + n] = (T)v;                                                           \
      }                                                                                \
  }
DEF_GEMM_INT(gemm_s32, int32_t, uint32_t)
DEF_GEMM_INT(gemm_s64, int64_t, uint64_t)
DEF_GEMM_INT(gemm_u32, uint32_t, uint32_t)
DEF_GEMM_INT(gemm_u64, uint64_t, uint64_t)

/* True when v is a whole number an int64 holds (converting anything else
 * to an integer would be undefined). */
static bool is_integral(float v) { return fabsf(v) < 9.0e18f && v == truncf(v); }

static keel_status gemm_int(const gemm_args *g, const keel_tensor *a, const keel_tensor *b,
                            keel_tensor *y) {
  if (!is_integral(g->alpha) || !is_integral(g->beta))
    return keel_err(KEEL_ERR_UNSUPPORTED, "integer Gemm needs integral alpha and beta, got %g, %g",
                    (double)g->alpha, (double)g->beta);
  void (*fn)(const gemm_args *, const void *, const void *, void *) =
      y->dtype == KEEL_INT32    ? gemm_s32
      : y->dtype == KEEL_INT64  ? gemm_s64
      : y->dtype == KEEL_UINT32 ? gemm_u32
                                : gemm_u64;
  fn(g, a->data, b->data, y->data);
  return KEEL_OK;
}

/* float16/bfloat16: the float path on staged copies. */
static keel_status gemm_half(keel_kctx *k, gemm_args *g, const keel_tensor *a,
                             const keel_tensor *b, keel_tensor *y) {
  keel_tensor fa, fb, fc, fy = *y;
  KEEL_TRY(keel_k_to_f32(k, a, &fa));
  KEEL_TRY(keel_k_to_f32(k, b, &fb));
  if (g->c) {
    KEEL_TRY(keel_k_to_f32(k, g->c, &fc));
    g->c = &fc;
  }
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(y), sizeof(float), &p));
  fy.data = p;
  fy.dtype = KEEL_FLOAT;
  fy.buf = NULL;
  KEEL_TRY(gemm_blas(k->pool, g, &fa, &fb, &fy));
  keel_f32_store(p, y);
  return KEEL_OK;
}

static keel_status op_gemm(keel_kctx *k) {
  const keel_tensor *a, *b, *c;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(keel_k_in_opt(k, 2, &c));
  gemm_args g;
  KEEL_TRY(keel_gemm_setup(k, a, b, c, &g));
  int dt = a->dtype;
  bool is_int = dt == KEEL_INT32 || dt == KEEL_INT64 || dt == KEEL_UINT32 || dt == KEEL_UINT64;
  if (!keel_dtype_is_float(dt) && !is_int)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gemm does not support %s",
                    keel_dtype_name((keel_dtype)dt));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, dt, 2, (int64_t[]){g.M, g.N}, &y));
  if (g.M == 0 || g.N == 0) return KEEL_OK;
  if (is_int) return gemm_int(&g, a, b, y);
  if (keel_is_half(dt)) return gemm_half(k, &g, a, b, y);
  return gemm_blas(k->pool, &g, a, b, y);
}

/* ================================================ quantized staging */

/* Strides of a zero point or scale over an operand's promoted shape (r,
 * shape). Allowed: one value; per row of A ([M] or [..., M, 1]) when
 * `rows`; per column of B ([N] or [..., 1, N]) otherwise. NULL: zeros. */
static keel_status q_bcast(const keel_tensor *q, int r, const int64_t *shape, bool rows,
                           const char *what, int64_t *st) {
  memset(st, 0, sizeof(int64_t) * (size_t)r);
  if (!q || keel_tensor_numel(q) == 1) return KEEL_OK;
  int qr = q->rank;
  int64_t qs[KEEL_MAX_RANK];
  memcpy(qs, q->shape, sizeof(int64_t) * (size_t)qr);
  if (qr == 1 && rows) qs[1] = 1, qr = 2; /* [M] means [M, 1] */
  bool ok = qr <= r && (rows ? qs[qr - 1] == 1 : (qr < 2 || qs[qr - 2] == 1));
  for (int i = 0; ok && i < qr; i++) ok = qs[i] == 1 || qs[i] == shape[r - qr + i];
  if (!ok) {
    char s1[128], s2[128];
    return keel_err(KEEL_ERR_SHAPE, "%s %s does not give one value per %s of %s", what,
                    keel_shape_str(q->rank, q->shape, s1, sizeof s1), rows ? "row" : "column",
                    keel_shape_str(r, shape, s2, sizeof s2));
  }
  keel_broadcast_strides(qr, qs, r, shape, st);
  return KEEL_OK;
}

/* Offset into a broadcast operand of element `flat` of shape (r, shape). */
static int64_t bc_offset(int r, const int64_t *shape, const int64_t *st, int64_t flat) {
  int64_t off = 0;
  for (int d = r - 1; d >= 0; d--) {
    off += (flat % shape[d]) * st[d];
    flat /= shape[d];
  }
  return off;
}

/* dst = t - zp as int32 for every element of t (uint8 or int8). */
static keel_status q_shift(keel_kctx *k, const keel_tensor *t, int r, const int64_t *shape,
                           const keel_tensor *zp, bool rows, int32_t **out) {
  if (zp && zp->dtype != t->dtype)
    return keel_err(KEEL_ERR_SHAPE, "zero point is %s but its operand is %s",
                    keel_dtype_name((keel_dtype)zp->dtype), keel_dtype_name((keel_dtype)t->dtype));
  int64_t st[KEEL_MAX_RANK], n = keel_tensor_numel(t);
  KEEL_TRY(q_bcast(zp, r, shape, rows, "zero point", st));
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, n, sizeof(int32_t), &p));
  int32_t *dst = p;
  bool scalar = !zp || keel_tensor_numel(zp) == 1;
  int32_t z = zp && scalar ? (int32_t)keel_elem_get_i64(zp->dtype, zp->data, 0) : 0;
  if (scalar && t->dtype == KEEL_UINT8)
    for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)((const uint8_t *)t->data)[i] - z;
  else if (scalar)
    for (int64_t i = 0; i < n; i++) dst[i] = (int32_t)((const int8_t *)t->data)[i] - z;
  else
    for (int64_t i = 0; i < n; i++)
      dst[i] = (int32_t)(keel_elem_get_i64(t->dtype, t->data, (size_t)i) -
                         keel_elem_get_i64(zp->dtype, zp->data,
                                           (size_t)bc_offset(r, shape, st, i)));
  *out = dst;
  return KEEL_OK;
}

/* ===================================================== MatMulInteger */

keel_status keel_matmul_int32(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                              const keel_tensor *az, const keel_tensor *bz, keel_mm_int *r) {
  if (!keel_is_q8(a->dtype) || !keel_is_q8(b->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "A and B must be uint8 or int8, got %s and %s",
                    keel_dtype_name((keel_dtype)a->dtype), keel_dtype_name((keel_dtype)b->dtype));
  mm_plan p;
  KEEL_TRY(keel_mm_plan_make(a, b, &p));
  r->rank = p.rank;
  memcpy(r->shape, p.shape, sizeof(int64_t) * (size_t)p.rank);
  r->N = p.N;
  r->numel = keel_shape_numel(p.rank, p.shape);
  r->acc = NULL;
  if (r->numel == 0) return KEEL_OK;
  void *acc;
  KEEL_TRY(keel_k_scratch_n(k, r->numel, sizeof(int32_t), &acc));
  r->acc = acc;
  if (p.K == 0) {
    memset(acc, 0, (size_t)r->numel * sizeof(int32_t));
    return KEEL_OK;
  }
  int32_t *sa, *sb;
  KEEL_TRY(q_shift(k, a, p.ra, p.as, az, true, &sa));
  KEEL_TRY(q_shift(k, b, p.rb, p.bs, bz, false, &sb));
  mm_run(k->pool, &p, sizeof(int32_t), mm_i32, sa, sb, r->acc);
  return KEEL_OK;
}

static keel_status op_matmul_integer(keel_kctx *k) {
  const keel_tensor *a, *b, *az, *bz;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(keel_k_in_opt(k, 2, &az));
  KEEL_TRY(keel_k_in_opt(k, 3, &bz));
  keel_mm_int r;
  KEEL_TRY(keel_matmul_int32(k, a, b, az, bz, &r));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_INT32, r.rank, r.shape, &y));
  if (r.numel) memcpy(y->data, r.acc, (size_t)r.numel * sizeof(int32_t));
  return KEEL_OK;
}

/* ===================================================== QLinearMatMul */

/* One scale per row of A (na*M values) or per column of B (nbm*N). */
static keel_status q_scales(keel_kctx *k, const mm_plan *p, const keel_tensor *sc, bool rows,
                            float **out) {
  int r = rows ? p->ra : p->rb;
  const int64_t *shape = rows ? p->as : p->bs;
  int64_t st[KEEL_MAX_RANK], n = rows ? p->na * p->M : p->nbm * p->N;
  if (!keel_dtype_is_float(sc->dtype))
    return keel_err(KEEL_ERR_SHAPE, "scales must be floating point");
  KEEL_TRY(q_bcast(sc, r, shape, rows, "scale", st));
  void *v;
  KEEL_TRY(keel_k_scratch_n(k, n, sizeof(float), &v));
  float *f = v;
  for (int64_t j = 0; j < n; j++) {
    /* row j of A is element (j, 0); column j of B is (j / N, 0, j % N) */
    int64_t flat = rows ? j * p->K : (j / p->N) * p->K * p->N + j % p->N;
    f[j] = (float)keel_elem_get_f64(sc->dtype, sc->data, (size_t)bc_offset(r, shape, st, flat));
  }
  *out = f;
  return KEEL_OK;
}

typedef struct q_out {
  float ys;                  /* y_scale                          */
  int32_t zp, lo, hi;        /* y_zero_point and the type range */
} q_out;

static keel_status q_out_read(keel_kctx *k, int is, int iz, q_out *q, int *dt) {
  const keel_tensor *s, *z;
  KEEL_TRY(keel_k_in(k, is, &s));
  KEEL_TRY(keel_k_in_opt(k, iz, &z));
  if (keel_tensor_numel(s) != 1 || (z && keel_tensor_numel(z) != 1))
    return keel_err(KEEL_ERR_SHAPE, "y_scale and y_zero_point must hold one value each");
  *dt = z ? z->dtype : KEEL_UINT8;
  if (!keel_is_q8(*dt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "output type %s is not uint8 or int8",
                    keel_dtype_name((keel_dtype)*dt));
  q->ys = (float)keel_elem_get_f64(s->dtype, s->data, 0);
  q->zp = z ? (int32_t)keel_elem_get_i64(z->dtype, z->data, 0) : 0;
  q->lo = *dt == KEEL_UINT8 ? 0 : -128;
  q->hi = *dt == KEEL_UINT8 ? 255 : 127;
  return KEEL_OK;
}

/* y[i, m, n] = requant(acc[i, m, n], a_scale[row] * b_scale[col] / y_scale). */
static void q_requant_mm(const mm_plan *p, const int32_t *acc, const float *fa, const float *fb,
                         const q_out *q, keel_tensor *y) {
  int64_t M = p->M, N = p->N;
  for (int64_t i = 0; i < p->nbatch; i++) {
    int64_t oa, ob;
    mm_offsets(p, i, &oa, &ob);
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        int64_t at = (i * M + m) * N + n;
        int32_t v = keel_requant(acc[at], fa[oa * M + m] * fb[ob * N + n] / q->ys, q->zp, q->lo,
                                 q->hi);
        if (y->dtype == KEEL_UINT8) ((uint8_t *)y->data)[at] = (uint8_t)v;
        else ((int8_t *)y->data)[at] = (int8_t)v;
      }
  }
}

static keel_status op_qlinear_matmul(keel_kctx *k) {
  const keel_tensor *a, *as, *az, *b, *bs, *bz;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &as));
  KEEL_TRY(keel_k_in_opt(k, 2, &az));
  KEEL_TRY(keel_k_in(k, 3, &b));
  KEEL_TRY(keel_k_in(k, 4, &bs));
  KEEL_TRY(keel_k_in_opt(k, 5, &bz));
  q_out q;
  int dt;
  KEEL_TRY(q_out_read(k, 6, 7, &q, &dt));
  if (!keel_is_q8(a->dtype) || !keel_is_q8(b->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "a and b must be uint8 or int8, got %s and %s",
                    keel_dtype_name((keel_dtype)a->dtype), keel_dtype_name((keel_dtype)b->dtype));
  mm_plan p;
  KEEL_TRY(keel_mm_plan_make(a, b, &p));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, dt, p.rank, p.shape, &y));
  int64_t ny = keel_tensor_numel(y);
  if (ny == 0) return KEEL_OK;
  if (p.K == 0) { /* no products: every output is the (saturated) zero point */
    int32_t v = keel_requant(0, 0.0f, q.zp, q.lo, q.hi);
    for (int64_t i = 0; i < ny; i++)
      if (dt == KEEL_UINT8) ((uint8_t *)y->data)[i] = (uint8_t)v;
      else ((int8_t *)y->data)[i] = (int8_t)v;
    return KEEL_OK;
  }
  int32_t *sa, *sb;
  float *fa, *fb;
  void *acc;
  KEEL_TRY(q_shift(k, a, p.ra, p.as, az, true, &sa));
  KEEL_TRY(q_shift(k, b, p.rb, p.bs, bz, false, &sb));
  KEEL_TRY(keel_k_scratch_n(k, ny, sizeof(int32_t), &acc));
  KEEL_TRY(q_scales(k, &p, as, true, &fa));
  KEEL_TRY(q_scales(k, &p, bs, false, &fb));
  mm_run(k->pool, &p, sizeof(int32_t), mm_i32, sa, sb, acc);
  q_requant_mm(&p, acc, fa, fb, &q, y);
  return KEEL_OK;
}

/* ============================================================ table */

/* Element-type sets used in the table below. */
#define Q8 (KEEL_T(KEEL_INT8) | KEEL_T(KEEL_UINT8))
#define GEMM_TYPES (KEEL_TS_FLOAT | KEEL_T(KEEL_INT32) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_UINT32) | \
                    KEEL_T(KEEL_UINT64))
const keel_opdef keel_ops_matmul[] = {
    {"", "MatMul", 1, KEEL_OPSET_MAX, op_matmul, 0, KEEL_TS_NUM, keel_gpu_matmul_impls},
    {"", "Gemm", 1, KEEL_OPSET_MAX, op_gemm, 0, GEMM_TYPES, keel_gpu_gemm_impls},
    {"", "MatMulInteger", 10, KEEL_OPSET_MAX, op_matmul_integer, 0, Q8},
    {"", "QLinearMatMul", 10, KEEL_OPSET_MAX, op_qlinear_matmul, 0, Q8},
    {0},
};
#undef GEMM_TYPES
#undef Q8
