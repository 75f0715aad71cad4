/* shape_rules.c: the shape rule of each op (shape_rules.h), by family:
 * elementwise and broadcasting, matrix products, convolutions and pools,
 * reductions, the shape ops (whose element values are followed too), and
 * the data-dependent ones (fresh symbols). An op without a rule leaves its
 * outputs unknown; a rule that meets something it cannot tell (a symbolic
 * stride, an unknown axis) leaves that dim, or the whole value, unknown. */
#include <stdlib.h>

#include "ir/shape_rules.h"

#define BIG_END ((int64_t)INT32_MAX) /* a Slice end at or past it: "to the end" */

/* =========================================================== helpers */

static const keel_sshape *in_at(const keel_shape_ctx *c, int32_t i) {
  return i < c->n->n_in && c->in[i] && c->in[i]->rank >= 0 ? c->in[i] : NULL;
}

static bool has_in(const keel_shape_ctx *c, int32_t i) { return i < c->n->n_in && c->n->in_names[i][0]; }

static int64_t attr_i(const keel_shape_ctx *c, const char *name, int64_t dflt) {
  const keel_attr *a = keel_node_attr(c->n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : dflt;
}

/* An INTS attribute: its count (and values), or -1 when absent. */
static int32_t attr_ints(const keel_shape_ctx *c, const char *name, const int64_t **v) {
  const keel_attr *a = keel_node_attr(c->n, name);
  if (!a || a->type != KEEL_ATTR_INTS) return -1;
  *v = a->ints;
  return a->n;
}

/* Input i's element values when every one is a known integer: the count,
 * else -1. */
static int32_t in_ints(const keel_shape_ctx *c, int32_t i, int64_t *out, int32_t cap) {
  const keel_sshape *v = in_at(c, i);
  if (!v || v->nv < 0 || v->nv > cap) return -1;
  for (int32_t k = 0; k < v->nv; k++) {
    if (!keel_sd_isk(v->v[k])) return -1;
    out[k] = v->v[k].add;
  }
  return v->nv;
}

/* Axes from an INTS attribute (older opsets) or an input (newer): the
 * count, 0 when none given, -1 when not known at load. */
static int32_t get_axes(const keel_shape_ctx *c, const char *attr, int32_t input, int64_t *out) {
  const int64_t *a;
  int32_t n = attr_ints(c, attr, &a);
  if (n >= 0) {
    if (n > KEEL_SHAPE_MAXV) return -1;
    memcpy(out, a, sizeof(int64_t) * (size_t)n);
    return n;
  }
  if (input < 0 || !has_in(c, input)) return 0;
  return in_ints(c, input, out, KEEL_SHAPE_MAXV);
}

static bool norm_axis(int64_t *a, int32_t rank) {
  if (*a < 0) *a += rank;
  return *a >= 0 && *a < rank;
}

static void same_as(keel_sshape *o, const keel_sshape *x, bool values) {
  *o = *x;
  if (!values) o->nv = -1;
}

/* The product of dims (one symbolic factor at most), or unknown. */
static keel_sdim prod(const keel_sdim *d, int32_t n) {
  keel_sdim p = keel_sd_known(1);
  for (int32_t i = 0; i < n; i++) p = keel_sd_mul(p, d[i]);
  return p;
}

/* ========================================================= elementwise */

static void r_same(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  for (int32_t k = 0; k < c->n->n_out; k++) same_as(&c->out[k], x, false);
}

/* Identity, Cast: the element values go through. */
static void r_copy(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (x) same_as(&c->out[0], x, true);
}

static bool bcast(keel_sshape *o, const keel_sshape *a, const keel_sshape *b) {
  int32_t r = a->rank > b->rank ? a->rank : b->rank;
  keel_ss_rank(o, r);
  for (int32_t i = 0; i < r; i++) {
    int32_t ia = i - (r - a->rank), ib = i - (r - b->rank);
    keel_sdim da = ia >= 0 ? a->d[ia] : keel_sd_known(1), db = ib >= 0 ? b->d[ib] : keel_sd_known(1);
    o->d[i] = keel_sd_bcast(da, db);
  }
  return true;
}

static keel_sdim equal_value(keel_sdim a, keel_sdim b);

static keel_sdim arith(const char *op, keel_sdim a, keel_sdim b) {
  if (!strcmp(op, "Equal")) return equal_value(a, b);
  if (!strcmp(op, "Add")) return keel_sd_add(a, b);
  if (!strcmp(op, "Sub")) return keel_sd_sub(a, b);
  if (!strcmp(op, "Mul")) return keel_sd_mul(a, b);
  if (!strcmp(op, "Div") && keel_sd_isk(b) && b.add > 0 && keel_sd_isk(a) && a.add < 0)
    return keel_sd_known(a.add / b.add); /* integer Div truncates toward 0 */
  if (!strcmp(op, "Div")) return keel_sd_div(a, b);
  if ((!strcmp(op, "Max") || !strcmp(op, "Min")) && keel_sd_isk(a) && keel_sd_isk(b))
    return keel_sd_known(!strcmp(op, "Max") == (a.add > b.add) ? a.add : b.add);
  return keel_sd_unknown();
}

/* Equal of two element values: 1 or 0 where it can be told (a symbolic
 * dim with a non-negative offset is never negative), else unknown. */
static keel_sdim equal_value(keel_sdim a, keel_sdim b) {
  if (keel_sd_unk(a) || keel_sd_unk(b)) return keel_sd_unknown();
  if (keel_sd_eq(a, b)) return keel_sd_known(1);
  if (keel_sd_isk(a) && keel_sd_isk(b)) return keel_sd_known(0);
  keel_sdim s = keel_sd_isk(a) ? b : a, k = keel_sd_isk(a) ? a : b;
  if (keel_sd_isk(k) && k.add < 0 && s.add >= 0) return keel_sd_known(0);
  return keel_sd_unknown();
}

/* Where's element values: where the condition's are known, the chosen
 * operand's (the exporters' Where(s == -1, 1, s) on Expand shapes). */
static void where_values(keel_shape_ctx *c, keel_sshape *o) {
  const keel_sshape *w = in_at(c, 0), *x = in_at(c, 1), *y = in_at(c, 2);
  o->nv = -1;
  if (!w || !x || !y || w->nv < 0 || x->nv < 0 || y->nv < 0 || o->rank > 1) return;
  int32_t n = w->nv > x->nv ? w->nv : x->nv;
  n = n > y->nv ? n : y->nv;
  if ((w->nv != n && w->nv != 1) || (x->nv != n && x->nv != 1) || (y->nv != n && y->nv != 1)) return;
  for (int32_t k = 0; k < n; k++) {
    keel_sdim cond = w->v[w->nv == 1 ? 0 : k];
    o->v[k] = !keel_sd_isk(cond) ? keel_sd_unknown() : cond.add ? x->v[x->nv == 1 ? 0 : k] : y->v[y->nv == 1 ? 0 : k];
  }
  o->nv = n;
}

static void r_bcast(keel_shape_ctx *c) {
  int32_t first = 0;
  const keel_sshape *acc = NULL;
  keel_sshape tmp;
  for (int32_t i = first; i < c->n->n_in; i++) {
    const keel_sshape *x = in_at(c, i);
    if (!x) return;
    if (!acc) {
      tmp = *x;
      acc = &tmp;
      continue;
    }
    keel_sshape o;
    bcast(&o, acc, x);
    /* the element values of small integer tensors (shape arithmetic) */
    o.nv = -1;
    const char *op = c->n->op_type;
    bool ar = !strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") ||
              !strcmp(op, "Max") || !strcmp(op, "Min") || !strcmp(op, "Equal");
    if (ar && acc->nv >= 0 && x->nv >= 0 && o.rank <= 1 && (acc->nv == x->nv || acc->nv == 1 || x->nv == 1)) {
      int32_t n = acc->nv > x->nv ? acc->nv : x->nv;
      o.nv = n;
      for (int32_t k = 0; k < n; k++)
        o.v[k] = arith(op, acc->v[acc->nv == 1 ? 0 : k], x->v[x->nv == 1 ? 0 : k]);
    }
    tmp = o;
  }
  if (acc && !strcmp(c->n->op_type, "Where")) where_values(c, &tmp);
  if (acc) c->out[0] = tmp;
}

/* ==================================================== matrix products */

static void matmul_dims(keel_shape_ctx *c, const keel_sshape *a, const keel_sshape *b, bool ta, bool tb) {
  if (a->rank == 0 || b->rank == 0) return;
  keel_sshape A = *a, B = *b;
  bool a1 = A.rank == 1, b1 = B.rank == 1;
  if (a1) A.rank = 2, A.d[1] = A.d[0], A.d[0] = keel_sd_known(1);
  if (b1) B.rank = 2, B.d[1] = keel_sd_known(1);
  if (ta) {
    keel_sdim t = A.d[A.rank - 1];
    A.d[A.rank - 1] = A.d[A.rank - 2], A.d[A.rank - 2] = t;
  }
  if (tb) {
    keel_sdim t = B.d[B.rank - 1];
    B.d[B.rank - 1] = B.d[B.rank - 2], B.d[B.rank - 2] = t;
  }
  keel_sshape ba = A, bb = B, o;
  ba.rank -= 2, bb.rank -= 2;
  bcast(&o, &ba, &bb);
  int32_t r = o.rank;
  if (!a1) o.d[r++] = A.d[A.rank - 2];
  if (!b1) o.d[r++] = B.d[B.rank - 1];
  o.rank = r;
  c->out[0] = o;
}

static void r_matmul(keel_shape_ctx *c) {
  bool q = !strcmp(c->n->op_type, "QLinearMatMul");
  const keel_sshape *a = in_at(c, 0), *b = in_at(c, q ? 3 : 1);
  if (!a || !b) return;
  if (!strcmp(c->n->op_type, "FusedMatMul") && attr_i(c, "transBatchA", 0) + attr_i(c, "transBatchB", 0))
    return;
  matmul_dims(c, a, b, attr_i(c, "transA", 0) != 0, attr_i(c, "transB", 0) != 0);
}

static void r_gemm(keel_shape_ctx *c) {
  const keel_sshape *a = in_at(c, 0), *b = in_at(c, 1);
  if (!a || !b || a->rank != 2 || b->rank != 2) return;
  keel_ss_rank(&c->out[0], 2);
  c->out[0].d[0] = a->d[attr_i(c, "transA", 0) ? 1 : 0];
  c->out[0].d[1] = b->d[attr_i(c, "transB", 0) ? 0 : 1];
}

/* ============================================== convolutions and pools */

/* One spatial output dim of a window op. */
static keel_sdim window_dim(keel_sdim D, int64_t k, int64_t s, int64_t dil, int64_t pb, int64_t pe,
                            const char *autopad, bool ceil_mode) {
  int64_t ext = (k - 1) * dil + 1;
  if (!strcmp(autopad, "SAME_UPPER") || !strcmp(autopad, "SAME_LOWER")) {
    if (s == 1) return D;
    if (!keel_sd_isk(D)) return keel_sd_unknown();
    return keel_sd_known((D.add + s - 1) / s);
  }
  if (!strcmp(autopad, "VALID")) pb = pe = 0;
  keel_sdim span = keel_sd_add(D, keel_sd_known(pb + pe - ext));
  if (s == 1) return keel_sd_add(span, keel_sd_known(1));
  if (!keel_sd_isk(span)) return keel_sd_unknown();
  int64_t x = span.add;
  if (x < 0) return keel_sd_unknown();
  int64_t o = (ceil_mode ? (x + s - 1) / s : x / s) + 1;
  if (ceil_mode && (o - 1) * s >= D.add + pb) o--; /* the last window starts inside */
  return keel_sd_known(o);
}

static const char *autopad_of(const keel_shape_ctx *c) {
  const keel_attr *a = keel_node_attr(c->n, "auto_pad");
  return a && a->type == KEEL_ATTR_STRING ? a->s : "NOTSET";
}

/* Conv-like and pool ops: x [N, C, spatial...]; kernel dims from the
 * attribute or the weight w; out channels `ch`. */
static void window_op(keel_shape_ctx *c, const keel_sshape *x, const keel_sshape *w, keel_sdim ch) {
  int32_t sp = x->rank - 2;
  if (sp < 0) return;
  const int64_t *ks, *st, *dl, *pd;
  int32_t nk = attr_ints(c, "kernel_shape", &ks);
  int64_t kern[KEEL_MAX_RANK];
  if (nk == sp) memcpy(kern, ks, sizeof(int64_t) * (size_t)sp);
  else if (w && w->rank == x->rank) {
    for (int32_t i = 0; i < sp; i++) {
      if (!keel_sd_isk(w->d[2 + i])) return;
      kern[i] = w->d[2 + i].add;
    }
  } else return;
  int32_t ns = attr_ints(c, "strides", &st), nd = attr_ints(c, "dilations", &dl),
          np = attr_ints(c, "pads", &pd);
  if ((ns >= 0 && ns != sp) || (nd >= 0 && nd != sp) || (np >= 0 && np != 2 * sp)) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, x->rank);
  o->d[0] = x->d[0];
  o->d[1] = ch;
  bool ceil_mode = attr_i(c, "ceil_mode", 0) != 0;
  for (int32_t i = 0; i < sp; i++)
    o->d[2 + i] = window_dim(x->d[2 + i], kern[i], ns > 0 ? st[i] : 1, nd > 0 ? dl[i] : 1,
                             np > 0 ? pd[i] : 0, np > 0 ? pd[sp + i] : 0, autopad_of(c), ceil_mode);
  for (int32_t k = 1; k < c->n->n_out; k++) c->out[k] = *o; /* MaxPool's indices */
}

