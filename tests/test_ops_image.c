/* test_ops_image.c: Resize, Upsample, GridSample (4-D and 5-D), AffineGrid, RoiAlign and
 * NonMaxSuppression through real sessions, against naive references
 * written here.
 *
 * The Resize reference follows ONNX's resize.py literally and shares no
 * code with the kernel: every output element recurses over the axes, and
 * on each one picks the n input indices nearest the coordinate in an
 * edge-padded copy of the axis (ties to the smaller index), weights them
 * with the reference's coefficient formulas, zeroes and renormalizes for
 * exclude_outside. The kernel instead builds per-axis tap tables and runs
 * separable passes or a gather. Random ranks, shapes, scales or sizes,
 * modes, coordinate modes, nearest modes, cubic_coeff_a, exclude_outside,
 * tf_crop_and_resize rois and antialias are compared; then types, axes,
 * keep_aspect_ratio_policy, Upsample, and errors that must leave the
 * session usable. GridSample, RoiAlign and NMS get per-element references
 * of the same kind and their own error cases. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }
static double rndf(double lo, double hi) { return lo + (hi - lo) * (double)(next() >> 11) / 9007199254740992.0; }

static int64_t clampi(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* One run with named inputs; returns output 0 (NULL on error, status in *st). */
static keel_value_t *run_n(keel_session_t *s, int n, const char **names, keel_value_t **in,
                           keel_status *st) {
  keel_value_t *out[1] = {0};
  *st = keel_run(s, names, in, (size_t)n, out);
  return out[0];
}

/* ================================================ Resize reference */

enum { NEAREST, LINEAR, CUBIC };
static const char *const MODES[] = {"nearest", "linear", "cubic"};
enum { HALF, PYTORCH, ALIGN, ASYM, CROP, TFNN, SYMM, NCTM };
static const char *const CTMS[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn",
                                   "half_pixel_symmetric"};
static const char *const NMODES[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

typedef struct rcase {
  int rank, mode, ctm, nmode, exclude, antialias, opset, sizes;
  int simple;                  /* Upsample / opset 10: floor up, ceil down  */
  double a, extrap;
  int64_t in[4], out[4];
  double scale[4], roi[8];
} rcase;

/* x_original, or false outside tf_crop_and_resize's crop. Length-1 outputs
 * follow the spec (pytorch_half_pixel: 0; crop: the roi's centre). */
static bool ref_coord(const rcase *c, int d, int64_t xi, double *xo) {
  double in = (double)c->in[d], s = c->scale[d], ow = s * in, x = (double)xi;
  bool one = c->out[d] == 1;
  switch (c->ctm) {
    case ALIGN: *xo = one ? 0 : x * (in - 1) / (ow - 1); return true;
    case ASYM: *xo = x / s; return true;
    case TFNN: *xo = (x + 0.5) / s; return true;
    case PYTORCH: *xo = one ? 0 : (x + 0.5) / s - 0.5; return true;
    case SYMM: {
      double adj = (double)c->out[d] / ow, center = in / 2, offset = center * (1 - adj);
      *xo = offset + (x + 0.5) / s - 0.5;
      return true;
    }
    case CROP: {
      double r0 = c->roi[d], r1 = c->roi[c->rank + d];
      *xo = one ? (r1 - r0) * (in - 1) / 2 : x * (r1 - r0) * (in - 1) / (ow - 1);
      *xo += r0 * (in - 1);
      return *xo >= 0 && *xo <= in - 1;
    }
    default: *xo = (x + 0.5) / s - 0.5; return true;
  }
}

static double ref_cubic_k(double x, double A) {
  x = fabs(x);
  double x2 = x * x, x3 = x * x2;
  if (x <= 1) return (A + 2) * x3 - (A + 3) * x2 + 1;
  if (x < 2) return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A;
  return 0;
}

/* The reference's get_coeffs(ratio, scale); returns their count. */
static int ref_coeffs(const rcase *c, int d, double ratio, double *co) {
  double A = c->a, s = c->scale[d];
  if (c->mode == NEAREST) {
    bool up = ratio == 1;
    if (!up) switch (c->simple ? (s < 1 ? 3 : 2) : c->nmode) {
        case 0: up = ratio > 0.5; break;
        case 1: up = ratio >= 0.5; break;
        case 2: up = false; break;
        default: up = true; break;
      }
    co[0] = !up, co[1] = up;
    return 2;
  }
  if (!c->antialias && c->mode == LINEAR) return co[0] = 1 - ratio, co[1] = ratio, 2;
  if (!c->antialias) {
    co[0] = ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A;
    co[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
    co[2] = ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1;
    co[3] = ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) - 4 * A;
    return 4;
  }
  if (s > 1) s = 1;
  int64_t start = (int64_t)floor((c->mode == LINEAR ? -1 : -2) / s) + 1, n = 2 - 2 * start;
  double sum = 0;
  for (int64_t i = 0; i < n; i++) {
    double arg = ((double)(start + i) - ratio) * s;
    co[i] = c->mode == LINEAR ? fmin(fmax(1 - fabs(arg), 0), 1) : ref_cubic_k(arg, A);
    sum += co[i];
  }
  for (int64_t i = 0; i < n; i++) co[i] /= sum;
  return (int)n;
}

/* The n indices nearest x in the axis padded by ceil(n/2) on each side
 * (ties to the smaller), ascending, in unpadded coordinates. Distances are
 * measured from x itself: resize.py adds the pad to x first, which can
 * round a coordinate 1e-16 past an integer onto it. */
static void ref_neighbors(double x, int n, int64_t len, int64_t *idx) {
  int64_t pad = (n + 1) / 2, plen = len + 2 * pad;
  bool used[512] = {0};
  for (int k = 0; k < n; k++) {
    int64_t best = -1;
    for (int64_t i = 0; i < plen; i++)
      if (!used[i] && (best < 0 || fabs(x - (double)(i - pad)) < fabs(x - (double)(best - pad))))
        best = i;
    used[best] = true;
  }
  int k = 0;
  for (int64_t i = 0; i < plen; i++)
    if (used[i]) idx[k++] = i - pad;
}

/* Output element o: 1-D interpolation on axis d of the (d+1..)-D results. */
static double ref_interp(const rcase *c, const double *x, int d, const int64_t *o, int64_t off) {
  if (d == c->rank) return x[off];
  double xo, co[512];
  int64_t idx[512], stride = 1;
  for (int e = d + 1; e < c->rank; e++) stride *= c->in[e];
  if (!ref_coord(c, d, o[d], &xo)) return c->extrap;
  double fl = floor(xo), ratio = xo == fl ? 1 : xo - fl;
  int n = ref_coeffs(c, d, ratio, co);
  ref_neighbors(xo, n, c->in[d], idx);
  if (c->exclude) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (co[i] *= (idx[i] >= 0 && idx[i] < c->in[d]));
    for (int i = 0; i < n; i++) co[i] /= sum;
  }
  double acc = 0;
  for (int i = 0; i < n; i++)
    if (co[i] != 0) acc += co[i] * ref_interp(c, x, d + 1, o, off + clampi(idx[i], c->in[d]) * stride);
  return acc;
}

static int64_t prod(int n, const int64_t *v) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) p *= v[i];
  return p;
}

static void ref_resize(const rcase *c, const double *x, double *y) {
  int64_t total = prod(c->rank, c->out), o[4];
  for (int64_t i = 0; i < total; i++) {
    int64_t r = i;
    for (int d = c->rank - 1; d >= 0; d--) o[d] = r % c->out[d], r /= c->out[d];
    y[i] = ref_interp(c, x, 0, o, 0);
  }
}

/* ===================================================== Resize runs */

