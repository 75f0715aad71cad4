/* test_ops_unary.c: the unary family through real one-node sessions, each
 * op against libm computed here in double on edge values (0, -0, tiny,
 * huge, NaN, +-inf) for float, double, float16 and bfloat16; integer
 * variants; Clip, IsInf and Dropout by opset; Cast between every numeric
 * pair and to / from strings; and in-place reuse that must not clobber a
 * value another node still reads.
 *
 * The reference rounds to float16 / bfloat16 with its own code
 * (round_fmt), not keel's converters, so a wrong rounding in keel shows. */
#include <float.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "keel_stats.h"
#include "mb.h"

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))
static bool is_signed(int dt) {
  return dt == KEEL_INT8 || dt == KEEL_INT16 || dt == KEEL_INT32 || dt == KEEL_INT64;
}

/* ======================================================== references */

/* d rounded to nearest even in a binary format with p significant bits,
 * smallest normal exponent emin and largest exponent emax. */
static double round_fmt(double d, int p, int emin, int emax) {
  if (!isfinite(d) || d == 0) return d;
  int e;
  frexp(d, &e); /* |d| in [2^(e-1), 2^e) */
  int lsb = (e - 1 < emin ? emin : e - 1) - (p - 1);
  double r = ldexp(nearbyint(ldexp(d, -lsb)), lsb);
  if (fabs(r) >= ldexp(1, emax + 1)) return copysign(INFINITY, d);
  return r;
}
/* One unit in the last place of d in that format. */
static double ulp_fmt(double d, int p, int emin) {
  int e;
  frexp(d == 0 || !isfinite(d) ? 1 : d, &e);
  return ldexp(1, (e - 1 < emin ? emin : e - 1) - (p - 1));
}

typedef struct fmt {
  int dtype, p, emin, emax;
} fmt;
static const fmt F32 = {KEEL_FLOAT, 24, -126, 127}, F64 = {KEEL_DOUBLE, 53, -1022, 1023};
static const fmt F16 = {KEEL_FLOAT16, 11, -14, 15}, BF16 = {KEEL_BFLOAT16, 8, -126, 127};
static const fmt *const FMTS[] = {&F32, &F64, &F16, &BF16};

