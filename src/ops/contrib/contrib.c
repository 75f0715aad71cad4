/* contrib.c: the floating-point com.microsoft ops that ONNX Runtime's graph
 * optimizer writes when it fuses a subgraph: FusedMatMul, FusedConv, the
 * GELU family (Gelu, FastGelu, BiasGelu, QuickGelu), BiasAdd,
 * SkipLayerNormalization and SkipSimplifiedLayerNormalization. Semantics,
 * attributes and defaults follow ONNX Runtime's contrib schemas
 * (docs/ContribOperators.md); its outputs are the reference
 * (tests/contrib, tools/gen_contrib_tests.py).
 *
 * Each fused op runs keel's own kernel for its core and applies the rest
 * on the output: FusedMatMul permutes A and B as asked and calls MatMul,
 * FusedConv calls Conv and then adds Z and applies the activation, the
 * skip norms sum their inputs and call norm.c's LayerNormalization engine.
 * The activations are elementwise float loops; float16 / bfloat16 data
 * is staged into float and rounded once into the output.
 */
#include <math.h>

#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"
#include "ops/math/math_gpu.h"
#include "ops/nn/norm/norm.h"

#define MS "com.microsoft"

/* ====================================================== checks */

static bool same_shape(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) return false;
  for (int d = 0; d < ra; d++)
    if (a[d] != b[d]) return false;
  return true;
}

static keel_status need_float(const keel_tensor *t, const char *op, const char *what) {
  if (t->dtype == KEEL_FLOAT) return KEEL_OK;
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s (domain %s, opset 1): %s is %s; float is supported",
                  op, MS, what, keel_dtype_name((keel_dtype)t->dtype));
}

/* t (float, float16 or bfloat16) as float: t itself, or a staged copy. */
static keel_status f32_view(keel_kctx *k, const keel_tensor *t, const char *op, const char *what,
                            keel_tensor *out) {
  if (keel_is_half(t->dtype)) return keel_k_to_f32(k, t, out);
  KEEL_TRY(need_float(t, op, what));
  *out = *t;
  return KEEL_OK;
}

/* Output 0 of x's shape and type as a float buffer *yf: the output itself
 * (sharing x's buffer when it may) or, for halves, scratch that out_end
 * rounds into it. */
static keel_status out_begin(keel_kctx *k, const keel_tensor *x, keel_tensor **y, float **yf) {
  if (!keel_is_half(x->dtype)) {
    KEEL_TRY(keel_k_reuse(k, 0, 0, KEEL_FLOAT, x->rank, x->shape, y));
    *yf = (*y)->data;
    return KEEL_OK;
  }
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, y));
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(x), sizeof(float), &p));
  *yf = p;
  return KEEL_OK;
}

static void out_end(keel_tensor *y, const float *yf) {
  if (keel_is_half(y->dtype)) keel_f32_store(yf, y);
}

/* An optional 1-D bias (input i) of X's last dimension, as a float
 * pointer (NULL when absent). */
static keel_status last_dim_bias(keel_kctx *k, int i, const keel_tensor *x, const char *op,
                                 const char *what, const float **out) {
  const keel_tensor *b;
  KEEL_TRY(keel_k_in_opt(k, i, &b));
  *out = NULL;
  if (!b) return KEEL_OK;
  int64_t h = x->rank ? x->shape[x->rank - 1] : 1;
  if (b->rank != 1 || b->shape[0] != h || b->dtype != x->dtype) {
    char s1[128], s2[128];
    return keel_err(KEEL_ERR_SHAPE, "%s %s (%s) must be 1-D of X's last dimension and type (X is "
                    "%s %s)", what, keel_shape_str(b->rank, b->shape, s1, sizeof s1),
                    keel_dtype_name((keel_dtype)b->dtype),
                    keel_dtype_name((keel_dtype)x->dtype),
                    keel_shape_str(x->rank, x->shape, s2, sizeof s2));
  }
  keel_tensor f;
  KEEL_TRY(f32_view(k, b, op, what, &f));
  *out = f.data;
  return KEEL_OK;
}

/* Tensor `s` (skip) must be x's shape or a trailing part of it, leading
 * 1s allowed: it then repeats over x's leading dims. */
