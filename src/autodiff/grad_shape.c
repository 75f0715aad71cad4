/* grad_shape.c: derivative rules for the ops that move elements without
 * computing on them (Transpose, Expand, Tile, Concat, Split, Slice, Pad,
 * the Gather and Scatter ops, DepthToSpace/SpaceToDepth) and for the
 * sequence ops.
 *
 * Gather and Slice, common in training, have kernels of their own
 * (GatherGrad, SliceGrad in ops/shape/shape_backward.c); GatherElements and GatherND
 * scatter-add gy back with ScatterElements / ScatterND (reduction "add").
 * DepthToSpace (DCR) and SpaceToDepth are each other's inverse. The
 * others (Pad, DepthToSpace CRD, GatherND with batch dims) share one
 * scheme, "positions": the forward node is emitted again with
 * its data input replaced by the positions of x's elements (Range shaped
 * as x, int64), so every attribute and opset form of the op (Pad's modes,
 * pads as attribute or input, axes) is handled by the forward kernel
 * itself; the gradient is gy added into zeros at those positions
 * (ScatterElements, reduction "add", which sums repeated positions).
 *
 * The gradient of a sequence value is a sequence of the same length whose
 * elements are shaped as its elements; the rules build it with the
 * sequence ops and two internal kernels (SequenceAtGrad,
 * ConcatFromSequenceGrad).
 */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "autodiff/autodiff.h"

/* ============================================================ helpers */

/* *out = op(a[, bb]) in ai.onnx at an opset of at least `min`. */
static keel_status op_v(ad_builder *b, const char *op, const char *a, const char *bb, int64_t min,
                        const char **out, keel_node **made) {
  const char *ins[2] = {a, bb};
  return ad_op_at(b, op, bb ? 2 : 1, ins, min, out, made);
}

/* A Constant node (opset 13) with a fresh output (for value_int). */
static keel_status constant(ad_builder *b, const char **out, keel_node **c) {
  const char *o = ad_fresh(b, "const"), *none[1] = {""};
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "Constant", "", 0, none, 1, &o, c));
  if ((*c)->opset < 13) (*c)->opset = 13;
  *out = o;
  return KEEL_OK;
}

/* A scalar int64 constant. */
static keel_status scalar_i64(ad_builder *b, int64_t v, const char **out) {
  keel_node *c;
  KEEL_TRY(constant(b, out, &c));
  return ad_attr_i(b, c, "value_int", v);
}


static keel_status const1(ad_builder *b, int64_t v, const char **out) {
  return ad_const_ints(b, 1, &v, out);
}

/* A scalar 0 of the type of value `like`. */
static keel_status zero_like(ad_builder *b, const char *like, const char **out) {
  keel_node *c;
  const char *f;
  KEEL_TRY(constant(b, &f, &c));
  KEEL_TRY(ad_attr_f(b, c, "value_float", 0.0f));
  return op_v(b, "CastLike", f, like, 15, out, NULL);
}

static int64_t attr_i(const keel_node *n, const char *name, int64_t def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : def;
}

static bool has_in(const keel_node *n, int i) { return i < n->n_in && n->in_names[i][0]; }

/* Reshape(v, Shape(like)). */
static keel_status reshape_as(ad_builder *b, const char *v, const char *like, const char **out) {
  const char *s;
  KEEL_TRY(ad_op(b, "Shape", "", like, NULL, &s, NULL));
  return op_v(b, "Reshape", v, s, 5, out, NULL);
}

static keel_status flat(ad_builder *b, const char *v, const char **out) {
  const char *m1;
  KEEL_TRY(const1(b, -1, &m1));
  return op_v(b, "Reshape", v, m1, 5, out, NULL);
}

/* ========================================================== positions */

/* Positions of x's elements shaped as x: 0..N-1, or 1..N with `sink`
 * (position 0 then catches what the op makes up, e.g. Pad's constant). */
static keel_status iota_of(ad_builder *b, const char *x, bool sink, const char **out,
                           const char **size) {
  const char *n, *lo, *hi, *one, *r;
  KEEL_TRY(op_v(b, "Size", x, NULL, 13, &n, NULL));
  KEEL_TRY(scalar_i64(b, sink ? 1 : 0, &lo));
  KEEL_TRY(scalar_i64(b, 1, &one));
  hi = n;
  if (sink) KEEL_TRY(op_v(b, "Add", n, one, 14, &hi, NULL));
  KEEL_TRY(ad_op_at(b, "Range", 3, (const char *[]){lo, hi, one}, 11, &r, NULL));
  *size = hi;
  return reshape_as(b, r, x, out);
}

