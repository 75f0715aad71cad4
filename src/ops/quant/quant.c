/* quant.c: linear quantization (QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear). The training optimizers of the domain
 * ai.onnx.preview.training are in ops/training/optimizer.c.
 *
 * Quantization maps x to int8/uint8 with y = saturate(round(x / scale) + zp),
 * rounding half to even (rint under the default rounding mode), and back
 * with y = (x - zp) * scale. A scale with one value is per-tensor; a 1-D
 * scale (opset 13) is per-axis along `axis`. Float-to-integer conversion is
 * always clamped first, with NaN mapped to the zero point, so no data can
 * reach C's undefined conversions.
 */
#include <math.h>

#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

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

static keel_status quantize_classic(keel_kctx *k) {
  const keel_tensor *x, *scale, *zp;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &scale));
  KEEL_TRY(keel_k_in_opt(k, 2, &zp));
  if (!is_float_like(x->dtype) && x->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "x must be float, double, float16 or int32, got %s",
                    dt_name(x->dtype));
  int ydt = zp ? zp->dtype : (int)keel_k_attr_i(k, "output_dtype", KEEL_UINT8);
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
static keel_status dequantize_classic(keel_kctx *k) {
  const keel_tensor *x, *scale, *zp;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &scale));
  KEEL_TRY(keel_k_in_opt(k, 2, &zp));
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

/* ============================================ the general quantizer */

/* Everything past the int8 / uint8 cases above (opsets 19-25): 16-, 4- and
 * 2-bit integers, float8 and float4, blocked scales (`block_size`),
 * `output_dtype` and `precision`. Per element it follows onnx.reference:
 * the division in the precision type (numpy's promotion of x and the scale
 * unless `precision` names one), rint, the zero point added, clipped to the
 * integer range; float8 outputs add the zero point and convert with
 * `saturate`, float4 always saturates. Dequantization subtracts the zero
 * point exactly and multiplies in float (double for double scales). */

/* Which scale entry element (o, c, i) of x, viewed as [outer, d, inner],
 * uses: o*so + (c/block)*sc + i*si. */
typedef struct qmap {
  int64_t outer, d, inner, block, so, sc, si;
  double *scale, *zp; /* one per scale entry; zp NULL when omitted */
  float *sf, *zf;     /* the same as float (zf zeros when omitted)  */
} qmap;

static bool quant_out_type(int t) {
  return t == KEEL_UINT8 || t == KEEL_INT8 || t == KEEL_UINT16 || t == KEEL_INT16 ||
         keel_dtype_is_small_int(t) || (keel_dtype_is_small_float(t) && t != KEEL_FLOAT8E8M0);
}

static bool scale_type(int t) { return is_float_like(t) || t == KEEL_FLOAT8E8M0 || t == KEEL_INT32; }

/* Per-tensor, per-axis or blocked, from the scale's shape and block_size. */
static keel_status qmap_layout(keel_kctx *k, const char *sname, const keel_tensor *x,
                               const keel_tensor *scale, qmap *q) {
  int64_t ns = keel_tensor_numel(scale), B = keel_k_attr_i(k, "block_size", 0);
  *q = (qmap){.outer = 1, .d = 1, .inner = keel_tensor_numel(x), .block = 1};
  if (B < 0) return keel_err(KEEL_ERR_INVALID_MODEL, "block_size %lld is negative", (long long)B);
  if (ns == 1 && (scale->rank <= 1 || B > 0)) return KEEL_OK;
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 1), x->rank, "axis", &axis));
  q->outer = keel_shape_numel(axis, x->shape);
  q->d = x->shape[axis];
  q->inner = keel_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
  if (B == 0) {
    if (scale->rank != 1 || ns != q->d)
      return keel_err(KEEL_ERR_SHAPE, "%s has shape of %lld values (rank %d): per-axis needs %lld "
                      "(axis %d); blocked quantization needs block_size", sname, (long long)ns,
                      scale->rank, (long long)q->d, axis);
    q->sc = 1;
    return KEEL_OK;
  }
  bool ok = scale->rank == x->rank;
  for (int d = 0; ok && d < x->rank; d++)
    ok = d == axis ? scale->shape[d] == (x->shape[d] + B - 1) / B : scale->shape[d] == x->shape[d];
  if (!ok) {
    char a[96], b[96];
    return keel_err(KEEL_ERR_SHAPE, "%s has shape %s: blocks of %lld along axis %d of %s need "
                    "ceil(dim/%lld) there and the same dims elsewhere", sname,
                    keel_shape_str(scale->rank, scale->shape, a, sizeof a), (long long)B, axis,
                    keel_shape_str(x->rank, x->shape, b, sizeof b), (long long)B);
  }
  q->block = B;
  q->so = scale->shape[axis] * q->inner;
  q->sc = q->inner;
  q->si = 1;
  return KEEL_OK;
}

