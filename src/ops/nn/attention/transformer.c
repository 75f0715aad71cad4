/* transformer.c: the per-token ops of current transformer exports:
 * RMSNormalization (23), RotaryEmbedding (23, and com.microsoft's with
 * ONNX Runtime's inputs), and the activations Gelu (20, exact and tanh),
 * Swish (24) and SwiGLU (28).
 *
 * Each runs on float or double directly; float16/bfloat16 run in float on
 * staged copies and round once into the output. RMSNormalization sums
 * squares in double (stash_type 1 asks for at least float) and reads its
 * scale broadcast to the normalized dims, expanded once per call.
 * RotaryEmbedding rotates each head's first rotary_embedding_dim values
 * by the (cos, sin) row of its token, picked through position_ids or
 * given per (batch, token); the loops over a row are branch-free, with
 * the interleaved and the split-half layouts in separate loops.
 */
#include <math.h>

#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/common/vmath.h"
#include "ops/math/math_gpu.h"

/* ============================================================ staging */

/* An op's float view of input x and output 0 (x's shape, `dt`): for
 * halves, float scratch that io_end rounds into the output. */
typedef struct io {
  const void *x;
  void *y;
  keel_tensor *out;
  bool half;
} io;

static keel_status io_begin(keel_kctx *k, const keel_tensor *x, const char *op, io *o) {
  if (!keel_dtype_is_float(x->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", op,
                    keel_dtype_name((keel_dtype)x->dtype));
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o->out));
  o->half = keel_is_half(x->dtype);
  o->x = x->data;
  o->y = o->out->data;
  if (o->half && keel_tensor_numel(x) > 0) {
    keel_tensor f;
    void *p;
    KEEL_TRY(keel_k_to_f32(k, x, &f));
    KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(x), sizeof(float), &p));
    o->x = f.data;
    o->y = p;
  }
  return KEEL_OK;
}

static void io_end(io *o) {
  if (o->half) keel_f32_store(o->y, o->out);
}

/* Another input of x's type as the compute type (float for halves). */
static keel_status io_other(keel_kctx *k, const keel_tensor *t, const void **p) {
  *p = t->data;
  if (!keel_is_half(t->dtype)) return KEEL_OK;
  keel_tensor f;
  KEEL_TRY(keel_k_to_f32(k, t, &f));
  *p = f.data;
  return KEEL_OK;
}

/* ======================================================== activations */

enum { ACT_GELU, ACT_GELU_TANH, ACT_SWISH, ACT_SWIGLU };

/* Swish and SwiGLU (GELU's two forms are activation.c's, the one copy). */
#define DEF_ACT(T, EXP)                                                                 \
  static void act_##T(int kind, const T *x, const T *b, T *y, int64_t n, T alpha) {     \
    if (kind == ACT_SWISH)                                                              \
      for (int64_t i = 0; i < n; i++) y[i] = x[i] / ((T)1 + EXP(-alpha * x[i]));        \
    else                                                                                \
      for (int64_t i = 0; i < n; i++) y[i] = x[i] / ((T)1 + EXP(-alpha * x[i])) * b[i]; \
  }
DEF_ACT(float, expf)
DEF_ACT(double, exp)

/* Gelu in place on y (a copy of x when y is not x's buffer). */
static void gelu(int kind, bool dbl, const void *x, void *y, int64_t n) {
  keel_act a = {kind == ACT_GELU ? KEEL_ACT_GELU : KEEL_ACT_GELU_TANH, 0, 0};
  size_t es = dbl ? sizeof(double) : sizeof(float);
  if (x != y) memcpy(y, x, (size_t)n * es);
  if (dbl) keel_act_apply_f64(&a, y, n);
  else keel_act_apply_f32(&a, y, n);
}

