/* test_gpu_norm.c: the `norm` kernel group (device/dev_norm.h) on a GPU
 * (kernels/norm.cu through cuda_norm.c) against its naive reference on
 * the emulated device (emu_norm.c, sums in double): LayerNorm with and
 * without bias, Mean and InvStdDev, rows of 1, 31, 256, 1000 and 4099
 * floats; ReduceSum, ReduceMean, ReduceMax over the same rows, a NaN in a
 * row making its max NaN, and over the middle axis of (2, cols, rows / 2)
 * (reduce_mid). Relative agreement 1e-5 (float block sums
 * against double ones). ctest label `gpu`; without a GPU it says so and
 * exits 77 (skipped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device/cuda.h"
#include "device/dev_norm.h"
#include "device/device.h"
#include "mem/alloc.h"

static keel_device *g_d[2]; /* 0: the GPU, 1: the emulated device */
static keel_heap *g_h[2];

static unsigned g_seed = 4242;
static float frand(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 8) & 0xffff) / 65536.0f * 4.0f - 1.5f;
}

static keel_block *put(int s, const void *src, size_t n) {
  keel_block *b = keel_heap_alloc(g_h[s], n ? n : 4, (keel_owner){0, 0});
  CHECK(b != NULL);
  if (b && src && n) CHECK_OK(keel_device_to_device(g_d[s], b->ptr, src, n));
  return b;
}

/* The two sides' n floats agree (NaN where the other is NaN). */
static void close_enough(const char *what, keel_block *const *y, int64_t n) {
  float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
  CHECK_OK(keel_device_to_host(g_d[0], a, y[0]->ptr, (size_t)n * sizeof(float)));
  CHECK_OK(keel_device_to_host(g_d[1], b, y[1]->ptr, (size_t)n * sizeof(float)));
  double worst = 0;
  int nan_diff = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isnan(b[i])) nan_diff += isnan(a[i]) != isnan(b[i]);
    else worst = fmax(worst, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i])));
  }
  if (worst > 1e-5 || nan_diff) fprintf(stderr, "  %s: off by %g, %d NaN differences\n", what, worst, nan_diff);
  CHECK(worst <= 1e-5 && !nan_diff);
  free(a), free(b);
}

int main(void) {
  if (!keel_cuda_count()) {
    fprintf(stderr, "no GPU here (%s): skipped\n", keel_last_error());
    if (check_report()) return 1;
    return 77;
  }
  CHECK_OK(keel_device_open(KEEL_DEVICE_CUDA, 0, &g_d[0]));
  CHECK_OK(keel_device_open(KEEL_DEVICE_EMU, 0, &g_d[1]));
  if (!g_d[0] || !g_d[1]) return check_report();
  for (int s = 0; s < 2; s++) {
    g_h[s] = keel_heap_create_on(0, keel_device_provider(g_d[s]));
    CHECK(g_h[s] && g_d[s]->norm);
  }
  static const int64_t widths[] = {1, 31, 256, 1000, 4099};
  for (int w = 0; w < 5; w++) {
    int64_t cols = widths[w], rows = 7, n = rows * cols;
    float *x = malloc((size_t)n * sizeof(float)), *sc = malloc((size_t)cols * sizeof(float)),
          *bi = malloc((size_t)cols * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = frand() + (float)(i / cols); /* rows of different means */
    for (int64_t i = 0; i < cols; i++) sc[i] = frand(), bi[i] = frand();
    if (cols > 1) x[3 * cols + cols / 2] = NAN; /* row 3's max (and sums) are NaN */
    keel_block *xb[2], *sb[2], *bb[2], *y[2], *m[2], *iv[2];
    for (int s = 0; s < 2; s++) {
      xb[s] = put(s, x, (size_t)n * 4), sb[s] = put(s, sc, (size_t)cols * 4), bb[s] = put(s, bi, (size_t)cols * 4);
      y[s] = put(s, NULL, (size_t)n * 4), m[s] = put(s, NULL, (size_t)rows * 4), iv[s] = put(s, NULL, (size_t)rows * 4);
    }
    for (int bias = 0; bias < 2; bias++) {
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->norm->layernorm(g_d[s], rows, cols, (float *)xb[s]->ptr, (float *)sb[s]->ptr,
                                         bias ? (float *)bb[s]->ptr : NULL, 1e-5f, (float *)y[s]->ptr,
                                         (float *)m[s]->ptr, (float *)iv[s]->ptr));
      close_enough("layernorm y", y, n);
      close_enough("layernorm mean", m, rows);
      close_enough("layernorm inv_std", iv, rows);
    }
    for (int op = 0; op < 3; op++) {
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->norm->reduce(g_d[s], (keel_dev_reduce)op, rows, cols, (float *)xb[s]->ptr,
                                      (float *)m[s]->ptr));
      close_enough(op == 0 ? "sum" : op == 1 ? "mean" : "max", m, rows);
      /* the same floats as (2, cols, rows / 2): over the middle axis */
      int64_t inner = rows / 2;
      for (int s = 0; s < 2 && inner; s++)
        CHECK_OK(g_d[s]->norm->reduce_mid(g_d[s], (keel_dev_reduce)op, 2, cols, inner,
                                          (float *)xb[s]->ptr, (float *)m[s]->ptr));
      if (inner) close_enough(op == 0 ? "mid sum" : op == 1 ? "mid mean" : "mid max", m, 2 * inner);
    }
    for (int s = 0; s < 2; s++) {
      keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], sb[s]), keel_heap_free(g_h[s], bb[s]);
      keel_heap_free(g_h[s], y[s]), keel_heap_free(g_h[s], m[s]), keel_heap_free(g_h[s], iv[s]);
    }
    free(x), free(sc), free(bi);
  }
  for (int s = 0; s < 2; s++) {
    CHECK_OK(keel_device_sync(g_d[s]));
    CHECK(keel_heap_allocated(g_h[s]) == 0);
    keel_heap_release(g_h[s]);
    keel_device_close(g_d[s]);
  }
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
