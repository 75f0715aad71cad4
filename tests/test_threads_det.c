/* test_threads_det.c: KEEL_OPT_DETERMINISTIC (issue 27). A transformer
 * block (LayerNorm, a q|k|v product, causal attention, an Erf GELU MLP,
 * residuals: the passes make FusedMatMul and FusedAttention of it) and a
 * conv net (dense, depthwise and pointwise Conv, MaxPool, a residual Add,
 * GlobalAveragePool, Gemm) run on a pool of 16 threads, oversubscribed on
 * a small machine, and on 1 thread: the outputs must be equal bit for bit.
 * Then four callers race on the 16-thread session (each run computes on
 * the pool when it is free, alone when another run holds it): every output
 * must still be those bits. A third model of elementwise ops (Erf,
 * Sigmoid, Tanh, a broadcast Div, Mul, Add), which the cost model cuts into
 * chunks starting at any element, must give the same bits in the default
 * mode too, at 1 thread (one chunk) and 16. Each model runs with oneDNN's kernels (where
 * keel has them) and with KEEL_OPT_NO_ONEDNN; ctest runs the test a second
 * time with KEEL_NO_ONEDNN=1 (test_threads_det_blas), where the products
 * are OpenBLAS's. The default mode on 16 threads must agree with 1 thread
 * within float rounding. Clean under ThreadSanitizer (ctest label
 * "thread").
 *
 * The products are big enough to be split (more than 2^18 multiply-adds,
 * M = 100 rows: bands of 16 and a tail), and a split changes how a BLAS
 * rounds. Checked on an AMD EPYC (Zen 3, AVX2): with the flag ignored
 * (splits = threads) the transformer's 1- and 16-thread outputs differ
 * with oneDNN, and with a matrix product cut by threads instead of splits
 * the OpenBLAS run fails. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define B 2
#define S 50
#define E 64
#define HEADS 4
#define HD (E / HEADS)
#define FF (12 * E) /* fc2: 100 x 768 x 64, split in bands of 16 rows and a tail */
#define CALLERS 4
#define RUNS 6

static uint32_t g_seed = 12345;

/* n floats uniform in [-scale, scale) (freed by the caller). */
static float *rnd(int64_t n, float scale) {
  float *p = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    g_seed = g_seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(g_seed >> 8) / (float)(1 << 23) - 1.0f);
  }
  return p;
}

static void init_rnd(mb_graph *g, const char *name, int rank, const int64_t *dims, float scale) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  float *p = rnd(n, scale);
  mb_init(g, name, KEEL_FLOAT, rank, dims, p);
  free(p);
}

static void init_i64(mb_graph *g, const char *name, int n, const int64_t *v) {
  mb_init(g, name, KEEL_INT64, 1, (int64_t[]){n}, v);
}

/* LayerNormalization of `x` (opset 17) with its own scale and bias. */
static void layer_norm(mb_graph *g, const char *x, const char *pre, const char *y) {
  char sc[32], bi[32], in[96];
  snprintf(sc, sizeof sc, "%s_g", pre);
  snprintf(bi, sizeof bi, "%s_b", pre);
  init_rnd(g, sc, 1, (int64_t[]){E}, 1.0f);
  init_rnd(g, bi, 1, (int64_t[]){E}, 0.1f);
  snprintf(in, sizeof in, "%s,%s,%s", x, sc, bi);
  mb_attr_i(mb_add(g, "LayerNormalization", in, y), "axis", -1);
}

/* y = x W + b, W [k, n]. */
static void linear(mb_graph *g, const char *x, const char *pre, int64_t k, int64_t n,
                   const char *y) {
  char w[32], b[32], in[96], t[40];
  snprintf(w, sizeof w, "%s_w", pre);
  snprintf(b, sizeof b, "%s_b", pre);
  snprintf(t, sizeof t, "%s_t", pre);
  init_rnd(g, w, 2, (int64_t[]){k, n}, 1.0f / sqrtf((float)k));
  init_rnd(g, b, 1, (int64_t[]){n}, 0.1f);
  snprintf(in, sizeof in, "%s,%s", x, w);
  mb_add(g, "MatMul", in, t);
  snprintf(in, sizeof in, "%s,%s", t, b);
  mb_add(g, "Add", in, y);
}

