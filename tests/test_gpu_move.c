/* test_gpu_move.c: the `move` kernel group (device/dev_move.h) on a GPU
 * (kernels/move.cu through cuda_move.c) against its naive reference on
 * the emulated device (emu_move.c): the same inputs on both, the outputs
 * must be the same bytes (no arithmetic but Cast's conversions, which are
 * exact for the values used). ctest label `gpu`; without a GPU it says so
 * and exits 77 (skipped).
 *
 * Cases: strided copies of 1-, 2-, 4- and 8-byte elements (every
 * permutation of a rank-4 transpose, a broadcast read with stride 0, a
 * write into a slab of a larger output as Concat does, negative strides
 * as Slice's backward steps make); Gather with int64 and int32 indices,
 * negative and out-of-range ones (zeros), rows of 1 and of 37 elements;
 * Where with a broadcast condition; Cast float32 <-> int64, int32, bool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device/cuda.h"
#include "device/dev_move.h"
#include "device/device.h"
#include "mem/alloc.h"

typedef struct side {
  keel_device *d;
  keel_heap *h;
} side;

static side g_side[2]; /* 0: the GPU, 1: the emulated device */

static unsigned g_seed = 777;
static uint32_t rnd(void) {
  g_seed = g_seed * 1103515245u + 12345u;
  return g_seed >> 8;
}

/* n bytes on side s, filled from src (or left as they are). */
static keel_block *put(int s, const void *src, size_t n) {
  keel_block *b = keel_heap_alloc(g_side[s].h, n ? n : 1, (keel_owner){0, 0});
  CHECK(b != NULL);
  if (b && src && n) CHECK_OK(keel_device_to_device(g_side[s].d, b->ptr, src, n));
  return b;
}
static void get(int s, void *dst, keel_block *b, size_t n) {
  if (n) CHECK_OK(keel_device_to_host(g_side[s].d, dst, b->ptr, n));
}

/* Both outputs (n bytes) the same; says which case when not. */
static void same(const char *what, keel_block *const *y, size_t n) {
  unsigned char *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
  memset(a, 0xA5, n), memset(b, 0x5A, n);
  get(0, a, y[0], n), get(1, b, y[1], n);
  bool ok = !memcmp(a, b, n);
  if (!ok) fprintf(stderr, "  %s: the GPU's output differs from the reference\n", what);
  CHECK(ok);
  free(a), free(b);
}

