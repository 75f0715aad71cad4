/* test_ops_signal.c: the signal family through real sessions against
 * naive references written here: DFT on random lengths (powers of two,
 * short odd lengths, long Bluestein lengths) against an O(n^2) sum in long
 * double, inverse(forward(x)) == x, real/complex input, onesided, padding
 * and truncation by dft_length, other axes, opset 20's axis input; STFT
 * against framing + the same sum; the three windows against their
 * formulas; MelWeightMatrix against the ONNX reference's algorithm; and
 * errors that leave the session usable. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int n) { return (int)(next() % (uint64_t)n); }
static double urand(void) { return (double)(next() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

#define MAXN 8192
static const long double PI_L = 3.141592653589793238462643383279502884L;

/* ====================================================== harness */

/* Runs s on the given inputs; returns output 0 (NULL on error, with the
 * status in *st when st is given, else the error is a failed check). */
static keel_value_t *run(keel_session_t *s, int n, const char **names, keel_value_t **in,
                         keel_status *st) {
  keel_value_t *out[1] = {0};
  keel_status r = keel_run(s, names, in, (size_t)n, out);
  if (st) *st = r;
  else CHECK_OK(r);
  return r == KEEL_OK ? out[0] : NULL;
}

static keel_value_t *tensor(keel_session_t *s, int dt, int rank, const int64_t *dims,
                            const void *data) {
  keel_value_t *v = NULL;
  CHECK_OK(keel_tensor_create(s, (keel_dtype)dt, rank, dims, data, &v));
  return v;
}

static keel_value_t *scalar_i64(keel_session_t *s, int64_t v) {
  return tensor(s, KEEL_INT64, 0, NULL, &v);
}

static void release_all(keel_value_t **v, int n) {
  for (int i = 0; i < n; i++) keel_value_release(v[i]);
}

/* Largest |got - want| over n values of a double tensor (INFINITY when
 * the shape is wrong). */
static double max_err(const keel_value_t *got, const double *want, int64_t n) {
  if (!got || keel_value_numel(got) != n) return INFINITY;
  double e = 0;
  for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(keel_value_at(got, i) - want[i]));
  return e;
}

/* ================================================= naive DFT */

/* y[k] = sum_j x[j] exp(-+2 pi i jk/n) over n complex values (x zero past
 * `len`), in long double from a table of exact angles (jk mod n). */
static void naive_dft(const double *x, int64_t len, int64_t n, bool inverse, double *y) {
  static long double c[MAXN], s[MAXN];
  for (int64_t t = 0; t < n; t++) {
    long double a = (inverse ? 2 : -2) * PI_L * (long double)t / (long double)n;
    c[t] = cosl(a), s[t] = sinl(a);
  }
  for (int64_t k = 0; k < n; k++) {
    long double re = 0, im = 0;
    for (int64_t j = 0, t = 0; j < n && j < len; j++, t = (t + k) % n) {
      re += x[2 * j] * c[t] - x[2 * j + 1] * s[t];
      im += x[2 * j] * s[t] + x[2 * j + 1] * c[t];
    }
    if (inverse) re /= (long double)n, im /= (long double)n;
    y[2 * k] = (double)re, y[2 * k + 1] = (double)im;
  }
}

static double norm1(const double *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += fabs(x[i]);
  return s;
}

static keel_session_t *dft_session(int dt, int axis, int inverse, int onesided, bool with_len,
                                   int opset) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, -1, NULL);
  if (with_len) mb_input(g, "L", KEEL_INT64, 0, NULL);
  if (opset >= 20) mb_input(g, "A", KEEL_INT64, 0, NULL);
  mb_output(g, "Y", dt, -1, NULL);
  mb_node *n = mb_add(g, "DFT", opset >= 20 ? (with_len ? "X,L,A" : "X,,A") : with_len ? "X,L" : "X",
                      "Y");
  if (opset < 20) mb_attr_i(n, "axis", axis);
  if (inverse) mb_attr_i(n, "inverse", 1);
  if (onesided) mb_attr_i(n, "onesided", onesided);
  return mb_session(g, opset);
}

