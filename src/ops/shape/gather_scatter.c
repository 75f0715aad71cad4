/* gather_scatter.c: the indexing family. Gather, GatherElements, GatherND,
 * Scatter (opset 9-10), ScatterElements, ScatterND, OneHot, Compress,
 * NonZero, TopK, Unique, CumSum, CumProd and TensorScatter (opset 24).
 *
 * Data movement is generic over element size: these kernels move bytes, so
 * every dtype works (float16, bfloat16 and bool included), and STRING
 * elements are deep-copied with keel_tensor_set_string. Every index read
 * from a tensor is validated, and normalized once into an int64 offset
 * table in scratch memory before any element moves; the move loops then
 * trust the table. Arithmetic (Scatter* reductions, CumSum) and ordering
 * (TopK, Unique) are typed: tables of loops generated per dtype, with
 * float16 / bfloat16 computed in float.
 *
 * Products of dims go through dims_prod(), which gives 0 when the true
 * product overflows: that can only happen for a tensor with a zero dim
 * elsewhere, so the loops it bounds have nothing to do anyway.
 */
#include <stdio.h>

#include "ops/common/bcast.h"
#include "ops/families.h"
#include "ops/shape/shape_gpu.h"

/* ================================================== shared helpers */

/* Product of d[from..to); 0 on overflow (see the file comment). */
static int64_t dims_prod(const int64_t *d, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    if (d[i] == 0) return 0;
  for (int i = from; i < to; i++)
    if (keel_mul64_ovf(p, d[i], &p)) return 0;
  return p;
}

/* A tensor seen as (outer, dim, inner) around one axis. */
typedef struct split3 {
  int64_t outer, dim, inner;
} split3;

static split3 split_at(const keel_tensor *t, int axis) {
  split3 s = {dims_prod(t->shape, 0, axis), t->shape[axis],
              dims_prod(t->shape, axis + 1, t->rank)};
  return s;
}

static const char *op_name(const keel_kctx *k) { return k->node->op_type; }

static keel_status check_rank(const keel_kctx *k, int rank) {
  if (rank <= KEEL_MAX_RANK) return KEEL_OK;
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s: output rank %d is above keel's limit of %d",
                  op_name(k), rank, KEEL_MAX_RANK);
}

/* The `axis` attribute normalized for `rank`; the message names the op. */
static keel_status attr_axis(keel_kctx *k, int rank, int64_t def, int *axis) {
  char what[64];
  snprintf(what, sizeof what, "%s: axis", op_name(k));
  return keel_k_axis(keel_k_attr_i(k, "axis", def), rank, what, axis);
}

static keel_status need_index_type(const keel_kctx *k, const keel_tensor *t, const char *what) {
  if (t->dtype == KEEL_INT32 || t->dtype == KEEL_INT64) return KEEL_OK;
  return keel_err(KEEL_ERR_SHAPE, "%s: %s must be int32 or int64, got %s", op_name(k), what,
                  keel_dtype_name((keel_dtype)t->dtype));
}

/* Element i of an int32 / int64 tensor (checked by need_index_type). */
static inline int64_t index_at(const keel_tensor *t, int64_t i) {
  if (t->dtype == KEEL_INT32) return ((const int32_t *)t->data)[i];
  return ((const int64_t *)t->data)[i];
}

/* Index v on an axis of size n, negatives counting from the end. `pos` is
 * the element's position in the indices tensor, for the message. */
static keel_status fix_index(const keel_kctx *k, int64_t v, int axis, int64_t n, int64_t pos,
                             int64_t *out) {
  int64_t w = v < 0 ? v + n : v; /* v < 0 <= n: cannot overflow */
  if (w < 0 || w >= n)
    return keel_err(KEEL_ERR_RUNTIME,
                    "%s: index %lld is out of range for axis %d of size %lld (element %lld of "
                    "indices)",
                    op_name(k), (long long)v, axis, (long long)n, (long long)pos);
  *out = w;
  return KEEL_OK;
}

/* keel_k_out, guarded: a malformed node may list fewer outputs than the op
 * defines, and k->out has only n_out entries. */
static keel_status out_tensor(keel_kctx *k, int i, int dtype, int rank, const int64_t *shape,
                              keel_tensor **t) {
  if (i >= k->n_out)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: the node lists %d outputs, output %d is required",
                    op_name(k), k->n_out, i);
  return keel_k_out(k, i, dtype, rank, shape, t);
}

/* Scratch for `count` items of `size` bytes, with the multiplication checked. */
static keel_status scratch_n(keel_kctx *k, int64_t count, size_t size, void **p) {
  size_t bytes;
  if (count < 0 || (uint64_t)count > SIZE_MAX || keel_mul_ovf((size_t)count, size, &bytes))
    return keel_err(KEEL_ERR_SHAPE, "%s: %lld scratch items are too many", op_name(k),
                    (long long)count);
  return keel_k_scratch(k, bytes, p);
}

/* Copies n elements src[si..] to dst[di..] (same dtype); strings are
 * deep-copied since a keel_string owns its bytes. */
static keel_status copy_elems(keel_tensor *dst, int64_t di, const keel_tensor *src, int64_t si,
                              int64_t n) {
  if (n <= 0) return KEEL_OK;
  if (dst->dtype == KEEL_STRING) {
    const keel_string *s = (const keel_string *)src->data + si;
    for (int64_t i = 0; i < n; i++)
      KEEL_TRY(keel_tensor_set_string(dst, (size_t)(di + i), s[i].data, s[i].len));
    return KEEL_OK;
  }
  size_t es = keel_dtype_size((keel_dtype)dst->dtype);
  memcpy((uint8_t *)dst->data + (size_t)di * es, (const uint8_t *)src->data + (size_t)si * es,
         (size_t)n * es);
  return KEEL_OK;
}

/* dst[i] = src[off[i]] for i < n. Typed by element size so the common case
 * is a plain load/store instead of a memcpy call per element. */
static keel_status gather_by_offsets(keel_tensor *dst, const keel_tensor *src, const int64_t *off,
                                     int64_t n) {
  size_t es = keel_dtype_size((keel_dtype)dst->dtype);
#define GATHER_AS(T)                                                              \
  for (int64_t i = 0; i < n; i++) ((T *)dst->data)[i] = ((const T *)src->data)[off[i]]; \
  return KEEL_OK;
  if (dst->dtype == KEEL_STRING) {
    for (int64_t i = 0; i < n; i++) KEEL_TRY(copy_elems(dst, i, src, off[i], 1));
    return KEEL_OK;
  }
  switch (es) {
    case 1: GATHER_AS(uint8_t)
    case 2: GATHER_AS(uint16_t)
    case 4: GATHER_AS(uint32_t)
    case 8: GATHER_AS(uint64_t)
    default: break;
  }
#undef GATHER_AS
  for (int64_t i = 0; i < n; i++) KEEL_TRY(copy_elems(dst, i, src, off[i], 1));
  return KEEL_OK;
}

/* Output 0 as a copy of input 0 (the scatter ops' starting point). Takes
 * over the input's buffer when it dies here and no other input shares it:
 * the scatter loops read indices and updates while writing the output. */
static keel_status copy_of_data(keel_kctx *k, const keel_tensor *x, keel_tensor **o) {
  bool shared = false;
  for (int i = 1; i < k->n_in; i++)
    if (keel_k_has_in(k, i) && k->in[i]->kind == KEEL_V_TENSOR && k->in[i]->t.buf == x->buf)
      shared = true;
  if (k->n_out < 1 || shared) KEEL_TRY(out_tensor(k, 0, x->dtype, x->rank, x->shape, o));
  else KEEL_TRY(keel_k_reuse(k, 0, 0, x->dtype, x->rank, x->shape, o));
  if ((*o)->data == x->data) return KEEL_OK; /* took the buffer over */
  return copy_elems(*o, 0, x, 0, keel_tensor_numel(x));
}

