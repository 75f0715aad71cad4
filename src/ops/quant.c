/* quant.c: linear quantization (QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear) and the training optimizers of the domain
 * ai.onnx.preview.training (Adagrad, Adam, Momentum).
 *
 * Quantization maps x to int8/uint8 with y = saturate(round(x / scale) + zp),
 * rounding half to even (rint under the default rounding mode), and back
 * with y = (x - zp) * scale. A scale with one value is per-tensor; a 1-D
 * scale (opset 13) is per-axis along `axis`. Float-to-integer conversion is
 * always clamped first, with NaN mapped to the zero point, so no data can
 * reach C's undefined conversions.
 *
 * The optimizers take R and T, then groups of n tensors each (X..., G...,
 * H... and so on); every element is updated in double precision and
 * written back in the tensors' own type (float, double, or float16 /
 * bfloat16 through float).
 */
#include <math.h>

#include "bcast.h"
#include "conv_util.h"

/* ============================================= quantization parameters */

/* How x's elements map to scale / zero-point entries: x viewed as
 * [outer, n, inner], element (o, c, i) uses entry c. Per-tensor: n = 1. */
typedef struct qparams {
  int64_t outer, n, inner;
  double *scale;   /* n entries                                     */
  int64_t *zp;     /* n entries (0 when the zero point is omitted)   */
} qparams;

static bool is_float_like(int dt) {
  return dt == KEEL_FLOAT || dt == KEEL_DOUBLE || dt == KEEL_FLOAT16 || dt == KEEL_BFLOAT16;
}

static const char *dt_name(int dt) { return keel_dtype_name((keel_dtype)dt); }

/* Checks the scale and zero point against x and picks the layout: one
 * value is per-tensor at any opset; a 1-D scale of x.shape[axis] values is
 * per-axis from opset 13. `sname` and `zname` name the inputs in messages. */
static keel_status qparams_layout(keel_kctx *k, const char *sname, const char *zname,
                                  const keel_tensor *x, const keel_tensor *scale,
                                  const keel_tensor *zp, qparams *q) {
  int64_t ns = keel_tensor_numel(scale);
  if (!is_float_like(scale->dtype))
    return keel_err(KEEL_ERR_SHAPE, "%s must be float, double or float16, got %s", sname,
                    dt_name(scale->dtype));
  if (zp && keel_tensor_numel(zp) != ns)
    return keel_err(KEEL_ERR_SHAPE, "%s has %lld values, %s has %lld: they must have the same shape",
                    zname, (long long)keel_tensor_numel(zp), sname, (long long)ns);
  q->outer = 1;
  q->n = 1;
  q->inner = keel_tensor_numel(x);
  if (ns == 1 && scale->rank <= 1) return KEEL_OK;
  if (scale->rank != 1 || ns == 0)
    return keel_err(KEEL_ERR_SHAPE, "%s must be a scalar or a 1-D list, got rank %d with %lld values",
                    sname, scale->rank, (long long)ns);
  if (keel_k_opset(k) < 13)
    return keel_err(KEEL_ERR_SHAPE, "%s has %lld values: per-axis quantization needs opset 13",
                    sname, (long long)ns);
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 1), x->rank, "axis", &axis));
  if (x->shape[axis] != ns)
    return keel_err(KEEL_ERR_SHAPE, "%s has %lld values, axis %d has %lld", sname, (long long)ns,
                    axis, (long long)x->shape[axis]);
  q->n = ns;
  q->outer = keel_shape_numel(axis, x->shape);
  q->inner = keel_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
  return KEEL_OK;
}

/* Layout, then the scale and zero-point values copied out as double /
 * int64 (they are at most one axis long). */
static keel_status qparams_load(keel_kctx *k, const char *sname, const char *zname,
                                const keel_tensor *x, const keel_tensor *scale,
                                const keel_tensor *zp, qparams *q) {
  KEEL_TRY(qparams_layout(k, sname, zname, x, scale, zp, q));
  void *p;
  KEEL_TRY(keel_k_scratch(k, (size_t)q->n * (sizeof(double) + sizeof(int64_t)), &p));
  q->scale = p;
  q->zp = (int64_t *)(q->scale + q->n);
  for (int64_t c = 0; c < q->n; c++) {
    q->scale[c] = keel_elem_get_f64(scale->dtype, scale->data, (size_t)c);
    q->zp[c] = zp ? keel_elem_get_i64(zp->dtype, zp->data, (size_t)c) : 0;
  }
  return KEEL_OK;
}