static keel_status check_suffix(const keel_tensor *x, const keel_tensor *s, const char *what) {
  int lead = 0;
  while (lead < s->rank && s->shape[lead] == 1) lead++;
  int r = s->rank - lead;
  bool ok = r <= x->rank;
  for (int d = 0; ok && d < r; d++) ok = s->shape[lead + d] == x->shape[x->rank - r + d];
  if (ok) return KEEL_OK;
  char s1[128], s2[128];
  return keel_err(KEEL_ERR_SHAPE, "%s %s does not fit input %s (expected its shape or a trailing part)",
                  what, keel_shape_str(s->rank, s->shape, s1, sizeof s1),
                  keel_shape_str(x->rank, x->shape, s2, sizeof s2));
}

/* ================================================= GELU family */

typedef enum { ACT_GELU, ACT_FAST_GELU, ACT_QUICK_GELU } gelu_kind;

/* y = f(x + bias) over rows of h (bias NULL: none). Gelu is the exact
 * form and FastGelu the tanh form, both activation.c's (the one copy of
 * GELU); QuickGelu is x * sigmoid(alpha * x). */
static void gelu_rows(gelu_kind kind, float alpha, const float *x, const float *bias, float *y,
                      int64_t n, int64_t h) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] + (bias ? bias[i % h] : 0.0f);
  if (kind == ACT_QUICK_GELU) {
    for (int64_t i = 0; i < n; i++) y[i] = y[i] / (1.0f + expf(-alpha * y[i]));
    return;
  }
  keel_act a = {kind == ACT_GELU ? KEEL_ACT_GELU : KEEL_ACT_GELU_TANH, 0, 0};
  keel_act_apply_f32(&a, y, n);
}

/* One input X (0), an optional last-dim bias (input 1 when bias_in). */
static keel_status gelu_op(keel_kctx *k, gelu_kind kind, const char *op, bool bias_in) {
  const keel_tensor *x;
  const float *bias = NULL;
  keel_tensor xf, *y;
  float *yf;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(f32_view(k, x, op, "X", &xf));
  if (bias_in) KEEL_TRY(last_dim_bias(k, 1, x, op, "bias", &bias));
  KEEL_TRY(out_begin(k, x, &y, &yf));
  int64_t n = keel_tensor_numel(x), h = x->rank ? x->shape[x->rank - 1] : 1;
  if (n) gelu_rows(kind, keel_k_attr_f(k, "alpha", 1.702f), xf.data, bias, yf, n, h);
  out_end(y, yf);
  return KEEL_OK;
}

static keel_status op_gelu(keel_kctx *k) { return gelu_op(k, ACT_GELU, "Gelu", false); }
static keel_status op_fast_gelu(keel_kctx *k) { return gelu_op(k, ACT_FAST_GELU, "FastGelu", true); }
static keel_status op_quick_gelu(keel_kctx *k) {
  return gelu_op(k, ACT_QUICK_GELU, "QuickGelu", false);
}

/* BiasGelu: Gelu(A + B), B a bias over A's last dimension (required). */
static keel_status op_bias_gelu(keel_kctx *k) {
  if (!keel_k_has_in(k, 1)) return keel_err(KEEL_ERR_SHAPE, "BiasGelu needs input B (the bias)");
  return gelu_op(k, ACT_GELU, "BiasGelu", true);
}