/* A one-node Resize model with roi and scales or sizes as initializers. */
static keel_session_t *resize_session(const rcase *c, int dtype) {
  mb_graph *g = mb_graph_new("main");
  int r = c->rank;
  mb_input(g, "X", dtype, r, c->in);
  mb_output(g, "Y", dtype, -1, NULL);
  float roi[8], sc[4];
  for (int i = 0; i < 2 * r; i++) roi[i] = (float)c->roi[i];
  for (int i = 0; i < r; i++) sc[i] = (float)c->scale[i];
  mb_init(g, "roi", KEEL_FLOAT, 1, (int64_t[]){2 * r}, roi);
  if (c->sizes) mb_init(g, "sizes", KEEL_INT64, 1, (int64_t[]){r}, c->out);
  else mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){r}, sc);
  mb_node *n = mb_add(g, "Resize", c->sizes ? "X,roi,,sizes" : "X,roi,scales", "Y");
  mb_attr_s(n, "mode", MODES[c->mode]);
  mb_attr_s(n, "coordinate_transformation_mode", CTMS[c->ctm]);
  mb_attr_s(n, "nearest_mode", NMODES[c->nmode]);
  mb_attr_f(n, "cubic_coeff_a", (float)c->a);
  mb_attr_i(n, "exclude_outside", c->exclude);
  mb_attr_f(n, "extrapolation_value", (float)c->extrap);
  if (c->opset >= 18) mb_attr_i(n, "antialias", c->antialias);
  /* 1, 2, 3 threads in turn: nearest splits its planes over the pool */
  static int calls;
  keel_options o = {.size = sizeof o, .threads = 1 + calls++ % 3};
  return mb_session_opts(g, c->opset, &o);
}

static void describe(const rcase *c) {
  fprintf(stderr, "  case: rank %d mode %s ctm %s nmode %s a %g excl %d aa %d opset %d %s:", c->rank,
          MODES[c->mode], CTMS[c->ctm], NMODES[c->nmode], c->a, c->exclude, c->antialias,
          c->opset, c->sizes ? "sizes" : "scales");
  for (int d = 0; d < c->rank; d++)
    fprintf(stderr, " %lld->%lld(%g)", (long long)c->in[d], (long long)c->out[d], c->scale[d]);
  fprintf(stderr, "\n");
}

/* Runs case c on random data of `dtype` and compares with the reference
 * within atol + rtol*|want| (integers: the rounded reference, off by at
 * most 1 for ties in the float path). */
static void check_resize(const rcase *c, int dtype, double atol, double rtol) {
  keel_session_t *s = resize_session(c, dtype);
  CHECK(s != NULL);
  if (!s) return;
  int64_t nin = prod(c->rank, c->in), nout = prod(c->rank, c->out);
  double x[1024], want[4096];
  uint8_t raw[1024 * 8];
  for (int64_t i = 0; i < nin; i++) {
    x[i] = keel_dtype_is_int(dtype) ? (double)rnd(0, 100) : rndf(-5, 5);
    keel_elem_set_f64(dtype, raw, (size_t)i, x[i]);
    x[i] = keel_elem_get_f64(dtype, raw, (size_t)i); /* what the kernel sees */
  }
  ref_resize(c, x, want);
  keel_value_t *in = mb_tensor(s, dtype, c->rank, c->in, raw);
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &in, &st);
  CHECK_OK(st);
  int bad = 0;
  for (int64_t i = 0; y && i < nout && !bad; i++) {
    double w = keel_dtype_is_int(dtype) ? nearbyint(want[i]) : want[i];
    if (c->mode == NEAREST) { /* moved elements and the extrapolation value, in y's type */
      keel_elem_set_f64(dtype, raw, 0, want[i]);
      w = keel_elem_get_f64(dtype, raw, 0);
    }
    double got = keel_value_at(y, i), tol = atol + rtol * fabs(w);
    if (keel_dtype_is_int(dtype) && c->mode != NEAREST) tol = 1.0;
    if (!(fabs(got - w) <= tol)) {
      bad = 1;
      fprintf(stderr, "resize element %lld: got %.9g, want %.9g\n", (long long)i, got, w);
    }
  }
  CHECK(y && keel_value_numel(y) == nout && !bad);
  if (bad) describe(c);
  keel_value_release(y);
  keel_value_release(in);
  keel_session_destroy(s);
}

static const float SCALES[] = {0.5f, 0.6f, 0.75f, 0.8f, 1.0f, 1.25f, 1.5f, 2.0f, 2.5f, 3.0f};

static void random_rcase(rcase *c) {
  memset(c, 0, sizeof *c);
  c->rank = (int)rnd(1, 3);
  c->mode = (int)rnd(0, 2);
  c->ctm = (int)rnd(0, NCTM - 1);
  c->nmode = (int)rnd(0, 3);
  c->a = rnd(0, 1) ? -0.75 : -0.5;
  c->exclude = c->mode == CUBIC && rnd(0, 1);
  c->extrap = (double)(float)rndf(-3, 3);
  c->antialias = c->mode != NEAREST && rnd(0, 2) == 0;
  c->opset = c->ctm == SYMM ? 19 : c->antialias ? 18 : 13;
  c->sizes = (int)rnd(0, 1);
  for (int d = 0; d < c->rank; d++) {
    c->in[d] = rnd(1, c->rank == 3 ? 4 : 6);
    do {
      if (c->sizes) {
        c->out[d] = rnd(1, 8);
        c->scale[d] = (double)c->out[d] / (double)c->in[d];
      } else {
        c->scale[d] = SCALES[rnd(0, 9)];
        c->out[d] = (int64_t)floor(c->scale[d] * (double)c->in[d]);
      }
    } while (c->out[d] == 0);
    c->roi[d] = (double)(float)rndf(-0.3, 0.6);
    c->roi[c->rank + d] = (double)(float)rndf(0.4, 1.3);
  }
}

/* Axes the ONNX test data never covers: random cases against the reference. */
static void check_resize_random(void) {
  for (int i = 0; i < 400; i++) {
    rcase c;
    random_rcase(&c);
    check_resize(&c, KEEL_FLOAT, 1e-5, 1e-4);
  }
  for (int i = 0; i < 40; i++) { /* double keeps full precision */
    rcase c;
    random_rcase(&c);
    check_resize(&c, KEEL_DOUBLE, 1e-12, 1e-10);
  }
}

/* Nearest with the trailing axes unresized (an NHWC image's channels;
 * the kernel copies one run per index of the last resized axis), with and
 * without an identity roi on them (tf_crop_and_resize: extrapolated runs),
 * in several element sizes, at 1-3 threads. */
static void check_resize_channels_last(void) {
  static const int types[] = {KEEL_FLOAT, KEEL_UINT8, KEEL_INT64, KEEL_FLOAT16};
  for (int i = 0; i < 160; i++) {
    rcase c;
    random_rcase(&c);
    c.mode = NEAREST, c.antialias = 0, c.exclude = 0, c.opset = 13;
    if (c.ctm == SYMM) c.ctm = HALF;
    c.rank = (int)rnd(2, 4);
    int keep = (int)rnd(1, c.rank - 1); /* unresized trailing axes */
    for (int d = 0; d < c.rank; d++) {
      c.in[d] = rnd(1, d >= c.rank - keep ? 5 : 4);
      if (d >= c.rank - keep) {
        c.out[d] = c.in[d], c.scale[d] = 1.0;
      } else {
        do {
          c.scale[d] = d == 0 && rnd(0, 1) ? 1.0 : SCALES[rnd(0, 9)];
          c.out[d] = (int64_t)floor(c.scale[d] * (double)c.in[d]);
        } while (c.out[d] == 0);
      }
      c.roi[d] = (double)(float)rndf(-0.3, 0.6);
      c.roi[c.rank + d] = (double)(float)rndf(0.4, 1.3);
      if (d >= c.rank - keep && rnd(0, 2)) c.roi[d] = 0, c.roi[c.rank + d] = 1;
    }
    c.sizes = 0;
    check_resize(&c, types[i % 4], 0, 0);
  }
}

/* Types: nearest moves any element; linear and cubic stage halves and
 * integers (rounded, saturated). */
static void check_resize_types(void) {
  static const int nearest_types[] = {KEEL_UINT8, KEEL_INT8, KEEL_FLOAT16, KEEL_INT64,
                                      KEEL_INT32, KEEL_BFLOAT16, KEEL_BOOL};
  for (int t = 0; t < 7; t++)
    for (int i = 0; i < 6; i++) {
      rcase c;
      random_rcase(&c);
      c.mode = NEAREST, c.antialias = 0, c.exclude = 0;
      if (nearest_types[t] == KEEL_BOOL) c.ctm = c.ctm == CROP ? HALF : c.ctm; /* extrap not 0/1 */
      check_resize(&c, nearest_types[t], 0, 0);
    }
  for (int i = 0; i < 10; i++) {
    rcase c;
    random_rcase(&c);
    c.mode = LINEAR;
    check_resize(&c, KEEL_FLOAT16, 2e-2, 2e-2);
    check_resize(&c, KEEL_UINT8, 0, 0);
  }
}