/* =================================================== DFT cases */

/* One complex signal [1, len, 2] of length len, transformed at length n
 * (padding or truncating), against the naive sum. */
static void check_dft_length(keel_session_t *s, keel_session_t *sl, int64_t len, int64_t n,
                             bool inverse) {
  static double x[2 * MAXN], want[2 * MAXN];
  for (int64_t i = 0; i < 2 * len; i++) x[i] = urand() * 100;
  naive_dft(x, len, n, inverse, want);
  keel_value_t *in[2] = {tensor(s, KEEL_DOUBLE, 3, (int64_t[]){1, len, 2}, x),
                         scalar_i64(s, n)};
  keel_value_t *y = len == n ? run(s, 1, (const char *[]){"X"}, in, NULL)
                             : run(sl, 2, (const char *[]){"X", "L"}, in, NULL);
  double tol = 1e-13 * (norm1(x, 2 * len) + 1) * (inverse ? 1.0 / (double)n : 1.0);
  double e = max_err(y, want, 2 * n);
  if (!(e <= tol))
    fprintf(stderr, "  DFT len %lld n %lld inverse %d: error %g, tolerance %g\n", (long long)len,
            (long long)n, inverse, e, tol);
  CHECK(e <= tol);
  keel_value_release(y);
  release_all(in, 2);
}

static void check_dft_random_lengths(void) {
  keel_session_t *f = dft_session(KEEL_DOUBLE, 1, 0, 0, false, 17);
  keel_session_t *fl = dft_session(KEEL_DOUBLE, 1, 0, 0, true, 17);
  keel_session_t *b = dft_session(KEEL_DOUBLE, 1, 1, 0, false, 17);
  keel_session_t *bl = dft_session(KEEL_DOUBLE, 1, 1, 0, true, 17);
  CHECK(f && fl && b && bl);
  if (!f || !fl || !b || !bl) return;
  static const int64_t fixed[] = {1, 2, 3, 4, 5, 7, 8, 10, 16, 17, 31, 63, 64, 65, 97,
                                  100, 128, 255, 256, 257, 300, 1000, 1024, 1031};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
    check_dft_length(f, fl, fixed[i], fixed[i], false);
    check_dft_length(b, bl, fixed[i], fixed[i], true);
  }
  for (int i = 0; i < 30; i++) { /* random lengths, some padded or truncated */
    int64_t n = 1 + rnd(i < 20 ? 150 : 700), len = rnd(3) ? n : 1 + rnd(200);
    check_dft_length(f, fl, len, n, false);
    check_dft_length(b, bl, len, n, true);
  }
  keel_session_destroy(f), keel_session_destroy(fl);
  keel_session_destroy(b), keel_session_destroy(bl);
}

/* inverse + onesided is irfft: the n/2+1 bins of a real signal's naive
 * DFT give the signal back as [1, n, 1]; dft_length defaults to
 * 2 * (bins - 1), so odd lengths pass it. */
