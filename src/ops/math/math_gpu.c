/* math_gpu.c: element-wise binary ops, unary ops and Softmax on a device
 * (device/device.h: the GPU's kernels, or the emulated device's).
 *
 * Which nodes run here is the place pass's decision (passes/pass_place.c:
 * float32, rank up to 8, Softmax over the last axis); binding gives a node
 * placed on the device the implementation whose `device` is the GPU's,
 * and these supports() only confirm the placement. Inputs and outputs are
 * device memory: k->heap is the device's heap for such a node, and
 * nothing here reads or writes their bytes on the host. */
#include "ops/math/math_gpu.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/status.h"
#include "device/dev_move.h"
#include "device/dev_norm.h"
#include "device/device.h"

/* The op's code, kept as the node's prepared state: a pointer into a
 * static table (nothing to free). */
static const char *const BIN_OPS[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
static const keel_dev_binop BIN_CODES[] = {KEEL_DEV_ADD, KEEL_DEV_SUB, KEEL_DEV_MUL, KEEL_DEV_DIV,
                                           KEEL_DEV_MAX, KEEL_DEV_MIN, KEEL_DEV_POW};
static const char *const UN_OPS[] = {"Relu", "Neg", "Abs", "Sqrt", "Exp", "Sigmoid", "Tanh", "Log",
                                     "Erf", "Reciprocal", "Floor", "Ceil", "Softplus", "HardSwish",
                                     "Cos", "Sin"};
static const keel_dev_unop UN_CODES[] = {
    KEEL_DEV_RELU, KEEL_DEV_NEG,   KEEL_DEV_ABS,  KEEL_DEV_SQRT,  KEEL_DEV_EXP,      KEEL_DEV_SIGMOID,
    KEEL_DEV_TANH, KEEL_DEV_LOG,   KEEL_DEV_ERF,  KEEL_DEV_RECIP, KEEL_DEV_FLOOR,    KEEL_DEV_CEIL,
    KEEL_DEV_SOFTPLUS, KEEL_DEV_HSWISH, KEEL_DEV_COS, KEEL_DEV_SIN};

static keel_status code_of(const keel_prep_ctx *p, const char *const *names, const void *codes,
                           size_t size, size_t n, void **state) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(p->node->op_type, names[i])) {
      *state = (void *)((const char *)codes + i * size);
      return KEEL_OK;
    }
  return keel_err(KEEL_ERR_UNSUPPORTED, "no GPU kernel for op %s (domain ai.onnx, opset %d)",
                  p->node->op_type, (int)p->node->opset);
}
static keel_status bin_prepare(const keel_prep_ctx *p, void **state) {
  return code_of(p, BIN_OPS, BIN_CODES, sizeof *BIN_CODES, sizeof BIN_CODES / sizeof *BIN_CODES, state);
}

/* A unary node's kernel: the op's code and its two parameters, from the
 * attributes (their defaults the CPU kernels', ops/math/unary.c) or, for
 * Clip-11 and later, from constant bounds (the place pass's condition:
 * bounds absent or constants, which prepare reads on the host). */
typedef struct un_state {
  keel_dev_unop op;
  float a, b;
} un_state;

static float attr_f(const keel_node *n, const char *name, float dflt) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_FLOAT ? a->f : dflt;
}

/* Clip-11+ bound i from its constant (absent: `none`). */
static keel_status clip_const(const keel_prep_ctx *p, int i, float none, float *v) {
  const keel_node *n = p->node;
  *v = none;
  if (i >= n->n_in || !n->in_names[i][0]) return KEEL_OK;
  const keel_tensor *t = p->consts[i];
  if (!t || t->dtype != KEEL_FLOAT || keel_tensor_numel(t) != 1 || !t->data)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU Clip: the %s must be a float32 scalar constant",
                    i == 1 ? "min" : "max");
  *v = *(const float *)t->data;
  return KEEL_OK;
}