static keel_status act_run(keel_kctx *k, const char *op, int kind, float alpha) {
  const keel_tensor *x, *b = NULL;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (kind == ACT_SWIGLU) {
    KEEL_TRY(keel_k_in(k, 1, &b));
    bool same = b->dtype == x->dtype && b->rank == x->rank &&
                !memcmp(b->shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
    if (!same) {
      char s1[96], s2[96];
      return keel_err(KEEL_ERR_SHAPE, "A %s %s and B %s %s must have one shape and type",
                      keel_dtype_name((keel_dtype)x->dtype),
                      keel_shape_str(x->rank, x->shape, s1, sizeof s1),
                      keel_dtype_name((keel_dtype)b->dtype),
                      keel_shape_str(b->rank, b->shape, s2, sizeof s2));
    }
  }
  io o;
  const void *bp = NULL;
  KEEL_TRY(io_begin(k, x, op, &o));
  if (keel_tensor_numel(x) == 0) return KEEL_OK;
  if (b) KEEL_TRY(io_other(k, b, &bp));
  int64_t n = keel_tensor_numel(x);
  bool dbl = x->dtype == KEEL_DOUBLE;
  if (kind == ACT_GELU || kind == ACT_GELU_TANH) gelu(kind, dbl, o.x, o.y, n);
  else if (dbl) act_double(kind, o.x, bp, o.y, n, alpha);
  else act_float(kind, o.x, bp, o.y, n, (float)alpha);
  io_end(&o);
  return KEEL_OK;
}

static keel_status op_gelu(keel_kctx *k) {
  const char *ap = keel_k_attr_s(k, "approximate", "none");
  bool tanh_ = !strcmp(ap, "tanh");
  if (!tanh_ && strcmp(ap, "none"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "approximate is '%s', expected 'none' or 'tanh'", ap);
  return act_run(k, "Gelu", tanh_ ? ACT_GELU_TANH : ACT_GELU, 0);
}

static keel_status op_swish(keel_kctx *k) {
  return act_run(k, "Swish", ACT_SWISH, keel_k_attr_f(k, "alpha", 1.0f));
}

static keel_status op_swiglu(keel_kctx *k) {
  return act_run(k, "SwiGLU", ACT_SWIGLU, keel_k_attr_f(k, "alpha", 1.0f));
}

/* =================================================== RMSNormalization */

/* scale broadcast to `shape` (rank r), as n doubles in w. */
static keel_status expand_scale(const keel_tensor *s, int r, const int64_t *shape, double *w) {
  int rr;
  int64_t bs[KEEL_MAX_RANK], st[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0}, off = 0;
  KEEL_TRY(keel_broadcast_shape(s->rank, s->shape, r, shape, &rr, bs));
  if (rr != r || memcmp(bs, shape, sizeof(int64_t) * (size_t)r)) {
    char s1[96], s2[96];
    return keel_err(KEEL_ERR_SHAPE, "scale %s does not broadcast to the normalized shape %s",
                    keel_shape_str(s->rank, s->shape, s1, sizeof s1),
                    keel_shape_str(r, shape, s2, sizeof s2));
  }
  keel_broadcast_strides(s->rank, s->shape, r, shape, st);
  int64_t n = keel_shape_numel(r, shape);
  for (int64_t i = 0; i < n; i++) {
    w[i] = keel_elem_get_f64(s->dtype, s->data, (size_t)off);
    for (int d = r - 1; d >= 0; d--) {
      off += st[d];
      if (++idx[d] < shape[d]) break;
      off -= st[d] * shape[d];
      idx[d] = 0;
    }
  }
  return KEEL_OK;
}

/* y = x / sqrt(mean(x^2) + eps) * w over rows of `inner` elements; w
 * has inner values (wn == inner) or one per element of x. */
#define DEF_RMS(T)                                                                        \
  static void rms_##T(const T *x, T *y, int64_t outer, int64_t inner, const double *w,    \
                      int64_t wn, double eps) {                                           \
    for (int64_t r = 0; r < outer; r++) {                                                 \
      const T *xr = x + r * inner;                                                        \
      T *yr = y + r * inner;                                                              \
      const double *wr = w + (wn == inner ? 0 : r * inner);                               \
      double t[4] = {0, 0, 0, 0};                                                         \
      int64_t j = 0;                                                                      \
      for (; j + 4 <= inner; j += 4)                                                      \
        for (int u = 0; u < 4; u++) t[u] += (double)xr[j + u] * xr[j + u];                \
      for (; j < inner; j++) t[0] += (double)xr[j] * xr[j];                               \
      double inv = 1.0 / sqrt(((t[0] + t[1]) + (t[2] + t[3])) / (double)inner + eps);     \
      for (j = 0; j < inner; j++) yr[j] = (T)(xr[j] * inv * wr[j]);                       \
    }                                                                                     \
  }
DEF_RMS(float)
DEF_RMS(double)

static keel_status op_rms_norm(keel_kctx *k) {
  const keel_tensor *x, *s;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &s));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", -1), x->rank, "axis", &axis));
  double eps = keel_k_attr_f(k, "epsilon", 1e-5f);
  if (!keel_dtype_is_float(s->dtype))
    return keel_err(KEEL_ERR_SHAPE, "scale must be a float tensor, got %s",
                    keel_dtype_name((keel_dtype)s->dtype));
  int64_t outer = keel_shape_numel(axis, x->shape);
  int64_t inner = keel_shape_numel(x->rank - axis, x->shape + axis);
  /* a scale reaching into the leading dims is expanded over all of x */
  bool full = s->rank > x->rank - axis;
  int64_t wn = full ? keel_tensor_numel(x) : inner;
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, wn > 0 ? wn : 1, sizeof(double), &p));
  if (full) KEEL_TRY(expand_scale(s, x->rank, x->shape, p));
  else KEEL_TRY(expand_scale(s, x->rank - axis, x->shape + axis, p));
  io o;
  KEEL_TRY(io_begin(k, x, "RMSNormalization", &o));
  if (keel_tensor_numel(x) == 0) return KEEL_OK;
  if (x->dtype == KEEL_DOUBLE) rms_double(o.x, o.y, outer, inner, p, wn, eps);
  else rms_float(o.x, o.y, outer, inner, p, wn, eps);
  io_end(&o);
  return KEEL_OK;
}