/* ======================================================= reductions */

/* Scatter with a reduction: for each t < n, d[off[t] + j] = op(d[off[t] + j],
 * s[t*len + j]) for j < len. One loop serves ScatterElements (len 1) and
 * ScatterND (len = slice size). Integers wrap (computed in uint64: signed
 * overflow is undefined in C); floats follow numpy, NaN propagating. */
typedef void (*scat_fn)(void *d, const int64_t *off, int64_t n, const void *s, int64_t len);

#define DEF_SCAT(name, T, expr)                                                         \
  static void name(void *pd, const int64_t *off, int64_t n, const void *ps, int64_t len) { \
    T *d = pd;                                                                          \
    const T *s = ps;                                                                    \
    for (int64_t t = 0; t < n; t++) {                                                   \
      T *dd = d + off[t];                                                               \
      const T *ss = s + t * len;                                                        \
      for (int64_t j = 0; j < len; j++) {                                               \
        T x = dd[j], y = ss[j];                                                         \
        dd[j] = (T)(expr);                                                              \
      }                                                                                 \
    }                                                                                   \
  }
/* float16 / bfloat16: each update computed in float and rounded, as numpy's
 * half arithmetic does. */
#define DEF_SCAT_H(name, TOF, FROMF, expr)                                              \
  static void name(void *pd, const int64_t *off, int64_t n, const void *ps, int64_t len) { \
    uint16_t *d = pd;                                                                   \
    const uint16_t *s = ps;                                                             \
    for (int64_t t = 0; t < n; t++) {                                                   \
      uint16_t *dd = d + off[t];                                                        \
      const uint16_t *ss = s + t * len;                                                 \
      for (int64_t j = 0; j < len; j++) {                                               \
        float x = TOF(dd[j]), y = TOF(ss[j]);                                           \
        dd[j] = FROMF(expr);                                                            \
      }                                                                                 \
    }                                                                                   \
  }

#define SCAT_GEN(op, FEXPR, IEXPR)                                                   \
  DEF_SCAT(op##_f32, float, FEXPR) DEF_SCAT(op##_f64, double, FEXPR)                 \
  DEF_SCAT_H(op##_f16, keel_f16_to_f32, keel_f32_to_f16, FEXPR)                      \
  DEF_SCAT_H(op##_bf16, keel_bf16_to_f32, keel_f32_to_bf16, FEXPR)                   \
  DEF_SCAT(op##_i8, int8_t, IEXPR) DEF_SCAT(op##_i16, int16_t, IEXPR)                \
  DEF_SCAT(op##_i32, int32_t, IEXPR) DEF_SCAT(op##_i64, int64_t, IEXPR)              \
  DEF_SCAT(op##_u8, uint8_t, IEXPR) DEF_SCAT(op##_u16, uint16_t, IEXPR)              \
  DEF_SCAT(op##_u32, uint32_t, IEXPR) DEF_SCAT(op##_u64, uint64_t, IEXPR)
#define SCAT_TAB(op)                                                                   \
  {[KEEL_FLOAT] = op##_f32, [KEEL_DOUBLE] = op##_f64, [KEEL_FLOAT16] = op##_f16,       \
   [KEEL_BFLOAT16] = op##_bf16, [KEEL_INT8] = op##_i8, [KEEL_INT16] = op##_i16,        \
   [KEEL_INT32] = op##_i32, [KEEL_INT64] = op##_i64, [KEEL_UINT8] = op##_u8,           \
   [KEEL_UINT16] = op##_u16, [KEEL_UINT32] = op##_u32, [KEEL_UINT64] = op##_u64}

SCAT_GEN(sc_add, x + y, (uint64_t)x + (uint64_t)y)
SCAT_GEN(sc_mul, x * y, (uint64_t)x * (uint64_t)y)
SCAT_GEN(sc_max, (x != x || x > y) ? x : y, x > y ? x : y)
SCAT_GEN(sc_min, (x != x || x < y) ? x : y, x < y ? x : y)

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN, RED_COUNT };
static const char *const RED_NAMES[RED_COUNT] = {"none", "add", "mul", "max", "min"};
static const int RED_SINCE[RED_COUNT] = {1, 16, 16, 18, 18};
static const scat_fn SCAT_FNS[RED_COUNT][KEEL_BFLOAT16 + 1] = {
    {0}, SCAT_TAB(sc_add), SCAT_TAB(sc_mul), SCAT_TAB(sc_max), SCAT_TAB(sc_min)};

/* The `reduction` attribute, checked against the opset that defines it. */
static keel_status get_reduction(keel_kctx *k, int dtype, int *red) {
  const char *s = keel_k_attr_s(k, "reduction", "none");
  for (int r = 0; r < RED_COUNT; r++) {
    if (strcmp(s, RED_NAMES[r])) continue;
    if (keel_k_opset(k) < RED_SINCE[r])
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: reduction '%s' needs opset %d, the model has %lld",
                      op_name(k), s, RED_SINCE[r], (long long)keel_k_opset(k));
    if (r != RED_NONE && (dtype < 0 || dtype > KEEL_BFLOAT16 || !SCAT_FNS[r][dtype]))
      return keel_err(KEEL_ERR_UNSUPPORTED, "%s: reduction '%s' does not support %s", op_name(k),
                      s, keel_dtype_name((keel_dtype)dtype));
    *red = r;
    return KEEL_OK;
  }
  return keel_err(KEEL_ERR_INVALID_MODEL,
                  "%s: reduction must be none, add, mul, max or min, got '%s'", op_name(k), s);
}

/* Applies the updates at the offsets: plain copies (any dtype) or a reduction. */
static keel_status scatter_apply(keel_tensor *o, int red, const int64_t *off, int64_t n,
                                 const keel_tensor *upd, int64_t len) {
  if (red != RED_NONE) {
    if (n > 0 && len > 0) SCAT_FNS[red][o->dtype](o->data, off, n, upd->data, len);
    return KEEL_OK;
  }
  for (int64_t t = 0; t < n; t++) KEEL_TRY(copy_elems(o, off[t], upd, t * len, len));
  return KEEL_OK;
}

/* =========================================================== Gather */

/* All of `ind` checked and normalized against an axis of size dim. */
static keel_status fix_indices(keel_kctx *k, const keel_tensor *ind, int axis, int64_t dim,
                               int64_t **out) {
  int64_t n = keel_tensor_numel(ind);
  void *p;
  KEEL_TRY(scratch_n(k, n, sizeof(int64_t), &p));
  int64_t *pos = p;
  for (int64_t i = 0; i < n; i++) KEEL_TRY(fix_index(k, index_at(ind, i), axis, dim, i, &pos[i]));
  *out = pos;
  return KEEL_OK;
}

/* output = data.shape[:axis] + indices.shape + data.shape[axis+1:] */
static keel_status op_gather(keel_kctx *k) {
  const keel_tensor *x, *ind;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ind));
  KEEL_TRY(need_index_type(k, ind, "indices"));
  int axis;
  KEEL_TRY(attr_axis(k, x->rank, 0, &axis));
  int r = x->rank - 1 + ind->rank;
  KEEL_TRY(check_rank(k, r));
  int64_t shape[KEEL_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)axis);
  memcpy(shape + axis, ind->shape, sizeof(int64_t) * (size_t)ind->rank);
  memcpy(shape + axis + ind->rank, x->shape + axis + 1,
         sizeof(int64_t) * (size_t)(x->rank - axis - 1));
  int64_t *pos;
  KEEL_TRY(fix_indices(k, ind, axis, x->shape[axis], &pos));
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, x->dtype, r, shape, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  split3 s = split_at(x, axis);
  int64_t n = keel_tensor_numel(ind);
  for (int64_t a = 0; a < s.outer; a++)
    for (int64_t j = 0; j < n; j++)
      KEEL_TRY(copy_elems(o, (a * n + j) * s.inner, x, (a * s.dim + pos[j]) * s.inner, s.inner));
  return KEEL_OK;
}

/* ===================================== GatherElements, ScatterElements */

/* For each element of `ind` (same rank as x; each dim but the axis no
 * larger than x's), the offset in x of the element it addresses. */
static keel_status elem_offsets(keel_kctx *k, const keel_tensor *x, const keel_tensor *ind,
                                int axis, int64_t **out) {
  KEEL_TRY(need_index_type(k, ind, "indices"));
  if (ind->rank != x->rank)
    return keel_err(KEEL_ERR_SHAPE, "%s: indices have rank %d, data has rank %d", op_name(k),
                    ind->rank, x->rank);
  for (int d = 0; d < x->rank; d++)
    if (d != axis && ind->shape[d] > x->shape[d])
      return keel_err(KEEL_ERR_SHAPE, "%s: indices dim %d is %lld, larger than data's %lld",
                      op_name(k), d, (long long)ind->shape[d], (long long)x->shape[d]);
  int64_t n = keel_tensor_numel(ind), xs[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0}, base = 0;
  for (int d = 0; d < x->rank; d++) xs[d] = dims_prod(x->shape, d + 1, x->rank);
  void *p;
  KEEL_TRY(scratch_n(k, n, sizeof(int64_t), &p));
  int64_t *off = p;
  for (int64_t i = 0; i < n; i++) {
    int64_t v;
    KEEL_TRY(fix_index(k, index_at(ind, i), axis, x->shape[axis], i, &v));
    off[i] = base + v * xs[axis];
    for (int d = x->rank - 1; d >= 0; d--) { /* odometer over ind's shape */
      if (d != axis) base += xs[d];
      if (++idx[d] < ind->shape[d]) break;
      if (d != axis) base -= xs[d] * ind->shape[d];
      idx[d] = 0;
    }
  }
  *out = off;
  return KEEL_OK;
}

static keel_status op_gather_elements(keel_kctx *k) {
  const keel_tensor *x, *ind;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ind));
  int axis;
  KEEL_TRY(attr_axis(k, x->rank, 0, &axis));
  int64_t *off;
  KEEL_TRY(elem_offsets(k, x, ind, axis, &off));
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, x->dtype, ind->rank, ind->shape, &o));
  return gather_by_offsets(o, x, off, keel_tensor_numel(ind));
}