static void r_conv(keel_shape_ctx *c) {
  bool q = !strcmp(c->n->op_type, "QLinearConv");
  const keel_sshape *x = in_at(c, 0), *w = in_at(c, q ? 3 : 1);
  if (!x || !w || w->rank < 1) return;
  window_op(c, x, w, w->d[0]);
}

static void r_pool(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (x && x->rank >= 2) window_op(c, x, NULL, x->d[1]);
}

static void r_global_pool(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x || x->rank < 2) return;
  same_as(&c->out[0], x, false);
  for (int32_t i = 2; i < x->rank; i++) c->out[0].d[i] = keel_sd_known(1);
}

static void r_convtranspose(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *w = in_at(c, 1);
  if (!x || !w || w->rank != x->rank || x->rank < 3) return;
  int32_t sp = x->rank - 2;
  const int64_t *st, *dl, *pd, *op, *os;
  int32_t ns = attr_ints(c, "strides", &st), nd = attr_ints(c, "dilations", &dl),
          np = attr_ints(c, "pads", &pd), no = attr_ints(c, "output_padding", &op),
          nos = attr_ints(c, "output_shape", &os);
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, x->rank);
  o->d[0] = x->d[0];
  o->d[1] = keel_sd_mul(w->d[1], keel_sd_known(attr_i(c, "group", 1)));
  const char *ap = autopad_of(c);
  for (int32_t i = 0; i < sp; i++) {
    if (nos >= sp) {
      o->d[2 + i] = keel_sd_known(os[nos - sp + i]);
      continue;
    }
    int64_t s = ns == sp ? st[i] : 1, dil = nd == sp ? dl[i] : 1;
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
      o->d[2 + i] = keel_sd_mul(x->d[2 + i], keel_sd_known(s));
      continue;
    }
    if (!keel_sd_isk(w->d[2 + i])) continue;
    int64_t k = w->d[2 + i].add, pads = np == 2 * sp ? pd[i] + pd[sp + i] : 0;
    if (!strcmp(ap, "VALID")) pads = 0;
    int64_t extra = (no == sp ? op[i] : 0) + (k - 1) * dil + 1 - pads - s;
    o->d[2 + i] = keel_sd_add(keel_sd_mul(x->d[2 + i], keel_sd_known(s)), keel_sd_known(extra));
  }
}

