/* test_ops_norm.c: the norm family (BatchNormalization, Instance-, Layer-,
 * MeanVariance-, Group- and LpNormalization, LRN) and the losses (NLL, softmax
 * cross-entropy) through real sessions, against naive per-element
 * references written here, on random shapes and attributes; plus the
 * error cases (bad labels at run time leave the session usable). */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int n) { return (int)(next() % (uint64_t)n); }
static double frand(void) { return (double)(next() % 20001) / 10000.0 - 1.0; } /* [-1, 1] */

#define MAXN 1024

/* ====================================================== harness */

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* The value as dtype dt holds it. */
static double as_dtype(int dt, double v) {
  uint8_t b[8];
  keel_elem_set_f64(dt, b, 0, v);
  return keel_elem_get_f64(dt, b, 0);
}

/* One graph input or output: name, dtype, shape, values (doubles). */
typedef struct tv {
  const char *name;
  int dt, rank;
  int64_t dims[6];
  double *v;
} tv;

/* An attribute: kind 'i', 'f', 's' or 'I' (ints). */
typedef struct attr {
  const char *name;
  int kind;
  int64_t i;
  float f;
  const char *s;
  int n;
  const int64_t *ints;
} attr;

static tv mk(const char *name, int dt, int rank, const int64_t *dims, double *v) {
  tv t = {name, dt, rank, {0}, v};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  return t;
}

static void set_attrs(mb_node *n, const attr *a) {
  for (; a && a->name; a++) {
    if (a->kind == 'i') mb_attr_i(n, a->name, a->i);
    else if (a->kind == 'f') mb_attr_f(n, a->name, a->f);
    else if (a->kind == 's') mb_attr_s(n, a->name, a->s);
    else mb_attr_ints(n, a->name, a->n, a->ints);
  }
}

static keel_value_t *value_of(keel_session_t *s, const tv *t) {
  static uint8_t buf[MAXN * 8];
  for (int64_t i = 0; i < numel(t->rank, t->dims); i++)
    keel_elem_set_f64(t->dt, buf, (size_t)i, t->v[i]);
  keel_value_t *out = NULL;
  CHECK_OK(keel_tensor_create(s, (keel_dtype)t->dt, t->rank, t->dims, buf, &out));
  return out;
}

/* A one-node model: inputs in[] (a NULL name is an omitted input),
 * outputs out_names (comma-separated, may hold empty names). */
static keel_session_t *session(const char *op, int opset, const tv *in, int n_in,
                               const char *out_names, const attr *attrs) {
  mb_graph *g = mb_graph_new("main");
  char ins[256] = "";
  for (int i = 0; i < n_in; i++) {
    if (i) strcat(ins, ",");
    if (!in[i].name) continue;
    strcat(ins, in[i].name);
    mb_input(g, in[i].name, in[i].dt, in[i].rank, in[i].dims);
  }
  char outs[128];
  snprintf(outs, sizeof outs, "%s", out_names);
  for (char *p = strtok(outs, ","); p; p = strtok(NULL, ","))
    if (*p) mb_output(g, p, KEEL_UNDEFINED, -1, NULL);
  set_attrs(mb_add(g, op, ins, out_names), attrs);
  return mb_session(g, opset);
}

/* Runs the session on in[]; returns the status. */
static keel_status run(keel_session_t *s, const tv *in, int n_in, keel_value_t **out) {
  const char *names[8];
  keel_value_t *vals[8];
  int n = 0;
  for (int i = 0; i < n_in; i++)
    if (in[i].name) names[n] = in[i].name, vals[n++] = value_of(s, &in[i]);
  keel_status st = keel_run(s, names, vals, (size_t)n, out);
  for (int i = 0; i < n; i++) keel_value_release(vals[i]);
  return st;
}

