/* ml_linear.c: the linear models of ai.onnx.ml: LinearRegressor,
 * LinearClassifier, SVMRegressor and SVMClassifier (kernels LINEAR, POLY,
 * RBF, SIGMOID; one-vs-one voting; Platt probabilities coupled with
 * libsvm's pairwise method).
 *
 * Scores, labels and the two-class score columns follow ONNX Runtime,
 * which converters validate against: a binary LinearClassifier with one
 * coefficient row writes [1 - s, s] (s after the logistic when asked); an SVM classifier without
 * probabilities writes its pairwise decision values ([-s, s] for two
 * classes) and picks the label by votes, with probabilities the label is
 * still the vote winner. Arithmetic is done in double. */
#include <math.h>

#include "ops/ml/ml_common.h"

/* ==================================================== linear regressor */

static keel_status op_linear_regressor(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n, c, nc, ni;
  KEEL_TRY(ml_rows(x, "LinearRegressor", &n, &c));
  double *coef, *icpt;
  KEEL_TRY(ml_attr_reals(k, "coefficients", &coef, &nc));
  KEEL_TRY(ml_attr_reals(k, "intercepts", &icpt, &ni));
  int64_t t = keel_k_attr_i(k, "targets", 1);
  int post;
  KEEL_TRY(ml_post_transform(k, &post));
  if (t < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "targets must be positive, got %lld", (long long)t);
  if (!ml_prod_is(t, c, nc))
    return keel_err(KEEL_ERR_SHAPE, "coefficients has %lld values, expected targets (%lld) x features (%lld)",
                    (long long)nc, (long long)t, (long long)c);
  if (ni > 0 && ni != t)
    return keel_err(KEEL_ERR_INVALID_MODEL, "intercepts has %lld values for %lld targets", (long long)ni, (long long)t);
  int64_t shape[2] = {n, t};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 2, shape, &y));
  double *row, *s;
  KEEL_TRY(keel_k_scratch_n(k, c + 1, sizeof(double), (void **)&row));
  KEEL_TRY(keel_k_scratch_n(k, t, sizeof(double), (void **)&s));
  for (int64_t i = 0; i < n; i++) {
    ml_row(x, i, c, row);
    for (int64_t j = 0; j < t; j++) {
      double v = ni > 0 ? icpt[j] : 0;
      for (int64_t f = 0; f < c; f++) v += row[f] * coef[j * c + f];
      s[j] = v;
    }
    if (t >= 2) ml_post_apply(post, s, t);
    else if (post == ML_POST_PROBIT) s[0] = ml_probit(s[0]);
    for (int64_t j = 0; j < t; j++) ml_store(y, i * t + j, s[j]);
  }
  return KEEL_OK;
}

/* ======================================================== class labels */

typedef struct labels {
  int64_t n;
  const int64_t *ints;
  const keel_attr *strs;
} labels;

static keel_status labels_read(keel_kctx *k, const char *ints_name, labels *l) {
  l->ints = ml_attr_ints(k, ints_name, &l->n);
  l->strs = keel_k_attr(k, "classlabels_strings");
  if (l->strs && (l->strs->type != KEEL_ATTR_STRINGS || l->strs->n == 0)) l->strs = NULL;
  if ((l->n > 0) == (l->strs != NULL))
    return keel_err(KEEL_ERR_INVALID_MODEL, "exactly one of %s and classlabels_strings must be given", ints_name);
  if (l->strs) l->n = l->strs->n, l->ints = NULL;
  return KEEL_OK;
}

/* Label index `j` of l into y[i]; j = -1 / -2 mean the literal "0" / "1"
 * labels ONNX Runtime writes when a binary model lists no two labels. */
static keel_status label_put(keel_tensor *y, const labels *l, int64_t i, int64_t j) {
  if (l->ints) {
    ((int64_t *)y->data)[i] = j < 0 ? -1 - j : l->ints[j];
    return KEEL_OK;
  }
  if (j < 0) return keel_tensor_set_string(y, (size_t)i, j == -1 ? "0" : "1", 1);
  const char *s = l->strs->strings[j];
  return keel_tensor_set_string(y, (size_t)i, s, l->strs->string_lens ? l->strs->string_lens[j] : strlen(s));
}

static keel_status label_out(keel_kctx *k, const labels *l, int64_t n, keel_tensor **y) {
  return keel_k_out(k, 0, l->ints ? KEEL_INT64 : KEEL_STRING, 1, &n, y);
}

/* ==================================================== linear classifier */