static void check_dft_irfft(void) {
  keel_session_t *s = dft_session(KEEL_DOUBLE, 1, 1, 1, false, 17);
  keel_session_t *sl = dft_session(KEEL_DOUBLE, 1, 1, 1, true, 17);
  CHECK(s && sl);
  if (!s || !sl) return;
  static const int64_t lens[] = {2, 3, 4, 7, 10, 16, 33};
  static double x[2 * MAXN], bins[2 * MAXN], want[MAXN];
  for (size_t t = 0; t < sizeof lens / sizeof lens[0]; t++) {
    int64_t n = lens[t], m = n / 2 + 1;
    for (int64_t i = 0; i < n; i++) x[2 * i] = want[i] = urand() * 10, x[2 * i + 1] = 0;
    naive_dft(x, n, n, false, bins);
    keel_value_t *in[2] = {tensor(s, KEEL_DOUBLE, 3, (int64_t[]){1, m, 2}, bins),
                           scalar_i64(s, n)};
    keel_value_t *y = n % 2 ? run(sl, 2, (const char *[]){"X", "L"}, in, NULL)
                            : run(s, 1, (const char *[]){"X"}, in, NULL);
    CHECK(y && keel_value_rank(y) == 3 && keel_value_shape(y)[1] == n &&
          keel_value_shape(y)[2] == 1);
    CHECK(y && max_err(y, want, n) <= 1e-10 * (norm1(want, n) + 1));
    keel_value_release(y);
    release_all(in, 2);
  }
  keel_session_destroy(s), keel_session_destroy(sl);
}

/* inverse(forward(x)) == x through a two-node graph. */
static void check_dft_roundtrip(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_DOUBLE, -1, NULL);
  mb_output(g, "Z", KEEL_DOUBLE, -1, NULL);
  mb_attr_i(mb_add(g, "DFT", "X", "Y"), "axis", 1);
  mb_node *n = mb_add(g, "DFT", "Y", "Z");
  mb_attr_i(n, "axis", 1);
  mb_attr_i(n, "inverse", 1);
  keel_session_t *s = mb_session(g, 17);
  CHECK(s != NULL);
  if (!s) return;
  static double x[2 * 3 * 700];
  for (int t = 0; t < 12; t++) {
    int64_t len = t < 4 ? (int64_t)1 << (3 + t) : 1 + rnd(700), batch = 1 + rnd(3);
    for (int64_t i = 0; i < 2 * len * batch; i++) x[i] = urand();
    keel_value_t *in = tensor(s, KEEL_DOUBLE, 3, (int64_t[]){batch, len, 2}, x);
    keel_value_t *y = run(s, 1, (const char *[]){"X"}, &in, NULL);
    double e = max_err(y, x, 2 * len * batch);
    CHECK(e < 1e-12);
    keel_value_release(y);
    keel_value_release(in);
  }
  keel_session_destroy(s);
}

/* Real float input [2, 6, 5, 1] on axis 2 (and -2 at opset 20, the same
 * axis), onesided or not: every line against the naive sum. */
static void check_dft_real_axis(int onesided, int opset) {
  keel_session_t *s = dft_session(KEEL_FLOAT, 2, 0, onesided, false, opset);
  CHECK(s != NULL);
  if (!s) return;
  int64_t B = 2, D1 = 6, N = 5;
  float x[60];
  for (int i = 0; i < 60; i++) x[i] = (float)(urand() * 10);
  keel_value_t *in[2] = {tensor(s, KEEL_FLOAT, 4, (int64_t[]){B, D1, N, 1}, x),
                         scalar_i64(s, -2)};
  keel_value_t *y = run(s, opset >= 20 ? 2 : 1, (const char *[]){"X", "A"}, in, NULL);
  int64_t nout = onesided ? N / 2 + 1 : N;
  CHECK(y && keel_value_rank(y) == 4 && keel_value_shape(y)[2] == nout &&
        keel_value_shape(y)[3] == 2 && keel_value_dtype(y) == KEEL_FLOAT);
  for (int64_t b = 0; y && b < B; b++)
    for (int64_t r = 0; r < D1; r++) {
      double line[10] = {0}, want[10];
      for (int64_t j = 0; j < N; j++) line[2 * j] = x[(b * D1 + r) * N + j];
      naive_dft(line, N, N, false, want);
      for (int64_t k = 0; k < 2 * nout; k++)
        CHECK_NEAR(keel_value_at(y, ((b * D1 + r) * nout) * 2 + k), want[k],
                   1e-5 * (1 + fabs(want[k])));
    }
  keel_value_release(y);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* The suite's test_dft case in miniature: arange on axis 1, where float
 * accumulation would miss the zero bins by ~1e-4. */
static void check_dft_exact_zeros(void) {
  keel_session_t *s = dft_session(KEEL_FLOAT, 1, 0, 0, false, 17);
  if (!s) return;
  float x[1000];
  for (int i = 0; i < 1000; i++) x[i] = (float)i;
  keel_value_t *in = tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1000, 1, 1}, x);
  keel_value_t *y = run(s, 1, (const char *[]){"X"}, &in, NULL);
  double dx[2000] = {0}, want[2000];
  for (int i = 0; i < 1000; i++) dx[2 * i] = i;
  naive_dft(dx, 1000, 1000, false, want);
  double e = 0;
  for (int i = 0; y && i < 2000; i++)
    e = fmax(e, fabs(keel_value_at(y, i) - (double)(float)want[i]) / (1e-5 + 1e-6 * fabs(want[i])));
  CHECK(y && e <= 1);
  keel_value_release(y);
  keel_value_release(in);
  keel_session_destroy(s);
}

