/* test_pool_nhwc.c: the channels-last pools of src/ops/nn/pool/pool_nhwc.c
 * (NhwcMaxPool, NhwcAveragePool, NhwcGlobalMaxPool, NhwcGlobalAveragePool,
 * domain ai.keel.internal) against the NCHW ops of pool.c. Each case runs
 * two models on the same X (N, C, H, W):
 *
 *   reference   X -> MaxPool / AveragePool / Global* -> Y
 *   candidate   X -> Transpose(0,2,3,1) -> Nhwc* -> Transpose(0,3,1,2) -> Y
 *
 * the candidate on 1 and 3 threads. Max pools must agree bit for bit,
 * NaNs (with payloads), signed zeros and infinities included; averages
 * within 1e-6 relative. Cases: kernels 1..7, strides 1..3, dilations 1..2,
 * symmetric and asymmetric pads, ceil_mode, count_include_pad,
 * SAME_UPPER / SAME_LOWER / VALID, channel counts 1, 3, 16, 17, 24, 32, 48, 64, 100
 * (and past one global-pool chunk), batches 1 and 3, ResNet's 3x3/s2/p1
 * max pool on 112x112x64, odd H != W, then a seeded random sweep. Errors:
 * rank 3, float64 (UNSUPPORTED naming the op), a second output, a wrong
 * kernel_shape. After every session is destroyed keel holds no bytes. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define INTERNAL "ai.keel.internal"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng;
}
static int64_t pick(int64_t lo, int64_t hi) { /* uniform in [lo, hi] */
  return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}

enum { P_MAX, P_AVG, P_GMAX, P_GAVG };
static const char *const NCHW_OP[] = {"MaxPool", "AveragePool", "GlobalMaxPool",
                                      "GlobalAveragePool"};
static const char *const NHWC_OP[] = {"NhwcMaxPool", "NhwcAveragePool", "NhwcGlobalMaxPool",
                                      "NhwcGlobalAveragePool"};

typedef struct pcase {
  int kind;
  int64_t n, c, h, w;
  int64_t k[2], s[2], d[2];     /* 0: 1 (strides, dilations left out)     */
  int64_t pads[4];              /* top, left, bottom, right               */
  int ceil, cip;                /* ceil_mode, count_include_pad           */
  const char *auto_pad;         /* NULL: NOTSET                           */
  int special;                  /* max: NaNs, signed zeros, infinities    */
} pcase;

static int g_cases, g_rejected;

/* ------------------------------------------------------------ models */

static void pool_attrs(mb_node *n, const pcase *t) {
  if (t->kind >= P_GMAX) return;
  mb_attr_ints(n, "kernel_shape", 2, t->k);
  if (t->s[0] > 1 || t->s[1] > 1)
    mb_attr_ints(n, "strides", 2, (int64_t[]){t->s[0] ? t->s[0] : 1, t->s[1] ? t->s[1] : 1});
  if (t->d[0] > 1 || t->d[1] > 1)
    mb_attr_ints(n, "dilations", 2, (int64_t[]){t->d[0] ? t->d[0] : 1, t->d[1] ? t->d[1] : 1});
  if (t->auto_pad) mb_attr_s(n, "auto_pad", t->auto_pad);
  else if (t->pads[0] || t->pads[1] || t->pads[2] || t->pads[3])
    mb_attr_ints(n, "pads", 4, t->pads);
  if (t->ceil) mb_attr_i(n, "ceil_mode", 1);
  if (t->kind == P_AVG && t->cip) mb_attr_i(n, "count_include_pad", 1);
}

static uint8_t *reference_model(const pcase *t, size_t *len) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w});
  pool_attrs(mb_add(g, NCHW_OP[t->kind], "x", "y"), t);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return mb_model(g, 19, len);
}