static double dec_f16(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
static double dec_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* Bits of a value exactly representable in the format (no rounding here). */
static uint16_t enc_f16(double v) {
  uint16_t s = signbit(v) ? 0x8000 : 0;
  v = fabs(v);
  if (v != v) return 0x7E00;
  if (isinf(v)) return s | 0x7C00;
  if (v < 0x1p-14) return s | (uint16_t)(v * 0x1p24);
  int e;
  frexp(v, &e);
  return s | (uint16_t)((e + 14) << 10) | (uint16_t)(ldexp(v, 11 - e) - 1024);
}
static uint16_t enc_bf16(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* Element i of raw typed data as double (halves decoded here). */
static double get_f(int dtype, const void *d, int64_t i) {
  switch (dtype) {
    case KEEL_FLOAT: return ((const float *)d)[i];
    case KEEL_DOUBLE: return ((const double *)d)[i];
    case KEEL_FLOAT16: return dec_f16(((const uint16_t *)d)[i]);
    case KEEL_BFLOAT16: return dec_bf16(((const uint16_t *)d)[i]);
    default: return NAN;
  }
}
static void put_f(int dtype, void *d, int64_t i, double v) {
  switch (dtype) {
    case KEEL_FLOAT: ((float *)d)[i] = (float)v; break;
    case KEEL_DOUBLE: ((double *)d)[i] = v; break;
    case KEEL_FLOAT16: ((uint16_t *)d)[i] = enc_f16(v); break;
    default: ((uint16_t *)d)[i] = enc_bf16(v); break;
  }
}

static bool same(double a, double b) { return (a != a && b != b) || a == b; }

/* ========================================================== sessions */

/* Runs g (consumed) with input "X" = data; out[0..1] get the outputs.
 * Returns the run status. */
static keel_status run_x(mb_graph *g, int opset, int dtype, int64_t n, const void *data,
                         keel_value_t **out) {
  out[0] = out[1] = NULL;
  keel_session_t *s = mb_session(g, opset);
  if (!s) return KEEL_ERR_INVALID_MODEL;
  keel_value_t *in = mb_tensor(s, dtype, 1, &n, data);
  keel_status st = keel_run(s, (const char *[]){"X"}, &in, 1, out);
  keel_value_release(in);
  keel_session_destroy(s);
  return st;
}

/* A one-node graph op(X) -> Y. */
static mb_graph *one_node(const char *op, int din, int dout, mb_node **node) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", din, 1, (int64_t[]){-1});
  mb_output(g, "Y", dout, -1, NULL);
  *node = mb_add(g, op, "X", "Y");
  return g;
}

/* ==================================================== float unary ops */

static const double EDGE[] = {0,    -0.0, 1,    -1,   0.5,   -0.5,  1.5,   2.5,     -2.5,
                              3,    -3,   0.1,  -0.7, 0.999, 10,    -10,   50,      -50,
                              100,  -100, 1e-7, -1e-7, 1e30, -1e30, NAN,   INFINITY, -INFINITY};
#define N_EDGE ((int64_t)COUNTOF(EDGE))

typedef struct uop {
  const char *name;
  int opset;
  double (*ref)(double);
  bool exact;              /* correctly rounded: halves must match exactly */
  const char *a1, *a2;     /* float attributes set to v1, v2 */
  float v1, v2;
} uop;

static double r_abs(double x) { return fabs(x); }
static double r_neg(double x) { return -x; }
static double r_recip(double x) { return 1 / x; }
static double r_sign(double x) { return x > 0 ? 1 : x < 0 ? -1 : x; }
static double r_relu(double x) { return x != x ? x : x > 0 ? x : 0; }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double r_leaky(double x) { return x < 0 ? (double)0.2f * x : x; }
static double r_elu(double x) { return x < 0 ? (double)0.7f * expm1(x) : x; }
static double r_selu(double x) {
  double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
  return x > 0 ? g * x : g * a * expm1(x);
}
static double r_celu(double x) { return x != x ? x : (x > 0 ? x : 0) + fmin(0, 1.5 * expm1(x / 1.5)); }
static double r_hsig(double x) { return x != x ? x : fmax(0, fmin(1, (double)0.3f * x + (double)0.4f)); }
static double r_hswish(double x) { return x != x ? x : x * fmax(0, fmin(1, x / 6 + 0.5)); }
static double r_softplus(double x) { return x > 500 ? x : log1p(exp(x)); }
static double r_softsign(double x) { return x / (1 + fabs(x)); }
static double r_thresh(double x) { return x != x ? x : x > (double)1.2f ? x : 0; }
static double r_shrink(double x) {
  double l = (double)0.6f, b = (double)0.3f;
  return x < -l ? x + b : x > l ? x - b : 0;
}
static double r_mish(double x) { return x * tanh(r_softplus(x)); }

static const uop UOPS[] = {
    {"Abs", 13, r_abs, true},           {"Neg", 13, r_neg, true},
    {"Reciprocal", 13, r_recip, true},  {"Sqrt", 13, sqrt, true},
    {"Exp", 13, exp},                   {"Log", 13, log},
    {"Ceil", 13, ceil, true},           {"Floor", 13, floor, true},
    {"Round", 11, nearbyint, true},     {"Sign", 13, r_sign, true},
    {"Sin", 7, sin},                    {"Cos", 7, cos},
    {"Tan", 7, tan},                    {"Asin", 7, asin},
    {"Acos", 7, acos},                  {"Atan", 7, atan},
    {"Sinh", 9, sinh},                  {"Cosh", 9, cosh},
    {"Asinh", 9, asinh},                {"Acosh", 9, acosh},
    {"Atanh", 9, atanh},                {"Erf", 13, erf},
    {"Relu", 14, r_relu, true},         {"Sigmoid", 13, r_sigmoid},
    {"Tanh", 13, tanh},                 {"LeakyRelu", 16, r_leaky, true, "alpha", NULL, 0.2f},
    {"Elu", 6, r_elu, false, "alpha", NULL, 0.7f},
    {"Selu", 6, r_selu},                {"Celu", 12, r_celu, false, "alpha", NULL, 1.5f},
    {"HardSigmoid", 6, r_hsig, false, "alpha", "beta", 0.3f, 0.4f},
    {"HardSwish", 14, r_hswish},        {"Softplus", 1, r_softplus},
    {"Softsign", 1, r_softsign},        {"ThresholdedRelu", 10, r_thresh, true, "alpha", NULL, 1.2f},
    {"Shrink", 9, r_shrink, true, "lambd", "bias", 0.6f, 0.3f},
    {"Mish", 18, r_mish},
};

/* Checks got against ref(x) rounded to the format; halves of inexact ops
 * may be one ulp off (float math, then one rounding). */
static bool close_to(const fmt *f, double got, double want_exact, bool exact) {
  double want = round_fmt(want_exact, f->p, f->emin, f->emax);
  if (same(got, want)) return true;
  if (isinf(want) || isnan(want) || isinf(got) || isnan(got)) return false;
  if (exact) return false;
  if (f->dtype == KEEL_FLOAT16 || f->dtype == KEEL_BFLOAT16)
    return fabs(got - want) <= ulp_fmt(want, f->p, f->emin);
  double rel = f->dtype == KEEL_FLOAT ? 1e-5 : 1e-12;
  return fabs(got - want) <= rel * fabs(want) + (f->dtype == KEEL_FLOAT ? 1e-37 : 1e-300);
}

static void check_uop(const uop *u, const fmt *f) {
  uint8_t in[N_EDGE * 8];
  double xv[N_EDGE];
  for (int64_t i = 0; i < N_EDGE; i++) {
    xv[i] = round_fmt(EDGE[i], f->p, f->emin, f->emax);
    put_f(f->dtype, in, i, xv[i]);
  }
  mb_node *n;
  mb_graph *g = one_node(u->name, f->dtype, f->dtype, &n);
  if (u->a1) mb_attr_f(n, u->a1, u->v1);
  if (u->a2) mb_attr_f(n, u->a2, u->v2);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, u->opset, f->dtype, N_EDGE, in, out));
  if (!out[0]) return;
  CHECK((int)keel_value_dtype(out[0]) == f->dtype && keel_value_numel(out[0]) == N_EDGE);
  for (int64_t i = 0; i < N_EDGE; i++) {
    double got = get_f(f->dtype, keel_value_data(out[0]), i), want = u->ref(xv[i]);
    if (!close_to(f, got, want, u->exact)) {
      check_failures++;
      fprintf(stderr, "%s %s(%.9g) = %.17g, expected %.17g\n", keel_dtype_name(f->dtype),
              u->name, xv[i], got, round_fmt(want, f->p, f->emin, f->emax));
    }
    check_total++;
  }
  keel_value_release(out[0]);
}

static void check_float_ops(void) {
  for (size_t i = 0; i < COUNTOF(UOPS); i++)
    for (size_t j = 0; j < COUNTOF(FMTS); j++) check_uop(&UOPS[i], FMTS[j]);
}

/* ============================================ bool and integer outputs */

