/* test_ops_ml.c: the ai.onnx.ml kernels through real sessions against
 * naive references written here: the tree walk (TreeEnsembleRegressor with
 * every branch mode and missing-value tracking, TreeEnsemble-5 with
 * BRANCH_MEMBER sets) on random trees and inputs, the SVM kernels (linear,
 * poly, rbf, sigmoid) and one-vs-one voting on random support vectors; the
 * map values of the C API (create, read, sequences of maps, MapProto
 * round trip); and malformed models (node ids out of range, inconsistent
 * attribute lengths: errors at load, where tree ensembles are prepared;
 * cycles, features beyond X: errors at run, the session still usable).
 * Ends with zero bytes held. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define ML "ai.onnx.ml"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int n) { return (int)(next() % (uint64_t)n); }
static double frand(void) { return (double)(next() % 20001) / 10000.0 - 1.0; } /* [-1, 1] */

/* A one-node ai.onnx.ml model with float input X [N, F]; outputs named in
 * `outs` (comma-separated). The caller adds attributes through *node. */
static mb_graph *graph1(const char *op, int f, const char *outs, mb_node **node) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){-1, f});
  char o[64];
  snprintf(o, sizeof o, "%s", outs);
  for (char *p = strtok(o, ","); p; p = strtok(NULL, ",")) mb_output(g, p, KEEL_UNDEFINED, -1, NULL);
  *node = mb_add(g, op, "X", outs);
  mb_domain(*node, ML);
  return g;
}

/* The session or the load error (no check recorded). */
static keel_status try_open_ml(mb_graph *g, int ml_opset, keel_session_t **s) {
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 17, ML, ml_opset, &len);
  *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, s);
  free(bytes);
  return st;
}

static keel_session_t *open_ml(mb_graph *g, int ml_opset) {
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 17, ML, ml_opset, &len);
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, NULL, &s));
  free(bytes);
  return s;
}

/* Runs s on X [n, f]; output 0 into *y (caller releases). */
static keel_status run_x(keel_session_t *s, const float *x, int64_t n, int64_t f, keel_value_t **y, int nout) {
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){n, f}, x), *out[4] = {0};
  keel_status st = keel_run(s, (const char *[]){"X"}, &in, 1, out);
  keel_value_release(in);
  for (int i = 0; i < nout; i++) y[i] = out[i];
  for (int i = nout; i < 4; i++) keel_value_release(out[i]);
  return st;
}

/* ====================================================== tree walk */

#define MAXN 64
typedef struct rtree {
  int n;                   /* nodes; node i has id 100 + 3 * i (ids are not indices) */
  int64_t ids[MAXN], feat[MAXN], tid[MAXN], fid[MAXN], miss[MAXN];
  int mode[MAXN];          /* 0..5 branch modes, 7 leaf */
  float value[MAXN], w[MAXN];
} rtree;

static const char *const MODES[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT",
                                    "BRANCH_EQ",  "BRANCH_NEQ", "", "LEAF"};

static int grow(rtree *t, int depth, int nf) {
  int i = t->n++;
  t->ids[i] = 100 + 3 * i;
  t->miss[i] = rnd(2);
  if (depth == 0 || (depth < 3 && rnd(4) == 0)) {
    t->mode[i] = 7, t->feat[i] = 0, t->value[i] = 0, t->w[i] = (float)frand();
    t->tid[i] = t->fid[i] = 0;
    return i;
  }
  t->mode[i] = rnd(6);
  t->feat[i] = rnd(nf);
  t->value[i] = (float)(rnd(5) - 2) * 0.5f; /* on the input grid: EQ and NEQ get hits */
  int a = grow(t, depth - 1, nf), b = grow(t, depth - 1, nf);
  t->tid[i] = t->ids[a], t->fid[i] = t->ids[b];
  return i;
}

static int by_id(const rtree *t, int64_t id) {
  for (int i = 0; i < t->n; i++)
    if (t->ids[i] == id) return i;
  return -1;
}

