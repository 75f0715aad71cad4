/* pass_train.c: the training graph, the first pass of the list (pass.h).
 *
 * It runs only on a model that carries a training spec (m->train, set by
 * the trainer in src/train/ before the passes run). It:
 *   1. finds the loss among the main graph's outputs;
 *   2. decides which initializers are trainable: every float initializer of
 *      the main graph that the loss depends on through differentiable
 *      inputs (each derivative rule's mask, autodiff/autodiff.h: a Reshape's shape
 *      initializer is not trainable), minus the spec's freeze list. An op
 *      without a rule lets every input through, so the autodiff driver
 *      reports it by name when the gradient reaches it. Values a node's
 *      sub-graphs read from outside count as its inputs;
 *   3. turns each trainable initializer into a graph input (appended after
 *      the data inputs): the trainer feeds its own mutable buffer there at
 *      every step, and the mapped bytes are no longer read;
 *   4. appends one Gradient node (ai.onnx.preview.training; xs = the
 *      parameters, y = the loss) whose outputs become extra graph outputs.
 * The autodiff pass, next in the list, expands the Gradient node into the
 * backward graph. The spec's `out` fields tell the trainer where things
 * are.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "autodiff/autodiff.h"
#include "passes/pass.h"

static keel_status oom(void) { return keel_err(KEEL_ERR_OUT_OF_MEMORY, "building the training graph"); }

/* ============================================================ names */

/* A growable list of borrowed names (the worklist of the walk). */
/* A growable list of borrowed names (the worklist of the walk), each with
 * the node of the main graph whose sub-graphs read it (NULL: read directly
 * by main-graph nodes along the way). */
typedef struct names {
  const char **v;
  const keel_node **via;
  int32_t n, cap;
  const keel_node *cur;        /* `via` of the names pushed now           */
} names;

static keel_status names_push(names *l, const char *s) {
  if (l->n == l->cap) {
    int32_t nc = l->cap ? l->cap * 2 : 64;
    const char **q = keel_sys_realloc(l->v, (size_t)l->cap * sizeof *q, (size_t)nc * sizeof *q);
    if (q) l->v = q;
    const keel_node **w = q ? keel_sys_realloc(l->via, (size_t)l->cap * sizeof *w, (size_t)nc * sizeof *w) : NULL;
    if (!w) return oom();
    l->via = w;
    l->cap = nc;
  }
  l->via[l->n] = l->cur;
  l->v[l->n++] = s;
  return KEEL_OK;
}

static void names_free(names *l) {
  keel_sys_free(l->v, (size_t)l->cap * sizeof *l->v);
  keel_sys_free(l->via, (size_t)l->cap * sizeof *l->via);
}

/* True when graph g itself defines `name` (input, initializer, node output). */
static bool defines(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_in; i++)
    if (!strcmp(g->in_names[i], name)) return true;
  for (int32_t i = 0; i < g->ld.n_init; i++)
    if (!strcmp(g->ld.init_names[i], name)) return true;
  return keel_ir_producer(g, name) >= 0;
}

/* Pushes the names sub-graph `sub` (and the graphs inside it) reads from
 * outside: the captures of the node that owns it. */
static keel_status free_names(const keel_graph *sub, const keel_graph *top, names *out) {
  for (int32_t i = 0; i < sub->n_nodes; i++) {
    const keel_node *n = &sub->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) {
      const char *nm = n->in_names[k];
      bool local = false;
      for (const keel_graph *g = sub; g != top && !local; g = g->parent) local = defines(g, nm);
      if (nm[0] && !local) KEEL_TRY(names_push(out, nm));
    }
    for (int32_t s = 0; s < n->n_subs; s++) KEEL_TRY(free_names(n->subs[s], top, out));
  }
  for (int32_t i = 0; i < sub->n_out; i++) {
    bool local = false;
    for (const keel_graph *g = sub; g != top && !local; g = g->parent) local = defines(g, sub->out_names[i]);
    if (!local) KEEL_TRY(names_push(out, sub->out_names[i]));
  }
  return KEEL_OK;
}

