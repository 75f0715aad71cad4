/* test_matmul_fused.c: the fuse-matmul pass (src/passes/pass_matmul.c) and
 * FusedMatMul's oneDNN implementation (src/ops/dnnl/matmul_dnnl.c),
 * against the model as written on the reference kernels
 * (KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS) and against the
 * pass's graph on FusedMatMul's reference kernel (KEEL_OPT_REFERENCE_KERNELS).
 *
 * Chains: MatMul by a constant, + a bias (shapes [N], [1, N], [1, 1, N]),
 * + a residual (same shape, or broadcasting [N] from a graph input), then
 * Relu, LeakyRelu, Clip, Tanh, Sigmoid, HardSigmoid, Gelu exact and tanh
 * (opset 20), or fuse-gelu's Erf form; Gemm with transB and C; A of rank 1,
 * 2, 3 and 4; products small enough for the reference route and large
 * ones in bands over 1, 2 and 3 threads; 1-4 rows (keel_gemv, B in place);
 * a seeded sweep of random sizes.
 * Checks the node count the pass leaves (one FusedMatMul where it fuses)
 * and, where keel has oneDNN, that the onednn implementation is bound. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

typedef struct mm_case {
  int rank;                    /* A's rank                                */
  int64_t lead[3];             /* A's leading dims (rank - 1 of them)     */
  int64_t K, N;
  int bias;                    /* 0 none, 1 [N], 2 [1,N], 3 [1,1,N]       */
  int residual;                /* 0 none, 1 same shape, 2 [N] graph input */
  const char *act;             /* NULL, an op, "GeluTanh", "GeluErf"      */
  bool gemm;                   /* Gemm(A, B^T, C) instead (rank 2)        */
} mm_case;

static uint32_t g_rng = 5;
static float rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)(g_rng >> 8) / (float)(1 << 24) - 0.5f;
}
static int64_t pick(int64_t lo, int64_t hi) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return lo + (int64_t)((g_rng >> 8) % (uint32_t)(hi - lo + 1));
}

static int64_t rows(const mm_case *t) {
  int64_t m = 1;
  for (int i = 0; i + 1 < t->rank; i++) m *= t->lead[i];
  return m;
}

static void yshape(const mm_case *t, int64_t *d) {
  for (int i = 0; i + 1 < t->rank; i++) d[i] = t->lead[i];
  d[t->rank - 1] = t->N;
}

static mb_graph *model(const mm_case *t, const float *w, const float *b) {
  mb_graph *g = mb_graph_new("main");
  int64_t ad[4];
  for (int i = 0; i + 1 < t->rank; i++) ad[i] = t->lead[i];
  ad[t->rank - 1] = t->K;
  mb_input(g, "a", KEEL_FLOAT, t->rank, ad);
  int64_t yd[4];
  yshape(t, yd);
  if (t->residual == 1) mb_input(g, "z", KEEL_FLOAT, t->rank, yd);
  if (t->residual == 2) mb_input(g, "z", KEEL_FLOAT, 1, (int64_t[]){t->N});
  const char *cur = "p";
  if (t->gemm) {
    mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){t->N, t->K}, w);
    mb_init(g, "c", KEEL_FLOAT, 1, (int64_t[]){t->N}, b);
    mb_attr_i(mb_add(g, "Gemm", "a,w,c", "p"), "transB", 1);
  } else {
    mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){t->K, t->N}, w);
    mb_add(g, "MatMul", "a,w", "p");
    if (t->bias) {
      int64_t bd[3] = {1, 1, t->N};
      int r = t->bias;
      mb_init(g, "b", KEEL_FLOAT, r, bd + 3 - r, b);
      mb_add(g, "Add", "p,b", "pb");
      cur = "pb";
    }
  }
  if (t->residual) {
    char ins[32];
    snprintf(ins, sizeof ins, "z,%s", cur);
    mb_add(g, "Add", ins, "pz");
    cur = "pz";
  }
  const char *out = "y";
  if (!t->act) {
    out = cur;
  } else if (!strcmp(t->act, "GeluTanh")) {
    mb_attr_s(mb_add(g, "Gelu", cur, "y"), "approximate", "tanh");
  } else if (!strcmp(t->act, "GeluErf")) { /* PyTorch's export before opset 20 */
    mb_init(g, "s2", KEEL_FLOAT, 0, NULL, (float[]){1.41421356f});
    mb_init(g, "one", KEEL_FLOAT, 0, NULL, (float[]){1.0f});
    mb_init(g, "half", KEEL_FLOAT, 0, NULL, (float[]){0.5f});
    char ins[32];
    snprintf(ins, sizeof ins, "%s,s2", cur);
    mb_add(g, "Div", ins, "g1");
    mb_add(g, "Erf", "g1", "g2");
    mb_add(g, "Add", "g2,one", "g3");
    snprintf(ins, sizeof ins, "%s,g3", cur);
    mb_add(g, "Mul", ins, "g4");
    mb_add(g, "Mul", "g4,half", "y");
  } else {
    mb_node *a = mb_add(g, t->act, cur, "y");
    if (!strcmp(t->act, "LeakyRelu")) mb_attr_f(a, "alpha", 0.1f);
  }
  mb_output(g, out, KEEL_FLOAT, -1, NULL);
  return g;
}

