/* pass_norm.c: two passes that undo what exporters decompose.
 *
 * fold-identity: Identity of a constant (PyTorch writes one per shared
 * weight: "ln.weight = Identity(blocks.0.ln1.weight)") is dropped and its
 * readers read the constant itself, so later patterns see constants. So
 * is a Cast to the type its input already has (PyTorch writes
 * Cast(to int64) of a length that Shape -> Gather made int64), the input's
 * type known from the model's types or inferred (ir/shapes.h).
 *
 * fuse-layernorm: LayerNormalization as exporters before opset 17 write
 * it,
 *     mean = ReduceMean(x, axes=[-1]); d = Sub(x, mean); p = Pow(d, 2)
 *     var = ReduceMean(p, axes=[-1]); s = Sqrt(Add(var, eps)); n = Div(d, s)
 *     y = Add(Mul(n, gamma), beta)        (gamma, beta constants)
 * (also with Mul(d, d) for the square and Mul(d, Reciprocal(s)) for the
 * Div, as tf2onnx writes keras' rsqrt; and with gamma folded into the
 * scale, x * inv + (beta - mean * inv), inv = gamma * rsqrt(var + eps),
 * tf2onnx's form of keras' LayerNormalization: ln_scale_find)
 * becomes one LayerNormalization(x, gamma, beta, axis=-1, epsilon=eps)
 * node (opset 17's op, whatever the model's opset): one pass over the rows
 * instead of nine kernels and eight intermediate tensors. The node keeps
 * the final Add's name and lists the other eight in `fused`.
 *
 * fuse-gelu: the erf GELU as PyTorch writes it,
 *     y = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)
 * (or Mul(Mul(x, 0.5), Add(...)), Div by sqrt 2 or Mul by 1/sqrt 2, the
 * operands of each Add and Mul in either order) becomes one Gelu (opset
 * 20's op).
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shapes.h"
#include "passes/pass.h"

/* ===================================================== fold-identity */

/* Renames every read of `from` in g's own nodes (not sub-graphs). */
static void rename_reads(keel_graph *g, const char *from, const char *to) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_in; k++)
      if (!strcmp(g->nodes[i].in_names[k], from)) g->nodes[i].in_names[k] = to;
}

/* A Cast whose input already has the type it casts to (S: the model's
 * inferred types, or NULL). */
static bool same_type_cast(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  if (!S || strcmp(n->op_type, "Cast") || n->domain[0] || n->n_in != 1 || !n->in_names[0][0])
    return false;
  const keel_attr *to = keel_node_attr(n, "to");
  const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
  return to && to->type == KEEL_ATTR_INT && x && x->dtype != 0 && x->dtype == to->i;
}

static keel_status fold_identity_graph(keel_model *m, const keel_shapes *S, keel_graph *g) {
  bool *drop = keel_sys_calloc((size_t)g->n_nodes + 1, sizeof(bool));
  if (!drop) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fold-identity");
  int32_t n_drop = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    bool cast = same_type_cast(S, g, n);
    if ((strcmp(n->op_type, "Identity") && !cast) || n->domain[0] || n->n_in != 1 ||
        n->n_out != 1)
      continue;
    const char *out = n->out_names[0];
    /* only when every reader is a plain node of this graph (no graph
     * output, no sub-graph capture by name) */
    if (!out[0] || (!cast && keel_ir_const_of(m, g, n->in_names[0]) < 0) ||
        keel_ir_uses(g, out) != keel_pass_direct_reads(g, out))
      continue;
    rename_reads(g, out, n->in_names[0]);
    drop[i] = true;
    n_drop++;
  }
  keel_status st = n_drop ? keel_graph_remove_nodes(m->arena, g, drop) : KEEL_OK;
  keel_sys_free(drop, ((size_t)g->n_nodes + n_drop + 1) * sizeof(bool));
  return st;
}

/* A Cast: the type inference runs only where some node is one. */
static bool is_cast(const keel_model *m, const keel_graph *g, const keel_node *n) {
  (void)m, (void)g;
  return !n->domain[0] && !strcmp(n->op_type, "Cast");
}

keel_status keel_pass_fold_identity(keel_model *m) {
  keel_shapes *S = NULL;
  if (keel_pass_any_node(m, is_cast)) KEEL_TRY(keel_shapes_infer_general(m, &S));
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = fold_identity_graph(m, S, m->graphs[i]);
  if (S) keel_shapes_free(S);
  return st;
}

