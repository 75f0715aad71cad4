/* pass_reshape.c: canon-reshape. A Reshape whose shape is computed at run
 * time from the shapes of other values, the chain PyTorch's exporters
 * write for every view with a dynamic batch or length,
 *
 *   s = Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [4], [64])
 *   y = Reshape(x, s)
 *
 * gets a constant shape that means the same on every run: Reshape's own
 * 0 (copy the input's dim at that index) and -1 (the one dim it infers),
 *
 *   y = Reshape(x, [0, 0, 4, 64])
 *
 * and the chain, read by nothing else, goes with remove-dead (the next
 * pass). keel's symbolic shape inference (ir/shapes.h) follows the chain;
 * it runs here in its general form (keel_shapes_infer_general): every
 * graph-input dim a symbol of its own, so no integer or equality it gives
 * rests on a declared input shape, and the constant is right for every
 * input shape the model runs with, not only the declared ones. Entry i of
 * the shape becomes
 *   - its integer, where the inference gives one (the exporter's own 0
 *     and -1 included);
 *   - 0, where it is the same symbolic dim as the input's dim i (and the
 *     node does not set allowzero);
 *   - -1, for at most one entry left: Reshape infers it from the element
 *     count, which is what the computed value was on every run where the
 *     node succeeds.
 * Otherwise (an unknown entry, two left for -1, an unknown count of
 * entries) the node stays as written. On the held-out GPT and BERT
 * exports with dynamic axes (bench/models/gen_exporters.py) every Reshape
 * of the attention heads takes a constant, and their Shape -> Gather ->
 * Unsqueeze -> Concat chains leave the graph.
 *
 * First, under the same inference, a node whose every output is a small
 * integer tensor (int64 or int32, rank 0 or 1) with every element an
 * integer the inference proves (a channel count read by Shape -> Gather,
 * a split point Div and Mul make of it: torch.chunk's Slice bounds in a
 * ShuffleNet export) becomes that constant, counted with fold-constants'
 * folds: whatever the inputs' shapes, the node computes it on every run
 * where it succeeds. A value that depends on an input's dims keeps its
 * node.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shapes.h"
#include "passes/pass.h"

/* The constant shape for Reshape node n, in c[0..*k); false when the
 * inference does not pin it down. */
static bool constant_shape(const keel_shapes *S, const keel_graph *g, const keel_node *n,
                           int64_t *c, int *k) {
  const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
  const keel_sshape *s = keel_shapes_find(S, g, n->in_names[1]);
  if (!s || s->rank != 1 || s->nv < 0 || s->nv > KEEL_SHAPE_MAXV || s->nv > KEEL_MAX_RANK)
    return false;
  const keel_attr *az = keel_node_attr(n, "allowzero");
  bool allowzero = n->opset >= 14 && az && az->i;
  int infer = -1;
  for (int i = 0; i < s->nv; i++) {
    keel_sdim v = s->v[i];
    if (v.sym == KEEL_SYM_KNOWN) {
      c[i] = v.add;
      if (v.add == -1) {
        if (infer >= 0) return false; /* the node would fail anyway */
        infer = i;
      }
      if (v.add < -1) return false;
      continue;
    }
    if (v.sym == KEEL_SYM_UNKNOWN) return false;
    if (!allowzero && x && x->rank > i && keel_sdim_eq(v, x->d[i])) {
      c[i] = 0;
      continue;
    }
    if (infer >= 0) return false;
    infer = i, c[i] = -1;
  }
  *k = s->nv;
  return true;
}

static keel_status graph_pass(keel_model *m, const keel_shapes *S, keel_graph *g, int32_t *done) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    if (n->domain[0] || strcmp(n->op_type, "Reshape") || n->opset < 5 || n->n_in != 2 ||
        n->n_out != 1 || !n->in_names[0][0] || !n->in_names[1][0] ||
        keel_ir_const_of(m, g, n->in_names[1]) >= 0)
      continue;
    int64_t c[KEEL_MAX_RANK];
    int k;
    if (!constant_shape(S, g, n, c, &k)) continue;
    int64_t *data = keel_arena_array(m->arena, (size_t)(k ? k : 1), sizeof(int64_t));
    const char **ins = keel_arena_array(m->arena, 3, sizeof(char *));
    const char *name = keel_pass_fresh(m, g, n->out_names[0], "shape");
    if (!data || !ins || !name)
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "canon-reshape in graph '%s'", g->path);
    if (k) memcpy(data, c, sizeof(int64_t) * (size_t)k);
    keel_tensor t = {.dtype = KEEL_INT64, .rank = 1, .shape = {k}, .data = data};
    KEEL_TRY(keel_ir_add_const(m, g, name, &t, NULL));
    ins[0] = n->in_names[0], ins[1] = name;
    n->in_names = ins;
    (*done)++;
  }
  return KEEL_OK;
}

