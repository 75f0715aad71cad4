/* test_ops_random.c: the random ops by property: range, mean and spread
 * over many draws, frequencies against the probabilities, seeds that
 * repeat and seeds that differ, and bad probabilities. */
#include <string.h>

#include "check.h"
#include "mb.h"

#define N 200000

/* Runs a no-input model with one output; returns it (caller releases). */
static keel_value_t *run0(mb_graph *g) {
  keel_session_t *s = mb_session(g, 15);
  if (!s) return NULL;
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, NULL, NULL, 0, out));
  keel_session_destroy(s); /* outputs outlive the session */
  return out[0];
}

static void moments(const keel_value_t *v, double *mean, double *var, double *lo, double *hi) {
  int64_t n = keel_value_numel(v);
  double m = 0, q = 0;
  *lo = INFINITY, *hi = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double x = keel_value_at(v, i);
    m += x, q += x * x;
    *lo = fmin(*lo, x), *hi = fmax(*hi, x);
  }
  *mean = m / (double)n;
  *var = q / (double)n - *mean * *mean;
}

static keel_value_t *uniform(float low, float high, int seeded, float seed) {
  mb_graph *g = mb_graph_new("main");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "RandomUniform", "", "y");
  mb_attr_ints(n, "shape", 2, (int64_t[]){N / 100, 100});
  mb_attr_f(n, "low", low);
  mb_attr_f(n, "high", high);
  if (seeded) mb_attr_f(n, "seed", seed);
  return run0(g);
}

static void uniform_properties(void) {
  keel_value_t *v = uniform(-2, 3, 1, 7);
  double m, var, lo, hi;
  moments(v, &m, &var, &lo, &hi);
  CHECK(lo >= -2 && hi < 3);
  CHECK_NEAR(m, 0.5, 0.02);
  CHECK_NEAR(var, 25.0 / 12.0, 0.03);
  /* same seed, same values; another seed, others; no seed, others */
  keel_value_t *same = uniform(-2, 3, 1, 7), *other = uniform(-2, 3, 1, 8), *none = uniform(-2, 3, 0, 0);
  CHECK(memcmp(keel_value_data(v), keel_value_data(same), N * sizeof(float)) == 0);
  CHECK(memcmp(keel_value_data(v), keel_value_data(other), N * sizeof(float)) != 0);
  CHECK(memcmp(keel_value_data(v), keel_value_data(none), N * sizeof(float)) != 0);
  keel_value_release(v), keel_value_release(same), keel_value_release(other), keel_value_release(none);
}

static void normal_properties(void) {
  mb_graph *g = mb_graph_new("main");
  mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  mb_node *n = mb_add(g, "RandomNormal", "", "y");
  mb_attr_ints(n, "shape", 1, (int64_t[]){N});
  mb_attr_f(n, "mean", 10);
  mb_attr_f(n, "scale", 2);
  mb_attr_i(n, "dtype", KEEL_DOUBLE);
  mb_attr_f(n, "seed", 3);
  keel_value_t *v = run0(g);
  CHECK(v && keel_value_dtype(v) == KEEL_DOUBLE);
  double m, var, lo, hi;
  moments(v, &m, &var, &lo, &hi);
  CHECK_NEAR(m, 10, 0.03);
  CHECK_NEAR(var, 4, 0.08);
  keel_value_release(v);
}

/* Bernoulli frequencies follow the probabilities; the *Like op takes the
 * input's shape. */
static void bernoulli_frequencies(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "p", KEEL_FLOAT, 1, (int64_t[]){N});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_attr_f(mb_add(g, "Bernoulli", "p", "y"), "seed", 1);
  keel_session_t *s = mb_session(g, 15);
  CHECK(s != NULL);
  if (!s) return;
  static float p[N];
  for (int i = 0; i < N; i++) p[i] = i % 2 ? 0.9f : 0.2f;
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N}, p)}, *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"p"}, in, 1, out));
  double odd = 0, even = 0;
  for (int i = 0; out[0] && i < N; i++) *(i % 2 ? &odd : &even) += keel_value_at(out[0], i);
  CHECK_NEAR(odd / (N / 2), 0.9, 0.01);
  CHECK_NEAR(even / (N / 2), 0.2, 0.01);
  keel_value_release(out[0]);
  /* a probability outside [0, 1]: a runtime error, the session lives on */
  p[5] = 1.5f;
  keel_value_t *bad[1] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N}, p)};
  CHECK_STATUS(keel_run(s, (const char *[]){"p"}, bad, 1, out), KEEL_ERR_RUNTIME);
  CHECK(strstr(keel_last_error(), "element 5") != NULL);
  CHECK_OK(keel_run(s, (const char *[]){"p"}, in, 1, out));
  keel_value_release(out[0]);
  keel_value_release(bad[0]);
  keel_value_release(in[0]);
  keel_session_destroy(s);
}

/* Multinomial samples follow softmax of the logits. */
static void multinomial_frequencies(void) {
  mb_graph *g = mb_graph_new("main");
  mb_output(g, "y", KEEL_INT64, -1, NULL);
  float logits[3] = {0, 1, 2};
  mb_init(g, "x", KEEL_FLOAT, 2, (int64_t[]){1, 3}, logits);
  mb_node *n = mb_add(g, "Multinomial", "x", "y");
  mb_attr_i(n, "sample_size", N);
  mb_attr_i(n, "dtype", KEEL_INT64);
  mb_attr_f(n, "seed", 5);
  keel_value_t *v = run0(g);
  double count[3] = {0};
  for (int64_t i = 0; v && i < N; i++) count[(int)keel_value_at(v, i)]++;
  double z = 1 + exp(1) + exp(2);
  for (int c = 0; c < 3; c++) CHECK_NEAR(count[c] / N, exp(c) / z, 0.01);
  keel_value_release(v);
}

/* A seed past int64's range (1.66e22, NaN, inf) was cast to int64 (UB):
 * it is clamped now, and a seeded op still repeats its values. */
static void huge_seed(void) {
  const float seeds[] = {1.6635e22f, -1.6635e22f, NAN, INFINITY};
  for (int i = 0; i < 4; i++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "p", KEEL_FLOAT, 1, (int64_t[]){10});
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    mb_attr_f(mb_add(g, "Bernoulli", "p", "y"), "seed", seeds[i]);
    keel_session_t *s = mb_session(g, 15);
    CHECK(s != NULL);
    if (!s) continue;
    float p[10];
    for (int j = 0; j < 10; j++) p[j] = 0.5f;
    keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){10}, p)}, *a[1] = {0}, *b[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"p"}, in, 1, a));
    CHECK_OK(keel_run(s, (const char *[]){"p"}, in, 1, b));
    for (int j = 0; a[0] && b[0] && j < 10; j++) {
      double v = keel_value_at(a[0], j);
      CHECK((v == 0 || v == 1) && v == keel_value_at(b[0], j));
    }
    keel_value_release(a[0]), keel_value_release(b[0]), keel_value_release(in[0]);
    keel_session_destroy(s);
  }
}

int main(void) {
  uniform_properties();
  normal_properties();
  bernoulli_frequencies();
  multinomial_frequencies();
  huge_seed();
  return check_report();
}
