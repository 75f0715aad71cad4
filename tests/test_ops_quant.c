/* test_ops_quant.c: QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear against C references (rounding half to even,
 * saturation, NaN/inf, per-axis layouts, round trips), the training
 * optimizers Adagrad/Adam/Momentum against their update formulas written
 * out here, and error cases that must leave the session usable. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static float frand(float lo, float hi) {
  return lo + (hi - lo) * (float)(next() % 1000000) / 1000000.0f;
}

/* ======================================================== references */

/* Round half to even, written without rint so it checks the kernel's. */
static double rne(double v) {
  double f = floor(v), d = v - f;
  if (d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0)) f += 1;
  return f;
}

/* ONNX QuantizeLinear for float data; NaN goes to the zero point. */
static int ref_quant(float x, float s, int zp, int lo, int hi) {
  float q = x / s;
  if (q != q) return zp;
  double v = rne(q) + zp;
  return v < lo ? lo : v > hi ? hi : (int)v;
}

/* ============================================================ helpers */

static keel_value_t *run1(keel_session_t *s, const char **names, keel_value_t **in, int n,
                          keel_status want) {
  keel_value_t *out[3] = {0};
  CHECK_STATUS(keel_run(s, names, in, (size_t)n, out), want);
  keel_value_release(out[1]);
  keel_value_release(out[2]);
  return out[0];
}

static void release_all(keel_value_t **v, int n) {
  for (int i = 0; i < n; i++) keel_value_release(v[i]);
}

/* A one-node Quantize/DequantizeLinear session over x, scale and zp
 * (zp_dtype 0: omitted). */
static keel_session_t *q_session(const char *op, int opset, int xdt, int sdt, int zdt,
                                 int64_t axis) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", xdt, -1, NULL);
  mb_input(g, "s", sdt, -1, NULL);
  if (zdt) mb_input(g, "z", zdt, -1, NULL);
  mb_output(g, "y", KEEL_UNDEFINED, -1, NULL);
  mb_node *n = mb_add(g, op, zdt ? "x,s,z" : "x,s", "y");
  if (axis != 1) mb_attr_i(n, "axis", axis);
  return mb_session(g, opset);
}

static const char *QNAMES[] = {"x", "s", "z"};

/* ================================================= QuantizeLinear */

/* Per-tensor: random values, exact ties, far out of range, NaN and inf,
 * for uint8 and int8 and for an omitted zero point. */
static void check_quantize_tensor(int zdt) {
  keel_session_t *s = q_session("QuantizeLinear", 13, KEEL_FLOAT, KEEL_FLOAT, zdt, 1);
  CHECK(s != NULL);
  if (!s) return;
  enum { N = 400 };
  float x[N], sc = 0.25f;
  int lo = zdt == KEEL_INT8 ? -128 : 0, hi = zdt == KEEL_INT8 ? 127 : 255;
  int zp = zdt == KEEL_INT8 ? -3 : zdt ? 131 : 0;
  for (int i = 0; i < N; i++) {
    int kind = (int)(next() % 4);
    if (kind == 0) x[i] = frand(-40, 40);
    else if (kind == 1) x[i] = ((float)(int)(next() % 200) - 100.5f) * sc; /* a tie */
    else if (kind == 2) x[i] = frand(-1e6f, 1e6f);
    else x[i] = (float)((int)(next() % 2000) - 1000) * 0.125f;
  }
  x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 0.125f, x[4] = -0.125f, x[5] = 0.375f;
  int8_t z8 = (int8_t)zp;
  uint8_t zu = (uint8_t)zp;
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N}, x),
                         mb_tensor(s, KEEL_FLOAT, 0, NULL, &sc),
                         zdt ? mb_tensor(s, zdt, 0, NULL, zdt == KEEL_INT8 ? (void *)&z8 : &zu) : NULL};
  keel_value_t *y = run1(s, QNAMES, in, zdt ? 3 : 2, KEEL_OK);
  CHECK(y && (int)keel_value_dtype(y) == (zdt ? zdt : KEEL_UINT8));
  int bad = 0;
  for (int i = 0; y && i < N; i++)
    if (keel_value_at(y, i) != ref_quant(x[i], sc, zp, lo, hi)) bad++;
  CHECK(bad == 0);
  if (y) { /* ties go to even: 0.125/0.25 = 0.5 -> 0, 0.375/0.25 = 1.5 -> 2 */
    CHECK(keel_value_at(y, 3) == zp && keel_value_at(y, 4) == zp && keel_value_at(y, 5) == zp + 2);
    CHECK(keel_value_at(y, 0) == zp && keel_value_at(y, 1) == hi && keel_value_at(y, 2) == lo);
  }
  keel_value_release(y);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* Per-axis along axis 1 and axis -1 of a [2, 3, 4] tensor. */