/* Output v against want (shape and dtype included); tolerance by dtype. */
static bool same_output(const keel_value_t *v, const tv *want, double tol) {
  if (!v || keel_value_dtype(v) != want->dt || keel_value_rank(v) != want->rank) {
    fprintf(stderr, "  output %s: wrong dtype or rank\n", want->name);
    return false;
  }
  for (int i = 0; i < want->rank; i++)
    if (keel_value_shape(v)[i] != want->dims[i]) {
      fprintf(stderr, "  output %s: dim %d is %lld, expected %lld\n", want->name, i,
              (long long)keel_value_shape(v)[i], (long long)want->dims[i]);
      return false;
    }
  if (want->dt == KEEL_FLOAT16 || want->dt == KEEL_BFLOAT16) tol = KEEL_MAX(tol, 1e-2);
  for (int64_t i = 0; i < keel_value_numel(v); i++) {
    double a = keel_value_at(v, i), b = want->v[i];
    if (isnan(b) ? !isnan(a) : !(fabs(a - b) <= tol * (1 + fabs(b)))) {
      fprintf(stderr, "  output %s element %lld: got %.9g, expected %.9g\n", want->name,
              (long long)i, a, b);
      return false;
    }
  }
  return true;
}

/* Runs op on in[] and checks the n_out expected outputs. */
static void check_case(const char *op, int opset, const tv *in, int n_in, const char *out_names,
                       const attr *attrs, const tv *want, int n_out, double tol) {
  keel_session_t *s = session(op, opset, in, n_in, out_names, attrs);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *out[8] = {0};
  CHECK_OK(run(s, in, n_in, out));
  for (int i = 0; i < n_out; i++) {
    bool ok = same_output(out[i], &want[i], tol);
    CHECK(ok);
    if (!ok) fprintf(stderr, "  in %s (opset %d)\n", op, opset);
  }
  for (int i = 0; i < 8; i++) keel_value_release(out[i]);
  keel_session_destroy(s);
}

static void fill(double *v, int64_t n, int dt) {
  for (int64_t i = 0; i < n; i++) v[i] = as_dtype(dt, frand() * 3);
}

static int float_dt(void) {
  static const int d[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16, KEEL_FLOAT, KEEL_BFLOAT16};
  return d[rnd(5)];
}

/* Random (N, C, D...) shape of rank 2..5 with small dims. */
static int random_nc_shape(int64_t *dims) {
  int rank = 2 + rnd(4);
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(d < 2 ? 4 : 3);
  return rank;
}

/* ============================================ BatchNormalization */

/* Per element: (x - mean[p]) / sqrt(var[p] + eps) * scale[p] + B[p], p the
 * parameter index (c, or (c, d) for spatial=0). */
static void ref_bn(const tv *x, const double *par, int64_t P, bool spatial, double eps,
                   double *y) {
  int64_t C = x->dims[1], D = numel(x->rank - 2, x->dims + 2);
  for (int64_t i = 0; i < numel(x->rank, x->dims); i++) {
    int64_t c = (i / D) % C, p = spatial ? c : c * D + i % D;
    y[i] = (x->v[i] - par[2 * P + p]) / sqrt(par[3 * P + p] + eps) * par[p] + par[P + p];
  }
}

/* Batch statistics per parameter index (population variance). */
static void ref_bn_stats(const tv *x, int64_t P, bool spatial, double *mean, double *var) {
  int64_t C = x->dims[1], D = numel(x->rank - 2, x->dims + 2), n = numel(x->rank, x->dims);
  for (int pass = 0; pass < 2; pass++)
    for (int64_t p = 0; p < P; p++) {
      double s = 0, cnt = 0;
      for (int64_t i = 0; i < n; i++) {
        int64_t c = (i / D) % C, q = spatial ? c : c * D + i % D;
        if (q != p) continue;
        s += pass ? (x->v[i] - mean[p]) * (x->v[i] - mean[p]) : x->v[i];
        cnt++;
      }
      (pass ? var : mean)[p] = s / cnt;
    }
}