/* ScatterElements, and Scatter (opset 9-10: the same op, no reduction). */
static keel_status scatter_elements(keel_kctx *k, bool has_reduction) {
  const keel_tensor *x, *ind, *upd;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ind));
  KEEL_TRY(keel_k_in(k, 2, &upd));
  if (upd->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "%s: updates are %s, data is %s", op_name(k),
                    keel_dtype_name((keel_dtype)upd->dtype), keel_dtype_name((keel_dtype)x->dtype));
  if (upd->rank != ind->rank ||
      memcmp(upd->shape, ind->shape, sizeof(int64_t) * (size_t)ind->rank)) {
    char a[128], b[128];
    return keel_err(KEEL_ERR_SHAPE, "%s: updates have shape %s, indices %s (must match)",
                    op_name(k), keel_shape_str(upd->rank, upd->shape, a, sizeof a),
                    keel_shape_str(ind->rank, ind->shape, b, sizeof b));
  }
  int axis, red = RED_NONE;
  KEEL_TRY(attr_axis(k, x->rank, 0, &axis));
  if (has_reduction) KEEL_TRY(get_reduction(k, x->dtype, &red));
  int64_t *off;
  KEEL_TRY(elem_offsets(k, x, ind, axis, &off));
  keel_tensor *o;
  KEEL_TRY(copy_of_data(k, x, &o));
  return scatter_apply(o, red, off, keel_tensor_numel(ind), upd, 1);
}

static keel_status op_scatter(keel_kctx *k) { return scatter_elements(k, false); }
static keel_status op_scatter_elements(keel_kctx *k) { return scatter_elements(k, true); }

/* =============================================== GatherND, ScatterND */

/* Checks data (B..., S_1..S_m, rest...) against indices (B..., I..., m)
 * for b = batch_dims; writes m. */
static keel_status nd_check(keel_kctx *k, const keel_tensor *x, const keel_tensor *ind, int64_t b,
                            int *m) {
  KEEL_TRY(need_index_type(k, ind, "indices"));
  if (x->rank < 1 || ind->rank < 1)
    return keel_err(KEEL_ERR_SHAPE, "%s: data and indices need rank >= 1, got %d and %d",
                    op_name(k), x->rank, ind->rank);
  if (b < 0 || b >= KEEL_MIN(x->rank, ind->rank))
    return keel_err(b < 0 ? KEEL_ERR_INVALID_MODEL : KEEL_ERR_SHAPE,
                    "%s: batch_dims %lld must be in [0, %d) for ranks %d and %d", op_name(k),
                    (long long)b, KEEL_MIN(x->rank, ind->rank), x->rank, ind->rank);
  for (int d = 0; d < b; d++)
    if (x->shape[d] != ind->shape[d])
      return keel_err(KEEL_ERR_SHAPE, "%s: batch dim %d is %lld in data but %lld in indices",
                      op_name(k), d, (long long)x->shape[d], (long long)ind->shape[d]);
  int64_t last = ind->shape[ind->rank - 1];
  if (last < 1 || last > x->rank - b)
    return keel_err(KEEL_ERR_SHAPE, "%s: indices' last dim is %lld, must be in [1, %lld]",
                    op_name(k), (long long)last, (long long)(x->rank - b));
  *m = (int)last;
  return KEEL_OK;
}

/* The offset in data of the slice each index tuple addresses (n tuples,
 * each `slice` elements long). Batch g/per of the tuples reads batch g/per
 * of data. */
static keel_status nd_offsets(keel_kctx *k, const keel_tensor *x, const keel_tensor *ind, int b,
                              int m, int64_t **out, int64_t *n_out, int64_t *slice) {
  int64_t per = dims_prod(ind->shape, b, ind->rank - 1);
  int64_t n = dims_prod(ind->shape, 0, b) * per; /* both 0, or n*m = numel(ind) */
  int64_t block = dims_prod(x->shape, b, x->rank), st[KEEL_MAX_RANK];
  for (int j = 0; j < m; j++) st[j] = dims_prod(x->shape, b + j + 1, x->rank);
  void *p;
  KEEL_TRY(scratch_n(k, n, sizeof(int64_t), &p));
  int64_t *off = p;
  for (int64_t g = 0; g < n; g++) {
    int64_t o = (g / per) * block;
    for (int j = 0; j < m; j++) {
      int64_t v, at = g * m + j;
      KEEL_TRY(fix_index(k, index_at(ind, at), b + j, x->shape[b + j], at, &v));
      o += v * st[j];
    }
    off[g] = o;
  }
  *out = off;
  *n_out = n;
  *slice = dims_prod(x->shape, b + m, x->rank);
  return KEEL_OK;
}

