/* gemv.h: keel's product of a few rows by a constant matrix read as the
 * file stores it, for the products bound by reading their weights once:
 * a classifier's Gemm on one image, the 1x1 convs of a squeeze-excite
 * block on a 1x1 map. A library's GEMM packs B for reuse that one row
 * never has, and splits it over threads in as many parts as threads, so
 * a worker that wakes late leaves its whole part to the caller; here the
 * columns go to the pool in small chunks (about 32 KB of weights each),
 * taken by whichever thread is free.
 *
 *   Y[r, n] = act(sum_k A[r, k] B(k, n) + bias[n] + Z[r, n])   r < R
 *
 * B(k, n) is W[n * K + k] (W as N rows of K: a Gemm's transB = 1, a 1x1
 * conv's [M, C, 1, 1]) or W[k * N + n] (B as K rows of N). Each chunk of
 * columns reads its weights once for up to 4 rows of A (more rows go 4
 * at a time). The AVX-512 kernel sums in a different order than the plain
 * C one, so results differ in the last bits between CPUs.
 */
#ifndef KEEL_GEMV_H
#define KEEL_GEMV_H

#include "base/pool.h"
#include "ops/common/activation.h"

typedef struct keel_gemv_args {
  int64_t R, K, N;
  const float *a;              /* R rows of K, row stride lda             */
  int64_t lda;
  const float *w;              /* N x K (rows) or K x N (!rows)           */
  bool rows;
  const float *bias;           /* N values, or NULL                       */
  const float *z;              /* R x N (row stride ldy), or NULL; may be y */
  float *y;                    /* R x N, row stride ldy                   */
  int64_t ldy;
  const keel_act *act;         /* NULL: none                              */
} keel_gemv_args;

/* True when this CPU runs the vector kernel (AVX-512F): elsewhere callers
 * keep their library path. */
KEEL_INTERNAL bool keel_gemv_fast(void);

/* The product on the pool (NULL: this thread); errors only from the
 * pool. */
KEEL_INTERNAL keel_status keel_gemv(keel_pool *pool, const keel_gemv_args *g);

/* For tests: the product on this thread by the plain C kernel (v 0) or
 * the AVX-512 one (v 1); false when this CPU lacks it. */
KEEL_INTERNAL bool keel_gemv_variant(int v, const keel_gemv_args *g);

#endif /* KEEL_GEMV_H */
