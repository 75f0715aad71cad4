/* test_ops_reduce.c: the reduce family (Reduce*, ArgMax/ArgMin, Softmax,
 * LogSoftmax, Hardmax) through real sessions, against naive per-element
 * references written here: random shapes, random axis sets, every opset
 * form (axes attribute or input, coerced 2-D or per-axis softmax), several
 * dtypes, empty sets, large inputs, and errors that leave the session
 * usable. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int n) { return (int)(next() % (uint64_t)n); }

#define MAXN 512

/* ====================================================== harness */

/* A typed input value from doubles (any dtype, halves rounded). */
static keel_value_t *value_of(keel_session_t *s, int dt, int rank, const int64_t *dims,
                              const double *v) {
  static uint8_t buf[MAXN * 8];
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  for (int64_t i = 0; i < n; i++) keel_elem_set_f64(dt, buf, (size_t)i, v[i]);
  keel_value_t *out = NULL;
  CHECK_OK(keel_tensor_create(s, (keel_dtype)dt, rank, dims, buf, &out));
  return out;
}

/* The value as the dtype holds it (what the kernel actually sees). */
static double as_dtype(int dt, double v) {
  uint8_t b[8];
  keel_elem_set_f64(dt, b, 0, v);
  return keel_elem_get_f64(dt, b, 0);
}

static bool is_float_dt(int dt) {
  return dt == KEEL_FLOAT || dt == KEEL_DOUBLE || dt == KEEL_FLOAT16 || dt == KEEL_BFLOAT16;
}

/* Compares output v (shape rank/dims) with want[]; tolerance by dtype. */
static bool same_output(const keel_value_t *v, int dt, int rank, const int64_t *dims,
                        const double *want) {
  if (!v || keel_value_dtype(v) != dt || keel_value_rank(v) != rank) return false;
  for (int i = 0; i < rank; i++)
    if (keel_value_shape(v)[i] != dims[i]) return false;
  double rel = dt == KEEL_FLOAT ? 1e-5 : dt == KEEL_DOUBLE ? 1e-12 : 8e-3;
  for (int64_t i = 0; i < keel_value_numel(v); i++) {
    double a = keel_value_at(v, i), b = want[i];
    if (isnan(b) ? !isnan(a) : isinf(b) ? a != b : fabs(a - b) > rel * (1 + fabs(b))) {
      fprintf(stderr, "  element %lld: got %.9g, expected %.9g\n", (long long)i, a, b);
      return false;
    }
  }
  return true;
}

/* Row-major coordinates of flat index i. */
static void coords(int rank, const int64_t *dims, int64_t i, int64_t *c) {
  for (int d = rank - 1; d >= 0; d--) {
    c[d] = dims[d] ? i % dims[d] : 0;
    i = dims[d] ? i / dims[d] : 0;
  }
}

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* ===================================================== Reduce* */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LSE, R_SUMSQ, R_COUNT };
static const char *RNAME[R_COUNT] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                     "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                     "ReduceLogSumExp", "ReduceSumSquare"};

static int64_t int_min_of(int dt) {
  switch (dt) {
    case KEEL_INT8: return INT8_MIN;
    case KEEL_INT32: return INT32_MIN;
    case KEEL_INT64: return INT64_MIN;
    default: return 0;
  }
}
static double int_max_of(int dt) {
  switch (dt) {
    case KEEL_INT8: return INT8_MAX;
    case KEEL_UINT8: return UINT8_MAX;
    case KEEL_INT32: return INT32_MAX;
    case KEEL_UINT32: return UINT32_MAX;
    case KEEL_INT64: return (double)INT64_MAX;
    default: return (double)UINT64_MAX;
  }
}

