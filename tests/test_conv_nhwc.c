/* test_conv_nhwc.c: the layout pass (src/passes/pass_layout.c) and NhwcConv's
 * oneDNN implementation (src/ops/dnnl/conv_dnnl.c), against the model as
 * written run on the reference kernels (KEEL_OPT_NO_GRAPH_PASSES |
 * KEEL_OPT_REFERENCE_KERNELS), and against the pass's graph on NhwcConv's
 * own naive reference (KEEL_OPT_REFERENCE_KERNELS alone).
 *
 * One-conv cases cover groups (1, 2, depthwise), strides, asymmetric pads,
 * dilations, SAME/VALID pads, kernels wider than tall, bias or none, batch
 * 1..3, every fused activation (the gated SiLU and hardswish too, and a
 * HardSigmoid*x oneDNN cannot take), a residual Add of two convs (the sum
 * post-op) followed by Relu, a residual constant that broadcasts, on 1, 2
 * and 3 threads, few output rows over many channels (output-channel parts,
 * then other shapes on the same session), 1-4 input channels (the stem
 * kernel, the image NCHW or channels-last), 1x1 convs on 1-4 pixels
 * (keel_gemv; then larger maps on the same session), 1x1 convs of at most
 * 32 input channels, or 128 with a residual (the pointwise kernel),
 * depthwise 5x5 convs channels-last (the depthwise kernel), convs of W of
 * 1 MiB and more on at most 64 output pixels (keel's streamed kernel,
 * counted in keel_stats; then larger shapes on the same node), 3x3 convs
 * of 128+ channels on 14x14 maps and more (keel's Winograd kernel, counted
 * too; then other shapes on the same node); then a seeded
 * sweep of random shapes. A chain model runs
 * Conv, MaxPool, a residual block, Concat, Resize, AveragePool, a
 * squeeze-excite block (GlobalAveragePool, Mul) and a Conv whose output
 * is also read mid-chain, checking the graph the pass leaves (two
 * Transposes in, the rest NHWC). One session then meets 11 input shapes
 * (its cache keeps 8: evictions counted, results right). Where keel has
 * no oneDNN (or the CPU no AVX2) the pass does nothing and both sides run
 * the plain graph. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define KEEL_MAX(a, b) ((a) > (b) ? (a) : (b))

typedef struct cv_case {
  int64_t n, c, m, h, w;
  int64_t kh, kw, s, d, group;
  int64_t pads[4];             /* top, left, bottom, right                */
  bool bias;
  const char *act;             /* an op, "SiLUGated", "HSwishGated", "OddHSigGated" */
  const char *auto_pad;
  int residual;                /* 0, 1: Add(conv, conv2) then Relu, 2: Add a [1,M,1,1] constant,
                                  3: a 1x1 conv after (the first's output and
                                  the second's input stay NHWC), 4: a 1x1
                                  conv before and after (the case's conv
                                  NHWC on both sides: the Winograd path),
                                  5: a 1x1 conv before, and a second 1x1
                                  conv of its output added (a residual Z
                                  channels-last), 6: a 1x1 conv before, its
                                  output both the case conv's X and its Z */
} cv_case;

static uint32_t g_rng = 7;
static float rnd(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)(g_rng >> 8) / (float)(1 << 24) - 0.5f;
}
static int64_t pick(int64_t lo, int64_t hi) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return lo + (int64_t)((g_rng >> 8) % (uint32_t)(hi - lo + 1));
}

static bool have_dnnl(void) {
  keel_options o = {.size = sizeof o};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){1, 1, 4, 4});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){1, 1, 1, 1}, (float[]){1});
  mb_add(g, "Conv", "x,w", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session_opts(g, 13, &o);
  char *d = NULL;
  bool yes = s && !keel_session_describe(s, 0, &d) && strstr(d, "NhwcConv onednn");
  keel_free(d);
  keel_session_destroy(s);
  return yes;
}

static void conv_node(mb_graph *g, const cv_case *t, const char *in, const char *w, const char *b,
                      const char *out) {
  char ins[64];
  snprintf(ins, sizeof ins, "%s,%s%s%s", in, w, t->bias ? "," : "", t->bias ? b : "");
  mb_node *c = mb_add(g, "Conv", ins, out);
  if (t->group != 1) mb_attr_i(c, "group", t->group);
  if (t->s != 1) mb_attr_ints(c, "strides", 2, (int64_t[]){t->s, t->s});
  if (t->d != 1) mb_attr_ints(c, "dilations", 2, (int64_t[]){t->d, t->d});
  if (t->auto_pad) mb_attr_s(c, "auto_pad", t->auto_pad);
  else mb_attr_ints(c, "pads", 4, (int64_t[]){t->pads[0], t->pads[1], t->pads[2], t->pads[3]});
}

static mb_graph *model(const cv_case *t, const float *wt, const float *b, const float *w2,
                       const float *zc) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){t->m, t->c / t->group, t->kh, t->kw}, wt);
  if (t->bias) mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){t->m}, b);
  const char *c = "c";
  if (t->residual >= 4) { /* a 1x1 conv before (w2's first C*C values) */
    mb_init(g, "w4", KEEL_FLOAT, 4, (int64_t[]){t->c, t->c, 1, 1}, w2);
    mb_add(g, "Conv", "x,w4", "x4");
    mb_add(g, "Relu", "x4", "xr");
  }
  conv_node(g, t, t->residual >= 4 ? "xr" : "x", "w", "b", "c");
  if (t->residual == 1) { /* a second conv of the same geometry, added */
    mb_init(g, "w2", KEEL_FLOAT, 4, (int64_t[]){t->m, t->c / t->group, t->kh, t->kw}, w2);
    conv_node(g, t, "x", "w2", "b", "c2");
    mb_add(g, "Add", "c2,c", "s");
    mb_add(g, "Relu", "s", "r");
    c = "r";
  } else if (t->residual == 2) {
    mb_init(g, "z", KEEL_FLOAT, 4, (int64_t[]){1, t->m, 1, 1}, zc);
    mb_add(g, "Add", "c,z", "s");
    c = "s";
  } else if (t->residual == 6) { /* the conv's own input added: Z is X */
    mb_add(g, "Add", "c,xr", "s");
    mb_add(g, "Relu", "s", "r");
    c = "r";
  } else if (t->residual == 5) { /* a channels-last residual: a 1x1 conv of xr (w2's first
                                     M*C values), added, then Relu */
    mb_init(g, "w5", KEEL_FLOAT, 4, (int64_t[]){t->m, t->c, 1, 1}, w2);
    mb_add(g, "Conv", "xr,w5", "z5");
    mb_add(g, "Add", "c,z5", "s");
    mb_add(g, "Relu", "s", "r");
    c = "r";
  } else if (t->residual >= 3) { /* w2's first M*M values as a 1x1 conv after */
    mb_init(g, "w3", KEEL_FLOAT, 4, (int64_t[]){t->m, t->m, 1, 1}, w2);
    mb_add(g, "Relu", "c", "cr");
    mb_add(g, "Conv", "cr,w3", "c3");
    c = "c3";
  }
  if (!t->act) {
    mb_add(g, "Identity", c, "y");
  } else if (!strcmp(t->act, "SiLUGated")) {
    mb_add(g, "Sigmoid", c, "h");
    char ins[32];
    snprintf(ins, sizeof ins, "%s,h", c);
    mb_add(g, "Mul", ins, "y");
  } else if (!strcmp(t->act, "HSwishGated") || !strcmp(t->act, "OddHSigGated")) {
    mb_node *h = mb_add(g, "HardSigmoid", c, "h");
    bool odd = t->act[0] == 'O';
    mb_attr_f(h, "alpha", odd ? 0.25f : 1.0f / 6.0f);
    mb_attr_f(h, "beta", 0.5f);
    char ins[32];
    snprintf(ins, sizeof ins, "%s,h", c);
    mb_add(g, "Mul", ins, "y");
  } else {
    mb_node *a = mb_add(g, t->act, c, "y");
    if (!strcmp(t->act, "LeakyRelu")) mb_attr_f(a, "alpha", 0.1f);
    if (!strcmp(t->act, "Clip")) mb_attr_f(a, "min", -0.2f), mb_attr_f(a, "max", 0.3f);
  }
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static uint64_t g_streamed; /* the last run's convs on the streamed kernel */
static uint64_t g_wg;       /* ... on keel's Winograd kernel */
static uint64_t g_owg;      /* ... on oneDNN's Winograd kernel */

