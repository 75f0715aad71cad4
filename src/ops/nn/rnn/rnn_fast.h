/* rnn_fast.h: the prepared state of the recurrent ops (rnn_fast.c) and the
 * product on it, read by rnn.c's driver. */
#ifndef KEEL_RNN_FAST_H
#define KEEL_RNN_FAST_H

#include "ops/kernel.h"
#include "ops/common/panel_gemm.h"

/* Built at bind from the constant W and R, gh = gates * hid: per direction
 * d and part q (GRU: the z and r columns, then the h columns; others: all
 * gh), the part's columns of Wᵀ (in rows) and Rᵀ (hid rows) in panels of
 * KEEL_PANEL_NP columns (keel_panel_gemm's B). */
typedef struct keel_rnn_prep {
  int64_t dirs, gh, in, hid;
  int nparts;
  int64_t part_col[2], part_n[2];  /* first column and count of part q      */
  const float *w[2][2], *r[2][2];  /* [d][q]                               */
} keel_rnn_prep;

#endif /* KEEL_RNN_FAST_H */