/* The reduction of the n values v[] the naive way (integers exact). */
static double ref_fold(int op, int dt, const double *v, int64_t n) {
  bool fl = is_float_dt(dt);
  double s = 0, p = 1, mx = -INFINITY, mn = INFINITY, s1 = 0, s2 = 0;
  for (int64_t i = 0; i < n; i++) {
    s += v[i], p *= v[i], s1 += fabs(v[i]), s2 += v[i] * v[i];
    mx = v[i] > mx ? v[i] : mx, mn = v[i] < mn ? v[i] : mn;
  }
  double lse = -INFINITY;
  if (n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) e += exp(v[i] - mx);
    lse = mx + log(e);
  }
  double r;
  switch (op) {
    case R_SUM: return s;
    case R_MEAN: return fl ? s / (double)n : n ? trunc(s / (double)n) : 0;
    case R_MAX: return n || fl ? mx : (double)int_min_of(dt);
    case R_MIN: return n || fl ? mn : int_max_of(dt);
    case R_PROD: return p;
    case R_L1: return s1;
    case R_SUMSQ: return s2;
    case R_L2: r = sqrt(s2); break;
    case R_LOGSUM: r = log(s); break;
    default: r = lse; break;
  }
  return fl ? r : trunc(r);
}

/* Input values suited to op and dtype: exact in every dtype, small enough
 * that sums and products stay in range, positive where logs need it. */
static double gen_value(int op, int dt) {
  bool uns = dt == KEEL_UINT8 || dt == KEEL_UINT32 || dt == KEEL_UINT64;
  if (op == R_PROD) {
    static const double f[] = {1, -1, 1.25, 0.8, 1, 1.5}, u[] = {1, 1, 1, 1, 2, 1, 1, 3};
    if (!is_float_dt(dt)) return uns ? u[rnd(8)] : u[rnd(8)] * (rnd(2) ? 1 : -1);
    return f[rnd(6)];
  }
  if (op == R_LOGSUM || op == R_LSE || uns) return 1 + rnd(6);
  return is_float_dt(dt) ? (rnd(33) - 16) * 0.25 : rnd(11) - 5;
}

typedef struct rcase {
  int op, dt, opset, rank, keep, noop, n_axes, axes_as_input;
  int64_t dims[5], axes[5];
  uint8_t mask[5];
} rcase;

/* The expected output of case c on x[] (shape from c). */
static void ref_reduce(const rcase *c, const double *x, double *want, int *ro, int64_t *od) {
  *ro = 0;
  for (int d = 0; d < c->rank; d++)
    if (!c->mask[d] || c->keep) od[(*ro)++] = c->mask[d] ? 1 : c->dims[d];
  int64_t n_in = numel(c->rank, c->dims), n_out = 1;
  for (int d = 0; d < c->rank; d++) n_out *= c->mask[d] ? 1 : c->dims[d];
  static double vals[MAXN];
  for (int64_t o = 0; o < n_out; o++) {
    int64_t n = 0, ci[5];
    for (int64_t i = 0; i < n_in; i++) { /* every input whose kept coords give o */
      coords(c->rank, c->dims, i, ci);
      int64_t oi = 0;
      for (int d = 0; d < c->rank; d++)
        if (!c->mask[d]) oi = oi * c->dims[d] + ci[d];
      if (oi == o) vals[n++] = x[i];
    }
    want[o] = as_dtype(c->dt, ref_fold(c->op, c->dt, vals, n));
  }
}

static keel_session_t *reduce_session(const rcase *c) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", c->dt, c->rank, c->dims);
  mb_output(g, "Y", c->dt, -1, NULL);
  mb_node *n;
  if (c->axes_as_input) {
    if (c->n_axes >= 0) mb_init(g, "A", KEEL_INT64, 1, (int64_t[]){c->n_axes}, c->axes);
    n = mb_add(g, RNAME[c->op], c->n_axes >= 0 ? "X,A" : "X", "Y");
    if (c->noop) mb_attr_i(n, "noop_with_empty_axes", 1);
  } else {
    n = mb_add(g, RNAME[c->op], "X", "Y");
    if (c->n_axes > 0) mb_attr_ints(n, "axes", c->n_axes, c->axes);
  }
  if (!c->keep) mb_attr_i(n, "keepdims", 0);
  return mb_session(g, c->opset);
}