/* keel's channels-last ops (ops/nn/conv/conv_nhwc.h, pool_nhwc.c): the
 * NCHW rule on the permuted input, the result permuted back. */
static void nhwc_to_nchw(keel_sshape *v) {
  keel_sdim c = v->d[v->rank - 1];
  for (int32_t i = v->rank - 1; i > 1; i--) v->d[i] = v->d[i - 1];
  v->d[1] = c;
}

static void nchw_to_nhwc(keel_sshape *v) {
  keel_sdim c = v->d[1];
  for (int32_t i = 1; i < v->rank - 1; i++) v->d[i] = v->d[i + 1];
  v->d[v->rank - 1] = c;
}

static void r_nhwc_conv(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *w = in_at(c, 1);
  if (!x || !w || w->rank < 1 || x->rank < 3) return;
  keel_sshape xn = *x;
  if (!keel_node_attr(c->n, "keel.in_nchw")) nhwc_to_nchw(&xn);
  window_op(c, &xn, w, w->d[0]);
  keel_sshape *o = &c->out[0];
  if (o->rank < 0 || keel_node_attr(c->n, "keel.out_nchw")) return;
  nchw_to_nhwc(o);
  const keel_sshape *z = in_at(c, 3);
  if (has_in(c, 3)) {
    keel_sshape y = *o;
    if (z) bcast(o, &y, z);
    else keel_ss_rank(o, y.rank);
  }
}

static void r_nhwc_pool(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x || x->rank < 3) return;
  keel_sshape xn = *x;
  nhwc_to_nchw(&xn);
  bool global = strstr(c->n->op_type, "Global") != NULL;
  if (global) {
    same_as(&c->out[0], &xn, false);
    for (int32_t i = 2; i < xn.rank; i++) c->out[0].d[i] = keel_sd_known(1);
  } else window_op(c, &xn, NULL, xn.d[1]);
  for (int32_t k = 0; k < c->n->n_out; k++)
    if (c->out[k].rank >= 0) nchw_to_nhwc(&c->out[k]);
}

/* s, of rank 3, with a leading 1. */
static keel_sshape lift4(const keel_sshape *s) {
  keel_sshape o = *s;
  o.rank = 4, o.nv = -1;
  o.d[0] = keel_sd_known(1);
  for (int32_t i = 0; i < 3; i++) o.d[i + 1] = s->d[i];
  return o;
}

/* FusedAttention (ops/nn/attention/attention_fused.c): Q, Kt, V (each
 * [B, H, S, D], or [B, S, H, D] where its layout bit says; or all three
 * of rank 3, B = 1 left out, and so Y; or, with attribute packed, column
 * ranges of one [B, S, W]), a mask. */
static void r_fused_attention(keel_shape_ctx *c) {
  const keel_sshape *q = in_at(c, 0), *k = in_at(c, 1), *v = in_at(c, 2), *mk = in_at(c, 3);
  int64_t lay = attr_i(c, "layout", 0);
  const int64_t *pk;
  keel_sshape l4[3] = {{0}};
  if (attr_ints(c, "packed", &pk) == 11) { /* q = k = v = X [B, S, W]: as [b, s, h, d] each */
    if (!q || q->rank != 3) return;
    for (int i = 0; i < 3; i++) {
      keel_ss_rank(&l4[i], 4);
      l4[i].d[0] = pk[9] < 0 ? q->d[0] : keel_sd_known(pk[9]);
      l4[i].d[1] = pk[10] < 0 ? q->d[1] : keel_sd_known(pk[10]);
      l4[i].d[2] = keel_sd_known(pk[3 * i + 1]), l4[i].d[3] = keel_sd_known(pk[3 * i + 2]);
    }
    q = &l4[0], k = &l4[1], v = &l4[2];
    lay |= 7; /* each [B, S, H, D], K as rows */
    if (attr_i(c, "y_rank", 4) == 3 && pk[9] == 1) { /* one batch, Y of rank 3 */
      keel_sshape *o = &c->out[0];
      keel_ss_rank(o, 3);
      o->d[0] = (lay & 8) ? l4[0].d[1] : l4[0].d[2];
      o->d[1] = (lay & 8) ? l4[0].d[2] : l4[0].d[1];
      o->d[2] = l4[2].d[3];
      return;
    }
  }
  bool r3 = q && k && v && q->rank == 3 && k->rank == 3 && v->rank == 3;
  if (r3) l4[0] = lift4(q), l4[1] = lift4(k), l4[2] = lift4(v), q = &l4[0], k = &l4[1], v = &l4[2];
  if (!q || !k || !v || q->rank != 4 || k->rank != 4 || v->rank != 4) return;
  keel_sdim B = keel_sd_bcast(keel_sd_bcast(q->d[0], k->d[0]), v->d[0]);
  keel_sdim H = keel_sd_bcast(keel_sd_bcast(q->d[(lay & 1) ? 2 : 1], k->d[(lay & 2) ? 2 : 1]),
                              v->d[(lay & 4) ? 2 : 1]);
  if (has_in(c, 3)) {
    if (!mk) return;
    if (mk->rank >= 4) B = keel_sd_bcast(B, mk->d[mk->rank - 4]);
    if (mk->rank >= 3) H = keel_sd_bcast(H, mk->d[mk->rank - 3]);
  }
  keel_sdim Sq = q->d[(lay & 1) ? 1 : 2], Dv = v->d[3];
  keel_sshape *o = &c->out[0];
  if (r3 && !(B.sym == KEEL_SYM_KNOWN && B.add == 1)) return; /* a mask made B > 1: an error at run time */
  int32_t b = r3 ? 1 : 0;
  keel_ss_rank(o, 4 - b);
  if (!r3) o->d[0] = B;
  o->d[1 - b] = (lay & 8) ? Sq : H;
  o->d[2 - b] = (lay & 8) ? H : Sq;
  o->d[3 - b] = Dv;
}

/* LSTM, GRU, RNN: X [S, B, I] (layout 1: [B, S, I]). */
static void r_rnn(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  int64_t h = attr_i(c, "hidden_size", -1);
  if (!x || x->rank != 3 || h < 0) return;
  const keel_attr *dir = keel_node_attr(c->n, "direction");
  keel_sdim D = keel_sd_known(dir && dir->type == KEEL_ATTR_STRING && !strcmp(dir->s, "bidirectional") ? 2 : 1);
  bool bl = attr_i(c, "layout", 0) != 0;
  keel_sdim S = x->d[bl ? 1 : 0], B = x->d[bl ? 0 : 1], H = keel_sd_known(h);
  keel_sshape *y = &c->out[0];
  keel_ss_rank(y, 4);
  if (bl) y->d[0] = B, y->d[1] = S, y->d[2] = D, y->d[3] = H;
  else y->d[0] = S, y->d[1] = D, y->d[2] = B, y->d[3] = H;
  for (int32_t k = 1; k < c->n->n_out && k < 3; k++) {
    keel_sshape *o = &c->out[k];
    keel_ss_rank(o, 3);
    if (bl) o->d[0] = B, o->d[1] = D, o->d[2] = H;
    else o->d[0] = D, o->d[1] = B, o->d[2] = H;
  }
}

/* ========================================================= reductions */

static void reduce_axes(keel_shape_ctx *c, const keel_sshape *x, const int64_t *ax, int32_t na, bool keep) {
  bool red[KEEL_MAX_RANK] = {0};
  for (int32_t i = 0; i < na; i++) {
    int64_t a = ax[i];
    if (!norm_axis(&a, x->rank)) return;
    red[a] = true;
  }
  if (na == 0)
    for (int32_t i = 0; i < x->rank; i++) red[i] = true;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, 0);
  for (int32_t i = 0; i < x->rank; i++)
    if (!red[i]) o->d[o->rank++] = x->d[i];
    else if (keep) o->d[o->rank++] = keel_sd_known(1);
}