static void check_dft_errors(void) {
  keel_session_t *s = dft_session(KEEL_FLOAT, 1, 0, 0, true, 17);
  if (!s) return;
  float x[12] = {0};
  keel_status st;
  keel_value_t *bad = tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 4, 3}, x); /* last dim 3 */
  keel_value_t *good = tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 4, 2}, x);
  keel_value_t *zero = scalar_i64(s, 0), *four = scalar_i64(s, 4);
  const char *names[] = {"X", "L"};
  CHECK(!run(s, 2, names, (keel_value_t *[]){bad, four}, &st) && st == KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "DFT") != NULL);
  CHECK(!run(s, 2, names, (keel_value_t *[]){good, zero}, &st) && st == KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "dft_length") != NULL);
  keel_value_t *y = run(s, 2, names, (keel_value_t *[]){good, four}, NULL); /* still usable */
  CHECK(y && keel_value_numel(y) == 8);
  keel_value_release(y);
  release_all((keel_value_t *[]){bad, good, zero, four}, 4);
  keel_session_destroy(s);

  s = dft_session(KEEL_FLOAT, 2, 0, 0, false, 17); /* axis 2 is the (re, im) dim */
  keel_value_t *g2 = tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 4, 2}, x);
  CHECK(!run(s, 1, names, &g2, &st) && st == KEEL_ERR_SHAPE);
  keel_value_release(g2);
  keel_session_destroy(s);

  s = dft_session(KEEL_FLOAT, 1, 0, 7, false, 17); /* onesided 7 */
  g2 = tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 4, 2}, x);
  CHECK(!run(s, 1, names, &g2, &st) && st == KEEL_ERR_INVALID_MODEL);
  keel_value_release(g2);
  keel_session_destroy(s);
}

/* ========================================================== STFT */

#define STFT_MAXIN 8192
#define STFT_MAXOUT 32768

typedef struct stft_case {
  int64_t batch, len, comp, step, n;
  int window, pass_len, onesided;
} stft_case;

static void stft_ref(const stft_case *c, const double *x, const double *w, double *want,
                     int64_t *frames, int64_t *nout) {
  *frames = (c->len - c->n) / c->step + 1;
  *nout = c->onesided ? c->n / 2 + 1 : c->n;
  static double line[2 * 512], full[2 * 512];
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t f = 0; f < *frames; f++) {
      for (int64_t j = 0; j < c->n; j++) {
        const double *p = x + (b * c->len + f * c->step + j) * c->comp;
        double wj = c->window ? w[j] : 1.0;
        line[2 * j] = p[0] * wj, line[2 * j + 1] = c->comp == 2 ? p[1] * wj : 0.0;
      }
      naive_dft(line, c->n, c->n, false, full);
      memcpy(want + (b * *frames + f) * *nout * 2, full, sizeof(double) * (size_t)(2 * *nout));
    }
}

