/* test_threads_conv.c: eight threads run one session of a small conv net
 * at once (a dense Conv + fused Relu, a depthwise Conv + fused SiLU, a 1x1
 * Conv, a MatMul), on a 3-thread pool: every run computes on the pool
 * when it is free and alone when another run holds it. How work is split
 * depends on the pool's size, never on whether it was free, so every
 * output must equal the session's first one bit for bit; that one must
 * agree with a 1-thread session within float rounding (the splits change
 * GEMM tile shapes). Clean under ThreadSanitizer (ctest label "thread").
 * Run twice: on keel's own NCHW conv kernels, and (where keel has oneDNN)
 * on the layout pass's NhwcConv, whose per-shape primitives are made by
 * the first run and shared by the racing ones; then a second net for
 * keel's own channels-last kernels beside them (a 5x5 depthwise conv, a
 * 1x1 of 16 channels, a 3x3 of 2048 outputs on a 5x5 map, which takes the
 * streamed kernel, a 3x3 of 128 inputs on an 18x18 map, which takes keel's
 * Winograd kernel, and a 1x1 on the pooled 1x1 map, which runs on
 * keel_gemv). */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define THREADS 8
#define STREAM_M 2048           /* the streamed conv's output channels    */
#define RUNS 40

static float g_x[2 * 8 * 20 * 20];
static keel_value_t *g_in;

static int g_net; /* 0: the first net, 1: keel's own NHWC kernels */
static int g_stream_each; /* convs the sessions' first runs put on the
                             streamed kernel (AVX-512) */
static int g_wg_each;     /* ... and on the Winograd one (AVX-512 or AVX2) */

