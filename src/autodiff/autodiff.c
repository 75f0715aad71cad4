/* autodiff.c: the Gradient operator (ai.onnx.preview.training) as a graph
 * transformation: reverse-mode differentiation at load time.
 *
 * Gradient(xs, zs, y) names a region of its own graph: the nodes that lie on
 * a path from the tensors in xs and zs to y through differentiable inputs
 * (each rule says which inputs are; autodiff/autodiff.h). This pass replaces the
 * Gradient node with ordinary nodes:
 *   1. the forward region, evaluated at the Gradient node's inputs. When an
 *      input is the very tensor its xs/zs entry names (the usual case), the
 *      existing forward values are reused and nothing is recomputed;
 *      otherwise the region is cloned with renamed values.
 *   2. the backward pass: dy/dy = ones, then for each region node in reverse
 *      order its rule (the vector-Jacobian product, grad_*.c), summing the
 *      gradient contributions of values used more than once.
 *   3. one output per xs entry (zeros where y does not depend on it).
 * After the pass the graph has no Gradient node: the planner orders the new
 * nodes and frees their values at last use like any others.
 *
 * It works on names (before ir/scope.c resolves them). Helper kernels the
 * rules need and ONNX lacks live under the domain "ai.keel.internal",
 * which a model file cannot use without importing it: each op's beside its
 * forward kernel (ops/<family>/..._backward.c), the driver's OnesLike,
 * ZerosLike and SumToShape in ops/training/backward.c.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "autodiff/ad_driver.h"
#include "ir/scope.h"

/* ============================================================ builder */

/* New nodes for one Gradient node, collected before they join the graph. */
struct ad_builder {
  keel_arena *a;
  keel_model *m;
  keel_graph *g;
  const keel_node *grad;        /* the Gradient node being replaced      */
  int64_t opset;                /* ai.onnx opset of the model             */
  keel_node *nodes;
  int32_t n, cap;
  int32_t counter;              /* for fresh value names (the root's)     */
  struct ad_builder *root;      /* the builder of the Gradient node       */
  struct region *rg;            /* the region whose rules are running     */
  const char *reach;            /* of the gradients reaching the node whose
                                   rule runs (NULL: always; see gmap)     */
  ad_names tapes;               /* root: names holding Loop tapes          */
  ad_names keep;                /* root: outputs pruning must keep (the
                                   trainer's reach flags)                  */
};
typedef ad_builder builder;

keel_status ad_oom(void) { return keel_err(KEEL_ERR_OUT_OF_MEMORY, "building a Gradient graph"); }
static keel_status oom(void) { return ad_oom(); }
keel_arena *ad_arena(ad_builder *b) { return b->a; }
keel_model *ad_model(ad_builder *b) { return b->m; }
keel_graph *ad_graph(ad_builder *b) { return b->g; }

const char *ad_fresh(builder *b, const char *hint) {
  char buf[512];
  builder *r = b->root ? b->root : b;
  snprintf(buf, sizeof buf, "%s#%d/grad%d/%s", r->grad->name[0] ? r->grad->name : "Gradient",
           r->grad->index, r->counter++, hint);
  return keel_arena_strdup(b->a, buf);
}
static const char *fresh(builder *b, const char *hint) { return ad_fresh(b, hint); }

keel_status ad_emit(builder *b, const char *op, const char *domain, int nin,
                    const char *const *ins, int nout, const char *const *outs, keel_node **made) {
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
  if (nin) memcpy(n->in_names, ins, sizeof(char *) * (size_t)nin);
  if (nout) memcpy(n->out_names, outs, sizeof(char *) * (size_t)nout);
  if (made) *made = n;
  return KEEL_OK;
}
#define emit ad_emit

keel_status ad_op(builder *b, const char *op, const char *domain, const char *a, const char *bb,
                  const char **out, keel_node **made) {
  const char *o = fresh(b, "v");
  if (!o) return oom();
  const char *ins[2] = {a, bb};
  KEEL_TRY(emit(b, op, domain, bb ? 2 : 1, ins, 1, &o, made));
  *out = o;
  return KEEL_OK;
}

keel_status ad_op_at(builder *b, const char *op, int nin, const char *const *ins, int64_t min_opset,
                     const char **out, keel_node **made) {
  const char *o = fresh(b, "v");
  if (!o) return oom();
  keel_node *n;
  KEEL_TRY(emit(b, op, "", nin, ins, 1, &o, &n));
  if (n->opset < min_opset) n->opset = min_opset;
  if (made) *made = n;
  *out = o;
  return KEEL_OK;
}