static void random_bn_case(void) {
  static double xv[MAXN], par[4 * MAXN], yv[MAXN], rm[MAXN], rv[MAXN], bm[MAXN], bv[MAXN];
  static const int opsets[] = {6, 7, 9, 14, 15, 15};
  int opset = opsets[rnd(6)], dt = float_dt();
  bool spatial = opset >= 9 || rnd(2), train = rnd(3) == 0;
  int64_t dims[6], pd[6];
  int rank = random_nc_shape(dims);
  tv in[5];
  in[0] = mk("X", dt, rank, dims, xv);
  fill(xv, numel(rank, dims), dt);
  int pr = spatial ? 1 : rank - 1;
  pd[0] = dims[1];
  for (int d = 2; d < rank; d++) pd[d - 1] = dims[d];
  int64_t P = numel(pr, pd);
  int pdt = opset >= 15 ? float_dt() : dt; /* opset 15: T1, T2 may differ from T */
  const char *pn[4] = {"scale", "B", "mean", "var"};
  for (int i = 0; i < 4; i++) {
    fill(par + i * P, P, pdt);
    if (i == 3)
      for (int64_t p = 0; p < P; p++) par[3 * P + p] = as_dtype(pdt, fabs(par[3 * P + p]) + 0.1);
    in[i + 1] = mk(pn[i], pdt, pr, pd, par + i * P);
  }
  float eps = rnd(2) ? 1e-5f : 0.01f, mom = rnd(2) ? 0.9f : 0.5f;
  attr at[4] = {{"epsilon", 'f', .f = eps}, {"momentum", 'f', .f = mom}};
  int na = 2;
  if (!spatial) at[na++] = (attr){"spatial", 'i', .i = 0};
  if (train && opset >= 14) at[na++] = (attr){"training_mode", 'i', .i = 1};
  static double refpar[4 * MAXN];
  memcpy(refpar, par, sizeof(double) * (size_t)(4 * P));
  if (train) /* the batch statistics replace the inputs' in Y */
    ref_bn_stats(&in[0], P, spatial, refpar + 2 * P, refpar + 3 * P);
  for (int64_t p = 0; p < P; p++) {
    bm[p] = refpar[2 * P + p], bv[p] = refpar[3 * P + p];
    rm[p] = par[2 * P + p] * mom + bm[p] * (1 - mom);
    rv[p] = par[3 * P + p] * mom + bv[p] * (1 - mom);
  }
  ref_bn(&in[0], refpar, P, spatial, eps, yv);
  tv want[5] = {mk("Y", dt, rank, dims, yv), mk("rm", pdt, pr, pd, rm), mk("rv", pdt, pr, pd, rv),
                mk("bm", pdt, pr, pd, bm), mk("bv", pdt, pr, pd, bv)};
  /* opset 14+ inference may still name the running outputs: unchanged */
  bool stats = train || (opset >= 14 && rnd(3) == 0);
  const char *outs = !stats ? "Y" : opset >= 14 ? "Y,rm,rv" : "Y,rm,rv,bm,bv";
  check_case("BatchNormalization", opset, in, 5, outs, at, want, stats ? (opset >= 14 ? 3 : 5) : 1,
             1e-4);
}

/* ========================================= InstanceNormalization */

static void random_instancenorm_case(void) {
  static double xv[MAXN], sv[16], bv[16], yv[MAXN];
  int dt = float_dt();
  int64_t dims[6];
  int rank = random_nc_shape(dims);
  if (rank == 2) dims[rank++] = 3; /* statistics need spatial dims */
  int64_t C = dims[1], D = numel(rank - 2, dims + 2), n = numel(rank, dims);
  fill(xv, n, dt);
  fill(sv, C, dt);
  fill(bv, C, dt);
  for (int64_t g = 0; g < n / D; g++) { /* g = (n, c) */
    double m = 0, v = 0;
    for (int64_t j = 0; j < D; j++) m += xv[g * D + j] / (double)D;
    for (int64_t j = 0; j < D; j++) v += (xv[g * D + j] - m) * (xv[g * D + j] - m) / (double)D;
    for (int64_t j = 0; j < D; j++)
      yv[g * D + j] = (xv[g * D + j] - m) / sqrt(v + 1e-5) * sv[g % C] + bv[g % C];
  }
  tv in[3] = {mk("X", dt, rank, dims, xv), mk("S", dt, 1, &C, sv), mk("B", dt, 1, &C, bv)};
  tv want = mk("Y", dt, rank, dims, yv);
  check_case("InstanceNormalization", rnd(2) ? 6 : 1, in, 3, "Y", NULL, &want, 1,
             D == 1 ? 1e-2 : 1e-4);
}

