/* pass_shard.c: tensor-parallel sharding of transformer blocks (shard.h).
 *
 * Per graph (sub-graphs of Loop / If included):
 *  1. find: a weight MatMul (B a 2-D constant; or a Gemm by one, whose
 *     bias, when row-parallel, moves after the AllReduce) whose input A is "sharded"
 *     (derived, through block ops, from the outputs of weight MatMuls whose
 *     own input is not) is a block's exit; walking back from it collects
 *     the block: its entries (column-parallel projections) and the nodes
 *     between (the interior);
 *  2. plan: forward through the block in node order, the sharded axis of
 *     every value is followed (as an index from the end, with the rank
 *     once known): entries shard their last axis; a Reshape splitting the
 *     last axis moves it to the second-last (the heads), one merging the
 *     last two moves it back; Transpose permutes it; elementwise ops keep
 *     it, their other operands must be constant along it (or are constants
 *     sliced along it: biases); activation MatMuls need it in a batch axis
 *     of both operands; Softmax must not reduce over it. Anything else, or
 *     a block value read outside the block, is refused naming the node;
 *  3. apply: weights and biases sliced (new constants; the originals are
 *     dropped when nothing else reads them), Reshape shapes rewritten, an
 *     AllReduce inserted after the exit MatMul (before its bias Add).
 *
 * Key/value heads fewer than the ranks (grouped-query attention at a TP
 * above its kv heads, multi-query attention: h heads, tp a multiple of h)
 * are replicated: rank r keeps kv head r * h / tp, so ranks r..r+tp/h-1
 * share it. Such a value is cut h ways instead of tp (vstate.div); the
 * repeat_kv that follows (Unsqueeze, Expand by rep, Reshape merging
 * kv heads and rep) then repeats it rep * h / tp times instead of rep,
 * which gives each rank its tp-th of the query heads' keys and values.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "passes/pass.h"
#include "passes/shard.h"
#include "ir/shape_rules.h"
#include "ir/shapes.h"

#define MAX_BLOCK 512

typedef struct vstate {
  const char *name;
  int32_t fe;                  /* sharded axis, counted from the last (0)  */
  int32_t rank;                /* -1: unknown                              */
  int64_t g;                   /* global extent of that axis; -1 unknown   */
  int32_t entry1;              /* 1 + the entry it comes from directly (only
                                  elementwise ops between), else 0         */
  int32_t grp1, part1;         /* 1 + the group and part of a fused entry
                                  (a Split's output, elementwise ops after) */
  int32_t div;                 /* ways the axis is cut: 0 = tp; h < tp for
                                  h replicated key/value heads            */
  bool repeated;               /* replicated and expanded by rep * h / tp:
                                  the next Reshape merges it back to tp    */
} vstate;

typedef struct parts {         /* a fused projection's parts along its width */
  int32_t n;
  int64_t len[16];             /* global widths (q, k, v; unequal for GQA) */
  int32_t div[16];             /* ways part q is cut (0 = tp): rank r keeps
                                  block r * div / tp of len / div          */
} parts;

typedef struct slice_edit {    /* node input `in` becomes a slice          */
  int32_t node, in, axis_fe;
  int32_t entry1;              /* its entry (for a fused QKV's groups)     */
  int32_t grp1, part1;         /* or one part of a fused entry's group     */
} slice_edit;

typedef struct shape_edit {    /* Reshape `node`: shape element `pos` / div */
  int32_t node, pos;
  int32_t div;                 /* 0 = tp                                   */
} shape_edit;

typedef struct leaf_edit {     /* input `in` of `node`, a constant: element
                                  `pos` / div in a copy of it              */
  int32_t node, in;
  int64_t pos;
  int32_t div;
} leaf_edit;

typedef struct block {
  int32_t exit;
  int32_t n_nodes;             /* entries and interior, in node order      */
  int32_t nodes[MAX_BLOCK];
  int32_t n_states;
  vstate states[MAX_BLOCK];
  int32_t n_slices;
  slice_edit slices[MAX_BLOCK];
  int32_t n_shapes;
  shape_edit shapes[64];
  int32_t n_splits;            /* Splits of a fused projection: sizes / div */
  int32_t splits[16];
  int32_t split_group[16];     /* the group of each                        */
  int32_t n_leaves;
  leaf_edit leaves[32];
  int32_t n_groups;            /* fused or replicated entries: node, parts */
  int32_t group_node[16];
  parts group[16];
  bool attention;
} block;

typedef struct sharder {
  keel_model *m;
  keel_graph *g;
  keel_shard_cfg *cfg;
  keel_shapes *shapes;         /* the graph's shapes, inferred before it is cut */
  int8_t *memo;                /* per node: 0 unknown, 1 sharded, 2 not    */
  bool *taken;                 /* per node: in a block already             */
  const char *dropped[1024];   /* originals replaced by slices             */
  int32_t n_dropped;
} sharder;

static keel_status refuse(const sharder *S, const keel_node *n, const char *fmt, const char *a,
                          long long x, long long y) {
  char lbl[256], msg[512];
  snprintf(msg, sizeof msg, fmt, a, x, y);
  return keel_err(KEEL_ERR_UNSUPPORTED, "shard --tp %d: graph '%s': node %s: %s", S->cfg->tp,
                  S->g->path, keel_node_label(n, lbl, sizeof lbl), msg);
}

/* ============================================================ queries */

static const keel_tensor *const_t(const sharder *S, const char *name) {
  int32_t c = name[0] ? keel_ir_const_of(S->m, S->g, name) : -1;
  return c < 0 ? NULL : &S->m->consts[c];
}

static bool is_float_type(int32_t dt) {
  return dt == KEEL_FLOAT || dt == KEEL_FLOAT16 || dt == KEEL_BFLOAT16 || dt == KEEL_DOUBLE;
}

static int64_t attr_i(const keel_node *n, const char *name, int64_t dflt) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : dflt;
}

/* A projection: MatMul by a 2-D float constant, or Gemm (transA 0) by
 * one; the weight's contracted axis in *k and its output axis in *m. */
static bool weight_proj(const sharder *S, const keel_node *n, int32_t *k, int32_t *m) {
  bool gemm = !strcmp(n->op_type, "Gemm");
  if ((!gemm && strcmp(n->op_type, "MatMul")) || n->domain[0] || n->n_in < 2 || (!gemm && n->n_in != 2))
    return false;
  if (gemm && attr_i(n, "transA", 0)) return false;
  const keel_tensor *w = const_t(S, n->in_names[1]);
  if (!w || w->rank != 2 || !is_float_type(w->dtype) || const_t(S, n->in_names[0])) return false;
  bool tb = gemm && attr_i(n, "transB", 0);
  if (k) *k = tb ? 1 : 0;
  if (m) *m = tb ? 0 : 1;
  return true;
}

static bool weight_matmul(const sharder *S, const keel_node *n) { return weight_proj(S, n, NULL, NULL); }

/* A Gemm's bias C, when it has one. */
static const char *gemm_bias(const keel_node *n) {
  return !strcmp(n->op_type, "Gemm") && n->n_in == 3 && n->in_names[2][0] ? n->in_names[2] : NULL;
}

static const char *const g_elementwise[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Where", "Cast", "Erf", "Tanh", "Relu", "Gelu",
    "Sigmoid", "Exp", "Sqrt", "Neg", "Identity", "Softmax", "FastGelu"};

static bool is_elementwise(const keel_node *n) {
  for (size_t i = 0; i < KEEL_COUNTOF(g_elementwise); i++)
    if (!strcmp(n->op_type, g_elementwise[i])) return n->domain[0] == 0 || !strcmp(n->op_type, "FastGelu");
  return false;
}

static bool is_split(const keel_node *n) { return !strcmp(n->op_type, "Split") && !n->domain[0]; }

/* Ops a block's interior may hold. */
static bool block_op(const sharder *S, const keel_node *n) {
  if (n->n_subs || (n->n_out != 1 && !is_split(n))) return false;
  if (is_elementwise(n) || is_split(n)) return true;
  if (n->domain[0]) return false;
  if (!strcmp(n->op_type, "MatMul")) return !weight_matmul(S, n);
  return !strcmp(n->op_type, "Reshape") || !strcmp(n->op_type, "Transpose") ||
         !strcmp(n->op_type, "Unsqueeze") || !strcmp(n->op_type, "Expand");
}


/* Inputs that carry block data (a Reshape's or Expand's shape, Split's
 * sizes and Unsqueeze's axes do not). */
static int32_t data_inputs(const keel_node *n) {
  return !strcmp(n->op_type, "Reshape") || !strcmp(n->op_type, "Split") ||
                 !strcmp(n->op_type, "Expand") || !strcmp(n->op_type, "Unsqueeze")
             ? 1
             : n->n_in;
}

static bool sharded_value(sharder *S, const char *name);

static bool sharded_node(sharder *S, int32_t i) {
  if (S->memo[i]) return S->memo[i] == 1;
  const keel_node *n = &S->g->nodes[i];
  bool yes = false;
  S->memo[i] = 2; /* a DAG: no cycle comes back here */
  if (weight_matmul(S, n)) yes = !sharded_value(S, n->in_names[0]);
  else if (block_op(S, n))
    for (int32_t k = 0; k < data_inputs(n) && !yes; k++) yes = sharded_value(S, n->in_names[k]);
  S->memo[i] = yes ? 1 : 2;
  return yes;
}

static bool sharded_value(sharder *S, const char *name) {
  int32_t p = name[0] ? keel_ir_producer(S->g, name) : -1;
  return p >= 0 && sharded_node(S, p);
}

/* ======================================================== collecting */

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static keel_status collect(sharder *S, block *B, const char *name) {
  int32_t p = keel_ir_producer(S->g, name);
  if (p < 0 || !sharded_node(S, p)) return KEEL_OK;
  for (int32_t i = 0; i < B->n_nodes; i++)
    if (B->nodes[i] == p) return KEEL_OK;
  const keel_node *n = &S->g->nodes[p];
  if (S->taken[p]) return refuse(S, n, "belongs to two blocks%s", "", 0, 0);
  if (B->n_nodes == MAX_BLOCK) return refuse(S, n, "a block of more than %s%lld nodes", "", MAX_BLOCK, 0);
  B->nodes[B->n_nodes++] = p;
  if (weight_matmul(S, n)) return KEEL_OK; /* an entry */
  for (int32_t k = 0; k < data_inputs(n); k++) KEEL_TRY(collect(S, B, n->in_names[k]));
  return KEEL_OK;
}