/* The naive walk: follow ids by linear search. */
static double walk_ref(const rtree *t, const float *x) {
  int i = 0;
  while (t->mode[i] != 7) {
    float v = x[t->feat[i]], th = t->value[i];
    bool go;
    if (t->miss[i] && isnan(v)) go = true;
    else if (t->mode[i] == 0) go = v <= th;
    else if (t->mode[i] == 1) go = v < th;
    else if (t->mode[i] == 2) go = v >= th;
    else if (t->mode[i] == 3) go = v > th;
    else if (t->mode[i] == 4) go = v == th;
    else go = v != th;
    i = by_id(t, go ? t->tid[i] : t->fid[i]);
  }
  return t->w[i];
}

static void check_tree_regressor_random(int round) {
  enum { F = 3, T = 3, N = 16 };
  rtree tr[T];
  int64_t tree[T * MAXN], ids[T * MAXN], feat[T * MAXN], tid[T * MAXN], fid[T * MAXN], miss[T * MAXN];
  int64_t ttree[T * MAXN], tnode[T * MAXN], tids[T * MAXN];
  float vals[T * MAXN], tw[T * MAXN];
  const char *modes[T * MAXN];
  int n = 0, nl = 0;
  for (int t = 0; t < T; t++) {
    tr[t].n = 0;
    grow(&tr[t], 2 + rnd(3), F);
    for (int i = 0; i < tr[t].n; i++, n++) {
      tree[n] = t, ids[n] = tr[t].ids[i], feat[n] = tr[t].feat[i], tid[n] = tr[t].tid[i];
      fid[n] = tr[t].fid[i], miss[n] = tr[t].miss[i], vals[n] = tr[t].value[i], modes[n] = MODES[tr[t].mode[i]];
      if (tr[t].mode[i] == 7) ttree[nl] = t, tnode[nl] = ids[n], tids[nl] = 0, tw[nl++] = tr[t].w[i];
    }
  }
  mb_node *nd;
  mb_graph *g = graph1("TreeEnsembleRegressor", F, "Y", &nd);
  mb_attr_ints(nd, "nodes_treeids", n, tree);
  mb_attr_ints(nd, "nodes_nodeids", n, ids);
  mb_attr_ints(nd, "nodes_featureids", n, feat);
  mb_attr_ints(nd, "nodes_truenodeids", n, tid);
  mb_attr_ints(nd, "nodes_falsenodeids", n, fid);
  mb_attr_ints(nd, "nodes_missing_value_tracks_true", n, miss);
  mb_attr_floats(nd, "nodes_values", n, vals);
  mb_attr_strs(nd, "nodes_modes", n, modes);
  mb_attr_ints(nd, "target_treeids", nl, ttree);
  mb_attr_ints(nd, "target_nodeids", nl, tnode);
  mb_attr_ints(nd, "target_ids", nl, tids);
  mb_attr_floats(nd, "target_weights", nl, tw);
  const char *agg = (const char *[]){"SUM", "AVERAGE", "MIN", "MAX"}[round % 4];
  mb_attr_s(nd, "aggregate_function", agg);
  mb_attr_floats(nd, "base_values", 1, (float[]){0.25f});
  keel_session_t *s = open_ml(g, 1);
  if (!s) return;
  float x[N * F];
  for (int i = 0; i < N * F; i++) x[i] = rnd(7) == 0 ? NAN : (float)(rnd(5) - 2) * 0.5f;
  keel_value_t *y = NULL;
  CHECK_OK(run_x(s, x, N, F, &y, 1));
  for (int r = 0; y && r < N; r++) {
    double acc = round % 4 == 2 ? INFINITY : round % 4 == 3 ? -INFINITY : 0;
    for (int t = 0; t < T; t++) {
      double w = walk_ref(&tr[t], x + r * F);
      acc = round % 4 == 2 ? fmin(acc, w) : round % 4 == 3 ? fmax(acc, w) : acc + w;
    }
    if (round % 4 == 1) acc /= T;
    CHECK_NEAR(keel_value_at(y, r), acc + 0.25, 1e-5);
  }
  keel_value_release(y);
  keel_session_destroy(s);
}

