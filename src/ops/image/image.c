/* image.c: the image family: Resize (opsets 10 to 19), Upsample (1 to 9,
 * kept running past its deprecation at 10), GridSample (16; 20 and 22 with
 * 5-D input too), AffineGrid (20), RoiAlign (10 and 16) and
 * NonMaxSuppression (10 and 11).
 *
 * Resize follows ONNX's reference implementation (resize.py): it is
 * separable, each axis mapping output coordinates to input ones on its
 * own, so one table per axis lists the input taps and weights of every
 * output index. Nearest then gathers one element per output through
 * those tables (any element type: it only moves data); linear and cubic
 * run one 1-D pass per resized axis, last axis first, which is exactly
 * the reference's nesting order. Edge samples are clamped (the
 * reference's edge padding) and tf_crop_and_resize marks outputs whose
 * coordinate leaves the crop, which take extrapolation_value.
 *
 * Interpolating kernels compute in float (float, float16, bfloat16) or
 * double (double and integer data, which round to nearest and saturate on
 * the way out). Coordinates are always computed in double.
 */
#include <math.h>
#include <stdlib.h>

#include "base/pool.h"
#include "ops/common/bcast.h"
#include "ops/image/image_gpu.h"
#include "ops/image/resize.h"

/* ================================================== shared helpers */