static keel_value_t *run(const mm_case *t, const float *a, const float *w, const float *b,
                         const float *z, unsigned flags, int threads, keel_status *st,
                         int *nodes, bool *onednn) {
  keel_options o = {.size = sizeof o, .flags = flags, .threads = threads};
  keel_session_t *s = mb_session_opts(model(t, w, b), 20, &o);
  *st = KEEL_ERR_RUNTIME;
  if (!s) return NULL;
  char *d = NULL;
  if (!keel_session_describe(s, 0, &d)) {
    const char *p = strstr(d, "nodes");
    *nodes = p ? atoi(p + 5 + strspn(p + 5, " ")) : -1;
    *onednn = strstr(d, "FusedMatMul onednn") != NULL;
  }
  keel_free(d);
  int64_t ad[4], yd[4];
  for (int i = 0; i + 1 < t->rank; i++) ad[i] = t->lead[i];
  ad[t->rank - 1] = t->K;
  yshape(t, yd);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, t->rank, ad, a), NULL};
  if (t->residual == 1) in[1] = mb_tensor(s, KEEL_FLOAT, t->rank, yd, z);
  if (t->residual == 2) in[1] = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){t->N}, z);
  keel_value_t *out[1] = {0};
  *st = keel_run(s, (const char *[]){"a", "z"}, in, t->residual ? 2 : 1, out);
  keel_value_release(in[0]), keel_value_release(in[1]);
  keel_session_destroy(s);
  return out[0];
}

static bool g_dnnl;
static int g_cases;

static void one(const mm_case *t) {
  int64_t M = rows(t), na = M * t->K, nw = t->K * t->N, nz = M * t->N;
  float *a = malloc(sizeof(float) * (size_t)(na + 1)), *w = malloc(sizeof(float) * (size_t)nw);
  float *b = malloc(sizeof(float) * (size_t)t->N), *z = malloc(sizeof(float) * (size_t)(nz + 1));
  for (int64_t i = 0; i < na; i++) a[i] = rnd() * 2;
  for (int64_t i = 0; i < nw; i++) w[i] = rnd();
  for (int64_t i = 0; i < t->N; i++) b[i] = rnd();
  for (int64_t i = 0; i < nz; i++) z[i] = rnd();
  keel_status st;
  int nodes = 0;
  bool onednn = false;
  keel_value_t *ref = run(t, a, w, b, z, KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS, 1,
                          &st, &nodes, &onednn);
  CHECK_OK(st);
  double tol = 3e-6 * sqrt((double)t->K + 1);
  for (int v = 0; v < 4 && ref; v++) {
    int threads = v == 0 ? 2 : v;
    keel_value_t *got = run(t, a, w, b, z, v == 0 ? KEEL_OPT_REFERENCE_KERNELS : 0, threads, &st,
                            &nodes, &onednn);
    CHECK_OK(st);
    CHECK(nodes == 1); /* the whole chain is one FusedMatMul */
    if (g_dnnl) CHECK(onednn == (v != 0));
    double worst = 0;
    int64_t n = keel_value_numel(ref);
    if (got && keel_value_numel(got) == n && keel_value_rank(got) == keel_value_rank(ref)) {
      const float *r = keel_value_data(ref), *q = keel_value_data(got);
      for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)r[i] - q[i]) / (tol * (1 + fabs((double)r[i])));
        if (!(e <= worst)) worst = e;
      }
    } else {
      worst = INFINITY;
    }
    if (!(worst <= 1))
      fprintf(stderr, "rank %d M %lld K %lld N %lld bias %d res %d act %s gemm %d variant %d: "
              "worst %g of the tolerance\n", t->rank, (long long)M, (long long)t->K,
              (long long)t->N, t->bias, t->residual, t->act ? t->act : "-", t->gemm, v, worst);
    CHECK(worst <= 1);
    keel_value_release(got);
  }
  keel_value_release(ref);
  free(a), free(w), free(b), free(z);
  g_cases++;
}

/* A node whose first run has 1 row (keel_gemv) meets taller products
 * (oneDNN, which packs its own B) and short ones again, on one session. */
