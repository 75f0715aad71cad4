/* pass_attention.c: fuse-attention, scaled-dot-product attention as
 * PyTorch exports it (opset 13+, and older Softmax with an explicit last
 * axis), found by its dataflow:
 *
 *     Q4 = Transpose(q, perm 0,2,1,3)   Kt = Transpose(k, perm 0,2,3,1)
 *     V4 = Transpose(v, perm 0,2,1,3)
 *     S  = MatMul(Q4, Kt)
 *     S2 = Mul(S, c) | Mul(c, S) | Div(S, c)          (c a scalar constant;
 *                                                      optional)
 *     X  = Add(S2, mask) | Add(mask, S2)              (additive mask)
 *        | Where(cond, f, S2) | Where(cond, S2, f)     (f a scalar constant)
 *        | S2                                          (no mask)
 *     P  = Softmax(X, axis -1)
 *     O  = MatMul(P, V4)
 *
 * and the same of rank 3, as nn.MultiheadAttention exports it (the heads
 * joined with the batch: Q3 = Transpose(q, perm 1,0,2) of [S, N, D], Kt =
 * Transpose(k, perm 1,2,0), V3 likewise, O [N, S, D]), and with the scale
 * on Q (or K) before the product instead of on S: Mul(Q4, c) | Mul(c, Q4)
 * | Div(Q4, c) (nn.MultiheadAttention: q / sqrt(d); scales on both sides
 * multiply),
 * becomes one O = FusedAttention(Q4, Kt, V4[, mask]) of the domain
 * ai.keel.internal (ops/nn/attention/attention_fused.c) with attributes scale (float),
 * mask_kind ("none", "add", "where": masked where cond is true,
 * "where_not": masked where it is false) and fill (the Where constant).
 * The input Transposes with no other reader are folded into the node
 * (attribute layout: it reads q, k, v as [B, S, H, D] by strides; K as
 * rows, so nothing is transposed twice), as is a Transpose(0,2,1,3) that
 * is O's only reader (Y written as [B, S, H, D]). Otherwise the kernel
 * reads Q4, V4 and Kt as they are (Kt already [.., D, S]).
 * The three inputs being Transpose outputs (or inputs) fixes their rank
 * at 4 (or all three at 3), which the kernel checks.
 *
 * Checked: the chain has a scale or a Where (their float32 constant
 * makes every operand float32, the kernel's only type: a float16 chain
 * is left alone); the Softmax is over the last axis; the scale and fill are
 * single-element float constants of rank <= 4 (they broadcast without
 * growing S); S, S2, X and P are each read only by the next node of the
 * pattern (not by a graph output, another node or a sub-graph). The
 * mask's shape is the kernel's to check at run time (its last two dims 1
 * or S's; its first two may broadcast S up): a shape the kernel cannot
 * take returns an error naming the fused nodes.
 *
 * The fused node keeps the final MatMul's name and lists the others in
 * `fused`.
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "passes/pass.h"

#define ATT_DOMAIN "ai.keel.internal"
/* layout bits: the operand is read (Y written) as [B, S, H, D], its
 * Transpose folded into the node */
enum { ATT_L_Q = 1, ATT_L_K = 2, ATT_L_V = 4, ATT_L_Y = 8 };

/* What a match found: the nodes (last = the PV MatMul) and the operands. */
typedef struct att_match {
  int32_t nodes[12];
  int n;
  const char *q, *kt, *v, *mask, *y;
  int32_t q_reader, k_reader;     /* the node reading q / kt (the QK MatMul,
                                     or a scale before it)              */
  int rank;                       /* 4, or 3 (nn.MultiheadAttention)    */
  int64_t layout;                 /* ATT_L_* bits                       */
  const char *kind;
  float scale, fill;
} att_match;

static bool is_op(const keel_node *n, const char *op) {
  return !strcmp(n->op_type, op) && !n->domain[0] && n->n_out == 1;
}

/* The producer of `name` when it is op `op`, else -1. */
static int32_t prod_op(const keel_graph *g, const char *name, const char *op) {
  int32_t p = name[0] ? keel_ir_producer(g, name) : -1;
  return p >= 0 && is_op(&g->nodes[p], op) ? p : -1;
}

