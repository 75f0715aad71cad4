/* math_backward.c: the backward kernels of the elementwise ops of unary.c
 * (rules in autodiff/grad_math.c; Relu's, Sigmoid's and Tanh's in
 * autodiff/grad_basic.c, Dropout's in autodiff/grad_nn.c), in the domain
 * "ai.keel.internal":
 *   UnaryGrad(gy, x [, min, max])      dx = gy * f'(x) for the elementwise
 *       activation named by the attribute `op` (its own attributes copied
 *       from the forward node: alpha, beta, gamma, approximate, min, max);
 *   ReluGrad, SigmoidGrad, TanhGrad(gy, v)  gy * f'(v), v the forward's
 *       input (Relu) or output (Sigmoid, Tanh), any float type;
 *   DropoutGrad(gY, mask, ratio?, training_mode?)  gY * mask / (1 - ratio).
 * Float32 runs in float, float64 in double (ReluGrad and the like: the
 * other float types through double). The rules emit ONNX ops where those
 * do the job; UnaryGrad exists where a rule would otherwise need a chain of
 * ten elementwise passes (Gelu, Mish).
 */
#include <math.h>

#include "base/pool.h"
#include "ops/common/backward_util.h"

/* ============================================================ UnaryGrad */

enum ug_op {
  UG_SQRT, UG_RECIPROCAL, UG_ABS, UG_ERF, UG_SIN, UG_COS, UG_SOFTSIGN, UG_ELU, UG_SELU,
  UG_LEAKYRELU, UG_GELU, UG_GELU_TANH, UG_HARDSIGMOID, UG_HARDSWISH, UG_SOFTPLUS, UG_MISH,
  UG_CLIP, UG_COUNT
};
static const char *const ug_names[UG_COUNT] = {
    "Sqrt", "Reciprocal", "Abs", "Erf", "Sin", "Cos", "Softsign", "Elu", "Selu", "LeakyRelu",
    "Gelu", "GeluTanh", "HardSigmoid", "HardSwish", "Softplus", "Mish", "Clip"};

typedef struct ug_job {
  int op;
  double alpha, beta, gamma, lo, hi;
  const void *gy, *x;
  void *dx;
} ug_job;

