/* norm_backward.c: the backward kernels of the normalizations and of
 * NegativeLogLikelihoodLoss (forward kernels in norm.c; rules in
 * autodiff/grad_nn.c, the loss's in autodiff/grad_math.c), in the domain
 * "ai.keel.internal":
 *   BatchNormGrad, LayerNormGrad,     dX, dScale, dB
 *   GroupNormGrad (also InstanceNormalization's)
 *   NegativeLogLikelihoodLossGrad(gy, x, target [, weight]) -> dx, with the
 *       forward's reduction and ignore_index.
 *
 * Every kernel takes float and double. The statistics kernels work in
 * double and split rows (LayerNorm, GroupNorm) or channels (BatchNorm) over
 * the pool; the loss's runs in its input's type.
 */
#include <math.h>

#include "base/pool.h"
#include "ops/common/backward_util.h"

/* ======================================================= BatchNorm */

typedef struct bn_job {
  int64_t n, c, l;              /* X viewed as (N, C, L)                 */
  bool dbl, training;
  double eps;
  const void *gy, *x, *scale, *mean, *var;
  void *dx, *dscale, *db;       /* NULL when not asked for               */
} bn_job;

/* Channels [c0, c1): the statistics (the batch's, or the inputs'), then
 * dScale = sum(gY * xhat), dB = sum(gY), and dX: gY * scale * inv, or in
 * training mode PyTorch's scale * inv * (gY - mean(gY) - xhat * mean(gY * xhat)). */
static keel_status bn_task(void *ctx, int64_t c0, int64_t c1, int worker) {
  (void)worker;
  const bn_job *j = ctx;
  double m = (double)(j->n * j->l);
  for (int64_t c = c0; c < c1; c++) {
    double mu = 0, var = 0, sg = 0, sgx = 0;
    if (j->training) {
      for (int64_t n = 0; n < j->n; n++)
        for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++)
          mu += keel_bw_ld(j->x, j->dbl, b + i);
      mu = m > 0 ? mu / m : 0;
      for (int64_t n = 0; n < j->n; n++)
        for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) {
          double d = keel_bw_ld(j->x, j->dbl, b + i) - mu;
          var += d * d;
        }
      var = m > 0 ? var / m : 0;
    } else {
      mu = keel_bw_ld(j->mean, j->dbl, c), var = keel_bw_ld(j->var, j->dbl, c);
    }
    double inv = 1 / sqrt(var + j->eps), sc = keel_bw_ld(j->scale, j->dbl, c);
    for (int64_t n = 0; n < j->n; n++)
      for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) {
        double g = keel_bw_ld(j->gy, j->dbl, b + i);
        sg += g, sgx += g * (keel_bw_ld(j->x, j->dbl, b + i) - mu) * inv;
      }
    if (j->dscale) keel_bw_st(j->dscale, j->dbl, c, sgx);
    if (j->db) keel_bw_st(j->db, j->dbl, c, sg);
    if (!j->dx) continue;
    for (int64_t n = 0; n < j->n; n++)
      for (int64_t i = 0, b = (n * j->c + c) * j->l; i < j->l; i++) {
        double g = keel_bw_ld(j->gy, j->dbl, b + i), v;
        if (j->training) {
          double xh = (keel_bw_ld(j->x, j->dbl, b + i) - mu) * inv;
          v = sc * inv * (g - sg / m - xh * sgx / m);
        } else {
          v = g * sc * inv;
        }
        keel_bw_st(j->dx, j->dbl, b + i, v);
      }
  }
  return KEEL_OK;
}

/* A per-channel input of shape (C). */
static keel_status bn_vec(keel_kctx *k, int i, int dtype, int64_t c, const keel_tensor **t) {
  KEEL_TRY(keel_bw_fd_input(k, i, dtype, t));
  return keel_bw_same_shape(k, *t, i == 2 ? "scale" : i == 3 ? "mean" : "var", 1, &c);
}