/* output = indices.shape[:-1] + data.shape[b+m:] */
static keel_status op_gather_nd(keel_kctx *k) {
  const keel_tensor *x, *ind;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ind));
  int64_t b = keel_k_attr_i(k, "batch_dims", 0);
  if (b && keel_k_opset(k) < 12)
    return keel_err(KEEL_ERR_INVALID_MODEL, "GatherND: batch_dims needs opset 12");
  int m, q = ind->rank;
  KEEL_TRY(nd_check(k, x, ind, b, &m));
  int r = q - 1 + x->rank - (int)b - m;
  KEEL_TRY(check_rank(k, r));
  int64_t shape[KEEL_MAX_RANK], n, slice, *off;
  memcpy(shape, ind->shape, sizeof(int64_t) * (size_t)(q - 1));
  memcpy(shape + q - 1, x->shape + b + m, sizeof(int64_t) * (size_t)(r - (q - 1)));
  KEEL_TRY(nd_offsets(k, x, ind, (int)b, m, &off, &n, &slice));
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, x->dtype, r, shape, &o));
  for (int64_t g = 0; g < n; g++) KEEL_TRY(copy_elems(o, g * slice, x, off[g], slice));
  return KEEL_OK;
}

/* updates must have shape indices.shape[:-1] + data.shape[m:] */
static keel_status nd_check_updates(const keel_tensor *x, const keel_tensor *ind,
                                    const keel_tensor *upd, int m) {
  if (upd->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "ScatterND: updates are %s, data is %s",
                    keel_dtype_name((keel_dtype)upd->dtype), keel_dtype_name((keel_dtype)x->dtype));
  int q = ind->rank, r = q - 1 + x->rank - m;
  bool ok = r == upd->rank;
  for (int d = 0; ok && d < r; d++)
    ok = upd->shape[d] == (d < q - 1 ? ind->shape[d] : x->shape[m + d - (q - 1)]);
  if (ok) return KEEL_OK;
  char a[128], bi[128], c[128];
  return keel_err(KEEL_ERR_SHAPE,
                  "ScatterND: updates have shape %s; with indices %s and data %s they need "
                  "indices.shape[:-1] + data.shape[%d:]",
                  keel_shape_str(upd->rank, upd->shape, a, sizeof a),
                  keel_shape_str(ind->rank, ind->shape, bi, sizeof bi),
                  keel_shape_str(x->rank, x->shape, c, sizeof c), m);
}

static keel_status op_scatter_nd(keel_kctx *k) {
  const keel_tensor *x, *ind, *upd;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ind));
  KEEL_TRY(keel_k_in(k, 2, &upd));
  int m, red;
  KEEL_TRY(nd_check(k, x, ind, 0, &m));
  KEEL_TRY(nd_check_updates(x, ind, upd, m));
  KEEL_TRY(get_reduction(k, x->dtype, &red));
  int64_t n, slice, *off;
  KEEL_TRY(nd_offsets(k, x, ind, 0, m, &off, &n, &slice));
  keel_tensor *o;
  KEEL_TRY(copy_of_data(k, x, &o));
  return scatter_apply(o, red, off, n, upd, slice);
}

/* =========================================================== OneHot */

/* Element i of OneHot's indices (any numeric type) as an integer (floats
 * truncate); false when it has none (NaN, or beyond int64). */
static bool onehot_index(const keel_tensor *t, int64_t i, int64_t *v) {
  if (keel_dtype_is_float(t->dtype)) {
    double f = keel_elem_get_f64(t->dtype, t->data, (size_t)i);
    if (!(f > -9.2e18 && f < 9.2e18)) return false;
    *v = (int64_t)f;
    return true;
  }
  *v = keel_elem_get_i64(t->dtype, t->data, (size_t)i);
  return true;
}

/* dst[start .. start+n) = src[si]. */
static keel_status fill_elems(keel_tensor *dst, int64_t start, int64_t n, const keel_tensor *src,
                              int64_t si) {
  if (dst->dtype == KEEL_STRING) {
    for (int64_t i = 0; i < n; i++) KEEL_TRY(copy_elems(dst, start + i, src, si, 1));
    return KEEL_OK;
  }
  size_t es = keel_dtype_size((keel_dtype)dst->dtype);
  const uint8_t *e = (const uint8_t *)src->data + (size_t)si * es;
  uint8_t *o = (uint8_t *)dst->data + (size_t)start * es;
  for (int64_t i = 0; i < n; i++) memcpy(o + (size_t)i * es, e, es);
  return KEEL_OK;
}

static keel_status onehot_depth(keel_kctx *k, int64_t *depth) {
  double d;
  KEEL_TRY(keel_k_in_scalar_f64(k, 1, &d));
  if (!(d >= 1 && d < 9.2e18))
    return keel_err(KEEL_ERR_RUNTIME, "OneHot: depth %g must be at least 1", d);
  *depth = (int64_t)d;
  return KEEL_OK;
}

/* Indices in [-depth, depth) mark on_value (negatives wrap once); anything
 * else leaves its row all off_value, as the spec says. */
static keel_status op_onehot(keel_kctx *k) {
  const keel_tensor *ind, *vals;
  int64_t depth;
  KEEL_TRY(keel_k_in(k, 0, &ind));
  KEEL_TRY(keel_k_in(k, 2, &vals));
  KEEL_TRY(onehot_depth(k, &depth));
  if (ind->dtype == KEEL_STRING) return keel_err(KEEL_ERR_SHAPE, "OneHot: indices must be numeric");
  if (keel_tensor_numel(vals) != 2)
    return keel_err(KEEL_ERR_SHAPE, "OneHot: values must hold [off_value, on_value], it holds %lld",
                    (long long)keel_tensor_numel(vals));
  int r = ind->rank + 1, axis;
  KEEL_TRY(check_rank(k, r));
  KEEL_TRY(attr_axis(k, r, -1, &axis));
  int64_t shape[KEEL_MAX_RANK];
  for (int d = 0; d < r; d++) shape[d] = d < axis ? ind->shape[d] : d == axis ? depth : ind->shape[d - 1];
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, vals->dtype, r, shape, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  KEEL_TRY(fill_elems(o, 0, keel_tensor_numel(o), vals, 0));
  int64_t outer = dims_prod(ind->shape, 0, axis), inner = dims_prod(ind->shape, axis, ind->rank);
  for (int64_t a = 0; a < outer; a++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t v;
      if (!onehot_index(ind, a * inner + i, &v)) continue;
      if (v < 0) v += depth;
      if (v < 0 || v >= depth) continue;
      KEEL_TRY(copy_elems(o, (a * depth + v) * inner + i, vals, 1, 1));
    }
  return KEEL_OK;
}

/* ========================================================= Compress */

/* Like numpy.compress: a condition shorter than the axis drops the rest;
 * a longer one is fine as long as the extra entries are false. */
static keel_status compress_count(const keel_tensor *cond, int64_t dim, int axis,
                                  int64_t *cnt) {
  const uint8_t *c = cond->data;
  int64_t len = keel_tensor_numel(cond), n = 0;
  for (int64_t i = 0; i < len; i++) {
    if (!c[i]) continue;
    if (i >= dim)
      return keel_err(KEEL_ERR_RUNTIME,
                      "Compress: condition element %lld is true but axis %d has only %lld slices",
                      (long long)i, axis, (long long)dim);
    n++;
  }
  *cnt = n;
  return KEEL_OK;
}

