/* grad.c: helper kernels for the derivative graphs ir/autodiff.c builds,
 * in the domain "ai.keel.internal" (not usable from a model file unless it
 * imports that domain): OnesLike, ZerosLike (of a tensor or a sequence),
 * SumToShape, ReluGrad, SigmoidGrad, TanhGrad and MatMulGrad.
 *
 * They work element by element through double (keel_elem_get/set_f64):
 * correct for every float type, and simple; derivative graphs are the seed
 * of training support, not yet a hot path. */
#include <cblas.h>

#include "bcast.h"

static keel_status float_input(keel_kctx *k, int i, const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if (!keel_dtype_is_float((*t)->dtype))
    return keel_err(KEEL_ERR_SHAPE, "input %d must be a float tensor", i);
  return KEEL_OK;
}

static keel_status filled_like(keel_kctx *k, double v) {
  const keel_tensor *x;
  KEEL_TRY(float_input(k, 0, &x));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o));
  if (v == 0.0 && o->data) memset(o->data, 0, keel_tensor_nbytes(o)); /* 0 is all-zero bits */
  else
    for (int64_t i = 0; i < keel_tensor_numel(o); i++) keel_elem_set_f64(o->dtype, o->data, (size_t)i, v);
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

/* g reduced by summation to the shape of x (undoes numpy broadcasting). */
static keel_status op_sum_to_shape(keel_kctx *k) {
  const keel_tensor *g, *x;
  KEEL_TRY(float_input(k, 0, &g));
  KEEL_TRY(keel_k_in(k, 1, &x));
  int r;
  int64_t shape[KEEL_MAX_RANK], st[KEEL_MAX_RANK];
  KEEL_TRY(keel_broadcast_shape(x->rank, x->shape, g->rank, g->shape, &r, shape));
  if (r != g->rank || memcmp(shape, g->shape, sizeof(int64_t) * (size_t)r))
    return keel_err(KEEL_ERR_SHAPE, "SumToShape: the gradient's shape is not a broadcast of the value's");
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, g->dtype, x->rank, x->shape, &o));
  int64_t no = keel_tensor_numel(o), ng = keel_tensor_numel(g);
  double *acc;
  KEEL_TRY(keel_k_scratch(k, sizeof(double) * (size_t)(no ? no : 1), (void **)&acc));
  memset(acc, 0, sizeof(double) * (size_t)no);
  keel_broadcast_strides(x->rank, x->shape, r, shape, st);
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

/* out = gy * f(v) elementwise, v the forward input (Relu) or output. */
static keel_status act_grad(keel_kctx *k, double (*f)(double)) {
  const keel_tensor *gy, *v;
  KEEL_TRY(float_input(k, 0, &gy));
  KEEL_TRY(float_input(k, 1, &v));
  if (keel_tensor_numel(gy) != keel_tensor_numel(v))
    return keel_err(KEEL_ERR_SHAPE, "gradient and value differ in size");
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, gy->dtype, gy->rank, gy->shape, &o));
  for (int64_t i = 0; i < keel_tensor_numel(o); i++) {
    double g = keel_elem_get_f64(gy->dtype, gy->data, (size_t)i);
    keel_elem_set_f64(o->dtype, o->data, (size_t)i, g * f(keel_elem_get_f64(v->dtype, v->data, (size_t)i)));
  }
  return KEEL_OK;
}

static double relu_d(double x) { return x > 0 ? 1.0 : 0.0; }
static double sigmoid_d(double y) { return y * (1 - y); }
static double tanh_d(double y) { return 1 - y * y; }
static keel_status op_relu_grad(keel_kctx *k) { return act_grad(k, relu_d); }
static keel_status op_sigmoid_grad(keel_kctx *k) { return act_grad(k, sigmoid_d); }
static keel_status op_tanh_grad(keel_kctx *k) { return act_grad(k, tanh_d); }

/* dA = gy B^T, dB = A^T gy for 2-D float/double A (M,K), B (K,N), gy (M,N). */
static keel_status op_matmul_grad(keel_kctx *k) {
  const keel_tensor *gy, *a, *b;
  KEEL_TRY(float_input(k, 0, &gy));
  KEEL_TRY(float_input(k, 1, &a));
  KEEL_TRY(float_input(k, 2, &b));
  if (a->rank != 2 || b->rank != 2 || gy->rank != 2)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of MatMul: only 2-D operands so far");
  int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
  if (b->shape[0] != K || gy->shape[0] != M || gy->shape[1] != N || a->dtype != b->dtype ||
      (a->dtype != KEEL_FLOAT && a->dtype != KEEL_DOUBLE) || gy->dtype != a->dtype)
    return keel_err(KEEL_ERR_SHAPE, "Gradient of MatMul: shapes or types do not fit");
  keel_tensor *da, *db;
  KEEL_TRY(keel_k_out(k, 0, a->dtype, 2, a->shape, &da));
  KEEL_TRY(keel_k_out(k, 1, b->dtype, 2, b->shape, &db));
  if (!M || !N || !K) {
    if (da->data) memset(da->data, 0, keel_tensor_nbytes(da));
    if (db->data) memset(db->data, 0, keel_tensor_nbytes(db));
    return KEEL_OK;
  }
  if (a->dtype == KEEL_FLOAT) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)K, (int)N, 1.f, gy->data,
                (int)N, b->data, (int)N, 0.f, da->data, (int)K);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)N, (int)M, 1.f, a->data,
                (int)K, gy->data, (int)N, 0.f, db->data, (int)N);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)K, (int)N, 1.0, gy->data,
                (int)N, b->data, (int)N, 0.0, da->data, (int)K);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)N, (int)M, 1.0, a->data,
                (int)K, gy->data, (int)N, 0.0, db->data, (int)N);
  }
  return KEEL_OK;
}

#define D "ai.keel.internal"
/* Element-type sets used in the table below. */
#define FLOAT_DOUBLE (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad[] = {
    {D, "OnesLike", 1, KEEL_OPSET_MAX, op_ones_like, 0, KEEL_TS_FLOAT},
    {D, "ZerosLike", 1, KEEL_OPSET_MAX, op_zeros_like, 0, KEEL_TS_FLOAT},
    {D, "SumToShape", 1, KEEL_OPSET_MAX, op_sum_to_shape, 0, KEEL_TS_FLOAT},
    {D, "ReluGrad", 1, KEEL_OPSET_MAX, op_relu_grad, 0, KEEL_TS_FLOAT},
    {D, "SigmoidGrad", 1, KEEL_OPSET_MAX, op_sigmoid_grad, 0, KEEL_TS_FLOAT},
    {D, "TanhGrad", 1, KEEL_OPSET_MAX, op_tanh_grad, 0, KEEL_TS_FLOAT},
    {D, "MatMulGrad", 1, KEEL_OPSET_MAX, op_matmul_grad, 0, FLOAT_DOUBLE},
    {0},
};
#undef FLOAT_DOUBLE
