/* test_ops_pool.c: MaxPool (with Indices), AveragePool, LpPool, the Global
 * pools and MaxUnpool through real sessions, against naive references
 * written here that visit every kernel tap of every output and test it
 * against the input and the padded extent: random ranks, kernels, strides,
 * dilations, pads, auto_pad, ceil_mode, count_include_pad, storage_order
 * and types; plus error cases that must leave the session usable. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0xD1B54A32D192ED03ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

enum { MAXP, AVGP, LPP };

typedef struct pgeo {
  int kind, nd, n, c, ceil, include_pad, colmajor, omit_pads;
  int64_t in[3], k[3], s[3], d[3], pads[6];
  float p;
  const char *auto_pad;
  int64_t out[3], pb[3], pe[3]; /* filled by pool_geometry */
} pgeo;

static int64_t prod(int n, const int64_t *v) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

/* Output sizes from the ONNX text (ceil_mode drops a last window that
 * would start in the end padding); false when invalid. */
static bool pool_geometry(pgeo *g) {
  for (int i = 0; i < g->nd; i++) {
    int64_t ext = (g->k[i] - 1) * g->d[i] + 1, in = g->in[i], s = g->s[i];
    if (!strncmp(g->auto_pad, "SAME", 4)) {
      g->out[i] = (in + s - 1) / s;
      int64_t total = (g->out[i] - 1) * s + ext - in;
      total = total < 0 ? 0 : total;
      g->pb[i] = !strcmp(g->auto_pad, "SAME_UPPER") ? total / 2 : (total + 1) / 2;
      g->pe[i] = total - g->pb[i];
      continue;
    }
    bool valid = !strcmp(g->auto_pad, "VALID");
    g->pb[i] = valid ? 0 : g->pads[i], g->pe[i] = valid ? 0 : g->pads[g->nd + i];
    int64_t span = in + g->pb[i] + g->pe[i] - ext;
    if (span < 0) return false;
    bool ceil = g->ceil && !valid; /* VALID has its own formula */
    g->out[i] = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (g->out[i] - 1) * s >= in + g->pb[i]) g->out[i]--;
  }
  return true;
}

/* Every tap of every window; ind gets MaxPool's flat indices. */
static void ref_pool(const pgeo *g, const double *x, double *y, double *ind) {
  int64_t isz = prod(g->nd, g->in), osz = prod(g->nd, g->out), ksz = prod(g->nd, g->k);
  for (int64_t pl = 0; pl < g->n * g->c; pl++)
    for (int64_t op = 0; op < osz; op++) {
      int64_t o[3], r = op, cnt = 0, inside = 0, best_i = -1;
      double acc = 0, best = -INFINITY;
      for (int d = g->nd - 1; d >= 0; d--) o[d] = r % g->out[d], r /= g->out[d];
      for (int64_t t = 0; t < ksz; t++) {
        int64_t kc[3], rt = t, off = 0, coff = 0;
        bool in_x = true, in_pad = true;
        for (int d = g->nd - 1; d >= 0; d--) kc[d] = rt % g->k[d], rt /= g->k[d];
        for (int d = 0; d < g->nd; d++) {
          int64_t ic = o[d] * g->s[d] - g->pb[d] + kc[d] * g->d[d];
          in_x = in_x && ic >= 0 && ic < g->in[d];
          in_pad = in_pad && ic >= -g->pb[d] && ic < g->in[d] + g->pe[d];
          off = off * g->in[d] + ic;
        }
        for (int d = g->nd - 1; d >= 0; d--) /* column-major index */
          coff = coff * g->in[d] + (o[d] * g->s[d] - g->pb[d] + kc[d] * g->d[d]);
        inside += in_pad;
        if (!in_x) continue;
        double v = x[pl * isz + off];
        cnt++;
        if (g->kind == AVGP) acc += v;
        if (g->kind == LPP) acc += pow(fabs(v), g->p);
        if (v > best) best = v, best_i = pl * isz + (g->colmajor ? coff : off);
      }
      double *dst = y + pl * osz + op;
      if (g->kind == MAXP) *dst = best, ind[pl * osz + op] = (double)best_i;
      int64_t div = g->include_pad ? inside : cnt;
      if (g->kind == AVGP) *dst = div ? acc / (double)div : 0; /* all-padding window: 0 */
      if (g->kind == LPP) *dst = pow(acc, 1.0 / g->p);
    }
}

