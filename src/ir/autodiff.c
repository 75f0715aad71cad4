/* autodiff.c: the Gradient operator (ai.onnx.preview.training) as a graph
 * transformation: reverse-mode differentiation at load time.
 *
 * Gradient(xs, zs, y) names a region of its own graph: the nodes that lie on
 * a path from the tensors in xs and zs to y. This pass replaces the Gradient
 * node with ordinary nodes:
 *   1. the forward region, evaluated at the Gradient node's inputs. When an
 *      input is the very tensor its xs/zs entry names (the usual case), the
 *      existing forward values are reused and nothing is recomputed;
 *      otherwise the region is cloned with renamed values.
 *   2. the backward pass: dy/dy = ones, then for each region node in reverse
 *      order its vector-Jacobian product (the rules table below), summing
 *      the gradient contributions of values used more than once, and
 *      reducing broadcast operands back to their shapes (SumToShape).
 *   3. one output per xs entry (zeros where y does not depend on it).
 * After the pass the graph has no Gradient node: the planner orders the new
 * nodes and frees their values at last use like any others.
 *
 * It works on names (before ir/scope.c resolves them). Helper kernels the
 * rules need and ONNX lacks (OnesLike, ZerosLike, SumToShape, the
 * activation gradients, MatMulGrad) live in ops/grad.c under the domain
 * "ai.keel.internal", which a model file cannot use without importing it.
 */
#include <stdio.h>

#include "../base/status.h"
#include "../mem/sysmem.h"
#include "scope.h"

#define GRAD_DOMAIN "ai.onnx.preview.training"
#define INTERNAL "ai.keel.internal"

/* ============================================================ builder */

/* New nodes for one Gradient node, collected before they join the graph. */
typedef struct builder {
  keel_arena *a;
  keel_graph *g;
  const keel_node *grad;        /* the Gradient node being replaced      */
  int64_t opset;                /* ai.onnx opset of the model             */
  keel_node *nodes;
  int32_t n, cap;
  int32_t counter;              /* for fresh value names                  */
} builder;

static keel_status oom(void) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "building a Gradient graph");
}

static const char *fresh(builder *b, const char *hint) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s#%d/grad%d/%s", b->grad->name[0] ? b->grad->name : "Gradient",
           b->grad->index, b->counter++, hint);
  return keel_arena_strdup(b->a, buf);
}

/* Appends a node; `ins`/`outs` are arrays of names ("" = omitted). */
static keel_status emit(builder *b, const char *op, const char *domain, int nin,
                        const char *const *ins, int nout, const char *const *outs,
                        keel_node **made) {
  if (b->n == b->cap) {
    int32_t nc = b->cap ? b->cap * 2 : 32;
    keel_node *q = keel_sys_realloc(b->nodes, (size_t)b->cap * sizeof *q, (size_t)nc * sizeof *q);
    if (!q) return oom();
    b->nodes = q;
    b->cap = nc;
  }
  keel_node *n = &b->nodes[b->n++];
  memset(n, 0, sizeof *n);
  n->name = fresh(b, op);
  n->op_type = op;
  n->domain = domain;
  n->opset = domain[0] ? 1 : b->opset;
  n->graph = b->g;
  n->n_in = nin;
  n->n_out = nout;
  n->in_names = keel_arena_array(b->a, (size_t)nin, sizeof(char *));
  n->out_names = keel_arena_array(b->a, (size_t)nout, sizeof(char *));
  n->subs = keel_arena_array(b->a, 0, sizeof(keel_graph *));
  if (!n->name || !n->in_names || !n->out_names || !n->subs) return oom();
  memcpy(n->in_names, ins, sizeof(char *) * (size_t)nin);
  memcpy(n->out_names, outs, sizeof(char *) * (size_t)nout);
  if (made) *made = n;
  return KEEL_OK;
}

