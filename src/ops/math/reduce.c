/* reduce.c: the Reduce* family (Sum, Mean, Max, Min, Prod, L1, L2, LogSum,
 * LogSumExp, SumSquare), ArgMax / ArgMin, and the softmax family (Softmax,
 * LogSoftmax, Hardmax).
 *
 * Every reduction is planned once per call: the reduced axes are turned
 * into a mask, size-1 dims are dropped and adjacent dims of the same kind
 * are merged, which leaves (kept dims, reduced dims, inner run). The walk
 * then visits each output row once, folding whole contiguous runs into an
 * accumulator row with a typed inner loop (generated per op and dtype by
 * DEF_RED, ggml's compute_forward_<op>_<type> in spirit). Floats accumulate
 * in double; integers wrap in 64 bits (ONNX leaves overflow undefined, keel
 * must not trap). float16 / bfloat16 run the float loops on staged copies
 * and round once. A reduction over an empty set gives the op's identity
 * (0, 1, -inf, +inf, or NaN for the mean), as ONNX 18+ specifies.
 */
#include <math.h>

#include "base/pool.h"
#include "ops/math/math_gpu.h"
#include "ops/common/bcast.h"
#include "ops/common/vmath.h"

/* ==================================================== reduction plan */

typedef struct rplan {
  int nk, nr;                                   /* outer kept / reduced dims  */
  int64_t kd[KEEL_MAX_RANK], ks[KEEL_MAX_RANK]; /* kept sizes, input strides  */
  int64_t rd[KEEL_MAX_RANK], rs[KEEL_MAX_RANK]; /* reduced sizes, strides     */
  int64_t inner;  /* trailing kept run (contiguous in input and output)     */
  int64_t run;    /* inner == 1: trailing reduced run, contiguous           */
  int64_t n_out;  /* output rows (product of kd)                            */
  int64_t n_runs; /* runs folded into each row (product of rd)              */
  int64_t count;  /* input elements reduced into each output element        */
} rplan;

/* Advances a row-major odometer over n dims, keeping *off in step. */
static void odo_step(int n, const int64_t *dims, const int64_t *strides, int64_t *idx,
                     int64_t *off) {
  for (int i = n - 1; i >= 0; i--) {
    *off += strides[i];
    if (++idx[i] < dims[i]) return;
    *off -= strides[i] * dims[i];
    idx[i] = 0;
  }
}

/* An empty input: no element is read, every output is the identity. */
static void plan_empty(int64_t n_out, rplan *p) {
  memset(p, 0, sizeof *p);
  p->inner = n_out;
  p->n_out = n_out > 0;
}

/* Builds the plan for a dense input of `shape` reduced where mask[d]. */
static void plan_make(int rank, const int64_t *shape, const uint8_t *mask, rplan *p) {
  int64_t numel = keel_shape_numel(rank, shape), n_out = 1;
  for (int d = 0; d < rank; d++) n_out *= mask[d] ? 1 : shape[d];
  if (numel == 0) {
    plan_empty(n_out, p);
    return;
  }
  /* merged dims: size, stride, kind (size-1 dims carry no coordinate) */
  int m = 0;
  int64_t md[KEEL_MAX_RANK], ms[KEEL_MAX_RANK], stride = numel;
  uint8_t mk[KEEL_MAX_RANK];
  for (int d = 0; d < rank; d++) {
    stride /= shape[d];
    if (shape[d] == 1) continue;
    if (m > 0 && mk[m - 1] == mask[d]) { /* dense input: same kind merges */
      md[m - 1] *= shape[d];
      ms[m - 1] = stride;
      continue;
    }
    md[m] = shape[d], ms[m] = stride, mk[m] = mask[d];
    m++;
  }
  memset(p, 0, sizeof *p);
  p->inner = p->run = 1;
  if (m > 0 && !mk[m - 1]) p->inner = md[--m];
  else if (m > 0) p->run = md[--m];
  p->n_out = p->n_runs = 1;
  p->count = p->run;
  for (int i = 0; i < m; i++) {
    if (mk[i]) {
      p->rd[p->nr] = md[i], p->rs[p->nr++] = ms[i];
      p->n_runs *= md[i], p->count *= md[i];
    } else {
      p->kd[p->nk] = md[i], p->ks[p->nk++] = ms[i];
      p->n_out *= md[i];
    }
  }
}

/* ============================================== typed reduction loops */

/* One reduction is four functions over an accumulator row `acc` of A:
 * init (identity), vec (fold one input row into the acc row), run (fold a
 * contiguous run into one accumulator, through four interleaved partials
 * so that the loop is not bound by one chained add's latency) and fin
 * (acc -> output). `m` is a per-output shift (only LogSumExp uses it: the
 * max of its set). */
typedef void (*red_init_fn)(void *acc, int64_t n);
typedef void (*red_acc_fn)(void *acc, const void *src, int64_t n, const double *sh);
typedef void (*red_fin_fn)(const void *acc, void *dst, int64_t n, int64_t cnt,
                           const double *sh);
typedef struct redfns {
  red_init_fn init;
  red_acc_fn vec, run;
  red_fin_fn fin;
} redfns;