/* out = op(a) or op(a, b): a fresh value name for one-output nodes. */
static keel_status op1(builder *b, const char *op, const char *dom, const char *a,
                       const char *bb, const char **out) {
  return ad_op(b, op, dom, a, bb, out, NULL);
}

/* A new attribute slot on n (nodes made here own their attribute arrays). */
static keel_status new_attr(builder *b, keel_node *n, const char *name, int32_t type,
                            keel_attr **out) {
  keel_attr *at = keel_arena_array(b->a, (size_t)n->n_attr + 1, sizeof *at);
  const char *nm = keel_arena_strdup(b->a, name);
  if (!at || !nm) return oom();
  if (n->n_attr) memcpy(at, n->attrs, sizeof *at * (size_t)n->n_attr);
  memset(&at[n->n_attr], 0, sizeof *at);
  at[n->n_attr].name = nm;
  at[n->n_attr].type = type;
  *out = &at[n->n_attr];
  n->attrs = at;
  n->n_attr++;
  return KEEL_OK;
}

keel_status ad_attr_i(builder *b, keel_node *n, const char *name, int64_t v) {
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, KEEL_ATTR_INT, &at));
  at->i = v;
  return KEEL_OK;
}

keel_status ad_attr_f(builder *b, keel_node *n, const char *name, float v) {
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, KEEL_ATTR_FLOAT, &at));
  at->f = v;
  return KEEL_OK;
}

keel_status ad_attr_s(builder *b, keel_node *n, const char *name, const char *v) {
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, KEEL_ATTR_STRING, &at));
  at->s = keel_arena_strdup(b->a, v);
  at->slen = strlen(v);
  return at->s ? KEEL_OK : oom();
}

keel_status ad_attr_ints(builder *b, keel_node *n, const char *name, int32_t count,
                         const int64_t *v) {
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, KEEL_ATTR_INTS, &at));
  at->n = count;
  at->ints = keel_arena_array(b->a, (size_t)count, sizeof(int64_t));
  if (!at->ints) return oom();
  if (count) memcpy(at->ints, v, sizeof(int64_t) * (size_t)count);
  return KEEL_OK;
}

keel_status ad_attr_floats(builder *b, keel_node *n, const char *name, int32_t count,
                           const float *v) {
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, KEEL_ATTR_FLOATS, &at));
  at->n = count;
  at->floats = keel_arena_array(b->a, (size_t)count, sizeof(float));
  if (!at->floats) return oom();
  if (count) memcpy(at->floats, v, sizeof(float) * (size_t)count);
  return KEEL_OK;
}

keel_status ad_attr_copy(builder *b, keel_node *n, const keel_node *from, const char *name) {
  const keel_attr *src = keel_node_attr(from, name);
  if (!src) return KEEL_OK;
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, src->type, &at));
  const char *nm = at->name;
  *at = *src; /* arrays live in the model's arena as long as the copy */
  at->name = nm;
  return KEEL_OK;
}

keel_status ad_attr_graph(builder *b, keel_node *n, const char *name, keel_graph *g) {
  keel_attr *at;
  KEEL_TRY(new_attr(b, n, name, KEEL_ATTR_GRAPH, &at));
  at->g = g;
  keel_graph **subs = keel_arena_array(b->a, (size_t)n->n_subs + 1, sizeof *subs);
  if (!subs) return oom();
  if (n->n_subs) memcpy(subs, n->subs, sizeof *subs * (size_t)n->n_subs);
  subs[n->n_subs++] = g;
  n->subs = subs;
  g->owner_attr = at->name;
  return KEEL_OK;
}

keel_status ad_const_ints(builder *b, int32_t count, const int64_t *v, const char **out) {
  keel_node *c;
  KEEL_TRY(emit(b, "Constant", "", 0, NULL, 1, (const char *[]){fresh(b, "const")}, &c));
  if (c->opset < 13) c->opset = 13;
  *out = c->out_names[0];
  return ad_attr_ints(b, c, "value_ints", count, v);
}

keel_status ad_scalar_like(builder *b, const char *like, double v, const char **out) {
  keel_node *c, *cl;
  KEEL_TRY(emit(b, "Constant", "", 0, NULL, 1, (const char *[]){fresh(b, "scalar")}, &c));
  if (c->opset < 13) c->opset = 13;
  KEEL_TRY(ad_attr_f(b, c, "value_float", (float)v));
  KEEL_TRY(ad_op(b, "CastLike", "", c->out_names[0], like, out, &cl));
  if (cl->opset < 15) cl->opset = 15;
  return KEEL_OK;
}