/* Opset 21's blocked quantization is refused outright rather than having
 * its 2-D scales misread as a shape error. */
static keel_status q_no_blocks(keel_kctx *k) {
  int64_t b = keel_k_attr_i(k, "block_size", 0);
  if (b != 0)
    return keel_err(KEEL_ERR_UNSUPPORTED, "blocked quantization (block_size %lld) is not supported",
                    (long long)b);
  return KEEL_OK;
}

/* ====================================================== QuantizeLinear */

/* r (already rounded) plus the zero point, clamped to [lo, hi]. NaN (0/0,
 * NaN data) quantizes to the zero point: it carries no magnitude, and C
 * leaves converting it undefined. */
static inline int32_t q_saturate(double r, double zp, double lo, double hi) {
  double v = (r != r ? 0.0 : r) + zp;
  v = v < lo ? lo : v > hi ? hi : v;
  return (int32_t)v;
}

static inline void q_store(void *y, int64_t i, bool u8, int32_t v) {
  if (u8) ((uint8_t *)y)[i] = (uint8_t)v;
  else ((int8_t *)y)[i] = (int8_t)v;
}

/* Typed bodies: T is x's type, CT the type the division is done in (float
 * for float data, as the reference computes it; double otherwise). */
#define DEF_QUANT(name, T, CT, RINT)                                              \
  static void name(const void *px, const qparams *q, bool u8, void *y) {          \
    const T *x = px;                                                              \
    double lo = u8 ? 0 : -128, hi = u8 ? 255 : 127;                              \
    int64_t i = 0;                                                                \
    for (int64_t o = 0; o < q->outer; o++)                                        \
      for (int64_t c = 0; c < q->n; c++) {                                        \
        CT s = (CT)q->scale[c];                                                   \
        double z = (double)q->zp[c];                                              \
        for (int64_t j = 0; j < q->inner; j++, i++)                               \
          q_store(y, i, u8, q_saturate((double)RINT((CT)x[i] / s), z, lo, hi));   \
      }                                                                           \
  }
DEF_QUANT(quant_f32, float, float, rintf)
DEF_QUANT(quant_f64, double, double, rint)
DEF_QUANT(quant_i32, int32_t, double, rint)

static keel_status op_quantize_linear(keel_kctx *k) {
  const keel_tensor *x, *scale, *zp;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &scale));
  KEEL_TRY(keel_k_in_opt(k, 2, &zp));
  if (!is_float_like(x->dtype) && x->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "x must be float, double, float16 or int32, got %s",
                    dt_name(x->dtype));
  KEEL_TRY(q_no_blocks(k));
  int64_t odt = keel_k_attr_i(k, "output_dtype", 0); /* opset 21; 0: from the zero point */
  if (zp && odt && odt != zp->dtype)
    return keel_err(KEEL_ERR_INVALID_MODEL, "output_dtype %lld differs from y_zero_point's %s",
                    (long long)odt, dt_name(zp->dtype));
  int ydt = zp ? zp->dtype : odt ? (int)odt : KEEL_UINT8;
  if (ydt != KEEL_UINT8 && ydt != KEEL_INT8)
    return keel_err(KEEL_ERR_SHAPE, "y_zero_point must be uint8 or int8, got %s", dt_name(ydt));
  qparams q;
  KEEL_TRY(qparams_load(k, "y_scale", "y_zero_point", x, scale, zp, &q));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, ydt, x->rank, x->shape, &y));
  bool u8 = ydt == KEEL_UINT8;
  if (keel_is_half(x->dtype)) {
    keel_tensor xf;
    KEEL_TRY(keel_k_to_f32(k, x, &xf));
    quant_f32(xf.data, &q, u8, y->data);
  } else if (x->dtype == KEEL_FLOAT) {
    quant_f32(x->data, &q, u8, y->data);
  } else if (x->dtype == KEEL_DOUBLE) {
    quant_f64(x->data, &q, u8, y->data);
  } else {
    quant_i32(x->data, &q, u8, y->data);
  }
  return KEEL_OK;
}