/* Nearest on strings: 2x along the last axis with asymmetric floor. */
static void check_resize_strings(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_STRING, 2, (int64_t[]){1, 3});
  mb_output(g, "Y", KEEL_STRING, -1, NULL);
  mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){1, 2});
  mb_node *n = mb_add(g, "Resize", "X,,scales", "Y");
  mb_attr_s(n, "coordinate_transformation_mode", "asymmetric");
  mb_attr_s(n, "nearest_mode", "floor");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  char a[] = "a", b[] = "bb", c[] = "ccc";
  keel_string in[3] = {{a, 1}, {b, 2}, {c, 3}};
  keel_value_t *x = mb_tensor(s, KEEL_STRING, 2, (int64_t[]){1, 3}, in);
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &x, &st);
  CHECK_OK(st);
  const keel_string *o = y ? keel_value_data(y) : NULL;
  const char *want[6] = {"a", "a", "bb", "bb", "ccc", "ccc"};
  bool ok = o && keel_value_numel(y) == 6;
  for (int i = 0; ok && i < 6; i++) ok = o[i].len == strlen(want[i]) && !memcmp(o[i].data, want[i], o[i].len);
  CHECK(ok);
  keel_value_release(y);
  keel_value_release(x);
  keel_session_destroy(s);
}

/* The cases of the old opset-10 backend test and an explicit 2x nearest. */
static void check_resize_fixed(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 4});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1, 1, 0.6f, 0.6f});
  mb_attr_s(mb_add(g, "Resize", "X,scales", "Y"), "mode", "nearest");
  keel_session_t *s = mb_session(g, 10);
  CHECK(s != NULL);
  if (!s) return;
  float X[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 4}, X);
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &in, &st);
  CHECK_OK(st);
  CHECK(y && keel_value_numel(y) == 2 && keel_value_at(y, 0) == 1 && keel_value_at(y, 1) == 3);
  keel_value_release(y);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* ================================================ opset 18 additions */

/* Runs Resize with `axes` and sizes/scales for those axes only. */
static keel_value_t *run_axes(const int64_t *xdims, const float *xdata, int na, const int64_t *axes,
                              const void *vals, bool sizes, const char *policy, const char *mode) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, xdims);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  if (sizes) mb_init(g, "sizes", KEEL_INT64, 1, (int64_t[]){na}, vals);
  else mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){na}, vals);
  mb_node *n = mb_add(g, "Resize", sizes ? "X,,,sizes" : "X,,scales", "Y");
  mb_attr_s(n, "mode", mode);
  if (axes) mb_attr_ints(n, "axes", na, axes);
  if (policy) mb_attr_s(n, "keep_aspect_ratio_policy", policy);
  keel_session_t *s = mb_session(g, 18);
  if (!s) return NULL;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, xdims, xdata);
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &in, &st);
  CHECK_OK(st);
  keel_value_release(in);
  keel_session_destroy(s);
  return y;
}

static bool same_values(keel_value_t *a, keel_value_t *b) {
  if (!a || !b || keel_value_numel(a) != keel_value_numel(b)) return false;
  for (int64_t i = 0; i < keel_value_numel(a); i++)
    if (keel_value_at(a, i) != keel_value_at(b, i)) return false;
  return true;
}

static void check_resize_opset18(void) {
  int64_t dims[4] = {1, 2, 4, 6};
  float X[48];
  for (int i = 0; i < 48; i++) X[i] = (float)rndf(-4, 4);
  /* axes: the listed axes only, negative allowed; same as the full list */
  keel_value_t *a = run_axes(dims, X, 2, (int64_t[]){-2, 3}, (float[]){1.5f, 0.5f}, false, NULL, "linear");
  keel_value_t *b = run_axes(dims, X, 4, NULL, (float[]){1, 1, 1.5f, 0.5f}, false, NULL, "linear");
  CHECK(same_values(a, b));
  CHECK(a && keel_value_shape(a)[2] == 6 && keel_value_shape(a)[3] == 3);
  keel_value_release(a);
  keel_value_release(b);
  /* keep_aspect_ratio_policy: one scale min/max of sizes/in, dims rounded half up */
  const char *pol[2] = {"not_larger", "not_smaller"};
  for (int p = 0; p < 2; p++) {
    keel_value_t *y = run_axes(dims, X, 2, (int64_t[]){2, 3}, (int64_t[]){3, 3}, true, pol[p], "linear");
    rcase c = {.rank = 4, .mode = LINEAR, .ctm = HALF, .a = -0.75, .opset = 18};
    double s = p == 0 ? 0.5 : 0.75, x[48], want[256];
    memcpy(c.in, dims, sizeof dims);
    int64_t out[2][4] = {{1, 2, 2, 3}, {1, 2, 3, 5}}; /* 4*.5=2 6*.5=3; 4*.75=3 6*.75=4.5->5 */
    memcpy(c.out, out[p], sizeof c.out);
    c.scale[0] = c.scale[1] = 1, c.scale[2] = c.scale[3] = s;
    for (int i = 0; i < 48; i++) x[i] = X[i];
    ref_resize(&c, x, want);
    bool ok = y && keel_value_numel(y) == prod(4, c.out);
    for (int i = 0; ok && i < 4; i++) ok = keel_value_shape(y)[i] == c.out[i];
    for (int64_t i = 0; ok && i < prod(4, c.out); i++) ok = fabs(keel_value_at(y, i) - want[i]) < 1e-5;
    CHECK(ok);
    keel_value_release(y);
  }
}

/* ========================================================= Upsample */

static void check_upsample(int opset, int mode) {
  rcase c = {.rank = 3, .mode = mode, .ctm = ASYM, .simple = 1, .opset = opset};
  float sc[3] = {1, 2.5f, 1.5f};
  int64_t in[3] = {2, 3, 4};
  memcpy(c.in, in, sizeof in);
  for (int d = 0; d < 3; d++) c.scale[d] = sc[d], c.out[d] = (int64_t)floor(sc[d] * (double)in[d]);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 3, in);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  if (opset >= 9) mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){3}, sc);
  mb_node *n = mb_add(g, "Upsample", opset >= 9 ? "X,scales" : "X", "Y");
  mb_attr_s(n, "mode", MODES[mode]);
  if (opset < 9) mb_attr_floats(n, "scales", 3, sc);
  keel_session_t *s = mb_session(g, opset);
  CHECK(s != NULL);
  if (!s) return;
  float X[24];
  double x[24], want[256];
  for (int i = 0; i < 24; i++) x[i] = X[i] = (float)rndf(-3, 3);
  ref_resize(&c, x, want);
  keel_value_t *xin = mb_tensor(s, KEEL_FLOAT, 3, in, X);
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &xin, &st);
  CHECK_OK(st);
  bool ok = y && keel_value_numel(y) == prod(3, c.out);
  for (int64_t i = 0; ok && i < prod(3, c.out); i++) ok = fabs(keel_value_at(y, i) - want[i]) < 1e-5;
  CHECK(ok);
  keel_value_release(y);
  keel_value_release(xin);
  keel_session_destroy(s);
}

/* =================================================== Resize errors */