static void copies(void) {
  static const size_t sizes[] = {1, 2, 4, 8};
  int64_t dims[4] = {3, 5, 4, 7}, n = 3 * 5 * 4 * 7;
  for (int e = 0; e < 4; e++) {
    size_t es = sizes[e];
    unsigned char *src = malloc((size_t)n * es);
    for (int64_t i = 0; i < n * (int64_t)es; i++) src[i] = (unsigned char)rnd();
    keel_block *x[2], *y[2];
    for (int s = 0; s < 2; s++) x[s] = put(s, src, (size_t)n * es), y[s] = put(s, NULL, (size_t)n * 2 * es);
    /* every permutation of the 4 axes: y dense in permuted order */
    int perm[4] = {0, 1, 2, 3}, count = 0;
    for (int p = 0; p < 24; p++) {
      int rest[4] = {0, 1, 2, 3}, k = p;
      for (int i = 0; i < 4; i++) { /* p-th permutation (factorial numbering) */
        int f = 1;
        for (int j = 1; j < 4 - i; j++) f *= j;
        int at = k / f;
        k %= f;
        perm[i] = rest[at];
        for (int j = at; j < 3 - i; j++) rest[j] = rest[j + 1];
      }
      int64_t xs[4] = {140, 28, 7, 1}, pd[4], ps[4], ys[4];
      for (int i = 0; i < 4; i++) pd[i] = dims[perm[i]], ps[i] = xs[perm[i]];
      ys[3] = 1;
      for (int i = 2; i >= 0; i--) ys[i] = ys[i + 1] * pd[i + 1];
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_side[s].d->move->copy(g_side[s].d, es, 4, pd, x[s]->ptr, ps, y[s]->ptr, ys));
      char what[64];
      snprintf(what, sizeof what, "transpose %d%d%d%d of %zu-byte elements", perm[0], perm[1], perm[2], perm[3], es);
      same(what, y, (size_t)n * es);
      count++;
    }
    CHECK(count == 24);
    /* a broadcast read: x's first 5 elements along axis 1, stride 0 elsewhere */
    int64_t bd[3] = {4, 5, 6}, bxs[3] = {0, 1, 0}, bys[3] = {30, 6, 1};
    for (int s = 0; s < 2; s++)
      CHECK_OK(g_side[s].d->move->copy(g_side[s].d, es, 3, bd, x[s]->ptr, bxs, y[s]->ptr, bys));
    same("broadcast", y, 120 * es);
    /* Concat's slab: x [3,5] into columns 2..6 of a [3,9] output, then
     * Slice's backward steps: x read from its end with stride -2 */
    int64_t cd[2] = {3, 5}, cxs[2] = {5, 1}, cys[2] = {9, 1};
    for (int s = 0; s < 2; s++) {
      CHECK_OK(g_side[s].d->move->copy(g_side[s].d, es, 2, cd, x[s]->ptr, cxs, y[s]->ptr + 2 * es, cys));
      int64_t sd[1] = {20}, sxs[1] = {-2}, sys_[1] = {1};
      CHECK_OK(g_side[s].d->move->copy(g_side[s].d, es, 1, sd, x[s]->ptr + (size_t)(n - 1) * es, sxs,
                                        y[s]->ptr + 40 * es, sys_));
    }
    same("concat slab and backward slice", y, 80 * es);
    for (int s = 0; s < 2; s++) keel_heap_free(g_side[s].h, x[s]), keel_heap_free(g_side[s].h, y[s]);
    free(src);
  }
}

static void gathers(void) {
  static const int64_t inners[] = {1, 37};
  for (int w = 0; w < 2; w++)
    for (int i64 = 0; i64 < 2; i64++) {
      int64_t outer = 3, axis_n = 10, inner = inners[w], n_idx = 9;
      int64_t idx64[9] = {0, 9, -1, -10, 5, 10, -11, 3, 3};
      int32_t idx32[9];
      for (int i = 0; i < 9; i++) idx32[i] = (int32_t)idx64[i];
      size_t xn = (size_t)(outer * axis_n * inner), yn = (size_t)(outer * n_idx * inner);
      float *src = malloc(xn * sizeof(float));
      for (size_t i = 0; i < xn; i++) src[i] = (float)i * 0.5f - 3.0f;
      keel_block *x[2], *ix[2], *y[2];
      for (int s = 0; s < 2; s++) {
        x[s] = put(s, src, xn * sizeof(float));
        ix[s] = i64 ? put(s, idx64, sizeof idx64) : put(s, idx32, sizeof idx32);
        y[s] = put(s, NULL, yn * sizeof(float));
        CHECK_OK(g_side[s].d->move->gather(g_side[s].d, sizeof(float), outer, axis_n, inner, x[s]->ptr,
                                           ix[s]->ptr, i64, n_idx, y[s]->ptr));
      }
      same(i64 ? "gather int64" : "gather int32", y, yn * sizeof(float));
      for (int s = 0; s < 2; s++)
        keel_heap_free(g_side[s].h, x[s]), keel_heap_free(g_side[s].h, ix[s]), keel_heap_free(g_side[s].h, y[s]);
      free(src);
    }
}

