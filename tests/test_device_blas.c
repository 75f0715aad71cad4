/* test_device_blas.c: MatMul, Gemm and FusedMatMul on a device (the blas
 * kernel group, device/dev_blas.h; ops/math/matmul/matmul_gpu.c), on any
 * machine: the emulated device ("emu", its naive products accumulated in
 * double), or KEEL_TEST_DEVICE=cuda:0 for cuBLAS (tools/gpu_check.sh).
 *
 * Each case is one graph run by a session on the device and by a CPU
 * session on the same inputs, outputs compared within float accumulation
 * (|d - c| <= 1e-4 (1 + |c|): OpenBLAS, cuBLAS and the double reference
 * sum in different orders):
 *   - MatMul 2-D; batched 3-D; 4-D with batch broadcasting on both sides
 *     ([2,1,5,7] x [1,3,7,4]: a loop over slices); a 2-D B under a 4-D A
 *     (one tall product); a 2-D A under a 4-D B (A's stride 0); rank-1
 *     operands on either side and both (a scalar); K = 0 (zeros);
 *   - Gemm: transA, transB, alpha, beta; C absent, [N], [M, 1], [1], a
 *     scalar, [M, N]; beta 0 with a C of NaN (never read); C a constant;
 *   - FusedMatMul (the fuse-matmul pass's MatMul by a constant with bias,
 *     residual and Relu, Sigmoid, Tanh or LeakyRelu (its alpha a kernel
 *     parameter) on the device (test_device_attn.c: every activation);
 *   - each placement as keel_session_describe shows it ("gpu 'mm'
 *     (MatMul)"), device bytes steady over repeated runs, and none left
 *     after the session.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devcase.h"
#include "keel_stats.h"
#include "mb.h"

static const char *g_dev = "emu:0";

#define MAX_IN 3

/* One case: a graph built twice (a session consumes it), its inputs. */
typedef struct bcase {
  const char *label;
  mb_graph *(*build)(const struct bcase *c);
  int n_in;
  const char *in[MAX_IN];
  int rank[MAX_IN];
  int64_t dims[MAX_IN][6];
  /* the node the placement is checked on, its op, and its side */
  const char *node, *op;
  bool on_gpu;
  /* Gemm's attributes (when gemm) */
  int ta, tb;
  float alpha, beta;
  bool nan_c;                  /* input 2 holds NaN (beta 0 must not read it) */
} bcase;

static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}

static float value(int input, int64_t i) {
  return (float)(((i * 7 + input * 13) % 23) - 11) / 8.0f;
}

/* The graph's inputs as the case lists them (typed, shaped). */
static mb_graph *inputs(const bcase *c) {
  mb_graph *g = mb_graph_new("main");
  for (int i = 0; i < c->n_in; i++) mb_input(g, c->in[i], KEEL_FLOAT, c->rank[i], c->dims[i]);
  return g;
}

