/* test_device_conv.c: the `conv` kernel group (device/dev_conv.h) and its
 * placement (passes/pass_place.c, gpu_takes_conv), on the emulated device
 * ("emu") or on KEEL_TEST_DEVICE (tools/gpu_check.sh: cuda:0).
 *
 * Each case is a graph run on the device and on the CPU with the same
 * inputs; the outputs agree within float rounding (the device's reference
 * sums a convolution in double, the CPU and a GPU in float), and the named
 * node is placed on the GPU or, for what the kernels do not compute,
 * stays on the CPU:
 *   - Conv 2-D: pads (asymmetric), strides, dilations, groups, depthwise,
 *     with and without B, auto_pad SAME_UPPER / SAME_LOWER / VALID; 1-D;
 *   - Conv -> BatchNormalization -> Relu as the passes fuse it (fold-
 *     batchnorm, fuse-activation), and the other fused activations
 *     (LeakyRelu, Clip, HardSigmoid, Sigmoid, Tanh, HardSwish at opset
 *     14, SiLU as Sigmoid and Mul);
 *   - MaxPool and AveragePool: pads, strides, dilations, ceil_mode,
 *     count_include_pad, auto_pad, 1-D; GlobalMaxPool, GlobalAveragePool;
 *   - on the CPU: a 3-D Conv, MaxPool with Indices;
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
static float X[4096], W[8192], B[64], BN[4][64];

/* One case: X's shape, the op and its attributes. */
typedef struct spec {
  const char *what;
  const char *op;              /* Conv, MaxPool, ...                       */
  int rank;
  int64_t x[5];
  int64_t wshape[5];           /* Conv's W (rank entries)                  */
  int64_t group;
  int64_t k[3], s[3], d[3], p[6];
  int nk, ns, nd, np;          /* counts of the attributes given (0: none) */
  const char *auto_pad;
  bool bias, bn, indices;
  const char *act;             /* an activation node after it, or NULL     */
  int64_t ceil, incl;
  bool on_gpu;
} spec;

static const spec *g_s;

static mb_graph *make(void) {
  const spec *c = g_s;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, c->rank, c->x);
  const char *y = c->act || c->bn ? "c" : "y";
  mb_node *n;
  if (!strcmp(c->op, "Conv")) {
    mb_init(g, "w", KEEL_FLOAT, c->rank, c->wshape, W);
    mb_init(g, "b", KEEL_FLOAT, 1, c->wshape, B);
    n = mb_add(g, "Conv", c->bias ? "x,w,b" : "x,w", y);
    if (c->group != 1) mb_attr_i(n, "group", c->group);
  } else {
    n = mb_add(g, c->op, "x", c->indices ? "y,i" : y);
    if (c->nk) mb_attr_ints(n, "kernel_shape", c->nk, c->k);
    if (c->ceil) mb_attr_i(n, "ceil_mode", 1);
    if (c->incl) mb_attr_i(n, "count_include_pad", 1);
  }
  mb_name(n, "node");
  if (c->ns) mb_attr_ints(n, "strides", c->ns, c->s);
  if (c->nd) mb_attr_ints(n, "dilations", c->nd, c->d);
  if (c->np) mb_attr_ints(n, "pads", c->np, c->p);
  if (c->auto_pad) mb_attr_s(n, "auto_pad", c->auto_pad);
  if (c->bn) {
    int64_t m[1] = {c->wshape[0]};
    const char *names[4] = {"sc", "bb", "mu", "var"};
    for (int i = 0; i < 4; i++) mb_init(g, names[i], KEEL_FLOAT, 1, m, BN[i]);
    mb_add(g, "BatchNormalization", "c,sc,bb,mu,var", c->act ? "n" : "y");
  }
  if (c->act && !strcmp(c->act, "SiLU")) { /* x * Sigmoid(x), as exporters write it */
    mb_add(g, "Sigmoid", "c", "sg");
    mb_add(g, "Mul", "c,sg", "y");
  } else if (c->act) {
    n = mb_add(g, c->act, c->bn ? "n" : "c", "y");
    if (!strcmp(c->act, "LeakyRelu")) mb_attr_f(n, "alpha", 0.2f);
    if (!strcmp(c->act, "HardSigmoid")) mb_attr_f(n, "alpha", 0.3f);
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (c->indices) mb_output(g, "i", KEEL_INT64, -1, NULL);
  return g;
}

/* Clip's bounds as inputs (opset 11 on). */
static mb_graph *make_clip(void) {
  static float lo[1] = {-0.5f}, hi[1] = {0.75f};
  mb_graph *g = make();
  mb_init(g, "lo", KEEL_FLOAT, 0, NULL, lo);
  mb_init(g, "hi", KEEL_FLOAT, 0, NULL, hi);
  return g;
}