static void gemv_then_rows(void) {
  mm_case t = {2, {-1}, 300, 200, 1, 1, "Relu", false};
  int64_t nw = t.K * t.N;
  float *w = malloc(sizeof(float) * (size_t)nw), *b = malloc(sizeof(float) * (size_t)t.N);
  for (int64_t i = 0; i < nw; i++) w[i] = rnd();
  for (int64_t i = 0; i < t.N; i++) b[i] = rnd();
  keel_options o = {.size = sizeof o, .threads = 2};
  keel_session_t *s = mb_session_opts(model(&t, w, b), 20, &o);
  CHECK(s != NULL);
  static const int64_t Ms[] = {1, 3, 50, 1, 9, 4};
  for (int i = 0; s && i < 6; i++) {
    mm_case u = t;
    u.lead[0] = Ms[i];
    int64_t na = Ms[i] * t.K, nz = Ms[i] * t.N;
    float *a = malloc(sizeof(float) * (size_t)na), *z = malloc(sizeof(float) * (size_t)nz);
    for (int64_t k = 0; k < na; k++) a[k] = rnd() * 2;
    for (int64_t k = 0; k < nz; k++) z[k] = rnd();
    keel_status st;
    int nodes;
    bool onednn;
    keel_value_t *ref = run(&u, a, w, b, z, KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS,
                            1, &st, &nodes, &onednn);
    CHECK_OK(st);
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){Ms[i], t.K}, a),
                           mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){Ms[i], t.N}, z)};
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"a", "z"}, in, 2, out));
    double worst = INFINITY, tol = 3e-6 * sqrt((double)t.K + 1);
    if (ref && out[0] && keel_value_numel(out[0]) == nz) {
      const float *r = keel_value_data(ref), *q = keel_value_data(out[0]);
      worst = 0;
      for (int64_t k = 0; k < nz; k++) {
        double e = fabs((double)r[k] - q[k]) / (tol * (1 + fabs((double)r[k])));
        if (!(e <= worst)) worst = e;
      }
    }
    if (!(worst <= 1))
      fprintf(stderr, "gemv then rows, M %lld: worst %g\n", (long long)Ms[i], worst);
    CHECK(worst <= 1);
    keel_value_release(in[0]), keel_value_release(in[1]), keel_value_release(out[0]);
    keel_value_release(ref);
    free(a), free(z);
  }
  keel_session_destroy(s);
  free(w), free(b);
}

int main(void) {
  mm_case probe = {2, {4}, 8, 8, 0, 0, NULL, false};
  {
    keel_status st;
    int nodes;
    float x[64] = {0};
    keel_value_release(run(&probe, x, x, x, x, 0, 1, &st, &nodes, &g_dnnl));
  }
  fprintf(stderr, "oneDNN FusedMatMul: %s\n", g_dnnl ? "bound" : "not available");
  const mm_case cases[] = {
      {3, {1, 128}, 256, 768, 1, 0, NULL, false},        /* GPT's qkv            */
      {3, {1, 128}, 256, 1024, 1, 0, "Gelu", false},     /* the MLP's first half */
      {3, {1, 128}, 1024, 256, 1, 1, NULL, false},       /* and its residual     */
      {3, {2, 64}, 256, 256, 3, 1, "Relu", false},
      {2, {77}, 100, 300, 2, 2, "Tanh", false},          /* broadcasting residual */
      {2, {200}, 64, 64, 1, 0, "GeluTanh", false},
      {2, {130}, 96, 200, 1, 0, "GeluErf", false},       /* fuse-gelu's Gelu     */
      {2, {256}, 128, 96, 1, 0, "LeakyRelu", false},
      {2, {256}, 128, 96, 0, 1, "Sigmoid", false},
      {2, {256}, 128, 96, 1, 0, "HardSigmoid", false},
      {2, {1}, 1280, 1000, 0, 0, NULL, true},            /* a classifier's Gemm  */
      {2, {33}, 512, 100, 0, 0, "Relu", true},
      {1, {0}, 64, 32, 1, 0, NULL, false},               /* A of rank 1          */
      {4, {2, 3, 5}, 40, 24, 1, 1, NULL, false},         /* small: reference route */
      {2, {16}, 128, 32, 1, 0, NULL, false},             /* the LSTM bench's head */
      /* 1-4 rows: keel_gemv on B in place (both layouts) where the CPU
       * has its vector kernel */
      {2, {3}, 300, 200, 1, 1, "Relu", false},
      {2, {4}, 177, 130, 2, 2, "Tanh", false},           /* Z broadcasts         */
      {1, {0}, 500, 70, 1, 0, "Gelu", false},
      {3, {1, 2}, 64, 300, 3, 1, NULL, false},
      {2, {2}, 40, 1000, 0, 1, "Sigmoid", true},
      {2, {1}, 960, 1280, 0, 0, "HardSigmoid", true},    /* MobileNetV3's head   */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
  static const char *acts[] = {NULL, "Relu", "Gelu", "Tanh", "GeluTanh"};
  for (int i = 0; i < 30; i++) {
    mm_case t = {(int)pick(2, 3), {pick(1, 4), pick(1, 150)}, pick(1, 300), pick(1, 300),
                 (int)pick(0, 2), (int)pick(0, 1), acts[pick(0, 4)], false};
    if (t.rank == 2) t.lead[0] = pick(1, 300);
    one(&t);
  }
  gemv_then_rows();
  fprintf(stderr, "%d product cases\n", g_cases);
  return check_report();
}
