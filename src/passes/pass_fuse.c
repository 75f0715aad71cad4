/* pass_fuse.c: fuse-activation, the first fusion pass: a Conv whose only
 * reader is an elementwise activation (Relu, LeakyRelu, Clip with constant
 * bounds, HardSigmoid, HardSwish, Sigmoid, Tanh) takes the activation over:
 * it writes the activation's output itself and applies it in place
 * (ops/common/activation.h), one pass over memory less. The activation node
 * disappears; the Conv keeps its name and lists the activation in
 * `fused`, so messages and traces name both.
 *
 * The gated forms exporters write, x * Sigmoid(x) (SiLU) and
 * x * HardSigmoid(x) (hardswish before opset 14), fold the same way, both
 * nodes at once.
 *
 * The layout pass's NhwcConv folds the same activations.
 *
 * Not fused: a Conv output that is a graph output, is read by anything
 * else, or is read by a sub-graph; Clip bounds computed at run time.
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "ops/common/activation.h"
#include "passes/pass.h"

/* The activation's parameters as the kernels read them; false when the
 * node cannot be folded. */
static bool act_params(const keel_model *m, const keel_graph *g, const keel_node *a,
                       keel_act_kind kind, float p[2]) {
  const keel_attr *x;
  p[0] = p[1] = 0;
  switch (kind) {
    case KEEL_ACT_LEAKY: p[0] = (x = keel_node_attr(a, "alpha")) ? x->f : 0.01f; return true;
    case KEEL_ACT_HSIGMOID:
      p[0] = (x = keel_node_attr(a, "alpha")) ? x->f : 0.2f;
      p[1] = (x = keel_node_attr(a, "beta")) ? x->f : 0.5f;
      return true;
    case KEEL_ACT_CLIP:
      p[0] = -INFINITY, p[1] = INFINITY;
      if (a->opset < 11) {
        if ((x = keel_node_attr(a, "min"))) p[0] = x->f;
        if ((x = keel_node_attr(a, "max"))) p[1] = x->f;
        return true;
      }
      if (a->n_in > 1 && a->in_names[1][0] && !keel_ir_const_f32(m, g, a->in_names[1], &p[0]))
        return false;
      if (a->n_in > 2 && a->in_names[2][0] && !keel_ir_const_f32(m, g, a->in_names[2], &p[1]))
        return false;
      return true;
    default: return true;
  }
}

/* Folds the activation node a (and, for a gated form, the Mul g) into
 * the Conv c, which then writes the last one's output. */
static keel_status fold(keel_model *m, keel_graph *g, keel_node *c, const keel_node *a,
                        const keel_node *gate, const char *act, const float p[2]) {
  keel_arena *ar = m->arena;
  keel_attr *attrs = keel_arena_array(ar, (size_t)c->n_attr + 2, sizeof(keel_attr));
  float *params = keel_arena_array(ar, 2, sizeof(float));
  if (!attrs || !params) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fusing into graph '%s'", g->path);
  if (c->n_attr) memcpy(attrs, c->attrs, (size_t)c->n_attr * sizeof(keel_attr));
  params[0] = p[0], params[1] = p[1];
  attrs[c->n_attr] = (keel_attr){.name = KEEL_ACT_ATTR, .type = KEEL_ATTR_STRING, .s = act,
                                 .slen = strlen(act)};
  attrs[c->n_attr + 1] = (keel_attr){.name = KEEL_ACT_PARAMS, .type = KEEL_ATTR_FLOATS, .n = 2,
                                     .floats = params};
  KEEL_TRY(keel_ir_fuse_label(ar, c, a));
  if (gate) KEEL_TRY(keel_ir_fuse_label(ar, c, gate));
  c->attrs = attrs, c->n_attr += 2;
  c->out_names[0] = (gate ? gate : a)->out_names[0];
  return KEEL_OK;
}

/* Conv, or the layout pass's NhwcConv (whose activation comes after its
 * residual Z, as the Add it folded came before the activation). */