static void check_quantize_axis(int64_t axis) {
  keel_session_t *s = q_session("QuantizeLinear", 13, KEEL_FLOAT, KEEL_FLOAT, KEEL_INT8, axis);
  CHECK(s != NULL);
  if (!s) return;
  int64_t shape[3] = {2, 3, 4};
  int ax = axis < 0 ? (int)axis + 3 : (int)axis;
  int64_t nc = shape[ax];
  float x[24], sc[4] = {0.5f, 2.0f, 0.1f, 3.0f};
  int8_t zp[4] = {-5, 0, 7, 100};
  for (int i = 0; i < 24; i++) x[i] = frand(-300, 300);
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 3, shape, x),
                         mb_tensor(s, KEEL_FLOAT, 1, &nc, sc), mb_tensor(s, KEEL_INT8, 1, &nc, zp)};
  keel_value_t *y = run1(s, QNAMES, in, 3, KEEL_OK);
  int64_t inner = ax == 2 ? 1 : ax == 1 ? 4 : 12;
  for (int i = 0; y && i < 24; i++) {
    int c = (int)((i / inner) % nc);
    CHECK(keel_value_at(y, i) == ref_quant(x[i], sc[c], zp[c], -128, 127));
  }
  keel_value_release(y);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* float16 input goes through float staging; same answers as float. */
static void check_quantize_half(void) {
  keel_session_t *s = q_session("QuantizeLinear", 13, KEEL_FLOAT16, KEEL_FLOAT, KEEL_UINT8, 1);
  CHECK(s != NULL);
  if (!s) return;
  uint16_t xh[4] = {0x3C00, 0xC500, 0x3800, 0x7C00}; /* 1, -5, 0.5, inf */
  float xf[4] = {1, -5, 0.5f, INFINITY}, sc = 0.5f;
  uint8_t zp = 10;
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT16, 1, (int64_t[]){4}, xh),
                         mb_tensor(s, KEEL_FLOAT, 0, NULL, &sc), mb_tensor(s, KEEL_UINT8, 0, NULL, &zp)};
  keel_value_t *y = run1(s, QNAMES, in, 3, KEEL_OK);
  for (int i = 0; y && i < 4; i++) CHECK(keel_value_at(y, i) == ref_quant(xf[i], sc, 10, 0, 255));
  keel_value_release(y);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* ================================================ DequantizeLinear */