/* Bad scales and sizes given at run time: an error each, then a good run. */
static void check_resize_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2});
  mb_input(g, "scales", KEEL_FLOAT, -1, NULL);
  mb_input(g, "sizes", KEEL_INT64, -1, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_s(mb_add(g, "Resize", "X,,scales,sizes", "Y"), "mode", "linear");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  const char *names[3] = {"X", "scales", "sizes"};
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4});
  keel_value_t *sc3 = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, (float[]){1, 2, 2});
  keel_value_t *sc4 = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1, 1, 2, 2});
  keel_value_t *sc0 = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){0}, NULL);
  keel_value_t *szneg = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){1, 1, -2, 4});
  keel_value_t *sz4 = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){1, 1, 3, 3});
  keel_value_t *sz0 = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){0}, NULL);
  keel_value_t *scneg = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1, 1, -2, 2});
  keel_status st;
  keel_value_t *y;
  struct { keel_value_t *sc, *sz; const char *msg; } bad[] = {
      {sc3, sz0, "scales has 3 values for a rank-4 input"},
      {sc0, szneg, "sizes[2] = -2 is negative"},
      {sc4, sz4, "not both"},
      {sc0, sz0, "needs scales or sizes"},
      {scneg, sz0, "must be positive"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    y = run_n(s, 3, names, (keel_value_t *[]){x, bad[i].sc, bad[i].sz}, &st);
    CHECK(st == KEEL_ERR_SHAPE && y == NULL);
    CHECK(strstr(keel_last_error(), bad[i].msg) != NULL);
    if (!strstr(keel_last_error(), bad[i].msg)) fprintf(stderr, "  message: %s\n", keel_last_error());
  }
  y = run_n(s, 3, names, (keel_value_t *[]){x, sc4, sz0}, &st); /* still usable */
  CHECK_OK(st);
  CHECK(y && keel_value_numel(y) == 16 && keel_value_at(y, 0) == 1 && keel_value_at(y, 15) == 4);
  keel_value_release(y);
  y = run_n(s, 3, names, (keel_value_t *[]){x, sc0, sz4}, &st);
  CHECK_OK(st);
  CHECK(y && keel_value_numel(y) == 9 && fabs(keel_value_at(y, 4) - 2.5) < 1e-6);
  keel_value_release(y);
  keel_value_t *all[] = {x, sc3, sc4, sc0, szneg, sz4, sz0, scneg};
  for (size_t i = 0; i < 8; i++) keel_value_release(all[i]);
  keel_session_destroy(s);
}

/* A bad attribute fails at run time with KEEL_ERR_INVALID_MODEL. */
static void check_bad_attr(const char *op, const char *attr, const char *val, int opset) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1, 1, 2, 2});
  mb_attr_s(mb_add(g, op, !strcmp(op, "Resize") ? "X,,scales" : "X,scales", "Y"), attr, val);
  keel_session_t *s = mb_session(g, opset);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4});
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &x, &st);
  CHECK(st == KEEL_ERR_INVALID_MODEL && y == NULL);
  CHECK(strstr(keel_last_error(), val) != NULL);
  keel_value_release(x);
  keel_session_destroy(s);
}

/* ======================================================= GridSample */

typedef struct gcase {
  int mode, pad, align;        /* 0 bilinear 1 nearest 2 bicubic; zeros border reflection */
  int64_t n, c, h, w, ho, wo;
} gcase;

static double g_reflect(double x, double lo, double hi) {
  double span = hi - lo;
  if (x < lo) {
    double dx = lo - x;
    int64_t n = (int64_t)(dx / span);
    double r = dx - (double)n * span;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    double dx = x - hi;
    int64_t n = (int64_t)(dx / span);
    double r = dx - (double)n * span;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

static double g_pixel(const gcase *g, const double *img, int64_t r, int64_t c, const double *bd) {
  if (g->pad == 0) return (r >= 0 && r < g->h && c >= 0 && c < g->w) ? img[r * g->w + c] : 0;
  if (g->pad == 2) c = (int64_t)g_reflect((double)c, bd[0], bd[2]), r = (int64_t)g_reflect((double)r, bd[1], bd[3]);
  return img[clampi(r, g->h) * g->w + clampi(c, g->w)];
}

/* ONNX's GridSample reference, one output element. */
static double ref_grid(const gcase *g, const double *img, double nx, double ny) {
  double bd[4] = {-0.5, -0.5, (double)g->w - 0.5, (double)g->h - 0.5};
  if (g->align) bd[0] = bd[1] = 0, bd[2] = (double)g->w - 1, bd[3] = (double)g->h - 1;
  double x = g->align ? (nx + 1) / 2 * (double)(g->w - 1) : ((nx + 1) * (double)g->w - 1) / 2;
  double y = g->align ? (ny + 1) / 2 * (double)(g->h - 1) : ((ny + 1) * (double)g->h - 1) / 2;
  if (g->mode == 1) x = rint(x), y = rint(y);
  if (x < bd[0] || x > bd[2] || y < bd[1] || y > bd[3]) {
    if (g->pad == 1) x = fmin(fmax(x, 0), (double)g->w - 1), y = fmin(fmax(y, 0), (double)g->h - 1);
    if (g->pad == 2) x = g_reflect(x, bd[0], bd[2]), y = g_reflect(y, bd[1], bd[3]);
  }
  if (g->mode == 1) return g_pixel(g, img, (int64_t)y, (int64_t)x, bd);
  if (g->mode == 0) {
    double x1 = floor(x), y1 = floor(y), dx1 = x - x1, dy1 = y - y1, dx2 = 1 - dx1, dy2 = 1 - dy1;
    int64_t c1 = (int64_t)x1, r1 = (int64_t)y1;
    return dy2 * (dx2 * g_pixel(g, img, r1, c1, bd) + dx1 * g_pixel(g, img, r1, c1 + 1, bd)) +
           dy1 * (dx2 * g_pixel(g, img, r1 + 1, c1, bd) + dx1 * g_pixel(g, img, r1 + 1, c1 + 1, bd));
  }
  double x0 = floor(x) - 1, y0 = floor(y) - 1, dx = x - x0 - 1, dy = y - y0 - 1, v[4], cx[4], cy[4];
  for (int i = 0; i < 4; i++) cx[i] = ref_cubic_k(dx + 1 - i, -0.75), cy[i] = ref_cubic_k(dy + 1 - i, -0.75);
  double acc = 0;
  for (int i = 0; i < 4; i++) {
    v[i] = 0;
    for (int j = 0; j < 4; j++) v[i] += cx[j] * g_pixel(g, img, (int64_t)y0 + i, (int64_t)x0 + j, bd);
    acc += cy[i] * v[i];
  }
  return acc;
}

static void check_gridsample_case(const gcase *g) {
  static const char *const gm[] = {"bilinear", "nearest", "bicubic"};
  static const char *const gp[] = {"zeros", "border", "reflection"};
  mb_graph *gr = mb_graph_new("main");
  int64_t xd[4] = {g->n, g->c, g->h, g->w}, gd[4] = {g->n, g->ho, g->wo, 2};
  mb_input(gr, "X", KEEL_FLOAT, 4, xd);
  mb_input(gr, "G", KEEL_FLOAT, 4, gd);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "GridSample", "X,G", "Y");
  mb_attr_s(nd, "mode", gm[g->mode]);
  mb_attr_s(nd, "padding_mode", gp[g->pad]);
  mb_attr_i(nd, "align_corners", g->align);
  keel_session_t *s = mb_session(gr, 16);
  CHECK(s != NULL);
  if (!s) return;
  float X[512], G[512];
  double x[512];
  for (int64_t i = 0; i < prod(4, xd); i++) x[i] = X[i] = (float)rndf(-3, 3);
  for (int64_t i = 0; i < prod(4, gd); i++) /* exact steps hit borders and ties */
    G[i] = rnd(0, 2) ? (float)rndf(-1.6, 1.6) : (float)rnd(-6, 6) / 4.0f;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 4, xd, X), mb_tensor(s, KEEL_FLOAT, 4, gd, G)};
  keel_status st;
  keel_value_t *y = run_n(s, 2, (const char *[]){"X", "G"}, in, &st);
  CHECK_OK(st);
  bool ok = y != NULL;
  for (int64_t n = 0; ok && n < g->n; n++)
    for (int64_t c = 0; ok && c < g->c; c++)
      for (int64_t p = 0; ok && p < g->ho * g->wo; p++) {
        const float *gp2 = G + (n * g->ho * g->wo + p) * 2;
        double want = ref_grid(g, x + (n * g->c + c) * g->h * g->w, gp2[0], gp2[1]);
        double got = keel_value_at(y, (n * g->c + c) * g->ho * g->wo + p);
        ok = fabs(got - want) <= 1e-4 + 1e-4 * fabs(want);
        if (!ok) fprintf(stderr, "gridsample mode %d pad %d align %d: got %g want %g\n", g->mode, g->pad, g->align, got, want);
      }
  CHECK(ok);
  keel_value_release(y);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
}