/* ========================================================== planning */

static vstate *state_of(block *B, const char *name) {
  for (int32_t i = 0; i < B->n_states; i++)
    if (!strcmp(B->states[i].name, name)) return &B->states[i];
  return NULL;
}

/* The shape of a value outside the block, for the broadcast check, as
 * symbolic shape inference (ir/shapes.h) gives it: the rank, and each dim
 * when it is an integer (-1 otherwise). A mask PyTorch builds from the
 * input's length, Trilu(ConstantOfShape(Concat(T, T))), is [T, T]: its
 * rank 2 shows that it cannot vary along the heads of [B, H, T, T] scores.
 * false: the rank is not known. */
static bool side_shape(const sharder *S, const char *name, int32_t *rank, int64_t dims[KEEL_MAX_RANK]) {
  const keel_sshape *v = keel_shapes_find(S->shapes, S->g, name);
  if (!v || v->rank < 0) return false;
  *rank = v->rank;
  for (int32_t i = 0; i < v->rank; i++) dims[i] = v->d[i].sym == KEEL_SYM_KNOWN ? v->d[i].add : -1;
  return true;
}

/* A non-block operand of a block node whose sharded axis is `fe` (global
 * extent g): constant along the axis (fine), or a constant spanning it
 * (sliced), else refused. */
static keel_status plan_side(sharder *S, block *B, int32_t node, int32_t in, const vstate *o) {
  int32_t fe = o->fe;
  int64_t g = o->g;
  const keel_node *n = &S->g->nodes[node];
  const char *name = n->in_names[in];
  if (!name[0]) return KEEL_OK;
  int32_t rank;
  int64_t dims[KEEL_MAX_RANK];
  if (!side_shape(S, name, &rank, dims))
    return refuse(S, n, "cannot tell that operand '%s' is the same for every head / column "
                  "(its rank is not known)", name, 0, 0);
  if (fe >= rank || dims[rank - 1 - fe] == 1) return KEEL_OK;
  if (const_t(S, name) && g > 0 && dims[rank - 1 - fe] == g) {
    if (o->div)
      return refuse(S, n, "operand '%s' varies along replicated key/value heads", name, 0, 0);
    if (g % S->cfg->tp)
      return refuse(S, n, "operand '%s' spans %lld along the sharded axis, not a multiple of %lld",
                    name, (long long)g, S->cfg->tp);
    if (B->n_slices == MAX_BLOCK) return refuse(S, n, "too many slices%s", "", 0, 0);
    B->slices[B->n_slices++] = (slice_edit){node, in, fe, o->entry1, o->grp1, o->part1};
    return KEEL_OK;
  }
  if (dims[rank - 1 - fe] < 0)
    return refuse(S, n, "cannot tell that operand '%s' is the same for every head / column "
                  "(its extent along the sharded axis is not known)", name, 0, 0);
  return refuse(S, n, "operand '%s' varies along the sharded axis (%lld)", name,
                (long long)dims[rank - 1 - fe], 0);
}

/* Shape elements of a Reshape: the count (a constant's length, or a
 * Concat of one-element pieces), or -1 when neither. */
static int32_t shape_len(const sharder *S, const keel_node *r) {
  const keel_tensor *t = const_t(S, r->in_names[1]);
  if (t) return t->rank == 1 ? (int32_t)t->shape[0] : -1;
  int32_t p = keel_ir_producer(S->g, r->in_names[1]);
  if (p < 0) return -1;
  const keel_node *c = &S->g->nodes[p];
  const keel_attr *ax = keel_node_attr(c, "axis");
  if (strcmp(c->op_type, "Concat") || (ax && ax->i != 0)) return -1;
  return c->n_in;
}

/* Element `pos` of a constant integer tensor. */
static bool const_elem(const keel_tensor *t, int64_t pos, int64_t *v) {
  int64_t n = keel_tensor_numel(t);
  if (pos < 0 || pos >= n) return false;
  if (t->dtype == KEEL_INT64) *v = ((const int64_t *)t->data)[pos];
  else if (t->dtype == KEEL_INT32) *v = ((const int32_t *)t->data)[pos];
  else return false;
  return true;
}

/* The known value of shape element `pos` (a constant, a constant piece,
 * or Unsqueeze of a constant); false when computed at run time. */
static bool shape_elem(const sharder *S, const keel_node *r, int32_t pos, int64_t *v) {
  const keel_tensor *t = const_t(S, r->in_names[1]);
  const char *piece = NULL;
  if (!t) {
    const keel_node *c = &S->g->nodes[keel_ir_producer(S->g, r->in_names[1])];
    piece = c->in_names[pos];
    t = const_t(S, piece);
    if (!t) {
      int32_t p = keel_ir_producer(S->g, piece);
      const keel_node *u = p >= 0 ? &S->g->nodes[p] : NULL;
      if (!u || strcmp(u->op_type, "Unsqueeze")) return false;
      t = const_t(S, u->in_names[0]);
    }
    if (!t || keel_tensor_numel(t) != 1) return false;
    pos = 0;
  }
  return const_elem(t, pos, v);
}

/* ============================================ where a shape element comes from
 *
 * Exporters compute Reshape and Expand shapes at run time from the shapes of
 * other values: repeat_kv in grouped-query attention expands [B, n_kv, T, D]
 * to [B, n_kv, rep, T, D] with a shape of Shape(k)[0], Shape(k)[1], rep, ...
 * Once k is sharded along its heads, Shape(k)[1] is this rank's count, so
 * that element needs no edit; a constant or the shape of an unsharded value
 * is global and must be divided. origin() tells which, element by element,
 * following the small integer ops exporters write between Shape and the
 * shape input. */
typedef enum { EL_UNKNOWN, EL_SAME, EL_LOCAL, EL_CONST } el_kind;
typedef struct el {
  el_kind k;
  int64_t v;                   /* EL_CONST: the value; EL_LOCAL: the
                                  constant it was multiplied by, or 0      */
  int32_t leaf, leaf_in;       /* the constant's reader and input (EL_CONST,
                                  or EL_LOCAL's multiplier), else -1       */
  int64_t leaf_pos;            /* the element of that constant             */
} el;

/* An element with no constant behind it to edit. */
static el el_of(el_kind k) { return (el){k, 0, -1, -1, 0}; }

/* The rank the plan gives a block value, else the inferred one (-1). */
static int32_t value_rank(const sharder *S, const block *B, const char *name) {
  for (int32_t i = 0; i < B->n_states; i++)
    if (!strcmp(B->states[i].name, name) && B->states[i].rank >= 0) return B->states[i].rank;
  const keel_sshape *v = keel_shapes_find(S->shapes, S->g, name);
  return v ? v->rank : -1;
}

/* Elements in a 1-D value (inferred), else -1. */
static int64_t value_len(const sharder *S, const char *name) {
  const keel_tensor *t = const_t(S, name);
  if (t) return keel_tensor_numel(t);
  const keel_sshape *v = keel_shapes_find(S->shapes, S->g, name);
  if (!v || v->rank < 0) return -1;
  int64_t n = 1;
  for (int32_t i = 0; i < v->rank; i++) {
    if (v->d[i].sym != KEEL_SYM_KNOWN) return -1;
    n *= v->d[i].add;
  }
  return n;
}

/* Element pos of value `name`, which node rd reads as its input rin (-1:
 * no reader to name). */