/* op(X) on float data of every format, expecting bool output pred(x). */
static void check_bool_op(const char *op, int opset, int pos, int neg, bool (*pred)(double)) {
  for (size_t j = 0; j < COUNTOF(FMTS); j++) {
    const fmt *f = FMTS[j];
    uint8_t in[N_EDGE * 8];
    double xv[N_EDGE];
    for (int64_t i = 0; i < N_EDGE; i++) {
      xv[i] = round_fmt(EDGE[i], f->p, f->emin, f->emax); /* 1e30 is inf in float16 */
      put_f(f->dtype, in, i, xv[i]);
    }
    mb_node *n;
    mb_graph *g = one_node(op, f->dtype, KEEL_BOOL, &n);
    if (pos >= 0) mb_attr_i(n, "detect_positive", pos);
    if (neg >= 0) mb_attr_i(n, "detect_negative", neg);
    keel_value_t *out[2];
    CHECK_OK(run_x(g, opset, f->dtype, N_EDGE, in, out));
    if (!out[0]) continue;
    CHECK(keel_value_dtype(out[0]) == KEEL_BOOL);
    const uint8_t *y = keel_value_data(out[0]);
    for (int64_t i = 0; i < N_EDGE; i++) CHECK(y[i] == pred(xv[i]));
    keel_value_release(out[0]);
  }
}

static bool p_nan(double x) { return isnan(x); }
static bool p_inf(double x) { return isinf(x); }
static bool p_pinf(double x) { return x == INFINITY; }
static bool p_ninf(double x) { return x == -INFINITY; }

static void check_isnan_isinf(void) {
  check_bool_op("IsNaN", 13, -1, -1, p_nan);
  check_bool_op("IsInf", 10, -1, -1, p_inf);
  check_bool_op("IsInf", 10, 1, 0, p_pinf);
  check_bool_op("IsInf", 10, 0, 1, p_ninf);
  /* Not on bool */
  mb_node *n;
  mb_graph *g = one_node("Not", KEEL_BOOL, KEEL_BOOL, &n);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 1, KEEL_BOOL, 3, (uint8_t[]){0, 1, 1}, out));
  if (out[0]) {
    const uint8_t *y = keel_value_data(out[0]);
    CHECK(y[0] == 1 && y[1] == 0 && y[2] == 0);
    keel_value_release(out[0]);
  }
  /* BitwiseNot has no bool or float form */
  CHECK_STATUS(run_x(one_node("BitwiseNot", KEEL_FLOAT, KEEL_FLOAT, &n), 18, KEEL_FLOAT, 1,
                     (float[]){1}, out), KEEL_ERR_UNSUPPORTED);
}

/* op on int64 data computed here with wrapping integer arithmetic. */
typedef int64_t (*iref)(int64_t x, int bits, bool sgn);
static int64_t wrap(int64_t v, int bits, bool sgn) {
  uint64_t u = (uint64_t)v, m = bits == 64 ? ~0ull : (1ull << bits) - 1;
  u &= m;
  if (sgn && bits < 64 && (u >> (bits - 1))) u |= ~m;
  return (int64_t)u;
}
static int64_t i_abs(int64_t x, int b, bool s) { return s && x < 0 ? wrap((int64_t)(0 - (uint64_t)x), b, s) : x; }
static int64_t i_neg(int64_t x, int b, bool s) { return wrap((int64_t)(0 - (uint64_t)x), b, s); }
static int64_t i_sign(int64_t x, int b, bool s) { return s ? (x > 0) - (x < 0) : x != 0; }
static int64_t i_relu(int64_t x, int b, bool s) { return s && x < 0 ? 0 : x; }
static int64_t i_bnot(int64_t x, int b, bool s) { return (int64_t)~(uint64_t)x; }
static int64_t i_erf(int64_t x, int b, bool s) {
  if (!s) return (uint64_t)x >= 6; /* x: uint64 as its bit pattern */
  return x <= -6 ? -1 : x >= 6 ? 1 : 0;
}

static const struct { int dtype, bits; bool sgn; } ITYPES[] = {
    {KEEL_INT8, 8, true},    {KEEL_INT16, 16, true},   {KEEL_INT32, 32, true},
    {KEEL_INT64, 64, true},  {KEEL_UINT8, 8, false},   {KEEL_UINT16, 16, false},
    {KEEL_UINT32, 32, false}, {KEEL_UINT64, 64, false}};

static void put_i(int dtype, void *d, int64_t i, int64_t v) {
  switch (keel_dtype_size((keel_dtype)dtype)) {
    case 1: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)d)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)d)[i] = (uint32_t)v; break;
    default: ((uint64_t *)d)[i] = (uint64_t)v; break;
  }
}
/* Element i as int64 (sign- or zero-extended; uint64 as its bit pattern). */
static int64_t get_i(int dtype, const void *d, int64_t i) {
  switch (dtype) {
    case KEEL_INT8: return ((const int8_t *)d)[i];
    case KEEL_INT16: return ((const int16_t *)d)[i];
    case KEEL_INT32: return ((const int32_t *)d)[i];
    case KEEL_INT64: return ((const int64_t *)d)[i];
    case KEEL_UINT8: case KEEL_BOOL: return ((const uint8_t *)d)[i];
    case KEEL_UINT16: return ((const uint16_t *)d)[i];
    case KEEL_UINT32: return ((const uint32_t *)d)[i];
    default: return (int64_t)((const uint64_t *)d)[i];
  }
}

