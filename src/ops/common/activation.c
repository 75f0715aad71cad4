/* activation.c: fused activations (activation.h). */
#include "ops/common/activation.h"

#include <math.h>

#include "tensor/dtype.h"
#include "ops/common/vmath.h"

static const char *const g_names[] = {"", "Relu", "LeakyRelu", "Clip", "HardSigmoid",
                                      "HardSwish", "Sigmoid", "Tanh", "SiLU",
                                      "HardSigmoidMul", "Gelu", "GeluTanh"};

keel_act_kind keel_act_from_op(const char *op) {
  for (int i = 1; i < (int)KEEL_COUNTOF(g_names); i++)
    if (!strcmp(op, g_names[i])) return (keel_act_kind)i;
  return KEEL_ACT_NONE;
}

keel_status keel_act_of(const keel_node *n, keel_act *act) {
  *act = (keel_act){KEEL_ACT_NONE, 0, 0};
  const keel_attr *a = keel_node_attr(n, KEEL_ACT_ATTR);
  if (!a) return KEEL_OK;
  keel_act_kind kind = a->type == KEEL_ATTR_STRING ? keel_act_from_op(a->s) : KEEL_ACT_NONE;
  if (!kind) return keel_err(KEEL_ERR_INVALID_MODEL, "%s is not a fusable activation", KEEL_ACT_ATTR);
  const keel_attr *p = keel_node_attr(n, KEEL_ACT_PARAMS);
  int np = p && p->type == KEEL_ATTR_FLOATS ? p->n : 0;
  if (np != 2) return keel_err(KEEL_ERR_INVALID_MODEL, "%s needs 2 values", KEEL_ACT_PARAMS);
  *act = (keel_act){kind, p->floats[0], p->floats[1]};
  return KEEL_OK;
}

/* One element, written as ops/math/unary.c writes each activation (float and
 * double; Sigmoid and SiLU in float go through keel_vm_sigmoid instead). */
#define DEF_ACT1(name, T, EXP, FABS, TANH, ERF)                                   \
  static inline T name(const keel_act *p, T x) {                                  \
    T t;                                                                          \
    switch (p->kind) {                                                            \
      case KEEL_ACT_GELU: return (T)0.5 * x * ((T)1 + ERF(x * (T)0.70710678118654752440)); \
      case KEEL_ACT_GELU_TANH:                                                    \
        return (T)0.5 * x *                                                       \
               ((T)1 + TANH((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x))); \
      case KEEL_ACT_RELU: return x < 0 ? 0 : x;                                   \
      case KEEL_ACT_LEAKY: return x < 0 ? p->a * x : x;                           \
      case KEEL_ACT_CLIP: t = x < p->a ? p->a : x; return t > p->b ? p->b : t;    \
      case KEEL_ACT_HSIGMOID: t = p->a * x + p->b; return t < 0 ? 0 : t > 1 ? 1 : t; \
      case KEEL_ACT_HSWISH: t = x / 6 + 0.5f; return x * (t < 0 ? 0 : t > 1 ? 1 : t); \
      case KEEL_ACT_HSIGMOID_MUL:                                                 \
        t = p->a * x + p->b;                                                      \
        return x * (t < 0 ? 0 : t > 1 ? 1 : t);                                   \
      case KEEL_ACT_SIGMOID: t = EXP(-FABS(x)); return x >= 0 ? 1 / (1 + t) : t / (1 + t); \
      case KEEL_ACT_SILU: return x / (1 + EXP(-x));                               \
      case KEEL_ACT_TANH: return TANH(x);                                         \
      default: return x;                                                          \
    }                                                                             \
  }
DEF_ACT1(act1, float, expf, fabsf, tanhf, erff)
DEF_ACT1(act1d, double, exp, fabs, tanh, erf)

/* y[i] *= clamp(a * y[i] + b, 0, 1), four at a time with vector masks
 * (the compiler does not vectorize the ternaries: NaN ordering), NaN
 * kept as the scalar form keeps it; returns how many it did. */