static keel_status op_compress(keel_kctx *k) {
  const keel_tensor *x, *cond;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &cond));
  if (cond->dtype != KEEL_BOOL || cond->rank > 1)
    return keel_err(KEEL_ERR_SHAPE, "Compress: condition must be a 1-D bool tensor, got %s rank %d",
                    keel_dtype_name((keel_dtype)cond->dtype), cond->rank);
  bool flat = keel_k_attr(k, "axis") == NULL; /* no axis: work on the flattened input */
  int axis = 0;
  if (!flat) KEEL_TRY(attr_axis(k, x->rank, 0, &axis));
  split3 s = {1, keel_tensor_numel(x), 1};
  if (!flat) s = split_at(x, axis);
  int64_t cnt, shape[KEEL_MAX_RANK];
  KEEL_TRY(compress_count(cond, s.dim, axis, &cnt));
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[axis] = cnt;
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, x->dtype, flat ? 1 : x->rank, shape, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  const uint8_t *c = cond->data;
  int64_t len = KEEL_MIN(keel_tensor_numel(cond), s.dim);
  for (int64_t a = 0; a < s.outer; a++)
    for (int64_t i = 0, j = 0; i < len; i++)
      if (c[i]) KEEL_TRY(copy_elems(o, (a * cnt + j++) * s.inner, x, (a * s.dim + i) * s.inner, s.inner));
  return KEEL_OK;
}

/* ========================================================== NonZero */

/* Floats compare by value (-0 is zero, NaN is not); other numbers and bool
 * by their bytes; strings are "non-zero" when not empty, as in numpy. */
static bool nonzero_at(const keel_tensor *x, int64_t i) {
  const void *d = x->data;
  switch (x->dtype) {
    case KEEL_FLOAT: return ((const float *)d)[i] != 0;
    case KEEL_DOUBLE: return ((const double *)d)[i] != 0;
    case KEEL_FLOAT16:
    case KEEL_BFLOAT16: return (((const uint16_t *)d)[i] & 0x7fff) != 0; /* sign bit aside */
    case KEEL_STRING: return ((const keel_string *)d)[i].len != 0;
    default: break;
  }
  switch (keel_dtype_size((keel_dtype)x->dtype)) {
    case 1: return ((const uint8_t *)d)[i] != 0;
    case 2: return ((const uint16_t *)d)[i] != 0;
    case 4: return ((const uint32_t *)d)[i] != 0;
    default: return ((const uint64_t *)d)[i] != 0;
  }
}

/* Output (rank, nnz): the coordinates of each non-zero element in row-major
 * order. A scalar gives (0, nnz), as the spec says. */
static keel_status op_nonzero(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n = keel_tensor_numel(x), nnz = 0;
  for (int64_t i = 0; i < n; i++) nnz += nonzero_at(x, i);
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, KEEL_INT64, 2, (int64_t[]){x->rank, nnz}, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  int64_t *y = o->data, idx[KEEL_MAX_RANK] = {0};
  for (int64_t i = 0, c = 0; i < n; i++) {
    if (nonzero_at(x, i)) {
      for (int d = 0; d < x->rank; d++) y[d * nnz + c] = idx[d];
      c++;
    }
    for (int d = x->rank - 1; d >= 0; d--) { /* odometer */
      if (++idx[d] < x->shape[d]) break;
      idx[d] = 0;
    }
  }
  return KEEL_OK;
}

/* ============================================================= TopK */

/* Selection with a heap of the k best seen so far, O(n log k) per line,
 * then a heap sort of those k. "Before" is the output order: larger (or
 * smaller) value first, ties to the lower index as the spec says; NaN
 * counts as the largest value (numpy's sort order). The heap keeps the
 * element ranking last at its root. v[i*s] is element i of the line. */
typedef void (*topk_fn)(const void *v, int64_t s, int64_t n, int64_t k, bool largest, int64_t *h);