/* ====================================================== the walk */

/* The initializer entry of the main graph named `name` (not a folded
 * Constant), or -1. */
static int32_t init_entry(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->ld.n_init; i++)
    if (!g->ld.init_is_node[i] && !strcmp(g->ld.init_names[i], name)) return i;
  return -1;
}

/* Pushes the inputs of node n through which a gradient can flow. */
static keel_status push_inputs(const keel_graph *g, const keel_node *n, names *work) {
  const ad_rule *r = ad_rule_find(n->op_type, n->domain);
  if (r && !r->fn) return KEEL_OK; /* no gradient flows through it */
  for (int32_t k = 0; k < n->n_in; k++)
    if (n->in_names[k][0] && (!r || (k < 64 && ((r->diff >> k) & 1u))))
      KEEL_TRY(names_push(work, n->in_names[k]));
  const keel_node *keep = work->cur;
  if (!keep && n->n_subs) work->cur = n;
  keel_status st = KEEL_OK;
  for (int32_t s = 0; !st && s < n->n_subs; s++) st = free_names(n->subs[s], g, work);
  work->cur = keep;
  return st;
}

/* Marks in `hit` (per initializer entry) the float initializers the loss
 * depends on through differentiable inputs, and in via[e] the control-flow
 * node whose sub-graphs alone lead to it (NULL once a path of main-graph
 * inputs does). A node reached on both kinds of path is walked on each. */
static keel_status walk(const keel_model *m, const char *loss, uint8_t *hit, const keel_node **via) {
  const keel_graph *g = m->main;
  uint8_t *seen = keel_sys_calloc((size_t)g->n_nodes + 1, 1);
  names work = {0};
  keel_status st = seen ? names_push(&work, loss) : oom();
  while (!st && work.n) {
    const char *nm = work.v[--work.n];
    const keel_node *by = work.via[work.n];
    int32_t e = init_entry(g, nm);
    if (e >= 0) {
      if (m->consts[g->ld.init_consts[e]].dtype != KEEL_FLOAT) continue;
      via[e] = hit[e] && !via[e] ? NULL : by;
      hit[e] = 1;
      continue;
    }
    int32_t p = keel_ir_producer(g, nm);
    uint8_t bit = by ? 2 : 1; /* walked through a sub-graph / directly */
    if (p < 0 || (seen[p] & bit)) continue;
    seen[p] |= bit;
    work.cur = by;
    st = push_inputs(g, &g->nodes[p], &work);
    work.cur = NULL;
  }
  names_free(&work);
  keel_sys_free(seen, (size_t)g->n_nodes + 1);
  return st;
}

/* ================================================== checking the spec */

static keel_status find_loss(const keel_graph *g, const char *loss, int32_t *out) {
  if (!loss || !loss[0]) return keel_err(KEEL_ERR_INVALID_ARG, "training: no loss output named");
  for (int32_t i = 0; i < g->n_out; i++)
    if (!strcmp(g->out_names[i], loss)) {
      *out = i;
      return KEEL_OK;
    }
  char list[512] = "";
  for (int32_t i = 0; i < g->n_out; i++) {
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, "%s'%s'", i ? ", " : "", g->out_names[i]);
  }
  return keel_err(KEEL_ERR_INVALID_ARG, "training: the model has no output '%s' to use as the loss (its outputs: %s)",
                  loss, list);
}

/* Every freeze name must be an initializer of the main graph. */
static keel_status check_freeze(const keel_graph *g, const keel_train_spec *sp) {
  for (int32_t i = 0; i < sp->n_freeze; i++)
    if (init_entry(g, sp->freeze[i]) < 0)
      return keel_err(KEEL_ERR_INVALID_ARG, "training: cannot freeze '%s': the main graph has no initializer of that name",
                      sp->freeze[i]);
  return KEEL_OK;
}

static bool frozen(const keel_train_spec *sp, const char *name) {
  for (int32_t i = 0; i < sp->n_freeze; i++)
    if (!strcmp(sp->freeze[i], name)) return true;
  return false;
}