/* TreeEnsemble-5: index-based nodes, leaves apart, sets for BRANCH_MEMBER. */
static void check_tree_ensemble_member(void) {
  /* node 0: x0 in {1, 3} ? node 1 : leaf 2;  node 1: x1 <= 0 ? leaf 0 : leaf 1 */
  mb_node *nd;
  mb_graph *g = graph1("TreeEnsemble", 2, "Y", &nd);
  mb_attr_ints(nd, "nodes_featureids", 2, (int64_t[]){0, 1});
  mb_attr_t(nd, "nodes_splits", KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){0, 0});
  mb_attr_t(nd, "nodes_modes", KEEL_UINT8, 1, (int64_t[]){2}, (uint8_t[]){6, 0});
  mb_attr_ints(nd, "nodes_truenodeids", 2, (int64_t[]){1, 0});
  mb_attr_ints(nd, "nodes_trueleafs", 2, (int64_t[]){0, 1});
  mb_attr_ints(nd, "nodes_falsenodeids", 2, (int64_t[]){2, 1});
  mb_attr_ints(nd, "nodes_falseleafs", 2, (int64_t[]){1, 1});
  mb_attr_t(nd, "membership_values", KEEL_FLOAT, 1, (int64_t[]){3}, (float[]){1, 3, NAN});
  mb_attr_ints(nd, "leaf_targetids", 3, (int64_t[]){0, 0, 0});
  mb_attr_t(nd, "leaf_weights", KEEL_FLOAT, 1, (int64_t[]){3}, (float[]){10, 20, 30});
  mb_attr_ints(nd, "tree_roots", 1, (int64_t[]){0});
  mb_attr_i(nd, "n_targets", 1);
  keel_session_t *s = open_ml(g, 5);
  if (!s) return;
  float x[] = {1, -1, 3, 2, 2, -5, NAN, 0};
  double want[] = {10, 20, 30, 30};
  keel_value_t *y = NULL;
  CHECK_OK(run_x(s, x, 4, 2, &y, 1));
  for (int i = 0; y && i < 4; i++) CHECK_NEAR(keel_value_at(y, i), want[i], 0);
  keel_value_release(y);
  keel_session_destroy(s);
}

/* ============================================================= SVM */

static double kern(int type, const double *p, const float *a, const float *b, int f) {
  double dot = 0, d2 = 0;
  for (int i = 0; i < f; i++) dot += (double)a[i] * b[i], d2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
  if (type == 1) return pow(p[0] * dot + p[1], p[2]);
  if (type == 2) return exp(-p[0] * d2);
  if (type == 3) return tanh(p[0] * dot + p[1]);
  return dot;
}

static void check_svm_regressor_kernels(void) {
  static const char *const names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  enum { F = 4, V = 6, N = 8 };
  for (int type = 0; type < 4; type++) {
    float sv[V * F], coef[V], x[N * F], kp[3] = {0.3f, 0.2f, 3.0f};
    double p[3] = {kp[0], kp[1], kp[2]};
    for (int i = 0; i < V * F; i++) sv[i] = (float)frand();
    for (int i = 0; i < V; i++) coef[i] = (float)frand();
    for (int i = 0; i < N * F; i++) x[i] = (float)frand();
    mb_node *nd;
    mb_graph *g = graph1("SVMRegressor", F, "Y", &nd);
    mb_attr_s(nd, "kernel_type", names[type]);
    mb_attr_floats(nd, "kernel_params", 3, kp);
    mb_attr_i(nd, "n_supports", V);
    mb_attr_floats(nd, "support_vectors", V * F, sv);
    mb_attr_floats(nd, "coefficients", V, coef);
    mb_attr_floats(nd, "rho", 1, (float[]){0.125f});
    keel_session_t *s = open_ml(g, 1);
    if (!s) continue;
    keel_value_t *y = NULL;
    CHECK_OK(run_x(s, x, N, F, &y, 1));
    for (int r = 0; y && r < N; r++) {
      double want = 0.125;
      for (int v = 0; v < V; v++) want += coef[v] * kern(type, p, x + r * F, sv + v * F, F);
      CHECK_NEAR(keel_value_at(y, r), want, 1e-4 * (1 + fabs(want)));
    }
    keel_value_release(y);
    keel_session_destroy(s);
  }
}