static el origin(const sharder *S, const block *B, const char *name, int64_t pos, int depth,
                 int32_t rd, int32_t rin) {
  const el unknown = el_of(EL_UNKNOWN);
  const keel_tensor *t = name[0] ? const_t(S, name) : NULL;
  int64_t v;
  if (t) {
    int64_t at = keel_tensor_numel(t) == 1 ? 0 : pos;
    return const_elem(t, at, &v) ? (el){EL_CONST, v, rd, rin, at} : unknown;
  }
  int32_t p = name[0] && depth < 24 ? keel_ir_producer(S->g, name) : -1;
  if (p < 0) return unknown;
  const keel_node *n = &S->g->nodes[p];
  const char *op = n->op_type;
  if (n->domain[0]) return unknown;
  if (!strcmp(op, "Shape")) {
    const vstate *s = state_of((block *)B, n->in_names[0]);
    int32_t rank = value_rank(S, B, n->in_names[0]);
    if (!s) return el_of(EL_SAME); /* whole on every rank */
    if (rank < 0) return unknown;
    int64_t start = attr_i(n, "start", 0);
    if (start < 0) start += rank;
    return start + pos == rank - 1 - s->fe ? el_of(EL_LOCAL) : el_of(EL_SAME);
  }
  if (!strcmp(op, "Gather") && n->n_in == 2 && attr_i(n, "axis", 0) == 0) {
    const keel_tensor *ix = const_t(S, n->in_names[1]);
    int64_t len = value_len(S, n->in_names[0]);
    if (!ix || !const_elem(ix, keel_tensor_numel(ix) == 1 ? 0 : pos, &v)) return unknown;
    if (v < 0 && len < 0) return unknown;
    return origin(S, B, n->in_names[0], v < 0 ? v + len : v, depth + 1, p, 0);
  }
  if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Cast") ||
      !strcmp(op, "Identity") || !strcmp(op, "Reshape")) /* row-major order is kept */
    return origin(S, B, n->in_names[0], pos, depth + 1, p, 0);
  if (!strcmp(op, "Concat") && attr_i(n, "axis", 0) == 0) {
    for (int32_t k = 0; k < n->n_in; k++) {
      int64_t len = value_len(S, n->in_names[k]);
      if (len < 0) return unknown;
      if (pos < len) return origin(S, B, n->in_names[k], pos, depth + 1, p, k);
      pos -= len;
    }
    return unknown;
  }
  if (!strcmp(op, "ConstantOfShape")) {
    const keel_attr *a = keel_node_attr(n, "value");
    if (!a) return el_of(EL_CONST);
    if (a->type != KEEL_ATTR_TENSOR || !const_elem(a->t, 0, &v)) return unknown;
    el c = el_of(EL_CONST);
    c.v = v;
    return c;
  }
  if ((!strcmp(op, "Mul") || !strcmp(op, "Div") || !strcmp(op, "Add") || !strcmp(op, "Sub")) &&
      n->n_in == 2) {
    el a = origin(S, B, n->in_names[0], pos, depth + 1, p, 0);
    el b = origin(S, B, n->in_names[1], pos, depth + 1, p, 1);
    if (a.k == EL_CONST && b.k == EL_CONST) {
      el c = el_of(EL_CONST); /* computed: no one constant to edit */
      if (op[0] == 'M') c.v = a.v * b.v;
      else if (op[0] == 'A') c.v = a.v + b.v;
      else if (op[0] == 'S') c.v = a.v - b.v;
      else if (b.v) c.v = a.v / b.v;
      else return unknown;
      return c;
    }
    if (a.k == EL_UNKNOWN || b.k == EL_UNKNOWN) return unknown;
    if (a.k == EL_LOCAL && b.k == EL_LOCAL) return unknown;
    /* a rank's count times (or over) a constant is still a rank's count;
     * a sum with one is not. Times a constant, that constant is kept (a
     * replicated merge edits it). */
    if (a.k == EL_LOCAL || b.k == EL_LOCAL) {
      const el *l = a.k == EL_LOCAL ? &a : &b, *c = a.k == EL_LOCAL ? &b : &a;
      if (op[0] == 'M')
        return c->k == EL_CONST && !l->v ? (el){EL_LOCAL, c->v, c->leaf, c->leaf_in, c->leaf_pos}
                                         : el_of(EL_LOCAL);
      return op[0] == 'D' && a.k == EL_LOCAL && b.k == EL_CONST ? el_of(EL_LOCAL) : unknown;
    }
    return el_of(EL_SAME);
  }
  /* Where(x == -1, 1, x): the exporters' "-1 keeps the input's dim" for
   * Expand; the value is x's wherever x is not -1 (a Shape never is) */
  if (!strcmp(op, "Where") && n->n_in == 3) {
    el a = origin(S, B, n->in_names[1], pos, depth + 1, p, 1);
    el b = origin(S, B, n->in_names[2], pos, depth + 1, p, 2);
    if (a.k == b.k && (a.k != EL_CONST || a.v == b.v)) return a;
    if (a.k == EL_CONST && a.v == 1) return b;
    return unknown;
  }
  return unknown;
}

/* Whether a Shape node that reads block value `v` only feeds shapes of
 * the block's Reshapes and Expands (through small integer ops), or takes
 * from it only elements that are the same on every rank; its uses are
 * then checked element by element by origin(). */
static const char *const g_shape_arith[] = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Cast",
                                           "Mul", "Div", "Add", "Sub", "Reshape", "Where", "Equal",
                                           "ConstantOfShape", "Shape", "Identity"};

static bool shape_only(const sharder *S, const block *B, const char *value, int depth) {
  int32_t seen = 0;
  if (depth > 24) return false;
  for (int32_t i = 0; i < S->g->n_nodes; i++) {
    const keel_node *n = &S->g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) {
      if (strcmp(n->in_names[k], value)) continue;
      seen++;
      bool in_block = false;
      for (int32_t j = 0; j < B->n_nodes; j++) in_block = in_block || B->nodes[j] == i;
      if (in_block && k >= data_inputs(n)) continue; /* a block Reshape's / Expand's shape */
      if (in_block || n->domain[0] || n->n_subs) return false;
      if (!strcmp(n->op_type, "Gather") && k == 0 && origin(S, B, n->out_names[0], 0, 0, -1, -1).k == EL_SAME &&
          value_len(S, n->out_names[0]) == 1)
        continue; /* one element, the same on every rank */
      bool arith = false;
      for (size_t a = 0; a < KEEL_COUNTOF(g_shape_arith); a++) arith = arith || !strcmp(n->op_type, g_shape_arith[a]);
      if (!arith || n->n_out != 1 || !shape_only(S, B, n->out_names[0], depth + 1)) return false;
    }
  }
  return seen == keel_ir_uses(S->g, value);
}

static int32_t div_of(const sharder *S, int32_t div) { return div ? div : S->cfg->tp; }

/* Records that constant element e (its leaf) becomes e.v / div. */
static keel_status leaf_edit_of(sharder *S, block *B, const keel_node *n, el e, int32_t div) {
  if (e.leaf < 0 || e.v % div)
    return refuse(S, n, "a shape element (%lld) that cannot be divided by %lld where it is written",
                  "", (long long)e.v, div);
  if (B->n_leaves == (int32_t)KEEL_COUNTOF(B->leaves)) return refuse(S, n, "too many shape edits%s", "", 0, 0);
  B->leaves[B->n_leaves++] = (leaf_edit){e.leaf, e.leaf_in, e.leaf_pos, div};
  return KEEL_OK;
}

/* Shape element `pos` of Reshape / Expand node i at the sharded axis:
 * records the edit (global / div, div 0 = tp) unless it is already this
 * rank's count (from the shape of a sharded value) or, where keep_one, 1.
 * A shape that is neither a constant nor a Concat of pieces has the
 * constant the element comes from edited instead, where there is one. */
static keel_status shape_edit_at(sharder *S, block *B, int32_t i, int32_t pos, bool keep_one,
                                 int32_t div) {
  const keel_node *n = &S->g->nodes[i];
  el e = origin(S, B, n->in_names[1], pos, 0, i, 1);
  if (e.k == EL_LOCAL || (keep_one && e.k == EL_CONST && e.v == 1)) return KEEL_OK;
  if (e.k == EL_UNKNOWN && keep_one)
    return refuse(S, n, "cannot tell where element %s%lld of its shape comes from", "", pos, 0);
  if (shape_len(S, n) <= pos) {
    if (e.k == EL_CONST && e.leaf >= 0) return leaf_edit_of(S, B, n, e, div_of(S, div));
    return refuse(S, n, "its shape is neither a constant nor a Concat of pieces (element %s%lld "
                  "must be divided)", "", pos, 0);
  }
  if (B->n_shapes == (int32_t)KEEL_COUNTOF(B->shapes)) return refuse(S, n, "too many shape edits%s", "", 0, 0);
  B->shapes[B->n_shapes++] = (shape_edit){i, pos, div};
  return KEEL_OK;
}

/* Whether dims [0, nx) of x and [0, ny) of y have the same product:
 * equal symbolic dims cancel, the integers multiply. */
static bool prefix_equal(const keel_sshape *x, int32_t nx, const keel_sshape *y, int32_t ny) {
  keel_sdim sx[KEEL_MAX_RANK];
  int32_t cx = 0, cy = 0;
  int64_t px = 1, py = 1;
  for (int32_t i = 0; i < nx; i++) {
    if (x->d[i].sym == KEEL_SYM_UNKNOWN) return false;
    if (x->d[i].sym == KEEL_SYM_KNOWN) px *= x->d[i].add;
    else sx[cx++] = x->d[i];
  }
  for (int32_t i = 0; i < ny; i++) {
    if (y->d[i].sym == KEEL_SYM_UNKNOWN) return false;
    if (y->d[i].sym == KEEL_SYM_KNOWN) { py *= y->d[i].add; continue; }
    bool hit = false;
    for (int32_t k = 0; k < cx && !hit; k++)
      if (keel_sd_eq(sx[k], y->d[i])) sx[k] = sx[--cx], hit = true;
    cy += !hit;
  }
  return !cx && !cy && px == py;
}

/* Value `in` splits into `heads` heads, fewer than the ranks: its entry
 * (or its part of a fused entry) is cut `heads` ways, each head kept by
 * tp / heads ranks. */
static keel_status replicate(sharder *S, block *B, const keel_node *n, const vstate *in, int32_t heads) {
  parts *p = NULL;
  int32_t q = 0;
  if (in->grp1) p = &B->group[in->grp1 - 1], q = in->part1 - 1;
  else if (in->entry1) {
    for (int32_t j = 0; j < B->n_groups && !p; j++)
      if (B->group_node[j] == in->entry1 - 1) p = &B->group[j];
    if (p && p->n != 1) return refuse(S, n, "heads of a fused projection read without its Split%s", "", 0, 0);
    if (!p) {
      if (B->n_groups == 16) return refuse(S, n, "too many replicated projections%s", "", 0, 0);
      B->group_node[B->n_groups] = in->entry1 - 1;
      p = &B->group[B->n_groups++];
      *p = (parts){1, {in->g}, {0}};
    }
  }
  if (!p || in->g <= 0)
    return refuse(S, n, "%s%lld key/value heads among %lld ranks: replicating them needs their "
                  "projection right before this Reshape", "", heads, S->cfg->tp);
  if (p->div[q] && p->div[q] != heads) return refuse(S, n, "a projection split two ways%s", "", 0, 0);
  p->div[q] = heads;
  return KEEL_OK;
}

/* A Reshape that moves the sharded axis neither as the two cases below
 * write it: from the inferred shapes, the output axis j that starts where
 * the sharded input axis a starts (the dims before them have the same
 * product) and that either holds a whole (a merged with the axes after it,
 * repeat_kv's [B, n_kv, rep, T, D] -> [B, n_kv * rep, T, D]) or is the
 * outer part of it. */