#define DEF_RED(nm, T, A, TO, INIT, COMB, MERGE, FIN)                                 \
  static void nm##_init(void *acc, int64_t n) {                                       \
    A *ac = acc;                                                                      \
    for (int64_t i = 0; i < n; i++) ac[i] = (A)(INIT(TO));                            \
  }                                                                                   \
  static void nm##_vec(void *acc, const void *src, int64_t n, const double *sh) {     \
    A *ac = acc;                                                                      \
    const T *s = src;                                                                 \
    for (int64_t i = 0; i < n; i++) {                                                 \
      A a = ac[i], x = (A)s[i];                                                       \
      double m = sh ? sh[i] : 0;                                                      \
      (void)m;                                                                        \
      ac[i] = (A)(COMB);                                                              \
    }                                                                                 \
  }                                                                                   \
  static void nm##_run(void *acc, const void *src, int64_t n, const double *sh) {     \
    A p[4] = {*(A *)acc, (A)(INIT(TO)), (A)(INIT(TO)), (A)(INIT(TO))};                \
    const T *s = src;                                                                 \
    double m = sh ? sh[0] : 0;                                                        \
    (void)m;                                                                          \
    int64_t i = 0;                                                                    \
    for (; i + 4 <= n; i += 4)                                                        \
      for (int u = 0; u < 4; u++) {                                                   \
        A a = p[u], x = (A)s[i + u];                                                  \
        p[u] = (A)(COMB);                                                             \
      }                                                                               \
    for (; i < n; i++) {                                                              \
      A a = p[0], x = (A)s[i];                                                        \
      p[0] = (A)(COMB);                                                               \
    }                                                                                 \
    for (int u = 1; u < 4; u++) {                                                     \
      A a = p[0], x = p[u];                                                           \
      p[0] = (A)(MERGE);                                                              \
    }                                                                                 \
    *(A *)acc = p[0];                                                                 \
  }                                                                                   \
  static void nm##_fin(const void *acc, void *dst, int64_t n, int64_t cnt,            \
                       const double *sh) {                                            \
    const A *ac = acc;                                                                \
    TO *d = dst;                                                                      \
    (void)cnt;                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                 \
      A a = ac[i];                                                                    \
      double m = sh ? sh[i] : 0;                                                      \
      (void)m;                                                                        \
      d[i] = (TO)(FIN);                                                               \
    }                                                                                 \
  }

/* Identities, as macros of the output type (the integer extremes). */
#define I_ZERO(T) 0
#define I_ONE(T) 1
#define I_NINF(T) (-INFINITY)
#define I_PINF(T) INFINITY
#define I_SMIN(T) (-(int64_t)((1ull << (8 * sizeof(T) - 1)) - 1) - 1)
#define I_SMAX(T) ((int64_t)((1ull << (8 * sizeof(T) - 1)) - 1))
#define I_UMAX(T) ((uint64_t)(T)~0ull)

/* double -> int64, saturating (NaN -> 0): C's plain cast is undefined out
 * of range, and log(0) = -inf is an ordinary result here. */
static inline int64_t d2i(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return INT64_MAX;
  if (v <= -9.2e18) return INT64_MIN;
  return (int64_t)v;
}

/* Generators per type class: F (float, double; A = double), S / U (signed
 * and unsigned integers; A given), D (any input into a double row: the
 * LogSumExp max pass). */
