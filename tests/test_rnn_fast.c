/* test_rnn_fast.c: the prepared ("packed") implementation of RNN, GRU and
 * LSTM (src/ops/nn/rnn/rnn_fast.c) against the reference kernel of src/ops/nn/rnn/rnn.c
 * (KEEL_OPT_REFERENCE_KERNELS), both through real sessions whose W, R, B
 * and P are initializers. Random cases cover the three ops, every
 * direction, both layouts, batch 1 and more (the product's row tails),
 * hidden sizes across its column blocks, sequence_lens with zero lengths,
 * initial states, peepholes, clip, input_forget, linear_before_reset,
 * custom activations, output subsets and 1-3 threads (RNN and LSTM split
 * their steps by units at 2 or more); then the bench model's shape, the
 * nodes that must keep the reference (weights computed at run time, double),
 * and vmath's tanh against tanh() over a sweep and the special values. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "ops/nn/rnn/rnn_fast.h"
#include "ops/common/vmath.h"

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng;
}
static int pick(int n) { return (int)(next() % (uint64_t)n); }
static float rndf(float scale) {
  return scale * ((float)(next() >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
}

enum { RNN = 0, GRU = 1, LSTM = 2 };
static const char *const OPS[3] = {"RNN", "GRU", "LSTM"};
static const int GATES[3] = {1, 3, 4};

typedef struct fcase {
  int kind, opset, dirs, layout;
  bool reverse;
  int64_t seq, batch, in, hid;
  bool has_b, has_lens, has_h0, has_c0, has_p, lbr, couple;
  float clip;                  /* 0: none                                  */
  const char *acts[6];         /* NULL: the defaults                       */
  bool want[3];                /* Y, Y_h, Y_c                              */
  bool weights_as_inputs;      /* W and R fed at run time: no prepared state */
  int threads;                 /* the session's (0: 1); RNN and LSTM on
                                  packed weights split steps by units      */
  float *x, *w, *r, *b, *h0, *c0, *p;
  int32_t lens[8];
} fcase;

static float *fill(int64_t n, float scale) {
  float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = rndf(scale);
  return v;
}

static void fill_case(fcase *c) {
  int64_t gh = GATES[c->kind] * c->hid, bh = c->batch * c->hid;
  c->x = fill(c->seq * c->batch * c->in, 1.0f);
  c->w = fill(c->dirs * gh * c->in, 0.4f);
  c->r = fill(c->dirs * gh * c->hid, 0.4f);
  c->b = fill(c->dirs * 2 * gh, 0.3f);
  c->h0 = fill(c->dirs * bh, 0.8f);
  c->c0 = fill(c->dirs * bh, 0.8f);
  c->p = fill(c->dirs * 3 * c->hid, 0.5f);
  for (int64_t b = 0; b < c->batch; b++) c->lens[b] = (int32_t)pick((int)c->seq + 1);
  if (c->has_lens && c->batch > 1) c->lens[pick((int)c->batch)] = (int32_t)c->seq;
}

static void free_case(fcase *c) {
  free(c->x), free(c->w), free(c->r), free(c->b), free(c->h0), free(c->c0), free(c->p);
}

static void add_attrs(const fcase *c, mb_node *n) {
  static const char *const dirs[3] = {"forward", "reverse", "bidirectional"};
  mb_attr_i(n, "hidden_size", c->hid);
  mb_attr_s(n, "direction", dirs[c->dirs == 2 ? 2 : c->reverse]);
  if (c->opset >= 14) mb_attr_i(n, "layout", c->layout);
  if (c->clip > 0) mb_attr_f(n, "clip", c->clip);
  if (c->lbr) mb_attr_i(n, "linear_before_reset", 1);
  if (c->couple) mb_attr_i(n, "input_forget", 1);
  int nact = c->kind + 1, n_acts = 0;
  while (n_acts < 6 && c->acts[n_acts]) n_acts++;
  if (n_acts >= nact) mb_attr_strs(n, "activations", n_acts, c->acts);
}

static const char *const IN_NAMES[8] = {"X", "W", "R", "B", "sequence_lens",
                                        "initial_h", "initial_c", "P"};

static bool has_input(const fcase *c, int i) {
  bool has[8] = {true, true, true, c->has_b, c->has_lens, c->has_h0, c->has_c0, c->has_p};
  return has[i];
}

