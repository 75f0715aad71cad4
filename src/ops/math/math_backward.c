/* grad_math.c: helper kernels for the derivative rules of autodiff/grad_math.c,
 * in the domain "ai.keel.internal":
 *   UnaryGrad(gy, x [, min, max])      dx = gy * f'(x) for the elementwise
 *       activation named by the attribute `op` (its own attributes copied
 *       from the forward node: alpha, beta, gamma, approximate, min, max);
 *   MatMulGrad(gy, A, B) -> (dA, dB)   MatMul's gradients for every rank
 *       (1-D operands, batches, broadcast batch dims summed away), one GEMM
 *       per batch through keel_gemm_f32/f64 with the transposes folded in;
 *   NegativeLogLikelihoodLossGrad(gy, x, target [, weight]) -> dx, with the
 *       forward's reduction and ignore_index.
 * Float32 runs in float, float64 in double. The rules emit ONNX ops where
 * those do the job; these exist where a rule would otherwise need the rank
 * at load (MatMul) or a chain of ten elementwise passes (Gelu, Mish). */
#include <math.h>

#include "base/pool.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

#define FLOAT_DOUBLE (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))

static keel_status fd_input(keel_kctx *k, int i, int dtype, const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if ((*t)->dtype != KEEL_FLOAT && (*t)->dtype != KEEL_DOUBLE)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s (ai.keel.internal): input %d must be float32 or float64",
                    k->node->op_type, i);
  if (dtype >= 0 && (*t)->dtype != dtype)
    return keel_err(KEEL_ERR_SHAPE, "%s: input %d has another element type than input 0",
                    k->node->op_type, i);
  return KEEL_OK;
}

/* ============================================================ UnaryGrad */

enum ug_op {
  UG_SQRT, UG_RECIPROCAL, UG_ABS, UG_ERF, UG_SIN, UG_COS, UG_SOFTSIGN, UG_ELU, UG_SELU,
  UG_LEAKYRELU, UG_GELU, UG_GELU_TANH, UG_HARDSIGMOID, UG_HARDSWISH, UG_SOFTPLUS, UG_MISH,
  UG_CLIP, UG_COUNT
};
static const char *const ug_names[UG_COUNT] = {
    "Sqrt", "Reciprocal", "Abs", "Erf", "Sin", "Cos", "Softsign", "Elu", "Selu", "LeakyRelu",
    "Gelu", "GeluTanh", "HardSigmoid", "HardSwish", "Softplus", "Mish", "Clip"};

typedef struct ug_job {
  int op;
  double alpha, beta, gamma, lo, hi;
  const void *gy, *x;
  void *dx;
} ug_job;

