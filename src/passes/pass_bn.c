/* pass_bn.c: fold-batchnorm. A Conv whose only reader is an inference
 * BatchNormalization with constant parameters takes it over:
 *
 *   s  = scale / sqrt(var + epsilon)           (per output channel m)
 *   W' = W * s[m]                              (every weight of channel m)
 *   B' = (B - mean) * s + bias                 (B: the Conv's bias, or 0)
 *
 * computed in double and rounded once, written as two new constants; the
 * Conv then writes the BatchNormalization's output and lists it in
 * `fused`. PyTorch's exporter folds these itself in eval mode, but
 * paddle2onnx (opset 9-11) and tf2onnx leave every BatchNormalization in
 * the graph, with its parameters as initializers or as Constant nodes:
 * the loader has already made both kinds constants (ld.init_is_node), so
 * this pass sees them alike. Runs before the fusion passes, so that the
 * Conv's activation and residual fold after it as for an exported Conv.
 *
 * Not folded: a Conv output read by anything else or a graph output, a
 * BatchNormalization in training mode (training_mode=1, or opset < 9 with
 * spatial=0, or extra outputs in use), parameters computed at run time or
 * not float32, a channel count that does not match W's.
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "passes/pass.h"

/* A float32 constant of n elements, as seen from g, or NULL. */
static const float *const_vec(const keel_model *m, const keel_graph *g, const char *name, int64_t n) {
  if (!name || !name[0]) return NULL;
  int32_t c = keel_ir_const_of(m, g, name);
  if (c < 0) return NULL;
  const keel_tensor *t = &m->consts[c];
  if (t->dtype != KEEL_FLOAT || keel_tensor_numel(t) != n || (n && !t->data)) return NULL;
  return t->data;
}

/* Whether bn is an inference BatchNormalization keel may fold. */
static bool inference_bn(const keel_node *bn) {
  if (strcmp(bn->op_type, "BatchNormalization") || bn->domain[0] || bn->n_in != 5 || bn->n_subs) return false;
  for (int32_t k = 1; k < bn->n_out; k++)
    if (bn->out_names[k][0]) return false; /* running statistics wanted: training */
  const keel_attr *a = keel_node_attr(bn, "training_mode");
  if (a && a->i) return false;
  a = keel_node_attr(bn, "spatial");
  if (bn->opset < 9 && a && !a->i) return false;
  return true;
}

/* Folds node bi (the BatchNormalization) into node ci (its Conv). Returns
 * true when it did. */
static keel_status fold(keel_model *m, keel_graph *g, int32_t ci, int32_t bi, bool *done) {
  keel_node *c = &g->nodes[ci];
  const keel_node *bn = &g->nodes[bi];
  *done = false;
  int32_t wc = keel_ir_const_of(m, g, c->in_names[1]);
  if (wc < 0) return KEEL_OK;
  const keel_tensor *w = &m->consts[wc];
  if (w->dtype != KEEL_FLOAT || w->rank < 3 || !w->data) return KEEL_OK;
  int64_t mch = w->shape[0], per = keel_tensor_numel(w) / (mch ? mch : 1);
  const float *scale = const_vec(m, g, bn->in_names[1], mch), *beta = const_vec(m, g, bn->in_names[2], mch);
  const float *mean = const_vec(m, g, bn->in_names[3], mch), *var = const_vec(m, g, bn->in_names[4], mch);
  const float *bias = c->n_in > 2 && c->in_names[2][0] ? const_vec(m, g, c->in_names[2], mch) : NULL;
  if (!scale || !beta || !mean || !var || (c->n_in > 2 && c->in_names[2][0] && !bias)) return KEEL_OK;
  const keel_attr *ea = keel_node_attr(bn, "epsilon");
  double eps = ea ? ea->f : 1e-5;
  float *nw = keel_arena_alloc(m->arena, sizeof(float) * (size_t)(mch * per) + 1, 64);
  float *nb = keel_arena_alloc(m->arena, sizeof(float) * (size_t)mch + 1, 64);
  const char *wn = keel_pass_fresh(m, g, c->in_names[1], "bn_folded");
  const char *bname = keel_pass_fresh(m, g, c->out_names[0], "bn_bias");
  const char **ins = keel_arena_array(m->arena, 3, sizeof(char *));
  if (!nw || !nb || !wn || !bname || !ins)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding a BatchNormalization in graph '%s'", g->path);
  const float *wd = w->data;
  for (int64_t o = 0; o < mch; o++) {
    double s = (double)scale[o] / sqrt((double)var[o] + eps);
    for (int64_t k = 0; k < per; k++) nw[o * per + k] = (float)((double)wd[o * per + k] * s);
    nb[o] = (float)(((bias ? (double)bias[o] : 0.0) - (double)mean[o]) * s + (double)beta[o]);
  }
  keel_tensor tw = *w, tb = {.dtype = KEEL_FLOAT, .rank = 1, .shape = {mch}};
  tw.data = nw, tw.buf = NULL;
  tb.data = nb;
  KEEL_TRY(keel_ir_add_const(m, g, wn, &tw, NULL));
  KEEL_TRY(keel_ir_add_const(m, g, bname, &tb, NULL));
  c = &g->nodes[ci]; /* re-fetch: nothing moved, but stay safe */
  ins[0] = c->in_names[0], ins[1] = wn, ins[2] = bname;
  c->in_names = ins;
  c->n_in = 3;
  KEEL_TRY(keel_ir_fuse_label(m->arena, c, bn));
  c->out_names[0] = g->nodes[bi].out_names[0];
  *done = true;
  return KEEL_OK;
}

static keel_status graph_pass(keel_model *m, keel_graph *g, int32_t *folded) {
  bool *drop = NULL;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *c = &g->nodes[i];
    if (strcmp(c->op_type, "Conv") || c->domain[0] || c->n_in < 2 || c->n_out != 1 || c->n_subs) continue;
    int32_t bi = keel_ir_only_reader(g, c->out_names[0]);
    if (bi < 0 || !inference_bn(&g->nodes[bi]) || strcmp(g->nodes[bi].in_names[0], c->out_names[0])) continue;
    bool done;
    KEEL_TRY(fold(m, g, i, bi, &done));
    if (!done) continue;
    if (!drop && !(drop = keel_arena_array(m->arena, (size_t)g->n_nodes + 1, sizeof(bool))))
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding BatchNormalization in graph '%s'", g->path);
    drop[bi] = true;
    (*folded)++;
  }
  return drop ? keel_graph_remove_nodes(m->arena, g, drop) : KEEL_OK;
}

keel_status keel_pass_fold_batchnorm(keel_model *m) {
  int32_t folded = 0;
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(graph_pass(m, m->graphs[i], &folded));
  return KEEL_OK;
}
