/* pass_catconv.c: split-concat-conv. A convolution is linear in its input
 * channels, so a Conv of a channel Concat is the sum of the convolutions of
 * the parts, each by its own slice of W's input channels:
 *
 *   Conv(Concat(a, b, axis 1), W, B)
 *     =>  Add(Conv(b, W[:, Ca:]), Conv(a, W[:, :Ca], B))
 *
 * (more parts chain more Adds). The Concat's copy of every part goes; each
 * Add then folds into its conv as a residual (the layout pass: oneDNN's
 * sum post-op, or keel's pointwise kernel's Z), and an activation after
 * the Conv into the last one (fuse-activation): one more pass over the
 * conv's output per part, which is narrow where this pays (SqueezeNet's
 * fire modules: 16-64 output channels from 128-512 concatenated; a YOLO
 * C2f block's 1x1 after its Concat). The sums run in another order than
 * one conv's: results differ in the last bits.
 *
 * Only when: the Concat is ai.onnx, of axis 1, of 2 to 8 parts whose
 * channel counts shape inference knows; every reader of its output is an
 * ai.onnx Conv of one group reading it as X, its W a constant float32 of
 * rank 4 whose input channels are the parts' sum; nothing else reads it
 * (no graph output, no sub-graph). Every reader is rewritten and the
 * Concat goes. The first part's Conv keeps the Conv's name, attributes and
 * bias and lists the Concat it took over; the others are named
 * "<conv>/part<k>" and their Adds "<conv>/sum<k>". Only where convolutions
 * run on oneDNN (keel_conv_split_concat, ops/nn/conv/select.h).
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shapes.h"
#include "ops/nn/conv/select.h"
#include "passes/pass.h"

#define MAX_PARTS 8

typedef struct cc {
  keel_model *m;
  keel_graph *g;
  const keel_shapes *S;
  keel_node_list out;           /* the new node array, built in order      */
} cc;

static keel_status oom(const cc *C) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "split-concat-conv in graph '%s'", C->g->path);
}

/* The channel counts of Concat node c's parts, when it qualifies. */
static bool parts_of(const cc *C, const keel_node *c, int64_t *ch) {
  if (c->domain[0] || strcmp(c->op_type, "Concat") || c->n_subs || c->n_out != 1 ||
      !c->out_names[0][0] || c->n_in < 2 || c->n_in > MAX_PARTS)
    return false;
  const keel_attr *ax = keel_node_attr(c, "axis");
  if (!ax || ax->type != KEEL_ATTR_INT) return false;
  for (int32_t k = 0; k < c->n_in; k++) {
    const keel_sshape *s = c->in_names[k][0] ? keel_shapes_find(C->S, C->g, c->in_names[k]) : NULL;
    if (!s || s->rank != 4 || (ax->i != 1 && ax->i != 1 - s->rank) ||
        s->d[1].sym != KEEL_SYM_KNOWN || s->d[1].add <= 0)
      return false;
    ch[k] = s->d[1].add;
  }
  return true;
}

/* W of Conv node r when r may be split over parts of `total` channels. */
static const keel_tensor *split_w(const cc *C, const keel_node *r, const char *x, int64_t total) {
  if (r->domain[0] || strcmp(r->op_type, "Conv") || r->n_subs || r->n_out != 1 || r->n_in < 2 ||
      r->n_in > 3 || strcmp(r->in_names[0], x) || !strcmp(r->in_names[1], x) ||
      (r->n_in == 3 && !strcmp(r->in_names[2], x)))
    return NULL;
  const keel_attr *gr = keel_node_attr(r, "group");
  if (gr && gr->i != 1) return NULL;
  int32_t wc = keel_ir_const_of(C->m, C->g, r->in_names[1]);
  if (wc < 0) return NULL;
  const keel_tensor *w = &C->m->consts[wc];
  if (w->dtype != KEEL_FLOAT || w->rank != 4 || !w->data || w->shape[1] != total) return NULL;
  return w;
}

/* Whether every reader of Concat c's output is a Conv split_w takes, and
 * nothing else reads it. */
static bool all_convs(const cc *C, const keel_node *c, int64_t total) {
  const char *x = c->out_names[0];
  int32_t reads = 0;
  for (int32_t i = c->index + 1; i < C->g->n_nodes; i++) {
    const keel_node *r = &C->g->nodes[i];
    bool reads_x = false;
    for (int32_t k = 0; k < r->n_in; k++) reads_x |= !strcmp(r->in_names[k], x);
    if (!reads_x) continue;
    if (!split_w(C, r, x, total)) return false;
    reads++;
  }
  return reads > 0 && keel_ir_uses(C->g, x) == reads;
}

/* "<conv>/<tag><k>" in the arena, or NULL. */
static const char *child_name(keel_arena *a, const char *conv, const char *tag, int32_t k) {
  size_t len = strlen(conv) + strlen(tag) + 16;
  char *name = keel_arena_alloc(a, len, 1);
  if (name) snprintf(name, len, "%s/%s%d", conv, tag, (int)k);
  return name;
}