/* ============================================ GroupNormalization */

/* Per (n, group): moments over the group's channels and spatial dims;
 * scale/bias per group (opset 18) or per channel (opset 21). */
static void random_groupnorm_case(void) {
  static double xv[MAXN], sv[16], bv[16], yv[MAXN];
  int dt = float_dt(), opset = rnd(2) ? 21 : 18;
  int64_t dims[6];
  int rank = random_nc_shape(dims);
  int64_t G = 1 + rnd(3);
  dims[1] = G * (1 + rnd(3));
  int64_t C = dims[1], D = numel(rank - 2, dims + 2), n = numel(rank, dims), P = opset < 21 ? G : C;
  int64_t cg = C / G, gsize = cg * D;
  fill(xv, n, dt);
  fill(sv, P, dt);
  fill(bv, P, dt);
  float eps = rnd(2) ? 1e-5f : 0.1f;
  for (int64_t g = 0; g < n / gsize; g++) { /* g = (n, group) */
    double m = 0, v = 0;
    for (int64_t j = 0; j < gsize; j++) m += xv[g * gsize + j] / (double)gsize;
    for (int64_t j = 0; j < gsize; j++) v += (xv[g * gsize + j] - m) * (xv[g * gsize + j] - m) / (double)gsize;
    for (int64_t j = 0; j < gsize; j++) {
      int64_t c = (g % G) * cg + j / D, p = opset < 21 ? g % G : c;
      yv[g * gsize + j] = (xv[g * gsize + j] - m) / sqrt(v + (double)eps) * sv[p] + bv[p];
    }
  }
  tv in[3] = {mk("X", dt, rank, dims, xv), mk("S", dt, 1, &P, sv), mk("B", dt, 1, &P, bv)};
  tv want = mk("Y", dt, rank, dims, yv);
  attr at[3] = {{"num_groups", 'i', .i = G}, {"epsilon", 'f', .f = eps}};
  check_case("GroupNormalization", opset, in, 3, "Y", at, &want, 1, gsize == 1 ? 1e-2 : 1e-4);
}

static void expect_error(const char *op, int opset, const tv *in, int n_in, const attr *at,
                         keel_status want);

static void check_groupnorm_errors(void) {
  double x[24], p[4] = {1, 1, 1, 1};
  for (int i = 0; i < 24; i++) x[i] = i;
  int64_t d[3] = {2, 3, 4};
  tv in[3] = {mk("X", KEEL_FLOAT, 3, d, x), mk("S", KEEL_FLOAT, 1, (int64_t[]){3}, p),
              mk("B", KEEL_FLOAT, 1, (int64_t[]){3}, p)};
  attr g2[2] = {{"num_groups", 'i', .i = 2}}; /* 2 does not divide 3 channels */
  expect_error("GroupNormalization", 21, in, 3, g2, KEEL_ERR_INVALID_MODEL);
  expect_error("GroupNormalization", 21, in, 3, NULL, KEEL_ERR_INVALID_MODEL); /* no num_groups */
  attr g3[2] = {{"num_groups", 'i', .i = 3}};
  in[1] = mk("S", KEEL_FLOAT, 1, (int64_t[]){4}, p); /* 4 scales for 3 channels */
  expect_error("GroupNormalization", 21, in, 3, g3, KEEL_ERR_SHAPE);
  attr g1[2] = {{"num_groups", 'i', .i = 1}};
  expect_error("GroupNormalization", 18, in, 3, g1, KEEL_ERR_SHAPE); /* opset 18: one per group */
}