/* `name` is the output of a Transpose with this 4-entry perm, or, for
 * rank 3, with it less its leading batch axis ({0, 2, 1, 3} -> {1, 0, 2}). */
static bool transposed(const keel_graph *g, const char *name, const int64_t perm[4], int rank) {
  int32_t t = prod_op(g, name, "Transpose");
  if (t < 0) return false;
  const keel_attr *p = keel_node_attr(&g->nodes[t], "perm");
  if (!p || p->type != KEEL_ATTR_INTS || p->n != rank) return false;
  for (int i = 0; i < rank; i++)
    if (p->ints[i] != perm[i + 4 - rank] - (4 - rank)) return false;
  return true;
}

/* A float scalar constant that broadcasts against a value of rank `rank`
 * without growing it. */
static bool scalar_const(const keel_model *m, const keel_graph *g, const char *name, float *v, int rank) {
  int32_t c = name[0] ? keel_ir_const_of(m, g, name) : -1;
  return c >= 0 && m->consts[c].rank <= rank && keel_ir_const_f32(m, g, name, v);
}

/* Softmax over the last axis of a rank-`rank` input. Before opset 13 the
 * default axis (1) is not the last one, so it must be written. */
static bool softmax_last(const keel_node *s, int rank) {
  if (!is_op(s, "Softmax") || s->n_in != 1) return false;
  const keel_attr *ax = keel_node_attr(s, "axis");
  int64_t a = ax ? ax->i : s->opset >= 13 ? -1 : 1;
  return a == -1 || a == rank - 1;
}

/* The only reader of node p's output is node `next`. */
static bool only_into(const keel_graph *g, int32_t p, int32_t next) {
  return keel_ir_only_reader(g, g->nodes[p].out_names[0]) == next;
}

/* From X (the Softmax input, produced by node x): the mask step read
 * the `alt`-th way (an Add's two operand orders), leaving in *s2 the
 * value it masks. False when x is not a mask form read that way. */
static bool mask_step(const keel_model *m, const keel_graph *g, int32_t x, int alt,
                      att_match *t, const char **s2) {
  const keel_node *n = &g->nodes[x];
  if (is_op(n, "Add") && n->n_in == 2) {
    *s2 = n->in_names[alt], t->mask = n->in_names[1 - alt], t->kind = "add";
    return t->mask[0] && (*s2)[0];
  }
  if (is_op(n, "Where") && n->n_in == 3 && alt == 0) {
    const char *cond = n->in_names[0];
    if (!cond[0]) return false;
    if (scalar_const(m, g, n->in_names[1], &t->fill, t->rank)) {
      *s2 = n->in_names[2], t->kind = "where";
    } else if (scalar_const(m, g, n->in_names[2], &t->fill, t->rank)) {
      *s2 = n->in_names[1], t->kind = "where_not";
    } else {
      return false;
    }
    t->mask = cond;
    return true;
  }
  return false;
}

/* Node n as a scale by a scalar constant: Div(x, c), Mul(x, c) or
 * Mul(c, x); *x the value it scales, *c the factor (1/c for a Div). */
static bool scale_of(const keel_model *m, const keel_graph *g, const keel_node *n, int rank,
                     const char **x, float *c) {
  if (n->n_in != 2) return false;
  if (is_op(n, "Div")) {
    if (!scalar_const(m, g, n->in_names[1], c, rank) || *c == 0.0f) return false;
    *x = n->in_names[0], *c = 1.0f / *c;
  } else if (is_op(n, "Mul")) {
    if (scalar_const(m, g, n->in_names[1], c, rank)) *x = n->in_names[0];
    else if (scalar_const(m, g, n->in_names[0], c, rank)) *x = n->in_names[1];
    else return false;
  } else {
    return false;
  }
  return isfinite(*c);
}

/* Operand *name of node `reader` (the QK MatMul): a scale by a constant
 * whose only reader is `reader` is taken into t->scale, and *name and
 * *reader move to what it scales. True when it took one. */
