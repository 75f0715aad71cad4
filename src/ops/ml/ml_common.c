/* ml_common.c: attribute readers, post transforms and row access shared by
 * the ai.onnx.ml kernels (see ml_common.h). The transforms follow ONNX
 * Runtime's arithmetic (float logistic with |x|, the Winitzki erf inverse
 * for probit, softmax-zero that leaves zero scores at zero), so classifier
 * scores agree with what models were validated against. */
#include <math.h>
#include <stdio.h>

#include "ops/ml/ml_common.h"

static keel_status tensor_reals(keel_kctx *k, const keel_attr *a, const char *name,
                                double **v, int64_t *n) {
  const keel_tensor *t = a->t;
  if (!t || (!keel_dtype_is_float(t->dtype) && !keel_dtype_is_int(t->dtype)))
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' must be a numeric tensor", name);
  *n = keel_tensor_numel(t);
  KEEL_TRY(keel_k_scratch_n(k, *n ? *n : 1, sizeof(double), (void **)v));
  for (int64_t i = 0; i < *n; i++) (*v)[i] = keel_elem_get_f64(t->dtype, t->data, (size_t)i);
  return KEEL_OK;
}

keel_status ml_attr_reals(keel_kctx *k, const char *name, double **v, int64_t *n) {
  const keel_attr *a = keel_k_attr(k, name);
  *v = NULL;
  *n = -1;
  if (a && a->type == KEEL_ATTR_FLOATS) {
    *n = a->n;
    KEEL_TRY(keel_k_scratch_n(k, *n ? *n : 1, sizeof(double), (void **)v));
    for (int64_t i = 0; i < *n; i++) (*v)[i] = a->floats[i];
    return KEEL_OK;
  }
  if (a && a->type == KEEL_ATTR_INTS) {
    *n = a->n;
    KEEL_TRY(keel_k_scratch_n(k, *n ? *n : 1, sizeof(double), (void **)v));
    for (int64_t i = 0; i < *n; i++) (*v)[i] = (double)a->ints[i];
    return KEEL_OK;
  }
  if (a) return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' must be a list of floats", name);
  char tname[96];
  snprintf(tname, sizeof tname, "%s_as_tensor", name);
  a = keel_k_attr(k, tname);
  if (!a) return KEEL_OK;
  return tensor_reals(k, a, tname, v, n);
}

keel_status ml_attr_tensor_reals(keel_kctx *k, const char *name, double **v, int64_t *n) {
  const keel_attr *a = keel_k_attr(k, name);
  *v = NULL;
  *n = -1;
  if (!a) return KEEL_OK;
  if (a->type != KEEL_ATTR_TENSOR)
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' must be a tensor", name);
  return tensor_reals(k, a, name, v, n);
}

const int64_t *ml_attr_ints(const keel_kctx *k, const char *name, int64_t *n) {
  const keel_attr *a = keel_k_attr(k, name);
  if (!a || a->type != KEEL_ATTR_INTS) {
    *n = -1;
    return NULL;
  }
  *n = a->n;
  return a->ints;
}

static const char *const POST_NAMES[] = {"NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO",
                                         "PROBIT"};

keel_status ml_post_transform(keel_kctx *k, int *post) {
  const char *s = keel_k_attr_s(k, "post_transform", "NONE");
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, POST_NAMES[i])) {
      *post = i;
      return KEEL_OK;
    }
  return keel_err(KEEL_ERR_INVALID_MODEL, "unknown post_transform '%s'", s);
}

double ml_logistic(double x) {
  double v = 1.0 / (1.0 + exp(-fabs(x)));
  return x < 0 ? 1.0 - v : v;
}

/* Winitzki's approximation of erf^-1 (a = 0.147), as ONNX Runtime uses. */
static double erf_inv(double x) {
  double sgn = x < 0 ? -1.0 : 1.0;
  x = (1.0 - x) * (1.0 + x);
  double lg = log(x);
  double v = 2.0 / (3.14159 * 0.147) + 0.5 * lg;
  double v2 = 1.0 / 0.147 * lg;
  return sgn * sqrt(-v + sqrt(v * v - v2));
}

double ml_probit(double x) { return 1.41421356 * erf_inv(2.0 * x - 1.0); }

static void softmax(double *s, int64_t n, bool zero) {
  double mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
  for (int64_t i = 0; i < n; i++) {
    if (zero && fabs(s[i]) <= 1e-7) {
      s[i] *= exp(-mx);
      continue;
    }
    s[i] = exp(s[i] - mx);
    sum += s[i];
  }
  for (int64_t i = 0; i < n; i++) s[i] /= sum;
}

void ml_post_apply(int post, double *s, int64_t n) {
  switch (post) {
    case ML_POST_LOGISTIC:
      for (int64_t i = 0; i < n; i++) s[i] = ml_logistic(s[i]);
      break;
    case ML_POST_PROBIT:
      for (int64_t i = 0; i < n; i++) s[i] = ml_probit(s[i]);
      break;
    case ML_POST_SOFTMAX: softmax(s, n, false); break;
    case ML_POST_SOFTMAX_ZERO: softmax(s, n, true); break;
    default: break;
  }
}

keel_status ml_rows(const keel_tensor *x, const char *op, int64_t *n, int64_t *c) {
  if (!keel_dtype_is_float(x->dtype) && !keel_dtype_is_int(x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "%s: X must be numeric, got %s", op,
                    keel_dtype_name((keel_dtype)x->dtype));
  if (x->rank > 2)
    return keel_err(KEEL_ERR_SHAPE, "%s: X must be [N, C] or [C], got rank %d", op, x->rank);
  *n = x->rank == 2 ? x->shape[0] : 1;
  *c = x->rank == 0 ? 1 : x->shape[x->rank - 1];
  return KEEL_OK;
}

void ml_row(const keel_tensor *x, int64_t i, int64_t c, double *row) {
  if (c <= 0 || !x->data) return; /* no columns: nothing to read */
  if (x->dtype == KEEL_FLOAT) {
    const float *p = (const float *)x->data + i * c;
    for (int64_t j = 0; j < c; j++) row[j] = p[j];
    return;
  }
  for (int64_t j = 0; j < c; j++) row[j] = keel_elem_get_f64(x->dtype, x->data, (size_t)(i * c + j));
}

void ml_store(keel_tensor *y, int64_t i, double v) {
  if (y->dtype == KEEL_FLOAT) ((float *)y->data)[i] = (float)v;
  else if (y->dtype == KEEL_DOUBLE) ((double *)y->data)[i] = v;
  else keel_elem_set_f64(y->dtype, y->data, (size_t)i, v);
}