#define NAN_F(x) ((x) != (x))
#define NAN_I(x) ((void)(x), false)
#define DEF_TOPK(sfx, T, ISNAN)                                                          \
  static bool tk_gt_##sfx(T x, T y) { return ISNAN(x) ? !ISNAN(y) : x > y; }            \
  static bool tk_before_##sfx(const T *v, int64_t s, bool lg, int64_t a, int64_t b) {   \
    T x = v[a * s], y = v[b * s];                                                        \
    if (tk_gt_##sfx(x, y)) return lg;                                                    \
    if (tk_gt_##sfx(y, x)) return !lg;                                                   \
    return a < b;                                                                        \
  }                                                                                      \
  static void tk_sift_##sfx(const T *v, int64_t s, bool lg, int64_t *h, int64_t m,      \
                            int64_t c) {                                                 \
    for (;;) {                                                                           \
      int64_t l = 2 * c + 1, w = c, t;                                                   \
      if (l < m && tk_before_##sfx(v, s, lg, h[w], h[l])) w = l;                         \
      if (l + 1 < m && tk_before_##sfx(v, s, lg, h[w], h[l + 1])) w = l + 1;             \
      if (w == c) return;                                                                \
      t = h[c], h[c] = h[w], h[w] = t, c = w;                                            \
    }                                                                                    \
  }                                                                                      \
  static void tk_select_##sfx(const void *pv, int64_t s, int64_t n, int64_t k, bool lg, \
                              int64_t *h) {                                              \
    const T *v = pv;                                                                     \
    int64_t m = 0, t;                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                    \
      if (m < k) { /* filling up: sift the newcomer toward the root */                  \
        int64_t c = m++;                                                                 \
        h[c] = i;                                                                        \
        for (; c > 0 && tk_before_##sfx(v, s, lg, h[(c - 1) / 2], h[c]); c = (c - 1) / 2) \
          t = h[c], h[c] = h[(c - 1) / 2], h[(c - 1) / 2] = t;                           \
      } else if (k > 0 && tk_before_##sfx(v, s, lg, i, h[0])) {                          \
        h[0] = i;                                                                        \
        tk_sift_##sfx(v, s, lg, h, m, 0);                                                \
      }                                                                                  \
    }                                                                                    \
    for (int64_t e = m - 1; e > 0; e--) { /* the last-ranking goes to the back */       \
      t = h[0], h[0] = h[e], h[e] = t;                                                   \
      tk_sift_##sfx(v, s, lg, h, e, 0);                                                  \
    }                                                                                    \
  }

DEF_TOPK(f32, float, NAN_F) DEF_TOPK(f64, double, NAN_F)
DEF_TOPK(i8, int8_t, NAN_I) DEF_TOPK(i16, int16_t, NAN_I)
DEF_TOPK(i32, int32_t, NAN_I) DEF_TOPK(i64, int64_t, NAN_I)
DEF_TOPK(u8, uint8_t, NAN_I) DEF_TOPK(u16, uint16_t, NAN_I)
DEF_TOPK(u32, uint32_t, NAN_I) DEF_TOPK(u64, uint64_t, NAN_I)

/* float16 / bfloat16 select on a float copy (exact, same order). */
static const topk_fn TOPK_FNS[KEEL_BFLOAT16 + 1] = {
    [KEEL_FLOAT] = tk_select_f32, [KEEL_DOUBLE] = tk_select_f64, [KEEL_INT8] = tk_select_i8,
    [KEEL_INT16] = tk_select_i16, [KEEL_INT32] = tk_select_i32, [KEEL_INT64] = tk_select_i64,
    [KEEL_UINT8] = tk_select_u8,  [KEEL_UINT16] = tk_select_u16, [KEEL_UINT32] = tk_select_u32,
    [KEEL_UINT64] = tk_select_u64};

/* k: an attribute before opset 10, then a one-element input. */
static keel_status topk_k(keel_kctx *k, int64_t *kk) {
  if (keel_k_opset(k) < 10) {
    const keel_attr *a = keel_k_attr(k, "k");
    if (!a) return keel_err(KEEL_ERR_INVALID_MODEL, "TopK: attribute k is required before opset 10");
    *kk = a->i;
    return KEEL_OK;
  }
  int64_t buf[1];
  int n;
  KEEL_TRY(keel_k_in_ints(k, 1, buf, 1, &n));
  if (n != 1) return keel_err(KEEL_ERR_SHAPE, "TopK: K must hold one value, it holds none");
  *kk = buf[0];
  return KEEL_OK;
}

/* Selects every line along the axis of x (fx: the same values as float
 * for float16 / bfloat16), writing values and indices; h is k of scratch. */
static void topk_lines(topk_fn fn, const keel_tensor *x, const keel_tensor *fx, split3 s,
                       int64_t kk, bool lg, int64_t *h, keel_tensor *vo, int64_t *idx) {
  size_t es = keel_dtype_size((keel_dtype)fx->dtype), eo = keel_dtype_size((keel_dtype)x->dtype);
  for (int64_t a = 0; a < s.outer; a++)
    for (int64_t i = 0; i < s.inner; i++) {
      int64_t base = a * s.dim * s.inner + i;
      fn((const uint8_t *)fx->data + (size_t)base * es, s.inner, s.dim, kk, lg, h);
      for (int64_t j = 0; j < kk; j++) { /* values come from x: float16 bits kept exactly */
        int64_t at = (a * kk + j) * s.inner + i;
        idx[at] = h[j];
        memcpy((uint8_t *)vo->data + (size_t)at * eo,
               (const uint8_t *)x->data + (size_t)(base + h[j] * s.inner) * eo, eo);
      }
    }
}

/* `sorted` is not read: the outputs always come sorted, which sorted=0
 * (any order) allows. A node listing Values only gets its indices in
 * scratch. */
static keel_status op_topk(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int axis, dt = x->dtype;
  int64_t kk, shape[KEEL_MAX_RANK];
  KEEL_TRY(attr_axis(k, x->rank, -1, &axis));
  KEEL_TRY(topk_k(k, &kk));
  topk_fn fn = dt >= 0 && dt <= KEEL_BFLOAT16 ? TOPK_FNS[keel_is_half(dt) ? KEEL_FLOAT : dt] : NULL;
  if (!fn)
    return keel_err(KEEL_ERR_UNSUPPORTED, "TopK does not support %s", keel_dtype_name((keel_dtype)dt));
  if (kk < 0 || kk > x->shape[axis])
    return keel_err(KEEL_ERR_RUNTIME, "TopK: k = %lld is out of range for axis %d of size %lld",
                    (long long)kk, axis, (long long)x->shape[axis]);
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[axis] = kk;
  keel_tensor *vo, *io, fx = *x;
  void *h, *idx;
  KEEL_TRY(out_tensor(k, 0, dt, x->rank, shape, &vo));
  if (k->n_out > 1) KEEL_TRY(out_tensor(k, 1, KEEL_INT64, x->rank, shape, &io));
  if (keel_tensor_numel(vo) == 0) return KEEL_OK;
  if (k->n_out > 1) idx = io->data;
  else KEEL_TRY(scratch_n(k, keel_tensor_numel(vo), sizeof(int64_t), &idx));
  if (keel_is_half(dt)) KEEL_TRY(keel_k_to_f32(k, x, &fx));
  KEEL_TRY(scratch_n(k, kk, sizeof(int64_t), &h));
  topk_lines(fn, x, &fx, split_at(x, axis), kk, keel_k_attr_i(k, "largest", 1) != 0, h, vo, idx);
  return KEEL_OK;
}

/* =========================================================== Unique */

/* Three-way comparisons in numpy's sort order: NaN equals NaN and sorts
 * last; -0 equals 0; strings compare by bytes, then length. */
static int cmp_f64(double a, double b) {
  if (a != a || b != b) return (a != a) - (b != b);
  return (a > b) - (a < b);
}

static int cmp_str(const keel_string *a, const keel_string *b) {
  size_t n = KEEL_MIN(a->len, b->len);
  int c = n ? memcmp(a->data, b->data, n) : 0;
  if (c) return c < 0 ? -1 : 1;
  return (a->len > b->len) - (a->len < b->len);
}

static int cmp_elem(const keel_tensor *x, int64_t i, int64_t j) {
  const void *d = x->data;
#define CMP_AS(T) return (((const T *)d)[i] > ((const T *)d)[j]) - (((const T *)d)[i] < ((const T *)d)[j])
  switch (x->dtype) {
    case KEEL_FLOAT: return cmp_f64(((const float *)d)[i], ((const float *)d)[j]);
    case KEEL_DOUBLE: return cmp_f64(((const double *)d)[i], ((const double *)d)[j]);
    case KEEL_FLOAT16:
    case KEEL_BFLOAT16:
      return cmp_f64(keel_elem_get_f64(x->dtype, d, (size_t)i), keel_elem_get_f64(x->dtype, d, (size_t)j));
    case KEEL_STRING: return cmp_str((const keel_string *)d + i, (const keel_string *)d + j);
    case KEEL_INT8: CMP_AS(int8_t);
    case KEEL_INT16: CMP_AS(int16_t);
    case KEEL_INT32: CMP_AS(int32_t);
    case KEEL_INT64: CMP_AS(int64_t);
    case KEEL_UINT16: CMP_AS(uint16_t);
    case KEEL_UINT32: CMP_AS(uint32_t);
    case KEEL_UINT64: CMP_AS(uint64_t);
    default: CMP_AS(uint8_t); /* uint8, bool */
  }
#undef CMP_AS
}

/* x seen as slices along an axis: (outer, dim slices, inner). */
typedef struct slices {
  const keel_tensor *x;
  split3 s;
} slices;

/* Slices a and b compared lexicographically in row-major order (numpy's
 * unique with axis). */
static int cmp_slices(const void *ctx, int64_t a, int64_t b) {
  const slices *S = ctx;
  for (int64_t o = 0; o < S->s.outer; o++) {
    int64_t base = o * S->s.dim * S->s.inner;
    for (int64_t i = 0; i < S->s.inner; i++) {
      int c = cmp_elem(S->x, base + a * S->s.inner + i, base + b * S->s.inner + i);
      if (c) return c;
    }
  }
  return 0;
}

static int cmp_keys(const void *ctx, int64_t a, int64_t b) {
  const int64_t *key = ctx;
  return (key[a] > key[b]) - (key[a] < key[b]);
}

/* Stable bottom-up merge sort of a[0..n); tmp holds n more. */
static void merge_sort(int64_t *a, int64_t *tmp, int64_t n,
                       int (*cmp)(const void *, int64_t, int64_t), const void *ctx) {
  int64_t *src = a, *dst = tmp, *t;
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = KEEL_MIN(lo + w, n), hi = KEEL_MIN(lo + 2 * w, n), i = lo, j = mid, o = lo;
      while (i < mid && j < hi) dst[o++] = cmp(ctx, src[j], src[i]) < 0 ? src[j++] : src[i++];
      while (i < mid) dst[o++] = src[i++];
      while (j < hi) dst[o++] = src[j++];
    }
    t = src, src = dst, dst = t;
  }
  if (src != a) memcpy(a, src, sizeof(int64_t) * (size_t)n);
}

/* Unique's bookkeeping: 7 arrays of n int64 carved from one scratch. */
typedef struct uniq {
  int64_t n, nu;
  int64_t *perm, *tmp, *first, *count, *gid, *order, *rank;
} uniq;

