/* pass_transpose.c: canon-transpose. Transposes that exporters spell out
 * in other ways become one Transpose, so that the fusion passes after it
 * (fuse-attention's K^T above all) see the one form they match:
 *
 *  1. A swap of the last two axes written as Reshape -> Transpose of the
 *     last two -> Reshape, as PyTorch's dynamo exporter (torchlib's
 *     scaled_dot_product_attention, opset 18) transposes K of [B, H, S, D]:
 *
 *         K3 = Reshape(K, [-1, S, D])         (the leading axes merged)
 *         T  = Transpose(K3, perm 0,2,1)
 *         Kt = Reshape(T, [B, H, D, S])       (split back)
 *
 *     Kt is Transpose(K, perm 0,1,3,2) when the inferred shapes show it:
 *     K3 keeps K's last two dims (so only leading axes merge, which keeps
 *     the element order), and Kt has K's leading dims and its last two
 *     swapped; every dim compared is known (an integer or the same
 *     symbolic expression: ir/shapes.h), never guessed. The shape inputs
 *     are often computed (Shape -> Slice -> Concat): the inference follows
 *     them.
 *  2. A Transpose of a Transpose is one Transpose of the composed
 *     permutation (perm q[i] = p1[p2[i]]); the inner one goes when the
 *     outer was its only reader. So dynamo's K, first moved to [B, H, S,
 *     D] by Transpose(0,2,1,3) and then swapped as above, reaches
 *     fuse-attention as Transpose(k, perm 0,2,3,1), PyTorch's TorchScript
 *     form.
 *
 * The rewritten node keeps the last node's name and output and lists the
 * nodes it took in `fused`; nodes left without readers are removed. Both
 * rules need explicit perm attributes (exporters write them).
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shapes.h"
#include "passes/pass.h"

static bool is_op(const keel_node *n, const char *op, int n_in) {
  return !n->domain[0] && !strcmp(n->op_type, op) && n->n_out == 1 && n->n_in >= n_in &&
         !n->n_subs;
}

/* The node writing `name` when it is op `op`, else -1. */
static int32_t prod_op(const keel_graph *g, const char *name, const char *op, int n_in) {
  int32_t p = name[0] ? keel_ir_producer(g, name) : -1;
  return p >= 0 && is_op(&g->nodes[p], op, n_in) ? p : -1;
}

/* A Transpose's explicit perm, or NULL. */
static const keel_attr *perm_of(const keel_node *t) {
  const keel_attr *a = keel_node_attr(t, "perm");
  return a && a->type == KEEL_ATTR_INTS && a->n >= 1 && a->n <= KEEL_MAX_RANK ? a : NULL;
}

static const keel_sshape *shape(const keel_shapes *S, const keel_graph *g, const char *name) {
  const keel_sshape *v = keel_shapes_find(S, g, name);
  return v && v->rank >= 0 ? v : NULL;
}

/* A perm of rank r that swaps the last two axes. */
static bool swaps_last_two(const int64_t *p, int r) {
  if (r < 2) return false;
  for (int i = 0; i < r - 2; i++)
    if (p[i] != i) return false;
  return p[r - 2] == r - 1 && p[r - 1] == r - 2;
}

typedef struct tp {
  keel_model *m;
  keel_graph *g;
  const keel_shapes *S;
  bool *drop;
  int32_t rewritten;
} tp;

static keel_status oom(const tp *P) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "canon-transpose in graph '%s'", P->g->path);
}

/* Node i becomes Transpose(x, perm[0..r)), taking the nodes `taken` into
 * its label. */
static keel_status to_transpose(tp *P, int32_t i, const char *x, const int64_t *perm, int r,
                                const int32_t *taken, int n_taken) {
  keel_arena *a = P->m->arena;
  keel_node nn = P->g->nodes[i];
  const char **ins = keel_arena_array(a, 1, sizeof(char *));
  keel_attr *at = keel_arena_array(a, 1, sizeof(keel_attr));
  int64_t *p = keel_arena_array(a, (size_t)r, sizeof(int64_t));
  if (!ins || !at || !p) return oom(P);
  memcpy(p, perm, (size_t)r * sizeof(int64_t));
  *at = (keel_attr){.name = "perm", .type = KEEL_ATTR_INTS, .n = r, .ints = p};
  ins[0] = x;
  nn.op_type = "Transpose", nn.domain = "", nn.in_names = ins, nn.n_in = 1;
  nn.attrs = at, nn.n_attr = 1;
  for (int k = 0; k < n_taken; k++) KEEL_TRY(keel_ir_fuse_label(a, &nn, &P->g->nodes[taken[k]]));
  P->g->nodes[i] = nn;
  P->rewritten++;
  return KEEL_OK;
}

/* Node j is dropped when its output has no reader left but node i (which
 * no longer reads it). */
static void drop_if_unread(tp *P, int32_t j, int32_t was_reader) {
  if (keel_ir_only_reader(P->g, P->g->nodes[j].out_names[0]) == was_reader) P->drop[j] = true;
}