/* Inputs (gY, X, scale, mean, var; mean and var unread in training mode,
 * attribute training=1); outputs dX, dScale, dB. */
static keel_status op_bn_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *sc, *mean = NULL, *var = NULL;
  KEEL_TRY(keel_bw_fd_input(k, 1, -1, &x));
  KEEL_TRY(keel_bw_fd_input(k, 0, x->dtype, &gy));
  if (x->rank < 2) return keel_err(KEEL_ERR_SHAPE, "BatchNormGrad: X must be (N, C, ...)");
  KEEL_TRY(keel_bw_same_shape(k, gy, "the gradient", x->rank, x->shape));
  bn_job j = {x->shape[0], x->shape[1], keel_shape_numel(x->rank - 2, x->shape + 2),
              x->dtype == KEEL_DOUBLE, keel_k_attr_i(k, "training", 0) != 0,
              keel_k_attr_f(k, "epsilon", 1e-5f), gy->data, x->data, NULL, NULL, NULL,
              NULL, NULL, NULL};
  KEEL_TRY(bn_vec(k, 2, x->dtype, j.c, &sc));
  if (!j.training) {
    KEEL_TRY(bn_vec(k, 3, x->dtype, j.c, &mean));
    KEEL_TRY(bn_vec(k, 4, x->dtype, j.c, &var));
    j.mean = mean->data, j.var = var->data;
  }
  j.scale = sc->data;
  keel_tensor *o;
  void **dst[3] = {&j.dx, &j.dscale, &j.db};
  for (int i = 0; i < 3; i++) {
    if (!keel_k_has_out(k, i)) continue;
    KEEL_TRY(keel_k_out(k, i, x->dtype, i ? 1 : x->rank, i ? &j.c : x->shape, &o));
    *dst[i] = o->data;
  }
  if (!j.c) return KEEL_OK;
  return keel_pool_for(k->pool, j.c, 1, bn_task, &j);
}

/* ======================================================= LayerNorm */

typedef struct ln_job {
  int64_t rows, d;
  bool dbl;
  double eps;
  const void *gy, *x, *gmean, *ginv;
  const double *scale;          /* expanded to D values                  */
  void *dx;
  double *parts;                /* per worker: dScale then dB (2 D)      */
} ln_job;

/* Rows [r0, r1): with xhat = (x - mean) * inv and g = gY * scale,
 * dX = inv * (g - mean(g) - xhat * mean(g * xhat)), plus the gradients
 * reaching the Mean output (1/D each) and InvStdDev (-inv^3 (x - mean) / D). */
static keel_status ln_task(void *ctx, int64_t r0, int64_t r1, int worker) {
  const ln_job *j = ctx;
  double *ds = j->parts + (size_t)worker * 2 * (size_t)j->d, *db = ds + j->d, D = (double)j->d;
  for (int64_t r = r0; r < r1; r++) {
    int64_t b = r * j->d;
    double mu = 0, var = 0, mg = 0, mgx = 0;
    for (int64_t i = 0; i < j->d; i++) mu += keel_bw_ld(j->x, j->dbl, b + i);
    mu /= D;
    for (int64_t i = 0; i < j->d; i++) {
      double t = keel_bw_ld(j->x, j->dbl, b + i) - mu;
      var += t * t;
    }
    double inv = 1 / sqrt(var / D + j->eps);
    for (int64_t i = 0; i < j->d; i++) {
      double g = keel_bw_ld(j->gy, j->dbl, b + i);
      double xh = (keel_bw_ld(j->x, j->dbl, b + i) - mu) * inv;
      ds[i] += g * xh, db[i] += g;
      mg += g * j->scale[i], mgx += g * j->scale[i] * xh;
    }
    mg /= D, mgx /= D;
    double gm = j->gmean ? keel_bw_ld(j->gmean, j->dbl, r) / D : 0;
    double gi = j->ginv ? -keel_bw_ld(j->ginv, j->dbl, r) * inv * inv * inv / D : 0;
    for (int64_t i = 0; i < j->d; i++) {
      double x = keel_bw_ld(j->x, j->dbl, b + i), xh = (x - mu) * inv;
      double g = keel_bw_ld(j->gy, j->dbl, b + i) * j->scale[i];
      keel_bw_st(j->dx, j->dbl, b + i, inv * (g - mg - xh * mgx) + gm + gi * (x - mu));
    }
  }
  return KEEL_OK;
}