static void check_gridsample(void) {
  for (int i = 0; i < 90; i++) {
    gcase g = {.mode = i % 3, .pad = (i / 3) % 3, .align = (i / 9) % 2};
    g.n = rnd(1, 2), g.c = rnd(1, 3), g.h = rnd(1, 5), g.w = rnd(1, 5), g.ho = rnd(1, 4), g.wo = rnd(1, 4);
    if (g.pad == 2 && g.align) g.h = rnd(2, 5), g.w = rnd(2, 5); /* a 1-pixel axis has nothing to fold in */
    check_gridsample_case(&g);
  }
  /* a grid that does not match X: an error, and the session lives on */
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2});
  mb_input(gr, "G", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(gr, "GridSample", "X,G", "Y");
  keel_session_t *s = mb_session(gr, 16);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2}, (float[]){1, 2, 3, 4});
  keel_value_t *bad = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 1, 3}, (float[]){0, 0, 0});
  keel_value_t *good = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 1, 2}, (float[]){0, 0});
  keel_status st;
  keel_value_t *y = run_n(s, 2, (const char *[]){"X", "G"}, (keel_value_t *[]){x, bad}, &st);
  CHECK(st == KEEL_ERR_SHAPE && !y);
  y = run_n(s, 2, (const char *[]){"X", "G"}, (keel_value_t *[]){x, good}, &st);
  CHECK_OK(st);
  CHECK(y && fabs(keel_value_at(y, 0) - 2.5) < 1e-6); /* centre of the 2x2 image */
  keel_value_release(y);
  keel_value_release(x);
  keel_value_release(bad);
  keel_value_release(good);
  keel_session_destroy(s);
}

/* ==================================================== GridSample 5-D */

/* 3-D sampling (opset 20+): trilinear or nearest, every padding mode,
 * against a reference that reads the 8 (or 1) voxels itself; when a point
 * leaves the volume on some dim, border and reflection act on all three
 * coordinates, as in the 2-D reference above. */
typedef struct vcase {
  int mode, pad, align;        /* 0 linear 1 nearest; zeros border reflection */
  int64_t n, c, dim[3], out[3];
} vcase;

static double v_voxel(const vcase *v, const double *img, const int64_t *q, const double *lo, const double *hi) {
  int64_t off = 0;
  for (int d = 0; d < 3; d++) {
    int64_t i = q[d];
    if (v->pad == 0 && (i < 0 || i >= v->dim[d])) return 0;
    if (v->pad == 2) i = (int64_t)g_reflect((double)i, lo[d], hi[d]);
    off = off * v->dim[d] + clampi(i, v->dim[d]);
  }
  return img[off];
}

static double ref_volume(const vcase *v, const double *img, const float *g) {
  double p[3], lo[3], hi[3];
  bool out = false;
  for (int d = 0; d < 3; d++) { /* g lists (x, y, z): z is dim 0 */
    double nv = g[2 - d], len = (double)v->dim[d];
    lo[d] = v->align ? 0 : -0.5, hi[d] = v->align ? len - 1 : len - 0.5;
    p[d] = v->align ? (nv + 1) / 2 * (len - 1) : ((nv + 1) * len - 1) / 2;
    if (v->mode == 1) p[d] = rint(p[d]);
    out = out || p[d] < lo[d] || p[d] > hi[d];
  }
  for (int d = 0; d < 3 && out; d++) {
    if (v->pad == 1) p[d] = fmin(fmax(p[d], 0), (double)v->dim[d] - 1);
    if (v->pad == 2) p[d] = g_reflect(p[d], lo[d], hi[d]);
  }
  if (v->mode == 1) return v_voxel(v, img, (int64_t[]){(int64_t)p[0], (int64_t)p[1], (int64_t)p[2]}, lo, hi);
  double acc = 0;
  for (int corner = 0; corner < 8; corner++) {
    int64_t q[3];
    double w = 1;
    for (int d = 0; d < 3; d++) {
      int hi1 = (corner >> d) & 1;
      double f = floor(p[d]);
      q[d] = (int64_t)f + hi1;
      w *= hi1 ? p[d] - f : 1 - (p[d] - f);
    }
    acc += w * v_voxel(v, img, q, lo, hi);
  }
  return acc;
}

static void check_gridsample_volume_case(const vcase *v) {
  static const char *const gm[] = {"linear", "nearest"};
  static const char *const gp[] = {"zeros", "border", "reflection"};
  mb_graph *gr = mb_graph_new("main");
  int64_t xd[5] = {v->n, v->c, v->dim[0], v->dim[1], v->dim[2]};
  int64_t gd[5] = {v->n, v->out[0], v->out[1], v->out[2], 3};
  mb_input(gr, "X", KEEL_FLOAT, 5, xd);
  mb_input(gr, "G", KEEL_FLOAT, 5, gd);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "GridSample", "X,G", "Y");
  mb_attr_s(nd, "mode", gm[v->mode]);
  mb_attr_s(nd, "padding_mode", gp[v->pad]);
  mb_attr_i(nd, "align_corners", v->align);
  keel_session_t *s = mb_session(gr, rnd(0, 1) ? 20 : 22);
  float X[1024], G[1024];
  double x[1024];
  int64_t vol = v->dim[0] * v->dim[1] * v->dim[2], opl = v->out[0] * v->out[1] * v->out[2];
  for (int64_t i = 0; i < prod(5, xd); i++) x[i] = X[i] = (float)rndf(-3, 3);
  for (int64_t i = 0; i < prod(5, gd); i++) G[i] = rnd(0, 2) ? (float)rndf(-1.6, 1.6) : (float)rnd(-6, 6) / 4.0f;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 5, xd, X), mb_tensor(s, KEEL_FLOAT, 5, gd, G)};
  keel_status st;
  keel_value_t *y = run_n(s, 2, (const char *[]){"X", "G"}, in, &st);
  CHECK_OK(st);
  bool ok = y != NULL && keel_value_rank(y) == 5;
  for (int64_t n = 0; ok && n < v->n; n++)
    for (int64_t c = 0; ok && c < v->c; c++)
      for (int64_t p = 0; ok && p < opl; p++) {
        double want = ref_volume(v, x + (n * v->c + c) * vol, G + (n * opl + p) * 3);
        double got = keel_value_at(y, (n * v->c + c) * opl + p);
        ok = fabs(got - want) <= 1e-4 + 1e-4 * fabs(want);
        if (!ok) fprintf(stderr, "gridsample 3-D mode %d pad %d align %d: got %g want %g\n", v->mode, v->pad, v->align, got, want);
      }
  CHECK(ok);
  keel_value_release(y);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
}

/* 5-D X before opset 20 is not defined; a grid whose last dim is not 3
 * is a shape error. */
static void check_gridsample_volume(void) {
  for (int i = 0; i < 60; i++) {
    vcase v = {.mode = i % 2, .pad = (i / 2) % 3, .align = (i / 6) % 2};
    v.n = rnd(1, 2), v.c = rnd(1, 2);
    for (int d = 0; d < 3; d++) v.dim[d] = rnd(v.pad == 2 && v.align ? 2 : 1, 4), v.out[d] = rnd(1, 3);
    check_gridsample_volume_case(&v);
  }
  for (int opset = 16; opset <= 20; opset += 4) {
    mb_graph *gr = mb_graph_new("main");
    mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
    mb_input(gr, "G", KEEL_FLOAT, -1, NULL);
    mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
    mb_add(gr, "GridSample", "X,G", "Y");
    keel_session_t *s = mb_session(gr, opset);
    keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 5, (int64_t[]){1, 1, 1, 2, 2}, (float[]){1, 2, 3, 4});
    keel_value_t *g = mb_tensor(s, KEEL_FLOAT, 5, (int64_t[]){1, 1, 1, 1, 2}, (float[]){0, 0});
    keel_status st;
    keel_value_t *y = run_n(s, 2, (const char *[]){"X", "G"}, (keel_value_t *[]){x, g}, &st);
    CHECK(st == (opset < 20 ? KEEL_ERR_UNSUPPORTED : KEEL_ERR_SHAPE) && !y);
    keel_value_release(x);
    keel_value_release(g);
    keel_session_destroy(s);
  }
}

/* ========================================================= AffineGrid */

/* Base coordinate i of len: linspace(-1, 1, len) with align_corners, the
 * centres of len equal cells of [-1, 1] without (a single cell: 0). */
static double ag_ref_base(int64_t i, int64_t len, int align) {
  if (len == 1) return align ? -1 : 0; /* arange(-1, 1.0001, inf) in ONNX's reference */
  return align ? -1 + 2.0 * (double)i / (double)(len - 1) : -1 + (2.0 * (double)i + 1) / (double)len;
}

