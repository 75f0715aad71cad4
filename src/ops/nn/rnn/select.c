/* select.c: which implementation runs a recurrence, and how it uses the
 * pool (select.h). */
#include "ops/nn/rnn/select.h"

/* RNN, GRU, LSTM: the packed weights where W and R are float constants
 * (every exported model); else the reference path. A node placed on a
 * GPU runs rnn_gpu.c's (binding offers it GPU implementations only). */
const keel_impl *const keel_rnn_impls[] = {&keel_rnn_packed, &keel_gpu_rnn, NULL};

/* A step is cut by units (multiples of 16) on packed RNN and LSTM weights
 * when its product is big enough (32K multiply-adds) to pay for waking the
 * pool: one part per split, at most one per 16 units. GRU waits on r ⊙ H
 * between its two products and stays serial. */
int keel_rnn_step_parts(const keel_rnn_facts *f, int splits) {
  if (!f->packed || f->gru || splits < 2 || f->hid % 16 || f->hid < 32) return 1;
  if (f->batch * f->gates * f->hid * f->hid < 32768) return 1;
  return (int)KEEL_MIN((int64_t)splits, f->hid / 16);
}

/* Both directions of a bidirectional node at once, one per thread, each
 * with its own work buffers and serial steps: a step of a small cell (the
 * CRNN's LSTM, 96 units: 37K multiply-adds) is shorter than a wake-up of
 * the pool, so splitting each step made the node slower at 2 threads than
 * at 1 (0.65 ms against 0.34; at once: 0.22). Larger cells (over 2^19
 * multiply-adds a step) keep the split steps, which use every thread. On
 * packed float weights only: the reference runs one direction after the
 * other. */
bool keel_rnn_dirs_parallel(const keel_rnn_facts *f, int splits) {
  return f->packed && f->dirs == 2 && splits >= 2 && f->is_float &&
         f->batch * f->gates * f->hid * f->hid <= ((int64_t)1 << 19);
}