static keel_status un_params(const keel_prep_ctx *p, un_state *u) {
  const keel_node *n = p->node;
  const char *op = n->op_type;
  u->a = u->b = 0.0f;
  if (!strcmp(op, "Gelu")) { /* ONNX's (opset 20) or com.microsoft's (exact) */
    const keel_attr *ap = keel_node_attr(n, "approximate");
    bool tanh_ = ap && ap->type == KEEL_ATTR_STRING && !strcmp(ap->s, "tanh");
    if (ap && !tanh_ && (ap->type != KEEL_ATTR_STRING || strcmp(ap->s, "none")))
      return keel_err(KEEL_ERR_INVALID_MODEL, "Gelu: approximate must be 'none' or 'tanh'");
    u->op = tanh_ ? KEEL_DEV_GELU_TANH : KEEL_DEV_GELU;
  } else if (!strcmp(op, "LeakyRelu")) {
    u->op = KEEL_DEV_LEAKY, u->a = attr_f(n, "alpha", 0.01f);
  } else if (!strcmp(op, "Elu")) {
    u->op = KEEL_DEV_ELU, u->a = attr_f(n, "alpha", 1.0f);
  } else if (!strcmp(op, "HardSigmoid")) {
    u->op = KEEL_DEV_HSIGMOID, u->a = attr_f(n, "alpha", 0.2f), u->b = attr_f(n, "beta", 0.5f);
  } else if (!strcmp(op, "Clip")) {
    u->op = KEEL_DEV_CLIP;
    if (n->opset >= 11) {
      KEEL_TRY(clip_const(p, 1, -INFINITY, &u->a));
      KEEL_TRY(clip_const(p, 2, INFINITY, &u->b));
    } else { /* Clip-1: an absent bound is none; Clip-6: +-FLT_MAX */
      float lim = n->opset >= 6 ? FLT_MAX : INFINITY;
      u->a = attr_f(n, "min", -lim), u->b = attr_f(n, "max", lim);
    }
  } else {
    void *code;
    KEEL_TRY(code_of(p, UN_OPS, UN_CODES, sizeof *UN_CODES, sizeof UN_CODES / sizeof *UN_CODES, &code));
    u->op = *(const keel_dev_unop *)code;
  }
  return KEEL_OK;
}

static keel_status un_prepare(const keel_prep_ctx *p, void **state) {
  un_state u;
  KEEL_TRY(un_params(p, &u));
  KEEL_TRY(keel_prep_alloc(p, sizeof u, state));
  memcpy(*state, &u, sizeof u);
  return KEEL_OK;
}

static keel_status gpu_binary(keel_kctx *k) {
  const keel_tensor *a, *b;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &a));
  KEEL_TRY(keel_k_in_f32(k, 1, false, &b));
  int rank;
  int64_t dims[KEEL_MAX_RANK], ad[KEEL_MAX_RANK], bd[KEEL_MAX_RANK];
  KEEL_TRY(keel_broadcast_shape(a->rank, a->shape, b->rank, b->shape, &rank, dims));
  if (rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU kernel: rank %d (at most %d)", rank, KEEL_DEV_MAX_RANK);
  for (int i = 0; i < rank; i++) {
    ad[i] = i < rank - a->rank ? 1 : a->shape[i - (rank - a->rank)];
    bd[i] = i < rank - b->rank ? 1 : b->shape[i - (rank - b->rank)];
  }
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, rank, dims, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  return keel_device_binary(k->dev, *(const keel_dev_binop *)k->prep, rank, dims, ad, a->data, bd,
                            b->data, y->data);
}

static keel_status gpu_unary(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &x));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  int64_t n = keel_tensor_numel(y);
  const un_state *u = k->prep;
  return n ? keel_device_unary_p(k->dev, u->op, u->a, u->b, n, x->data, y->data) : KEEL_OK;
}

