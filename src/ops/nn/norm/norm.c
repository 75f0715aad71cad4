/* norm.c: the normalization family (BatchNormalization, LayerNormalization
 * with ONNX Runtime's SimplifiedLayerNormalization, InstanceNormalization,
 * GroupNormalization, MeanVarianceNormalization, LRN, LpNormalization)
 * and the classification losses (NegativeLogLikelihoodLoss,
 * SoftmaxCrossEntropyLoss).
 *
 * The statistics ops share one engine, the group walk: X is dense, and
 * each element belongs to the group given by its coordinates on the kept
 * axes (the statistics tensor's shape, with the reduced axes set to 1).
 * One walk sums per group, a second sums squared deviations from the group
 * mean (two passes: no E[x^2] - E[x]^2 cancellation), a third applies a
 * per-group affine map y = x * a[g] + b[g]. Sums and the affine map run in
 * double whatever the storage type; float16 / bfloat16 run on staged float
 * copies and round once. The losses gather log-probabilities in double.
 */
#include <math.h>

#include "base/pool.h"
#include "ops/common/bcast.h"
#include "ops/nn/norm/norm.h"
#include "ops/nn/norm/norm_gpu.h"
#include "ops/common/vmath.h"

/* ======================================================== group walk */

typedef struct gwalk {
  int r;                              /* merged dims                      */
  int64_t dims[KEEL_MAX_RANK];
  int64_t gs[KEEL_MAX_RANK];          /* group strides: 0 on reduced dims */
  int64_t numel, n_groups;
} gwalk;

/* Advances a row-major odometer over n dims, keeping *off in step. */
static void odo_step(int n, const int64_t *dims, const int64_t *strides, int64_t *idx,
                     int64_t *off) {
  for (int i = n - 1; i >= 0; i--) {
    *off += strides[i];
    if (++idx[i] < dims[i]) return;
    *off -= strides[i] * dims[i];
    idx[i] = 0;
  }
}

/* Groups of a dense tensor of `shape`, reduced where mask[d]. */
static void gwalk_make(int rank, const int64_t *shape, const uint8_t *mask, gwalk *w) {
  int64_t gs[KEEL_MAX_RANK], s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    gs[d] = mask[d] ? 0 : s;
    s *= mask[d] ? 1 : shape[d];
  }
  w->n_groups = s;
  w->numel = keel_shape_numel(rank, shape);
  w->r = 0;
  for (int d = 0; d < rank; d++) {
    if (shape[d] == 1) continue;
    int j = w->r - 1;
    if (j >= 0 && w->gs[j] == gs[d] * shape[d]) { /* both reduced, or adjacent kept */
      w->dims[j] *= shape[d];
      w->gs[j] = gs[d];
      continue;
    }
    w->dims[w->r] = shape[d];
    w->gs[w->r++] = gs[d];
  }
  if (w->r == 0) {
    w->r = 1;
    w->dims[0] = w->numel;
    w->gs[0] = 0;
  }
}

/* Runs BODY once per run of the last merged dim: x + base is the run (n
 * elements), g its first group, s its group stride: 0 (the run is one
 * group's, reduced) or 1 (the run spans n consecutive groups). */
#define GWALK_RUNS(w, ...)                                               \
  do {                                                                   \
    int64_t idx_[KEEL_MAX_RANK] = {0}, g = 0;                            \
    int64_t n = (w)->dims[(w)->r - 1], s = (w)->gs[(w)->r - 1];          \
    for (int64_t base = 0; base < (w)->numel; base += n) {               \
      __VA_ARGS__;                                                       \
      odo_step((w)->r - 1, (w)->dims, (w)->gs, idx_, &g);                \
    }                                                                    \
  } while (0)

/* Typed walks. The reduced runs sum into four partial sums: one chained
 * double add per element would bound the loop by the add's latency. */
#define DEF_GWALK(T)                                                                     \
  static double run_sum_##T(const T *x, int64_t n) {                                     \
    double t[4] = {0, 0, 0, 0};                                                          \
    int64_t i = 0;                                                                       \
    for (; i + 4 <= n; i += 4)                                                           \
      for (int u = 0; u < 4; u++) t[u] += x[i + u];                                      \
    for (; i < n; i++) t[0] += x[i];                                                     \
    return (t[0] + t[1]) + (t[2] + t[3]);                                                \
  }                                                                                      \
  static double run_sqdev_##T(const T *x, int64_t n, double m) {                         \
    double t[4] = {0, 0, 0, 0};                                                          \
    int64_t i = 0;                                                                       \
    for (; i + 4 <= n; i += 4)                                                           \
      for (int u = 0; u < 4; u++) t[u] += (x[i + u] - m) * (x[i + u] - m);               \
    for (; i < n; i++) t[0] += (x[i] - m) * (x[i] - m);                                  \
    return (t[0] + t[1]) + (t[2] + t[3]);                                                \
  }                                                                                      \
  /* acc[g] += x (mean == NULL) or (x - mean[g])^2 */                                     \
  static void gsum_##T(const gwalk *w, const T *x, const double *mean, double *acc) {    \
    GWALK_RUNS(w, {                                                                      \
      const T *xr = x + base;                                                            \
      if (s == 0) acc[g] += mean ? run_sqdev_##T(xr, n, mean[g]) : run_sum_##T(xr, n);   \
      else if (mean)                                                                     \
        for (int64_t i = 0; i < n; i++) acc[g + i] += (xr[i] - mean[g + i]) * (xr[i] - mean[g + i]); \
      else                                                                               \
        for (int64_t i = 0; i < n; i++) acc[g + i] += xr[i];                             \
    });                                                                                  \
  }                                                                                      \
  static void gaffine_##T(const gwalk *w, const T *x, T *y, const double *a,             \
                          const double *b) {                                             \
    GWALK_RUNS(w, {                                                                      \
      if (s == 0) {                                                                      \
        double ag = a[g], bg = b[g];                                                     \
        for (int64_t i = 0; i < n; i++) y[base + i] = (T)(x[base + i] * ag + bg);        \
      } else {                                                                           \
        for (int64_t i = 0; i < n; i++) y[base + i] = (T)(x[base + i] * a[g + i] + b[g + i]); \
      }                                                                                  \
    });                                                                                  \
  }