/* ==================================================== fuse-layernorm */

/* A matched decomposition: its nodes, the last of which becomes the one
 * node `op` (of `opset`) reading `ins` with `attrs`, the others dropped
 * and named in its `fused` list. Shared by fuse-layernorm and fuse-gelu. */
#define PAT_MAX 12
typedef struct pattern {
  int32_t nodes[PAT_MAX];
  int n;
  const char *op;
  int64_t opset;
  const char *ins[3];
  int n_in;
  keel_attr attrs[2];
  int n_attr;
} pattern;
typedef bool (*pattern_fn)(const keel_model *m, const keel_graph *g, int32_t i, pattern *t);

static bool is_op(const keel_node *n, const char *op) {
  return !strcmp(n->op_type, op) && !n->domain[0] && n->n_out == 1;
}

/* The other input of a two-input node, given one of them; NULL when
 * `one` is not an input. */
static const char *other_in(const keel_node *n, const char *one) {
  if (n->n_in != 2) return NULL;
  if (!strcmp(n->in_names[0], one)) return n->in_names[1];
  if (!strcmp(n->in_names[1], one)) return n->in_names[0];
  return NULL;
}

/* ReduceMean over the last axis only, keeping it (attribute before opset
 * 18, a constant input after). */
static bool mean_last(const keel_model *m, const keel_graph *g, const keel_node *n) {
  if (!is_op(n, "ReduceMean")) return false;
  const keel_attr *kd = keel_node_attr(n, "keepdims");
  if (kd && kd->i != 1) return false;
  const keel_attr *ax = keel_node_attr(n, "axes");
  if (ax) return n->n_in == 1 && ax->n == 1 && ax->ints[0] == -1;
  if (n->n_in != 2) return false;
  int32_t c = keel_ir_const_of(m, g, n->in_names[1]);
  if (c < 0) return false;
  const keel_tensor *t = &m->consts[c];
  return t->dtype == KEEL_INT64 && keel_tensor_numel(t) == 1 && *(const int64_t *)t->data == -1;
}

/* A 1-D float constant. */
static bool const_vec(const keel_model *m, const keel_graph *g, const char *name) {
  int32_t c = keel_ir_const_of(m, g, name);
  return c >= 0 && m->consts[c].dtype == KEEL_FLOAT && m->consts[c].rank == 1;
}

/* Walks up from node i, Div(d, Sqrt) or Mul(d, Reciprocal(Sqrt)) in
 * either order (tf2onnx's rsqrt); fills t and returns true on a match. */
