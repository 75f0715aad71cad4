/* test_gpu_blas.c: the blas kernel group (src/device/dev_blas.h) called
 * directly, the fast path against the naive one. ctest label `gpu`.
 *
 * Every case runs on the emulated device first (emu_blas.c, double
 * accumulation) and is checked against a host reference computed here;
 * that part runs on any machine. Then, on a GPU (cuda:0), the same cases
 * through cuBLAS (cuda_blas.c) are checked against the emulated device's
 * result, within float accumulation (|g - e| <= 1e-4 (1 + |e|)):
 *   - transA / transB, alpha, beta (with C read), beta 0 over a C of NaN
 *     (never read), K = 0 (C = beta C; zeros with beta 0);
 *   - strided batches with each operand's stride 0 (broadcast) or not;
 *   - leading dimensions wider than the matrices (a slice of a wider one);
 *   - fill_2d: a row, a column, a scalar and a full matrix broadcast onto
 *     [M, N];
 *   - sizes from 1 x 1 x 1 to 257 x 129 x 300, batches of up to 12;
 *   - the device's description names cuBLAS when it loaded, and the
 *     device closes with no device bytes held.
 * Without a GPU the test exits 77 (ctest: skipped) after the emulated
 * part, saying why.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device/cuda.h"
#include "device/dev_blas.h"
#include "device/device.h"
#include "mem/alloc.h"

static unsigned g_seed = 4242;
static float frand(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return (float)((g_seed >> 8) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

typedef struct gcase {
  keel_dev_gemm g;
  bool nan_c;                  /* C starts as NaN (only with beta 0)       */
} gcase;

/* Elements an operand spans: the last batch's matrix end. */
static int64_t span(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
  return (batch - 1) * stride + rows * ld;
}

static void host_ref(const keel_dev_gemm *g, const float *a, const float *b, float *c) {
  for (int64_t i = 0; i < g->batch; i++)
    for (int64_t m = 0; m < g->M; m++)
      for (int64_t n = 0; n < g->N; n++) {
        double acc = 0;
        for (int64_t k = 0; k < g->K; k++)
          acc += (double)(g->ta ? a[i * g->sa + k * g->lda + m] : a[i * g->sa + m * g->lda + k]) *
                 (double)(g->tb ? b[i * g->sb + n * g->ldb + k] : b[i * g->sb + k * g->ldb + n]);
        float *y = &c[i * g->sc + m * g->ldc + n];
        *y = (float)((double)g->alpha * acc + (g->beta != 0 ? (double)g->beta * (double)*y : 0.0));
      }
}

static keel_block *put(keel_device *d, keel_heap *h, const float *x, int64_t n) {
  keel_block *b = keel_heap_alloc(h, sizeof(float) * (size_t)(n ? n : 1), (keel_owner){0, 0});
  CHECK(b != NULL);
  if (b && n) CHECK_OK(keel_device_to_device(d, b->ptr, x, sizeof(float) * (size_t)n));
  return b;
}

/* Runs case c on device d; the result into out (na, nb, nc elements). */
static void run_on(keel_device *d, const gcase *c, const float *a, const float *b, const float *c0,
                   int64_t na, int64_t nb, int64_t nc, float *out) {
  keel_heap *h = keel_heap_create_on(0, keel_device_provider(d));
  CHECK(h != NULL);
  if (!h) return;
  keel_block *da = put(d, h, a, na), *db = put(d, h, b, nb), *dc = put(d, h, c0, nc);
  if (da && db && dc) {
    CHECK_OK(d->blas->sgemm(d, &c->g, (const float *)da->ptr, (const float *)db->ptr, (float *)dc->ptr));
    CHECK_OK(keel_device_to_host(d, out, dc->ptr, sizeof(float) * (size_t)nc));
  }
  if (da) keel_heap_free(h, da);
  if (db) keel_heap_free(h, db);
  if (dc) keel_heap_free(h, dc);
  keel_heap_release(h);
}

static double worst_diff(const float *x, const float *ref, int64_t n) {
  double w = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(x[i]) || isnan(ref[i])) return isnan(x[i]) && isnan(ref[i]) ? w : INFINITY;
    w = fmax(w, fabs((double)x[i] - (double)ref[i]) / (1.0 + fabs((double)ref[i])));
  }
  return w;
}

/* A case with dense leading dims, strides by the flags, `pad` extra
 * columns on every stored row. */
static gcase make(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch, bool bcast_a,
                  bool bcast_b, float alpha, float beta, int64_t pad) {
  keel_dev_gemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .batch = batch, .alpha = alpha, .beta = beta};
  g.lda = (ta ? M : K) + pad, g.ldb = (tb ? K : N) + pad, g.ldc = N + pad;
  g.sa = bcast_a ? 0 : (ta ? K : M) * g.lda;
  g.sb = bcast_b ? 0 : (tb ? N : K) * g.ldb;
  g.sc = M * g.ldc;
  return (gcase){g, false};
}