/* ================================================== editing the graph */

/* A tensor type with the shape of constant t. */
static keel_status type_of(keel_arena *a, const keel_tensor *t, keel_type *ty) {
  memset(ty, 0, sizeof *ty);
  ty->kind = KEEL_TYPE_TENSOR;
  ty->dtype = t->dtype;
  ty->rank = t->rank;
  ty->dims = keel_arena_array(a, (size_t)t->rank + 1, sizeof(int64_t));
  ty->dim_params = keel_arena_array(a, (size_t)t->rank + 1, sizeof(char *));
  if (!ty->dims || !ty->dim_params) return oom();
  memcpy(ty->dims, t->shape, sizeof(int64_t) * (size_t)t->rank);
  return KEEL_OK;
}

/* Drops initializer entry e of g (the parameter becomes an input). */
static void drop_init(keel_graph *g, int32_t e) {
  for (int32_t i = e + 1; i < g->ld.n_init; i++) {
    g->ld.init_names[i - 1] = g->ld.init_names[i];
    g->ld.init_consts[i - 1] = g->ld.init_consts[i];
    g->ld.init_is_node[i - 1] = g->ld.init_is_node[i];
    g->ld.init_node_at[i - 1] = g->ld.init_node_at[i];
  }
  g->ld.n_init--;
}

/* New input list: the old inputs that are not parameters, then the
 * parameters. */
static keel_status add_inputs(keel_model *m, keel_train_spec *sp) {
  keel_graph *g = m->main;
  int32_t n = g->n_in + sp->n_params, k = 0;
  const char **nm = keel_arena_array(m->arena, (size_t)n + 1, sizeof(char *));
  keel_type *ty = keel_arena_array(m->arena, (size_t)n + 1, sizeof(keel_type));
  if (!nm || !ty) return oom();
  for (int32_t i = 0; i < g->n_in; i++) {
    bool is_param = false;
    for (int32_t p = 0; p < sp->n_params && !is_param; p++) is_param = !strcmp(sp->params[p], g->in_names[i]);
    if (is_param) continue; /* an initializer listed as an input (IR < 4) */
    nm[k] = g->in_names[i];
    ty[k++] = g->in_types[i];
  }
  sp->first_param_input = k;
  for (int32_t p = 0; p < sp->n_params; p++) {
    nm[k] = sp->params[p];
    KEEL_TRY(type_of(m->arena, &m->consts[sp->param_consts[p]], &ty[k++]));
  }
  g->in_names = nm;
  g->in_types = ty;
  g->n_in = k;
  return KEEL_OK;
}

/* A name for the gradient of `param` that nothing in the graph uses. */
static const char *grad_name(keel_model *m, const char *param) {
  char buf[600];
  for (int i = 0; i < 1000; i++) {
    if (i) snprintf(buf, sizeof buf, "%s.keel_grad%d", param, i);
    else snprintf(buf, sizeof buf, "%s.keel_grad", param);
    if (!defines(m->main, buf) && !keel_ir_uses(m->main, buf)) return keel_arena_strdup(m->arena, buf);
  }
  return NULL;
}