static bool ln_find(const keel_model *m, const keel_graph *g, int32_t i, pattern *t) {
  float eps;
  const keel_node *div = &g->nodes[i];
  bool by_mul = is_op(div, "Mul");
  if ((!by_mul && !is_op(div, "Div")) || div->n_in != 2) return false;
  int32_t sub = -1, sq = -1, rc = -1;
  for (int k = 0; k < (by_mul ? 2 : 1) && sq < 0; k++) {
    sub = keel_ir_producer(g, div->in_names[k]);
    int32_t s = keel_ir_producer(g, div->in_names[1 - k]);
    if (by_mul && s >= 0 && is_op(&g->nodes[s], "Reciprocal") &&
        keel_ir_only_reader(g, g->nodes[s].out_names[0]) == i)
      rc = s, s = keel_ir_producer(g, g->nodes[s].in_names[0]);
    if (sub >= 0 && s >= 0 && is_op(&g->nodes[sub], "Sub") && is_op(&g->nodes[s], "Sqrt") &&
        (!by_mul || rc >= 0))
      sq = s;
    else
      rc = -1;
  }
  if (sq < 0) return false;
  const char *d = g->nodes[sub].out_names[0];
  int32_t add = keel_ir_producer(g, g->nodes[sq].in_names[0]);
  if (add < 0 || !is_op(&g->nodes[add], "Add")) return false;
  const keel_node *an = &g->nodes[add];
  int32_t var = -1;
  for (int k = 0; k < 2 && var < 0; k++) {
    int32_t p = keel_ir_producer(g, an->in_names[k]);
    if (p >= 0 && mean_last(m, g, &g->nodes[p]) &&
        keel_ir_const_f32(m, g, an->in_names[1 - k], &eps))
      var = p;
  }
  if (var < 0) return false;
  int32_t pw = keel_ir_producer(g, g->nodes[var].in_names[0]);
  float two;
  if (pw < 0) return false;
  const keel_node *pn = &g->nodes[pw]; /* Pow(d, 2), or Mul(d, d) */
  bool sq_mul = is_op(pn, "Mul") && pn->n_in == 2 && !strcmp(pn->in_names[0], d) && !strcmp(pn->in_names[1], d);
  if (!sq_mul && (!is_op(pn, "Pow") || strcmp(pn->in_names[0], d) ||
                  !keel_ir_const_f32(m, g, pn->in_names[1], &two) || two != 2.0f))
    return false;
  const keel_node *sn = &g->nodes[sub];
  int32_t mean = keel_ir_producer(g, sn->in_names[1]);
  if (mean < 0 || !mean_last(m, g, &g->nodes[mean]) ||
      strcmp(g->nodes[mean].in_names[0], sn->in_names[0]))
    return false;
  /* the affine tail: Mul by gamma, Add of beta */
  int32_t mul = keel_ir_only_reader(g, div->out_names[0]);
  if (mul < 0 || !is_op(&g->nodes[mul], "Mul")) return false;
  const char *gamma = other_in(&g->nodes[mul], div->out_names[0]);
  int32_t out = keel_ir_only_reader(g, g->nodes[mul].out_names[0]);
  if (!gamma || !const_vec(m, g, gamma) || out < 0 || !is_op(&g->nodes[out], "Add")) return false;
  const char *beta = other_in(&g->nodes[out], g->nodes[mul].out_names[0]);
  if (!beta || !const_vec(m, g, beta)) return false;
  /* every intermediate is read only inside the pattern (d by the square
   * and the Div) */
  if (keel_ir_uses(g, d) != (sq_mul ? 3 : 2) || keel_ir_only_reader(g, g->nodes[mean].out_names[0]) != sub ||
      keel_ir_only_reader(g, g->nodes[pw].out_names[0]) != var ||
      keel_ir_only_reader(g, g->nodes[var].out_names[0]) != add ||
      keel_ir_only_reader(g, an->out_names[0]) != sq ||
      keel_ir_only_reader(g, g->nodes[sq].out_names[0]) != (rc >= 0 ? rc : i))
    return false;
  *t = (pattern){{mean, sub, pw, var, add, sq, i, mul, out}, 9, "LayerNormalization", 17,
                 {sn->in_names[0], gamma, beta}, 3,
                 {{.name = "axis", .type = KEEL_ATTR_INT, .i = -1},
                  {.name = "epsilon", .type = KEEL_ATTR_FLOAT, .f = eps}}, 2};
  if (rc >= 0) { /* the Reciprocal joins, before the last node */
    t->nodes[9] = t->nodes[8], t->nodes[8] = t->nodes[7], t->nodes[7] = t->nodes[6];
    t->nodes[6] = rc, t->n = 10;
  }
  return true;
}

/* The one name two nodes' inputs share (two-input nodes), or NULL. */
static const char *shared_in(const keel_node *a, const keel_node *b) {
  for (int k = 0; k < 2; k++)
    if (other_in(b, a->in_names[k])) return a->in_names[k];
  return NULL;
}

/* The producer of `name` when it is `op` read only by node `reader`. */
static int32_t only_for(const keel_graph *g, const char *name, const char *op, int32_t reader) {
  int32_t p = keel_ir_producer(g, name);
  return p >= 0 && is_op(&g->nodes[p], op) && keel_ir_only_reader(g, name) == reader ? p : -1;
}

/* tf2onnx's arrangement of keras' LayerNormalization (batch_normalization's
 * algebra, the scale folded into one factor), from its final Add (node i):
 *     inv = Mul(Reciprocal(Sqrt(Add(var, eps))), gamma)
 *     y   = Add(Mul(x, inv), Sub(beta, Mul(mean, inv)))
 * with mean and var as above (the square Mul(d, d) or Pow(d, 2)), every
 * Mul and the Adds in either order. x * inv + beta - mean * inv is
 * (x - mean) * inv + beta: LayerNormalization's value. */