/* The constant node n of g computes, when the inference pins every
 * element of every output of it: the tensors, in the model's arena, into
 * ts[0..n_out). */
static keel_status known_outputs(keel_model *m, const keel_shapes *S, const keel_graph *g,
                                 const keel_node *n, keel_tensor *ts, bool *ok) {
  *ok = false;
  if (n->n_subs || n->n_out < 1 || keel_pass_op_in(n, (const char *const[]){"Constant", NULL}))
    return KEEL_OK;
  for (int32_t o = 0; o < n->n_out; o++) {
    const keel_sshape *v = n->out_names[o][0] ? keel_shapes_find(S, g, n->out_names[o]) : NULL;
    if (!v || (v->dtype != KEEL_INT64 && v->dtype != KEEL_INT32) || v->rank < 0 || v->rank > 1 ||
        v->nv < 0 || v->nv > KEEL_SHAPE_MAXV || (v->rank == 0 && v->nv != 1) ||
        (v->rank == 1 && (v->d[0].sym != KEEL_SYM_KNOWN || v->d[0].add != v->nv)))
      return KEEL_OK;
    for (int i = 0; i < v->nv; i++)
      if (v->v[i].sym != KEEL_SYM_KNOWN) return KEEL_OK;
  }
  for (int32_t o = 0; o < n->n_out; o++) {
    const keel_sshape *v = keel_shapes_find(S, g, n->out_names[o]);
    size_t es = v->dtype == KEEL_INT64 ? sizeof(int64_t) : sizeof(int32_t);
    void *data = keel_arena_alloc(m->arena, es * (size_t)(v->nv ? v->nv : 1), 64);
    if (!data) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "canon-reshape in graph '%s'", g->path);
    for (int i = 0; i < v->nv; i++) {
      if (v->dtype == KEEL_INT64) ((int64_t *)data)[i] = v->v[i].add;
      else if (v->v[i].add < INT32_MIN || v->v[i].add > INT32_MAX) return KEEL_OK; /* no wrap */
      else ((int32_t *)data)[i] = (int32_t)v->v[i].add;
    }
    ts[o] = (keel_tensor){.dtype = v->dtype, .rank = v->rank, .shape = {v->nv}, .data = data};
  }
  *ok = true;
  return KEEL_OK;
}

/* Every node of g whose outputs the inference pins becomes constants. */
static keel_status fold_known(keel_model *m, const keel_shapes *S, keel_graph *g) {
  size_t outs = 1;
  for (int32_t i = 0; i < g->n_nodes; i++) outs += (size_t)g->nodes[i].n_out;
  size_t cap = (size_t)g->n_nodes + 1;
  bool *drop = keel_sys_calloc(cap, sizeof(bool));
  const char **names = keel_sys_calloc(outs, sizeof(char *));
  keel_tensor *ts = keel_sys_calloc(outs, sizeof(keel_tensor));
  keel_status st = drop && names && ts
                       ? KEEL_OK
                       : keel_err(KEEL_ERR_OUT_OF_MEMORY, "canon-reshape in graph '%s'", g->path);
  int32_t n_made = 0;
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    const keel_node *n = &g->nodes[i];
    bool ok = false;
    st = known_outputs(m, S, g, n, ts + n_made, &ok);
    if (st || !ok) continue;
    for (int32_t o = 0; o < n->n_out; o++) /* every output named (known_outputs) */
      names[n_made++] = n->out_names[o];
    drop[i] = true;
    m->fold.folded++;
  }
  if (!st && n_made) st = keel_ir_add_consts(m, g, n_made, names, ts, NULL);
  if (!st && n_made) st = keel_graph_remove_nodes(m->arena, g, drop);
  keel_sys_free(names, outs * sizeof(char *));
  keel_sys_free(ts, outs * sizeof(keel_tensor));
  keel_sys_free(drop, cap * sizeof(bool));
  return st;
}

/* Quick test before paying for the inference: a Reshape whose shape is
 * not a constant, or a Shape node. */
static bool worth_it(const keel_model *m, const keel_graph *g, const keel_node *n) {
  if (!n->domain[0] && !strcmp(n->op_type, "Reshape") && n->n_in == 2 && n->in_names[1][0] &&
      keel_ir_const_of(m, g, n->in_names[1]) < 0)
    return true;
  return !n->domain[0] && !strcmp(n->op_type, "Shape");
}

keel_status keel_pass_canon_reshape(keel_model *m) {
  if (!keel_pass_any_node(m, worth_it)) return KEEL_OK;
  keel_shapes *S;
  KEEL_TRY(keel_shapes_infer_general(m, &S));
  keel_status st = KEEL_OK;
  int32_t done = 0;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = fold_known(m, S, m->graphs[i]);
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = graph_pass(m, S, m->graphs[i], &done);
  keel_shapes_free(S);
  return st;
}