keel_status ad_sum_to(builder *b, const char *g, const char *x, const char **out) {
  return op1(b, "SumToShape", AD_INTERNAL, g, x, out);
}

/* ============================================================ gradients */

/* Gradient accumulation: name -> gradient value name, and whether that
 * gradient exists at run time ("reach"): NULL when it always does, else
 * the name of a bool value that says whether this run reached it. A
 * gradient is conditional only behind an If whose branches do not both
 * reach the value (the branch not taken gives zeros, where PyTorch's
 * autograd gives no gradient at all: .grad stays None and its optimizers
 * skip the parameter). Reaches combine like the paths: a sum of
 * contributions is reached when one of them is (Or), a contribution
 * through a node when one of the gradients at its outputs is (Or), and one
 * through an If's branch when the If's own gradients are and the branch
 * taken reaches it (And). Loop and Scan pass the reach of their outputs'
 * gradients on to every capture (a parameter used in a body counts as
 * reached when the loop's outputs are, also for zero iterations). */
typedef struct gmap {
  const char **name, **grad, **reach;
  int32_t n, cap;
} gmap;

static const char *gmap_reach(const gmap *m, const char *name) {
  for (int32_t i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) return m->reach[i];
  return NULL;
}

static const char *gmap_get(const gmap *m, const char *name) {
  for (int32_t i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) return m->grad[i];
  return NULL;
}

/* Reach of "a or b" (NULL: always). */
static keel_status reach_or(builder *b, const char *x, const char *y, const char **out) {
  if (!x || !y) return *out = NULL, KEEL_OK;
  if (!strcmp(x, y)) return *out = x, KEEL_OK;
  return op1(b, "Or", "", x, y, out);
}

/* Reach of "a and b" (NULL: always). */
static keel_status reach_and(builder *b, const char *x, const char *y, const char **out) {
  if (!x || !y || !strcmp(x, y)) return *out = x ? x : y, KEEL_OK;
  return op1(b, "And", "", x, y, out);
}

/* Adds `g` to the gradient of `name` (a Sum node when one exists); `reach`
 * says when g exists (NULL: always). */
static keel_status gmap_add_reach(builder *b, gmap *m, const char *name, const char *g,
                                  const char *reach) {
  for (int32_t i = 0; i < m->n; i++)
    if (!strcmp(m->name[i], name)) {
      KEEL_TRY(reach_or(b, m->reach[i], reach, &m->reach[i]));
      return op1(b, "GradAdd", AD_INTERNAL, m->grad[i], g, &m->grad[i]);
    }
  if (m->n == m->cap) {
    /* three new arrays, or none (the old ones stay as they are) */
    int32_t nc = m->cap ? m->cap * 2 : 16;
    const char **a = NULL, **c = NULL, **r = NULL;
    a = keel_sys_calloc((size_t)nc, sizeof(char *));
    c = a ? keel_sys_calloc((size_t)nc, sizeof(char *)) : NULL;
    r = c ? keel_sys_calloc((size_t)nc, sizeof(char *)) : NULL;
    if (!r) {
      keel_sys_free(a, a ? (size_t)nc * sizeof(char *) : 0);
      keel_sys_free(c, c ? (size_t)nc * sizeof(char *) : 0);
      return oom();
    }
    if (m->n) {
      memcpy(a, m->name, (size_t)m->n * sizeof(char *));
      memcpy(c, m->grad, (size_t)m->n * sizeof(char *));
      memcpy(r, m->reach, (size_t)m->n * sizeof(char *));
    }
    keel_sys_free(m->name, (size_t)m->cap * sizeof(char *));
    keel_sys_free(m->grad, (size_t)m->cap * sizeof(char *));
    keel_sys_free(m->reach, (size_t)m->cap * sizeof(char *));
    m->name = a, m->grad = c, m->reach = r;
    m->cap = nc;
  }
  m->name[m->n] = name;
  m->reach[m->n] = reach;
  m->grad[m->n++] = g;
  return KEEL_OK;
}

static keel_status gmap_add(builder *b, gmap *m, const char *name, const char *g) {
  return gmap_add_reach(b, m, name, g, NULL);
}

static void gmap_free(gmap *m) {
  keel_sys_free(m->name, (size_t)m->cap * sizeof(char *));
  keel_sys_free(m->grad, (size_t)m->cap * sizeof(char *));
  keel_sys_free(m->reach, (size_t)m->cap * sizeof(char *));
}