/* BiasAdd: Y = X + bias + skip; X and skip (N, S, C), bias (C). */
static keel_status op_bias_add(keel_kctx *k) {
  const keel_tensor *x, *skip;
  const float *bias;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 2, &skip));
  KEEL_TRY(need_float(x, "BiasAdd", "X"));
  KEEL_TRY(need_float(skip, "BiasAdd", "skip"));
  if (x->rank != 3 || !same_shape(x->rank, x->shape, skip->rank, skip->shape)) {
    char s1[128], s2[128];
    return keel_err(KEEL_ERR_SHAPE, "X %s and skip %s must both be (N, S, C)",
                    keel_shape_str(x->rank, x->shape, s1, sizeof s1),
                    keel_shape_str(skip->rank, skip->shape, s2, sizeof s2));
  }
  if (!keel_k_has_in(k, 1)) return keel_err(KEEL_ERR_SHAPE, "BiasAdd needs input bias");
  KEEL_TRY(last_dim_bias(k, 1, x, "BiasAdd", "bias", &bias));
  keel_tensor *y;
  KEEL_TRY(keel_k_reuse(k, 0, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  const float *xs = x->data, *ss = skip->data;
  float *ys = y->data;
  int64_t n = keel_tensor_numel(x), h = x->shape[2];
  for (int64_t i = 0; i < n; i++) ys[i] = xs[i] + bias[i % h] + ss[i];
  return KEEL_OK;
}

/* ========================================================= FusedMatMul */

/* dst = src with dims permuted: dst dim d is src dim perm[d] (any element
 * size). */
static void permute_copy(const keel_tensor *src, const int *perm, size_t es, void *dst) {
  int r = src->rank;
  int64_t sst[KEEL_MAX_RANK], st[KEEL_MAX_RANK], dims[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0};
  int64_t s = 1, n = keel_tensor_numel(src), off = 0;
  for (int d = r - 1; d >= 0; d--) sst[d] = s, s *= src->shape[d];
  for (int d = 0; d < r; d++) st[d] = sst[perm[d]], dims[d] = src->shape[perm[d]];
  const char *in = src->data;
  char *out = dst;
  for (int64_t i = 0; i < n; i++) {
    memcpy(out + (size_t)i * es, in + (size_t)off * es, es);
    for (int d = r - 1; d >= 0; d--) { /* odometer over dst's dims */
      off += st[d];
      if (++idx[d] < dims[d]) break;
      off -= st[d] * dims[d];
      idx[d] = 0;
    }
  }
}

/* t as FusedMatMul sees it: with transBatch, dim 0 moves behind the batch
 * dims ([1, ..., r-2, 0, r-1]); with trans, the last two dims swap. Makes a
 * scratch copy only when the order changes. */
static keel_status fmm_operand(keel_kctx *k, const keel_tensor *t, bool trans, bool tbatch,
                               keel_tensor *out) {
  int r = t->rank, perm[KEEL_MAX_RANK];
  *out = *t;
  if (r < 2) return KEEL_OK; /* a vector's transposes are itself */
  for (int d = 0; d < r; d++) perm[d] = d;
  if (tbatch) {
    for (int d = 0; d < r - 2; d++) perm[d] = d + 1;
    perm[r - 2] = 0;
  }
  if (trans) {
    int tmp = perm[r - 2];
    perm[r - 2] = perm[r - 1];
    perm[r - 1] = tmp;
  }
  bool same = true;
  for (int d = 0; d < r; d++) same = same && perm[d] == d;
  if (same) return KEEL_OK;
  for (int d = 0; d < r; d++) out->shape[d] = t->shape[perm[d]];
  size_t es = keel_dtype_size((keel_dtype)t->dtype);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(t), es, &p));
  if (keel_tensor_numel(t)) permute_copy(t, perm, es, p);
  out->data = p;
  out->buf = NULL;
  return KEEL_OK;
}

/* Y = alpha * op(A) x op(B), MatMul's broadcasting over batch dims. */
static keel_status op_fused_matmul(keel_kctx *k) {
  const keel_tensor *a, *b;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  if (a->dtype != KEEL_FLOAT && a->dtype != KEEL_DOUBLE && !keel_is_half(a->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "FusedMatMul (domain %s, opset 1) does not support %s",
                    MS, keel_dtype_name((keel_dtype)a->dtype));
  keel_tensor pa, pb, *y;
  KEEL_TRY(fmm_operand(k, a, keel_k_attr_i(k, "transA", 0) != 0,
                       keel_k_attr_i(k, "transBatchA", 0) != 0, &pa));
  KEEL_TRY(fmm_operand(k, b, keel_k_attr_i(k, "transB", 0) != 0,
                       keel_k_attr_i(k, "transBatchB", 0) != 0, &pb));
  KEEL_TRY(keel_matmul(k, &pa, &pb, &y));
  double alpha = keel_k_attr_f(k, "alpha", 1.0f);
  int64_t n = keel_tensor_numel(y);
  if (alpha == 1.0 || n == 0) return KEEL_OK;
  if (y->dtype == KEEL_FLOAT)
    for (int64_t i = 0; i < n; i++) ((float *)y->data)[i] *= (float)alpha;
  else
    for (int64_t i = 0; i < n; i++)
      keel_elem_set_f64(y->dtype, y->data, (size_t)i,
                        alpha * keel_elem_get_f64(y->dtype, y->data, (size_t)i));
  return KEEL_OK;
}

/* =========================================================== FusedConv */

typedef enum { FA_NONE, FA_RELU, FA_TANH, FA_SIGMOID, FA_LEAKY, FA_CLIP, FA_HARD_SIGMOID } fact;

typedef struct fused_act {
  fact kind;
  float p0, p1;
} fused_act;

/* The activation and activation_params attributes (ORT's defaults where
 * a parameter is missing). */
static keel_status fused_act_read(const keel_kctx *k, fused_act *a) {
  const char *s = keel_k_attr_s(k, "activation", "");
  int np;
  const float *p = keel_k_attr_floats(k, "activation_params", &np);
  static const struct { const char *name; fact kind; float d0, d1; } acts[] = {
      {"", FA_NONE, 0, 0},          {"Identity", FA_NONE, 0, 0},
      {"Relu", FA_RELU, 0, 0},      {"Tanh", FA_TANH, 0, 0},
      {"Sigmoid", FA_SIGMOID, 0, 0}, {"LeakyRelu", FA_LEAKY, 0.01f, 0},
      {"Clip", FA_CLIP, -INFINITY, INFINITY}, {"HardSigmoid", FA_HARD_SIGMOID, 0.2f, 0.5f},
  };
  for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
    if (strcmp(s, acts[i].name)) continue;
    a->kind = acts[i].kind;
    a->p0 = np > 0 ? p[0] : acts[i].d0;
    a->p1 = np > 1 ? p[1] : acts[i].d1;
    return KEEL_OK;
  }
  return keel_err(KEEL_ERR_UNSUPPORTED,
                  "FusedConv (domain %s, opset 1): activation '%s' is not one of Relu, Tanh, "
                  "Sigmoid, LeakyRelu, Clip, HardSigmoid", MS, s);
}

