/* test_fold.c: fold-constants and remove-dead (src/passes/pass_fold.c) on
 * the constant chains exporters write. Each model runs with the passes on
 * and with KEEL_OPT_NO_GRAPH_PASSES (every node as written): the outputs
 * must agree, and keel info's figures (folded, over the cap, dead) and node
 * count must be what the case says:
 *   - paddle2onnx (opset 9): float16 weights as Constant nodes, Cast to
 *     float before the Conv; the Conv's BatchNormalization then folds too;
 *   - tf2onnx: an HWIO weight initializer behind a Transpose, then Conv and
 *     BatchNormalization (the Transpose hid the weight from fold-batchnorm);
 *   - PyTorch TorchScript (opset 11 and 13): a Reshape's shape as
 *     Concat(Unsqueeze(Constant), Constant), and the attention scale as
 *     Div(x, Sqrt(Constant));
 *   - the cap: ConstantOfShape of a constant [512, 1024] (2 MiB from 16
 *     bytes) stays a node, counted over the cap;
 *   - a Reshape of a constant to a wrong shape: left to run, and the run
 *     fails naming the node, as without the pass;
 *   - a constant chain inside an If branch (reading an outer constant);
 *   - dead nodes (a chain nobody reads) removed, a dead RandomNormal kept.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

/* keel info's JSON figure `key`, or -1. */
static long long figure(keel_session_t *s, const char *key) {
  char *d = NULL;
  if (keel_session_describe(s, 1, &d)) return -1;
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  const char *p = strstr(d, pat);
  long long v = p ? atoll(p + strlen(pat)) : -1;
  keel_free(d);
  return v;
}

typedef struct want {
  int nodes, folded, over_cap, dead;
} want;

/* Runs `make(k)` (k = 0 with the passes off, 1 on) on input x of `shape`;
 * outputs within tol of each other relative to the largest; the figures of
 * the session with the passes. */
static void agree(mb_graph *(*make)(void), int opset, int rank, const int64_t *shape, double tol,
                  want w, const char *label) {
  keel_options plain = {.size = sizeof plain, .flags = KEEL_OPT_NO_GRAPH_PASSES};
  keel_options nchw = {.size = sizeof nchw, .flags = KEEL_OPT_NO_ONEDNN};
  keel_session_t *s[2] = {mb_session_opts(make(), opset, &plain), mb_session_opts(make(), opset, &nchw)};
  CHECK(s[0] && s[1]);
  if (!s[0] || !s[1]) goto done;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  float *x = malloc(sizeof(float) * (size_t)n);
  uint32_t r = 777;
  for (int64_t i = 0; i < n; i++) x[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 23) - 1.0f;
  keel_value_t *out[2] = {0};
  for (int k = 0; k < 2; k++) {
    keel_value_t *in = mb_tensor(s[k], KEEL_FLOAT, rank, shape, x);
    CHECK_OK(keel_run(s[k], (const char *[]){"x"}, &in, 1, &out[k]));
    keel_value_release(in);
  }
  free(x);
  if (out[0] && out[1]) {
    int64_t m = keel_value_numel(out[0]);
    CHECK(m == keel_value_numel(out[1]));
    const float *a = keel_value_data(out[0]), *b = keel_value_data(out[1]);
    double big = 1, worst = 0;
    for (int64_t i = 0; i < m; i++) big = fmax(big, fabs(a[i]));
    for (int64_t i = 0; i < m; i++) worst = fmax(worst, fabs(a[i] - b[i]) / big);
    if (worst > tol) fprintf(stderr, "%s: outputs differ by %g of the largest\n", label, worst);
    CHECK(worst <= tol);
  }
  want got = {(int)figure(s[1], "nodes"), (int)figure(s[1], "folded_nodes"),
              (int)figure(s[1], "fold_over_cap"), (int)figure(s[1], "dead_nodes")};
  if (memcmp(&got, &w, sizeof w))
    fprintf(stderr, "%s: %d nodes, %d folded, %d over the cap, %d dead; want %d, %d, %d, %d\n", label,
            got.nodes, got.folded, got.over_cap, got.dead, w.nodes, w.folded, w.over_cap, w.dead);
  CHECK(!memcmp(&got, &w, sizeof w));
  /* with the passes off nothing is folded */
  CHECK(figure(s[0], "folded_nodes") == 0 && figure(s[0], "dead_nodes") == 0);
  for (int k = 0; k < 2; k++) keel_value_release(out[k]);
done:
  for (int k = 0; k < 2; k++) keel_session_destroy(s[k]);
}

#define C 3
#define M 4
#define H 6
static const int64_t g_xshape[4] = {1, C, H, H};

static void vals(float *p, int n, float scale, uint32_t seed) {
  for (int i = 0; i < n; i++)
    p[i] = scale * ((float)((seed = seed * 1664525u + 1013904223u) >> 8) / (1 << 24) - 0.5f);
}