static void check_stft_case(const stft_case *c) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_DOUBLE, -1, NULL);
  mb_input(g, "S", KEEL_INT64, 0, NULL);
  mb_input(g, "W", KEEL_DOUBLE, -1, NULL);
  mb_input(g, "L", KEEL_INT64, 0, NULL);
  mb_output(g, "Y", KEEL_DOUBLE, -1, NULL);
  mb_node *nd = mb_add(g, "STFT", c->window ? (c->pass_len ? "X,S,W,L" : "X,S,W") : "X,S,,L", "Y");
  if (!c->onesided) mb_attr_i(nd, "onesided", 0);
  keel_session_t *s = mb_session(g, 17);
  CHECK(s != NULL);
  if (!s) return;
  static double x[STFT_MAXIN], w[512], want[STFT_MAXOUT];
  for (int64_t i = 0; i < c->batch * c->len * c->comp; i++) x[i] = urand() * 50;
  for (int64_t i = 0; i < c->n; i++) w[i] = 0.5 - 0.5 * cos(2 * M_PI * (double)i / (double)c->n);
  int64_t frames, nout;
  stft_ref(c, x, w, want, &frames, &nout);
  keel_value_t *in[4] = {tensor(s, KEEL_DOUBLE, 3, (int64_t[]){c->batch, c->len, c->comp}, x),
                         scalar_i64(s, c->step), tensor(s, KEEL_DOUBLE, 1, &c->n, w),
                         scalar_i64(s, c->n)};
  keel_value_t *y = run(s, 4, (const char *[]){"X", "S", "W", "L"}, in, NULL);
  CHECK(y && keel_value_rank(y) == 4 && keel_value_shape(y)[0] == c->batch &&
        keel_value_shape(y)[1] == frames && keel_value_shape(y)[2] == nout);
  double e = max_err(y, want, c->batch * frames * nout * 2);
  if (!(e < 1e-9)) fprintf(stderr, "  STFT n %lld: error %g\n", (long long)c->n, e);
  CHECK(e < 1e-9);
  keel_value_release(y);
  release_all(in, 4);
  keel_session_destroy(s);
}

static void check_stft(void) {
  check_stft_case(&(stft_case){1, 128, 1, 8, 16, 0, 1, 1}); /* the suite's case */
  check_stft_case(&(stft_case){2, 100, 2, 7, 30, 1, 1, 0});
  for (int i = 0; i < 12; i++) {
    stft_case c = {1 + rnd(3), 0, 1 + rnd(2), 1 + rnd(40), 1 + rnd(i < 8 ? 64 : 300), rnd(2),
                   rnd(2), rnd(2)};
    if (c.comp == 2) c.onesided = 0;
    if (!c.window) c.pass_len = 1;
    c.len = c.n + rnd(400);
    int64_t frames = (c.len - c.n) / c.step + 1, nout = c.onesided ? c.n / 2 + 1 : c.n;
    if (c.batch * frames * nout * 2 > STFT_MAXOUT || c.batch * c.len * c.comp > STFT_MAXIN) {
      i--; /* too big for the buffers: draw again */
      continue;
    }
    check_stft_case(&c);
  }
}

/* Float signal with a window: the product is rounded to float before the
 * transform (as the reference computes it). */