/* Groups equal slices: sorts them (stably, so a group's first member is
 * its first occurrence), then numbers the runs of equal ones. The output
 * order is ascending, or by first occurrence when sorted=0. */
static void unique_groups(uniq *u, const slices *ctx, bool sorted) {
  for (int64_t i = 0; i < u->n; i++) u->perm[i] = i;
  merge_sort(u->perm, u->tmp, u->n, cmp_slices, ctx);
  u->nu = 0;
  for (int64_t i = 0; i < u->n; i++) {
    if (i == 0 || cmp_slices(ctx, u->perm[i - 1], u->perm[i]) != 0) {
      u->first[u->nu] = u->perm[i];
      u->count[u->nu++] = 0;
    }
    u->count[u->nu - 1]++;
    u->gid[u->perm[i]] = u->nu - 1;
  }
  for (int64_t g = 0; g < u->nu; g++) u->order[g] = g;
  if (!sorted) merge_sort(u->order, u->tmp, u->nu, cmp_keys, u->first);
  for (int64_t g = 0; g < u->nu; g++) u->rank[u->order[g]] = g;
}

/* The four outputs (the optional ones only when the node names them). */
static keel_status unique_outputs(keel_kctx *k, const keel_tensor *x, const split3 *s, int axis,
                                  const uniq *u) {
  int64_t shape[KEEL_MAX_RANK] = {u->nu};
  int r = 1;
  if (axis >= 0) {
    r = x->rank;
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)r);
    shape[axis] = u->nu;
  }
  keel_tensor *y, *t[4];
  KEEL_TRY(out_tensor(k, 0, x->dtype, r, shape, &y));
  for (int64_t a = 0; a < s->outer; a++)
    for (int64_t g = 0; g < u->nu; g++)
      KEEL_TRY(copy_elems(y, (a * u->nu + g) * s->inner, x,
                          (a * s->dim + u->first[u->order[g]]) * s->inner, s->inner));
  for (int i = 1; i < 4; i++) {
    t[i] = NULL;
    if (keel_k_has_out(k, i))
      KEEL_TRY(out_tensor(k, i, KEEL_INT64, 1, (int64_t[]){i == 2 ? u->n : u->nu}, &t[i]));
  }
  for (int64_t g = 0; g < u->nu; g++) {
    if (t[1]) ((int64_t *)t[1]->data)[g] = u->first[u->order[g]];
    if (t[3]) ((int64_t *)t[3]->data)[g] = u->count[u->order[g]];
  }
  for (int64_t i = 0; t[2] && i < u->n; i++) ((int64_t *)t[2]->data)[i] = u->rank[u->gid[i]];
  return KEEL_OK;
}

static keel_status op_unique(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int axis = -1; /* none: the flattened input */
  if (keel_k_attr(k, "axis")) KEEL_TRY(attr_axis(k, x->rank, 0, &axis));
  split3 s = {1, keel_tensor_numel(x), 1};
  if (axis >= 0) s = split_at(x, axis);
  uniq u = {.n = s.dim};
  void *p;
  KEEL_TRY(scratch_n(k, u.n, 7 * sizeof(int64_t), &p));
  int64_t *w = p;
  int64_t **arrays[7] = {&u.perm, &u.tmp, &u.first, &u.count, &u.gid, &u.order, &u.rank};
  for (int i = 0; i < 7; i++) *arrays[i] = w + i * u.n;
  slices S = {x, s};
  unique_groups(&u, &S, keel_k_attr_i(k, "sorted", 1) != 0);
  return unique_outputs(k, x, &s, axis, &u);
}

/* ================================================== CumSum, CumProd */

/* y along the axis of (outer, n, inner), row by row: each row of y is the
 * previous row of y combined (+ or *) with a row of x (the same row, or
 * the previous one when exclusive, where the first row is the identity:
 * 0 or 1). Integers wrap (computed in uint64_t, then truncated). */
typedef void (*cumul_fn)(const void *x, void *y, split3 s, bool excl, bool rev);

#define DEF_CUMUL(name, sfx, T, OP, ID)                                                  \
  static void name##_##sfx(const void *px, void *py, split3 s, bool excl, bool rev) {   \
    for (int64_t a = 0; a < s.outer; a++) {                                              \
      const T *x = (const T *)px + a * s.dim * s.inner;                                  \
      T *y = (T *)py + a * s.dim * s.inner;                                              \
      for (int64_t step = 0; step < s.dim; step++) {                                     \
        int64_t j = rev ? s.dim - 1 - step : step, p = rev ? j + 1 : j - 1;             \
        T *yr = y + j * s.inner;                                                         \
        const T *xr = x + (excl ? p : j) * s.inner, *yp = y + p * s.inner;              \
        if (step == 0)                                                                   \
          for (int64_t i = 0; i < s.inner; i++) yr[i] = excl ? (T)(ID) : x[j * s.inner + i]; \
        else                                                                             \
          for (int64_t i = 0; i < s.inner; i++) yr[i] = (T)(OP(yp[i], xr[i]));           \
      }                                                                                  \
    }                                                                                    \
  }
#define ADD_F(a, b) ((a) + (b))
#define ADD_I(a, b) ((uint64_t)(a) + (uint64_t)(b))
#define MUL_F(a, b) ((a) * (b))
#define MUL_I(a, b) ((uint64_t)(a) * (uint64_t)(b))

#define DEF_CUMUL_ALL(name, OPF, OPI, ID)                                                \
  DEF_CUMUL(name, f32, float, OPF, ID) DEF_CUMUL(name, f64, double, OPF, ID)             \
  DEF_CUMUL(name, i8, int8_t, OPI, ID) DEF_CUMUL(name, i16, int16_t, OPI, ID)            \
  DEF_CUMUL(name, i32, int32_t, OPI, ID) DEF_CUMUL(name, i64, int64_t, OPI, ID)          \
  DEF_CUMUL(name, u8, uint8_t, OPI, ID) DEF_CUMUL(name, u16, uint16_t, OPI, ID)          \
  DEF_CUMUL(name, u32, uint32_t, OPI, ID) DEF_CUMUL(name, u64, uint64_t, OPI, ID)        \
  static const cumul_fn name##_FNS[KEEL_BFLOAT16 + 1] = {                                \
      [KEEL_FLOAT] = name##_f32, [KEEL_DOUBLE] = name##_f64, [KEEL_INT8] = name##_i8,    \
      [KEEL_INT16] = name##_i16, [KEEL_INT32] = name##_i32, [KEEL_INT64] = name##_i64,   \
      [KEEL_UINT8] = name##_u8,  [KEEL_UINT16] = name##_u16, [KEEL_UINT32] = name##_u32, \
      [KEEL_UINT64] = name##_u64};
DEF_CUMUL_ALL(cumsum, ADD_F, ADD_I, 0)
DEF_CUMUL_ALL(cumprod, MUL_F, MUL_I, 1)