/* The forward node n again, on `data` instead of input 0; input `blank`
 * (>= 0) omitted and attribute `drop` (may be NULL) left out. */
static keel_status replay(ad_builder *b, const keel_node *n, const char *data, int blank,
                          const char *drop, const char **out) {
  const char **ins = keel_arena_array(ad_arena(b), (size_t)n->n_in, sizeof(char *));
  const char *o = ad_fresh(b, "pos");
  if (!ins || !o) return ad_oom();
  for (int32_t i = 0; i < n->n_in; i++) ins[i] = i == 0 ? data : i == blank ? "" : n->in_names[i];
  int32_t nin = n->n_in;
  while (nin > 1 && !ins[nin - 1][0]) nin--;
  keel_node *c;
  KEEL_TRY(ad_emit(b, n->op_type, n->domain, nin, ins, 1, &o, &c));
  c->opset = n->opset;
  for (int32_t i = 0; i < n->n_attr; i++)
    if (!drop || strcmp(n->attrs[i].name, drop))
      KEEL_TRY(ad_attr_copy(b, c, n, n->attrs[i].name));
  *out = o;
  return KEEL_OK;
}

/* gy added at `pos` into zeros of `size` elements (a scalar int64), then
 * with `sink` element 0 dropped, shaped as x. */
static keel_status scatter_back(ad_builder *b, const char *x, const char *pos, const char *gy,
                                const char *size, bool sink, const char **out) {
  const char *fp, *fg, *len, *z, *zl, *s, *zero;
  KEEL_TRY(flat(b, pos, &fp));
  KEEL_TRY(flat(b, gy, &fg));
  KEEL_TRY(const1(b, 0, &zero));
  KEEL_TRY(op_v(b, "Unsqueeze", size, zero, 13, &len, NULL));
  KEEL_TRY(op_v(b, "ConstantOfShape", len, NULL, 9, &z, NULL));
  KEEL_TRY(op_v(b, "CastLike", z, gy, 15, &zl, NULL));
  keel_node *sc;
  KEEL_TRY(ad_op_at(b, "ScatterElements", 3, (const char *[]){zl, fp, fg}, 18, &s, &sc));
  KEEL_TRY(ad_attr_s(b, sc, "reduction", "add"));
  if (sink) {
    const char *st, *en;
    KEEL_TRY(const1(b, 1, &st));
    KEEL_TRY(const1(b, INT64_MAX, &en));
    KEEL_TRY(ad_op_at(b, "Slice", 3, (const char *[]){s, st, en}, 13, &s, NULL));
  }
  return reshape_as(b, s, x, out);
}

/* The positions scheme for an op whose input 0 is the data. */
static keel_status by_positions(ad_builder *b, const keel_node *n, const char *gy, bool sink,
                                int blank, const char *drop, const char **gx) {
  const char *iota, *size, *pos;
  KEEL_TRY(iota_of(b, n->in_names[0], sink, &iota, &size));
  KEEL_TRY(replay(b, n, iota, blank, drop, &pos));
  return scatter_back(b, n->in_names[0], pos, gy, size, sink, gx);
}

/* An INTS attribute of n as a constant ("" when absent and not needed). */
static keel_status ints_const(ad_builder *b, const keel_node *n, const char *name, bool need,
                              const char **out) {
  const keel_attr *a = keel_node_attr(n, name);
  *out = "";
  if (!a && !need) return KEEL_OK;
  if (!a || a->type != KEEL_ATTR_INTS)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: attribute %s (ints) is required", n->op_type, name);
  return ad_const_ints(b, a->n, a->ints, out);
}

/* Slice: SliceGrad (ops/shape/shape_backward.c) puts gy back into zeros; the
 * attributes of Slice before opset 10 become its inputs. */