static bool ln_scale_find(const keel_model *m, const keel_graph *g, int32_t i, pattern *t) {
  const keel_node *yn = &g->nodes[i];
  if (!is_op(yn, "Add") || yn->n_in != 2) return false;
  for (int k = 0; k < 2; k++) {
    int32_t xs = only_for(g, yn->in_names[k], "Mul", i);
    int32_t bb = only_for(g, yn->in_names[1 - k], "Sub", i);
    if (xs < 0 || bb < 0 || g->nodes[bb].n_in != 2 || g->nodes[xs].n_in != 2) continue;
    const char *beta = g->nodes[bb].in_names[0];
    int32_t ms = only_for(g, g->nodes[bb].in_names[1], "Mul", bb);
    if (!const_vec(m, g, beta) || ms < 0 || g->nodes[ms].n_in != 2) continue;
    const char *inv = shared_in(&g->nodes[xs], &g->nodes[ms]);
    if (!inv || keel_ir_uses(g, inv) != 2) continue;
    const char *x = other_in(&g->nodes[xs], inv), *mean_v = other_in(&g->nodes[ms], inv);
    int32_t sc = keel_ir_producer(g, inv);
    if (sc < 0 || !is_op(&g->nodes[sc], "Mul") || g->nodes[sc].n_in != 2) continue;
    const keel_node *scn = &g->nodes[sc];
    int32_t rs = -1;
    const char *gamma = NULL;
    for (int q = 0; q < 2 && rs < 0; q++) {
      rs = only_for(g, scn->in_names[q], "Reciprocal", sc);
      gamma = scn->in_names[1 - q];
    }
    if (rs < 0 || !const_vec(m, g, gamma)) continue;
    int32_t sq = only_for(g, g->nodes[rs].in_names[0], "Sqrt", rs);
    int32_t add = sq < 0 ? -1 : only_for(g, g->nodes[sq].in_names[0], "Add", sq);
    if (add < 0 || g->nodes[add].n_in != 2) continue;
    const keel_node *an = &g->nodes[add];
    int32_t var = -1;
    float eps = 0;
    for (int q = 0; q < 2 && var < 0; q++) {
      int32_t p = only_for(g, an->in_names[q], "ReduceMean", add);
      if (p >= 0 && mean_last(m, g, &g->nodes[p]) &&
          keel_ir_const_f32(m, g, an->in_names[1 - q], &eps))
        var = p;
    }
    int32_t pw = var < 0 ? -1 : keel_ir_producer(g, g->nodes[var].in_names[0]);
    if (pw < 0 || keel_ir_only_reader(g, g->nodes[pw].out_names[0]) != var) continue;
    const keel_node *pn = &g->nodes[pw]; /* Mul(d, d), or Pow(d, 2) */
    float two;
    bool sq_mul = is_op(pn, "Mul") && pn->n_in == 2 && !strcmp(pn->in_names[0], pn->in_names[1]);
    if (!sq_mul && (!is_op(pn, "Pow") || pn->n_in != 2 ||
                    !keel_ir_const_f32(m, g, pn->in_names[1], &two) || two != 2.0f))
      continue;
    const char *d = pn->in_names[0];
    int32_t sub = keel_ir_producer(g, d);
    int32_t mean = keel_ir_producer(g, mean_v);
    if (sub < 0 || mean < 0 || !is_op(&g->nodes[sub], "Sub") || g->nodes[sub].n_in != 2 ||
        strcmp(g->nodes[sub].in_names[0], x) || strcmp(g->nodes[sub].in_names[1], mean_v) ||
        !mean_last(m, g, &g->nodes[mean]) || strcmp(g->nodes[mean].in_names[0], x) ||
        keel_ir_uses(g, d) != (sq_mul ? 2 : 1) || keel_ir_uses(g, mean_v) != 2)
      continue;
    *t = (pattern){{mean, sub, pw, var, add, sq, rs, sc, xs, ms, bb, i}, 12, "LayerNormalization", 17,
                   {x, gamma, beta}, 3,
                   {{.name = "axis", .type = KEEL_ATTR_INT, .i = -1},
                    {.name = "epsilon", .type = KEEL_ATTR_FLOAT, .f = eps}}, 2};
    return true;
  }
  return false;
}