/* X, sequence_lens and the initial states are graph inputs; W, R, B and P
 * initializers (or inputs, weights_as_inputs). */
static void add_inputs(const fcase *c, mb_graph *g, char *ins) {
  int64_t gh = GATES[c->kind] * c->hid;
  int64_t wd[3] = {c->dirs, gh, c->in}, rd[3] = {c->dirs, gh, c->hid};
  int64_t bd[2] = {c->dirs, 2 * gh}, pd[2] = {c->dirs, 3 * c->hid};
  int last = 0;
  for (int i = 0; i < 8; i++)
    if (has_input(c, i)) last = i;
  for (int i = 0; i <= last; i++) {
    if (i) strcat(ins, ",");
    if (!has_input(c, i)) continue;
    strcat(ins, IN_NAMES[i]);
    bool fed = i == 0 || i == 4 || i == 5 || i == 6 || (c->weights_as_inputs && i <= 2);
    if (fed) mb_input(g, IN_NAMES[i], i == 4 ? KEEL_INT32 : KEEL_FLOAT, -1, NULL);
    else if (i == 1) mb_init(g, "W", KEEL_FLOAT, 3, wd, c->w);
    else if (i == 2) mb_init(g, "R", KEEL_FLOAT, 3, rd, c->r);
    else if (i == 3) mb_init(g, "B", KEEL_FLOAT, 2, bd, c->b);
    else mb_init(g, "P", KEEL_FLOAT, 2, pd, c->p);
  }
}

static keel_session_t *build(const fcase *c, unsigned flags) {
  mb_graph *g = mb_graph_new("main");
  char ins[128] = "", outs[64] = "";
  add_inputs(c, g, ins);
  static const char *const out_names[3] = {"Y", "Y_h", "Y_c"};
  for (int i = 0; i < 3; i++) {
    if (i) strcat(outs, ",");
    if (!c->want[i]) continue;
    strcat(outs, out_names[i]);
    mb_output(g, out_names[i], KEEL_FLOAT, -1, NULL);
  }
  add_attrs(c, mb_add(g, OPS[c->kind], ins, outs));
  keel_options o = {.size = sizeof o, .flags = flags, .threads = c->threads ? c->threads : 1};
  return mb_session_opts(g, c->opset, &o);
}

/* Runs c; out[] gets Y, Y_h, Y_c where wanted. `packed`: whether the node
 * must be bound to the prepared implementation. */