/* Three classes, one-vs-one: the label is the vote winner. */
static void check_svm_classifier_votes(void) {
  enum { F = 2, K = 3, N = 12 };
  int64_t vpc[K] = {2, 1, 2};
  enum { V = 5 };
  float sv[V * F], coef[(K - 1) * V], rho[3] = {0.1f, -0.2f, 0.05f}, x[N * F], kp[3] = {0.5f, 0, 0};
  double p[3] = {0.5, 0, 0};
  for (int i = 0; i < V * F; i++) sv[i] = (float)frand();
  for (int i = 0; i < (K - 1) * V; i++) coef[i] = (float)frand();
  for (int i = 0; i < N * F; i++) x[i] = (float)frand() * 2;
  mb_node *nd;
  mb_graph *g = graph1("SVMClassifier", F, "L,Z", &nd);
  mb_attr_s(nd, "kernel_type", "RBF");
  mb_attr_floats(nd, "kernel_params", 3, kp);
  mb_attr_ints(nd, "vectors_per_class", K, vpc);
  mb_attr_floats(nd, "support_vectors", V * F, sv);
  mb_attr_floats(nd, "coefficients", (K - 1) * V, coef);
  mb_attr_floats(nd, "rho", 3, rho);
  mb_attr_ints(nd, "classlabels_ints", K, (int64_t[]){7, 8, 9});
  keel_session_t *s = open_ml(g, 1);
  if (!s) return;
  keel_value_t *out[2] = {0};
  CHECK_OK(run_x(s, x, N, F, out, 2));
  int start[K] = {0, 2, 3};
  for (int r = 0; out[0] && r < N; r++) {
    int votes[K] = {0}, pair = 0;
    double kv[V];
    for (int v = 0; v < V; v++) kv[v] = kern(2, p, x + r * F, sv + v * F, F);
    for (int i = 0; i < K; i++)
      for (int j = i + 1; j < K; j++, pair++) {
        double d = rho[pair];
        for (int m = 0; m < vpc[i]; m++) d += coef[(j - 1) * V + start[i] + m] * kv[start[i] + m];
        for (int m = 0; m < vpc[j]; m++) d += coef[i * V + start[j] + m] * kv[start[j] + m];
        CHECK_NEAR(keel_value_at(out[1], r * 3 + pair), d, 1e-4);
        votes[d > 0 ? i : j]++;
      }
    int best = 0;
    for (int i = 1; i < K; i++)
      if (votes[i] > votes[best]) best = i;
    CHECK(((const int64_t *)keel_value_data(out[0]))[r] == 7 + best);
  }
  keel_value_release(out[0]);
  keel_value_release(out[1]);
  keel_session_destroy(s);
}

/* ============================================================ maps */