static keel_status qmap_load(keel_kctx *k, const char *sname, const char *zname,
                             const keel_tensor *x, const keel_tensor *scale,
                             const keel_tensor *zp, qmap *q) {
  if (!scale_type(scale->dtype))
    return keel_err(KEEL_ERR_SHAPE, "%s is %s, not a float type", sname, dt_name(scale->dtype));
  int64_t ns = keel_tensor_numel(scale);
  if (zp && (keel_tensor_numel(zp) != ns || (ns != 1 && zp->rank != scale->rank)))
    return keel_err(KEEL_ERR_SHAPE, "%s and %s must have the same shape", zname, sname);
  KEEL_TRY(qmap_layout(k, sname, x, scale, q));
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, 3 * ns, sizeof(double), &p));
  q->scale = p;
  q->zp = zp ? q->scale + ns : NULL;
  q->sf = (float *)(q->scale + 2 * ns);
  q->zf = q->sf + ns;
  for (int64_t c = 0; c < ns; c++) {
    q->scale[c] = keel_elem_get_f64(scale->dtype, scale->data, (size_t)c);
    if (zp) q->zp[c] = keel_elem_get_f64(zp->dtype, zp->data, (size_t)c);
    q->sf[c] = (float)q->scale[c];
    q->zf[c] = zp ? (float)q->zp[c] : 0.0f;
  }
  return KEEL_OK;
}

/* The precision of the division: `precision` when given, else numpy's
 * promotion of x and the scale (half with half stays half; int32 data or a
 * double goes to double; the rest to float). */
static int quant_precision(keel_kctx *k, int xt, int st) {
  int64_t p = keel_k_attr_i(k, "precision", 0);
  if (p) return (int)p;
  if (st == KEEL_FLOAT8E8M0) st = KEEL_FLOAT;
  if (xt == KEEL_DOUBLE || st == KEEL_DOUBLE || xt == KEEL_INT32 || st == KEEL_INT32) return KEEL_DOUBLE;
  if (keel_is_half(xt) && xt == st) return xt;
  return KEEL_FLOAT;
}

static double quant_div(int prec, double x, double s) {
  if (prec == KEEL_DOUBLE) return x / s;
  float q = (float)x / (float)s;
  if (prec == KEEL_FLOAT16) return keel_f16_to_f32(keel_f32_to_f16(q));
  if (prec == KEEL_BFLOAT16) return keel_bf16_to_f32(keel_f32_to_bf16(q));
  return q;
}

static void int_range(int t, double *lo, double *hi) {
  switch (t) {
    case KEEL_UINT8: *lo = 0, *hi = 255; break;
    case KEEL_INT8: *lo = -128, *hi = 127; break;
    case KEEL_UINT16: *lo = 0, *hi = 65535; break;
    case KEEL_INT16: *lo = -32768, *hi = 32767; break;
    case KEEL_UINT4: *lo = 0, *hi = 15; break;
    case KEEL_INT4: *lo = -8, *hi = 7; break;
    case KEEL_UINT2: *lo = 0, *hi = 3; break;
    default: *lo = -2, *hi = 1; break; /* int2 */
  }
}