/* f'(x) in double: the reference the float path follows. */
static double ug_deriv(const ug_job *j, double x) {
  switch (j->op) {
    case UG_SQRT: return 0.5 / sqrt(x);
    case UG_RECIPROCAL: return -1.0 / (x * x);
    case UG_ABS: return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case UG_ERF: return 1.1283791670955126 * exp(-x * x);
    case UG_SIN: return cos(x);
    case UG_COS: return -sin(x);
    case UG_SOFTSIGN: { double d = 1 + fabs(x); return 1 / (d * d); }
    case UG_ELU: return x > 0 ? 1.0 : j->alpha * exp(x);
    case UG_SELU: return x > 0 ? j->gamma : j->gamma * j->alpha * exp(x);
    case UG_LEAKYRELU: return x > 0 ? 1.0 : j->alpha; /* at 0: alpha, as PyTorch */
    case UG_GELU: return 0.5 * (1 + erf(x * 0.7071067811865476)) + x * 0.3989422804014327 * exp(-0.5 * x * x);
    case UG_GELU_TANH: {
      double c = 0.7978845608028654, t = tanh(c * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
    }
    case UG_HARDSIGMOID: { double v = j->alpha * x + j->beta; return v > 0 && v < 1 ? j->alpha : 0.0; }
    case UG_HARDSWISH: return x < -3 ? 0.0 : x > 3 ? 1.0 : x / 3 + 0.5;
    case UG_SOFTPLUS: return 1 / (1 + exp(-x));
    case UG_MISH: {
      double sp = fmax(x, 0) + log1p(exp(-fabs(x))), t = tanh(sp);
      return t + x * (1 / (1 + exp(-x))) * (1 - t * t);
    }
    default: return x >= j->lo && x <= j->hi ? 1.0 : 0.0; /* UG_CLIP */
  }
}

/* The same in float (the float32 hot path); `op` is a constant where
 * ug_f32 calls it, so each loop below compiles to one branch-free body. */
static inline float ug_deriv_f(const ug_job *j, int op, float x) {
  switch (op) {
    case UG_SQRT: return 0.5f / sqrtf(x);
    case UG_RECIPROCAL: return -1.0f / (x * x);
    case UG_ABS: return x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f;
    case UG_ERF: return 1.1283791670955126f * expf(-x * x);
    case UG_SIN: return cosf(x);
    case UG_COS: return -sinf(x);
    case UG_SOFTSIGN: { float d = 1 + fabsf(x); return 1 / (d * d); }
    case UG_ELU: return x > 0 ? 1.0f : (float)j->alpha * expf(x);
    case UG_SELU: return x > 0 ? (float)j->gamma : (float)(j->gamma * j->alpha) * expf(x);
    case UG_LEAKYRELU: return x > 0 ? 1.0f : (float)j->alpha;
    case UG_GELU: return 0.5f * (1 + erff(x * 0.70710678f)) + x * 0.39894228f * expf(-0.5f * x * x);
    case UG_GELU_TANH: {
      float c = 0.79788456f, t = tanhf(c * (x + 0.044715f * x * x * x));
      return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * c * (1 + 3 * 0.044715f * x * x);
    }
    case UG_HARDSIGMOID: {
      float v = (float)j->alpha * x + (float)j->beta;
      return v > 0 && v < 1 ? (float)j->alpha : 0.0f;
    }
    case UG_HARDSWISH: return x < -3 ? 0.0f : x > 3 ? 1.0f : x / 3 + 0.5f;
    case UG_SOFTPLUS: return 1 / (1 + expf(-x));
    case UG_MISH: {
      float sp = fmaxf(x, 0) + log1pf(expf(-fabsf(x))), t = tanhf(sp);
      return t + x * (1 / (1 + expf(-x))) * (1 - t * t);
    }
    default: return x >= (float)j->lo && x <= (float)j->hi ? 1.0f : 0.0f; /* UG_CLIP */
  }
}

#define UG_CASE(OP) \
  case OP: for (int64_t i = b; i < e; i++) dx[i] = gy[i] * ug_deriv_f(j, OP, x[i]); break;
static keel_status ug_f32(void *ctx, int64_t b, int64_t e, int w) {
  (void)w;
  const ug_job *j = ctx;
  const float *gy = j->gy, *x = j->x;
  float *dx = j->dx;
  switch (j->op) {
    UG_CASE(UG_SQRT) UG_CASE(UG_RECIPROCAL) UG_CASE(UG_ABS) UG_CASE(UG_ERF) UG_CASE(UG_SIN)
    UG_CASE(UG_COS) UG_CASE(UG_SOFTSIGN) UG_CASE(UG_ELU) UG_CASE(UG_SELU) UG_CASE(UG_LEAKYRELU)
    UG_CASE(UG_GELU) UG_CASE(UG_GELU_TANH) UG_CASE(UG_HARDSIGMOID) UG_CASE(UG_HARDSWISH)
    UG_CASE(UG_SOFTPLUS) UG_CASE(UG_MISH) default: UG_CASE(UG_CLIP)
  }
  return KEEL_OK;
}
#undef UG_CASE

static keel_status ug_f64(void *ctx, int64_t b, int64_t e, int w) {
  (void)w;
  const ug_job *j = ctx;
  const double *gy = j->gy, *x = j->x;
  double *dx = j->dx;
  for (int64_t i = b; i < e; i++) dx[i] = gy[i] * ug_deriv(j, x[i]);
  return KEEL_OK;
}

/* Clip's bounds: inputs 2 and 3 (opset 11+), else the attributes. */
static keel_status ug_bounds(keel_kctx *k, ug_job *j) {
  j->lo = keel_k_attr_f(k, "min", -INFINITY);
  j->hi = keel_k_attr_f(k, "max", INFINITY);
  if (keel_k_has_in(k, 2)) KEEL_TRY(keel_k_in_scalar_f64(k, 2, &j->lo));
  if (keel_k_has_in(k, 3)) KEEL_TRY(keel_k_in_scalar_f64(k, 3, &j->hi));
  return KEEL_OK;
}

static keel_status op_unary_grad(keel_kctx *k) {
  const char *name = keel_k_attr_s(k, "op", "");
  ug_job j = {.op = -1};
  for (int i = 0; i < UG_COUNT; i++)
    if (!strcmp(name, ug_names[i])) j.op = i;
  if (j.op < 0) return keel_err(KEEL_ERR_UNSUPPORTED, "UnaryGrad: unknown op '%s'", name);
  const keel_tensor *gy, *x;
  KEEL_TRY(keel_bw_fd_input(k, 0, -1, &gy));
  KEEL_TRY(keel_bw_fd_input(k, 1, gy->dtype, &x));
  if (keel_tensor_numel(gy) != keel_tensor_numel(x))
    return keel_err(KEEL_ERR_SHAPE, "UnaryGrad(%s): the gradient and the input differ in size", name);
  bool selu = j.op == UG_SELU, hs = j.op == UG_HARDSIGMOID;
  j.alpha = keel_k_attr_f(k, "alpha", selu ? 1.67326319217681884765625f : hs ? 0.2f
                                      : j.op == UG_LEAKYRELU ? 0.01f : 1.0f);
  j.beta = keel_k_attr_f(k, "beta", 0.5f);
  j.gamma = keel_k_attr_f(k, "gamma", 1.05070102214813232421875f);
  if (j.op == UG_CLIP) KEEL_TRY(ug_bounds(k, &j));
  keel_tensor *o;
  KEEL_TRY(keel_k_reuse(k, 0, 0, x->dtype, x->rank, x->shape, &o));
  j.gy = gy->data, j.x = x->data, j.dx = o->data;
  return keel_pool_for(k->pool, keel_tensor_numel(o), 16384, x->dtype == KEEL_FLOAT ? ug_f32 : ug_f64, &j);
}

/* ==================================================== Relu, Sigmoid, Tanh */

/* out = gy * f(v) elementwise, v the forward input (Relu) or output. */
static keel_status act_grad(keel_kctx *k, double (*f)(double)) {
  const keel_tensor *gy, *v;
  KEEL_TRY(keel_bw_float_input(k, 0, &gy));
  KEEL_TRY(keel_bw_float_input(k, 1, &v));
  if (keel_tensor_numel(gy) != keel_tensor_numel(v))
    return keel_err(KEEL_ERR_SHAPE, "gradient and value differ in size");
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, gy->dtype, gy->rank, gy->shape, &o));
  if (gy->dtype == KEEL_FLOAT && v->dtype == KEEL_FLOAT) {
    const float *g = gy->data, *x = v->data;
    float *out = o->data;
    for (int64_t i = 0; i < keel_tensor_numel(o); i++) out[i] = g[i] * (float)f(x[i]);
    return KEEL_OK;
  }
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