static void check_stft_float_window(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_input(g, "S", KEEL_INT64, 0, NULL);
  mb_input(g, "W", KEEL_FLOAT, -1, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(g, "STFT", "X,S,W", "Y");
  keel_session_t *s = mb_session(g, 17);
  if (!s) return;
  float x[128], w[16];
  double dx[256] = {0}, want[32];
  for (int i = 0; i < 128; i++) x[i] = (float)i;
  for (int i = 0; i < 16; i++) w[i] = (float)(0.5 + 0.5 * cos(2 * 3.1415 * i / 16));
  keel_value_t *in[3] = {tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 128, 1}, x), scalar_i64(s, 8),
                         tensor(s, KEEL_FLOAT, 1, (int64_t[]){16}, w)};
  keel_value_t *y = run(s, 3, (const char *[]){"X", "S", "W"}, in, NULL);
  CHECK(y && keel_value_numel(y) == 15 * 9 * 2);
  double e = 0;
  for (int f = 0; y && f < 15; f++) {
    for (int j = 0; j < 16; j++) dx[2 * j] = (double)(x[f * 8 + j] * w[j]); /* float product */
    naive_dft(dx, 16, 16, false, want);
    for (int k = 0; k < 18; k++)
      e = fmax(e, fabs(keel_value_at(y, f * 18 + k) - (double)(float)want[k]) /
                      (1e-6 + 1e-6 * fabs(want[k])));
  }
  CHECK(y && e <= 1);
  keel_value_release(y);
  release_all(in, 3);
  keel_session_destroy(s);
}

static void check_stft_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_input(g, "S", KEEL_INT64, 0, NULL);
  mb_input(g, "L", KEEL_INT64, 0, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(g, "STFT", "X,S,,L", "Y");
  keel_session_t *s = mb_session(g, 17);
  if (!s) return;
  float x[64] = {0};
  keel_status st;
  const char *names[] = {"X", "S", "L"};
  keel_value_t *sig = tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 32, 1}, x);
  keel_value_t *s4 = scalar_i64(s, 4), *s0 = scalar_i64(s, 0), *l64 = scalar_i64(s, 64);
  keel_value_t *l8 = scalar_i64(s, 8);
  CHECK(!run(s, 3, names, (keel_value_t *[]){sig, s4, l64}, &st) && st == KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "shorter") != NULL);
  CHECK(!run(s, 3, names, (keel_value_t *[]){sig, s0, l8}, &st) && st == KEEL_ERR_SHAPE);
  keel_value_t *y = run(s, 3, names, (keel_value_t *[]){sig, s4, l8}, NULL);
  CHECK(y && keel_value_shape(y)[1] == 7 && keel_value_shape(y)[2] == 5);
  keel_value_release(y);
  release_all((keel_value_t *[]){sig, s4, s0, l64, l8}, 5);
  keel_session_destroy(s);
}

/* ======================================================= windows */

static void check_window(const char *op, double a0, double a1, double a2) {
  for (int periodic = 0; periodic < 2; periodic++)
    for (int dt_i = 0; dt_i < 2; dt_i++) {
      int dt = dt_i ? KEEL_DOUBLE : KEEL_FLOAT;
      mb_graph *g = mb_graph_new("main");
      mb_input(g, "N", KEEL_INT32, 0, NULL);
      mb_output(g, "Y", dt, -1, NULL);
      mb_node *n = mb_add(g, op, "N", "Y");
      if (!periodic) mb_attr_i(n, "periodic", 0);
      if (dt_i) mb_attr_i(n, "output_datatype", KEEL_DOUBLE);
      keel_session_t *s = mb_session(g, 17);
      if (!s) continue;
      static const int32_t sizes[] = {0, 1, 2, 10, 33, 256};
      for (int t = 0; t < 6; t++) {
        int32_t size = sizes[t];
        keel_value_t *in = tensor(s, KEEL_INT32, 0, NULL, &size);
        keel_value_t *y = run(s, 1, (const char *[]){"N"}, &in, NULL);
        CHECK(y && (int)keel_value_dtype(y) == dt && keel_value_numel(y) == size);
        double N = periodic ? size : size - 1, e = 0;
        for (int i = 0; y && i < size; i++) {
          double want = N == 0 ? 1.0
                               : a0 - a1 * cos(2 * M_PI * i / N) + a2 * cos(4 * M_PI * i / N);
          e = fmax(e, fabs(keel_value_at(y, i) - want));
        }
        CHECK(e <= (dt_i ? 1e-15 : 1e-7));
        keel_value_release(y);
        keel_value_release(in);
      }
      keel_session_destroy(s);
    }
}