/* ============================================ LayerNormalization */

/* Scale/B shapes: the full normalized shape, its last dim, or a scalar. */
static int ln_param_shape(int rank, const int64_t *dims, int axis, int kind, int64_t *pd) {
  if (kind == 0) {
    for (int d = axis; d < rank; d++) pd[d - axis] = dims[d];
    return rank - axis;
  }
  pd[0] = kind == 1 && axis < rank ? dims[rank - 1] : 1;
  return 1;
}

static void random_layernorm_case(void) {
  static double xv[MAXN], sv[MAXN], bv[MAXN], yv[MAXN], mv[MAXN], iv[MAXN];
  int dt = float_dt(), rank = 1 + rnd(4), kind = rnd(3), with_b = rnd(2), stats = rnd(2);
  int64_t dims[6], pd[6], sd[6];
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(4);
  int axis = rnd(rank);
  if (rnd(3) == 0) { /* a long last axis: the vectorized row (16 lanes and a tail) */
    rank = 1 + rnd(2), axis = rank - 1;
    dims[axis] = 1 + rnd(250); /* with 4 rows at most: within MAXN */
  }
  int pr = ln_param_shape(rank, dims, axis, kind, pd);
  int64_t n = numel(rank, dims), D = numel(rank - axis, dims + axis), P = numel(pr, pd);
  fill(xv, n, dt);
  fill(sv, P, dt);
  fill(bv, P, dt);
  for (int64_t r = 0; r < n / D; r++) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < D; j++) m += xv[r * D + j] / (double)D;
    for (int64_t j = 0; j < D; j++) v += (xv[r * D + j] - m) * (xv[r * D + j] - m) / (double)D;
    mv[r] = m, iv[r] = 1 / sqrt(v + 1e-5);
    for (int64_t j = 0; j < D; j++)
      yv[r * D + j] = (xv[r * D + j] - m) * iv[r] * sv[j % P] + (with_b ? bv[j % P] : 0);
  }
  for (int d = 0; d < rank; d++) sd[d] = d < axis ? dims[d] : 1;
  tv in[3] = {mk("X", dt, rank, dims, xv), mk("S", dt, pr, pd, sv), mk("B", dt, pr, pd, bv)};
  tv want[3] = {mk("Y", dt, rank, dims, yv), mk("M", KEEL_FLOAT, rank, sd, mv),
                mk("I", KEEL_FLOAT, rank, sd, iv)};
  attr at[2] = {{"axis", 'i', .i = rnd(2) ? axis : axis - rank}};
  check_case("LayerNormalization", 17, in, with_b ? 3 : 2, stats ? "Y,M,I" : "Y", at, want,
             stats ? 3 : 1, D == 1 ? 1e-2 : 1e-4);
}

/* ===================================== MeanVarianceNormalization */

static void random_mvn_case(void) {
  static double xv[MAXN], yv[MAXN];
  int dt = float_dt(), rank = 1 + rnd(4), n_axes = 0, def = rank == 4 && rnd(2);
  int64_t dims[6], axes[6];
  uint8_t mask[6] = {0};
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(4);
  for (int d = 0; d < rank; d++)
    if (def ? d != 1 : rnd(2)) mask[d] = 1, axes[n_axes++] = rnd(2) ? d : d - rank;
  int64_t n = numel(rank, dims);
  fill(xv, n, dt);
  for (int64_t i = 0; i < n; i++) { /* the set of i: same coords on the kept axes */
    double m = 0, v = 0, cnt = 0;
    for (int pass = 0; pass < 2; pass++) {
      for (int64_t j = 0; j < n; j++) {
        bool same = true;
        for (int64_t d = rank - 1, a = i, b = j; d >= 0; a /= dims[d], b /= dims[d], d--)
          same = same && (mask[d] || a % dims[d] == b % dims[d]);
        if (!same) continue;
        if (pass) v += (xv[j] - m) * (xv[j] - m) / cnt;
        else m += xv[j], cnt++;
      }
      if (!pass) m /= cnt;
    }
    yv[i] = (xv[i] - m) / (sqrt(v) + 1e-9);
  }
  tv in = mk("X", dt, rank, dims, xv), want = mk("Y", dt, rank, dims, yv);
  attr at[2] = {{"axes", 'I', .n = n_axes, .ints = axes}};
  check_case("MeanVarianceNormalization", 13, &in, 1, "Y", def ? NULL : at, &want, 1, 1e-3);
}