static keel_status plan_reshape_general(sharder *S, block *B, int32_t i, const vstate *in, vstate *out) {
  const keel_node *n = &S->g->nodes[i];
  const keel_sshape *x = keel_shapes_find(S->shapes, S->g, n->in_names[0]);
  const keel_sshape *y = keel_shapes_find(S->shapes, S->g, n->out_names[0]);
  int32_t tp = S->cfg->tp;
  if (!x || !y || x->rank < 0 || y->rank < 0 || (in->rank >= 0 && x->rank != in->rank))
    return refuse(S, n, "a Reshape of the sharded value whose shapes are not known%s", "", 0, 0);
  int32_t a = x->rank - 1 - in->fe;
  if (a < 0 || x->d[a].sym != KEEL_SYM_KNOWN)
    return refuse(S, n, "a Reshape of the sharded value whose sharded axis is not known%s", "", 0, 0);
  int64_t ia = x->d[a].add;
  for (int32_t j = 0; j < y->rank; j++) {
    if (y->d[j].sym != KEEL_SYM_KNOWN || y->d[j].add <= 1 || !prefix_equal(x, a, y, j)) continue;
    int64_t oj = y->d[j].add;
    bool merge = oj % ia == 0, split = ia % oj == 0;
    if (!merge && !split) break;
    if (in->div) { /* replicated key/value heads, repeated: back to tp ways */
      if (!in->repeated || !merge)
        return refuse(S, n, "key/value heads replicated among the ranks (%s%lld heads) are not "
                      "repeated into the query heads before this Reshape", "", (long long)ia, 0);
      if (oj % tp)
        return refuse(S, n, "%s%lld heads do not divide among %lld ranks", "", (long long)oj, tp);
      *out = (vstate){n->out_names[0], y->rank - 1 - j, y->rank, oj};
      /* this rank's kv heads x rep: the rep constant becomes rep * h / tp,
       * as the Expand's did; a constant count of heads is divided */
      el e = origin(S, B, n->in_names[1], j, 0, i, 1);
      if (e.k == EL_LOCAL) return leaf_edit_of(S, B, n, e, tp / in->div);
      return shape_edit_at(S, B, i, j, false, 0);
    }
    if ((merge ? ia : oj) % tp)
      return refuse(S, n, "%s%lld heads do not divide among %lld ranks", "", (long long)(merge ? ia : oj), tp);
    *out = (vstate){n->out_names[0], y->rank - 1 - j, y->rank, oj};
    return shape_edit_at(S, B, i, j, false, 0);
  }
  return refuse(S, n, "a Reshape that neither splits the sharded axis into (heads, head size) nor "
                "merges it with the axes after it%s", "", 0, 0);
}

static keel_status plan_reshape(sharder *S, block *B, int32_t i, const vstate *in, vstate *out) {
  const keel_node *n = &S->g->nodes[i];
  int32_t L = shape_len(S, n), tp = S->cfg->tp;
  int64_t h, d;
  if (L >= 2 && in->fe == 0 && (in->rank < 0 || L == in->rank + 1)) { /* [.., C] -> [.., H, D] */
    bool kh = shape_elem(S, n, L - 2, &h), kd = shape_elem(S, n, L - 1, &d);
    if (kh && h == 0) return refuse(S, n, "shape element 0 (copy) at the head axis%s", "", 0, 0);
    if (in->div) return refuse(S, n, "a Reshape of replicated key/value heads%s", "", 0, 0);
    if (kh && h > 0 && kd && d > 0 && in->g > 0 && h * d != in->g)
      return refuse(S, n, "%sheads x head size (%lld) is not the projection width (%lld)", "",
                    (long long)(h * d), (long long)in->g);
    if ((!kh || h < 0) && kd && d > 0 && in->g > 0 && in->g % d)
      return refuse(S, n, "%sthe projection width %lld is not a multiple of the head size", "",
                    (long long)in->g, 0);
    int64_t heads = kh && h > 0 ? h : (kd && d > 0 && in->g > 0 ? in->g / d : -1);
    *out = (vstate){n->out_names[0], 1, L, heads};
    if (heads > 0 && heads % tp) {
      /* fewer heads than ranks, a divisor of tp: key/value heads, replicated */
      if (tp % heads) return refuse(S, n, "%s%lld heads do not divide among %lld ranks", "", (long long)heads, tp);
      KEEL_TRY(replicate(S, B, n, in, (int32_t)heads));
      out->div = (int32_t)heads;
    }
    B->attention = true;
    return !kh || h > 0 ? shape_edit_at(S, B, i, L - 2, false, out->div) : KEEL_OK;
  }
  if (L >= 1 && in->fe == 1 && in->rank > 1 && L == in->rank - 1) { /* [.., H, D] -> [.., C] */
    if (in->div) return refuse(S, n, "a Reshape of replicated key/value heads%s", "", 0, 0);
    bool kc = shape_elem(S, n, L - 1, &h);
    if (kc && h == 0) return refuse(S, n, "shape element 0 (copy) at the merged axis%s", "", 0, 0);
    if (kc && h > 0 && h % tp)
      return refuse(S, n, "%sthe merged width %lld does not divide among %lld ranks", "", (long long)h, tp);
    *out = (vstate){n->out_names[0], 0, L, kc && h > 0 ? h : -1};
    return !kc || h > 0 ? shape_edit_at(S, B, i, L - 1, false, 0) : KEEL_OK;
  }
  return plan_reshape_general(S, B, i, in, out);
}

/* Unsqueeze: the sharded axis keeps its place among the input's axes. */
static keel_status plan_unsqueeze(sharder *S, block *B, int32_t i, const vstate *in, vstate *out) {
  const keel_node *n = &S->g->nodes[i];
  const keel_attr *at = keel_node_attr(n, "axes");
  const keel_tensor *t = n->n_in > 1 && n->in_names[1][0] ? const_t(S, n->in_names[1]) : NULL;
  int32_t rank = in->rank >= 0 ? in->rank : value_rank(S, B, n->in_names[0]);
  int64_t na = at && at->type == KEEL_ATTR_INTS ? at->n : t ? keel_tensor_numel(t) : -1;
  if (rank < 0 || na < 0 || na > KEEL_MAX_RANK)
    return refuse(S, n, "an Unsqueeze of the sharded value whose rank or axes are not known%s", "", 0, 0);
  int32_t ro = rank + (int32_t)na, abs_in = rank - 1 - in->fe, seen = 0;
  bool inserted[KEEL_MAX_RANK * 2] = {false};
  for (int64_t k = 0; k < na; k++) {
    int64_t ax;
    if (at && at->type == KEEL_ATTR_INTS) ax = at->ints[k];
    else if (!const_elem(t, k, &ax)) return refuse(S, n, "an Unsqueeze with axes%s not integers", "", 0, 0);
    if (ax < 0) ax += ro;
    if (ax < 0 || ax >= ro) return refuse(S, n, "an Unsqueeze axis%s out of range", "", 0, 0);
    inserted[ax] = true;
  }
  for (int32_t p = 0; p < ro; p++) {
    if (inserted[p]) continue;
    if (seen++ == abs_in) {
      *out = (vstate){n->out_names[0], ro - 1 - p, ro, in->g};
      out->div = in->div, out->repeated = in->repeated;
      return KEEL_OK;
    }
  }
  return refuse(S, n, "an Unsqueeze that loses the sharded axis%s (internal)", "", 0, 0);
}

/* Expand: the sharded axis stays (counted from the last); the target's
 * element there must be 1 or this rank's count, else it is divided.
 * Replicated key/value heads must be repeat_kv's: the axis after the
 * heads is a 1 expanded by rep, which becomes rep * h / tp. */
static keel_status plan_expand(sharder *S, block *B, int32_t i, const vstate *in, vstate *out) {
  const keel_node *n = &S->g->nodes[i];
  int64_t len = value_len(S, n->in_names[1]);
  const keel_sshape *x = keel_shapes_find(S->shapes, S->g, n->in_names[0]);
  const keel_sshape *y = keel_shapes_find(S->shapes, S->g, n->out_names[0]);
  if (len < 0) return refuse(S, n, "an Expand of the sharded value whose shape's length is not known%s", "", 0, 0);
  int32_t ro = y && y->rank >= 0 ? y->rank : (in->rank > len ? in->rank : (int32_t)len);
  *out = (vstate){n->out_names[0], in->fe, ro, in->g};
  out->div = in->div;
  if (len - 1 - in->fe >= 0) KEEL_TRY(shape_edit_at(S, B, i, (int32_t)(len - 1 - in->fe), true, in->div));
  if (!in->div) return KEEL_OK;
  int32_t f = S->cfg->tp / in->div, after = ro - in->fe; /* the output axis after the heads */
  int32_t xa = x && x->rank >= 0 ? after - (ro - x->rank) : -1;
  int64_t pos = after - (ro - len);
  if (in->fe < 1 || xa < 0 || xa >= x->rank || x->d[xa].sym != KEEL_SYM_KNOWN || x->d[xa].add != 1 ||
      pos < 0)
    return refuse(S, n, "an Expand of replicated key/value heads that is not repeat_kv's (a 1 after "
                  "the heads, expanded by the repeat count)%s", "", 0, 0);
  el e = origin(S, B, n->in_names[1], pos, 0, i, 1);
  if (e.k != EL_CONST || e.v < f)
    return refuse(S, n, "an Expand of replicated key/value heads whose repeat count is not a "
                  "constant of at least %s%lld", "", f, 0);
  out->repeated = true;
  return leaf_edit_of(S, B, n, e, f);
}

static keel_status plan_transpose(sharder *S, int32_t i, const vstate *in, vstate *out) {
  const keel_node *n = &S->g->nodes[i];
  const keel_attr *perm = keel_node_attr(n, "perm");
  if (!perm || perm->type != KEEL_ATTR_INTS || (in->rank >= 0 && perm->n != in->rank) || in->fe >= perm->n)
    return refuse(S, n, "a Transpose without a perm of the value's rank%s", "", 0, 0);
  int32_t abs_in = perm->n - 1 - in->fe, at = -1;
  for (int32_t k = 0; k < perm->n; k++)
    if (perm->ints[k] == abs_in) at = k;
  if (at < 0) return refuse(S, n, "a Transpose whose perm misses an axis%s", "", 0, 0);
  *out = (vstate){n->out_names[0], perm->n - 1 - at, perm->n, in->g};
  out->div = in->div, out->repeated = in->repeated;
  return KEEL_OK;
}