static void check_affine_grid_case(int nd, int align) {
  int64_t size[5] = {rnd(1, 2), rnd(1, 3)}, n = size[0];
  for (int d = 0; d < nd; d++) size[2 + d] = rnd(1, 4);
  float theta[2 * 12];
  for (int i = 0; i < n * nd * (nd + 1); i++) theta[i] = (float)rndf(-2, 2);
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "T", KEEL_FLOAT, -1, NULL);
  mb_input(gr, "S", KEEL_INT64, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_i(mb_add(gr, "AffineGrid", "T,S", "Y"), "align_corners", align);
  keel_session_t *s = mb_session(gr, 20);
  int64_t td[3] = {n, nd, nd + 1}, sd = nd + 2;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 3, td, theta), mb_tensor(s, KEEL_INT64, 1, &sd, size)};
  keel_status st;
  keel_value_t *y = run_n(s, 2, (const char *[]){"T", "S"}, in, &st);
  CHECK_OK(st);
  bool ok = y && keel_value_rank(y) == nd + 2 && keel_value_shape(y)[nd + 1] == nd;
  int64_t at = 0;
  for (int64_t b = 0; ok && b < n; b++)
    for (int64_t z = 0; z < (nd == 3 ? size[2] : 1); z++)
      for (int64_t h = 0; h < size[nd]; h++)
        for (int64_t w = 0; w < size[nd + 1]; w++) {
          double base[4] = {ag_ref_base(w, size[nd + 1], align), ag_ref_base(h, size[nd], align), 0, 0};
          if (nd == 3) base[2] = ag_ref_base(z, size[2], align);
          base[nd] = 1;
          for (int i = 0; i < nd; i++, at++) {
            double want = 0;
            for (int j = 0; j <= nd; j++) want += theta[(b * nd + i) * (nd + 1) + j] * base[j];
            if (fabs(keel_value_at(y, at) - want) > 1e-5 + 1e-5 * fabs(want)) ok = false;
          }
        }
  CHECK(ok);
  keel_value_release(y);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
}

/* theta that does not match size, and a size of the wrong length. */
static void check_affine_grid(void) {
  for (int i = 0; i < 40; i++) check_affine_grid_case(2 + i % 2, (i / 2) % 2);
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "T", KEEL_FLOAT, -1, NULL);
  mb_input(gr, "S", KEEL_INT64, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(gr, "AffineGrid", "T,S", "Y");
  keel_session_t *s = mb_session(gr, 20);
  float th[12] = {0};
  int64_t s4[4] = {1, 1, 2, 2}, s3[3] = {1, 2, 2}, n4 = 4, n3 = 3;
  keel_value_t *t23 = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 2, 3}, th);
  keel_value_t *t34 = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 3, 4}, th);
  keel_value_t *v4 = mb_tensor(s, KEEL_INT64, 1, &n4, s4), *v3 = mb_tensor(s, KEEL_INT64, 1, &n3, s3);
  keel_status st;
  keel_value_t *y = run_n(s, 2, (const char *[]){"T", "S"}, (keel_value_t *[]){t34, v4}, &st);
  CHECK(st == KEEL_ERR_SHAPE && !y);
  y = run_n(s, 2, (const char *[]){"T", "S"}, (keel_value_t *[]){t23, v3}, &st);
  CHECK(st == KEEL_ERR_SHAPE && !y);
  y = run_n(s, 2, (const char *[]){"T", "S"}, (keel_value_t *[]){t23, v4}, &st);
  CHECK_OK(st);
  keel_value_release(y);
  keel_value_t *all[4] = {t23, t34, v4, v3};
  for (int i = 0; i < 4; i++) keel_value_release(all[i]);
  keel_session_destroy(s);
}

/* ========================================================= RoiAlign */

typedef struct acase {
  int avg, half, sr;
  int64_t n, c, h, w, oh, ow, r;
  double scale;
} acase;

/* One bilinear sample as onnxruntime takes it; max mode gets the largest
 * weighted corner. */
static double ref_sample(const acase *a, const double *img, double y, double x, bool max) {
  if (y < -1 || y > (double)a->h || x < -1 || x > (double)a->w) return 0;
  y = y <= 0 ? 0 : y, x = x <= 0 ? 0 : x;
  int64_t yl = (int64_t)y, xl = (int64_t)x, yh = yl + 1, xh = xl + 1;
  if (yl >= a->h - 1) yh = yl = a->h - 1, y = (double)yl;
  if (xl >= a->w - 1) xh = xl = a->w - 1, x = (double)xl;
  double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
  double v[4] = {hy * hx * img[yl * a->w + xl], hy * lx * img[yl * a->w + xh],
                 ly * hx * img[yh * a->w + xl], ly * lx * img[yh * a->w + xh]};
  return max ? fmax(fmax(v[0], v[1]), fmax(v[2], v[3])) : v[0] + v[1] + v[2] + v[3];
}

static double ref_roi(const acase *a, const double *img, const float *roi, int64_t ph, int64_t pw) {
  double off = a->half ? 0.5 : 0, x0 = roi[0] * a->scale - off, y0 = roi[1] * a->scale - off;
  double rw = roi[2] * a->scale - off - x0, rh = roi[3] * a->scale - off - y0;
  if (!a->half) rw = fmax(rw, 1), rh = fmax(rh, 1);
  double bh = rh / (double)a->oh, bw = rw / (double)a->ow;
  int64_t gh = a->sr ? a->sr : (int64_t)ceil(rh / (double)a->oh), gw = a->sr ? a->sr : (int64_t)ceil(rw / (double)a->ow);
  double acc = 0;
  for (int64_t iy = 0; iy < gh; iy++)
    for (int64_t ix = 0; ix < gw; ix++) {
      double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
      double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
      double v = ref_sample(a, img, yy, xx, !a->avg);
      acc = a->avg ? acc + v : (iy == 0 && ix == 0 ? v : fmax(acc, v));
    }
  return a->avg ? acc / (double)(gh * gw > 0 ? gh * gw : 1) : acc;
}

static keel_session_t *roi_session(const acase *a) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, (int64_t[]){a->n, a->c, a->h, a->w});
  mb_input(g, "R", KEEL_FLOAT, 2, (int64_t[]){a->r, 4});
  mb_input(g, "B", KEEL_INT64, 1, (int64_t[]){a->r});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(g, "RoiAlign", "X,R,B", "Y");
  mb_attr_s(nd, "mode", a->avg ? "avg" : "max");
  mb_attr_s(nd, "coordinate_transformation_mode", a->half ? "half_pixel" : "output_half_pixel");
  mb_attr_i(nd, "sampling_ratio", a->sr);
  mb_attr_i(nd, "output_height", a->oh);
  mb_attr_i(nd, "output_width", a->ow);
  mb_attr_f(nd, "spatial_scale", (float)a->scale);
  return mb_session(g, 16);
}

static void check_roialign_case(const acase *a) {
  keel_session_t *s = roi_session(a);
  CHECK(s != NULL);
  if (!s) return;
  float X[512], R[16];
  double x[512];
  int64_t B[4];
  for (int64_t i = 0; i < a->n * a->c * a->h * a->w; i++) x[i] = X[i] = (float)rndf(-2, 2);
  for (int64_t r = 0; r < a->r; r++) {
    B[r] = rnd(0, a->n - 1);
    R[r * 4] = (float)rndf(-1, (double)a->w), R[r * 4 + 1] = (float)rndf(-1, (double)a->h);
    R[r * 4 + 2] = R[r * 4] + (float)rndf(-0.5, (double)a->w), R[r * 4 + 3] = R[r * 4 + 1] + (float)rndf(-0.5, (double)a->h);
  }
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){a->n, a->c, a->h, a->w}, X),
                         mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){a->r, 4}, R),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){a->r}, B)};
  keel_status st;
  keel_value_t *y = run_n(s, 3, (const char *[]){"X", "R", "B"}, in, &st);
  CHECK_OK(st);
  bool ok = y && keel_value_numel(y) == a->r * a->c * a->oh * a->ow;
  for (int64_t r = 0; ok && r < a->r; r++)
    for (int64_t c = 0; ok && c < a->c; c++)
      for (int64_t p = 0; ok && p < a->oh * a->ow; p++) {
        double want = ref_roi(a, x + (B[r] * a->c + c) * a->h * a->w, R + r * 4, p / a->ow, p % a->ow);
        double got = keel_value_at(y, (r * a->c + c) * a->oh * a->ow + p);
        ok = fabs(got - want) <= 1e-4 + 1e-4 * fabs(want);
      }
  CHECK(ok);
  /* a batch index past N: KEEL_ERR_RUNTIME, and the session lives on */
  int64_t badb[4] = {0, a->n, 0, 0};
  keel_value_t *bb = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){a->r}, badb);
  keel_value_t *y2 = run_n(s, 3, (const char *[]){"X", "R", "B"}, (keel_value_t *[]){in[0], in[1], bb}, &st);
  CHECK(a->r < 2 || (st == KEEL_ERR_RUNTIME && !y2 && strstr(keel_last_error(), "batch_indices[1]")));
  keel_value_release(y2);
  keel_value_release(y);
  y = run_n(s, 3, (const char *[]){"X", "R", "B"}, in, &st);
  CHECK_OK(st);
  keel_value_release(y);
  keel_value_release(bb);
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
}