static keel_status rewrite(keel_model *m, keel_graph *g, const pattern *t, bool *drop) {
  keel_arena *a = m->arena;
  keel_node *n = &g->nodes[t->nodes[t->n - 1]];
  const char **ins = keel_arena_array(a, (size_t)t->n_in, sizeof(char *));
  keel_attr *attrs = t->n_attr ? keel_arena_array(a, (size_t)t->n_attr, sizeof(keel_attr)) : NULL;
  if (!ins || (t->n_attr && !attrs)) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fusing a %s", t->op);
  for (int k = 0; k < t->n - 1; k++) {
    KEEL_TRY(keel_ir_fuse_label(a, n, &g->nodes[t->nodes[k]]));
    drop[t->nodes[k]] = true;
  }
  memcpy(ins, t->ins, (size_t)t->n_in * sizeof(char *));
  if (t->n_attr) memcpy(attrs, t->attrs, (size_t)t->n_attr * sizeof(keel_attr));
  n->op_type = t->op;
  n->opset = t->opset;
  n->n_in = t->n_in, n->in_names = ins, n->in = NULL;
  n->n_attr = t->n_attr, n->attrs = attrs;
  return KEEL_OK;
}

/* A match of `find` at node i that overlaps no earlier one, rewritten. */
static keel_status fuse_with(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused, pattern_fn find) {
  pattern t;
  if (!find(m, g, i, &t) || keel_pass_overlaps(drop, t.nodes, t.n)) return KEEL_OK;
  *fused = true;
  return rewrite(m, g, &t, drop);
}

static keel_status ln_at(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused) {
  KEEL_TRY(fuse_with(m, g, i, drop, fused, ln_find));
  return *fused ? KEEL_OK : fuse_with(m, g, i, drop, fused, ln_scale_find);
}

keel_status keel_pass_fuse_layernorm(keel_model *m) {
  return keel_pass_fuse_all(m, ln_at);
}

/* ========================================================= fuse-gelu */

static bool near(float v, double want) { return fabs((double)v - want) <= 1e-6 * fabs(want); }

/* n multiplies `name` by the constant `c`: the other operand. */
static bool mul_by(const keel_model *m, const keel_graph *g, const keel_node *n, const char *name,
                   double c) {
  float v;
  const char *o = is_op(n, "Mul") ? other_in(n, name) : NULL;
  return o && keel_ir_const_f32(m, g, o, &v) && near(v, c);
}


/* From node e (Erf or Tanh, its input the scaled x written by the nodes
 * pre[0..npre)): Add(e, 1), then x * (1 + e) * 0.5 in either order of the
 * two products. Fills t with every node, the last the output's. */
static bool gelu_tail(const keel_model *m, const keel_graph *g, const char *x, int32_t e,
                      const int32_t *pre, int npre, bool tanh, pattern *t) {
  float v;
  int32_t add = keel_ir_only_reader(g, g->nodes[e].out_names[0]);
  const char *one = add >= 0 && is_op(&g->nodes[add], "Add") ? other_in(&g->nodes[add], g->nodes[e].out_names[0]) : NULL;
  if (!one || !keel_ir_const_f32(m, g, one, &v) || v != 1.0f) return false;
  int32_t mul = keel_ir_only_reader(g, g->nodes[add].out_names[0]);
  if (mul < 0 || !is_op(&g->nodes[mul], "Mul")) return false;
  const char *p = other_in(&g->nodes[mul], g->nodes[add].out_names[0]);
  if (!p) return false;
  int32_t last[2];
  if (!strcmp(p, x)) { /* x * (1 + e) then * 0.5 */
    int32_t out = keel_ir_only_reader(g, g->nodes[mul].out_names[0]);
    if (out < 0 || !mul_by(m, g, &g->nodes[out], g->nodes[mul].out_names[0], 0.5)) return false;
    last[0] = mul, last[1] = out;
  } else { /* (x * 0.5) * (1 + e) */
    int32_t h = keel_ir_producer(g, p);
    if (h < 0 || !mul_by(m, g, &g->nodes[h], x, 0.5) || keel_ir_only_reader(g, p) != mul) return false;
    last[0] = h, last[1] = mul;
  }
  *t = (pattern){{0}, 0, "Gelu", 20, {x}, 1, {{0}}, 0};
  for (int k = 0; k < npre; k++) t->nodes[t->n++] = pre[k];
  t->nodes[t->n++] = e, t->nodes[t->n++] = add, t->nodes[t->n++] = last[0], t->nodes[t->n++] = last[1];
  if (tanh)
    t->attrs[0] = (keel_attr){.name = "approximate", .type = KEEL_ATTR_STRING, .s = "tanh", .slen = 4},
    t->n_attr = 1;
  return true;
}