/* Index of s in the NULL-terminated names, or -1. */
static int img_pick(const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

/* Scratch for n elements of `dtype`, with the byte count checked. */
static keel_status img_scratch(keel_kctx *k, int64_t n, int dtype, void **p) {
  size_t bytes;
  if (n < 0 || keel_mul_ovf((size_t)n, keel_dtype_size((keel_dtype)dtype), &bytes))
    return keel_err(KEEL_ERR_SHAPE, "%lld elements of scratch overflow", (long long)n);
  return keel_k_scratch(k, bytes, p);
}

/* The type interpolation runs in: float for float and the halves, double
 * for double and integers (exact up to 2^53). */
static int img_ctype(int dt) {
  return dt == KEEL_FLOAT || keel_is_half(dt) ? KEEL_FLOAT : KEEL_DOUBLE;
}

/* t as a tensor of the compute type ct: t itself when it already is one,
 * else a converted copy in scratch. */
static keel_status img_stage(keel_kctx *k, const keel_tensor *t, int ct, keel_tensor *out) {
  *out = *t;
  if (t->dtype == ct) return KEEL_OK;
  if (keel_is_half(t->dtype) && ct == KEEL_FLOAT) return keel_k_to_f32(k, t, out);
  int64_t n = keel_tensor_numel(t);
  void *p;
  KEEL_TRY(img_scratch(k, n, ct, &p));
  for (int64_t i = 0; i < n; i++)
    keel_elem_set_f64(ct, p, (size_t)i, keel_elem_get_f64(t->dtype, t->data, (size_t)i));
  out->buf = NULL; /* scratch: owned by the kernel context */
  out->data = p;
  out->dtype = ct;
  return KEEL_OK;
}

/* Writes compute-type data into dst: halves round to nearest even,
 * integers round half to even and saturate. */
static void img_store(const void *src, int ct, keel_tensor *dst) {
  if (keel_is_half(dst->dtype) && ct == KEEL_FLOAT) {
    keel_f32_store(src, dst);
    return;
  }
  int64_t n = keel_tensor_numel(dst);
  bool round = keel_dtype_is_int(dst->dtype);
  for (int64_t i = 0; i < n; i++) {
    double v = keel_elem_get_f64(ct, src, (size_t)i);
    keel_elem_set_f64(dst->dtype, dst->data, (size_t)i, round ? nearbyint(v) : v);
  }
}

/* Element i of float or double data. The branch is the same for a whole
 * loop, so it costs little next to a second copy of every kernel. */
static inline double img_ld(const void *p, int ct, int64_t i) {
  return ct == KEEL_FLOAT ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static inline void img_st(void *p, int ct, int64_t i, double v) {
  if (ct == KEEL_FLOAT) ((float *)p)[i] = (float)v;
  else ((double *)p)[i] = v;
}

/* Where a kernel writes its float/double results: y itself, or scratch
 * that img_finish() converts into y. */
static keel_status img_out_data(keel_kctx *k, keel_tensor *y, int ct, void **p) {
  if (y->dtype == ct) {
    *p = y->data;
    return KEEL_OK;
  }
  return img_scratch(k, keel_tensor_numel(y), ct, p);
}
static void img_finish(const void *p, int ct, keel_tensor *y) {
  if (p != y->data) img_store(p, ct, y);
}

/* Optional list input i (scales, sizes, roi): NULL and 0 values when it is
 * omitted or empty, which is how ONNX leaves them out. */
static keel_status img_in_list(keel_kctx *k, int i, const char *what, const keel_tensor **t,
                               int64_t *n) {
  KEEL_TRY(keel_k_in_opt(k, i, t));
  *n = *t ? keel_tensor_numel(*t) : 0;
  if (*n && ((*t)->dtype == KEEL_STRING || (*t)->dtype == KEEL_BOOL))
    return keel_err(KEEL_ERR_SHAPE, "%s must be numeric, got %s", what,
                    keel_dtype_name((keel_dtype)(*t)->dtype));
  return KEEL_OK;
}

/* Up to KEEL_MAX_RANK values of a list input as doubles. */
static void img_list_f64(const keel_tensor *t, int64_t n, double *v) {
  for (int64_t i = 0; i < n && i < KEEL_MAX_RANK; i++)
    v[i] = keel_elem_get_f64(t->dtype, t->data, (size_t)i);
}

/* Keys's cubic convolution kernel with parameter a (Resize's cubic_coeff_a;
 * GridSample fixes it at -0.75). */
static double img_cubic(double u, double a) {
  u = fabs(u);
  if (u <= 1) return ((a + 2) * u - (a + 3)) * u * u + 1;
  if (u < 2) return ((a * u - 5 * a) * u + 8 * a) * u - 4 * a;
  return 0;
}

/* =================================================== Resize: plan */

typedef keel_rs_plan rs_plan;
typedef keel_rs_tab rs_tab;

/* Identity on every axis; Resize and Upsample then fill in what they read. */
static void rs_init(rs_plan *p, const keel_tensor *x, const char *op) {
  memset(p, 0, sizeof *p);
  p->op = op;
  p->rank = x->rank;
  p->cubic_a = -0.75;
  for (int d = 0; d < x->rank; d++) {
    p->in[d] = p->out[d] = x->shape[d];
    p->scale[d] = 1;
    p->roi1[d] = 1;
  }
}

static keel_status rs_attrs(keel_kctx *k, rs_plan *p) {
  static const char *const modes[] = {"nearest", "linear", "cubic", NULL};
  static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                     "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize",
                                     "half_pixel_symmetric", NULL};
  static const char *const nmodes[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                       "ceil", NULL};
  int64_t opset = keel_k_opset(k);
  const char *m = keel_k_attr_s(k, "mode", "nearest");
  p->mode = img_pick(m, modes);
  if (p->mode < 0 || (opset < 11 && p->mode == RS_CUBIC))
    return keel_err(KEEL_ERR_INVALID_MODEL, "Resize: mode '%s' is not nearest, linear%s", m,
                    opset < 11 ? "" : " or cubic");
  if (opset < 11) { /* before the attributes existed: asymmetric, floor/ceil */
    p->ctm = CT_ASYM;
    p->nmode = NM_SIMPLE;
    return KEEL_OK;
  }
  const char *c = keel_k_attr_s(k, "coordinate_transformation_mode", "half_pixel");
  if ((p->ctm = img_pick(c, ctms)) < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Resize: unknown coordinate_transformation_mode '%s'", c);
  const char *n = keel_k_attr_s(k, "nearest_mode", "round_prefer_floor");
  if ((p->nmode = img_pick(n, nmodes)) < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Resize: unknown nearest_mode '%s'", n);
  p->cubic_a = keel_k_attr_f(k, "cubic_coeff_a", -0.75f);
  p->exclude = keel_k_attr_i(k, "exclude_outside", 0) != 0;
  p->extrap = keel_k_attr_f(k, "extrapolation_value", 0.0f);
  p->antialias = opset >= 18 && keel_k_attr_i(k, "antialias", 0) != 0;
  return KEEL_OK;
}

/* ========================================= Resize: output geometry */

/* The axes that scales, sizes and roi list (opset 18's `axes`; all of
 * them otherwise). */
static keel_status rs_axes(keel_kctx *k, int rank, int *axes, int *na) {
  int n = 0;
  const int64_t *a = keel_k_opset(k) >= 18 ? keel_k_attr_ints(k, "axes", &n) : NULL;
  if (!a || n == 0) {
    for (int i = 0; i < rank; i++) axes[i] = i;
    *na = rank;
    return KEEL_OK;
  }
  if (n > rank)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Resize: axes has %d values for a rank-%d input", n, rank);
  bool seen[KEEL_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    KEEL_TRY(keel_k_axis(a[i], rank, "Resize: axes value", &axes[i]));
    if (seen[axes[i]])
      return keel_err(KEEL_ERR_INVALID_MODEL, "Resize: axis %d appears twice in axes", axes[i]);
    seen[axes[i]] = true;
  }
  *na = n;
  return KEEL_OK;
}

/* Output dims floor(in * scale), as the reference computes them (roi does
 * not shrink them, as in onnxruntime). n is the count given; s holds the
 * values when it is right. */
static keel_status rs_set_scales(rs_plan *p, const double *s, int64_t n, const int *axes,
                                 int na) {
  if (n != na)
    return keel_err(KEEL_ERR_SHAPE, "%s: scales has %lld values for a rank-%d input%s", p->op,
                    (long long)n, p->rank, na == p->rank ? "" : " (and the listed axes)");
  for (int i = 0; i < na; i++) {
    int d = axes[i];
    if (!(s[i] > 0) || !isfinite(s[i]))
      return keel_err(KEEL_ERR_SHAPE, "%s: scales[%d] = %g must be positive and finite", p->op, i,
                      s[i]);
    double o = floor(s[i] * (double)p->in[d]);
    if (o >= RS_DIM_MAX)
      return keel_err(KEEL_ERR_SHAPE, "%s: scales[%d] = %g makes axis %d too large", p->op, i,
                      s[i], d);
    p->scale[d] = s[i];
    p->out[d] = (int64_t)o;
  }
  return KEEL_OK;
}

/* keep_aspect_ratio_policy (opset 18): one scale for all listed axes, the
 * smallest (not_larger) or largest (not_smaller) of sizes / in, and
 * output dims rounded half up. */
static keel_status rs_keep_aspect(rs_plan *p, const int64_t *want, const int *axes, int na,
                                  bool larger) {
  double s = larger ? 0 : INFINITY;
  for (int i = 0; i < na; i++) {
    if (p->in[axes[i]] == 0) continue; /* stays 0 whatever the scale */
    double r = (double)want[i] / (double)p->in[axes[i]];
    s = larger ? fmax(s, r) : fmin(s, r);
  }
  if (!isfinite(s)) s = 1;
  for (int i = 0; i < na; i++) {
    int d = axes[i];
    double o = floor(s * (double)p->in[d] + 0.5);
    if (o >= RS_DIM_MAX) return keel_err(KEEL_ERR_SHAPE, "Resize: axis %d grows too large", d);
    p->scale[d] = s;
    p->out[d] = (int64_t)o;
  }
  return KEEL_OK;
}

static keel_status rs_set_sizes(keel_kctx *k, rs_plan *p, const keel_tensor *t, int64_t n,
                                const int *axes, int na) {
  if (t->dtype != KEEL_INT64 && t->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "Resize: sizes must be int64, got %s",
                    keel_dtype_name((keel_dtype)t->dtype));
  if (n != na)
    return keel_err(KEEL_ERR_SHAPE, "Resize: sizes has %lld values for a rank-%d input%s",
                    (long long)n, p->rank, na == p->rank ? "" : " (and the listed axes)");
  int64_t want[KEEL_MAX_RANK];
  for (int i = 0; i < na; i++) {
    want[i] = keel_elem_get_i64(t->dtype, t->data, (size_t)i);
    if (want[i] < 0)
      return keel_err(KEEL_ERR_SHAPE, "Resize: sizes[%d] = %lld is negative", i, (long long)want[i]);
  }
  const char *pol = keel_k_opset(k) >= 18
                        ? keel_k_attr_s(k, "keep_aspect_ratio_policy", "stretch") : "stretch";
  if (!strcmp(pol, "not_larger") || !strcmp(pol, "not_smaller"))
    return rs_keep_aspect(p, want, axes, na, !strcmp(pol, "not_smaller"));
  if (strcmp(pol, "stretch"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "Resize: unknown keep_aspect_ratio_policy '%s'", pol);
  for (int i = 0; i < na; i++) {
    int d = axes[i];
    p->out[d] = want[i];
    p->scale[d] = p->in[d] ? (double)want[i] / (double)p->in[d] : 1;
  }
  return KEEL_OK;
}

/* roi: starts then ends of the listed axes; empty means the whole input. */
static keel_status rs_set_roi(keel_kctx *k, rs_plan *p, const int *axes, int na) {
  const keel_tensor *t;
  int64_t n;
  KEEL_TRY(img_in_list(k, 1, "Resize: roi", &t, &n));
  if (n == 0) return KEEL_OK;
  if (n != 2 * na)
    return keel_err(KEEL_ERR_SHAPE, "Resize: roi has %lld values, expected %d (starts, then ends)",
                    (long long)n, 2 * na);
  for (int i = 0; i < na; i++) {
    p->roi0[axes[i]] = keel_elem_get_f64(t->dtype, t->data, (size_t)i);
    p->roi1[axes[i]] = keel_elem_get_f64(t->dtype, t->data, (size_t)(na + i));
  }
  return KEEL_OK;
}

/* Output dims and scales from Resize's inputs: (X, scales) at opset 10,
 * (X, roi, scales, sizes) from 11, exactly one of scales and sizes given. */
static keel_status rs_geometry(keel_kctx *k, rs_plan *p) {
  int axes[KEEL_MAX_RANK], na;
  KEEL_TRY(rs_axes(k, p->rank, axes, &na));
  bool v10 = keel_k_opset(k) < 11;
  const keel_tensor *sc, *sz = NULL;
  int64_t nsc, nsz = 0;
  KEEL_TRY(img_in_list(k, v10 ? 1 : 2, "Resize: scales", &sc, &nsc));
  if (!v10) KEEL_TRY(img_in_list(k, 3, "Resize: sizes", &sz, &nsz));
  if (nsc && nsz) return keel_err(KEEL_ERR_SHAPE, "Resize: give scales or sizes, not both");
  if (!nsc && !nsz) return keel_err(KEEL_ERR_SHAPE, "Resize: needs scales or sizes (both are empty)");
  if (nsz) KEEL_TRY(rs_set_sizes(k, p, sz, nsz, axes, na));
  else {
    double s[KEEL_MAX_RANK];
    img_list_f64(sc, nsc, s);
    KEEL_TRY(rs_set_scales(p, s, nsc, axes, na));
  }
  return p->ctm == CT_CROP ? rs_set_roi(k, p, axes, na) : KEEL_OK;
}

/* ========================================= Resize: coordinate tables */

/* x_original of output index x on axis d, with the reference's formulas:
 * align_corners and tf_crop_and_resize divide by the float output length
 * scale * in, and a length-1 output uses the spec's special values. False
 * when tf_crop_and_resize's crop leaves the input. */
static bool rs_coord(const rs_plan *p, int d, int64_t x, double *xo) {
  double in = (double)p->in[d], s = p->scale[d], ow = s * in, xf = (double)x, v;
  bool one = p->out[d] == 1;
  switch (p->ctm) {
    case CT_ALIGN: v = one ? 0 : xf * (in - 1) / (ow - 1); break;
    case CT_ASYM: v = xf / s; break;
    case CT_TF_NN: v = (xf + 0.5) / s; break;
    case CT_PYTORCH: v = one ? 0 : (xf + 0.5) / s - 0.5; break;
    case CT_SYMMETRIC: /* half_pixel, centred when out / scale is not an integer */
      v = in / 2 * (1 - (double)p->out[d] / ow) + (xf + 0.5) / s - 0.5;
      break;
    case CT_CROP: {
      double r0 = p->roi0[d], r1 = p->roi1[d];
      v = one ? (r1 - r0) * (in - 1) / 2 : xf * (r1 - r0) * (in - 1) / (ow - 1);
      v += r0 * (in - 1);
      if (!(v >= 0 && v <= in - 1)) return false; /* NaN too */
      break;
    }
    default: v = (xf + 0.5) / s - 0.5; break;
  }
  /* keep floor() within int64 whatever the scale or roi (NaN included) */
  double lim = 4 * in + 8;
  *xo = v >= -lim ? (v <= lim ? v : lim) : -lim;
  return true;
}

static int64_t rs_clamp(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* The nearest input index to x under nearest_mode. */
static int64_t rs_round(const rs_plan *p, int d, double x) {
  double f = floor(x), r = x - f;
  int64_t i = (int64_t)f;
  if (r != 0) switch (p->nmode) {
      case NM_FLOOR_PREF: i += r > 0.5; break;
      case NM_CEIL_PREF: i += r >= 0.5; break;
      case NM_CEIL: i += 1; break;
      case NM_SIMPLE: i += p->scale[d] < 1; break;
      default: break; /* floor */
    }
  return rs_clamp(i, p->in[d]);
}

static double rs_weight(const rs_plan *p, double u) {
  if (p->mode == RS_CUBIC) return img_cubic(u, p->cubic_a);
  u = fabs(u);
  return u < 1 ? 1 - u : 0;
}

keel_status keel_resize_taps(const rs_plan *p, int d, rs_tab *t) {
  t->n = 1, t->start = 0, t->seff = 1, t->any_oob = false;
  if (p->mode == RS_NEAREST) return KEEL_OK;
  double radius = p->mode == RS_CUBIC ? 2 : 1;
  if (p->antialias && p->scale[d] < 1) t->seff = p->scale[d];
  double start = floor(-radius / t->seff) + 1;
  /* out >= 1 keeps scale >= 1 / (2 in), so this only catches nonsense */
  if (start < -4.0 * (double)p->in[d] - 8)
    return keel_err(KEEL_ERR_SHAPE, "%s: axis %d shrinks too far to antialias", p->op, d);
  t->start = (int64_t)start;
  t->n = 2 - 2 * t->start;
  return KEEL_OK;
}

/* Weights of one output: the reference takes the taps left of an integer
 * coordinate (ratio 1, not 0); exclude_outside drops taps off the axis
 * and antialias normalizes, both rescaling to a sum of 1. */
static void rs_filter_row(const rs_plan *p, int d, const rs_tab *t, double x, int64_t *idx,
                          double *w) {
  double f = floor(x), r = x - f, sum = 0;
  if (r == 0) f -= 1, r = 1;
  int64_t base = (int64_t)f + t->start, in = p->in[d];
  for (int64_t q = 0; q < t->n; q++) {
    int64_t pos = base + q;
    double wq = rs_weight(p, ((double)(t->start + q) - r) * t->seff);
    if (p->exclude && (pos < 0 || pos >= in)) wq = 0;
    idx[q] = rs_clamp(pos, in);
    w[q] = wq;
    sum += wq;
  }
  if ((p->antialias || p->exclude) && sum != 0)
    for (int64_t q = 0; q < t->n; q++) w[q] /= sum;
}

/* True when the table maps output j to input j with weight 1. */
static bool rs_is_identity(const rs_plan *p, int d, const rs_tab *t) {
  if (p->out[d] != p->in[d]) return false;
  for (int64_t j = 0; j < p->out[d]; j++) {
    if (t->oob[j]) return false;
    double on = 0;
    for (int64_t q = 0; q < t->n; q++) {
      double wq = t->w ? t->w[j * t->n + q] : 1;
      if (t->idx[j * t->n + q] == j) on += wq;
      else if (wq != 0) return false;
    }
    if (on != 1) return false;
  }
  return true;
}

void keel_resize_fill(const rs_plan *p, int d, rs_tab *t) {
  for (int64_t j = 0; j < p->out[d]; j++) {
    double x = 0;
    int64_t *idx = t->idx + j * t->n;
    t->oob[j] = !rs_coord(p, d, j, &x);
    t->any_oob |= t->oob[j];
    if (t->oob[j]) {
      for (int64_t q = 0; q < t->n; q++) idx[q] = 0;
      if (t->w)
        for (int64_t q = 0; q < t->n; q++) t->w[j * t->n + q] = 0;
    } else if (p->mode == RS_NEAREST) {
      idx[0] = rs_round(p, d, x);
    } else {
      rs_filter_row(p, d, t, x, idx, t->w + j * t->n);
    }
  }
  t->identity = rs_is_identity(p, d, t);
}

/* Every axis's table, carved from one scratch block. */
static keel_status rs_tables(keel_kctx *k, const rs_plan *p, rs_tab *tabs) {
  size_t total = 0, sz[KEEL_MAX_RANK];
  size_t per = sizeof(int64_t) + (p->mode == RS_NEAREST ? 0 : sizeof(double));
  for (int d = 0; d < p->rank; d++) {
    KEEL_TRY(keel_resize_taps(p, d, &tabs[d]));
    size_t cells;
    if (keel_mul_ovf((size_t)p->out[d], (size_t)tabs[d].n, &cells) ||
        keel_mul_ovf(cells, per, &sz[d]) || keel_add_ovf(sz[d], (size_t)p->out[d] + 7, &sz[d]) ||
        keel_add_ovf(total, sz[d] & ~(size_t)7, &total))
      return keel_err(KEEL_ERR_SHAPE, "%s: the tables for axis %d overflow", p->op, d);
  }
  void *blk;
  KEEL_TRY(keel_k_scratch(k, total, &blk));
  uint8_t *at = blk;
  for (int d = 0; d < p->rank; d++) {
    rs_tab *t = &tabs[d];
    size_t cells = (size_t)p->out[d] * (size_t)t->n;
    t->idx = (int64_t *)at;
    t->w = p->mode == RS_NEAREST ? NULL : (double *)(at + cells * sizeof(int64_t));
    t->oob = at + cells * per;
    at += sz[d] & ~(size_t)7; /* sz[d] was rounded up to a multiple of 8 */
    keel_resize_fill(p, d, t);
  }
  return KEEL_OK;
}

/* ============================================ Resize: nearest gather */

/* One output row (last axis) of a fixed-size element type. */
#define RS_ROW(T)                                                          \
  do {                                                                     \
    const T *s = (const T *)x->data + base;                                \
    T *o = (T *)y->data + q * row, f;                                      \
    memcpy(&f, fill, sizeof f);                                            \
    if (!oob && !last->any_oob)                                            \
      for (int64_t j = 0; j < row; j++) o[j] = s[last->idx[j]];            \
    else                                                                   \
      for (int64_t j = 0; j < row; j++)                                    \
        o[j] = (oob || last->oob[j]) ? f : s[last->idx[j]];                \
  } while (0)

static keel_status rs_copy_row(const keel_tensor *x, keel_tensor *y, const rs_tab *last,
                               int64_t q, int64_t row, int64_t base, bool oob,
                               const uint8_t *fill) {
  size_t es = keel_dtype_size((keel_dtype)x->dtype);
  if (x->dtype == KEEL_STRING) { /* extrapolated strings stay empty */
    for (int64_t j = 0; j < row; j++)
      if (!oob && !last->oob[j])
        KEEL_TRY(keel_tensor_copy_elems(y, q * row + j, x, base + last->idx[j], 1));
    return KEEL_OK;
  }
  switch (es) {
    case 1: RS_ROW(uint8_t); break;
    case 2: RS_ROW(uint16_t); break;
    case 4: RS_ROW(uint32_t); break;
    case 8: RS_ROW(uint64_t); break;
    default: /* complex128 */
      for (int64_t j = 0; j < row; j++) {
        uint8_t *o = (uint8_t *)y->data + (size_t)(q * row + j) * es;
        if (oob || last->oob[j]) memset(o, 0, es);
        else memcpy(o, (const uint8_t *)x->data + (size_t)(base + last->idx[j]) * es, es);
      }
  }
  return KEEL_OK;
}

/* Nearest: each output copies one input element, found by adding the
 * axes' offsets (table index * input stride); rows along the last axis. */
typedef struct rs_gctx {
  const rs_plan *p;
  const rs_tab *tabs;
  const keel_tensor *x;
  keel_tensor *y;
  int64_t blk[KEEL_MAX_RANK];  /* output elements per index of axis d  */
  uint8_t fill[16];            /* extrapolation_value as one element of y */
  int run_axis;                /* the last resized axis when the axes after
                                  it are all unresized (NHWC's C): one
                                  contiguous run per index there; else -1 */
  size_t es;                   /* bytes per element (run mode)            */
} rs_gctx;

/* Axis run_axis: each output index copies one contiguous run of blk
 * elements (every axis after it unresized), or repeats the run just
 * written, or fills it with extrapolation_value. */
static void rs_runs(const rs_gctx *g, int64_t base, bool oob, int64_t yoff) {
  int d = g->run_axis;
  const rs_tab *t = &g->tabs[d];
  size_t es = g->es, run = (size_t)g->blk[d] * es;
  const uint8_t *x = g->x->data;
  uint8_t *y = (uint8_t *)g->y->data + (size_t)yoff * es;
  for (int64_t j = 0; j < g->p->out[d]; j++, y += run) {
    if (j > 0 && t->idx[j] == t->idx[j - 1] && t->oob[j] == t->oob[j - 1]) {
      memcpy(y, y - run, run);
    } else if (oob || t->oob[j]) {
      for (size_t b = 0; b < run; b += es) memcpy(y + b, g->fill, es);
    } else {
      memcpy(y, x + (size_t)(base + t->idx[j]) * es, run);
    }
  }
}

/* The output block at yoff for axis d onwards. An index that repeats the
 * previous one on its axis (upsampling) repeats the block just written:
 * one copy instead of a row-by-row gather, which made large nearest
 * upsamples with short rows take seconds per call. */
static keel_status rs_gather_at(const rs_gctx *g, int d, int64_t base, bool oob, int64_t yoff) {
  const rs_tab *t = &g->tabs[d];
  int64_t row = g->p->out[g->p->rank - 1];
  if (d == g->run_axis) {
    rs_runs(g, base, oob, yoff);
    return KEEL_OK;
  }
  if (d == g->p->rank - 1) return rs_copy_row(g->x, g->y, t, yoff / row, row, base, oob, g->fill);
  for (int64_t j = 0; j < g->p->out[d]; j++, yoff += g->blk[d]) {
    if (j > 0 && t->idx[j] == t->idx[j - 1] && t->oob[j] == t->oob[j - 1])
      KEEL_TRY(keel_tensor_copy_elems(g->y, yoff, g->y, yoff - g->blk[d], g->blk[d]));
    else
      KEEL_TRY(rs_gather_at(g, d + 1, base + t->idx[j], oob || t->oob[j], yoff));
  }
  return KEEL_OK;
}

/* Tasks [t0, t1) of the first two axes' out[0] x out[1] blocks (an image's
 * channel planes, for NCHW): each gathers its block from axis 2 on. */
static keel_status rs_gather_planes(void *ctx, int64_t t0, int64_t t1, int worker) {
  const rs_gctx *g = ctx;
  const rs_tab *a = &g->tabs[0], *b = &g->tabs[1];
  int64_t n1 = g->p->out[1];
  (void)worker;
  for (int64_t t = t0; t < t1; t++) {
    int64_t j0 = t / n1, j1 = t % n1;
    KEEL_TRY(rs_gather_at(g, 2, a->idx[j0] + b->idx[j1], a->oob[j0] || b->oob[j1],
                          j0 * g->blk[0] + j1 * g->blk[1]));
  }
  return KEEL_OK;
}

static keel_status rs_gather(keel_kctx *k, const rs_plan *p, rs_tab *tabs, const keel_tensor *x,
                             keel_tensor *y) {
  int r = p->rank;
  rs_gctx g = {.p = p, .tabs = tabs, .x = x, .y = y};
  int64_t st = 1, ob = 1;
  for (int d = r - 1; d >= 0; d--) {
    for (int64_t j = 0; j < p->out[d]; j++) tabs[d].idx[j] *= st;
    st *= p->in[d];
    g.blk[d] = ob;
    ob *= p->out[d];
  }
  keel_elem_set_f64(y->dtype, g.fill, 0, p->extrap);
  /* Unresized trailing axes (channels of an NHWC image) make every index
   * of the last resized axis one contiguous run: copied whole instead of
   * element by element. */
  int lead = r; /* rs_run copied a tensor with no axis resized: lead >= 1 */
  while (lead > 0 && tabs[lead - 1].identity) lead--;
  g.run_axis = lead < r && y->dtype != KEEL_STRING ? lead - 1 : -1;
  g.es = keel_dtype_size((keel_dtype)y->dtype);
  /* rank 3 or more: the blocks of the first two axes on the pool (tasks of
   * at least ~16K elements), strings excepted (their copies allocate) */
  if (r < 3 || y->dtype == KEEL_STRING || (g.run_axis >= 0 && g.run_axis < 2))
    return rs_gather_at(&g, 0, 0, false, 0);
  int64_t tasks = p->out[0] * p->out[1];
  return keel_pool_for(k->pool, tasks, KEEL_MAX(1, 16384 / KEEL_MAX(g.blk[1], 1)), rs_gather_planes,
                       &g);
}

/* ======================================== Resize: separable passes */

/* One axis of (outer, n_in, inner) data resized to (outer, n_out, inner):
 * dst[., j, .] = sum_q w[j, q] * src[., idx[j, q], .]. Zero-weight taps
 * (cubic at integer coordinates, the ends of antialias filters, excluded
 * outside taps) are skipped: cheaper, and an inf there stays out. */
#define RS_PASS(name, T)                                                             \
  static void name(const rs_tab *t, const void *vs, void *vd, int64_t outer,          \
                   int64_t nin, int64_t nout, int64_t inner, double extrap) {         \
    const T *src = vs;                                                               \
    T *dst = vd;                                                                     \
    for (int64_t o = 0; o < outer; o++) {                                            \
      const T *s = src + o * nin * inner;                                            \
      T *d = dst + o * nout * inner;                                                 \
      for (int64_t j = 0; j < nout; j++, d += inner) {                               \
        const int64_t *ix = t->idx + j * t->n;                                       \
        const double *w = t->w + j * t->n;                                           \
        if (t->oob[j]) {                                                             \
          for (int64_t i = 0; i < inner; i++) d[i] = (T)extrap;                      \
        } else if (inner == 1) {                                                     \
          T acc = 0;                                                                 \
          for (int64_t q = 0; q < t->n; q++)                                         \
            if (w[q] != 0) acc += (T)w[q] * s[ix[q]];                                \
          d[0] = acc;                                                                \
        } else {                                                                     \
          for (int64_t i = 0; i < inner; i++) d[i] = 0;                              \
          for (int64_t q = 0; q < t->n; q++) {                                       \
            const T *sr = s + ix[q] * inner;                                         \
            T wq = (T)w[q];                                                          \
            if (wq != 0)                                                             \
              for (int64_t i = 0; i < inner; i++) d[i] += wq * sr[i];                \
          }                                                                          \
        }                                                                            \
      }                                                                              \
    }                                                                                \
  }
RS_PASS(rs_pass_f32, float)
RS_PASS(rs_pass_f64, double)

static int64_t rs_prod(const int64_t *v, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= v[i];
  return n;
}

/* Ping-pong room for the results between passes (the last pass writes the
 * output): the largest of them, overflow-checked. */
static keel_status rs_pass_room(keel_kctx *k, const rs_plan *p, const rs_tab *tabs, int ct,
                                void **buf) {
  int64_t cur[KEEL_MAX_RANK], big = 0;
  int npass = 0, first = -1;
  memcpy(cur, p->in, sizeof cur);
  for (int d = 0; d < p->rank; d++)
    if (!tabs[d].identity) first = first < 0 ? d : first;
  for (int d = p->rank - 1; d > first; d--) {
    if (tabs[d].identity) continue;
    cur[d] = p->out[d];
    npass++;
    int64_t n = 1;
    for (int i = 0; i < p->rank; i++)
      if (keel_mul64_ovf(n, cur[i], &n))
        return keel_err(KEEL_ERR_SHAPE, "%s: an intermediate result overflows", p->op);
    big = KEEL_MAX(big, n);
  }
  buf[0] = buf[1] = NULL;
  if (npass >= 1) KEEL_TRY(img_scratch(k, big, ct, &buf[0]));
  if (npass >= 2) KEEL_TRY(img_scratch(k, big, ct, &buf[1]));
  return KEEL_OK;
}

/* Linear and cubic: one pass per resized axis, last axis first (the
 * reference's nesting), identity axes skipped. */
static keel_status rs_filter(keel_kctx *k, const rs_plan *p, const rs_tab *tabs,
                             const keel_tensor *x, keel_tensor *y) {
  int ct = img_ctype(x->dtype), first = 0;
  keel_tensor xs;
  void *buf[2], *final;
  KEEL_TRY(img_stage(k, x, ct, &xs));
  KEEL_TRY(rs_pass_room(k, p, tabs, ct, buf));
  KEEL_TRY(img_out_data(k, y, ct, &final));
  while (tabs[first].identity) first++; /* some axis is not: rs_run checked */
  int64_t cur[KEEL_MAX_RANK];
  memcpy(cur, p->in, sizeof cur);
  const void *src = xs.data;
  for (int d = p->rank - 1, i = 0; d >= first; d--) {
    if (tabs[d].identity) continue;
    void *dst = d == first ? final : buf[i++ & 1];
    int64_t outer = rs_prod(cur, 0, d), inner = rs_prod(cur, d + 1, p->rank);
    (ct == KEEL_FLOAT ? rs_pass_f32 : rs_pass_f64)(&tabs[d], src, dst, outer, cur[d], p->out[d],
                                                   inner, p->extrap);
    cur[d] = p->out[d];
    src = dst;
  }
  img_finish(final, ct, y);
  return KEEL_OK;
}

/* ================================================ Resize and Upsample */

static keel_status rs_run(keel_kctx *k, const keel_tensor *x, const rs_plan *p) {
  int dt = x->dtype;
  if (p->mode != RS_NEAREST && !keel_dtype_is_float(dt) && !keel_dtype_is_int(dt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s mode needs numeric data, got %s", p->op,
                    p->mode == RS_LINEAR ? "linear" : "cubic", keel_dtype_name((keel_dtype)dt));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, dt, p->rank, p->out, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  for (int d = 0; d < p->rank; d++)
    if (p->in[d] == 0)
      return keel_err(KEEL_ERR_SHAPE, "%s: axis %d is empty and cannot grow to %lld", p->op, d,
                      (long long)p->out[d]);
  rs_tab tabs[KEEL_MAX_RANK];
  KEEL_TRY(rs_tables(k, p, tabs));
  bool same = true;
  for (int d = 0; d < p->rank; d++) same = same && tabs[d].identity;
  if (same) return keel_tensor_copy_elems(y, 0, x, 0, keel_tensor_numel(y));
  return p->mode == RS_NEAREST ? rs_gather(k, p, tabs, x, y) : rs_filter(k, p, tabs, x, y);
}


/* Upsample's scales: the input (opset 9), the attribute (7), or
 * height_scale / width_scale on a 4-D input (1). */
static keel_status us_scales(keel_kctx *k, const keel_tensor *x, double *s, int64_t *n) {
  int64_t opset = keel_k_opset(k);
  if (opset >= 9) {
    const keel_tensor *t;
    KEEL_TRY(img_in_list(k, 1, "Upsample: scales", &t, n));
    img_list_f64(t, *n, s);
    return KEEL_OK;
  }
  if (opset >= 7) {
    int cnt;
    const float *f = keel_k_attr_floats(k, "scales", &cnt);
    if (!f) return keel_err(KEEL_ERR_INVALID_MODEL, "Upsample: the scales attribute is missing");
    for (int i = 0; i < cnt && i < KEEL_MAX_RANK; i++) s[i] = f[i];
    *n = cnt;
    return KEEL_OK;
  }
  if (x->rank != 4)
    return keel_err(KEEL_ERR_SHAPE, "Upsample: X must be 4-D at opset %lld, got rank %d",
                    (long long)opset, x->rank);
  s[0] = s[1] = 1;
  s[2] = keel_k_attr_f(k, "height_scale", 1.0f);
  s[3] = keel_k_attr_f(k, "width_scale", 1.0f);
  *n = 4;
  return KEEL_OK;
}

static keel_status us_plan(keel_kctx *k, const keel_tensor *x, rs_plan *pp) {
  rs_plan p;
  rs_init(&p, x, "Upsample");
  const char *m = keel_k_attr_s(k, "mode", "nearest");
  if (!strcmp(m, "nearest")) p.mode = RS_NEAREST;
  else if (!strcmp(m, "linear") || !strcmp(m, "bilinear")) p.mode = RS_LINEAR;
  else return keel_err(KEEL_ERR_INVALID_MODEL, "Upsample: mode '%s' is not nearest or linear", m);
  p.ctm = CT_ASYM;
  p.nmode = NM_SIMPLE;
  double s[KEEL_MAX_RANK];
  int64_t n;
  int axes[KEEL_MAX_RANK];
  KEEL_TRY(us_scales(k, x, s, &n));
  for (int i = 0; i < x->rank; i++) axes[i] = i;
  KEEL_TRY(rs_set_scales(&p, s, n, axes, x->rank));
  for (int i = 0; i < x->rank; i++)
    if (s[i] < 1)
      return keel_err(KEEL_ERR_SHAPE, "Upsample: scales[%d] = %g is below 1", i, s[i]);
  *pp = p;
  return KEEL_OK;
}

keel_status keel_resize_plan(keel_kctx *k, const keel_tensor *x, bool upsample, rs_plan *p) {
  if (upsample) return us_plan(k, x, p);
  rs_init(p, x, "Resize");
  KEEL_TRY(rs_attrs(k, p));
  return rs_geometry(k, p);
}

static keel_status op_resize(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  rs_plan p;
  KEEL_TRY(keel_resize_plan(k, x, false, &p));
  return rs_run(k, x, &p);
}

static keel_status op_upsample(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  rs_plan p;
  KEEL_TRY(keel_resize_plan(k, x, true, &p));
  return rs_run(k, x, &p);
}

/* ========================================================= GridSample */

/* As onnxruntime, over 2 or 3 spatial dims (opset 20 allows N-d; 4-D and
 * 5-D X are what models use): the grid's [-1, 1] maps to the corner
 * pixels' centres (align_corners) or outer edges; when a point leaves
 * [lo, hi] on some dim, border clamps and reflection folds all of its
 * coordinates (ONNX's Python reference does it per dim; the two differ
 * only for cubic border sampling, which no conformance test reaches);
 * then each tap is looked up with the padding rule (zeros: outside
 * reads 0). Arrays are in X's dim order (D, H, W); the
 * grid's last axis lists (x, y, z), the reverse. */
enum { GS_LINEAR, GS_NEAREST, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECT };
enum { GS_MAXD = 3, GS_MAXTAPS = 64 };

typedef struct gs_geo {
  int mode, pad, nd;
  bool align;
  int64_t size[GS_MAXD];       /* X's spatial dims                         */
  int64_t stride[GS_MAXD];     /* their element strides in one plane        */
  double lo[GS_MAXD], hi[GS_MAXD]; /* where coordinates fold               */
} gs_geo;

typedef struct gs_taps {
  int n;
  int64_t off[GS_MAXTAPS];     /* plane offsets; -1 reads as 0             */
  double w[GS_MAXTAPS];
} gs_taps;

/* Folds x into [lo, hi] by repeated reflection (fmod keeps it exact and
 * finite for far values). */
static double gs_reflect(double x, double lo, double hi) {
  double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    double m = fmod(lo - x, 2 * rng);
    return m <= rng ? lo + m : hi - (m - rng);
  }
  if (x > hi) {
    double m = fmod(x - hi, 2 * rng);
    return m <= rng ? hi - m : lo + (m - rng);
  }
  return x;
}

static double gs_denorm(double v, int64_t len, bool align) {
  return align ? (v + 1) / 2 * (double)(len - 1) : ((v + 1) * (double)len - 1) / 2;
}

/* Index q along dim d under the padding rule; -1 for a zero. */
static int64_t gs_index(const gs_geo *g, int d, int64_t q) {
  if (g->pad == GS_ZEROS) return q < 0 || q >= g->size[d] ? -1 : q;
  if (g->pad == GS_REFLECT) q = (int64_t)gs_reflect((double)q, g->lo[d], g->hi[d]);
  return rs_clamp(q, g->size[d]);
}

/* Along dim d at coordinate x: the taps' indices (-1: zero) and weights. */
static int gs_axis_taps(const gs_geo *g, int d, double x, int64_t *q, double *w) {
  if (g->mode == GS_NEAREST) {
    q[0] = gs_index(g, d, (int64_t)x), w[0] = 1;
    return 1;
  }
  int side = g->mode == GS_CUBIC ? 4 : 2;
  double x0 = floor(x) - (side == 4), dx = x - x0 - (side == 4);
  for (int i = 0; i < side; i++) {
    w[i] = side == 4 ? img_cubic(dx + 1 - i, -0.75) : (i ? dx : 1 - dx);
    q[i] = gs_index(g, d, (int64_t)x0 + i);
  }
  return side;
}

/* The taps of sampling point p (pixel units, X's dim order): the outer
 * product of the per-dim taps. */
static void gs_taps_at(const gs_geo *g, double *p, gs_taps *t) {
  int64_t q[GS_MAXD][4];
  double w[GS_MAXD][4];
  int side[GS_MAXD];
  bool out = false;
  for (int d = 0; d < g->nd; d++) {
    if (g->mode == GS_NEAREST) p[d] = nearbyint(p[d]); /* half to even */
    out = out || p[d] < g->lo[d] || p[d] > g->hi[d];
  }
  for (int d = 0; d < g->nd; d++) {
    if (out && g->pad == GS_BORDER) p[d] = fmin(fmax(p[d], 0), (double)(g->size[d] - 1));
    else if (out && g->pad == GS_REFLECT) p[d] = gs_reflect(p[d], g->lo[d], g->hi[d]);
    side[d] = gs_axis_taps(g, d, p[d], q[d], w[d]);
  }
  int idx[GS_MAXD] = {0};
  t->n = 0;
  for (;;) {
    int64_t off = 0;
    double wt = 1;
    for (int d = 0; d < g->nd; d++) {
      wt *= w[d][idx[d]];
      off = off < 0 || q[d][idx[d]] < 0 ? -1 : off + q[d][idx[d]] * g->stride[d];
    }
    t->off[t->n] = off, t->w[t->n++] = wt;
    int d = g->nd - 1;
    while (d >= 0 && ++idx[d] == side[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

static keel_status gs_attrs(keel_kctx *k, gs_geo *g) {
  static const char *const modes[] = {"bilinear", "nearest", "bicubic", NULL};
  static const char *const modes20[] = {"linear", "nearest", "cubic", NULL};
  static const char *const pads[] = {"zeros", "border", "reflection", NULL};
  const char *m = keel_k_attr_s(k, "mode", keel_k_opset(k) >= 20 ? "linear" : "bilinear");
  g->mode = img_pick(m, modes);
  if (g->mode < 0) g->mode = img_pick(m, modes20); /* opset 20's names */
  if (g->mode < 0) return keel_err(KEEL_ERR_INVALID_MODEL, "GridSample: unknown mode '%s'", m);
  const char *pm = keel_k_attr_s(k, "padding_mode", "zeros");
  if ((g->pad = img_pick(pm, pads)) < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "GridSample: unknown padding_mode '%s'", pm);
  g->align = keel_k_attr_i(k, "align_corners", 0) != 0;
  return KEEL_OK;
}

/* X (N, C, D1..Dn) with n = 2 (any opset) or 3 (opset 20+); grid
 * (N, out..., n). */
static keel_status gs_check(keel_kctx *k, const keel_tensor *x, const keel_tensor *grid) {
  int nd = x->rank - 2;
  if (nd != 2 && !(nd == 3 && keel_k_opset(k) >= 20))
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "GridSample (opset %lld): X must be (N, C, H, W)%s, got rank %d",
                    (long long)keel_k_opset(k), keel_k_opset(k) >= 20 ? " or (N, C, D, H, W)" : "",
                    x->rank);
  if (!keel_dtype_is_float(x->dtype) || !keel_dtype_is_float(grid->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GridSample: X and grid must be floating point, got %s and %s",
                    keel_dtype_name((keel_dtype)x->dtype), keel_dtype_name((keel_dtype)grid->dtype));
  if (grid->rank != x->rank || grid->shape[0] != x->shape[0] || grid->shape[x->rank - 1] != nd)
    return keel_err(KEEL_ERR_SHAPE, "GridSample: grid must be (N=%lld, %s, %d)", (long long)x->shape[0],
                    nd == 2 ? "H_out, W_out" : "D_out, H_out, W_out", nd);
  return KEEL_OK;
}

/* Sampling point p of one grid entry, in pixel units, kept finite: NaN
 * and far values land outside the image. */
static void gs_point(const gs_geo *g, const keel_tensor *grid, int64_t at, double *p) {
  double lim = 1e15;
  for (int d = 0; d < g->nd; d++) {
    double v = keel_elem_get_f64(grid->dtype, grid->data, (size_t)(at + g->nd - 1 - d));
    v = gs_denorm(v, g->size[d], g->align);
    p[d] = v >= -lim ? fmin(v, lim) : -lim;
  }
}

static void gs_geometry(const keel_tensor *x, gs_geo *g) {
  g->nd = x->rank - 2;
  int64_t st = 1;
  for (int d = g->nd - 1; d >= 0; d--) {
    g->size[d] = x->shape[d + 2], g->stride[d] = st, st *= g->size[d];
    g->lo[d] = g->align ? 0 : -0.5;
    g->hi[d] = g->align ? (double)(g->size[d] - 1) : (double)g->size[d] - 0.5;
  }
}

static keel_status op_gridsample(keel_kctx *k) {
  const keel_tensor *x, *grid;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &grid));
  gs_geo g;
  KEEL_TRY(gs_attrs(k, &g));
  KEEL_TRY(gs_check(k, x, grid));
  gs_geometry(x, &g);
  int64_t N = x->shape[0], C = x->shape[1], yshape[KEEL_MAX_RANK];
  yshape[0] = N, yshape[1] = C;
  memcpy(yshape + 2, grid->shape + 1, sizeof(int64_t) * (size_t)g.nd);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, yshape, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  int64_t plane = keel_shape_numel(g.nd, g.size), opl = keel_shape_numel(g.nd, yshape + 2);
  if (plane == 0) return keel_err(KEEL_ERR_SHAPE, "GridSample: X has an empty image");
  int ct = img_ctype(x->dtype);
  keel_tensor xs;
  void *yd;
  KEEL_TRY(img_stage(k, x, ct, &xs));
  KEEL_TRY(img_out_data(k, y, ct, &yd));
  for (int64_t n = 0; n < N; n++)
    for (int64_t p = 0; p < opl; p++) {
      double pt[GS_MAXD];
      gs_taps t;
      gs_point(&g, grid, (n * opl + p) * g.nd, pt);
      gs_taps_at(&g, pt, &t);
      for (int64_t c = 0; c < C; c++) {
        int64_t base = (n * C + c) * plane;
        double acc = 0;
        for (int q = 0; q < t.n; q++)
          if (t.off[q] >= 0) acc += t.w[q] * img_ld(xs.data, ct, base + t.off[q]);
        img_st(yd, ct, (n * C + c) * opl + p, acc);
      }
    }
  img_finish(yd, ct, y);
  return KEEL_OK;
}

/* ========================================================= AffineGrid */

/* grid (N, D?, H, W, n) = theta (N, n, n + 1) x (x, y, z?, 1) over the
 * evenly spaced base coordinates of `size` in [-1, 1] (the pixel centres
 * of the corner pixels with align_corners, else their outer edges; a
 * length-1 dim sits at -1 with align_corners, else 0). Computed in double,
 * stored in theta's type. */
static double ag_base(int64_t i, int64_t len, bool align) {
  if (len <= 1) return align ? -1 : 0; /* ONNX's reference (PyTorch gives 0 for both) */
  double step = 2.0 / (double)(align ? len - 1 : len);
  return align ? -1 + step * (double)i : -1 + step * ((double)i + 0.5);
}

static keel_status ag_check(keel_kctx *k, const keel_tensor *theta, int64_t *size, int *nd) {
  int n;
  KEEL_TRY(keel_k_in_ints(k, 1, size, 5, &n));
  *nd = n - 2;
  char s[128];
  if (n != 4 && n != 5)
    return keel_err(KEEL_ERR_SHAPE, "AffineGrid: size must be (N, C, H, W) or (N, C, D, H, W), got %d values", n);
  for (int i = 0; i < n; i++)
    if (size[i] < 0) return keel_err(KEEL_ERR_SHAPE, "AffineGrid: size[%d] = %lld is negative", i, (long long)size[i]);
  if (!keel_dtype_is_float(theta->dtype) || theta->rank != 3 || theta->shape[0] != size[0] ||
      theta->shape[1] != *nd || theta->shape[2] != *nd + 1)
    return keel_err(KEEL_ERR_SHAPE, "AffineGrid: theta %s %s is not (N=%lld, %d, %d) floats",
                    keel_dtype_name((keel_dtype)theta->dtype), keel_shape_str(theta->rank, theta->shape, s, sizeof s),
                    (long long)size[0], *nd, *nd + 1);
  return KEEL_OK;
}

static keel_status op_affine_grid(keel_kctx *k) {
  const keel_tensor *theta;
  KEEL_TRY(keel_k_in(k, 0, &theta));
  int64_t size[5], shape[5];
  int nd;
  KEEL_TRY(ag_check(k, theta, size, &nd));
  bool align = keel_k_attr_i(k, "align_corners", 0) != 0;
  shape[0] = size[0];
  memcpy(shape + 1, size + 2, sizeof(int64_t) * (size_t)nd);
  shape[nd + 1] = nd;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, theta->dtype, nd + 2, shape, &y));
  int64_t pts = keel_shape_numel(nd, size + 2), at = 0;
  for (int64_t n = 0; n < size[0]; n++)
    for (int64_t p = 0; p < pts; p++) {
      double base[4] = {0, 0, 0, 1}; /* (x, y, z?, 1): x runs along the last dim */
      int64_t r = p;
      for (int d = nd - 1; d >= 0; d--) {
        base[nd - 1 - d] = ag_base(r % size[2 + d], size[2 + d], align);
        r /= size[2 + d];
      }
      base[nd] = 1;
      for (int i = 0; i < nd; i++) {
        double acc = 0;
        for (int j = 0; j <= nd; j++)
          acc += keel_elem_get_f64(theta->dtype, theta->data, (size_t)((n * nd + i) * (nd + 1) + j)) * base[j];
        keel_elem_set_f64(y->dtype, y->data, (size_t)at++, acc);
      }
    }
  return KEEL_OK;
}

/* =========================================================== RoiAlign */

/* As onnxruntime (and ONNX's reference, its port): each output bin
 * averages (or maxes) a grid of bilinear samples; a sample more than one
 * pixel outside the map is empty, others clamp into it. Max mode takes the
 * largest *weighted corner* of each sample, which is what both do. */
typedef struct ra_args {
  int64_t h, w, oh, ow, sr;
  double scale, off;           /* spatial_scale; 0.5 for half_pixel       */
  bool half, avg;
} ra_args;

typedef struct ra_sample {
  int64_t pos[4];
  double w[4];
} ra_sample;

static void ra_bilinear(const ra_args *a, double y, double x, ra_sample *s) {
  double H = (double)a->h, W = (double)a->w;
  if (!(y >= -1 && y <= H && x >= -1 && x <= W)) { /* NaN too */
    memset(s, 0, sizeof *s);
    return;
  }
  y = fmax(y, 0), x = fmax(x, 0);
  int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
  if (yl >= a->h - 1) yh = yl = a->h - 1, y = (double)yl;
  else yh = yl + 1;
  if (xl >= a->w - 1) xh = xl = a->w - 1, x = (double)xl;
  else xh = xl + 1;
  double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
  s->pos[0] = yl * a->w + xl, s->pos[1] = yl * a->w + xh;
  s->pos[2] = yh * a->w + xl, s->pos[3] = yh * a->w + xh;
  s->w[0] = hy * hx, s->w[1] = hy * lx, s->w[2] = ly * hx, s->w[3] = ly * lx;
}

/* One roi box in feature-map pixels, with its sampling grid per bin. */
typedef struct ra_box {
  double y0, x0, bh, bw;
  int64_t gh, gw;
} ra_box;

static keel_status ra_box_of(const ra_args *a, const keel_tensor *rois, int64_t r, ra_box *b) {
  double c[4];
  for (int i = 0; i < 4; i++) {
    c[i] = keel_elem_get_f64(rois->dtype, rois->data, (size_t)(r * 4 + i)) * a->scale - a->off;
    if (!isfinite(c[i]))
      return keel_err(KEEL_ERR_RUNTIME, "RoiAlign: rois[%lld] has a non-finite coordinate", (long long)r);
  }
  double rw = c[2] - c[0], rh = c[3] - c[1];
  if (!a->half) rw = fmax(rw, 1), rh = fmax(rh, 1); /* output_half_pixel: at least a pixel */
  b->x0 = c[0], b->y0 = c[1], b->bh = rh / (double)a->oh, b->bw = rw / (double)a->ow;
  double gh = a->sr > 0 ? (double)a->sr : ceil(rh / (double)a->oh);
  double gw = a->sr > 0 ? (double)a->sr : ceil(rw / (double)a->ow);
  /* An inverted box samples nothing. Both counts go to 0 then: the other
   * one may be huge (1e30), and casting it to int64 is UB. */
  gh = fmax(gh, 0), gw = fmax(gw, 0);
  if (gh == 0 || gw == 0) gh = gw = 0;
  if (gh * gw > (double)(1 << 24))
    return keel_err(KEEL_ERR_RUNTIME, "RoiAlign: rois[%lld] needs %g x %g samples per bin", (long long)r,
                    gh, gw);
  b->gh = (int64_t)gh, b->gw = (int64_t)gw;
  return KEEL_OK;
}

/* One output bin for all channels: acc[c] over the bin's samples. */
static void ra_bin(const ra_args *a, const ra_box *b, int64_t ph, int64_t pw, const void *xd,
                   int ct, int64_t C, double *acc) {
  int64_t plane = a->h * a->w, cnt = KEEL_MAX(b->gh * b->gw, 1);
  for (int64_t c = 0; c < C; c++) acc[c] = 0;
  for (int64_t iy = 0; iy < b->gh; iy++)
    for (int64_t ix = 0; ix < b->gw; ix++) {
      ra_sample s;
      double yy = b->y0 + (double)ph * b->bh + ((double)iy + 0.5) * b->bh / (double)b->gh;
      double xx = b->x0 + (double)pw * b->bw + ((double)ix + 0.5) * b->bw / (double)b->gw;
      ra_bilinear(a, yy, xx, &s);
      for (int64_t c = 0; c < C; c++) {
        double v[4];
        for (int i = 0; i < 4; i++) v[i] = s.w[i] * img_ld(xd, ct, c * plane + s.pos[i]);
        if (a->avg) acc[c] += v[0] + v[1] + v[2] + v[3];
        else {
          double m = fmax(fmax(v[0], v[1]), fmax(v[2], v[3]));
          acc[c] = (iy == 0 && ix == 0) ? m : fmax(acc[c], m);
        }
      }
    }
  if (a->avg)
    for (int64_t c = 0; c < C; c++) acc[c] /= (double)cnt;
}

static keel_status ra_attrs(keel_kctx *k, ra_args *a) {
  const char *mode = keel_k_attr_s(k, "mode", "avg");
  if (strcmp(mode, "avg") && strcmp(mode, "max"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "RoiAlign: mode '%s' is not avg or max", mode);
  a->avg = !strcmp(mode, "avg");
  /* opset 10 had no attribute and behaved as output_half_pixel */
  const char *ctm = keel_k_opset(k) >= 16
                        ? keel_k_attr_s(k, "coordinate_transformation_mode", "half_pixel")
                        : "output_half_pixel";
  if (strcmp(ctm, "half_pixel") && strcmp(ctm, "output_half_pixel"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "RoiAlign: unknown coordinate_transformation_mode '%s'", ctm);
  a->half = !strcmp(ctm, "half_pixel");
  a->off = a->half ? 0.5 : 0;
  a->oh = keel_k_attr_i(k, "output_height", 1);
  a->ow = keel_k_attr_i(k, "output_width", 1);
  a->sr = keel_k_attr_i(k, "sampling_ratio", 0);
  a->scale = keel_k_attr_f(k, "spatial_scale", 1.0f);
  if (a->oh < 1 || a->ow < 1 || a->oh > (1 << 24) || a->ow > (1 << 24) || a->sr < 0 || a->sr > 4096)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "RoiAlign: output_height %lld, output_width %lld or sampling_ratio %lld is out of range",
                    (long long)a->oh, (long long)a->ow, (long long)a->sr);
  return KEEL_OK;
}

static keel_status ra_check(const keel_tensor *x, const keel_tensor *rois, const keel_tensor *bi) {
  if (x->rank != 4) return keel_err(KEEL_ERR_SHAPE, "RoiAlign: X must be (N, C, H, W), got rank %d", x->rank);
  if (!keel_dtype_is_float(x->dtype) || !keel_dtype_is_float(rois->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "RoiAlign: X and rois must be floating point");
  if (rois->rank != 2 || rois->shape[1] != 4)
    return keel_err(KEEL_ERR_SHAPE, "RoiAlign: rois must be (num_rois, 4)");
  if (bi->dtype != KEEL_INT64 && bi->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "RoiAlign: batch_indices must be int64");
  if (bi->rank != 1 || bi->shape[0] != rois->shape[0])
    return keel_err(KEEL_ERR_SHAPE, "RoiAlign: batch_indices must be (num_rois=%lld)",
                    (long long)rois->shape[0]);
  return KEEL_OK;
}

static keel_status op_roialign(keel_kctx *k) {
  const keel_tensor *x, *rois, *bi;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &rois));
  KEEL_TRY(keel_k_in(k, 2, &bi));
  ra_args a;
  KEEL_TRY(ra_attrs(k, &a));
  KEEL_TRY(ra_check(x, rois, bi));
  int64_t R = rois->shape[0], C = x->shape[1], bins = a.oh * a.ow;
  a.h = x->shape[2], a.w = x->shape[3];
  keel_tensor *y, xs;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, 4, (int64_t[]){R, C, a.oh, a.ow}, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  if (a.h == 0 || a.w == 0) return keel_err(KEEL_ERR_SHAPE, "RoiAlign: X has an empty feature map");
  int ct = img_ctype(x->dtype);
  void *yd, *acc;
  KEEL_TRY(img_stage(k, x, ct, &xs));
  KEEL_TRY(img_out_data(k, y, ct, &yd));
  KEEL_TRY(img_scratch(k, C, KEEL_DOUBLE, &acc));
  for (int64_t r = 0; r < R; r++) {
    int64_t b = keel_elem_get_i64(bi->dtype, bi->data, (size_t)r);
    if (b < 0 || b >= x->shape[0])
      return keel_err(KEEL_ERR_RUNTIME, "RoiAlign: batch_indices[%lld] = %lld is outside [0, %lld)",
                      (long long)r, (long long)b, (long long)x->shape[0]);
    ra_box box;
    KEEL_TRY(ra_box_of(&a, rois, r, &box));
    const void *xb = (const uint8_t *)xs.data + (size_t)(b * C * a.h * a.w) * keel_dtype_size((keel_dtype)ct);
    for (int64_t bin = 0; bin < bins; bin++) {
      ra_bin(&a, &box, bin / a.ow, bin % a.ow, xb, ct, C, acc);
      for (int64_t c = 0; c < C; c++) img_st(yd, ct, (r * C + c) * bins + bin, ((double *)acc)[c]);
    }
  }
  img_finish(yd, ct, y);
  return KEEL_OK;
}

/* ================================================== NonMaxSuppression */

/* As onnxruntime: per (batch, class), boxes scoring above score_threshold
 * are visited by descending score (ties: lower index first); one is kept
 * unless its IoU with a kept box exceeds iou_threshold; at most
 * max_output_boxes_per_class are kept. Output rows (batch, class, box) in
 * that order. */
typedef struct nms_box {
  double y0, x0, y1, x1, area;
} nms_box;

typedef struct nms_cand {
  double score;
  int64_t idx;
} nms_cand;

/* Descending score, NaN last, then ascending index: a total order, so the
 * result does not depend on qsort's stability. */
static int nms_cmp(const void *pa, const void *pb) {
  const nms_cand *a = pa, *b = pb;
  bool na = a->score != a->score, nb = b->score != b->score;
  if (na != nb) return na ? 1 : -1;
  if (!na && a->score != b->score) return a->score > b->score ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

static bool nms_overlap(const nms_box *a, const nms_box *b, double thr) {
  double ix0 = fmax(a->x0, b->x0), iy0 = fmax(a->y0, b->y0);
  double ix1 = fmin(a->x1, b->x1), iy1 = fmin(a->y1, b->y1);
  if (!(ix1 > ix0 && iy1 > iy0) || !(a->area > 0 && b->area > 0)) return false;
  double inter = (ix1 - ix0) * (iy1 - iy0), uni = a->area + b->area - inter;
  return uni > 0 && inter / uni > thr;
}

/* Box i of a batch as sorted corners: [y1, x1, y2, x2] any diagonal, or
 * (center_point_box) [x_center, y_center, width, height]. */
static void nms_load(const keel_tensor *t, int64_t at, bool center, nms_box *b) {
  double v[4];
  for (int i = 0; i < 4; i++) v[i] = keel_elem_get_f64(t->dtype, t->data, (size_t)(at + i));
  if (center) {
    b->x0 = v[0] - v[2] / 2, b->x1 = v[0] + v[2] / 2;
    b->y0 = v[1] - v[3] / 2, b->y1 = v[1] + v[3] / 2;
  } else {
    b->y0 = fmin(v[0], v[2]), b->y1 = fmax(v[0], v[2]);
    b->x0 = fmin(v[1], v[3]), b->x1 = fmax(v[1], v[3]);
  }
  b->area = (b->x1 - b->x0) * (b->y1 - b->y0);
}

typedef struct nms_args {
  int64_t B, C, S, keep;       /* batches, classes, boxes, per-class cap   */
  double iou, score;
  bool has_score, center;
} nms_args;

/* One class of one batch: appends (b, c, box) rows to sel; returns the
 * new row count. */
static int64_t nms_class(const nms_args *a, const nms_box *boxes, const keel_tensor *scores,
                         int64_t b, int64_t c, nms_cand *cand, int64_t *sel, int64_t nsel) {
  int64_t n = 0, first = nsel;
  for (int64_t i = 0; i < a->S; i++) {
    double s = keel_elem_get_f64(scores->dtype, scores->data, (size_t)((b * a->C + c) * a->S + i));
    if (!a->has_score || s > a->score) cand[n].score = s, cand[n++].idx = i;
  }
  qsort(cand, (size_t)n, sizeof *cand, nms_cmp);
  for (int64_t i = 0; i < n && nsel - first < a->keep; i++) {
    const nms_box *bx = &boxes[cand[i].idx];
    bool keep = true;
    for (int64_t j = first; j < nsel && keep; j++)
      keep = !nms_overlap(&boxes[sel[j * 3 + 2]], bx, a->iou);
    if (!keep) continue;
    sel[nsel * 3] = b, sel[nsel * 3 + 1] = c, sel[nsel * 3 + 2] = cand[i].idx;
    nsel++;
  }
  return nsel;
}

/* Scalar input i as a double, or def when omitted or empty. */
static keel_status nms_scalar(keel_kctx *k, int i, double def, double *v, bool *given) {
  const keel_tensor *t;
  KEEL_TRY(keel_k_in_opt(k, i, &t));
  *given = t && keel_tensor_numel(t) > 0;
  *v = def;
  if (*given) KEEL_TRY(keel_k_in_scalar_f64(k, i, v));
  return KEEL_OK;
}

static keel_status nms_setup(keel_kctx *k, const keel_tensor *boxes, const keel_tensor *scores,
                             nms_args *a) {
  if (boxes->rank != 3 || boxes->shape[2] != 4 || scores->rank != 3 ||
      scores->shape[0] != boxes->shape[0] || scores->shape[2] != boxes->shape[1])
    return keel_err(KEEL_ERR_SHAPE,
                    "NonMaxSuppression: boxes must be (B, S, 4) and scores (B, C, S)");
  if (!keel_dtype_is_float(boxes->dtype) || !keel_dtype_is_float(scores->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "NonMaxSuppression: boxes and scores must be floating point");
  int64_t cpb = keel_k_attr_i(k, "center_point_box", 0);
  if (cpb != 0 && cpb != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "NonMaxSuppression: center_point_box must be 0 or 1, got %lld",
                    (long long)cpb);
  a->center = cpb == 1;
  a->B = boxes->shape[0], a->S = boxes->shape[1], a->C = scores->shape[1];
  double maxo;
  bool given;
  KEEL_TRY(nms_scalar(k, 2, 0, &maxo, &given));
  KEEL_TRY(nms_scalar(k, 3, 0, &a->iou, &given));
  KEEL_TRY(nms_scalar(k, 4, 0, &a->score, &a->has_score));
  if (!(a->iou >= 0 && a->iou <= 1))
    return keel_err(KEEL_ERR_RUNTIME, "NonMaxSuppression: iou_threshold %g is outside [0, 1]", a->iou);
  a->keep = maxo > 0 ? (int64_t)fmin(maxo, (double)a->S) : 0;
  return KEEL_OK;
}

static keel_status op_nms(keel_kctx *k) {
  const keel_tensor *boxes, *scores;
  KEEL_TRY(keel_k_in(k, 0, &boxes));
  KEEL_TRY(keel_k_in(k, 1, &scores));
  nms_args a;
  KEEL_TRY(nms_setup(k, boxes, scores, &a));
  int64_t cap = 0, nsel = 0;
  if (keel_mul64_ovf(a.B, a.C, &cap) || keel_mul64_ovf(cap, a.keep, &cap) ||
      keel_mul64_ovf(cap, 3, &cap))
    return keel_err(KEEL_ERR_SHAPE, "NonMaxSuppression: the output size overflows");
  void *bx = NULL, *cand = NULL, *sel = NULL;
  if (cap > 0) {
    KEEL_TRY(keel_k_scratch(k, (size_t)a.S * sizeof(nms_box), &bx));
    KEEL_TRY(keel_k_scratch(k, (size_t)a.S * sizeof(nms_cand), &cand));
    KEEL_TRY(img_scratch(k, cap, KEEL_INT64, &sel));
  }
  for (int64_t b = 0; cap > 0 && b < a.B; b++) {
    for (int64_t i = 0; i < a.S; i++) nms_load(boxes, (b * a.S + i) * 4, a.center, (nms_box *)bx + i);
    for (int64_t c = 0; c < a.C; c++) nsel = nms_class(&a, bx, scores, b, c, cand, sel, nsel);
  }
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_INT64, 2, (int64_t[]){nsel, 3}, &y));
  if (nsel) memcpy(y->data, sel, (size_t)nsel * 3 * sizeof(int64_t));
  return KEEL_OK;
}

/* ============================================================ table */

const keel_opdef keel_ops_image[] = {
    {"", "Resize", 10, KEEL_OPSET_MAX, op_resize, 0, KEEL_TS_ALL, keel_gpu_resize_impls},
    {"", "Upsample", 1, KEEL_OPSET_MAX, op_upsample, 0, KEEL_TS_ALL, keel_gpu_upsample_impls},
    {"", "GridSample", 16, KEEL_OPSET_MAX, op_gridsample, 0, KEEL_TS_FLOAT},
    {"", "AffineGrid", 20, KEEL_OPSET_MAX, op_affine_grid, 0, KEEL_TS_FLOAT},
    {"", "RoiAlign", 10, KEEL_OPSET_MAX, op_roialign, 0, KEEL_TS_FLOAT},
    {"", "NonMaxSuppression", 10, KEEL_OPSET_MAX, op_nms, 0, KEEL_TS_FLOAT},
    {0},
};
