/* test_fastpaths.c: fast paths inside kernels against what the general
 * path computes (and the fast float erf against erf()). Pow of float32 by a scalar 2, 0.5, 3, -1 or 1 (the
 * vectorized loops of ops/math/elementwise.c) must give pow()'s result
 * rounded to float, bit for bit (the cube within one ulp), on ordinary
 * values and on -0, +-inf, NaN, negatives, denormals and huge values.
 * The vectorized rows of LayerNormalization and of the fused attention's
 * softmax against the same math in double, every length 0-300. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "ops/common/vmath.h"

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

/* The fused activations' fast Gelu (keel_vm_gelu_fast, AVX-512 only)
 * against 0.5 x (1 + erf(x / sqrt 2)) in double over a fine sweep, an odd
 * length (the masked tail) and +-inf, NaN, -0: within 3e-7 relative plus
 * 2e-7 |x| (erf's absolute error, which 1 + erf keeps for negative x), and
 * the specials as the exact form gives them (-inf: -inf * 0, NaN). */
static void gelu_sweep(void) {
  enum { N = 24003 };
  static float y[N + 4], x[N + 4];
  for (int i = 0; i < N; i++) x[i] = -9.0f + 18.0f * (float)i / (N - 1);
  x[N] = INFINITY, x[N + 1] = -INFINITY, x[N + 2] = NAN, x[N + 3] = -0.0f;
  memcpy(y, x, sizeof y);
  if (!keel_vm_gelu_fast(y, N + 4)) {
    CHECK(!keel_vm_gelu_fast_available());
    return;
  }
  double worst = 0;
  for (int i = 0; i < N; i++) {
    double want = 0.5 * (double)x[i] * (1.0 + erf((double)x[i] / sqrt(2.0)));
    worst = fmax(worst, fabs(y[i] - want) - 3e-7 * fabs(want) - 2e-7 * fabs((double)x[i]));
  }
  if (worst > 0) fprintf(stderr, "fast gelu: worst error %g over the bound\n", worst);
  CHECK(worst <= 0);
  CHECK(y[N] == INFINITY && isnan(y[N + 1]) && isnan(y[N + 2]) && y[N + 3] == 0.0f);
}

/* Where with broadcasting against a naive index walk, for 1-, 4- and
 * 8-byte elements and for strings. */
static int64_t bidx(int64_t flat, int r, const int64_t *out, int ri, const int64_t *dims) {
  int64_t coord[8], o = 0, st = 1;
  for (int d = r - 1; d >= 0; d--) coord[d] = flat % out[d], flat /= out[d];
  for (int d = ri - 1; d >= 0; d--) {
    int64_t c = coord[d + r - ri] % dims[d];
    o += c * st;
    st *= dims[d];
  }
  return o;
}

static void where_case(int dtype, int rc, const int64_t *dc, int rx, const int64_t *dx, int ry,
                       const int64_t *dy, int r, const int64_t *dout) {
  int64_t nc = 1, nx = 1, ny = 1, no = 1;
  for (int i = 0; i < rc; i++) nc *= dc[i];
  for (int i = 0; i < rx; i++) nx *= dx[i];
  for (int i = 0; i < ry; i++) ny *= dy[i];
  for (int i = 0; i < r; i++) no *= dout[i];
  uint8_t *c = malloc((size_t)nc);
  double *xv = malloc(sizeof(double) * (size_t)nx), *yv = malloc(sizeof(double) * (size_t)ny);
  for (int64_t i = 0; i < nc; i++) c[i] = (uint8_t)((i * 7 + 3) % 3 == 0);
  for (int64_t i = 0; i < nx; i++) xv[i] = (double)(i % 100) + 0.5;
  for (int64_t i = 0; i < ny; i++) yv[i] = -(double)(i % 90) - 0.25;
  size_t es = keel_dtype_size((keel_dtype)dtype);
  uint8_t *xb = malloc(es * (size_t)nx), *yb = malloc(es * (size_t)ny);
  for (int64_t i = 0; i < nx; i++) {
    if (dtype == KEEL_DOUBLE) ((double *)(void *)xb)[i] = xv[i];
    else if (dtype == KEEL_FLOAT) ((float *)(void *)xb)[i] = (float)xv[i];
    else ((int8_t *)xb)[i] = (int8_t)xv[i];
  }
  for (int64_t i = 0; i < ny; i++) {
    if (dtype == KEEL_DOUBLE) ((double *)(void *)yb)[i] = yv[i];
    else if (dtype == KEEL_FLOAT) ((float *)(void *)yb)[i] = (float)yv[i];
    else ((int8_t *)yb)[i] = (int8_t)yv[i];
  }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "c", KEEL_BOOL, rc, dc);
  mb_input(g, "x", dtype, rx, dx);
  mb_input(g, "y", dtype, ry, dy);
  mb_add(g, "Where", "c,x,y", "o");
  mb_output(g, "o", dtype, -1, NULL);
  keel_session_t *s = mb_session(g, 16);
  CHECK(s != NULL);
  if (s) {
    keel_value_t *in[3] = {mb_tensor(s, KEEL_BOOL, rc, dc, c), mb_tensor(s, dtype, rx, dx, xb),
                           mb_tensor(s, dtype, ry, dy, yb)};
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"c", "x", "y"}, in, 3, out));
    int bad = 0;
    for (int64_t i = 0; out[0] && i < no; i++) {
      bool pick = c[bidx(i, r, dout, rc, dc)];
      double want = pick ? xv[bidx(i, r, dout, rx, dx)] : yv[bidx(i, r, dout, ry, dy)];
      if (dtype == KEEL_FLOAT) want = (float)want;
      else if (dtype == KEEL_INT8) want = (int8_t)want;
      bad += keel_value_at(out[0], i) != want;
    }
    CHECK(out[0] && keel_value_numel(out[0]) == no && bad == 0);
    keel_value_release(out[0]);
    for (int i = 0; i < 3; i++) keel_value_release(in[i]);
    keel_session_destroy(s);
  }
  free(c), free(xv), free(yv), free(xb), free(yb);
}

