/* test_passes.c: the graph passes (src/passes/). Each fused pattern is
 * run with the passes on and with KEEL_OPT_NO_GRAPH_PASSES (the model as
 * written, every node its own kernel): outputs must be identical, the
 * fused model must have fewer nodes, and an activation that cannot be
 * fused (its input read twice, Clip bounds computed at run time) must be
 * left alone. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define C 3
#define M 4
#define H 7

static float g_x[2 * C * H * H], g_w[M * C * 3 * 3], g_b[M];

static void fill(void) {
  uint32_t r = 12345;
  for (size_t i = 0; i < (sizeof g_x / sizeof *g_x); i++) g_x[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 23) - 1.0f;
  for (size_t i = 0; i < (sizeof g_w / sizeof *g_w); i++) g_w[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f;
  for (size_t i = 0; i < M; i++) g_b[i] = 0.1f * (float)i - 0.15f;
}

/* Conv (pads 1, stride 2 on odd sizes) -> act -> output; when `twice`,
 * the conv output is also a graph output (so it must not be fused). */
static mb_graph *model(const char *act, int opset, bool twice, bool clip_dynamic) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, C, H, H});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){M, C, 3, 3}, g_w);
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){M}, g_b);
  mb_node *c = mb_add(g, "Conv", "x,w,b", "c");
  mb_name(c, "conv");
  mb_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_attr_ints(c, "strides", 2, (int64_t[]){2, 1});
  mb_node *a;
  if (!strcmp(act, "SiLU") || !strcmp(act, "HSMul")) { /* gated: c * f(c) */
    a = mb_add(g, act[0] == 'S' ? "Sigmoid" : "HardSigmoid", "c", "s");
    if (act[0] == 'H') mb_attr_f(a, "alpha", 1.0f / 6), mb_attr_f(a, "beta", 0.5f);
    mb_name(mb_add(g, "Mul", act[0] == 'S' ? "c,s" : "s,c", "y"), "gate");
  } else if (!strcmp(act, "Clip") && opset >= 11) {
    float lo = -0.25f, hi = 0.5f;
    mb_init(g, "hi", KEEL_FLOAT, 0, NULL, &hi);
    if (clip_dynamic) {
      mb_input(g, "lo", KEEL_FLOAT, 0, NULL);
    } else {
      mb_init(g, "lo", KEEL_FLOAT, 0, NULL, &lo);
    }
    a = mb_add(g, "Clip", "c,lo,hi", "y");
  } else {
    a = mb_add(g, act, "c", "y");
  }
  mb_name(a, "act");
  if (!strcmp(act, "LeakyRelu")) mb_attr_f(a, "alpha", 0.07f);
  if (!strcmp(act, "HardSigmoid")) mb_attr_f(a, "alpha", 0.3f), mb_attr_f(a, "beta", 0.4f);
  if (!strcmp(act, "Clip") && opset < 11) mb_attr_f(a, "min", 0.0f), mb_attr_f(a, "max", 6.0f);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (twice) mb_output(g, "c", KEEL_FLOAT, -1, NULL);
  return g;
}

static int node_count(keel_session_t *s) {
  char *d = NULL;
  if (keel_session_describe(s, 1, &d)) return -1;
  const char *p = strstr(d, "\"nodes\": ");
  int n = p ? atoi(p + 9) : -1;
  keel_free(d);
  return n;
}

static void run(keel_session_t *s, bool dyn, float *y, size_t n) {
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){2, C, H, H}, g_x), NULL};
  float lo = -0.25f;
  if (dyn) in[1] = mb_tensor(s, KEEL_FLOAT, 0, NULL, &lo);
  keel_value_t *out[2] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x", "lo"}, in, dyn ? 2 : 1, out));
  if (out[0]) {
    CHECK((size_t)keel_value_numel(out[0]) == n);
    memcpy(y, keel_value_data(out[0]), n * sizeof(float));
  }
  for (int i = 0; i < 2; i++) keel_value_release(out[i]), keel_value_release(in[i]);
}

static void one(const char *act, int opset, bool twice, bool dyn) {
  size_t n = 2 * M * 4 * H; /* out: (2, M, 4, 7) */
  float *y0 = calloc(n, sizeof(float)), *y1 = calloc(n, sizeof(float));
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s0 = mb_session_opts(model(act, opset, twice, dyn), opset, &plain);
  /* fuse-activation on Conv itself: the layout pass (test_conv_nhwc) off */
  keel_options nchw = {.size = sizeof nchw, .flags = KEEL_OPT_NO_ONEDNN};
  keel_session_t *s1 = mb_session_opts(model(act, opset, twice, dyn), opset, &nchw);
  CHECK(s0 && s1);
  if (s0 && s1) {
    run(s0, dyn, y0, n);
    run(s1, dyn, y1, n);
    bool same = memcmp(y0, y1, n * sizeof(float)) == 0;
    if (!same) fprintf(stderr, "%s opset %d: fused output differs\n", act, opset);
    CHECK(same);
    bool gated = !strcmp(act, "SiLU") || !strcmp(act, "HSMul");
    int all = gated ? 3 : 2, want = twice || dyn ? all : 1;
    if (node_count(s1) != want) fprintf(stderr, "%s: %d nodes\n", act, node_count(s1));
    CHECK(node_count(s1) == want);
    CHECK(node_count(s0) == all);
  }
  keel_session_destroy(s0);
  keel_session_destroy(s1);
  free(y0), free(y1);
}

/* LayerNorm as PyTorch exports it before opset 17, gamma behind an
 * Identity (a shared weight): one LayerNormalization node after the
 * passes, the same values within float rounding. `opset18` gives
 * ReduceMean its axes as an input; `extra` makes the centered value a
 * graph output too, which must stop the fusion. Form 1 writes the
 * square as Mul(d, d) and the division as Mul(Reciprocal(s), d), gamma
 * first, as tf2onnx exports keras' rsqrt form; form 2 folds gamma into the
 * scale, y = x * inv + (beta - mean * inv), inv = rsqrt(var + eps) *
 * gamma, as tf2onnx exports keras' LayerNormalization (operands in the
 * orders it writes them). */
static int g_ln_form;