static void r_reduce(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t ax[KEEL_SHAPE_MAXV];
  bool from_input = c->opset >= 18 || (!strcmp(c->n->op_type, "ReduceSum") && c->opset >= 13);
  int32_t na = get_axes(c, "axes", from_input ? 1 : -1, ax);
  if (na < 0) {
    if (!attr_i(c, "keepdims", 1)) return;
    keel_ss_rank(&c->out[0], x->rank); /* which axes: unknown; the rank stays */
    return;
  }
  if (na == 0 && attr_i(c, "noop_with_empty_axes", 0)) {
    same_as(&c->out[0], x, false);
    return;
  }
  reduce_axes(c, x, ax, na, attr_i(c, "keepdims", 1) != 0);
}

static void r_argmax(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t a = attr_i(c, "axis", 0);
  reduce_axes(c, x, &a, 1, attr_i(c, "keepdims", 1) != 0);
}

/* ========================================================= shape ops */

static void r_shape(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t s = attr_i(c, "start", 0), e = attr_i(c, "end", x->rank);
  if (s < 0) s += x->rank;
  if (e < 0) e += x->rank;
  s = s < 0 ? 0 : s > x->rank ? x->rank : s;
  e = e < 0 ? 0 : e > x->rank ? x->rank : e;
  int32_t n = e > s ? (int32_t)(e - s) : 0;
  keel_ss_rank(&c->out[0], 1);
  c->out[0].d[0] = keel_sd_known(n);
  c->out[0].nv = n;
  for (int32_t i = 0; i < n; i++) c->out[0].v[i] = x->d[s + i];
}

static void r_size(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  keel_ss_rank(&c->out[0], 0);
  if (!x) return;
  c->out[0].nv = 1;
  c->out[0].v[0] = prod(x->d, x->rank);
}

/* A shape given as element values (ConstantOfShape, Expand, Reshape's
 * target): into o, rank = count; false when not even the count is known. */
static bool shape_from(const keel_shape_ctx *c, int32_t i, keel_sshape *o) {
  const keel_sshape *s = in_at(c, i);
  if (!s || s->rank != 1) return false;
  if (s->nv >= 0) {
    keel_ss_rank(o, s->nv);
    for (int32_t k = 0; k < s->nv; k++) o->d[k] = s->v[k];
    return true;
  }
  if (!keel_sd_isk(s->d[0]) || s->d[0].add > KEEL_MAX_RANK) return false;
  keel_ss_rank(o, (int32_t)s->d[0].add);
  return true;
}

/* ConstantOfShape: the shape; and, for a small integer result (the
 * exporters' ones and minus ones beside shapes), its element values. */
static void r_constant_of_shape(keel_shape_ctx *c) {
  keel_sshape *o = &c->out[0];
  if (!shape_from(c, 0, o)) return;
  o->nv = -1;
  const keel_attr *a = keel_node_attr(c->n, "value");
  int64_t v = 0, n = 1;
  for (int32_t i = 0; i < o->rank; i++) {
    if (!keel_sd_isk(o->d[i])) return;
    n *= o->d[i].add;
  }
  if (a && a->type == KEEL_ATTR_TENSOR && a->t && keel_tensor_numel(a->t) == 1) {
    if (a->t->dtype == KEEL_INT64) v = *(const int64_t *)a->t->data;
    else if (a->t->dtype == KEEL_INT32) v = *(const int32_t *)a->t->data;
    else return;
  } else if (a) {
    return;
  }
  if (o->rank > 1 || n > KEEL_SHAPE_MAXV) return;
  o->nv = (int32_t)n;
  for (int64_t k = 0; k < n; k++) o->v[k] = keel_sd_known(v);
}

static void r_expand(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  keel_sshape s;
  if (!x || !shape_from(c, 1, &s)) return;
  bcast(&c->out[0], x, &s);
}

/* Cancels equal dims of num against den; true when what is left of den
 * is all known integers (their product in *k) and of num one symbolic
 * factor at most (the product in *rest). */
static bool quotient(const keel_sdim *num, int32_t nn, const keel_sdim *den, int32_t nd, keel_sdim *out) {
  bool used[KEEL_MAX_RANK] = {0};
  keel_sdim rest = keel_sd_known(1);
  int64_t k = 1;
  for (int32_t j = 0; j < nd; j++) {
    int32_t hit = -1;
    for (int32_t i = 0; i < nn && hit < 0; i++)
      if (!used[i] && !keel_sd_isk(den[j]) && keel_sd_eq(num[i], den[j])) hit = i;
    if (hit >= 0) {
      used[hit] = true;
      continue;
    }
    if (!keel_sd_isk(den[j]) || den[j].add <= 0) return false;
    k *= den[j].add;
  }
  for (int32_t i = 0; i < nn; i++)
    if (!used[i]) rest = keel_sd_mul(rest, num[i]);
  if (keel_sd_unk(rest)) return false;
  *out = keel_sd_div(rest, keel_sd_known(k));
  return !keel_sd_unk(*out);
}

static void r_reshape(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  keel_sshape o;
  if (!shape_from(c, 1, &o)) return;
  const keel_sshape *s = in_at(c, 1);
  bool allowzero = attr_i(c, "allowzero", 0) != 0;
  int32_t minus = -1;
  if (s->nv >= 0)
    for (int32_t i = 0; i < o.rank; i++) {
      if (keel_sd_is(o.d[i], 0) && !allowzero) o.d[i] = x && i < x->rank ? x->d[i] : keel_sd_unknown();
      else if (keel_sd_is(o.d[i], -1)) minus = i, o.d[i] = keel_sd_unknown();
      else if (keel_sd_isk(o.d[i]) && o.d[i].add < 0) return;
    }
  if (minus >= 0 && x) {
    keel_sdim others[KEEL_MAX_RANK];
    int32_t n = 0;
    for (int32_t i = 0; i < o.rank; i++)
      if (i != minus) others[n++] = o.d[i];
    keel_sdim q;
    if (quotient(x->d, x->rank, others, n, &q)) o.d[minus] = q;
  }
  if (x && x->nv >= 0) {
    o.nv = x->nv;
    memcpy(o.v, x->v, sizeof(keel_sdim) * (size_t)x->nv);
  }
  c->out[0] = o;
}

static void r_flatten(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t a = attr_i(c, "axis", 1);
  if (a < 0) a += x->rank;
  if (a < 0 || a > x->rank) return;
  keel_ss_rank(&c->out[0], 2);
  c->out[0].d[0] = prod(x->d, (int32_t)a);
  c->out[0].d[1] = prod(x->d + a, x->rank - (int32_t)a);
}

static void r_squeeze(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t ax[KEEL_SHAPE_MAXV];
  int32_t na = get_axes(c, "axes", c->opset >= 13 ? 1 : -1, ax);
  if (na < 0) return;
  bool drop[KEEL_MAX_RANK] = {0};
  for (int32_t i = 0; i < na; i++) {
    if (!norm_axis(&ax[i], x->rank)) return;
    drop[ax[i]] = true;
  }
  if (na == 0)
    for (int32_t i = 0; i < x->rank; i++) {
      if (!keel_sd_isk(x->d[i])) return; /* a symbol may be 1 */
      drop[i] = x->d[i].add == 1;
    }
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, 0);
  for (int32_t i = 0; i < x->rank; i++)
    if (!drop[i]) o->d[o->rank++] = x->d[i];
  o->nv = x->nv;
  memcpy(o->v, x->v, sizeof(keel_sdim) * (size_t)(x->nv > 0 ? x->nv : 0));
}