static keel_value_t *run(const cv_case *t, const float *x, const float *wt, const float *b,
                         const float *w2, const float *zc, unsigned flags, int threads,
                         keel_status *st, char **desc) {
  keel_options o = {.size = sizeof o, .flags = flags, .threads = threads};
  keel_session_t *s = mb_session_opts(model(t, wt, b, w2, zc), 14, &o);
  *st = KEEL_ERR_RUNTIME;
  if (!s) return NULL;
  if (desc) keel_session_describe(s, 0, desc);
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w}, x);
  keel_value_t *out[1] = {0};
  *st = keel_run(s, (const char *[]){"x"}, &in, 1, out);
  keel_value_release(in);
  keel_stats stats = {.size = sizeof stats};
  CHECK_OK(keel_stats_get(s, &stats));
  g_streamed = stats.streamed_convs;
  g_wg = stats.winograd_convs;
  g_owg = stats.onednn_winograd_convs;
  keel_session_destroy(s);
  return out[0];
}

static double worst_of(const keel_value_t *ref, const keel_value_t *got, double tol) {
  int64_t n = keel_value_numel(ref);
  if (keel_value_numel(got) != n || keel_value_rank(got) != keel_value_rank(ref) ||
      memcmp(keel_value_shape(ref), keel_value_shape(got), sizeof(int64_t) * (size_t)keel_value_rank(ref)))
    return INFINITY;
  const float *r = keel_value_data(ref), *g = keel_value_data(got);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)r[i] - g[i]) / (tol * (1 + fabs((double)r[i])));
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

static bool g_dnnl;
static int g_cases;
static uint64_t g_streamed_fast; /* one(): the most convs any fast variant streamed */
static uint64_t g_wg_fast;       /* ... put on keel's Winograd kernel */
static uint64_t g_owg_every;     /* the fewest any fast variant put on oneDNN's */
static double g_tol_scale = 1;   /* the tolerance's factor (streamed())          */

/* A case's random input, weights (W, a second W for the extra convs, B)
 * and residual constant, drawn in this order. */
typedef struct cv_data {
  float *x, *wt, *w2, *b, *zc;
} cv_data;

static cv_data cv_data_new(const cv_case *t) {
  int64_t nx = t->n * t->c * t->h * t->w, nw = t->m * (t->c / t->group) * t->kh * t->kw;
  int64_t nw2 = KEEL_MAX(KEEL_MAX(nw, t->m * t->m), t->c * t->c);
  cv_data d = {malloc(sizeof(float) * (size_t)nx), malloc(sizeof(float) * (size_t)nw),
               malloc(sizeof(float) * (size_t)nw2), malloc(sizeof(float) * (size_t)t->m),
               malloc(sizeof(float) * (size_t)t->m)};
  for (int64_t i = 0; i < nx; i++) d.x[i] = rnd() * 4;
  for (int64_t i = 0; i < nw; i++) d.wt[i] = rnd();
  for (int64_t i = 0; i < nw2; i++) d.w2[i] = rnd();
  for (int64_t i = 0; i < t->m; i++) d.b[i] = rnd(), d.zc[i] = rnd();
  return d;
}

static void cv_data_free(cv_data *d) { free(d->x), free(d->wt), free(d->w2), free(d->b), free(d->zc); }

static void one(const cv_case *t) {
  cv_data d = cv_data_new(t);
  float *x = d.x, *wt = d.wt, *w2 = d.w2, *b = d.b, *zc = d.zc;
  keel_status st;
  keel_value_t *ref = run(t, x, wt, b, w2, zc, KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS,
                          1, &st, NULL);
  CHECK_OK(st);
  double tol = 2e-6 * g_tol_scale * sqrt((double)(t->c / t->group * t->kh * t->kw) + 1);
  /* the pass's graph on NhwcConv's naive reference, then on oneDNN */
  for (int v = 0; v < 4 && ref; v++) {
    int threads = v == 0 ? 2 : v;
    unsigned flags = v == 0 ? KEEL_OPT_REFERENCE_KERNELS : 0;
    char *desc = NULL;
    keel_value_t *got = run(t, x, wt, b, w2, zc, flags, threads, &st, &desc);
    CHECK_OK(st);
    if (v == 1) g_streamed_fast = g_wg_fast = 0;
    if (v) g_streamed_fast = KEEL_MAX(g_streamed_fast, g_streamed);
    if (v) g_wg_fast = KEEL_MAX(g_wg_fast, g_wg);
    if (v) g_owg_every = v == 1 ? g_owg : (g_owg < g_owg_every ? g_owg : g_owg_every);
    if (g_dnnl && desc) {
      /* bound to an implementation (oneDNN's, or keel's stem kernel), or,
       * with KEEL_OPT_REFERENCE_KERNELS, to none */
      bool nhwc = strstr(desc, "NhwcConv") != NULL;
      bool bound = strstr(desc, "NhwcConv onednn") || strstr(desc, "NhwcConv stem") ||
                   strstr(desc, "NhwcConv pointwise") || strstr(desc, "NhwcConv depthwise");
      CHECK(nhwc);
      if (bound != (v != 0)) fprintf(stderr, "variant %d binds: %s\n", v, desc);
      CHECK(bound == (v != 0));
    }
    keel_free(desc);
    double worst = got ? worst_of(ref, got, tol) : INFINITY;
    if (!(worst <= 1))
      fprintf(stderr,
              "case n=%lld c=%lld m=%lld %lldx%lld k=%lldx%lld s=%lld d=%lld g=%lld act=%s "
              "res=%d pad=%s pads %lld %lld %lld %lld bias %d variant %d: worst %g of the tolerance\n",
              (long long)t->n, (long long)t->c, (long long)t->m, (long long)t->h, (long long)t->w,
              (long long)t->kh, (long long)t->kw, (long long)t->s, (long long)t->d,
              (long long)t->group, t->act ? t->act : "-", t->residual,
              t->auto_pad ? t->auto_pad : "explicit", (long long)t->pads[0], (long long)t->pads[1], (long long)t->pads[2], (long long)t->pads[3], t->bias, v, worst);
    CHECK(worst <= 1);
    keel_value_release(got);
  }
  keel_value_release(ref);
  cv_data_free(&d);
  g_cases++;
}