/* ======================================================== sessions */

static const char *OPS[] = {"MaxPool", "AveragePool", "LpPool"};

static keel_session_t *pool_session(const pgeo *g, int dtype, bool indices, int opset) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", dtype, -1, NULL);
  mb_output(gr, "Y", dtype, -1, NULL);
  if (indices) mb_output(gr, "I", KEEL_INT64, -1, NULL);
  mb_node *nd = mb_add(gr, OPS[g->kind], indices ? "X" : "X", indices ? "Y,I" : "Y");
  mb_attr_ints(nd, "kernel_shape", g->nd, g->k);
  mb_attr_ints(nd, "strides", g->nd, g->s);
  if (g->kind != LPP || opset >= 18) mb_attr_ints(nd, "dilations", g->nd, g->d);
  if (strcmp(g->auto_pad, "NOTSET")) mb_attr_s(nd, "auto_pad", g->auto_pad);
  else if (!g->omit_pads) mb_attr_ints(nd, "pads", 2 * g->nd, g->pads);
  if (g->ceil) mb_attr_i(nd, "ceil_mode", 1);
  if (g->include_pad) mb_attr_i(nd, "count_include_pad", 1);
  if (g->colmajor) mb_attr_i(nd, "storage_order", 1);
  if (g->kind == LPP) mb_attr_i(nd, "p", (int64_t)g->p);
  return mb_session(gr, opset);
}

/* Values of a type as doubles (exactly what the tensor holds) and bytes. */
static void *rand_data(int dtype, double *v, int64_t n) {
  size_t es = keel_dtype_size((keel_dtype)dtype);
  char *p = malloc((size_t)n * es + 1);
  for (int64_t i = 0; i < n; i++) {
    double x = keel_dtype_is_float(dtype) ? (double)rnd(-1000, 1000) / 997.0
               : dtype == KEEL_UINT8      ? (double)rnd(0, 255)
                                          : (double)rnd(-128, 127);
    if (dtype == KEEL_FLOAT) x = (float)x;
    if (dtype == KEEL_FLOAT16) x = keel_f16_to_f32(keel_f32_to_f16((float)x));
    if (dtype == KEEL_FLOAT16) ((uint16_t *)p)[i] = keel_f32_to_f16((float)x);
    else keel_elem_set_f64(dtype, p, (size_t)i, x);
    v[i] = x;
  }
  return p;
}

static bool close_to(const keel_value_t *v, const double *ref, int64_t n, double tol,
                     const char *what) {
  if (!v || keel_value_numel(v) != n) {
    fprintf(stderr, "%s: %lld elements, expected %lld\n", what,
            v ? (long long)keel_value_numel(v) : -1LL, (long long)n);
    return false;
  }
  for (int64_t i = 0; i < n; i++) {
    double a = keel_value_at(v, i);
    if (!(fabs(a - ref[i]) <= tol * (1 + fabs(ref[i])))) {
      fprintf(stderr, "%s: element %lld = %.7g, expected %.7g\n", what, (long long)i, a, ref[i]);
      return false;
    }
  }
  return true;
}

