/* test_gpu.c: the GPU device layer (src/device/cuda.c) and keel's caching
 * allocator on device memory (a provider, mem/alloc.h). ctest label `gpu`.
 *
 * Without a GPU (CI): the device count is 0 with a reason that names what
 * is missing, opening cuda:0 is KEEL_ERR_UNSUPPORTED with that reason, and
 * the test exits 77 (ctest: skipped) after saying so.
 *
 * With a GPU:
 *  - the allocator on device memory: blocks of many sizes come and go for
 *    1000 rounds with no cuMemAlloc after the first round (every
 *    allocation on a run's path comes from keel's cache); trim and destroy
 *    give every byte back (keel_process_device_bytes() == 0);
 *  - a cap on the device heap: a request over it is a clean failure
 *    (by_cap), and the heap serves the next request;
 *  - the kernels (PTX built by clang, JIT-compiled by the driver): every
 *    element-wise binary op with and without broadcasting, every unary op
 *    and softmax against a float64 reference on the host;
 *  - figures (printed, not asserted): cuMemAlloc + cuMemFree against a
 *    cached block, a launch's latency, a copy's bandwidth.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "device/cuda.h"
#include "mem/alloc.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static unsigned g_seed = 12345;
static float frand(float lo, float hi) {
  g_seed = g_seed * 1103515245u + 12345u;
  return lo + (hi - lo) * (float)((g_seed >> 8) & 0xffffff) / (float)0x1000000;
}

static keel_block *dalloc(keel_heap *h, size_t n) { return keel_heap_alloc(h, n, (keel_owner){0, 0}); }

/* ------------------------------------------------------------ memory */

static void allocator_on_device(keel_cuda_dev *d) {
  keel_heap *h = keel_heap_create_on(0, keel_cuda_provider(d));
  CHECK(h != NULL && !strcmp(keel_heap_device(h), "cuda:0"));
  static const size_t sizes[] = {64, 1000, 4096, 65536, 70000, 1 << 20, 3 << 20, 12 << 20};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  uint64_t after_first = 0;
  int failed = 0;
  for (int round = 0; round < 1000; round++) {
    keel_block *b[NS];
    for (int i = 0; i < NS; i++) failed += !(b[i] = dalloc(h, sizes[(i + round) % NS]));
    for (int i = 0; i < NS; i++) keel_heap_free(h, b[(i * 3 + round) % NS]);
    if (round == 0) after_first = keel_cuda_driver_allocs(d);
  }
  keel_stats st = {.size = sizeof st};
  keel_heap_stats(h, &st);
  fprintf(stderr, "device heap: %llu cuMemAlloc calls in round 1, %llu after 1000 rounds; reserved %llu B; "
          "%llu B of GPU memory held by keel\n", (unsigned long long)after_first,
          (unsigned long long)keel_cuda_driver_allocs(d), (unsigned long long)st.reserved,
          (unsigned long long)keel_process_device_bytes());
  CHECK(failed == 0);
  CHECK(keel_cuda_driver_allocs(d) == after_first);
  CHECK(keel_heap_allocated(h) == 0 && keel_process_device_bytes() == st.reserved);
  keel_heap_trim(h);
  CHECK(keel_process_device_bytes() == 0);
  keel_heap_release(h);
  CHECK(keel_process_device_bytes() == 0);
}

static void cap_on_device(keel_cuda_dev *d) {
  keel_heap *h = keel_heap_create_on(8u << 20, keel_cuda_provider(d));
  keel_block *small = dalloc(h, 1 << 20);
  keel_block *big = dalloc(h, 16u << 20);
  keel_oom_info oi = keel_heap_oom_info(h);
  CHECK(small != NULL && big == NULL && oi.by_cap && oi.request >= (16u << 20));
  keel_block *again = dalloc(h, 2 << 20); /* the heap is still usable */
  CHECK(again != NULL);
  keel_heap_free(h, again);
  keel_heap_free(h, small);
  keel_heap_release(h);
  CHECK(keel_process_device_bytes() == 0);
}