/* A random axis set: each dim reduced with probability 1/2, written as a
 * positive or negative axis, in shuffled order. n_axes -1: no axes input. */
static void random_axes(rcase *c) {
  memset(c->mask, 0, sizeof c->mask);
  c->n_axes = 0;
  for (int d = 0; d < c->rank; d++)
    if (rnd(2)) c->mask[d] = 1, c->axes[c->n_axes++] = rnd(2) ? d : d - c->rank;
  for (int i = c->n_axes - 1; i > 0; i--) {
    int j = rnd(i + 1);
    int64_t t = c->axes[i];
    c->axes[i] = c->axes[j], c->axes[j] = t;
  }
  if (c->n_axes == 0) {
    if (c->axes_as_input && rnd(2)) c->n_axes = -1;
    c->noop = c->axes_as_input && rnd(2);
    memset(c->mask, !c->noop, sizeof c->mask);
  }
}

static void random_reduce_case(int op) {
  static const int fdt[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16, KEEL_BFLOAT16, KEEL_FLOAT};
  static const int idt[] = {KEEL_INT32, KEEL_INT64, KEEL_UINT32, KEEL_UINT64, KEEL_INT8, KEEL_UINT8};
  rcase c = {.op = op, .keep = rnd(2)};
  bool ints = rnd(3) == 0;
  c.dt = ints ? idt[rnd(op == R_MAX || op == R_MIN ? 6 : 4)] : fdt[rnd(5)];
  c.rank = rnd(5);
  for (int d = 0; d < c.rank; d++) c.dims[d] = 1 + rnd(4);
  if (!ints && c.rank && rnd(8) == 0) c.dims[rnd(c.rank)] = 0; /* empty sets */
  int since = op == R_SUM ? 13 : 18;
  c.axes_as_input = rnd(2);
  c.opset = c.axes_as_input ? since + rnd(2) * 2 : (op == R_SUM ? 11 : 13);
  random_axes(&c);
  static double x[MAXN], want[MAXN];
  int64_t n_in = numel(c.rank, c.dims);
  for (int64_t i = 0; i < n_in; i++) x[i] = as_dtype(c.dt, gen_value(op, c.dt));
  int ro;
  int64_t od[5];
  ref_reduce(&c, x, want, &ro, od);
  keel_session_t *s = reduce_session(&c);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = value_of(s, c.dt, c.rank, c.dims, x), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  bool ok = same_output(out[0], c.dt, ro, od, want);
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "  %s opset %d %s rank %d dims [%lld,%lld,%lld,%lld] mask %d%d%d%d keep %d\n",
            RNAME[op], c.opset, keel_dtype_name((keel_dtype)c.dt), c.rank, (long long)c.dims[0],
            (long long)c.dims[1], (long long)c.dims[2], (long long)c.dims[3], c.mask[0], c.mask[1],
            c.mask[2], c.mask[3], c.keep);
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* ============================================== ArgMax / ArgMin */

static void random_arg_case(bool is_min) {
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT32, KEEL_UINT8, KEEL_FLOAT16,
                            KEEL_INT64};
  int dt = dts[rnd(6)], rank = 1 + rnd(4), keep = rnd(2), last = rnd(2);
  int64_t dims[4], od[4];
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(4);
  int axis = rnd(rank), ro = 0;
  for (int d = 0; d < rank; d++)
    if (d != axis || keep) od[ro++] = d == axis ? 1 : dims[d];
  static double x[MAXN], want[MAXN];
  int64_t n = numel(rank, dims), inner = numel(rank - axis - 1, dims + axis + 1);
  for (int64_t i = 0; i < n; i++) x[i] = rnd(3); /* plenty of ties */
  for (int64_t o = 0; o < n / dims[axis]; o++) {
    int64_t base = (o / inner) * dims[axis] * inner + o % inner, best = 0;
    for (int64_t r = 1; r < dims[axis]; r++) {
      double v = x[base + r * inner], b = x[base + best * inner];
      if (is_min ? (v < b || (last && v == b)) : (v > b || (last && v == b))) best = r;
    }
    want[o] = (double)best;
  }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, rank, dims);
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_node *nd = mb_add(g, is_min ? "ArgMin" : "ArgMax", "X", "Y");
  mb_attr_i(nd, "axis", rnd(2) ? axis : axis - rank);
  mb_attr_i(nd, "keepdims", keep);
  if (last) mb_attr_i(nd, "select_last_index", 1);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = value_of(s, dt, rank, dims, x), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  CHECK(same_output(out[0], KEEL_INT64, ro, od, want));
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* ================================================ softmax family */