/* The sizes of a Split: its `split` input or attribute; n = 0 when it
 * splits equally. false: sizes computed at run time. */
static bool split_sizes(const sharder *S, const keel_node *n, int64_t *sz, int32_t *k) {
  const keel_attr *a = keel_node_attr(n, "split");
  *k = 0;
  if (n->n_in >= 2 && n->in_names[1][0]) {
    const keel_tensor *t = const_t(S, n->in_names[1]);
    if (!t || t->dtype != KEEL_INT64 || keel_tensor_numel(t) > 64) return false;
    *k = (int32_t)keel_tensor_numel(t);
    memcpy(sz, t->data, sizeof(int64_t) * (size_t)*k);
  } else if (a && a->type == KEEL_ATTR_INTS && a->n <= 64) {
    *k = a->n;
    memcpy(sz, a->ints, sizeof(int64_t) * (size_t)a->n);
  }
  return true;
}

/* A fused projection (q, k and v in one weight) split along its last
 * axis: each rank keeps its block of every part, so the entry's columns
 * (and bias) are sliced part by part. The parts may differ (grouped-query
 * attention: q of all heads, k and v of fewer); each must divide by tp. */
static keel_status plan_split(sharder *S, block *B, int32_t i, const vstate *in) {
  const keel_node *n = &S->g->nodes[i];
  const keel_attr *ax = keel_node_attr(n, "axis");
  int64_t axis = ax ? ax->i : 0, sz[64];
  int32_t k, np = n->n_out, tp = S->cfg->tp;
  if (!split_sizes(S, n, sz, &k)) return refuse(S, n, "a Split with sizes computed at run time%s", "", 0, 0);
  bool last = axis == -1 || (in->rank >= 0 && axis == in->rank - 1);
  int64_t sum = 0;
  for (int32_t j = 0; j < k; j++) sum += sz[j];
  if (!last && in->rank < 0 && axis >= 0 && k == np && in->g > 0 && sum == in->g) last = true;
  if (in->fe != 0 || !last || !in->entry1 || (k && (k != np || sum != in->g)) || in->g <= 0 ||
      (!k && in->g % np) || np > 16)
    return refuse(S, n, "a Split that is not the last-axis split of a fused projection%s", "", 0, 0);
  parts p = {np, {0}, {0}};
  for (int32_t j = 0; j < np; j++) {
    p.len[j] = k ? sz[j] : in->g / np;
    if (p.len[j] % tp)
      return refuse(S, n, "%spart %lld's width does not divide among %lld ranks", "", (long long)j, tp);
  }
  if (B->n_groups == 16 || B->n_splits == 16) return refuse(S, n, "too many fused projections%s", "", 0, 0);
  int32_t grp = B->n_groups;
  B->group_node[B->n_groups] = in->entry1 - 1;
  B->group[B->n_groups++] = p;
  if (k) B->split_group[B->n_splits] = grp, B->splits[B->n_splits++] = i;
  int32_t rank = in->rank >= 0 ? in->rank : axis >= 0 ? (int32_t)axis + 1 : value_rank(S, B, n->in_names[0]);
  for (int32_t j = 0; j < np; j++)
    if (n->out_names[j][0])
      B->states[B->n_states++] = (vstate){n->out_names[j], 0, rank, p.len[j], 0, grp + 1, j + 1};
  return KEEL_OK;
}

/* The parts of a fused entry (entry1 = 1 + its node), or NULL: one. */
static const parts *groups_of(const block *B, int32_t entry1) {
  for (int32_t j = 0; entry1 && j < B->n_groups; j++)
    if (B->group_node[j] == entry1 - 1) return &B->group[j];
  return NULL;
}

/* An interior node: the state of its output from its sharded operands. */
static keel_status plan_node(sharder *S, block *B, int32_t i) {
  const keel_node *n = &S->g->nodes[i];
  const vstate *first = NULL;
  for (int32_t k = 0; k < data_inputs(n); k++) {
    const vstate *s = n->in_names[k][0] ? state_of(B, n->in_names[k]) : NULL;
    if (!s) continue;
    if (first && (s->fe != first->fe || (s->rank >= 0 && first->rank >= 0 && s->rank != first->rank)))
      return refuse(S, n, "operands sharded along different axes%s", "", 0, 0);
    if (first && s->div != first->div)
      return refuse(S, n, "operands cut different ways (replicated key/value heads beside query "
                    "heads)%s", "", 0, 0);
    if (!first) first = s;
  }
  if (!first) return refuse(S, n, "no sharded operand (internal)%s", "", 0, 0);
  if (is_split(n)) return plan_split(S, B, i, first);
  bool ew = is_elementwise(n);
  if (first->div && !ew && strcmp(n->op_type, "Reshape") && strcmp(n->op_type, "Unsqueeze") &&
      strcmp(n->op_type, "Expand") && strcmp(n->op_type, "Transpose"))
    return refuse(S, n, "%s%lld heads do not divide among %lld ranks (fewer heads than ranks are "
                  "replicated only as key/value heads that repeat_kv repeats)", "", first->div,
                  S->cfg->tp);
  vstate out = {n->out_names[0], first->fe, first->rank, first->g, ew ? first->entry1 : 0,
                ew ? first->grp1 : 0, ew ? first->part1 : 0, first->div, first->repeated};
  if (!strcmp(n->op_type, "Reshape")) KEEL_TRY(plan_reshape(S, B, i, first, &out));
  else if (!strcmp(n->op_type, "Unsqueeze")) KEEL_TRY(plan_unsqueeze(S, B, i, first, &out));
  else if (!strcmp(n->op_type, "Expand")) KEEL_TRY(plan_expand(S, B, i, first, &out));
  else if (!strcmp(n->op_type, "Transpose")) KEEL_TRY(plan_transpose(S, i, first, &out));
  else if (!strcmp(n->op_type, "MatMul") && first->fe < 2)
    return refuse(S, n, "a MatMul over the sharded axis%s (only batch axes may be sharded)", "", 0, 0);
  else if (!strcmp(n->op_type, "Softmax")) {
    const keel_attr *ax = keel_node_attr(n, "axis");
    int64_t a = ax ? ax->i : (n->opset >= 13 ? -1 : 1);
    int64_t fe = a < 0 ? -a - 1 : (first->rank >= 0 ? first->rank - 1 - a : -1);
    if (fe < 0 || fe == first->fe) return refuse(S, n, "a Softmax over the sharded axis%s", "", 0, 0);
  }
  for (int32_t k = 0; k < data_inputs(n); k++)
    if (!state_of(B, n->in_names[k])) KEEL_TRY(plan_side(S, B, i, k, &out));
  B->states[B->n_states++] = out;
  return KEEL_OK;
}

/* Every value the block makes is read only inside it (or by its exit). */
static keel_status plan_closed(sharder *S, block *B) {
  for (int32_t s = 0; s < B->n_states; s++) {
    const char *v = B->states[s].name;
    int32_t inside = 0;
    for (int32_t j = 0; j <= B->n_nodes; j++) {
      const keel_node *n = &S->g->nodes[j < B->n_nodes ? B->nodes[j] : B->exit];
      for (int32_t k = 0; k < n->n_in; k++) inside += !strcmp(n->in_names[k], v);
    }
    for (int32_t j = 0; j < S->g->n_nodes; j++) { /* Shape(v), for the block's own shapes */
      const keel_node *n = &S->g->nodes[j];
      if (!strcmp(n->op_type, "Shape") && !n->domain[0] && !strcmp(n->in_names[0], v) &&
          shape_only(S, B, n->out_names[0], 0))
        inside++;
    }
    if (keel_ir_uses(S->g, v) != inside) {
      int32_t p = keel_ir_producer(S->g, v);
      return refuse(S, &S->g->nodes[p], "its output '%s' is read outside the block (it would be "
                    "one rank's part only)", v, 0, 0);
    }
  }
  return KEEL_OK;
}

static keel_status plan(sharder *S, block *B) {
  int32_t tp = S->cfg->tp;
  qsort(B->nodes, (size_t)B->n_nodes, sizeof *B->nodes, cmp_i32);
  for (int32_t j = 0; j < B->n_nodes; j++) {
    int32_t i = B->nodes[j];
    const keel_node *n = &S->g->nodes[i];
    int32_t ka, ma;
    if (weight_proj(S, n, &ka, &ma)) {
      const keel_tensor *w = const_t(S, n->in_names[1]);
      if (w->shape[ma] % tp)
        return refuse(S, n, "%sthe projection width %lld does not divide among %lld ranks", "",
                      (long long)w->shape[ma], tp);
      const char *c = gemm_bias(n);
      const keel_tensor *ct = c ? const_t(S, c) : NULL;
      if (c && (!ct || (ct->rank && ct->shape[ct->rank - 1] != 1 && ct->shape[ct->rank - 1] != w->shape[ma])))
        return refuse(S, n, "a Gemm whose bias '%s' is not a constant of its width", c, 0, 0);
      B->states[B->n_states++] = (vstate){n->out_names[0], 0, !strcmp(n->op_type, "Gemm") ? 2 : -1,
                                          w->shape[ma], i + 1};
    } else {
      KEEL_TRY(plan_node(S, B, i));
    }
  }
  const keel_node *x = &S->g->nodes[B->exit];
  const vstate *a = state_of(B, x->in_names[0]);
  const keel_tensor *w = const_t(S, x->in_names[1]);
  int32_t ka, ma;
  weight_proj(S, x, &ka, &ma);
  if (!a || a->fe != 0)
    return refuse(S, x, "the row-parallel MatMul's input is not sharded along its last axis%s", "", 0, 0);
  if (w->shape[ka] % tp || (a->g > 0 && a->g != w->shape[ka]))
    return refuse(S, x, "%sits weight's %lld rows do not divide among %lld ranks", "",
                  (long long)w->shape[ka], tp);
  const keel_attr *beta = keel_node_attr(x, "beta");
  if (gemm_bias(x) && (x->opset < 11 || (beta && beta->f != 1.0f)))
    return refuse(S, x, "a row-parallel Gemm with a scaled bias (beta) or before opset 11%s", "", 0, 0);
  return plan_closed(S, B);
}

