/* test_device_attn.c: the unary kernel's ops with parameters, FusedMatMul
 * with every fused activation, and FusedAttention on a device (device.h's
 * unary kernel, dev_attn.h's masked softmax between the blas group's
 * products: ops/nn/attention/attention_gpu.c), on the emulated device
 * ("emu") or on KEEL_TEST_DEVICE (tools/gpu_check.sh: cuda:0).
 *
 * Each case is a model run on the device and on the CPU with the same
 * inputs: outputs agree within 1e-5 (relative to 1 + |CPU's|; NaN where
 * the CPU has NaN), the named node is placed on the GPU (or, for what the
 * kernels do not take, stays on the CPU), device bytes are steady over
 * three runs and none are left after the sessions. Cases:
 *   - Erf, Gelu (opset 20, approximate none and tanh; com.microsoft's),
 *     Reciprocal, Floor, Ceil, Softplus, LeakyRelu, Elu, HardSigmoid,
 *     HardSwish, Cos, Sin, Clip (opset 13 with constant bounds, one bound,
 *     none; opset 6 attributes; a bound computed at run time: CPU) over
 *     negative, zero, tiny, large, infinite and NaN inputs;
 *   - FusedMatMul (fuse-matmul's MatMul + bias + activation) with Relu,
 *     LeakyRelu, Clip, HardSigmoid, HardSwish, Sigmoid, Tanh, Gelu and
 *     Gelu tanh, and FusedMatMul nodes written with SiLU and
 *     HardSigmoidMul (which the pass does not make);
 *   - FusedAttention as fuse-attention makes it of PyTorch-style graphs
 *     (an additive mask, causal Where with -inf, where_not with a finite
 *     fill, no mask; layouts folded into the node or not), and written
 *     directly: layout bits, K as rows or transposed, masks broadcast over
 *     heads, rows and keys, fully masked rows (NaN), zero keys, the causal
 *     flag (alone, with a mask, with fewer keys than queries), q, k and v
 *     packed as column ranges of one tensor;
 *   - kernels/fmath.h's formulas (the CUDA kernels' erf, expm1, log1p,
 *     sin, cos) evaluated here over libm's primitives against double
 *     libm: the algorithms, not the GPU's hardware approximations, which
 *     test_gpu_attn checks on a GPU.
 */
#include <float.h>
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

/* ------------------------------------------------------------- cases */

typedef struct input {
  const char *name;
  int dtype, rank;
  int64_t dims[4];
  const void *data;
} input;

/* Model bytes with `domain` (NULL: none) imported at version 1. */
static uint8_t *bytes_of(mb_graph *g, int opset, const char *domain, size_t *len) {
  return domain ? mb_model_domains(g, opset, domain, 1, len) : mb_model(g, opset, len);
}

static keel_session_t *session(uint8_t *bytes, size_t len, const char *dev, int flags) {
  keel_options o = {.size = sizeof o, .device = dev, .flags = flags};
  keel_session_t *s = NULL;
  if (keel_session_create_from_memory(bytes, len, NULL, &o, &s))
    fprintf(stderr, "  session on %s: %s\n", dev ? dev : "cpu", keel_last_error());
  return s;
}

/* Whether the describe text has a line with `node` that says `where`
 * ("gpu" or "cpu"). */
static bool placed(const char *text, const char *node, const char *where) {
  for (const char *p = text; p && (p = strstr(p, node)); p++) {
    const char *l = p;
    while (l > text && l[-1] != '\n') l--;
    char w[8];
    snprintf(w, sizeof w, " %s ", where);
    const char *hit = strstr(l, w);
    if (hit && hit < p) return true;
  }
  return false;
}


/* Runs the model on the device and on the CPU (passes on for both, or off
 * for the CPU when `plain_ref`: then the reference is the unfused chain). */