/* out = op(a) or op(a, b): a fresh value name for one-output nodes. */
static keel_status op1(builder *b, const char *op, const char *dom, const char *a,
                       const char *bb, const char **out) {
  const char *o = fresh(b, "v");
  if (!o) return oom();
  const char *ins[2] = {a, bb};
  KEEL_TRY(emit(b, op, dom, bb ? 2 : 1, ins, 1, &o, NULL));
  *out = o;
  return KEEL_OK;
}

/* ============================================================ gradients */

/* Gradient accumulation: name -> gradient value name. */
typedef struct gmap {
  const char **name, **grad;
  int32_t n, cap;
} gmap;

static const char *gmap_get(const gmap *m, const char *name) {
  for (int32_t i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) return m->grad[i];
  return NULL;
}

/* Adds `g` to the gradient of `name` (a Sum node when one exists). */
static keel_status gmap_add(builder *b, gmap *m, const char *name, const char *g) {
  for (int32_t i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) return op1(b, "Add", "", m->grad[i], g, &m->grad[i]);
  if (m->n == m->cap) {
    int32_t nc = m->cap ? m->cap * 2 : 16;
    const char **a = keel_sys_realloc(m->name, (size_t)m->cap * sizeof(char *), (size_t)nc * sizeof(char *));
    if (!a) return oom();
    m->name = a;
    const char **c = keel_sys_realloc(m->grad, (size_t)m->cap * sizeof(char *), (size_t)nc * sizeof(char *));
    if (!c) return oom();
    m->grad = c;
    m->cap = nc;
  }
  m->name[m->n] = name;
  m->grad[m->n++] = g;
  return KEEL_OK;
}

static void gmap_free(gmap *m) {
  keel_sys_free(m->name, (size_t)m->cap * sizeof(char *));
  keel_sys_free(m->grad, (size_t)m->cap * sizeof(char *));
}

/* Adds grad `g` for input `x`, reduced to x's shape first. */
static keel_status give(builder *b, gmap *m, const char *x, const char *g, bool bcast) {
  if (!x[0]) return KEEL_OK;
  if (bcast) KEEL_TRY(op1(b, "SumToShape", INTERNAL, g, x, &g));
  return gmap_add(b, m, x, g);
}

/* The vector-Jacobian product of node n (forward values named as in n),
 * given gy = d(y)/d(n's output 0). */
/* Inputs a rule reads: 2 for the binary ops and MatMul, 1 otherwise. */
static int32_t rule_arity(const char *op) {
  static const char *const binary[] = {"Sub", "Mul", "Div", "MatMul"};
  for (size_t i = 0; i < KEEL_COUNTOF(binary); i++)
    if (!strcmp(op, binary[i])) return 2;
  return 1;
}