static void gemm_cases(keel_device *emu, keel_device *gpu) {
  gcase cases[] = {
      make(false, false, 1, 1, 1, 1, false, false, 1.0f, 0.0f, 0),
      make(false, false, 5, 7, 3, 1, false, false, 1.0f, 0.0f, 0),
      make(true, false, 5, 7, 3, 1, false, false, 0.5f, 0.0f, 0),
      make(false, true, 5, 7, 3, 1, false, false, 1.0f, 1.0f, 0),
      make(true, true, 33, 17, 65, 1, false, false, -2.0f, 0.5f, 0),
      make(false, false, 257, 129, 300, 1, false, false, 1.0f, 0.0f, 0),
      make(false, false, 6, 5, 4, 12, false, false, 1.0f, 0.0f, 0),
      make(false, true, 6, 5, 4, 12, true, false, 1.0f, 0.0f, 0),
      make(true, false, 6, 5, 4, 12, false, true, 1.0f, 2.0f, 0),
      make(false, false, 16, 8, 32, 3, false, false, 1.0f, 0.0f, 3),
      make(true, true, 9, 10, 11, 2, false, true, 1.5f, -1.0f, 5),
      make(false, false, 4, 6, 0, 1, false, false, 1.0f, 0.0f, 0), /* K = 0: zeros */
      make(false, false, 4, 6, 0, 3, false, false, 1.0f, 3.0f, 0), /* K = 0: C *= beta */
      make(false, false, 7, 9, 5, 2, false, false, 1.0f, 0.0f, 0),
  };
  cases[13].nan_c = true;
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const gcase *c = &cases[ci];
    const keel_dev_gemm *g = &c->g;
    int64_t na = span(g->batch, g->sa, g->ta ? g->K : g->M, g->lda);
    int64_t nb = span(g->batch, g->sb, g->tb ? g->N : g->K, g->ldb);
    int64_t nc = span(g->batch, g->sc, g->M, g->ldc);
    float *a = malloc(sizeof(float) * (size_t)(na + 1)), *b = malloc(sizeof(float) * (size_t)(nb + 1));
    float *c0 = malloc(sizeof(float) * (size_t)nc), *ref = malloc(sizeof(float) * (size_t)nc);
    float *e = malloc(sizeof(float) * (size_t)nc), *x = malloc(sizeof(float) * (size_t)nc);
    for (int64_t i = 0; i < na; i++) a[i] = frand();
    for (int64_t i = 0; i < nb; i++) b[i] = frand();
    for (int64_t i = 0; i < nc; i++) c0[i] = c->nan_c ? NAN : frand();
    memcpy(ref, c0, sizeof(float) * (size_t)nc);
    host_ref(g, a, b, ref);
    run_on(emu, c, a, b, c0, na, nb, nc, e);
    double we = worst_diff(e, ref, nc);
    CHECK(we <= 1e-6);
    if (!(we <= 1e-6)) fprintf(stderr, "case %zu: emu against the host: %g\n", ci, we);
    if (gpu) {
      run_on(gpu, c, a, b, c0, na, nb, nc, x);
      double wg = worst_diff(x, e, nc);
      CHECK(wg <= 1e-4);
      fprintf(stderr, "case %zu (M %lld N %lld K %lld batch %lld%s%s): cuBLAS against emu: %.3g\n", ci,
              (long long)g->M, (long long)g->N, (long long)g->K, (long long)g->batch, g->ta ? " ta" : "",
              g->tb ? " tb" : "", wg);
    }
    free(a), free(b), free(c0), free(ref), free(e), free(x);
  }
}

/* fill_2d of a [M, N] from src with strides s0, s1. */
static void fill_case(keel_device *d, int64_t M, int64_t N, int64_t s0, int64_t s1) {
  int64_t ns = (M - 1) * s0 + (N - 1) * s1 + 1;
  float *src = malloc(sizeof(float) * (size_t)ns), *y = malloc(sizeof(float) * (size_t)(M * N));
  for (int64_t i = 0; i < ns; i++) src[i] = frand();
  keel_heap *h = keel_heap_create_on(0, keel_device_provider(d));
  keel_block *ds = put(d, h, src, ns);
  keel_block *dy = keel_heap_alloc(h, sizeof(float) * (size_t)(M * N), (keel_owner){0, 0});
  CHECK(ds && dy);
  if (ds && dy) {
    CHECK_OK(d->blas->fill_2d(d, M, N, (const float *)ds->ptr, s0, s1, (float *)dy->ptr));
    CHECK_OK(keel_device_to_host(d, y, dy->ptr, sizeof(float) * (size_t)(M * N)));
    int bad = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) bad += y[m * N + n] != src[m * s0 + n * s1];
    CHECK(bad == 0);
  }
  if (ds) keel_heap_free(h, ds);
  if (dy) keel_heap_free(h, dy);
  keel_heap_release(h);
  free(src), free(y);
}

static void fill_cases(keel_device *d) {
  fill_case(d, 5, 7, 0, 1);   /* a row [N]       */
  fill_case(d, 5, 7, 1, 0);   /* a column [M, 1] */
  fill_case(d, 5, 7, 0, 0);   /* a scalar        */
  fill_case(d, 65, 33, 33, 1); /* [M, N]        */
}

int main(void) {
  keel_device *emu = NULL, *gpu = NULL;
  CHECK_OK(keel_device_open(KEEL_DEVICE_EMU, 0, &emu));
  if (!emu) return check_report();
  CHECK(emu->blas != NULL);
  char why[512] = "";
  int n = keel_gpu_count(why, sizeof why);
  if (n) {
    CHECK_OK(keel_device_open(KEEL_DEVICE_CUDA, 0, &gpu));
    if (gpu) fprintf(stderr, "cuda:0: %s\n", gpu->desc);
    CHECK(gpu && gpu->blas != NULL); /* the GPU machine has cuBLAS */
    if (gpu && !gpu->blas) keel_device_close(gpu), gpu = NULL;
  }
  gemm_cases(emu, gpu);
  fill_cases(emu);
  if (gpu) fill_cases(gpu);
  keel_device_close(emu);
  keel_device_close(gpu);
  CHECK(keel_process_device_bytes() == 0);
  if (!n) {
    fprintf(stderr, "no GPU here (%s): the emulated device checked, cuBLAS skipped\n", why);
    if (check_report()) return 1;
    return 77;
  }
  return check_report();
}
