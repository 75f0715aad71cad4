/* rnn_fast.h: the prepared state of the recurrent ops (rnn_fast.c) and the
 * product on it, read by rnn.c's driver. */
#ifndef KEEL_RNN_FAST_H
#define KEEL_RNN_FAST_H

#include <stdatomic.h>

#include "kernel.h"

/* Columns per panel of the packed weights. */
#define KEEL_RNN_NP 128

/* Built at bind from the constant W and R, gh = gates * hid: per direction
 * d and part q (GRU: the z and r columns, then the h columns; others: all
 * gh), the part's columns of Wᵀ (in rows) and Rᵀ (hid rows) in panels of
 * KEEL_RNN_NP columns (keel_rnn_gemm_panels' B). */
typedef struct keel_rnn_prep {
  int64_t dirs, gh, in, hid;
  int nparts;
  int64_t part_col[2], part_n[2];  /* first column and count of part q      */
  const float *w[2][2], *r[2][2];  /* [d][q]                               */
} keel_rnn_prep;

/* C (M x N, ldc) = A (M x K, lda) · B, plus C when acc; B holds N columns
 * of K rows as panels (rnn_fast.c). */
KEEL_INTERNAL void keel_rnn_gemm_panels(int64_t M, int64_t N, int64_t K, const float *A,
                                        int64_t lda, const float *B, bool acc, float *C,
                                        int64_t ldc);

/* Panels of the columns [j0, j0 + n) of Bᵀ, B = src (gate columns by K,
 * row-major), into dst of keel_rnn_panel_floats(n, K) floats. */
/* Columns [j0, j0 + n) of the same product (j0 a multiple of 16) into
 * those columns of C, acc false: a part of the gate columns, for the
 * parallel steps of rnn.c. B must be the start of a packed array of
 * rf_prepare's block (it may read up to KEEL_RNN_NP floats past its end). */
KEEL_INTERNAL void keel_rnn_gemm_cols(int64_t M, int64_t j0, int64_t n, int64_t K, const float *A,
                                      int64_t lda, const float *B, float *C, int64_t ldc);

/* True when the product runs its AVX-512 kernel on this CPU. */
KEEL_INTERNAL bool keel_rnn_gemm_avx512(void);

KEEL_INTERNAL void keel_rnn_pack_panels(const float *src, int64_t K, int64_t j0, int64_t n,
                                        float *dst);
KEEL_INTERNAL int64_t keel_rnn_panel_floats(int64_t n, int64_t K);
/* For tests: the product by variant v (0 plain C, 1 AVX2+FMA, 2 AVX-512);
 * false when this CPU lacks it. */
KEEL_INTERNAL bool keel_rnn_gemm_variant(int v, int64_t M, int64_t N, int64_t K, const float *A,
                                         int64_t lda, const float *B, bool acc, float *C,
                                         int64_t ldc);

/* The implementation list of the RNN, GRU and LSTM rows. */
extern const keel_impl *const keel_rnn_impls[];

#endif /* KEEL_RNN_FAST_H */