static mb_graph *ln_model(int opset, bool extra) {
  enum { D = 37 };
  static float gam[D], bet[D];
  for (int i = 0; i < D; i++) gam[i] = 0.5f + 0.03f * (float)i, bet[i] = 0.1f * (float)(i % 5) - 0.2f;
  float two = 2.0f, eps = 1e-5f;
  int64_t axes = -1;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 5, D});
  mb_init(g, "g0", KEEL_FLOAT, 1, (int64_t[]){D}, gam);
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){D}, bet);
  mb_init(g, "two", KEEL_FLOAT, 0, NULL, &two);
  mb_init(g, "eps", KEEL_FLOAT, 0, NULL, &eps);
  mb_add(g, "Identity", "g0", "g");
  if (opset >= 18) {
    mb_init(g, "axes", KEEL_INT64, 1, (int64_t[]){1}, &axes);
    mb_add(g, "ReduceMean", "x,axes", "mean");
  } else {
    mb_attr_ints(mb_add(g, "ReduceMean", "x", "mean"), "axes", 1, &axes);
  }
  mb_add(g, "Sub", "x,mean", "d");
  if (g_ln_form) mb_add(g, "Mul", "d,d", "p");
  else mb_add(g, "Pow", "d,two", "p");
  if (opset >= 18) mb_add(g, "ReduceMean", "p,axes", "var");
  else mb_attr_ints(mb_add(g, "ReduceMean", "p", "var"), "axes", 1, &axes);
  mb_add(g, "Add", "var,eps", "ve");
  mb_add(g, "Sqrt", "ve", "s");
  if (g_ln_form == 2) {
    mb_add(g, "Reciprocal", "s", "rs");
    mb_add(g, "Mul", "rs,g", "inv");
    mb_add(g, "Mul", "x,inv", "xs");
    mb_add(g, "Mul", "mean,inv", "ms");
    mb_add(g, "Sub", "b,ms", "bb");
    mb_add(g, "Add", "xs,bb", "y");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    if (extra) mb_output(g, "d", KEEL_FLOAT, -1, NULL);
    return g;
  }
  if (g_ln_form) {
    mb_add(g, "Reciprocal", "s", "rs");
    mb_add(g, "Mul", "rs,d", "n");
    mb_add(g, "Mul", "g,n", "m");
  } else {
    mb_add(g, "Div", "d,s", "n");
    mb_add(g, "Mul", "n,g", "m");
  }
  mb_add(g, "Add", "m,b", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (extra) mb_output(g, "d", KEEL_FLOAT, -1, NULL);
  return g;
}

static void ln_case(int opset, bool extra) {
  enum { N = 2 * 5 * 37 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)((i * 37) % 101) / 17.0f - 2.5f;
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *s0 = mb_session_opts(ln_model(opset, extra), opset, &plain);
  keel_session_t *s1 = mb_session(ln_model(opset, extra), opset);
  CHECK(s0 && s1);
  if (!s0 || !s1) return;
  int want = extra ? (g_ln_form == 2 ? 12 : g_ln_form ? 10 : 9) : 1;
  if (node_count(s1) != want) fprintf(stderr, "layernorm opset %d: %d nodes\n", opset, node_count(s1));
  CHECK(node_count(s1) == want);
  float y0[N], y1[N];
  keel_session_t *ss[2] = {s0, s1};
  float *ys[2] = {y0, y1};
  for (int k = 0; k < 2; k++) {
    keel_value_t *in = mb_tensor(ss[k], KEEL_FLOAT, 3, (int64_t[]){2, 5, 37}, x);
    keel_value_t *out[2] = {0};
    CHECK_OK(keel_run(ss[k], (const char *[]){"x"}, &in, 1, out));
    if (out[0]) memcpy(ys[k], keel_value_data(out[0]), sizeof y0);
    keel_value_release(out[0]), keel_value_release(out[1]), keel_value_release(in);
  }
  double worst = 0;
  for (int i = 0; i < N; i++) worst = fmax(worst, fabs(y0[i] - y1[i]) / (1e-6 + fabs(y0[i])));
  CHECK(worst < 1e-5);
  keel_session_destroy(s0);
  keel_session_destroy(s1);
}

/* GELU as PyTorch writes it (form 0: Mul(Mul(x, 1+erf), 0.5) with Div by
 * sqrt 2; form 1: Mul(Mul(x, 0.5), 1+erf) with Mul by 1/sqrt 2): one Gelu
 * node, the same values within float rounding. */
/* The tanh approximation, as exported: form 2 Hugging Face's NewGELU
 * (0.5 * x first, Pow(x, 3), constants on the right), form 3 torch's
 * gelu(approximate='tanh') (x * (x * x), constants on the left, * 0.5
 * last). One Gelu(approximate tanh). */
static mb_graph *gelu_tanh_model(int form) {
  float k = 0.7978845608f, c = 0.044715f, one = 1.0f, half = 0.5f, three = 3.0f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){3, 50});
  mb_init(g, "k", KEEL_FLOAT, 0, NULL, &k);
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "one", KEEL_FLOAT, 0, NULL, &one);
  mb_init(g, "half", KEEL_FLOAT, 0, NULL, &half);
  mb_init(g, "three", KEEL_FLOAT, 0, NULL, &three);
  if (form == 2) {
    mb_add(g, "Mul", "x,half", "h");
    mb_add(g, "Pow", "x,three", "p3");
    mb_add(g, "Mul", "p3,c", "t");
    mb_add(g, "Add", "x,t", "u");
    mb_add(g, "Mul", "u,k", "w");
    mb_add(g, "Tanh", "w", "th");
    mb_add(g, "Add", "th,one", "a");
    mb_add(g, "Mul", "h,a", "y");
  } else {
    mb_add(g, "Mul", "x,x", "x2");
    mb_add(g, "Mul", "x,x2", "p3");
    mb_add(g, "Mul", "c,p3", "t");
    mb_add(g, "Add", "x,t", "u");
    mb_add(g, "Mul", "k,u", "w");
    mb_add(g, "Tanh", "w", "th");
    mb_add(g, "Add", "one,th", "a");
    mb_add(g, "Mul", "x,a", "m");
    mb_add(g, "Mul", "half,m", "y");
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static mb_graph *gelu_model(int form) {
  if (form >= 2) return gelu_tanh_model(form);
  float c = form ? 0.70710678f : 1.41421356f, one = 1.0f, half = 0.5f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){3, 50});
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "one", KEEL_FLOAT, 0, NULL, &one);
  mb_init(g, "half", KEEL_FLOAT, 0, NULL, &half);
  mb_add(g, form ? "Mul" : "Div", "x,c", "d");
  mb_add(g, "Erf", "d", "e");
  mb_add(g, "Add", form ? "one,e" : "e,one", "a");
  if (form) {
    mb_add(g, "Mul", "half,x", "h");
    mb_add(g, "Mul", "a,h", "y");
  } else {
    mb_add(g, "Mul", "x,a", "m");
    mb_add(g, "Mul", "m,half", "y");
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void gelu_case(int form) {
  static float x[150], y0[150], y1[150];
  for (int i = 0; i < 150; i++) x[i] = (float)i / 15.0f - 5.0f;
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_session_t *ss[2] = {mb_session_opts(gelu_model(form), 14, &plain),
                           mb_session(gelu_model(form), 14)};
  CHECK(ss[0] && ss[1]);
  if (!ss[0] || !ss[1]) return;
  CHECK(node_count(ss[1]) == 1);
  float *ys[2] = {y0, y1};
  for (int k = 0; k < 2; k++) {
    keel_value_t *in = mb_tensor(ss[k], KEEL_FLOAT, 2, (int64_t[]){3, 50}, x);
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(ss[k], (const char *[]){"x"}, &in, 1, out));
    if (out[0]) memcpy(ys[k], keel_value_data(out[0]), sizeof y0);
    keel_value_release(out[0]), keel_value_release(in);
    keel_session_destroy(ss[k]);
  }
  double worst = 0;
  for (int i = 0; i < 150; i++) worst = fmax(worst, fabs(y0[i] - y1[i]) - 1e-6 * fabs(y0[i]));
  CHECK(worst < 1e-6);
}