/* ========================================================== applying */

/* Constant `name` in the graph: t's type and shape over d, nbytes of arena
 * memory, which a static buffer now holds; *out: its name in the graph. */
static keel_status add_const_over(sharder *S, const char *name, keel_tensor t, void *d, size_t nbytes,
                                  const char **out) {
  keel_buffer *b = keel_arena_alloc(S->m->arena, sizeof *b, 8);
  if (!b) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: constant '%s'", name);
  atomic_init(&b->refs, 1);
  b->kind = KEEL_BUF_STATIC;
  b->nbytes = nbytes;
  b->data = d;
  t.buf = b;
  t.data = d;
  KEEL_TRY(keel_ir_add_const(S->m, S->g, name, &t, NULL));
  *out = S->g->ld.init_names[S->g->ld.n_init - 1];
  return KEEL_OK;
}

/* A new constant: block `rank` of tp along `axis` of constant `src`, of
 * each part when it holds several (a fused projection: p; NULL: one). A
 * part cut div < tp ways (replicated key/value heads) gives rank r its
 * block r * div / tp of div. */
static keel_status slice_const(sharder *S, const char *src, int32_t axis, const parts *p,
                               const char **out) {
  const keel_tensor *t = const_t(S, src);
  int32_t tp = S->cfg->tp, r = S->cfg->rank;
  char name[1024];
  bool rep = false;
  for (int32_t q = 0; p && q < p->n; q++) rep = rep || (p->div[q] && p->div[q] != tp);
  snprintf(name, sizeof name, "%s/tp%d_%d%s%s", src, r, tp, p && p->n > 1 ? "g" : "", rep ? "r" : "");
  if (const_t(S, name)) { /* the same weight in two blocks (shared weights) */
    *out = keel_arena_strdup(S->m->arena, name);
    return *out ? KEEL_OK : keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: a name");
  }
  size_t es = keel_dtype_size((keel_dtype)t->dtype);
  if (!es || t->dtype == KEEL_STRING || keel_dtype_is_packed(t->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "shard: constant '%s' of type %s cannot be sliced", src,
                    keel_dtype_name((keel_dtype)t->dtype));
  parts one = {1, {t->shape[axis]}, {0}};
  if (!p) p = &one;
  int64_t outer = 1, inner = 1, len = 0;
  for (int32_t q = 0; q < p->n; q++) len += p->len[q] / div_of(S, p->div[q]);
  for (int32_t k = 0; k < axis; k++) outer *= t->shape[k];
  for (int32_t k = axis + 1; k < t->rank; k++) inner *= t->shape[k];
  size_t nbytes = (size_t)(outer * len * inner) * es;
  uint8_t *d = keel_arena_alloc(S->m->arena, nbytes + 1, KEEL_ALIGN), *to = d;
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: slicing '%s'", src);
  for (int64_t o = 0; o < outer; o++) /* part q of row o: this rank's block */
    for (int64_t q = 0, start = 0; q < p->n; start += p->len[q++]) {
      int64_t ways = div_of(S, p->div[q]), w = p->len[q] / ways, blk = (int64_t)r * ways / tp;
      size_t row = (size_t)(w * inner) * es;
      memcpy(to, (const uint8_t *)t->data + ((size_t)(o * t->shape[axis] + start + blk * w) *
                                                 (size_t)inner) * es, row);
      to += row;
    }
  keel_tensor s = *t;
  s.shape[axis] = len;
  KEEL_TRY(add_const_over(S, name, s, d, nbytes, out));
  S->cfg->sharded_bytes += nbytes;
  S->cfg->sharded_full_bytes += keel_tensor_nbytes(t);
  if (S->n_dropped < (int32_t)KEEL_COUNTOF(S->dropped)) S->dropped[S->n_dropped++] = src;
  return KEEL_OK;
}

static keel_status int64_const(sharder *S, const char *name, int32_t n, const int64_t *v,
                               const char **out) {
  int64_t *d = keel_arena_alloc(S->m->arena, sizeof(int64_t) * (size_t)n, KEEL_ALIGN);
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: constant '%s'", name);
  memcpy(d, v, sizeof(int64_t) * (size_t)n);
  keel_tensor t = {.dtype = KEEL_INT64, .rank = 1, .shape = {n}};
  return add_const_over(S, name, t, d, sizeof(int64_t) * (size_t)n, out);
}

static const char *arena_fmt(sharder *S, const char *a, const char *b) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s%s", a, b);
  return keel_arena_strdup(S->m->arena, buf);
}

/* A node made by the pass: op, inputs, one output (names in the arena). */
static keel_status new_node(sharder *S, const char *name, const char *op, const char *domain,
                            int32_t n_in, const char *const *in, const char *out, keel_node *nd) {
  memset(nd, 0, sizeof *nd);
  keel_arena *a = S->m->arena;
  nd->name = name;
  nd->op_type = op;
  nd->domain = domain;
  nd->opset = domain[0] ? 1 : keel_model_opset(S->m, "");
  nd->n_in = n_in;
  nd->n_out = 1;
  nd->in_names = keel_arena_array(a, (size_t)n_in, sizeof(char *));
  nd->out_names = keel_arena_array(a, 1, sizeof(char *));
  if (!name || !nd->in_names || !nd->out_names) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: a node");
  memcpy(nd->in_names, in, sizeof(char *) * (size_t)n_in);
  nd->out_names[0] = out;
  return KEEL_OK;
}

/* Nodes to insert around node `at` of g: pre before it, post after it. */
typedef struct pending {
  int32_t at, n_pre, n_post;
  keel_node pre[8], post[2];
} pending;

static pending one_node(int32_t at, bool after, const keel_node *nd) {
  pending p = {.at = at};
  if (after) p.post[p.n_post++] = *nd;
  else p.pre[p.n_pre++] = *nd;
  return p;
}

static keel_status insert(sharder *S, const pending *p) {
  keel_node all[11];
  int32_t k = 0;
  for (int32_t i = 0; i < p->n_pre; i++) all[k++] = p->pre[i];
  all[k++] = S->g->nodes[p->at];
  for (int32_t i = 0; i < p->n_post; i++) all[k++] = p->post[i];
  return keel_graph_replace_node(S->m->arena, S->g, p->at, all, k);
}

/* Reshape shape element `pos` / tp: a new constant, or a Div node in
 * front of the Concat for a piece computed at run time. *div_at: the
 * Concat's index when a Div must be inserted there (else -1). */
static keel_status apply_shape(sharder *S, const shape_edit *e, keel_node *div, int32_t *div_at) {
  keel_node *r = &S->g->nodes[e->node];
  int32_t tp = div_of(S, e->div);
  int64_t v;
  *div_at = -1;
  const keel_tensor *t = const_t(S, r->in_names[1]);
  if (t) {
    int64_t vals[KEEL_MAX_RANK * 2];
    int32_t n = (int32_t)t->shape[0];
    for (int32_t k = 0; k < n && k < (int32_t)KEEL_COUNTOF(vals); k++)
      vals[k] = t->dtype == KEEL_INT64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
    vals[e->pos] /= tp;
    return int64_const(S, arena_fmt(S, r->out_names[0], "/shape_tp"), n, vals, &r->in_names[1]);
  }
  int32_t ci = keel_ir_producer(S->g, r->in_names[1]);
  keel_node *c = &S->g->nodes[ci];
  if (keel_ir_uses(S->g, c->out_names[0]) != 1)
    return refuse(S, r, "its shape '%s' is read by other nodes too", c->out_names[0], 0, 0);
  const char *piece = c->in_names[e->pos];
  if (shape_elem(S, r, e->pos, &v)) {
    int64_t q = v / tp;
    return int64_const(S, arena_fmt(S, r->out_names[0], "/shape_tp"), 1, &q, &c->in_names[e->pos]);
  }
  int64_t n = tp;
  const char *nc, *out = arena_fmt(S, r->out_names[0], "/shape_tp");
  KEEL_TRY(int64_const(S, arena_fmt(S, r->out_names[0], "/shape_tp_n"), 1, &n, &nc));
  const char *in[2] = {piece, nc};
  KEEL_TRY(new_node(S, arena_fmt(S, c->name[0] ? c->name : piece, "/tp_div"), "Div", "", 2, in, out, div));
  c->in_names[e->pos] = out;
  *div_at = ci;
  return KEEL_OK;
}

/* A fused projection's Split: every size / the ways its part is cut (its
 * input or attribute). */
static keel_status apply_split(sharder *S, keel_node *n, const parts *p) {
  int64_t sz[64];
  int32_t k;
  split_sizes(S, n, sz, &k);
  for (int32_t j = 0; j < k; j++) sz[j] /= div_of(S, j < p->n ? p->div[j] : 0);
  if (n->n_in >= 2 && n->in_names[1][0])
    return int64_const(S, arena_fmt(S, n->out_names[0], "/split_tp"), k, sz, &n->in_names[1]);
  keel_attr *at = keel_arena_array(S->m->arena, (size_t)n->n_attr, sizeof *at);
  int64_t *ints = keel_arena_array(S->m->arena, (size_t)k, sizeof *ints);
  if (!at || !ints) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: a Split");
  memcpy(at, n->attrs, sizeof *at * (size_t)n->n_attr);
  memcpy(ints, sz, sizeof *ints * (size_t)k);
  for (int32_t j = 0; j < n->n_attr; j++)
    if (!strcmp(at[j].name, "split")) at[j].ints = ints;
  n->attrs = at;
  return KEEL_OK;
}

static keel_status apply_exit(sharder *S, block *B, pending *ins, int32_t *n_ins);

/* Input e->in of node e->node, an integer constant, becomes a copy with
 * element e->pos divided (repeat_kv's repeat count at a replicated kv
 * head); the original stays for its other readers. */