static void check_model(const char *what, mb_graph *g, int opset, const char *domain, const input *in,
                        int n_in, int n_out, const char *node, bool on_gpu, bool plain_ref) {
  size_t len;
  uint8_t *bytes = bytes_of(g, opset, domain, &len);
  keel_session_t *s = session(bytes, len, g_dev, 0);
  keel_session_t *ref = session(bytes, len, NULL, plain_ref ? KEEL_OPT_NO_GRAPH_PASSES : 0);
  free(bytes);
  CHECK(s && ref);
  if (!s || !ref) {
    fprintf(stderr, "  case %s: no session\n", what);
    keel_session_destroy(s), keel_session_destroy(ref);
    return;
  }
  char *t = NULL;
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  if (!t || !placed(t, node, on_gpu ? "gpu" : "cpu")) {
    fprintf(stderr, "  case %s: want %s on the %s\n%s\n", what, node, on_gpu ? "GPU" : "CPU", t ? t : "");
    CHECK(false);
  }
  keel_free(t);
  uint64_t first = 0;
  const char *names[8];
  for (int i = 0; i < n_in; i++) names[i] = in[i].name;
  for (int run = 0; run < 3; run++) {
    keel_value_t *outs[2][4] = {{0}};
    keel_session_t *ss[2] = {s, ref};
    for (int k = 0; k < 2; k++) {
      keel_value_t *v[8];
      for (int i = 0; i < n_in; i++) v[i] = mb_tensor(ss[k], in[i].dtype, in[i].rank, in[i].dims, in[i].data);
      CHECK_OK(keel_run(ss[k], names, v, (size_t)n_in, outs[k]));
      for (int i = 0; i < n_in; i++) keel_value_release(v[i]);
    }
    for (int i = 0; i < n_out; i++) {
      devcase_check(what, i, outs[0][i], outs[1][i], 1e-5);
      keel_value_release(outs[0][i]), keel_value_release(outs[1][i]);
    }
    devcase_steady(s, run, &first);
  }
  devcase_end(s, ref);
}

/* ------------------------------------------------------------ unary */

enum { NX = 48 };
static float X[NX];

static void edge_values(void) {
  static const float e[] = {-INFINITY, -100.0f, -88.0f, -20.0f, -5.5f, -3.0f, -2.5f, -1.0f,
                            -0.5f,     -1e-3f,  -1e-7f, -0.0f,  0.0f,  1e-7f, 1e-3f, 0.5f,
                            1.0f,      2.5f,    3.0f,   5.5f,   20.0f, 88.0f, 100.0f, INFINITY};
  for (int i = 0; i < NX; i++) X[i] = i < 24 ? e[i] : (float)((i * 37) % 29) * 0.61f - 8.3f;
  X[47] = NAN;
}

typedef struct ucase {
  const char *op;
  int opset;
  const char *attr_s, *sval;  /* a string attribute */
  const char *fa, *fb;        /* float attributes */
  float a, b;
  const char *domain;
} ucase;