static bool pre_scale(const keel_model *m, const keel_graph *g, const char **name, int32_t *reader,
                      att_match *t) {
  int32_t p = (*name)[0] ? keel_ir_producer(g, *name) : -1;
  const char *x;
  float c;
  if (p < 0 || keel_ir_only_reader(g, *name) != *reader || !scale_of(m, g, &g->nodes[p], t->rank, &x, &c))
    return false;
  t->scale *= c;
  t->nodes[t->n++] = p;
  *name = x, *reader = p;
  return isfinite(t->scale);
}

/* From S2 (written by node p): the scale step, leaving in *s the
 * product it scales; no scale step (p the QK MatMul itself) is scale 1. */
static bool scale_step(const keel_model *m, const keel_graph *g, int32_t p, att_match *t,
                       const char **s, int32_t *scale_node) {
  const keel_node *n = &g->nodes[p];
  float c;
  *scale_node = -1;
  t->scale = 1.0f;
  if (is_op(n, "MatMul")) {
    *s = n->out_names[0];
    return true;
  }
  if (n->n_in != 2) return false;
  if (!scale_of(m, g, n, t->rank, s, &c)) return false;
  t->scale = c;
  *scale_node = p;
  return true;
}

/* From the Softmax input X (written by node x) up to Q4 and Kt, the mask
 * read the `alt`-th way (alt 2: no mask step); fills t. */
static bool att_upper(const keel_model *m, const keel_graph *g, int32_t sm, int32_t x, int alt,
                      att_match *t) {
  int32_t mk = -1, sc, qk;
  const char *s2 = g->nodes[sm].in_names[0], *s;
  t->mask = NULL, t->kind = "none", t->fill = 0;
  if (alt < 2) {
    if (!mask_step(m, g, x, alt, t, &s2)) return false;
    mk = x;
    x = keel_ir_producer(g, s2);
    if (x < 0 || !only_into(g, x, mk)) return false;
  }
  if (!scale_step(m, g, x, t, &s, &sc)) return false;
  qk = prod_op(g, s, "MatMul");
  if (qk < 0 || g->nodes[qk].n_in != 2 || (sc >= 0 && !only_into(g, qk, sc))) return false;
  const keel_node *qn = &g->nodes[qk];
  t->n = 0;
  t->nodes[t->n++] = qk;
  if (sc >= 0) t->nodes[t->n++] = sc;
  if (mk >= 0) t->nodes[t->n++] = mk;
  t->q = qn->in_names[0], t->kt = qn->in_names[1];
  t->q_reader = t->k_reader = qk;
  bool pre = pre_scale(m, g, &t->q, &t->q_reader, t);
  pre = pre_scale(m, g, &t->kt, &t->k_reader, t) || pre;
  /* a float32 constant (a scale or the Where fill) makes the scores
   * float32, hence Q, K, V and an additive mask too: the kernel's type */
  if (sc < 0 && !pre && t->kind[0] != 'w') return false;
  static const int64_t qv_perm[4] = {0, 2, 1, 3}, k_perm[4] = {0, 2, 3, 1};
  return transposed(g, t->q, qv_perm, t->rank) && transposed(g, t->kt, k_perm, t->rank) &&
         isfinite(t->scale);
}

/* The Transpose writing `*name` when node `reader` is its only reader:
 * the node then reads the Transpose's input (*name replaced) and the
 * Transpose is added to t's nodes. */
static void fold_in(const keel_graph *g, const char **name, int32_t reader, int64_t bit,
                    att_match *t) {
  int32_t tr = keel_ir_producer(g, *name);
  if (tr < 0 || keel_ir_only_reader(g, *name) != reader) return;
  *name = g->nodes[tr].in_names[0];
  t->nodes[t->n++] = tr;
  t->layout |= bit;
}

/* Folds the input Transposes with no other reader, and Y's Transpose
 * (perm 0,2,1,3; 1,0,2 at rank 3) when it is Y's only reader. */
static void fold_layouts(const keel_graph *g, int32_t o, att_match *t) {
  static const int64_t perm[4] = {0, 2, 1, 3};
  fold_in(g, &t->q, t->q_reader, ATT_L_Q, t);
  fold_in(g, &t->kt, t->k_reader, ATT_L_K, t);
  fold_in(g, &t->v, o, ATT_L_V, t);
  int32_t yt = keel_ir_only_reader(g, t->y);
  if (yt >= 0 && is_op(&g->nodes[yt], "Transpose") && g->nodes[yt].n_in == 1 &&
      transposed(g, g->nodes[yt].out_names[0], perm, t->rank)) {
    t->y = g->nodes[yt].out_names[0];
    t->nodes[t->n++] = yt;
    t->layout |= ATT_L_Y;
  }
}