/* x [B, S, E] -> [B, HEADS, S, HD] (or [B, HEADS, HD, S] for keys). */
static void heads(mb_graph *g, const char *x, const char *y, bool keys) {
  char t[32];
  snprintf(t, sizeof t, "%s_r", x);
  char in[64];
  snprintf(in, sizeof in, "%s,hshape", x);
  mb_add(g, "Reshape", in, t);
  mb_attr_ints(mb_add(g, "Transpose", t, y), "perm", 4,
               keys ? (int64_t[]){0, 2, 3, 1} : (int64_t[]){0, 2, 1, 3});
}

static uint8_t *transformer(size_t *len) {
  mb_graph *g = mb_graph_new("block");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){B, S, E});
  init_i64(g, "hshape", 4, (int64_t[]){B, S, HEADS, HD});
  init_i64(g, "eshape", 3, (int64_t[]){B, S, E});
  init_i64(g, "parts", 3, (int64_t[]){E, E, E});
  float scale = 1.0f / sqrtf((float)HD), ninf = -INFINITY, half = 0.5f, one = 1.0f,
        rs2 = 1.0f / sqrtf(2.0f);
  mb_init(g, "scale", KEEL_FLOAT, 0, NULL, &scale);
  mb_init(g, "ninf", KEEL_FLOAT, 0, NULL, &ninf);
  mb_init(g, "half", KEEL_FLOAT, 0, NULL, &half);
  mb_init(g, "one", KEEL_FLOAT, 0, NULL, &one);
  mb_init(g, "rs2", KEEL_FLOAT, 0, NULL, &rs2);
  static uint8_t above[S * S];
  for (int i = 0; i < S; i++)
    for (int j = 0; j < S; j++) above[i * S + j] = j > i;
  mb_init(g, "above", KEEL_BOOL, 2, (int64_t[]){S, S}, above);
  /* attention */
  layer_norm(g, "x", "ln1", "h1");
  linear(g, "h1", "qkv", E, 3 * E, "qkv");
  mb_attr_i(mb_add(g, "Split", "qkv,parts", "q,k,v"), "axis", -1);
  heads(g, "q", "Q", false);
  heads(g, "k", "Kt", true);
  heads(g, "v", "V", false);
  mb_add(g, "MatMul", "Q,Kt", "s");
  mb_add(g, "Mul", "s,scale", "s2");
  mb_add(g, "Where", "above,ninf,s2", "s3");
  mb_attr_i(mb_add(g, "Softmax", "s3", "p"), "axis", -1);
  mb_add(g, "MatMul", "p,V", "o");
  mb_attr_ints(mb_add(g, "Transpose", "o", "ot"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_add(g, "Reshape", "ot,eshape", "o2");
  linear(g, "o2", "proj", E, E, "a");
  mb_add(g, "Add", "x,a", "x2");
  /* MLP with the exact GELU as PyTorch exports it */
  layer_norm(g, "x2", "ln2", "h2");
  linear(g, "h2", "fc1", E, FF, "f");
  mb_add(g, "Mul", "f,rs2", "f1");
  mb_add(g, "Erf", "f1", "f2");
  mb_add(g, "Add", "f2,one", "f3");
  mb_add(g, "Mul", "f,f3", "f4");
  mb_add(g, "Mul", "f4,half", "f5");
  linear(g, "f5", "fc2", FF, E, "m");
  mb_add(g, "Add", "x2,m", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return mb_model(g, 17, len);
}

static void conv(mb_graph *g, const char *x, const char *pre, int64_t m, int64_t c, int64_t k,
                 int64_t group, int64_t stride, const char *y) {
  char w[32], b[32], in[96];
  snprintf(w, sizeof w, "%s_w", pre);
  snprintf(b, sizeof b, "%s_b", pre);
  init_rnd(g, w, 4, (int64_t[]){m, c / group, k, k}, 1.0f / sqrtf((float)(c / group * k * k)));
  init_rnd(g, b, 1, (int64_t[]){m}, 0.1f);
  snprintf(in, sizeof in, "%s,%s,%s", x, w, b);
  mb_node *n = mb_add(g, "Conv", in, y);
  int64_t p = k / 2;
  mb_attr_ints(n, "pads", 4, (int64_t[]){p, p, p, p});
  mb_attr_ints(n, "strides", 2, (int64_t[]){stride, stride});
  if (group > 1) mb_attr_i(n, "group", group);
}

static uint8_t *conv_net(size_t *len) {
  mb_graph *g = mb_graph_new("cnn");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){2, 3, 56, 56});
  conv(g, "x", "stem", 32, 3, 3, 1, 2, "c1");
  mb_add(g, "Relu", "c1", "r1");
  conv(g, "r1", "dw", 32, 32, 3, 32, 1, "c2");
  mb_add(g, "Sigmoid", "c2", "s2");
  mb_add(g, "Mul", "c2,s2", "a2");
  conv(g, "a2", "pw", 64, 32, 1, 1, 1, "c3");
  mb_add(g, "Relu", "c3", "r3");
  mb_node *mp = mb_add(g, "MaxPool", "r3", "p3");
  mb_attr_ints(mp, "kernel_shape", 2, (int64_t[]){3, 3});
  mb_attr_ints(mp, "strides", 2, (int64_t[]){2, 2});
  mb_attr_ints(mp, "pads", 4, (int64_t[]){1, 1, 1, 1});
  conv(g, "p3", "c4", 128, 64, 3, 1, 1, "c4");
  mb_add(g, "Relu", "c4", "r4");
  conv(g, "r4", "c5", 64, 128, 3, 1, 1, "c5");
  mb_add(g, "Add", "c5,p3", "x5");
  mb_add(g, "Relu", "x5", "r5");
  mb_add(g, "GlobalAveragePool", "r5", "gp");
  mb_add(g, "Flatten", "gp", "fl");
  init_rnd(g, "fc_w", 2, (int64_t[]){64, 10}, 0.125f);
  init_rnd(g, "fc_b", 1, (int64_t[]){10}, 0.1f);
  mb_add(g, "Gemm", "fl,fc_w,fc_b", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return mb_model(g, 17, len);
}

/* Elementwise ops cut by the cost model (base/pool.h) into chunks that
 * start at any element: vector bodies and scalar tails must agree, so
 * even the default mode gives the same bits at any thread count. */
static uint8_t *elementwise(size_t *len) {
  mb_graph *g = mb_graph_new("ew");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){3, 37, 1001});
  init_rnd(g, "d", 1, (int64_t[]){1001}, 2.0f);
  mb_add(g, "Erf", "x", "e");
  mb_add(g, "Sigmoid", "x", "s");
  mb_add(g, "Tanh", "x", "t");
  mb_add(g, "Div", "e,d", "q");
  mb_add(g, "Mul", "q,s", "m");
  mb_add(g, "Add", "m,t", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return mb_model(g, 17, len);
}