/* The model as written (gs[0], KEEL_OPT_NO_GRAPH_PASSES) against the
 * passes (gs[1], NCHW: the layout pass off), both [2, M, H, H] out: outputs
 * within `tol` of the largest one, `want` nodes left after the passes. */
static void passes_agree(mb_graph *gs[2], int opset, double tol, int want, const char *label) {
  size_t n = 2 * M * H * H;
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_options nchw = {.size = sizeof nchw, .flags = KEEL_OPT_NO_ONEDNN};
  keel_session_t *s0 = mb_session_opts(gs[0], opset, &plain), *s1 = mb_session_opts(gs[1], opset, &nchw);
  CHECK(s0 && s1);
  if (s0 && s1) {
    float *y0 = calloc(n, sizeof(float)), *y1 = calloc(n, sizeof(float));
    run(s0, false, y0, n);
    run(s1, false, y1, n);
    double worst = 0, big = 1;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(y0[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(y0[i] - y1[i]) / big);
    int got = node_count(s1);
    if (worst > tol || got != want)
      fprintf(stderr, "%s: worst difference %g of the largest output, %d nodes (want %d)\n", label, worst, got,
              want);
    CHECK(worst <= tol);
    CHECK(got == want);
    free(y0), free(y1);
  }
  keel_session_destroy(s0);
  keel_session_destroy(s1);
}

/* A graph with input x [2, C, H, H] and the Conv weights w [M, C, 3, 3]
 * and bias b [M] as initializers. */
static mb_graph *conv_inputs(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, C, H, H});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){M, C, 3, 3}, g_w);
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){M}, g_b);
  return g;
}

/* Conv -> BatchNormalization -> Relu as paddle2onnx (opset 9, every
 * parameter a Constant node) and tf2onnx (initializers) write it: one Conv
 * after the passes (fold-batchnorm, then fuse-activation), outputs within
 * float rounding of the model as written. `conv_bias`: the Conv has a
 * bias of its own; `shared`: the Conv output is also a graph output, which
 * must stop the fold. */
static void bn_case(int opset, bool constant_nodes, bool conv_bias, bool shared) {
  static float sc[M], be[M], mu[M], va[M];
  for (int i = 0; i < M; i++)
    sc[i] = 0.8f + 0.1f * (float)i, be[i] = 0.05f * (float)i - 0.1f, mu[i] = 0.02f * (float)i - 0.03f,
    va[i] = 0.5f + 0.25f * (float)i;
  const char *pn[4] = {"bn_s", "bn_b", "bn_m", "bn_v"};
  const float *pv[4] = {sc, be, mu, va};
  mb_graph *gs[2];
  for (int k = 0; k < 2; k++) {
    mb_graph *g = gs[k] = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, C, H, H});
    mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){M, C, 3, 3}, g_w);
    if (conv_bias) mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){M}, g_b);
    for (int p = 0; p < 4; p++) {
      if (constant_nodes) mb_attr_t(mb_add(g, "Constant", "", pn[p]), "value", KEEL_FLOAT, 1, (int64_t[]){M}, pv[p]);
      else mb_init(g, pn[p], KEEL_FLOAT, 1, (int64_t[]){M}, pv[p]);
    }
    mb_node *c = mb_add(g, "Conv", conv_bias ? "x,w,b" : "x,w", "c");
    mb_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 1, 1});
    mb_node *bn = mb_add(g, "BatchNormalization", "c,bn_s,bn_b,bn_m,bn_v", "n");
    mb_attr_f(bn, "epsilon", 1e-3f);
    mb_add(g, "Relu", "n", "y");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    if (shared) mb_output(g, "c", KEEL_FLOAT, -1, NULL);
  }
  char label[128];
  snprintf(label, sizeof label, "BatchNormalization opset %d (%s%s%s)", opset,
           constant_nodes ? "Constant nodes" : "initializers", conv_bias ? ", conv bias" : "",
           shared ? ", shared" : "");
  passes_agree(gs, opset, 1e-5, shared ? 3 : 1, label);
}

/* HardSwish and HardSigmoid spelled out after a Conv, in the exporters'
 * forms (canon-activation, then fuse-activation): `form` 0 paddle2onnx
 * (opset 9, Constant-node scalars, Clip attributes, Mul by x then Div by
 * 6), 1 PyTorch opset 11 (Add(3, x), Clip inputs, Div then Mul), 2 a Mul
 * by 1/6 and Mul(., x), 3 HardSigmoid (no product), 4 the Clip output
 * also a graph output (left as written). */
static void hswish_case(int form) {
  int opset = form == 0 ? 9 : 11;
  float three = 3, zero = 0, six = 6, sixth = 1.0f / 6.0f;
  mb_graph *gs[2];
  for (int k = 0; k < 2; k++) {
    mb_graph *g = gs[k] = conv_inputs();
    const char *names[4] = {"three", "zero", "six", "sixth"};
    const float *vals[4] = {&three, &zero, &six, &sixth};
    for (int i = 0; i < 4; i++) {
      if (form == 0) mb_attr_t(mb_add(g, "Constant", "", names[i]), "value", KEEL_FLOAT, 0, NULL, vals[i]);
      else mb_init(g, names[i], KEEL_FLOAT, 0, NULL, vals[i]);
    }
    mb_attr_ints(mb_add(g, "Conv", "x,w,b", "c"), "pads", 4, (int64_t[]){1, 1, 1, 1});
    mb_add(g, "Add", form == 1 ? "three,c" : "c,three", "a");
    mb_node *cl = mb_add(g, "Clip", form == 0 ? "a" : "a,zero,six", "r");
    if (form == 0) mb_attr_f(cl, "min", 0), mb_attr_f(cl, "max", 6);
    if (form == 0 || form == 4) {
      mb_add(g, "Mul", "c,r", "m");
      mb_add(g, "Div", "m,six", "y");
    } else if (form == 1) {
      mb_add(g, "Div", "r,six", "d");
      mb_add(g, "Mul", "c,d", "y");
    } else if (form == 2) {
      mb_add(g, "Mul", "sixth,r", "d");
      mb_add(g, "Mul", "d,c", "y");
    } else {
      mb_add(g, "Div", "r,six", "y");
    }
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    if (form == 4) mb_output(g, "r", KEEL_FLOAT, -1, NULL);
  }
  char label[64];
  snprintf(label, sizeof label, "hardswish form %d", form);
  passes_agree(gs, opset, 1e-6, form == 4 ? 5 : 1, label);
}