static void check_roialign(void) {
  for (int i = 0; i < 40; i++) {
    acase a = {.avg = i % 2, .half = (i / 2) % 2, .sr = (int)rnd(0, 2)};
    a.n = rnd(1, 2), a.c = rnd(1, 3), a.h = rnd(1, 6), a.w = rnd(1, 6);
    a.oh = rnd(1, 3), a.ow = rnd(1, 3), a.r = rnd(1, 4), a.scale = rnd(0, 1) ? 1.0 : 0.5;
    check_roialign_case(&a);
  }
}

/* A box inverted along one axis and 1e30 wide along the other (fuzzer):
 * the sample counts ceil(-1e30) x ceil(1e30) passed the "too many samples"
 * check (negative product) and 1e30 was cast to int64 (UB). An inverted box
 * samples nothing: zeros, as the reference gives. */
static void check_roialign_inverted_huge(void) {
  acase a = {.avg = 1, .half = 1, .n = 1, .c = 1, .h = 4, .w = 4, .oh = 1, .ow = 1, .r = 1,
             .scale = 1};
  keel_session_t *s = roi_session(&a);
  CHECK(s != NULL);
  if (!s) return;
  float X[16], R[4] = {0, 0, 1e30f, -1e30f};
  for (int i = 0; i < 16; i++) X[i] = 1;
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 4, 4}, X),
                         mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, 4}, R),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){0})};
  keel_status st;
  keel_value_t *y = run_n(s, 3, (const char *[]){"X", "R", "B"}, in, &st);
  CHECK_OK(st);
  CHECK(y && keel_value_numel(y) == 1 && keel_value_at(y, 0) == 0);
  keel_value_release(y);
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
}

/* ================================================ NonMaxSuppression */

static double iou_ref(const float *a, const float *b, int center) {
  double ay0, ax0, ay1, ax1, by0, bx0, by1, bx1;
  if (center) {
    ax0 = a[0] - a[2] / 2.0, ax1 = a[0] + a[2] / 2.0, ay0 = a[1] - a[3] / 2.0, ay1 = a[1] + a[3] / 2.0;
    bx0 = b[0] - b[2] / 2.0, bx1 = b[0] + b[2] / 2.0, by0 = b[1] - b[3] / 2.0, by1 = b[1] + b[3] / 2.0;
  } else {
    ay0 = fmin(a[0], a[2]), ay1 = fmax(a[0], a[2]), ax0 = fmin(a[1], a[3]), ax1 = fmax(a[1], a[3]);
    by0 = fmin(b[0], b[2]), by1 = fmax(b[0], b[2]), bx0 = fmin(b[1], b[3]), bx1 = fmax(b[1], b[3]);
  }
  double iw = fmin(ax1, bx1) - fmax(ax0, bx0), ih = fmin(ay1, by1) - fmax(ay0, by0);
  if (iw <= 0 || ih <= 0) return 0;
  double aa = (ax1 - ax0) * (ay1 - ay0), ab = (bx1 - bx0) * (by1 - by0);
  if (aa <= 0 || ab <= 0) return 0;
  return iw * ih / (aa + ab - iw * ih);
}

/* Greedy NMS: repeatedly the best unvisited box (score, then lower index). */
static int64_t ref_nms(int64_t B, int64_t C, int64_t S, const float *boxes, const float *scores,
                       int64_t maxo, double iou, double sthr, int center, int64_t *out) {
  int64_t n = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++) {
      bool seen[64] = {0};
      int64_t kept[64], nk = 0;
      const float *sc = scores + (b * C + c) * S;
      for (;;) {
        int64_t best = -1;
        for (int64_t i = 0; i < S; i++)
          if (!seen[i] && sc[i] > sthr && (best < 0 || sc[i] > sc[best])) best = i;
        if (best < 0 || nk >= maxo) break;
        seen[best] = true;
        bool keep = true;
        for (int64_t j = 0; j < nk; j++)
          if (iou_ref(boxes + (b * S + kept[j]) * 4, boxes + (b * S + best) * 4, center) > iou) keep = false;
        if (!keep) continue;
        kept[nk++] = best;
        out[n * 3] = b, out[n * 3 + 1] = c, out[n * 3 + 2] = best, n++;
      }
    }
  return n;
}

static void check_nms_case(int64_t B, int64_t C, int64_t S, int center) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "boxes", KEEL_FLOAT, 3, (int64_t[]){B, S, 4});
  mb_input(g, "scores", KEEL_FLOAT, 3, (int64_t[]){B, C, S});
  mb_input(g, "m", KEEL_INT64, 1, (int64_t[]){1});
  mb_input(g, "iou", KEEL_FLOAT, 1, (int64_t[]){1});
  mb_input(g, "st", KEEL_FLOAT, 1, (int64_t[]){1});
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_attr_i(mb_add(g, "NonMaxSuppression", "boxes,scores,m,iou,st", "Y"), "center_point_box", center);
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  float boxes[2 * 16 * 4], scores[2 * 3 * 16];
  for (int64_t i = 0; i < B * S; i++)
    for (int j = 0; j < 4; j++) boxes[i * 4 + j] = (float)rnd(0, 8) / 2.0f; /* ties and duplicates */
  for (int64_t i = 0; i < B * C * S; i++) scores[i] = (float)rnd(0, 10) / 10.0f;
  int64_t maxo = rnd(0, S + 1);
  float iou = (float)rnd(0, 4) / 4.0f, sthr = rnd(0, 1) ? 0.25f : -1.0f;
  int64_t want[2 * 3 * 16 * 3];
  int64_t nw = ref_nms(B, C, S, boxes, scores, maxo, iou, sthr, center, want);
  keel_value_t *in[5] = {mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){B, S, 4}, boxes),
                         mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){B, C, S}, scores),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, &maxo),
                         mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, &iou),
                         mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, &sthr)};
  const char *names[5] = {"boxes", "scores", "m", "iou", "st"};
  keel_status st;
  keel_value_t *y = run_n(s, 5, names, in, &st);
  CHECK_OK(st);
  bool ok = y && keel_value_rank(y) == 2 && keel_value_shape(y)[0] == nw && keel_value_shape(y)[1] == 3;
  for (int64_t i = 0; ok && i < nw * 3; i++) ok = keel_value_at(y, i) == (double)want[i];
  CHECK(ok);
  keel_value_release(y);
  float bad_iou = 1.5f; /* outside [0, 1]: an error, then a good run */
  keel_value_t *bi = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, &bad_iou), *keep = in[3];
  in[3] = bi;
  y = run_n(s, 5, names, in, &st);
  CHECK(st == KEEL_ERR_RUNTIME && !y);
  in[3] = keep;
  y = run_n(s, 5, names, in, &st);
  CHECK_OK(st);
  keel_value_release(y);
  keel_value_release(bi);
  for (int i = 0; i < 5; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
}

/* Boxes and scores that do not agree: KEEL_ERR_SHAPE; optional inputs
 * left out select nothing. */