/* ==================================================== DequantizeLinear */

/* y = (x - zp) * scale; the difference is exact in int64 (int32 data) and
 * rounds once when converted, as the reference's float(x - zp) does. */
#define DEF_DEQUANT(name, TX, TY)                                                 \
  static void name(const void *px, const qparams *q, TY *y) {                     \
    const TX *x = px;                                                             \
    int64_t i = 0;                                                                \
    for (int64_t o = 0; o < q->outer; o++)                                        \
      for (int64_t c = 0; c < q->n; c++) {                                        \
        TY s = (TY)q->scale[c];                                                   \
        int64_t z = q->zp[c];                                                     \
        for (int64_t j = 0; j < q->inner; j++, i++) y[i] = (TY)((int64_t)x[i] - z) * s; \
      }                                                                           \
  }
DEF_DEQUANT(deq_u8_f32, uint8_t, float)
DEF_DEQUANT(deq_i8_f32, int8_t, float)
DEF_DEQUANT(deq_i32_f32, int32_t, float)
DEF_DEQUANT(deq_u8_f64, uint8_t, double)
DEF_DEQUANT(deq_i8_f64, int8_t, double)
DEF_DEQUANT(deq_i32_f64, int32_t, double)

static void dequant_run(const keel_tensor *x, const qparams *q, bool dbl, void *y) {
  if (dbl) {
    if (x->dtype == KEEL_UINT8) deq_u8_f64(x->data, q, y);
    else if (x->dtype == KEEL_INT8) deq_i8_f64(x->data, q, y);
    else deq_i32_f64(x->data, q, y);
  } else {
    if (x->dtype == KEEL_UINT8) deq_u8_f32(x->data, q, y);
    else if (x->dtype == KEEL_INT8) deq_i8_f32(x->data, q, y);
    else deq_i32_f32(x->data, q, y);
  }
}

/* The output takes the scale's type (float before opset 19; float16 is
 * computed in float and rounded once). */
static keel_status op_dequantize_linear(keel_kctx *k) {
  const keel_tensor *x, *scale, *zp;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &scale));
  KEEL_TRY(keel_k_in_opt(k, 2, &zp));
  if (x->dtype != KEEL_UINT8 && x->dtype != KEEL_INT8 && x->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "x must be uint8, int8 or int32, got %s", dt_name(x->dtype));
  if (zp && zp->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "x_zero_point is %s but x is %s: they must match",
                    dt_name(zp->dtype), dt_name(x->dtype));
  KEEL_TRY(q_no_blocks(k));
  qparams q;
  KEEL_TRY(qparams_load(k, "x_scale", "x_zero_point", x, scale, zp, &q));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, scale->dtype, x->rank, x->shape, &y));
  if (!keel_is_half(y->dtype)) {
    dequant_run(x, &q, y->dtype == KEEL_DOUBLE, y->data);
    return KEEL_OK;
  }
  void *p;
  KEEL_TRY(keel_k_scratch(k, (size_t)keel_tensor_numel(x) * sizeof(float), &p));
  dequant_run(x, &q, false, p);
  keel_f32_store(p, y);
  return KEEL_OK;
}

/* =============================================== DynamicQuantizeLinear */

/* x as float: the data itself, or a staged copy of float16 / double. */
static keel_status as_f32(keel_kctx *k, const keel_tensor *x, const float **out) {
  if (x->dtype == KEEL_FLOAT) {
    *out = x->data;
    return KEEL_OK;
  }
  if (keel_is_half(x->dtype)) {
    keel_tensor xf;
    KEEL_TRY(keel_k_to_f32(k, x, &xf));
    *out = xf.data;
    return KEEL_OK;
  }
  int64_t n = keel_tensor_numel(x);
  void *p;
  KEEL_TRY(keel_k_scratch(k, (size_t)n * sizeof(float), &p));
  float *f = p;
  const double *d = x->data;
  for (int64_t i = 0; i < n; i++) f[i] = (float)d[i];
  *out = f;
  return KEEL_OK;
}

/* Scale and zero point for uint8 from the data range widened to include
 * 0 (NaN elements are ignored). All-zero data gives scale 0 and zero point
 * 0, rather than 0/0. */