static void check_int_op(const char *op, int opset, iref ref, bool signed_only) {
  static const int64_t vals[] = {0, 1, -1, 2, -2, 5, -7, 6, 100, -100, INT64_MIN, INT64_MAX,
                                 INT32_MIN, INT8_MIN, INT8_MAX, UINT8_MAX};
  enum { NV = COUNTOF(vals) };
  for (size_t t = 0; t < COUNTOF(ITYPES); t++) {
    if (signed_only && !ITYPES[t].sgn) continue;
    int dt = ITYPES[t].dtype;
    uint64_t in[NV];
    for (int i = 0; i < NV; i++) put_i(dt, in, i, vals[i]);
    mb_node *n;
    keel_value_t *out[2];
    CHECK_OK(run_x(one_node(op, dt, dt, &n), opset, dt, NV, in, out));
    if (!out[0]) continue;
    for (int i = 0; i < NV; i++) {
      int64_t x = get_i(dt, in, i), want = wrap(ref(x, ITYPES[t].bits, ITYPES[t].sgn), ITYPES[t].bits, ITYPES[t].sgn);
      int64_t got = get_i(dt, keel_value_data(out[0]), i);
      if (got != want) fprintf(stderr, "%s %s(%lld) = %lld, expected %lld\n", keel_dtype_name(dt), op,
                               (long long)x, (long long)got, (long long)want);
      CHECK(got == want);
    }
    keel_value_release(out[0]);
  }
}

static void check_int_ops(void) {
  check_int_op("Abs", 13, i_abs, false);
  check_int_op("Neg", 13, i_neg, true);
  check_int_op("Sign", 13, i_sign, false);
  check_int_op("Relu", 14, i_relu, true);
  check_int_op("Erf", 13, i_erf, false);
  check_int_op("BitwiseNot", 18, i_bnot, false);
  /* Shrink on uint8: 0..255 stays in range, results truncate */
  mb_node *n;
  mb_graph *g = one_node("Shrink", KEEL_UINT8, KEEL_UINT8, &n);
  mb_attr_f(n, "lambd", 1.5f);
  mb_attr_f(n, "bias", 1.5f);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 9, KEEL_UINT8, 4, (uint8_t[]){0, 1, 2, 255}, out));
  if (out[0]) {
    const uint8_t *y = keel_value_data(out[0]);
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 0 && y[3] == 253);
    keel_value_release(out[0]);
  }
}

/* ============================================================== Clip */

/* Clip(X, min, max) at `opset` with bounds as initializers (NULL: omitted). */
static keel_value_t *clip_run(int opset, int dt, int64_t n, const void *x, const void *lo,
                              const void *hi, int bound_dt, keel_status *st) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, 1, (int64_t[]){n});
  mb_output(g, "Y", dt, -1, NULL);
  if (lo) mb_init(g, "lo", bound_dt, 0, NULL, lo);
  if (hi) mb_init(g, "hi", bound_dt, 0, NULL, hi);
  char ins[16];
  snprintf(ins, sizeof ins, "X,%s,%s", lo ? "lo" : "", hi ? "hi" : "");
  mb_add(g, "Clip", ins, "Y");
  keel_value_t *out[2];
  *st = run_x(g, opset, dt, n, x, out);
  return out[0];
}

static void check_clip_inputs(void) {
  float x[] = {-6, -1, 0, 2, 6, NAN, INFINITY, -INFINITY};
  keel_status st;
  keel_value_t *y = clip_run(13, KEEL_FLOAT, 8, x, (float[]){-5}, NULL, KEEL_FLOAT, &st);
  CHECK_OK(st);
  float want_lo[] = {-5, -1, 0, 2, 6, NAN, INFINITY, -5};
  for (int i = 0; y && i < 8; i++) CHECK(same(keel_value_at(y, i), want_lo[i]));
  keel_value_release(y);
  y = clip_run(11, KEEL_FLOAT, 8, x, NULL, (float[]){1}, KEEL_FLOAT, &st);
  CHECK_OK(st);
  float want_hi[] = {-6, -1, 0, 1, 1, NAN, 1, -INFINITY};
  for (int i = 0; y && i < 8; i++) CHECK(same(keel_value_at(y, i), want_hi[i]));
  keel_value_release(y);
  /* min > max: everything becomes max */
  y = clip_run(13, KEEL_FLOAT, 8, x, (float[]){3}, (float[]){2}, KEEL_FLOAT, &st);
  for (int i = 0; y && i < 8; i++) CHECK(isnan(x[i]) || keel_value_at(y, i) == 2);
  keel_value_release(y);
  /* integer types from Clip-12, uint64 bounds beyond INT64_MAX */
  uint64_t ux[] = {0, 5, UINT64_MAX, 1ull << 63};
  y = clip_run(12, KEEL_UINT64, 4, ux, (uint64_t[]){1}, (uint64_t[]){(1ull << 63) + 7}, KEEL_UINT64, &st);
  CHECK_OK(st);
  const uint64_t *uy = y ? keel_value_data(y) : NULL;
  CHECK(uy && uy[0] == 1 && uy[1] == 5 && uy[2] == (1ull << 63) + 7 && uy[3] == 1ull << 63);
  keel_value_release(y);
  int8_t ix[] = {-128, -3, 0, 3, 127};
  y = clip_run(13, KEEL_INT8, 5, ix, (int8_t[]){-2}, (int8_t[]){2}, KEEL_INT8, &st);
  const int8_t *iy = y ? keel_value_data(y) : NULL;
  CHECK(iy && iy[0] == -2 && iy[1] == -2 && iy[2] == 0 && iy[3] == 2 && iy[4] == 2);
  keel_value_release(y);
  /* a bound of another type is an error, not a silent conversion */
  y = clip_run(13, KEEL_INT8, 5, ix, (int64_t[]){-2}, NULL, KEEL_INT64, &st);
  CHECK(st == KEEL_ERR_SHAPE && !y);
  keel_value_release(y);
}