/* From the PV MatMul o: the whole pattern, or false. */
static bool att_find(const keel_model *m, const keel_graph *g, int32_t o, att_match *t) {
  static const int64_t qv_perm[4] = {0, 2, 1, 3};
  const keel_node *pv = &g->nodes[o];
  if (!is_op(pv, "MatMul") || pv->n_in != 2) return false;
  memset(t, 0, sizeof *t);
  /* the rank from V's Transpose: 4, or 3 (nn.MultiheadAttention) */
  t->rank = transposed(g, pv->in_names[1], qv_perm, 4) ? 4 : transposed(g, pv->in_names[1], qv_perm, 3) ? 3 : 0;
  if (!t->rank) return false;
  int32_t sm = prod_op(g, pv->in_names[0], "Softmax");
  if (sm < 0 || !softmax_last(&g->nodes[sm], t->rank) || !only_into(g, sm, o)) return false;
  int32_t x = keel_ir_producer(g, g->nodes[sm].in_names[0]);
  if (x < 0 || !only_into(g, x, sm)) return false;
  bool ok = false;
  for (int alt = 0; alt < 3 && !ok; alt++) ok = att_upper(m, g, sm, x, alt, t);
  if (!ok) return false;
  /* rank 3: a mask of rank 4 would make the scores (and Y) rank 4; only a
   * constant one of rank <= 3 is sure not to */
  if (t->rank == 3 && t->mask) {
    int32_t c = keel_ir_const_of(m, g, t->mask);
    if (c < 0 || m->consts[c].rank > 3) return false;
  }
  t->v = pv->in_names[1];
  t->y = pv->out_names[0];
  t->nodes[t->n++] = sm;
  fold_layouts(g, o, t);
  t->nodes[t->n++] = o;
  return true;
}

/* Turns the PV MatMul into the fused node; marks the others dropped. */
static keel_status att_rewrite(keel_model *m, keel_graph *g, const att_match *t, bool *drop) {
  keel_arena *a = m->arena;
  keel_node *n = &g->nodes[t->nodes[t->n - 1]];
  int n_in = t->mask ? 4 : 3;
  const char **ins = keel_arena_array(a, 4, sizeof(char *));
  keel_attr *attrs = keel_arena_array(a, 4, sizeof(keel_attr));
  if (!ins || !attrs) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fusing an attention");
  for (int k = 0; k < t->n - 1; k++) {
    KEEL_TRY(keel_ir_fuse_label(a, n, &g->nodes[t->nodes[k]]));
    drop[t->nodes[k]] = true;
  }
  ins[0] = t->q, ins[1] = t->kt, ins[2] = t->v, ins[3] = t->mask;
  attrs[0] = (keel_attr){.name = "scale", .type = KEEL_ATTR_FLOAT, .f = t->scale};
  attrs[1] = (keel_attr){.name = "mask_kind", .type = KEEL_ATTR_STRING, .s = t->kind,
                         .slen = strlen(t->kind)};
  attrs[2] = (keel_attr){.name = "fill", .type = KEEL_ATTR_FLOAT, .f = t->fill};
  attrs[3] = (keel_attr){.name = "layout", .type = KEEL_ATTR_INT, .i = t->layout};
  n->op_type = "FusedAttention";
  n->domain = ATT_DOMAIN;
  n->opset = 1;
  n->n_in = n_in, n->in_names = ins, n->in = NULL;
  n->n_attr = 4, n->attrs = attrs;
  n->out_names[0] = t->y;
  return KEEL_OK;
}

static keel_status fuse_at(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused) {
  att_match t;
  if (!att_find(m, g, i, &t) || keel_pass_overlaps(drop, t.nodes, t.n)) return KEEL_OK;
  *fused = true;
  return att_rewrite(m, g, &t, drop);
}

keel_status keel_pass_fuse_attention(keel_model *m) { return keel_pass_fuse_all(m, fuse_at); }