enum { S_SOFTMAX, S_LOG, S_HARD };
static const char *SNAME[3] = {"Softmax", "LogSoftmax", "Hardmax"};

/* Elements i and j are in one softmax set when they agree on every dim
 * except the axis (opset 13) or on the dims before the axis (opset < 13). */
static bool same_set(int rank, const int64_t *dims, int axis, bool old, int64_t i, int64_t j) {
  int64_t a[5], b[5];
  coords(rank, dims, i, a);
  coords(rank, dims, j, b);
  for (int d = 0; d < rank; d++)
    if ((old ? d < axis : d != axis) && a[d] != b[d]) return false;
  return true;
}

static void ref_softmax(int kind, int rank, const int64_t *dims, int axis, bool old,
                        const double *x, double *want) {
  int64_t n = numel(rank, dims);
  for (int64_t i = 0; i < n; i++) {
    double mx = -INFINITY, sum = 0;
    int64_t first = -1;
    for (int64_t j = 0; j < n; j++)
      if (same_set(rank, dims, axis, old, i, j) && x[j] > mx) mx = x[j], first = j;
    for (int64_t j = 0; j < n; j++)
      if (same_set(rank, dims, axis, old, i, j)) sum += exp(x[j] - mx);
    want[i] = kind == S_SOFTMAX ? exp(x[i] - mx) / sum
              : kind == S_LOG  ? x[i] - mx - log(sum)
                               : (double)(i == first);
  }
}

static void random_softmax_case(int kind) {
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16, KEEL_FLOAT, KEEL_BFLOAT16};
  int dt = dts[rnd(5)], rank = 1 + rnd(4), opset = rnd(2) ? 11 : 13;
  int64_t dims[4];
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(4);
  int axis = rnd(rank);
  bool set_axis = rnd(4) != 0;
  if (!set_axis) axis = opset < 13 ? (rank > 1 ? 1 : 0) : rank - 1;
  if (!set_axis && opset < 13 && rank == 1) set_axis = true; /* default 1 needs rank >= 2 */
  static double x[MAXN], want[MAXN];
  int64_t n = numel(rank, dims);
  for (int64_t i = 0; i < n; i++)
    x[i] = as_dtype(dt, kind == S_HARD ? rnd(3) : (rnd(41) - 20) * 0.125 + (rnd(9) == 0) * 300);
  ref_softmax(kind, rank, dims, axis, opset < 13, x, want);
  for (int64_t i = 0; i < n; i++) want[i] = as_dtype(dt, want[i]);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, rank, dims);
  mb_output(g, "Y", dt, -1, NULL);
  mb_node *nd = mb_add(g, SNAME[kind], "X", "Y");
  if (set_axis) mb_attr_i(nd, "axis", rnd(2) ? axis : axis - rank);
  keel_session_t *s = mb_session(g, opset);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = value_of(s, dt, rank, dims, x), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  bool ok = same_output(out[0], dt, rank, dims, want);
  CHECK(ok);
  if (!ok)
    fprintf(stderr, "  %s opset %d %s rank %d axis %d\n", SNAME[kind], opset,
            keel_dtype_name((keel_dtype)dt), rank, axis);
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* ===================================================== fixed cases */