static mb_graph *unary_graph(const ucase *c, const char *inputs) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){4, NX / 4});
  mb_node *n = mb_add(g, c->op, inputs, "y");
  mb_name(n, "op");
  if (c->domain) mb_domain(n, c->domain);
  if (c->attr_s) mb_attr_s(n, c->attr_s, c->sval);
  if (c->fa) mb_attr_f(n, c->fa, c->a);
  if (c->fb) mb_attr_f(n, c->fb, c->b);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_unary(void) {
  static const ucase cases[] = {
      {"Erf", 13},
      {"Gelu", 20},
      {"Gelu", 20, "approximate", "none"},
      {"Gelu", 20, "approximate", "tanh"},
      {"Gelu", 17, .domain = "com.microsoft"},
      {"Reciprocal", 13},
      {"Floor", 13},
      {"Ceil", 13},
      {"Softplus", 13},
      {"LeakyRelu", 13},
      {"LeakyRelu", 13, .fa = "alpha", .a = 0.3f},
      {"Elu", 13},
      {"Elu", 13, .fa = "alpha", .a = 0.7f},
      {"HardSigmoid", 13},
      {"HardSigmoid", 13, .fa = "alpha", .a = 0.3f, .fb = "beta", .b = 0.4f},
      {"HardSwish", 14},
      {"Cos", 13},
      {"Sin", 13},
      {"Clip", 6},
      {"Clip", 6, .fa = "min", .a = -1.5f, .fb = "max", .b = 2.0f},
      {"Clip", 6, .fa = "min", .a = 3.0f, .fb = "max", .b = -1.0f}, /* min > max: max */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const ucase *c = &cases[i];
    char what[96], node[64];
    snprintf(what, sizeof what, "%s%s%s (opset %d)", c->op, c->sval ? " " : "", c->sval ? c->sval : "", c->opset);
    snprintf(node, sizeof node, "'op' (%s)", c->op);
    input in = {"x", KEEL_FLOAT, 2, {4, NX / 4}, X};
    check_model(what, unary_graph(c, "x"), c->opset, c->domain, &in, 1, 1, node, true, false);
  }
  /* Clip-13: constant bounds (both, min only, max only, none) on the
   * device; a bound that is a graph input stays on the CPU */
  static float lo = -2.0f, hi = 1.5f;
  static const char *const forms[] = {"x,lo,hi", "x,lo", "x,,hi", "x", "x,lo_in,hi"};
  for (int f = 0; f < 5; f++) {
    ucase c = {"Clip", 13};
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){4, NX / 4});
    mb_init(g, "lo", KEEL_FLOAT, 0, NULL, &lo);
    mb_init(g, "hi", KEEL_FLOAT, 0, NULL, &hi);
    if (f == 4) mb_input(g, "lo_in", KEEL_FLOAT, 0, NULL);
    mb_name(mb_add(g, c.op, forms[f], "y"), "op");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    input in[2] = {{"x", KEEL_FLOAT, 2, {4, NX / 4}, X}, {"lo_in", KEEL_FLOAT, 0, {0}, &lo}};
    char what[64];
    snprintf(what, sizeof what, "Clip(%s)", forms[f]);
    check_model(what, g, 13, NULL, in, f == 4 ? 2 : 1, 1, "'op' (Clip)", f != 4, false);
  }
}

/* ------------------------------------------------------ FusedMatMul */

/* x [4, 6] -> MatMul(W [6, 5]) -> Add(bias) -> act -> y: one FusedMatMul
 * after fuse-matmul (act NULL: written as a FusedMatMul node with
 * keel.activation `kind`). */
static void check_fused(const char *act, const char *kind, float a, float b, const char *attr_s,
                        const char *sval, int opset) {
  static float w[30], bias[5], xin[24];
  static float lo = -0.5f, hi = 0.75f;
  for (int i = 0; i < 30; i++) w[i] = (float)((i * 7) % 11) * 0.25f - 1.2f;
  for (int i = 0; i < 5; i++) bias[i] = 0.125f * (float)i - 0.25f;
  for (int i = 0; i < 24; i++) xin[i] = (float)((i * 5) % 13) * 0.5f - 3.0f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_FLOAT, 2, (int64_t[]){4, 6});
  mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){6, 5}, w);
  mb_init(g, "bias", KEEL_FLOAT, 1, (int64_t[]){5}, bias);
  const char *domain = NULL;
  if (act) {
    mb_name(mb_add(g, "MatMul", "a,w", "p"), "mm");
    mb_name(mb_add(g, "Add", "p,bias", "q"), "bias_add");
    bool clip = !strcmp(act, "Clip");
    if (clip) {
      mb_init(g, "lo", KEEL_FLOAT, 0, NULL, &lo);
      mb_init(g, "hi", KEEL_FLOAT, 0, NULL, &hi);
    }
    mb_node *n = mb_add(g, act, clip ? "q,lo,hi" : "q", "y");
    mb_name(n, "act");
    if (attr_s) mb_attr_s(n, attr_s, sval);
    if (!strcmp(act, "LeakyRelu")) mb_attr_f(n, "alpha", a);
    if (!strcmp(act, "HardSigmoid")) mb_attr_f(n, "alpha", a), mb_attr_f(n, "beta", b);
  } else {
    mb_node *n = mb_add(g, "FusedMatMul", "a,w,bias", "y");
    mb_name(n, "mm");
    mb_domain(n, domain = "ai.keel.internal");
    mb_attr_s(n, "keel.activation", kind);
    mb_attr_floats(n, "keel.activation_params", 2, (float[]){a, b});
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  input in = {"a", KEEL_FLOAT, 2, {4, 6}, xin};
  char what[96];
  snprintf(what, sizeof what, "FusedMatMul with %s%s%s", act ? act : kind, sval ? " " : "", sval ? sval : "");
  /* the reference: the unfused chain on the CPU */
  check_model(what, g, opset, domain, &in, 1, 1, "'mm' (FusedMatMul)", true, act != NULL);
}