static void check_dequantize(int xdt, int64_t axis) {
  bool zp_given = xdt != KEEL_INT32;
  keel_session_t *s =
      q_session("DequantizeLinear", 13, xdt, KEEL_FLOAT, zp_given ? xdt : 0, axis);
  CHECK(s != NULL);
  if (!s) return;
  int64_t shape[2] = {3, 5}, nc = axis == 0 ? 3 : 5;
  uint8_t xb[15 * 4], zb[5 * 4];
  for (size_t i = 0; i < sizeof xb; i++) xb[i] = (uint8_t)next();
  for (size_t i = 0; i < sizeof zb; i++) zb[i] = (uint8_t)next();
  float sc[5] = {0.5f, 0.03f, 2.0f, 7.0f, 1e-3f};
  keel_value_t *in[3] = {mb_tensor(s, xdt, 2, shape, xb), mb_tensor(s, KEEL_FLOAT, 1, &nc, sc),
                         zp_given ? mb_tensor(s, xdt, 1, &nc, zb) : NULL};
  keel_value_t *y = run1(s, QNAMES, in, zp_given ? 3 : 2, KEEL_OK);
  CHECK(y && keel_value_dtype(y) == KEEL_FLOAT);
  for (int i = 0; y && i < 15; i++) {
    int c = axis == 0 ? i / 5 : i % 5;
    int64_t xv = xdt == KEEL_UINT8 ? xb[i] : xdt == KEEL_INT8 ? (int8_t)xb[i] : ((int32_t *)xb)[i];
    int64_t zv = !zp_given ? 0 : xdt == KEEL_UINT8 ? zb[c] : (int8_t)zb[c];
    CHECK(keel_value_at(y, i) == (float)(xv - zv) * sc[c]);
  }
  keel_value_release(y);
  release_all(in, 3);
  keel_session_destroy(s);
}

/* quantize -> dequantize stays within half a step for in-range data. */
static void check_round_trip(void) {
  keel_session_t *q = q_session("QuantizeLinear", 10, KEEL_FLOAT, KEEL_FLOAT, KEEL_UINT8, 1);
  keel_session_t *d = q_session("DequantizeLinear", 10, KEEL_UINT8, KEEL_FLOAT, KEEL_UINT8, 1);
  CHECK(q && d);
  if (!q || !d) goto done;
  enum { N = 256 };
  float x[N], sc = 0.05f;
  uint8_t zp = 128;
  for (int i = 0; i < N; i++) x[i] = frand(-6.3f, 6.3f);
  keel_value_t *in[3] = {mb_tensor(q, KEEL_FLOAT, 1, (int64_t[]){N}, x),
                         mb_tensor(q, KEEL_FLOAT, 0, NULL, &sc), mb_tensor(q, KEEL_UINT8, 0, NULL, &zp)};
  keel_value_t *y = run1(q, QNAMES, in, 3, KEEL_OK);
  keel_value_t *in2[3] = {y, in[1], in[2]};
  keel_value_t *back = y ? run1(d, QNAMES, in2, 3, KEEL_OK) : NULL;
  int bad = 0;
  for (int i = 0; back && i < N; i++)
    if (fabs(keel_value_at(back, i) - x[i]) > sc * 0.5 + 1e-6) bad++;
  CHECK(back && bad == 0);
  keel_value_release(back);
  keel_value_release(y);
  release_all(in, 3);
done:
  keel_session_destroy(q);
  keel_session_destroy(d);
}

/* ========================================== DynamicQuantizeLinear */

static void check_dynamic_case(keel_session_t *s, const float *x, int n) {
  float lo = 0, hi = 0;
  for (int i = 0; i < n; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
  float sc = (hi - lo) / 255.0f;
  int zp = sc > 0 ? (int)fmin(255, fmax(0, rne(-lo / sc))) : 0;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){n}, x), *out[3] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
  if (out[0] && out[1] && out[2]) {
    CHECK(keel_value_at(out[1], 0) == sc && keel_value_rank(out[1]) == 0);
    CHECK(keel_value_at(out[2], 0) == zp && keel_value_dtype(out[2]) == KEEL_UINT8);
    for (int i = 0; i < n; i++)
      CHECK(keel_value_at(out[0], i) == (sc > 0 ? ref_quant(x[i], sc, zp, 0, 255) : 0));
  }
  release_all(out, 3);
  keel_value_release(in);
}