static void check_map_api(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){1});
  mb_output(g, "Y", KEEL_UNDEFINED, -1, NULL);
  mb_add(g, "Identity", "X", "Y");
  keel_session_t *s = mb_session(g, 17);
  if (!s) return;
  keel_string keys[3] = {{"alpha", 5}, {"beta", 4}, {"", 0}};
  float vals[3] = {0.5f, -1.0f, 2.0f};
  keel_value_t *m = NULL, *m2 = NULL, *seq = NULL, *back = NULL;
  CHECK_OK(keel_map_create(s, KEEL_STRING, KEEL_FLOAT, 3, keys, vals, &m));
  CHECK(keel_value_kind_of(m) == KEEL_KIND_MAP);
  CHECK(keel_map_size(m) == 3 && keel_map_key_dtype(m) == KEEL_STRING && keel_value_dtype(m) == KEEL_FLOAT);
  const keel_string *k = keel_map_keys(m);
  CHECK(k && k[1].len == 4 && !memcmp(k[1].data, "beta", 4));
  CHECK(((const float *)keel_map_values(m))[2] == 2.0f);
  int64_t ik[2] = {4, -9};
  double dv[2] = {1.5, 2.5};
  CHECK_OK(keel_map_create(s, KEEL_INT64, KEEL_DOUBLE, 2, ik, dv, &m2));
  CHECK_STATUS(keel_map_create(s, KEEL_FLOAT, KEEL_FLOAT, 1, vals, vals, &back), KEEL_ERR_INVALID_ARG);
  keel_value_t *items[2] = {m, m2};
  CHECK_STATUS(keel_sequence_create(s, KEEL_UNDEFINED, items, 2, &seq), KEEL_ERR_INVALID_ARG);
  items[1] = m;
  CHECK_OK(keel_sequence_create(s, KEEL_UNDEFINED, items, 2, &seq));
  CHECK(keel_sequence_length(seq) == 2 && keel_value_kind_of(keel_sequence_at(seq, 1)) == KEEL_KIND_MAP);
  /* SequenceProto of maps round trip */
  void *pb = NULL;
  size_t len = 0;
  CHECK_OK(keel_value_to_pb(seq, "s", &pb, &len));
  CHECK_OK(keel_value_from_pb(s, pb, len, KEEL_KIND_SEQUENCE, &back));
  keel_free(pb);
  const keel_value_t *e = back ? keel_sequence_at(back, 1) : NULL;
  CHECK(e && keel_map_size(e) == 3 && ((const float *)keel_map_values(e))[0] == 0.5f);
  CHECK(e && ((const keel_string *)keel_map_keys(e))[0].len == 5);
  keel_value_release(back);
  back = NULL;
  CHECK_OK(keel_value_to_pb(m2, "m", &pb, &len));
  CHECK_OK(keel_value_from_pb(s, pb, len, KEEL_KIND_MAP, &back));
  keel_free(pb);
  CHECK(back && keel_map_size(back) == 2 && ((const int64_t *)keel_map_keys(back))[1] == -9);
  CHECK(back && ((const double *)keel_map_values(back))[1] == 2.5);
  /* a truncated MapProto is an error, not a crash */
  CHECK_OK(keel_value_to_pb(m, "m", &pb, &len));
  for (size_t cut = 1; cut < len; cut += 3) {
    keel_value_t *bad = NULL;
    (void)keel_value_from_pb(s, pb, cut, KEEL_KIND_MAP, &bad);
    keel_value_release(bad);
  }
  keel_free(pb);
  keel_value_release(back);
  keel_value_release(seq);
  keel_value_release(m2);
  keel_session_destroy(s); /* values outlive the session */
  keel_value_release(m);
}

/* ZipMap's sequence of maps and DictVectorizer on a map made through the API. */
static void check_zipmap_dictvectorizer(void) {
  enum { N = 5, C = 3 };
  mb_node *nd;
  mb_graph *g = graph1("ZipMap", C, "Z", &nd);
  mb_attr_strs(nd, "classlabels_strings", C, (const char *[]){"x", "yy", "zzz"});
  keel_session_t *s = open_ml(g, 1);
  if (!s) return;
  float x[N * C];
  for (int i = 0; i < N * C; i++) x[i] = (float)frand();
  keel_value_t *z = NULL;
  CHECK_OK(run_x(s, x, N, C, &z, 1));
  CHECK(keel_sequence_length(z) == N);
  for (int r = 0; z && r < N; r++) {
    const keel_value_t *m = keel_sequence_at(z, (size_t)r);
    CHECK(keel_value_kind_of(m) == KEEL_KIND_MAP && keel_map_size(m) == C);
    const keel_string *k = keel_map_keys(m);
    const float *v = keel_map_values(m);
    for (int j = 0; k && v && j < C; j++) CHECK(k[j].len == (size_t)j + 1 && v[j] == x[r * C + j]);
  }
  keel_value_release(z);
  keel_session_destroy(s);

  g = mb_graph_new("main");
  mb_input_map(g, "M", KEEL_INT64, KEEL_DOUBLE);
  mb_output(g, "Y", KEEL_UNDEFINED, -1, NULL);
  nd = mb_add(g, "DictVectorizer", "M", "Y");
  mb_domain(nd, ML);
  mb_attr_ints(nd, "int64_vocabulary", 4, (int64_t[]){5, 2, 9, 2});
  s = open_ml(g, 1);
  if (!s) return;
  keel_io_info io;
  CHECK_OK(keel_session_input(s, 0, &io));
  CHECK(io.kind == KEEL_KIND_MAP && io.dtype == KEEL_DOUBLE);
  keel_value_t *m = NULL, *y[1] = {0}, *t = NULL;
  CHECK_OK(keel_map_create(s, KEEL_INT64, KEEL_DOUBLE, 3, (int64_t[]){2, 7, 9}, (double[]){0.5, 8, -3}, &m));
  CHECK_OK(keel_run(s, (const char *[]){"M"}, &m, 1, y));
  double want[4] = {0, 0.5, -3, 0.5}; /* 2 appears twice in the vocabulary: both slots */
  CHECK(y[0] && keel_value_rank(y[0]) == 2 && keel_value_shape(y[0])[1] == 4);
  for (int j = 0; y[0] && j < 4; j++) CHECK_NEAR(keel_value_at(y[0], j), want[j], 0);
  /* a tensor where the map goes, and a map of string keys: errors */
  t = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, (float[]){1});
  keel_value_t *y2[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"M"}, &t, 1, y2), KEEL_ERR_INVALID_ARG);
  keel_value_release(t);
  CHECK_OK(keel_map_create(s, KEEL_STRING, KEEL_DOUBLE, 1, (keel_string[]){{"a", 1}}, (double[]){1}, &t));
  CHECK_STATUS(keel_run(s, (const char *[]){"M"}, &t, 1, y2), KEEL_ERR_SHAPE);
  keel_value_release(t);
  keel_value_release(m);
  keel_value_release(y[0]);
  keel_session_destroy(s);
}