/* scale (broadcastable to X's normalized dims) as D doubles. */
static keel_status ln_scale(keel_kctx *k, const keel_tensor *sc, int r, const int64_t *dims,
                            int64_t d, double *out) {
  int rr;
  int64_t shape[KEEL_MAX_RANK], strides[KEEL_MAX_RANK];
  KEEL_TRY(keel_broadcast_shape(sc->rank, sc->shape, r, dims, &rr, shape));
  if (rr != r || memcmp(shape, dims, sizeof(int64_t) * (size_t)r))
    return keel_err(KEEL_ERR_SHAPE, "%s: Scale does not broadcast to the normalized dims",
                    k->node->op_type);
  keel_broadcast_strides(sc->rank, sc->shape, r, dims, strides);
  for (int64_t i = 0; i < d; i++) {
    int64_t rem = i, off = 0;
    for (int q = r - 1; q >= 0; q--) off += (rem % dims[q]) * strides[q], rem /= dims[q];
    out[i] = keel_bw_ld(sc->data, sc->dtype == KEEL_DOUBLE, off);
  }
  return KEEL_OK;
}

/* An optional per-row gradient (of Mean or InvStdDev): `rows` values. */
static keel_status ln_row_grad(keel_kctx *k, int i, int dtype, int64_t rows, const void **p) {
  *p = NULL;
  if (!keel_k_has_in(k, i)) return KEEL_OK;
  const keel_tensor *t;
  KEEL_TRY(keel_bw_fd_input(k, i, dtype, &t));
  if (keel_tensor_numel(t) != rows)
    return keel_err(KEEL_ERR_SHAPE, "LayerNormGrad: input %d has %lld values for %lld rows", i,
                    (long long)keel_tensor_numel(t), (long long)rows);
  *p = t->data;
  return KEEL_OK;
}

/* Inputs (gY, X, Scale, gMean?, gInvStdDev?), attributes axis, epsilon;
 * outputs dX, dScale and dB, the latter two of X's normalized shape (the
 * rule sums them down to Scale's and B's). */
static keel_status op_ln_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *sc;
  KEEL_TRY(keel_bw_fd_input(k, 1, -1, &x));
  KEEL_TRY(keel_bw_fd_input(k, 0, x->dtype, &gy));
  KEEL_TRY(keel_bw_fd_input(k, 2, x->dtype, &sc));
  KEEL_TRY(keel_bw_same_shape(k, gy, "the gradient", x->rank, x->shape));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", -1), x->rank, "LayerNormGrad: axis", &axis));
  int r = x->rank - axis;
  const int64_t *dims = x->shape + axis;
  ln_job j = {keel_shape_numel(axis, x->shape), keel_shape_numel(r, dims),
              x->dtype == KEEL_DOUBLE, keel_k_attr_f(k, "epsilon", 1e-5f), gy->data, x->data,
              NULL, NULL, NULL, NULL, NULL};
  KEEL_TRY(ln_row_grad(k, 3, x->dtype, j.rows, &j.gmean));
  KEEL_TRY(ln_row_grad(k, 4, x->dtype, j.rows, &j.ginv));
  keel_tensor *dx, *ds, *db;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &dx));
  KEEL_TRY(keel_k_out(k, 1, x->dtype, r, dims, &ds));
  KEEL_TRY(keel_k_out(k, 2, x->dtype, r, dims, &db));
  if (!j.d) return KEEL_OK;
  int threads = keel_pool_threads(k->pool);
  void *p, *q;
  KEEL_TRY(keel_k_scratch_n(k, j.d, sizeof(double), &p));
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * 2 * j.d, sizeof(double), &q));
  KEEL_TRY(ln_scale(k, sc, r, dims, j.d, p));
  memset(q, 0, sizeof(double) * (size_t)(threads * 2 * j.d));
  j.scale = p, j.parts = q, j.dx = dx->data;
  KEEL_TRY(keel_pool_for(k->pool, j.rows, 1, ln_task, &j));
  for (int64_t i = 0; i < j.d; i++) {
    double s = 0, b = 0;
    for (int t = 0; t < threads; t++) s += j.parts[(size_t)t * 2 * (size_t)j.d + (size_t)i],
                                      b += j.parts[(size_t)t * 2 * (size_t)j.d + (size_t)(j.d + i)];
    keel_bw_st(ds->data, j.dbl, i, s);
    keel_bw_st(db->data, j.dbl, i, b);
  }
  return KEEL_OK;
}