static keel_status lc_check(int64_t nc, int64_t ni, int64_t c) {
  if (ni < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "intercepts is missing or empty");
  if (!ml_prod_is(ni, c, nc))
    return keel_err(KEEL_ERR_SHAPE, "coefficients has %lld values, expected classes (%lld) x features (%lld)",
                    (long long)nc, (long long)ni, (long long)c);
  return KEEL_OK;
}

static int64_t argmax(const double *s, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; i++)
    if (s[i] > s[b]) b = i;
  return b;
}

static keel_status op_linear_classifier(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n, c, nc, ni;
  KEEL_TRY(ml_rows(x, "LinearClassifier", &n, &c));
  labels l;
  KEEL_TRY(labels_read(k, "classlabels_ints", &l));
  double *coef, *icpt;
  KEEL_TRY(ml_attr_reals(k, "coefficients", &coef, &nc));
  KEEL_TRY(ml_attr_reals(k, "intercepts", &icpt, &ni));
  KEEL_TRY(lc_check(nc, ni, c));
  int post;
  KEEL_TRY(ml_post_transform(k, &post));
  if (ni > 1 && ni != l.n)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%lld score rows for %lld class labels", (long long)ni, (long long)l.n);
  bool second = ni == 1 && l.n == 2;
  int64_t zc = second ? 2 : ni, zs[2] = {n, zc};
  keel_tensor *y, *z;
  KEEL_TRY(label_out(k, &l, n, &y));
  KEEL_TRY(keel_k_out(k, 1, KEEL_FLOAT, 2, zs, &z));
  double *row, *s;
  KEEL_TRY(keel_k_scratch_n(k, c + 1, sizeof(double), (void **)&row));
  KEEL_TRY(keel_k_scratch_n(k, ni + 1, sizeof(double), (void **)&s));
  for (int64_t i = 0; i < n; i++) {
    ml_row(x, i, c, row);
    for (int64_t j = 0; j < ni; j++) {
      double v = icpt[j];
      for (int64_t f = 0; f < c; f++) v += row[f] * coef[j * c + f];
      s[j] = (float)v;
    }
    int64_t lab = ni == 1 ? (s[0] > 0 ? (l.n == 2 ? 1 : -2) : (l.n == 2 ? 0 : -1)) : argmax(s, ni);
    KEEL_TRY(label_put(y, &l, i, lab));
    if (ni >= 2) ml_post_apply(post, s, ni);
    else if (post == ML_POST_PROBIT) s[0] = ml_probit(s[0]);
    else if (second) {
      s[1] = post == ML_POST_LOGISTIC ? ml_logistic(s[0]) : s[0];
      s[0] = 1.0 - s[1];
    }
    for (int64_t j = 0; j < zc; j++) ml_store(z, i * zc + j, s[j]);
  }
  return KEEL_OK;
}

/* ================================================================ SVM */

enum { K_LINEAR = 0, K_POLY, K_RBF, K_SIGMOID };

typedef struct svm_kernel {
  int type;
  double gamma, coef0, degree;
} svm_kernel;

static keel_status kernel_read(keel_kctx *k, svm_kernel *kr) {
  static const char *const names[] = {"LINEAR", "POLY", "RBF", "SIGMOID"};
  const char *s = keel_k_attr_s(k, "kernel_type", "LINEAR");
  kr->type = -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) kr->type = i;
  if (kr->type < 0) return keel_err(KEEL_ERR_INVALID_MODEL, "unknown kernel_type '%s'", s);
  int np = 0;
  const float *p = keel_k_attr_floats(k, "kernel_params", &np);
  kr->gamma = np > 0 ? p[0] : 0;
  kr->coef0 = np > 1 ? p[1] : 0;
  kr->degree = np > 2 ? p[2] : 0;
  return KEEL_OK;
}

/* K(x, v) over c features. */
static double kernel_eval(const svm_kernel *kr, const double *x, const double *v, int64_t c) {
  double s = 0;
  if (kr->type == K_RBF) {
    for (int64_t f = 0; f < c; f++) s += (x[f] - v[f]) * (x[f] - v[f]);
    return exp(-kr->gamma * s);
  }
  for (int64_t f = 0; f < c; f++) s += x[f] * v[f];
  if (kr->type == K_POLY) return pow(kr->gamma * s + kr->coef0, kr->degree);
  if (kr->type == K_SIGMOID) return tanh(kr->gamma * s + kr->coef0);
  return s;
}

typedef struct svm_model {
  svm_kernel kr;
  double *coef, *sv, *rho, *pa, *pb;
  int64_t ncoef, nsv, nrho, npa, npb;
  int post;
} svm_model;