static void check_dynamic(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, -1, NULL);
  mb_output(g, "y", KEEL_UINT8, -1, NULL);
  mb_output(g, "ys", KEEL_FLOAT, -1, NULL);
  mb_output(g, "yz", KEEL_UINT8, -1, NULL);
  mb_add(g, "DynamicQuantizeLinear", "x", "y,ys,yz");
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = frand(-3, 7);
  check_dynamic_case(s, x, 64);
  for (int i = 0; i < 64; i++) x[i] = frand(0.5f, 4); /* all positive: zp 0 */
  check_dynamic_case(s, x, 64);
  for (int i = 0; i < 64; i++) x[i] = frand(-4, -0.5f); /* all negative: zp 255 */
  check_dynamic_case(s, x, 64);
  memset(x, 0, sizeof x); /* all zero: scale 0, no 0/0 */
  check_dynamic_case(s, x, 8);
  keel_session_destroy(s);
}

/* ====================================================== optimizers */

/* The model with the ai.onnx.preview.training opset imported too. */
static keel_session_t *training_session(mb_graph *g) {
  size_t len;
  uint8_t *m = mb_model_domains(g, 13, "ai.onnx.preview.training", 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(m, len, NULL, NULL, &s);
  if (st) fprintf(stderr, "training_session: %s\n", keel_last_error());
  free(m);
  return s;
}

typedef struct optcase {
  const char *op, *mode;
  int groups, ntensors, dtype;
  int64_t t;
  float norm, eps, alpha, beta, decay, post;
} optcase;

/* The update rules as the ONNX spec writes them, one element at a time. */
static void ref_opt(const optcase *c, double r, const double *in, double *out) {
  double x = in[0], g = c->norm * x + in[1];
  if (!strcmp(c->op, "Adagrad")) {
    double rr = r / (1 + (double)c->t * c->decay), h = in[2] + g * g;
    out[0] = x - rr * g / (sqrt(h) + c->eps), out[1] = h;
  } else if (!strcmp(c->op, "Adam")) {
    double v = c->alpha * in[2] + (1 - c->alpha) * g;
    double h = c->beta * in[3] + (1 - c->beta) * g * g;
    double rr = c->t > 0 ? r * sqrt(1 - pow(c->beta, (double)c->t)) / (1 - pow(c->alpha, (double)c->t)) : r;
    out[0] = (1 - c->post) * (x - rr * v / (sqrt(h) + c->eps)), out[1] = v, out[2] = h;
  } else {
    double v = c->alpha * in[2] + (c->t > 0 ? c->beta : 1) * g;
    out[0] = x - r * (!strcmp(c->mode, "nesterov") ? g + c->alpha * v : v), out[1] = v;
  }
}

static mb_graph *opt_graph(const optcase *c) {
  mb_graph *g = mb_graph_new("main");
  char ins[256] = "R,T", outs[256] = "", nm[16];
  mb_input(g, "R", KEEL_FLOAT, 0, NULL);
  mb_input(g, "T", KEEL_INT64, 0, NULL);
  for (int k = 0; k < c->groups * c->ntensors; k++) {
    snprintf(nm, sizeof nm, "I%d", k);
    mb_input(g, nm, c->dtype, 1, (int64_t[]){3});
    strcat(ins, ","), strcat(ins, nm);
  }
  for (int k = 0; k < (c->groups - 1) * c->ntensors; k++) {
    snprintf(nm, sizeof nm, "O%d", k);
    mb_output(g, nm, c->dtype, -1, NULL);
    strcat(outs, k ? "," : ""), strcat(outs, nm);
  }
  mb_node *n = mb_add(g, c->op, ins, outs);
  mb_domain(n, "ai.onnx.preview.training");
  mb_attr_f(n, "norm_coefficient", c->norm);
  if (strcmp(c->op, "Momentum")) mb_attr_f(n, "epsilon", c->eps);
  if (strcmp(c->op, "Adagrad")) mb_attr_f(n, "alpha", c->alpha), mb_attr_f(n, "beta", c->beta);
  if (!strcmp(c->op, "Adagrad")) mb_attr_f(n, "decay_factor", c->decay);
  if (!strcmp(c->op, "Adam")) mb_attr_f(n, "norm_coefficient_post", c->post);
  if (c->mode) mb_attr_s(n, "mode", c->mode);
  return g;
}

static void check_optimizer(const optcase *c) {
  keel_session_t *s = training_session(opt_graph(c));
  CHECK(s != NULL);
  if (!s) return;
  enum { MAXV = 2 + 4 * 2 };
  const char *names[MAXV] = {"R", "T", "I0", "I1", "I2", "I3", "I4", "I5", "I6", "I7"};
  keel_value_t *in[MAXV] = {0}, *out[MAXV] = {0};
  float r = 0.1f;
  double vals[8][3];
  in[0] = mb_tensor(s, KEEL_FLOAT, 0, NULL, &r);
  in[1] = mb_tensor(s, KEEL_INT64, 0, NULL, &c->t);
  int nin = c->groups * c->ntensors;
  for (int k = 0; k < nin; k++) {
    float f[3];
    double d[3];
    bool sq = k >= 2 * c->ntensors; /* H/V groups: keep H >= 0 */
    for (int j = 0; j < 3; j++) d[j] = f[j] = sq ? frand(0, 2) : frand(-2, 2);
    memcpy(vals[k], d, sizeof d);
    in[2 + k] = mb_tensor(s, c->dtype, 1, (int64_t[]){3}, c->dtype == KEEL_FLOAT ? (void *)f : d);
  }
  CHECK_OK(keel_run(s, names, in, (size_t)(2 + nin), out));
  for (int i = 0; i < c->ntensors; i++)
    for (int j = 0; j < 3; j++) {
      double a[4], b[3];
      for (int gi = 0; gi < c->groups; gi++) a[gi] = vals[gi * c->ntensors + i][j];
      ref_opt(c, (double)r, a, b);
      for (int o = 0; o + 1 < c->groups; o++) {
        keel_value_t *v = out[o * c->ntensors + i];
        CHECK(v && (int)keel_value_dtype(v) == c->dtype);
        if (v) CHECK_NEAR(keel_value_at(v, j), b[o], 1e-5 * (1 + fabs(b[o])));
      }
    }
  release_all(out, MAXV);
  release_all(in, MAXV);
  keel_session_destroy(s);
}

static void check_optimizers(void) {
  static const optcase cases[] = {
      {"Adagrad", NULL, 3, 1, KEEL_FLOAT, 0, 0.001f, 1e-5f, 0, 0, 0.1f, 0},
      {"Adagrad", NULL, 3, 2, KEEL_DOUBLE, 7, 0.01f, 1e-6f, 0, 0, 0.3f, 0},
      {"Adam", NULL, 4, 1, KEEL_FLOAT, 0, 0.001f, 1e-7f, 0.95f, 0.1f, 0, 0},
      {"Adam", NULL, 4, 2, KEEL_FLOAT, 5, 0.02f, 1e-2f, 0.9f, 0.85f, 0, 0.1f},
      {"Adam", NULL, 4, 1, KEEL_DOUBLE, 3, 0, 1e-6f, 0.8f, 0.999f, 0, 0.01f},
      {"Momentum", "standard", 3, 1, KEEL_FLOAT, 0, 0.001f, 0, 0.95f, 0.1f, 0, 0},
      {"Momentum", "standard", 3, 2, KEEL_FLOAT, 4, 0.001f, 0, 0.9f, 0.85f, 0, 0},
      {"Momentum", "nesterov", 3, 2, KEEL_DOUBLE, 2, 0.01f, 0, 0.95f, 0.5f, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_optimizer(&cases[i]);
}

/* ========================================================== errors */

/* A per-axis scale with the wrong count, a zero point of another type and
 * per-axis data at opset 10 are errors that leave the session usable. */
static void check_quant_errors(void) {
  keel_session_t *s = q_session("DequantizeLinear", 13, KEEL_UINT8, KEEL_FLOAT, KEEL_UINT8, 1);
  CHECK(s != NULL);
  if (!s) return;
  uint8_t x[6] = {1, 2, 3, 4, 5, 6}, z[4] = {0};
  float sc[4] = {1, 2, 3, 4};
  keel_value_t *in[3] = {mb_tensor(s, KEEL_UINT8, 2, (int64_t[]){2, 3}, x),
                         mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, sc),
                         mb_tensor(s, KEEL_UINT8, 1, (int64_t[]){4}, z)};
  keel_value_release(run1(s, QNAMES, in, 3, KEEL_ERR_SHAPE));
  CHECK(strstr(keel_last_error(), "x_scale has 4 values, axis 1 has 3") != NULL);
  keel_value_t *good[3] = {in[0], mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, sc),
                           mb_tensor(s, KEEL_UINT8, 1, (int64_t[]){3}, z)};
  keel_value_t *y = run1(s, QNAMES, good, 3, KEEL_OK);
  CHECK(y && keel_value_at(y, 5) == 18);
  keel_value_release(y);
  keel_value_t *bad_z = mb_tensor(s, KEEL_INT8, 1, (int64_t[]){3}, z);
  keel_value_t *in3[3] = {in[0], good[1], bad_z};
  keel_value_release(run1(s, QNAMES, in3, 3, KEEL_ERR_SHAPE));
  keel_value_release(bad_z);
  release_all(good + 1, 2);
  release_all(in + 1, 2);
  keel_session_destroy(s);
  s = q_session("QuantizeLinear", 10, KEEL_FLOAT, KEEL_FLOAT, KEEL_UINT8, 1);
  float xf[6] = {0};
  keel_value_t *in4[3] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, xf),
                          mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, sc),
                          mb_tensor(s, KEEL_UINT8, 1, (int64_t[]){3}, z)};
  keel_value_release(run1(s, QNAMES, in4, 3, KEEL_ERR_SHAPE));
  CHECK(strstr(keel_last_error(), "opset 13") != NULL);
  release_all(in4, 3);
  keel_value_release(in[0]);
  keel_session_destroy(s);
}