/* ==================================================== RotaryEmbedding */

/* Where the rows are: x is 4-D [B, H, S, D] or 3-D [B, S, H*D]; the
 * (cos, sin) row of token (b, s) is row pos[b*S + s] of a [P, half]
 * cache, or row b*S + s (rank 3 cache) or s (rank 2) without pos. */
typedef struct rope {
  int64_t B, H, S, D, rd, half;
  int64_t sb, sh, ss;              /* x strides of batch, head, token      */
  bool interleaved;
  const int64_t *pos;
  int cache_rank;
} rope;

static int64_t rope_row(const rope *r, int64_t b, int64_t s) {
  if (r->pos) return r->pos[b * r->S + s];
  return r->cache_rank == 3 ? b * r->S + s : s;
}

#define DEF_ROPE(T)                                                                     \
  static void rope_##T(const rope *r, const T *x, T *y, const T *cosc, const T *sinc) { \
    int64_t h2 = r->half;                                                               \
    for (int64_t b = 0; b < r->B; b++)                                                  \
      for (int64_t s = 0; s < r->S; s++) {                                              \
        const T *c = cosc + rope_row(r, b, s) * h2, *sn = sinc + rope_row(r, b, s) * h2; \
        for (int64_t h = 0; h < r->H; h++) {                                            \
          int64_t o = b * r->sb + h * r->sh + s * r->ss;                                \
          const T *xr = x + o;                                                          \
          T *yr = y + o;                                                                \
          if (r->interleaved) {                                                         \
            for (int64_t i = 0; i < h2; i++) {                                          \
              T x1 = xr[2 * i], x2 = xr[2 * i + 1];                                     \
              yr[2 * i] = c[i] * x1 - sn[i] * x2;                                       \
              yr[2 * i + 1] = sn[i] * x1 + c[i] * x2;                                   \
            }                                                                           \
          } else {                                                                      \
            for (int64_t i = 0; i < h2; i++) {                                          \
              T x1 = xr[i], x2 = xr[h2 + i];                                            \
              yr[i] = c[i] * x1 - sn[i] * x2;                                           \
              yr[h2 + i] = sn[i] * x1 + c[i] * x2;                                      \
            }                                                                           \
          }                                                                             \
          for (int64_t i = r->rd; i < r->D; i++) yr[i] = xr[i];                         \
        }                                                                               \
      }                                                                                 \
  }
DEF_ROPE(float)
DEF_ROPE(double)

