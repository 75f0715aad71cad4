/* optim.c: the optimizers, as torch.optim computes them (its single-tensor
 * CPU path, which float tensors on the CPU take):
 *
 *   SGD     g += wd * p;  buf = g (step 1) | m * buf + g;  p += -lr * buf
 *   Adam    g += wd * p;  m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) * g * g;
 *           p += -(lr / (1 - b1^t)) * (m / (sqrt(v) / sqrt(1 - b2^t) + eps))
 *   AdamW   p *= 1 - lr * wd, then Adam without the decay on g.
 *
 * Scalars are computed in double as Python computes them and used in float,
 * as torch's float kernels take them; lerp is torch's (weight < 0.5:
 * start + w * (end - start)). The loops are plain so the reference in
 * tests/test_train.c, written from the same formulas, matches bit for bit.
 *
 * The ONNX ops Adam, Adagrad and Momentum of ai.onnx.preview.training
 * (ops/training/optimizer.c) are another specification (double precision,
 * their own norm and decay coefficients) and stay a separate function:
 * one body with flags for both would make neither easy to check against
 * its reference.
 */
#include <math.h>

#include "base/status.h"
#include "train/train.h"

int keel_optim_n_state(const keel_train_options *o) {
  switch (o->optimizer) {
    case KEEL_OPTIM_SGD:
    case KEEL_OPTIM_MOMENTUM: return o->momentum != 0 ? 1 : 0;
    default: return 2;
  }
}

const char *keel_optim_state_name(const keel_train_options *o, int k) {
  if (o->optimizer == KEEL_OPTIM_SGD || o->optimizer == KEEL_OPTIM_MOMENTUM) return "momentum buffer";
  if (o->optimizer == KEEL_OPTIM_ADAMW) return k == 0 ? "adamw m" : "adamw v";
  return k == 0 ? "adam m" : "adam v";
}

static bool bad(double v, double lo, double hi) { return !(v >= lo && v <= hi); }

keel_status keel_optim_check(const keel_train_options *o) {
  if (o->optimizer < KEEL_OPTIM_SGD || o->optimizer > KEEL_OPTIM_ADAMW)
    return keel_err(KEEL_ERR_INVALID_ARG, "training: unknown optimizer %d", (int)o->optimizer);
  if (o->zero_grad != KEEL_ZERO_GRAD_NONE && o->zero_grad != KEEL_ZERO_GRAD_ZEROS)
    return keel_err(KEEL_ERR_INVALID_ARG, "training: unknown zero-grad mode %d", (int)o->zero_grad);
  if (bad(o->lr, 0, 1e6)) return keel_err(KEEL_ERR_INVALID_ARG, "training: learning rate %g is not in [0, 1e6]", o->lr);
  if (bad(o->weight_decay, 0, 1e6))
    return keel_err(KEEL_ERR_INVALID_ARG, "training: weight decay %g is negative or not a number", o->weight_decay);
  if (o->optimizer <= KEEL_OPTIM_MOMENTUM)
    return bad(o->momentum, 0, 1e6)
               ? keel_err(KEEL_ERR_INVALID_ARG, "training: momentum %g is negative or not a number", o->momentum)
               : KEEL_OK;
  if (bad(o->beta1, 0, 1) || o->beta1 == 1 || bad(o->beta2, 0, 1) || o->beta2 == 1)
    return keel_err(KEEL_ERR_INVALID_ARG, "training: betas (%g, %g) must lie in [0, 1)", o->beta1, o->beta2);
  if (bad(o->eps, 0, 1e6)) return keel_err(KEEL_ERR_INVALID_ARG, "training: eps %g is negative or not a number", o->eps);
  return KEEL_OK;
}

static void sgd(const keel_train_options *o, int64_t step, float *w, const float *g, float *buf,
                int64_t n) {
  const float wd = (float)o->weight_decay, mom = (float)o->momentum, neg_lr = (float)-o->lr;
  for (int64_t i = 0; i < n; i++) {
    float d = g[i];
    if (o->weight_decay != 0) d = d + wd * w[i];
    if (buf) {
      buf[i] = step == 1 ? d : buf[i] * mom + d;
      d = buf[i];
    }
    w[i] = w[i] + neg_lr * d;
  }
}

static float lerp(float a, float b, float t) {
  return fabsf(t) < 0.5f ? a + t * (b - a) : b - (b - a) * (1.0f - t);
}

static void adam(const keel_train_options *o, int64_t step, float *w, const float *g, float *m,
                 float *v, int64_t n) {
  bool decoupled = o->optimizer == KEEL_OPTIM_ADAMW;
  double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
  const float wd = (float)o->weight_decay, keep = (float)(1 - o->lr * o->weight_decay);
  const float w1 = (float)(1 - o->beta1), b2 = (float)o->beta2, w2 = (float)(1 - o->beta2);
  const float neg_step = (float)-(o->lr / bc1), bc2s = (float)sqrt(bc2), eps = (float)o->eps;
  for (int64_t i = 0; i < n; i++) {
    float d = g[i];
    if (decoupled) w[i] = w[i] * keep;
    else if (o->weight_decay != 0) d = d + wd * w[i];
    m[i] = lerp(m[i], d, w1);
    v[i] = v[i] * b2 + w2 * d * d;
    float denom = sqrtf(v[i]) / bc2s + eps;
    w[i] = w[i] + neg_step * (m[i] / denom);
  }
}

bool keel_optim_applies(keel_zero_grad zg, bool reached, bool had_grad) {
  return reached || (zg == KEEL_ZERO_GRAD_ZEROS && had_grad);
}

void keel_optim_update(const keel_train_options *o, int64_t step, float *w, const float *g,
                       float *s0, float *s1, int64_t n) {
  if (o->optimizer <= KEEL_OPTIM_MOMENTUM) sgd(o, step, w, g, keel_optim_n_state(o) ? s0 : NULL, n);
  else adam(o, step, w, g, s0, s1, n);
}

/* ============================================================ options */

void keel_train_options_init(keel_train_options *o, keel_optimizer opt, double lr) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->optimizer = opt;
  o->lr = lr;
  o->momentum = opt == KEEL_OPTIM_MOMENTUM ? 0.9 : 0;
  o->beta1 = 0.9;
  o->beta2 = 0.999;
  o->eps = 1e-8;
  o->weight_decay = opt == KEEL_OPTIM_ADAMW ? 0.01 : 0;
}

keel_status keel_optimizer_parse(const char *name, keel_optimizer *out) {
  static const char *names[] = {"sgd", "momentum", "adam", "adamw"};
  for (int i = 0; name && out && i < 4; i++)
    if (!strcmp(name, names[i])) {
      *out = (keel_optimizer)i;
      return KEEL_OK;
    }
  return keel_err(KEEL_ERR_INVALID_ARG, "unknown optimizer '%s' (sgd, momentum, adam, adamw)", name ? name : "(null)");
}

keel_status keel_zero_grad_parse(const char *name, keel_zero_grad *out) {
  if (name && out && !strcmp(name, "none")) return *out = KEEL_ZERO_GRAD_NONE, KEEL_OK;
  if (name && out && !strcmp(name, "zeros")) return *out = KEEL_ZERO_GRAD_ZEROS, KEEL_OK;
  return keel_err(KEEL_ERR_INVALID_ARG, "unknown zero-grad mode '%s' (none, zeros)", name ? name : "(null)");
}