static void r_unsqueeze(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t ax[KEEL_SHAPE_MAXV];
  int32_t na = get_axes(c, "axes", c->opset >= 13 ? 1 : -1, ax);
  int32_t r = x->rank + na;
  if (na <= 0 || r > KEEL_MAX_RANK) return;
  bool one[KEEL_MAX_RANK] = {0};
  for (int32_t i = 0; i < na; i++) {
    if (!norm_axis(&ax[i], r) || one[ax[i]]) return;
    one[ax[i]] = true;
  }
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, r);
  for (int32_t i = 0, k = 0; i < r; i++) o->d[i] = one[i] ? keel_sd_known(1) : x->d[k++];
  o->nv = x->nv;
  memcpy(o->v, x->v, sizeof(keel_sdim) * (size_t)(x->nv > 0 ? x->nv : 0));
}

static void r_transpose(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  const int64_t *p;
  int32_t np = attr_ints(c, "perm", &p);
  if (np >= 0 && np != x->rank) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, x->rank);
  for (int32_t i = 0; i < x->rank; i++) {
    int64_t a = np >= 0 ? p[i] : x->rank - 1 - i;
    if (a < 0 || a >= x->rank) return keel_ss_unknown(o);
    o->d[i] = x->d[a];
  }
}

static void r_concat(keel_shape_ctx *c) {
  const keel_sshape *x0 = in_at(c, 0);
  if (!x0) return;
  int64_t a = attr_i(c, "axis", 0);
  if (!norm_axis(&a, x0->rank)) return;
  keel_sshape o = *x0;
  bool vals = x0->nv >= 0 && x0->rank == 1;
  for (int32_t i = 1; i < c->n->n_in; i++) {
    const keel_sshape *x = in_at(c, i);
    if (!x || x->rank != o.rank) return;
    for (int32_t k = 0; k < o.rank; k++)
      o.d[k] = k == a ? keel_sd_add(o.d[k], x->d[k])
                      : keel_sd_eq(o.d[k], x->d[k]) || keel_sd_unk(x->d[k]) ? o.d[k]
                      : keel_sd_isk(x->d[k]) || keel_sd_unk(o.d[k]) ? x->d[k] : o.d[k];
    if (vals && x->nv >= 0 && o.nv + x->nv <= KEEL_SHAPE_MAXV) {
      memcpy(o.v + o.nv, x->v, sizeof(keel_sdim) * (size_t)x->nv);
      o.nv += x->nv;
    } else vals = false, o.nv = -1;
  }
  if (!vals) o.nv = -1;
  c->out[0] = o;
}

static void r_split(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t a = attr_i(c, "axis", 0);
  if (!norm_axis(&a, x->rank)) return;
  int64_t sz[KEEL_SHAPE_MAXV];
  int32_t n = get_axes(c, "split", c->opset >= 13 ? 1 : -1, sz);
  int32_t no = c->n->n_out;
  if (n > 0 && n != no) return;
  for (int32_t k = 0; k < no; k++) {
    keel_sshape *o = &c->out[k];
    same_as(o, x, false);
    if (n < 0) o->d[a] = keel_sd_unknown(); /* sizes computed at run time */
    else if (n > 0) o->d[a] = keel_sd_known(sz[k]);
    else if (keel_sd_isk(x->d[a]) && no > 0) { /* equal parts; opset 18: the last may be smaller */
      int64_t D = x->d[a].add, part = (D + no - 1) / no;
      o->d[a] = keel_sd_known(k < no - 1 ? part : D - part * (no - 1));
    } else o->d[a] = keel_sd_div(x->d[a], keel_sd_known(no));
  }
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* One sliced dim; known D: ONNX's clamping; symbolic D: only the forms
 * whose answer does not depend on D's value beyond D >= the bounds. */
static keel_sdim slice_dim(keel_sdim D, int64_t s, int64_t e, int64_t step) {
  if (step == 0) return keel_sd_unknown();
  if (keel_sd_isk(D)) {
    int64_t d = D.add;
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (step > 0) {
      s = clamp64(s, 0, d), e = clamp64(e, 0, d);
      return keel_sd_known(e > s ? (e - s + step - 1) / step : 0);
    }
    s = clamp64(s, -1, d - 1), e = clamp64(e, -1, d - 1);
    return keel_sd_known(s > e ? (s - e + (-step) - 1) / (-step) : 0);
  }
  if (keel_sd_unk(D) || step != 1) return keel_sd_unknown();
  if (s >= 0 && e >= BIG_END) return keel_sd_sub(D, keel_sd_known(s));
  if (s == 0 && e < 0) return keel_sd_add(D, keel_sd_known(e));
  if (s < 0 && e < 0 && e >= s) return keel_sd_known(e - s);
  return keel_sd_unknown();
}

/* Input i's element values (integers or symbols): the count, else -1. */
static int32_t in_dims(const keel_shape_ctx *c, int32_t i, keel_sdim *out, int32_t cap) {
  const keel_sshape *v = in_at(c, i);
  if (!v || v->nv < 0 || v->nv > cap) return -1;
  memcpy(out, v->v, sizeof(keel_sdim) * (size_t)v->nv);
  return v->nv;
}

/* The length of an input that is a 1-D list (its values or its shape). */
static int32_t in_len(const keel_shape_ctx *c, int32_t i) {
  const keel_sshape *v = in_at(c, i);
  if (!v || v->rank != 1) return -1;
  if (v->nv >= 0) return v->nv;
  return keel_sd_isk(v->d[0]) && v->d[0].add <= KEEL_SHAPE_MAXV ? (int32_t)v->d[0].add : -1;
}

static void r_slice(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  keel_sdim st[KEEL_SHAPE_MAXV], en[KEEL_SHAPE_MAXV];
  int64_t ax[KEEL_SHAPE_MAXV], sp[KEEL_SHAPE_MAXV];
  int32_t ns, ne, na, nsp, n;
  if (c->opset < 10) {
    const int64_t *p, *q;
    ns = attr_ints(c, "starts", &p);
    ne = attr_ints(c, "ends", &q);
    if (ns > KEEL_SHAPE_MAXV || ne > KEEL_SHAPE_MAXV) return;
    for (int32_t i = 0; i < ns; i++) st[i] = keel_sd_known(p[i]);
    for (int32_t i = 0; i < ne; i++) en[i] = keel_sd_known(q[i]);
    na = get_axes(c, "axes", -1, ax);
    nsp = 0;
    n = ns;
  } else {
    ns = in_dims(c, 1, st, KEEL_SHAPE_MAXV);
    ne = in_dims(c, 2, en, KEEL_SHAPE_MAXV);
    na = has_in(c, 3) ? in_ints(c, 3, ax, KEEL_SHAPE_MAXV) : 0;
    nsp = has_in(c, 4) ? in_ints(c, 4, sp, KEEL_SHAPE_MAXV) : 0;
    n = in_len(c, 1);
  }
  keel_sshape o = *x;
  o.nv = -1;
  if (n < 0 || na < 0 || nsp < 0 || (na && na != n) || (nsp && nsp != n)) {
    keel_ss_rank(&c->out[0], x->rank); /* which dims change is not known: only the rank */
    return;
  }
  bool vals = ns == n && ne == n;      /* else: the sliced axes only are unknown */
  bool done[KEEL_MAX_RANK] = {0};
  for (int32_t i = 0; i < n; i++) {
    int64_t a = na ? ax[i] : i;
    if (!norm_axis(&a, x->rank) || done[a]) return;
    done[a] = true;
    int64_t step = nsp ? sp[i] : 1;
    if (!vals) {
      o.d[a] = keel_sd_unknown();
      continue;
    }
    keel_sdim S = st[i], E = en[i];
    if (keel_sd_isk(E) && E.add > BIG_END) E.add = BIG_END;
    if (keel_sd_isk(S) && keel_sd_isk(E)) o.d[a] = slice_dim(x->d[a], S.add, E.add, step);
    else if (keel_sd_is(S, 0) && step == 1 && keel_sd_eq(E, x->d[a])) o.d[a] = x->d[a];
    else o.d[a] = keel_sd_unknown(); /* a bound known only at run time: a clamp may apply */
    if (x->rank == 1 && x->nv >= 0 && keel_sd_isk(o.d[a]) && keel_sd_isk(S) && step > 0) {
      int64_t s0 = S.add < 0 ? S.add + x->nv : S.add; /* the element values */
      s0 = clamp64(s0, 0, x->nv);
      o.nv = (int32_t)o.d[a].add;
      for (int32_t k = 0; k < o.nv; k++) o.v[k] = x->v[s0 + k * step];
    }
  }
  c->out[0] = o;
}

static void r_gather(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *ix = in_at(c, 1);
  if (!x || !ix) return;
  int64_t a = attr_i(c, "axis", 0);
  if (!norm_axis(&a, x->rank) || x->rank - 1 + ix->rank > KEEL_MAX_RANK) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, 0);
  for (int32_t i = 0; i < a; i++) o->d[o->rank++] = x->d[i];
  for (int32_t i = 0; i < ix->rank; i++) o->d[o->rank++] = ix->d[i];
  for (int32_t i = (int32_t)a + 1; i < x->rank; i++) o->d[o->rank++] = x->d[i];
  int64_t idx[KEEL_SHAPE_MAXV];
  int32_t ni = in_ints(c, 1, idx, KEEL_SHAPE_MAXV);
  if (x->rank == 1 && x->nv >= 0 && ni >= 0) {
    for (int32_t k = 0; k < ni; k++) {
      int64_t j = idx[k] < 0 ? idx[k] + x->nv : idx[k];
      if (j < 0 || j >= x->nv) return;
      o->v[k] = x->v[j];
    }
    o->nv = ni;
  }
}

