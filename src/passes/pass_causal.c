/* pass_causal.c: causal-mask. A causal mask that an export computes from the
 * input length, as PyTorch writes `torch.triu(torch.full((T, T), -inf),
 * diagonal=1)`:
 *
 *     shape = Concat(Unsqueeze(Gather(Shape(x), 1)), ...)    ([T, T])
 *     full  = ConstantOfShape(shape, value = -inf)
 *     mask  = Trilu(full, k = 1, upper = 1)    (-inf where key j > row i)
 *     ...   = FusedAttention(q, k, v, mask, mask_kind "add")
 *
 * becomes the attention's own causal flag (attribute causal = 1, no mask):
 * the kernel then skips the keys above the diagonal instead of adding
 * -inf to their scores and taking exp(-inf) = 0 for them, and the
 * ConstantOfShape, the Trilu and the shape arithmetic before them go as
 * dead (on a GPU: no mask built on the CPU and copied over each run).
 *
 * Exact by construction, checked before each rewrite:
 *  - the Trilu keeps the upper triangle above the diagonal (upper = 1, k a
 *    constant 1): mask[i][j] = fill for j >= i + 1, 0 elsewhere, which is
 *    the causal rule keel_sdpa applies (key j kept when j <= i);
 *  - the ConstantOfShape's value is one float32 of -inf, or finite and at
 *    most -1e30 (torch.finfo(float32).min as Hugging Face writes it): a
 *    score plus such a fill underflows to 0 after the softmax's exp as
 *    -inf does, since every row keeps its key 0 (j <= i) whose score is
 *    the row's real maximum;
 *  - the mask is rank 2, its rows the attention's query count and its
 *    columns its key count, both proven by symbolic shape inference in
 *    its general form (ir/shapes.h: every graph-input dim a symbol of its
 *    own), so the rewrite holds for any input shape a run may bring. A
 *    mask whose dims the inference cannot tie to the attention's (built
 *    from another tensor's length) is left as it is.
 *
 * The attention lists the Trilu in `fused` (keel info names it); the
 * rewrites are counted in m->fold.causal. Runs after fuse-attention; the
 * chain left without readers is removed by this pass.
 */
#include <math.h>

#include "base/status.h"
#include "ir/shapes.h"
#include "passes/pass.h"

#define ATT_DOMAIN "ai.keel.internal"
/* FusedAttention's layout bits (pass_attention.c): Q read as [B, S, H, D],
 * K as rows [B, S, H, D] */
enum { L_Q = 1, L_K = 2 };
/* the largest finite fill taken as "minus infinity" */
#define FILL_MAX (-1e30f)

static bool is_onnx(const keel_node *n, const char *op) {
  return !n->domain[0] && !strcmp(n->op_type, op) && n->n_out == 1 && !n->n_subs;
}

static bool is_add_attention(const keel_node *n) {
  if (strcmp(n->domain, ATT_DOMAIN) || strcmp(n->op_type, "FusedAttention") || n->n_in != 4 ||
      !n->in_names[3][0])
    return false;
  const keel_attr *k = keel_node_attr(n, "mask_kind");
  return k && k->type == KEEL_ATTR_STRING && !strcmp(k->s, "add");
}

/* The one integer of a constant of at most one element, or false. */
static bool const_int(const keel_model *m, const keel_graph *g, const char *name, int64_t *v) {
  int32_t c = name[0] ? keel_ir_const_of(m, g, name) : -1;
  if (c < 0) return false;
  const keel_tensor *t = &m->consts[c];
  if (t->rank > 1 || keel_tensor_numel(t) != 1) return false;
  if (t->dtype == KEEL_INT64) *v = ((const int64_t *)t->data)[0];
  else if (t->dtype == KEEL_INT32) *v = ((const int32_t *)t->data)[0];
  else return false;
  return true;
}

