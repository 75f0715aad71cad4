/* test_passes.c: the graph passes (src/ir/pass*.c). Each fused pattern is
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
  if (!strcmp(act, "Clip") && opset >= 11) {
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
  keel_session_t *s1 = mb_session(model(act, opset, twice, dyn), opset);
  CHECK(s0 && s1);
  if (s0 && s1) {
    run(s0, dyn, y0, n);
    run(s1, dyn, y1, n);
    bool same = memcmp(y0, y1, n * sizeof(float)) == 0;
    if (!same) fprintf(stderr, "%s opset %d: fused output differs\n", act, opset);
    CHECK(same);
    int want = twice || dyn ? 2 : 1;
    if (node_count(s1) != want) fprintf(stderr, "%s: %d nodes\n", act, node_count(s1));
    CHECK(node_count(s1) == want);
    CHECK(node_count(s0) == 2);
  }
  keel_session_destroy(s0);
  keel_session_destroy(s1);
  free(y0), free(y1);
}

int main(void) {
  fill();
  const char *acts[] = {"Relu", "LeakyRelu", "HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Clip"};
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) one(acts[i], 14, false, false);
  one("Clip", 6, false, false);   /* Clip-6: bounds as attributes */
  one("Relu", 14, true, false);   /* conv output also a graph output: not fused */
  one("Clip", 14, false, true);   /* a bound computed at run time: not fused */
  return check_report();
}