static void r_gather_elements(keel_shape_ctx *c) {
  const keel_sshape *ix = in_at(c, 1);
  if (ix) same_as(&c->out[0], ix, false);
}

static void r_gather_nd(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *ix = in_at(c, 1);
  if (!x || !ix || ix->rank < 1 || !keel_sd_isk(ix->d[ix->rank - 1])) return;
  int64_t b = attr_i(c, "batch_dims", 0), last = ix->d[ix->rank - 1].add;
  if (b + last > x->rank || ix->rank - 1 + x->rank - (b + last) > KEEL_MAX_RANK) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, 0);
  for (int32_t i = 0; i < ix->rank - 1; i++) o->d[o->rank++] = ix->d[i];
  for (int64_t i = b + last; i < x->rank; i++) o->d[o->rank++] = x->d[i];
}

static void r_tile(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *rp = in_at(c, 1);
  if (!x || !rp) return;
  keel_ss_rank(&c->out[0], x->rank);
  if (rp->nv != x->rank) return;
  for (int32_t i = 0; i < x->rank; i++) c->out[0].d[i] = keel_sd_mul(x->d[i], rp->v[i]);
}

static void r_pad(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t p[KEEL_SHAPE_MAXV], ax[KEEL_SHAPE_MAXV];
  int32_t np;
  if (c->opset < 11) {
    const int64_t *a;
    np = attr_ints(c, "pads", &a);
    if (np < 0) np = attr_ints(c, "paddings", &a);
    if (np > KEEL_SHAPE_MAXV) return;
    if (np > 0) memcpy(p, a, sizeof(int64_t) * (size_t)np);
  } else np = in_ints(c, 1, p, KEEL_SHAPE_MAXV);
  int32_t na = has_in(c, 3) ? in_ints(c, 3, ax, KEEL_SHAPE_MAXV) : 0;
  keel_ss_rank(&c->out[0], x->rank);
  if (np < 0 || na < 0) return;
  int32_t n = na ? na : x->rank;
  if (np != 2 * n) return;
  c->out[0] = *x;
  c->out[0].nv = -1;
  for (int32_t i = 0; i < n; i++) {
    int64_t a = na ? ax[i] : i;
    if (!norm_axis(&a, x->rank)) return keel_ss_rank(&c->out[0], x->rank);
    c->out[0].d[a] = keel_sd_add(x->d[a], keel_sd_known(p[i] + p[n + i]));
  }
}

static void r_range(keel_shape_ctx *c) {
  const keel_sshape *s = in_at(c, 0), *l = in_at(c, 1), *d = in_at(c, 2);
  keel_ss_rank(&c->out[0], 1);
  if (!s || !l || !d || s->nv != 1 || l->nv != 1 || d->nv != 1) return;
  keel_sdim S = s->v[0], L = l->v[0], D = d->v[0];
  if (keel_sd_isk(S) && keel_sd_isk(L) && keel_sd_isk(D) && D.add) {
    int64_t n = (L.add - S.add + D.add + (D.add > 0 ? -1 : 1)) / D.add;
    c->out[0].d[0] = keel_sd_known(n > 0 ? n : 0);
  } else if (keel_sd_is(D, 1)) c->out[0].d[0] = keel_sd_sub(L, S);
}

static void r_onehot(keel_shape_ctx *c) {
  const keel_sshape *ix = in_at(c, 0), *dp = in_at(c, 1);
  if (!ix || ix->rank + 1 > KEEL_MAX_RANK) return;
  int64_t a = attr_i(c, "axis", -1);
  if (!norm_axis(&a, ix->rank + 1)) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, ix->rank + 1);
  for (int32_t i = 0, k = 0; i <= ix->rank; i++)
    o->d[i] = i == a ? (dp && dp->nv == 1 ? dp->v[0] : keel_sd_unknown()) : ix->d[k++];
}

static void r_topk(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  int64_t a = attr_i(c, "axis", -1);
  if (!norm_axis(&a, x->rank)) return;
  keel_sdim k = keel_sd_unknown();
  if (c->opset < 10) k = keel_sd_known(attr_i(c, "k", 0));
  else if (in_at(c, 1) && in_at(c, 1)->nv == 1) k = in_at(c, 1)->v[0];
  for (int32_t j = 0; j < c->n->n_out && j < 2; j++) {
    same_as(&c->out[j], x, false);
    c->out[j].d[a] = k;
  }
}

static void r_depth_space(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  int64_t b = attr_i(c, "blocksize", 0);
  if (!x || x->rank != 4 || b <= 0) return;
  keel_sdim bb = keel_sd_known(b * b), B = keel_sd_known(b);
  bool d2s = !strcmp(c->n->op_type, "DepthToSpace");
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, 4);
  o->d[0] = x->d[0];
  o->d[1] = d2s ? keel_sd_div(x->d[1], bb) : keel_sd_mul(x->d[1], bb);
  for (int32_t i = 2; i < 4; i++) o->d[i] = d2s ? keel_sd_mul(x->d[i], B) : keel_sd_div(x->d[i], B);
}

static void r_resize(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, x->rank);
  bool up = !strcmp(c->n->op_type, "Upsample");
  int32_t si = up ? 1 : c->opset < 11 ? 1 : 2, zi = up || c->opset < 11 ? -1 : 3;
  const keel_attr *pol = keel_node_attr(c->n, "keep_aspect_ratio_policy");
  if (pol && pol->type == KEEL_ATTR_STRING && strcmp(pol->s, "stretch")) return;
  int64_t ax[KEEL_SHAPE_MAXV];
  int32_t na = get_axes(c, "axes", -1, ax);
  if (na < 0) return;
  int32_t n = na ? na : x->rank;
  const keel_sshape *sz = zi >= 0 ? in_at(c, zi) : NULL;
  if (sz && sz->nv == n) {
    *o = *x, o->nv = -1;
    for (int32_t i = 0; i < n; i++) {
      int64_t a = na ? ax[i] : i;
      if (!norm_axis(&a, x->rank)) return keel_ss_rank(o, x->rank);
      o->d[a] = sz->v[i];
    }
    return;
  }
  /* scales: floats (an attribute before opset 9) */
  const keel_tensor *sc = NULL;
  const keel_attr *sa = up ? keel_node_attr(c->n, "scales") : NULL;
  if (!sa || sa->type != KEEL_ATTR_FLOATS) sc = keel_shape_const_in(c, si);
  int32_t ns = sa && sa->type == KEEL_ATTR_FLOATS ? sa->n : sc && sc->dtype == KEEL_FLOAT ? (int32_t)keel_tensor_numel(sc) : -1;
  if (ns != n) return;
  *o = *x, o->nv = -1;
  for (int32_t i = 0; i < n; i++) {
    int64_t a = na ? ax[i] : i;
    if (!norm_axis(&a, x->rank)) return keel_ss_rank(o, x->rank);
    float f = sa && sa->type == KEEL_ATTR_FLOATS ? sa->floats[i] : ((const float *)sc->data)[i];
    if (keel_sd_isk(x->d[a])) o->d[a] = keel_sd_known((int64_t)((double)x->d[a].add * (double)f));
    else if (f == (float)(int64_t)f && f >= 1) o->d[a] = keel_sd_mul(x->d[a], keel_sd_known((int64_t)f));
    else o->d[a] = keel_sd_unknown();
  }
}