/* Softmax over the last axis (the placement's condition: at opset 13 and
 * later the axis is the last; before, it flattens the dims from the axis
 * on, which is the last dim alone). */
static keel_status gpu_softmax(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &x));
  if (x->rank < 1) return keel_err(KEEL_ERR_SHAPE, "GPU Softmax: a scalar input");
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  int64_t n = keel_tensor_numel(y), cols = x->shape[x->rank - 1];
  return n ? keel_device_softmax(k->dev, n / cols, cols, x->data, y->data) : KEEL_OK;
}

#define GPU_IMPL(fn, prep, rule) {"gpu", keel_prep_on_gpu, prep, NULL, fn, rule, KEEL_NODE_GPU}
static const keel_impl gpu_binary_impl =
    GPU_IMPL(gpu_binary, bin_prepare, "placed on the GPU (float32, broadcast up to rank 8)");
static const keel_impl gpu_unary_impl = {"gpu",       keel_prep_on_gpu,   un_prepare,   keel_prep_block_release,
                                         gpu_unary,   "placed on the GPU (float32; Clip's bounds constants)",
                                         KEEL_NODE_GPU};
const keel_impl keel_gpu_softmax_impl = GPU_IMPL(gpu_softmax, NULL, "placed on the GPU (float32, last axis)");

const keel_impl *const keel_gpu_binary_impls[] = {&gpu_binary_impl, NULL};

/* Where (device/dev_move.h): a bool condition and float32 values, the
 * three broadcast together as the CPU kernel does (elementwise.c). */
static keel_status gpu_where(keel_kctx *k) {
  const keel_tensor *c, *a, *b;
  KEEL_TRY(keel_k_in(k, 0, &c));
  KEEL_TRY(keel_k_in_f32(k, 1, false, &a));
  KEEL_TRY(keel_k_in_f32(k, 2, false, &b));
  if (c->dtype != KEEL_BOOL) return keel_err(KEEL_ERR_SHAPE, "Where condition must be bool");
  int r1, r;
  int64_t s1[KEEL_MAX_RANK], dims[KEEL_MAX_RANK], cs[KEEL_MAX_RANK], as[KEEL_MAX_RANK], bs[KEEL_MAX_RANK];
  KEEL_TRY(keel_broadcast_shape(c->rank, c->shape, a->rank, a->shape, &r1, s1));
  KEEL_TRY(keel_broadcast_shape(r1, s1, b->rank, b->shape, &r, dims));
  if (r > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU Where: rank %d (at most %d)", r, KEEL_DEV_MAX_RANK);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, r, dims, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  if (!k->dev->move) return keel_err(KEEL_ERR_UNSUPPORTED, "Where: %s has no move kernels", k->dev->name);
  keel_broadcast_strides(c->rank, c->shape, r, dims, cs);
  keel_broadcast_strides(a->rank, a->shape, r, dims, as);
  keel_broadcast_strides(b->rank, b->shape, r, dims, bs);
  return k->dev->move->where(k->dev, r, dims, c->data, cs, a->data, as, b->data, bs, y->data);
}

/* Cast between float32 and int64, int32 or bool (one side float32: the
 * placement's condition), 'to' an int attribute. */
static keel_status gpu_cast(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  const keel_attr *a = keel_k_attr(k, "to");
  int to = a && a->type == KEEL_ATTR_INT ? (int)a->i : 0;
  bool ok_to = to == KEEL_FLOAT || to == KEEL_INT64 || to == KEEL_INT32 || to == KEEL_BOOL;
  bool ok_from = x->dtype == KEEL_FLOAT || x->dtype == KEEL_INT64 || x->dtype == KEEL_INT32 ||
                 x->dtype == KEEL_BOOL;
  if (!ok_to || !ok_from || (to != KEEL_FLOAT && x->dtype != KEEL_FLOAT))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU Cast from %s to type %d (float32 to or from int64, int32, bool)",
                    keel_dtype_name((keel_dtype)x->dtype), to);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, to, x->rank, x->shape, &y));
  int64_t n = keel_tensor_numel(y);
  if (!n) return KEEL_OK;
  if (!k->dev->move) return keel_err(KEEL_ERR_UNSUPPORTED, "Cast: %s has no move kernels", k->dev->name);
  return k->dev->move->cast(k->dev, x->dtype, to, n, x->data, y->data);
}