static bool run_case(const fcase *c, unsigned flags, bool packed, keel_value_t **out) {
  keel_session_t *s = build(c, flags);
  CHECK(s != NULL);
  if (!s) return false;
  char *d = NULL;
  if (!keel_session_describe(s, 0, &d)) {
    char want[32];
    snprintf(want, sizeof want, "%s packed", OPS[c->kind]);
    CHECK(packed == (strstr(d, want) != NULL));
    keel_free(d);
  }
  int64_t gh = GATES[c->kind] * c->hid;
  int64_t xd[3] = {c->layout ? c->batch : c->seq, c->layout ? c->seq : c->batch, c->in};
  int64_t sd[3] = {c->layout ? c->batch : c->dirs, c->layout ? c->dirs : c->batch, c->hid};
  int64_t wd[3] = {c->dirs, gh, c->in}, rd[3] = {c->dirs, gh, c->hid};
  const char *names[6];
  keel_value_t *in[6];
  int n = 0;
  names[n] = "X", in[n++] = mb_tensor(s, KEEL_FLOAT, 3, xd, c->x);
  if (c->weights_as_inputs) {
    names[n] = "W", in[n++] = mb_tensor(s, KEEL_FLOAT, 3, wd, c->w);
    names[n] = "R", in[n++] = mb_tensor(s, KEEL_FLOAT, 3, rd, c->r);
  }
  if (c->has_lens)
    names[n] = "sequence_lens", in[n++] = mb_tensor(s, KEEL_INT32, 1, &c->batch, c->lens);
  if (c->has_h0) names[n] = "initial_h", in[n++] = mb_tensor(s, KEEL_FLOAT, 3, sd, c->h0);
  if (c->has_c0) names[n] = "initial_c", in[n++] = mb_tensor(s, KEEL_FLOAT, 3, sd, c->c0);
  keel_value_t *got[3] = {0};
  keel_status st = keel_run(s, names, in, n, got);
  if (st) fprintf(stderr, "%s\n", keel_last_error());
  CHECK_OK(st);
  int k = 0;
  for (int i = 0; i < 3; i++) out[i] = c->want[i] ? got[k++] : NULL;
  for (int i = 0; i < n; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
  return st == KEEL_OK;
}

static void describe(const fcase *c) {
  fprintf(stderr, "  %s opset %d dirs %d rev %d layout %d seq %lld batch %lld in %lld hid %lld "
          "b %d lens %d h0 %d c0 %d p %d lbr %d couple %d clip %g acts %s %s threads %d\n",
          OPS[c->kind], c->opset, c->dirs, c->reverse, c->layout, (long long)c->seq,
          (long long)c->batch, (long long)c->in, (long long)c->hid, c->has_b, c->has_lens,
          c->has_h0, c->has_c0, c->has_p, c->lbr, c->couple, (double)c->clip,
          c->acts[0] ? c->acts[0] : "default", c->acts[1] ? c->acts[1] : "", c->threads);
}

/* Fast against reference: within 2e-5 + 2e-5 relative (sums in another
 * order, tanh within 3.5e-7, over a few steps of recurrence); 1e-3 with
 * custom activations, whose unbounded gates (Relu, a z below 0 from
 * ScaledTanh) grow any rounding difference several times per step. */
static void compare_case(const fcase *c) {
  keel_value_t *ref[3] = {0}, *got[3] = {0};
  bool ok = run_case(c, KEEL_OPT_REFERENCE_KERNELS, false, ref) &&
            run_case(c, 0, !c->weights_as_inputs, got);
  for (int i = 0; ok && i < 3; i++) {
    if (!c->want[i]) continue;
    int64_t n = keel_value_numel(ref[i]);
    CHECK(keel_value_numel(got[i]) == n);
    const float *a = keel_value_data(ref[i]), *b = keel_value_data(got[i]);
    int bad = 0;
    float tol = c->acts[0] ? 1e-3f : 2e-5f;
    for (int64_t j = 0; j < n && j < keel_value_numel(got[i]); j++)
      if (!(fabsf(a[j] - b[j]) <= tol + tol * fabsf(a[j]))) {
        if (!bad++) {
          describe(c);
          fprintf(stderr, "  output %d [%lld]: packed %.9g, reference %.9g\n", i, (long long)j,
                  (double)b[j], (double)a[j]);
        }
      }
    if (bad) fprintf(stderr, "  %d of %lld differ\n", bad, (long long)n);
    CHECK(bad == 0);
  }
  for (int i = 0; i < 3; i++) keel_value_release(ref[i]), keel_value_release(got[i]);
}

static const char *const SOME_ACTS[] = {"Tanh", "Sigmoid", "Relu", "HardSigmoid", "Softsign",
                                        "ScaledTanh"};

static fcase random_case(int kind) {
  static const int64_t hids[] = {1, 5, 16, 17, 31, 32, 33, 47, 64, 65, 100, 128, 144, 192};
  fcase c = {.kind = kind, .opset = pick(2) ? 14 : 7, .dirs = 1};
  int dir = pick(3);
  c.dirs = dir == 2 ? 2 : 1;
  c.reverse = dir == 1;
  c.layout = c.opset >= 14 ? pick(2) : 0;
  c.threads = 1 + pick(3);
  c.seq = 1 + pick(6);
  c.batch = pick(3) ? 1 + pick(6) : 1;
  c.in = 1 + pick(40);
  c.hid = hids[pick((int)(sizeof hids / sizeof *hids))];
  c.has_b = pick(4) != 0;
  c.has_lens = pick(3) == 0;
  c.has_h0 = pick(2);
  c.has_c0 = kind == LSTM && pick(2);
  c.has_p = kind == LSTM && pick(2);
  c.lbr = kind == GRU && pick(2);
  c.couple = kind == LSTM && pick(4) == 0;
  c.clip = pick(4) == 0 ? 0.5f + (float)pick(3) : 0.0f;
  if (pick(4) == 0)
    for (int i = 0; i < (kind + 1) * c.dirs; i++) c.acts[i] = SOME_ACTS[pick(6)];
  for (int i = 0; i < 3; i++) c.want[i] = pick(4) != 0;
  if (kind != LSTM) c.want[2] = false;
  if (!c.want[0] && !c.want[1] && !c.want[2]) c.want[0] = true;
  return c;
}

static void random_cases(void) {
  for (int kind = 0; kind < 3; kind++)
    for (int i = 0; i < 60; i++) {
      fcase c = random_case(kind);
      fill_case(&c);
      compare_case(&c);
      free_case(&c);
    }
}

/* The lstm bench model's node (bench/models/gen.py SmallLSTM), batch 1 and
 * 3, and a GRU of the same size; plus nodes that keep the reference. The
 * CRNN's bidirectional LSTM (bench/models/gen_exporters.py, 96 units) at 2
 * and 3 threads: its two directions run at once (rnn.c dirs_parallel). */
static void fixed_cases(void) {
  for (int t = 2; t <= 3; t++) {
    fcase c = {.kind = LSTM, .opset = 11, .dirs = 2, .seq = 80, .batch = 1, .in = 256, .hid = 96,
               .has_b = true, .want = {true, true, true}, .threads = t};
    fill_case(&c);
    compare_case(&c);
    free_case(&c);
  }
  fcase lstm = {.kind = LSTM, .opset = 14, .dirs = 1, .seq = 16, .batch = 1, .in = 64,
                .hid = 128, .has_b = true, .has_h0 = true, .has_c0 = true,
                .want = {true, true, true}};
  for (int batch = 1; batch <= 3; batch += 2) {
    fcase c = lstm;
    c.batch = batch;
    c.threads = batch == 1 ? 2 : 1; /* batch 1, 2 threads: the parallel steps */
    fill_case(&c);
    compare_case(&c);
    c.kind = GRU, c.want[2] = false, c.has_c0 = false;
    compare_case(&c);
    c.weights_as_inputs = true; /* computed weights: both runs are the reference */
    compare_case(&c);
    free_case(&c);
  }
}

/* A double node is not prepared (the row's type check): it still runs. */
static void double_keeps_reference(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_DOUBLE, 3, (int64_t[]){2, 1, 3});
  mb_init(g, "W", KEEL_DOUBLE, 3, (int64_t[]){1, 8, 3}, (double[24]){0.5, -0.25});
  mb_init(g, "R", KEEL_DOUBLE, 3, (int64_t[]){1, 8, 2}, (double[16]){0.125});
  mb_node *n = mb_add(g, "LSTM", "X,W,R", "Y");
  mb_attr_i(n, "hidden_size", 2);
  mb_output(g, "Y", KEEL_DOUBLE, -1, NULL);
  keel_session_t *s = mb_session(g, 14);
  CHECK(s != NULL);
  if (!s) return;
  char *d = NULL;
  if (!keel_session_describe(s, 0, &d)) {
    CHECK(strstr(d, "LSTM packed") == NULL);
    keel_free(d);
  }
  keel_value_t *x = mb_tensor(s, KEEL_DOUBLE, 3, (int64_t[]){2, 1, 3}, (double[6]){1, 2, 3});
  keel_value_t *y[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, y));
  CHECK(y[0] && keel_value_numel(y[0]) == 4);
  keel_value_release(y[0]);
  keel_value_release(x);
  keel_session_destroy(s);
}