DEF_GWALK(float)
DEF_GWALK(double)

/* Per-group mean and population variance of x (float or double). */
static void gmoments(const gwalk *w, const keel_tensor *x, double *mean, double *var) {
  int64_t g = w->n_groups;
  double cnt = w->n_groups ? (double)w->numel / (double)w->n_groups : 0;
  memset(mean, 0, (size_t)g * sizeof(double));
  memset(var, 0, (size_t)g * sizeof(double));
  if (w->numel == 0) {
    for (int64_t i = 0; i < g; i++) mean[i] = var[i] = NAN; /* empty sets */
    return;
  }
  if (x->dtype == KEEL_FLOAT) gsum_float(w, x->data, NULL, mean);
  else gsum_double(w, x->data, NULL, mean);
  for (int64_t i = 0; i < g; i++) mean[i] /= cnt;
  if (x->dtype == KEEL_FLOAT) gsum_float(w, x->data, mean, var);
  else gsum_double(w, x->data, mean, var);
  for (int64_t i = 0; i < g; i++) var[i] /= cnt;
}

static void gaffine(const gwalk *w, const keel_tensor *x, keel_tensor *y, const double *a,
                    const double *b) {
  if (w->numel == 0) return;
  if (x->dtype == KEEL_FLOAT) gaffine_float(w, x->data, y->data, a, b);
  else gaffine_double(w, x->data, y->data, a, b);
}

/* ============================================================ staging */

/* X as float or double, and Y (output 0, X's shape and type) as a
 * writable tensor of the same compute type. For halves both live in one
 * float scratch copy (every kernel here reads x[i] before writing y[i]),
 * and nio_end rounds it into the output. */
typedef struct nio {
  keel_tensor x, y;
  keel_tensor *out;
} nio;

static keel_status nio_begin(keel_kctx *k, const keel_tensor *x, const char *op, nio *io) {
  if (!keel_dtype_is_float(x->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", op,
                    keel_dtype_name((keel_dtype)x->dtype));
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &io->out));
  io->x = *x;
  io->y = *io->out;
  if (keel_is_half(x->dtype)) {
    KEEL_TRY(keel_k_to_f32(k, x, &io->x));
    io->y = io->x;
  }
  return KEEL_OK;
}

/* The same with Y of type ydt: a float X can feed a float16 / bfloat16 Y
 * (through a float scratch Y that nio_end rounds into the output). */
static keel_status nio_begin_as(keel_kctx *k, const keel_tensor *x, int ydt, const char *op,
                                nio *io) {
  if (ydt == x->dtype || x->dtype != KEEL_FLOAT || !keel_is_half(ydt))
    return nio_begin(k, x, op, io);
  KEEL_TRY(keel_k_out(k, 0, ydt, x->rank, x->shape, &io->out));
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(x), sizeof(float), &p));
  io->x = *x;
  io->y = *x;
  io->y.data = p;
  io->y.buf = NULL;
  return KEEL_OK;
}

static void nio_end(nio *io) {
  if (keel_is_half(io->out->dtype)) keel_f32_store(io->y.data, io->out);
}

/* Scratch doubles: n of them (at least one). */
static keel_status dscratch(keel_kctx *k, int64_t n, double **p) {
  void *v;
  KEEL_TRY(keel_k_scratch(k, (size_t)(n > 0 ? n : 1) * sizeof(double), &v));
  *p = v;
  return KEEL_OK;
}

/* Input i, a float tensor of exactly n elements, into dst as doubles. */
static keel_status param_vec(keel_kctx *k, int i, const char *what, int64_t n, double *dst) {
  const keel_tensor *t;
  KEEL_TRY(keel_k_in(k, i, &t));
  if (!keel_dtype_is_float(t->dtype))
    return keel_err(KEEL_ERR_SHAPE, "%s must be a float tensor, got %s", what,
                    keel_dtype_name((keel_dtype)t->dtype));
  if (keel_tensor_numel(t) != n) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "%s has shape %s, expected %lld elements", what,
                    keel_shape_str(t->rank, t->shape, s, sizeof s), (long long)n);
  }
  for (int64_t j = 0; j < n; j++) dst[j] = keel_elem_get_f64(t->dtype, t->data, (size_t)j);
  return KEEL_OK;
}

/* Writes n doubles into output i, allocated with dtype and shape. */
static keel_status out_doubles(keel_kctx *k, int i, int dtype, int rank, const int64_t *shape,
                               const double *src) {
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, i, dtype, rank, shape, &o));
  int64_t n = keel_tensor_numel(o);
  if (dtype == KEEL_FLOAT)
    for (int64_t j = 0; j < n; j++) ((float *)o->data)[j] = (float)src[j];
  else if (dtype == KEEL_DOUBLE) memcpy(o->data, src, (size_t)n * sizeof(double));
  else
    for (int64_t j = 0; j < n; j++) keel_elem_set_f64(dtype, o->data, (size_t)j, src[j]);
  return KEEL_OK;
}