static keel_status svm_read(keel_kctx *k, svm_model *m) {
  KEEL_TRY(kernel_read(k, &m->kr));
  KEEL_TRY(ml_post_transform(k, &m->post));
  KEEL_TRY(ml_attr_reals(k, "coefficients", &m->coef, &m->ncoef));
  KEEL_TRY(ml_attr_reals(k, "support_vectors", &m->sv, &m->nsv));
  KEEL_TRY(ml_attr_reals(k, "rho", &m->rho, &m->nrho));
  KEEL_TRY(ml_attr_reals(k, "prob_a", &m->pa, &m->npa));
  KEEL_TRY(ml_attr_reals(k, "prob_b", &m->pb, &m->npb));
  if (m->ncoef < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "coefficients is missing or empty");
  if (m->nrho < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "rho is missing or empty");
  static const double none[1] = {0};
  if (m->nsv < 0) m->nsv = 0, m->sv = (double *)(uintptr_t)none; /* never read: no vectors */
  if (m->npa < 0) m->npa = 0;
  return KEEL_OK;
}

static keel_status op_svm_regressor(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n, c;
  KEEL_TRY(ml_rows(x, "SVMRegressor", &n, &c));
  svm_model m;
  KEEL_TRY(svm_read(k, &m));
  int64_t nsup = keel_k_attr_i(k, "n_supports", 0), one = keel_k_attr_i(k, "one_class", 0);
  if (nsup > 0 && (!ml_prod_is(nsup, c, m.nsv) || m.ncoef != nsup))
    return keel_err(KEEL_ERR_SHAPE, "%lld support vectors of %lld features do not fit support_vectors "
                    "(%lld values) and coefficients (%lld values)", (long long)nsup, (long long)c,
                    (long long)m.nsv, (long long)m.ncoef);
  if (nsup <= 0 && m.ncoef != c)
    return keel_err(KEEL_ERR_SHAPE, "coefficients has %lld values for %lld features", (long long)m.ncoef, (long long)c);
  int64_t shape[2] = {n, 1};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 2, shape, &y));
  double *row;
  KEEL_TRY(keel_k_scratch_n(k, c + 1, sizeof(double), (void **)&row));
  svm_kernel lin = {K_LINEAR, 0, 0, 0};
  for (int64_t i = 0; i < n; i++) {
    ml_row(x, i, c, row);
    double s = 0;
    if (nsup > 0)
      for (int64_t v = 0; v < nsup; v++) s += m.coef[v] * kernel_eval(&m.kr, row, m.sv + v * c, c);
    else s = kernel_eval(&lin, row, m.coef, c);
    s += m.rho[0];
    if (one) s = s > 0 ? 1 : -1;
    if (m.post == ML_POST_PROBIT) s = ml_probit(s);
    ml_store(y, i, s);
  }
  return KEEL_OK;
}

/* libsvm's pairwise coupling (Wu, Lin and Weng 2004, method 2): class
 * probabilities p[0..k) from pairwise r[i*k+j] = P(i | i or j). */
static void multiclass_probability(int64_t kc, const double *r, double *q, double *qp, double *p) {
  double eps = 0.005 / (double)kc;
  for (int64_t i = 0; i < kc; i++) {
    p[i] = 1.0 / (double)kc;
    q[i * kc + i] = 0;
    for (int64_t j = 0; j < i; j++) {
      q[i * kc + i] += r[j * kc + i] * r[j * kc + i];
      q[i * kc + j] = q[j * kc + i];
    }
    for (int64_t j = i + 1; j < kc; j++) {
      q[i * kc + i] += r[j * kc + i] * r[j * kc + i];
      q[i * kc + j] = -r[j * kc + i] * r[i * kc + j];
    }
  }
  for (int iter = 0; iter < 100; iter++) {
    double pqp = 0, maxerr = 0;
    for (int64_t i = 0; i < kc; i++) {
      qp[i] = 0;
      for (int64_t j = 0; j < kc; j++) qp[i] += q[i * kc + j] * p[j];
      pqp += p[i] * qp[i];
    }
    for (int64_t i = 0; i < kc; i++) maxerr = fmax(maxerr, fabs(qp[i] - pqp));
    if (maxerr < eps) break;
    for (int64_t i = 0; i < kc; i++) {
      double d = (-qp[i] + pqp) / q[i * kc + i];
      p[i] += d;
      pqp = (pqp + d * (d * q[i * kc + i] + 2 * qp[i])) / (1 + d) / (1 + d);
      for (int64_t j = 0; j < kc; j++) {
        qp[j] = (qp[j] + d * q[i * kc + j]) / (1 + d);
        p[j] /= (1 + d);
      }
    }
  }
}