static mb_graph *matmul_graph(const bcase *c) {
  mb_graph *g = inputs(c);
  mb_name(mb_add(g, "MatMul", "a,b", "y"), "mm");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static mb_graph *gemm_graph(const bcase *c) {
  mb_graph *g = inputs(c);
  mb_node *n = mb_add(g, "Gemm", c->n_in == 3 ? "a,b,c" : "a,b", "y");
  mb_name(n, "gemm");
  if (c->ta) mb_attr_i(n, "transA", 1);
  if (c->tb) mb_attr_i(n, "transB", 1);
  mb_attr_f(n, "alpha", c->alpha);
  mb_attr_f(n, "beta", c->beta);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* Gemm with C a constant [1, 4] (copied to the device once). */
static mb_graph *gemm_const_c_graph(const bcase *c) {
  static float cv[4] = {0.5f, -1.0f, 2.0f, 0.25f};
  mb_graph *g = inputs(c);
  mb_init(g, "c", KEEL_FLOAT, 2, (int64_t[]){1, 4}, cv);
  mb_node *n = mb_add(g, "Gemm", "a,b,c", "y");
  mb_name(n, "gemm");
  mb_attr_i(n, "transB", 1);
  mb_attr_f(n, "alpha", 0.5f);
  mb_attr_f(n, "beta", 2.0f);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* x [.., 6] -> MatMul(W [6, 5] constant) -> Add(bias [5]) -> Add(z) ->
 * act -> y: one FusedMatMul after the fuse-matmul pass. */
static mb_graph *fused_graph(const bcase *c, const char *act) {
  static float w[30], bias[5];
  for (int i = 0; i < 30; i++) w[i] = value(5, i);
  for (int i = 0; i < 5; i++) bias[i] = 0.125f * (float)i - 0.25f;
  mb_graph *g = inputs(c);
  mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){6, 5}, w);
  mb_init(g, "bias", KEEL_FLOAT, 1, (int64_t[]){5}, bias);
  mb_name(mb_add(g, "MatMul", "a,w", "p"), "mm");
  mb_name(mb_add(g, "Add", "p,bias", "q"), "bias_add");
  mb_name(mb_add(g, "Add", "q,z", "r"), "residual");
  mb_name(mb_add(g, act, "r", "y"), "act");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}
static mb_graph *fused_relu(const bcase *c) { return fused_graph(c, "Relu"); }
static mb_graph *fused_sigmoid(const bcase *c) { return fused_graph(c, "Sigmoid"); }
static mb_graph *fused_tanh(const bcase *c) { return fused_graph(c, "Tanh"); }
static mb_graph *fused_leaky(const bcase *c) { return fused_graph(c, "LeakyRelu"); }

static keel_stats dev_stats(keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  const char *name = NULL;
  CHECK_OK(keel_stats_get_device(s, &st, &name));
  return st;
}

static void run_case(const bcase *c) {
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(c->build(c), 13, &o);
  keel_session_t *plain = mb_session(c->build(c), 13);
  CHECK(s && plain);
  if (!s || !plain) {
    fprintf(stderr, "case %s: no session\n", c->label);
    keel_session_destroy(s), keel_session_destroy(plain);
    return;
  }
  char *t = NULL, want[128];
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  snprintf(want, sizeof want, " %s '%s' (%s)", c->on_gpu ? "gpu" : "cpu", c->node, c->op);
  bool placed = t && strstr(t, want);
  CHECK(placed);
  if (!placed) fprintf(stderr, "case %s: expected \"%s\" in\n%s\n", c->label, want, t ? t : "(none)");
  keel_free(t);
  float *data[MAX_IN];
  for (int i = 0; i < c->n_in; i++) {
    int64_t n = numel(c->rank[i], c->dims[i]);
    data[i] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t e = 0; e < n; e++) data[i][e] = c->nan_c && i == 2 ? NAN : value(i, e);
  }
  uint64_t dev_after[4] = {0};
  for (int run = 0; run < 4; run++) {
    keel_session_t *ss[2] = {s, plain};
    keel_value_t *outs[2] = {0};
    for (int k = 0; k < 2; k++) {
      keel_value_t *in[MAX_IN];
      for (int i = 0; i < c->n_in; i++) in[i] = mb_tensor(ss[k], KEEL_FLOAT, c->rank[i], c->dims[i], data[i]);
      keel_status st = keel_run(ss[k], c->in, in, c->n_in, &outs[k]);
      CHECK_OK(st);
      if (st) fprintf(stderr, "case %s (%s): %s\n", c->label, k ? "cpu" : g_dev, keel_last_error());
      for (int i = 0; i < c->n_in; i++) keel_value_release(in[i]);
    }
    devcase_check(c->label, 0, outs[0], outs[1], 1e-4); /* float accumulation in another order */
    keel_value_release(outs[0]), keel_value_release(outs[1]);
    dev_after[run] = dev_stats(s).allocated;
  }
  for (int run = 1; run < 4; run++) CHECK(dev_after[run] == dev_after[0]);
  for (int i = 0; i < c->n_in; i++) free(data[i]);
  keel_session_destroy(s);
  keel_session_destroy(plain);
  CHECK(keel_process_device_bytes() == 0);
}

#define IN2(r0, d0, r1, d1) .n_in = 2, .in = {"a", "b"}, .rank = {r0, r1}, .dims = {d0, d1}
#define D(...) {__VA_ARGS__}