static bool is_conv(const keel_node *n) {
  bool conv = (!strcmp(n->op_type, "Conv") && !n->domain[0]) ||
              (!strcmp(n->op_type, "NhwcConv") && !strcmp(n->domain, "ai.keel.internal"));
  return conv && n->n_out == 1 && !keel_node_attr(n, KEEL_ACT_ATTR);
}

/* x * act(x): Conv output c read by exactly two nodes, a Sigmoid or
 * HardSigmoid a and a Mul of c by a's output (read by nothing else).
 * Returns the Mul's index, or -1. */
static int32_t gate_of(const keel_model *m, const keel_graph *g, const char *c, int32_t *ai) {
  (void)m;
  if (keel_ir_uses(g, c) != 2) return -1;
  int32_t a = -1, mul = -1;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    bool reads = false;
    for (int32_t k = 0; k < n->n_in; k++) reads |= !strcmp(n->in_names[k], c);
    if (!reads || n->domain[0] || n->n_out != 1 || n->n_subs) continue;
    if ((!strcmp(n->op_type, "Sigmoid") || !strcmp(n->op_type, "HardSigmoid")) && n->n_in == 1) a = i;
    else if (!strcmp(n->op_type, "Mul") && n->n_in == 2) mul = i;
  }
  if (a < 0 || mul < 0) return -1;
  const keel_node *mn = &g->nodes[mul];
  const char *ao = g->nodes[a].out_names[0];
  bool pair = (!strcmp(mn->in_names[0], c) && !strcmp(mn->in_names[1], ao)) ||
              (!strcmp(mn->in_names[1], c) && !strcmp(mn->in_names[0], ao));
  if (!pair || keel_ir_only_reader(g, ao) != mul) return -1;
  *ai = a;
  return mul;
}

/* Drops nodes j and (if >= 0) k of g, keeping the node at i; returns i's
 * new index. */
static keel_status drop2(keel_model *m, keel_graph *g, int32_t *i, int32_t j, int32_t k) {
  int32_t hi = KEEL_MAX(j, k), lo = KEEL_MIN(j, k);
  KEEL_TRY(keel_graph_replace_node(m->arena, g, hi, NULL, 0));
  if (hi < *i) (*i)--;
  if (lo >= 0) {
    KEEL_TRY(keel_graph_replace_node(m->arena, g, lo, NULL, 0));
    if (lo < *i) (*i)--;
  }
  return KEEL_OK;
}

static keel_status fuse_graph(keel_model *m, keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *c = &g->nodes[i];
    if (!is_conv(c) || !c->out_names[0][0]) continue;
    float p[2];
    int32_t a, mul = gate_of(m, g, c->out_names[0], &a);
    if (mul >= 0) { /* SiLU, or hardswish as HardSigmoid then Mul */
      const keel_node *an = &g->nodes[a];
      bool silu = !strcmp(an->op_type, "Sigmoid");
      if (!silu && !act_params(m, g, an, KEEL_ACT_HSIGMOID, p)) continue;
      if (silu) p[0] = p[1] = 0;
      KEEL_TRY(fold(m, g, c, an, &g->nodes[mul], silu ? "SiLU" : "HardSigmoidMul", p));
      KEEL_TRY(drop2(m, g, &i, a, mul));
      continue;
    }
    int32_t j = keel_ir_only_reader(g, c->out_names[0]);
    if (j < 0) continue;
    const keel_node *an = &g->nodes[j];
    keel_act_kind kind = keel_act_from_op(an->op_type);
    if (!kind || kind >= KEEL_ACT_SILU || an->domain[0] || an->n_out != 1 ||
        strcmp(an->in_names[0], c->out_names[0]) || !act_params(m, g, an, kind, p))
      continue;
    KEEL_TRY(fold(m, g, c, an, NULL, an->op_type, p));
    KEEL_TRY(drop2(m, g, &i, j, -1));
  }
  return KEEL_OK;
}

keel_status keel_pass_fuse_activation(keel_model *m) {
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(fuse_graph(m, m->graphs[i]));
  return KEEL_OK;
}
