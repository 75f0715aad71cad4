/* emu_blas.c: the blas group (dev_blas.h) on the emulated device: the
 * naive reference the cuBLAS path is tested against. Triple loops, each
 * sum accumulated in double and rounded once to float, so the result is
 * the exact product to within one rounding (for sums that do not cancel):
 * closer than any float accumulation, which is what cuBLAS and OpenBLAS
 * do. Reads and writes go through keel_emu_host. */
#include "base/status.h"
#include "device/dev_blas.h"
#include "device/emu.h"

static keel_status emu_sgemm(keel_device *d, const keel_dev_gemm *g, const float *a, const float *b,
                             float *c) {
  (void)d;
  if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 1 || (g->batch > 1 && !g->sc))
    return keel_err(KEEL_ERR_INTERNAL, "emu sgemm: M %lld, N %lld, K %lld, batch %lld, C's stride %lld",
                    (long long)g->M, (long long)g->N, (long long)g->K, (long long)g->batch,
                    (long long)g->sc);
  const float *ha = keel_emu_host(a), *hb = keel_emu_host(b);
  float *hc = keel_emu_host(c);
  for (int64_t i = 0; i < g->batch; i++) {
    const float *A = ha + i * g->sa, *B = hb + i * g->sb;
    float *C = hc + i * g->sc;
    for (int64_t m = 0; m < g->M; m++)
      for (int64_t n = 0; n < g->N; n++) {
        double acc = 0.0;
        for (int64_t k = 0; k < g->K; k++) {
          float av = g->ta ? A[k * g->lda + m] : A[m * g->lda + k];
          float bv = g->tb ? B[n * g->ldb + k] : B[k * g->ldb + n];
          acc += (double)av * (double)bv;
        }
        float *y = &C[m * g->ldc + n];
        double v = (double)g->alpha * acc;
        if (g->beta != 0.0f) v += (double)g->beta * (double)*y; /* beta 0 never reads C */
        *y = (float)v;
      }
  }
  return KEEL_OK;
}

static keel_status emu_fill_2d(keel_device *d, int64_t M, int64_t N, const float *src, int64_t s0,
                               int64_t s1, float *y) {
  (void)d;
  const float *hs = keel_emu_host(src);
  float *hy = keel_emu_host(y);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) hy[m * N + n] = hs[m * s0 + n * s1];
  return KEEL_OK;
}

/* The emulated library takes a small workspace, as cuBLAS takes one, so
 * that the session's part (a block of the device heap, tagged, freed
 * before the device closes) runs where there is no GPU; it only keeps the
 * pointer (d->blas_state), its products need no scratch. */
static keel_status emu_set_workspace(keel_device *d, void *p, size_t bytes) {
  (void)bytes;
  d->blas_state = p;
  return KEEL_OK;
}

/* the workspace is the session's: nothing to free here */
static void emu_close(keel_device *d) { d->blas_state = NULL; }

const keel_dev_blas keel_emu_blas = {"emu (naive, double accumulation)", emu_sgemm, emu_fill_2d, emu_close,
                                     (size_t)64 << 10, emu_set_workspace};