/* ============================================ Instance/GroupNorm */

typedef struct gn_job {
  int64_t n, c, g, l;           /* X as (N, G, C / G, L)                 */
  bool dbl;
  double eps;
  const void *gy, *x;
  const double *scale;          /* per channel                           */
  void *dx;
  double *parts;                /* per worker: dScale then dB (2 C)      */
} gn_job;

/* Rows (n, group) [r0, r1): LayerNorm's formula over the group's C / G * L
 * values, with each channel's scale. */
static keel_status gn_task(void *ctx, int64_t r0, int64_t r1, int worker) {
  const gn_job *j = ctx;
  int64_t cg = j->c / j->g, D = cg * j->l;
  double *ds = j->parts + (size_t)worker * 2 * (size_t)j->c, *db = ds + j->c;
  for (int64_t r = r0; r < r1; r++) {
    int64_t b = r * D, c0 = (r % j->g) * cg;
    double mu = 0, var = 0, mg = 0, mgx = 0;
    for (int64_t i = 0; i < D; i++) mu += keel_bw_ld(j->x, j->dbl, b + i);
    mu /= (double)D;
    for (int64_t i = 0; i < D; i++) {
      double t = keel_bw_ld(j->x, j->dbl, b + i) - mu;
      var += t * t;
    }
    double inv = 1 / sqrt(var / (double)D + j->eps);
    for (int64_t i = 0; i < D; i++) {
      int64_t c = c0 + i / j->l;
      double g = keel_bw_ld(j->gy, j->dbl, b + i);
      double xh = (keel_bw_ld(j->x, j->dbl, b + i) - mu) * inv;
      ds[c] += g * xh, db[c] += g;
      mg += g * j->scale[c], mgx += g * j->scale[c] * xh;
    }
    mg /= (double)D, mgx /= (double)D;
    for (int64_t i = 0; i < D; i++) {
      double xh = (keel_bw_ld(j->x, j->dbl, b + i) - mu) * inv;
      double g = keel_bw_ld(j->gy, j->dbl, b + i) * j->scale[c0 + i / j->l];
      keel_bw_st(j->dx, j->dbl, b + i, inv * (g - mg - xh * mgx));
    }
  }
  return KEEL_OK;
}

/* Inputs (gY, X, scale); attributes num_groups (0: InstanceNormalization,
 * one group per channel), per_group (scale and B per group, as
 * GroupNormalization before opset 21), epsilon. Outputs dX, dScale, dB
 * shaped as scale. */