/* Clip-1 and -6 with attributes. */
static void check_clip_attrs(void) {
  float x[] = {-6, 0, 6, INFINITY, -INFINITY};
  for (int opset = 1; opset <= 6; opset += 5) {
    mb_node *n;
    mb_graph *g = one_node("Clip", KEEL_FLOAT, KEEL_FLOAT, &n);
    mb_attr_f(n, "min", -1);
    keel_value_t *out[2];
    CHECK_OK(run_x(g, opset, KEEL_FLOAT, 5, x, out));
    if (!out[0]) continue;
    /* Clip-1 has no default max; Clip-6's is FLT_MAX */
    double top = opset == 1 ? INFINITY : FLT_MAX;
    CHECK(keel_value_at(out[0], 0) == -1 && keel_value_at(out[0], 2) == 6);
    CHECK(keel_value_at(out[0], 3) == top && keel_value_at(out[0], 4) == -1);
    keel_value_release(out[0]);
  }
}

/* =========================================================== Dropout */

/* Dropout on ones(6) with the given inputs; returns y and mask. */
static keel_status dropout_run(int opset, int dt, const char *ins, const float *ratio,
                               const uint8_t *train, mb_node **node, keel_value_t **out,
                               void (*attrs)(mb_node *)) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, 1, (int64_t[]){6});
  mb_output(g, "Y", dt, -1, NULL);
  mb_output(g, "M", KEEL_BOOL, -1, NULL);
  if (ratio) mb_init(g, "r", KEEL_FLOAT, 0, NULL, ratio);
  if (train) mb_init(g, "t", KEEL_BOOL, 0, NULL, train);
  *node = mb_add(g, "Dropout", ins, "Y,M");
  if (attrs) attrs(*node);
  uint8_t x[6 * 8];
  for (int i = 0; i < 6; i++) put_f(dt, x, i, 1.0);
  return run_x(g, opset, dt, 6, x, out);
}

static void seed7(mb_node *n) { mb_attr_i(n, "seed", 7); }
static void is_test0(mb_node *n) { mb_attr_i(n, "is_test", 0); }
static void is_test1(mb_node *n) { mb_attr_i(n, "is_test", 1); }

/* y and mask against the expected kept pattern (scale 2 = ratio 0.5). */
static void check_dropped(keel_value_t **out, const int *keep, double scale, int mask_dt) {
  if (!out[0] || !out[1]) {
    CHECK(out[0] && out[1]);
  } else {
    CHECK((int)keel_value_dtype(out[1]) == mask_dt);
    for (int i = 0; i < 6; i++) {
      CHECK(keel_value_at(out[0], i) == (keep[i] ? scale : 0));
      CHECK(keel_value_at(out[1], i) == keep[i]);
    }
  }
  keel_value_release(out[0]);
  keel_value_release(out[1]);
}

static void check_dropout(void) {
  /* numpy: seed(0) -> uniform 0.549 0.715 0.603 0.545 0.424 0.646;
   * seed(7) -> 0.0763 0.780 0.438 ... */
  static const int all[6] = {1, 1, 1, 1, 1, 1}, s0[6] = {1, 1, 1, 1, 0, 1};
  keel_value_t *out[2];
  mb_node *n;
  CHECK_OK(dropout_run(13, KEEL_FLOAT, "X", NULL, NULL, &n, out, NULL));
  check_dropped(out, all, 1, KEEL_BOOL);
  CHECK_OK(dropout_run(13, KEEL_FLOAT, "X,r,t", (float[]){0.5f}, (uint8_t[]){1}, &n, out, NULL));
  check_dropped(out, s0, 2, KEEL_BOOL);
  CHECK_OK(dropout_run(13, KEEL_FLOAT16, "X,r,t", (float[]){0.5f}, (uint8_t[]){1}, &n, out, NULL));
  check_dropped(out, s0, 2, KEEL_BOOL);
  CHECK_OK(dropout_run(12, KEEL_DOUBLE, "X,r,t", (float[]){0.5f}, (uint8_t[]){1}, &n, out, seed7));
  check_dropped(out, (const int[]){0, 1, 0, 1, 1, 1}, 2, KEEL_BOOL);
  CHECK_OK(dropout_run(13, KEEL_FLOAT, "X,r,t", (float[]){0.5f}, (uint8_t[]){0}, &n, out, NULL));
  check_dropped(out, all, 1, KEEL_BOOL); /* training_mode false */
  CHECK_OK(dropout_run(10, KEEL_FLOAT, "X", NULL, NULL, &n, out, NULL));
  check_dropped(out, all, 1, KEEL_BOOL);
  /* Dropout-6: is_test=1 is identity, is_test=0 trains; mask has type T */
  CHECK_OK(dropout_run(6, KEEL_FLOAT, "X", NULL, NULL, &n, out, is_test1));
  check_dropped(out, all, 1, KEEL_FLOAT);
  CHECK_OK(dropout_run(6, KEEL_FLOAT, "X", NULL, NULL, &n, out, is_test0));
  check_dropped(out, s0, 2, KEEL_FLOAT);
  CHECK_STATUS(dropout_run(13, KEEL_FLOAT, "X,r,t", (float[]){1.0f}, (uint8_t[]){1}, &n, out, NULL),
               KEEL_ERR_RUNTIME);
  CHECK(strstr(keel_last_error(), "ratio") != NULL);
}

/* ============================================== Cast: numeric pairs */