static void dyn_params(const float *x, int64_t n, float *scale, float *zp) {
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < n; i++) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  *scale = (hi - lo) / 255.0f;
  if (!(*scale > 0)) {
    *zp = 0;
    return;
  }
  float z = rintf((0.0f - lo) / *scale);
  *zp = z != z ? 0 : z < 0 ? 0 : z > 255 ? 255 : z; /* inf range: lo/inf is NaN */
}

void keel_dynq_u8(const float *x, int64_t n, uint8_t *q, float *scale, uint8_t *zp) {
  float zf;
  dyn_params(x, n, scale, &zf);
  *zp = (uint8_t)zf;
  if (!(*scale > 0)) {
    if (n) memset(q, (int)zf, (size_t)n);
    return;
  }
  for (int64_t i = 0; i < n; i++) q[i] = (uint8_t)q_saturate(rintf(x[i] / *scale), zf, 0, 255);
}

static keel_status op_dynamic_quantize_linear(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (!is_float_like(x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "x must be float, got %s", dt_name(x->dtype));
  const float *xf;
  KEEL_TRY(as_f32(k, x, &xf));
  keel_tensor *y, *ys, *yz;
  KEEL_TRY(keel_k_out(k, 0, KEEL_UINT8, x->rank, x->shape, &y));
  KEEL_TRY(keel_k_out(k, 1, KEEL_FLOAT, 0, NULL, &ys));
  KEEL_TRY(keel_k_out(k, 2, KEEL_UINT8, 0, NULL, &yz));
  keel_dynq_u8(xf, keel_tensor_numel(x), y->data, ys->data, yz->data);
  return KEEL_OK;
}

/* ======================================================== optimizers */

typedef enum { OPT_ADAGRAD, OPT_ADAM, OPT_MOMENTUM, OPT_NESTEROV } opt_kind;

/* One optimizer call: the per-call scalars folded from R, T and the
 * attributes, and how many tensor groups follow R and T. */
typedef struct optim {
  opt_kind kind;
  int groups;      /* X, G, H (3) / X, G, V, H (4) / X, G, V (3) */
  double r;        /* learning rate, already decayed or bias-corrected */
  double norm, eps, alpha, beta, post, decay;
} optim;

/* One element. in: x, g, then v and/or h in input order; out: x_new, then
 * v_new and/or h_new in output order. */
static void opt_step(const optim *o, const double *in, double *out) {
  double x = in[0], g = o->norm * x + in[1];
  switch (o->kind) {
    case OPT_ADAGRAD: {
      double h = in[2] + g * g;
      out[0] = x - o->r * g / (sqrt(h) + o->eps);
      out[1] = h;
      break;
    }
    case OPT_ADAM: {
      double v = o->alpha * in[2] + (1 - o->alpha) * g;
      double h = o->beta * in[3] + (1 - o->beta) * g * g;
      out[0] = (1 - o->post) * (x - o->r * v / (sqrt(h) + o->eps));
      out[1] = v;
      out[2] = h;
      break;
    }
    case OPT_MOMENTUM:
    case OPT_NESTEROV: {
      double v = o->alpha * in[2] + o->beta * g; /* beta already 1 when T == 0 */
      out[0] = x - o->r * (o->kind == OPT_NESTEROV ? g + o->alpha * v : v);
      out[1] = v;
      break;
    }
  }
}

static inline double opt_load(int dt, const void *p, int64_t i) {
  switch (dt) {
    case KEEL_FLOAT: return ((const float *)p)[i];
    case KEEL_DOUBLE: return ((const double *)p)[i];
    case KEEL_FLOAT16: return keel_f16_to_f32(((const uint16_t *)p)[i]);
    default: return keel_bf16_to_f32(((const uint16_t *)p)[i]);
  }
}

static inline void opt_store(int dt, void *p, int64_t i, double v) {
  switch (dt) {
    case KEEL_FLOAT: ((float *)p)[i] = (float)v; break;
    case KEEL_DOUBLE: ((double *)p)[i] = v; break;
    case KEEL_FLOAT16: ((uint16_t *)p)[i] = keel_f32_to_f16((float)v); break;
    default: ((uint16_t *)p)[i] = keel_f32_to_bf16((float)v); break;
  }
}

/* Output oi of shape like x, taking input in_i's buffer when it dies here
 * (element j is read before it is written) and no other input of the node
 * shares it: X_new and V_new must not land in one buffer when a model
 * passes one tensor as both X and V. */
static keel_status opt_out(keel_kctx *k, int oi, int in_i, const keel_tensor *x, void **p) {
  keel_tensor *t;
  const keel_buffer *b = k->in[in_i]->t.buf;
  bool shared = false;
  for (int j = 0; j < k->n_in; j++)
    if (j != in_i && k->in[j] && k->in[j]->kind == KEEL_V_TENSOR && k->in[j]->t.buf == b) shared = true;
  if (shared) KEEL_TRY(keel_k_out(k, oi, x->dtype, x->rank, x->shape, &t));
  else KEEL_TRY(keel_k_reuse(k, oi, in_i, x->dtype, x->rank, x->shape, &t));
  *p = t->data;
  return KEEL_OK;
}

/* Tensor i of n: checks its group's types and shapes against X_i, then
 * updates it element by element. Outputs past the node's targets are not
 * made (out[g] NULL). */
static keel_status opt_tensor(keel_kctx *k, const optim *o, int n, int i) {
  const keel_tensor *in[4];
  void *out[3] = {0};
  for (int g = 0; g < o->groups; g++) {
    KEEL_TRY(keel_k_in(k, 2 + g * n + i, &in[g]));
    if (in[g]->dtype != in[0]->dtype || in[g]->rank != in[0]->rank ||
        memcmp(in[g]->shape, in[0]->shape, sizeof(int64_t) * (size_t)in[0]->rank))
      return keel_err(KEEL_ERR_SHAPE, "input %d '%s' (%s) does not match X %d (%s) in type or shape",
                      2 + g * n + i, k->node->in_names[2 + g * n + i], dt_name(in[g]->dtype), i,
                      dt_name(in[0]->dtype));
  }
  int dt = in[0]->dtype;
  if (!is_float_like(dt))
    return keel_err(KEEL_ERR_SHAPE, "X %d must be float or double, got %s", i, dt_name(dt));
  for (int g = 0; g + 1 < o->groups; g++) {
    int src = g == 0 ? 0 : g + 1; /* X_new <- X, V_new/H_new <- V/H (G is skipped) */
    if (g * n + i < KEEL_MAX(k->n_out, KEEL_K_MIN_OUTS))
      KEEL_TRY(opt_out(k, g * n + i, 2 + src * n + i, in[0], &out[g]));
  }
  double a[4], b[3];
  for (int64_t j = 0, m = keel_tensor_numel(in[0]); j < m; j++) {
    for (int g = 0; g < o->groups; g++) a[g] = opt_load(dt, in[g]->data, j);
    opt_step(o, a, b);
    for (int g = 0; g + 1 < o->groups; g++)
      if (out[g]) opt_store(dt, out[g], j, b[g]);
  }
  return KEEL_OK;
}

/* Reads R and T, checks the variadic input count, and runs each tensor. */
static keel_status optimizer(keel_kctx *k, optim *o, const char *name) {
  const keel_tensor *rt, *tt;
  KEEL_TRY(keel_k_in(k, 0, &rt));
  KEEL_TRY(keel_k_in(k, 1, &tt));
  if (!is_float_like(rt->dtype) || keel_tensor_numel(rt) != 1)
    return keel_err(KEEL_ERR_SHAPE, "R must be one float or double, got %s with %lld values",
                    dt_name(rt->dtype), (long long)keel_tensor_numel(rt));
  if (!keel_dtype_is_int(tt->dtype) || keel_tensor_numel(tt) != 1)
    return keel_err(KEEL_ERR_SHAPE, "T must be one int64, got %s with %lld values",
                    dt_name(tt->dtype), (long long)keel_tensor_numel(tt));
  int nt = k->n_in - 2;
  if (nt < o->groups || nt % o->groups)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s takes R, T and %d groups of tensors; got %d inputs",
                    name, o->groups, k->n_in);
  if ((o->groups - 1) * (nt / o->groups) < k->n_out)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: %d outputs for %d tensors, at most %d", name,
                    k->n_out, nt / o->groups, (o->groups - 1) * (nt / o->groups));
  double r = keel_elem_get_f64(rt->dtype, rt->data, 0);
  int64_t t = keel_elem_get_i64(tt->dtype, tt->data, 0);
  if (o->kind == OPT_ADAGRAD) {
    o->r = r / (1 + (double)t * o->decay);
  } else if (o->kind == OPT_ADAM) {
    o->r = t > 0 ? r * sqrt(1 - pow(o->beta, (double)t)) / (1 - pow(o->alpha, (double)t)) : r;
  } else {
    o->r = r;
    if (t <= 0) o->beta = 1; /* the first step takes the whole gradient */
  }
  for (int i = 0; i < nt / o->groups; i++) KEEL_TRY(opt_tensor(k, o, nt / o->groups, i));
  return KEEL_OK;
}