static void check_case(const spec *c) {
  g_s = c;
  bool clip = c->act && !strcmp(c->act, "Clip");
  keel_options o = {.size = sizeof o, .device = g_dev};
  int opset = c->act && !strcmp(c->act, "HardSwish") ? 14 : 13;
  keel_session_t *s = mb_session_opts(clip ? make_clip() : make(), opset, &o);
  keel_session_t *plain = mb_session(clip ? make_clip() : make(), opset);
  CHECK(s && plain);
  if (!s || !plain) {
    fprintf(stderr, "  case %s: no session\n", c->what);
    keel_session_destroy(s), keel_session_destroy(plain);
    return;
  }
  char *t = NULL, want[128];
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  snprintf(want, sizeof want, "%s 'node' (%s)", c->on_gpu ? "gpu" : "cpu", c->op);
  if (!t || !strstr(t, want)) {
    fprintf(stderr, "  case %s: want %s\n%s\n", c->what, want, t ? t : "");
    CHECK(false);
  }
  keel_free(t);
  int n_out = c->indices ? 2 : 1;
  uint64_t first = 0;
  for (int run = 0; run < 3; run++) {
    keel_value_t *outs[2][2] = {{0}};
    keel_session_t *ss[2] = {s, plain};
    for (int k = 0; k < 2; k++) {
      keel_value_t *v = mb_tensor(ss[k], KEEL_FLOAT, c->rank, c->x, X);
      CHECK_OK(keel_run(ss[k], (const char *[]){"x"}, &v, 1, outs[k]));
      keel_value_release(v);
    }
    for (int i = 0; i < n_out; i++) {
      devcase_check(c->what, i, outs[0][i], outs[1][i], 1e-5);
      keel_value_release(outs[0][i]), keel_value_release(outs[1][i]);
    }
    devcase_steady(s, run, &first);
  }
  devcase_end(s, plain);
  CHECK(keel_process_device_bytes() == 0);
}

#define X4(n, c, h, w) .rank = 4, .x = {n, c, h, w}
#define W4(m, c, h, w) .wshape = {m, c, h, w}

static const spec CONVS[] = {
    {"3x3 pads 1", "Conv", X4(2, 3, 9, 9), W4(4, 3, 3, 3), 1, .p = {1, 1, 1, 1}, .np = 4, .bias = true, .on_gpu = true},
    {"no bias", "Conv", X4(1, 3, 8, 7), W4(5, 3, 3, 3), 1, .on_gpu = true},
    {"asymmetric pads, strides", "Conv", X4(1, 4, 11, 10), W4(6, 4, 3, 2), 1, .s = {2, 3}, .ns = 2,
     .p = {0, 1, 2, 1}, .np = 4, .bias = true, .on_gpu = true},
    {"dilations", "Conv", X4(2, 2, 12, 12), W4(3, 2, 3, 3), 1, .d = {2, 3}, .nd = 2, .p = {1, 2, 0, 1},
     .np = 4, .bias = true, .on_gpu = true},
    {"groups 2", "Conv", X4(1, 6, 8, 8), W4(4, 3, 3, 3), 2, .p = {1, 1, 1, 1}, .np = 4, .bias = true, .on_gpu = true},
    {"depthwise", "Conv", X4(2, 8, 10, 10), W4(8, 1, 3, 3), 8, .s = {2, 2}, .ns = 2, .p = {1, 1, 1, 1},
     .np = 4, .bias = true, .on_gpu = true},
    {"depthwise x2", "Conv", X4(1, 4, 7, 7), W4(8, 1, 5, 5), 4, .p = {2, 2, 2, 2}, .np = 4, .on_gpu = true},
    {"1x1", "Conv", X4(2, 16, 6, 6), W4(12, 16, 1, 1), 1, .bias = true, .on_gpu = true},
    {"SAME_UPPER", "Conv", X4(1, 3, 9, 8), W4(4, 3, 4, 3), 1, .s = {2, 2}, .ns = 2, .auto_pad = "SAME_UPPER",
     .bias = true, .on_gpu = true},
    {"SAME_LOWER", "Conv", X4(1, 3, 9, 8), W4(4, 3, 4, 3), 1, .s = {2, 2}, .ns = 2, .auto_pad = "SAME_LOWER",
     .on_gpu = true},
    {"VALID", "Conv", X4(1, 3, 9, 8), W4(4, 3, 3, 3), 1, .s = {2, 1}, .ns = 2, .auto_pad = "VALID", .on_gpu = true},
    {"1-D", "Conv", .rank = 3, .x = {2, 4, 17}, .wshape = {6, 2, 3}, .group = 2, .s = {2}, .ns = 1,
     .d = {2}, .nd = 1, .p = {2, 1}, .np = 2, .bias = true, .on_gpu = true},
    {"3-D stays on the CPU", "Conv", .rank = 5, .x = {1, 2, 4, 5, 5}, .wshape = {3, 2, 2, 3, 3}, .group = 1,
     .bias = true, .on_gpu = false},
    /* fused: the passes fold BatchNormalization into W and B and the
     * activation into the Conv (its node keeps the name) */
    {"Conv+BN+Relu", "Conv", X4(2, 3, 9, 9), W4(8, 3, 3, 3), 1, .p = {1, 1, 1, 1}, .np = 4, .bias = true,
     .bn = true, .act = "Relu", .on_gpu = true},
    {"Conv+BN (no B)", "Conv", X4(1, 3, 9, 9), W4(8, 3, 3, 3), 1, .s = {2, 2}, .ns = 2, .bn = true, .on_gpu = true},
    {"LeakyRelu", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "LeakyRelu", .on_gpu = true},
    {"Clip", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "Clip", .on_gpu = true},
    {"HardSigmoid", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "HardSigmoid", .on_gpu = true},
    {"Sigmoid", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "Sigmoid", .on_gpu = true},
    {"Tanh", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "Tanh", .on_gpu = true},
    {"HardSwish", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "HardSwish", .on_gpu = true},
    {"SiLU", "Conv", X4(1, 3, 9, 9), W4(4, 3, 3, 3), 1, .bias = true, .act = "SiLU", .on_gpu = true},
};

