/* pass.c: the pass pipeline (pass.h): the list, in order, and its runner. */
#include "passes/pass.h"

#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/scope.h"
#include "passes/shard.h"

static const keel_pass g_passes[] = {
    {"train", keel_pass_train, false},
    {"autodiff", keel_ir_autodiff, false},
    {"shard", keel_pass_shard, false}, /* a no-op unless m->shard is set */
    {"fold-identity", keel_pass_fold_identity, true},
    {"fold-constants", keel_pass_fold_constants, true},
    {"canon-reshape", keel_pass_canon_reshape, true},
    {"cse", keel_pass_cse, true},
    {"remove-dead", keel_pass_remove_dead, true},
    {"fold-pad", keel_pass_fold_pad, true},
    {"canon-fusedconv", keel_pass_canon_fusedconv, true},
    {"fold-batchnorm", keel_pass_fold_batchnorm, true},
    {"canon-activation", keel_pass_canon_activation, true},
    {"canon-transpose", keel_pass_canon_transpose, true},
    {"fuse-layernorm", keel_pass_fuse_layernorm, true},
    {"fuse-gelu", keel_pass_fuse_gelu, true},
    {"fuse-attention", keel_pass_fuse_attention, true},
    {"causal-mask", keel_pass_causal_mask, true},
    {"attention-qkv", keel_pass_attention_qkv, true},
    {"fuse-matmul", keel_pass_fuse_matmul, true},
    {"sink-concat", keel_pass_sink_concat, true},
    {"split-concat-conv", keel_pass_split_concat_conv, true},
    {"lift-conv1d", keel_pass_lift_conv1d, true},
    {"layout", keel_pass_layout, true},
    {"fuse-activation", keel_pass_fuse_activation, true},
    {"place", keel_pass_place, false}, /* a no-op unless m->gpu is set */
};

static keel_status fuse_graph(keel_model *m, keel_graph *g, keel_fuse_fn try_at) {
  size_t cap = (size_t)g->n_nodes + 1;
  bool *drop = keel_sys_calloc(cap, sizeof(bool));
  if (!drop) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "graph '%s'", g->path);
  keel_status st = KEEL_OK;
  bool any = false;
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    bool fused = false;
    if (!drop[i]) st = try_at(m, g, i, drop, &fused);
    any |= fused;
  }
  if (!st && any) st = keel_graph_remove_nodes(m->arena, g, drop);
  keel_sys_free(drop, cap * sizeof(bool));
  return st;
}

keel_status keel_pass_fuse_all(keel_model *m, keel_fuse_fn try_at) {
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(fuse_graph(m, m->graphs[i], try_at));
  return KEEL_OK;
}

const char *keel_pass_fresh(keel_model *m, const keel_graph *g, const char *base, const char *tag) {
  char buf[600];
  for (int i = 0; i < 1000; i++) {
    snprintf(buf, sizeof buf, i ? "%s.%s%d" : "%s.%s", base, tag, i);
    if (keel_ir_const_of(m, g, buf) < 0 && keel_ir_producer(g, buf) < 0 && !keel_ir_uses(g, buf))
      return keel_arena_strdup(m->arena, buf);
  }
  return NULL;
}

const char *const keel_pass_unary_ops[] = {
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu",
    "Softplus", "Softsign", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Gelu",
    "Mish", "Ceil", "Floor", "Round", "Sign", "Sin", "Cos", "ThresholdedRelu", "Identity",
    "Clip", NULL};
const char *const keel_pass_nary_ops[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum",
                                          "Mean", "Pow", "PRelu", NULL};

bool keel_pass_op_in(const keel_node *n, const char *const *list) {
  if (n->domain[0]) return false;
  for (; *list; list++)
    if (!strcmp(n->op_type, *list)) return true;
  return false;
}

keel_status keel_node_list_push(keel_node_list *l, const keel_node *n) {
  if (l->n == l->cap) {
    int32_t cap = KEEL_MAX(2 * l->cap, 64);
    keel_node *v = keel_sys_realloc(l->v, sizeof(keel_node) * (size_t)l->cap,
                                    sizeof(keel_node) * (size_t)cap);
    if (!v) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "%s in graph '%s'", l->pass, l->g->path);
    l->v = v, l->cap = cap;
  }
  l->v[l->n++] = *n;
  return KEEL_OK;
}

void keel_node_list_free(keel_node_list *l) {
  keel_sys_free(l->v, sizeof(keel_node) * (size_t)l->cap);
  l->v = NULL, l->n = l->cap = 0;
}

int32_t keel_pass_direct_reads(const keel_graph *g, const char *name) {
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_in; k++) n += !strcmp(g->nodes[i].in_names[k], name);
  return n;
}

bool keel_pass_any_node(const keel_model *m, keel_node_pred pred) {
  for (int32_t i = 0; i < m->n_graphs; i++)
    for (int32_t j = 0; j < m->graphs[i]->n_nodes; j++)
      if (pred(m, m->graphs[i], &m->graphs[i]->nodes[j])) return true;
  return false;
}

bool keel_pass_overlaps(const bool *drop, const int32_t *nodes, int n) {
  for (int k = 0; k < n; k++)
    if (drop[nodes[k]]) return true;
  return false;
}

keel_status keel_ir_passes(keel_model *m, bool optimize) {
  for (size_t i = 0; i < KEEL_COUNTOF(g_passes); i++) {
    if (g_passes[i].optimizing && !optimize) continue;
    keel_status st = g_passes[i].run(m);
    if (st) return keel_err_prefix(st, "pass %s", g_passes[i].name);
  }
  return KEEL_OK;
}

keel_status keel_ir_passes_through(keel_model *m, const char *last) {
  for (size_t i = 0; i < KEEL_COUNTOF(g_passes); i++) {
    if (g_passes[i].optimizing) continue;
    keel_status st = g_passes[i].run(m);
    if (st) return keel_err_prefix(st, "pass %s", g_passes[i].name);
    if (!strcmp(g_passes[i].name, last)) break;
  }
  return KEEL_OK;
}