static keel_status op_adagrad(keel_kctx *k) {
  optim o = {.kind = OPT_ADAGRAD, .groups = 3};
  o.decay = keel_k_attr_f(k, "decay_factor", 0.0f);
  o.eps = keel_k_attr_f(k, "epsilon", 1e-6f);
  o.norm = keel_k_attr_f(k, "norm_coefficient", 0.0f);
  return optimizer(k, &o, "Adagrad");
}

static keel_status op_adam(keel_kctx *k) {
  optim o = {.kind = OPT_ADAM, .groups = 4};
  o.alpha = keel_k_attr_f(k, "alpha", 0.9f);
  o.beta = keel_k_attr_f(k, "beta", 0.999f);
  o.eps = keel_k_attr_f(k, "epsilon", 1e-6f);
  o.norm = keel_k_attr_f(k, "norm_coefficient", 0.0f);
  o.post = keel_k_attr_f(k, "norm_coefficient_post", 0.0f);
  return optimizer(k, &o, "Adam");
}

/* alpha, beta, mode and norm_coefficient have no defaults in the schema. */
static keel_status op_momentum(keel_kctx *k) {
  static const char *const req[] = {"alpha", "beta", "mode", "norm_coefficient"};
  for (size_t i = 0; i < KEEL_COUNTOF(req); i++)
    if (!keel_k_attr(k, req[i]))
      return keel_err(KEEL_ERR_INVALID_MODEL, "Momentum needs attribute '%s'", req[i]);
  const char *mode = keel_k_attr_s(k, "mode", "");
  optim o = {.groups = 3};
  if (!strcmp(mode, "standard")) o.kind = OPT_MOMENTUM;
  else if (!strcmp(mode, "nesterov")) o.kind = OPT_NESTEROV;
  else
    return keel_err(KEEL_ERR_INVALID_MODEL, "Momentum mode must be 'standard' or 'nesterov', got '%s'",
                    mode);
  o.alpha = keel_k_attr_f(k, "alpha", 0.0f);
  o.beta = keel_k_attr_f(k, "beta", 0.0f);
  o.norm = keel_k_attr_f(k, "norm_coefficient", 0.0f);
  return optimizer(k, &o, "Momentum");
}

