/* pass_canon.c: canon-activation. Activations that exporters spell out in
 * elementary ops become the one ONNX op they compute, so that the fusion
 * passes after it (fuse-matmul, layout, fuse-activation) see one form:
 *
 *   HardSwish(x) = x * Clip(x + 3, 0, 6) / 6, as
 *     Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(., 6)   (paddle2onnx: Mul first)
 *     Add(x, 3) -> Clip(0, 6) -> Div(., 6) -> Mul(x, .)   (PyTorch before opset 14)
 *   with the Div written as a Mul by 1/6 too, operands of Add and Mul in
 *   either order, Clip's bounds as attributes (opset < 11) or constant
 *   inputs (a Relu6).
 *   HardSigmoid(x; 1/6, 1/2) = Clip(x + 3, 0, 6) / 6, the same without the
 *   product by x.
 *
 * The replacement keeps the last node's output name and lists the nodes it
 * took in `fused`. The ONNX op computes x * max(0, min(1, x/6 + 1/2)): the
 * same function, rounded once less or more (within 2 ulp of the spelled-out
 * form). A chain whose intermediate values are read by anything else, are
 * graph outputs, or whose constants are computed at run time is left as it
 * is.
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "passes/pass.h"

static bool is_op(const keel_node *n, const char *op, int n_in) {
  return !strcmp(n->op_type, op) && !n->domain[0] && n->n_in >= n_in && n->n_out == 1 && !n->n_subs;
}

static bool near(float v, double want) { return fabs((double)v - want) <= 1e-6 * fabs(want); }

/* The operand of binary node n other than constant `want`; NULL unless one
 * operand is a float scalar constant equal to want. */
static const char *other_than_const(const keel_model *m, const keel_graph *g, const keel_node *n, double want) {
  float v;
  if (keel_ir_const_f32(m, g, n->in_names[1], &v) && near(v, want)) return n->in_names[0];
  if (keel_ir_const_f32(m, g, n->in_names[0], &v) && near(v, want)) return n->in_names[1];
  return NULL;
}

/* A Clip of [0, 6]. */
static bool clip06(const keel_model *m, const keel_graph *g, const keel_node *c) {
  if (!is_op(c, "Clip", 1)) return false;
  float lo = -INFINITY, hi = INFINITY;
  if (c->opset < 11) {
    const keel_attr *a = keel_node_attr(c, "min"), *b = keel_node_attr(c, "max");
    if (!a || !b) return false;
    lo = a->f, hi = b->f;
  } else {
    if (c->n_in < 3 || !keel_ir_const_f32(m, g, c->in_names[1], &lo) ||
        !keel_ir_const_f32(m, g, c->in_names[2], &hi))
      return false;
  }
  return lo == 0.0f && hi == 6.0f;
}

/* "/ 6": Div(v, 6) or Mul(v, 1/6) in either order; the divided operand, or
 * NULL. */
static const char *div6(const keel_model *m, const keel_graph *g, const keel_node *n) {
  float v;
  if (is_op(n, "Div", 2)) return keel_ir_const_f32(m, g, n->in_names[1], &v) && v == 6.0f ? n->in_names[0] : NULL;
  if (is_op(n, "Mul", 2)) return other_than_const(m, g, n, 1.0 / 6.0);
  return NULL;
}

/* The one reader of `name` in g (index), or -1. */
static int32_t reader(const keel_graph *g, const char *name) { return keel_ir_only_reader(g, name); }

/* x * `mid` (Mul, either order); true when n is that product. */
static bool times_x(const keel_node *n, const char *x, const char *mid) {
  return is_op(n, "Mul", 2) && ((!strcmp(n->in_names[0], x) && !strcmp(n->in_names[1], mid)) ||
                                (!strcmp(n->in_names[1], x) && !strcmp(n->in_names[0], mid)));
}

typedef struct match {
  int32_t nodes[4], n;         /* the chain, the last one kept            */
  const char *x;
  bool swish;                  /* HardSwish, else HardSigmoid             */
} match;