static keel_status vjp(builder *b, gmap *m, const keel_node *n, const char *gy) {
  const char *op = n->op_type, *const *x = n->in_names, *y, *t, *u;
  if (n->domain[0]) goto unsupported;
  if (n->n_in < rule_arity(op) || n->n_out < 1) {
    char lb[256];
    return keel_err(KEEL_ERR_INVALID_MODEL, "Gradient: node %s has %d inputs, its rule needs %d",
                    keel_node_label(n, lb, sizeof lb), n->n_in, rule_arity(op));
  }
  y = n->out_names[0];
  if (!strcmp(op, "Add") || !strcmp(op, "Sum")) {
    for (int32_t i = 0; i < n->n_in; i++) KEEL_TRY(give(b, m, x[i], gy, true));
  } else if (!strcmp(op, "Sub")) {
    KEEL_TRY(give(b, m, x[0], gy, true));
    KEEL_TRY(op1(b, "Neg", "", gy, NULL, &t));
    KEEL_TRY(give(b, m, x[1], t, true));
  } else if (!strcmp(op, "Mul")) {
    KEEL_TRY(op1(b, "Mul", "", gy, x[1], &t));
    KEEL_TRY(give(b, m, x[0], t, true));
    KEEL_TRY(op1(b, "Mul", "", gy, x[0], &u));
    KEEL_TRY(give(b, m, x[1], u, true));
  } else if (!strcmp(op, "Div")) { /* d(a/b)/db = -(a/b)/b */
    KEEL_TRY(op1(b, "Div", "", gy, x[1], &t));
    KEEL_TRY(give(b, m, x[0], t, true));
    KEEL_TRY(op1(b, "Mul", "", t, y, &u));
    KEEL_TRY(op1(b, "Neg", "", u, NULL, &u));
    KEEL_TRY(give(b, m, x[1], u, true));
  } else if (!strcmp(op, "Neg")) {
    KEEL_TRY(op1(b, "Neg", "", gy, NULL, &t));
    KEEL_TRY(give(b, m, x[0], t, false));
  } else if (!strcmp(op, "Identity")) {
    KEEL_TRY(give(b, m, x[0], gy, false));
  } else if (!strcmp(op, "Exp")) {
    KEEL_TRY(op1(b, "Mul", "", gy, y, &t));
    KEEL_TRY(give(b, m, x[0], t, false));
  } else if (!strcmp(op, "Log")) {
    KEEL_TRY(op1(b, "Div", "", gy, x[0], &t));
    KEEL_TRY(give(b, m, x[0], t, false));
  } else if (!strcmp(op, "Relu") || !strcmp(op, "Sigmoid") || !strcmp(op, "Tanh")) {
    char name[32];
    snprintf(name, sizeof name, "%sGrad", op);
    const char *iname = keel_arena_strdup(b->a, name);
    if (!iname) return oom();
    KEEL_TRY(op1(b, iname, INTERNAL, gy, strcmp(op, "Relu") ? y : x[0], &t));
    KEEL_TRY(give(b, m, x[0], t, false));
  } else if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
             !strcmp(op, "Unsqueeze")) {
    KEEL_TRY(op1(b, "Shape", "", x[0], NULL, &t));
    KEEL_TRY(op1(b, "Reshape", "", gy, t, &u));
    KEEL_TRY(give(b, m, x[0], u, false));
  } else if (!strcmp(op, "MatMul")) {
    const char *outs[2] = {fresh(b, "dA"), fresh(b, "dB")}, *ins[3] = {gy, x[0], x[1]};
    if (!outs[0] || !outs[1]) return oom();
    KEEL_TRY(emit(b, "MatMulGrad", INTERNAL, 3, ins, 2, outs, NULL));
    KEEL_TRY(give(b, m, x[0], outs[0], false));
    KEEL_TRY(give(b, m, x[1], outs[1], false));
  } else {
    goto unsupported;
  }
  return KEEL_OK;
unsupported:;
  char lb[256];
  return keel_err(KEEL_ERR_UNSUPPORTED,
                  "Gradient: no derivative rule for node %s (domain '%s') on the path to y",
                  keel_node_label(n, lb, sizeof lb), n->domain);
}

/* ============================================================== regions */

typedef struct region {
  const keel_graph *g;
  const char *const *vars;      /* xs then zs                             */
  int32_t n_vars;
  uint8_t *in;                  /* node i is in the region                */
} region;

static int32_t producer(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_out; k++)
      if (!strcmp(g->nodes[i].out_names[k], name)) return i;
  return -1;
}

static bool is_var(const region *r, const char *name) {
  for (int32_t i = 0; i < r->n_vars; i++)
    if (!strcmp(r->vars[i], name)) return true;
  return false;
}

/* 1 when `name` depends on a variable (memoized per node: 0 unknown,
 * 1 yes, 2 no). Marks the nodes on the way. Recursion depth is bounded by
 * the graph's depth; models here are small, and cycles were refused. */
static bool depends(region *r, uint8_t *memo, const char *name, int depth) {
  if (is_var(r, name)) return true;
  int32_t p = producer(r->g, name);
  if (p < 0 || depth > 100000) return false;
  if (memo[p]) return memo[p] == 1;
  memo[p] = 2;
  bool any = false;
  for (int32_t k = 0; k < r->g->nodes[p].n_in; k++)
    if (r->g->nodes[p].in_names[k][0]) any |= depends(r, memo, r->g->nodes[p].in_names[k], depth + 1);
  memo[p] = any ? 1 : 2;
  if (any) r->in[p] = 1;
  return any;
}

