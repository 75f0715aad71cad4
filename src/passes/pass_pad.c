/* pass_pad.c: fold-pad. A zero Pad of the spatial dims whose only reader
 * is a Conv (or an AveragePool, below) becomes the reader's own padding:
 *
 *   Pad(x, [0, 0, hb, wb, 0, 0, he, we]) -> Conv(pads [pb, ...])
 *     =>  Conv(x, pads [pb + hb, ..., pe + he, ...])
 *
 * tf2onnx writes TensorFlow's 'SAME' padding of a strided conv this way (a
 * Pad node of its own, all of the odd padding after), and so do exporters
 * of asymmetric padding (ZeroPad2d in PyTorch). A Conv pads with zeros
 * itself, so the result is the same element for element, with one
 * tensor copy less, and the convolution keeps its fast paths (a Pad
 * between two convolutions also splits the layout pass's channels-last
 * chain in two, with a Transpose each way).
 *
 * PyTorch exports an average pool with padding the same way (a Pad, then
 * AveragePool with pads 0): that Pad becomes the pool's pads with
 * count_include_pad 1, which averages over the same zeros.
 *
 * Folded only when: Pad's mode is "constant" with value 0 (the attribute
 * before opset 11, a constant input after it), its pads are constant and
 * non-negative with nothing on the batch and channel dims, it has no
 * `axes` input (opset 18), its output is read by that Conv or AveragePool
 * alone (as the data input) and is no graph output, and the reader has
 * explicit padding (auto_pad NOTSET) of the same rank. An AveragePool
 * also needs ceil_mode 0 (a last partial window would count the pads
 * differently) and, if it pads itself, count_include_pad 1 already.
 */
#include <stdio.h>

#include "base/status.h"
#include "passes/pass.h"

/* Pad's amounts (2 * rank entries, begins then ends) when it is a plain
 * zero pad keel may fold; false otherwise. */
static bool zero_pad(const keel_model *m, const keel_graph *g, const keel_node *p, int64_t *pads,
                     int *rank) {
  if (strcmp(p->op_type, "Pad") || p->domain[0] || p->n_out != 1 || p->n_subs) return false;
  const keel_attr *mode = keel_node_attr(p, "mode");
  if (mode && strcmp(mode->s, "constant")) return false;
  int n = 0;
  if (p->opset < 11) {
    const keel_attr *a = keel_node_attr(p, "pads"), *v = keel_node_attr(p, "value");
    if (!a || (v && v->f != 0.0f) || a->n > 2 * KEEL_MAX_RANK) return false;
    n = a->n;
    memcpy(pads, a->ints, sizeof(int64_t) * (size_t)n);
  } else {
    if (p->n_in < 2 || (p->n_in > 3 && p->in_names[3][0])) return false; /* axes */
    float v;
    if (p->n_in > 2 && p->in_names[2][0] && (!keel_ir_const_f32(m, g, p->in_names[2], &v) || v != 0.0f))
      return false;
    int32_t c = keel_ir_const_of(m, g, p->in_names[1]);
    if (c < 0) return false;
    const keel_tensor *t = &m->consts[c];
    if (t->dtype != KEEL_INT64 || t->rank != 1 || t->shape[0] > 2 * KEEL_MAX_RANK) return false;
    n = (int)t->shape[0];
    if (n) memcpy(pads, t->data, sizeof(int64_t) * (size_t)n);
  }
  if (n % 2 || n < 6) return false; /* at least one spatial dim */
  *rank = n / 2;
  for (int i = 0; i < n; i++)
    if (pads[i] < 0) return false;
  return !pads[0] && !pads[1] && !pads[*rank] && !pads[*rank + 1];
}

static keel_status try_at(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused) {
  *fused = false;
  int64_t pads[2 * KEEL_MAX_RANK];
  int rank;
  const keel_node *p = &g->nodes[i];
  if (!zero_pad(m, g, p, pads, &rank)) return KEEL_OK;
  int32_t ci = keel_ir_only_reader(g, p->out_names[0]);
  if (ci < 0 || drop[ci]) return KEEL_OK;
  keel_node *c = &g->nodes[ci];
  bool conv = !strcmp(c->op_type, "Conv") && c->n_in >= 2;
  bool pool = !strcmp(c->op_type, "AveragePool") && c->n_in == 1 && c->n_out == 1;
  if ((!conv && !pool) || c->domain[0] || strcmp(c->in_names[0], p->out_names[0])) return KEEL_OK;
  const keel_attr *ap = keel_node_attr(c, "auto_pad");
  if (ap && strcmp(ap->s, "NOTSET")) return KEEL_OK;
  int sp = rank - 2;
  const keel_attr *cp = keel_node_attr(c, "pads");
  if (cp && cp->n != 2 * sp) return KEEL_OK;
  const keel_attr *cip = pool ? keel_node_attr(c, "count_include_pad") : NULL;
  if (pool) {
    const keel_attr *ceil = keel_node_attr(c, "ceil_mode");
    if (ceil && ceil->i) return KEEL_OK;
    for (int d = 0; cp && d < 2 * sp && !(cip && cip->i); d++)
      if (cp->ints[d]) return KEEL_OK; /* its own pads left out of the average */
  }
  keel_arena *a = m->arena;
  int64_t *np = keel_arena_array(a, (size_t)(2 * sp), sizeof(int64_t));
  int32_t n_attr = c->n_attr + (cp ? 0 : 1) + (pool && !cip ? 1 : 0);
  keel_attr *attrs = keel_arena_array(a, (size_t)n_attr, sizeof(keel_attr));
  const char **ins = keel_arena_array(a, (size_t)c->n_in, sizeof(char *));
  if (!np || !attrs || !ins) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding a Pad in graph '%s'", g->path);
  for (int d = 0; d < sp; d++) {
    np[d] = (cp ? cp->ints[d] : 0) + pads[2 + d];
    np[sp + d] = (cp ? cp->ints[sp + d] : 0) + pads[rank + 2 + d];
  }
  memcpy(attrs, c->attrs, sizeof(keel_attr) * (size_t)c->n_attr);
  int32_t at = c->n_attr;
  keel_attr *slot = cp ? &attrs[cp - c->attrs] : &attrs[at++];
  *slot = (keel_attr){.name = "pads", .type = KEEL_ATTR_INTS, .n = 2 * sp, .ints = np};
  if (pool) {
    slot = cip ? &attrs[cip - c->attrs] : &attrs[at++];
    *slot = (keel_attr){.name = "count_include_pad", .type = KEEL_ATTR_INT, .i = 1};
  }
  memcpy(ins, c->in_names, sizeof(char *) * (size_t)c->n_in);
  ins[0] = p->in_names[0];
  c->attrs = attrs, c->n_attr = n_attr, c->in_names = ins;
  KEEL_TRY(keel_ir_fuse_label(a, c, p));
  drop[i] = true;
  *fused = true;
  return KEEL_OK;
}

keel_status keel_pass_fold_pad(keel_model *m) { return keel_pass_fuse_all(m, try_at); }