/* The Trilu node whose output is a causal -inf mask as the header says, or -1. */
static int32_t causal_trilu(const keel_model *m, const keel_graph *g, const char *mask) {
  int32_t t = keel_ir_producer(g, mask);
  if (t < 0 || !is_onnx(&g->nodes[t], "Trilu") || g->nodes[t].n_in != 2) return -1;
  const keel_node *tri = &g->nodes[t];
  const keel_attr *up = keel_node_attr(tri, "upper");
  int64_t k;
  if ((up && (up->type != KEEL_ATTR_INT || up->i != 1)) || !const_int(m, g, tri->in_names[1], &k) ||
      k != 1)
    return -1;
  int32_t c = tri->in_names[0][0] ? keel_ir_producer(g, tri->in_names[0]) : -1;
  if (c < 0 || !is_onnx(&g->nodes[c], "ConstantOfShape")) return -1;
  const keel_attr *val = keel_node_attr(&g->nodes[c], "value");
  if (!val || val->type != KEEL_ATTR_TENSOR || !val->t || val->t->dtype != KEEL_FLOAT ||
      keel_tensor_numel(val->t) != 1)
    return -1;
  float f = ((const float *)val->t->data)[0];
  return f == -INFINITY || (isfinite(f) && f <= FILL_MAX) ? t : -1;
}

/* The attention's query and key counts (dims of Q and K by its layout), or
 * false when a rank is not known. */
static bool att_lengths(const keel_shapes *S, const keel_graph *g, const keel_node *n,
                        keel_sdim *sq, keel_sdim *skv) {
  const keel_sshape *q = keel_shapes_find(S, g, n->in_names[0]);
  const keel_sshape *k = keel_shapes_find(S, g, n->in_names[1]);
  if (!q || !k || q->rank != k->rank) return false;
  const keel_attr *la = keel_node_attr(n, "layout");
  int64_t layout = la && la->type == KEEL_ATTR_INT ? la->i : 0;
  if (q->rank == 4) {
    *sq = q->d[layout & L_Q ? 1 : 2];
    *skv = k->d[layout & L_K ? 1 : 3]; /* K rows [B, S, H, D], or Kt [B, H, D, S] */
    return true;
  }
  if (q->rank == 3 && layout == 0) { /* [N, S, D] and Kt [N, D, S] */
    *sq = q->d[1], *skv = k->d[2];
    return true;
  }
  return false;
}

static keel_status rewrite(keel_model *m, keel_graph *g, keel_node *n, const keel_node *tri) {
  keel_arena *a = m->arena;
  keel_attr *attrs = keel_arena_array(a, (size_t)n->n_attr + 1, sizeof(keel_attr));
  if (!attrs) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "causal-mask in graph '%s'", g->path);
  int32_t na = 0;
  for (int32_t i = 0; i < n->n_attr; i++) {
    if (!strcmp(n->attrs[i].name, "causal")) continue;
    attrs[na] = n->attrs[i];
    if (!strcmp(attrs[na].name, "mask_kind")) attrs[na].s = "none", attrs[na].slen = 4;
    na++;
  }
  attrs[na++] = (keel_attr){.name = "causal", .type = KEEL_ATTR_INT, .i = 1};
  KEEL_TRY(keel_ir_fuse_label(a, n, tri));
  n->attrs = attrs, n->n_attr = na;
  n->n_in = 3, n->in = NULL; /* bound again from the names */
  m->fold.causal++;
  return KEEL_OK;
}

static keel_status graph_pass(keel_model *m, const keel_shapes *S, keel_graph *g, bool *any) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    if (!is_add_attention(n)) continue;
    int32_t t = causal_trilu(m, g, n->in_names[3]);
    if (t < 0) continue;
    const keel_sshape *mk = keel_shapes_find(S, g, n->in_names[3]);
    keel_sdim sq, skv;
    if (!mk || mk->rank != 2 || !att_lengths(S, g, n, &sq, &skv) ||
        !keel_sdim_eq(mk->d[0], sq) || !keel_sdim_eq(mk->d[1], skv))
      continue;
    KEEL_TRY(rewrite(m, g, n, &g->nodes[t]));
    *any = true;
  }
  return KEEL_OK;
}

/* A FusedAttention whose additive mask comes from a Trilu: the inference
 * runs only where some node is one. */
static bool worth_it(const keel_model *m, const keel_graph *g, const keel_node *n) {
  (void)m;
  if (!is_add_attention(n)) return false;
  int32_t t = keel_ir_producer(g, n->in_names[3]);
  return t >= 0 && is_onnx(&g->nodes[t], "Trilu");
}

keel_status keel_pass_causal_mask(keel_model *m) {
  if (!keel_pass_any_node(m, worth_it)) return KEEL_OK;
  keel_shapes *S;
  KEEL_TRY(keel_shapes_infer_general(m, &S));
  keel_status st = KEEL_OK;
  bool any = false;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = graph_pass(m, S, m->graphs[i], &any);
  keel_shapes_free(S);
  return st || !any ? st : keel_pass_remove_dead(m);
}
