/* backward.c: the ops of the derivative graphs autodiff/autodiff.c builds
 * that belong to no forward op, in the domain "ai.keel.internal" (not
 * usable from a model file unless it imports that domain): OnesLike (the
 * seed), ZerosLike (of a tensor or a sequence), SumToShape (what every
 * broadcasting rule ends with). The backward kernels of single ops sit
 * beside their forward kernels, in the *_backward.c file of each family's
 * folder; GradAdd, with which the driver sums gradients, is in
 * ops/shape/shape_backward.c.
 *
 * They work element by element through double (keel_elem_get/set_f64):
 * correct for every float type, and simple; float32 has direct loops
 * (SumToShape row by row). */
#include "ops/common/backward_util.h"

static keel_status filled_like(keel_kctx *k, double v) {
  const keel_tensor *x;
  KEEL_TRY(keel_bw_float_input(k, 0, &x));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o));
  int64_t n = keel_tensor_numel(o);
  if (v == 0.0 && o->data) memset(o->data, 0, keel_tensor_nbytes(o)); /* 0 is all-zero bits */
  else if (o->dtype == KEEL_FLOAT) {
    float *f = o->data;
    for (int64_t i = 0; i < n; i++) f[i] = (float)v;
  } else {
    for (int64_t i = 0; i < n; i++) keel_elem_set_f64(o->dtype, o->data, (size_t)i, v);
  }
  return KEEL_OK;
}

static keel_status op_ones_like(keel_kctx *k) { return filled_like(k, 1.0); }
/* ZerosLike also takes a sequence: zeros shaped as each of its elements. */
static keel_status op_zeros_like(keel_kctx *k) {
  if (!keel_k_has_in(k, 0) || k->in[0]->kind != KEEL_V_SEQUENCE) return filled_like(k, 0.0);
  const keel_seq *x = k->in[0]->seq;
  keel_seq *s;
  if (x->of_maps) return keel_err(KEEL_ERR_SHAPE, "ZerosLike: a sequence of maps");
  KEEL_TRY(keel_k_out_seq(k, 0, x->elem_dtype, &s));
  for (size_t i = 0; i < x->n; i++) {
    const keel_tensor *e = &x->items[i];
    keel_tensor t;
    if (!keel_dtype_is_float(e->dtype))
      return keel_err(KEEL_ERR_SHAPE, "ZerosLike: element %zu is not float", i);
    KEEL_TRY(keel_tensor_alloc(k->heap, e->dtype, e->rank, e->shape, keel_k_owner(k, 0), &t));
    if (t.data) memset(t.data, 0, keel_tensor_nbytes(&t));
    keel_status st = keel_seq_insert(s, s->n, &t);
    if (st) {
      keel_tensor_release(&t);
      return st;
    }
  }
  return KEEL_OK;
}

/* The float32 path of SumToShape: g walked row by row (its last dim), each
 * row added into o at x's offset (or summed into one element when x
 * broadcasts along that dim); float accumulation, as the forward ops. */
static void sum_to_f32(const keel_tensor *g, int r, const int64_t *shape, const int64_t *st,
                       keel_tensor *o) {
  float *out = o->data;
  const float *in = g->data;
  memset(out, 0, keel_tensor_nbytes(o));
  int64_t n = r ? shape[r - 1] : 1, rows = n ? keel_tensor_numel(g) / n : 0;
  bool along = r && st[r - 1] != 0;
  for (int64_t row = 0; row < rows; row++) {
    int64_t rem = row, off = 0;
    for (int d = r - 2; d >= 0; d--) {
      off += (rem % shape[d]) * st[d];
      rem /= shape[d];
    }
    const float *src = in + row * n;
    float *dst = out + off;
    if (along) {
      for (int64_t j = 0; j < n; j++) dst[j] += src[j];
    } else {
      float s = 0;
      for (int64_t j = 0; j < n; j++) s += src[j];
      dst[0] += s;
    }
  }
}

/* g reduced by summation to the shape of x (undoes numpy broadcasting). */
static keel_status op_sum_to_shape(keel_kctx *k) {
  const keel_tensor *g, *x;
  KEEL_TRY(keel_bw_float_input(k, 0, &g));
  KEEL_TRY(keel_k_in(k, 1, &x));
  int r;
  int64_t shape[KEEL_MAX_RANK], st[KEEL_MAX_RANK];
  KEEL_TRY(keel_broadcast_shape(x->rank, x->shape, g->rank, g->shape, &r, shape));
  if (r != g->rank || memcmp(shape, g->shape, sizeof(int64_t) * (size_t)r))
    return keel_err(KEEL_ERR_SHAPE, "SumToShape: the gradient's shape is not a broadcast of the value's");
  /* nothing broadcast (the usual case): the gradient itself, no copy */
  if (x->rank == g->rank && !memcmp(x->shape, g->shape, sizeof(int64_t) * (size_t)x->rank))
    return keel_k_out_ref(k, 0, k->in[0]);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, g->dtype, x->rank, x->shape, &o));
  int64_t no = keel_tensor_numel(o), ng = keel_tensor_numel(g);
  keel_broadcast_strides(x->rank, x->shape, r, shape, st);
  if (g->dtype == KEEL_FLOAT) {
    if (no) sum_to_f32(g, r, shape, st, o);
    return KEEL_OK;
  }
  double *acc;
  KEEL_TRY(keel_k_scratch(k, sizeof(double) * (size_t)(no ? no : 1), (void **)&acc));
  memset(acc, 0, sizeof(double) * (size_t)no);
  for (int64_t i = 0; i < ng; i++) {
    int64_t rem = i, off = 0;
    for (int d = r - 1; d >= 0; d--) {
      off += (rem % shape[d]) * st[d];
      rem /= shape[d];
    }
    acc[off] += keel_elem_get_f64(g->dtype, g->data, (size_t)i);
  }
  for (int64_t i = 0; i < no; i++) keel_elem_set_f64(o->dtype, o->data, (size_t)i, acc[i]);
  return KEEL_OK;
}

#define D "ai.keel.internal"
const keel_opdef keel_ops_grad[] = {
    {D, "OnesLike", 1, KEEL_OPSET_MAX, op_ones_like, 0, KEEL_TS_FLOAT},
    {D, "ZerosLike", 1, KEEL_OPSET_MAX, op_zeros_like, 0, KEEL_TS_FLOAT},
    {D, "SumToShape", 1, KEEL_OPSET_MAX, op_sum_to_shape, 0, KEEL_TS_FLOAT},
    {0},
};