/* A node whose first run takes output-channel parts (2 threads, 7 output
 * rows) keeps them for every shape after it (batches of 1-3, other sizes),
 * on one session: each run against the reference. */
static void shapes_after(cv_case t, const int64_t (*shapes)[3], int count, const char *what) {
  int64_t nw = KEEL_MAX(t.m * t.c * t.kh * t.kw, KEEL_MAX(t.m * t.m, t.c * t.c));
  float *wt = malloc(sizeof(float) * (size_t)nw), *w2 = malloc(sizeof(float) * (size_t)nw);
  float *b = malloc(sizeof(float) * (size_t)t.m), *zc = malloc(sizeof(float) * (size_t)t.m);
  for (int64_t i = 0; i < nw; i++) wt[i] = rnd(), w2[i] = rnd();
  for (int64_t i = 0; i < t.m; i++) b[i] = rnd(), zc[i] = rnd();
  cv_case dyn = t;
  dyn.n = dyn.h = dyn.w = -1; /* symbolic: any batch and size */
  keel_options o = {.size = sizeof o, .threads = 2};
  keel_session_t *s = mb_session_opts(model(&dyn, wt, b, w2, zc), 14, &o);
  CHECK(s != NULL);
  for (int i = 0; s && i < count; i++) {
    cv_case u = t;
    u.n = shapes[i][0], u.h = shapes[i][1], u.w = shapes[i][2];
    int64_t nx = u.n * u.c * u.h * u.w;
    float *x = malloc(sizeof(float) * (size_t)nx);
    for (int64_t k = 0; k < nx; k++) x[k] = rnd() * 4;
    keel_status st;
    keel_value_t *ref = run(&u, x, wt, b, w2, zc,
                            KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS, 1, &st, NULL);
    CHECK_OK(st);
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){u.n, u.c, u.h, u.w}, x);
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
    double tol = 2e-6 * g_tol_scale * sqrt((double)(KEEL_MAX(t.c, t.m) * t.kh * t.kw) + 1);
    double worst = ref && out[0] ? worst_of(ref, out[0], tol) : INFINITY;
    if (!(worst <= 1)) fprintf(stderr, "%s, shape %d: worst %g of the tolerance\n", what, i, worst);
    CHECK(worst <= 1);
    keel_value_release(in), keel_value_release(out[0]), keel_value_release(ref);
    free(x);
  }
  keel_session_destroy(s);
  free(wt), free(w2), free(b), free(zc);
}

/* Runs cases[0..n) (one()); where the kernel runs (`runs`: the CPU, and
 * oneDNN where the kernel is reached only through it) every case but the
 * last must have put a conv on the kernel *count counts, the last none;
 * elsewhere none. */
static void taken_by(const cv_case *cases, size_t n, const uint64_t *count, const char *kernel,
                     bool runs) {
  for (size_t i = 0; i < n; i++) {
    one(&cases[i]);
    bool want = runs && i + 1 < n;
    if ((*count >= 1) != want)
      fprintf(stderr, "%s case %zu: %llu conv(s) on the kernel\n", kernel, i,
              (unsigned long long)*count);
    CHECK((*count >= 1) == want);
  }
}

/* W of at least 1 MiB, at most 64 output pixels (256 for a strided 1x1),
 * channels-last on both sides: keel's streamed kernel on AVX-512 (blocks
 * of 64 outputs and a masked last one, tiles of 1-7 pixels of a row or
 * of a 1x1's line, taps and rows wholly in the padding, dilation, batch
 * 2, a residual Z in Y's buffer or read from X, every activation form);
 * then a node that streamed on its first run meets larger shapes. */