/* A Pad before a Conv, as tf2onnx (opset 13: pads an initializer, all of
 * a 'SAME' pad's odd part after) and opset-9 exporters (pads and value as
 * attributes, added to the Conv's own pads) write it: one Conv after the
 * passes (fold-pad), the model's outputs within float rounding. Left as
 * written: a non-zero pad value (form 2), reflect mode (3), the padded
 * value also a graph output (4). Output [2, M, H, H] in every form. */
static void pad_case(int form) {
  int opset = form == 1 ? 9 : 13;
  int64_t pads13[8] = {0, 0, 1, 1, 0, 0, 1, 1}, pads9[8] = {0, 0, 1, 0, 0, 0, 1, 1};
  float one = 1.0f;
  mb_graph *gs[2];
  for (int k = 0; k < 2; k++) {
    mb_graph *g = gs[k] = conv_inputs();
    mb_node *p;
    if (form == 1) {
      p = mb_add(g, "Pad", "x", "xp");
      mb_attr_ints(p, "pads", 8, pads9);
      mb_attr_f(p, "value", 0.0f);
    } else {
      mb_init(g, "pads", KEEL_INT64, 1, (int64_t[]){8}, pads13);
      if (form == 2) mb_init(g, "one", KEEL_FLOAT, 0, NULL, &one);
      p = mb_add(g, "Pad", form == 2 ? "x,pads,one" : "x,pads", "xp");
      if (form == 3) mb_attr_s(p, "mode", "reflect");
    }
    mb_node *c = mb_add(g, "Conv", "xp,w,b", "y");
    if (form == 1) mb_attr_ints(c, "pads", 4, (int64_t[]){0, 1, 0, 0});
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    if (form == 4) mb_output(g, "xp", KEEL_FLOAT, -1, NULL);
  }
  char label[64];
  snprintf(label, sizeof label, "Pad before Conv, form %d", form);
  passes_agree(gs, opset, 1e-6, form >= 2 ? 2 : 1, label);
}

/* com.microsoft FusedConv as ONNX Runtime's optimizer saves it: rewritten
 * by canon-fusedconv into Conv [+ Add] [+ activation], which the later
 * passes fuse again on keel's own convolutions. Against the model as
 * written (the FusedConv kernel, passes off): within 1e-5; no FusedConv
 * left; `want` nodes after the passes (NCHW). */
static void fusedconv_case(const char *act, int nparams, const float *params, bool z, int want) {
  size_t n = 2 * M * H * H;
  static float zv[2 * M * H * H];
  for (size_t i = 0; i < n; i++) zv[i] = 0.01f * (float)(i % 17) - 0.08f;
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = conv_inputs();
    if (z) mb_init(g, "z", KEEL_FLOAT, 4, (int64_t[]){2, M, H, H}, zv);
    mb_node *f = mb_add(g, "FusedConv", z ? "x,w,b,z" : "x,w,b", "y");
    mb_domain(f, "com.microsoft");
    mb_name(f, "fc");
    mb_attr_ints(f, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (act) mb_attr_s(f, "activation", act);
    if (nparams) mb_attr_floats(f, "activation_params", nparams, params);
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    size_t len;
    uint8_t *bytes = mb_model_domains(g, 13, "com.microsoft", 1, &len);
    keel_options o = {.size = sizeof o, .flags = k ? KEEL_OPT_NO_ONEDNN : KEEL_OPT_NO_GRAPH_PASSES};
    CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, &o, &s[k]));
    free(bytes);
  }
  if (s[0] && s[1]) {
    float *y0 = calloc(n, sizeof(float)), *y1 = calloc(n, sizeof(float));
    run(s[0], false, y0, n);
    run(s[1], false, y1, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(y0[i] - y1[i]));
    char *d = NULL;
    CHECK_OK(keel_session_describe(s[1], 0, &d));
    bool left = d && strstr(d, "FusedConv") != NULL;
    int got = node_count(s[1]);
    if (worst > 1e-5 || left || got != want)
      fprintf(stderr, "FusedConv %s%s: worst %g, FusedConv left %d, %d nodes (want %d)\n", act ? act : "none",
              z ? " + Z" : "", worst, left, got, want);
    CHECK(worst <= 1e-5 && !left && got == want);
    keel_free(d);
    free(y0), free(y1);
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* 1-D convolutions (lift-conv1d, then the layout pass): Conv1d -> Relu ->
 * Conv1d(stride 2) -> MaxPool1d, in PyTorch's opset-13 form (Unsqueeze
 * and Squeeze made with axes as inputs) and opset 11's (axes attributes).
 * Where oneDNN runs, every Conv is channels-last at rank 4 (no "Conv"
 * left, two NhwcConv) with one Unsqueeze in and one Squeeze out; without
 * it (KEEL_OPT_NO_ONEDNN) the graph keeps its 1-D Convs. Outputs within
 * float rounding of the model as written. `tail`: the Relu's output is
 * also a graph output (a second Squeeze). */