static keel_status apply_leaf(sharder *S, const leaf_edit *e) {
  keel_node *n = &S->g->nodes[e->node];
  const keel_tensor *t = const_t(S, n->in_names[e->in]);
  int64_t count = t ? keel_tensor_numel(t) : 0;
  if (!t || (t->dtype != KEEL_INT64 && t->dtype != KEEL_INT32) || e->pos >= count)
    return refuse(S, n, "input '%s' is not an integer constant to divide", n->in_names[e->in], 0, 0);
  size_t es = keel_dtype_size((keel_dtype)t->dtype), nbytes = (size_t)count * es;
  uint8_t *d = keel_arena_alloc(S->m->arena, nbytes + 1, KEEL_ALIGN);
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: constant '%s'", n->in_names[e->in]);
  memcpy(d, t->data, nbytes);
  if (t->dtype == KEEL_INT64) ((int64_t *)(void *)d)[e->pos] /= e->div;
  else ((int32_t *)(void *)d)[e->pos] /= e->div;
  char suffix[64];
  snprintf(suffix, sizeof suffix, "/in%d_rep_tp", (int)e->in);
  if (S->n_dropped < (int32_t)KEEL_COUNTOF(S->dropped)) S->dropped[S->n_dropped++] = n->in_names[e->in];
  return add_const_over(S, arena_fmt(S, n->name[0] ? n->name : n->out_names[0], suffix), *t, d, nbytes,
                        &n->in_names[e->in]);
}

static keel_status apply(sharder *S, block *B, pending *ins, int32_t *n_ins) {
  for (int32_t j = 0; j < B->n_nodes; j++) {
    keel_node *n = &S->g->nodes[B->nodes[j]];
    S->taken[B->nodes[j]] = true;
    int32_t ka, ma;
    if (!weight_proj(S, n, &ka, &ma)) continue;
    const parts *groups = groups_of(B, B->nodes[j] + 1);
    KEEL_TRY(slice_const(S, n->in_names[1], ma, groups, &n->in_names[1]));
    const keel_tensor *c = gemm_bias(n) ? const_t(S, n->in_names[2]) : NULL;
    if (c && c->rank && c->shape[c->rank - 1] > 1)
      KEEL_TRY(slice_const(S, n->in_names[2], c->rank - 1, groups, &n->in_names[2]));
  }
  for (int32_t j = 0; j < B->n_slices; j++) {
    const slice_edit *e = &B->slices[j];
    keel_node *n = &S->g->nodes[e->node];
    const keel_tensor *t = const_t(S, n->in_names[e->in]);
    int32_t axis = t->rank - 1 - e->axis_fe;
    parts one = {1, {t->shape[axis]}, {e->grp1 ? B->group[e->grp1 - 1].div[e->part1 - 1] : 0}};
    KEEL_TRY(slice_const(S, n->in_names[e->in], axis, e->grp1 ? &one : groups_of(B, e->entry1),
                         &n->in_names[e->in]));
  }
  for (int32_t j = 0; j < B->n_shapes; j++) {
    keel_node div;
    int32_t at;
    KEEL_TRY(apply_shape(S, &B->shapes[j], &div, &at));
    if (at >= 0) ins[(*n_ins)++] = one_node(at, false, &div);
  }
  for (int32_t j = 0; j < B->n_splits; j++)
    KEEL_TRY(apply_split(S, &S->g->nodes[B->splits[j]], &B->group[B->split_group[j]]));
  for (int32_t j = 0; j < B->n_leaves; j++) KEEL_TRY(apply_leaf(S, &B->leaves[j]));
  KEEL_TRY(apply_exit(S, B, ins, n_ins));
  keel_shard_cfg *cfg = S->cfg;
  cfg->n_blocks++;
  if (B->attention) cfg->n_attention++;
  else cfg->n_mlp++;
  return KEEL_OK;
}

/* The row-parallel projection: rows sliced, then an AllReduce (and a
 * Gemm's bias after it). */
static keel_status apply_exit(sharder *S, block *B, pending *ins, int32_t *n_ins) {
  keel_node *x = &S->g->nodes[B->exit];
  S->taken[B->exit] = true;
  int32_t ka, ma;
  weight_proj(S, x, &ka, &ma);
  KEEL_TRY(slice_const(S, x->in_names[1], ka, NULL, &x->in_names[1]));
  const char *full = x->out_names[0], *part = arena_fmt(S, full, "/partial"), *bias = gemm_bias(x);
  const char *in[1] = {part};
  keel_node ar;
  /* a Gemm's bias moves after the AllReduce: added once, not once a rank */
  const char *reduced = bias ? arena_fmt(S, full, "/reduced") : full;
  KEEL_TRY(new_node(S, arena_fmt(S, x->name[0] ? x->name : full, "/AllReduce"), "AllReduce",
                    "com.microsoft", 1, in, reduced, &ar));
  x->out_names[0] = part;
  pending p = one_node(B->exit, true, &ar);
  if (bias) {
    x->in_names[2] = "";
    KEEL_TRY(new_node(S, arena_fmt(S, x->name[0] ? x->name : full, "/bias"), "Add", "", 2,
                      (const char *[]){reduced, bias}, full, &p.post[p.n_post++]));
  }
  ins[(*n_ins)++] = p;
  keel_shard_cfg *cfg = S->cfg;
  if (cfg->n_coll < KEEL_SHARD_MAX_COLL)
    cfg->coll[cfg->n_coll++] = (keel_shard_coll){S->g->path, ar.name, "AllReduce", x->name};
  return KEEL_OK;
}

static int cmp_pending(const void *a, const void *b) {
  const pending *x = a, *y = b;
  return (y->at > x->at) - (y->at < x->at); /* last first */
}

/* ======================================================= split vocab */

/* The vocabulary: rows of a 2-D constant table some Gather reads (an
 * embedding), in g or a graph around it, with `width` columns. */
static bool is_vocab(const sharder *S, int64_t v, int64_t width) {
  for (const keel_graph *o = S->g; o; o = o->parent)
    for (int32_t i = 0; i < o->n_nodes; i++) {
      const keel_node *n = &o->nodes[i];
      if (strcmp(n->op_type, "Gather") || n->domain[0] || n->n_in != 2) continue;
      const keel_attr *ax = keel_node_attr(n, "axis");
      int32_t c = keel_ir_const_of(S->m, o, n->in_names[0]);
      const keel_tensor *t = c >= 0 ? &S->m->consts[c] : NULL;
      if (t && t->rank == 2 && t->shape[0] == v && t->shape[1] == width && (!ax || ax->i == 0)) return true;
    }
  return false;
}

/* The LM head (a weight MatMul outside every block whose width is the
 * vocabulary), column-parallel: its weight and bias sliced, an AllGather
 * on the last axis after the bias Add (or the MatMul). */
static keel_status split_head(sharder *S, int32_t i, pending *ins, int32_t *n_ins) {
  keel_node *x = &S->g->nodes[i];
  const keel_tensor *w = const_t(S, x->in_names[1]);
  int32_t tp = S->cfg->tp, ka, ma;
  weight_proj(S, x, &ka, &ma);
  int64_t vocab = w->shape[ma];
  if (vocab % tp)
    return refuse(S, x, "%sthe vocabulary (%lld) does not divide among %lld ranks", "", (long long)vocab, tp);
  KEEL_TRY(slice_const(S, x->in_names[1], ma, NULL, &x->in_names[1]));
  const keel_tensor *c = gemm_bias(x) ? const_t(S, x->in_names[2]) : NULL;
  if (gemm_bias(x) && !c) return refuse(S, x, "an LM head whose bias is not a constant%s", "", 0, 0);
  if (c && c->rank && c->shape[c->rank - 1] > 1)
    KEEL_TRY(slice_const(S, x->in_names[2], c->rank - 1, NULL, &x->in_names[2]));
  S->taken[i] = true;
  int32_t at = i, rd = keel_ir_only_reader(S->g, x->out_names[0]);
  keel_node *add = rd >= 0 ? &S->g->nodes[rd] : NULL;
  if (add && !strcmp(add->op_type, "Add") && !add->domain[0] && add->n_in == 2) {
    int32_t b = strcmp(add->in_names[0], x->out_names[0]) ? 0 : 1;
    const keel_tensor *bias = const_t(S, add->in_names[b]);
    if (bias && bias->rank == 1 && bias->shape[0] == vocab) {
      KEEL_TRY(slice_const(S, add->in_names[b], 0, NULL, &add->in_names[b]));
      at = rd;
      x = add;
    }
  }
  const char *full = x->out_names[0], *part = arena_fmt(S, full, "/vocab_part");
  keel_node ag;
  KEEL_TRY(new_node(S, arena_fmt(S, x->name[0] ? x->name : full, "/AllGather"), "AllGather",
                    "com.microsoft", 1, (const char *[]){part}, full, &ag));
  keel_attr *at2 = keel_arena_array(S->m->arena, 2, sizeof *at2);
  if (!at2) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: attributes");
  at2[0] = (keel_attr){.name = "group_size", .type = KEEL_ATTR_INT, .i = tp};
  at2[1] = (keel_attr){.name = "axis", .type = KEEL_ATTR_INT, .i = -1};
  ag.attrs = at2;
  ag.n_attr = 2;
  x->out_names[0] = part;
  ins[(*n_ins)++] = one_node(at, true, &ag);
  keel_shard_cfg *cfg = S->cfg;
  if (cfg->n_coll < KEEL_SHARD_MAX_COLL)
    cfg->coll[cfg->n_coll++] = (keel_shard_coll){S->g->path, ag.name, "AllGather", x->name};
  cfg->n_vocab_heads++;
  return KEEL_OK;
}

/* Rows [r*V/tp, (r+1)*V/tp) of table `src` and one zero row after them
 * (where out-of-range tokens look up). */