static const int CAST_TYPES[] = {KEEL_FLOAT,  KEEL_DOUBLE, KEEL_FLOAT16, KEEL_BFLOAT16,
                                 KEEL_INT8,   KEEL_INT16,  KEEL_INT32,   KEEL_INT64,
                                 KEEL_UINT8,  KEEL_UINT16, KEEL_UINT32,  KEEL_UINT64, KEEL_BOOL};
static const double CAST_VALS[] = {0,     -0.0,  1,     -1,          0.5,        -0.5,
                                   1.5,   -2.7,  2.5,   100.7,       127,        128,
                                   -128,  -129,  255,   256,         300,        -300,
                                   32767, 32768, 65535, 65536,       70000.5,    1e9,
                                   2147483647, 2147483648.0, -2147483649.0, 4294967296.0,
                                   1e19,  -1e19, 9.3e18, 1e30,       NAN,        INFINITY,
                                   -INFINITY, 1.00048828125 + 0x1p-40, 1e300, -1e-300};
#define N_CV ((int)COUNTOF(CAST_VALS))

static const fmt *fmt_of(int dt) {
  for (size_t i = 0; i < COUNTOF(FMTS); i++)
    if (FMTS[i]->dtype == dt) return FMTS[i];
  return NULL;
}
static int int_bits(int dt) { return (int)keel_dtype_size((keel_dtype)dt) * 8; }

/* The value v holds as type dt, or false when dt cannot hold it exactly
 * (then the case is skipped: the source tensor could not contain it). */
static bool as_source(int dt, double v, double *out) {
  const fmt *f = fmt_of(dt);
  if (f) return *out = round_fmt(v, f->p, f->emin, f->emax), true;
  if (dt == KEEL_BOOL) return *out = v, v == 0 || v == 1;
  if (v != nearbyint(v) || !isfinite(v)) return false;
  double lo = is_signed(dt) ? -ldexp(1, int_bits(dt) - 1) : 0;
  double hi = ldexp(1, int_bits(dt) - (is_signed(dt) ? 1 : 0));
  *out = v;
  return v >= lo && v < hi && !(v == 0 && signbit(v));
}

/* Expected integer result of casting source value v (from type sdt). */
static int64_t int_result(int sdt, int ddt, double v) {
  int bits = int_bits(ddt);
  bool sgn = is_signed(ddt);
  if (ddt == KEEL_BOOL) return v != 0;
  if (!fmt_of(sdt)) { /* integer source: exact, then wrap */
    int64_t x = v >= 0x1p63 ? (int64_t)(uint64_t)v : (int64_t)v;
    return wrap(x, bits, sgn);
  }
  if (v != v) return 0; /* float source: NaN 0, truncate, saturate */
  double lo = sgn ? -ldexp(1, bits - 1) : 0, hi = ldexp(1, bits - (sgn ? 1 : 0));
  if (v <= lo) return sgn ? (int64_t)lo : 0;
  if (v >= hi) return (int64_t)(sgn ? ((uint64_t)1 << (bits - 1)) - 1 : bits == 64 ? ~0ull : (1ull << bits) - 1);
  double t = trunc(v);
  return t >= 0x1p63 ? (int64_t)(uint64_t)t : (int64_t)t;
}

static void check_cast_pair(int sdt, int ddt) {
  uint64_t in[N_CV];
  double src[N_CV];
  int64_t m = 0;
  for (int i = 0; i < N_CV; i++) {
    if (!as_source(sdt, CAST_VALS[i], &src[m])) continue;
    if (fmt_of(sdt)) put_f(sdt, in, m, src[m]);
    else put_i(sdt, in, m, src[m] >= 0x1p63 ? (int64_t)(uint64_t)src[m] : (int64_t)src[m]);
    m++;
  }
  mb_node *n;
  mb_graph *g = one_node("Cast", sdt, ddt, &n);
  mb_attr_i(n, "to", ddt);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 13, sdt, m, in, out));
  if (!out[0]) return;
  CHECK((int)keel_value_dtype(out[0]) == ddt);
  const void *y = keel_value_data(out[0]);
  for (int64_t i = 0; i < m; i++) {
    const fmt *f = fmt_of(ddt);
    bool ok;
    if (f) ok = same(get_f(ddt, y, i), round_fmt(src[i], f->p, f->emin, f->emax));
    else ok = get_i(ddt, y, i) == int_result(sdt, ddt, src[i]);
    if (!ok) fprintf(stderr, "Cast %s %.17g -> %s wrong\n", keel_dtype_name(sdt), src[i], keel_dtype_name(ddt));
    CHECK(ok);
  }
  keel_value_release(out[0]);
}

/* int64 / uint64 extremes that double cannot carry. */
static void check_cast_wide_ints(void) {
  int64_t x[] = {INT64_MIN, INT64_MAX, -1, (int64_t)0x123456789ABCDEF};
  mb_node *n;
  mb_graph *g = one_node("Cast", KEEL_INT64, KEEL_UINT64, &n);
  mb_attr_i(n, "to", KEEL_UINT64);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 13, KEEL_INT64, 4, x, out));
  const uint64_t *y = out[0] ? keel_value_data(out[0]) : NULL;
  CHECK(y && y[0] == 1ull << 63 && y[1] == (1ull << 63) - 1 && y[2] == UINT64_MAX &&
        y[3] == 0x123456789ABCDEFull);
  keel_value_release(out[0]);
}