static void conv1d_case(int opset, bool tail, bool dnnl) {
  enum { L = 23, LO = 5 }; /* 23 -> 23 -> 11 -> 5 */
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, C, L});
    mb_init(g, "w", KEEL_FLOAT, 3, (int64_t[]){M, C, 3}, g_w);
    mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){M}, g_b);
    mb_init(g, "w2", KEEL_FLOAT, 3, (int64_t[]){M, M, 3}, g_w + M * C * 3);
    mb_attr_ints(mb_add(g, "Conv", "x,w,b", "c"), "pads", 2, (int64_t[]){1, 1});
    mb_add(g, "Relu", "c", "r");
    mb_node *c2 = mb_add(g, "Conv", "r,w2", "c2");
    mb_attr_ints(c2, "strides", 1, (int64_t[]){2});
    mb_attr_ints(c2, "kernel_shape", 1, (int64_t[]){3});
    mb_node *p = mb_add(g, "MaxPool", "c2", "y");
    mb_attr_ints(p, "kernel_shape", 1, (int64_t[]){2});
    mb_attr_ints(p, "strides", 1, (int64_t[]){2});
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    if (tail) mb_output(g, "r", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o,
                      .flags = k ? (dnnl ? 0 : KEEL_OPT_NO_ONEDNN) : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, opset, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    char *d = NULL;
    CHECK_OK(keel_session_describe(s[1], 1, &d));
    bool lifted = d && strstr(d, "\"NhwcConv\": 2") && !strstr(d, "\"Conv\"");
    bool onednn = d && strstr(d, "onednn");
    bool squeezes = d && strstr(d, tail ? "\"Squeeze\": 2" : "\"Squeeze\": 1");
    if (lifted != onednn || (lifted && !squeezes))
      fprintf(stderr, "conv1d opset %d%s: %s\n", opset, tail ? ", tail" : "", d ? d : "?");
    CHECK(lifted == onednn);
    CHECK(!lifted || squeezes);
    CHECK(dnnl || !lifted);
    keel_free(d);
    float y[2][2 * M * LO];
    for (int k = 0; k < 2; k++) {
      keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, 3, (int64_t[]){2, C, L}, g_x);
      keel_value_t *out[2] = {0};
      CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, out));
      CHECK(out[0] && keel_value_numel(out[0]) == 2 * M * LO);
      if (out[0]) memcpy(y[k], keel_value_data(out[0]), sizeof y[k]);
      for (int i = 0; i < 2; i++) keel_value_release(out[i]);
      keel_value_release(in);
    }
    double worst = 0;
    for (int i = 0; i < 2 * M * LO; i++) worst = fmax(worst, fabs(y[0][i] - y[1][i]));
    if (worst > 1e-5) fprintf(stderr, "conv1d opset %d: differs by %g\n", opset, worst);
    CHECK(worst <= 1e-5);
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* A Reshape whose shape is computed from Shape (PyTorch's view with a
 * dynamic batch and length): Shape -> Gather -> Unsqueeze -> Concat with
 * [2, 4] -> Reshape. canon-reshape gives it the constant [0, 0, 2, 4] and
 * remove-dead takes the chain: one node left. x is declared [2, 5, 8] and
 * run as [3, 7, 8] too: the constant holds for any input shape (the
 * general inference), the values are x's. `other`: the leading dim comes
 * from a second input z instead and the last entry is -1, two entries
 * Reshape would have to infer: left as written (5 nodes). Unsqueeze's
 * axes an attribute before opset 13, an input from 13. */
static void reshape_case(int opset, bool other) {
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 5, 8});
    if (other) mb_input(g, "z", KEEL_FLOAT, 1, (int64_t[]){2});
    int64_t zero = 0, one = 1, tail[2] = {2, 4}, minus[1] = {-1};
    mb_init(g, "i0", KEEL_INT64, 0, NULL, &zero);
    mb_init(g, "i1", KEEL_INT64, 0, NULL, &one);
    mb_init(g, "tail", KEEL_INT64, 1, (int64_t[]){other ? 1 : 2}, other ? minus : tail);
    mb_init(g, "ax", KEEL_INT64, 1, (int64_t[]){1}, &zero);
    mb_add(g, "Shape", other ? "z" : "x", "sx");
    mb_add(g, "Gather", "sx,i0", "b");
    const char *un = opset >= 13 ? "b,ax" : "b";
    mb_node *u = mb_add(g, "Unsqueeze", un, "b1");
    if (opset < 13) mb_attr_ints(u, "axes", 1, &zero);
    if (!other) {
      mb_add(g, "Gather", "sx,i1", "t");
      u = mb_add(g, "Unsqueeze", opset >= 13 ? "t,ax" : "t", "t1");
      if (opset < 13) mb_attr_ints(u, "axes", 1, &zero);
    }
    mb_attr_i(mb_add(g, "Concat", other ? "b1,tail" : "b1,t1,tail", "shp"), "axis", 0);
    mb_add(g, "Reshape", "x,shp", "y");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o, .flags = k ? 0 : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, opset, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    int want = other ? 5 : 1;
    if (node_count(s[1]) != want)
      fprintf(stderr, "reshape opset %d%s: %d nodes (want %d)\n", opset, other ? " other" : "",
              node_count(s[1]), want);
    CHECK(node_count(s[1]) == want);
    static const int64_t shapes[2][3] = {{2, 5, 8}, {3, 7, 8}};
    for (int r = 0; r < 2; r++) {
      int64_t n = shapes[r][0] * shapes[r][1] * 8;
      float *xv = calloc((size_t)n, sizeof(float));
      for (int64_t i = 0; i < n; i++) xv[i] = (float)i * 0.5f - 3.0f;
      keel_value_t *y[2] = {0};
      for (int k = 0; k < 2; k++) {
        keel_value_t *in[2] = {mb_tensor(s[k], KEEL_FLOAT, 3, shapes[r], xv), NULL};
        if (other) in[1] = mb_tensor(s[k], KEEL_FLOAT, 1, (int64_t[]){shapes[r][0]}, xv);
        CHECK_OK(keel_run(s[k], (const char *[]){"x", "z"}, in, other ? 2 : 1, &y[k]));
        keel_value_release(in[0]), keel_value_release(in[1]);
      }
      if (y[0] && y[1]) {
        const int64_t *d0 = keel_value_shape(y[0]), *d1 = keel_value_shape(y[1]);
        int r0 = keel_value_rank(y[0]), r1 = keel_value_rank(y[1]);
        CHECK(r0 == r1 && r0 == (other ? 2 : 4) && !memcmp(d0, d1, sizeof(int64_t) * (size_t)r0));
        CHECK(d1[0] == shapes[r][0]);
        CHECK(keel_value_numel(y[1]) == n && !memcmp(keel_value_data(y[1]), xv, (size_t)n * sizeof(float)));
      }
      keel_value_release(y[0]), keel_value_release(y[1]);
      free(xv);
    }
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* Values symbolic inference pins (canon-reshape's first step):
 * h = MatMul(x, W) has a last dim of 8 whatever x's shape, so
 * Div(Gather(Shape(h), 2), 2) -> Unsqueeze, the split point torch.chunk
 * exports for two Slices, becomes the constant [4] and its chain leaves
 * the graph (MatMul, 2 Slices, Add: 4 nodes). Gather(Shape(h), 0), x's
 * leading dim, is a graph output too: it depends on the input and keeps
 * its nodes (6 nodes in all), giving each run's own batch. Run at two
 * input shapes against the graph without passes. */
static void shape_value_case(void) {
  keel_session_t *s[2] = {0};
  float w[40];
  for (int i = 0; i < 40; i++) w[i] = (float)(i % 7) * 0.25f - 0.5f;
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 5});
    int64_t zero = 0, two = 2, big = INT64_MAX;
    mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){5, 8}, w);
    mb_init(g, "i0", KEEL_INT64, 0, NULL, &zero);
    mb_init(g, "i2", KEEL_INT64, 0, NULL, &two);
    mb_init(g, "ax", KEEL_INT64, 1, (int64_t[]){1}, &zero);
    mb_init(g, "z", KEEL_INT64, 1, (int64_t[]){1}, &zero);
    mb_init(g, "end", KEEL_INT64, 1, (int64_t[]){1}, &big);
    mb_init(g, "axes", KEEL_INT64, 1, (int64_t[]){1}, &two);
    mb_add(g, "MatMul", "x,w", "h");
    mb_add(g, "Shape", "h", "sh");
    mb_add(g, "Gather", "sh,i2", "c");
    mb_add(g, "Div", "c,i2", "half");
    mb_add(g, "Unsqueeze", "half,ax", "cut");
    mb_add(g, "Slice", "h,z,cut,axes", "lo");
    mb_add(g, "Slice", "h,cut,end,axes", "hi");
    mb_add(g, "Add", "lo,hi", "y");
    mb_add(g, "Gather", "sh,i0", "n");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    mb_output(g, "n", KEEL_INT64, -1, NULL);
    keel_options o = {.size = sizeof o, .flags = k ? 0 : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, 13, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    if (node_count(s[1]) != 6) fprintf(stderr, "shape values: %d nodes (want 6)\n", node_count(s[1]));
    CHECK(node_count(s[1]) == 6);
    static const int64_t shapes[2][3] = {{2, 3, 5}, {4, 1, 5}};
    for (int r = 0; r < 2; r++) {
      int64_t n = shapes[r][0] * shapes[r][1] * 5;
      float xv[40];
      for (int64_t i = 0; i < n; i++) xv[i] = (float)i * 0.25f - 1.0f;
      keel_value_t *y[2][2] = {{0}};
      for (int k = 0; k < 2; k++) {
        keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, 3, shapes[r], xv);
        CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, y[k]));
        keel_value_release(in);
      }
      if (y[0][0] && y[1][0] && y[1][1]) {
        CHECK(keel_value_numel(y[1][0]) == keel_value_numel(y[0][0]) &&
              keel_value_numel(y[1][0]) == shapes[r][0] * shapes[r][1] * 4);
        CHECK(!memcmp(keel_value_data(y[0][0]), keel_value_data(y[1][0]),
                      (size_t)keel_value_numel(y[1][0]) * sizeof(float)));
        CHECK(*(const int64_t *)keel_value_data(y[1][1]) == shapes[r][0]);
      }
      for (int k = 0; k < 2; k++) keel_value_release(y[k][0]), keel_value_release(y[k][1]);
    }
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* Repeated work (cse): two blocks each build the same causal mask from
 * their own input, Shape -> Gather -> Unsqueeze -> Concat ->
 * ConstantOfShape -> Trilu, and add it; the second block's input is
 * Sigmoid(x), of x's shape (the Shapes merge on the inferred shapes).
 * After the passes the mask is built once (6 nodes less), the output as
 * written, for two sizes. `random`: the blocks also add RandomNormalLike
 * of their input, which is never merged (scale 0: the output stays
 * comparable). `sub`: an If branch also reads the second mask's Concat:
 * the Concat and what follows it stay (3 merged). */