/* Conv node r of the Concat c (parts of ch[] channels) as its chain. */
static keel_status split(cc *C, const keel_node *r, const keel_node *c, const int64_t *ch) {
  keel_model *m = C->m;
  keel_arena *a = m->arena;
  int64_t total = 0;
  for (int32_t k = 0; k < c->n_in; k++) total += ch[k];
  const keel_tensor *w = split_w(C, r, c->out_names[0], total); /* all_convs took r */
  int64_t M = w->shape[0], C_all = w->shape[1], khw = w->shape[2] * w->shape[3];
  const char *sum = NULL; /* the chain's running sum */
  int64_t c0 = 0;
  for (int32_t k = 0; k < c->n_in; k++) {
    char tag[16];
    snprintf(tag, sizeof tag, "part%d", (int)k);
    const char *wn = keel_pass_fresh(m, C->g, r->in_names[1], tag);
    float *wd = keel_arena_alloc(a, sizeof(float) * (size_t)(M * ch[k] * khw) + 1, 64);
    const char **ins = keel_arena_array(a, 3, sizeof(char *));
    const char **outs = keel_arena_array(a, 1, sizeof(char *));
    if (!wn || !wd || !ins || !outs) return oom(C);
    const float *src = w->data;
    for (int64_t o = 0; o < M; o++)
      memcpy(wd + o * ch[k] * khw, src + (o * C_all + c0) * khw,
             sizeof(float) * (size_t)(ch[k] * khw));
    keel_tensor tw = *w;
    tw.shape[1] = ch[k], tw.data = wd, tw.buf = NULL;
    KEEL_TRY(keel_ir_add_const(m, C->g, wn, &tw, NULL));
    keel_node conv = *r;
    ins[0] = c->in_names[k], ins[1] = wn;
    conv.in_names = ins;
    conv.n_in = k == 0 && r->n_in == 3 ? 3 : 2;
    if (conv.n_in == 3) ins[2] = r->in_names[2];
    bool last = k + 1 == c->n_in;
    outs[0] = keel_pass_fresh(m, C->g, r->out_names[0], tag); /* an Add writes the last sum */
    if (!outs[0]) return oom(C);
    conv.out_names = outs;
    if (k == 0) {
      KEEL_TRY(keel_ir_fuse_label(a, &conv, c));
    } else {
      if (!(conv.name = child_name(a, r->name, "part", k))) return oom(C);
      conv.n_fused = 0, conv.fused = NULL;
    }
    KEEL_TRY(keel_node_list_push(&C->out, &conv));
    if (k == 0) {
      sum = outs[0];
    } else { /* Add(this part's conv, the sum so far) */
      const char **ai = keel_arena_array(a, 2, sizeof(char *));
      const char **ao = keel_arena_array(a, 1, sizeof(char *));
      const char *name = child_name(a, r->name, "sum", k);
      if (!ai || !ao || !name) return oom(C);
      ai[0] = outs[0], ai[1] = sum;
      ao[0] = last ? r->out_names[0] : keel_pass_fresh(m, C->g, r->out_names[0], "sum");
      if (!ao[0]) return oom(C);
      keel_node add = {.name = name, .op_type = "Add", .domain = "", .opset = 14, .graph = C->g,
                       .n_in = 2, .n_out = 1, .in_names = ai, .out_names = ao};
      KEEL_TRY(keel_node_list_push(&C->out, &add));
      sum = ao[0];
    }
    c0 += ch[k];
  }
  return KEEL_OK;
}

static keel_status graph_pass(keel_model *m, keel_graph *g, const keel_shapes *S) {
  int32_t nn = g->n_nodes;
  cc C = {.m = m, .g = g, .S = S, .out = {.pass = "split-concat-conv", .g = g}};
  /* which Concats go: cat[i] for each, their part channels in ch */
  bool *cat = keel_sys_calloc((size_t)nn + 1, sizeof(bool));
  int64_t(*ch)[MAX_PARTS] = keel_sys_calloc((size_t)nn + 1, sizeof *ch);
  keel_status st = !cat || !ch ? oom(&C) : KEEL_OK;
  int32_t found = 0;
  for (int32_t i = 0; i < nn && !st; i++) {
    const keel_node *c = &g->nodes[i];
    if (!parts_of(&C, c, ch[i])) continue;
    int64_t total = 0;
    for (int32_t k = 0; k < c->n_in; k++) total += ch[i][k];
    if (all_convs(&C, c, total)) cat[i] = true, found++;
  }
  for (int32_t i = 0; i < nn && found && !st; i++) {
    const keel_node *n = &g->nodes[i];
    if (cat[i]) continue; /* the Concat goes */
    int32_t p = n->n_in ? keel_ir_producer(g, n->in_names[0]) : -1;
    if (p >= 0 && cat[p] && !strcmp(n->op_type, "Conv") && !n->domain[0])
      st = split(&C, n, &g->nodes[p], ch[p]);
    else
      st = keel_node_list_push(&C.out, n);
  }
  if (!st && found) st = keel_graph_set_nodes(m->arena, g, C.out.v, C.out.n);
  keel_node_list_free(&C.out);
  keel_sys_free(cat, (size_t)nn + 1);
  keel_sys_free(ch, ((size_t)nn + 1) * sizeof *ch);
  return st;
}

static bool concat_node(const keel_model *m, const keel_graph *g, const keel_node *n) {
  (void)m, (void)g;
  return !n->domain[0] && !strcmp(n->op_type, "Concat");
}

keel_status keel_pass_split_concat_conv(keel_model *m) {
  if (m->gpu || !keel_conv_split_concat(m->no_library) || !keel_pass_any_node(m, concat_node))
    return KEEL_OK;
  keel_shapes *S = NULL;
  KEEL_TRY(keel_shapes_infer(m, &S));
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = graph_pass(m, m->graphs[i], S);
  keel_shapes_free(S);
  return st;
}