static uint8_t *candidate_model(const pcase *t, size_t *len) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){t->n, t->c, t->h, t->w});
  mb_attr_ints(mb_add(g, "Transpose", "x", "xt"), "perm", 4, (int64_t[]){0, 2, 3, 1});
  mb_node *p = mb_add(g, NHWC_OP[t->kind], "xt", "yt");
  mb_domain(p, INTERNAL);
  pool_attrs(p, t);
  mb_attr_ints(mb_add(g, "Transpose", "yt", "y"), "perm", 4, (int64_t[]){0, 3, 1, 2});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return mb_model_domains(g, 19, INTERNAL, 1, len);
}

/* Destroys s; nothing of keel may stay alive after. */
static void finish(keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  CHECK_OK(keel_stats_get(s, &st));
  CHECK(st.allocated == 0);
  keel_session_destroy(s);
  CHECK(keel_process_bytes() == 0);
}

typedef struct result {
  keel_status st;
  int rank;
  int64_t shape[4];
  float *y;                     /* malloc'ed copy, or NULL                */
} result;

/* Runs the model on x ("x", dtype dt); the output is copied out and
 * every value released before the session goes. */
static result run_model(uint8_t *bytes, size_t len, int threads, int dt, int rank,
                        const int64_t *dims, const void *x) {
  result r = {.st = KEEL_ERR_INVALID_MODEL};
  keel_options o = {.size = sizeof o, .threads = threads};
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, &o, &s);
  free(bytes);
  CHECK_OK(st);
  if (st) return r;
  keel_value_t *in = mb_tensor(s, dt, rank, dims, x), *out = NULL;
  r.st = keel_run(s, (const char *[]){"x"}, &in, 1, &out);
  if (r.st == KEEL_OK && out) {
    r.rank = keel_value_rank(out);
    int64_t n = keel_value_numel(out);
    if (r.rank == 4) memcpy(r.shape, keel_value_shape(out), sizeof r.shape);
    r.y = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (n) memcpy(r.y, keel_value_data(out), sizeof(float) * (size_t)n);
  }
  keel_value_release(in);
  keel_value_release(out);
  finish(s);
  return r;
}

/* ------------------------------------------------------------- input */