static void cse_case(bool random, bool sub) {
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 5, 5});
    int64_t one = 1, zero = 0;
    float big = -1e4f;
    mb_init(g, "i1", KEEL_INT64, 0, NULL, &one);
    mb_init(g, "ax", KEEL_INT64, 1, (int64_t[]){1}, &zero);
    mb_add(g, "Sigmoid", "x", "x1");
    for (int b = 0; b < 2; b++) {
      char ins[96], out[32], nm[8][32];
      const char *x = b ? "x1" : "x";
      for (int q = 0; q < 8; q++) snprintf(nm[q], sizeof nm[q], "b%d_%d", b, q);
      mb_add(g, "Shape", x, nm[0]);
      snprintf(ins, sizeof ins, "%s,i1", nm[0]);
      mb_add(g, "Gather", ins, nm[1]);
      snprintf(ins, sizeof ins, "%s,ax", nm[1]);
      mb_add(g, "Unsqueeze", ins, nm[2]);
      snprintf(ins, sizeof ins, "%s,%s", nm[2], nm[2]);
      mb_attr_i(mb_add(g, "Concat", ins, nm[3]), "axis", 0);
      mb_attr_t(mb_add(g, "ConstantOfShape", nm[3], nm[4]), "value", KEEL_FLOAT, 1,
                (int64_t[]){1}, &big);
      snprintf(ins, sizeof ins, "%s,i1", nm[4]);
      mb_attr_i(mb_add(g, "Trilu", ins, nm[5]), "upper", 1);
      snprintf(ins, sizeof ins, "%s,%s", x, nm[5]);
      snprintf(out, sizeof out, "y%d", b);
      if (random) {
        mb_add(g, "Add", ins, nm[6]);
        mb_attr_f(mb_add(g, "RandomNormalLike", x, nm[7]), "scale", 0.0f);
        snprintf(ins, sizeof ins, "%s,%s", nm[6], nm[7]);
      }
      mb_add(g, "Add", ins, out);
    }
    if (sub) {
      bool yes = true;
      mb_init(g, "c", KEEL_BOOL, 0, NULL, &yes);
      mb_graph *then = mb_graph_new("then"), *els = mb_graph_new("else");
      mb_add(then, "Identity", "b1_3", "t");
      mb_output(then, "t", KEEL_INT64, -1, NULL);
      mb_add(els, "Identity", "b1_3", "e");
      mb_output(els, "e", KEEL_INT64, -1, NULL);
      mb_node *f = mb_add(g, "If", "c", "shp");
      mb_attr_g(f, "then_branch", then);
      mb_attr_g(f, "else_branch", els);
      mb_output(g, "shp", KEEL_INT64, -1, NULL);
    }
    mb_add(g, "Add", "y0,y1", "y");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o, .flags = k ? 0 : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, 14, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    int all = 2 * (random ? 9 : 7) + 2 + (sub ? 3 : 0); /* the If and its two Identities */
    /* merged: Shape, Gather, Unsqueeze, Concat, ConstantOfShape, Trilu;
     * with the If reading the second Concat, only the first three */
    int want = all - (sub ? 3 : 6);
    char *d = NULL;
    CHECK_OK(keel_session_describe(s[1], 1, &d));
    const char *p = d ? strstr(d, "\"merged_nodes\": ") : NULL;
    int merged = p ? atoi(p + 16) : -1;
    keel_free(d);
    if (node_count(s[0]) != all || merged != all - want)
      fprintf(stderr, "cse%s%s: %d nodes as written (want %d), %d merged (want %d)\n",
              random ? " random" : "", sub ? " sub" : "", node_count(s[0]), all, merged, all - want);
    CHECK(node_count(s[0]) == all);
    CHECK(merged == all - want);
    for (int r = 0; r < 2; r++) {
      int64_t T = r ? 7 : 5, n = 2 * T * T;
      float xv[2 * 7 * 7];
      for (int64_t i = 0; i < n; i++) xv[i] = (float)(i % 11) * 0.25f;
      keel_value_t *y[2][2] = {{0}};
      for (int k = 0; k < 2; k++) {
        keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, 3, (int64_t[]){2, T, T}, xv);
        CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, y[k]));
        keel_value_release(in);
      }
      const keel_value_t *a = y[0][sub ? 1 : 0], *b = y[1][sub ? 1 : 0];
      CHECK(a && b && keel_value_numel(a) == n && keel_value_numel(b) == n &&
            !memcmp(keel_value_data(a), keel_value_data(b), (size_t)n * sizeof(float)));
      for (int k = 0; k < 2; k++) keel_value_release(y[k][0]), keel_value_release(y[k][1]);
    }
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* A pool of a channel Concat (sink-concat): x [2, C, H, H] and Relu(x)
 * concatenated on the channels, then MaxPool 3x3/2 (SqueezeNet's fire
 * modules) or AveragePool 2x2/2 with pads: the pooled parts concatenated
 * instead, within nothing of the model as written (the same taps in the
 * same order). Kept when the Concat is also a graph output (`shared`) or
 * its axis is not 1 (`axis3`). The channels-last layout is off
 * (KEEL_OPT_NO_ONEDNN keeps the ops as they are): 3 nodes as written, 4
 * after (Relu, two pools, Concat). */