typedef struct svc {
  svm_model m;
  labels l;
  int64_t kc, nv, c, npairs;
  const int64_t *vpc;
  int64_t *start;
  bool svc, proba, all_pos;
} svc;

static keel_status svc_read(keel_kctx *k, int64_t c, svc *s) {
  KEEL_TRY(svm_read(k, &s->m));
  KEEL_TRY(labels_read(k, "classlabels_ints", &s->l));
  int64_t nvpc;
  s->vpc = ml_attr_ints(k, "vectors_per_class", &nvpc);
  s->kc = s->l.n, s->c = c, s->nv = 0;
  s->npairs = s->kc * (s->kc - 1) / 2;
  s->svc = nvpc > 0 && s->m.nsv > 0;
  s->proba = s->m.npa > 0;
  s->all_pos = true;
  for (int64_t i = 0; i < s->m.ncoef; i++)
    if (s->m.coef[i] < 0) s->all_pos = false;
  if (!s->svc) {
    if (!ml_prod_is(s->kc, c, s->m.ncoef))
      return keel_err(KEEL_ERR_SHAPE, "coefficients has %lld values, expected classes (%lld) x features (%lld)",
                      (long long)s->m.ncoef, (long long)s->kc, (long long)c);
    return KEEL_OK;
  }
  if (nvpc != s->kc)
    return keel_err(KEEL_ERR_INVALID_MODEL, "vectors_per_class has %lld entries for %lld classes", (long long)nvpc, (long long)s->kc);
  KEEL_TRY(keel_k_scratch_n(k, s->kc + 1, sizeof(int64_t), (void **)&s->start));
  for (int64_t i = 0; i < s->kc; i++) {
    if (s->vpc[i] < 0 || s->vpc[i] > s->m.nsv)
      return keel_err(KEEL_ERR_INVALID_MODEL, "vectors_per_class[%lld] = %lld is out of range", (long long)i, (long long)s->vpc[i]);
    s->start[i] = s->nv, s->nv += s->vpc[i];
    if (s->nv > s->m.nsv)
      return keel_err(KEEL_ERR_INVALID_MODEL, "vectors_per_class adds up to more vectors than support_vectors holds");
  }
  if (!ml_prod_is(s->nv, c, s->m.nsv))
    return keel_err(KEEL_ERR_SHAPE, "support_vectors has %lld values, expected %lld vectors x %lld features",
                    (long long)s->m.nsv, (long long)s->nv, (long long)c);
  if (!ml_prod_is(s->kc - 1, s->nv, s->m.ncoef))
    return keel_err(KEEL_ERR_SHAPE, "coefficients has %lld values, expected (classes - 1) x vectors (%lld x %lld)",
                    (long long)s->m.ncoef, (long long)(s->kc - 1), (long long)s->nv);
  if (s->m.nrho < s->npairs)
    return keel_err(KEEL_ERR_INVALID_MODEL, "rho has %lld values for %lld class pairs", (long long)s->m.nrho, (long long)s->npairs);
  if (s->proba && (s->m.npa < s->npairs || s->m.npb < s->npairs))
    return keel_err(KEEL_ERR_INVALID_MODEL, "prob_a and prob_b need %lld values each", (long long)s->npairs);
  return KEEL_OK;
}

/* One-vs-one decision values of a row (kern: K(x, sv_v) for every v). */
static void svc_pairs(const svc *s, const double *kern, double *dec, int64_t *votes) {
  int64_t p = 0;
  memset(votes, 0, sizeof(int64_t) * (size_t)s->kc);
  for (int64_t i = 0; i < s->kc; i++)
    for (int64_t j = i + 1; j < s->kc; j++, p++) {
      double sum = s->m.rho[p];
      for (int64_t m = 0; m < s->vpc[i]; m++) sum += s->m.coef[(j - 1) * s->nv + s->start[i] + m] * kern[s->start[i] + m];
      for (int64_t m = 0; m < s->vpc[j]; m++) sum += s->m.coef[i * s->nv + s->start[j] + m] * kern[s->start[j] + m];
      dec[p] = sum;
      votes[sum > 0 ? i : j]++;
    }
}

static void svc_proba(const svc *s, const double *dec, double *r, double *q, double *qp, double *out) {
  int64_t p = 0, kc = s->kc;
  for (int64_t i = 0; i < kc; i++)
    for (int64_t j = i + 1; j < kc; j++, p++) {
      double v = 1.0 - ml_logistic(dec[p] * s->m.pa[p] + s->m.pb[p]);
      v = fmin(fmax(v, 1e-7), 1 - 1e-7);
      r[i * kc + j] = v;
      r[j * kc + i] = 1 - v;
    }
  multiclass_probability(kc, r, q, qp, out);
}