/* From the Erf node e: the whole pattern, or false. */
static bool gelu_find(const keel_model *m, const keel_graph *g, int32_t e, pattern *t) {
  const keel_node *erf = &g->nodes[e];
  if (!is_op(erf, "Erf") || erf->n_in != 1) return false;
  int32_t sc = keel_ir_producer(g, erf->in_names[0]);
  if (sc < 0 || keel_ir_only_reader(g, erf->in_names[0]) != e) return false;
  const keel_node *s = &g->nodes[sc];
  float v;
  const char *x = NULL;
  if (is_op(s, "Div") && s->n_in == 2 && keel_ir_const_f32(m, g, s->in_names[1], &v) &&
      near(v, 1.41421356237309504880))
    x = s->in_names[0];
  else if (is_op(s, "Mul") && s->n_in == 2)
    for (int k = 0; k < 2 && !x; k++)
      if (keel_ir_const_f32(m, g, s->in_names[1 - k], &v) && near(v, 0.70710678118654752440))
        x = s->in_names[k];
  return x && gelu_tail(m, g, x, e, &sc, 1, false, t);
}

/* The producer of `name` when it is op `op` read only by node `rd`, else -1. */
static int32_t only_from(const keel_graph *g, const char *name, const char *op, int32_t rd) {
  int32_t p = name[0] ? keel_ir_producer(g, name) : -1;
  return p >= 0 && is_op(&g->nodes[p], op) && keel_ir_only_reader(g, name) == rd ? p : -1;
}

/* The tanh approximation from its Tanh node: Tanh(k * (x + c * x^3)), k =
 * sqrt(2 / pi), c = 0.044715, x^3 as Pow(x, 3) (Hugging Face's NewGELU,
 * GPT-2) or x * (x * x) (torch's gelu(approximate='tanh') as exported),
 * every product in either operand order; then the erf form's tail. */
static bool gelu_tanh_find(const keel_model *m, const keel_graph *g, int32_t e, pattern *t) {
  const keel_node *th = &g->nodes[e];
  if (!is_op(th, "Tanh") || th->n_in != 1) return false;
  int32_t pre[5], np = 0, w = only_from(g, th->in_names[0], "Mul", e), u = -1, c = -1;
  float v;
  for (int k = 0; w >= 0 && k < 2 && u < 0; k++) /* k * u */
    if (keel_ir_const_f32(m, g, g->nodes[w].in_names[1 - k], &v) && near(v, 0.79788456080286535588))
      u = only_from(g, g->nodes[w].in_names[k], "Add", w);
  if (u < 0) return false;
  const keel_node *un = &g->nodes[u];
  const char *x = NULL;
  for (int k = 0; k < 2 && !x; k++) { /* x + c * cube */
    int32_t cm = only_from(g, un->in_names[1 - k], "Mul", u);
    for (int q = 0; cm >= 0 && q < 2 && !x; q++) {
      if (!keel_ir_const_f32(m, g, g->nodes[cm].in_names[1 - q], &v) || !near(v, 0.044715)) continue;
      const char *cube = g->nodes[cm].in_names[q], *xx = un->in_names[k];
      int32_t p3 = only_from(g, cube, "Pow", cm);
      if (p3 >= 0 && !strcmp(g->nodes[p3].in_names[0], xx) && keel_ir_const_f32(m, g, g->nodes[p3].in_names[1], &v) && v == 3.0f) {
        x = xx, c = cm, pre[np++] = p3;
        break;
      }
      int32_t m3 = only_from(g, cube, "Mul", cm), m2 = -1;
      const char *sq = m3 >= 0 ? other_in(&g->nodes[m3], xx) : NULL;
      if (sq) m2 = only_from(g, sq, "Mul", m3);
      if (m2 >= 0 && !strcmp(g->nodes[m2].in_names[0], xx) && !strcmp(g->nodes[m2].in_names[1], xx)) {
        x = xx, c = cm, pre[np++] = m2, pre[np++] = m3;
      }
    }
  }
  if (!x) return false;
  pre[np++] = c, pre[np++] = u, pre[np++] = w;
  return gelu_tail(m, g, x, e, pre, np, true, t);
}

static keel_status gelu_at(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused) {
  if (is_op(&g->nodes[i], "Tanh")) return fuse_with(m, g, i, drop, fused, gelu_tanh_find);
  return fuse_with(m, g, i, drop, fused, gelu_find);
}

keel_status keel_pass_fuse_gelu(keel_model *m) {
  return keel_pass_fuse_all(m, gelu_at);
}