static void run_case(pgeo *g, int dtype, int opset) {
  if (!pool_geometry(g)) return;
  bool indices = g->kind == MAXP && next() % 2;
  int64_t xd[5] = {g->n, g->c}, nx = g->n * g->c * prod(g->nd, g->in);
  int64_t ny = g->n * g->c * prod(g->nd, g->out);
  memcpy(xd + 2, g->in, sizeof(int64_t) * (size_t)g->nd);
  double *x = malloc(sizeof(double) * (size_t)nx), *y = malloc(sizeof(double) * (size_t)ny);
  double *ind = malloc(sizeof(double) * (size_t)ny);
  void *px = rand_data(dtype, x, nx);
  ref_pool(g, x, y, ind);
  for (int64_t i = 0; i < ny; i++) /* all-padding max windows: the type's lowest */
    if (y[i] == -INFINITY && !keel_dtype_is_float(dtype)) y[i] = dtype == KEEL_INT8 ? -128 : 0;
  keel_session_t *s = pool_session(g, dtype, indices, opset);
  CHECK(s != NULL);
  keel_value_t *in[1] = {mb_tensor(s, dtype, g->nd + 2, xd, px)}, *out[2] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, in, 1, out));
  char what[128];
  snprintf(what, sizeof what, "%s nd=%d %s ceil=%d pad=%d %s", OPS[g->kind], g->nd, g->auto_pad,
           g->ceil, g->include_pad, keel_dtype_name((keel_dtype)dtype));
  CHECK(close_to(out[0], y, ny, dtype == KEEL_FLOAT16 ? 4e-3 : 1e-5, what));
  if (indices) CHECK(close_to(out[1], ind, ny, 0, "Indices"));
  keel_value_release(in[0]), keel_value_release(out[0]), keel_value_release(out[1]);
  keel_session_destroy(s);
  free(x), free(y), free(ind), free(px);
}

static const char *PADS[] = {"NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};

static void random_geo(pgeo *g, int kind) {
  memset(g, 0, sizeof *g);
  g->kind = kind, g->nd = (int)rnd(1, 3), g->n = (int)rnd(1, 2), g->c = (int)rnd(1, 3);
  g->auto_pad = PADS[rnd(0, 5)];
  g->ceil = next() % 3 == 0, g->include_pad = next() % 2, g->colmajor = next() % 3 == 0;
  g->p = (float)rnd(1, 3);
  for (int i = 0; i < g->nd; i++) {
    g->in[i] = rnd(1, g->nd == 3 ? 5 : 9), g->k[i] = rnd(1, 3), g->s[i] = rnd(1, 3);
    g->d[i] = rnd(1, 2);
    g->pads[i] = rnd(0, g->k[i] - 1), g->pads[g->nd + i] = rnd(0, g->k[i] - 1);
  }
  if ((g->omit_pads = next() % 4 == 0)) memset(g->pads, 0, sizeof g->pads);
}

static void check_random(void) {
  static const int ftypes[] = {KEEL_FLOAT, KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16};
  static const int mtypes[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT8, KEEL_UINT8, KEEL_FLOAT16};
  for (int i = 0; i < 300; i++) {
    pgeo g;
    random_geo(&g, i % 3);
    int dt = g.kind == MAXP ? mtypes[i % 5] : ftypes[i % 4];
    run_case(&g, dt, g.kind == MAXP ? 12 : 19); /* dilations: AveragePool 19, LpPool 18 */
  }
}

/* ===================================================== global pools */

static void check_global(int kind, int dtype) {
  static const char *names[] = {"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"};
  int r = (int)rnd(3, 5);
  int64_t d[5] = {rnd(1, 2), rnd(1, 3), rnd(1, 4), rnd(1, 4), rnd(1, 4)}, yd[5];
  int64_t plane = prod(r - 2, d + 2), nx = prod(r, d), planes = d[0] * d[1];
  double x[2 * 3 * 64], y[6];
  void *px = rand_data(dtype, x, nx);
  for (int64_t pl = 0; pl < planes; pl++) {
    double acc = kind == MAXP ? -INFINITY : 0;
    for (int64_t i = 0; i < plane; i++) {
      double v = x[pl * plane + i];
      acc = kind == MAXP ? (v > acc ? v : acc) : kind == AVGP ? acc + v : acc + v * v;
    }
    y[pl] = kind == MAXP ? acc : kind == AVGP ? acc / (double)plane : sqrt(acc);
  }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dtype, -1, NULL);
  mb_output(g, "Y", dtype, -1, NULL);
  mb_add(g, names[kind], "X", "Y");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  keel_value_t *in[1] = {mb_tensor(s, dtype, r, d, px)}, *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, in, 1, out));
  CHECK(close_to(out[0], y, planes, dtype == KEEL_FLOAT16 ? 4e-3 : 1e-5, names[kind]));
  for (int i = 0; i < r; i++) yd[i] = i < 2 ? d[i] : 1;
  CHECK(out[0] && keel_value_rank(out[0]) == r &&
        !memcmp(keel_value_shape(out[0]), yd, sizeof(int64_t) * (size_t)r));
  keel_value_release(in[0]), keel_value_release(out[0]);
  keel_session_destroy(s);
  free(px);
}