static void check_nms_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "boxes", KEEL_FLOAT, -1, NULL);
  mb_input(g, "scores", KEEL_FLOAT, -1, NULL);
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_add(g, "NonMaxSuppression", "boxes,scores", "Y");
  keel_session_t *s = mb_session(g, 10);
  CHECK(s != NULL);
  if (!s) return;
  float bx[8] = {0, 0, 1, 1, 0, 0, 1, 1}, sc[3] = {1, 1, 1};
  keel_value_t *b = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 2, 4}, bx);
  keel_value_t *bad = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 1, 3}, sc);
  keel_value_t *good = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){1, 1, 2}, sc);
  const char *names[2] = {"boxes", "scores"};
  keel_status st;
  keel_value_t *y = run_n(s, 2, names, (keel_value_t *[]){b, bad}, &st);
  CHECK(st == KEEL_ERR_SHAPE && !y);
  y = run_n(s, 2, names, (keel_value_t *[]){b, good}, &st);
  CHECK_OK(st);
  CHECK(y && keel_value_shape(y)[0] == 0 && keel_value_shape(y)[1] == 3);
  keel_value_release(y);
  keel_value_release(b);
  keel_value_release(bad);
  keel_value_release(good);
  keel_session_destroy(s);
}

/* ================================================== hostile values */

/* NaN, infinite and far coordinates must give defined results (or a
 * clear error), never a crash or an undefined float-to-int conversion. */
static void check_hostile(void) {
  static const char *const pads[] = {"zeros", "border", "reflection"};
  static const char *const gmodes[] = {"bilinear", "nearest", "bicubic"};
  float X[4] = {1, 2, 3, 4}, G[8] = {NAN, 0, INFINITY, -INFINITY, 1e30f, -1e30f, 0.5f, NAN};
  for (int m = 0; m < 3; m++)
    for (int p = 0; p < 3; p++) {
      mb_graph *g = mb_graph_new("main");
      mb_input(g, "X", KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2});
      mb_input(g, "G", KEEL_FLOAT, 4, (int64_t[]){1, 1, 4, 2});
      mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
      mb_node *n = mb_add(g, "GridSample", "X,G", "Y");
      mb_attr_s(n, "mode", gmodes[m]);
      mb_attr_s(n, "padding_mode", pads[p]);
      keel_session_t *s = mb_session(g, 16);
      CHECK(s != NULL);
      if (!s) continue;
      keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2}, X),
                             mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 4, 2}, G)};
      keel_status st;
      keel_value_t *y = run_n(s, 2, (const char *[]){"X", "G"}, in, &st);
      CHECK_OK(st);
      for (int i = 0; y && i < 4; i++) CHECK(isfinite(keel_value_at(y, i)));
      keel_value_release(y);
      keel_value_release(in[0]);
      keel_value_release(in[1]);
      keel_session_destroy(s);
    }
  /* a NaN roi corner: KEEL_ERR_RUNTIME naming the roi */
  keel_status st;
  const char *rn[2] = {"X", "R"};
  int64_t rd[2][4] = {{1, 1, 2, 2}, {1, 4}};
  float R[4] = {0, NAN, 1, 1};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 4, rd[0]);
  mb_input(g, "R", KEEL_FLOAT, 2, rd[1]);
  mb_init(g, "B", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){0});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(g, "RoiAlign", "X,R,B", "Y");
  keel_session_t *s = mb_session(g, 16);
  CHECK(s != NULL);
  if (s) {
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 4, rd[0], X), mb_tensor(s, KEEL_FLOAT, 2, rd[1], R)};
    keel_value_t *y = run_n(s, 2, rn, in, &st);
    CHECK(st == KEEL_ERR_RUNTIME && !y && strstr(keel_last_error(), "rois[0]"));
    keel_value_release(in[0]);
    keel_value_release(in[1]);
    keel_session_destroy(s);
  }
  /* a NaN score sorts last and keeps the run defined */
  g = mb_graph_new("main");
  mb_init(g, "boxes", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4}, (float[]){0, 0, 1, 1, 5, 5, 6, 6});
  mb_init(g, "scores", KEEL_FLOAT, 3, (int64_t[]){1, 1, 2}, (float[]){NAN, 0.5f});
  mb_init(g, "m", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){5});
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_add(g, "NonMaxSuppression", "boxes,scores,m", "Y");
  s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *y = run_n(s, 0, NULL, NULL, &st);
  CHECK_OK(st);
  CHECK(y && keel_value_shape(y)[0] == 2 && keel_value_at(y, 2) == 1 && keel_value_at(y, 5) == 0);
  keel_value_release(y);
  keel_session_destroy(s);
}

/* Zero-size outputs are fine; growing an empty axis is an error. */
static void check_resize_empty(void) {
  const char *names[2] = {"X", "sizes"};
  keel_status st;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, -1});
  mb_input(g, "sizes", KEEL_INT64, 1, (int64_t[]){2});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_s(mb_add(g, "Resize", "X,,,sizes", "Y"), "mode", "cubic");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
  keel_value_t *x0 = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 0}, NULL);
  keel_value_t *z = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){0, 5});
  keel_value_t *grow = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, 3});
  keel_value_t *y = run_n(s, 2, names, (keel_value_t *[]){x, z}, &st);
  CHECK_OK(st);
  CHECK(y && keel_value_numel(y) == 0 && keel_value_shape(y)[1] == 5);
  keel_value_release(y);
  y = run_n(s, 2, names, (keel_value_t *[]){x0, grow}, &st);
  CHECK(st == KEEL_ERR_SHAPE && !y && strstr(keel_last_error(), "empty"));
  keel_value_t *all[4] = {x, x0, z, grow};
  for (int i = 0; i < 4; i++) keel_value_release(all[i]);
  keel_session_destroy(s);
}

/* A nearest upsample to (4096, 1, 64, 3) from (2, 1, 2, 3), rows of 3
 * (fuzzer: a 50M-element case took 16 s under the sanitizers, row by row).
 * Repeated indices now copy the block just written; checked element by
 * element against floor(o * in / out) (asymmetric, floor). */
static void check_resize_nearest_repeats(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  int64_t out[4] = {4096, 1, 64, 3}, in[4] = {2, 1, 2, 3};
  mb_init(g, "sizes", KEEL_INT64, 1, (int64_t[]){4}, out);
  mb_node *n = mb_add(g, "Resize", "X,,,sizes", "Y");
  mb_attr_s(n, "mode", "nearest");
  mb_attr_s(n, "coordinate_transformation_mode", "asymmetric");
  mb_attr_s(n, "nearest_mode", "floor");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  float x[12];
  for (int i = 0; i < 12; i++) x[i] = (float)i;
  keel_value_t *xv = mb_tensor(s, KEEL_FLOAT, 4, in, x);
  keel_status st;
  keel_value_t *y = run_n(s, 1, (const char *[]){"X"}, &xv, &st);
  CHECK_OK(st);
  const float *yd = y ? keel_value_data(y) : NULL;
  int64_t bad = 0;
  for (int64_t a = 0; yd && a < 4096; a++)
    for (int64_t c = 0; c < 64; c++)
      for (int64_t d = 0; d < 3; d++)
        bad += yd[(a * 64 + c) * 3 + d] != x[(a * 2 / 4096) * 6 + (c * 2 / 64) * 3 + d];
  CHECK(yd && keel_value_numel(y) == 4096 * 64 * 3 && bad == 0);
  keel_value_release(y), keel_value_release(xv);
  keel_session_destroy(s);
}

int main(void) {
  check_resize_random();
  check_resize_channels_last();
  check_resize_types();
  check_resize_fixed();
  check_resize_strings();
  check_resize_opset18();
  check_upsample(9, NEAREST);
  check_upsample(9, LINEAR);
  check_upsample(7, NEAREST);
  check_upsample(7, LINEAR);
  check_resize_errors();
  check_bad_attr("Resize", "mode", "bogus", 13);
  check_bad_attr("Resize", "coordinate_transformation_mode", "sideways", 13);
  check_bad_attr("Resize", "nearest_mode", "randomly", 13);
  check_bad_attr("Upsample", "mode", "cubic", 9);
  check_gridsample();
  check_gridsample_volume();
  check_affine_grid();
  check_roialign();
  check_roialign_inverted_huge();
  for (int i = 0; i < 40; i++) check_nms_case(rnd(1, 2), rnd(1, 3), rnd(1, 16), (int)rnd(0, 1));
  check_nms_errors();
  check_hostile();
  check_resize_empty();
  check_resize_nearest_repeats();
  return check_report();
}