static keel_status need_rank(const keel_tensor *x, int min, const char *op) {
  if (x->rank >= min) return KEEL_OK;
  char s[128];
  return keel_err(KEEL_ERR_SHAPE, "%s needs X of rank >= %d (N, C, ...), got %s", op, min,
                  keel_shape_str(x->rank, x->shape, s, sizeof s));
}

/* ================================================ BatchNormalization */

/* The statistics outputs: running = input * mom + current * (1 - mom)
 * into outputs 1 and 2; opset < 14 also has saved_mean / saved_var (the
 * batch statistics) as outputs 3 and 4. vec holds the inputs as op_batchnorm
 * lays them out. Inference passes mom = 1: the inputs come out unchanged. */
static keel_status bn_stat_outputs(keel_kctx *k, int64_t g, const double *mean,
                                   const double *var, double mom, double *vec) {
  const keel_tensor *im, *iv;
  KEEL_TRY(keel_k_in(k, 3, &im));
  KEEL_TRY(keel_k_in(k, 4, &iv));
  double *rm = vec + 4 * g, *rv = vec + 5 * g; /* vec[0..4g) hold the inputs */
  for (int64_t c = 0; c < g; c++) {
    rm[c] = vec[2 * g + c] * mom + mean[c] * (1 - mom);
    rv[c] = vec[3 * g + c] * mom + var[c] * (1 - mom);
  }
  if (keel_k_has_out(k, 1)) KEEL_TRY(out_doubles(k, 1, im->dtype, im->rank, im->shape, rm));
  if (keel_k_has_out(k, 2)) KEEL_TRY(out_doubles(k, 2, iv->dtype, iv->rank, iv->shape, rv));
  if (keel_k_has_out(k, 3)) KEEL_TRY(out_doubles(k, 3, im->dtype, im->rank, im->shape, mean));
  if (keel_k_has_out(k, 4)) KEEL_TRY(out_doubles(k, 4, iv->dtype, iv->rank, iv->shape, var));
  return KEEL_OK;
}

/* Training mode: opset 14+ says so with training_mode; before, a model
 * that asks for the statistics outputs is training. */
static bool bn_training(const keel_kctx *k) {
  if (keel_k_opset(k) >= 14) return keel_k_attr_i(k, "training_mode", 0) != 0;
  for (int i = 1; i < k->n_out; i++)
    if (keel_k_has_out(k, i)) return true;
  return false;
}

static keel_status op_batchnorm(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(need_rank(x, 2, "BatchNormalization"));
  /* spatial=0 (opset < 9): statistics per (C, D1, ...) element, not per C */
  bool spatial = keel_k_opset(k) >= 9 || keel_k_attr_i(k, "spatial", 1) != 0;
  uint8_t mask[KEEL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) mask[d] = spatial ? d != 1 : d == 0;
  gwalk w;
  gwalk_make(x->rank, x->shape, mask, &w);
  int64_t g = w.n_groups;
  double *vec, eps = keel_k_attr_f(k, "epsilon", 1e-5f);
  KEEL_TRY(dscratch(k, 8 * g, &vec)); /* scale, B, mean, var, 2 running, a, b */
  static const char *names[4] = {"scale", "B", "mean", "var"};
  for (int i = 0; i < 4; i++) KEEL_TRY(param_vec(k, i + 1, names[i], g, vec + i * g));
  nio io;
  KEEL_TRY(nio_begin(k, x, "BatchNormalization", &io));
  const double *mean = vec + 2 * g, *var = vec + 3 * g;
  bool train = bn_training(k);
  if (train) {
    double *bm, *bv;
    KEEL_TRY(dscratch(k, 2 * g, &bm));
    bv = bm + g;
    gmoments(&w, &io.x, bm, bv);
    KEEL_TRY(bn_stat_outputs(k, g, bm, bv, keel_k_attr_f(k, "momentum", 0.9f), vec));
    mean = bm, var = bv;
  } else if (k->n_out > 1) { /* running statistics asked for anyway: unchanged */
    KEEL_TRY(bn_stat_outputs(k, g, mean, var, 1.0, vec));
  }
  double *a = vec + 6 * g, *b = vec + 7 * g;
  for (int64_t c = 0; c < g; c++) {
    a[c] = vec[c] / sqrt(var[c] + eps);
    b[c] = vec[g + c] - mean[c] * a[c];
  }
  gaffine(&w, &io.x, &io.y, a, b);
  nio_end(&io);
  return KEEL_OK;
}

/* ============================================= InstanceNormalization */

static keel_status op_instancenorm(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(need_rank(x, 2, "InstanceNormalization"));
  uint8_t mask[KEEL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) mask[d] = d >= 2;
  gwalk w;
  gwalk_make(x->rank, x->shape, mask, &w);
  int64_t C = x->shape[1], g = w.n_groups;
  double *par, *mean, eps = keel_k_attr_f(k, "epsilon", 1e-5f);
  KEEL_TRY(dscratch(k, 2 * C, &par));
  KEEL_TRY(param_vec(k, 1, "scale", C, par));
  KEEL_TRY(param_vec(k, 2, "B", C, par + C));
  KEEL_TRY(dscratch(k, 2 * g, &mean));
  double *var = mean + g;
  nio io;
  KEEL_TRY(nio_begin(k, x, "InstanceNormalization", &io));
  gmoments(&w, &io.x, mean, var);
  for (int64_t i = 0; i < g; i++) { /* group i is (n, c) with c = i % C */
    double a = par[i % C] / sqrt(var[i] + eps);
    var[i] = a;
    mean[i] = par[C + i % C] - mean[i] * a;
  }
  gaffine(&w, &io.x, &io.y, var, mean);
  nio_end(&io);
  return KEEL_OK;
}