/* ======================================================== MaxUnpool */

/* MaxPool then MaxUnpool with the same attributes: every pooled value goes
 * back to the place it came from, the rest is zero. */
static void check_unpool_roundtrip(void) {
  int64_t xd[4] = {2, 3, 6, 8}, n = 2 * 3 * 6 * 8;
  double x[288], y[288];
  float xf[288];
  for (int64_t i = 0; i < n; i++) xf[i] = (float)(next() % 1000), x[i] = xf[i];
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, xd);
  mb_output(g, "U", KEEL_FLOAT, -1, NULL);
  mb_node *p = mb_add(g, "MaxPool", "X", "Y,I");
  mb_attr_ints(p, "kernel_shape", 2, (int64_t[]){2, 2});
  mb_attr_ints(p, "strides", 2, (int64_t[]){2, 2});
  mb_node *u = mb_add(g, "MaxUnpool", "Y,I", "U");
  mb_attr_ints(u, "kernel_shape", 2, (int64_t[]){2, 2});
  mb_attr_ints(u, "strides", 2, (int64_t[]){2, 2});
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  for (int64_t pl = 0; pl < 6; pl++) /* reference: keep each window's first max */
    for (int64_t i = 0; i < 48; i++) {
      int64_t h = i / 8, w = i % 8, best = (h & ~1) * 8 + (w & ~1);
      for (int64_t t = 0; t < 4; t++) {
        int64_t j = ((h & ~1) + t / 2) * 8 + (w & ~1) + t % 2;
        if (x[pl * 48 + j] > x[pl * 48 + best]) best = j;
      }
      y[pl * 48 + i] = best == i ? x[pl * 48 + i] : 0;
    }
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 4, xd, xf)}, *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, in, 1, out));
  CHECK(close_to(out[0], y, n, 0, "MaxUnpool roundtrip"));
  keel_value_release(in[0]), keel_value_release(out[0]);
  keel_session_destroy(s);
}

/* output_shape larger than the inferred shape (the ONNX example), and an
 * index out of range (an error; the session lives on). */
static void check_unpool_shape(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_input(g, "I", KEEL_INT64, -1, NULL);
  mb_init(g, "S", KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){1, 1, 5, 5});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *u = mb_add(g, "MaxUnpool", "X,I,S", "Y");
  mb_attr_ints(u, "kernel_shape", 2, (int64_t[]){2, 2});
  mb_attr_ints(u, "strides", 2, (int64_t[]){2, 2});
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  int64_t d[4] = {1, 1, 2, 2};
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, d, (float[]){5, 6, 7, 8});
  keel_value_t *i_ok = mb_tensor(s, KEEL_INT64, 4, d, (int64_t[]){5, 7, 13, 15});
  keel_value_t *i_bad = mb_tensor(s, KEEL_INT64, 4, d, (int64_t[]){5, 7, 13, 16});
  keel_value_t *out[1] = {0};
  double want[25] = {0};
  want[6] = 5, want[8] = 6, want[16] = 7, want[18] = 8;
  CHECK_STATUS(keel_run(s, (const char *[]){"X", "I"}, (keel_value_t *[]){x, i_bad}, 2, out),
               KEEL_ERR_RUNTIME);
  CHECK_OK(keel_run(s, (const char *[]){"X", "I"}, (keel_value_t *[]){x, i_ok}, 2, out));
  CHECK(close_to(out[0], want, 25, 0, "MaxUnpool output_shape"));
  keel_value_release(out[0]), keel_value_release(x), keel_value_release(i_ok);
  keel_value_release(i_bad);
  keel_session_destroy(s);
}

/* ========================================================== errors */