static const float g_sc[M] = {0.9f, 1.1f, 0.7f, 1.3f}, g_be[M] = {0.1f, -0.2f, 0.05f, 0},
                   g_mu[M] = {0.01f, -0.02f, 0.03f, 0.1f}, g_va[M] = {0.5f, 0.8f, 1.2f, 0.9f};

static void bn_after(mb_graph *g, const char *in, const char *out, bool constant_nodes) {
  const char *pn[4] = {"bn_s", "bn_b", "bn_m", "bn_v"};
  const float *pv[4] = {g_sc, g_be, g_mu, g_va};
  for (int p = 0; p < 4; p++) {
    if (constant_nodes) mb_attr_t(mb_add(g, "Constant", "", pn[p]), "value", KEEL_FLOAT, 1, (int64_t[]){M}, pv[p]);
    else mb_init(g, pn[p], KEEL_FLOAT, 1, (int64_t[]){M}, pv[p]);
  }
  char ins[128];
  snprintf(ins, sizeof ins, "%s,bn_s,bn_b,bn_m,bn_v", in);
  mb_add(g, "BatchNormalization", ins, out);
}

/* paddle2onnx, opset 9: float16 Constant-node weights, Cast to float. */
static mb_graph *paddle_cast(void) {
  float w[M * C * 9];
  uint16_t h[M * C * 9];
  vals(w, M * C * 9, 1, 5);
  for (int i = 0; i < M * C * 9; i++) { /* float -> half, round to nearest even */
    union { float f; uint32_t u; } v = {w[i]};
    uint32_t sign = (v.u >> 16) & 0x8000u, e = (v.u >> 23) & 0xff, mant = v.u & 0x7fffffu;
    int32_t he = (int32_t)e - 127 + 15;
    uint16_t o;
    if (he <= 0) o = (uint16_t)sign;
    else {
      uint32_t r = mant + 0xfffu + ((mant >> 13) & 1u);
      if (r & 0x800000u) r = 0, he++;
      o = (uint16_t)(sign | ((uint32_t)he << 10) | (r >> 13));
    }
    h[i] = o;
  }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, g_xshape);
  mb_attr_t(mb_add(g, "Constant", "", "w16"), "value", KEEL_FLOAT16, 4, (int64_t[]){M, C, 3, 3}, h);
  mb_attr_i(mb_add(g, "Cast", "w16", "w"), "to", KEEL_FLOAT);
  mb_attr_ints(mb_add(g, "Conv", "x,w", "c"), "pads", 4, (int64_t[]){1, 1, 1, 1});
  bn_after(g, "c", "n", true);
  mb_add(g, "Relu", "n", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* tf2onnx: the weight as HWIO, Transposed to OIHW by a node. */
static mb_graph *tf_transpose(void) {
  float w[3 * 3 * C * M];
  vals(w, 3 * 3 * C * M, 1, 9);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, g_xshape);
  mb_init(g, "w_hwio", KEEL_FLOAT, 4, (int64_t[]){3, 3, C, M}, w);
  mb_attr_ints(mb_add(g, "Transpose", "w_hwio", "w"), "perm", 4, (int64_t[]){3, 2, 0, 1});
  mb_attr_ints(mb_add(g, "Conv", "x,w", "c"), "pads", 4, (int64_t[]){1, 1, 1, 1});
  bn_after(g, "c", "y", false);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* PyTorch, opset 11: x.reshape(2, -1) with the 2 a Constant, through
 * Unsqueeze and Concat; then the attention-style scale Div(., Sqrt(8)). */
static mb_graph *torch_reshape(int opset) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, g_xshape);
  int64_t two = 2, minus1[1] = {-1}, zero[1] = {0};
  float eight = 8;
  mb_attr_t(mb_add(g, "Constant", "", "two"), "value", KEEL_INT64, 0, NULL, &two);
  mb_attr_t(mb_add(g, "Constant", "", "rest"), "value", KEEL_INT64, 1, (int64_t[]){1}, minus1);
  if (opset >= 13) {
    mb_init(g, "axes0", KEEL_INT64, 1, (int64_t[]){1}, zero);
    mb_add(g, "Unsqueeze", "two,axes0", "two1");
  } else {
    mb_attr_ints(mb_add(g, "Unsqueeze", "two", "two1"), "axes", 1, zero);
  }
  mb_attr_i(mb_add(g, "Concat", "two1,rest", "shape"), "axis", 0);
  mb_add(g, "Reshape", "x,shape", "r");
  mb_attr_t(mb_add(g, "Constant", "", "eight"), "value", KEEL_FLOAT, 0, NULL, &eight);
  mb_add(g, "Sqrt", "eight", "scale");
  mb_add(g, "Div", "r,scale", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}
static mb_graph *torch_reshape11(void) { return torch_reshape(11); }
static mb_graph *torch_reshape13(void) { return torch_reshape(13); }

