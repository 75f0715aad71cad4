/* test_conv_dense.c: Conv's dense implementation (src/ops/nn/conv/conv_dense.c,
 * group-1 convs as a blocked W x X product, X itself at 1x1, im2col
 * chunks otherwise) against its reference kernel
 * (KEEL_OPT_REFERENCE_KERNELS: im2col + GEMM): channel counts on and off
 * the 8-channel tile, K past one 256-row slice, pixel counts on and off
 * the 32-pixel tile and past one 256-pixel chunk, batch > 1, with and
 * without bias, fused activations, on 1 and 3 threads, then a seeded
 * sweep of random shapes, 1x1 and KxK; 1x1 convs with a stride or pads
 * and KxK windows (strides, pads, dilations, SAME pads) go through
 * im2col chunks; group 2 is not taken and must still match; a malformed
 * auto_pad must give the reference's error. Where the CPU lacks AVX-512 the reference runs both
 * sides (the describe check says which). */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

typedef struct pw_case {
  int64_t n, c, m, h, w;
  int64_t s, pad, group;       /* 1, 0, 1 for the fast kernel's own case */
  bool bias;
  const char *act;             /* fused by the pass, or NULL             */
  const char *auto_pad;
  int64_t k, d;                /* square kernel, dilation (0: 1)         */
} pw_case;

static int64_t ksz(const pw_case *t) { return t->k ? t->k : 1; }

static uint32_t g_rng = 11;
static float rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)(g_rng >> 8) / (float)(1 << 24) - 0.5f;
}
static int64_t pick(int64_t lo, int64_t hi) { /* uniform in [lo, hi] */
  g_rng = g_rng * 1664525u + 1013904223u;
  return lo + (int64_t)((g_rng >> 8) % (uint32_t)(hi - lo + 1));
}

static bool have_avx512(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

static mb_graph *model(const pw_case *t, const float *wt, const float *b) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){t->m, t->c / t->group, ksz(t), ksz(t)}, wt);
  if (t->bias) mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){t->m}, b);
  mb_node *c = mb_add(g, "Conv", t->bias ? "x,w,b" : "x,w", t->act ? "c" : "y");
  if (t->group != 1) mb_attr_i(c, "group", t->group);
  if (t->s != 1) mb_attr_ints(c, "strides", 2, (int64_t[]){t->s, t->s});
  if (t->pad) mb_attr_ints(c, "pads", 4, (int64_t[]){t->pad, t->pad, t->pad, t->pad});
  if (t->auto_pad) mb_attr_s(c, "auto_pad", t->auto_pad);
  if (t->d > 1) mb_attr_ints(c, "dilations", 2, (int64_t[]){t->d, t->d});
  if (t->act && !strcmp(t->act, "SiLUGated")) { /* x * Sigmoid(x), as exporters write SiLU */
    mb_add(g, "Sigmoid", "c", "h");
    mb_add(g, "Mul", "c,h", "y");
  } else if (t->act) {
    mb_add(g, t->act, "c", "y");
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

/* Runs the case; returns the output (caller frees) or NULL, *st the
 * run's status. */
static keel_value_t *run(const pw_case *t, const float *x, const float *wt, const float *b,
                         unsigned flags, int threads, keel_status *st) {
  keel_options o = {.size = sizeof o, .flags = flags | KEEL_OPT_NO_ONEDNN, .threads = threads};
  keel_session_t *s = mb_session_opts(model(t, wt, b), 13, &o);
  if (!s) return NULL;
  char *d = NULL;
  if (!keel_session_describe(s, 0, &d)) {
    bool fast = strstr(d, "Conv dense") != NULL;
    CHECK(fast == (!(flags & KEEL_OPT_REFERENCE_KERNELS) && t->group == 1 && have_avx512()));
    keel_free(d);
  }
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w}, x);
  keel_value_t *out[1] = {0};
  *st = keel_run(s, (const char *[]){"x"}, &in, 1, out);
  keel_value_release(in);
  keel_session_destroy(s);
  return out[0];
}

static void compare(const pw_case *t, const keel_value_t *ref, const keel_value_t *got) {
  int64_t n = keel_value_numel(ref);
  CHECK(keel_value_numel(got) == n && keel_value_rank(got) == 4);
  if (keel_value_numel(got) != n || keel_value_rank(got) != 4) return;
  CHECK(!memcmp(keel_value_shape(ref), keel_value_shape(got), 4 * sizeof(int64_t)));
  /* summation order only: the error grows with the sum's length */
  double tol = 1e-5 * sqrt((double)(t->c / t->group * ksz(t) * ksz(t)) + 1), worst = 0;
  const float *r = keel_value_data(ref), *g = keel_value_data(got);
  for (int64_t i = 0; i < n; i++)
    worst = fmax(worst, fabs((double)r[i] - g[i]) / (tol * (1 + fabs((double)r[i]))));
  if (worst > 1)
    fprintf(stderr, "pointwise n=%lld c=%lld m=%lld %lldx%lld: worst %g of the tolerance\n",
            (long long)t->n, (long long)t->c, (long long)t->m, (long long)t->h,
            (long long)t->w, worst);
  CHECK(worst <= 1);
}

