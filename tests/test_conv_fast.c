/* test_conv_fast.c: Conv's faster implementations (src/ops/nn/conv/conv_fast.c)
 * against its reference kernel (KEEL_OPT_REFERENCE_KERNELS): depthwise
 * convs over odd sizes, strides, dilations, asymmetric and SAME pads,
 * batch > 1, with and without bias, with a fused activation (the gated
 * x * HardSigmoid(x) and x * Sigmoid(x) forms included), on 1 and 3
 * threads, then a seeded sweep of random shapes (rows wider than one
 * vector, heights not a multiple of the 4-row block, strides up to 3,
 * dilations up to 3, pads up to the kernel's size); plus cases the fast
 * kernel must hand back to the reference (a
 * channel count that does not match group: the same error). */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

typedef struct dw_case {
  int64_t n, c, h, w, kh, kw;
  int64_t s[2], d[2], pads[4];
  const char *auto_pad;
  bool bias;
  const char *act;             /* fused by the pass, or NULL             */
} dw_case;

static uint32_t g_rng = 7;
static float rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)(g_rng >> 8) / (float)(1 << 24) - 0.5f;
}

static mb_graph *model(const dw_case *t, const float *wt, const float *b) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){t->c, 1, t->kh, t->kw}, wt);
  if (t->bias) mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){t->c}, b);
  mb_node *c = mb_add(g, "Conv", t->bias ? "x,w,b" : "x,w", t->act ? "c" : "y");
  mb_attr_i(c, "group", t->c);
  mb_attr_ints(c, "kernel_shape", 2, (int64_t[]){t->kh, t->kw});
  mb_attr_ints(c, "strides", 2, t->s);
  mb_attr_ints(c, "dilations", 2, t->d);
  if (t->auto_pad) mb_attr_s(c, "auto_pad", t->auto_pad);
  else mb_attr_ints(c, "pads", 4, t->pads);
  if (t->act && !strcmp(t->act, "HardSwishGated")) { /* x * HardSigmoid(x): opset 13's form */
    mb_attr_f(mb_add(g, "HardSigmoid", "c", "h"), "alpha", 1.0f / 6);
    mb_add(g, "Mul", "c,h", "y");
  } else if (t->act && !strcmp(t->act, "SiLUGated")) {
    mb_add(g, "Sigmoid", "c", "h");
    mb_add(g, "Mul", "c,h", "y");
  } else if (t->act) {
    mb_add(g, t->act, "c", "y");
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* Runs the case on a session; returns the output (caller frees) or NULL. */
static keel_value_t *run(const dw_case *t, const float *x, const float *wt, const float *b,
                         unsigned flags, int threads) {
  keel_options o = {.size = sizeof o, .flags = flags | KEEL_OPT_NO_ONEDNN, .threads = threads};
  keel_session_t *s = mb_session_opts(model(t, wt, b), 13, &o);
  if (!s) return NULL;
  char *d = NULL;
  if (!keel_session_describe(s, 0, &d)) {
    bool fast = strstr(d, "Conv depthwise") != NULL;
    CHECK(fast == !(flags & KEEL_OPT_REFERENCE_KERNELS));
    keel_free(d);
  }
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w}, x);
  keel_value_t *out[1] = {0};
  keel_status st = keel_run(s, (const char *[]){"x"}, &in, 1, out);
  if (st) fprintf(stderr, "%s\n", keel_last_error());
  CHECK_OK(st);
  keel_value_release(in);
  keel_session_destroy(s);
  return out[0];
}

static void one(const dw_case *t) {
  int64_t nx = t->n * t->c * t->h * t->w, nw = t->c * t->kh * t->kw;
  float *x = malloc(sizeof(float) * (size_t)nx), *wt = malloc(sizeof(float) * (size_t)nw);
  float *b = malloc(sizeof(float) * (size_t)t->c);
  for (int64_t i = 0; i < nx; i++) x[i] = rnd();
  for (int64_t i = 0; i < nw; i++) wt[i] = rnd();
  for (int64_t i = 0; i < t->c; i++) b[i] = rnd();
  keel_value_t *ref = run(t, x, wt, b, KEEL_OPT_REFERENCE_KERNELS, 1);
  for (int threads = 1; threads <= 3; threads += 2) {
    keel_value_t *got = run(t, x, wt, b, 0, threads);
    CHECK(ref && got);
    if (ref && got) {
      int64_t n = keel_value_numel(ref);
      CHECK(keel_value_numel(got) == n && keel_value_rank(got) == 4);
      CHECK(!memcmp(keel_value_shape(ref), keel_value_shape(got), 4 * sizeof(int64_t)));
      double worst = 0;
      const float *r = keel_value_data(ref), *g = keel_value_data(got);
      for (int64_t i = 0; i < n && keel_value_numel(got) == n; i++)
        worst = fmax(worst, fabs((double)r[i] - g[i]) / (1e-5 + 1e-5 * fabs((double)r[i])));
      if (worst > 1)
        fprintf(stderr, "depthwise c=%lld %lldx%lld k%lldx%lld s%lld d%lld: worst %g of the tolerance\n",
                (long long)t->c, (long long)t->h, (long long)t->w, (long long)t->kh,
                (long long)t->kw, (long long)t->s[0], (long long)t->d[0], worst);
      CHECK(worst <= 1); /* |a-b| <= 1e-5 (1 + |b|): summation order only */
    }
    keel_value_release(got);
  }
  keel_value_release(ref);
  free(x), free(wt), free(b);
}