static void r_layernorm(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  same_as(&c->out[0], x, false);
  int64_t a = attr_i(c, "axis", -1);
  if (!norm_axis(&a, x->rank)) return;
  for (int32_t k = 1; k < c->n->n_out && k < 3; k++) {
    same_as(&c->out[k], x, false);
    for (int32_t i = (int32_t)a; i < x->rank; i++) c->out[k].d[i] = keel_sd_known(1);
  }
}

static void r_batchnorm(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (x) same_as(&c->out[0], x, false);
  for (int32_t k = 1; k < c->n->n_out && k < 3; k++) /* training: running mean, var */
    if (in_at(c, 2 + k)) same_as(&c->out[k], in_at(c, 2 + k), false);
}

static void r_dynquant(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (x) same_as(&c->out[0], x, false);
  keel_ss_rank(&c->out[1], 0);
  keel_ss_rank(&c->out[2], 0);
}

static void r_loss(keel_shape_ctx *c) {
  const keel_sshape *t = in_at(c, 1);
  const keel_attr *r = keel_node_attr(c->n, "reduction");
  bool none = r && r->type == KEEL_ATTR_STRING && !strcmp(r->s, "none");
  if (none && t) same_as(&c->out[0], t, false);
  else if (!none) keel_ss_rank(&c->out[0], 0);
  if (c->n->n_out > 1 && in_at(c, 0)) same_as(&c->out[1], in_at(c, 0), false); /* log_prob */
}

static void r_nonzero(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  keel_ss_rank(&c->out[0], 2);
  c->out[0].d[0] = keel_sd_known(x->rank);
  c->out[0].d[1] = keel_shapes_fresh(c->S, c->g, "NonZero");
}

static void r_compress(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x) return;
  const keel_attr *aa = keel_node_attr(c->n, "axis");
  if (!aa) {
    keel_ss_rank(&c->out[0], 1);
    c->out[0].d[0] = keel_shapes_fresh(c->S, c->g, "Compress");
    return;
  }
  int64_t a = aa->i;
  if (!norm_axis(&a, x->rank)) return;
  same_as(&c->out[0], x, false);
  c->out[0].d[a] = keel_shapes_fresh(c->S, c->g, "Compress");
}

static void r_constant(keel_shape_ctx *c) {
  const keel_attr *a = keel_node_attr(c->n, "value");
  keel_sshape *o = &c->out[0];
  if (a && a->type == KEEL_ATTR_TENSOR && a->t) {
    keel_ss_from_tensor(o, a->t);
    return;
  }
  const keel_attr *l = keel_node_attr(c->n, "value_ints");
  if (!l) l = keel_node_attr(c->n, "value_floats");
  if (!l) l = keel_node_attr(c->n, "value_strings");
  if (l) {
    keel_ss_rank(o, 1);
    o->d[0] = keel_sd_known(l->n);
    if (l->type == KEEL_ATTR_INTS && l->n <= KEEL_SHAPE_MAXV) {
      o->nv = l->n;
      for (int32_t i = 0; i < l->n; i++) o->v[i] = keel_sd_known(l->ints[i]);
    }
    return;
  }
  if (keel_node_attr(c->n, "value_int") || keel_node_attr(c->n, "value_float") ||
      keel_node_attr(c->n, "value_string")) {
    keel_ss_rank(o, 0);
    const keel_attr *vi = keel_node_attr(c->n, "value_int");
    if (vi) o->nv = 1, o->v[0] = keel_sd_known(vi->i);
  }
}

static void r_einsum(keel_shape_ctx *c) {
  const keel_attr *eq = keel_node_attr(c->n, "equation");
  if (!eq || eq->type != KEEL_ATTR_STRING || strstr(eq->s, "...")) return;
  keel_sdim label[128];
  bool seen[128] = {0};
  const char *p = eq->s;
  int32_t k = 0;
  const keel_sshape *x = in_at(c, 0);
  int32_t ax = 0;
  for (; *p && !(p[0] == '-' && p[1] == '>'); p++) {
    unsigned ch = (unsigned char)*p;
    if (ch == ',') {
      if (x && ax != x->rank) return;
      x = in_at(c, ++k), ax = 0;
      continue;
    }
    if (ch == ' ') continue;
    if (ch >= 128 || !x || ax >= x->rank) return;
    keel_sdim d = x->d[ax++];
    if (!seen[ch] || keel_sd_is(label[ch], 1) || (keel_sd_unk(label[ch]) && !keel_sd_is(d, 1))) label[ch] = d;
    seen[ch] = true;
  }
  if (!x || ax != x->rank || k != c->n->n_in - 1) return;
  keel_sshape *o = &c->out[0];
  keel_ss_rank(o, 0);
  if (!*p) { /* implicit: the labels seen once, in alphabetical order */
    int32_t count[128] = {0};
    for (const char *q = eq->s; *q; q++)
      if ((unsigned char)*q < 128) count[(unsigned char)*q]++;
    for (int ch = 'A'; ch <= 'z'; ch++)
      if (count[ch] == 1 && ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z')) && o->rank < KEEL_MAX_RANK)
        o->d[o->rank++] = label[ch];
    return;
  }
  for (p += 2; *p; p++) {
    unsigned ch = (unsigned char)*p;
    if (ch == ' ') continue;
    if (ch >= 128 || !seen[ch] || o->rank == KEEL_MAX_RANK) return keel_ss_unknown(o);
    o->d[o->rank++] = label[ch];
  }
}

static void r_roialign(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *r = in_at(c, 1);
  if (!x || !r || x->rank != 4 || r->rank != 2) return;
  keel_ss_rank(&c->out[0], 4);
  c->out[0].d[0] = r->d[0];
  c->out[0].d[1] = x->d[1];
  c->out[0].d[2] = keel_sd_known(attr_i(c, "output_height", 1));
  c->out[0].d[3] = keel_sd_known(attr_i(c, "output_width", 1));
}

static void r_gridsample(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0), *g = in_at(c, 1);
  if (!x || !g || x->rank < 3 || g->rank != x->rank) return;
  keel_ss_rank(&c->out[0], x->rank);
  c->out[0].d[0] = x->d[0];
  c->out[0].d[1] = x->d[1];
  for (int32_t i = 2; i < x->rank; i++) c->out[0].d[i] = g->d[i - 1];
}

static void r_nms(keel_shape_ctx *c) {
  keel_ss_rank(&c->out[0], 2);
  c->out[0].d[0] = keel_shapes_fresh(c->S, c->g, "NonMaxSuppression");
  c->out[0].d[1] = keel_sd_known(3);
}

static void r_random(keel_shape_ctx *c) {
  const int64_t *s;
  int32_t n = attr_ints(c, "shape", &s);
  if (n < 0 || n > KEEL_MAX_RANK) return;
  keel_ss_rank(&c->out[0], n);
  for (int32_t i = 0; i < n; i++) c->out[0].d[i] = keel_sd_known(s[i]);
}