static void check_window_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "N", KEEL_INT64, 0, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_i(mb_add(g, "HannWindow", "N", "Y"), "output_datatype", KEEL_STRING);
  keel_session_t *s = mb_session(g, 17);
  if (!s) return;
  keel_value_t *in = scalar_i64(s, 4);
  keel_status st;
  CHECK(!run(s, 1, (const char *[]){"N"}, &in, &st) && st == KEEL_ERR_INVALID_MODEL);
  keel_value_release(in);
  keel_session_destroy(s);

  g = mb_graph_new("main");
  mb_input(g, "N", KEEL_INT64, 0, NULL);
  mb_output(g, "Y", KEEL_INT32, -1, NULL);
  mb_attr_i(mb_add(g, "BlackmanWindow", "N", "Y"), "output_datatype", KEEL_INT32);
  s = mb_session(g, 17);
  if (!s) return;
  keel_value_t *neg = scalar_i64(s, -3), *five = scalar_i64(s, 5);
  CHECK(!run(s, 1, (const char *[]){"N"}, &neg, &st) && st == KEEL_ERR_SHAPE);
  keel_value_t *y = run(s, 1, (const char *[]){"N"}, &five, NULL); /* int output: truncated */
  CHECK(y && keel_value_dtype(y) == KEEL_INT32 && keel_value_numel(y) == 5);
  for (int i = 0; y && i < 5; i++) CHECK(keel_value_at(y, i) == 0);
  keel_value_release(y);
  release_all((keel_value_t *[]){neg, five}, 2);
  keel_session_destroy(s);
}

/* =============================================== MelWeightMatrix */

/* The ONNX reference's algorithm, transcribed. */
static void mel_ref(int64_t bins, int64_t dft, int64_t rate, double lo, double hi, double *out) {
  int64_t spec = dft / 2 + 1, fb[MAXN];
  double lm = 2595 * log10(1 + lo / 700), hm = 2595 * log10(1 + hi / 700);
  double step = (hm - lm) / (double)(bins + 2);
  for (int64_t i = 0; i < bins + 2; i++) {
    double f = 700 * (pow(10, ((double)i * step + lm) / 2595) - 1);
    fb[i] = (int64_t)floor((double)(dft + 1) * f / (double)rate);
  }
  memset(out, 0, sizeof(double) * (size_t)(spec * bins));
  for (int64_t i = 0; i < bins; i++) {
    int64_t l = fb[i], c = fb[i + 1], h = fb[i + 2];
    if (c == l) {
      if (c < spec) out[c * bins + i] = 1;
    } else {
      for (int64_t j = l; j <= c && j < spec; j++) out[j * bins + i] = (double)(j - l) / (double)(c - l);
    }
    for (int64_t j = c; j < h && j < spec; j++) out[j * bins + i] = (double)(h - j) / (double)(h - c);
  }
}

static void check_mel_case(keel_session_t *s, int64_t bins, int64_t dft, int64_t rate, float lo,
                           float hi) {
  static double want[4 * MAXN];
  if ((dft / 2 + 1) * bins > 4 * MAXN) return;
  mel_ref(bins, dft, rate, lo, hi, want);
  keel_value_t *in[5] = {scalar_i64(s, bins), scalar_i64(s, dft), scalar_i64(s, rate),
                         tensor(s, KEEL_FLOAT, 0, NULL, &lo), tensor(s, KEEL_FLOAT, 0, NULL, &hi)};
  keel_value_t *y = run(s, 5, (const char *[]){"B", "D", "R", "L", "H"}, in, NULL);
  CHECK(y && keel_value_rank(y) == 2 && keel_value_shape(y)[0] == dft / 2 + 1 &&
        keel_value_shape(y)[1] == bins);
  CHECK(max_err(y, want, (dft / 2 + 1) * bins) < 1e-6);
  keel_value_release(y);
  release_all(in, 5);
}