static void check_errors(void) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "MaxPool", "X", "Y");
  mb_attr_ints(nd, "kernel_shape", 2, (int64_t[]){3, 3});
  keel_session_t *s = mb_session(gr, 12);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *small = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 5}, NULL);
  keel_value_t *rank3 = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 1, 5}, NULL);
  keel_value_t *ok = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 2, 5, 5}, NULL);
  keel_value_t *out[1] = {0};
  const char *names[] = {"X"};
  CHECK_STATUS(keel_run(s, names, &small, 1, out), KEEL_ERR_SHAPE); /* kernel > input */
  CHECK_STATUS(keel_run(s, names, &rank3, 1, out), KEEL_ERR_INVALID_MODEL); /* 2 kernel dims */
  CHECK_OK(keel_run(s, names, &ok, 1, out));
  CHECK(out[0] && keel_value_numel(out[0]) == 2 * 3 * 3);
  keel_value_release(out[0]);
  keel_value_t *empty = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){0, 2, 5, 5}, NULL); /* N = 0 */
  CHECK_OK(keel_run(s, names, &empty, 1, out));
  CHECK(out[0] && keel_value_numel(out[0]) == 0 && keel_value_shape(out[0])[2] == 3);
  keel_value_release(empty);
  keel_value_release(out[0]), keel_value_release(small), keel_value_release(rank3);
  keel_value_release(ok);
  keel_session_destroy(s);
}

/* NaN never beats a number; a window of NaN only gives NaN. */
static void check_nan(void) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "MaxPool", "X", "Y");
  mb_attr_ints(nd, "kernel_shape", 1, (int64_t[]){2});
  mb_attr_ints(nd, "strides", 1, (int64_t[]){2});
  keel_session_t *s = mb_session(gr, 12);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 1, 6},
                              (float[]){NAN, 1, 2, NAN, NAN, NAN}), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, out));
  CHECK(out[0] && keel_value_at(out[0], 0) == 1 && keel_value_at(out[0], 1) == 2 &&
        isnan(keel_value_at(out[0], 2)));
  keel_value_release(x), keel_value_release(out[0]);
  keel_session_destroy(s);
}

/* The same on 2-D planes (pool.c's plane path, 3-wide rows unrolled):
 * NaN first in a window loses to its numbers, a window of NaN gives NaN,
 * and of -0 and +0 the first wins. */
static void check_nan_2d(void) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "MaxPool", "X", "Y");
  mb_attr_ints(nd, "kernel_shape", 2, (int64_t[]){3, 3});
  mb_attr_ints(nd, "strides", 2, (int64_t[]){3, 3});
  keel_session_t *s = mb_session(gr, 12);
  CHECK(s != NULL);
  if (!s) return;
  float v[3 * 9];
  for (int i = 0; i < 27; i++) {
    int win = (i % 9) / 3;
    v[i] = win == 0 ? (i == 0 ? NAN : (float)(i % 5)) : win == 1 ? NAN : (i == 6 ? -0.0f : 0.0f);
  }
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 3, 9}, v), *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, out));
  CHECK(out[0] && keel_value_at(out[0], 0) == 4 && isnan(keel_value_at(out[0], 1)) &&
        keel_value_at(out[0], 2) == 0 && signbit(keel_value_at(out[0], 2)));
  keel_value_release(x), keel_value_release(out[0]);
  keel_session_destroy(s);
}

/* MaxPool on int32 (not in the schema) is UNSUPPORTED, not a crash. */
static void check_bad_type(void) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_INT32, -1, NULL);
  mb_output(gr, "Y", KEEL_INT32, -1, NULL);
  mb_attr_ints(mb_add(gr, "MaxPool", "X", "Y"), "kernel_shape", 1, (int64_t[]){2});
  keel_session_t *s = mb_session(gr, 12);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_INT32, 3, (int64_t[]){1, 1, 5}, NULL), *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &x, 1, out), KEEL_ERR_UNSUPPORTED);
  keel_value_release(x);
  keel_session_destroy(s);
}