static void r_det(keel_shape_ctx *c) {
  const keel_sshape *x = in_at(c, 0);
  if (!x || x->rank < 2) return;
  same_as(&c->out[0], x, false);
  c->out[0].rank -= 2;
}

/* ============================================================= table */

typedef struct rule {
  const char *op;
  void (*fn)(keel_shape_ctx *c);
} rule;

static const rule g_rules[] = {
    /* elementwise: the shape of input 0 */
    {"Abs", r_same}, {"Acos", r_same}, {"Acosh", r_same}, {"Asin", r_same}, {"Asinh", r_same},
    {"Atan", r_same}, {"Atanh", r_same}, {"BitwiseNot", r_same}, {"Ceil", r_same}, {"Celu", r_same},
    {"Clip", r_same}, {"Cos", r_same}, {"Cosh", r_same}, {"CumSum", r_same},
    {"DequantizeLinear", r_same}, {"Dropout", r_same}, {"Elu", r_same}, {"Erf", r_same},
    {"Exp", r_same}, {"EyeLike", r_same}, {"Floor", r_same}, {"Gelu", r_same},
    {"HardSigmoid", r_same}, {"HardSwish", r_same}, {"Hardmax", r_same},
    {"InstanceNormalization", r_same}, {"IsInf", r_same}, {"IsNaN", r_same}, {"LeakyRelu", r_same},
    {"Log", r_same}, {"LogSoftmax", r_same}, {"LpNormalization", r_same}, {"LRN", r_same},
    {"MeanVarianceNormalization", r_same}, {"Mish", r_same}, {"Neg", r_same}, {"Not", r_same},
    {"QuantizeLinear", r_same}, {"Reciprocal", r_same}, {"Relu", r_same}, {"Round", r_same},
    {"Selu", r_same}, {"Shrink", r_same}, {"Sigmoid", r_same}, {"Sign", r_same}, {"Sin", r_same},
    {"Sinh", r_same}, {"Softmax", r_same}, {"Softplus", r_same}, {"Softsign", r_same},
    {"Sqrt", r_same}, {"Tan", r_same}, {"Tanh", r_same}, {"ThresholdedRelu", r_same},
    {"Trilu", r_same}, {"ReverseSequence", r_same}, {"Scatter", r_same},
    {"ScatterElements", r_same}, {"ScatterND", r_same}, {"RandomNormalLike", r_same},
    {"RandomUniformLike", r_same}, {"Bernoulli", r_same}, {"GroupNormalization", r_same},
    {"RMSNormalization", r_same}, {"Swish", r_same}, {"Binarizer", r_same},
    {"Identity", r_copy}, {"MemcpyFromHost", r_copy}, {"MemcpyToHost", r_copy},
    {"Cast", r_copy}, {"CastLike", r_copy},
    /* broadcasting */
    {"Add", r_bcast}, {"Sub", r_bcast}, {"Mul", r_bcast}, {"Div", r_bcast}, {"Pow", r_bcast},
    {"Mod", r_bcast}, {"BitShift", r_bcast}, {"And", r_bcast}, {"Or", r_bcast}, {"Xor", r_bcast},
    {"Equal", r_bcast}, {"Greater", r_bcast}, {"GreaterOrEqual", r_bcast}, {"Less", r_bcast},
    {"LessOrEqual", r_bcast}, {"Where", r_bcast}, {"Max", r_bcast}, {"Min", r_bcast},
    {"Mean", r_bcast}, {"Sum", r_bcast}, {"PRelu", r_bcast}, {"BitwiseAnd", r_bcast},
    {"BitwiseOr", r_bcast}, {"BitwiseXor", r_bcast},
    /* matrix products */
    {"MatMul", r_matmul}, {"MatMulInteger", r_matmul}, {"QLinearMatMul", r_matmul},
    {"FusedMatMul", r_matmul}, {"Gemm", r_gemm},
    /* convolutions and pools */
    {"Conv", r_conv}, {"ConvInteger", r_conv}, {"QLinearConv", r_conv}, {"FusedConv", r_conv},
    {"ConvTranspose", r_convtranspose}, {"MaxPool", r_pool}, {"AveragePool", r_pool},
    {"LpPool", r_pool}, {"GlobalAveragePool", r_global_pool}, {"GlobalMaxPool", r_global_pool},
    {"GlobalLpPool", r_global_pool},
    /* reductions */
    {"ReduceSum", r_reduce}, {"ReduceMean", r_reduce}, {"ReduceMax", r_reduce},
    {"ReduceMin", r_reduce}, {"ReduceProd", r_reduce}, {"ReduceL1", r_reduce},
    {"ReduceL2", r_reduce}, {"ReduceLogSum", r_reduce}, {"ReduceLogSumExp", r_reduce},
    {"ReduceSumSquare", r_reduce}, {"ArgMax", r_argmax}, {"ArgMin", r_argmax},
    /* shape ops */
    {"Shape", r_shape}, {"Size", r_size}, {"ConstantOfShape", r_constant_of_shape},
    {"Expand", r_expand}, {"Reshape", r_reshape}, {"Flatten", r_flatten}, {"Squeeze", r_squeeze},
    {"Unsqueeze", r_unsqueeze}, {"Transpose", r_transpose}, {"Concat", r_concat},
    {"Split", r_split}, {"Slice", r_slice}, {"Gather", r_gather},
    {"GatherElements", r_gather_elements}, {"GatherND", r_gather_nd}, {"Tile", r_tile},
    {"Pad", r_pad}, {"Range", r_range}, {"OneHot", r_onehot}, {"TopK", r_topk},
    {"DepthToSpace", r_depth_space}, {"SpaceToDepth", r_depth_space}, {"Resize", r_resize},
    {"Upsample", r_resize}, {"Constant", r_constant}, {"Einsum", r_einsum},
    /* normalizations and losses with more than one output */
    {"LayerNormalization", r_layernorm}, {"BatchNormalization", r_batchnorm},
    {"DynamicQuantizeLinear", r_dynquant}, {"SoftmaxCrossEntropyLoss", r_loss},
    {"NegativeLogLikelihoodLoss", r_loss},
    /* data-dependent: fresh symbols */
    {"NonZero", r_nonzero}, {"Compress", r_compress}, {"NonMaxSuppression", r_nms},
    /* others */
    {"RoiAlign", r_roialign}, {"GridSample", r_gridsample}, {"RandomNormal", r_random},
    {"RandomUniform", r_random}, {"Det", r_det}, {"LSTM", r_rnn}, {"GRU", r_rnn}, {"RNN", r_rnn},
    /* keel's own (ai.keel.internal): what the passes make */
    {"NhwcConv", r_nhwc_conv}, {"NhwcMaxPool", r_nhwc_pool}, {"NhwcAveragePool", r_nhwc_pool},
    {"NhwcGlobalMaxPool", r_nhwc_pool}, {"NhwcGlobalAveragePool", r_nhwc_pool},
    {"FusedAttention", r_fused_attention},
};

const keel_tensor *keel_shape_const_in(const keel_shape_ctx *c, int32_t i) {
  if (!has_in(c, i)) return NULL;
  int32_t k = keel_ir_const_of(c->m, c->g, c->n->in_names[i]);
  return k < 0 ? NULL : &c->m->consts[k];
}

bool keel_shape_rule(keel_shape_ctx *c) {
  const char *d = c->n->domain;
  if (d[0] && strcmp(d, "ai.onnx") && strcmp(d, "com.microsoft") && strcmp(d, "ai.onnx.ml") &&
      strcmp(d, "ai.keel.internal"))
    return false;
  for (size_t i = 0; i < sizeof g_rules / sizeof g_rules[0]; i++)
    if (!strcmp(g_rules[i].op, c->n->op_type)) {
      g_rules[i].fn(c);
      return true;
    }
  return false;
}