/* Each variant of the panel product against sums in double, over shapes
 * that reach every tile, row tail and column tail, with and without acc;
 * columns of C past N and rows' padding (ldc > N) stay untouched. */
static void product_variants(void) {
  static const int64_t Ms[] = {1, 2, 3, 4, 5, 7, 9, 16};
  static const int64_t Ns[] = {1, 15, 16, 17, 24, 40, 63, 64, 65, 128, 129, 197, 200, 384, 512};
  for (int v = 0; v < 3; v++)
    for (int t = 0; t < 120; t++) {
      int64_t M = Ms[pick(8)], N = Ns[pick(15)], K = 1 + pick(70), lda = K + pick(3),
              ldc = N + pick(5);
      bool acc = pick(2);
      float *a = fill(M * lda, 1.0f), *b = fill(N * K, 1.0f), *c = fill(M * ldc, 1.0f);
      float *c0 = malloc(sizeof(float) * (size_t)(M * ldc));
      float *pan = malloc(sizeof(float) * (size_t)keel_panel_floats(N, K));
      memcpy(c0, c, sizeof(float) * (size_t)(M * ldc));
      keel_panel_pack(b, K, 0, N, pan);
      if (keel_panel_gemm_variant(v, M, N, K, a, lda, pan, acc, c, ldc)) {
        int bad = 0;
        for (int64_t i = 0; i < M; i++)
          for (int64_t j = 0; j < ldc; j++) {
            double want = acc || j >= N ? c0[i * ldc + j] : 0;
            for (int64_t k = 0; j < N && k < K; k++) want += (double)a[i * lda + k] * b[j * K + k];
            if (!(fabs(c[i * ldc + j] - want) <= 1e-5 * (1 + K))) bad++;
          }
        if (bad) fprintf(stderr, "product variant %d M %lld N %lld K %lld acc %d: %d wrong\n", v,
                         (long long)M, (long long)N, (long long)K, acc, bad);
        CHECK(bad == 0);
      }
      free(a), free(b), free(c), free(c0), free(pan);
    }
}