static int64_t pick(int64_t lo, int64_t hi) { /* uniform in [lo, hi] */
  g_rng = g_rng * 1664525u + 1013904223u;
  return lo + (int64_t)((g_rng >> 8) % (uint32_t)(hi - lo + 1));
}

/* Random shapes: the output must keep at least one pixel. */
static void sweep(int count) {
  static const char *acts[] = {NULL, "Relu", "HardSwishGated", "Clip", "SiLUGated", "HardSigmoid"};
  for (int done = 0; done < count;) {
    dw_case t = {pick(1, 2), pick(2, 19), pick(1, 40), pick(1, 40), pick(1, 5), pick(1, 5),
                 {pick(1, 3), pick(1, 3)}, {pick(1, 3), pick(1, 2)}, {0}, NULL, pick(0, 1) == 1,
                 acts[pick(0, 5)]};
    for (int i = 0; i < 4; i++) t.pads[i] = pick(0, i % 2 ? t.kw : t.kh);
    int64_t eh = t.h + t.pads[0] + t.pads[2] - (t.kh - 1) * t.d[0] - 1;
    int64_t ew = t.w + t.pads[1] + t.pads[3] - (t.kw - 1) * t.d[1] - 1;
    if (eh < 0 || ew < 0) continue;
    one(&t);
    done++;
  }
}

/* C != group: the fast kernel hands the node back to the reference, so
 * the error is the reference's. */
static void mismatch(void) {
  dw_case t = {1, 4, 5, 5, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, NULL};
  float wt[36] = {0}, b[4] = {0}, x[3 * 25] = {0};
  keel_session_t *s = mb_session(model(&t, wt, b), 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 3, 5, 5}, x);
  keel_value_t *out[1] = {0};
  CHECK(keel_run(s, (const char *[]){"x"}, &in, 1, out) == KEEL_ERR_SHAPE);
  keel_value_release(in);
  keel_session_destroy(s);
}

int main(void) {
  const dw_case cases[] = {
      {1, 8, 9, 11, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, NULL},
      {2, 5, 10, 7, 3, 3, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL, false, NULL},
      {1, 6, 13, 13, 5, 5, {1, 1}, {1, 1}, {2, 2, 2, 2}, NULL, true, "Relu"},
      {1, 3, 12, 9, 5, 5, {2, 1}, {1, 1}, {0, 2, 1, 0}, NULL, true, "HardSwish"},
      {3, 4, 8, 8, 3, 3, {1, 1}, {2, 2}, {2, 2, 2, 2}, NULL, true, NULL},
      {1, 7, 6, 15, 3, 5, {1, 3}, {1, 1}, {0, 0, 0, 0}, NULL, true, NULL},
      {1, 4, 9, 9, 3, 3, {2, 2}, {1, 1}, {0, 0, 0, 0}, "SAME_UPPER", true, "Sigmoid"},
      {1, 4, 1, 1, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, NULL},
      {2, 16, 20, 20, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, "Clip"},
      /* MobileNetV3's layers, at reduced channel counts */
      {1, 16, 112, 112, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, "Relu"},
      {1, 8, 112, 112, 3, 3, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL, true, "Relu"},
      {1, 9, 56, 56, 5, 5, {2, 2}, {1, 1}, {2, 2, 2, 2}, NULL, true, "Relu"},
      {1, 12, 14, 14, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, true, "HardSwishGated"},
      {1, 20, 14, 14, 5, 5, {2, 2}, {1, 1}, {2, 2, 2, 2}, NULL, true, "HardSwishGated"},
      {1, 17, 7, 7, 5, 5, {1, 1}, {1, 1}, {2, 2, 2, 2}, NULL, true, "SiLUGated"},
      {1, 5, 37, 41, 3, 3, {3, 2}, {2, 3}, {3, 0, 1, 4}, NULL, false, "LeakyRelu"},
      {1, 3, 33, 50, 7, 7, {1, 1}, {1, 1}, {3, 3, 3, 3}, NULL, true, "Tanh"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
  sweep(40);
  mismatch();
  return check_report();
}
