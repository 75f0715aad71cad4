/* pass_qkv.c: attention-qkv. Exported transformers compute q, k and v by
 * one projection and cut its output into heads:
 *
 *     X  = FusedMatMul(x, Wqkv, b)                 [B, S, W]
 *     q, k, v = Split(X, axis -1)                  (or three Slices of X's
 *                                                   last axis)
 *     q4 = Reshape(q, [B, S, H, D]), k4, v4 likewise
 *     Y  = FusedAttention(q4, k4, v4[, mask])      (layout: all three read
 *                                                   as [B, S, H, D], K as rows)
 *
 * The Split copies every byte of X into three tensors that the attention
 * then reads by strides anyway. Here the attention reads X itself:
 * Y = FusedAttention(X, X, X[, mask]) with attribute packed = {oq, hq, dq,
 * ok, hk, dk, ov, hv, dv, b, s} (operand i: h heads of size d from column
 * o of each row, rows W floats apart; b, s: the Reshapes' batch and length
 * where they are constants, else -1 for X's own; attention_fused.c), and
 * the Split (or Slices) and the Reshapes go as dead.
 *
 * Checked: each of the three inputs is a Reshape's output that only the
 * attention reads, of a part that only that Reshape reads; the parts are
 * outputs of one Split of X on its last axis (sizes from its input or
 * attribute, or equal) or Slices of X's last axis (constant starts and
 * ends, step 1); X is rank 3 with a known last dim; by symbolic shape
 * inference (its general form: any input shape) each Reshape gives
 * [X's dim 0, X's dim 1, h, d] (or its shape is the constant [0, 0, h, d],
 * which copies them), or [b, s, h, d] with b and s integers
 * (a static export's [1, 128, H, D]: the part's rows, B * S of them in
 * order, read as b * s rows, which is what the Reshape does for any X of
 * B * S = b * s rows; the kernel checks that, as the Reshape would), with
 * h * d the part's width, the three alike, and the heads agree (the
 * kernel's Hq = Hkv). nn.MultiheadAttention's rank-3 form, one batch
 * ([S, 1, W] cut, each part Reshaped to [S, N, D] with S an integer, the
 * attention's Transposes folded), is the case b = 1, s = S, with attribute
 * y_rank = 3 keeping Y [S, N, D] (or [N, S, D]). Each attention keeps its name and lists
 * the nodes it took in `fused`.
 */
#include "base/status.h"
#include "ir/shapes.h"
#include "passes/pass.h"

#define ATT_DOMAIN "ai.keel.internal"

static bool known(keel_sdim d) { return d.sym == KEEL_SYM_KNOWN; }

static bool is_onnx(const keel_node *n, const char *op) {
  return !n->domain[0] && !strcmp(n->op_type, op) && !n->n_subs;
}

/* An attention that reads all three operands as [B, S, H, D] (layout bits
 * 1, 2, 4) and is not packed yet. */
static bool is_candidate(const keel_node *n) {
  if (strcmp(n->domain, ATT_DOMAIN) || strcmp(n->op_type, "FusedAttention") || n->n_in < 3 ||
      keel_node_attr(n, "packed"))
    return false;
  const keel_attr *l = keel_node_attr(n, "layout");
  return l && l->type == KEEL_ATTR_INT && (l->i & 7) == 7;
}

/* The integers of a constant int64 tensor of rank <= 1 (at most `cap`). */
static int const_ints(const keel_model *m, const keel_graph *g, const char *name, int64_t *v,
                      int cap) {
  int32_t c = name && name[0] ? keel_ir_const_of(m, g, name) : -1;
  if (c < 0 || m->consts[c].dtype != KEEL_INT64 || m->consts[c].rank > 1) return -1;
  int64_t n = keel_tensor_numel(&m->consts[c]);
  if (n > cap) return -1;
  for (int64_t i = 0; i < n; i++) v[i] = ((const int64_t *)m->consts[c].data)[i];
  return (int)n;
}

/* Whether `axis` (an attribute or an input's one value) is the last of 3. */
static bool last_axis(int64_t axis) { return axis == 2 || axis == -1; }

/* The columns [*off, *off + *width) of X that `part` is, where it is one
 * output of a Split or a Slice of X's last axis (W its width); *x: X. */