static keel_status r_slice(ad_builder *b, const keel_node *n, const char *const *gy,
                           const char **gx) {
  const char *ins[6] = {gy[0], n->in_names[0], "", "", "", ""}, *o = ad_fresh(b, "dslice");
  if (!o) return ad_oom();
  if (n->opset < 10) {
    KEEL_TRY(ints_const(b, n, "starts", true, &ins[2]));
    KEEL_TRY(ints_const(b, n, "ends", true, &ins[3]));
    KEEL_TRY(ints_const(b, n, "axes", false, &ins[4]));
  } else {
    if (n->n_in < 3) return keel_err(KEEL_ERR_INVALID_MODEL, "Slice needs starts and ends");
    for (int32_t i = 1; i < n->n_in && i < 5; i++) ins[i + 1] = n->in_names[i];
  }
  int nin = 6;
  while (!ins[nin - 1][0]) nin--;
  KEEL_TRY(ad_emit(b, "SliceGrad", AD_INTERNAL, nin, ins, 1, &o, NULL));
  gx[0] = o;
  return KEEL_OK;
}

/* GatherElements, and GatherND without batch dims: gy scatter-added into
 * zeros shaped as x at the same indices. */
static keel_status r_gather_elems(ad_builder *b, const keel_node *n, const char *const *gy,
                                  const char **gx) {
  bool nd = !strcmp(n->op_type, "GatherND");
  if (nd && attr_i(n, "batch_dims", 0) != 0)
    return by_positions(b, n, gy[0], false, -1, NULL, &gx[0]);
  const char *z, *o = ad_fresh(b, "dgather");
  if (!o) return ad_oom();
  KEEL_TRY(ad_op(b, "ZerosLike", AD_INTERNAL, n->in_names[0], NULL, &z, NULL));
  keel_node *c;
  const char *ins[3] = {z, n->in_names[1], gy[0]};
  KEEL_TRY(ad_emit(b, nd ? "ScatterND" : "ScatterElements", "", 3, ins, 1, &o, &c));
  if (c->opset < 18) c->opset = 18;
  KEEL_TRY(ad_attr_s(b, c, "reduction", "add"));
  if (!nd) KEEL_TRY(ad_attr_i(b, c, "axis", attr_i(n, "axis", 0)));
  gx[0] = o;
  return KEEL_OK;
}


/* Pad: the padding gets position 0 (constant_value omitted, or the
 * attribute `value` before opset 11, so it is 0); every mode. */
static keel_status r_pad(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  return by_positions(b, n, gy[0], true, n->opset >= 11 ? 2 : -1, n->opset >= 11 ? NULL : "value",
                      &gx[0]);
}

/* Gather: gy added into zeros of x's shape at the gathered rows. */
static keel_status r_gather(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  keel_node *g;
  const char *ins[3] = {gy[0], n->in_names[0], n->in_names[1]}, *o = ad_fresh(b, "dgather");
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "GatherGrad", AD_INTERNAL, 3, ins, 1, &o, &g));
  KEEL_TRY(ad_attr_i(b, g, "axis", attr_i(n, "axis", 0)));
  gx[0] = o;
  return KEEL_OK;
}

/* ====================================================== permutations */

/* DepthToSpace in DCR mode and SpaceToDepth undo each other; CRD mode
 * goes through positions. */
static keel_status r_depth_space(ad_builder *b, const keel_node *n, const char *const *gy,
                                 const char **gx) {
  bool d2s = !strcmp(n->op_type, "DepthToSpace");
  const keel_attr *mode = keel_node_attr(n, "mode");
  if (d2s && mode && mode->s && strcmp(mode->s, "DCR"))
    return by_positions(b, n, gy[0], false, -1, NULL, &gx[0]);
  keel_node *c;
  KEEL_TRY(op_v(b, d2s ? "SpaceToDepth" : "DepthToSpace", gy[0], NULL, 13, &gx[0], &c));
  return ad_attr_copy(b, c, n, "blocksize");
}

static keel_status r_transpose(ad_builder *b, const keel_node *n, const char *const *gy,
                               const char **gx) {
  const keel_attr *p = keel_node_attr(n, "perm");
  keel_node *t;
  KEEL_TRY(ad_op(b, "Transpose", "", gy[0], NULL, &gx[0], &t));
  if (!p) return KEEL_OK; /* reversed axes: its own inverse */
  int64_t inv[64];
  bool ok = p->type == KEEL_ATTR_INTS && p->n <= 64;
  for (int32_t i = 0; ok && i < p->n; i++) inv[i] = -1;
  for (int32_t i = 0; ok && i < p->n; i++) {
    ok = p->ints[i] >= 0 && p->ints[i] < p->n && inv[p->ints[i]] < 0;
    if (ok) inv[p->ints[i]] = i;
  }
  if (!ok) return keel_err(KEEL_ERR_INVALID_MODEL, "Transpose: perm is not a permutation");
  return ad_attr_ints(b, t, "perm", p->n, inv);
}