/* One quantized element: q = x / scale in the precision type. */
static void quant_store(int yt, void *y, size_t e, double q, double z, bool sat) {
  if (keel_dtype_is_small_float(yt)) {
    keel_small_put(yt, y, e, keel_small_encode(yt, q + z, sat, KEEL_ROUND_UP));
    return;
  }
  double lo, hi, r = rint(q);
  int_range(yt, &lo, &hi);
  double v = (r != r ? 0.0 : r) + z; /* NaN: the zero point, as above */
  int64_t iv = (int64_t)(v < lo ? lo : v > hi ? hi : v);
  if (keel_dtype_is_small(yt)) keel_small_put(yt, y, e, keel_small_encode_int(yt, iv));
  else keel_elem_set_i64(yt, y, e, iv);
}

static void quant_general(const keel_tensor *x, const qmap *q, int prec, bool sat, keel_tensor *y) {
  size_t e = 0;
  for (int64_t o = 0; o < q->outer; o++)
    for (int64_t c = 0; c < q->d; c++) {
      int64_t base = o * q->so + (c / q->block) * q->sc;
      for (int64_t i = 0; i < q->inner; i++, e++) {
        int64_t s = base + i * q->si;
        double xv = keel_elem_get_f64(x->dtype, x->data, e);
        quant_store(y->dtype, y->data, e, quant_div(prec, xv, q->scale[s]),
                    q->zp ? q->zp[s] : 0.0, sat);
      }
    }
}

/* float32 data, float precision, an integer output: the general loop's
 * arithmetic in float with the dispatch hoisted (r + zp only matters
 * inside the clip range, where it is exact). */
#define QF_LOOP(STORE)                                                                      \
  for (int64_t o = 0; o < q->outer; o++)                                                    \
    for (int64_t c = 0; c < q->d; c++) {                                                    \
      int64_t base = o * q->so + (c / q->block) * q->sc;                                    \
      for (int64_t i = 0; i < q->inner; i++, e++) {                                         \
        int64_t si = base + i * q->si;                                                      \
        float r = rintf(x[e] / q->sf[si]);                                                  \
        float v = (r != r ? 0.0f : r) + q->zf[si];                                          \
        int32_t iv = (int32_t)(v < lo ? lo : v > hi ? hi : v);                              \
        STORE;                                                                              \
      }                                                                                     \
    }

static void quant_fast_f32(const float *x, const qmap *q, int yt, void *y) {
  double dlo, dhi;
  int_range(yt, &dlo, &dhi);
  float lo = (float)dlo, hi = (float)dhi;
  size_t e = 0;
  switch (yt) {
    case KEEL_UINT8: QF_LOOP(((uint8_t *)y)[e] = (uint8_t)iv) break;
    case KEEL_INT8: QF_LOOP(((int8_t *)y)[e] = (int8_t)iv) break;
    case KEEL_UINT16: QF_LOOP(((uint16_t *)y)[e] = (uint16_t)iv) break;
    case KEEL_INT16: QF_LOOP(((int16_t *)y)[e] = (int16_t)iv) break;
    default: QF_LOOP(keel_small_put(yt, y, e, keel_small_encode_int(yt, iv))) break;
  }
}
#undef QF_LOOP

static keel_status quantize_general(keel_kctx *k, const keel_tensor *x, const keel_tensor *scale,
                                    const keel_tensor *zp, int ydt) {
  if (!quant_out_type(ydt))
    return keel_err(KEEL_ERR_SHAPE, "cannot quantize to %s (y_zero_point / output_dtype)", dt_name(ydt));
  int prec = quant_precision(k, x->dtype, scale->dtype);
  if (!is_float_like(prec))
    return keel_err(KEEL_ERR_INVALID_MODEL, "precision %d is not a float type", prec);
  qmap q;
  KEEL_TRY(qmap_load(k, "y_scale", "y_zero_point", x, scale, zp, &q));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, ydt, x->rank, x->shape, &y));
  if (x->dtype == KEEL_FLOAT && prec == KEEL_FLOAT && !keel_dtype_is_small_float(ydt))
    quant_fast_f32(x->data, &q, ydt, y->data);
  else
    quant_general(x, &q, prec, keel_k_attr_i(k, "saturate", 1) != 0, y);
  return KEEL_OK;
}

