/* shape_gen.c: the ops that make new data from shapes and scalars: Shape
 * and Size (a tensor's shape as data), ConstantOfShape, Range and EyeLike.
 * None reads its input's elements (EyeLike and Shape read only the shape),
 * so every element type works. The copies and views of elements are in
 * shape.c. */
#include <math.h>

#include "device/device.h"

#include "base/sysmem.h"

#include "ops/kernel.h"

static int64_t sh_clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ==================================== Shape, Size, ConstantOfShape */

static keel_status op_shape(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t r = x->rank, start = 0, end = r;
  if (keel_k_opset(k) >= 15) { /* start/end slice the dims, clamped */
    start = keel_k_attr_i(k, "start", 0);
    end = keel_k_attr_i(k, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = sh_clamp(start, 0, r);
    end = sh_clamp(end, 0, r);
  }
  int64_t n = end > start ? end - start : 0;
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, KEEL_INT64, 1, &n, &o));
  if (n) memcpy(o->data, x->shape + start, sizeof(int64_t) * (size_t)n);
  return KEEL_OK;
}

static keel_status op_size(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  keel_tensor *o;
  int64_t none[1] = {0}; /* rank 0: no dims are read */
  KEEL_TRY(keel_k_out(k, 0, KEEL_INT64, 0, none, &o));
  *(int64_t *)o->data = keel_tensor_numel(x);
  return KEEL_OK;
}

/* Fills every element of o with the single element of v. */
static keel_status sh_fill(keel_tensor *o, const keel_tensor *v) {
  int64_t n = keel_tensor_numel(o);
  if (v->dtype == KEEL_STRING) {
    const keel_string *s = v->data;
    for (int64_t i = 0; i < n; i++)
      KEEL_TRY(keel_tensor_set_string(o, (size_t)i, s->data, s->len));
    return KEEL_OK;
  }
  if (keel_dtype_is_packed(v->dtype)) {
    unsigned c = keel_small_get(v->dtype, v->data, 0);
    for (int64_t i = 0; i < n; i++) keel_small_put(v->dtype, o->data, (size_t)i, c);
    return KEEL_OK;
  }
  size_t es = keel_dtype_size((keel_dtype)v->dtype);
  /* typed loops for the common sizes (they vectorize; a memcpy of es
   * bytes per element was 57 us of a [128, 128] causal mask) */
#define SH_FILL_AS(T)                                                    \
  {                                                                      \
    T x, *d = o->data;                                                   \
    memcpy(&x, v->data, sizeof x);                                       \
    for (int64_t i = 0; i < n; i++) d[i] = x;                            \
    return KEEL_OK;                                                      \
  }
  if (n > 0 && es == 4) SH_FILL_AS(uint32_t)
  if (n > 0 && es == 8) SH_FILL_AS(uint64_t)
  if (n > 0 && es == 2) SH_FILL_AS(uint16_t)
  if (n > 0 && es == 1) SH_FILL_AS(uint8_t)
#undef SH_FILL_AS
  for (int64_t i = 0; i < n; i++) memcpy((uint8_t *)o->data + (size_t)i * es, v->data, es);
  return KEEL_OK;
}

static keel_status op_constant_of_shape(keel_kctx *k) {
  int64_t shape[KEEL_MAX_RANK];
  int n;
  KEEL_TRY(keel_k_in_ints(k, 0, shape, KEEL_MAX_RANK, &n));
  for (int i = 0; i < n; i++)
    if (shape[i] < 0)
      return keel_err(KEEL_ERR_SHAPE, "ConstantOfShape: dim %d is negative (%lld)", i,
                      (long long)shape[i]);
  const keel_attr *a = keel_k_attr(k, "value");
  float zero = 0.0f;
  keel_tensor def = {.data = &zero, .dtype = KEEL_FLOAT, .rank = 0};
  const keel_tensor *v = a ? a->t : &def;
  if (!v || (a && a->type != KEEL_ATTR_TENSOR) || keel_tensor_numel(v) != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "ConstantOfShape: value must be a one-element tensor");
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, v->dtype, n, shape, &o));
  return sh_fill(o, v);
}

/* ============================================================ Range */

/* Range's count and its start and delta (as doubles for a float type, as
 * integers otherwise), from its three scalar inputs, read on the host. */
typedef struct sh_range {
  int dt;
  int64_t n;
  double fs, fd;
  int64_t is, id;
} sh_range;