static keel_status rope_shape(keel_kctx *k, const keel_tensor *x, rope *r) {
  char s1[96];
  if (x->rank == 4) {
    r->B = x->shape[0], r->H = x->shape[1], r->S = x->shape[2], r->D = x->shape[3];
    r->ss = r->D, r->sh = r->S * r->D, r->sb = r->H * r->sh;
  } else if (x->rank == 3) {
    r->H = keel_k_attr_i(k, "num_heads", 0);
    if (r->H <= 0 || x->shape[2] % r->H)
      return keel_err(KEEL_ERR_INVALID_MODEL,
                      "3-D input %s needs num_heads dividing its last dim, got %lld",
                      keel_shape_str(x->rank, x->shape, s1, sizeof s1), (long long)r->H);
    r->B = x->shape[0], r->S = x->shape[1], r->D = x->shape[2] / r->H;
    r->sh = r->D, r->ss = x->shape[2], r->sb = r->S * r->ss;
  } else {
    return keel_err(KEEL_ERR_SHAPE, "input must be 3-D or 4-D, got %s",
                    keel_shape_str(x->rank, x->shape, s1, sizeof s1));
  }
  r->rd = keel_k_attr_i(k, "rotary_embedding_dim", 0);
  if (r->rd == 0) r->rd = r->D;
  if (r->rd < 0 || r->rd > r->D || r->rd % 2)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "rotary_embedding_dim %lld must be even and at most the head size %lld",
                    (long long)r->rd, (long long)r->D);
  r->half = r->rd / 2;
  r->interleaved = keel_k_attr_i(k, "interleaved", 0) != 0;
  return KEEL_OK;
}

/* The caches and position_ids against the rows they must provide. */
static keel_status rope_caches(const rope *r, const keel_tensor *c, const keel_tensor *s,
                               const keel_tensor *pos) {
  char s1[96], s2[96];
  bool ok = c->dtype == s->dtype && c->rank == s->rank &&
            !memcmp(c->shape, s->shape, sizeof(int64_t) * (size_t)c->rank) && c->rank >= 2 &&
            c->shape[c->rank - 1] == r->half;
  if (ok && pos) ok = c->rank == 2;
  else if (ok) ok = (c->rank == 3 && c->shape[0] == r->B && c->shape[1] == r->S) ||
                    (c->rank == 2 && c->shape[0] == r->S);
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE,
                    "cos_cache %s and sin_cache %s must be [%s, %lld] (rotary dim / 2)",
                    keel_shape_str(c->rank, c->shape, s1, sizeof s1),
                    keel_shape_str(s->rank, s->shape, s2, sizeof s2),
                    pos ? "max_position" : "batch, seq", (long long)r->half);
  if (!pos) return KEEL_OK;
  if (pos->dtype != KEEL_INT64 || keel_tensor_numel(pos) != r->B * r->S || pos->rank != 2)
    return keel_err(KEEL_ERR_SHAPE, "position_ids must be int64 [%lld, %lld], got %s",
                    (long long)r->B, (long long)r->S,
                    keel_shape_str(pos->rank, pos->shape, s1, sizeof s1));
  const int64_t *p = pos->data;
  for (int64_t i = 0; i < r->B * r->S; i++)
    if (p[i] < 0 || p[i] >= c->shape[0])
      return keel_err(KEEL_ERR_SHAPE, "position_ids[%lld] = %lld is outside the cache's %lld rows",
                      (long long)i, (long long)p[i], (long long)c->shape[0]);
  return KEEL_OK;
}

static keel_status op_rotary(keel_kctx *k) {
  const keel_tensor *x, *c, *s, *pos;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &c));
  KEEL_TRY(keel_k_in(k, 2, &s));
  KEEL_TRY(keel_k_in_opt(k, 3, &pos));
  rope r;
  memset(&r, 0, sizeof r);
  KEEL_TRY(rope_shape(k, x, &r));
  KEEL_TRY(rope_caches(&r, c, s, pos));
  if (c->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "the caches are %s, the input %s",
                    keel_dtype_name((keel_dtype)c->dtype), keel_dtype_name((keel_dtype)x->dtype));
  r.pos = pos ? pos->data : NULL;
  r.cache_rank = c->rank;
  io o;
  const void *cp, *sp;
  KEEL_TRY(io_begin(k, x, "RotaryEmbedding", &o));
  if (keel_tensor_numel(x) == 0) return KEEL_OK;
  KEEL_TRY(io_other(k, c, &cp));
  KEEL_TRY(io_other(k, s, &sp));
  if (x->dtype == KEEL_DOUBLE) rope_double(&r, o.x, o.y, cp, sp);
  else rope_float(&r, o.x, o.y, cp, sp);
  io_end(&o);
  return KEEL_OK;
}

/* com.microsoft RotaryEmbedding (ONNX Runtime's schema): inputs (input,
 * position_ids, cos_cache, sin_cache); position_ids is [B, S] or one
 * offset (token s of every batch at offset + s); the caches are
 * [max_position, rotary_dim / 2]; a 3-D input without num_heads has heads
 * of twice the caches' width. */