/* The chain that starts at Add node ai, or false. */
static bool match_at(const keel_model *m, const keel_graph *g, int32_t ai, match *mt) {
  const keel_node *a = &g->nodes[ai];
  if (!is_op(a, "Add", 2)) return false;
  const char *x = other_than_const(m, g, a, 3.0);
  if (!x) return false;
  int32_t ci = reader(g, a->out_names[0]);
  if (ci < 0 || !clip06(m, g, &g->nodes[ci]) || strcmp(g->nodes[ci].in_names[0], a->out_names[0])) return false;
  const char *c = g->nodes[ci].out_names[0];
  int32_t k = reader(g, c);
  if (k < 0) return false;
  const keel_node *n1 = &g->nodes[k];
  *mt = (match){.nodes = {ai, ci, k}, .n = 3, .x = x};
  if (times_x(n1, x, c)) { /* Mul first, then / 6 */
    int32_t d = reader(g, n1->out_names[0]);
    const char *dv = d >= 0 ? div6(m, g, &g->nodes[d]) : NULL;
    if (!dv || strcmp(dv, n1->out_names[0])) return false;
    mt->nodes[mt->n++] = d;
    mt->swish = true;
    return true;
  }
  const char *dv = div6(m, g, n1);
  if (!dv || strcmp(dv, c)) return false;
  int32_t p = reader(g, n1->out_names[0]);
  if (p >= 0 && times_x(&g->nodes[p], x, n1->out_names[0])) { /* / 6 first, then x * */
    mt->nodes[mt->n++] = p;
    mt->swish = true;
    return true;
  }
  mt->swish = false; /* Clip(x + 3, 0, 6) / 6 alone: HardSigmoid */
  return true;
}

/* The last node of the chain becomes the ONNX op; the others go. */
static keel_status replace(keel_model *m, keel_graph *g, const match *mt, bool *drop) {
  keel_arena *ar = m->arena;
  keel_node *last = &g->nodes[mt->nodes[mt->n - 1]];
  const char **ins = keel_arena_array(ar, 1, sizeof(char *));
  keel_attr *attrs = keel_arena_array(ar, 2, sizeof(keel_attr));
  if (!ins || !attrs) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "canonicalizing graph '%s'", g->path);
  for (int32_t i = 0; i < mt->n - 1; i++) {
    KEEL_TRY(keel_ir_fuse_label(ar, last, &g->nodes[mt->nodes[i]]));
    drop[mt->nodes[i]] = true;
  }
  ins[0] = mt->x;
  /* the node keeps its name and output; it becomes the activation, at the
   * opset where ONNX has it (HardSwish: 14) */
  last->op_type = mt->swish ? "HardSwish" : "HardSigmoid";
  last->in_names = ins;
  last->n_in = 1;
  last->opset = mt->swish ? KEEL_MAX(last->opset, 14) : KEEL_MAX(last->opset, 6);
  last->n_attr = 0;
  if (!mt->swish) {
    attrs[0] = (keel_attr){.name = "alpha", .type = KEEL_ATTR_FLOAT, .f = 1.0f / 6.0f};
    attrs[1] = (keel_attr){.name = "beta", .type = KEEL_ATTR_FLOAT, .f = 0.5f};
    last->attrs = attrs;
    last->n_attr = 2;
  }
  return KEEL_OK;
}

static keel_status graph_pass(keel_model *m, keel_graph *g) {
  bool *drop = NULL;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    match mt;
    if ((drop && drop[i]) || !match_at(m, g, i, &mt)) continue;
    if (!drop && !(drop = keel_arena_array(m->arena, (size_t)g->n_nodes + 1, sizeof(bool))))
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "canonicalizing graph '%s'", g->path);
    bool taken = false;
    for (int32_t k = 0; k < mt.n; k++) taken |= drop[mt.nodes[k]];
    if (!taken) KEEL_TRY(replace(m, g, &mt, drop));
  }
  return drop ? keel_graph_remove_nodes(m->arena, g, drop) : KEEL_OK;
}

keel_status keel_pass_canon_activation(keel_model *m) {
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(graph_pass(m, m->graphs[i]));
  return KEEL_OK;
}