static void check_cast_numeric(void) {
  for (size_t i = 0; i < COUNTOF(CAST_TYPES); i++)
    for (size_t j = 0; j < COUNTOF(CAST_TYPES); j++) check_cast_pair(CAST_TYPES[i], CAST_TYPES[j]);
  check_cast_wide_ints();
  /* a bool byte other than 0/1 (caller data) still reads as true */
  mb_node *nb;
  mb_graph *gb = one_node("Cast", KEEL_BOOL, KEEL_FLOAT, &nb);
  mb_attr_i(nb, "to", KEEL_FLOAT);
  keel_value_t *ob[2];
  CHECK_OK(run_x(gb, 13, KEEL_BOOL, 2, (uint8_t[]){2, 0}, ob));
  CHECK(ob[0] && keel_value_at(ob[0], 0) == 1 && keel_value_at(ob[0], 1) == 0);
  keel_value_release(ob[0]);
  /* double -> float16 rounds once: via float it would land on a tie and
   * round to even (1.0) instead of up */
  double d = 1 + 0x1p-11 + 0x1p-40;
  mb_node *n;
  mb_graph *g = one_node("Cast", KEEL_DOUBLE, KEEL_FLOAT16, &n);
  mb_attr_i(n, "to", KEEL_FLOAT16);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 13, KEEL_DOUBLE, 1, &d, out));
  CHECK(out[0] && ((const uint16_t *)keel_value_data(out[0]))[0] == 0x3C01);
  keel_value_release(out[0]);
}

/* ================================================== Cast: strings */

/* Cast of one typed array to STRING; each result against want[]. */
static void check_to_string(int dt, int64_t n, const void *x, const char *const *want) {
  mb_node *node;
  mb_graph *g = one_node("Cast", dt, KEEL_STRING, &node);
  mb_attr_i(node, "to", KEEL_STRING);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 13, dt, n, x, out));
  if (!out[0]) return;
  const keel_string *s = keel_value_data(out[0]);
  for (int64_t i = 0; i < n; i++) {
    if (strcmp(s[i].data, want[i]) || s[i].len != strlen(want[i]))
      fprintf(stderr, "%s -> string: \"%s\", expected \"%s\"\n", keel_dtype_name(dt), s[i].data, want[i]);
    CHECK(!strcmp(s[i].data, want[i]));
  }
  keel_value_release(out[0]);
}

static void check_cast_to_string(void) {
  float f[] = {0.1f, 1e-5f, 1.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e16f, 123456.0f,
               0.47892547f, 65504.0f, 1e-45f, FLT_MAX, 1e-4f, 1.5e-4f, 2.5e15f};
  check_to_string(KEEL_FLOAT, 16, f,
                  (const char *[]){"0.1", "1e-05", "1.0", "-0.0", "nan", "inf", "-inf", "1e+16",
                                   "123456.0", "0.47892547", "65504.0", "1e-45", "3.4028235e+38",
                                   "1e-04", "0.00015", "2500000000000000.0"});
  double d[] = {0.1, 1.0 / 3, 1e16, 1e15, 0.0001, -2.5e-300};
  check_to_string(KEEL_DOUBLE, 6, d,
                  (const char *[]){"0.1", "0.3333333333333333", "1e+16", "1000000000000000.0",
                                   "0.0001", "-2.5e-300"});
  uint16_t h[] = {enc_f16(65504), enc_f16(round_fmt(0.1, 11, -14, 15)), enc_f16(-2)};
  check_to_string(KEEL_FLOAT16, 3, h, (const char *[]){"65500.0", "0.1", "-2.0"});
  int32_t i32[] = {-5, 0, INT32_MAX};
  check_to_string(KEEL_INT32, 3, i32, (const char *[]){"-5", "0", "2147483647"});
  uint64_t u64[] = {UINT64_MAX};
  check_to_string(KEEL_UINT64, 1, u64, (const char *[]){"18446744073709551615"});
  int64_t i64[] = {INT64_MIN};
  check_to_string(KEEL_INT64, 1, i64, (const char *[]){"-9223372036854775808"});
  check_to_string(KEEL_BOOL, 2, (uint8_t[]){1, 0}, (const char *[]){"True", "False"});
}

/* Cast of strings to dt at `opset` ('to' as int, or as a name for Cast-1). */
static keel_status from_strings(int dt, int64_t n, const char *const *txt, keel_value_t **out,
                                const char *to_name) {
  keel_string s[16];
  for (int64_t i = 0; i < n; i++) s[i] = (keel_string){(char *)txt[i], strlen(txt[i])};
  mb_node *node;
  mb_graph *g = one_node("Cast", KEEL_STRING, dt, &node);
  if (to_name) mb_attr_s(node, "to", to_name);
  else mb_attr_i(node, "to", dt);
  return run_x(g, to_name ? 1 : 13, KEEL_STRING, n, s, out);
}