static void one(const pw_case *t) {
  int64_t nx = t->n * t->c * t->h * t->w, nw = t->m * (t->c / t->group) * ksz(t) * ksz(t);
  float *x = malloc(sizeof(float) * (size_t)nx), *wt = malloc(sizeof(float) * (size_t)nw);
  float *b = malloc(sizeof(float) * (size_t)t->m);
  for (int64_t i = 0; i < nx; i++) x[i] = rnd();
  for (int64_t i = 0; i < nw; i++) wt[i] = rnd();
  for (int64_t i = 0; i < t->m; i++) b[i] = rnd();
  keel_status st;
  keel_value_t *ref = run(t, x, wt, b, KEEL_OPT_REFERENCE_KERNELS, 1, &st);
  CHECK_OK(st);
  for (int threads = 1; threads <= 3; threads += 2) {
    keel_value_t *got = run(t, x, wt, b, 0, threads, &st);
    CHECK_OK(st);
    CHECK(ref && got);
    if (ref && got) compare(t, ref, got);
    keel_value_release(got);
  }
  keel_value_release(ref);
  free(x), free(wt), free(b);
}

/* A malformed auto_pad: the kernel hands the node to the reference, so
 * both give the reference's error. */
static void bad_auto_pad(void) {
  pw_case t = {1, 4, 8, 3, 3, 1, 0, 1, true, NULL, "SIDEWAYS", 0, 0};
  float x[36] = {0}, wt[32] = {0}, b[8] = {0};
  keel_status want, got;
  keel_value_t *r = run(&t, x, wt, b, KEEL_OPT_REFERENCE_KERNELS, 1, &want);
  keel_value_t *f = run(&t, x, wt, b, 0, 1, &got);
  CHECK(want != KEEL_OK && got == want);
  keel_value_release(r), keel_value_release(f);
}

static void sweep(int count) {
  static const char *acts[] = {NULL, "Relu", "SiLUGated", "Clip", "HardSigmoid"};
  for (int i = 0; i < count; i++) {
    pw_case t = {pick(1, 2), pick(1, 70), pick(1, 40), pick(1, 24), pick(1, 24), 1, 0, 1,
                 pick(0, 1) == 1, acts[pick(0, 4)], NULL, 0, 0};
    one(&t);
    /* a KxK window through im2col: the output must keep a pixel */
    t.k = pick(2, 5), t.s = pick(1, 3), t.pad = pick(0, 2), t.d = pick(1, 2);
    if (t.h + 2 * t.pad > (t.k - 1) * t.d && t.w + 2 * t.pad > (t.k - 1) * t.d) one(&t);
  }
}

int main(void) {
  const pw_case cases[] = {
      {1, 16, 16, 112, 112, 1, 0, 1, true, "Relu", NULL, 0, 0},     /* MobileNetV3's first 1x1 */
      {1, 960, 40, 7, 7, 1, 0, 1, true, "SiLUGated", NULL, 0, 0},   /* K: four slices           */
      {1, 300, 9, 14, 14, 1, 0, 1, false, NULL, NULL, 0, 0},        /* K past one slice         */
      {2, 3, 17, 16, 20, 1, 0, 1, true, "Clip", NULL, 0, 0},        /* 320 pixels: two chunks   */
      {1, 5, 8, 1, 32, 1, 0, 1, true, NULL, NULL, 0, 0},            /* one whole tile           */
      {1, 5, 7, 1, 33, 1, 0, 1, true, "HardSigmoid", NULL, 0, 0},   /* a one-pixel tail         */
      {1, 7, 1, 1, 31, 1, 0, 1, false, NULL, NULL, 0, 0},           /* only a tail, one channel */
      {3, 1, 5, 1, 1, 1, 0, 1, true, "Tanh", NULL, 0, 0},           /* one pixel                */
      {1, 64, 255, 20, 20, 1, 0, 1, true, NULL, NULL, 0, 0},        /* the detector's head      */
      {1, 8, 8, 9, 9, 1, 0, 1, true, NULL, "SAME_UPPER", 0, 0},     /* pads nothing at 1x1      */
      {1, 8, 8, 9, 9, 1, 0, 1, true, NULL, "VALID", 0, 0},
      {1, 6, 10, 9, 11, 2, 0, 1, true, "Relu", NULL, 0, 0},         /* stride 2: im2col         */
      {1, 6, 10, 9, 11, 1, 1, 1, true, NULL, NULL, 0, 0},           /* pads: im2col             */
      {1, 6, 10, 9, 11, 1, 0, 2, true, NULL, NULL, 0, 0},           /* group 2: not bound       */
      /* KxK windows, through im2col chunks */
      {1, 3, 16, 64, 64, 2, 1, 1, true, "SiLUGated", NULL, 3, 1}, /* the detector's stem  */
      {1, 32, 64, 20, 20, 2, 1, 1, true, "SiLUGated", NULL, 3, 1},
      {1, 300, 20, 9, 9, 1, 1, 1, true, "Relu", NULL, 3, 1},  /* K = 2700: many slices    */
      {2, 5, 9, 13, 17, 1, 2, 1, false, NULL, NULL, 5, 2},    /* dilation 2               */
      {1, 4, 8, 10, 10, 3, 0, 1, true, NULL, "SAME_LOWER", 4, 1},
      {1, 64, 64, 80, 80, 1, 1, 1, true, NULL, NULL, 3, 1},   /* chunks of 32 of 6400 px  */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
  sweep(40);
  bad_auto_pad();
  return check_report();
}