/* =========================================================== LRN */

static void random_lrn_case(void) {
  static double xv[MAXN], yv[MAXN];
  int dt = float_dt();
  int64_t dims[6], size = 1 + rnd(5);
  int rank = random_nc_shape(dims);
  int64_t C = dims[1], D = numel(rank - 2, dims + 2), n = numel(rank, dims);
  float alpha = rnd(2) ? 1e-4f : 0.5f, beta = rnd(2) ? 0.75f : 0.3f, bias = rnd(2) ? 1.0f : 2.0f;
  fill(xv, n, dt);
  for (int64_t i = 0; i < n; i++) {
    int64_t c = (i / D) % C, lo = c - (size - 1) / 2, hi = c + size / 2;
    double sq = 0;
    for (int64_t j = lo < 0 ? 0 : lo; j <= hi && j < C; j++) {
      double v = xv[i + (j - c) * D];
      sq += v * v;
    }
    yv[i] = xv[i] / pow(bias + alpha / (double)size * sq, beta);
  }
  tv in = mk("X", dt, rank, dims, xv), want = mk("Y", dt, rank, dims, yv);
  attr at[5] = {{"size", 'i', .i = size}, {"alpha", 'f', .f = alpha}, {"beta", 'f', .f = beta},
                {"bias", 'f', .f = bias}};
  check_case("LRN", 13, &in, 1, "Y", at, &want, 1, 1e-4);
}

/* =============================================== LpNormalization */

static void random_lp_case(void) {
  static double xv[MAXN], yv[MAXN];
  int dt = float_dt(), rank = 1 + rnd(4), p = 1 + rnd(2);
  int64_t dims[6];
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(4);
  int axis = rnd(rank);
  int64_t n = numel(rank, dims), inner = numel(rank - axis - 1, dims + axis + 1);
  fill(xv, n, dt);
  for (int64_t r = 0; r < dims[axis]; r++) xv[r * inner] = 0; /* one line of norm 0: 0, not NaN */
  for (int64_t i = 0; i < n; i++) {
    int64_t base = i - ((i / inner) % dims[axis]) * inner;
    double s = 0;
    for (int64_t r = 0; r < dims[axis]; r++) {
      double v = xv[base + r * inner];
      s += p == 1 ? fabs(v) : v * v;
    }
    yv[i] = s == 0 ? 0 : xv[i] / (p == 1 ? s : sqrt(s));
  }
  tv in = mk("X", dt, rank, dims, xv), want = mk("Y", dt, rank, dims, yv);
  attr at[3] = {{"p", 'i', .i = p}, {"axis", 'i', .i = rnd(2) ? axis : axis - rank}};
  check_case("LpNormalization", 1, &in, 1, "Y", at, &want, 1, 1e-4);
}

/* ======================================================== losses */

/* NLL over lp (N, C, D): loss per sample, reduced per `red`. */
static void ref_nll(const double *lp, const double *tgt, const double *w, int64_t N, int64_t C,
                    int64_t D, bool has_ii, int64_t ii, int red, double *out) {
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) {
      int64_t t = (int64_t)tgt[n * D + d];
      double wt = has_ii && t == ii ? 0 : w ? w[t] : 1;
      double l = wt ? -lp[(n * C + t) * D + d] * wt : 0;
      if (red == 0) out[n * D + d] = l;
      sum += l, wsum += wt;
    }
  if (red == 1) out[0] = sum;
  if (red == 2) out[0] = sum / wsum;
}

