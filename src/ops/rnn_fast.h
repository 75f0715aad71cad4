/* rnn_fast.h: the prepared state of the recurrent ops (rnn_fast.c) and the
 * product on it, read by rnn.c's driver. */
#ifndef KEEL_RNN_FAST_H
#define KEEL_RNN_FAST_H

#include <stdatomic.h>

#include "kernel.h"

/* Built at bind from the constant W and R: per direction, Wᵀ (in, gh) and
 * Rᵀ (hid, gh), gh = gates * hid. */
typedef struct keel_rnn_prep {
  int64_t dirs, gh, in, hid;
  const float *wt;             /* (dirs, in, gh)                          */
  const float *rt;             /* (dirs, hid, gh)                         */
} keel_rnn_prep;

/* C (M x N, ldc) = A (M x K, lda) · B (K x N, ldb), plus C when acc. */
KEEL_INTERNAL void keel_rnn_gemm_packed(int64_t M, int64_t N, int64_t K, const float *A,
                                        int64_t lda, const float *B, int64_t ldb, bool acc,
                                        float *C, int64_t ldc);

/* The implementation list of the RNN, GRU and LSTM rows. */
extern const keel_impl *const keel_rnn_impls[];

#endif /* KEEL_RNN_FAST_H */