static keel_status op_gn_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *sc;
  KEEL_TRY(keel_bw_fd_input(k, 1, -1, &x));
  KEEL_TRY(keel_bw_fd_input(k, 0, x->dtype, &gy));
  KEEL_TRY(keel_bw_fd_input(k, 2, x->dtype, &sc));
  if (x->rank < 2) return keel_err(KEEL_ERR_SHAPE, "%s: X must be (N, C, ...)", k->node->op_type);
  KEEL_TRY(keel_bw_same_shape(k, gy, "the gradient", x->rank, x->shape));
  int64_t C = x->shape[1], G = keel_k_attr_i(k, "num_groups", 0);
  if (G == 0) G = C;
  if (G < 1 || C % G)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: num_groups %lld does not divide %lld channels",
                    k->node->op_type, (long long)G, (long long)C);
  bool per_group = keel_k_attr_i(k, "per_group", 0) != 0;
  int64_t ns = per_group ? G : C;
  KEEL_TRY(keel_bw_same_shape(k, sc, "scale", 1, &ns));
  gn_job j = {x->shape[0], C, G, keel_shape_numel(x->rank - 2, x->shape + 2),
              x->dtype == KEEL_DOUBLE, keel_k_attr_f(k, "epsilon", 1e-5f), gy->data, x->data,
              NULL, NULL, NULL};
  keel_tensor *dx, *ds, *db;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &dx));
  KEEL_TRY(keel_k_out(k, 1, x->dtype, 1, &ns, &ds));
  KEEL_TRY(keel_k_out(k, 2, x->dtype, 1, &ns, &db));
  int threads = keel_pool_threads(k->pool);
  void *p, *q;
  KEEL_TRY(keel_k_scratch_n(k, C + 1, sizeof(double), &p));
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * 2 * C + 1, sizeof(double), &q));
  double *scale = p, *parts = q;
  for (int64_t c = 0; c < C; c++)
    scale[c] = keel_bw_ld(sc->data, j.dbl, per_group ? c / (C / G) : c);
  memset(parts, 0, sizeof(double) * (size_t)(threads * 2 * C));
  j.scale = scale, j.parts = parts, j.dx = dx->data;
  if (keel_tensor_numel(x)) KEEL_TRY(keel_pool_for(k->pool, j.n * G, 1, gn_task, &j));
  for (int64_t i = 0; i < ns; i++)
    keel_bw_st(ds->data, j.dbl, i, 0), keel_bw_st(db->data, j.dbl, i, 0);
  for (int t = 0; t < threads; t++)
    for (int64_t c = 0; c < C; c++) {
      int64_t o = per_group ? c / (C / G) : c;
      const double *pt = parts + (size_t)t * 2 * (size_t)C;
      keel_bw_st(ds->data, j.dbl, o, keel_bw_ld(ds->data, j.dbl, o) + pt[c]);
      keel_bw_st(db->data, j.dbl, o, keel_bw_ld(db->data, j.dbl, o) + pt[C + c]);
    }
  return KEEL_OK;
}

/* ================================================ NegativeLogLikelihoodLossGrad */

typedef struct nll_geom {
  int64_t N, C, D;                /* x is [N, C, D...], target [N, D...]     */
  int reduction;                  /* 0 none, 1 sum, 2 mean                   */
  bool has_ignore;
  int64_t ignore;
} nll_geom;