/* ============================================================ errors */

/* A regressor of two nodes (0: x0 <= 0 ? 1 : 2), one of them patched.
 * Structure errors fail the load (the ensemble is prepared then); *at_load
 * says which it was. */
static keel_status bad_tree(int which, const char **msg, bool *at_load) {
  static char err[512];
  mb_node *nd;
  mb_graph *g = graph1("TreeEnsembleRegressor", 2, "Y", &nd);
  int64_t tid = which == 0 ? 7 : 1, feat = which == 1 ? 5 : 0;
  mb_attr_ints(nd, "nodes_treeids", 3, (int64_t[]){0, 0, 0});
  mb_attr_ints(nd, "nodes_nodeids", 3, (int64_t[]){0, 1, which == 4 ? 1 : 2});
  mb_attr_ints(nd, "nodes_featureids", 3, (int64_t[]){feat, 0, 0});
  mb_attr_ints(nd, "nodes_truenodeids", 3, (int64_t[]){tid, which == 3 ? 0 : 0, 0});
  mb_attr_ints(nd, "nodes_falsenodeids", which == 2 ? 2 : 3, (int64_t[]){2, which == 3 ? 0 : 0, 0});
  mb_attr_floats(nd, "nodes_values", 3, (float[]){0, 0, 0});
  mb_attr_strs(nd, "nodes_modes", 3,
               (const char *[]){"BRANCH_LEQ", which == 3 ? "BRANCH_LEQ" : "LEAF", "LEAF"});
  mb_attr_ints(nd, "target_treeids", 2, (int64_t[]){0, 0});
  mb_attr_ints(nd, "target_nodeids", 2, (int64_t[]){which == 3 ? 2 : 1, 2});
  mb_attr_ints(nd, "target_ids", 2, (int64_t[]){0, 0});
  mb_attr_floats(nd, "target_weights", 2, (float[]){1, 2});
  keel_session_t *s;
  keel_status lst = try_open_ml(g, 1, &s);
  *at_load = lst != KEEL_OK;
  if (lst) {
    snprintf(err, sizeof err, "%s", keel_last_error());
    *msg = err;
    return lst;
  }
  keel_value_t *y = NULL;
  float x[2] = {-1, 0};
  keel_status st = run_x(s, x, 1, 2, &y, 1);
  snprintf(err, sizeof err, "%s", keel_last_error());
  *msg = err;
  keel_value_release(y);
  /* the session stays usable: the same error again, nothing held */
  keel_status st2 = run_x(s, x, 1, 2, &y, 1);
  CHECK(st2 == st);
  keel_value_release(y);
  keel_session_destroy(s);
  return st;
}

static void check_bad_trees(void) {
  static const char *const want[] = {"not a node of that tree", "reads feature 5", "same length",
                                     "cycle", "appears twice"};
  static const bool load[] = {true, false, true, false, true};
  for (int which = 0; which < 5; which++) {
    const char *msg = "";
    bool at_load = false;
    keel_status st = bad_tree(which, &msg, &at_load);
    CHECK(st != KEEL_OK && at_load == load[which]);
    bool ok = strstr(msg, want[which]) != NULL;
    CHECK(ok);
    if (!ok) fprintf(stderr, "  case %d: %s\n", which, msg);
  }
}