/* ----------------------------------------------------------- kernels */

typedef struct dbuf {
  keel_block *b;
  float *host;
  size_t n;
} dbuf;

static dbuf up(keel_cuda_dev *d, keel_heap *h, const float *src, size_t n) {
  dbuf x = {dalloc(h, (n ? n : 1) * sizeof(float)), NULL, n};
  if (x.b && n) CHECK_OK(keel_cuda_to_device(d, x.b->ptr, src, n * sizeof(float)));
  return x;
}

static float *down(keel_cuda_dev *d, dbuf *x) {
  x->host = malloc((x->n ? x->n : 1) * sizeof(float));
  CHECK_OK(keel_cuda_to_host(d, x->host, x->b->ptr, x->n * sizeof(float)));
  CHECK_OK(keel_cuda_sync(d));
  return x->host;
}

static void drop(keel_heap *h, dbuf *x) {
  keel_heap_free(h, x->b);
  free(x->host);
}

static double ref_binary(int op, double a, double b) {
  switch (op) {
    case KEEL_DEV_ADD: return (float)a + (float)b;
    case KEEL_DEV_SUB: return (float)a - (float)b;
    case KEEL_DEV_MUL: return (float)a * (float)b;
    case KEEL_DEV_DIV: return (float)a / (float)b;
    case KEEL_DEV_MAX: return a > b ? a : b;
    case KEEL_DEV_MIN: return a < b ? a : b;
    default: return pow(a, b);
  }
}

static void binary_case(keel_cuda_dev *d, keel_heap *h, int op, int rank, const int64_t *yd,
                        const int64_t *ad, const int64_t *bd) {
  int64_t n = 1, na = 1, nb = 1;
  for (int i = 0; i < rank; i++) n *= yd[i], na *= ad[i], nb *= bd[i];
  float *a = malloc(sizeof(float) * (size_t)na), *b = malloc(sizeof(float) * (size_t)nb);
  bool positive = op == KEEL_DEV_POW || op == KEEL_DEV_DIV;
  for (int64_t i = 0; i < na; i++) a[i] = positive ? frand(0.1f, 3.0f) : frand(-3.0f, 3.0f);
  for (int64_t i = 0; i < nb; i++) b[i] = positive ? frand(0.5f, 2.5f) : frand(-3.0f, 3.0f);
  dbuf da = up(d, h, a, (size_t)na), db = up(d, h, b, (size_t)nb), dy = up(d, h, NULL, (size_t)n);
  CHECK_OK(keel_cuda_binary(d, (keel_cuda_binop)op, rank, yd, ad, (float *)da.b->ptr, bd, (float *)db.b->ptr,
                            (float *)dy.b->ptr));
  const float *y = down(d, &dy);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (int k = rank - 1; k >= 0; k--) {
      int64_t c = r % yd[k];
      r /= yd[k];
      if (ad[k] != 1) ia += c * sa;
      if (bd[k] != 1) ib += c * sb;
      sa *= ad[k], sb *= bd[k];
    }
    double want = ref_binary(op, a[ia], b[ib]);
    double err = fabs(y[i] - want) / (1e-6 + fabs(want));
    if (err > worst) worst = err;
  }
  double tol = op == KEEL_DEV_POW ? 1e-5 : 0;
  if (worst > tol) fprintf(stderr, "binary op %d rank %d: worst relative error %g\n", op, rank, worst);
  CHECK(worst <= tol);
  drop(h, &da), drop(h, &db), drop(h, &dy);
  free(a), free(b);
}

