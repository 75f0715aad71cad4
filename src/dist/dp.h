/* dp.h: what data-parallel training asks of MPI (dp.c): the world of a
 * communicator, agreement on a value, a broadcast, an element-wise maximum
 * of small int vectors (status and flags), and the sum of gradient buckets.
 * No MPI type crosses this header: the trainer's room stays free of mpi.h.
 * `comm` is a const MPI_Comm * (keel_train_options.comm) or NULL for
 * MPI_COMM_WORLD. Every call is collective: each rank of the communicator
 * makes it, in the same order. Built without MPI, each returns
 * KEEL_ERR_UNSUPPORTED. */
#ifndef KEEL_DIST_DP_H
#define KEEL_DIST_DP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Initializes MPI if needed, sets MPI_ERRORS_RETURN on the communicator,
 * and gives this process's rank and the communicator's size. */
KEEL_INTERNAL keel_status keel_dp_world(const void *comm, int *rank, int *size);
/* KEEL_OK on every rank when every rank passed the same v; otherwise
 * KEEL_ERR_INVALID_ARG on every rank: "ranks disagree on <what>". */
KEEL_INTERNAL keel_status keel_dp_agree(const void *comm, uint64_t v, const char *what);
/* `bytes` bytes at data from rank `root` to every rank. */
KEEL_INTERNAL keel_status keel_dp_bcast(const void *comm, void *data, size_t bytes, int root);
/* v[i] = the maximum of v[i] over the ranks, in place. */
KEEL_INTERNAL keel_status keel_dp_max_i32(const void *comm, int32_t *v, int n);
/* Non-blocking sums: up to `cap` pending reductions (a buffer of more than
 * INT_MAX floats takes several). Every rank must start the same buffers'
 * sums in the same order. */
typedef struct keel_dp_reqs keel_dp_reqs;
KEEL_INTERNAL keel_status keel_dp_reqs_new(int cap, keel_dp_reqs **out);
KEEL_INTERNAL void keel_dp_reqs_free(keel_dp_reqs *q);
/* Starts the sum of n floats at buf over the ranks, in place. */
KEEL_INTERNAL keel_status keel_dp_sum_start(const void *comm, keel_dp_reqs *q, float *buf, int64_t n);
/* Lets MPI move the pending sums on (MPI_Testall). */
KEEL_INTERNAL void keel_dp_progress(keel_dp_reqs *q);
/* Waits for every pending sum; the set is empty afterwards. */
KEEL_INTERNAL keel_status keel_dp_wait(const void *comm, keel_dp_reqs *q);

/* Rank r's counts[r] floats at buf + displs[r] to every rank (in place:
 * each rank has written its own part). */
KEEL_INTERNAL keel_status keel_dp_allgather_f32(const void *comm, float *buf, const int64_t *counts,
                                                const int64_t *displs, int size);

#endif /* KEEL_DIST_DP_H */