/* ============================================================ table */

#define TRAINING "ai.onnx.preview.training"
/* Element-type sets used in the table below. */
#define QUANT_IN (KEEL_TS_FLOAT | KEEL_T(KEEL_INT32))
#define DEQUANT_IN (KEEL_T(KEEL_INT8) | KEEL_T(KEEL_UINT8) | KEEL_T(KEEL_INT32))
const keel_opdef keel_ops_quant[] = {
    {"", "QuantizeLinear", 10, KEEL_OPSET_MAX, op_quantize_linear, 0, QUANT_IN},
    {"", "DequantizeLinear", 10, KEEL_OPSET_MAX, op_dequantize_linear, 0, DEQUANT_IN},
    {"", "DynamicQuantizeLinear", 11, KEEL_OPSET_MAX, op_dynamic_quantize_linear, 0, KEEL_TS_FLOAT},
    {TRAINING, "Adagrad", 1, KEEL_OPSET_MAX, op_adagrad, 0, KEEL_TS_FLOAT},
    {TRAINING, "Adam", 1, KEEL_OPSET_MAX, op_adam, 0, KEEL_TS_FLOAT},
    {TRAINING, "Momentum", 1, KEEL_OPSET_MAX, op_momentum, 0, KEEL_TS_FLOAT},
    {0},
};
#undef QUANT_IN
#undef DEQUANT_IN