static void streamed(void) {
  static const cv_case cases[] = {
      {1, 256, 128, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 128, 272, 9, 8, 3, 3, 2, 1, 1, {1, 0, 2, 1}, false, "HSwishGated", NULL, 4},
      {2, 256, 160, 5, 5, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "SiLUGated", NULL, 4},
      {1, 128, 256, 7, 7, 3, 3, 1, 2, 1, {2, 2, 2, 2}, true, "Clip", NULL, 4},
      {1, 128, 256, 3, 5, 3, 3, 1, 1, 1, {3, 1, 3, 1}, true, "OddHSigGated", NULL, 4},
      {1, 300, 100, 7, 6, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 480, 600, 5, 6, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, NULL, NULL, 5},
      {1, 520, 520, 3, 3, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Relu", NULL, 6},
      {1, 512, 520, 27, 28, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, "HardSigmoid", NULL, 4},
      {1, 1100, 256, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Tanh", NULL, 4}, /* one pixel: gemv */
  };
  g_tol_scale = 4; /* sums of up to 2304 products, chained: the references differ more */
  __builtin_cpu_init();
  taken_by(cases, sizeof cases / sizeof *cases, &g_streamed_fast, "streamed",
           g_dnnl && __builtin_cpu_supports("avx512f"));
  cv_case t = {1, 256, 128, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4};
  /* 30x36 and 2 x 25x25: more tiles than a span holds (128) */
  static const int64_t shapes[][3] = {{1, 7, 7}, {2, 12, 12}, {1, 30, 36}, {3, 4, 4},
                                      {2, 25, 25}, {1, 7, 7}};
  shapes_after(t, shapes, 6, "streamed then shapes");
  g_tol_scale = 1;
}

/* 3x3 stride-1 convs of 128+ input channels (by 16s) and outputs by 64s
 * on 14x14 maps and more, channels-last both sides: keel's Winograd
 * kernel on AVX-512 or AVX2+FMA (odd sizes whose last tiles are cut, asymmetric pads
 * up to 2, no pads, batch 2, a residual Z in Y's buffer or read from X,
 * every activation form, counted in keel_stats); then a node that took it
 * on its first run meets other shapes, 7x7 and 1x1 among them. */
static void winograd(void) {
  static const cv_case cases[] = {
      {1, 128, 128, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 128, 64, 15, 17, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "SiLUGated", NULL, 4},
      {1, 144, 128, 15, 17, 3, 3, 1, 1, 1, {2, 0, 1, 2}, true, "Clip", NULL, 4},
      {1, 160, 192, 18, 16, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, "OddHSigGated", NULL, 4},
      {2, 128, 192, 14, 14, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "HSwishGated", NULL, 4},
      {1, 128, 128, 16, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, NULL, NULL, 5},
      {1, 128, 128, 14, 15, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "Relu", NULL, 6},
      {1, 256, 256, 14, 14, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "HardSigmoid", NULL, 4},
      {1, 64, 64, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4}, /* 64: oneDNN's */
  };
  g_tol_scale = 2; /* Winograd's transforms: a few ulps more */
  __builtin_cpu_init();
  taken_by(cases, sizeof cases / sizeof *cases, &g_wg_fast, "Winograd",
           __builtin_cpu_supports("avx512f") ||
               (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
  cv_case t = {1, 128, 128, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4};
  /* 2 x 40x30: 600 tiles, three groups */
  static const int64_t shapes[][3] = {{1, 28, 28}, {1, 7, 7}, {3, 9, 30}, {1, 1, 1}, {2, 16, 15},
                                      {2, 40, 30}};
  shapes_after(t, shapes, 6, "Winograd then shapes");
  g_tol_scale = 1;
}

/* 3x3 stride-1 convs of 64-127 channels (by 16s) on 14x14 maps and more:
 * oneDNN's Winograd kernel on AVX-512 (ops/dnnl/conv_wino.c), at every
 * thread count (1-3): in bands of rows where the map has 8+ rows per
 * thread (28 rows: 2 and 3 bands; 35 rows without pads; 19 rows, batch
 * 2), in parts of the output channels where it has fewer (14 rows), each
 * band's pads as rows of zeros; pads above and below that differ (bands
 * only: one thread's whole map goes direct) against the reference; pads
 * left and right that differ: oneDNN has no such kernel, the conv runs
 * direct. Then a node that ran in bands meets other shapes, down to a
 * 2x2 map, batch 3 and a 60-row one. */
static void onednn_winograd(void) {
  static const cv_case cases[] = {
      {1, 64, 64, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 64, 80, 37, 23, 3, 3, 1, 1, 1, {0, 0, 0, 0}, false, "SiLUGated", NULL, 4},
      {2, 96, 64, 19, 30, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "HSwishGated", NULL, 4},
      {1, 64, 64, 14, 14, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Clip", NULL, 4},
      {1, 80, 112, 26, 21, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Tanh", NULL, 4},
      {1, 64, 64, 20, 20, 3, 3, 1, 1, 1, {1, 1, 1, 0}, true, "Relu", NULL, 4}, /* direct */
  };
  g_tol_scale = 2; /* Winograd's transforms: a few ulps more */
  __builtin_cpu_init();
  taken_by(cases, sizeof cases / sizeof *cases, &g_owg_every, "oneDNN's Winograd",
           g_dnnl && __builtin_cpu_supports("avx512f"));
  one(&(cv_case){1, 64, 64, 33, 20, 3, 3, 1, 1, 1, {1, 1, 0, 1}, true, "Relu", NULL, 4});
  cv_case t = cases[0];
  static const int64_t shapes[][3] = {{1, 28, 28}, {1, 7, 7},   {2, 16, 15},
                                      {1, 60, 44}, {3, 9, 30}, {1, 2, 2}};
  shapes_after(t, shapes, 6, "oneDNN's Winograd then shapes");
  g_tol_scale = 1;
}

/* Strided 1x1 convs without pads: without AVX-512 the layout pass has
 * them read a subsample (a Slice with steps, "keel.layout/<conv>/subsample")
 * and run at stride 1 (ops/nn/conv/select.c, keel_conv_subsample_first).
 * The cases (odd maps, strides 2 and 3 and (2, 1), groups, auto_pad,
 * inside a chain and at its edge, batch 2) against the reference; then,
 * on a model of opset 9 (Slice in attribute form there: keel's node is
 * opset 13's), whether the subsample is there, and a padded strided 1x1
 * that must not be subsampled. */
static void subsampled(void) {
  static const cv_case cases[] = {
      {1, 64, 128, 14, 15, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, "Relu", NULL, 4},
      {2, 32, 48, 9, 7, 1, 1, 3, 1, 2, {0, 0, 0, 0}, false, NULL, "SAME_UPPER", 0},
      {1, 24, 40, 11, 13, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, "HSwishGated", NULL, 3},
      {1, 16, 16, 9, 9, 1, 1, 2, 1, 1, {1, 1, 1, 1}, true, NULL, NULL, 4}, /* pads: stays */
      {1, 8, 8, 1, 1, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, "Relu", "VALID", 0}, /* 1x1 map */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
  __builtin_cpu_init();
  bool want = g_dnnl && !__builtin_cpu_supports("avx512f");
  for (int pads = 0; pads < 2; pads++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){1, 8, 9, 7});
    static float w[16 * 8];
    for (int i = 0; i < 16 * 8; i++) w[i] = rnd();
    mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){16, 8, 1, 1}, w);
    mb_node *n = mb_add(g, "Conv", "x,w", "y");
    mb_name(n, "down");
    mb_attr_ints(n, "strides", 2, (int64_t[]){2, 1});
    mb_attr_ints(n, "pads", 4, (int64_t[]){0, 0, pads, 0});
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    keel_session_t *s = mb_session(g, 9);
    char *d = NULL;
    CHECK(s && !keel_session_describe(s, 0, &d));
    bool has = d && strstr(d, "Slice");
    if (has != (want && !pads)) fprintf(stderr, "subsample (pads %d): %s\n", pads, d ? d : "?");
    CHECK(has == (want && !pads));
    keel_free(d);
    float x[8 * 9 * 7];
    for (int i = 0; i < 8 * 9 * 7; i++) x[i] = rnd();
    keel_value_t *in = s ? mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 8, 9, 7}, x) : NULL;
    keel_value_t *out[1] = {NULL};
    CHECK(in && !keel_run(s, (const char *[]){"x"}, &in, 1, out));
    int64_t oh = (9 + pads - 1) / 2 + 1;
    const float *y = out[0] ? keel_value_data(out[0]) : NULL;
    double worst = 0;
    for (int64_t m = 0; y && m < 16; m++)
      for (int64_t r = 0; r < oh; r++)
        for (int64_t c = 0; c < 7; c++) {
          double want_v = 0;
          if (2 * r < 9)
            for (int k = 0; k < 8; k++) want_v += (double)w[m * 8 + k] * x[(k * 9 + 2 * r) * 7 + c];
          worst = fmax(worst, fabs(want_v - y[(m * oh + r) * 7 + c]));
        }
    CHECK(y && worst < 1e-5);
    keel_value_release(in), keel_value_release(out[0]);
    keel_session_destroy(s);
  }
}

/* Deep strided KxK convs and KxK convs on maps of at most 7x7: without
 * AVX-512, each output pixel's window as a row on oneDNN's matmul
 * (ops/nn/conv/select.c, keel_conv_lowered_fits): strides 2 and 3,
 * asymmetric and large pads (windows wholly in the padding), dilation, a
 * 5x3 window, batch 2, residual Z in Y's buffer or read from X, every
 * activation form, 1 and more threads (one()'s variants). */
static void lowered(void) {
  static const cv_case cases[] = {
      {1, 128, 128, 14, 14, 3, 3, 2, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {2, 128, 64, 15, 13, 3, 3, 2, 1, 1, {0, 1, 2, 0}, false, "SiLUGated", NULL, 4},
      {1, 144, 96, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Clip", NULL, 4},
      {1, 128, 80, 6, 5, 5, 3, 1, 2, 1, {4, 2, 4, 2}, true, "OddHSigGated", NULL, 4},
      {1, 160, 64, 11, 12, 3, 3, 3, 1, 1, {1, 1, 1, 1}, true, NULL, "SAME_UPPER", 4},
      {1, 128, 128, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 5},
      {2, 128, 128, 5, 6, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "HSwishGated", NULL, 6},
      {1, 128, 32, 3, 3, 3, 3, 1, 1, 1, {3, 3, 3, 3}, true, "HardSigmoid", NULL, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
}

/* 1x1 convs of 128+ channels both ways and W of 0.5-1 MiB on at most 256
 * pixels: on AVX-512 at one thread (one()'s variant 1) the same path, the
 * pixels as the rows without a copy (keel_conv_pointwise_mm_fits): Relu,
 * a residual Z read and in Y's buffer, SiLU, HardSwish, batch 2. */
static void pointwise_mm(void) {
  static const cv_case cases[] = {
      {1, 192, 1152, 7, 7, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu", NULL, 4},
      {1, 1024, 256, 14, 14, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, NULL, NULL, 5},
      {2, 960, 160, 9, 9, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "SiLUGated", NULL, 4},
      {1, 384, 384, 7, 7, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "HSwishGated", NULL, 6},
  };
  g_tol_scale = 4; /* sums of up to 1152 products, chained: the references differ more */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
  g_tol_scale = 1;
}

/* Without oneDNN (KEEL_OPT_NO_ONEDNN) the layout pass makes a Conv
 * channels-last only where keel's Winograd kernel takes it (3x3, stride
 * 1, 128+ channels by 16s, outputs by 64s, an output of 14x14 or more:
 * ops/nn/conv/select.c) and binds it to that kernel ("winograd"); the
 * chain's edge Transposes stay (no keel.in_nchw: the kernel reads NHWC
 * only). Each case against the reference at 1 and 2 threads, with a
 * residual Z, Z broadcast, Z being X, auto_pad, asymmetric pads, batch 2
 * and every activation form; the last three must stay NCHW (a 7x7 output,
 * 64 channels, 80 outputs). */
static void without_library(void) {
  static const cv_case cases[] = {
      {1, 128, 128, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 0},
      {1, 128, 64, 15, 17, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "SiLUGated", NULL, 4},
      {1, 144, 128, 15, 17, 3, 3, 1, 1, 1, {2, 0, 1, 2}, true, "Clip", NULL, 4},
      {2, 128, 192, 14, 14, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "HSwishGated", NULL, 1},
      {1, 128, 128, 16, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, NULL, NULL, 5},
      {1, 128, 128, 14, 15, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "Relu", NULL, 6},
      {1, 128, 64, 20, 20, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, "OddHSigGated", "SAME_UPPER", 2},
      {1, 160, 64, 18, 16, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, "HardSigmoid", "VALID", 3},
      {1, 128, 128, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 64, 64, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 128, 80, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 0},
  };
  size_t n = sizeof cases / sizeof *cases;
  __builtin_cpu_init();
  bool isa = __builtin_cpu_supports("avx512f") ||
             (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  for (size_t i = 0; i < n; i++) {
    const cv_case *t = &cases[i];
    cv_data d = cv_data_new(t);
    float *x = d.x, *wt = d.wt, *w2 = d.w2, *b = d.b, *zc = d.zc;
    keel_status st;
    keel_value_t *ref = run(t, x, wt, b, w2, zc, KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS,
                            1, &st, NULL);
    CHECK_OK(st);
    double tol = 4e-6 * sqrt((double)(t->c * 9) + 1);
    bool want = isa && i + 3 < n;
    for (int threads = 1; threads <= 2 && ref; threads++) {
      char *desc = NULL;
      keel_value_t *got = run(t, x, wt, b, w2, zc, KEEL_OPT_NO_ONEDNN, threads, &st, &desc);
      CHECK_OK(st);
      bool taken = desc && strstr(desc, "NhwcConv winograd");
      if (taken != want || g_wg != (uint64_t)taken * (t->residual == 1 ? 2 : 1))
        fprintf(stderr, "without oneDNN, case %zu: %s (%llu counted)\n", i, desc ? desc : "-",
                (unsigned long long)g_wg);
      CHECK(taken == want);
      CHECK(g_wg == (uint64_t)taken * (t->residual == 1 ? 2 : 1));
      keel_free(desc);
      double worst = got ? worst_of(ref, got, tol) : INFINITY;
      if (!(worst <= 1))
        fprintf(stderr, "without oneDNN, case %zu, %d thread(s): worst %g of the tolerance\n", i,
                threads, worst);
      CHECK(worst <= 1);
      keel_value_release(got);
    }
    keel_value_release(ref);
    cv_data_free(&d);
  }
}

static void parts_then_shapes(void) {
  cv_case t = {1, 64, 96, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "HardSigmoid", NULL, 4};
  static const int64_t shapes[][3] = {{1, 7, 7}, {2, 9, 9}, {1, 16, 16}, {3, 5, 6}, {1, 7, 7}};
  shapes_after(t, shapes, 5, "parts then shapes");
}

/* 1x1 convs whose first run has at most 4 pixels (keel_gemv, path 4),
 * then larger maps (oneDNN) and small ones again, on one session. */
static void gemv_then_shapes(void) {
  cv_case t = {1, 96, 40, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "HardSigmoid", NULL, 4};
  static const int64_t shapes[][3] = {{1, 1, 1}, {2, 1, 2}, {1, 7, 7}, {3, 1, 1}, {5, 1, 1},
                                      {1, 2, 2}, {1, 1, 1}};
  shapes_after(t, shapes, 7, "gemv then shapes");
}

/* A residual Add whose other input's producer comes after the conv in the
 * file (ResNet's conv1, conv2, conv3, downsample, Add): the conv, with the
 * Add folded in, takes the Add's place, so the file's order stands (the
 * downsample after conv2, not moved up to run right after conv1 and held
 * across conv2), and the output is the reference's. */
static void residual_order(void) {
  enum { RC = 16, RM = 32, RH = 8 };
  static float x[RC * RH * RH], w1[RC * RC], w3[RM * RC], wd[RM * RC];
  for (int i = 0; i < RC * RH * RH; i++) x[i] = rnd() * 4;
  for (int i = 0; i < RC * RC; i++) w1[i] = rnd();
  for (int i = 0; i < RM * RC; i++) w3[i] = rnd(), wd[i] = rnd();
  keel_value_t *y[2] = {NULL, NULL}; /* the reference's, the passes' */
  for (int v = 0; v < 2; v++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){1, RC, RH, RH});
    mb_init(g, "w1", KEEL_FLOAT, 4, (int64_t[]){RC, RC, 1, 1}, w1);
    mb_init(g, "w3", KEEL_FLOAT, 4, (int64_t[]){RM, RC, 1, 1}, w3);
    mb_init(g, "wd", KEEL_FLOAT, 4, (int64_t[]){RM, RC, 1, 1}, wd);
    mb_name(mb_add(g, "Conv", "x,w1", "a"), "conv1");
    mb_add(g, "Relu", "a", "r");
    mb_name(mb_add(g, "Conv", "r,w1", "a2"), "conv2");
    mb_add(g, "Relu", "a2", "r2");
    mb_name(mb_add(g, "Conv", "r2,w3", "c3"), "conv3");
    mb_name(mb_add(g, "Conv", "x,wd", "ds"), "downsample");
    mb_add(g, "Add", "c3,ds", "s");
    mb_add(g, "Relu", "s", "y");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o,
                      .flags = v ? 0 : KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS};
    keel_session_t *s = mb_session_opts(g, 14, &o);
    CHECK(s != NULL);
    if (!s) continue;
    CHECK_OK(keel_profile_start(s, KEEL_PROFILE_TRACE));
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, RC, RH, RH}, x);
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
    keel_profile_stop(s);
    char *json = NULL;
    CHECK_OK(keel_profile_trace_json(s, &json));
    if (v && g_dnnl && json) { /* conv2, downsample, conv3 (the fused node names it first) */
      const char *c2 = strstr(json, "'conv2'"), *ds = strstr(json, "'downsample'"),
                 *c3 = strstr(json, "'conv3'");
      bool in_order = c2 && ds && c3 && c2 < ds && ds < c3;
      if (!in_order) fprintf(stderr, "residual order: not conv2, downsample, conv3\n");
      CHECK(in_order);
    }
    keel_free(json);
    y[v] = out[0]; /* a value outlives its session */
    keel_value_release(in);
    keel_session_destroy(s);
  }
  CHECK(y[0] && y[1]);
  CHECK(y[0] && y[1] && worst_of(y[0], y[1], 1e-5) <= 1);
  keel_value_release(y[0]), keel_value_release(y[1]);
}

/* Identical convs share one oneDNN primitive (keel_dnnl_prim_make): three
 * 3x3 convs alike but for their weights, one with another activation and
 * one with its padding moved (same output shape: a share would give
 * wrong values there). At one thread (one band per node): 3 primitives for
 * 5 nodes, and every value equal to the reference kernels'. */
static void shared_primitives(void) {
  enum { SC = 48, SH = 20, NW = 5 };
  static float x[SC * SH * SH], w[NW][SC * SC * 9];
  for (int i = 0; i < SC * SH * SH; i++) x[i] = rnd();
  for (int k = 0; k < NW; k++)
    for (int i = 0; i < SC * SC * 9; i++) w[k][i] = rnd() * 0.2f;
  keel_value_t *y[2] = {NULL, NULL}; /* the reference's, the passes' */
  for (int v = 0; v < 2; v++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){1, SC, SH, SH});
    static const char *wn[NW] = {"w0", "w1", "w2", "w3", "w4"};
    for (int k = 0; k < NW; k++)
      mb_init(g, wn[k], KEEL_FLOAT, 4, (int64_t[]){SC, SC, 3, 3}, w[k]);
    static const float lo = 0, hi = 0.5f;
    mb_init(g, "lo", KEEL_FLOAT, 0, NULL, &lo);
    mb_init(g, "hi", KEEL_FLOAT, 0, NULL, &hi);
    static const char *chain[NW][3] = {{"x,w0", "a0", "r0"}, {"r0,w1", "a1", "r1"},
                                       {"r1,w2", "a2", "r2"}, {"r2,w3", "a3", "r3"},
                                       {"r3,w4", "a4", "y"}};
    for (int k = 0; k < NW; k++) {
      mb_node *c = mb_add(g, "Conv", chain[k][0], chain[k][1]);
      mb_attr_ints(c, "kernel_shape", 2, (int64_t[]){3, 3});
      mb_attr_ints(c, "pads", 4, k == 4 ? (int64_t[]){2, 2, 0, 0} : (int64_t[]){1, 1, 1, 1});
      if (k == 3) mb_add(g, "Clip", "a3,lo,hi", chain[k][2]); /* ReLU6 */
      else mb_add(g, "Relu", chain[k][1], chain[k][2]);
    }
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    keel_options o = {.size = sizeof o, .threads = 1,
                      .flags = v ? 0 : KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS};
    keel_session_t *s = mb_session_opts(g, 14, &o);
    CHECK(s != NULL);
    if (!s) continue;
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, SC, SH, SH}, x);
    keel_value_t *out[1] = {0};
    for (int r = 0; r < 2; r++) {
      keel_value_release(out[0]), out[0] = NULL;
      CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, out));
    }
    keel_stats st = {.size = sizeof st};
    CHECK_OK(keel_stats_get(s, &st));
    if (v && g_dnnl) {
      if (st.library_objects != 3)
        fprintf(stderr, "shared primitives: %llu for 5 convs, want 3\n",
                (unsigned long long)st.library_objects);
      CHECK(st.library_objects == 3);
    }
    y[v] = out[0]; /* a value outlives its session */
    keel_value_release(in);
    keel_session_destroy(s);
  }
  CHECK(y[0] && y[1]);
  CHECK(y[0] && y[1] && worst_of(y[0], y[1], 1e-4) <= 1);
  keel_value_release(y[0]), keel_value_release(y[1]);
}