static keel_status op_quantize_linear(keel_kctx *k) {
  const keel_tensor *x, *scale, *zp;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &scale));
  KEEL_TRY(keel_k_in_opt(k, 2, &zp));
  if (!is_float_like(x->dtype) && x->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "x must be float, double, float16, bfloat16 or int32, got %s",
                    dt_name(x->dtype));
  int64_t odt = keel_k_attr_i(k, "output_dtype", 0); /* opset 21; 0: from the zero point */
  if (zp && odt && odt != zp->dtype)
    return keel_err(KEEL_ERR_INVALID_MODEL, "output_dtype %lld differs from y_zero_point's %s",
                    (long long)odt, dt_name(zp->dtype));
  int ydt = zp ? zp->dtype : odt ? (int)odt : KEEL_UINT8;
  bool classic = (ydt == KEEL_UINT8 || ydt == KEEL_INT8) && is_float_like(scale->dtype) &&
                 !keel_k_attr_i(k, "block_size", 0) && !keel_k_attr_i(k, "precision", 0);
  return classic ? quantize_classic(k) : quantize_general(k, x, scale, zp, ydt);
}

/* ---------------------------------------------------- dequantization */

static void dequant_general(const keel_tensor *x, const qmap *q, bool dbl, void *y) {
  size_t e = 0;
  for (int64_t o = 0; o < q->outer; o++)
    for (int64_t c = 0; c < q->d; c++) {
      int64_t base = o * q->so + (c / q->block) * q->sc;
      for (int64_t i = 0; i < q->inner; i++, e++) {
        int64_t s = base + i * q->si;
        double dx = keel_elem_get_f64(x->dtype, x->data, e) - (q->zp ? q->zp[s] : 0.0);
        if (dbl) ((double *)y)[e] = dx * q->scale[s];
        else ((float *)y)[e] = (float)dx * (float)q->scale[s];
      }
    }
}

/* Float output from x of at most 16 bits, the type dispatch hoisted: each
 * code's value from a table (8 bits and fewer) or read typed (16 bits);
 * the scale and zero point hoisted per row unless blocks vary along it.
 * x - zp is exact in float (integers of at most 16 bits; float8 with the
 * zero point 0 the reference requires), then one float multiply, as the
 * general loop computes it. */
#define DEQ_LOOP(GET)                                                                       \
  for (int64_t o = 0; o < q->outer; o++)                                                    \
    for (int64_t c = 0; c < q->d; c++) {                                                    \
      int64_t base = o * q->so + (c / q->block) * q->sc;                                    \
      if (q->si == 0) {                                                                     \
        float s = q->sf[base], z = q->zf[base];                                             \
        for (int64_t i = 0; i < q->inner; i++, e++) y[e] = (GET - z) * s;                   \
      } else {                                                                              \
        for (int64_t i = 0; i < q->inner; i++, e++)                                         \
          y[e] = (GET - q->zf[base + i]) * q->sf[base + i];                                 \
      }                                                                                     \
    }

static void dequant_fast(const keel_tensor *x, const qmap *q, float *y) {
  size_t e = 0;
  const uint8_t *p = x->data;
  int t = x->dtype, bits = keel_dtype_bits((keel_dtype)t);
  if (t == KEEL_INT16 || t == KEEL_UINT16) {
    const int16_t *s16 = x->data;
    const uint16_t *u16 = x->data;
    if (t == KEEL_INT16) DEQ_LOOP((float)s16[e])
    else DEQ_LOOP((float)u16[e])
    return;
  }
  float lut[256];
  for (unsigned c = 0; c < (1u << bits); c++)
    lut[c] = keel_dtype_is_small(t) ? (float)keel_small_decode(t, c)
                                    : t == KEEL_INT8 ? (float)(int8_t)c : (float)c;
  if (bits == 8) DEQ_LOOP(lut[p[e]])
  else if (bits == 4) DEQ_LOOP(lut[(p[e >> 1] >> ((e & 1) << 2)) & 15u])
  else DEQ_LOOP(lut[(p[e >> 2] >> ((e & 3) << 1)) & 3u])
}
#undef DEQ_LOOP