/* f'(x) in double: the reference the float path follows. */
static double ug_deriv(const ug_job *j, double x) {
  switch (j->op) {
    case UG_SQRT: return 0.5 / sqrt(x);
    case UG_RECIPROCAL: return -1.0 / (x * x);
    case UG_ABS: return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case UG_ERF: return 1.1283791670955126 * exp(-x * x);
    case UG_SIN: return cos(x);
    case UG_COS: return -sin(x);
    case UG_SOFTSIGN: { double d = 1 + fabs(x); return 1 / (d * d); }
    case UG_ELU: return x > 0 ? 1.0 : j->alpha * exp(x);
    case UG_SELU: return x > 0 ? j->gamma : j->gamma * j->alpha * exp(x);
    case UG_LEAKYRELU: return x > 0 ? 1.0 : j->alpha; /* at 0: alpha, as PyTorch */
    case UG_GELU: return 0.5 * (1 + erf(x * 0.7071067811865476)) + x * 0.3989422804014327 * exp(-0.5 * x * x);
    case UG_GELU_TANH: {
      double c = 0.7978845608028654, t = tanh(c * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
    }
    case UG_HARDSIGMOID: { double v = j->alpha * x + j->beta; return v > 0 && v < 1 ? j->alpha : 0.0; }
    case UG_HARDSWISH: return x < -3 ? 0.0 : x > 3 ? 1.0 : x / 3 + 0.5;
    case UG_SOFTPLUS: return 1 / (1 + exp(-x));
    case UG_MISH: {
      double sp = fmax(x, 0) + log1p(exp(-fabs(x))), t = tanh(sp);
      return t + x * (1 / (1 + exp(-x))) * (1 - t * t);
    }
    default: return x >= j->lo && x <= j->hi ? 1.0 : 0.0; /* UG_CLIP */
  }
}

/* The same in float (the float32 hot path); `op` is a constant where
 * ug_f32 calls it, so each loop below compiles to one branch-free body. */
static inline float ug_deriv_f(const ug_job *j, int op, float x) {
  switch (op) {
    case UG_SQRT: return 0.5f / sqrtf(x);
    case UG_RECIPROCAL: return -1.0f / (x * x);
    case UG_ABS: return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f;
    case UG_ERF: return 1.1283791670955126f * expf(-x * x);
    case UG_SIN: return cosf(x);
    case UG_COS: return -sinf(x);
    case UG_SOFTSIGN: { float d = 1 + fabsf(x); return 1 / (d * d); }
    case UG_ELU: return x > 0 ? 1.0f : (float)j->alpha * expf(x);
    case UG_SELU: return x > 0 ? (float)j->gamma : (float)(j->gamma * j->alpha) * expf(x);
    case UG_LEAKYRELU: return x > 0 ? 1.0f : (float)j->alpha;
    case UG_GELU: return 0.5f * (1 + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x);
    case UG_GELU_TANH: {
      float c = 0.79788456f, t = tanhf(c * (x + 0.044715f * x * x * x));
      return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * c * (1 + 3 * 0.044715f * x * x);
    }
    case UG_HARDSIGMOID: {
      float v = (float)j->alpha * x + (float)j->beta;
      return v > 0 && v < 1 ? (float)j->alpha : 0.0f;
    }
    case UG_HARDSWISH: return x < -3 ? 0.0f : x > 3 ? 1.0f : x / 3 + 0.5f;
    case UG_SOFTPLUS: return 1 / (1 + expf(-x));
    case UG_MISH: {
      float sp = fmaxf(x, 0) + log1pf(expf(-fabsf(x))), t = tanhf(sp);
      return t + x * (1 / (1 + expf(-x))) * (1 - t * t);
    }
    default: return x >= (float)j->lo && x <= (float)j->hi ? 1.0f : 0.0f; /* UG_CLIP */
  }
}

#define UG_CASE(OP) \
  case OP: for (int64_t i = b; i < e; i++) dx[i] = gy[i] * ug_deriv_f(j, OP, x[i]); break;
static keel_status ug_f32(void *ctx, int64_t b, int64_t e, int w) {
  (void)w;
  const ug_job *j = ctx;
  const float *gy = j->gy, *x = j->x;
  float *dx = j->dx;
  switch (j->op) {
    UG_CASE(UG_SQRT) UG_CASE(UG_RECIPROCAL) UG_CASE(UG_ABS) UG_CASE(UG_ERF) UG_CASE(UG_SIN)
    UG_CASE(UG_COS) UG_CASE(UG_SOFTSIGN) UG_CASE(UG_ELU) UG_CASE(UG_SELU) UG_CASE(UG_LEAKYRELU)
    UG_CASE(UG_GELU) UG_CASE(UG_GELU_TANH) UG_CASE(UG_HARDSIGMOID) UG_CASE(UG_HARDSWISH)
    UG_CASE(UG_SOFTPLUS) UG_CASE(UG_MISH) default: UG_CASE(UG_CLIP)
  }
  return KEEL_OK;
}
#undef UG_CASE

static keel_status ug_f64(void *ctx, int64_t b, int64_t e, int w) {
  (void)w;
  const ug_job *j = ctx;
  const double *gy = j->gy, *x = j->x;
  double *dx = j->dx;
  for (int64_t i = b; i < e; i++) dx[i] = gy[i] * ug_deriv(j, x[i]);
  return KEEL_OK;
}

/* Clip's bounds: inputs 2 and 3 (opset 11+), else the attributes. */
static keel_status ug_bounds(keel_kctx *k, ug_job *j) {
  j->lo = keel_k_attr_f(k, "min", -INFINITY);
  j->hi = keel_k_attr_f(k, "max", INFINITY);
  if (keel_k_has_in(k, 2)) KEEL_TRY(keel_k_in_scalar_f64(k, 2, &j->lo));
  if (keel_k_has_in(k, 3)) KEEL_TRY(keel_k_in_scalar_f64(k, 3, &j->hi));
  return KEEL_OK;
}

static keel_status op_unary_grad(keel_kctx *k) {
  const char *name = keel_k_attr_s(k, "op", "");
  ug_job j = {.op = -1};
  for (int i = 0; i < UG_COUNT; i++)
    if (!strcmp(name, ug_names[i])) j.op = i;
  if (j.op < 0) return keel_err(KEEL_ERR_UNSUPPORTED, "UnaryGrad: unknown op '%s'", name);
  const keel_tensor *gy, *x;
  KEEL_TRY(fd_input(k, 0, -1, &gy));
  KEEL_TRY(fd_input(k, 1, gy->dtype, &x));
  if (keel_tensor_numel(gy) != keel_tensor_numel(x))
    return keel_err(KEEL_ERR_SHAPE, "UnaryGrad(%s): the gradient and the input differ in size", name);
  bool selu = j.op == UG_SELU, hs = j.op == UG_HARDSIGMOID;
  j.alpha = keel_k_attr_f(k, "alpha", selu ? 1.67326319217681884765625f : hs ? 0.2f
                                      : j.op == UG_LEAKYRELU ? 0.01f : 1.0f);
  j.beta = keel_k_attr_f(k, "beta", 0.5f);
  j.gamma = keel_k_attr_f(k, "gamma", 1.05070102214813232421875f);
  if (j.op == UG_CLIP) KEEL_TRY(ug_bounds(k, &j));
  keel_tensor *o;
  KEEL_TRY(keel_k_reuse(k, 0, 0, x->dtype, x->rank, x->shape, &o));
  j.gy = gy->data, j.x = x->data, j.dx = o->data;
  return keel_pool_for(k->pool, keel_tensor_numel(o), 16384, x->dtype == KEEL_FLOAT ? ug_f32 : ug_f64, &j);
}

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
  KEEL_TRY(fd_input(k, 0, -1, &gy));
  KEEL_TRY(fd_input(k, 1, gy->dtype, &a));
  KEEL_TRY(fd_input(k, 2, gy->dtype, &b));
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

/* ================================================ NegativeLogLikelihoodLossGrad */

typedef struct nll_geom {
  int64_t N, C, D;                /* x is [N, C, D...], target [N, D...]     */
  int reduction;                  /* 0 none, 1 sum, 2 mean                   */
  bool has_ignore;
  int64_t ignore;
} nll_geom;

static keel_status nll_geometry(keel_kctx *k, const keel_tensor *x, const keel_tensor *t,
                                const keel_tensor *w, nll_geom *g) {
  if (x->rank < 2 || t->rank != x->rank - 1)
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: input rank %d, target rank %d",
                    x->rank, t->rank);
  g->N = x->shape[0], g->C = x->shape[1], g->D = 1;
  for (int d = 2; d < x->rank; d++) g->D *= x->shape[d];
  bool same = t->shape[0] == g->N;
  for (int d = 2; d < x->rank; d++) same &= t->shape[d - 1] == x->shape[d];
  if (!same) return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: target's shape does not fit the input's");
  if (t->dtype != KEEL_INT64 && t->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: target must be int32 or int64");
  if (w && (w->rank != 1 || w->shape[0] != g->C || w->dtype != x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: weight must be [C] of the input's type");
  const char *red = keel_k_attr_s(k, "reduction", "mean");
  g->reduction = !strcmp(red, "none") ? 0 : !strcmp(red, "sum") ? 1 : !strcmp(red, "mean") ? 2 : -1;
  if (g->reduction < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "NegativeLogLikelihoodLoss: reduction '%s'", red);
  g->has_ignore = keel_k_attr(k, "ignore_index") != NULL;
  g->ignore = keel_k_attr_i(k, "ignore_index", 0);
  return KEEL_OK;
}

static int64_t nll_label(const keel_tensor *t, int64_t i) {
  return t->dtype == KEEL_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* dx[n, c, d] = -w[c] * coef(n, d) where c = target[n, d] (not ignored). */
#define NLL_BODY(T)                                                                       \
  static keel_status nll_##T(const nll_geom *g, const keel_tensor *gy, const keel_tensor *t, \
                             const keel_tensor *w, keel_tensor *o) {                      \
    const T *gv = gy->data, *wv = w ? w->data : NULL;                                     \
    T *dx = o->data;                                                                      \
    int64_t cnt = g->N * g->D;                                                            \
    double wsum = 0;                                                                      \
    for (int64_t i = 0; i < cnt; i++) {                                                   \
      int64_t c = nll_label(t, i);                                                        \
      if (g->has_ignore && c == g->ignore) continue;                                      \
      if (c < 0 || c >= g->C)                                                             \
        return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLoss: target %lld outside [0, %lld)", \
                        (long long)c, (long long)g->C);                                   \
      wsum += wv ? (double)wv[c] : 1.0;                                                   \
    }                                                                                     \
    memset(dx, 0, keel_tensor_nbytes(o));                                                 \
    T scale = g->reduction == 2 ? (T)(1.0 / wsum) : (T)1;                                 \
    for (int64_t i = 0; i < cnt; i++) {                                                   \
      int64_t c = nll_label(t, i), n = i / g->D, d = i % g->D;                            \
      if (g->has_ignore && c == g->ignore) continue;                                      \
      T coef = g->reduction ? gv[0] * scale : gv[i];                                      \
      dx[(n * g->C + c) * g->D + d] = -(wv ? wv[c] : (T)1) * coef;                        \
    }                                                                                     \
    return KEEL_OK;                                                                       \
  }
NLL_BODY(float)
NLL_BODY(double)

static keel_status op_nll_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *t, *w;
  KEEL_TRY(fd_input(k, 0, -1, &gy));
  KEEL_TRY(fd_input(k, 1, gy->dtype, &x));
  KEEL_TRY(keel_k_in(k, 2, &t));
  KEEL_TRY(keel_k_in_opt(k, 3, &w));
  nll_geom g;
  KEEL_TRY(nll_geometry(k, x, t, w, &g));
  int64_t want = g.reduction ? 1 : g.N * g.D;
  if (keel_tensor_numel(gy) != want)
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: the gradient has %lld elements, the loss %lld",
                    (long long)keel_tensor_numel(gy), (long long)want);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o));
  return x->dtype == KEEL_FLOAT ? nll_float(&g, gy, t, w, o) : nll_double(&g, gy, t, w, o);
}

#define D "ai.keel.internal"
const keel_opdef keel_ops_grad_math[] = {
    {D, "UnaryGrad", 1, KEEL_OPSET_MAX, op_unary_grad, 0, FLOAT_DOUBLE},
    {D, "MatMulGrad", 1, KEEL_OPSET_MAX, op_matmul_grad, 0, FLOAT_DOUBLE},
    {D, "NegativeLogLikelihoodLossGrad", 1, KEEL_OPSET_MAX, op_nll_grad, 0, FLOAT_DOUBLE},
    {0},
};
#undef D
#undef FLOAT_DOUBLE