/* The scores of one row into z (zc values) and the label index. */
static int64_t svc_row(const svc *s, const double *row, double *kern, double *dec, int64_t *votes,
                       double *work, double *z) {
  int64_t kc = s->kc;
  if (!s->svc) {
    svm_kernel lin = {K_LINEAR, 0, 0, 0};
    for (int64_t j = 0; j < kc; j++) z[j] = kernel_eval(&lin, row, s->m.coef + j * s->c, s->c) + s->m.rho[0];
    int64_t b = argmax(z, kc);
    double w = z[b];
    if (kc == 2 && ((s->all_pos && w >= 0.5) || (w > 0 && !s->all_pos))) b = 1;
    ml_post_apply(s->m.post, z, kc);
    return b;
  }
  for (int64_t v = 0; v < s->nv; v++) kern[v] = kernel_eval(&s->m.kr, row, s->m.sv + v * s->c, s->c);
  svc_pairs(s, kern, dec, votes);
  int64_t b = 0;
  for (int64_t i = 1; i < kc; i++)
    if (votes[i] > votes[b]) b = i;
  if (s->proba) {
    svc_proba(s, dec, work, work + kc * kc, work + 2 * kc * kc, z);
    ml_post_apply(s->m.post, z, kc);
  } else if (kc <= 2) {
    double v = dec[0];
    if (s->m.post == ML_POST_PROBIT) z[0] = ml_probit(v), z[1] = 0;
    else if (s->m.post == ML_POST_NONE) z[0] = -v, z[1] = v;
    else z[0] = 1.0 - v, z[1] = v;
  } else {
    memcpy(z, dec, sizeof(double) * (size_t)s->npairs);
    ml_post_apply(s->m.post, z, s->npairs);
  }
  return b;
}

static keel_status op_svm_classifier(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n, c;
  KEEL_TRY(ml_rows(x, "SVMClassifier", &n, &c));
  svc s;
  KEEL_TRY(svc_read(k, c, &s));
  if (s.kc < 2) return keel_err(KEEL_ERR_INVALID_MODEL, "SVMClassifier needs two or more class labels");
  int64_t zc = s.svc && !s.proba ? (s.kc > 2 ? s.npairs : 2) : s.kc, zs[2] = {n, zc};
  keel_tensor *y, *z;
  KEEL_TRY(label_out(k, &s.l, n, &y));
  KEEL_TRY(keel_k_out(k, 1, KEEL_FLOAT, 2, zs, &z));
  double *row, *kern, *dec, *work, *zr;
  int64_t *votes;
  KEEL_TRY(keel_k_scratch_n(k, c + 1, sizeof(double), (void **)&row));
  KEEL_TRY(keel_k_scratch_n(k, s.nv + 1, sizeof(double), (void **)&kern));
  KEEL_TRY(keel_k_scratch_n(k, s.npairs + 1, sizeof(double), (void **)&dec));
  KEEL_TRY(keel_k_scratch_n(k, 3 * s.kc * s.kc, sizeof(double), (void **)&work));
  KEEL_TRY(keel_k_scratch_n(k, zc + s.kc + 2, sizeof(double), (void **)&zr));
  KEEL_TRY(keel_k_scratch_n(k, s.kc, sizeof(int64_t), (void **)&votes));
  for (int64_t i = 0; i < n; i++) {
    ml_row(x, i, c, row);
    int64_t b = svc_row(&s, row, kern, dec, votes, work, zr);
    KEEL_TRY(label_put(y, &s.l, i, b));
    for (int64_t j = 0; j < zc; j++) ml_store(z, i * zc + j, zr[j]);
  }
  return KEEL_OK;
}

/* ============================================================ table */

#define ML_NUM_IN (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_INT32))
const keel_opdef keel_ops_ml_linear[] = {
    {KEEL_ML, "LinearRegressor", 1, KEEL_OPSET_MAX, op_linear_regressor, 0, ML_NUM_IN},
    {KEEL_ML, "LinearClassifier", 1, KEEL_OPSET_MAX, op_linear_classifier, 0, ML_NUM_IN},
    {KEEL_ML, "SVMRegressor", 1, KEEL_OPSET_MAX, op_svm_regressor, 0, ML_NUM_IN},
    {KEEL_ML, "SVMClassifier", 1, KEEL_OPSET_MAX, op_svm_classifier, 0, ML_NUM_IN},
    {0},
};
#undef ML_NUM_IN
