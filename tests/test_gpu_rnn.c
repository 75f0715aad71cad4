/* test_gpu_rnn.c: the `rnn` kernel group (device/dev_rnn.h) on a GPU
 * (kernels/rnn.cu through cuda_rnn.c) against its naive reference on the
 * emulated device (emu_rnn.c): LSTM's cell and GRU's gates and output,
 * with and without the recurrent term, biases and previous state, both
 * linear_before_reset values, batches 1 and 3, 17 and 64 units; relative
 * agreement 1e-5 (the GPU's exp and tanh against libm's). ctest label
 * `gpu`; without a GPU it says so and exits 77 (skipped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device/cuda.h"
#include "device/dev_rnn.h"
#include "device/device.h"
#include "mem/alloc.h"

static keel_device *g_d[2]; /* 0: the GPU, 1: the emulated device */
static keel_heap *g_h[2];

static unsigned g_seed = 777;
static float frand(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

static keel_block *put(int s, const void *src, size_t n) {
  keel_block *b = keel_heap_alloc(g_h[s], n ? n : 4, (keel_owner){0, 0});
  CHECK(b != NULL);
  if (b && src && n) CHECK_OK(keel_device_to_device(g_d[s], b->ptr, src, n));
  return b;
}

/* The two sides' n floats agree within tol (NaN where the other is). */
static void close_enough(const char *what, int i, keel_block *const *y, int64_t n, double tol) {
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

static float *frands(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}


static void check_rnn(void) {
  static const int64_t shapes[][2] = {{1, 17}, {3, 64}};
  for (int i = 0; i < 2; i++) {
    int64_t B = shapes[i][0], H = shapes[i][1], n4 = B * 4 * H, nh = B * H;
    float *xw = frands(n4), *hr = frands(n4), *wb = frands(8 * H), *hp = frands(nh);
    keel_block *bx[2], *bh[2], *bw[2], *bp[2], *o1[2], *o2[2], *o3[2];
    for (int s = 0; s < 2; s++)
      bx[s] = put(s, xw, (size_t)n4 * 4), bh[s] = put(s, hr, (size_t)n4 * 4), bw[s] = put(s, wb, (size_t)8 * H * 4),
      bp[s] = put(s, hp, (size_t)nh * 4), o1[s] = put(s, NULL, (size_t)nh * 4), o2[s] = put(s, NULL, (size_t)nh * 4),
      o3[s] = put(s, NULL, (size_t)nh * 4);
    for (int v = 0; v < 4; v++) { /* bit 0: recurrent term and state, bit 1: biases */
      bool rec = v & 1, bias = v & 2;
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->rnn->lstm_cell(g_d[s], B, H, (float *)bx[s]->ptr, rec ? (float *)bh[s]->ptr : NULL,
                                        bias ? (float *)bw[s]->ptr : NULL, rec ? (float *)bp[s]->ptr : NULL,
                                        (float *)o1[s]->ptr, (float *)o2[s]->ptr));
      close_enough("lstm c", v, o1, nh, 1e-5);
      close_enough("lstm h", v, o2, nh, 1e-5);
      for (int lbr = 0; lbr < 2; lbr++) {
        for (int s = 0; s < 2; s++) {
          CHECK_OK(g_d[s]->rnn->gru_gates(g_d[s], B, H, (float *)bx[s]->ptr, rec ? (float *)bh[s]->ptr : NULL,
                                          bias ? (float *)bw[s]->ptr : NULL, rec ? (float *)bp[s]->ptr : NULL, lbr,
                                          (float *)o1[s]->ptr, (float *)o2[s]->ptr));
          CHECK_OK(g_d[s]->rnn->gru_out(g_d[s], B, H, (float *)bx[s]->ptr, rec ? (float *)bh[s]->ptr : NULL,
                                        rec && !lbr ? (float *)bh[s]->ptr : NULL, bias ? (float *)bw[s]->ptr : NULL,
                                        (float *)o1[s]->ptr, (float *)o2[s]->ptr, rec ? (float *)bp[s]->ptr : NULL,
                                        lbr, (float *)o3[s]->ptr));
        }
        close_enough(lbr ? "gru z (lbr)" : "gru z", v, o1, nh, 1e-5);
        close_enough(lbr ? "gru r (lbr)" : "gru r h", v, o2, nh, 1e-5);
        close_enough(lbr ? "gru h (lbr)" : "gru h", v, o3, nh, 1e-5);
      }
    }
    for (int s = 0; s < 2; s++)
      keel_heap_free(g_h[s], bx[s]), keel_heap_free(g_h[s], bh[s]), keel_heap_free(g_h[s], bw[s]),
      keel_heap_free(g_h[s], bp[s]), keel_heap_free(g_h[s], o1[s]), keel_heap_free(g_h[s], o2[s]),
      keel_heap_free(g_h[s], o3[s]);
    free(xw), free(hr), free(wb), free(hp);
  }
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
    CHECK(g_h[s] && g_d[s]->rnn);
  }
  check_rnn();
  for (int s = 0; s < 2; s++) {
    CHECK_OK(keel_device_sync(g_d[s]));
    CHECK(keel_heap_allocated(g_h[s]) == 0);
    keel_heap_release(g_h[s]);
    keel_device_close(g_d[s]);
  }
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