static bool part_of(const keel_model *m, const keel_graph *g, const char *part, int64_t W,
                    const char **x, int32_t *node, int64_t *off, int64_t *width) {
  int32_t p = keel_ir_producer(g, part);
  if (p < 0) return false;
  const keel_node *n = &g->nodes[p];
  *node = p, *x = n->in_names[0];
  if (is_onnx(n, "Split") && n->n_in >= 1 && n->n_out >= 1) {
    const keel_attr *ax = keel_node_attr(n, "axis");
    if (!ax || ax->type != KEEL_ATTR_INT || !last_axis(ax->i)) return false;
    int64_t sizes[16];
    int ns = -1;
    const keel_attr *sa = keel_node_attr(n, "split");
    if (n->n_in >= 2 && n->in_names[1][0]) ns = const_ints(m, g, n->in_names[1], sizes, 16);
    else if (sa && sa->type == KEEL_ATTR_INTS && sa->n <= 16)
      for (ns = 0; ns < sa->n; ns++) sizes[ns] = sa->ints[ns];
    else if (n->n_out <= 16 && W % n->n_out == 0) /* equal parts */
      for (ns = 0; ns < n->n_out; ns++) sizes[ns] = W / n->n_out;
    if (ns != n->n_out) return false;
    int64_t o = 0, sum = 0;
    for (int k = 0; k < ns; k++) sum += sizes[k];
    if (sum != W) return false;
    for (int k = 0; k < ns; k++) {
      if (!strcmp(n->out_names[k], part)) {
        *off = o, *width = sizes[k];
        return sizes[k] > 0;
      }
      o += sizes[k];
    }
    return false;
  }
  if (is_onnx(n, "Slice") && n->n_in >= 4 && n->n_out == 1) {
    int64_t st, en, ax, step = 1;
    if (const_ints(m, g, n->in_names[1], &st, 1) != 1 ||
        const_ints(m, g, n->in_names[2], &en, 1) != 1 ||
        const_ints(m, g, n->in_names[3], &ax, 1) != 1 || !last_axis(ax) ||
        (n->n_in >= 5 && n->in_names[4][0] && const_ints(m, g, n->in_names[4], &step, 1) != 1) ||
        step != 1)
      return false;
    if (st < 0) st += W;
    if (en < 0) en += W;
    st = KEEL_MIN(KEEL_MAX(st, 0), W), en = KEEL_MIN(KEEL_MAX(en, 0), W);
    *off = st, *width = en - st;
    return en > st;
  }
  return false;
}

/* A Reshape whose shape is the constant [0, 0, h, d] (canon-reshape's
 * form): it keeps its input's first two dims, whatever they are. */
static bool copies_two(const keel_model *m, const keel_graph *g, const keel_node *r) {
  int64_t v[4];
  const keel_attr *az = keel_node_attr(r, "allowzero");
  return r->n_in >= 2 && (!az || az->type != KEEL_ATTR_INT || az->i == 0) &&
         const_ints(m, g, r->in_names[1], v, 4) == 4 && v[0] == 0 && v[1] == 0;
}