static keel_status nll_geometry(keel_kctx *k, const keel_tensor *x, const keel_tensor *t,
                                const keel_tensor *w, nll_geom *g) {
  if (x->rank < 2 || t->rank != x->rank - 1)
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: input rank %d, target rank %d",
                    x->rank, t->rank);
  g->N = x->shape[0], g->C = x->shape[1], g->D = 1;
  for (int d = 2; d < x->rank; d++) g->D *= x->shape[d];
  bool same = t->shape[0] == g->N;
  for (int d = 2; d < x->rank; d++) same &= t->shape[d - 1] == x->shape[d];
  if (!same) return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: target's shape does not fit the input's");
  if (t->dtype != KEEL_INT64 && t->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: target must be int32 or int64");
  if (w && (w->rank != 1 || w->shape[0] != g->C || w->dtype != x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: weight must be [C] of the input's type");
  const char *red = keel_k_attr_s(k, "reduction", "mean");
  g->reduction = !strcmp(red, "none") ? 0 : !strcmp(red, "sum") ? 1 : !strcmp(red, "mean") ? 2 : -1;
  if (g->reduction < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "NegativeLogLikelihoodLoss: reduction '%s'", red);
  g->has_ignore = keel_k_attr(k, "ignore_index") != NULL;
  g->ignore = keel_k_attr_i(k, "ignore_index", 0);
  return KEEL_OK;
}

static int64_t nll_label(const keel_tensor *t, int64_t i) {
  return t->dtype == KEEL_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

/* dx[n, c, d] = -w[c] * coef(n, d) where c = target[n, d] (not ignored). */
#define NLL_BODY(T)                                                                       \
  static keel_status nll_##T(const nll_geom *g, const keel_tensor *gy, const keel_tensor *t, \
                             const keel_tensor *w, keel_tensor *o) {                      \
    const T *gv = gy->data, *wv = w ? w->data : NULL;                                     \
    T *dx = o->data;                                                                      \
    int64_t cnt = g->N * g->D;                                                            \
    double wsum = 0;                                                                      \
    for (int64_t i = 0; i < cnt; i++) {                                                   \
      int64_t c = nll_label(t, i);                                                        \
      if (g->has_ignore && c == g->ignore) continue;                                      \
      if (c < 0 || c >= g->C)                                                             \
        return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLoss: target %lld outside [0, %lld)", \
                        (long long)c, (long long)g->C);                                   \
      wsum += wv ? (double)wv[c] : 1.0;                                                   \
    }                                                                                     \
    memset(dx, 0, keel_tensor_nbytes(o));                                                 \
    T scale = g->reduction == 2 ? (T)(1.0 / wsum) : (T)1;                                 \
    for (int64_t i = 0; i < cnt; i++) {                                                   \
      int64_t c = nll_label(t, i), n = i / g->D, d = i % g->D;                            \
      if (g->has_ignore && c == g->ignore) continue;                                      \
      T coef = g->reduction ? gv[0] * scale : gv[i];                                      \
      dx[(n * g->C + c) * g->D + d] = -(wv ? wv[c] : (T)1) * coef;                        \
    }                                                                                     \
    return KEEL_OK;                                                                       \
  }
NLL_BODY(float)
NLL_BODY(double)

static keel_status op_nll_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *t, *w;
  KEEL_TRY(keel_bw_fd_input(k, 0, -1, &gy));
  KEEL_TRY(keel_bw_fd_input(k, 1, gy->dtype, &x));
  KEEL_TRY(keel_k_in(k, 2, &t));
  KEEL_TRY(keel_k_in_opt(k, 3, &w));
  nll_geom g;
  KEEL_TRY(nll_geometry(k, x, t, w, &g));
  int64_t want = g.reduction ? 1 : g.N * g.D;
  if (keel_tensor_numel(gy) != want)
    return keel_err(KEEL_ERR_SHAPE, "NegativeLogLikelihoodLossGrad: the gradient has %lld elements, the loss %lld",
                    (long long)keel_tensor_numel(gy), (long long)want);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o));
  return x->dtype == KEEL_FLOAT ? nll_float(&g, gy, t, w, o) : nll_double(&g, gy, t, w, o);
}

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_norm[] = {
    {D, "BatchNormGrad", 1, KEEL_OPSET_MAX, op_bn_grad, 0, FD},
    {D, "LayerNormGrad", 1, KEEL_OPSET_MAX, op_ln_grad, 0, FD},
    {D, "GroupNormGrad", 1, KEEL_OPSET_MAX, op_gn_grad, 0, FD},
    {D, "NegativeLogLikelihoodLossGrad", 1, KEEL_OPSET_MAX, op_nll_grad, 0, FD},
    {0},
};
#undef FD
#undef D