static keel_status sh_range_plan(keel_kctx *k, sh_range *r) {
  const keel_tensor *t[3];
  for (int i = 0; i < 3; i++) KEEL_TRY(keel_k_in(k, i, &t[i]));
  int dt = r->dt = t[0]->dtype;
  if (t[1]->dtype != dt || t[2]->dtype != dt)
    return keel_err(KEEL_ERR_SHAPE, "Range: start, limit and delta differ in type");
  r->n = 0;
  if (keel_dtype_is_float(dt)) {
    double l;
    KEEL_TRY(keel_k_in_scalar_f64(k, 0, &r->fs));
    KEEL_TRY(keel_k_in_scalar_f64(k, 1, &l));
    KEEL_TRY(keel_k_in_scalar_f64(k, 2, &r->fd));
    double cnt = r->fd == 0 ? NAN : ceil((l - r->fs) / r->fd);
    if (!isfinite(cnt) || cnt > 9.0e15) /* 9e15 < 2^53: exact as int */
      return keel_err(KEEL_ERR_RUNTIME, "Range: start %g, limit %g, delta %g give no finite count",
                      r->fs, l, r->fd);
    r->n = cnt > 0 ? (int64_t)cnt : 0;
    return KEEL_OK;
  }
  if (!keel_dtype_is_int(dt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "Range: %s is not supported", keel_dtype_name((keel_dtype)dt));
  int64_t l, diff;
  KEEL_TRY(keel_k_in_scalar_i64(k, 0, &r->is));
  KEEL_TRY(keel_k_in_scalar_i64(k, 1, &l));
  KEEL_TRY(keel_k_in_scalar_i64(k, 2, &r->id));
  if (r->id == 0) return keel_err(KEEL_ERR_RUNTIME, "Range: delta is 0");
  if (__builtin_sub_overflow(l, r->is, &diff) || (r->id == -1 && diff == INT64_MIN))
    return keel_err(KEEL_ERR_RUNTIME, "Range: limit - start overflows");
  if (diff != 0 && (diff > 0) == (r->id > 0)) r->n = diff / r->id + (diff % r->id != 0); /* ceil */
  return KEEL_OK;
}

/* The n values into host memory `data`. */
static void sh_range_fill(const sh_range *r, void *data) {
  if (keel_dtype_is_float(r->dt))
    for (int64_t i = 0; i < r->n; i++) keel_elem_set_f64(r->dt, data, (size_t)i, r->fs + (double)i * r->fd);
  else
    for (int64_t i = 0; i < r->n; i++) /* wraps like the type; values stay in [s, l) */
      keel_elem_set_i64(r->dt, data, (size_t)i, (int64_t)((uint64_t)r->is + (uint64_t)i * (uint64_t)r->id));
}

static keel_status op_range(keel_kctx *k) {
  sh_range r;
  KEEL_TRY(sh_range_plan(k, &r));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, r.dt, 1, &r.n, &o));
  sh_range_fill(&r, o->data);
  return KEEL_OK;
}

/* Range placed on a device (passes/pass_place.c: its scalars read on the
 * host): the values made on the host, as above, then copied over (a few
 * hundred bytes for a sequence's positions). */
static keel_status gpu_range(keel_kctx *k) {
  sh_range r;
  KEEL_TRY(sh_range_plan(k, &r));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, r.dt, 1, &r.n, &o));
  size_t bytes = keel_tensor_nbytes(o);
  if (!bytes) return KEEL_OK;
  if (!k->dev) return keel_err(KEEL_ERR_UNSUPPORTED, "Range: no device");
  void *host = keel_sys_alloc(bytes);
  if (!host) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "Range: %zu bytes on the host", bytes);
  sh_range_fill(&r, host);
  keel_status st = keel_device_to_device(k->dev, o->data, host, bytes);
  keel_sys_free(host, bytes); /* the copy is queued: the host may reuse it */
  return st;
}

static const keel_impl gpu_range_impl = {
    "gpu", keel_prep_on_gpu, NULL, NULL, gpu_range,
    "placed on the GPU (the values made on the host, copied)", KEEL_NODE_GPU};
static const keel_impl *const gpu_range_impls[] = {&gpu_range_impl, NULL};

/* ========================================================== EyeLike */

static keel_status op_eye_like(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->rank != 2) return keel_err(KEEL_ERR_SHAPE, "EyeLike: input must be 2-D, got rank %d", x->rank);
  int64_t dt = keel_k_attr_i(k, "dtype", x->dtype), kk = keel_k_attr_i(k, "k", 0);
  if (!(keel_dtype_is_float((int)dt) || keel_dtype_is_int((int)dt) || dt == KEEL_BOOL))
    return keel_err(KEEL_ERR_UNSUPPORTED, "EyeLike: dtype %lld is not supported", (long long)dt);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, (int)dt, 2, x->shape, &o));
  int64_t rows = x->shape[0], cols = x->shape[1];
  if (!o->data) return KEEL_OK;
  memset(o->data, 0, keel_tensor_nbytes(o));
  if (kk >= cols || kk <= -rows) return KEEL_OK; /* diagonal is outside */
  for (int64_t i = kk < 0 ? -kk : 0; i < rows && i + kk < cols; i++)
    keel_elem_set_f64((int)dt, o->data, (size_t)(i * cols + i + kk), 1.0);
  return KEEL_OK;
}

/* ============================================================ table */

/* types: the data input's; ConstantOfShape's shape input; EyeLike reads only
 * its input's shape (a string input needs the dtype attribute). */
#define INDEX_TYPES (KEEL_T(KEEL_INT32) | KEEL_T(KEEL_INT64))
const keel_opdef keel_ops_shape_gen[] = {
    {"", "Shape", 1, KEEL_OPSET_MAX, op_shape, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {"", "Size", 1, KEEL_OPSET_MAX, op_size, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {"", "ConstantOfShape", 9, KEEL_OPSET_MAX, op_constant_of_shape, 0,
     INDEX_TYPES | KEEL_TS_SMALL}, /* the narrow types: the value's, for the output */
    {"", "Range", 11, KEEL_OPSET_MAX, op_range, 0, KEEL_TS_NUM, gpu_range_impls},
    {"", "EyeLike", 9, KEEL_OPSET_MAX, op_eye_like, 0, KEEL_TS_ALL},
    {0},
};
#undef INDEX_TYPES