/* Region nodes in an order where producers come first (the file order of
 * a valid ONNX graph, checked: a producer after its consumer is refused). */
static keel_status region_order(const region *r, int32_t *order, int32_t *n) {
  *n = 0;
  for (int32_t i = 0; i < r->g->n_nodes; i++) {
    if (!r->in[i]) continue;
    const keel_node *nd = &r->g->nodes[i];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t p = nd->in_names[k][0] && !is_var(r, nd->in_names[k]) ? producer(r->g, nd->in_names[k]) : -1;
      if (p > i && r->in[p])
        return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient: the region to differentiate is not in topological order in the file");
    }
    order[(*n)++] = i;
  }
  return KEEL_OK;
}

/* ========================================================== one Gradient */

typedef struct grad_spec {
  const char **vars;            /* xs then zs                             */
  int32_t n_xs, n_vars;
  const char *y;
} grad_spec;

static keel_status read_spec(keel_arena *a, const keel_node *n, grad_spec *s) {
  const keel_attr *xs = keel_node_attr(n, "xs"), *zs = keel_node_attr(n, "zs"),
                  *y = keel_node_attr(n, "y");
  if (!xs || xs->type != KEEL_ATTR_STRINGS || !y || !y->s)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Gradient needs the attributes xs and y");
  int32_t nz = zs && zs->type == KEEL_ATTR_STRINGS ? zs->n : 0;
  s->n_xs = xs->n;
  s->n_vars = xs->n + nz;
  s->y = y->s;
  if (n->n_in != s->n_vars || n->n_out > s->n_xs)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "Gradient has %d inputs and %d outputs for %d xs and %d zs", n->n_in,
                    n->n_out, xs->n, nz);
  s->vars = keel_arena_array(a, (size_t)s->n_vars, sizeof(char *));
  if (!s->vars) return oom();
  for (int32_t i = 0; i < s->n_vars; i++) s->vars[i] = i < xs->n ? xs->strings[i] : zs->strings[i - xs->n];
  return KEEL_OK;
}

/* When the Gradient node is fed other tensors than its xs/zs name, the
 * region is evaluated again on those: clones of the region's nodes with
 * every value renamed. `rename` maps old names to new ones. */
static const char *renamed(const gmap *rn, const char *name) {
  const char *r = gmap_get(rn, name);
  return r ? r : name;
}

static keel_status clone_region(builder *b, const grad_spec *s, const int32_t *order,
                                int32_t n_order, gmap *rn) {
  for (int32_t i = 0; i < s->n_vars; i++)
    KEEL_TRY(gmap_add(b, rn, s->vars[i], b->grad->in_names[i]));
  for (int32_t p = 0; p < n_order; p++) {
    const keel_node *src = &b->g->nodes[order[p]];
    if (src->n_subs) return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient through control flow");
    const char *ins[64], *outs[64];
    if (src->n_in > 64 || src->n_out > 64) return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient: node too wide");
    for (int32_t k = 0; k < src->n_in; k++) ins[k] = renamed(rn, src->in_names[k]);
    for (int32_t k = 0; k < src->n_out; k++) {
      outs[k] = src->out_names[k][0] ? fresh(b, src->out_names[k]) : "";
      if (!outs[k]) return oom();
      if (src->out_names[k][0]) KEEL_TRY(gmap_add(b, rn, src->out_names[k], outs[k]));
    }
    keel_node *c;
    KEEL_TRY(emit(b, src->op_type, src->domain, src->n_in, ins, src->n_out, outs, &c));
    c->opset = src->opset;
    c->attrs = src->attrs;
    c->n_attr = src->n_attr;
  }
  return KEEL_OK;
}

