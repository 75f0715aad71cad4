/* test_fastpaths.c: fast paths inside kernels against what the general
 * path computes (and the fast float erf against erf()). Pow of float32 by a scalar 2, 0.5, 3, -1 or 1 (the
 * vectorized loops of ops/elementwise.c) must give pow()'s result
 * rounded to float, bit for bit (the cube within one ulp), on ordinary
 * values and on -0, +-inf, NaN, negatives, denormals and huge values. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "mb.h"

static const float g_vals[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -3.75f, 1e-40f, -1e-40f,
                               1e30f, -1e30f, 3.4e38f, INFINITY, -INFINITY, NAN,
                               0.1f, 7.0f, 123.456f, -0.333f};
#define NV (sizeof g_vals / sizeof *g_vals)

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static int64_t ulps(float a, float b) {
  if (isnan(a) && isnan(b)) return 0;
  if (isnan(a) || isnan(b)) return INT64_MAX;
  int32_t x = (int32_t)bits(a), y = (int32_t)bits(b);
  if (x < 0) x = INT32_MIN - x;
  if (y < 0) y = INT32_MIN - y;
  return llabs((long long)x - y);
}

static void one(float e) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){(int64_t)NV});
  mb_init(g, "e", KEEL_FLOAT, 0, NULL, &e);
  mb_add(g, "Pow", "x,e", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session(g, 15);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){(int64_t)NV}, g_vals);
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
  const float *y = out[0] ? keel_value_data(out[0]) : NULL;
  for (size_t i = 0; y && i < NV; i++) {
    float want = (float)pow((double)g_vals[i], (double)e);
    int64_t d = ulps(y[i], want);
    bool ok = e == 3.0f ? d <= 1 : (d == 0 && (bits(y[i]) == bits(want) || isnan(want)));
    if (!ok) fprintf(stderr, "pow(%g, %g) = %g, expected %g\n", g_vals[i], e, y[i], want);
    CHECK(ok);
  }
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* Erf on float32 against erf() in double over a fine sweep and the
 * special values: within 3e-7 + 2 ulp (the fast rational form). */
static void erf_sweep(void) {
  enum { N = 24001 };
  static float x[N + 4];
  for (int i = 0; i < N; i++) x[i] = -6.0f + 12.0f * (float)i / (N - 1);
  x[N] = INFINITY, x[N + 1] = -INFINITY, x[N + 2] = NAN, x[N + 3] = -0.0f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){N + 4});
  mb_add(g, "Erf", "x", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N + 4}, x);
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
  const float *y = out[0] ? keel_value_data(out[0]) : NULL;
  double worst = 0;
  for (int i = 0; y && i < N + 3; i++) {
    double want = erf((double)x[i]);
    double err = fabs(y[i] - want) - 2 * 6e-8 * fabs(want);
    worst = fmax(worst, isnan(y[i]) != isnan(want) ? 1 : err);
  }
  if (worst > 3e-7) fprintf(stderr, "fast erf: worst error %g\n", worst);
  CHECK(worst <= 3e-7);
  CHECK(y && isnan(y[N + 2]) && y[N] == 1.0f && y[N + 1] == -1.0f);
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

int main(void) {
  erf_sweep();
  const float es[] = {2.0f, 0.5f, 3.0f, -1.0f, 1.0f, 1.5f};
  for (size_t i = 0; i < sizeof es / sizeof *es; i++) one(es[i]);
  return check_report();
}
