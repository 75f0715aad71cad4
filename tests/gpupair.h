/* gpupair.h: what the GPU kernel tests (test_gpu_conv.c, test_gpu_rnn.c)
 * share: side 0 the GPU, side 1 the emulated device (the naive reference),
 * a heap on each, a seeded float source, bytes put on both sides, the two
 * sides' outputs compared, and the open and close around a test.
 * Header-only, like devcase.h. KEEL_TEST_GPUPAIR_EMU=1 pairs the emulated
 * device with itself, so that a test's own logic (sizes, strides,
 * pointers) can be run on a machine without a GPU; it then proves nothing
 * about the GPU. */
#ifndef KEEL_TEST_GPUPAIR_H
#define KEEL_TEST_GPUPAIR_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device/cuda.h"
#include "device/device.h"
#include "mem/alloc.h"

static keel_device *g_d[2]; /* 0: the GPU, 1: the emulated device */
static keel_heap *g_h[2];

static unsigned g_seed = 777;
static inline float frand(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

static inline float *frands(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

/* n bytes on side s, from src when not NULL */
static inline keel_block *put(int s, const void *src, size_t n) {
  keel_block *b = keel_heap_alloc(g_h[s], n ? n : 4, (keel_owner){0, 0});
  CHECK(b != NULL);
  if (b && src && n) CHECK_OK(keel_device_to_device(g_d[s], b->ptr, src, n));
  return b;
}

/* The two sides' n floats agree within tol, relative to 1 + |reference|
 * (NaN where the other is). */
static inline void close_enough(const char *what, int i, keel_block *const *y, int64_t n, double tol) {
  float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
  CHECK_OK(keel_device_to_host(g_d[0], a, y[0]->ptr, (size_t)n * sizeof(float)));
  CHECK_OK(keel_device_to_host(g_d[1], b, y[1]->ptr, (size_t)n * sizeof(float)));
  double worst = 0;
  int nan_diff = 0;
  for (int64_t j = 0; j < n; j++) {
    if (isnan(a[j]) || isnan(b[j])) nan_diff += isnan(a[j]) != isnan(b[j]);
    else if (a[j] != b[j]) worst = fmax(worst, fabs((double)a[j] - b[j]) / (1.0 + fabs((double)b[j])));
  }
  if (worst > tol || nan_diff) fprintf(stderr, "  %s %d: off by %g, %d NaN differences\n", what, i, worst, nan_diff);
  CHECK(worst <= tol && !nan_diff);
  free(a), free(b);
}

/* Opens both sides and their heaps: 0 to go on; else main's exit code
 * (77: no GPU, skipped). */
static inline int gpupair_open(void) {
  bool emu = getenv("KEEL_TEST_GPUPAIR_EMU") && getenv("KEEL_TEST_GPUPAIR_EMU")[0] == '1';
  if (!emu && !keel_cuda_count()) {
    fprintf(stderr, "no GPU here (%s): skipped\n", keel_last_error());
    if (check_report()) return 1;
    return 77;
  }
  CHECK_OK(keel_device_open(emu ? KEEL_DEVICE_EMU : KEEL_DEVICE_CUDA, 0, &g_d[0]));
  CHECK_OK(keel_device_open(KEEL_DEVICE_EMU, 0, &g_d[1]));
  if (!g_d[0] || !g_d[1]) {
    int rc = check_report();
    return rc ? rc : 1;
  }
  for (int s = 0; s < 2; s++) {
    g_h[s] = keel_heap_create_on(0, keel_device_provider(g_d[s]));
    CHECK(g_h[s] != NULL);
  }
  return 0;
}

/* Both sides idle, every block given back, the devices closed, no device
 * byte left: main's exit code. */
static inline int gpupair_close(void) {
  for (int s = 0; s < 2; s++) {
    CHECK_OK(keel_device_sync(g_d[s]));
    CHECK(keel_heap_allocated(g_h[s]) == 0);
    keel_heap_release(g_h[s]);
    keel_device_close(g_d[s]);
  }
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}

#endif /* KEEL_TEST_GPUPAIR_H */