static const keel_impl gpu_where_impl = GPU_IMPL(gpu_where, NULL, "placed on the GPU (bool condition, float32, broadcast up to rank 8)");
static const keel_impl gpu_cast_impl = GPU_IMPL(gpu_cast, NULL, "placed on the GPU (float32 to or from int64, int32, bool)");
/* ReduceSum, ReduceMean, ReduceMax over a run of adjacent axes
 * (device/dev_norm.h; the placement's condition: the axes an attribute or
 * a constant input, adjacent once sorted, their dims known and not 0):
 * the last axes on the row kernel, others as (outer, n, inner). The
 * output's shape is the CPU kernel's: keepdims leaves 1s in their
 * place. */
static keel_status gpu_reduce(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &x));
  const char *op = k->node->op_type;
  bool sum = !strcmp(op, "ReduceSum"), mean = !strcmp(op, "ReduceMean");
  int since = sum ? 13 : 18, n = 0;
  int64_t axes[KEEL_MAX_RANK];
  if (keel_k_opset(k) >= since) {
    if (keel_k_has_in(k, 1)) KEEL_TRY(keel_k_in_ints(k, 1, axes, KEEL_MAX_RANK, &n));
  } else {
    const int64_t *a = keel_k_attr_ints(k, "axes", &n);
    for (int i = 0; i < n && i < KEEL_MAX_RANK; i++) axes[i] = a[i];
  }
  bool red[KEEL_MAX_RANK] = {false};
  int a0 = KEEL_MAX_RANK, a1 = -1;
  for (int i = 0; i < n; i++) {
    int ax;
    KEEL_TRY(keel_k_axis(axes[i], x->rank, "axes entry", &ax));
    red[ax] = true, a0 = KEEL_MIN(a0, ax), a1 = KEEL_MAX(a1, ax);
  }
  int64_t outer = 1, cols = 1, inner = 1, dims[KEEL_MAX_RANK];
  int rank = 0;
  bool keep = keel_k_attr_i(k, "keepdims", 1) != 0, run = a1 >= 0;
  for (int i = 0; i < x->rank; i++) {
    run = run && (red[i] || i < a0 || i > a1); /* the reduced axes adjacent */
    if (red[i]) cols *= x->shape[i];
    else if (i < a0) outer *= x->shape[i];
    else inner *= x->shape[i];
    if (!red[i] || keep) dims[rank++] = red[i] ? 1 : x->shape[i];
  }
  if (!run || !cols)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: over adjacent axes, not empty", op);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, rank, dims, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  if (!k->dev->norm) return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s has no norm kernels", op, k->dev->name);
  keel_dev_reduce r = sum ? KEEL_DEV_RSUM : mean ? KEEL_DEV_RMEAN : KEEL_DEV_RMAX;
  if (inner == 1) return k->dev->norm->reduce(k->dev, r, outer, cols, x->data, y->data);
  return k->dev->norm->reduce_mid(k->dev, r, outer, cols, inner, x->data, y->data);
}

static const keel_impl gpu_reduce_impl = GPU_IMPL(gpu_reduce, NULL, "placed on the GPU (float32, adjacent axes)");
const keel_impl *const keel_gpu_reduce_impls[] = {&gpu_reduce_impl, NULL};
const keel_impl *const keel_gpu_where_impls[] = {&gpu_where_impl, NULL};
const keel_impl *const keel_gpu_cast_impls[] = {&gpu_cast_impl, NULL};
const keel_impl *const keel_gpu_unary_impls[] = {&gpu_unary_impl, NULL};