/* Whether a gradient can flow to input i of n (ops without a rule: every
 * input, so that the missing rule is reported when a gradient reaches it;
 * If, Loop and Scan: grad_control.c says). */
static bool diff_input(const keel_node *n, int32_t i) {
  const ad_rule *r = ad_rule_find(n->op_type, n->domain);
  if (!r) return n->n_subs ? ad_control_diff(n, i) : true;
  return i < 64 && ((r->diff >> i) & 1u);
}

/* ============================================================== regions */

/* The nodes of graph g between the variables and the seeds (the values
 * whose gradients are given), and the gradients found so far. */
typedef struct region {
  keel_graph *g;
  const char *const *vars;      /* xs then zs; or a sub-graph's inputs and captures */
  int32_t n_vars;
  const char *y;                /* for messages                           */
  uint8_t *memo;                /* per node: 0 unknown, 1 depends, 2 not  */
  uint8_t *in;                  /* node i is in the region                */
  int32_t *order, n_order;      /* region nodes, producers first          */
  gmap *gm;
  int32_t n_nodes;              /* of g when the region was made (a rule may
                                   append nodes to g: a Scan's TapeNew)    */
  keel_status st;               /* out of memory while finding captures    */
} region;

/* The rule of node n applied to the gradients reaching its outputs. `real`
 * is the node itself (n may be a renamed copy): control flow extends it. */
static keel_status vjp(builder *b, gmap *m, const keel_node *n, keel_node *real,
                       const char *const *gy, const char *y) {
  const ad_rule *r = ad_rule_find(n->op_type, n->domain);
  char lb[256];
  /* the node's contributions exist when one of its outputs' gradients does */
  const char *reach = NULL;
  bool first = true;
  for (int32_t k = 0; k < n->n_out; k++) {
    if (!gy[k]) continue;
    const char *rk = gmap_reach(m, n->out_names[k]);
    if (first) reach = rk, first = false;
    else KEEL_TRY(reach_or(b, reach, rk, &reach));
  }
  b->reach = reach;
  if (!r && n->n_subs) return ad_control_vjp(b, real, gy);
  if (!r)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "no derivative rule for node %s (domain '%s', opset %lld) in graph '%s', on "
                    "the path from the variables to '%s'",
                    keel_node_label(n, lb, sizeof lb), n->domain[0] ? n->domain : "ai.onnx",
                    (long long)n->opset, n->graph ? n->graph->path : "?", y);
  if (!r->fn) return KEEL_OK;
  if (n->n_in < r->min_in || n->n_out < 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "node %s has %d inputs, its derivative rule needs %d",
                    keel_node_label(n, lb, sizeof lb), n->n_in, r->min_in);
  const char **gx = keel_sys_calloc((size_t)n->n_in + 1, sizeof(char *));
  if (!gx) return oom();
  keel_status st = r->fn(b, n, gy, gx);
  if (st) st = keel_err_prefix(st, "gradient of node %s", keel_node_label(n, lb, sizeof lb));
  for (int32_t i = 0; !st && i < n->n_in; i++)
    if (gx[i] && n->in_names[i][0] && diff_input(n, i)) st = gmap_add_reach(b, m, n->in_names[i], gx[i], reach);
  keel_sys_free(gx, ((size_t)n->n_in + 1) * sizeof(char *));
  return st;
}

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

static bool depends(region *r, const char *name, int depth);

/* Whether a capture of node p's sub-graphs depends on a variable. */
static bool captures_depend(region *r, const keel_node *p, int depth) {
  ad_names fr = {0};
  bool any = false;
  keel_status st = ad_node_free(p, &fr);
  if (st && !r->st) r->st = st; /* reported by region_mark or the rule */
  for (int32_t i = 0; !st && i < fr.n; i++) any |= depends(r, fr.v[i], depth + 1);
  ad_names_free(&fr);
  return any;
}

/* 1 when `name` depends on a variable (memoized per node). Marks the nodes
 * on the way. A node with sub-graphs depends on what they capture too.
 * Recursion depth is bounded by the graph's depth; cycles were refused. */
static bool depends(region *r, const char *name, int depth) {
  if (is_var(r, name)) return true;
  int32_t p = producer(r->g, name);
  if (p < 0 || p >= r->n_nodes || depth > 100000) return false;
  if (r->memo[p]) return r->memo[p] == 1;
  r->memo[p] = 2;
  const keel_node *nd = &r->g->nodes[p];
  bool any = false;
  for (int32_t k = 0; k < nd->n_in; k++)
    if (nd->in_names[k][0] && diff_input(nd, k)) any |= depends(r, nd->in_names[k], depth + 1);
  if (nd->n_subs) any |= captures_depend(r, nd, depth);
  r->memo[p] = any ? 1 : 2;
  if (any) r->in[p] = 1;
  return any;
}