static void sweep(int count) {
  static const char *acts[] = {NULL, "Relu", "SiLUGated", "Clip", "HardSigmoid", "HSwishGated",
                               "Tanh", "LeakyRelu"};
  for (int i = 0; i < count; i++) {
    int64_t c = pick(1, 40), groups[3] = {1, c, 1};
    int64_t kind = pick(0, 2), group = groups[kind];
    if (kind == 2 && c % 2 == 0) group = 2;
    int64_t m = group == c ? c * pick(1, 2) : group * pick(1, 24);
    cv_case t = {pick(1, 2), c, m, pick(1, 30), pick(1, 30), pick(1, 5), pick(1, 5), pick(1, 3),
                 pick(1, 2), group, {pick(0, 2), pick(0, 2), pick(0, 2), pick(0, 2)},
                 pick(0, 1) == 1, acts[pick(0, 7)], NULL, (int)pick(0, 3)};
    int64_t eh = (t.kh - 1) * t.d + 1, ew = (t.kw - 1) * t.d + 1;
    if (t.h + t.pads[0] + t.pads[2] < eh || t.w + t.pads[1] + t.pads[3] < ew) continue;
    one(&t);
  }
}

/* Reduce* after a conv chain: the layout pass moves it onto the NHWC
 * tensor (its axes permuted: attribute or constant input), with the
 * to_nchw Transpose after it for keepdims, none without (when C is
 * reduced, or H and W both); keepdims 0 over H alone (the kept axes
 * would change order) and axes that are not constant stay on NCHW. Each
 * against the model run without passes on the reference kernels, at 1
 * and 2 threads; "moved": no NCHW copy of the conv's output is left. */