static keel_status rope_ms_shape(keel_kctx *k, const keel_tensor *x, const keel_tensor *c,
                                 rope *r) {
  if (x->rank == 3 && keel_k_attr_i(k, "num_heads", 0) == 0) {
    if (keel_k_attr_i(k, "rotary_embedding_dim", 0) != 0)
      return keel_err(KEEL_ERR_INVALID_MODEL, "rotary_embedding_dim needs num_heads");
    int64_t hs = c->rank == 2 ? 2 * c->shape[1] : 0;
    if (hs <= 0 || x->shape[2] % hs)
      return keel_err(KEEL_ERR_SHAPE, "hidden size %lld is not a multiple of the head size %lld",
                      (long long)x->shape[2], (long long)hs);
    r->H = x->shape[2] / hs;
    r->B = x->shape[0], r->S = x->shape[1], r->D = hs;
    r->sh = hs, r->ss = x->shape[2], r->sb = r->S * r->ss;
    r->rd = hs, r->half = hs / 2;
    r->interleaved = keel_k_attr_i(k, "interleaved", 0) != 0;
    return KEEL_OK;
  }
  return rope_shape(k, x, r);
}

static keel_status op_rotary_ms(keel_kctx *k) {
  const keel_tensor *x, *pid, *c, *s;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &pid));
  KEEL_TRY(keel_k_in(k, 2, &c));
  KEEL_TRY(keel_k_in(k, 3, &s));
  if (keel_k_attr_i(k, "is_packed_batching", 0))
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "RotaryEmbedding (com.microsoft, opset 1): is_packed_batching");
  rope r;
  memset(&r, 0, sizeof r);
  KEEL_TRY(rope_ms_shape(k, x, c, &r));
  if (pid->dtype != KEEL_INT64 ||
      (keel_tensor_numel(pid) != 1 && keel_tensor_numel(pid) != r.B * r.S))
    return keel_err(KEEL_ERR_SHAPE, "position_ids must be int64 [1] or [%lld, %lld]",
                    (long long)r.B, (long long)r.S);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, r.B * r.S + 1, sizeof(int64_t), &p));
  int64_t *pos = p;
  const int64_t *pv = pid->data;
  for (int64_t i = 0; i < r.B * r.S; i++)
    pos[i] = keel_tensor_numel(pid) == 1 ? pv[0] + i % r.S : pv[i];
  keel_tensor pt = {.data = pos, .dtype = KEEL_INT64, .rank = 2, .shape = {r.B, r.S}};
  KEEL_TRY(rope_caches(&r, c, s, &pt));
  if (c->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "the caches are %s, the input %s",
                    keel_dtype_name((keel_dtype)c->dtype), keel_dtype_name((keel_dtype)x->dtype));
  r.pos = pos;
  r.cache_rank = 2;
  io o;
  const void *cp, *sp;
  KEEL_TRY(io_begin(k, x, "RotaryEmbedding", &o));
  if (keel_tensor_numel(x) == 0) return KEEL_OK;
  KEEL_TRY(io_other(k, c, &cp));
  KEEL_TRY(io_other(k, s, &sp));
  if (x->dtype == KEEL_DOUBLE) rope_double(&r, o.x, o.y, cp, sp);
  else rope_float(&r, o.x, o.y, cp, sp);
  io_end(&o);
  return KEEL_OK;
}

const keel_opdef keel_ops_transformer[] = {
    {"", "RMSNormalization", 23, KEEL_OPSET_MAX, op_rms_norm, 0, KEEL_TS_FLOAT},
    {"", "RotaryEmbedding", 23, KEEL_OPSET_MAX, op_rotary, 0, KEEL_TS_FLOAT},
    {"", "Gelu", 20, KEEL_OPSET_MAX, op_gelu, 0, KEEL_TS_FLOAT, keel_gpu_unary_impls},
    {"", "Swish", 24, KEEL_OPSET_MAX, op_swish, 0, KEEL_TS_FLOAT},
    {"", "SwiGLU", 28, KEEL_OPSET_MAX, op_swiglu, 0, KEEL_TS_FLOAT},
    {"com.microsoft", "RotaryEmbedding", 1, KEEL_OPSET_MAX, op_rotary_ms, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {0},
};