/* A bad attribute fails the run with INVALID_MODEL. */
static void check_bad_attr(const char *op, const char *name, int n, const int64_t *v) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, op, "X", "Y");
  if (strcmp(name, "kernel_shape")) mb_attr_ints(nd, "kernel_shape", 2, (int64_t[]){2, 2});
  if (!strcmp(name, "p")) mb_attr_i(nd, "p", 0);
  else mb_attr_ints(nd, name, n, v);
  keel_session_t *s = mb_session(gr, 12);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 4, 4}, NULL), *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &x, 1, out), KEEL_ERR_INVALID_MODEL);
  keel_value_release(x);
  keel_session_destroy(s);
}

/* ================================================ fuzz regressions */

/* Global pools over empty planes (X of shape (1, 2, 0)): X has no buffer,
 * and forming a plane pointer from it was NULL + 0 (UB). Each plane is the
 * reduction of nothing: max -inf, mean NaN (0 / 0), Lp norm 0. */
static void check_global_empty_planes(void) {
  static const char *ops[] = {"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"};
  for (int kind = 0; kind < 3; kind++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, -1, NULL);
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    mb_add(g, ops[kind], "X", "Y");
    keel_session_t *s = mb_session(g, 13);
    CHECK(s != NULL);
    if (!s) continue;
    keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 2, 0}, NULL), *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, out));
    CHECK(out[0] && keel_value_numel(out[0]) == 2 && keel_value_shape(out[0])[2] == 1);
    double v = out[0] ? keel_value_at(out[0], 1) : 0;
    CHECK(kind == MAXP ? v == -INFINITY : kind == AVGP ? isnan(v) : v == 0);
    keel_value_release(x), keel_value_release(out[0]);
    keel_session_destroy(s);
  }
}

/* MaxPool / AveragePool / LpPool over X (1, 1, 0, 3) with pads that give a
 * non-empty output: X had no data and the kernels formed NULL + 0 (UB).
 * Every window lies in the padding: max gives -inf (index -1), the others 0. */
static void check_empty_spatial_input(void) {
  static const char *ops[] = {"MaxPool", "AveragePool", "LpPool"};
  for (int kind = 0; kind < 3; kind++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, -1, NULL);
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    if (kind == MAXP) mb_output(g, "I", KEEL_INT64, -1, NULL);
    mb_node *nd = mb_add(g, ops[kind], "X", kind == MAXP ? "Y,I" : "Y");
    mb_attr_ints(nd, "kernel_shape", 2, (int64_t[]){2, 2});
    mb_attr_ints(nd, "pads", 4, (int64_t[]){1, 0, 1, 0});
    keel_session_t *s = mb_session(g, 12);
    CHECK(s != NULL);
    if (!s) continue;
    keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 0, 3}, NULL), *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, out));
    CHECK(out[0] && keel_value_numel(out[0]) == 2); /* (1, 1, 1, 2) */
    for (int64_t i = 0; out[0] && i < 2; i++)
      CHECK(keel_value_at(out[0], i) == (kind == MAXP ? -INFINITY : 0));
    if (kind == MAXP) CHECK(out[1] && keel_value_at(out[1], 0) == -1);
    keel_value_release(x), keel_value_release(out[0]), keel_value_release(out[1]);
    keel_session_destroy(s);
  }
}

int main(void) {
  check_random();
  for (int i = 0; i < 24; i++)
    check_global(i % 3, (int[]){KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16}[i / 3 % 3]);
  check_unpool_roundtrip();
  check_unpool_shape();
  check_errors();
  check_bad_type();
  check_nan();
  check_nan_2d();
  check_global_empty_planes();
  check_empty_spatial_input();
  check_bad_attr("MaxPool", "strides", 2, (int64_t[]){1, 0});
  check_bad_attr("AveragePool", "pads", 3, (int64_t[]){1, 1, 1});
  check_bad_attr("AveragePool", "kernel_shape", 2, (int64_t[]){0, 2});
  check_bad_attr("MaxPool", "kernel_shape", 0, NULL);
  check_bad_attr("LpPool", "p", 0, NULL);
  check_bad_attr("MaxPool", "pads", 4, (int64_t[]){0, 2, 0, 0}); /* not smaller than the kernel */
  return check_report();
}