/* keel_panel_gemm_cols: a part of the columns (starting at a multiple of 16,
 * across panel boundaries) against double math; the other columns of C
 * untouched. B gets the NP floats of slack rf_prepare leaves. */
static void column_parts(void) {
  static const int64_t Ms[] = {1, 2, 3, 4, 5, 7};
  static const int64_t Ns[] = {16, 48, 64, 128, 144, 256, 400, 512};
  for (int t = 0; t < 60; t++) {
    int64_t M = Ms[pick(6)], N = Ns[pick(8)], K = 1 + pick(140), lda = K + pick(3),
            ldc = N + pick(5);
    int64_t j0 = 16 * pick((int)(N / 16)), n = 1 + pick((int)(N - j0));
    float *a = fill(M * lda, 1.0f), *b = fill(N * K, 1.0f), *c = fill(M * ldc, 1.0f);
    float *c0 = malloc(sizeof(float) * (size_t)(M * ldc));
    float *pan = malloc(sizeof(float) * (size_t)(keel_panel_floats(N, K) + KEEL_PANEL_NP));
    memcpy(c0, c, sizeof(float) * (size_t)(M * ldc));
    keel_panel_pack(b, K, 0, N, pan);
    keel_panel_gemm_cols(M, j0, n, K, a, lda, pan, c, ldc);
    int bad = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < ldc; j++) {
        bool in = j >= j0 && j < j0 + n;
        double want = in ? 0 : c0[i * ldc + j];
        for (int64_t k = 0; in && k < K; k++) want += (double)a[i * lda + k] * b[j * K + k];
        if (!(fabs(c[i * ldc + j] - want) <= 1e-5 * (1 + K))) bad++;
      }
    if (bad) fprintf(stderr, "columns [%lld, %lld) of M %lld N %lld K %lld: %d wrong\n",
                     (long long)j0, (long long)(j0 + n), (long long)M, (long long)N, (long long)K,
                     bad);
    CHECK(bad == 0);
    free(a), free(b), free(c), free(c0), free(pan);
  }
}

/* keel_vm_tanh against tanh() in double: within 4e-7 relative over
 * [-12, 12] (odd lengths reach every vector tail), and the specials. */
static void tanh_sweep(void) {
  enum { N = 48001 };
  static float x[N], y[N];
  for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / (N - 1);
  keel_vm_tanh(x, y, N);
  double worst = 0;
  for (int i = 0; i < N; i++) {
    double want = tanh((double)x[i]);
    double e = fabs((double)y[i] - want) / fmax(fabs(want), 1e-30);
    worst = fmax(worst, e);
    float s = keel_vm_tanh1(x[i]);
    if (fabsf(y[i] - s) > 5e-7f * fabsf(s)) {
      fprintf(stderr, "tanh(%.9g): vector %.9g, scalar %.9g\n", (double)x[i], (double)y[i],
              (double)s);
      CHECK(!"vector and scalar tanh differ");
    }
  }
  if (worst > 4e-7) fprintf(stderr, "tanh: worst relative error %g\n", worst);
  CHECK(worst <= 4e-7);
  float sp[7] = {INFINITY, -INFINITY, NAN, -0.0f, 1e-30f, 3e-4f, 50.0f}, out[7];
  keel_vm_tanh(sp, out, 7);
  CHECK(out[0] == 1.0f && out[1] == -1.0f && isnan(out[2]));
  CHECK(out[3] == 0.0f && signbit(out[3]) && out[4] == 1e-30f && out[5] == 3e-4f);
  CHECK(out[6] == 1.0f);
}

int main(void) {
  tanh_sweep();
  product_variants();
  column_parts();
  random_cases();
  fixed_cases();
  double_keeps_reference();
  return check_report();
}