typedef struct red_case {
  const char *op;
  int opset, n_axes;
  int64_t axes[4];
  bool as_input, keep, moves;
} red_case;

static keel_value_t *red_run(const red_case *t, const float *x, const float *w, unsigned flags,
                             int threads, bool *nchw_left) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, 5, 9, 7});
  mb_init(g, "w", KEEL_FLOAT, 4, (int64_t[]){24, 5, 3, 3}, w);
  mb_attr_ints(mb_add(g, "Conv", "x,w", "c"), "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_add(g, "Relu", "c", "relu_out");
  mb_node *r;
  if (t->as_input) {
    if (t->n_axes >= 0) mb_init(g, "axes", KEEL_INT64, 1, (int64_t[]){t->n_axes}, t->axes);
    else mb_input(g, "axes", KEEL_INT64, 1, (int64_t[]){2}); /* not a constant */
    r = mb_add(g, t->op, "relu_out,axes", "y");
  } else {
    r = mb_add(g, t->op, "relu_out", "y");
    if (t->n_axes > 0) mb_attr_ints(r, "axes", t->n_axes, t->axes);
  }
  mb_attr_i(r, "keepdims", t->keep);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_options o = {.size = sizeof o, .flags = flags, .threads = threads};
  keel_session_t *s = mb_session_opts(g, t->opset, &o);
  if (!s) return NULL;
  char *d = NULL;
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_SHAPES, &d));
  *nchw_left = d && strstr(d, " relu_out ") != NULL;
  keel_free(d);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){2, 5, 9, 7}, x), NULL};
  if (t->n_axes < 0) in[1] = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, 3});
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x", "axes"}, in, t->n_axes < 0 ? 2 : 1, out));
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
  return out[0];
}