/* ================================================ GroupNormalization */

/* Statistics per (n, group of C / G channels), then a per-channel affine
 * map. X is walked twice with two views of the same dense bytes: (N, G,
 * rest) for the moments and (N, C, spatial) for the affine map. scale and
 * bias are per group in opset 18 and per channel from opset 21 (where
 * stash_type 1 asks for float statistics: keel's are double). */
static keel_status gn_params(keel_kctx *k, int64_t C, int64_t G, double *par) {
  bool per_group = keel_k_opset(k) < 21;
  int64_t n = per_group ? G : C;
  KEEL_TRY(param_vec(k, 1, "scale", n, par + 2 * C));
  KEEL_TRY(param_vec(k, 2, "bias", n, par + 3 * C));
  for (int64_t c = 0; c < C; c++) { /* spread to channels */
    int64_t j = per_group ? c / (C / G) : c;
    par[c] = par[2 * C + j];
    par[C + c] = par[3 * C + j];
  }
  return KEEL_OK;
}

static keel_status op_groupnorm(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(need_rank(x, 2, "GroupNormalization"));
  int64_t N = x->shape[0], C = x->shape[1], G = keel_k_attr_i(k, "num_groups", 0);
  if (!keel_k_attr(k, "num_groups") || G <= 0 || C % G != 0)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "GroupNormalization: num_groups %lld must be positive and divide the %lld channels",
                    (long long)G, (long long)C);
  int64_t sp = keel_shape_numel(x->rank - 2, x->shape + 2);
  double *par, *mean, eps = keel_k_attr_f(k, "epsilon", 1e-5f);
  KEEL_TRY(dscratch(k, 4 * C, &par));
  KEEL_TRY(gn_params(k, C, G, par));
  KEEL_TRY(dscratch(k, 2 * N * G + 2 * N * C, &mean));
  double *var = mean + N * G, *a = var + N * G, *b = a + N * C;
  nio io;
  KEEL_TRY(nio_begin(k, x, "GroupNormalization", &io));
  gwalk w;
  int64_t gshape[3] = {N, G, C / G * sp}, cshape[3] = {N, C, sp};
  gwalk_make(3, gshape, (const uint8_t[3]){0, 0, 1}, &w);
  gmoments(&w, &io.x, mean, var);
  for (int64_t i = 0; i < N * C; i++) { /* i = (n, c); its group is n * G + c / (C / G) */
    int64_t c = i % C, g = i / C * G + c / (C / G);
    a[i] = par[c] / sqrt(var[g] + eps);
    b[i] = par[C + c] - mean[g] * a[i];
  }
  gwalk_make(3, cshape, (const uint8_t[3]){0, 0, 1}, &w);
  gaffine(&w, &io.x, &io.y, a, b);
  nio_end(&io);
  return KEEL_OK;
}

/* ========================================= MeanVarianceNormalization */

/* (X - mean) / (std + 1e-9) over `axes` (default [0, 2, 3]), as the ONNX
 * function body defines it. */
static keel_status op_mvn(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  static const int64_t def_axes[3] = {0, 2, 3};
  int n = 3;
  const int64_t *axes = def_axes;
  if (keel_k_attr(k, "axes")) axes = keel_k_attr_ints(k, "axes", &n); /* [] reduces nothing */
  uint8_t mask[KEEL_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    int a;
    KEEL_TRY(keel_k_axis(axes[i], x->rank, "axes entry", &a));
    mask[a] = 1;
  }
  gwalk w;
  gwalk_make(x->rank, x->shape, mask, &w);
  double *mean;
  KEEL_TRY(dscratch(k, 2 * w.n_groups, &mean));
  double *var = mean + w.n_groups;
  nio io;
  KEEL_TRY(nio_begin(k, x, "MeanVarianceNormalization", &io));
  gmoments(&w, &io.x, mean, var);
  for (int64_t i = 0; i < w.n_groups; i++) {
    double a = 1.0 / (sqrt(var[i]) + 1e-9);
    var[i] = a;
    mean[i] = -mean[i] * a;
  }
  gaffine(&w, &io.x, &io.y, var, mean);
  nio_end(&io);
  return KEEL_OK;
}

/* ================================================ LayerNormalization */

/* Expands input i (`what`: Scale or B), which must broadcast to the
 * normalized shape (rank nr), into D doubles; absent input (or i < 0):
 * `def`. */
static keel_status ln_param(keel_kctx *k, int i, const char *what, int nr, const int64_t *nshape,
                            int64_t D, double def, double *dst) {
  const keel_tensor *t = NULL;
  if (i >= 0) KEEL_TRY(keel_k_in_opt(k, i, &t));
  if (!t) {
    for (int64_t j = 0; j < D; j++) dst[j] = def;
    return KEEL_OK;
  }
  int tr = t->rank, lead = 0;
  while (tr - lead > nr && t->shape[lead] == 1) lead++; /* leading 1s do not count */
  bool ok = keel_dtype_is_float(t->dtype) && tr - lead <= nr;
  for (int d = 0; ok && d < tr - lead; d++) {
    int64_t td = t->shape[lead + d], nd = nshape[nr - (tr - lead) + d];
    ok = td == nd || td == 1;
  }
  if (!ok) {
    char s1[128], s2[128];
    return keel_err(KEEL_ERR_SHAPE, "%s %s (%s) does not broadcast to the normalized shape %s",
                    what, keel_shape_str(t->rank, t->shape, s1, sizeof s1),
                    keel_dtype_name((keel_dtype)t->dtype), keel_shape_str(nr, nshape, s2, sizeof s2));
  }
  int64_t st[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0}, off = 0;
  keel_broadcast_strides(tr - lead, t->shape + lead, nr, nshape, st);
  for (int64_t j = 0; j < D; j++) {
    dst[j] = keel_elem_get_f64(t->dtype, t->data, (size_t)off);
    odo_step(nr, nshape, st, idx, &off);
  }
  return KEEL_OK;
}