typedef float act_v4 __attribute__((vector_size(16)));
typedef int32_t act_i4 __attribute__((vector_size(16)));
static int64_t hsig_mul4(float a, float b, float *y, int64_t n) {
  const act_v4 one = {1, 1, 1, 1}, zero = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    act_v4 v, t;
    memcpy(&v, y + i, sizeof v);
    t = a * v + b;
    act_i4 hi = t > one, ti = ((act_i4)t & ~hi) | ((act_i4)one & hi);
    ti &= ~((act_v4)ti < zero);
    v *= (act_v4)ti;
    memcpy(y + i, &v, sizeof v);
  }
  return i;
}

void keel_act_apply_fast_f32(const keel_act *p, float *y, int64_t n) {
  if (p->kind == KEEL_ACT_SILU) keel_vm_silu_fast(y, n);
  else if (p->kind != KEEL_ACT_GELU || !keel_vm_gelu_fast(y, n)) keel_act_apply_f32(p, y, n);
}

/* The switch sits outside the loops so each loop is one simple body. */
void keel_act_apply_f32(const keel_act *p, float *y, int64_t n) {
  switch (p->kind) {
    case KEEL_ACT_NONE: return;
    case KEEL_ACT_RELU:
      for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0 ? 0 : y[i];
      return;
    case KEEL_ACT_CLIP: { /* the bounds in locals: y may alias *p, so the loop
                             would reload them and not vectorize */
      float a = p->a, b = p->b;
      for (int64_t i = 0; i < n; i++) {
        float t = y[i] < a ? a : y[i];
        y[i] = t > b ? b : t;
      }
      return;
    }
    case KEEL_ACT_SIGMOID: keel_vm_sigmoid(y, y, n); return; /* as ops/math/unary.c */
    case KEEL_ACT_GELU: /* through the vectorized erf, as the Gelu op computes it */
      for (int64_t i = 0; i < n; i += 256) {
        float t[256];
        int64_t m = KEEL_MIN(256, n - i);
        for (int64_t j = 0; j < m; j++) t[j] = y[i + j] * 0.70710678118654752440f;
        keel_vm_erf(t, t, m);
        for (int64_t j = 0; j < m; j++) y[i + j] = 0.5f * y[i + j] * (1.0f + t[j]);
      }
      return;
    case KEEL_ACT_SILU: /* y * Sigmoid(y), as the Sigmoid and Mul kernels compute it */
      for (int64_t i = 0; i < n; i += 256) {
        float t[256];
        int64_t m = KEEL_MIN(256, n - i);
        keel_vm_sigmoid(y + i, t, m);
        for (int64_t j = 0; j < m; j++) y[i + j] *= t[j];
      }
      return;
    case KEEL_ACT_HSIGMOID_MUL: {
      float a = p->a, b = p->b;
      for (int64_t i = hsig_mul4(a, b, y, n); i < n; i++) {
        float t = a * y[i] + b;
        t = t > 1 ? 1 : t;
        y[i] *= t < 0 ? 0 : t;
      }
      return;
    }
    default:
      for (int64_t i = 0; i < n; i++) y[i] = act1(p, y[i]);
  }
}

void keel_act_apply_f64(const keel_act *p, double *y, int64_t n) {
  if (p->kind == KEEL_ACT_NONE) return;
  for (int64_t i = 0; i < n; i++) y[i] = act1d(p, y[i]);
}

keel_status keel_act_apply(const keel_act *p, keel_tensor *y) {
  if (p->kind == KEEL_ACT_NONE) return KEEL_OK;
  int64_t n = keel_tensor_numel(y);
  switch (y->dtype) {
    case KEEL_FLOAT: keel_act_apply_f32(p, y->data, n); return KEEL_OK;
    case KEEL_DOUBLE: keel_act_apply_f64(p, y->data, n); return KEEL_OK;
    case KEEL_FLOAT16:
    case KEEL_BFLOAT16: /* in float chunks, through the float32 path */
      for (int64_t i = 0; i < n; i += 256) {
        float t[256];
        int64_t m = KEEL_MIN(256, n - i);
        for (int64_t j = 0; j < m; j++) t[j] = (float)keel_elem_get_f64(y->dtype, y->data, (size_t)(i + j));
        keel_act_apply_f32(p, t, m);
        for (int64_t j = 0; j < m; j++) keel_elem_set_f64(y->dtype, y->data, (size_t)(i + j), t[j]);
      }
      return KEEL_OK;
    default:
      return keel_err(KEEL_ERR_UNSUPPORTED, "a fused activation on %s",
                      keel_dtype_name((keel_dtype)y->dtype));
  }
}