static void reductions(void) {
  static const red_case cases[] = {
      {"ReduceMean", 13, 2, {2, 3}, false, false, true},  /* a global mean (tf2onnx, PyTorch) */
      {"ReduceMean", 13, 2, {-1, -2}, false, true, true}, /* keepdims: a Transpose after      */
      {"ReduceMean", 18, 2, {2, 3}, true, false, true},   /* axes as an input                 */
      {"ReduceSum", 13, 1, {1}, true, false, true},       /* C: (N, H, W) either way          */
      {"ReduceMax", 13, 3, {1, 2, 3}, false, false, true},
      {"ReduceL2", 13, 1, {3}, false, true, true},
      {"ReduceLogSumExp", 13, 0, {0}, false, false, true}, /* every axis                      */
      {"ReduceMin", 13, 1, {2}, false, false, false},     /* (N, C, W) != (N, W, C): stays    */
      {"ReduceSum", 13, 1, {0}, true, false, false},      /* N: (C, H, W) != (H, W, C)        */
      {"ReduceMean", 18, -1, {0}, true, false, false},    /* axes not constant                */
  };
  float *x = malloc(sizeof(float) * 2 * 5 * 9 * 7), *w = malloc(sizeof(float) * 24 * 5 * 9);
  for (int i = 0; i < 2 * 5 * 9 * 7; i++) x[i] = rnd();
  for (int i = 0; i < 24 * 5 * 9; i++) w[i] = rnd();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const red_case *t = &cases[i];
    bool left;
    keel_value_t *ref = red_run(t, x, w, KEEL_OPT_NO_GRAPH_PASSES | KEEL_OPT_REFERENCE_KERNELS, 1, &left);
    CHECK(ref != NULL);
    for (int threads = 1; threads <= 2 && ref; threads++) {
      keel_value_t *got = red_run(t, x, w, 0, threads, &left);
      double worst = got ? worst_of(ref, got, 1e-5) : INFINITY;
      /* without oneDNN the pass leaves these convs NCHW: nothing moves */
      bool want_left = !g_dnnl || !t->moves;
      if (!(worst <= 1) || left != want_left)
        fprintf(stderr, "%s case %zu (%d threads): worst %g of the tolerance, NCHW copy %s\n", t->op,
                i, threads, worst, left ? "left" : "gone");
      CHECK(worst <= 1);
      CHECK(left == want_left);
      keel_value_release(got);
    }
    keel_value_release(ref);
  }
  free(x), free(w);
}