static void check_fused_matmul(void) {
  check_fused("Relu", NULL, 0, 0, NULL, NULL, 13);
  check_fused("LeakyRelu", NULL, 0.2f, 0, NULL, NULL, 13);
  check_fused("Clip", NULL, 0, 0, NULL, NULL, 13);
  check_fused("HardSigmoid", NULL, 0.3f, 0.4f, NULL, NULL, 13);
  check_fused("HardSwish", NULL, 0, 0, NULL, NULL, 14);
  check_fused("Sigmoid", NULL, 0, 0, NULL, NULL, 13);
  check_fused("Tanh", NULL, 0, 0, NULL, NULL, 13);
  check_fused("Gelu", NULL, 0, 0, NULL, NULL, 20);
  check_fused("Gelu", NULL, 0, 0, "approximate", "tanh", 20);
  check_fused(NULL, "SiLU", 0, 0, NULL, NULL, 13);
  check_fused(NULL, "HardSigmoidMul", 0.2f, 0.5f, NULL, NULL, 13);
}

/* --------------------------------------------- FusedAttention (passes) */

#define AB 2
#define AS 40
#define AH 2
#define AD 8
#define AE (AH * AD)

enum { P_ADD, P_CAUSAL, P_WHERE_NOT, P_NONE, P_KEEP_T };
static float g_q[AB * AS * AE], g_k[AB * AS * AE], g_v[AB * AS * AE], g_mask[AB * AS];

static void attn_fill(void) {
  uint32_t r = 777;
  float *all[3] = {g_q, g_k, g_v};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < AB * AS * AE; i++)
      all[t][i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (1 << 23) - 1.0f;
  for (int b = 0; b < AB; b++)
    for (int j = 0; j < AS; j++) g_mask[b * AS + j] = j >= AS - 5 - 3 * b ? -10000.0f : 0.0f;
}

/* q, k, v [B, S, E] as PyTorch's attention exports them: Reshape and
 * Transpose into heads, MatMul, scale, mask, Softmax, MatMul, Y back to
 * [B, S, H, D] (P_ADD, P_CAUSAL, P_KEEP_T) or not. */