static keel_status slice_rows_zero(sharder *S, const char *src, const char **out) {
  const keel_tensor *t = const_t(S, src);
  int32_t tp = S->cfg->tp, r = S->cfg->rank;
  char name[1024];
  snprintf(name, sizeof name, "%s/vocab%d_%d", src, r, tp);
  size_t es = keel_dtype_size((keel_dtype)t->dtype), row = (size_t)t->shape[1] * es;
  int64_t rows = t->shape[0] / tp;
  size_t nbytes = (size_t)(rows + 1) * row;
  uint8_t *d = keel_arena_alloc(S->m->arena, nbytes, KEEL_ALIGN);
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: slicing '%s'", src);
  memcpy(d, (const uint8_t *)t->data + (size_t)(r * rows) * row, (size_t)rows * row);
  memset(d + (size_t)rows * row, 0, row);
  keel_tensor s = *t;
  s.shape[0] = rows + 1;
  KEEL_TRY(add_const_over(S, name, s, d, nbytes, out));
  S->cfg->sharded_bytes += nbytes;
  S->cfg->sharded_full_bytes += keel_tensor_nbytes(t);
  if (S->n_dropped < (int32_t)KEEL_COUNTOF(S->dropped)) S->dropped[S->n_dropped++] = src;
  return KEEL_OK;
}

/* One node of the embedding rewrite: op(in...) -> "<base>/<suffix>". */
static keel_status emb_node(sharder *S, pending *p, const char *base, const char *op, const char *suffix,
                            int32_t n_in, const char *const *in, const char **out) {
  *out = arena_fmt(S, base, suffix);
  return new_node(S, *out, op, "", n_in, in, *out, &p->pre[p->n_pre++]);
}

/* A vocabulary-parallel embedding: rank r keeps rows r*V/tp.. of the
 * table (+ a zero row); a token outside them looks up the zero row; an
 * AllReduce sums the ranks' rows (exactly one is not zero). */
static keel_status split_embedding(sharder *S, int32_t i, pending *ins, int32_t *n_ins) {
  keel_node *n = &S->g->nodes[i];
  const keel_tensor *t = const_t(S, n->in_names[0]);
  int32_t tp = S->cfg->tp;
  if (t->shape[0] % tp)
    return refuse(S, n, "%sthe vocabulary (%lld) does not divide among %lld ranks", "",
                  (long long)t->shape[0], tp);
  const char *base = n->out_names[0], *k_off, *k_zero, *k_vn, *v64, *loc, *neg, *ge, *lt, *inr, *idx;
  int64_t off = S->cfg->rank * (t->shape[0] / tp), zero = 0, vn = t->shape[0] / tp;
  KEEL_TRY(int64_const(S, arena_fmt(S, base, "/vocab_offset"), 1, &off, &k_off));
  KEEL_TRY(int64_const(S, arena_fmt(S, base, "/vocab_zero"), 1, &zero, &k_zero));
  KEEL_TRY(int64_const(S, arena_fmt(S, base, "/vocab_rows"), 1, &vn, &k_vn));
  pending p = {.at = i};
  KEEL_TRY(emb_node(S, &p, base, "Cast", "/vocab_i64", 1, (const char *[]){n->in_names[1]}, &v64));
  keel_attr *to = keel_arena_array(S->m->arena, 1, sizeof *to);
  if (!to) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: attributes");
  *to = (keel_attr){.name = "to", .type = KEEL_ATTR_INT, .i = KEEL_INT64};
  p.pre[0].attrs = to;
  p.pre[0].n_attr = 1;
  KEEL_TRY(emb_node(S, &p, base, "Sub", "/vocab_local", 2, (const char *[]){v64, k_off}, &loc));
  KEEL_TRY(emb_node(S, &p, base, "Less", "/vocab_below", 2, (const char *[]){loc, k_zero}, &neg));
  KEEL_TRY(emb_node(S, &p, base, "Not", "/vocab_from", 1, (const char *[]){neg}, &ge));
  KEEL_TRY(emb_node(S, &p, base, "Less", "/vocab_to", 2, (const char *[]){loc, k_vn}, &lt));
  KEEL_TRY(emb_node(S, &p, base, "And", "/vocab_mine", 2, (const char *[]){ge, lt}, &inr));
  KEEL_TRY(emb_node(S, &p, base, "Where", "/vocab_index", 3, (const char *[]){inr, loc, k_vn}, &idx));
  n = &S->g->nodes[i];
  KEEL_TRY(slice_rows_zero(S, n->in_names[0], &n->in_names[0]));
  n->in_names[1] = idx;
  const char *part = arena_fmt(S, base, "/vocab_part");
  keel_node ar;
  KEEL_TRY(new_node(S, arena_fmt(S, n->name[0] ? n->name : base, "/AllReduce"), "AllReduce",
                    "com.microsoft", 1, (const char *[]){part}, base, &ar));
  n->out_names[0] = part;
  p.post[p.n_post++] = ar;
  ins[(*n_ins)++] = p;
  S->taken[i] = true;
  keel_shard_cfg *cfg = S->cfg;
  if (cfg->n_coll < KEEL_SHARD_MAX_COLL)
    cfg->coll[cfg->n_coll++] = (keel_shard_coll){S->g->path, ar.name, "AllReduce", n->name};
  cfg->n_vocab_embeddings++;
  return KEEL_OK;
}

static keel_status split_vocab(sharder *S, pending *ins, int32_t *n_ins) {
  int64_t vocab[8];
  int nv = 0;
  for (int32_t i = 0; i < S->g->n_nodes; i++) {
    const keel_node *x = &S->g->nodes[i];
    if (S->taken[i] || !weight_matmul(S, x) || sharded_value(S, x->in_names[0])) continue;
    const keel_tensor *w = const_t(S, x->in_names[1]);
    int32_t ka, ma;
    weight_proj(S, x, &ka, &ma);
    if (!is_vocab(S, w->shape[ma], w->shape[ka])) continue;
    if (nv < 8) vocab[nv++] = w->shape[ma];
    KEEL_TRY(split_head(S, i, ins, n_ins));
  }
  /* the embeddings of the same vocabulary (not position tables) */
  for (int32_t i = 0; i < S->g->n_nodes; i++) {
    const keel_node *n = &S->g->nodes[i];
    if (S->taken[i] || strcmp(n->op_type, "Gather") || n->domain[0] || n->n_in != 2) continue;
    const keel_attr *ax = keel_node_attr(n, "axis");
    const keel_tensor *t = const_t(S, n->in_names[0]);
    bool hit = false;
    for (int k = 0; k < nv && t && t->rank == 2 && (!ax || ax->i == 0); k++) hit = hit || t->shape[0] == vocab[k];
    if (hit) KEEL_TRY(split_embedding(S, i, ins, n_ins));
  }
  return KEEL_OK;
}

/* ============================================================ driver */

static keel_status find_blocks(sharder *S, pending *ins, int32_t *n_ins) {
  int32_t n = S->g->n_nodes;
  for (int32_t i = 0; i < n; i++) {
    const keel_node *x = &S->g->nodes[i];
    if (!weight_matmul(S, x) || S->taken[i] || !sharded_value(S, x->in_names[0])) continue;
    block *B = calloc(1, sizeof *B);
    if (!B) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard: a block");
    B->exit = i;
    keel_status st = collect(S, B, x->in_names[0]);
    if (!st) st = plan(S, B);
    if (!st) st = apply(S, B, ins, n_ins);
    free(B);
    KEEL_TRY(st);
  }
  return KEEL_OK;
}

static keel_status shard_graph(keel_model *m, keel_graph *g) {
  int32_t n = g->n_nodes;
  sharder S = {.m = m, .g = g, .cfg = m->shard};
  S.memo = calloc((size_t)n + 1, 1);
  S.taken = calloc((size_t)n + 1, sizeof(bool));
  pending *ins = calloc((size_t)n * 2 + 8, sizeof *ins);
  int32_t n_ins = 0;
  keel_status st = (!S.memo || !S.taken || !ins) ? keel_err(KEEL_ERR_OUT_OF_MEMORY, "shard") : KEEL_OK;
  if (!st) st = keel_shapes_infer(m, &S.shapes);
  if (!st) st = find_blocks(&S, ins, &n_ins);
  if (!st && S.cfg->split_vocab) st = split_vocab(&S, ins, &n_ins);
  for (int32_t i = 0; !st && i < n; i++) { /* what stays whole, for the report */
    if (S.taken[i] || !weight_matmul(&S, &g->nodes[i])) continue;
    keel_shard_cfg *c = S.cfg;
    char lbl[256], buf[512];
    snprintf(buf, sizeof buf, "%s: %s", g->path, keel_node_label(&g->nodes[i], lbl, sizeof lbl));
    if (c->n_replicated < (int32_t)KEEL_COUNTOF(c->replicated))
      c->replicated[c->n_replicated] = keel_arena_strdup(m->arena, buf);
    c->n_replicated++;
  }
  qsort(ins, (size_t)n_ins, sizeof *ins, cmp_pending);
  for (int32_t i = 0; !st && i < n_ins; i++) st = insert(&S, &ins[i]);
  /* the unsharded originals go when nothing reads them any more */
  for (int32_t i = 0; !st && i < S.n_dropped; i++)
    for (keel_graph *o = g; o; o = o->parent) {
      bool here = false;
      for (int32_t k = 0; k < o->ld.n_init; k++) here = here || !strcmp(o->ld.init_names[k], S.dropped[i]);
      if (!here) continue;
      if (!keel_ir_uses(o, S.dropped[i])) keel_ir_drop_init(o, S.dropped[i]);
      break;
    }
  keel_shapes_free(S.shapes);
  free(S.memo);
  free(S.taken);
  free(ins);
  return st;
}

keel_status keel_pass_shard(keel_model *m) {
  keel_shard_cfg *cfg = m->shard;
  if (!cfg) return KEEL_OK;
  if (cfg->tp < 1 || cfg->rank < 0 || cfg->rank >= cfg->tp)
    return keel_err(KEEL_ERR_INVALID_ARG, "shard: rank %d of %d", cfg->rank, cfg->tp);
  if (cfg->tp == 1) return KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(shard_graph(m, m->graphs[i]));
  if (!cfg->n_blocks)
    return keel_err(KEEL_ERR_UNSUPPORTED, "shard --tp %d: %s: no transformer block found (a "
                    "column-parallel projection, then a row-parallel one)", cfg->tp, m->path);
  return KEEL_OK;
}