static void binary_ops(keel_cuda_dev *d, keel_heap *h) {
  for (int op = KEEL_DEV_ADD; op <= KEEL_DEV_POW; op++) {
    binary_case(d, h, op, 1, (int64_t[]){100003}, (int64_t[]){100003}, (int64_t[]){100003});
    binary_case(d, h, op, 2, (int64_t[]){257, 33}, (int64_t[]){257, 33}, (int64_t[]){1, 1});
    binary_case(d, h, op, 3, (int64_t[]){4, 65, 31}, (int64_t[]){4, 1, 31}, (int64_t[]){1, 65, 1});
    binary_case(d, h, op, 4, (int64_t[]){2, 3, 128, 5}, (int64_t[]){2, 3, 128, 5}, (int64_t[]){1, 3, 1, 5});
  }
  /* no elements: nothing launched, no error */
  CHECK_OK(keel_cuda_binary(d, KEEL_DEV_ADD, 2, (int64_t[]){0, 4}, (int64_t[]){0, 4}, NULL,
                            (int64_t[]){1, 4}, NULL, NULL));
  CHECK_STATUS(keel_cuda_binary(d, KEEL_DEV_ADD, 1, (int64_t[]){4}, (int64_t[]){3}, NULL, (int64_t[]){4}, NULL,
                                NULL),
               KEEL_ERR_SHAPE);
}

static double ref_unary(int op, double x) {
  switch (op) {
    case KEEL_DEV_RELU: return x > 0 ? x : 0;
    case KEEL_DEV_NEG: return -x;
    case KEEL_DEV_ABS: return fabs(x);
    case KEEL_DEV_SQRT: return sqrt(x);
    case KEEL_DEV_EXP: return exp(x);
    case KEEL_DEV_SIGMOID: return 1 / (1 + exp(-x));
    case KEEL_DEV_TANH: return tanh(x);
    default: return log(x);
  }
}

static void unary_ops(keel_cuda_dev *d, keel_heap *h) {
  enum { N = 200001 };
  float *x = malloc(sizeof(float) * N);
  for (int op = KEEL_DEV_RELU; op <= KEEL_DEV_LOG; op++) {
    bool positive = op == KEEL_DEV_SQRT || op == KEEL_DEV_LOG;
    for (int i = 0; i < N; i++) x[i] = positive ? frand(1e-3f, 50.0f) : frand(-20.0f, 20.0f);
    x[0] = 0.0f, x[1] = positive ? 1.0f : -0.0001f;
    dbuf dx = up(d, h, x, N), dy = up(d, h, NULL, N);
    CHECK_OK(keel_cuda_unary(d, (keel_cuda_unop)op, N, (float *)dx.b->ptr, (float *)dy.b->ptr));
    const float *y = down(d, &dy);
    double worst = 0;
    for (int i = 0; i < N; i++) {
      double want = ref_unary(op, x[i]);
      double err = fabs(y[i] - want) / (1e-6 + fabs(want));
      if (op == KEEL_DEV_LOG) err = fabs(y[i] - want) / (1e-6 + fmax(fabs(want), 1.0));
      if (err > worst) worst = err;
    }
    fprintf(stderr, "unary op %d: worst relative error %.2e\n", op, worst);
    CHECK(worst <= 1e-5);
    drop(h, &dx), drop(h, &dy);
  }
  free(x);
}

static void softmax(keel_cuda_dev *d, keel_heap *h) {
  static const int64_t shapes[][2] = {{1, 1}, {7, 33}, {300, 1000}, {3, 5000}, {1, 100000}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = frand(-30.0f, 30.0f);
    dbuf dx = up(d, h, x, (size_t)n), dy = up(d, h, NULL, (size_t)n);
    CHECK_OK(keel_cuda_softmax(d, rows, cols, (float *)dx.b->ptr, (float *)dy.b->ptr));
    const float *y = down(d, &dy);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < cols; c++) m = fmax(m, x[r * cols + c]);
      for (int64_t c = 0; c < cols; c++) sum += exp(x[r * cols + c] - m);
      for (int64_t c = 0; c < cols; c++) {
        double want = exp(x[r * cols + c] - m) / sum;
        worst = fmax(worst, fabs(y[r * cols + c] - want) / (1e-7 + want));
      }
    }
    if (worst > 1e-5) fprintf(stderr, "softmax %lldx%lld: worst relative error %g\n", (long long)rows,
                              (long long)cols, worst);
    CHECK(worst <= 1e-5);
    drop(h, &dx), drop(h, &dy);
    free(x);
  }
}