/* A bad Momentum mode and a variadic count that does not split into
 * groups: model errors raised at run time. */
static void check_opt_errors(void) {
  optcase c = {"Momentum", "heavy-ball", 3, 1, KEEL_FLOAT, 1, 0, 0, 0.9f, 0.5f, 0, 0};
  keel_session_t *s = training_session(opt_graph(&c));
  CHECK(s != NULL);
  if (!s) return;
  float r = 0.1f, v[3] = {1, 2, 3};
  int64_t t = 1;
  keel_value_t *in[5] = {mb_tensor(s, KEEL_FLOAT, 0, NULL, &r), mb_tensor(s, KEEL_INT64, 0, NULL, &t)};
  for (int i = 2; i < 5; i++) in[i] = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, v);
  keel_value_t *out[2] = {0};
  const char *names[5] = {"R", "T", "I0", "I1", "I2"};
  CHECK_STATUS(keel_run(s, names, in, 5, out), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "heavy-ball") != NULL);
  keel_session_destroy(s);
  c = (optcase){"Adagrad", NULL, 2, 1, KEEL_FLOAT, 1, 0, 0, 0, 0, 0, 0}; /* 4 inputs */
  s = training_session(opt_graph(&c));
  CHECK(s != NULL);
  if (s) CHECK_STATUS(keel_run(s, names, in, 4, out), KEEL_ERR_INVALID_MODEL);
  keel_session_destroy(s);
  release_all(in, 5);
}

int main(void) {
  check_quantize_tensor(KEEL_UINT8);
  check_quantize_tensor(KEEL_INT8);
  check_quantize_tensor(0);
  check_quantize_axis(1);
  check_quantize_axis(-1);
  check_quantize_axis(0);
  check_quantize_half();
  check_dequantize(KEEL_UINT8, 1);
  check_dequantize(KEEL_INT8, 0);
  check_dequantize(KEEL_INT32, -1);
  check_round_trip();
  check_dynamic();
  check_optimizers();
  check_quant_errors();
  check_opt_errors();
  return check_report();
}