static void random_loss_case(bool sce) {
  static double xv[MAXN], tv_[MAXN], wv[16], lp[MAXN], out[MAXN];
  static const char *reds[3] = {"none", "sum", "mean"};
  int dt = rnd(3) ? KEEL_FLOAT : rnd(2) ? KEEL_DOUBLE : KEEL_FLOAT16, red = rnd(3);
  int rank = 2 + rnd(3), has_w = rnd(2), has_ii = rnd(2);
  int64_t dims[6], td[6], ii = rnd(2) ? -1 : 1 + rnd(3);
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(4);
  int64_t N = dims[0], C = dims[1], D = numel(rank - 2, dims + 2), n = numel(rank, dims);
  td[0] = N;
  for (int d = 2; d < rank; d++) td[d - 1] = dims[d];
  fill(xv, n, dt);
  fill(wv, C, dt);
  for (int64_t i = 0; i < N * D; i++) tv_[i] = has_ii && rnd(4) == 0 ? (double)ii : rnd((int)C);
  for (int64_t i = 0; i < n; i++) lp[i] = xv[i];
  if (sce) /* log-softmax along C */
    for (int64_t j = 0; j < N * D; j++) {
      int64_t b = (j / D) * C * D + j % D;
      double s = 0;
      for (int64_t c = 0; c < C; c++) s += exp(xv[b + c * D]);
      for (int64_t c = 0; c < C; c++) lp[b + c * D] = xv[b + c * D] - log(s);
    }
  ref_nll(lp, tv_, has_w ? wv : NULL, N, C, D, has_ii, ii, red, out);
  tv in[3] = {mk("X", dt, rank, dims, xv), mk("T", rnd(2) ? KEEL_INT64 : KEEL_INT32, rank - 1, td, tv_),
              mk("W", dt, 1, &C, wv)};
  tv want[2] = {mk("L", dt, red ? 0 : rank - 1, td, out), mk("P", dt, rank, dims, lp)};
  attr at[3] = {{"reduction", 's', .s = reds[red]}, {"ignore_index", 'i', .i = ii}};
  if (!has_ii) at[1] = at[2];
  bool log_prob = sce && rnd(2);
  check_case(sce ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 13, in, has_w ? 3 : 2,
             log_prob ? "L,P" : "L", at, want, log_prob ? 2 : 1, 1e-4);
}

/* ======================================================== errors */

/* A label outside [0, C) is a run-time error naming it; the session runs
 * the next good input. */
static void check_bad_label(void) {
  double x[6] = {0.1, 0.2, 0.7, 0.3, 0.3, 0.4}, bad[2] = {1, 3}, good[2] = {1, 2};
  tv in[2] = {mk("X", KEEL_FLOAT, 2, (int64_t[]){2, 3}, x), mk("T", KEEL_INT64, 1, (int64_t[]){2}, bad)};
  keel_session_t *s = session("SoftmaxCrossEntropyLoss", 13, in, 2, "L", NULL);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *out[1] = {0};
  CHECK_STATUS(run(s, in, 2, out), KEEL_ERR_RUNTIME);
  CHECK(strstr(keel_last_error(), "target 3") != NULL);
  in[1].v = good;
  CHECK_OK(run(s, in, 2, out));
  CHECK(out[0] && keel_value_rank(out[0]) == 0);
  keel_value_release(out[0]);
  keel_session_destroy(s);
}

/* One run expected to fail with `want`. */
static void expect_error(const char *op, int opset, const tv *in, int n_in, const attr *at,
                         keel_status want) {
  keel_session_t *s = session(op, opset, in, n_in, "Y", at);
  if (!s) return;
  keel_value_t *out[1] = {0};
  CHECK_STATUS(run(s, in, n_in, out), want);
  keel_value_release(out[0]);
  keel_session_destroy(s);
}