static void check_cast_from_string(void) {
  keel_value_t *out[2];
  const char *fl[] = {"0.5", " 2.5 ", "NaN", "INF", "+INF", "-INF", "1e-5", "-0", "infinity", "1E8"};
  CHECK_OK(from_strings(KEEL_FLOAT, 10, fl, out, NULL));
  double fw[] = {0.5, 2.5, NAN, INFINITY, INFINITY, -INFINITY, (double)1e-5f, -0.0, INFINITY, 1e8};
  for (int i = 0; out[0] && i < 10; i++) CHECK(same(keel_value_at(out[0], i), fw[i]));
  keel_value_release(out[0]);
  const char *in[] = {"42", "-7", "100.5", "1e3", "3000000000", "-2.9"};
  CHECK_OK(from_strings(KEEL_INT32, 6, in, out, "INT32")); /* Cast-1: 'to' is a name */
  int32_t iw[] = {42, -7, 100, 1000, (int32_t)(3000000000u - 4294967296u), -2};
  for (int i = 0; out[0] && i < 6; i++) CHECK(keel_value_at(out[0], i) == iw[i]);
  keel_value_release(out[0]);
  CHECK_OK(from_strings(KEEL_UINT64, 1, (const char *[]){"18446744073709551615"}, out, NULL));
  CHECK(out[0] && ((const uint64_t *)keel_value_data(out[0]))[0] == UINT64_MAX);
  keel_value_release(out[0]);
  CHECK_OK(from_strings(KEEL_BOOL, 5, (const char *[]){"true", "False", "0", "2", "nan"}, out, NULL));
  int bw[] = {1, 0, 0, 1, 1};
  for (int i = 0; out[0] && i < 5; i++) CHECK(keel_value_at(out[0], i) == bw[i]);
  keel_value_release(out[0]);
  CHECK_OK(from_strings(KEEL_FLOAT16, 1, (const char *[]){"0.1"}, out, NULL));
  CHECK(out[0] && keel_value_at(out[0], 0) == round_fmt(0.1, 11, -14, 15));
  keel_value_release(out[0]);
  const char *bad[] = {"abc", "", "1.5x"};
  for (int i = 0; i < 3; i++) {
    CHECK_STATUS(from_strings(KEEL_FLOAT, 1, &bad[i], out, NULL), KEEL_ERR_RUNTIME);
    CHECK(out[0] == NULL);
  }
}

/* CastLike takes the type of its second input; a bad 'to' is refused. */
static void check_cast_like_and_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){3});
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_init(g, "like", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){0});
  mb_add(g, "CastLike", "X,like", "Y");
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 15, KEEL_FLOAT, 3, (float[]){-1.5f, 2.9f, 1e20f}, out));
  CHECK(out[0] && keel_value_dtype(out[0]) == KEEL_INT64);
  CHECK(out[0] && keel_value_at(out[0], 0) == -1 && keel_value_at(out[0], 1) == 2);
  CHECK(out[0] && ((const int64_t *)keel_value_data(out[0]))[2] == INT64_MAX);
  keel_value_release(out[0]);
  int tos[] = {0, KEEL_COMPLEX64, 27 /* no type (yet) */, 99};
  keel_status want[] = {KEEL_ERR_INVALID_MODEL, KEEL_ERR_UNSUPPORTED, KEEL_ERR_UNSUPPORTED,
                        KEEL_ERR_INVALID_MODEL};
  for (int i = 0; i < 4; i++) {
    mb_node *n;
    g = one_node("Cast", KEEL_FLOAT, KEEL_FLOAT, &n);
    mb_attr_i(n, "to", tos[i]);
    CHECK_STATUS(run_x(g, 13, KEEL_FLOAT, 1, (float[]){1}, out), want[i]);
  }
  mb_node *n;
  g = one_node("Sqrt", KEEL_INT32, KEEL_INT32, &n);
  CHECK_STATUS(run_x(g, 13, KEEL_INT32, 1, (int32_t[]){4}, out), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "Sqrt") && strstr(keel_last_error(), "int32"));
}

/* ====================================================== in-place reuse */

/* A = Neg(X) feeds both Relu and Add: whichever runs first must not
 * write into A. Y = A + Relu(A). */
static void check_shared_input(int dt) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, 1, (int64_t[]){6});
  mb_output(g, "Y", dt, -1, NULL);
  mb_add(g, "Neg", "X", "A");
  mb_add(g, "Relu", "A", "B");
  mb_add(g, "Add", "A,B", "Y");
  double xv[6] = {-2, -1, 0, 1, 2, 3};
  uint8_t x[6 * 8];
  for (int i = 0; i < 6; i++) put_f(dt, x, i, xv[i]);
  keel_value_t *out[2];
  CHECK_OK(run_x(g, 14, dt, 6, x, out));
  for (int i = 0; out[0] && i < 6; i++) {
    double a = -xv[i];
    CHECK(keel_value_at(out[0], i) == a + (a > 0 ? a : 0));
  }
  keel_value_release(out[0]);
}

/* A chain where each intermediate dies at the next node: values stay right,
 * and the chain reuses buffers instead of allocating per node. */
static void check_chain(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){1024});
  mb_output(g, "Y", KEEL_INT32, -1, NULL);
  mb_add(g, "Neg", "X", "A");
  mb_add(g, "Relu", "A", "B");
  mb_add(g, "Sqrt", "B", "C");
  mb_add(g, "Ceil", "C", "D");
  mb_attr_i(mb_add(g, "Cast", "D", "Y"), "to", KEEL_INT32);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  float x[1024];
  for (int i = 0; i < 1024; i++) x[i] = (float)(i % 2 ? -i : i);
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1024}, x), *out[1] = {0};
  keel_stats st0 = {.size = sizeof st0}, st1 = {.size = sizeof st1};
  keel_stats_get(s, &st0);
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  keel_stats_get(s, &st1);
  for (int i = 0; out[0] && i < 1024; i++)
    CHECK(keel_value_at(out[0], i) == (i % 2 ? ceil(sqrt((double)i)) : 0));
  /* Neg allocates (X is the caller's); Relu, Sqrt, Ceil and Cast reuse */
  CHECK(st1.n_alloc - st0.n_alloc <= 2);
  keel_value_release(out[0]);
  keel_value_release(in);
  keel_session_destroy(s);
}

int main(void) {
  check_float_ops();
  check_isnan_isinf();
  check_int_ops();
  check_clip_inputs();
  check_clip_attrs();
  check_dropout();
  check_cast_numeric();
  check_cast_to_string();
  check_cast_from_string();
  check_cast_like_and_errors();
  check_shared_input(KEEL_FLOAT);
  check_shared_input(KEEL_FLOAT16);
  check_chain();
  return check_report();
}
