/* test_gemv.c: keel's few-rows product (src/ops/common/gemv.c) against double
 * math: both weight layouts (N rows of K, K rows of N), 1-6 rows of A
 * (more than one pass of 4), K across the vector tails (1-300), N across
 * the tiles and the pool's chunks, padded row strides, bias, a residual
 * Z (also in place: Z is Y), an activation, on the plain C kernel, the
 * AVX-512 one (where the CPU has it) and the pool at 1-3 threads. The
 * columns past N in Y's padded rows stay untouched. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/common/gemv.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng;
}
static int64_t pick(int64_t lo, int64_t hi) {
  return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}
static float rndf(void) { return (float)(next() >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

static float *fill(int64_t n) {
  float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = rndf();
  return v;
}

/* One case, run by `how`: 0 plain C, 1 AVX-512 (skipped when absent),
 * 2.. the pool of how - 1 threads. */
static void one(int how, int64_t R, int64_t K, int64_t N, bool rows, int extras) {
  bool has_bias = extras & 1, has_z = extras & 2, in_place = extras & 4, relu = extras & 8;
  int64_t lda = K + pick(0, 3), ldy = N + pick(0, 5);
  float *a = fill(R * lda), *w = fill(K * N), *bias = fill(N), *y = fill(R * ldy);
  float *z = in_place ? y : fill(R * ldy);
  float *y0 = malloc(sizeof(float) * (size_t)(R * ldy));
  float *z0 = malloc(sizeof(float) * (size_t)(R * ldy));
  memcpy(y0, y, sizeof(float) * (size_t)(R * ldy));
  memcpy(z0, z, sizeof(float) * (size_t)(R * ldy));
  keel_act act = {relu ? KEEL_ACT_RELU : KEEL_ACT_NONE, 0, 0};
  keel_gemv_args g = {R, K, N, a, lda, w, rows, has_bias ? bias : NULL, has_z ? z : NULL, y, ldy,
                      &act};
  bool ran = true;
  if (how < 2) {
    ran = keel_gemv_variant(how, &g);
  } else {
    keel_pool *p = NULL;
    CHECK_OK(keel_pool_create(how - 1, 0, &p));
    CHECK_OK(keel_gemv(p, &g));
    keel_pool_destroy(p);
  }
  int bad = 0;
  for (int64_t r = 0; ran && r < R; r++)
    for (int64_t n = 0; n < ldy; n++) {
      float got = y[r * ldy + n];
      if (n >= N) { /* padding: untouched */
        if (got != y0[r * ldy + n]) bad++;
        continue;
      }
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double t = (double)a[r * lda + k] * (rows ? w[n * K + k] : w[k * N + n]);
        want += t, mag += fabs(t);
      }
      if (has_bias) want += bias[n];
      if (has_z) want += z0[r * ldy + n];
      if (relu && want < 0) want = 0;
      if (!(fabs(got - want) <= 1e-6 * (mag + 4))) bad++;
    }
  if (bad)
    fprintf(stderr, "how %d R %lld K %lld N %lld rows %d extras %d: %d wrong\n", how,
            (long long)R, (long long)K, (long long)N, rows, extras, bad);
  CHECK(bad == 0);
  free(a), free(w), free(bias), free(y), free(y0), free(z0);
  if (!in_place) free(z);
}

int main(void) {
  fprintf(stderr, "AVX-512 kernel: %s\n", keel_gemv_fast() ? "yes" : "no (plain C only)");
  /* the tails: every K up to 40, N around the tiles */
  for (int64_t K = 1; K <= 40; K++)
    for (int how = 0; how < 2; how++) {
      one(how, 1 + K % 6, K, 1 + (K * 7) % 70, true, (int)(K % 16));
      one(how, 1 + K % 6, K, 1 + (K * 7) % 70, false, (int)(K % 16));
    }
  /* random shapes on every route */
  for (int i = 0; i < 200; i++) {
    int how = (int)pick(0, 4);
    one(how, pick(1, 6), pick(1, 300), pick(1, 300), pick(0, 1) == 1, (int)pick(0, 15));
  }
  /* a classifier's and a squeeze-excite's shapes over the pool */
  for (int how = 2; how <= 4; how++) {
    one(how, 1, 1280, 1000, true, 1);
    one(how, 1, 960, 240, true, 9);
    one(how, 2, 512, 1000, false, 3);
  }
  return check_report();
}