static bool dequant_in_type(int t) {
  return t == KEEL_UINT8 || t == KEEL_INT8 || t == KEEL_UINT16 || t == KEEL_INT16 ||
         t == KEEL_INT32 || keel_dtype_is_small_int(t) ||
         (keel_dtype_is_small_float(t) && t != KEEL_FLOAT8E8M0);
}

static keel_status dequantize_general(keel_kctx *k, const keel_tensor *x, const keel_tensor *scale,
                                      const keel_tensor *zp, int ydt) {
  if (!is_float_like(ydt))
    return keel_err(KEEL_ERR_INVALID_MODEL, "DequantizeLinear cannot produce %s (output_dtype or "
                    "x_scale's type)", dt_name(ydt));
  qmap q;
  KEEL_TRY(qmap_load(k, "x_scale", "x_zero_point", x, scale, zp, &q));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, ydt, x->rank, x->shape, &y));
  bool fast = keel_dtype_bits((keel_dtype)x->dtype) <= 16;
  if (ydt == KEEL_FLOAT || ydt == KEEL_DOUBLE) {
    if (fast && ydt == KEEL_FLOAT) dequant_fast(x, &q, y->data);
    else dequant_general(x, &q, ydt == KEEL_DOUBLE, y->data);
    return KEEL_OK;
  }
  void *p; /* float16 / bfloat16: computed in float, rounded once */
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(x), sizeof(float), &p));
  if (fast) dequant_fast(x, &q, p);
  else dequant_general(x, &q, false, p);
  keel_f32_store(p, y);
  return KEEL_OK;
}

static keel_status op_dequantize_linear(keel_kctx *k) {
  const keel_tensor *x, *scale, *zp;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &scale));
  KEEL_TRY(keel_k_in_opt(k, 2, &zp));
  if (!dequant_in_type(x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "x cannot be %s", dt_name(x->dtype));
  if (zp && zp->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "x_zero_point is %s but x is %s: they must match",
                    dt_name(zp->dtype), dt_name(x->dtype));
  int ydt = (int)keel_k_attr_i(k, "output_dtype", scale->dtype); /* opset 23 */
  bool classic = (x->dtype == KEEL_UINT8 || x->dtype == KEEL_INT8 || x->dtype == KEEL_INT32) &&
                 ydt == scale->dtype && is_float_like(ydt) && !keel_k_attr_i(k, "block_size", 0);
  return classic ? dequantize_classic(k) : dequantize_general(k, x, scale, zp, ydt);
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

/* ============================================================ table */

/* Element-type sets used in the table below. */
#define QUANT_IN (KEEL_TS_FLOAT | KEEL_T(KEEL_INT32) | KEEL_TS_SMALL) /* zero point and y */
#define DEQUANT_IN (KEEL_T(KEEL_INT8) | KEEL_T(KEEL_UINT8) | KEEL_T(KEEL_INT16) | \
                    KEEL_T(KEEL_UINT16) | KEEL_T(KEEL_INT32) | KEEL_TS_SMALL)
const keel_opdef keel_ops_quant[] = {
    {"", "QuantizeLinear", 10, KEEL_OPSET_MAX, op_quantize_linear, 0, QUANT_IN},
    {"", "DequantizeLinear", 10, KEEL_OPSET_MAX, op_dequantize_linear, 0, DEQUANT_IN},
    {"", "DynamicQuantizeLinear", 11, KEEL_OPSET_MAX, op_dynamic_quantize_linear, 0, KEEL_TS_FLOAT},
    {0},
};
#undef QUANT_IN
#undef DEQUANT_IN