static const spec POOLS[] = {
    {"maxpool 3x3/2 pads", "MaxPool", X4(2, 3, 11, 11), .k = {3, 3}, .nk = 2, .s = {2, 2}, .ns = 2,
     .p = {1, 1, 1, 1}, .np = 4, .on_gpu = true},
    {"maxpool ceil_mode", "MaxPool", X4(1, 4, 10, 9), .k = {3, 2}, .nk = 2, .s = {2, 2}, .ns = 2,
     .p = {0, 1, 1, 0}, .np = 4, .ceil = 1, .on_gpu = true},
    {"maxpool dilations", "MaxPool", X4(1, 2, 12, 12), .k = {2, 3}, .nk = 2, .d = {2, 2}, .nd = 2,
     .s = {1, 2}, .ns = 2, .on_gpu = true},
    {"maxpool SAME_UPPER", "MaxPool", X4(1, 2, 9, 8), .k = {3, 3}, .nk = 2, .s = {2, 2}, .ns = 2,
     .auto_pad = "SAME_UPPER", .on_gpu = true},
    {"maxpool 1-D", "MaxPool", .rank = 3, .x = {2, 3, 15}, .k = {4}, .nk = 1, .s = {3}, .ns = 1, .p = {1, 2},
     .np = 2, .ceil = 1, .on_gpu = true},
    {"maxpool Indices stays on the CPU", "MaxPool", X4(1, 2, 8, 8), .k = {2, 2}, .nk = 2, .s = {2, 2},
     .ns = 2, .indices = true, .on_gpu = false},
    {"avgpool pads", "AveragePool", X4(2, 3, 11, 11), .k = {3, 3}, .nk = 2, .s = {2, 2}, .ns = 2,
     .p = {1, 1, 1, 1}, .np = 4, .on_gpu = true},
    {"avgpool count_include_pad", "AveragePool", X4(2, 3, 11, 11), .k = {3, 3}, .nk = 2, .s = {2, 2},
     .ns = 2, .p = {1, 1, 1, 1}, .np = 4, .incl = 1, .on_gpu = true},
    {"avgpool ceil_mode count_include_pad", "AveragePool", X4(1, 4, 10, 9), .k = {3, 3}, .nk = 2,
     .s = {2, 2}, .ns = 2, .p = {1, 0, 1, 2}, .np = 4, .ceil = 1, .incl = 1, .on_gpu = true},
    {"avgpool SAME_LOWER", "AveragePool", X4(1, 2, 9, 8), .k = {2, 3}, .nk = 2, .s = {2, 2}, .ns = 2,
     .auto_pad = "SAME_LOWER", .incl = 1, .on_gpu = true},
    {"avgpool 1-D", "AveragePool", .rank = 3, .x = {2, 3, 15}, .k = {3}, .nk = 1, .s = {2}, .ns = 1,
     .p = {1, 1}, .np = 2, .on_gpu = true},
    {"global max", "GlobalMaxPool", X4(2, 5, 7, 6), .on_gpu = true},
    {"global average", "GlobalAveragePool", X4(2, 5, 7, 6), .on_gpu = true},
    {"global average 1-D", "GlobalAveragePool", .rank = 3, .x = {2, 5, 13}, .on_gpu = true},
};

int main(void) {
  g_dev = devcase_device();
  fprintf(stderr, "test_device_conv: on %s\n", g_dev);
  for (int i = 0; i < 4096; i++) X[i] = (float)((i * 37) % 101) * 0.043f - 2.1f;
  for (int i = 0; i < 8192; i++) W[i] = (float)((i * 13) % 29) * 0.021f - 0.3f;
  for (int i = 0; i < 64; i++) {
    B[i] = 0.05f * (float)(i % 9) - 0.2f;
    BN[0][i] = 0.8f + 0.01f * (float)i, BN[1][i] = 0.1f * (float)(i % 5) - 0.2f;
    BN[2][i] = 0.02f * (float)(i % 7), BN[3][i] = 0.5f + 0.05f * (float)(i % 3);
  }
  for (size_t i = 0; i < sizeof CONVS / sizeof *CONVS; i++) check_case(&CONVS[i]);
  for (size_t i = 0; i < sizeof POOLS / sizeof *POOLS; i++) check_case(&POOLS[i]);
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