static keel_status pack_at(keel_model *m, const keel_shapes *S, keel_graph *g, int32_t i,
                           bool *any) {
  keel_node *a = &g->nodes[i];
  const char *x = NULL;
  int32_t taken[6];
  int64_t pk[11] = {0};
  int nt = 0, rank = 0;
  for (int op = 0; op < 3; op++) {
    const char *in = a->in_names[op];
    int32_t r = in[0] ? keel_ir_producer(g, in) : -1;
    if (r < 0 || !is_onnx(&g->nodes[r], "Reshape") || keel_ir_uses(g, in) != 1) return KEEL_OK;
    const char *part = g->nodes[r].in_names[0];
    if (!part[0] || keel_ir_uses(g, part) != 1) return KEEL_OK;
    const keel_sshape *ps = keel_shapes_find(S, g, part);
    int32_t p;
    const char *xi;
    int64_t off, width;
    /* X's shape: the part's producer's input */
    int32_t pp = keel_ir_producer(g, part);
    const keel_sshape *xs = pp >= 0 ? keel_shapes_find(S, g, g->nodes[pp].in_names[0]) : NULL;
    if (!ps || !xs || xs->rank != 3 || !known(xs->d[2]) ||
        !part_of(m, g, part, xs->d[2].add, &xi, &p, &off, &width))
      return KEEL_OK;
    if (x && strcmp(x, xi)) return KEEL_OK; /* parts of different tensors */
    x = xi;
    /* the Reshape: [X0, X1, h, d] with h d the part's width */
    const keel_sshape *rs = keel_shapes_find(S, g, in);
    bool masked = a->n_in > 3 && a->in_names[3][0];
    if (!rs || (rs->rank != 4 && (rs->rank != 3 || masked)) || (op > 0 && rs->rank != rank))
      return KEEL_OK; /* rank 3 without a mask only: a mask may bring batches */
    rank = rs->rank;
    const keel_sdim *hd = rs->d + rank - 2; /* the heads and their size */
    if (!known(hd[0]) || !known(hd[1]) || hd[0].add * hd[1].add != width) return KEEL_OK;
    /* rank 4: [B, S] of X's, or integers; rank 3 (nn.MultiheadAttention's
     * [S, N, D], one batch): S an integer */
    bool own = rank == 4 && ((keel_sdim_eq(rs->d[0], xs->d[0]) && keel_sdim_eq(rs->d[1], xs->d[1])) ||
                             copies_two(m, g, &g->nodes[r]));
    bool fixed = rank == 4 ? known(rs->d[0]) && known(rs->d[1]) : known(rs->d[0]);
    int64_t b = own ? -1 : rank == 4 ? rs->d[0].add : 1;
    int64_t s = own ? -1 : rs->d[rank - 3].add;
    if ((!own && !fixed) || (op > 0 && (pk[9] != b || pk[10] != s))) return KEEL_OK;
    pk[9] = b, pk[10] = s;
    pk[3 * op] = off, pk[3 * op + 1] = hd[0].add, pk[3 * op + 2] = hd[1].add;
    taken[nt++] = r;
    bool seen = false; /* one Split serves all three; Slices are one each */
    for (int k = 0; k < nt - 1; k++) seen |= taken[k] == p;
    if (!seen) taken[nt++] = p;
  }
  if (pk[1] != pk[4] || pk[4] != pk[7] || pk[2] != pk[5]) return KEEL_OK; /* Hq = Hkv, Dq = Dk */
  keel_arena *ar = m->arena;
  const char **ins = keel_arena_array(ar, (size_t)a->n_in, sizeof(char *));
  keel_attr *attrs = keel_arena_array(ar, (size_t)a->n_attr + 2, sizeof(keel_attr));
  int64_t *vals = keel_arena_array(ar, 11, sizeof(int64_t));
  if (!ins || !attrs || !vals) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "attention-qkv");
  for (int32_t k = 0; k < a->n_in; k++) ins[k] = k < 3 ? x : a->in_names[k];
  memcpy(vals, pk, sizeof pk);
  memcpy(attrs, a->attrs, sizeof(keel_attr) * (size_t)a->n_attr);
  attrs[a->n_attr] = (keel_attr){.name = "packed", .type = KEEL_ATTR_INTS, .n = 11, .ints = vals};
  if (rank == 3) /* Y stays of rank 3 as the operands were */
    attrs[a->n_attr + 1] = (keel_attr){.name = "y_rank", .type = KEEL_ATTR_INT, .i = 3};
  /* the labels first: keel_ir_fuse_label reads the taken nodes */
  for (int k = 0; k < nt; k++) KEEL_TRY(keel_ir_fuse_label(ar, a, &g->nodes[taken[k]]));
  a->in_names = ins, a->in = NULL;
  a->attrs = attrs, a->n_attr += rank == 3 ? 2 : 1;
  *any = true;
  return KEEL_OK;
}

static bool worth_it(const keel_model *m, const keel_graph *g, const keel_node *n) {
  (void)m, (void)g;
  return is_candidate(n);
}

keel_status keel_pass_attention_qkv(keel_model *m) {
  if (!keel_pass_any_node(m, worth_it)) return KEEL_OK;
  keel_shapes *S;
  KEEL_TRY(keel_shapes_infer_general(m, &S));
  keel_status st = KEEL_OK;
  bool any = false;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) {
    keel_graph *g = m->graphs[i];
    for (int32_t j = 0; j < g->n_nodes && !st; j++)
      if (is_candidate(&g->nodes[j])) st = pack_at(m, S, g, j, &any);
  }
  keel_shapes_free(S);
  return st || !any ? st : keel_pass_remove_dead(m);
}
