/* random.c: ops that draw random numbers: Bernoulli, RandomUniform,
 * RandomUniformLike, RandomNormal, RandomNormalLike, Multinomial.
 *
 * Each call seeds its own generator (rng.h): from the node's `seed`
 * attribute, so a seeded node gives the same values every run, or from the
 * clock. The values cannot match another runtime's generator, so the test
 * runner checks these ops by property (shape, support, mean), not value. */
#include <math.h>

#include "ops/common/bcast.h"
#include "ops/random/rng.h"

/* Output dtype from the `dtype` attribute, else `def`; float types only. */
static keel_status float_dtype(const keel_kctx *k, int def, int *dt) {
  *dt = (int)keel_k_attr_i(k, "dtype", def);
  if (!keel_dtype_is_float(*dt))
    return keel_err(KEEL_ERR_INVALID_MODEL, "dtype %s is not a float type",
                    keel_dtype_name((keel_dtype)*dt));
  return KEEL_OK;
}

/* Fills t with draw(r, a, b) element by element. */
static void fill(keel_tensor *t, keel_rng *r, double (*draw)(keel_rng *, double, double),
                 double a, double b) {
  int64_t n = keel_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) keel_elem_set_f64(t->dtype, t->data, (size_t)i, draw(r, a, b));
}

static double draw_uniform(keel_rng *r, double lo, double hi) {
  return lo + (hi - lo) * keel_rng_uniform(r);
}

static double draw_normal(keel_rng *r, double mean, double scale) {
  return mean + scale * keel_rng_normal(r);
}

/* Shape from the `shape` attribute (RandomUniform/Normal) or from input 0
 * (the *Like ops). */
static keel_status random_op(keel_kctx *k, bool like, bool normal) {
  int rank;
  int64_t shape[KEEL_MAX_RANK];
  int dt;
  if (like) {
    const keel_tensor *x;
    KEEL_TRY(keel_k_in(k, 0, &x));
    rank = x->rank;
    memcpy(shape, x->shape, sizeof shape);
    KEEL_TRY(float_dtype(k, keel_dtype_is_float(x->dtype) ? x->dtype : KEEL_FLOAT, &dt));
  } else {
    const int64_t *s = keel_k_attr_ints(k, "shape", &rank);
    if (!s) return keel_err(KEEL_ERR_INVALID_MODEL, "the shape attribute is required");
    if (rank > KEEL_MAX_RANK) return keel_err(KEEL_ERR_UNSUPPORTED, "rank %d", rank);
    memcpy(shape, s, sizeof(int64_t) * (size_t)rank);
    KEEL_TRY(float_dtype(k, KEEL_FLOAT, &dt));
  }
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, dt, rank, shape, &o));
  keel_rng r;
  keel_rng_seed_node(&r, k);
  if (normal)
    fill(o, &r, draw_normal, keel_k_attr_f(k, "mean", 0), keel_k_attr_f(k, "scale", 1));
  else
    fill(o, &r, draw_uniform, keel_k_attr_f(k, "low", 0), keel_k_attr_f(k, "high", 1));
  return KEEL_OK;
}

static keel_status op_random_uniform(keel_kctx *k) { return random_op(k, false, false); }
static keel_status op_random_uniform_like(keel_kctx *k) { return random_op(k, true, false); }
static keel_status op_random_normal(keel_kctx *k) { return random_op(k, false, true); }
static keel_status op_random_normal_like(keel_kctx *k) { return random_op(k, true, true); }

/* y[i] = 1 with probability x[i]. */
static keel_status op_bernoulli(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (!keel_dtype_is_float(x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "Bernoulli input must be a float type");
  int dt = (int)keel_k_attr_i(k, "dtype", x->dtype);
  if (!keel_dtype_valid(dt) || dt == KEEL_STRING)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Bernoulli dtype %d", dt);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, dt, x->rank, x->shape, &o));
  keel_rng r;
  keel_rng_seed_node(&r, k);
  int64_t n = keel_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    double p = keel_elem_get_f64(x->dtype, x->data, (size_t)i);
    if (!(p >= 0 && p <= 1))
      return keel_err(KEEL_ERR_RUNTIME, "Bernoulli probability %g (element %lld) is outside [0, 1]",
                      p, (long long)i);
    keel_elem_set_f64(dt, o->data, (size_t)i, keel_rng_uniform(&r) < p ? 1.0 : 0.0);
  }
  return KEEL_OK;
}

/* Samples class indices from unnormalized log-probabilities [batch, C]. */
static keel_status op_multinomial(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->rank != 2 || !keel_dtype_is_float(x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "Multinomial input must be a 2-D float tensor");
  int64_t batch = x->shape[0], C = x->shape[1], S = keel_k_attr_i(k, "sample_size", 1);
  int dt = (int)keel_k_attr_i(k, "dtype", KEEL_INT32);
  if (S < 1 || (dt != KEEL_INT32 && dt != KEEL_INT64))
    return keel_err(KEEL_ERR_INVALID_MODEL, "Multinomial sample_size %lld / dtype %d", (long long)S, dt);
  if (C < 1) return keel_err(KEEL_ERR_SHAPE, "Multinomial needs at least one class");
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, dt, 2, (int64_t[]){batch, S}, &o));
  double *cdf;
  KEEL_TRY(keel_k_scratch(k, sizeof(double) * (size_t)C, (void **)&cdf));
  keel_rng r;
  keel_rng_seed_node(&r, k);
  for (int64_t b = 0; b < batch; b++) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < C; c++) mx = fmax(mx, keel_elem_get_f64(x->dtype, x->data, (size_t)(b * C + c)));
    for (int64_t c = 0; c < C; c++)
      cdf[c] = sum += exp(keel_elem_get_f64(x->dtype, x->data, (size_t)(b * C + c)) - mx);
    for (int64_t s = 0; s < S; s++) {
      double u = keel_rng_uniform(&r) * sum;
      int64_t c = 0;
      while (c < C - 1 && cdf[c] <= u) c++;
      keel_elem_set_i64(dt, o->data, (size_t)(b * S + s), c);
    }
  }
  return KEEL_OK;
}

/* types: the input's for Bernoulli and Multinomial; the *Like ops read only
 * X's shape, of any type; RandomUniform and RandomNormal have no input and
 * state the types they produce. */
const keel_opdef keel_ops_random[] = {
    {"", "RandomUniform", 1, KEEL_OPSET_MAX, op_random_uniform, KEEL_OPF_RANDOM, KEEL_TS_FLOAT},
    {"", "RandomUniformLike", 1, KEEL_OPSET_MAX, op_random_uniform_like, KEEL_OPF_RANDOM,
     KEEL_TS_ALL},
    {"", "RandomNormal", 1, KEEL_OPSET_MAX, op_random_normal, KEEL_OPF_RANDOM, KEEL_TS_FLOAT},
    {"", "RandomNormalLike", 1, KEEL_OPSET_MAX, op_random_normal_like, KEEL_OPF_RANDOM,
     KEEL_TS_ALL},
    {"", "Bernoulli", 15, KEEL_OPSET_MAX, op_bernoulli, KEEL_OPF_RANDOM, KEEL_TS_FLOAT},
    {"", "Multinomial", 7, KEEL_OPSET_MAX, op_multinomial, KEEL_OPF_RANDOM, KEEL_TS_FLOAT},
    {0},
};