/* ============================================================ copies */

static keel_status r_expand(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  return ad_sum_to(b, gy[0], n->in_names[0], &gx[0]);
}

/* Tile: gy seen as [r0, d0, r1, d1, ...] summed over the r axes. */
static keel_status r_tile(ad_builder *b, const keel_node *n, const char *const *gy,
                          const char **gx) {
  if (n->opset < 6)
    return keel_err(KEEL_ERR_UNSUPPORTED, "gradient of Tile: opset %lld (tiles/axis inputs) is not supported",
                    (long long)n->opset);
  const char *one, *shp, *ur, *us, *pairs, *shape2, *r, *cnt, *lo, *step, *rng, *two, *axes;
  KEEL_TRY(const1(b, 1, &one));
  KEEL_TRY(ad_op(b, "Shape", "", n->in_names[0], NULL, &shp, NULL));
  KEEL_TRY(op_v(b, "Unsqueeze", n->in_names[1], one, 13, &ur, NULL));
  KEEL_TRY(op_v(b, "Unsqueeze", shp, one, 13, &us, NULL));
  keel_node *c;
  KEEL_TRY(op_v(b, "Concat", ur, us, 13, &pairs, &c));
  KEEL_TRY(ad_attr_i(b, c, "axis", 1));
  KEEL_TRY(flat(b, pairs, &shape2));
  KEEL_TRY(op_v(b, "Reshape", gy[0], shape2, 5, &r, NULL));
  KEEL_TRY(op_v(b, "Size", shp, NULL, 13, &cnt, NULL));
  KEEL_TRY(scalar_i64(b, 0, &lo));
  KEEL_TRY(scalar_i64(b, 1, &step));
  KEEL_TRY(scalar_i64(b, 2, &two));
  const char *ins[3] = {lo, cnt, step}, *o = ad_fresh(b, "range");
  if (!o) return ad_oom();
  keel_node *rn;
  KEEL_TRY(ad_emit(b, "Range", "", 3, ins, 1, &o, &rn));
  if (rn->opset < 11) rn->opset = 11;
  rng = o;
  KEEL_TRY(op_v(b, "Mul", rng, two, 14, &axes, NULL));
  keel_node *rs;
  KEEL_TRY(op_v(b, "ReduceSum", r, axes, 13, &gx[0], &rs));
  KEEL_TRY(ad_attr_i(b, rs, "keepdims", 0));
  return ad_attr_i(b, rs, "noop_with_empty_axes", 1);
}

/* Concat: gy split back into the inputs' lengths along the axis. */
static keel_status r_concat(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  int64_t axis = attr_i(n, "axis", 0);
  const char **lens = keel_arena_array(ad_arena(b), (size_t)n->n_in + 1, sizeof(char *));
  const char **outs = keel_arena_array(ad_arena(b), (size_t)n->n_in + 1, sizeof(char *));
  const char *ax, *split;
  if (!lens || !outs) return ad_oom();
  KEEL_TRY(const1(b, axis, &ax));
  for (int32_t i = 0; i < n->n_in; i++) {
    const char *s;
    KEEL_TRY(ad_op(b, "Shape", "", n->in_names[i], NULL, &s, NULL));
    KEEL_TRY(op_v(b, "Gather", s, ax, 13, &lens[i], NULL));
    outs[i] = ad_fresh(b, "dconcat");
    if (!outs[i]) return ad_oom();
  }
  keel_node *c, *sp;
  const char *o = ad_fresh(b, "lens");
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "Concat", "", n->n_in, lens, 1, &o, &c));
  if (c->opset < 13) c->opset = 13;
  KEEL_TRY(ad_attr_i(b, c, "axis", 0));
  split = o;
  KEEL_TRY(ad_emit(b, "Split", "", 2, (const char *[]){gy[0], split}, n->n_in, outs, &sp));
  if (sp->opset < 13) sp->opset = 13;
  KEEL_TRY(ad_attr_i(b, sp, "axis", axis));
  for (int32_t i = 0; i < n->n_in; i++) gx[i] = outs[i];
  return KEEL_OK;
}