int main(void) {
  g_dnnl = have_dnnl();
  fprintf(stderr, "oneDNN NhwcConv: %s\n", g_dnnl ? "bound" : "not available (plain graph both sides)");
  const cv_case cases[] = {
      {1, 16, 32, 20, 20, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 0},
      {1, 3, 16, 33, 31, 3, 3, 2, 1, 1, {1, 1, 1, 1}, true, "SiLUGated", NULL, 0}, /* a stem     */
      {2, 24, 24, 17, 19, 5, 5, 2, 1, 24, {2, 2, 2, 2}, true, "HSwishGated", NULL, 0}, /* dw   */
      {1, 72, 72, 14, 14, 3, 3, 1, 1, 72, {1, 1, 1, 1}, false, "HardSwish", NULL, 0},
      {3, 8, 12, 9, 11, 3, 1, 1, 2, 2, {0, 1, 2, 0}, true, "Clip", NULL, 0},     /* groups 2  */
      {1, 10, 7, 12, 12, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, "OddHSigGated", NULL, 0},
      {1, 6, 9, 13, 13, 4, 4, 3, 1, 1, {0, 0, 0, 0}, true, NULL, "SAME_UPPER", 0},
      {1, 6, 9, 13, 13, 4, 4, 2, 1, 1, {0, 0, 0, 0}, true, "Sigmoid", "SAME_LOWER", 0},
      {1, 6, 9, 13, 13, 3, 3, 2, 1, 1, {0, 0, 0, 0}, false, "Tanh", "VALID", 0},
      {2, 32, 32, 14, 14, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, NULL, NULL, 1},  /* residual      */
      {1, 16, 16, 9, 9, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, NULL, NULL, 1},
      {1, 16, 8, 9, 9, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 2},  /* broadcasting Z */
      {1, 5, 4, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "LeakyRelu", NULL, 0}, /* 1x1 image  */
      {1, 4, 6, 2, 40, 3, 3, 1, 1, 1, {5, 1, 5, 1}, true, NULL, NULL, 0}, /* pads past kernel */
      {1, 64, 64, 56, 56, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 1}, /* ResNet's    */
      /* 3x3 stride 1, channels by 16s, no residual: the Winograd path
       * where oneDNN has it (AVX-512) */
      {1, 64, 64, 56, 56, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 0},
      {2, 64, 96, 20, 22, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "SiLUGated", NULL, 0},
      {1, 128, 64, 14, 14, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, NULL, "SAME_UPPER", 0},
      {1, 64, 80, 15, 17, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, "Clip", NULL, 0}, /* no pads */
      {3, 96, 64, 16, 16, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "HardSigmoid", NULL, 0},
      {2, 64, 64, 28, 28, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 3}, /* chains */
      /* 3x3 stride 1, 64 channels, inside a chain: Winograd where oneDNN has it */
      {1, 64, 64, 56, 56, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {2, 64, 64, 20, 22, 3, 3, 1, 1, 1, {1, 1, 1, 1}, false, "SiLUGated", NULL, 4},
      {1, 64, 64, 15, 17, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Clip", NULL, 4},
      {1, 3, 16, 40, 44, 3, 3, 2, 1, 1, {1, 1, 1, 1}, true, NULL, NULL, 3},
      /* inside a chain, few output rows that split unevenly, many channels:
       * output-channel parts at 2 (and 3) threads */
      {1, 64, 96, 7, 7, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "Relu", NULL, 4},
      {1, 32, 64, 14, 14, 3, 3, 2, 1, 1, {1, 1, 1, 1}, false, "SiLUGated", NULL, 4},
      {1, 128, 96, 13, 13, 1, 1, 2, 1, 1, {0, 0, 0, 0}, true, "HSwishGated", NULL, 4},
      {1, 48, 112, 5, 3, 3, 3, 1, 1, 1, {1, 0, 1, 2}, true, "OddHSigGated", NULL, 4},
      /* 1-4 input channels, 16 or 32 out, before a 1x1 (NCHW in) or between
       * two (NHWC in): the stem kernel on AVX-512 */
      {2, 3, 16, 19, 23, 3, 3, 2, 1, 1, {1, 1, 1, 1}, true, "HSwishGated", NULL, 3},
      {1, 4, 32, 17, 15, 5, 5, 1, 1, 1, {2, 1, 0, 2}, false, "LeakyRelu", NULL, 3},
      {1, 2, 16, 12, 30, 3, 3, 1, 1, 1, {1, 1, 1, 1}, true, "SiLUGated", NULL, 4},
      {1, 1, 32, 9, 40, 7, 3, 2, 1, 1, {3, 1, 3, 1}, true, "Relu", NULL, 3},
      {3, 3, 16, 8, 8, 3, 3, 1, 1, 1, {0, 0, 0, 0}, true, "OddHSigGated", NULL, 3},
      {1, 3, 32, 6, 5, 3, 3, 2, 1, 1, {1, 1, 1, 1}, true, "Clip", NULL, 4},
      /* 1x1 convs on at most 4 pixels (a squeeze-excite block's):
       * keel_gemv on W in place, the map NCHW or NHWC; 5 pixels: oneDNN */
      {1, 96, 24, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu", NULL, 4},
      {3, 40, 120, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "HardSigmoid", NULL, 0},
      {2, 32, 48, 1, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, NULL, NULL, 1},   /* Z: sum      */
      {1, 16, 8, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu", NULL, 2},   /* Z broadcasts */
      {1, 33, 17, 2, 2, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "SiLUGated", NULL, 3},
      {5, 24, 64, 1, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Clip", NULL, 4},
      /* 1x1 convs of at most 32 input channels, channels-last: the
       * pointwise kernel on AVX-512 (blocks of 1-4 vectors of outputs,
       * masked tails, pixel tails), with a channels-last residual too */
      {1, 16, 64, 20, 21, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu", NULL, 4},
      {2, 3, 17, 9, 7, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "HSwishGated", NULL, 4},
      {1, 32, 100, 11, 5, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "SiLUGated", NULL, 4},
      {1, 24, 300, 6, 6, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Clip", NULL, 4},
      {1, 8, 1, 13, 3, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Tanh", NULL, 4},
      {3, 16, 16, 8, 9, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, NULL, NULL, 5},
      {1, 20, 72, 7, 11, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "OddHSigGated", NULL, 5},
      {1, 32, 33, 4, 4, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "HardSigmoid", "SAME_UPPER", 5},
      /* with a residual, up to 128 input channels (ResNet-50's conv3+Add) */
      {1, 64, 256, 9, 10, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, NULL, NULL, 5},
      {2, 100, 130, 5, 7, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, "Clip", NULL, 5},
      {1, 128, 40, 3, 3, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "SiLUGated", NULL, 5},
      /* Z is X (Add(conv(x), x)): Y must not take Z's buffer */
      {1, 96, 96, 6, 7, 1, 1, 1, 1, 1, {0, 0, 0, 0}, true, "Relu", NULL, 6},
      {2, 160, 160, 5, 5, 1, 1, 1, 1, 1, {0, 0, 0, 0}, false, NULL, NULL, 6},
      /* depthwise 5x5 of at most 128 channels, channels-last: the
       * depthwise kernel on AVX-512 (stride 1 and 2, channel tails, maps
       * narrower than a tile, asymmetric pads, every activation form) */
      {1, 72, 72, 20, 23, 5, 5, 2, 1, 72, {2, 2, 2, 2}, true, "HSwishGated", NULL, 4},
      {2, 120, 120, 9, 13, 5, 5, 1, 1, 120, {2, 2, 2, 2}, false, "Relu", NULL, 4},
      {1, 24, 24, 3, 4, 5, 5, 1, 1, 24, {2, 2, 2, 2}, true, "SiLUGated", NULL, 4},
      {1, 8, 8, 11, 17, 5, 5, 2, 1, 8, {1, 2, 0, 3}, true, "Clip", NULL, 4},
      {1, 40, 40, 7, 7, 5, 5, 1, 1, 40, {0, 0, 0, 0}, true, "OddHSigGated", NULL, 4},
      {3, 16, 16, 12, 12, 5, 5, 2, 1, 16, {0, 0, 0, 0}, true, "Tanh", "SAME_UPPER", 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) one(&cases[i]);
  streamed();
  winograd();
  onednn_winograd();
  parts_then_shapes();
  gemv_then_shapes();
  residual_order();
  shared_primitives();
  reductions();
  sweep(150);
  fprintf(stderr, "%d conv cases\n", g_cases);
  /* last: their random draws leave the other cases' data as it was */
  subsampled();
  lowered();
  pointwise_mm();
  without_library();
  return check_report();
}