/* The Gradient node and its outputs as extra graph outputs. */
static keel_status add_gradient(keel_model *m, keel_train_spec *sp) {
  keel_graph *g = m->main;
  keel_arena *a = m->arena;
  int32_t np = sp->n_params, no = g->n_out + np;
  keel_node gn = {.name = KEEL_TRAIN_GRADIENT_NODE, .op_type = "Gradient", .domain = AD_TRAINING,
                  .opset = 1, .graph = g, .n_in = np, .n_out = np, .n_attr = 2};
  gn.in_names = keel_arena_array(a, (size_t)np, sizeof(char *));
  gn.out_names = keel_arena_array(a, (size_t)np, sizeof(char *));
  gn.subs = keel_arena_array(a, 0, sizeof(keel_graph *));
  gn.attrs = keel_arena_array(a, 2, sizeof(keel_attr));
  const char **on = keel_arena_array(a, (size_t)no + 1, sizeof(char *));
  keel_type *ot = keel_arena_array(a, (size_t)no + 1, sizeof(keel_type));
  if (!gn.in_names || !gn.out_names || !gn.subs || !gn.attrs || !on || !ot) return oom();
  memcpy(on, g->out_names, sizeof(char *) * (size_t)g->n_out);
  memcpy(ot, g->out_types, sizeof(keel_type) * (size_t)g->n_out);
  for (int32_t p = 0; p < np; p++) {
    gn.in_names[p] = sp->params[p];
    if (!(gn.out_names[p] = grad_name(m, sp->params[p]))) return oom();
    on[g->n_out + p] = gn.out_names[p];
    KEEL_TRY(type_of(a, &m->consts[sp->param_consts[p]], &ot[g->n_out + p]));
  }
  gn.attrs[0] = (keel_attr){.name = "xs", .type = KEEL_ATTR_STRINGS, .n = np, .strings = gn.in_names};
  gn.attrs[1] = (keel_attr){.name = "y", .type = KEEL_ATTR_STRING, .s = sp->loss, .slen = strlen(sp->loss)};
  sp->first_grad_output = g->n_out;
  g->out_names = on;
  g->out_types = ot;
  g->n_out = no;
  keel_node with[2] = {g->nodes[g->n_nodes - 1], gn};
  return keel_graph_replace_node(a, g, g->n_nodes - 1, with, 2);
}

/* The parameters: trainable entries in file order, moved out of the
 * initializer list. */
static keel_status take_params(keel_model *m, keel_train_spec *sp, const uint8_t *hit,
                               const keel_node *const *via) {
  keel_graph *g = m->main;
  int32_t n = 0;
  for (int32_t i = 0; i < g->ld.n_init; i++) n += hit[i] && !frozen(sp, g->ld.init_names[i]);
  if (!n)
    return keel_err(KEEL_ERR_INVALID_ARG, "training: nothing to train: the loss '%s' depends on no float "
                    "initializer of the main graph through differentiable inputs (or all are frozen)", sp->loss);
  sp->params = keel_arena_array(m->arena, (size_t)n, sizeof(char *));
  sp->param_consts = keel_arena_array(m->arena, (size_t)n, sizeof(int32_t));
  sp->param_via = keel_arena_array(m->arena, (size_t)n, sizeof(char *));
  if (!sp->params || !sp->param_consts || !sp->param_via) return oom();
  sp->n_params = 0;
  for (int32_t i = 0; i < g->ld.n_init; i++)
    if (hit[i] && !frozen(sp, g->ld.init_names[i])) {
      char lb[256];
      if (via[i] && !(sp->param_via[sp->n_params] = keel_arena_strdup(m->arena, keel_node_label(via[i], lb, sizeof lb))))
        return oom();
      sp->params[sp->n_params] = g->ld.init_names[i];
      sp->param_consts[sp->n_params++] = g->ld.init_consts[i];
    }
  for (int32_t p = 0; p < n; p++) drop_init(g, init_entry(g, sp->params[p]));
  return KEEL_OK;
}

keel_status keel_pass_train(keel_model *m) {
  keel_train_spec *sp = m->train;
  if (!sp) return KEEL_OK;
  keel_graph *g = m->main;
  KEEL_TRY(find_loss(g, sp->loss, &sp->loss_output));
  KEEL_TRY(check_freeze(g, sp));
  size_t n_hit = (size_t)g->ld.n_init + 1; /* take_params shortens the list */
  uint8_t *hit = keel_sys_calloc(n_hit, 1);
  const keel_node **via = keel_sys_calloc(n_hit, sizeof *via);
  keel_status st = hit && via ? walk(m, sp->loss, hit, via) : oom();
  if (!st) st = take_params(m, sp, hit, via);
  keel_sys_free(hit, n_hit);
  keel_sys_free(via, n_hit * sizeof *via);
  if (!st) st = add_inputs(m, sp);
  if (!st) st = add_gradient(m, sp);
  return st;
}