/* y = x + ConstantOfShape([512, 1024])[0, :C*H*H]...: kept simple, the
 * big constant is added after a Reshape of x to [1, C*H*H] broadcast
 * against [512, 1024] would not fit, so it is sliced by a constant Slice
 * the pass must also leave (its input is not constant). */
static mb_graph *over_cap(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, g_xshape);
  int64_t shp[2] = {512, 1024}, st[2] = {0, 0}, en[2] = {1, C * H * H};
  float one = 0.5f;
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){2}, shp);
  mb_attr_t(mb_add(g, "ConstantOfShape", "shp", "big"), "value", KEEL_FLOAT, 1, (int64_t[]){1}, &one);
  mb_init(g, "st", KEEL_INT64, 1, (int64_t[]){2}, st);
  mb_init(g, "en", KEEL_INT64, 1, (int64_t[]){2}, en);
  mb_add(g, "Slice", "big,st,en", "part");
  int64_t flat[2] = {1, C * H * H};
  mb_init(g, "flat", KEEL_INT64, 1, (int64_t[]){2}, flat);
  mb_add(g, "Reshape", "x,flat", "xf");
  mb_add(g, "Add", "xf,part", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* An If whose then-branch computes Unsqueeze(Neg(outer constant)) and adds
 * it; the else-branch passes x through. */
static mb_graph *branch_fold(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, g_xshape);
  float bias[H] = {1, 2, 3, 4, 5, 6};
  bool yes = true;
  mb_init(g, "bias", KEEL_FLOAT, 1, (int64_t[]){H}, bias);
  mb_init(g, "cond", KEEL_BOOL, 0, NULL, &yes);
  mb_graph *t = mb_graph_new("then");
  mb_add(t, "Neg", "bias", "nb");
  mb_add(t, "Add", "x,nb", "ty");
  mb_output(t, "ty", KEEL_FLOAT, -1, NULL);
  mb_graph *e = mb_graph_new("else");
  mb_add(e, "Identity", "x", "ey");
  mb_output(e, "ey", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "If", "cond", "y");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* A chain nobody reads (Relu -> Neg) and a RandomNormal nobody reads. */
static mb_graph *dead(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, g_xshape);
  mb_add(g, "Relu", "x", "a");
  mb_add(g, "Neg", "a", "b");
  mb_attr_ints(mb_add(g, "RandomNormal", "", "noise"), "shape", 1, (int64_t[]){4});
  mb_add(g, "Sigmoid", "x", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* Reshape of a 6-element constant to [4]: the kernel fails at load, the
 * node stays, and the run reports it by name. */
static void bad_constant(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){4});
  float six[6] = {1, 2, 3, 4, 5, 6};
  int64_t four[1] = {4};
  mb_init(g, "six", KEEL_FLOAT, 1, (int64_t[]){6}, six);
  mb_init(g, "four", KEEL_INT64, 1, (int64_t[]){1}, four);
  mb_name(mb_add(g, "Reshape", "six,four", "r"), "bad_reshape");
  mb_add(g, "Add", "x,r", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  CHECK(figure(s, "folded_nodes") == 0 && figure(s, "nodes") == 2);
  float x[4] = {0};
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, x), *out = NULL;
  CHECK(keel_run(s, (const char *[]){"x"}, &in, 1, &out) != KEEL_OK);
  CHECK(strstr(keel_last_error(), "bad_reshape") != NULL);
  keel_value_release(in);
  keel_value_release(out);
  keel_session_destroy(s);
}

int main(void) {
  /* Cast, then BatchNormalization into the Conv, Relu into the Conv */
  agree(paddle_cast, 9, 4, g_xshape, 1e-5, (want){1, 1, 0, 0}, "paddle2onnx Cast of float16 weights");
  /* Transpose, then BatchNormalization into the Conv */
  agree(tf_transpose, 13, 4, g_xshape, 1e-5, (want){1, 1, 0, 0}, "tf2onnx Transpose of HWIO weights");
  /* Unsqueeze, Concat, Sqrt: Reshape and Div stay */
  agree(torch_reshape11, 11, 4, g_xshape, 0, (want){2, 3, 0, 0}, "PyTorch opset 11 shape chain");
  agree(torch_reshape13, 13, 4, g_xshape, 0, (want){2, 3, 0, 0}, "PyTorch opset 13 shape chain");
  /* ConstantOfShape over the cap stays; nothing else is all-constant */
  agree(over_cap, 13, 4, g_xshape, 0, (want){4, 0, 1, 0}, "ConstantOfShape over the cap");
  /* the branch's Neg folds (a constant of the branch) */
  agree(branch_fold, 13, 4, g_xshape, 0, (want){3, 1, 0, 0}, "a constant chain in an If branch");
  /* Relu and Neg removed; RandomNormal kept */
  agree(dead, 13, 4, g_xshape, 0, (want){2, 0, 0, 2}, "dead nodes");
  bad_constant();
  return check_report();
}