/* One-node float model run on x; returns the output (caller releases). */
static keel_value_t *run_simple(const char *op, int opset, int rank, const int64_t *dims,
                                const double *x, void (*attrs)(mb_node *)) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, rank, dims);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, op, "X", "Y");
  if (attrs) attrs(n);
  keel_session_t *s = mb_session(g, opset);
  if (!s) return NULL;
  keel_value_t *in = value_of(s, KEEL_FLOAT, rank, dims, x), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  keel_value_release(in);
  keel_session_destroy(s);
  return out[0];
}

static void axes1(mb_node *n) { mb_attr_ints(n, "axes", 1, (int64_t[]){1}); }

/* Reducing a size-0 dim gives each op's identity. */
static void check_empty_sets(void) {
  static const double ident[R_COUNT] = {0, NAN, -INFINITY, INFINITY, 1, 0, 0, -INFINITY,
                                        -INFINITY, 0};
  for (int op = 0; op < R_COUNT; op++) {
    keel_value_t *y = run_simple(RNAME[op], op == R_SUM ? 11 : 13, 2, (int64_t[]){3, 0}, NULL, axes1);
    CHECK(y && keel_value_rank(y) == 2 && keel_value_shape(y)[0] == 3 &&
          keel_value_shape(y)[1] == 1);
    for (int i = 0; y && i < 3; i++) {
      double v = keel_value_at(y, i);
      CHECK(isnan(ident[op]) ? isnan(v) : v == ident[op]);
    }
    keel_value_release(y);
  }
}

/* Large inputs must not overflow exp(). */
static void check_stability(void) {
  double x[3] = {1000, 1001, 1002};
  keel_value_t *y = run_simple("Softmax", 13, 1, (int64_t[]){3}, x, NULL);
  double e0 = exp(-2.0), e1 = exp(-1.0), sum = e0 + e1 + 1;
  CHECK(y != NULL);
  if (y) CHECK_NEAR(keel_value_at(y, 0), e0 / sum, 1e-6);
  if (y) CHECK_NEAR(keel_value_at(y, 2), 1 / sum, 1e-6);
  keel_value_release(y);
  y = run_simple("LogSoftmax", 13, 1, (int64_t[]){3}, x, NULL);
  if (y) CHECK_NEAR(keel_value_at(y, 2), -log(sum), 1e-5);
  keel_value_release(y);
  double z[2] = {1000, 1000};
  y = run_simple("ReduceLogSumExp", 13, 1, (int64_t[]){2}, z, NULL);
  CHECK(y && keel_value_rank(y) == 1);
  if (y) CHECK_NEAR(keel_value_at(y, 0), 1000 + log(2.0), 1e-3);
  keel_value_release(y);
}

/* NaN propagates like numpy: a NaN in a softmax set makes the set NaN,
 * ReduceMax / ReduceMin return it, ArgMax / ArgMin point at it. */
static void check_nan(void) {
  double x[6] = {1, NAN, 3, 4, 5, 6};
  int64_t d[2] = {2, 3};
  keel_value_t *y = run_simple("Softmax", 13, 2, d, x, NULL);
  for (int i = 0; y && i < 6; i++) CHECK(i < 3 ? isnan(keel_value_at(y, i)) : !isnan(keel_value_at(y, i)));
  keel_value_release(y);
  const char *ops[2] = {"ReduceMax", "ReduceMin"};
  for (int i = 0; i < 2; i++) {
    y = run_simple(ops[i], 13, 2, d, x, axes1);
    CHECK(y && isnan(keel_value_at(y, 0)) && keel_value_at(y, 1) == (i ? 4 : 6));
    keel_value_release(y);
  }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, d);
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_attr_i(mb_add(g, "ArgMin", "X", "Y"), "axis", 1);
  keel_session_t *s = mb_session(g, 13);
  if (!s) return;
  keel_value_t *in = value_of(s, KEEL_FLOAT, 2, d, x), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  CHECK(out[0] && keel_value_at(out[0], 0) == 1 && keel_value_at(out[0], 1) == 0);
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* noop_with_empty_axes: no reduction, but the element function still
 * applies (ReduceSumSquare squares, ReduceL1 takes abs). */
