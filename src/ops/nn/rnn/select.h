/* select.h: which implementation runs a recurrence (RNN, GRU, LSTM), and
 * how it uses the pool (select.c).
 *
 *  1. Binding (exec/session.c, once per node) takes the first
 *     implementation of keel_rnn_impls whose supports() accepts the node:
 *     "packed" (rnn_fast.c) where W and R are float constants; none: the
 *     reference path of rnn.c's driver (keel's GEMM, libm's tanh).
 *  2. Each run on packed weights splits the work one of two ways:
 *     keel_rnn_dirs_parallel (a bidirectional node's two directions at
 *     once, one per thread), else keel_rnn_step_parts (each step's product
 *     and gate math cut by units).
 *
 * Both are decided for the pool's splits (keel_pool_splits), so
 * KEEL_OPT_DETERMINISTIC gives the same bits at any thread count.
 */
#ifndef KEEL_RNN_SELECT_H
#define KEEL_RNN_SELECT_H

#include "ops/kernel.h"

/* The implementation list of the RNN, GRU and LSTM rows. */
/* LSTM and GRU on a device (rnn_gpu.c) */
extern const keel_impl keel_gpu_rnn;
extern const keel_impl *const keel_rnn_impls[];
extern const keel_impl keel_rnn_packed; /* rnn_fast.c */

/* What a run knows. */
typedef struct keel_rnn_facts {
  bool packed;                 /* the node runs on "packed" weights        */
  bool gru, is_float;          /* the op is GRU; the data is float32       */
  int64_t dirs, batch, gates, hid;
} keel_rnn_facts;

/* Parts each step is cut into (1: serial steps). */
KEEL_INTERNAL int keel_rnn_step_parts(const keel_rnn_facts *f, int splits);

/* Whether the two directions run at once, each with serial steps. */
KEEL_INTERNAL bool keel_rnn_dirs_parallel(const keel_rnn_facts *f, int splits);

#endif /* KEEL_RNN_SELECT_H */