static void wheres(void) {
  int64_t dims[3] = {2, 3, 4}, cs[3] = {0, 1, 0}, as[3] = {12, 4, 1}, bs[3] = {0, 0, 1};
  uint8_t c[3] = {1, 0, 1};
  float a[24], b[4] = {-1, -2, -3, -4};
  for (int i = 0; i < 24; i++) a[i] = (float)i;
  keel_block *cb[2], *ab[2], *bb[2], *y[2];
  for (int s = 0; s < 2; s++) {
    cb[s] = put(s, c, sizeof c), ab[s] = put(s, a, sizeof a), bb[s] = put(s, b, sizeof b);
    y[s] = put(s, NULL, sizeof a);
    CHECK_OK(g_side[s].d->move->where(g_side[s].d, 3, dims, (const uint8_t *)cb[s]->ptr, cs,
                                      (const float *)ab[s]->ptr, as, (const float *)bb[s]->ptr, bs,
                                      (float *)y[s]->ptr));
  }
  same("where", y, sizeof a);
  for (int s = 0; s < 2; s++)
    keel_heap_free(g_side[s].h, cb[s]), keel_heap_free(g_side[s].h, ab[s]), keel_heap_free(g_side[s].h, bb[s]),
        keel_heap_free(g_side[s].h, y[s]);
}

static void casts(void) {
  enum { N = 64 };
  float f[N];
  int64_t l[N];
  int32_t i4[N];
  uint8_t bo[N];
  for (int i = 0; i < N; i++) {
    f[i] = (float)((int)(rnd() % 20001) - 10000) / 7.0f; /* fractions of both signs */
    if (i % 9 == 0) f[i] = 0.0f;
    l[i] = (int64_t)(rnd() % 2000001) - 1000000;
    i4[i] = (int32_t)(rnd() % 20001) - 10000;
    bo[i] = (uint8_t)(rnd() % 2);
  }
  static const int types[] = {KEEL_INT64, KEEL_INT32, KEEL_BOOL};
  const void *srcs[] = {l, i4, bo};
  const size_t es[] = {8, 4, 1};
  for (int t = 0; t < 3; t++) {
    keel_block *x[2], *y[2];
    for (int s = 0; s < 2; s++) { /* float32 -> type */
      x[s] = put(s, f, sizeof f), y[s] = put(s, NULL, N * es[t]);
      CHECK_OK(g_side[s].d->move->cast(g_side[s].d, KEEL_FLOAT, types[t], N, x[s]->ptr, y[s]->ptr));
    }
    same("cast from float32", y, N * es[t]);
    for (int s = 0; s < 2; s++) { /* type -> float32 */
      keel_heap_free(g_side[s].h, x[s]), keel_heap_free(g_side[s].h, y[s]);
      x[s] = put(s, srcs[t], N * es[t]), y[s] = put(s, NULL, sizeof f);
      CHECK_OK(g_side[s].d->move->cast(g_side[s].d, types[t], KEEL_FLOAT, N, x[s]->ptr, y[s]->ptr));
    }
    same("cast to float32", y, sizeof f);
    for (int s = 0; s < 2; s++) keel_heap_free(g_side[s].h, x[s]), keel_heap_free(g_side[s].h, y[s]);
  }
}

int main(void) {
  if (!keel_cuda_count()) {
    fprintf(stderr, "no GPU here (%s): skipped\n", keel_last_error());
    if (check_report()) return 1;
    return 77;
  }
  CHECK_OK(keel_device_open(KEEL_DEVICE_CUDA, 0, &g_side[0].d));
  CHECK_OK(keel_device_open(KEEL_DEVICE_EMU, 0, &g_side[1].d));
  if (!g_side[0].d || !g_side[1].d) return check_report();
  for (int s = 0; s < 2; s++) {
    g_side[s].h = keel_heap_create_on(0, keel_device_provider(g_side[s].d));
    CHECK(g_side[s].h && g_side[s].d->move);
  }
  copies();
  gathers();
  wheres();
  casts();
  for (int s = 0; s < 2; s++) {
    CHECK_OK(keel_device_sync(g_side[s].d));
    CHECK(keel_heap_allocated(g_side[s].h) == 0);
    keel_heap_release(g_side[s].h);
    keel_device_close(g_side[s].d);
  }
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
