/* panel_gemm.h: keel's product for small M on a B packed in panels,
 * for the hot loops where a general GEMM's per-call packing and dispatch
 * cost more than the arithmetic: a recurrence's steps (rnn_fast.c, rnn.c;
 * a batch of one is bound by reading its weights from L2 every step) and
 * the blocks of the attention core (ops/nn/attention/attention.c).
 *
 * B (K x N) is stored as panels of KEEL_PANEL_NP columns: panel q holds
 * columns q*NP .. q*NP+NP-1 as K rows of NP floats (the last one
 * zero-padded), so a tile walks its panel front to back: one broadcast of
 * an element of A and a run of vector multiply-adds over the panel's
 * columns. Tiles: 4 rows x 64 columns, or one row x a whole panel (eight
 * chains); AVX-512 or AVX2+FMA intrinsics, else plain C, chosen at run
 * time. The AVX-512 tiles read whole vectors past the columns they store:
 * up to NP floats past a panel's end, which callers leave allocated.
 */
#ifndef KEEL_PANEL_GEMM_H
#define KEEL_PANEL_GEMM_H

#include "base/common.h"

/* Columns per panel. */
#define KEEL_PANEL_NP 128

/* Picks the variant for this CPU (done by the first product otherwise). */
KEEL_INTERNAL void keel_panel_gemm_init(void);

/* C (M x N, ldc) = A (M x K, lda) · B, plus C when acc. */
KEEL_INTERNAL void keel_panel_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                   const float *B, bool acc, float *C, int64_t ldc);

/* Columns [j0, j0 + n) of the same product (j0 a multiple of 16) into
 * those columns of C, acc false (rnn.c's parallel steps: a part of the
 * gate columns each). */
KEEL_INTERNAL void keel_panel_gemm_cols(int64_t M, int64_t j0, int64_t n, int64_t K,
                                        const float *A, int64_t lda, const float *B, float *C,
                                        int64_t ldc);

/* True when the product runs its AVX-512 kernel on this CPU. */
KEEL_INTERNAL bool keel_panel_gemm_avx512(void);

/* Panels of the columns [j0, j0 + n) of B, given as Bᵀ = src (rows of K
 * floats), into dst of keel_panel_floats(n, K) floats. */
KEEL_INTERNAL void keel_panel_pack(const float *src, int64_t K, int64_t j0, int64_t n, float *dst);
KEEL_INTERNAL int64_t keel_panel_floats(int64_t n, int64_t K);

/* For tests: the product by variant v (0 plain C, 1 AVX2+FMA, 2 AVX-512);
 * false when this CPU lacks it. */
KEEL_INTERNAL bool keel_panel_gemm_variant(int v, int64_t M, int64_t N, int64_t K, const float *A,
                                           int64_t lda, const float *B, bool acc, float *C,
                                           int64_t ldc);

#endif /* KEEL_PANEL_GEMM_H */