/* Rule 1 at node i (the second Reshape). */
static keel_status swap_at(tp *P, int32_t i) {
  keel_graph *g = P->g;
  const keel_node *r2 = &g->nodes[i];
  if (!is_op(r2, "Reshape", 1)) return KEEL_OK;
  int32_t t = prod_op(g, r2->in_names[0], "Transpose", 1);
  if (t < 0 || P->drop[t]) return KEEL_OK;
  int32_t r1 = prod_op(g, g->nodes[t].in_names[0], "Reshape", 1);
  if (r1 < 0 || P->drop[r1]) return KEEL_OK;
  const keel_attr *tp_perm = perm_of(&g->nodes[t]);
  const char *x = g->nodes[r1].in_names[0];
  const keel_sshape *sx = shape(P->S, g, x), *s1 = shape(P->S, g, g->nodes[r1].out_names[0]),
                    *s2 = shape(P->S, g, r2->out_names[0]);
  if (!tp_perm || !sx || !s1 || !s2 || !x[0]) return KEEL_OK;
  int r = sx->rank, k = s1->rank;
  if (r < 2 || k < 2 || s2->rank != r || tp_perm->n != k || !swaps_last_two(tp_perm->ints, k))
    return KEEL_OK;
  /* K3 keeps x's last two dims; Kt has x's leading dims, the last two
   * swapped */
  if (!keel_sdim_eq(s1->d[k - 2], sx->d[r - 2]) || !keel_sdim_eq(s1->d[k - 1], sx->d[r - 1]) ||
      !keel_sdim_eq(s2->d[r - 2], sx->d[r - 1]) || !keel_sdim_eq(s2->d[r - 1], sx->d[r - 2]))
    return KEEL_OK;
  for (int d = 0; d < r - 2; d++)
    if (!keel_sdim_eq(s2->d[d], sx->d[d])) return KEEL_OK;
  int64_t perm[KEEL_MAX_RANK];
  for (int d = 0; d < r; d++) perm[d] = d;
  perm[r - 2] = r - 1, perm[r - 1] = r - 2;
  int32_t taken[2] = {r1, t};
  KEEL_TRY(to_transpose(P, i, x, perm, r, taken, 2));
  drop_if_unread(P, t, i);
  if (P->drop[t]) drop_if_unread(P, r1, t);
  return KEEL_OK;
}

/* Rule 2 at node i (the outer Transpose). */
static keel_status compose_at(tp *P, int32_t i) {
  keel_graph *g = P->g;
  const keel_node *t2 = &g->nodes[i];
  if (!is_op(t2, "Transpose", 1)) return KEEL_OK;
  int32_t t1 = prod_op(g, t2->in_names[0], "Transpose", 1);
  if (t1 < 0 || P->drop[t1]) return KEEL_OK;
  const keel_attr *p1 = perm_of(&g->nodes[t1]), *p2 = perm_of(t2);
  if (!p1 || !p2 || p1->n != p2->n) return KEEL_OK;
  int r = p2->n;
  int64_t q[KEEL_MAX_RANK];
  for (int d = 0; d < r; d++) {
    if (p2->ints[d] < 0 || p2->ints[d] >= r) return KEEL_OK;
    q[d] = p1->ints[p2->ints[d]];
  }
  int32_t taken[1] = {t1};
  KEEL_TRY(to_transpose(P, i, g->nodes[t1].in_names[0], q, r, taken, 1));
  drop_if_unread(P, t1, i);
  return KEEL_OK;
}

static keel_status graph_pass(tp *P) {
  keel_graph *g = P->g;
  if (!g->n_nodes) return KEEL_OK;
  P->drop = keel_sys_calloc((size_t)g->n_nodes, sizeof(bool));
  if (!P->drop) return oom(P);
  keel_status st = KEEL_OK;
  int32_t before = P->rewritten;
  for (int32_t i = 0; i < g->n_nodes && !st; i++) st = swap_at(P, i);
  for (int32_t i = 0; i < g->n_nodes && !st; i++) st = compose_at(P, i);
  if (!st && P->rewritten > before) st = keel_graph_remove_nodes(P->m->arena, g, P->drop);
  keel_sys_free(P->drop, (size_t)g->n_nodes * sizeof(bool));
  P->drop = NULL;
  return st;
}

/* Quick test before paying for the inference: a Transpose read by a
 * Transpose or a Reshape somewhere. */
static bool worth_it(const keel_model *m, const keel_graph *g, const keel_node *n) {
  (void)m;
  if (n->n_in < 1 || n->domain[0] || (strcmp(n->op_type, "Transpose") && strcmp(n->op_type, "Reshape")))
    return false;
  return prod_op(g, n->in_names[0], "Transpose", 1) >= 0;
}

keel_status keel_pass_canon_transpose(keel_model *m) {
  if (!keel_pass_any_node(m, worth_it)) return KEEL_OK;
  keel_shapes *S;
  KEEL_TRY(keel_shapes_infer(m, &S));
  tp P = {m, NULL, S, NULL, 0};
  keel_status st = KEEL_OK;
  for (int32_t gi = 0; gi < m->n_graphs && !st; gi++) {
    P.g = m->graphs[gi];
    st = graph_pass(&P);
  }
  keel_shapes_free(S);
  return st;
}