#define F_RED(op, INIT, COMB, MERGE, FIN)                                \
  DEF_RED(op##_f32, float, double, float, INIT, COMB, MERGE, FIN)        \
  DEF_RED(op##_f64, double, double, double, INIT, COMB, MERGE, FIN)
#define S_RED(op, A, INIT, COMB, MERGE, FIN)                             \
  DEF_RED(op##_i8, int8_t, A, int8_t, INIT, COMB, MERGE, FIN)            \
  DEF_RED(op##_i16, int16_t, A, int16_t, INIT, COMB, MERGE, FIN)         \
  DEF_RED(op##_i32, int32_t, A, int32_t, INIT, COMB, MERGE, FIN)         \
  DEF_RED(op##_i64, int64_t, A, int64_t, INIT, COMB, MERGE, FIN)
#define U_RED(op, A, INIT, COMB, MERGE, FIN)                             \
  DEF_RED(op##_u8, uint8_t, A, uint8_t, INIT, COMB, MERGE, FIN)          \
  DEF_RED(op##_u16, uint16_t, A, uint16_t, INIT, COMB, MERGE, FIN)       \
  DEF_RED(op##_u32, uint32_t, A, uint32_t, INIT, COMB, MERGE, FIN)       \
  DEF_RED(op##_u64, uint64_t, A, uint64_t, INIT, COMB, MERGE, FIN)
#define D_RED(op, INIT, COMB, MERGE, FIN)                                \
  DEF_RED(op##_f32, float, double, double, INIT, COMB, MERGE, FIN)       \
  DEF_RED(op##_f64, double, double, double, INIT, COMB, MERGE, FIN)      \
  DEF_RED(op##_i8, int8_t, double, double, INIT, COMB, MERGE, FIN)       \
  DEF_RED(op##_i16, int16_t, double, double, INIT, COMB, MERGE, FIN)     \
  DEF_RED(op##_i32, int32_t, double, double, INIT, COMB, MERGE, FIN)     \
  DEF_RED(op##_i64, int64_t, double, double, INIT, COMB, MERGE, FIN)     \
  DEF_RED(op##_u8, uint8_t, double, double, INIT, COMB, MERGE, FIN)      \
  DEF_RED(op##_u16, uint16_t, double, double, INIT, COMB, MERGE, FIN)    \
  DEF_RED(op##_u32, uint32_t, double, double, INIT, COMB, MERGE, FIN)    \
  DEF_RED(op##_u64, uint64_t, double, double, INIT, COMB, MERGE, FIN)

/* wrapping 64-bit integer arithmetic (signed overflow is UB in C) */
#define WADD(a, b) ((uint64_t)(a) + (uint64_t)(b))
#define WMUL(a, b) ((uint64_t)(a) * (uint64_t)(b))
#define SABS(x) ((x) < 0 ? 0 - (uint64_t)(x) : (uint64_t)(x))

/* Each line: identity, fold of one element x into a, merge of two partial
 * accumulators a and x (the runs fold four interleaved partials), final. */
F_RED(sum, I_ZERO, a + x, a + x, a)
S_RED(sum, int64_t, I_ZERO, WADD(a, x), WADD(a, x), a)
U_RED(sum, uint64_t, I_ZERO, a + x, a + x, a)
F_RED(mean, I_ZERO, a + x, a + x, a / (double)cnt)
S_RED(mean, int64_t, I_ZERO, WADD(a, x), WADD(a, x), cnt ? a / cnt : 0)
U_RED(mean, uint64_t, I_ZERO, a + x, a + x, cnt ? a / (uint64_t)cnt : 0)
/* Max / Min propagate NaN like numpy's max / min */
#define FMAX ((x != x || x > a) ? x : a)
#define FMIN ((x != x || x < a) ? x : a)
F_RED(max, I_NINF, FMAX, FMAX, a)
S_RED(max, int64_t, I_SMIN, x > a ? x : a, x > a ? x : a, a)
U_RED(max, uint64_t, I_ZERO, x > a ? x : a, x > a ? x : a, a)
F_RED(min, I_PINF, FMIN, FMIN, a)
S_RED(min, int64_t, I_SMAX, x < a ? x : a, x < a ? x : a, a)
U_RED(min, uint64_t, I_UMAX, x < a ? x : a, x < a ? x : a, a)
F_RED(prod, I_ONE, a * x, a * x, a)
S_RED(prod, int64_t, I_ONE, WMUL(a, x), WMUL(a, x), a)
U_RED(prod, uint64_t, I_ONE, a * x, a * x, a)
F_RED(l1, I_ZERO, a + fabs(x), a + x, a)
S_RED(l1, int64_t, I_ZERO, WADD(a, SABS(x)), WADD(a, x), a)
U_RED(l1, uint64_t, I_ZERO, a + x, a + x, a)
F_RED(sumsq, I_ZERO, a + x * x, a + x, a)
S_RED(sumsq, int64_t, I_ZERO, WADD(a, WMUL(x, x)), WADD(a, x), a)
U_RED(sumsq, uint64_t, I_ZERO, a + x * x, a + x, a)
/* L2, LogSum and LogSumExp are real-valued: integers go through double */
F_RED(l2, I_ZERO, a + x * x, a + x, sqrt(a))
S_RED(l2, double, I_ZERO, a + x * x, a + x, d2i(sqrt(a)))
U_RED(l2, double, I_ZERO, a + x * x, a + x, d2i(sqrt(a)))
F_RED(logsum, I_ZERO, a + x, a + x, log(a))
S_RED(logsum, double, I_ZERO, a + x, a + x, d2i(log(a)))
U_RED(logsum, double, I_ZERO, a + x, a + x, d2i(log(a)))
F_RED(lse, I_ZERO, a + exp(x - m), a + x, m + log(a))
S_RED(lse, double, I_ZERO, a + exp(x - m), a + x, d2i(m + log(a)))
U_RED(lse, double, I_ZERO, a + exp(x - m), a + x, d2i(m + log(a)))
/* LogSumExp's first pass: the max of each set as its shift, 0 when the
 * max is not finite (all -inf, an empty set, +inf or NaN), which keeps
 * exp(x - m) from turning inf - inf into NaN */
D_RED(lsemax, I_NINF, FMAX, FMAX, isfinite(a) ? a : 0)

#define FNS(nm) {nm##_init, nm##_vec, nm##_run, nm##_fin}
#define F_TAB(op) [KEEL_FLOAT] = FNS(op##_f32), [KEEL_DOUBLE] = FNS(op##_f64),
#define S_TAB(op)                                                           \
  [KEEL_INT8] = FNS(op##_i8), [KEEL_INT16] = FNS(op##_i16),                 \
  [KEEL_INT32] = FNS(op##_i32), [KEEL_INT64] = FNS(op##_i64),
#define U_TAB(op)                                                           \
  [KEEL_UINT8] = FNS(op##_u8), [KEEL_UINT16] = FNS(op##_u16),               \
  [KEEL_UINT32] = FNS(op##_u32), [KEEL_UINT64] = FNS(op##_u64),
#define ALL_TAB(op) {F_TAB(op) S_TAB(op) U_TAB(op)}

typedef struct redop {
  const char *name;
  redfns fn[KEEL_BFLOAT16 + 1];
  int axes_input_since; /* opset from which axes is an input, not an attr */
} redop;

/* float32 Sum and Mean folding whole rows (inner > 1: the mean over H and
 * W of an NHWC tensor): sum_f32_vec's double adds in the same order, in
 * AVX-512 or AVX2 code where the CPU has it (the baseline build converts
 * two floats at a time). */
#define SUMF_BODY                                                    \
  {                                                                  \
    double *restrict ac = acc;                                       \
    const float *restrict s = src;                                   \
    (void)sh;                                                        \
    for (int64_t i = 0; i < n; i++) ac[i] += (double)s[i];           \
  }
__attribute__((target("avx512f"))) static void sumf_vec_avx512(void *acc, const void *src,
                                                               int64_t n, const double *sh)
    SUMF_BODY
__attribute__((target("avx2"))) static void sumf_vec_avx2(void *acc, const void *src, int64_t n,
                                                          const double *sh) SUMF_BODY
#define SUMF_VEC(op)                                                                     \
  static void op##_f32_fast(void *acc, const void *src, int64_t n, const double *sh) {    \
    if (__builtin_cpu_supports("avx512f")) sumf_vec_avx512(acc, src, n, sh);              \
    else if (__builtin_cpu_supports("avx2")) sumf_vec_avx2(acc, src, n, sh);              \
    else op##_f32_vec(acc, src, n, sh);                                                   \
  }
SUMF_VEC(sum)
SUMF_VEC(mean)
#define SUMF_FNS(op) {op##_f32_init, op##_f32_fast, op##_f32_run, op##_f32_fin}

static const redop OP_SUM = {
    "ReduceSum", {[KEEL_FLOAT] = SUMF_FNS(sum), [KEEL_DOUBLE] = FNS(sum_f64), S_TAB(sum) U_TAB(sum)}, 13};
static const redop OP_MEAN = {
    "ReduceMean", {[KEEL_FLOAT] = SUMF_FNS(mean), [KEEL_DOUBLE] = FNS(mean_f64), S_TAB(mean) U_TAB(mean)}, 18};
/* bool (opset 20) is max / min over uint8 0 / 1 */
static const redop OP_MAX = {"ReduceMax", {F_TAB(max) S_TAB(max) U_TAB(max)[KEEL_BOOL] = FNS(max_u8)}, 18};
static const redop OP_MIN = {"ReduceMin", {F_TAB(min) S_TAB(min) U_TAB(min)[KEEL_BOOL] = FNS(min_u8)}, 18};
static const redop OP_PROD = {"ReduceProd", ALL_TAB(prod), 18};
static const redop OP_L1 = {"ReduceL1", ALL_TAB(l1), 18};
static const redop OP_L2 = {"ReduceL2", ALL_TAB(l2), 18};
static const redop OP_LOGSUM = {"ReduceLogSum", ALL_TAB(logsum), 18};
static const redop OP_LSE = {"ReduceLogSumExp", ALL_TAB(lse), 18};
static const redop OP_SUMSQ = {"ReduceSumSquare", ALL_TAB(sumsq), 18};
static const redfns LSE_MAX[KEEL_BFLOAT16 + 1] = ALL_TAB(lsemax);

/* ================================================== reduction driver */

/* Folds src into dst row by row. acc holds p->inner accumulators (A is
 * 8 bytes for every op); shift, when given, has one entry per output. */
static void red_walk(const rplan *p, const redfns *f, const uint8_t *src, size_t es,
                     uint8_t *dst, size_t eo, void *acc, const double *shift) {
  int64_t ki[KEEL_MAX_RANK] = {0}, koff = 0;
  for (int64_t o = 0; o < p->n_out; o++) {
    const double *sh = shift ? shift + o * p->inner : NULL;
    f->init(acc, p->inner);
    int64_t ri[KEEL_MAX_RANK] = {0}, roff = 0;
    for (int64_t r = 0; r < p->n_runs; r++) {
      const uint8_t *s = src + (size_t)(koff + roff) * es;
      if (p->inner == 1) f->run(acc, s, p->run, sh);
      else f->vec(acc, s, p->inner, sh);
      odo_step(p->nr, p->rd, p->rs, ri, &roff);
    }
    f->fin(acc, dst + (size_t)(o * p->inner) * eo, p->inner, p->count, sh);
    odo_step(p->nk, p->kd, p->ks, ki, &koff);
  }
}

/* Reads the axes (attribute before `since`, input 1 from it) into mask.
 * No axes: all of them, or none with noop_with_empty_axes (the op still
 * applies its element function: ReduceSumSquare squares, ReduceL1 abs). */
static keel_status red_axes(keel_kctx *k, int rank, int since, uint8_t *mask) {
  int64_t buf[KEEL_MAX_RANK];
  const int64_t *axes = buf;
  int n = 0;
  bool as_input = keel_k_opset(k) >= since;
  /* the wrong form would be silently ignored: refuse it */
  if (as_input ? keel_k_attr(k, "axes") != NULL : keel_k_has_in(k, 1))
    return keel_err(KEEL_ERR_INVALID_MODEL, "at opset %lld axes must be %s", (long long)keel_k_opset(k),
                    as_input ? "an input, not an attribute" : "an attribute, not an input");
  if (as_input && keel_k_has_in(k, 1)) KEEL_TRY(keel_k_in_ints(k, 1, buf, KEEL_MAX_RANK, &n));
  if (!as_input) axes = keel_k_attr_ints(k, "axes", &n);
  bool noop = n == 0 && keel_k_attr_i(k, "noop_with_empty_axes", 0) != 0;
  memset(mask, n == 0 && !noop, KEEL_MAX_RANK);
  for (int i = 0; i < n; i++) {
    int a;
    KEEL_TRY(keel_k_axis(axes[i], rank, "axes entry", &a));
    if (mask[a])
      return keel_err(KEEL_ERR_SHAPE, "axis %lld appears twice in axes", (long long)axes[i]);
    mask[a] = 1;
  }
  return KEEL_OK;
}

static void red_shape(const keel_tensor *x, const uint8_t *mask, bool keep, int *r,
                      int64_t *shape) {
  *r = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!mask[d]) shape[(*r)++] = x->shape[d];
    else if (keep) shape[(*r)++] = 1;
  }
}

/* Runs `op` over x into o (both float for staged halves). */
static keel_status red_run(keel_kctx *k, const redop *op, const keel_tensor *x,
                           const uint8_t *mask, keel_tensor *o) {
  rplan p;
  plan_make(x->rank, x->shape, mask, &p);
  if (p.n_out == 0) return KEEL_OK;
  size_t es = keel_dtype_size((keel_dtype)x->dtype), eo = keel_dtype_size((keel_dtype)o->dtype);
  int dt = x->dtype == KEEL_BOOL ? KEEL_UINT8 : x->dtype;
  void *acc;
  double *shift = NULL;
  KEEL_TRY(keel_k_scratch(k, (size_t)p.inner * 8, &acc));
  if (op == &OP_LSE) {
    void *sp;
    KEEL_TRY(keel_k_scratch(k, (size_t)keel_tensor_numel(o) * sizeof(double), &sp));
    shift = sp;
    red_walk(&p, &LSE_MAX[dt], x->data, es, sp, sizeof(double), acc, NULL);
  }
  red_walk(&p, &op->fn[x->dtype], x->data, es, o->data, eo, acc, shift);
  return KEEL_OK;
}

static keel_status reduce(keel_kctx *k, const redop *op) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int dt = x->dtype;
  bool half = keel_is_half(dt);
  if (dt < 0 || dt > KEEL_BFLOAT16 || !op->fn[half ? KEEL_FLOAT : dt].init)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", op->name,
                    keel_dtype_name((keel_dtype)dt));
  uint8_t mask[KEEL_MAX_RANK];
  KEEL_TRY(red_axes(k, x->rank, op->axes_input_since, mask));
  int r;
  int64_t shape[KEEL_MAX_RANK];
  red_shape(x, mask, keel_k_attr_i(k, "keepdims", 1) != 0, &r, shape);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, dt, r, shape, &o));
  if (!half) return red_run(k, op, x, mask, o);
  keel_tensor fx, fo = *o;
  void *p;
  KEEL_TRY(keel_k_to_f32(k, x, &fx));
  KEEL_TRY(keel_k_scratch(k, (size_t)keel_tensor_numel(o) * sizeof(float), &p));
  fo.data = p;
  fo.dtype = KEEL_FLOAT;
  KEEL_TRY(red_run(k, op, &fx, mask, &fo));
  keel_f32_store(p, o);
  return KEEL_OK;
}

#define REDUCE_KERNEL(fname, op) \
  static keel_status fname(keel_kctx *k) { return reduce(k, &op); }
REDUCE_KERNEL(op_reduce_sum, OP_SUM)
REDUCE_KERNEL(op_reduce_mean, OP_MEAN)
REDUCE_KERNEL(op_reduce_max, OP_MAX)
REDUCE_KERNEL(op_reduce_min, OP_MIN)
REDUCE_KERNEL(op_reduce_prod, OP_PROD)
REDUCE_KERNEL(op_reduce_l1, OP_L1)
REDUCE_KERNEL(op_reduce_l2, OP_L2)
REDUCE_KERNEL(op_reduce_logsum, OP_LOGSUM)
REDUCE_KERNEL(op_reduce_lse, OP_LSE)
REDUCE_KERNEL(op_reduce_sumsq, OP_SUMSQ)

/* ==================================================== ArgMax / ArgMin */

/* One outer slice [n, inner]: idx[j] = the winning r for column j; best
 * is a row of T scratch. BETTER(x, b) says whether x replaces the best b.
 * NaN wins like numpy's argmax / argmin: the first NaN, or the last one
 * with select_last_index (the reference flips the axis). */
#define DEF_ARG(nm, T, BETTER)                                                       \
  static void nm(const void *src, int64_t n, int64_t inner, int64_t *idx, void *bp) { \
    const T *s = src;                                                                \
    T *best = bp;                                                                    \
    for (int64_t j = 0; j < inner; j++) best[j] = s[j], idx[j] = 0;                  \
    for (int64_t r = 1; r < n; r++) {                                                \
      const T *row = s + r * inner;                                                  \
      for (int64_t j = 0; j < inner; j++) {                                          \
        T x = row[j], b = best[j];                                                   \
        if (BETTER) best[j] = x, idx[j] = r;                                         \
      }                                                                              \
    }                                                                                \
  }
#define ARG_GEN(op, FB, IB)                                                         \
  DEF_ARG(op##_f32, float, FB) DEF_ARG(op##_f64, double, FB)                        \
  DEF_ARG(op##_i8, int8_t, IB) DEF_ARG(op##_i16, int16_t, IB)                       \
  DEF_ARG(op##_i32, int32_t, IB) DEF_ARG(op##_i64, int64_t, IB)                     \
  DEF_ARG(op##_u8, uint8_t, IB) DEF_ARG(op##_u16, uint16_t, IB)                     \
  DEF_ARG(op##_u32, uint32_t, IB) DEF_ARG(op##_u64, uint64_t, IB)
#define ARG_TAB(op)                                                                 \
  {[KEEL_FLOAT] = op##_f32, [KEEL_DOUBLE] = op##_f64, [KEEL_INT8] = op##_i8,         \
   [KEEL_INT16] = op##_i16, [KEEL_INT32] = op##_i32, [KEEL_INT64] = op##_i64,        \
   [KEEL_UINT8] = op##_u8, [KEEL_UINT16] = op##_u16, [KEEL_UINT32] = op##_u32,       \
   [KEEL_UINT64] = op##_u64}

ARG_GEN(amax_first, (x != x && b == b) || x > b, x > b)
ARG_GEN(amax_last, x != x || (b == b && x >= b), x >= b)
ARG_GEN(amin_first, (x != x && b == b) || x < b, x < b)
ARG_GEN(amin_last, x != x || (b == b && x <= b), x <= b)

typedef void (*arg_fn)(const void *src, int64_t n, int64_t inner, int64_t *idx, void *best);
static const arg_fn ARG_FNS[4][KEEL_BFLOAT16 + 1] = {
    ARG_TAB(amax_first), ARG_TAB(amax_last), ARG_TAB(amin_first), ARG_TAB(amin_last)};

/* Splits shape at `axis` into (outer, n, inner). */
static void split3(const keel_tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= x->shape[d];
  *n = x->rank ? x->shape[axis] : 1;
  for (int d = axis + 1; d < x->rank; d++) *inner *= x->shape[d];
}

/* idx (outer * inner) = the winner along the middle dim of each slice. */
static keel_status arg_run(keel_kctx *k, arg_fn fn, const keel_tensor *x, int64_t outer,
                           int64_t n, int64_t inner, int64_t *idx) {
  if (outer * inner == 0) return KEEL_OK;
  size_t es = keel_dtype_size((keel_dtype)x->dtype);
  void *best;
  KEEL_TRY(keel_k_scratch(k, (size_t)inner * es, &best));
  for (int64_t o = 0; o < outer; o++)
    fn((const uint8_t *)x->data + (size_t)(o * n * inner) * es, n, inner, idx + o * inner, best);
  return KEEL_OK;
}

static keel_status arg_reduce(keel_kctx *k, bool is_min) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int dt = x->dtype, cdt = keel_is_half(dt) ? KEEL_FLOAT : dt;
  const char *name = is_min ? "ArgMin" : "ArgMax";
  bool last = keel_k_attr_i(k, "select_last_index", 0) != 0;
  arg_fn fn = dt < 0 || dt > KEEL_BFLOAT16 ? NULL : ARG_FNS[is_min * 2 + last][cdt];
  if (!fn)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", name,
                    keel_dtype_name((keel_dtype)dt));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x->rank, "axis", &axis));
  int64_t outer, n, inner;
  split3(x, axis, &outer, &n, &inner);
  if (n == 0 && outer * inner > 0)
    return keel_err(KEEL_ERR_SHAPE, "%s over axis %d of size 0 has no answer", name, axis);
  uint8_t mask[KEEL_MAX_RANK] = {0};
  mask[axis] = 1;
  int r;
  int64_t shape[KEEL_MAX_RANK];
  red_shape(x, mask, keel_k_attr_i(k, "keepdims", 1) != 0, &r, shape);
  keel_tensor *o, fx = *x;
  KEEL_TRY(keel_k_out(k, 0, KEEL_INT64, r, shape, &o));
  if (cdt != dt) KEEL_TRY(keel_k_to_f32(k, x, &fx));
  return arg_run(k, fn, &fx, outer, n, inner, o->data);
}

static keel_status op_argmax(keel_kctx *k) { return arg_reduce(k, false); }
static keel_status op_argmin(keel_kctx *k) { return arg_reduce(k, true); }

/* ==================================================== softmax family */

/* One slice [n, inner] along the middle dim, in two passes: the max of
 * each column, then exp(x - max) summed in double (so large inputs cannot
 * overflow). mx and sum are rows of `inner` doubles. The max may skip a
 * NaN: exp(NaN - max) makes the sum, and so the whole column, NaN. */
#define DEF_SOFTMAX(nm, T)                                                           \
  static void nm(const T *x, T *y, int64_t n, int64_t inner, double *mx, double *sum, \
                 bool log_out) {                                                     \
    for (int64_t j = 0; j < inner; j++) mx[j] = -INFINITY, sum[j] = 0;              \
    for (int64_t r = 0; r < n; r++)                                                  \
      for (int64_t j = 0; j < inner; j++)                                            \
        mx[j] = x[r * inner + j] > mx[j] ? x[r * inner + j] : mx[j];                 \
    for (int64_t r = 0; r < n; r++)                                                  \
      for (int64_t j = 0; j < inner; j++) {                                          \
        double e = exp((double)x[r * inner + j] - mx[j]);                            \
        sum[j] += e;                                                                 \
        if (!log_out) y[r * inner + j] = (T)e;                                       \
      }                                                                              \
    for (int64_t j = 0; j < inner; j++)                                              \
      sum[j] = log_out ? mx[j] + log(sum[j]) : 1.0 / sum[j];                         \
    for (int64_t r = 0; r < n; r++)                                                  \
      for (int64_t j = 0; j < inner; j++) {                                          \
        int64_t i = r * inner + j;                                                   \
        y[i] = (T)(log_out ? (double)x[i] - sum[j] : (double)y[i] * sum[j]);         \
      }                                                                              \
  }
DEF_SOFTMAX(softmax_f32, float)
DEF_SOFTMAX(softmax_f64, double)

/* The common case, inner == 1 (the last axis): one contiguous row, the
 * exponentials in the storage type (expf for float: exp dominates the
 * cost) and their sum in double. */
#define DEF_SOFTMAX_ROW(nm, T, EXP)                                                  \
  static void nm(const T *x, T *y, int64_t n, bool log_out) {                        \
    T mx = (T)-INFINITY;                                                             \
    for (int64_t i = 0; i < n; i++)                                                  \
      mx = x[i] > mx ? x[i] : mx;                                                    \
    double sum = 0;                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                \
      T e = EXP(x[i] - mx);                                                          \
      sum += e;                                                                      \
      if (!log_out) y[i] = e;                                                        \
    }                                                                                \
    double l = mx + log(sum), inv = 1.0 / sum;                                       \
    for (int64_t i = 0; i < n; i++) y[i] = (T)(log_out ? x[i] - l : y[i] * inv);     \
  }
DEF_SOFTMAX_ROW(softmax_row_f32, float, expf)
DEF_SOFTMAX_ROW(softmax_row_f64, double, exp)

/* (outer, n, inner) for the softmax family: opset < 13 flattens to 2-D at
 * axis (default 1), opset 13 works along axis (default -1). */
static keel_status softmax_split(keel_kctx *k, const keel_tensor *x, int64_t *outer,
                                 int64_t *n, int64_t *inner) {
  bool old = keel_k_opset(k) < 13;
  int64_t a = keel_k_attr_i(k, "axis", old ? 1 : -1);
  int axis;
  if (old && (a == x->rank || (a == 0 && x->rank == 0))) axis = x->rank; /* [N, 1] */
  else KEEL_TRY(keel_k_axis(a, x->rank, "axis", &axis));
  if (!old) {
    split3(x, axis, outer, n, inner);
    return KEEL_OK;
  }
  *outer = *n = 1, *inner = 1;
  for (int d = 0; d < x->rank; d++) *(d < axis ? outer : n) *= x->shape[d];
  return KEEL_OK;
}

/* The fast path of float Softmax along the last axis: rows [b, e) of n
 * scores, each copied into y (unless y is x) and done in place by
 * keel_vm_softmax_row (vectorized exp, sums in float); a row of only -inf
 * scores, which that leaves alone, goes through the reference row (NaN
 * there, as ONNX's formula gives). Within 1e-6 relative of the reference
 * (tests/test_ops_reduce.c). */
typedef struct softmax_rows {
  const float *x;
  float *y;
  int64_t n;
} softmax_rows;

static keel_status softmax_rows_fast(void *ctx, int64_t b, int64_t e, int worker) {
  (void)worker;
  const softmax_rows *r = ctx;
  for (int64_t o = b; o < e; o++) {
    const float *x = r->x + o * r->n;
    float *y = r->y + o * r->n;
    if (y != x) memcpy(y, x, sizeof(float) * (size_t)r->n);
    if (!keel_vm_softmax_row(y, r->n)) softmax_row_f32(x, y, r->n, false);
  }
  return KEEL_OK;
}

static keel_status softmax_run(keel_kctx *k, const keel_tensor *x, keel_tensor *y,
                               int64_t outer, int64_t n, int64_t inner, bool log_out) {
  if (keel_tensor_numel(x) == 0) return KEEL_OK;
  bool f32 = x->dtype == KEEL_FLOAT;
  if (inner == 1) {
    for (int64_t o = 0; o < outer; o++) {
      size_t off = (size_t)(o * n);
      if (f32) softmax_row_f32((const float *)x->data + off, (float *)y->data + off, n, log_out);
      else softmax_row_f64((const double *)x->data + off, (double *)y->data + off, n, log_out);
    }
    return KEEL_OK;
  }
  void *mx, *sum;
  KEEL_TRY(keel_k_scratch(k, (size_t)inner * sizeof(double), &mx));
  KEEL_TRY(keel_k_scratch(k, (size_t)inner * sizeof(double), &sum));
  for (int64_t o = 0; o < outer; o++) {
    size_t off = (size_t)(o * n * inner);
    if (f32)
      softmax_f32((const float *)x->data + off, (float *)y->data + off, n, inner, mx, sum, log_out);
    else
      softmax_f64((const double *)x->data + off, (double *)y->data + off, n, inner, mx, sum,
                  log_out);
  }
  return KEEL_OK;
}

static keel_status softmax(keel_kctx *k, bool log_out) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int dt = x->dtype;
  if (!keel_dtype_is_float(dt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s",
                    log_out ? "LogSoftmax" : "Softmax", keel_dtype_name((keel_dtype)dt));
  int64_t outer, n, inner;
  KEEL_TRY(softmax_split(k, x, &outer, &n, &inner));
  keel_tensor *y;
  if (!keel_is_half(dt)) {
    KEEL_TRY(keel_k_reuse(k, 0, 0, dt, x->rank, x->shape, &y));
    return softmax_run(k, x, y, outer, n, inner, log_out);
  }
  keel_tensor fx;
  KEEL_TRY(keel_k_to_f32(k, x, &fx));
  KEEL_TRY(keel_k_out(k, 0, dt, x->rank, x->shape, &y));
  KEEL_TRY(softmax_run(k, &fx, &fx, outer, n, inner, log_out)); /* in place in scratch */
  keel_f32_store(fx.data, y);
  return KEEL_OK;
}

static keel_status op_softmax(keel_kctx *k) { return softmax(k, false); }

/* The implementation "vector" of Softmax (every node: the shape is known
 * only at run): float32 along a last axis of contiguous rows, split over
 * the pool by rows; anything else is the reference's. */
static keel_status op_softmax_vector(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t outer, n, inner;
  if (x->dtype != KEEL_FLOAT || keel_tensor_numel(x) == 0) return op_softmax(k);
  KEEL_TRY(softmax_split(k, x, &outer, &n, &inner));
  if (inner != 1) return op_softmax(k);
  keel_tensor *y;
  KEEL_TRY(keel_k_reuse(k, 0, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  softmax_rows r = {x->data, y->data, n};
  /* a row: n scores read and written, an exp (about 30 operations) each */
  return keel_pool_for(k->pool, outer, keel_pool_grain(8.0 * (double)n, 32.0 * (double)n),
                       softmax_rows_fast, &r);
}
static const keel_impl softmax_vector_impl = {"vector", keel_prep_always, NULL, NULL, op_softmax_vector};
static const keel_impl *const softmax_impls[] = {&keel_gpu_softmax_impl, &softmax_vector_impl, NULL};
static keel_status op_log_softmax(keel_kctx *k) { return softmax(k, true); }

/* Hardmax: 1 at the first maximum of each slice, 0 elsewhere. */
static keel_status op_hardmax(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int dt = x->dtype;
  if (!keel_dtype_is_float(dt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "Hardmax does not support %s",
                    keel_dtype_name((keel_dtype)dt));
  int64_t outer, n, inner;
  KEEL_TRY(softmax_split(k, x, &outer, &n, &inner));
  keel_tensor *y, fx = *x;
  KEEL_TRY(keel_k_out(k, 0, dt, x->rank, x->shape, &y));
  if (keel_tensor_numel(x) == 0) return KEEL_OK;
  if (keel_is_half(dt)) KEEL_TRY(keel_k_to_f32(k, x, &fx));
  void *idx;
  KEEL_TRY(keel_k_scratch(k, (size_t)(outer * inner) * sizeof(int64_t), &idx));
  KEEL_TRY(arg_run(k, ARG_FNS[0][fx.dtype], &fx, outer, n, inner, idx));
  memset(y->data, 0, keel_tensor_nbytes(y)); /* 0.0 is all-zero bits in every float type */
  const int64_t *w = idx;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++)
      keel_elem_set_f64(dt, y->data, (size_t)((o * n + w[o * inner + j]) * inner + j), 1.0);
  return KEEL_OK;
}

/* ============================================================= table */

/* Element-type sets used in the table below. */
#define NUM_BOOL (KEEL_TS_NUM | KEEL_T(KEEL_BOOL))
const keel_opdef keel_ops_reduce[] = {
    {"", "ReduceSum", 1, KEEL_OPSET_MAX, op_reduce_sum, 0, KEEL_TS_NUM, keel_gpu_reduce_impls},
    {"", "ReduceMean", 1, KEEL_OPSET_MAX, op_reduce_mean, 0, KEEL_TS_NUM, keel_gpu_reduce_impls},
    {"", "ReduceMax", 1, KEEL_OPSET_MAX, op_reduce_max, 0, NUM_BOOL, keel_gpu_reduce_impls},
    {"", "ReduceMin", 1, KEEL_OPSET_MAX, op_reduce_min, 0, NUM_BOOL},
    {"", "ReduceProd", 1, KEEL_OPSET_MAX, op_reduce_prod, 0, KEEL_TS_NUM},
    {"", "ReduceL1", 1, KEEL_OPSET_MAX, op_reduce_l1, 0, KEEL_TS_NUM},
    {"", "ReduceL2", 1, KEEL_OPSET_MAX, op_reduce_l2, 0, KEEL_TS_NUM},
    {"", "ReduceLogSum", 1, KEEL_OPSET_MAX, op_reduce_logsum, 0, KEEL_TS_NUM},
    {"", "ReduceLogSumExp", 1, KEEL_OPSET_MAX, op_reduce_lse, 0, KEEL_TS_NUM},
    {"", "ReduceSumSquare", 1, KEEL_OPSET_MAX, op_reduce_sumsq, 0, KEEL_TS_NUM},
    {"", "ArgMax", 1, KEEL_OPSET_MAX, op_argmax, 0, KEEL_TS_NUM},
    {"", "ArgMin", 1, KEEL_OPSET_MAX, op_argmin, 0, KEEL_TS_NUM},
    {"", "Softmax", 1, KEEL_OPSET_MAX, op_softmax, 0, KEEL_TS_FLOAT, softmax_impls},
    {"", "LogSoftmax", 1, KEEL_OPSET_MAX, op_log_softmax, 0, KEEL_TS_FLOAT},
    {"", "Hardmax", 1, KEEL_OPSET_MAX, op_hardmax, 0, KEEL_TS_FLOAT},
    {0},
};
#undef NUM_BOOL
