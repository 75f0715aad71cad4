/* test_device_norm.c: the `norm` kernel group (device/dev_norm.h) and its
 * placement (passes/pass_place.c, gpu_takes_norm), on the emulated device
 * ("emu") or on KEEL_TEST_DEVICE (tools/gpu_check.sh: cuda:0).
 *
 * Each case is a graph run on the device and on the CPU with the same
 * inputs; the outputs agree within float rounding (the CPU sums in
 * double, the device in float on a GPU), the named node is placed on the
 * GPU or, for what the kernels do not compute, stays on the CPU:
 *   - LayerNormalization over the last axis and over the last two, with
 *     and without B, epsilon, with Mean and InvStdDev requested; the one
 *     the passes fuse from ReduceMean/Sub/Pow/... (pass_norm.c);
 *   - ReduceSum (axes input, opset 13), ReduceMean and ReduceMax (axes
 *     attribute, opset 13; input, opset 18), keepdims 0 and 1; ReduceSum
 *     over axis 0 (the device's reduce_mid); over axes 0 and 2 (apart) it
 *     stays on the CPU;
 *   - device bytes steady over runs, none after destroy.
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
static float X[2 * 3 * 16], S[48], B[48];

typedef mb_graph *(*make_fn)(void);

static void check_case(const char *what, make_fn make, int opset, int n_out, const char *node,
                       bool on_gpu) {
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(make(), opset, &o), *plain = mb_session(make(), opset);
  CHECK(s && plain);
  if (!s || !plain) {
    fprintf(stderr, "  case %s: no session\n", what);
    keel_session_destroy(s), keel_session_destroy(plain);
    return;
  }
  char *t = NULL, want[128];
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  snprintf(want, sizeof want, "%s %s", on_gpu ? "gpu" : "cpu", node);
  if (!t || !strstr(t, want)) {
    fprintf(stderr, "  case %s: want %s\n%s\n", what, want, t ? t : "");
    CHECK(false);
  }
  keel_free(t);
  uint64_t first = 0;
  for (int run = 0; run < 3; run++) {
    keel_value_t *outs[2][4] = {{0}};
    keel_session_t *ss[2] = {s, plain};
    for (int k = 0; k < 2; k++) {
      keel_value_t *v = mb_tensor(ss[k], KEEL_FLOAT, 3, (int64_t[]){2, 3, 16}, X);
      CHECK_OK(keel_run(ss[k], (const char *[]){"x"}, &v, 1, outs[k]));
      keel_value_release(v);
    }
    for (int i = 0; i < n_out; i++) {
      devcase_check(what, i, outs[0][i], outs[1][i], 1e-5);
      keel_value_release(outs[0][i]), keel_value_release(outs[1][i]);
    }
    devcase_steady(s, run, &first);
  }
  devcase_end(s, plain);
}

/* ----------------------------------------------------- LayerNorm */

static int g_ln;
static mb_graph *layernorm(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 16});
  bool two = g_ln == 2;
  mb_init(g, "s", KEEL_FLOAT, two ? 2 : 1, two ? (int64_t[]){3, 16} : (int64_t[]){16}, S);
  mb_init(g, "b", KEEL_FLOAT, two ? 2 : 1, two ? (int64_t[]){3, 16} : (int64_t[]){16}, B);
  mb_name(mb_add(g, "Relu", "x", "r"), "relu");
  mb_node *n = mb_add(g, "LayerNormalization", g_ln == 1 ? "r,s" : "r,s,b", g_ln == 3 ? "y,m,i" : "y");
  mb_name(n, "ln");
  if (two) mb_attr_i(n, "axis", -2);
  if (g_ln == 1) mb_attr_f(n, "epsilon", 0.1f);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (g_ln == 3) {
    mb_output(g, "m", KEEL_FLOAT, -1, NULL);
    mb_output(g, "i", KEEL_FLOAT, -1, NULL);
  }
  return g;
}

/* The pattern pass_norm.c fuses into LayerNormalization: ReduceMean,
 * Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul scale, Add bias. */
static mb_graph *fused(void) {
  static float two[1] = {2.0f}, eps[1] = {1e-5f};
  static int64_t last[1] = {-1};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 16});
  mb_init(g, "s", KEEL_FLOAT, 1, (int64_t[]){16}, S);
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){16}, B);
  mb_init(g, "two", KEEL_FLOAT, 0, NULL, two);
  mb_init(g, "eps", KEEL_FLOAT, 0, NULL, eps);
  mb_init(g, "last", KEEL_INT64, 1, (int64_t[]){1}, last);
  mb_node *n = mb_add(g, "ReduceMean", "x", "mu");
  mb_attr_ints(n, "axes", 1, last);
  mb_add(g, "Sub", "x,mu", "d");
  mb_add(g, "Pow", "d,two", "d2");
  n = mb_add(g, "ReduceMean", "d2", "var");
  mb_attr_ints(n, "axes", 1, last);
  mb_add(g, "Add", "var,eps", "ve");
  mb_add(g, "Sqrt", "ve", "sd");
  mb_add(g, "Div", "d,sd", "nx");
  mb_add(g, "Mul", "nx,s", "sx");
  mb_add(g, "Add", "sx,b", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_layernorm(void) {
  for (g_ln = 0; g_ln < 4; g_ln++) check_case("layernorm", layernorm, 17, g_ln == 3 ? 3 : 1, "'ln' (LayerNormalization)", true);
  /* the fused node is labelled with the nodes it replaced */
  check_case("fused layernorm", fused, 13, 1, "#1 (LayerNormalization) + #0 (ReduceMean)", true);
}

/* ------------------------------------------------------ reductions */

static int g_red, g_keep;
/* 0-2: over the last axis; 3: over the first (outer 1, n 2, inner 48 on
 * the device); 4: over axes 0 and 2, not adjacent: on the CPU */
static const char *const RED_OPS[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceSum",
                                      "ReduceSum"};
static int g_opset;
static mb_graph *reduce(void) {
  static int64_t last[1] = {2}, first[1] = {0}, apart[2] = {0, 2};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 16});
  mb_init(g, "axes", KEEL_INT64, 1, (int64_t[]){g_red == 4 ? 2 : 1},
          g_red == 4 ? apart : g_red == 3 ? first : last);
  mb_name(mb_add(g, "Abs", "x", "a"), "abs");
  bool input = g_red == 0 || g_red >= 3 || g_opset >= 18;
  mb_node *n = mb_add(g, RED_OPS[g_red], input ? "a,axes" : "a", "y");
  mb_name(n, "reduce");
  if (!input) mb_attr_ints(n, "axes", 1, (int64_t[]){-1});
  mb_attr_i(n, "keepdims", g_keep);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_reduce(void) {
  for (g_opset = 13; g_opset <= 18; g_opset += 5)
    for (g_red = 0; g_red < 5; g_red++)
      for (g_keep = 0; g_keep < 2; g_keep++) {
        char want[64];
        snprintf(want, sizeof want, "'reduce' (%s)", RED_OPS[g_red]);
        check_case(RED_OPS[g_red], reduce, g_opset, 1, want, g_red != 4);
      }
}

int main(void) {
  g_dev = devcase_device();
  fprintf(stderr, "test_device_norm: on %s\n", g_dev);
  for (int i = 0; i < 96; i++) X[i] = (float)((i * 11) % 17) * 0.37f - 2.9f;
  for (int i = 0; i < 48; i++) S[i] = 0.5f + 0.03f * (float)i, B[i] = 0.1f * (float)(i % 7) - 0.3f;
  check_layernorm();
  check_reduce();
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