#define DEF_LN(T)                                                                        \
  static void ln_apply_##T(const T *x, T *y, int64_t rows, int64_t D, const double *mean, \
                           const double *inv, const double *s, const double *b) {        \
    for (int64_t r = 0; r < rows; r++)                                                   \
      for (int64_t j = 0; j < D; j++) {                                                  \
        int64_t i = r * D + j;                                                           \
        y[i] = (T)((x[i] - mean[r]) * inv[r] * s[j] + b[j]);                             \
      }                                                                                  \
  }
DEF_LN(float)
DEF_LN(double)

/* Mean and InvStdDev (outputs 1, 2): X's leading dims, then 1s; stash_type. */
static keel_status ln_stats_out(keel_kctx *k, const keel_tensor *x, int axis,
                                const double *mean, const double *inv) {
  int64_t st = keel_k_attr_i(k, "stash_type", KEEL_FLOAT);
  if (!keel_dtype_is_float((int)st))
    return keel_err(KEEL_ERR_INVALID_MODEL, "stash_type %lld is not a float type", (long long)st);
  int64_t shape[KEEL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) shape[d] = d < axis ? x->shape[d] : 1;
  if (keel_k_has_out(k, 1)) KEEL_TRY(out_doubles(k, 1, (int)st, x->rank, shape, mean));
  if (keel_k_has_out(k, 2)) KEEL_TRY(out_doubles(k, 2, (int)st, x->rank, shape, inv));
  return KEEL_OK;
}

/* The common case on its own path: float32 over the last axis with a 1-D
 * Scale and B (or no B), no Mean / InvStdDev outputs. Rows go to the pool;
 * each row is keel_vm_layernorm_row (moments in double, then the affine
 * map, vectorized). */
typedef struct ln_fast {
  const float *x, *s, *b;
  float *y;
  int64_t D;
  double eps;
} ln_fast;

static keel_status ln_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
  (void)worker;
  const ln_fast *f = ctx;
  int64_t D = f->D;
  for (int64_t r = r0; r < r1; r++)
    keel_vm_layernorm_row(f->x + r * D, f->y + r * D, D, f->s, f->b, f->eps);
  return KEEL_OK;
}

static bool ln_vec(const keel_tensor *t, int64_t D) {
  return t && t->dtype == KEEL_FLOAT && t->rank == 1 && t->shape[0] == D;
}

/* true when the fast path applies and ran (*st is its status). */
static bool ln_try_fast(keel_kctx *k, const keel_tensor *x, int axis, keel_status *st) {
  if (x->dtype != KEEL_FLOAT || x->rank < 1 || axis != x->rank - 1 || keel_k_has_out(k, 1) ||
      keel_k_has_out(k, 2) || keel_k_attr_i(k, "stash_type", KEEL_FLOAT) != KEEL_FLOAT)
    return false;
  int64_t D = x->shape[axis];
  const keel_tensor *s = NULL, *b = NULL;
  if (keel_k_in_opt(k, 1, &s) || keel_k_in_opt(k, 2, &b) || !ln_vec(s, D) || (b && !ln_vec(b, D)) ||
      D == 0)
    return false;
  keel_tensor *y;
  if ((*st = keel_k_reuse(k, 0, 0, KEEL_FLOAT, x->rank, x->shape, &y))) return true;
  ln_fast f = {x->data, s->data, b ? b->data : NULL, y->data, D, keel_k_attr_f(k, "epsilon", 1e-5f)};
  int64_t rows = keel_tensor_numel(x) / D;
  /* a row: D floats read and written, about 8 operations each */
  *st = keel_pool_for(k->pool, rows, keel_pool_grain(8.0 * (double)D, 8.0 * (double)D), ln_rows, &f);
  return true;
}

keel_status keel_layernorm_run(keel_kctx *k, const keel_tensor *x, const keel_ln_args *a,
                               double **mean_out, double **inv_out) {
  int axis = a->axis;
  uint8_t mask[KEEL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) mask[d] = d >= axis;
  gwalk w;
  gwalk_make(x->rank, x->shape, mask, &w);
  int64_t rows = w.n_groups, D = keel_shape_numel(x->rank - axis, x->shape + axis);
  double *mean, *sb;
  KEEL_TRY(dscratch(k, 2 * rows, &mean));
  KEEL_TRY(dscratch(k, 2 * D, &sb));
  double *inv = mean + rows;
  KEEL_TRY(ln_param(k, a->i_scale, a->scale_name, x->rank - axis, x->shape + axis, D, 1.0, sb));
  KEEL_TRY(ln_param(k, a->i_bias, a->bias_name, x->rank - axis, x->shape + axis, D, 0.0, sb + D));
  nio io;
  KEEL_TRY(nio_begin_as(k, x, a->out_dtype ? a->out_dtype : x->dtype, a->op, &io));
  if (a->rms) { /* mean 0: the "deviations" are x itself, their mean is E[x^2] */
    memset(mean, 0, (size_t)rows * sizeof(double));
    memset(inv, 0, (size_t)rows * sizeof(double));
    if (w.numel) {
      if (io.x.dtype == KEEL_FLOAT) gsum_float(&w, io.x.data, mean, inv);
      else gsum_double(&w, io.x.data, mean, inv);
    }
    for (int64_t r = 0; r < rows; r++) inv[r] /= (double)D;
  } else {
    gmoments(&w, &io.x, mean, inv);
  }
  for (int64_t r = 0; r < rows; r++) inv[r] = 1.0 / sqrt(inv[r] + a->eps);
  if (io.x.dtype == KEEL_FLOAT) ln_apply_float(io.x.data, io.y.data, rows, D, mean, inv, sb, sb + D);
  else ln_apply_double(io.x.data, io.y.data, rows, D, mean, inv, sb, sb + D);
  nio_end(&io);
  if (mean_out) *mean_out = mean;
  if (inv_out) *inv_out = inv;
  return KEEL_OK;
}

