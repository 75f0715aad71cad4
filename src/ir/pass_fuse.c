/* pass_fuse.c: fuse-activation, the first fusion pass: a Conv whose only
 * reader is an elementwise activation (Relu, LeakyRelu, Clip with constant
 * bounds, HardSigmoid, HardSwish, Sigmoid, Tanh) takes the activation over:
 * it writes the activation's output itself and applies it in place
 * (ops/activation.h), one pass over memory less. The activation node
 * disappears; the Conv keeps its name and lists the activation in
 * `fused`, so messages and traces name both.
 *
 * Not fused: a Conv output that is a graph output, is read twice, or is
 * read by a sub-graph; Clip bounds that are computed at run time.
 */
#include <math.h>
#include <stdio.h>

#include "../base/status.h"
#include "../ops/activation.h"
#include "pass.h"

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

static keel_status fold(keel_model *m, keel_graph *g, keel_node *c, const keel_node *a,
                        keel_act_kind kind, const float p[2]) {
  keel_arena *ar = m->arena;
  keel_attr *attrs = keel_arena_array(ar, (size_t)c->n_attr + 2, sizeof(keel_attr));
  float *params = keel_arena_array(ar, 2, sizeof(float));
  const char **fused = keel_arena_array(ar, (size_t)c->n_fused + 1, sizeof(char *));
  char lb[256];
  const char *label = keel_arena_strdup(ar, keel_node_label(a, lb, sizeof lb));
  if (!attrs || !params || !fused || !label)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fusing into graph '%s'", g->path);
  memcpy(attrs, c->attrs, (size_t)c->n_attr * sizeof(keel_attr));
  params[0] = p[0], params[1] = p[1];
  attrs[c->n_attr] = (keel_attr){.name = KEEL_ACT_ATTR, .type = KEEL_ATTR_STRING,
                                 .s = a->op_type, .slen = strlen(a->op_type)};
  attrs[c->n_attr + 1] = (keel_attr){.name = KEEL_ACT_PARAMS, .type = KEEL_ATTR_FLOATS, .n = 2,
                                     .floats = params};
  memcpy(fused, c->fused, (size_t)c->n_fused * sizeof(char *));
  fused[c->n_fused] = label;
  c->attrs = attrs, c->n_attr += 2;
  c->fused = fused, c->n_fused++;
  c->out_names[0] = a->out_names[0];
  (void)kind;
  return KEEL_OK;
}

static bool is_conv(const keel_node *n) {
  return !strcmp(n->op_type, "Conv") && !n->domain[0] && n->n_out == 1 &&
         !keel_node_attr(n, KEEL_ACT_ATTR);
}

static keel_status fuse_graph(keel_model *m, keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *c = &g->nodes[i];
    if (!is_conv(c) || !c->out_names[0][0]) continue;
    int32_t j = keel_ir_only_reader(g, c->out_names[0]);
    if (j < 0) continue;
    const keel_node *a = &g->nodes[j];
    keel_act_kind kind = keel_act_from_op(a->op_type);
    float p[2];
    if (!kind || a->domain[0] || a->n_out != 1 || strcmp(a->in_names[0], c->out_names[0]) ||
        !act_params(m, g, a, kind, p))
      continue;
    KEEL_TRY(fold(m, g, c, a, kind, p));
    KEEL_TRY(keel_graph_replace_node(m->arena, g, j, NULL, 0));
    if (j < i) i--; /* the Conv moved down one place */
  }
  return KEEL_OK;
}

keel_status keel_pass_fuse_activation(keel_model *m) {
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(fuse_graph(m, m->graphs[i]));
  return KEEL_OK;
}