/* Emits the backward pass over the (possibly cloned) region. */
static keel_status backward(builder *b, const grad_spec *s, const int32_t *order,
                            int32_t n_order, const gmap *rn, gmap *gm) {
  const char *y = renamed(rn, s->y), *ones;
  KEEL_TRY(op1(b, "OnesLike", INTERNAL, y, NULL, &ones));
  KEEL_TRY(gmap_add(b, gm, y, ones));
  for (int32_t p = n_order - 1; p >= 0; p--) {
    keel_node n = b->g->nodes[order[p]]; /* a copy with renamed values */
    const char *ins[64], *outs[64];
    if (n.n_in > 64 || n.n_out > 64) return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient: node too wide");
    for (int32_t k = 0; k < n.n_in; k++) ins[k] = renamed(rn, n.in_names[k]);
    for (int32_t k = 0; k < n.n_out; k++) outs[k] = renamed(rn, n.out_names[k]);
    n.in_names = ins;
    n.out_names = outs;
    for (int32_t k = 1; k < n.n_out; k++)
      if (outs[k][0] && gmap_get(gm, outs[k]))
        return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient through output %d of a %s node", k, n.op_type);
    const char *gy = n.n_out ? gmap_get(gm, outs[0]) : NULL;
    if (gy) KEEL_TRY(vjp(b, gm, &n, gy));
  }
  return KEEL_OK;
}

static keel_status outputs(builder *b, const grad_spec *s, const gmap *rn, const gmap *gm) {
  for (int32_t i = 0; i < b->grad->n_out; i++) {
    const char *out = b->grad->out_names[i];
    if (!out[0]) continue;
    const char *g = gmap_get(gm, renamed(rn, s->vars[i]));
    const char *ins[1] = {g ? g : b->grad->in_names[i]};
    KEEL_TRY(emit(b, g ? "Identity" : "ZerosLike", g ? "" : INTERNAL, 1, ins, 1, &out, NULL));
  }
  return KEEL_OK;
}

static keel_status differentiate(builder *b) {
  grad_spec s;
  KEEL_TRY(read_spec(b->a, b->grad, &s));
  const keel_graph *g = b->g;
  uint8_t *memo = keel_sys_calloc((size_t)g->n_nodes + 1, 2);
  int32_t *order = keel_sys_calloc((size_t)g->n_nodes + 1, sizeof(int32_t)), n_order = 0;
  gmap rn = {0}, gm = {0};
  keel_status st = memo && order ? KEEL_OK : oom();
  region r = {g, s.vars, s.n_vars, memo ? memo + g->n_nodes + 1 : NULL};
  if (!st && !depends(&r, memo, s.y, 0) && !is_var(&r, s.y) && producer(g, s.y) < 0)
    st = keel_err(KEEL_ERR_INVALID_MODEL, "Gradient: y '%s' is not a value of the graph", s.y);
  if (!st) st = region_order(&r, order, &n_order);
  bool same = true;
  for (int32_t i = 0; i < s.n_vars; i++) same &= !strcmp(b->grad->in_names[i], s.vars[i]);
  if (!st && !same) st = clone_region(b, &s, order, n_order, &rn);
  if (!st) st = backward(b, &s, order, n_order, &rn, &gm);
  if (!st) st = outputs(b, &s, &rn, &gm);
  gmap_free(&rn);
  gmap_free(&gm);
  keel_sys_free(memo, ((size_t)g->n_nodes + 1) * 2);
  keel_sys_free(order, ((size_t)g->n_nodes + 1) * sizeof(int32_t));
  return st;
}

/* ============================================================== graphs */

static keel_status graph_pass(keel_model *m, keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Gradient") || strcmp(n->domain, GRAD_DOMAIN)) continue;
    builder b = {.a = m->arena, .g = g, .grad = n, .opset = keel_model_opset(m, "")};
    keel_status st = differentiate(&b);
    if (!st) st = keel_graph_replace_node(m->arena, g, i, b.nodes, b.n);
    keel_sys_free(b.nodes, (size_t)b.cap * sizeof(keel_node));
    char lb[256];
    if (st) return keel_err_prefix(st, "graph '%s': node %s", g->path, keel_node_label(n, lb, sizeof lb));
    i += b.n - 1;
  }
  return KEEL_OK;
}

keel_status keel_ir_autodiff(keel_model *m) {
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(graph_pass(m, m->graphs[i]));
  return KEEL_OK;
}