/* Split: the outputs' gradients concatenated (zeros for those without). */
static keel_status r_split(ad_builder *b, const keel_node *n, const char *const *gy,
                           const char **gx) {
  const char **parts = keel_arena_array(ad_arena(b), (size_t)n->n_out, sizeof(char *));
  if (!parts) return ad_oom();
  for (int32_t k = 0; k < n->n_out; k++) {
    parts[k] = gy[k];
    if (parts[k]) continue;
    if (!n->out_names[k][0])
      return keel_err(KEEL_ERR_UNSUPPORTED, "gradient of Split: output %d is omitted", k);
    KEEL_TRY(ad_op(b, "ZerosLike", AD_INTERNAL, n->out_names[k], NULL, &parts[k], NULL));
  }
  keel_node *c;
  const char *o = ad_fresh(b, "dsplit");
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "Concat", "", n->n_out, parts, 1, &o, &c));
  if (c->opset < 13) c->opset = 13;
  KEEL_TRY(ad_attr_i(b, c, "axis", attr_i(n, "axis", 0)));
  gx[0] = o;
  return KEEL_OK;
}

/* ========================================================== scatters */

/* ScatterElements / ScatterND with reduction none: the data's gradient is
 * gy with the overwritten places zeroed (the forward op scattering zeros
 * into gy); the updates' is gy read back at the indices. */
static keel_status r_scatter(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx) {
  const keel_attr *red = keel_node_attr(n, "reduction");
  if (red && red->s && strcmp(red->s, "none"))
    return keel_err(KEEL_ERR_UNSUPPORTED, "gradient of %s: reduction '%s' (only 'none')",
                    n->op_type, red->s);
  bool nd = !strcmp(n->op_type, "ScatterND");
  const char *z, *o = ad_fresh(b, "ddata");
  if (!o) return ad_oom();
  KEEL_TRY(ad_op(b, "ZerosLike", AD_INTERNAL, n->in_names[2], NULL, &z, NULL));
  keel_node *c, *g;
  KEEL_TRY(ad_emit(b, n->op_type, "", 3, (const char *[]){gy[0], n->in_names[1], z}, 1, &o, &c));
  c->opset = n->opset;
  KEEL_TRY(ad_attr_copy(b, c, n, "axis"));
  gx[0] = o;
  KEEL_TRY(op_v(b, nd ? "GatherND" : "GatherElements", gy[0], n->in_names[1], 11, &gx[2], &g));
  return nd ? KEEL_OK : ad_attr_copy(b, g, n, "axis");
}

/* ========================================================= sequences */

static keel_status seq_at(ad_builder *b, const char *s, const char *pos, const char **out) {
  return op_v(b, "SequenceAt", s, pos, 11, out, NULL);
}

/* Position p (a scalar) counted from the front of sequence s. */
static keel_status from_front(ad_builder *b, const char *s, const char *p, const char **out) {
  const char *len, *lenp, *q, *zero, *neg;
  KEEL_TRY(op_v(b, "SequenceLength", s, NULL, 11, &len, NULL));
  KEEL_TRY(op_v(b, "CastLike", len, p, 15, &lenp, NULL));
  KEEL_TRY(op_v(b, "Add", p, lenp, 14, &q, NULL));
  KEEL_TRY(zero_like(b, p, &zero));
  KEEL_TRY(op_v(b, "Less", p, zero, 13, &neg, NULL));
  const char *o = ad_fresh(b, "pos");
  if (!o) return ad_oom();
  keel_node *w;
  KEEL_TRY(ad_emit(b, "Where", "", 3, (const char *[]){neg, q, p}, 1, &o, &w));
  if (w->opset < 16) w->opset = 16;
  *out = o;
  return KEEL_OK;
}

static keel_status r_seq_construct(ad_builder *b, const keel_node *n, const char *const *gy,
                                   const char **gx) {
  for (int32_t i = 0; i < n->n_in; i++) {
    const char *p;
    KEEL_TRY(scalar_i64(b, i, &p));
    KEEL_TRY(seq_at(b, gy[0], p, &gx[i]));
  }
  return KEEL_OK;
}

static keel_status r_seq_at(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  const char *o = ad_fresh(b, "dseq");
  if (!o) return ad_oom();
  const char *ins[3] = {n->in_names[0], n->in_names[1], gy[0]};
  KEEL_TRY(ad_emit(b, "SequenceAtGrad", AD_INTERNAL, 3, ins, 1, &o, NULL));
  gx[0] = o;
  return KEEL_OK;
}