/* ========================================================= Dropout */

/* Inputs (gY, mask, ratio?, training_mode?); attributes ratio and training
 * stand in for the inputs before opset 12. dX = gY * mask / (1 - ratio)
 * when training with ratio > 0, else gY. */
static keel_status op_dropout_grad(keel_kctx *k) {
  const keel_tensor *gy, *mask;
  KEEL_TRY(keel_bw_fd_input(k, 0, -1, &gy));
  KEEL_TRY(keel_k_in(k, 1, &mask));
  KEEL_TRY(keel_bw_same_shape(k, mask, "the mask", gy->rank, gy->shape));
  double ratio = keel_k_attr_f(k, "ratio", 0.5f);
  int64_t t = keel_k_attr_i(k, "training", 0);
  if (keel_k_has_in(k, 2)) KEEL_TRY(keel_k_in_scalar_f64(k, 2, &ratio));
  if (keel_k_has_in(k, 3)) KEEL_TRY(keel_k_in_scalar_i64(k, 3, &t));
  bool on = t != 0 && ratio != 0;
  if (on && !(ratio > 0 && ratio < 1))
    return keel_err(KEEL_ERR_RUNTIME, "DropoutGrad: ratio %g is outside [0, 1)", ratio);
  keel_tensor *dx;
  KEEL_TRY(keel_k_out(k, 0, gy->dtype, gy->rank, gy->shape, &dx));
  bool dbl = gy->dtype == KEEL_DOUBLE;
  double scale = on ? 1 / (1 - ratio) : 1;
  for (int64_t i = 0; i < keel_tensor_numel(gy); i++) {
    bool keep = !on || keel_elem_get_f64(mask->dtype, mask->data, (size_t)i) != 0;
    keel_bw_st(dx->data, dbl, i, keep ? keel_bw_ld(gy->data, dbl, i) * scale : 0);
  }
  return KEEL_OK;
}

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_math[] = {
    {D, "UnaryGrad", 1, KEEL_OPSET_MAX, op_unary_grad, 0, FD},
    {D, "ReluGrad", 1, KEEL_OPSET_MAX, op_relu_grad, 0, KEEL_TS_FLOAT},
    {D, "SigmoidGrad", 1, KEEL_OPSET_MAX, op_sigmoid_grad, 0, KEEL_TS_FLOAT},
    {D, "TanhGrad", 1, KEEL_OPSET_MAX, op_tanh_grad, 0, KEEL_TS_FLOAT},
    {D, "DropoutGrad", 1, KEEL_OPSET_MAX, op_dropout_grad, 0, FD},
    {0},
};
#undef FD
#undef D