static const bcase CASES[] = {
    {"matmul 2-D", matmul_graph, IN2(2, D(5, 7), 2, D(7, 3)), "mm", "MatMul", true},
    {"matmul 3-D batch", matmul_graph, IN2(3, D(4, 5, 7), 3, D(4, 7, 3)), "mm", "MatMul", true},
    {"matmul 4-D both broadcast", matmul_graph, IN2(4, D(2, 1, 5, 7), 4, D(1, 3, 7, 4)), "mm", "MatMul", true},
    {"matmul 4-D mixed", matmul_graph, IN2(4, D(2, 3, 5, 7), 3, D(3, 7, 4)), "mm", "MatMul", true},
    {"matmul 4-D x 2-D", matmul_graph, IN2(4, D(2, 3, 5, 7), 2, D(7, 4)), "mm", "MatMul", true},
    {"matmul 2-D x 4-D", matmul_graph, IN2(2, D(5, 7), 4, D(2, 3, 7, 4)), "mm", "MatMul", true},
    {"matmul 3-D x 4-D inner", matmul_graph, IN2(3, D(3, 5, 7), 4, D(2, 1, 7, 4)), "mm", "MatMul", true},
    {"matmul 1-D x 2-D", matmul_graph, IN2(1, D(7), 2, D(7, 3)), "mm", "MatMul", true},
    {"matmul 3-D x 1-D", matmul_graph, IN2(3, D(2, 5, 7), 1, D(7)), "mm", "MatMul", true},
    {"matmul 1-D x 1-D", matmul_graph, IN2(1, D(7), 1, D(7)), "mm", "MatMul", true},
    {"matmul 1-D x 3-D", matmul_graph, IN2(1, D(7), 3, D(2, 7, 3)), "mm", "MatMul", true},
    {"matmul K = 0", matmul_graph, IN2(2, D(3, 0), 2, D(0, 4)), "mm", "MatMul", true},
    {"matmul big", matmul_graph, IN2(3, D(3, 33, 65), 2, D(65, 17)), "mm", "MatMul", true},
    {"gemm plain", gemm_graph, IN2(2, D(5, 7), 2, D(7, 4)), "gemm", "Gemm", true, 0, 0, 1.0f, 1.0f},
    {"gemm transA transB alpha", gemm_graph, IN2(2, D(7, 5), 2, D(4, 7)), "gemm", "Gemm", true, 1, 1, 0.5f, 1.0f},
    {"gemm C [N]", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 1}, .dims = {D(5, 7), D(4, 7), D(4)},
     "gemm", "Gemm", true, 0, 1, 1.5f, -0.5f},
    {"gemm C [M,1]", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 2}, .dims = {D(7, 5), D(7, 4), D(5, 1)},
     "gemm", "Gemm", true, 1, 0, 1.0f, 2.0f},
    {"gemm C [1]", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 1}, .dims = {D(5, 7), D(7, 4), D(1)},
     "gemm", "Gemm", true, 0, 0, 1.0f, 1.0f},
    {"gemm C scalar", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 0}, .dims = {D(5, 7), D(4, 7), D(0)},
     "gemm", "Gemm", true, 0, 1, 2.0f, 3.0f},
    {"gemm C [M,N]", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 2}, .dims = {D(7, 5), D(4, 7), D(5, 4)},
     "gemm", "Gemm", true, 1, 1, -1.0f, 0.5f},
    {"gemm beta 0, C NaN", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 2}, .dims = {D(5, 7), D(7, 4), D(5, 4)},
     "gemm", "Gemm", true, 0, 0, 1.0f, 0.0f, true},
    {"gemm K = 0 with C", gemm_graph, .n_in = 3, .in = {"a", "b", "c"}, .rank = {2, 2, 1}, .dims = {D(5, 0), D(0, 4), D(4)},
     "gemm", "Gemm", true, 0, 0, 1.0f, 2.0f},
    {"gemm C constant", gemm_const_c_graph, IN2(2, D(5, 7), 2, D(4, 7)), "gemm", "Gemm", true},
    {"fused relu", fused_relu, .n_in = 2, .in = {"a", "z"}, .rank = {3, 3}, .dims = {D(2, 3, 6), D(2, 3, 5)},
     "mm", "FusedMatMul", true},
    {"fused sigmoid, Z broadcast wider", fused_sigmoid, .n_in = 2, .in = {"a", "z"}, .rank = {2, 3},
     .dims = {D(3, 6), D(2, 3, 5)}, "mm", "FusedMatMul", true},
    {"fused tanh, A 1-D", fused_tanh, .n_in = 2, .in = {"a", "z"}, .rank = {1, 1}, .dims = {D(6), D(5)},
     "mm", "FusedMatMul", true},
    {"fused leaky relu", fused_leaky, .n_in = 2, .in = {"a", "z"}, .rank = {2, 2}, .dims = {D(4, 6), D(4, 5)},
     "mm", "FusedMatMul", true},
};

int main(void) {
  g_dev = devcase_device();
  fprintf(stderr, "test_device_blas: on %s\n", g_dev);
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) run_case(&CASES[i]);
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