static void noop_attrs(mb_node *n) { mb_attr_i(n, "noop_with_empty_axes", 1); }
static void check_noop(void) {
  double x[4] = {-1, 2, -3, 4};
  keel_value_t *y = run_simple("ReduceSumSquare", 18, 2, (int64_t[]){2, 2}, x, noop_attrs);
  CHECK(y && keel_value_rank(y) == 2 && keel_value_numel(y) == 4);
  for (int i = 0; y && i < 4; i++) CHECK(keel_value_at(y, i) == x[i] * x[i]);
  keel_value_release(y);
  y = run_simple("ReduceL1", 18, 2, (int64_t[]){2, 2}, x, noop_attrs);
  for (int i = 0; y && i < 4; i++) CHECK(keel_value_at(y, i) == fabs(x[i]));
  keel_value_release(y);
  y = run_simple("ReduceSum", 13, 2, (int64_t[]){2, 2}, x, NULL); /* no noop: all axes */
  CHECK(y && keel_value_numel(y) == 1 && keel_value_at(y, 0) == 2);
  keel_value_release(y);
}

/* Bad axes from an input: an error naming the problem, and the session
 * still runs good inputs afterwards. */
static void check_axes_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 3});
  mb_input(g, "A", KEEL_INT64, 1, (int64_t[]){-1});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(g, "ReduceMean", "X,A", "Y");
  keel_session_t *s = mb_session(g, 18);
  CHECK(s != NULL);
  if (!s) return;
  double x[6] = {1, 2, 3, 4, 5, 6};
  keel_value_t *in[2] = {value_of(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, x), NULL}, *out[1] = {0};
  const char *names[2] = {"X", "A"};
  int64_t bad[3][2] = {{2, 0}, {-3, 0}, {1, -1}};
  int nbad[3] = {1, 1, 2};
  for (int i = 0; i < 3; i++) {
    CHECK_OK(keel_tensor_create(s, KEEL_INT64, 1, (int64_t[]){nbad[i]}, bad[i], &in[1]));
    CHECK_STATUS(keel_run(s, names, in, 2, out), KEEL_ERR_SHAPE);
    CHECK(strstr(keel_last_error(), i < 2 ? "out of range" : "twice") != NULL);
    keel_value_release(in[1]);
  }
  CHECK_OK(keel_tensor_create(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){-1}, &in[1]));
  CHECK_OK(keel_run(s, names, in, 2, out));
  if (out[0]) CHECK(keel_value_at(out[0], 0) == 2 && keel_value_at(out[0], 1) == 5);
  keel_value_release(out[0]);
  keel_value_release(in[1]);
  keel_value_release(in[0]);
  keel_session_destroy(s);
}

static void axis9(mb_node *n) { mb_attr_i(n, "axis", 9); }
static void axes_dup(mb_node *n) { mb_attr_ints(n, "axes", 2, (int64_t[]){0, -2}); }

/* Attribute errors and unsupported types fail the run with a status. */
static void check_attr_errors(void) {
  double x[4] = {1, 2, 3, 4};
  const char *ops[4] = {"Softmax", "ArgMax", "Hardmax", "LogSoftmax"};
  for (int i = 0; i < 4; i++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 2});
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    axis9(mb_add(g, ops[i], "X", "Y"));
    keel_session_t *s = mb_session(g, 13);
    if (!s) continue;
    keel_value_t *in = value_of(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, x), *out[1] = {0};
    CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, out), KEEL_ERR_SHAPE);
    CHECK(strstr(keel_last_error(), "axis 9") != NULL);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 2});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  axes_dup(mb_add(g, "ReduceMax", "X", "Y"));
  keel_session_t *s = mb_session(g, 13);
  if (s) {
    keel_value_t *in = value_of(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, x), *out[1] = {0};
    CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, out), KEEL_ERR_SHAPE);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  /* types outside the schema */
  g = mb_graph_new("main");
  mb_input(g, "X", KEEL_INT32, 1, (int64_t[]){2});
  mb_output(g, "Y", KEEL_INT32, -1, NULL);
  mb_add(g, "Softmax", "X", "Y");
  s = mb_session(g, 13);
  if (s) {
    keel_value_t *in = value_of(s, KEEL_INT32, 1, (int64_t[]){2}, x), *out[1] = {0};
    CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, out), KEEL_ERR_UNSUPPORTED);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