/* Printed, not asserted: what the driver costs against keel's cache. */
static void figures(keel_cuda_dev *d, keel_heap *h) {
  const keel_mem_provider *p = keel_cuda_provider(d);
  double t0 = now_us();
  for (int i = 0; i < 50; i++) p->pages_free(p->ctx, p->pages(p->ctx, 1 << 20), 1 << 20);
  double driver = (now_us() - t0) / 50;
  keel_block *warm = dalloc(h, 1 << 20);
  keel_heap_free(h, warm);
  t0 = now_us();
  for (int i = 0; i < 1000; i++) keel_heap_free(h, dalloc(h, 1 << 20));
  double cached = (now_us() - t0) / 1000;
  dbuf x = up(d, h, NULL, 1), y = up(d, h, NULL, 1);
  CHECK_OK(keel_cuda_sync(d));
  t0 = now_us();
  for (int i = 0; i < 1000; i++) (void)keel_cuda_unary(d, KEEL_DEV_NEG, 1, (float *)x.b->ptr, (float *)y.b->ptr);
  CHECK_OK(keel_cuda_sync(d));
  double launch = (now_us() - t0) / 1000;
  drop(h, &x), drop(h, &y);
  size_t n = 64u << 20;
  float *host = calloc(n / 4, 4);
  keel_block *b = dalloc(h, n);
  t0 = now_us();
  CHECK_OK(keel_cuda_to_device(d, b->ptr, host, n));
  CHECK_OK(keel_cuda_sync(d));
  double copy = now_us() - t0;
  keel_heap_free(h, b);
  free(host);
  fprintf(stderr, "figures: cuMemAlloc+cuMemFree of 1 MiB %.1f us, keel's cached alloc+free %.2f us; "
          "a launch %.2f us (1000 back to back); 64 MiB to the device (pageable) %.2f GB/s\n", driver,
          cached, launch, (double)n / copy / 1e3);
}

int main(void) {
  char why[512] = "";
  int n = keel_gpu_count(why, sizeof why);
  if (!n) {
    keel_cuda_dev *d = NULL;
    CHECK_STATUS(keel_cuda_open(0, &d), KEEL_ERR_UNSUPPORTED);
    CHECK(d == NULL && why[0] && (strstr(why, "GPU") || strstr(why, "libcuda")));
    fprintf(stderr, "no GPU here (%s): skipped\n", why);
    if (check_report()) return 1;
    return 77;
  }
  keel_cuda_dev *d = NULL;
  CHECK_OK(keel_cuda_open(0, &d));
  if (!d) return check_report();
  keel_cuda_info in = keel_cuda_dev_info(d);
  fprintf(stderr, "GPU 0 of %d: %s, compute capability %d.%d, %.1f GiB (%.1f free), driver %d\n", n, in.name,
          in.cc_major, in.cc_minor, (double)in.total_bytes / (1u << 30), (double)in.free_bytes / (1u << 30),
          in.driver_version);
  keel_cuda_dev *bad = NULL;
  CHECK_STATUS(keel_cuda_open(n, &bad), KEEL_ERR_INVALID_ARG);
  allocator_on_device(d);
  cap_on_device(d);
  keel_heap *h = keel_heap_create_on(0, keel_cuda_provider(d));
  binary_ops(d, h);
  unary_ops(d, h);
  softmax(d, h);
  figures(d, h);
  CHECK(keel_heap_allocated(h) == 0);
  keel_heap_release(h);
  keel_cuda_close(d);
  return check_report();
}