static void fused_act_apply(const fused_act *a, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = y[i];
    switch (a->kind) {
      case FA_NONE: break;
      case FA_RELU: v = v > 0 ? v : 0; break;
      case FA_TANH: v = tanhf(v); break;
      case FA_SIGMOID: v = 1.0f / (1.0f + expf(-v)); break;
      case FA_LEAKY: v = v >= 0 ? v : a->p0 * v; break;
      case FA_CLIP: v = v < a->p0 ? a->p0 : v > a->p1 ? a->p1 : v; break;
      case FA_HARD_SIGMOID: v = fmaxf(0.0f, fminf(1.0f, a->p0 * v + a->p1)); break;
    }
    y[i] = v;
  }
}

/* Y = activation(Conv(X, W, B) + Z), Z (optional) of Y's shape. */
static keel_status op_fused_conv(keel_kctx *k) {
  const keel_tensor *x, *z;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (!keel_is_half(x->dtype)) KEEL_TRY(need_float(x, "FusedConv", "X"));
  KEEL_TRY(keel_k_in_opt(k, 3, &z));
  fused_act act;
  KEEL_TRY(fused_act_read(k, &act));
  keel_tensor *y, yf, zf;
  KEEL_TRY(keel_conv_forward(k, &y));
  int64_t n = keel_tensor_numel(y);
  if (n == 0) return KEEL_OK;
  KEEL_TRY(f32_view(k, y, "FusedConv", "Y", &yf)); /* halves: a float copy */
  if (z) {
    if (z->dtype != y->dtype || !same_shape(z->rank, z->shape, y->rank, y->shape)) {
      char s1[128], s2[128];
      return keel_err(KEEL_ERR_SHAPE, "Z %s (%s) must have the output's type and shape %s",
                      keel_shape_str(z->rank, z->shape, s1, sizeof s1),
                      keel_dtype_name((keel_dtype)z->dtype),
                      keel_shape_str(y->rank, y->shape, s2, sizeof s2));
    }
    KEEL_TRY(f32_view(k, z, "FusedConv", "Z", &zf));
    float *yd = yf.data;
    const float *zd = zf.data;
    for (int64_t i = 0; i < n; i++) yd[i] += zd[i];
  }
  fused_act_apply(&act, yf.data, n);
  out_end(y, yf.data);
  return KEEL_OK;
}

/* ============================================= skip layer norms */

/* Outputs 1 and 2 of the skip norms (float, when asked for). */
static keel_status skip_stats(keel_kctx *k, const keel_tensor *x, const double *mean,
                              const double *inv) {
  int64_t shape[KEEL_MAX_RANK], h = x->shape[x->rank - 1];
  int64_t rows = h ? keel_tensor_numel(x) / h : 0;
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[x->rank - 1] = 1;
  for (int i = 1; i <= 2; i++) {
    if (!keel_k_has_out(k, i)) continue;
    keel_tensor *t;
    KEEL_TRY(keel_k_out(k, i, KEEL_FLOAT, x->rank, shape, &t));
    const double *src = i == 1 ? mean : inv;
    for (int64_t r = 0; r < rows; r++) ((float *)t->data)[r] = (float)src[r];
  }
  return KEEL_OK;
}