/* ReduceMax / ReduceMin on bool (opset 20): any / all. */
static void check_bool(void) {
  const char *ops[2] = {"ReduceMax", "ReduceMin"};
  uint8_t x[6] = {0, 1, 0, 1, 1, 1};
  for (int i = 0; i < 2; i++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_BOOL, 2, (int64_t[]){2, 3});
    mb_output(g, "Y", KEEL_BOOL, -1, NULL);
    mb_init(g, "A", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){1});
    mb_attr_i(mb_add(g, ops[i], "X,A", "Y"), "keepdims", 0);
    keel_session_t *s = mb_session(g, 20);
    CHECK(s != NULL);
    if (!s) continue;
    keel_value_t *in = NULL, *out[1] = {0};
    CHECK_OK(keel_tensor_create(s, KEEL_BOOL, 2, (int64_t[]){2, 3}, x, &in));
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
    CHECK(out[0] && keel_value_dtype(out[0]) == KEEL_BOOL && keel_value_numel(out[0]) == 2);
    if (out[0]) CHECK(keel_value_at(out[0], 0) == (i == 0) && keel_value_at(out[0], 1) == 1);
    keel_value_release(out[0]);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

/* A model whose axes come in the wrong form for its opset (with_input:
 * an axes input, else an axes attribute) must fail to run. */
static void expect_axes_form_error(const char *op, int opset, bool with_input) {
  double x[4] = {1, 2, 3, 4};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 2});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  if (with_input) mb_init(g, "A", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){1});
  mb_node *n = mb_add(g, op, with_input ? "X,A" : "X", "Y");
  if (!with_input) axes1(n);
  keel_session_t *s = mb_session(g, opset);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = value_of(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, x), *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, out), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), with_input ? "not an input" : "not an attribute") != NULL);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* axes in the wrong form is refused, not silently ignored. */
static void check_axes_form(void) {
  expect_axes_form_error("ReduceL2", 18, false);
  expect_axes_form_error("ReduceSum", 13, false);
  expect_axes_form_error("ReduceSum", 12, true);
  expect_axes_form_error("ReduceMean", 17, true);
  double x[4] = {1, 2, 3, 4};
  keel_value_t *y = run_simple("ReduceL2", 13, 2, (int64_t[]){2, 2}, x, axes1);
  CHECK(y && keel_value_numel(y) == 2); /* the attribute is right at 13 */
  if (y) CHECK_NEAR(keel_value_at(y, 1), 5.0, 1e-6);
  keel_value_release(y);
}

/* ArgMax over an empty axis has no answer. */
static void axis0_attr(mb_node *n) { mb_attr_i(n, "axis", 1); }
static void check_arg_empty(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 0});
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  axis0_attr(mb_add(g, "ArgMax", "X", "Y"));
  keel_session_t *s = mb_session(g, 13);
  if (!s) return;
  keel_value_t *in = value_of(s, KEEL_FLOAT, 2, (int64_t[]){2, 0}, NULL), *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, out), KEEL_ERR_SHAPE);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* A bigger reduction (past the small random shapes) on both loop kinds:
 * the contiguous run (last axis reduced) and the row fold (first axis). */
static void check_large(void) {
  enum { R = 64, C = 300 };
  static double x[R * C];
  for (int i = 0; i < R * C; i++) x[i] = (i % 7) - 3 + (i % 13) * 0.5;
  for (int axis = 0; axis < 2; axis++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){R, C});
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    mb_attr_ints(mb_add(g, "ReduceMean", "X", "Y"), "axes", 1, (int64_t[]){axis});
    keel_session_t *s = mb_session(g, 13);
    if (!s) return;
    float xf[R * C];
    for (int i = 0; i < R * C; i++) xf[i] = (float)x[i];
    keel_value_t *in = NULL, *out[1] = {0};
    CHECK_OK(keel_tensor_create(s, KEEL_FLOAT, 2, (int64_t[]){R, C}, xf, &in));
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
    int n_out = axis ? R : C;
    for (int o = 0; out[0] && o < n_out; o++) {
      double sum = 0;
      for (int r = 0; r < (axis ? C : R); r++) sum += axis ? x[o * C + r] : x[r * C + o];
      CHECK_NEAR(keel_value_at(out[0], o), sum / (axis ? C : R), 1e-5);
    }
    keel_value_release(out[0]);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