typedef struct model {
  const char *name;
  uint8_t *bytes;
  size_t len;
  int rank;
  int64_t dims[4];
  float *x;
} model;

static keel_session_t *session(const model *m, int threads, unsigned flags) {
  keel_options o = {.size = sizeof o, .threads = threads, .flags = flags};
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(m->bytes, m->len, NULL, &o, &s));
  return s;
}

/* One run's output, copied (n floats), or NULL. */
static float *run(keel_session_t *s, const model *m, int64_t *n) {
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, m->rank, m->dims, m->x), *out[1] = {0};
  keel_status st = keel_run(s, (const char *[]){"x"}, &in, 1, out);
  keel_value_release(in);
  if (st) return NULL;
  *n = keel_value_numel(out[0]);
  float *y = malloc(sizeof(float) * (size_t)*n);
  memcpy(y, keel_value_data(out[0]), sizeof(float) * (size_t)*n);
  keel_value_release(out[0]);
  return y;
}

typedef struct caller {
  keel_session_t *s;
  const model *m;
  const float *want;
  int64_t n;
  int mismatches, errors;
} caller;

static void *race(void *arg) {
  caller *c = arg;
  for (int r = 0; r < RUNS; r++) {
    int64_t n = 0;
    float *y = run(c->s, c->m, &n);
    if (!y) c->errors++;
    else if (n != c->n || memcmp(y, c->want, sizeof(float) * (size_t)n)) c->mismatches++;
    free(y);
  }
  return NULL;
}