static keel_status region_init(region *r, keel_graph *g, const char *const *vars, int32_t n_vars,
                               const char *y, gmap *gm) {
  *r = (region){g, vars, n_vars, y, NULL, NULL, NULL, 0, gm, g->n_nodes, KEEL_OK};
  r->memo = keel_sys_calloc((size_t)g->n_nodes + 1, 2);
  r->order = keel_sys_calloc((size_t)g->n_nodes + 1, sizeof(int32_t));
  if (!r->memo || !r->order) return oom();
  r->in = r->memo + g->n_nodes + 1;
  return KEEL_OK;
}

static void region_free(region *r) {
  keel_sys_free(r->memo, ((size_t)r->n_nodes + 1) * 2);
  keel_sys_free(r->order, ((size_t)r->n_nodes + 1) * sizeof(int32_t));
}

/* Marks the nodes the seeds depend on and orders them, producers first
 * (the file order of a valid ONNX graph, checked: a producer after its
 * consumer is refused). */
static keel_status region_mark(region *r, const char *const *seeds, const char *const *sgrads,
                               int32_t n_seeds) {
  for (int32_t i = 0; i < n_seeds; i++)
    if (!sgrads || sgrads[i]) (void)depends(r, seeds[i], 0);
  if (r->st) return r->st;
  r->n_order = 0;
  for (int32_t i = 0; i < r->n_nodes; i++) {
    if (!r->in[i]) continue;
    const keel_node *nd = &r->g->nodes[i];
    for (int32_t k = 0; k < nd->n_in; k++) {
      int32_t p = nd->in_names[k][0] && !is_var(r, nd->in_names[k]) ? producer(r->g, nd->in_names[k]) : -1;
      if (p > i && r->in[p])
        return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient: the region to differentiate in graph '%s' is not in topological order in the file", r->g->path);
    }
    r->order[r->n_order++] = i;
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
  const char *r = rn ? gmap_get(rn, name) : NULL;
  return r ? r : name;
}

static keel_status clone_region(builder *b, const grad_spec *s, const int32_t *order,
                                int32_t n_order, gmap *rn) {
  for (int32_t i = 0; i < s->n_vars; i++)
    KEEL_TRY(gmap_add(b, rn, s->vars[i], b->grad->in_names[i]));
  for (int32_t p = 0; p < n_order; p++) {
    const keel_node *src = &b->g->nodes[order[p]];
    char lb[256];
    if (src->n_subs)
      return keel_err(KEEL_ERR_UNSUPPORTED,
                      "Gradient fed other tensors than its xs/zs names, through control flow "
                      "(node %s): feed the named tensors themselves",
                      keel_node_label(src, lb, sizeof lb));
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

/* Emits the backward pass over the (possibly cloned) region: the seeds'
 * gradients first, then each region node's rule in reverse order. */
static keel_status region_backward(builder *b, region *r, const char *const *seeds,
                                   const char *const *sgrads, int32_t n_seeds, const gmap *rn) {
  for (int32_t i = 0; i < n_seeds; i++)
    if (sgrads[i]) KEEL_TRY(gmap_add(b, r->gm, renamed(rn, seeds[i]), sgrads[i]));
  region *up = b->rg;
  b->rg = r;
  keel_status st = KEEL_OK;
  for (int32_t p = r->n_order - 1; p >= 0 && !st; p--) {
    keel_node *real = &r->g->nodes[r->order[p]];
    keel_node n = *real; /* a copy with renamed values */
    const char *ins[64], *outs[64];
    if (n.n_in > 64 || n.n_out > 64) {
      st = keel_err(KEEL_ERR_UNSUPPORTED, "Gradient: node too wide");
      break;
    }
    for (int32_t k = 0; k < n.n_in; k++) ins[k] = renamed(rn, n.in_names[k]);
    for (int32_t k = 0; k < n.n_out; k++) outs[k] = renamed(rn, n.out_names[k]);
    n.in_names = ins;
    n.out_names = outs;
    const char *gy[64];
    bool any = false;
    for (int32_t k = 0; k < n.n_out; k++) {
      gy[k] = outs[k][0] ? gmap_get(r->gm, outs[k]) : NULL;
      any |= gy[k] != NULL;
    }
    if (any) st = vjp(b, r->gm, &n, real, gy, r->y);
  }
  b->rg = up;
  return st ? st : r->st;
}

/* The trainer's Gradient node (passes/pass_train.c): each parameter whose
 * gradient exists only on some runs gets one more main-graph output, a
 * bool that says whether this run reached it (spec->reach_output). */
static keel_status trainer_reach(builder *b, int32_t i, const char *reach) {
  keel_train_spec *sp = b->m->train;
  keel_graph *g = b->g;
  if (!sp->reach_output) {
    sp->reach_output = keel_arena_array(b->a, (size_t)sp->n_params + 1, sizeof(int32_t));
    if (!sp->reach_output) return oom();
    for (int32_t p = 0; p < sp->n_params; p++) sp->reach_output[p] = -1;
  }
  char hint[600];
  snprintf(hint, sizeof hint, "%s.keel_reached", sp->params[i]);
  const char *out = fresh(b, hint);
  const char **on = keel_arena_array(b->a, (size_t)g->n_out + 2, sizeof(char *));
  keel_type *ot = keel_arena_array(b->a, (size_t)g->n_out + 2, sizeof(keel_type));
  if (!out || !on || !ot) return oom();
  KEEL_TRY(emit(b, "Identity", "", 1, &reach, 1, &out, NULL));
  KEEL_TRY(ad_names_add(&b->keep, out));
  memcpy(on, g->out_names, sizeof(char *) * (size_t)g->n_out);
  memcpy(ot, g->out_types, sizeof(keel_type) * (size_t)g->n_out);
  on[g->n_out] = out;
  ot[g->n_out] = (keel_type){.kind = KEEL_TYPE_TENSOR, .dtype = KEEL_BOOL, .rank = -1};
  sp->reach_output[i] = g->n_out;
  g->out_names = on;
  g->out_types = ot;
  g->n_out++;
  return KEEL_OK;
}

static bool is_trainer_gradient(const builder *b) {
  return b->m->train && b->g == b->m->main && b->grad->name &&
         !strcmp(b->grad->name, KEEL_TRAIN_GRADIENT_NODE);
}

static keel_status outputs(builder *b, const grad_spec *s, const gmap *rn, const gmap *gm) {
  for (int32_t i = 0; i < b->grad->n_out; i++) {
    const char *out = b->grad->out_names[i];
    if (!out[0]) continue;
    const char *g = gmap_get(gm, renamed(rn, s->vars[i]));
    const char *ins[1] = {g ? g : b->grad->in_names[i]};
    KEEL_TRY(emit(b, g ? "Identity" : "ZerosLike", g ? "" : AD_INTERNAL, 1, ins, 1, &out, NULL));
    const char *reach = g ? gmap_reach(gm, renamed(rn, s->vars[i])) : NULL;
    if (reach && is_trainer_gradient(b) && i < b->m->train->n_params) KEEL_TRY(trainer_reach(b, i, reach));
  }
  return KEEL_OK;
}

static keel_status differentiate(builder *b) {
  grad_spec s;
  KEEL_TRY(read_spec(b->a, b->grad, &s));
  gmap rn = {0}, gm = {0};
  region r;
  keel_status st = region_init(&r, b->g, s.vars, s.n_vars, s.y, &gm);
  if (!st && !is_var(&r, s.y) && producer(b->g, s.y) < 0)
    st = keel_err(KEEL_ERR_INVALID_MODEL, "Gradient: y '%s' is not a value of the graph", s.y);
  if (!st) st = region_mark(&r, &s.y, NULL, 1);
  bool same = true;
  for (int32_t i = 0; i < s.n_vars; i++) same &= !strcmp(b->grad->in_names[i], s.vars[i]);
  if (!st && !same) st = clone_region(b, &s, r.order, r.n_order, &rn);
  const char *ones = NULL;
  if (!st) st = op1(b, "OnesLike", AD_INTERNAL, renamed(&rn, s.y), NULL, &ones);
  if (!st) st = region_backward(b, &r, &s.y, &ones, 1, &rn);
  if (!st) st = outputs(b, &s, &rn, &gm);
  gmap_free(&rn);
  gmap_free(&gm);
  if (r.memo || r.order) region_free(&r);
  return st;
}

/* ================================================= for grad_control.c */

bool ad_active(ad_builder *b, const char *name) { return b->rg && depends(b->rg, name, 0); }

keel_status ad_grad_add(ad_builder *b, const char *name, const char *g) {
  return ad_grad_add_reach(b, name, g, NULL);
}

keel_status ad_grad_add_reach(ad_builder *b, const char *name, const char *g, const char *reach) {
  if (!b->rg) return keel_err(KEEL_ERR_INTERNAL, "ad_grad_add outside a region");
  const char *r;
  KEEL_TRY(reach_and(b, b->reach, reach, &r));
  return gmap_add_reach(b, b->rg->gm, name, g, r);
}

keel_status ad_depends(ad_builder *b, keel_graph *x, const char *const *vars, int32_t n_vars,
                       const char *name, bool *out) {
  (void)b;
  region r;
  keel_status st = region_init(&r, x, vars, n_vars, "", NULL);
  if (!st) *out = depends(&r, name, 0);
  if (!st) st = r.st;
  if (r.memo || r.order) region_free(&r);
  return st;
}

keel_status ad_tape_mark(ad_builder *b, const char *name) {
  return ad_names_add(&(b->root ? b->root : b)->tapes, name);
}

bool ad_tape_is(ad_builder *b, const char *name) {
  return ad_names_has(&(b->root ? b->root : b)->tapes, name);
}

keel_status ad_sub_open(ad_builder *parent, keel_graph *g, ad_builder **sub) {
  builder *s = keel_sys_calloc(1, sizeof *s);
  if (!s) return oom();
  *s = (builder){.a = parent->a, .m = parent->m, .g = g, .grad = parent->grad,
                 .opset = parent->opset, .root = parent->root ? parent->root : parent};
  *sub = s;
  return KEEL_OK;
}


keel_status ad_sub_install(ad_builder *sub, bool front) {
  keel_graph *g = sub->g;
  int32_t n = g->n_nodes + sub->n;
  keel_node *nodes = keel_arena_array(sub->a, (size_t)n + 1, sizeof(keel_node));
  if (!nodes) return oom();
  keel_node *old = front ? nodes + sub->n : nodes, *fresh_at = front ? nodes : nodes + g->n_nodes;
  if (g->n_nodes) memcpy(old, g->nodes, sizeof(keel_node) * (size_t)g->n_nodes);
  if (sub->n) memcpy(fresh_at, sub->nodes, sizeof(keel_node) * (size_t)sub->n);
  for (int32_t i = 0; i < n; i++) {
    nodes[i].index = i;
    nodes[i].graph = g;
    for (int32_t s = 0; s < nodes[i].n_subs; s++) nodes[i].subs[s]->owner = &nodes[i];
  }
  g->nodes = nodes;
  g->n_nodes = n;
  sub->n = 0;
  return KEEL_OK;
}

void ad_sub_close(ad_builder *sub) {
  if (!sub) return;
  keel_sys_free(sub->nodes, (size_t)sub->cap * sizeof(keel_node));
  keel_sys_free(sub, sizeof *sub);
}

/* Whether x hides the outer value `name` behind its own constant or node
 * output (its inputs are variables in their own right). */
static bool shadowed(const keel_graph *x, const char *name) {
  for (int32_t i = 0; i < x->n_in; i++)
    if (!strcmp(x->in_names[i], name)) return false;
  for (int32_t i = 0; i < x->ld.n_init; i++)
    if (!strcmp(x->ld.init_names[i], name)) return true;
  return producer(x, name) >= 0;
}

keel_status ad_sub_backward(ad_builder *sub, keel_graph *x, const char *const *vars,
                            int32_t n_vars, const char *const *seeds, const char *const *sgrads,
                            int32_t n_seeds, const char **grads, const char **reaches) {
  /* a capture x shadows (another sub-graph of the node reads it) gets none */
  const char **seen = keel_arena_array(sub->a, (size_t)n_vars + 1, sizeof(char *));
  if (!seen) return oom();
  for (int32_t i = 0; i < n_vars; i++) seen[i] = shadowed(x, vars[i]) ? "" : vars[i];
  gmap gm = {0};
  region r;
  char y[512];
  snprintf(y, sizeof y, "%s (the sub-graph's outputs)", x->path);
  keel_status st = region_init(&r, x, seen, n_vars, keel_arena_strdup(sub->a, y), &gm);
  if (!st && !r.y) st = oom();
  if (!st) st = region_mark(&r, seeds, sgrads, n_seeds);
  if (!st) st = region_backward(sub, &r, seeds, sgrads, n_seeds, NULL);
  for (int32_t i = 0; !st && i < n_vars; i++) {
    grads[i] = seen[i][0] ? gmap_get(&gm, vars[i]) : NULL;
    if (reaches) reaches[i] = grads[i] ? gmap_reach(&gm, vars[i]) : NULL;
  }
  gmap_free(&gm);
  if (r.memo || r.order) region_free(&r);
  return st;
}

/* ============================================================= pruning */

/* Rules emit the gradient of every differentiable input, also of inputs
 * no variable reaches (the data of a first layer): the nodes that make
 * only such values are dropped here, walking the new nodes backward from
 * the Gradient node's outputs. A node with sub-graphs is kept with every
 * name its sub-graphs read. MatMulGrad, which computes only the outputs it
 * lists, loses the ones nobody reads. */
typedef struct nameset {
  const char **v;
  int32_t n, cap;
} nameset;

static bool ns_has(const nameset *s, const char *name) {
  for (int32_t i = s->n - 1; i >= 0; i--)
    if (!strcmp(s->v[i], name)) return true;
  return false;
}

static keel_status ns_add(nameset *s, const char *name) {
  if (!name[0] || ns_has(s, name)) return KEEL_OK;
  if (s->n == s->cap) {
    int32_t nc = s->cap ? s->cap * 2 : 64;
    const char **q = keel_sys_realloc(s->v, (size_t)s->cap * sizeof(char *), (size_t)nc * sizeof(char *));
    if (!q) return oom();
    s->v = q;
    s->cap = nc;
  }
  s->v[s->n++] = name;
  return KEEL_OK;
}

static keel_status ns_add_reads(nameset *s, const keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) KEEL_TRY(ns_add(s, n->in_names[k]));
    for (int32_t k = 0; k < n->n_subs; k++) KEEL_TRY(ns_add_reads(s, n->subs[k]));
  }
  for (int32_t k = 0; k < g->n_out; k++) KEEL_TRY(ns_add(s, g->out_names[k]));
  return KEEL_OK;
}

static keel_status prune(builder *b) {
  nameset need = {0};
  keel_status st = KEEL_OK;
  int32_t n0 = b->n;
  bool *drop = keel_sys_calloc((size_t)n0 + 1, sizeof(bool));
  if (!drop) return oom();
  for (int32_t k = 0; !st && k < b->grad->n_out; k++) st = ns_add(&need, b->grad->out_names[k]);
  for (int32_t k = 0; !st && k < b->keep.n; k++) st = ns_add(&need, b->keep.v[k]);
  for (int32_t i = b->n - 1; !st && i >= 0; i--) {
    keel_node *n = &b->nodes[i];
    bool used = n->n_subs > 0;
    for (int32_t k = 0; k < n->n_out && !used; k++) used = n->out_names[k][0] && ns_has(&need, n->out_names[k]);
    if (!used) {
      drop[i] = true;
      continue;
    }
    if (!strcmp(n->op_type, "MatMulGrad") && !strcmp(n->domain, AD_INTERNAL))
      for (int32_t k = 0; k < n->n_out; k++)
        if (!ns_has(&need, n->out_names[k])) n->out_names[k] = "";
    for (int32_t k = 0; !st && k < n->n_in; k++) st = ns_add(&need, n->in_names[k]);
    for (int32_t k = 0; !st && k < n->n_subs; k++) st = ns_add_reads(&need, n->subs[k]);
  }
  int32_t kept = 0;
  for (int32_t i = 0; !st && i < b->n; i++)
    if (!drop[i]) b->nodes[kept++] = b->nodes[i];
  if (!st) b->n = kept;
  keel_sys_free(drop, ((size_t)n0 + 1) * sizeof(bool));
  keel_sys_free(need.v, (size_t)need.cap * sizeof(char *));
  return st;
}

/* ============================================================== graphs */

static keel_status graph_pass(keel_model *m, keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Gradient") || strcmp(n->domain, AD_TRAINING)) continue;
    builder b = {.a = m->arena, .m = m, .g = g, .grad = n, .opset = keel_model_opset(m, "")};
    keel_status st = differentiate(&b);
    if (!st) st = prune(&b);
    if (!st) st = keel_graph_replace_node(m->arena, g, i, b.nodes, b.n);
    keel_sys_free(b.nodes, (size_t)b.cap * sizeof(keel_node));
    ad_names_free(&b.tapes);
    ad_names_free(&b.keep);
    char lb[256];
    if (st) return keel_err_prefix(st, "graph '%s': node %s", g->path, keel_node_label(n, lb, sizeof lb));
    i += b.n - 1;
  }
  return KEEL_OK;
}

keel_status keel_ir_autodiff(keel_model *m) {
  /* graphs made here are appended to m->graphs: visited too (no Gradient) */
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(graph_pass(m, m->graphs[i]));
  return KEEL_OK;
}