/* Insert: the inserted element's gradient is taken out of the sequence's. */
static keel_status r_seq_insert(ad_builder *b, const keel_node *n, const char *const *gy,
                                const char **gx) {
  const char *p;
  if (has_in(n, 2)) KEEL_TRY(from_front(b, n->in_names[0], n->in_names[2], &p));
  else KEEL_TRY(scalar_i64(b, -1, &p));
  KEEL_TRY(seq_at(b, gy[0], p, &gx[1]));
  if (has_in(n, 2)) return op_v(b, "SequenceErase", gy[0], p, 11, &gx[0], NULL);
  return op_v(b, "SequenceErase", gy[0], NULL, 11, &gx[0], NULL);
}

/* Erase: zeros put back where the element was. */
static keel_status r_seq_erase(ad_builder *b, const keel_node *n, const char *const *gy,
                               const char **gx) {
  const char *p, *e, *z, *o = ad_fresh(b, "dseq");
  if (!o) return ad_oom();
  if (has_in(n, 1)) KEEL_TRY(from_front(b, n->in_names[0], n->in_names[1], &p));
  else KEEL_TRY(scalar_i64(b, -1, &p));
  KEEL_TRY(seq_at(b, n->in_names[0], p, &e));
  KEEL_TRY(ad_op(b, "ZerosLike", AD_INTERNAL, e, NULL, &z, NULL));
  keel_node *c;
  const char *ins[3] = {gy[0], z, p};
  KEEL_TRY(ad_emit(b, "SequenceInsert", "", has_in(n, 1) ? 3 : 2, ins, 1, &o, &c));
  if (c->opset < 11) c->opset = 11;
  gx[0] = o;
  return KEEL_OK;
}

static keel_status r_concat_from_seq(ad_builder *b, const keel_node *n, const char *const *gy,
                                     const char **gx) {
  keel_node *c;
  KEEL_TRY(ad_op(b, "ConcatFromSequenceGrad", AD_INTERNAL, gy[0], n->in_names[0], &gx[0], &c));
  KEEL_TRY(ad_attr_i(b, c, "axis", attr_i(n, "axis", 0)));
  return ad_attr_i(b, c, "new_axis", attr_i(n, "new_axis", 0));
}

/* SplitToSequence: the pieces' gradients concatenated; pieces squeezed
 * (split omitted, keepdims 0) are stacked on a new axis. */
static keel_status r_split_to_seq(ad_builder *b, const keel_node *n, const char *const *gy,
                                  const char **gx) {
  bool stacked = !has_in(n, 1) && attr_i(n, "keepdims", 1) == 0;
  keel_node *c;
  KEEL_TRY(op_v(b, "ConcatFromSequence", gy[0], NULL, 11, &gx[0], &c));
  KEEL_TRY(ad_attr_i(b, c, "axis", attr_i(n, "axis", 0)));
  return ad_attr_i(b, c, "new_axis", stacked ? 1 : 0);
}

/* ============================================================== table */

#define NONE(op) {op, "", 0, NULL}
const ad_rule ad_rules_shape[] = {
    {"Transpose", "", 1, r_transpose},
    {"Expand", "", 1, r_expand, 2},
    {"Tile", "", 1, r_tile, 2},
    {"Concat", "", AD_ALL, r_concat, 1},
    {"Split", "", 1, r_split, 1},
    {"Slice", "", 1, r_slice, 1},
    {"Pad", "", 1, r_pad, 1},
    {"Gather", "", 1, r_gather, 2},
    {"GatherElements", "", 1, r_gather_elems, 2},
    {"GatherND", "", 1, r_gather_elems, 2},
    {"DepthToSpace", "", 1, r_depth_space, 1},
    {"SpaceToDepth", "", 1, r_depth_space, 1},
    {"ScatterElements", "", 5, r_scatter, 3},
    {"Scatter", "", 5, r_scatter, 3},
    {"ScatterND", "", 5, r_scatter, 3},
    {"SequenceConstruct", "", AD_ALL, r_seq_construct, 1},
    {"SequenceAt", "", 1, r_seq_at, 2},
    {"SequenceInsert", "", 3, r_seq_insert, 2},
    {"SequenceErase", "", 1, r_seq_erase, 1},
    {"ConcatFromSequence", "", 1, r_concat_from_seq, 1},
    {"SplitToSequence", "", 1, r_split_to_seq, 1},
    NONE("SequenceEmpty"),
    NONE("SequenceLength"),
    {0},
};