static mb_graph *model(void) {
  static float w1[16 * 8 * 9], w2[16 * 25], w3[8 * 16], b1[16], m[8 * 20], w4[16 * 16];
  static float w5[STREAM_M * 16 * 9], w6[16 * STREAM_M], w7[128 * 16], w8[64 * 128 * 9],
      w9[16 * 64];
  uint32_t r = 99;
  float *all[] = {w1, w2, w3, b1, m, g_x, w4, w5, w6, w7, w8, w9};
  size_t sizes[] = {sizeof w1, sizeof w2, sizeof w3, sizeof b1, sizeof m,  sizeof g_x,
                    sizeof w4, sizeof w5, sizeof w6, sizeof w7, sizeof w8, sizeof w9};
  for (int k = 0; k < 12; k++)
    for (size_t i = 0; i < sizes[k] / sizeof(float); i++)
      all[k][i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / (float)(1 << 24) - 0.5f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, 8, 20, 20});
  mb_init(g, "w1", KEEL_FLOAT, 4, (int64_t[]){16, 8, 3, 3}, w1);
  mb_init(g, "b1", KEEL_FLOAT, 1, (int64_t[]){16}, b1);
  mb_init(g, "w3", KEEL_FLOAT, 4, (int64_t[]){8, 16, 1, 1}, w3);
  mb_attr_ints(mb_add(g, "Conv", "x,w1,b1", "c1"), "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_add(g, "Relu", "c1", "r1");
  if (g_net == 1) {
    mb_init(g, "w2", KEEL_FLOAT, 4, (int64_t[]){16, 1, 5, 5}, w2);
    mb_init(g, "w4", KEEL_FLOAT, 4, (int64_t[]){16, 16, 1, 1}, w4);
    mb_node *d5 = mb_add(g, "Conv", "r1,w2,b1", "c2");
    mb_attr_i(d5, "group", 16);
    mb_attr_ints(d5, "pads", 4, (int64_t[]){2, 2, 2, 2});
    mb_add(g, "Sigmoid", "c2", "s2");
    mb_add(g, "Mul", "c2,s2", "a2");
    mb_add(g, "Conv", "a2,w4,b1", "c4");
    mb_add(g, "Relu", "c4", "r4");
    /* W of 1.2 MB on 5x5 outputs: the streamed kernel */
    mb_init(g, "w5", KEEL_FLOAT, 4, (int64_t[]){STREAM_M, 16, 3, 3}, w5);
    mb_init(g, "w6", KEEL_FLOAT, 4, (int64_t[]){16, STREAM_M, 1, 1}, w6);
    mb_node *st = mb_add(g, "Conv", "r4,w5", "c5");
    mb_attr_ints(st, "pads", 4, (int64_t[]){1, 1, 1, 1});
    mb_attr_ints(st, "strides", 2, (int64_t[]){4, 4});
    mb_add(g, "Relu", "c5", "r5");
    mb_add(g, "Conv", "r5,w6", "c6");
    /* 128 -> 64 channels 3x3 on 18x18 outputs: keel's Winograd kernel */
    mb_init(g, "w7", KEEL_FLOAT, 4, (int64_t[]){128, 16, 1, 1}, w7);
    mb_init(g, "w8", KEEL_FLOAT, 4, (int64_t[]){64, 128, 3, 3}, w8);
    mb_init(g, "w9", KEEL_FLOAT, 4, (int64_t[]){16, 64, 1, 1}, w9);
    mb_add(g, "Conv", "r4,w7", "c7");
    mb_add(g, "Conv", "c7,w8", "c8");
    mb_add(g, "Relu", "c8", "r8");
    mb_add(g, "Conv", "r8,w9", "c9");
    mb_add(g, "GlobalAveragePool", "c9", "p9");
    mb_add(g, "GlobalAveragePool", "c6", "p6");
    mb_add(g, "Add", "p6,p9", "p4");
    mb_add(g, "Conv", "p4,w3", "y");
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    return g;
  }
  mb_init(g, "w2", KEEL_FLOAT, 4, (int64_t[]){16, 1, 3, 3}, w2);
  mb_init(g, "m", KEEL_FLOAT, 2, (int64_t[]){20, 8}, m);
  mb_node *dw = mb_add(g, "Conv", "r1,w2", "c2");
  mb_attr_i(dw, "group", 16);
  mb_attr_ints(dw, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_add(g, "Sigmoid", "c2", "s2");
  mb_add(g, "Mul", "c2,s2", "a2");
  mb_add(g, "Conv", "a2,w3", "c3");
  mb_add(g, "MatMul", "c3,m", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

typedef struct job {
  keel_session_t *s;
  const float *want;
  int64_t n;
  int mismatches, errors;
} job;

static void *worker(void *arg) {
  job *j = arg;
  for (int r = 0; r < RUNS; r++) {
    keel_value_t *out[1] = {0};
    if (keel_run(j->s, (const char *[]){"x"}, &g_in, 1, out)) {
      j->errors++;
      continue;
    }
    if (keel_value_numel(out[0]) != j->n ||
        memcmp(keel_value_data(out[0]), j->want, sizeof(float) * (size_t)j->n))
      j->mismatches++;
    keel_value_release(out[0]);
  }
  return NULL;
}

/* The race on a session made with `flags`; `kernels` and `kernels2` name
 * fast kernels that must be in it (keel info's line), or are NULL. */
static void race(unsigned flags, const char *kernels, const char *kernels2) {
  keel_options one = {.size = sizeof one, .threads = 1, .flags = flags};
  keel_options three = {.size = sizeof three, .threads = 3, .flags = flags};
  keel_session_t *ref = mb_session_opts(model(), 14, &one), *s = mb_session_opts(model(), 14, &three);
  CHECK(ref && s);
  if (!ref || !s) {
    keel_session_destroy(ref), keel_session_destroy(s);
    return;
  }
  g_in = mb_tensor(ref, KEEL_FLOAT, 4, (int64_t[]){2, 8, 20, 20}, g_x);
  keel_value_t *r0[1] = {0}, *r1[1] = {0};
  CHECK_OK(keel_run(ref, (const char *[]){"x"}, &g_in, 1, r0));
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &g_in, 1, r1));
  int64_t n = keel_value_numel(r1[0]);
  CHECK(keel_value_numel(r0[0]) == n);
  float *want = malloc(sizeof(float) * (size_t)n);
  memcpy(want, keel_value_data(r1[0]), sizeof(float) * (size_t)n);
  const float *one_thread = keel_value_data(r0[0]);
  double worst = 0;
  for (int64_t i = 0; i < n; i++)
    worst = fmax(worst, fabs((double)want[i] - one_thread[i]) / (1e-5 + 1e-5 * fabs(one_thread[i])));
  CHECK(worst <= 1);
  keel_value_release(r0[0]);
  keel_value_release(r1[0]);
  char *d = NULL;
  CHECK_OK(keel_session_describe(s, 0, &d));
  if (kernels) CHECK(d && strstr(d, kernels)); /* the fast kernels are in the race */
  if (kernels2) CHECK(d && strstr(d, kernels2));
  keel_free(d);
  job jobs[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    jobs[t] = (job){s, want, n, 0, 0};
    pthread_create(&th[t], NULL, worker, &jobs[t]);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    CHECK(jobs[t].errors == 0);
    CHECK(jobs[t].mismatches == 0);
  }
  keel_value_release(g_in);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  CHECK(st.allocated == st.prepared_bytes);
  CHECK(st.streamed_convs == (uint64_t)g_stream_each);
  CHECK(st.winograd_convs == (uint64_t)g_wg_each);
  keel_session_destroy(s);
  keel_session_destroy(ref);
  free(want);
}

/* oneDNN's convolutions (the layout pass's NhwcConv), where keel has it */
static bool have_onednn(void) {
  keel_session_t *s = mb_session(model(), 14);
  char *d = NULL;
  bool yes = s && !keel_session_describe(s, 0, &d) && strstr(d, "NhwcConv onednn");
  keel_free(d);
  keel_session_destroy(s);
  return yes;
}

int main(void) {
  race(KEEL_OPT_NO_ONEDNN, "Conv depthwise 1", NULL); /* keel's own NCHW kernels */
  bool dnnl = have_onednn();
  race(0, dnnl ? "NhwcConv onednn 3" : NULL, NULL);
  g_net = 1; /* keel's NHWC kernels (AVX-512) beside oneDNN's */
  __builtin_cpu_init();
  bool k512 = dnnl && __builtin_cpu_supports("avx512f");
  g_stream_each = k512;
  g_wg_each = dnnl && (k512 || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
  race(0, k512 ? "NhwcConv depthwise 1" : NULL, k512 ? "NhwcConv pointwise 2" : NULL);
  return check_report();
}