/* TreeEnsemble-5 with a leaf id past leaf_weights, and a root past the nodes. */
static void check_bad_tree_ensemble(void) {
  for (int which = 0; which < 3; which++) {
    mb_node *nd;
    mb_graph *g = graph1("TreeEnsemble", 1, "Y", &nd);
    mb_attr_ints(nd, "nodes_featureids", 1, (int64_t[]){0});
    mb_attr_t(nd, "nodes_splits", KEEL_FLOAT, 1, (int64_t[]){1}, (float[]){0});
    mb_attr_t(nd, "nodes_modes", KEEL_UINT8, 1, (int64_t[]){1}, (uint8_t[]){which == 2 ? 9 : 0});
    mb_attr_ints(nd, "nodes_truenodeids", 1, (int64_t[]){which == 0 ? 5 : 0});
    mb_attr_ints(nd, "nodes_trueleafs", 1, (int64_t[]){1});
    mb_attr_ints(nd, "nodes_falsenodeids", 1, (int64_t[]){1});
    mb_attr_ints(nd, "nodes_falseleafs", 1, (int64_t[]){1});
    mb_attr_ints(nd, "leaf_targetids", 2, (int64_t[]){0, 0});
    mb_attr_t(nd, "leaf_weights", KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){1, 2});
    mb_attr_ints(nd, "tree_roots", 1, (int64_t[]){which == 1 ? 3 : 0});
    mb_attr_i(nd, "n_targets", 1);
    keel_session_t *s;
    CHECK_STATUS(try_open_ml(g, 5, &s), KEEL_ERR_INVALID_MODEL); /* at load: prepared there */
    const char *want = which == 2 ? "not one of 0..6" : "out of range";
    CHECK(strstr(keel_last_error(), want) != NULL && strstr(keel_last_error(), "TreeEnsemble") != NULL);
    keel_session_destroy(s);
  }
}

static void check_bad_svm_and_lookups(void) {
  mb_node *nd;
  mb_graph *g = graph1("SVMClassifier", 2, "L,Z", &nd);
  mb_attr_ints(nd, "vectors_per_class", 2, (int64_t[]){1, 1});
  mb_attr_floats(nd, "support_vectors", 4, (float[]){0, 1, 1, 0});
  mb_attr_floats(nd, "coefficients", 3, (float[]){1, 1, 1}); /* needs (2 - 1) x 2 */
  mb_attr_floats(nd, "rho", 1, (float[]){0});
  mb_attr_ints(nd, "classlabels_ints", 2, (int64_t[]){0, 1});
  keel_session_t *s = open_ml(g, 1);
  keel_value_t *y[2] = {0};
  float x[2] = {0, 0};
  if (s) {
    CHECK_STATUS(run_x(s, x, 1, 2, y, 2), KEEL_ERR_SHAPE);
    CHECK(strstr(keel_last_error(), "coefficients") != NULL);
    keel_session_destroy(s);
  }
  g = graph1("ArrayFeatureExtractor", 2, "Y", &nd);
  mb_graph_free(g);
  g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){1, 2});
  mb_init(g, "I", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){2});
  mb_output(g, "Y", KEEL_UNDEFINED, -1, NULL);
  mb_domain(mb_add(g, "ArrayFeatureExtractor", "X,I", "Y"), ML);
  s = open_ml(g, 1);
  if (s) {
    CHECK_STATUS(run_x(s, x, 1, 2, y, 1), KEEL_ERR_RUNTIME);
    CHECK(strstr(keel_last_error(), "out of range") != NULL);
    keel_session_destroy(s);
  }
  g = graph1("LabelEncoder", 1, "Y", &nd);
  mb_attr_floats(nd, "keys_floats", 2, (float[]){1, 2});
  mb_attr_ints(nd, "values_int64s", 3, (int64_t[]){1, 2, 3});
  s = open_ml(g, 2);
  if (s) {
    CHECK_STATUS(run_x(s, x, 1, 1, y, 1), KEEL_ERR_INVALID_MODEL);
    CHECK(strstr(keel_last_error(), "2 keys but 3 values") != NULL);
    keel_session_destroy(s);
  }
  /* categories of the wrong attribute type */
  g = graph1("OneHotEncoder", 1, "Y", &nd);
  mb_attr_floats(nd, "cats_int64s", 2, (float[]){1, 2});
  s = open_ml(g, 1);
  if (s) {
    CHECK_STATUS(run_x(s, x, 1, 1, y, 1), KEEL_ERR_INVALID_MODEL);
    keel_session_destroy(s);
  }
  /* ZipMap with more columns than labels */
  g = graph1("ZipMap", 2, "Z", &nd);
  mb_attr_ints(nd, "classlabels_int64s", 1, (int64_t[]){4});
  s = open_ml(g, 1);
  if (s) {
    CHECK_STATUS(run_x(s, x, 1, 2, y, 1), KEEL_ERR_SHAPE);
    CHECK(strstr(keel_last_error(), "2 columns but there are 1 class labels") != NULL);
    keel_session_destroy(s);
  }
}