static void check_errors(void) {
  double x[24], p3[3] = {1, 1, 1}, p2[2] = {1, 1};
  for (int i = 0; i < 24; i++) x[i] = i;
  int64_t d[3] = {2, 3, 4};
  tv bn[5] = {mk("X", KEEL_FLOAT, 3, d, x), mk("S", KEEL_FLOAT, 1, (int64_t[]){3}, p3),
              mk("B", KEEL_FLOAT, 1, (int64_t[]){2}, p2), mk("M", KEEL_FLOAT, 1, (int64_t[]){3}, p3),
              mk("V", KEEL_FLOAT, 1, (int64_t[]){3}, p3)};
  expect_error("BatchNormalization", 15, bn, 5, NULL, KEEL_ERR_SHAPE); /* B has 2 of 3 */
  tv one = mk("X", KEEL_FLOAT, 3, d, x);
  expect_error("LRN", 13, &one, 1, NULL, KEEL_ERR_INVALID_MODEL); /* no size */
  attr p3a[2] = {{"p", 'i', .i = 3}};
  expect_error("LpNormalization", 1, &one, 1, p3a, KEEL_ERR_INVALID_MODEL);
  attr ax[2] = {{"axis", 'i', .i = 5}};
  expect_error("LpNormalization", 1, &one, 1, ax, KEEL_ERR_SHAPE);
  attr mvn[2] = {{"axes", 'I', .n = 1, .ints = (int64_t[]){3}}};
  expect_error("MeanVarianceNormalization", 13, &one, 1, mvn, KEEL_ERR_SHAPE);
  tv ln[2] = {one, mk("S", KEEL_FLOAT, 1, (int64_t[]){3}, p3)}; /* 3 does not fit [4] */
  expect_error("LayerNormalization", 17, ln, 2, NULL, KEEL_ERR_SHAPE);
  tv ints = mk("X", KEEL_INT32, 3, d, x);
  expect_error("InstanceNormalization", 6, (tv[]){ints, bn[1], bn[3]}, 3, NULL, KEEL_ERR_UNSUPPORTED);
  double t[8] = {0};
  tv nl[2] = {one, mk("T", KEEL_INT64, 2, (int64_t[]){2, 3}, t)}; /* target must be (2, 4) */
  expect_error("NegativeLogLikelihoodLoss", 13, nl, 2, NULL, KEEL_ERR_SHAPE);
  nl[1] = mk("T", KEEL_INT64, 2, (int64_t[]){2, 4}, t);
  attr red[2] = {{"reduction", 's', .s = "average"}};
  expect_error("NegativeLogLikelihoodLoss", 13, nl, 2, red, KEEL_ERR_INVALID_MODEL);
}

/* A channel with zero variance: a finite output (epsilon), not NaN. */
static void check_constant_input(void) {
  double x[8] = {5, 5, 5, 5, 5, 5, 5, 5}, y[8] = {0}, s[2] = {1, 1}, b[2] = {0, 0};
  int64_t d[3] = {1, 2, 4};
  tv in[3] = {mk("X", KEEL_FLOAT, 3, d, x), mk("S", KEEL_FLOAT, 1, (int64_t[]){2}, s),
              mk("B", KEEL_FLOAT, 1, (int64_t[]){2}, b)};
  tv want = mk("Y", KEEL_FLOAT, 3, d, y);
  check_case("InstanceNormalization", 6, in, 3, "Y", NULL, &want, 1, 1e-6);
}

int main(void) {
  for (int i = 0; i < 80; i++) random_bn_case();
  for (int i = 0; i < 40; i++) random_instancenorm_case();
  for (int i = 0; i < 60; i++) random_groupnorm_case();
  for (int i = 0; i < 80; i++) random_layernorm_case();
  for (int i = 0; i < 40; i++) random_mvn_case();
  for (int i = 0; i < 40; i++) random_lrn_case();
  for (int i = 0; i < 40; i++) random_lp_case();
  for (int i = 0; i < 80; i++) random_loss_case(i & 1);
  check_bad_label();
  check_errors();
  check_groupnorm_errors();
  check_constant_input();
  return check_report();
}