static void sink_concat_case(bool avg, bool shared, bool axis3) {
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, C, H, H});
    mb_add(g, "Relu", "x", "r");
    mb_attr_i(mb_add(g, "Concat", "x,r", "cat"), "axis", axis3 ? 3 : 1);
    mb_node *p = mb_add(g, avg ? "AveragePool" : "MaxPool", "cat", "y");
    mb_attr_ints(p, "kernel_shape", 2, avg ? (int64_t[]){2, 2} : (int64_t[]){3, 3});
    mb_attr_ints(p, "strides", 2, (int64_t[]){2, 2});
    if (avg) mb_attr_ints(p, "pads", 4, (int64_t[]){1, 0, 1, 1});
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    if (shared) mb_output(g, "cat", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o, .flags = k ? KEEL_OPT_NO_ONEDNN : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, 13, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    bool sunk = !shared && !axis3;
    int want = sunk ? 4 : 3;
    if (node_count(s[1]) != want)
      fprintf(stderr, "sink-concat%s%s%s: %d nodes (want %d)\n", avg ? " avg" : "",
              shared ? " shared" : "", axis3 ? " axis3" : "", node_count(s[1]), want);
    CHECK(node_count(s[1]) == want);
    keel_value_t *y[2][2] = {{0}};
    for (int k = 0; k < 2; k++) {
      keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, 4, (int64_t[]){2, C, H, H}, g_x);
      CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, y[k]));
      keel_value_release(in);
    }
    int64_t n = y[0][0] ? keel_value_numel(y[0][0]) : -1;
    CHECK(n > 0 && y[1][0] && keel_value_numel(y[1][0]) == n &&
          !memcmp(keel_value_data(y[0][0]), keel_value_data(y[1][0]), (size_t)n * sizeof(float)));
    for (int k = 0; k < 2; k++) keel_value_release(y[k][0]), keel_value_release(y[k][1]);
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* A Conv of a channel Concat (split-concat-conv): parts x, Sigmoid(x)
 * and Relu(x) of x [2, C, H, H] concatenated (2 or 3 parts) and read by
 *   form 0: a 1x1 Conv with bias, then Relu (a SqueezeNet fire module),
 *   form 1: a 3x3 Conv of stride 2 with pads, no bias,
 *   form 2: both (two readers: both split),
 * run as the sum of the parts' convs: no Concat left, within 1e-5 of the
 * largest output of the model as written. Kept (a Concat left) when the
 * Concat is also read by a Relu (form 3), the Conv has 2 groups (form 4)
 * or the Concat is a graph output (form 5). Only where oneDNN runs the
 * convs (the pass's condition): elsewhere the Concat stays in every form. */
static void catconv_case(int form, int parts) {
  enum { CT = 3 * C, K = 3 };
  static float w1[M * CT], w3[M * CT * K * K], wg[M * CT * K * K];
  for (int i = 0; i < M * CT; i++) w1[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
  for (int i = 0; i < M * CT * K * K; i++) w3[i] = (float)((i * 29) % 23) / 23.0f - 0.5f;
  for (int i = 0; i < M * CT * K * K; i++) wg[i] = w3[i];
  int ct = parts * C;
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, C, H, H});
    mb_init(g, "w1", KEEL_FLOAT, 4, (int64_t[]){M, ct, 1, 1}, w1);
    mb_init(g, "w3", KEEL_FLOAT, 4, (int64_t[]){M, ct, K, K}, w3);
    mb_init(g, "wg", KEEL_FLOAT, 4, (int64_t[]){M, ct / 2, K, K}, wg); /* form 4: 2 parts */
    mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){M}, g_b);
    mb_add(g, "Sigmoid", "x", "sg");
    mb_add(g, "Relu", "x", "rl");
    mb_attr_i(mb_add(g, "Concat", parts == 3 ? "x,sg,rl" : "x,sg", "cat"), "axis", 1);
    const char *outs[3] = {"y", NULL, NULL};
    if (form == 0 || form == 2 || form == 3 || form == 5) {
      mb_add(g, "Conv", "cat,w1,b", "c1");
      mb_add(g, "Relu", "c1", "y");
    }
    if (form == 1 || form == 2) {
      mb_node *c = mb_add(g, "Conv", "cat,w3", form == 1 ? "y" : "y2");
      mb_attr_ints(c, "strides", 2, (int64_t[]){2, 2});
      mb_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 0, 1});
      if (form == 2) outs[1] = "y2";
    }
    if (form == 3) mb_add(g, "Relu", "cat", "y3"), outs[1] = "y3";
    if (form == 4) { /* 2 groups: W of half the channels */
      mb_node *c = mb_add(g, "Conv", "cat,wg", "y");
      mb_attr_i(c, "group", 2);
      mb_attr_ints(c, "pads", 4, (int64_t[]){1, 1, 1, 1});
    }
    if (form == 5) outs[1] = "cat";
    for (int o = 0; o < 3 && outs[o]; o++) mb_output(g, outs[o], KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o, .flags = k ? 0 : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, 13, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    char *d = NULL;
    CHECK_OK(keel_session_describe(s[1], 1, &d));
    bool onednn = d && strstr(d, "onednn");
    bool split = onednn && form <= 2;
    bool has_cat = d && strstr(d, "\"Concat\"");
    if (has_cat == split) fprintf(stderr, "split-concat-conv form %d, %d parts: %s\n", form, parts, d ? d : "?");
    CHECK(has_cat != split);
    keel_free(d);
    keel_value_t *y[2][3] = {{0}};
    for (int k = 0; k < 2; k++) {
      keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, 4, (int64_t[]){2, C, H, H}, g_x);
      CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, y[k]));
      keel_value_release(in);
    }
    for (int o = 0; o < 3; o++) {
      if (!y[0][o]) continue;
      int64_t n = keel_value_numel(y[0][o]);
      CHECK(y[1][o] && keel_value_numel(y[1][o]) == n);
      if (!y[1][o] || keel_value_numel(y[1][o]) != n) continue;
      const float *a = keel_value_data(y[0][o]), *b = keel_value_data(y[1][o]);
      double big = 1, worst = 0;
      for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(a[i]));
      for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / big);
      if (worst > 1e-5) fprintf(stderr, "split-concat-conv form %d output %d: %g\n", form, o, worst);
      CHECK(worst <= 1e-5);
    }
    for (int k = 0; k < 2; k++)
      for (int o = 0; o < 3; o++) keel_value_release(y[k][o]);
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