/* Findings of fuzz_run on the tests/ml seeds (fuzz/make_seeds.py), each an
 * error or a defined result now: a double too large for int64 into
 * OneHotEncoder, inputdimensions near INT64_MAX, n_supports near INT64_MAX
 * (products overflowed), and X with zero columns (NULL + 0). */
static void check_fuzz_regressions(void) {
  mb_node *nd;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_output(g, "Y", KEEL_UNDEFINED, -1, NULL);
  nd = mb_add(g, "OneHotEncoder", "X", "Y");
  mb_domain(nd, ML);
  mb_attr_ints(nd, "cats_int64s", 2, (int64_t[]){0, 2});
  keel_session_t *s = open_ml(g, 1);
  if (s) {
    keel_value_t *x = mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){2}, (double[]){1.44e214, 2}), *y = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, &y));
    CHECK(y && keel_value_at(y, 0) == 0 && keel_value_at(y, 1) == 0 && keel_value_at(y, 3) == 1);
    keel_value_release(x);
    keel_value_release(y);
    keel_session_destroy(s);
  }
  g = graph1("FeatureVectorizer", 2, "Y", &nd);
  mb_attr_ints(nd, "inputdimensions", 1, (int64_t[]){INT64_MAX});
  s = open_ml(g, 1);
  keel_value_t *y[2] = {0};
  float x[4] = {1, 2, 3, 4};
  if (s) {
    CHECK(run_x(s, x, 2, 2, y, 1) != KEEL_OK);
    keel_session_destroy(s);
  }
  g = graph1("SVMRegressor", 2, "Y", &nd);
  mb_attr_i(nd, "n_supports", INT64_MAX);
  mb_attr_floats(nd, "support_vectors", 2, (float[]){1, 2});
  mb_attr_floats(nd, "coefficients", 1, (float[]){1});
  mb_attr_floats(nd, "rho", 1, (float[]){0});
  s = open_ml(g, 1);
  if (s) {
    CHECK_STATUS(run_x(s, x, 2, 2, y, 1), KEEL_ERR_SHAPE);
    keel_session_destroy(s);
  }
  g = graph1("LinearRegressor", 0, "Y", &nd);
  mb_attr_floats(nd, "coefficients", 0, (float[]){0});
  mb_attr_floats(nd, "intercepts", 1, (float[]){0.5f});
  s = open_ml(g, 1);
  if (s) {
    CHECK_OK(run_x(s, x, 3, 0, y, 1));
    CHECK(y[0] && keel_value_numel(y[0]) == 3 && keel_value_at(y[0], 2) == 0.5);
    keel_value_release(y[0]);
    keel_session_destroy(s);
  }
}

int main(void) {
  for (int i = 0; i < 40; i++) check_tree_regressor_random(i);
  check_tree_ensemble_member();
  check_svm_regressor_kernels();
  check_svm_classifier_votes();
  check_map_api();
  check_zipmap_dictvectorizer();
  check_bad_trees();
  check_bad_tree_ensemble();
  check_bad_svm_and_lookups();
  check_fuzz_regressions();
  return check_report();
}
