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
/* Sums k float buffers over the ranks in place: each buffer's reduction is
 * started (non-blocking) in the order given, then all are awaited. */
KEEL_INTERNAL keel_status keel_dp_sum_f32(const void *comm, float *const *bufs, const int64_t *n, int k);

/* Rank r's counts[r] floats at buf + displs[r] to every rank (in place:
 * each rank has written its own part). */
KEEL_INTERNAL keel_status keel_dp_allgather_f32(const void *comm, float *buf, const int64_t *counts,
                                                const int64_t *displs, int size);

#endif /* KEEL_DIST_DP_H */