/* fold-identity's Cast to the type its input already has: a float Cast to
 * float between two Relus and an int64 length Cast to int64 before a
 * Range go (2 of 7 nodes); a Cast to another type stays, and so does a
 * same-type Cast whose output is a graph output (`shared`). Outputs the
 * same bits as the model as written. */
static void noop_cast_case(bool shared) {
  keel_session_t *s[2] = {0};
  for (int k = 0; k < 2; k++) {
    mb_graph *g = mb_graph_new("main");
    int64_t one = 1, zero = 0;
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){-1, C, -1, -1}); /* Shape not folded */
    mb_init(g, "one", KEEL_INT64, 0, NULL, &one);
    mb_init(g, "zero", KEEL_INT64, 0, NULL, &zero);
    mb_add(g, "Relu", "x", "r");
    mb_attr_i(mb_add(g, "Cast", "r", "rc"), "to", KEEL_FLOAT);
    mb_add(g, "Relu", "rc", "y");
    mb_add(g, "Shape", "x", "xs");
    mb_attr_i(mb_add(g, "Gather", "xs,one", "len"), "axis", 0);
    mb_attr_i(mb_add(g, "Cast", "len", "len64"), "to", KEEL_INT64);
    mb_add(g, "Range", "zero,len64,one", "pos");
    mb_attr_i(mb_add(g, "Cast", "pos", "posf"), "to", KEEL_FLOAT); /* another type: kept */
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    mb_output(g, "posf", KEEL_FLOAT, -1, NULL);
    if (shared) mb_output(g, "rc", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o, .flags = k ? KEEL_OPT_NO_ONEDNN : KEEL_OPT_NO_GRAPH_PASSES};
    s[k] = mb_session_opts(g, 13, &o);
  }
  CHECK(s[0] && s[1]);
  if (s[0] && s[1]) {
    /* the op counts of the plan: "Cast 1" (the other type's) or "Cast 2" */
    char *d = NULL;
    CHECK_OK(keel_session_describe(s[1], 0, &d));
    const char *want = shared ? "Cast 2," : "Cast 1,";
    if (!d || !strstr(d, want)) fprintf(stderr, "no-op Cast%s: want %s in\n%s\n", shared ? " shared" : "", want, d ? d : "");
    CHECK(d && strstr(d, want));
    keel_free(d);
    keel_value_t *y[2][3] = {{0}};
    int nout = shared ? 3 : 2;
    for (int k = 0; k < 2; k++) {
      keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, 4, (int64_t[]){2, C, H, H}, g_x);
      CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, y[k]));
      keel_value_release(in);
    }
    for (int o = 0; o < nout; o++) {
      int64_t n = y[0][o] ? keel_value_numel(y[0][o]) : -1;
      CHECK(n > 0 && y[1][o] && keel_value_numel(y[1][o]) == n &&
            !memcmp(keel_value_data(y[0][o]), keel_value_data(y[1][o]), (size_t)n * sizeof(float)));
    }
    for (int k = 0; k < 2; k++)
      for (int o = 0; o < 3; o++) keel_value_release(y[k][o]);
  }
  keel_session_destroy(s[0]);
  keel_session_destroy(s[1]);
}

int main(void) {
  fusedconv_case("Relu", 0, NULL, false, 1);
  fusedconv_case("LeakyRelu", 1, (const float[]){0.1f}, false, 1);
  fusedconv_case("Clip", 2, (const float[]){-0.2f, 0.3f}, false, 1);
  fusedconv_case("HardSigmoid", 2, (const float[]){0.25f, 0.4f}, false, 1);
  fusedconv_case(NULL, 0, NULL, false, 1);
  fusedconv_case("Relu", 0, NULL, true, 3); /* NCHW: Conv, Add, Relu (the layout pass folds Z) */
  for (int form = 0; form <= 4; form++) pad_case(form);
  fill();
  for (int form = 0; form <= 4; form++) hswish_case(form);
  bn_case(9, true, false, false);  /* paddle2onnx: Constant nodes, no conv bias */
  bn_case(11, true, true, false);
  bn_case(13, false, true, false); /* initializers */
  bn_case(15, false, false, false);
  bn_case(13, false, true, true);  /* the conv output is read twice: not folded */
  gelu_case(0);
  gelu_case(1);
  gelu_case(2);
  gelu_case(3);
  ln_case(13, false);
  ln_case(18, false);
  ln_case(13, true);
  for (g_ln_form = 1; g_ln_form <= 2; g_ln_form++) {
    ln_case(13, false);
    ln_case(18, false);
    ln_case(13, true);
  }
  g_ln_form = 0;
  fill();
  const char *acts[] = {"Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Clip"};
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) one(acts[i], 14, false, false);
  one("SiLU", 14, false, false);  /* x * Sigmoid(x): two nodes into the Conv */
  one("HSMul", 13, false, false); /* x * HardSigmoid(x) */
  one("SiLU", 14, true, false);   /* conv output also a graph output: not fused */
  one("Clip", 6, false, false);   /* Clip-6: bounds as attributes */
  one("Relu", 14, true, false);   /* conv output also a graph output: not fused */
  one("Clip", 14, false, true);   /* a bound computed at run time: not fused */
  conv1d_case(13, false, true);
  conv1d_case(11, false, true);
  conv1d_case(13, true, true);
  conv1d_case(13, false, false);
  reshape_case(13, false);
  reshape_case(11, false);
  reshape_case(13, true);
  shape_value_case();
  cse_case(false, false);
  cse_case(true, false);
  cse_case(false, true);
  noop_cast_case(false);
  noop_cast_case(true);
  sink_concat_case(false, false, false);
  sink_concat_case(true, false, false);
  sink_concat_case(false, true, false);
  sink_concat_case(false, false, true);
  for (int parts = 2; parts <= 3; parts++)
    for (int form = 0; form <= 2; form++) catconv_case(form, parts);
  catconv_case(3, 3);
  catconv_case(4, 2);
  catconv_case(5, 3);
  return check_report();
}