static mb_graph *attn_graph(int form) {
  static uint8_t ones[AS * AS];
  memset(ones, 1, sizeof ones);
  float c = 0.5f, ninf = -INFINITY, big = -1e9f;
  int64_t shp[4] = {AB, AS, AH, AD}, zero = 0;
  mb_graph *g = mb_graph_new("main");
  const int64_t qd[3] = {AB, AS, AE};
  mb_input(g, "q", KEEL_FLOAT, 3, qd);
  mb_input(g, "k", KEEL_FLOAT, 3, qd);
  mb_input(g, "v", KEEL_FLOAT, 3, qd);
  mb_input(g, "mask", KEEL_FLOAT, 4, (int64_t[]){AB, 1, 1, AS});
  mb_init(g, "c", KEEL_FLOAT, 0, NULL, &c);
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){4}, shp);
  mb_add(g, "Reshape", "q,shp", "q3");
  mb_add(g, "Reshape", "k,shp", "k3");
  mb_add(g, "Reshape", "v,shp", "v3");
  mb_attr_ints(mb_add(g, "Transpose", "q3", "Q4"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_attr_ints(mb_add(g, "Transpose", "k3", "Kt"), "perm", 4, (int64_t[]){0, 2, 3, 1});
  mb_attr_ints(mb_add(g, "Transpose", "v3", "V4"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_add(g, "MatMul", "Q4,Kt", "s");
  if (form == P_CAUSAL || form == P_WHERE_NOT) { /* torch's causal condition: true above the diagonal */
    mb_init(g, "ones", KEEL_BOOL, 2, (int64_t[]){AS, AS}, ones);
    mb_init(g, "kdiag", KEEL_INT64, 0, NULL, &zero);
    mb_attr_i(mb_add(g, "Trilu", "ones,kdiag", "tri"), "upper", 0);
    mb_add(g, "Not", "tri", "ntri");
    mb_attr_i(mb_add(g, "Cast", "ntri", "cond"), "to", KEEL_BOOL);
  }
  switch (form) {
    case P_CAUSAL:
      mb_init(g, "ninf", KEEL_FLOAT, 0, NULL, &ninf);
      mb_add(g, "Mul", "c,s", "s2");
      mb_add(g, "Where", "cond,ninf,s2", "x");
      break;
    case P_WHERE_NOT:
      mb_init(g, "big", KEEL_FLOAT, 0, NULL, &big);
      mb_add(g, "Where", "cond,s,big", "x");
      break;
    case P_NONE: /* the scale alone (with neither it nor a Where the pass leaves the chain) */
      mb_add(g, "Mul", "s,c", "x");
      break;
    default:
      mb_add(g, "Mul", "s,c", "s2");
      mb_add(g, "Add", "s2,mask", "x");
  }
  mb_add(g, "Softmax", "x", "p");
  bool yt = form == P_ADD || form == P_CAUSAL || form == P_KEEP_T;
  mb_add(g, "MatMul", "p,V4", yt ? "y4" : "y");
  if (yt) mb_attr_ints(mb_add(g, "Transpose", "y4", "y"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  if (form == P_KEEP_T) { /* the Transposes have other readers: not folded */
    mb_output(g, "Q4", KEEL_FLOAT, -1, NULL);
    mb_output(g, "Kt", KEEL_FLOAT, -1, NULL);
    mb_output(g, "V4", KEEL_FLOAT, -1, NULL);
  }
  return g;
}

static void check_attention_passes(void) {
  static const char *const names[] = {"additive mask", "causal Where", "where_not, finite fill",
                                      "no mask", "Transposes kept"};
  for (int f = P_ADD; f <= P_KEEP_T; f++) {
    input in[4] = {{"q", KEEL_FLOAT, 3, {AB, AS, AE}, g_q}, {"k", KEEL_FLOAT, 3, {AB, AS, AE}, g_k},
                   {"v", KEEL_FLOAT, 3, {AB, AS, AE}, g_v}, {"mask", KEEL_FLOAT, 4, {AB, 1, 1, AS}, g_mask}};
    char what[96];
    snprintf(what, sizeof what, "attention (passes): %s", names[f]);
    /* the reference: the unfused chain on the CPU */
    check_model(what, attn_graph(f), 17, NULL, in, 4, f == P_KEEP_T ? 4 : 1, "(FusedAttention)", true, true);
  }
}

/* -------------------------------------------- FusedAttention (direct) */

typedef struct acase {
  const char *what;
  int layout;                 /* bits 1 Q, 2 K (rows), 4 V, 8 Y: [B, S, H, D] */
  const char *kind;           /* mask_kind */
  int mrank;
  int64_t mdims[4];
  float fill, scale;
  int64_t skv;                /* keys (0: AS) */
  bool r3;                    /* rank-3 operands [H, S, D] */
  bool causal;                /* attribute causal = 1 (pass_causal.c's) */
} acase;

static float g_am[AB * AH * AS * AS];
static uint8_t g_ac[AB * AH * AS * AS];

/* Q [B, H, S, D] or [B, S, H, D] (layout bit), K as Kt [B, H, D, Skv] or
 * rows [B, Skv, H, D], V likewise, from the same buffers (any values). */
static void check_direct(const acase *c) {
  int64_t skv = c->skv ? c->skv : AS, sq = AS;
  mb_graph *g = mb_graph_new("main");
  bool lq = c->layout & 1, lk = c->layout & 2, lv = c->layout & 4;
  int64_t qd[4] = {AB, lq ? sq : AH, lq ? AH : sq, AD};
  int64_t kd[4] = {AB, lk ? skv : AH, lk ? AH : AD, lk ? AD : skv};
  int64_t vd[4] = {AB, lv ? skv : AH, lv ? AH : skv, AD};
  int rank = c->r3 ? 3 : 4;
  const int64_t *dq = c->r3 ? qd + 1 : qd, *dk = c->r3 ? kd + 1 : kd, *dv = c->r3 ? vd + 1 : vd;
  mb_input(g, "q", KEEL_FLOAT, rank, dq);
  mb_input(g, "k", KEEL_FLOAT, rank, dk);
  mb_input(g, "v", KEEL_FLOAT, rank, dv);
  bool mask = strcmp(c->kind, "none") != 0, add = !strcmp(c->kind, "add");
  if (mask) mb_input(g, "m", add ? KEEL_FLOAT : KEEL_BOOL, c->mrank, c->mdims);
  mb_node *n = mb_add(g, "FusedAttention", mask ? "q,k,v,m" : "q,k,v", "y");
  mb_name(n, "fa");
  mb_domain(n, "ai.keel.internal");
  mb_attr_f(n, "scale", c->scale);
  mb_attr_s(n, "mask_kind", c->kind);
  if (mask && !add) mb_attr_f(n, "fill", c->fill);
  if (c->layout) mb_attr_i(n, "layout", c->layout);
  if (c->causal) mb_attr_i(n, "causal", 1);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  input in[4] = {{"q", KEEL_FLOAT, rank, {0}, g_q}, {"k", KEEL_FLOAT, rank, {0}, g_k},
                 {"v", KEEL_FLOAT, rank, {0}, g_v}, {"m", add ? KEEL_FLOAT : KEEL_BOOL, c->mrank, {0}, NULL}};
  memcpy(in[0].dims, dq, sizeof(int64_t) * (size_t)rank);
  memcpy(in[1].dims, dk, sizeof(int64_t) * (size_t)rank);
  memcpy(in[2].dims, dv, sizeof(int64_t) * (size_t)rank);
  memcpy(in[3].dims, c->mdims, sizeof(int64_t) * (size_t)c->mrank);
  in[3].data = add ? (const void *)g_am : (const void *)g_ac;
  char what[128];
  snprintf(what, sizeof what, "attention (direct): %s", c->what);
  check_model(what, g, 17, "ai.keel.internal", in, mask ? 4 : 3, 1, "'fa' (FusedAttention)", true, false);
}

static void check_attention_direct(void) {
  /* masks: additive with -inf somewhere, every key of row 3 masked (a
   * fully masked row: NaN); bool with some rows kept by none */
  for (int i = 0; i < AB * AH * AS * AS; i++) {
    int j = i % AS, row = (i / AS) % AS;
    g_am[i] = row == 3 ? -INFINITY : j % 5 == 1 ? -INFINITY : (float)((i * 13) % 7) * 0.3f - 1.0f;
    g_ac[i] = row == 5 ? 1 : (uint8_t)((i * 7 + j) % 3 == 0);
  }
  const acase cases[] = {
      {"no mask, Kt", 0, "none", .scale = 0.35f},
      {"no mask, all [B,S,H,D] (K rows)", 15, "none", .scale = 0.35f},
      {"Q and Y [B,S,H,D], K transposed", 9, "none", .scale = 1.0f},
      {"V [B,S,H,D] only", 4, "none", .scale = 0.5f},
      {"add, [B,1,1,S] (padding)", 0, "add", 4, {AB, 1, 1, AS}, .scale = 0.5f},
      {"add, [B,H,S,S] with fully masked rows", 15, "add", 4, {AB, AH, AS, AS}, .scale = 0.5f},
      {"add, [S,S] (over batches and heads)", 2, "add", 2, {AS, AS}, .scale = 0.5f},
      {"add, [1,H,S,1] (one value per row)", 0, "add", 4, {1, AH, AS, 1}, .scale = 0.5f},
      {"where -inf, [B,1,S,S]", 0, "where", 4, {AB, 1, AS, AS}, -INFINITY, 0.25f},
      {"where -inf, [S,S], rows fully masked", 15, "where", 2, {AS, AS}, -INFINITY, 0.25f},
      {"where finite fill, [B,H,S,S]", 8, "where", 4, {AB, AH, AS, AS}, -1e9f, 0.25f},
      {"where_not -inf, [B,1,1,S]", 0, "where_not", 4, {AB, 1, 1, AS}, -INFINITY, 0.25f},
      {"where_not finite, [1,1,S,S]", 6, "where_not", 4, {1, 1, AS, AS}, -3.0f, 0.25f},
      {"rank 3 operands, mask [S,S]", 0, "add", 2, {AS, AS}, .scale = 0.5f, .r3 = true},
      {"rank 3, all [S,H,D]", 15, "none", .scale = 0.5f, .r3 = true},
      {"fewer keys than queries", 0, "where", 4, {AB, AH, AS, 17}, -INFINITY, 0.25f, 17},
      {"zero keys", 15, "none", .scale = 0.5f, .skv = -1},
      {"causal, no mask", 0, "none", .scale = 0.5f, .causal = true},
      {"causal, all [B,S,H,D]", 15, "none", .scale = 0.35f, .causal = true},
      {"causal and add [B,H,S,S], fully masked rows", 15, "add", 4, {AB, AH, AS, AS}, .scale = 0.5f,
       .causal = true},
      {"causal, fewer keys than queries", 0, "none", .scale = 0.25f, .skv = 17, .causal = true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    acase c = cases[i];
    if (cases[i].skv < 0) { /* zero keys: Y is zeros on either side */
      mb_graph *g = mb_graph_new("main");
      mb_input(g, "q", KEEL_FLOAT, 4, (int64_t[]){AB, AH, AS, AD});
      mb_input(g, "k", KEEL_FLOAT, 4, (int64_t[]){AB, AH, AD, 0});
      mb_input(g, "v", KEEL_FLOAT, 4, (int64_t[]){AB, AH, 0, AD});
      mb_node *n = mb_add(g, "FusedAttention", "q,k,v", "y");
      mb_name(n, "fa");
      mb_domain(n, "ai.keel.internal");
      mb_output(g, "y", KEEL_FLOAT, -1, NULL);
      input in[3] = {{"q", KEEL_FLOAT, 4, {AB, AH, AS, AD}, g_q}, {"k", KEEL_FLOAT, 4, {AB, AH, AD, 0}, g_k},
                     {"v", KEEL_FLOAT, 4, {AB, AH, 0, AD}, g_v}};
      check_model("attention (direct): zero keys", g, 17, "ai.keel.internal", in, 3, 1, "'fa' (FusedAttention)",
                  true, false);
      continue;
    }
    check_direct(&c);
  }
}

/* FusedAttention with attribute packed (passes/pass_qkv.c's): q, k, v
 * column ranges of one X [AB, AS, W] whose rows have columns to spare;
 * Y [B, S, H, D] or [B, H, S, D]; causal or not; as its own [b, s] of X's
 * rows (one batch of AB * AS rows read as AB x AS). */
static void check_packed(void) {
  enum { W = 3 * AE + 5 };
  static float x[AB * AS * W];
  for (int i = 0; i < AB * AS * W; i++) x[i] = g_q[i % (AB * AS * AE)] * (1.0f + (float)(i % 5) * 0.25f);
  for (int form = 0; form < 3; form++) {
    bool one = form == 2; /* X as [1, AB * AS, W], packed b, s = AB, AS */
    int64_t xd[3] = {one ? 1 : AB, one ? AB * AS : AS, W};
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 3, xd);
    mb_node *n = mb_add(g, "FusedAttention", "x,x,x", "y");
    mb_name(n, "fa");
    mb_domain(n, "ai.keel.internal");
    mb_attr_f(n, "scale", 0.4f);
    mb_attr_s(n, "mask_kind", "none");
    mb_attr_i(n, "layout", form == 0 ? 15 : 7);
    if (form == 1) mb_attr_i(n, "causal", 1);
    int64_t pk[11] = {5, AH, AD, 5 + AE, AH, AD, 5 + 2 * AE, AH, AD, one ? AB : -1, one ? AS : -1};
    mb_attr_ints(n, "packed", 11, pk);
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    input in[1] = {{"x", KEEL_FLOAT, 3, {xd[0], xd[1], xd[2]}, x}};
    static const char *const names[] = {"Y [B,S,H,D]", "causal, Y [B,H,S,D]", "X [1, B S, W] as [B, S]"};
    char what[96];
    snprintf(what, sizeof what, "attention (packed q, k, v): %s", names[form]);
    check_model(what, g, 17, "ai.keel.internal", in, 1, 1, "'fa' (FusedAttention)", true, false);
  }
}

/* ------------------------------------------------- fmath.h on the host */

#define F_FN static inline
static inline float f_exp(float x) {
  if (x > 88.72283f) return INFINITY;
  if (x < -103.97208f) return 0.0f;
  return exp2f(x * 1.4426950408889634f);
}
static inline float f_log(float x) { return log2f(x) * 0.6931471805599453f; }
static inline float f_abs(float x) { return fabsf(x); }
static inline float f_div(float a, float b) { return a / b; }
static inline float f_fma(float a, float b, float c) { return fmaf(a, b, c); }
static inline float f_floor(float x) { return floorf(x); }
#include "device/kernels/fmath.h"

static void check_fmath(void) {
  double w[5] = {0};
  for (int i = 0; i < 400000; i++) {
    float x = (float)(i % 2 ? -1 : 1) * (i < 200000 ? (float)i * 3e-5f : (float)(i - 200000) * 5e-4f);
    if (i % 7 == 0) x = (float)i * 1e-9f;
    double e = erf((double)x), m = expm1((double)x), s = sin((double)x), co = cos((double)x);
    w[0] = fmax(w[0], fabs(f_erf(x) - e) / fmax(fabs(e), 1e-30));
    if (x < 0) w[1] = fmax(w[1], fabs(f_expm1(x) - m) / fmax(fabs(m), 1e-30));
    float u = expf(-fabsf(x));
    double l = log1p((double)u);
    w[2] = fmax(w[2], fabs(f_log1p(u) - l) / fmax(l, 1e-38));
    w[3] = fmax(w[3], fabs(f_sin(x) - s) / fmax(fabs(s), 1e-6));
    w[4] = fmax(w[4], fabs(f_cos(x) - co) / fmax(fabs(co), 1e-6));
  }
  fprintf(stderr, "fmath.h over libm: erf %.2g, expm1 %.2g, log1p %.2g, sin %.2g, cos %.2g\n", w[0], w[1],
          w[2], w[3], w[4]);
  for (int i = 0; i < 5; i++) CHECK(w[i] <= 1e-6);
  CHECK(isnan(f_sin(NAN)) && isnan(f_cos(INFINITY)) && isnan(f_erf(NAN)));
  CHECK(f_erf(-INFINITY) == -1.0f && f_erf(INFINITY) == 1.0f && f_erf(-0.0f) == 0.0f);
}

int main(void) {
  g_dev = devcase_device();
  fprintf(stderr, "test_device_attn: on %s\n", g_dev);
  edge_values();
  attn_fill();
  check_fmath();
  check_unary();
  check_fused_matmul();
  check_attention_passes();
  check_attention_direct();
  check_packed();
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