/* The axis attribute for X of `rank` (axis == rank normalizes nothing). */
static keel_status ln_axis(const keel_kctx *k, int rank, int *axis) {
  int64_t a = keel_k_attr_i(k, "axis", -1);
  if (a < -rank || a > rank)
    return keel_err(KEEL_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)a, rank);
  *axis = (int)(a < 0 ? a + rank : a);
  return KEEL_OK;
}

/* ONNX's LayerNormalization (17) and ONNX Runtime's contrib one it grew
 * from (ai.onnx domain, versions 1-16): the same inputs and outputs. */
static keel_status op_layernorm(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  keel_ln_args a = {"LayerNormalization", 0, false, 1, 2, "Scale", "B",
                    keel_k_attr_f(k, "epsilon", 1e-5f)};
  KEEL_TRY(ln_axis(k, x->rank, &a.axis));
  keel_status fst = KEEL_OK;
  if (a.axis < x->rank && ln_try_fast(k, x, a.axis, &fst)) return fst;
  double *mean, *inv;
  KEEL_TRY(keel_layernorm_run(k, x, &a, &mean, &inv));
  return ln_stats_out(k, x, a.axis, mean, inv);
}

/* ONNX Runtime's SimplifiedLayerNormalization (ai.onnx domain, version
 * 1): RMS normalization, y = x / sqrt(mean(x^2) + epsilon) * scale, and
 * optionally inv_std_var as output 1. */
static keel_status op_simplified_layernorm(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  keel_ln_args a = {"SimplifiedLayerNormalization", 0, true, 1, -1, "scale", "",
                    keel_k_attr_f(k, "epsilon", 1e-5f)};
  KEEL_TRY(ln_axis(k, x->rank, &a.axis));
  double *inv;
  KEEL_TRY(keel_layernorm_run(k, x, &a, NULL, &inv));
  int64_t st = keel_k_attr_i(k, "stash_type", KEEL_FLOAT);
  if (!keel_dtype_is_float((int)st))
    return keel_err(KEEL_ERR_INVALID_MODEL, "stash_type %lld is not a float type", (long long)st);
  int64_t shape[KEEL_MAX_RANK];
  for (int d = 0; d < x->rank; d++) shape[d] = d < a.axis ? x->shape[d] : 1;
  if (keel_k_has_out(k, 1)) KEEL_TRY(out_doubles(k, 1, (int)st, x->rank, shape, inv));
  return KEEL_OK;
}

/* =============================================================== LRN */

/* One (n) slice of C channels by D positions: square sums over the channel
 * window [c - floor((size-1)/2), c + ceil((size-1)/2)] in double. */
#define DEF_LRN(T)                                                                       \
  static void lrn_##T(const T *x, T *y, int64_t C, int64_t D, int64_t size, double alpha, \
                      double beta, double bias, double *sq) {                            \
    for (int64_t c = 0; c < C; c++) {                                                    \
      int64_t lo = KEEL_MAX(0, c - (size - 1) / 2), hi = KEEL_MIN(C - 1, c + size / 2);  \
      memset(sq, 0, (size_t)D * sizeof(double));                                         \
      for (int64_t i = lo; i <= hi; i++)                                                 \
        for (int64_t d = 0; d < D; d++) sq[d] += (double)x[i * D + d] * x[i * D + d];    \
      for (int64_t d = 0; d < D; d++)                                                    \
        y[c * D + d] = (T)(x[c * D + d] / pow(bias + alpha / (double)size * sq[d], beta)); \
    }                                                                                    \
  }
DEF_LRN(float)
DEF_LRN(double)

static keel_status op_lrn(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(need_rank(x, 2, "LRN"));
  int64_t size = keel_k_attr_i(k, "size", 0);
  if (size <= 0) return keel_err(KEEL_ERR_INVALID_MODEL, "LRN needs size > 0, got %lld", (long long)size);
  double alpha = keel_k_attr_f(k, "alpha", 1e-4f), beta = keel_k_attr_f(k, "beta", 0.75f);
  double bias = keel_k_attr_f(k, "bias", 1.0f);
  int64_t N = x->shape[0], C = x->shape[1], D = keel_shape_numel(x->rank - 2, x->shape + 2);
  nio io;
  KEEL_TRY(nio_begin(k, x, "LRN", &io));
  if (keel_is_half(x->dtype)) { /* the window reads neighbours: no in-place */
    void *p;
    KEEL_TRY(keel_k_scratch(k, keel_tensor_nbytes(&io.x), &p));
    io.y.data = p;
  }
  double *sq;
  KEEL_TRY(dscratch(k, D, &sq));
  for (int64_t n = 0; n < N && C * D > 0; n++) {
    size_t off = (size_t)(n * C * D);
    if (io.x.dtype == KEEL_FLOAT)
      lrn_float((const float *)io.x.data + off, (float *)io.y.data + off, C, D, size, alpha, beta,
                bias, sq);
    else
      lrn_double((const double *)io.x.data + off, (double *)io.y.data + off, C, D, size, alpha,
                 beta, bias, sq);
  }
  nio_end(&io);
  return KEEL_OK;
}