static bool described(keel_session_t *s, const char *what) {
  char *d = NULL;
  bool yes = s && !keel_session_describe(s, 0, &d) && strstr(d, what);
  keel_free(d);
  return yes;
}

/* exact: the default mode too must give the 1-thread bits */
static void check_model(const model *m, unsigned lib, const char *fused, bool exact) {
  keel_session_t *one = session(m, 1, lib | KEEL_OPT_DETERMINISTIC);
  keel_session_t *many = session(m, 16, lib | KEEL_OPT_DETERMINISTIC);
  keel_session_t *plain = session(m, 16, lib);
  if (!one || !many || !plain) goto out;
  if (fused) CHECK(described(many, fused)); /* the fast kernels are what runs */
  int64_t n1 = 0, n16 = 0, np = 0;
  float *y1 = run(one, m, &n1), *y16 = run(many, m, &n16), *yp = run(plain, m, &np);
  CHECK(y1 && y16 && yp && n1 == n16 && n1 == np && n1 > 0);
  if (y1 && y16 && yp && n1 == n16 && n1 == np) {
    if (memcmp(y1, y16, sizeof(float) * (size_t)n1))
      fprintf(stderr, "%s (flags %u): 16 threads differ from 1\n", m->name, lib);
    CHECK(!memcmp(y1, y16, sizeof(float) * (size_t)n1));
    double worst = 0;
    for (int64_t i = 0; i < n1; i++)
      worst = fmax(worst, fabs((double)yp[i] - y1[i]) / (1e-4 + 1e-4 * fabs(y1[i])));
    CHECK(worst <= 1); /* the default mode: within rounding */
    if (exact) { /* one chunk (default, 1 thread) against 16 splits' chunks */
      keel_session_t *solo = session(m, 1, lib);
      int64_t ns = 0;
      float *ys = solo ? run(solo, m, &ns) : NULL;
      CHECK(ys && ns == n1 && !memcmp(ys, yp, sizeof(float) * (size_t)n1));
      CHECK(ys && ns == n1 && !memcmp(ys, y1, sizeof(float) * (size_t)n1));
      free(ys);
      keel_session_destroy(solo);
    }
    caller c[CALLERS];
    pthread_t th[CALLERS];
    for (int t = 0; t < CALLERS; t++) {
      c[t] = (caller){many, m, y1, n1, 0, 0};
      pthread_create(&th[t], NULL, race, &c[t]);
    }
    for (int t = 0; t < CALLERS; t++) {
      pthread_join(th[t], NULL);
      CHECK(c[t].errors == 0);
      CHECK(c[t].mismatches == 0);
    }
  }
  free(y1), free(y16), free(yp);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(many, &st);
  CHECK(st.allocated == st.prepared_bytes); /* nothing held after the runs */
out:
  keel_session_destroy(one);
  keel_session_destroy(many);
  keel_session_destroy(plain);
}

int main(void) {
  model tf = {"transformer", NULL, 0, 3, {B, S, E}, NULL};
  model cn = {"conv net", NULL, 0, 4, {2, 3, 56, 56}, NULL};
  tf.bytes = transformer(&tf.len);
  cn.bytes = conv_net(&cn.len);
  tf.x = rnd(B * S * E, 1.0f);
  cn.x = rnd(2 * 3 * 56 * 56, 1.0f);
  model ew = {"elementwise", NULL, 0, 3, {3, 37, 1001}, NULL};
  ew.bytes = elementwise(&ew.len);
  ew.x = rnd(3 * 37 * 1001, 3.0f);
  check_model(&tf, 0, "FusedAttention", false);
  check_model(&tf, KEEL_OPT_NO_ONEDNN, "FusedAttention", false);
  check_model(&cn, 0, NULL, false);
  check_model(&cn, KEEL_OPT_NO_ONEDNN, NULL, false);
  check_model(&ew, 0, NULL, true);
  free(tf.bytes), free(cn.bytes), free(ew.bytes), free(tf.x), free(cn.x), free(ew.x);
  return check_report();
}