static float rnd_float(void) { return (float)(next() >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

/* Random values; with `special`, quiet NaNs with payloads, signed zeros,
 * infinities and exact ties; special 2 makes NaN common enough that whole
 * windows are NaN. */
static void fill_input(float *x, int64_t n, int special) {
  for (int64_t i = 0; i < n; i++) {
    x[i] = rnd_float();
    if (!special) continue;
    int64_t r = pick(0, 99);
    if (r < (special == 2 ? 60 : 8)) {
      uint32_t bits = 0x7fc00000u | (uint32_t)pick(0, 0x3fffff) | (pick(0, 1) ? 0x80000000u : 0);
      memcpy(&x[i], &bits, sizeof bits);
    } else if (r < 70 && special == 2) {
      x[i] = 0.25f;
    } else if (r < 80) {
      x[i] = pick(0, 1) ? 0.0f : -0.0f;
    } else if (r < 84) {
      x[i] = pick(0, 1) ? INFINITY : -INFINITY;
    } else if (r < 90) {
      x[i] = 0.5f; /* ties */
    }
  }
}

/* ------------------------------------------------------------- cases */

static void describe(const pcase *t) {
  fprintf(stderr, "  %s n=%lld c=%lld %lldx%lld k=%lldx%lld s=%lld,%lld d=%lld,%lld "
          "pads=%lld,%lld,%lld,%lld ceil=%d cip=%d auto_pad=%s special=%d\n",
          NHWC_OP[t->kind], (long long)t->n, (long long)t->c, (long long)t->h, (long long)t->w,
          (long long)t->k[0], (long long)t->k[1], (long long)t->s[0], (long long)t->s[1],
          (long long)t->d[0], (long long)t->d[1], (long long)t->pads[0], (long long)t->pads[1],
          (long long)t->pads[2], (long long)t->pads[3], t->ceil, t->cip,
          t->auto_pad ? t->auto_pad : "-", t->special);
}

static bool compare(const pcase *t, const result *ref, const result *got, int threads) {
  if (got->st != KEEL_OK || !got->y || got->rank != 4 ||
      memcmp(ref->shape, got->shape, sizeof ref->shape)) {
    fprintf(stderr, "threads %d: status %s, rank %d\n", threads, keel_status_str(got->st),
            got->rank);
    return false;
  }
  int64_t n = ref->shape[0] * ref->shape[1] * ref->shape[2] * ref->shape[3];
  if (t->kind == P_MAX || t->kind == P_GMAX) {
    for (int64_t i = 0; i < n; i++)
      if (memcmp(&ref->y[i], &got->y[i], sizeof(float))) {
        uint32_t a, b;
        memcpy(&a, &ref->y[i], 4), memcpy(&b, &got->y[i], 4);
        fprintf(stderr, "threads %d: element %lld: %08x (%g), expected %08x (%g)\n", threads,
                (long long)i, b, got->y[i], a, ref->y[i]);
        return false;
      }
    return true;
  }
  for (int64_t i = 0; i < n; i++) {
    double r = ref->y[i], g = got->y[i];
    if (!(fabs(r - g) <= 1e-6 * fabs(r)) && !(r == g)) {
      fprintf(stderr, "threads %d: element %lld: %.9g, expected %.9g\n", threads, (long long)i,
              g, r);
      return false;
    }
  }
  return true;
}

/* Runs one case; an invalid geometry must be refused alike (false). */
static bool one(const pcase *t) {
  int64_t dims[4] = {t->n, t->c, t->h, t->w}, nx = t->n * t->c * t->h * t->w;
  float *x = malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  fill_input(x, nx, t->kind == P_MAX || t->kind == P_GMAX ? t->special : 0);
  size_t len;
  uint8_t *b = reference_model(t, &len);
  result ref = run_model(b, len, 1, KEEL_FLOAT, 4, dims, x);
  bool ok = true;
  for (int threads = 1; threads <= 3; threads += 2) {
    b = candidate_model(t, &len);
    result got = run_model(b, len, threads, KEEL_FLOAT, 4, dims, x);
    if (ref.st != KEEL_OK) { /* refused: the candidate refuses alike */
      CHECK(got.st == ref.st);
      ok = false;
    } else {
      bool same = compare(t, &ref, &got, threads);
      CHECK(same);
      if (!same) describe(t);
    }
    free(got.y);
  }
  free(ref.y);
  free(x);
  if (ok) g_cases++;
  else g_rejected++;
  return ok;
}

static pcase window(int kind, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k,
                    int64_t s, int64_t pad) {
  return (pcase){kind, n, c, h, w, {k, k}, {s, s}, {1, 1}, {pad, pad, pad, pad}, 0, 0, NULL, 0};
}

/* Every kernel size and stride, both windowed pools, with pads, dilation,
 * ceil_mode and count_include_pad varying along. */
static void kernels_strides(void) {
  for (int64_t k = 1; k <= 7; k++)
    for (int64_t s = 1; s <= 3; s++)
      for (int kind = P_MAX; kind <= P_AVG; kind++) {
        pcase t = window(kind, 1 + (k + s) % 2 * 2, 17, 13 + k, 11 + s, k, s, 0);
        t.d[0] = t.d[1] = 1 + (k + s + kind) % 2;
        int64_t ext = (k - 1) * t.d[0] + 1;
        for (int i = 0; i < 4; i++) t.pads[i] = (k + s + i) % ext; /* asymmetric */
        t.ceil = (int)((k + s) % 3 == 0);
        t.cip = (int)(s % 2);
        t.special = kind == P_MAX ? 1 : 0;
        CHECK(one(&t));
      }
}

static void channels(void) {
  static const int64_t cs[] = {1, 3, 16, 17, 24, 32, 48, 64, 100};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
    for (int kind = P_MAX; kind <= P_GAVG; kind++) {
      pcase t = window(kind, i % 2 ? 3 : 1, cs[i], 15, 9, 3, 2, 1);
      t.special = 1;
      CHECK(one(&t));
      t.cip = 1, t.ceil = 1, t.pads[2] = 0, t.pads[3] = 2, t.n = 1;
      CHECK(one(&t));
    }
}

static void auto_pads(void) {
  static const char *const modes[] = {"SAME_UPPER", "SAME_LOWER", "VALID"};
  for (int m = 0; m < 3; m++)
    for (int kind = P_MAX; kind <= P_AVG; kind++)
      for (int64_t k = 2; k <= 5; k++) {
        pcase t = window(kind, 2, 16 + k, 10 + k, 7 + 2 * k, k, 1 + k % 3, 0);
        t.auto_pad = modes[m];
        t.d[0] = 1 + k % 2, t.d[1] = 1 + (k + 1) % 2;
        t.cip = (int)(k % 2), t.ceil = (int)(m == 2 && k == 3);
        t.k[1] = k == 5 ? 2 : k; /* one non-square kernel */
        CHECK(one(&t));
      }
}

/* The shapes of real networks. */
static void networks(void) {
  pcase t = window(P_MAX, 1, 64, 112, 112, 3, 2, 1); /* ResNet's stem */
  CHECK(one(&t));
  t.special = 1;
  CHECK(one(&t));
  t = window(P_MAX, 3, 64, 56, 56, 3, 2, 1);
  CHECK(one(&t));
  t = window(P_AVG, 1, 256, 14, 14, 2, 2, 0); /* DenseNet's transitions */
  CHECK(one(&t));
  t = window(P_AVG, 2, 100, 9, 7, 3, 1, 1); /* Inception's 3x3 avg, pads counted */
  t.cip = 1;
  CHECK(one(&t));
  t = window(P_GAVG, 1, 2048, 7, 7, 1, 1, 0); /* ResNet's head */
  CHECK(one(&t));
  t = window(P_GAVG, 3, 300, 13, 11, 1, 1, 0);
  CHECK(one(&t));
  t = window(P_GMAX, 3, 300, 13, 11, 1, 1, 0);
  t.special = 1;
  CHECK(one(&t));
  t = window(P_GMAX, 2, 130, 3, 5, 1, 1, 0);
  t.special = 2; /* planes full of NaN */
  CHECK(one(&t));
  t = window(P_GAVG, 1, 960, 1, 1, 1, 1, 0); /* one position */
  CHECK(one(&t));
  t = window(P_MAX, 2, 33, 9, 8, 2, 1, 0);
  t.special = 2; /* windows full of NaN */
  CHECK(one(&t));
}

static void sweep(int count) {
  static const char *const modes[] = {NULL, NULL, NULL, "SAME_UPPER", "SAME_LOWER", "VALID"};
  static const int64_t cs[] = {1, 3, 16, 17, 64, 100, 5, 40, 24, 32, 96};
  int done = 0;
  while (done < count) {
    pcase t = {0};
    t.kind = (int)pick(0, 9) < 4 ? P_MAX : (int)pick(0, 5) < 4 ? P_AVG : (int)pick(P_GMAX, P_GAVG);
    t.n = pick(1, 3), t.c = cs[pick(0, 7)], t.h = pick(1, 30), t.w = pick(1, 30);
    for (int i = 0; i < 2; i++)
      t.k[i] = pick(1, 7), t.s[i] = pick(1, 3), t.d[i] = pick(1, 2);
    for (int i = 0; i < 4; i++) {
      int64_t ext = (t.k[i % 2] - 1) * t.d[i % 2] + 1;
      t.pads[i] = pick(0, ext - 1);
    }
    t.auto_pad = modes[pick(0, 5)];
    t.ceil = (int)pick(0, 1), t.cip = (int)pick(0, 1), t.special = (int)pick(0, 2);
    /* the window must fit: output size >= 1 */
    bool fits = true;
    for (int i = 0; i < 2; i++) {
      int64_t ext = (t.k[i] - 1) * t.d[i] + 1, in = i ? t.w : t.h;
      int64_t padded = in + (t.auto_pad ? 0 : t.pads[i] + t.pads[i + 2]);
      if (t.kind < P_GMAX && (!t.auto_pad || !strcmp(t.auto_pad, "VALID")) && padded < ext)
        fits = false;
    }
    if (!fits) continue;
    if (!one(&t)) describe(&t);
    done++;
  }
}

/* ------------------------------------------------------------ errors */

/* A one-node internal model on X of type dt and the given shape: the run
 * must fail with `want`, its message containing every `has` string. */
static void refused(const char *op, const char *outs, int dt, int rank, const int64_t *dims,
                    const int64_t *ks, int nks, keel_status want, const char *has0,
                    const char *has1) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", dt, rank, dims);
  mb_node *n = mb_add(g, op, "x", outs);
  mb_domain(n, INTERNAL);
  if (nks) mb_attr_ints(n, "kernel_shape", nks, ks);
  mb_output(g, "y", dt, -1, NULL);
  size_t len;
  uint8_t *b = mb_model_domains(g, 19, INTERNAL, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(b, len, NULL, NULL, &s);
  free(b);
  CHECK_OK(st);
  if (st) return;
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) numel *= dims[i];
  void *data = calloc((size_t)numel, 8);
  keel_value_t *in = mb_tensor(s, dt, rank, dims, data), *out[2] = {0};
  st = keel_run(s, (const char *[]){"x"}, &in, 1, out);
  bool ok = st == want && strstr(keel_last_error(), has0) &&
            (!has1 || strstr(keel_last_error(), has1));
  CHECK(ok);
  if (!ok) fprintf(stderr, "%s: %s: %s\n", op, keel_status_str(st), keel_last_error());
  keel_value_release(in);
  keel_value_release(out[0]), keel_value_release(out[1]);
  free(data);
  finish(s);
}

static void errors(void) {
  const int64_t k2[2] = {2, 2}, d3[3] = {1, 4, 4}, d4[4] = {1, 4, 4, 3};
  for (int kind = P_MAX; kind <= P_GAVG; kind++) {
    const char *op = NHWC_OP[kind];
    int nk = kind < P_GMAX ? 2 : 0;
    refused(op, "y", KEEL_FLOAT, 3, d3, k2, nk, KEEL_ERR_SHAPE, "rank 3", NULL);
    refused(op, "y", KEEL_DOUBLE, 4, d4, k2, nk, KEEL_ERR_UNSUPPORTED, op, "float64");
  }
  refused("NhwcMaxPool", "y", KEEL_DOUBLE, 4, d4, k2, 2, KEEL_ERR_UNSUPPORTED, "NhwcMaxPool",
          INTERNAL);
  refused("NhwcMaxPool", "y,i", KEEL_FLOAT, 4, d4, k2, 2, KEEL_ERR_INVALID_MODEL, "Indices",
          NULL);
  refused("NhwcMaxPool", "y", KEEL_FLOAT, 4, d4, k2, 1, KEEL_ERR_INVALID_MODEL,
          "kernel_shape has 1 values for 2 spatial dims", NULL);
  refused("NhwcAveragePool", "y", KEEL_FLOAT, 4, d4, (const int64_t[]){0, 2}, 2,
          KEEL_ERR_INVALID_MODEL, "kernel_shape[0] = 0", NULL);
  refused("NhwcMaxPool", "y", KEEL_FLOAT, 4, d4, (const int64_t[]){6, 2}, 2, KEEL_ERR_SHAPE,
          "smaller than the kernel span", NULL);
}

int main(void) {
  errors();
  kernels_strides();
  channels();
  auto_pads();
  networks();
  sweep(60);
  fprintf(stderr, "%d cases compared (%d refused alike by both)\n", g_cases, g_rejected);
  return check_report();
}
