/* test_gpu_norm.c: the `norm` kernel group (device/dev_norm.h) on a GPU
 * (kernels/norm.cu through cuda_norm.c) against its naive reference on
 * the emulated device (emu_norm.c, sums in double): LayerNorm with and
 * without bias, Mean and InvStdDev, rows of 1, 31, 256, 1000 and 4099
 * floats; ReduceSum, ReduceMean, ReduceMax over the same rows, a NaN in a
 * row making its max NaN, and over the middle axis of (2, cols, rows / 2)
 * (reduce_mid). Relative agreement 1e-5 (float block sums
 * against double ones). ctest label `gpu`; without a GPU it says so and
 * exits 77 (skipped). The pair of devices, heaps and the comparison are
 * tests/gpupair.h's. */
#include "device/dev_norm.h"
#include "gpupair.h"

/* gpupair.h's source, widened to [-1.5, 2.5) */
static float nrand(void) { return frand() * 2.0f + 0.5f; }

int main(void) {
  g_seed = 4242;
  int rc = gpupair_open();
  if (rc) return rc;
  for (int s = 0; s < 2; s++) CHECK(g_d[s]->norm != NULL);
  static const int64_t widths[] = {1, 31, 256, 1000, 4099};
  for (int w = 0; w < 5; w++) {
    int64_t cols = widths[w], rows = 7, n = rows * cols;
    float *x = malloc((size_t)n * sizeof(float)), *sc = malloc((size_t)cols * sizeof(float)),
          *bi = malloc((size_t)cols * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = nrand() + (float)(i / cols); /* rows of different means */
    for (int64_t i = 0; i < cols; i++) sc[i] = nrand(), bi[i] = nrand();
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
      close_enough("layernorm y", 0, y, n, 1e-5);
      close_enough("layernorm mean", 0, m, rows, 1e-5);
      close_enough("layernorm inv_std", 0, iv, rows, 1e-5);
    }
    for (int op = 0; op < 3; op++) {
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->norm->reduce(g_d[s], (keel_dev_reduce)op, rows, cols, (float *)xb[s]->ptr,
                                      (float *)m[s]->ptr));
      close_enough(op == 0 ? "sum" : op == 1 ? "mean" : "max", 0, m, rows, 1e-5);
      /* the same floats as (2, cols, rows / 2): over the middle axis */
      int64_t inner = rows / 2;
      for (int s = 0; s < 2 && inner; s++)
        CHECK_OK(g_d[s]->norm->reduce_mid(g_d[s], (keel_dev_reduce)op, 2, cols, inner,
                                          (float *)xb[s]->ptr, (float *)m[s]->ptr));
      if (inner) close_enough(op == 0 ? "mid sum" : op == 1 ? "mid mean" : "mid max", 0, m, 2 * inner, 1e-5);
    }
    for (int s = 0; s < 2; s++) {
      keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], sb[s]), keel_heap_free(g_h[s], bb[s]);
      keel_heap_free(g_h[s], y[s]), keel_heap_free(g_h[s], m[s]), keel_heap_free(g_h[s], iv[s]);
    }
    free(x), free(sc), free(bi);
  }
  return gpupair_close();
}