/* Both skip norms: s = input + skip (+ bias), optionally output 3, then
 * LayerNormalization (or RMS) of s over the last dim with gamma (input 2)
 * and beta (input 3, plain variant only). Outputs 1 and 2 (mean, inverse
 * standard deviation) have the input's shape with the last dim 1. */
static keel_status skip_norm(keel_kctx *k, bool rms) {
  const char *op = rms ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization";
  const keel_tensor *x, *skip, *gamma;
  keel_tensor xf, sf;
  const float *bias;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &skip));
  KEEL_TRY(keel_k_in(k, 2, &gamma));
  KEEL_TRY(f32_view(k, x, op, "input", &xf));
  if (skip->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "skip is %s but input is %s",
                    keel_dtype_name((keel_dtype)skip->dtype), keel_dtype_name((keel_dtype)x->dtype));
  if (x->rank < 2 || x->rank > 3) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "input %s must be 2-D or 3-D",
                    keel_shape_str(x->rank, x->shape, s, sizeof s));
  }
  KEEL_TRY(check_suffix(x, skip, "skip"));
  KEEL_TRY(f32_view(k, skip, op, "skip", &sf));
  KEEL_TRY(last_dim_bias(k, rms ? 3 : 4, x, op, "bias", &bias));
  int64_t n = keel_tensor_numel(x), h = x->shape[x->rank - 1], ns = keel_tensor_numel(skip);
  /* the sum, in float: output 3 itself when it is float and asked for */
  keel_tensor sum = xf, *so = NULL;
  if (keel_k_has_out(k, 3)) KEEL_TRY(keel_k_out(k, 3, x->dtype, x->rank, x->shape, &so));
  if (so && so->dtype == KEEL_FLOAT) {
    sum.data = so->data;
  } else {
    void *p;
    KEEL_TRY(keel_k_scratch_n(k, n, sizeof(float), &p));
    sum.data = p;
  }
  sum.buf = NULL;
  const float *xd = xf.data, *sd = sf.data;
  float *o = sum.data;
  for (int64_t i = 0; i < n; i++) o[i] = xd[i] + sd[i % ns] + (bias ? bias[i % h] : 0.0f);
  if (so && so->dtype != KEEL_FLOAT) keel_f32_store(o, so);
  keel_ln_args a = {op, x->rank - 1, rms, 2, rms ? -1 : 3, "gamma", "beta",
                    keel_k_attr_f(k, "epsilon", 1e-12f), x->dtype};
  double *mean, *inv;
  KEEL_TRY(keel_layernorm_run(k, &sum, &a, &mean, &inv));
  return skip_stats(k, x, mean, inv);
}

static keel_status op_skip_layernorm(keel_kctx *k) { return skip_norm(k, false); }
static keel_status op_skip_simplified_layernorm(keel_kctx *k) { return skip_norm(k, true); }

/* ============================================================ table */

#define F32 KEEL_T(KEEL_FLOAT)
#define F32H (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16))
const keel_opdef keel_ops_contrib[] = {
    {MS, "FusedMatMul", 1, KEEL_OPSET_MAX, op_fused_matmul, 0, KEEL_TS_FLOAT},
    {MS, "FusedConv", 1, KEEL_OPSET_MAX, op_fused_conv, 0, F32H},
    {MS, "Gelu", 1, KEEL_OPSET_MAX, op_gelu, 0, F32H, keel_gpu_unary_impls},
    {MS, "FastGelu", 1, KEEL_OPSET_MAX, op_fast_gelu, 0, F32H},
    {MS, "BiasGelu", 1, KEEL_OPSET_MAX, op_bias_gelu, 0, F32H},
    {MS, "QuickGelu", 1, KEEL_OPSET_MAX, op_quick_gelu, 0, F32H},
    {MS, "BiasAdd", 1, KEEL_OPSET_MAX, op_bias_add, 0, F32},
    {MS, "SkipLayerNormalization", 1, KEEL_OPSET_MAX, op_skip_layernorm, 0, F32H},
    {MS, "SkipSimplifiedLayerNormalization", 1, KEEL_OPSET_MAX, op_skip_simplified_layernorm, 0,
     F32H},
    {0},
};
#undef F32H
#undef F32