/* =================================================== LpNormalization */

/* One slice [n, inner]: x / ||x||_p along n (p is 1 or 2; 0 / 0 = NaN as
 * numpy gives). */
#define DEF_LP(T)                                                                         \
  static void lp_##T(const T *x, T *y, int64_t n, int64_t inner, int p, double *nrm) {    \
    memset(nrm, 0, (size_t)inner * sizeof(double));                                       \
    for (int64_t r = 0; r < n; r++)                                                       \
      for (int64_t j = 0; j < inner; j++) {                                               \
        double v = x[r * inner + j];                                                      \
        nrm[j] += p == 1 ? fabs(v) : v * v;                                               \
      }                                                                                   \
    if (p == 2)                                                                           \
      for (int64_t j = 0; j < inner; j++) nrm[j] = sqrt(nrm[j]);                          \
    for (int64_t r = 0; r < n; r++)                                                       \
      for (int64_t j = 0; j < inner; j++) /* a zero norm gives 0, not 0/0 */              \
        y[r * inner + j] = nrm[j] == 0 ? (T)0 : (T)(x[r * inner + j] / nrm[j]);            \
  }
DEF_LP(float)
DEF_LP(double)

static keel_status op_lpnorm(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t p = keel_k_attr_i(k, "p", 2);
  if (p != 1 && p != 2)
    return keel_err(KEEL_ERR_INVALID_MODEL, "LpNormalization supports p = 1 or 2, got %lld", (long long)p);
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", -1), x->rank, "axis", &axis));
  int64_t outer = keel_shape_numel(axis, x->shape), n = x->shape[axis];
  int64_t inner = keel_shape_numel(x->rank - axis - 1, x->shape + axis + 1);
  nio io;
  KEEL_TRY(nio_begin(k, x, "LpNormalization", &io));
  double *nrm;
  KEEL_TRY(dscratch(k, inner, &nrm));
  for (int64_t o = 0; o < outer && n * inner > 0; o++) {
    size_t off = (size_t)(o * n * inner);
    if (io.x.dtype == KEEL_FLOAT)
      lp_float((const float *)io.x.data + off, (float *)io.y.data + off, n, inner, (int)p, nrm);
    else
      lp_double((const double *)io.x.data + off, (double *)io.y.data + off, n, inner, (int)p, nrm);
  }
  nio_end(&io);
  return KEEL_OK;
}

/* ============================================================ losses */

/* The shared shape of both losses: input (N, C, d1..dk) of log-probs or
 * scores, target (N, d1..dk) of class indices, optional weight (C). The
 * input is read in place (no double copy of a possibly large tensor). */
typedef struct loss {
  int64_t N, C, D;          /* D = d1 * ... * dk                        */
  const keel_tensor *in, *target;
  double *w;                /* per class, NULL when no weight input      */
  double *lse;              /* SCE: (N, D) log-sum-exp over C; NLL: NULL */
} loss;

static double elem(const keel_tensor *t, int64_t i) {
  return keel_elem_get_f64(t->dtype, t->data, (size_t)i);
}