/* float16 / bfloat16 accumulate in float and round each output once. */
static keel_status cumulative(keel_kctx *k, const char *op, const cumul_fn *fns) {
  const keel_tensor *x;
  int64_t ax;
  int axis, dt;
  char what[32];
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in_scalar_i64(k, 1, &ax));
  snprintf(what, sizeof what, "%s: axis", op);
  KEEL_TRY(keel_k_axis(ax, x->rank, what, &axis));
  dt = x->dtype;
  cumul_fn fn = dt >= 0 && dt <= KEEL_BFLOAT16 ? fns[keel_is_half(dt) ? KEEL_FLOAT : dt] : NULL;
  if (!fn) return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", op, keel_dtype_name((keel_dtype)dt));
  keel_tensor *o;
  KEEL_TRY(out_tensor(k, 0, dt, x->rank, x->shape, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  bool excl = keel_k_attr_i(k, "exclusive", 0) != 0, rev = keel_k_attr_i(k, "reverse", 0) != 0;
  split3 s = split_at(x, axis);
  if (!keel_is_half(dt)) {
    fn(x->data, o->data, s, excl, rev);
    return KEEL_OK;
  }
  keel_tensor fx;
  void *acc;
  KEEL_TRY(keel_k_to_f32(k, x, &fx));
  KEEL_TRY(scratch_n(k, keel_tensor_numel(x), sizeof(float), &acc));
  fn(fx.data, acc, s, excl, rev);
  keel_f32_store(acc, o);
  return KEEL_OK;
}

static keel_status op_cumsum(keel_kctx *k) { return cumulative(k, "CumSum", cumsum_FNS); }
static keel_status op_cumprod(keel_kctx *k) { return cumulative(k, "CumProd", cumprod_FNS); }

/* ====================================================== TensorScatter */

/* The KV-cache update (opset 24): present = past, with update's rows
 * written along `axis` from write_indices[b] on (batch b = the first
 * coordinate), wrapping modulo max_sequence_length in circular mode. Every
 * write index is checked before anything moves. */
static keel_status tscatter_check(const keel_tensor *past, const keel_tensor *upd, int axis) {
  char a[96], b[96];
  bool ok = upd->dtype == past->dtype && upd->rank == past->rank &&
            upd->shape[axis] <= past->shape[axis];
  for (int d = 0; ok && d < past->rank; d++) ok = d == axis || upd->shape[d] == past->shape[d];
  if (ok) return KEEL_OK;
  return keel_err(KEEL_ERR_SHAPE,
                  "TensorScatter: update %s %s does not fit past_cache %s %s along axis %d",
                  keel_dtype_name((keel_dtype)upd->dtype), keel_shape_str(upd->rank, upd->shape, a, sizeof a),
                  keel_dtype_name((keel_dtype)past->dtype), keel_shape_str(past->rank, past->shape, b, sizeof b),
                  axis);
}

/* write_indices (int64 [batch], optional: zeros) into w, each checked. */
static keel_status tscatter_indices(keel_kctx *k, int64_t batch, int64_t max_seq, int64_t seq,
                                    bool circ, int64_t **w) {
  KEEL_TRY(scratch_n(k, batch > 0 ? batch : 1, sizeof(int64_t), (void **)w));
  const keel_tensor *wi;
  KEEL_TRY(keel_k_in_opt(k, 2, &wi));
  for (int64_t b = 0; b < batch; b++) (*w)[b] = 0;
  if (!wi) return KEEL_OK;
  if ((wi->dtype != KEEL_INT64 && wi->dtype != KEEL_INT32) || wi->rank != 1 || wi->shape[0] != batch)
    return keel_err(KEEL_ERR_SHAPE, "TensorScatter: write_indices must be int64 [%lld], got %s of rank %d",
                    (long long)batch, keel_dtype_name((keel_dtype)wi->dtype), wi->rank);
  for (int64_t b = 0; b < batch; b++) {
    int64_t v = wi->dtype == KEEL_INT64 ? ((const int64_t *)wi->data)[b] : ((const int32_t *)wi->data)[b];
    if (v < 0 || (!circ && v > max_seq - seq))
      return keel_err(KEEL_ERR_SHAPE,
                      "TensorScatter: write_indices[%lld] = %lld is out of range for %lld rows into %lld (%s)",
                      (long long)b, (long long)v, (long long)seq, (long long)max_seq,
                      circ ? "circular" : "linear");
    (*w)[b] = v;
  }
  return KEEL_OK;
}

static keel_status op_tensor_scatter(keel_kctx *k) {
  const keel_tensor *past, *upd;
  KEEL_TRY(keel_k_in(k, 0, &past));
  KEEL_TRY(keel_k_in(k, 1, &upd));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", -2), past->rank, "TensorScatter: axis", &axis));
  if (axis == 0) return keel_err(KEEL_ERR_SHAPE, "TensorScatter: axis must not be the batch axis 0");
  KEEL_TRY(tscatter_check(past, upd, axis));
  const char *mode = keel_k_attr_s(k, "mode", "linear");
  bool circ = strcmp(mode, "circular") == 0;
  if (!circ && strcmp(mode, "linear") != 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "TensorScatter: mode '%s' is not 'linear' or 'circular'", mode);
  split3 s = split_at(past, axis);
  int64_t seq = upd->shape[axis], per_batch = dims_prod(past->shape, 1, axis), *w;
  KEEL_TRY(tscatter_indices(k, past->shape[0], s.dim, seq, circ, &w));
  keel_tensor *o;
  KEEL_TRY(keel_k_reuse(k, 0, 0, past->dtype, past->rank, past->shape, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  if (o->data != past->data) KEEL_TRY(keel_tensor_copy_elems(o, 0, past, 0, keel_tensor_numel(past)));
  for (int64_t a = 0; a < s.outer; a++) {
    int64_t base = w[per_batch ? a / per_batch : 0];
    for (int64_t i = 0; i < seq; i++) {
      int64_t row = circ ? (base + i) % s.dim : base + i;
      KEEL_TRY(keel_tensor_copy_elems(o, (a * s.dim + row) * s.inner, upd, (a * seq + i) * s.inner, s.inner));
    }
  }
  return KEEL_OK;
}

/* ============================================================ table */

/* types: the data input's; for OneHot, the indices'. */
#define NUM_BOOL (KEEL_TS_NUM | KEEL_T(KEEL_BOOL))
const keel_opdef keel_ops_gather_scatter[] = {
    {"", "Gather", 1, KEEL_OPSET_MAX, op_gather, 0, KEEL_TS_ALL, keel_gpu_gather_impls},
    {"", "GatherElements", 11, KEEL_OPSET_MAX, op_gather_elements, 0, KEEL_TS_ALL},
    {"", "GatherND", 11, KEEL_OPSET_MAX, op_gather_nd, 0, KEEL_TS_ALL},
    {"", "Scatter", 9, 10, op_scatter, 0, KEEL_TS_ALL},
    {"", "ScatterElements", 11, KEEL_OPSET_MAX, op_scatter_elements, 0, KEEL_TS_ALL},
    {"", "ScatterND", 11, KEEL_OPSET_MAX, op_scatter_nd, 0, KEEL_TS_ALL},
    {"", "OneHot", 9, KEEL_OPSET_MAX, op_onehot, 0, NUM_BOOL},
    {"", "Compress", 9, KEEL_OPSET_MAX, op_compress, 0, KEEL_TS_ALL},
    {"", "NonZero", 9, KEEL_OPSET_MAX, op_nonzero, 0, KEEL_TS_ALL},
    {"", "TopK", 1, KEEL_OPSET_MAX, op_topk, 0, KEEL_TS_NUM},
    {"", "Unique", 11, KEEL_OPSET_MAX, op_unique, 0, KEEL_TS_ALL},
    {"", "CumSum", 11, KEEL_OPSET_MAX, op_cumsum, 0, KEEL_TS_NUM},
    {"", "TensorScatter", 24, KEEL_OPSET_MAX, op_tensor_scatter, 0, KEEL_TS_ALL},
    {"", "CumProd", 26, KEEL_OPSET_MAX, op_cumprod, 0, KEEL_TS_NUM},
    {0},
};
#undef NUM_BOOL