static void where_all(void) {
  const int types[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT8};
  for (int t = 0; t < 3; t++) {
    where_case(types[t], 3, (int64_t[]){4, 1, 6}, 2, (int64_t[]){3, 1}, 4,
               (int64_t[]){5, 4, 1, 1}, 4, (int64_t[]){5, 4, 3, 6});
    where_case(types[t], 2, (int64_t[]){7, 9}, 2, (int64_t[]){7, 9}, 0, NULL, 2,
               (int64_t[]){7, 9});
    where_case(types[t], 1, (int64_t[]){1}, 3, (int64_t[]){2, 3, 4}, 1, (int64_t[]){4}, 3,
               (int64_t[]){2, 3, 4});
  }
}

/* Sigmoid on float32 (vectorized exp) against the libm form in double:
 * within 1e-6 relative over [-100, 100]; NaN stays NaN, +-inf give 1, 0. */
static void sigmoid_sweep(void) {
  enum { N = 20001 };
  static float x[N + 3];
  for (int i = 0; i < N; i++) x[i] = -100.0f + 200.0f * (float)i / (N - 1);
  x[N] = INFINITY, x[N + 1] = -INFINITY, x[N + 2] = NAN;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){N + 3});
  mb_add(g, "Sigmoid", "x", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N + 3}, x);
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
  const float *y = out[0] ? keel_value_data(out[0]) : NULL;
  double worst = 0;
  for (int i = 0; y && i < N; i++) {
    double want = 1.0 / (1.0 + exp(-(double)x[i]));
    worst = fmax(worst, fabs(y[i] - want) / fmax(want, 1e-30));
  }
  if (worst > 1e-6) fprintf(stderr, "fast sigmoid: worst relative error %g\n", worst);
  CHECK(worst <= 1e-6);
  CHECK(y && y[N] == 1.0f && y[N + 1] == 0.0f && isnan(y[N + 2]));
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* keel_vm_softmax_row and keel_vm_layernorm_row (16 lanes and a tail, at
 * the CPU's vector width) against double arithmetic, every length 0-300:
 * within 2e-6 relative (softmax: plus 1e-30 absolute), the empty and
 * all -inf rows refused, a NaN spreading over its row. */
static void rows_sweep(void) {
  enum { N = 301 };
  static float x[N], y[N], s[N], b[N];
  double worst_sm = 0, worst_ln = 0;
  uint32_t r = 12345;
  for (int n = 0; n < N; n++) {
    for (int i = 0; i < n; i++) {
      r = r * 1664525u + 1013904223u;
      x[i] = (float)((double)(r >> 8) / (1 << 24) * 20.0 - 10.0);
      s[i] = 0.5f + (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) - 2.0f;
    }
    memcpy(y, x, sizeof(float) * (size_t)n);
    bool ok = keel_vm_softmax_row(y, n);
    CHECK(ok == (n > 0));
    double mx = -INFINITY, sum = 0, mean = 0, var = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, x[i]);
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx), mean += x[i];
    for (int i = 0; ok && i < n; i++) {
      double want = exp((double)x[i] - mx) / sum;
      worst_sm = fmax(worst_sm, fabs(y[i] - want) / (want + 1e-30));
    }
    if (n == 0) continue;
    mean /= n;
    for (int i = 0; i < n; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    double inv = 1.0 / sqrt(var / n + 1e-5);
    keel_vm_layernorm_row(x, y, n, s, n % 2 ? b : NULL, 1e-5);
    for (int i = 0; i < n; i++) {
      double want = ((double)x[i] - mean) * inv * s[i] + (n % 2 ? b[i] : 0);
      worst_ln = fmax(worst_ln, fabs(y[i] - want) / fmax(fabs(want), 1.0));
    }
  }
  if (worst_sm > 2e-6 || worst_ln > 2e-6)
    fprintf(stderr, "rows: softmax worst %g, layernorm worst %g\n", worst_sm, worst_ln);
  CHECK(worst_sm <= 2e-6 && worst_ln <= 2e-6);
  for (int i = 0; i < 40; i++) y[i] = -INFINITY;
  CHECK(!keel_vm_softmax_row(y, 40) && y[17] == -INFINITY);
  for (int i = 0; i < 40; i++) y[i] = (float)i;
  y[21] = NAN;
  CHECK(keel_vm_softmax_row(y, 40) && isnan(y[0]) && isnan(y[39]));
}

int main(void) {
  rows_sweep();
  sigmoid_sweep();
  where_all();
  erf_sweep();
  gelu_sweep();
  const float es[] = {2.0f, 0.5f, 3.0f, -1.0f, 1.0f, 1.5f};
  for (size_t i = 0; i < sizeof es / sizeof *es; i++) one(es[i]);
  return check_report();
}