static void check_mel(void) {
  mb_graph *g = mb_graph_new("main");
  const char *names[] = {"B", "D", "R"};
  for (int i = 0; i < 3; i++) mb_input(g, names[i], KEEL_INT64, 0, NULL);
  mb_input(g, "L", KEEL_FLOAT, 0, NULL);
  mb_input(g, "H", KEEL_FLOAT, 0, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(g, "MelWeightMatrix", "B,D,R,L,H", "Y");
  keel_session_t *s = mb_session(g, 17);
  if (!s) return;
  /* the suite's case, whose expected matrix is printed in the reference */
  check_mel_case(s, 8, 16, 8192, 0, 4096);
  static const double first_rows[] = {1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0};
  keel_value_t *in[5] = {scalar_i64(s, 8), scalar_i64(s, 16), scalar_i64(s, 8192),
                         tensor(s, KEEL_FLOAT, 0, NULL, &(float){0}),
                         tensor(s, KEEL_FLOAT, 0, NULL, &(float){4096})};
  keel_value_t *y = run(s, 5, (const char *[]){"B", "D", "R", "L", "H"}, in, NULL);
  CHECK(y && keel_value_numel(y) == 72);
  for (int i = 0; y && i < 16; i++) CHECK(keel_value_at(y, i) == first_rows[i]);
  keel_value_release(y);
  check_mel_case(s, 20, 512, 16000, 20, 8000);
  check_mel_case(s, 40, 1024, 22050, 0, 11025);
  check_mel_case(s, 3, 7, 100, 10, 40);
  keel_status st; /* lower above upper: an error, then the session works */
  keel_value_t *bad = tensor(s, KEEL_FLOAT, 0, NULL, &(float){5000});
  CHECK(!run(s, 5, (const char *[]){"B", "D", "R", "L", "H"},
             (keel_value_t *[]){in[0], in[1], in[2], bad, in[3]}, &st) &&
        st == KEEL_ERR_SHAPE);
  check_mel_case(s, 8, 16, 8192, 0, 4096);
  /* fuzzer: dft_length 13893677 made a (6946839, 8) matrix under the cap
   * whose every element was computed (9 s under the sanitizers); only the
   * triangles' spans are written now. A tall case against the reference: */
  int64_t tall = 400001, spec = tall / 2 + 1;
  double *want = malloc(sizeof(double) * (size_t)(spec * 8));
  mel_ref(8, tall, 2025082, 0, 4096, want);
  keel_value_t *tin[5] = {scalar_i64(s, 8), scalar_i64(s, tall), scalar_i64(s, 2025082),
                          tensor(s, KEEL_FLOAT, 0, NULL, &(float){0}),
                          tensor(s, KEEL_FLOAT, 0, NULL, &(float){4096})};
  y = run(s, 5, (const char *[]){"B", "D", "R", "L", "H"}, tin, NULL);
  CHECK(y && keel_value_shape(y)[0] == spec && max_err(y, want, spec * 8) < 1e-6);
  keel_value_release(y);
  release_all(tin, 5);
  free(want);
  keel_value_release(bad);
  release_all(in, 5);
  keel_session_destroy(s);
}

int main(void) {
  check_dft_random_lengths();
  check_dft_roundtrip();
  check_dft_irfft();
  check_dft_real_axis(0, 17);
  check_dft_real_axis(1, 17);
  check_dft_real_axis(1, 20);
  check_dft_exact_zeros();
  check_dft_errors();
  check_stft();
  check_stft_float_window();
  check_stft_errors();
  check_window("HannWindow", 0.5, 0.5, 0);
  check_window("HammingWindow", 25.0 / 46.0, 21.0 / 46.0, 0);
  check_window("BlackmanWindow", 0.42, 0.5, 0.08);
  check_window_errors();
  check_mel();
  return check_report();
}