/* Softmax's implementation "vector" (rows over the pool, vectorized exp)
 * against its reference binding (KEEL_OPT_REFERENCE_KERNELS), on
 * attention-sized scores [3, 197, 197] at 1 and 3 threads: a causal -inf
 * mask, one row all -inf (NaN in both), one row with a NaN; within 1e-6 of
 * each row's largest probability. */
static void check_softmax_vector(void) {
  enum { B = 3, T = 197 };
  static float x[B * T * T];
  uint32_t r32 = 99; /* its own numbers: the random cases' sequence stays as it was */
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T; i++)
      for (int j = 0; j < T; j++)
        x[(b * T + i) * T + j] = j > i + 5 ? -INFINITY : (float)((int)((r32 = r32 * 1664525u + 1013904223u) >> 8) % 2001 - 1000) / 97.0f;
  for (int j = 0; j < T; j++) x[(1 * T + 7) * T + j] = -INFINITY;
  x[(2 * T + 100) * T + 50] = NAN;
  int64_t dims[3] = {B, T, T};
  keel_value_t *y[3] = {0};
  for (int v = 0; v < 3; v++) {
    keel_options o = {.size = sizeof o, .threads = v == 2 ? 3 : 1,
                      .flags = v == 0 ? KEEL_OPT_REFERENCE_KERNELS : 0};
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 3, dims);
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    mb_add(g, "Softmax", "X", "Y");
    keel_session_t *s = mb_session_opts(g, 13, &o);
    CHECK(s != NULL);
    if (!s) return;
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 3, dims, x);
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &y[v]));
    keel_value_release(in);
    keel_session_destroy(s);
  }
  double worst = 0;
  bool nan_ok = true;
  for (int v = 1; v < 3 && y[0] && y[v]; v++) {
    const float *a = keel_value_data(y[0]), *b = keel_value_data(y[v]);
    for (int r = 0; r < B * T; r++) {
      double big = 0;
      for (int j = 0; j < T; j++) big = fmax(big, fabs(a[r * T + j]));
      for (int j = 0; j < T; j++) {
        float p = a[r * T + j], q = b[r * T + j];
        if (isnan(p) || isnan(q)) nan_ok &= isnan(p) && isnan(q);
        else worst = fmax(worst, fabs(p - q) / big);
      }
    }
    nan_ok &= isnan(a[(1 * T + 7) * T]) && isnan(a[(2 * T + 100) * T]) && !isnan(a[(2 * T + 99) * T]);
  }
  if (worst > 1e-6 || !nan_ok) fprintf(stderr, "Softmax vector: worst %g, NaN rows %s\n", worst, nan_ok ? "ok" : "wrong");
  CHECK(worst <= 1e-6);
  CHECK(nan_ok);
  for (int v = 0; v < 3; v++) keel_value_release(y[v]);
}

int main(void) {
  for (int op = 0; op < R_COUNT; op++)
    for (int i = 0; i < 60; i++) random_reduce_case(op);
  for (int i = 0; i < 100; i++) random_arg_case(i & 1);
  for (int kind = 0; kind < 3; kind++)
    for (int i = 0; i < 60; i++) random_softmax_case(kind);
  check_empty_sets();
  check_stability();
  check_nan();
  check_noop();
  check_axes_errors();
  check_attr_errors();
  check_arg_empty();
  check_bool();
  check_axes_form();
  check_large();
  check_softmax_vector();
  return check_report();
}
