/* optimizer.c: the training optimizers of the domain
 * ai.onnx.preview.training (Adagrad, Adam, Momentum) as ONNX ops (a model
 * that applies its own update). keel's trainer (src/train/optim.c) runs
 * torch.optim's semantics on its parameters itself.
 *
 * The optimizers take R and T, then groups of n tensors each (X..., G...,
 * H... and so on); every element is updated in double precision and
 * written back in the tensors' own type (float, double, or float16 /
 * bfloat16 through float).
 */
#include <math.h>

#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

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
                      2 + g * n + i, k->node->in_names[2 + g * n + i],
                      keel_dtype_name((keel_dtype)in[g]->dtype), i,
                      keel_dtype_name((keel_dtype)in[0]->dtype));
  }
  int dt = in[0]->dtype;
  if (!keel_dtype_is_float(dt))
    return keel_err(KEEL_ERR_SHAPE, "X %d must be float or double, got %s", i,
                    keel_dtype_name((keel_dtype)dt));
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
  if (!keel_dtype_is_float(rt->dtype) || keel_tensor_numel(rt) != 1)
    return keel_err(KEEL_ERR_SHAPE, "R must be one float or double, got %s with %lld values",
                    keel_dtype_name((keel_dtype)rt->dtype), (long long)keel_tensor_numel(rt));
  if (!keel_dtype_is_int(tt->dtype) || keel_tensor_numel(tt) != 1)
    return keel_err(KEEL_ERR_SHAPE, "T must be one int64, got %s with %lld values",
                    keel_dtype_name((keel_dtype)tt->dtype), (long long)keel_tensor_numel(tt));
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
const keel_opdef keel_ops_optimizer[] = {
    {TRAINING, "Adagrad", 1, KEEL_OPSET_MAX, op_adagrad, 0, KEEL_TS_FLOAT},
    {TRAINING, "Adam", 1, KEEL_OPSET_MAX, op_adam, 0, KEEL_TS_FLOAT},
    {TRAINING, "Momentum", 1, KEEL_OPSET_MAX, op_momentum, 0, KEEL_TS_FLOAT},
    {0},
};