static keel_status loss_begin(keel_kctx *k, const char *op, loss *L) {
  KEEL_TRY(keel_k_in(k, 0, &L->in));
  KEEL_TRY(keel_k_in(k, 1, &L->target));
  const keel_tensor *x = L->in, *t = L->target;
  if (!keel_dtype_is_float(x->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", op,
                    keel_dtype_name((keel_dtype)x->dtype));
  bool ok = x->rank >= 2 && t->rank == x->rank - 1 && t->shape[0] == x->shape[0];
  for (int d = 1; ok && d < t->rank; d++) ok = t->shape[d] == x->shape[d + 1];
  if (!ok || (t->dtype != KEEL_INT32 && t->dtype != KEEL_INT64)) {
    char s1[128], s2[128];
    return keel_err(KEEL_ERR_SHAPE, "input %s and target %s (%s) do not fit: expected (N, C, d...) "
                    "and int32/int64 (N, d...)", keel_shape_str(x->rank, x->shape, s1, sizeof s1),
                    keel_shape_str(t->rank, t->shape, s2, sizeof s2),
                    keel_dtype_name((keel_dtype)t->dtype));
  }
  L->N = x->shape[0], L->C = x->shape[1];
  L->D = keel_shape_numel(x->rank - 2, x->shape + 2);
  L->w = L->lse = NULL;
  if (!keel_k_has_in(k, 2)) return KEEL_OK;
  KEEL_TRY(dscratch(k, L->C, &L->w));
  return param_vec(k, 2, "weight", L->C, L->w);
}

/* Gathers -logprob[n, target, d] * weight into output 0 and reduces it:
 * "none" keeps target's shape, "sum" and "mean" give a scalar; the mean
 * divides by the total weight of the samples not ignored. */
static keel_status loss_finish(keel_kctx *k, const loss *L) {
  const char *red = keel_k_attr_s(k, "reduction", "mean");
  bool none = !strcmp(red, "none"), mean = !strcmp(red, "mean");
  if (!none && !mean && strcmp(red, "sum"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "reduction must be none, sum or mean, got '%s'", red);
  const keel_attr *ia = keel_k_attr(k, "ignore_index");
  int64_t ii = ia ? keel_k_attr_i(k, "ignore_index", 0) : 0, nt = L->N * L->D;
  double *l, sum = 0, wsum = 0;
  KEEL_TRY(dscratch(k, nt, &l));
  for (int64_t i = 0; i < nt; i++) { /* sample i is (n, d) = (i / D, i % D) */
    int64_t c = keel_elem_get_i64(L->target->dtype, L->target->data, (size_t)i);
    if (ia && c == ii) {
      l[i] = 0;
      continue;
    }
    if (c < 0 || c >= L->C)
      return keel_err(KEEL_ERR_RUNTIME, "target %lld at index %lld is outside [0, %lld)",
                      (long long)c, (long long)i, (long long)L->C);
    double w = L->w ? L->w[c] : 1.0;
    double lp = elem(L->in, ((i / L->D) * L->C + c) * L->D + i % L->D) - (L->lse ? L->lse[i] : 0);
    l[i] = -lp * w;
    sum += l[i], wsum += w;
  }
  const keel_tensor *t = L->target;
  if (none) return out_doubles(k, 0, L->in->dtype, t->rank, t->shape, l);
  double v = mean ? sum / wsum : sum;
  int64_t scalar_shape[1] = {1};
  return out_doubles(k, 0, L->in->dtype, 0, scalar_shape, &v);
}

static keel_status op_nllloss(keel_kctx *k) {
  loss L;
  KEEL_TRY(loss_begin(k, "NegativeLogLikelihoodLoss", &L));
  return loss_finish(k, &L);
}

/* lse[n, d] = log sum_c exp(x[n, c, d]), the max subtracted first; the
 * classes of one n are rows of D, so the walk runs along rows (row is D
 * doubles of scratch). */
static void sce_lse(const loss *L, double *lse, double *row) {
  int64_t C = L->C, D = L->D;
  for (int64_t n = 0; n < L->N; n++) {
    double *m = lse + n * D;
    int64_t base = n * C * D;
    for (int64_t d = 0; d < D; d++) m[d] = -INFINITY, row[d] = 0;
    for (int64_t c = 0; c < C; c++)
      for (int64_t d = 0; d < D; d++) {
        double v = elem(L->in, base + c * D + d);
        m[d] = v > m[d] ? v : m[d];
      }
    for (int64_t c = 0; c < C; c++)
      for (int64_t d = 0; d < D; d++) row[d] += exp(elem(L->in, base + c * D + d) - m[d]);
    for (int64_t d = 0; d < D; d++) m[d] += log(row[d]);
  }
}

/* Output 1 of SCE: the log-probabilities x - lse, in x's type and shape. */
static keel_status sce_log_prob(keel_kctx *k, const loss *L) {
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 1, L->in->dtype, L->in->rank, L->in->shape, &o));
  int64_t n = keel_tensor_numel(o), CD = L->C * L->D;
  for (int64_t i = 0; i < n; i++) /* element i is (n, c, d): its sample is (i / CD, i % D) */
    keel_elem_set_f64(o->dtype, o->data, (size_t)i,
                      elem(L->in, i) - L->lse[(i / CD) * L->D + i % L->D]);
  return KEEL_OK;
}

static keel_status op_sce_loss(keel_kctx *k) {
  loss L;
  KEEL_TRY(loss_begin(k, "SoftmaxCrossEntropyLoss", &L));
  double *row;
  KEEL_TRY(dscratch(k, L.N * L.D, &L.lse));
  KEEL_TRY(dscratch(k, L.D, &row));
  sce_lse(&L, L.lse, row);
  KEEL_TRY(loss_finish(k, &L));
  return keel_k_has_out(k, 1) ? sce_log_prob(k, &L) : KEEL_OK;
}

/* ============================================================= table */

const keel_opdef keel_ops_norm[] = {
    {"", "BatchNormalization", 1, KEEL_OPSET_MAX, op_batchnorm, 0, KEEL_TS_FLOAT},
    {"", "InstanceNormalization", 1, KEEL_OPSET_MAX, op_instancenorm, 0, KEEL_TS_FLOAT},
    {"", "GroupNormalization", 18, KEEL_OPSET_MAX, op_groupnorm, 0, KEEL_TS_FLOAT},
    {"", "LayerNormalization", 1, KEEL_OPSET_MAX, op_layernorm, 0, KEEL_TS_FLOAT, keel_gpu_layernorm_impls},
    {"", "SimplifiedLayerNormalization", 1, KEEL_OPSET_MAX, op_simplified_layernorm, 0,
     KEEL_TS_FLOAT},
    {"", "MeanVarianceNormalization", 9, KEEL_OPSET_MAX, op_mvn, 0, KEEL_TS_FLOAT},
    {"", "LRN", 1, KEEL_OPSET_MAX, op_lrn, 0, KEEL_TS_FLOAT},
    {"", "LpNormalization", 1, KEEL_OPSET_MAX, op_lpnorm, 0, KEEL_TS_FLOAT},
    {"", "NegativeLogLikelihoodLoss", 12, KEEL_OPSET_MAX, op_nllloss, 0, KEEL_TS_FLOAT},
    {"", "SoftmaxCrossEntropyLoss", 12, KEEL_OPSET_MAX, op_sce_loss, 0, KEEL_TS_FLOAT},
    {0},
};
