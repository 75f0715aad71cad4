/* keel_dist.h: running one model across processes over MPI (model
 * parallelism). Needs nothing from MPI at compile time: a program that never
 * loads a model with collectives never touches MPI.
 *
 * A model holding the com.microsoft collectives (AllReduce, AllGather,
 * AllToAll) runs one process per rank. At session creation keel initializes
 * MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless the program already
 * did, and binds the session to a communicator: keel_options.comm (an
 * `MPI_Comm *`, read at session creation and used for the session's life),
 * or MPI_COMM_WORLD when NULL. keel sets MPI_ERRORS_RETURN on it, so a
 * failed transfer comes back as a keel_status naming the rank.
 *
 * Every rank must run its session in the same order (collectives match by
 * order); a session with collectives is run by one thread at a time.
 * Before each collective the ranks agree on the element type and shape
 * (one small MPI_Allreduce): a mismatch is an error on every rank, never a
 * hang or a silent truncation.
 *
 * In a build without MPI (cmake -DKEEL_MPI=OFF) these functions exist,
 * keel_dist_available() is 0, keel_dist_init() returns KEEL_ERR_UNSUPPORTED
 * and models with collectives fail to load with KEEL_ERR_UNSUPPORTED. */
#ifndef KEEL_DIST_H
#define KEEL_DIST_H

#include "keel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when keel was built with MPI. */
KEEL_API int keel_dist_available(void);
/* 1 when this process was started by an MPI launcher (mpirun, mpiexec:
 * Open MPI, MPICH/Hydra or PMIx environment variables). */
KEEL_API int keel_dist_launched(void);
/* Initializes MPI now (no-op when it already is). */
KEEL_API keel_status keel_dist_init(void);
/* This process's rank in MPI_COMM_WORLD and the world's size; 0 and 1
 * when MPI is not initialized (or keel was built without it). */
KEEL_API int keel_dist_rank(void);
KEEL_API int keel_dist_size(void);
/* Finalizes MPI if keel initialized it (call after the last session with
 * collectives is destroyed; otherwise keel does it at exit); a no-op when
 * the program initialized MPI itself. */
KEEL_API keel_status keel_dist_finalize(void);
/* Collects a text from every rank of MPI_COMM_WORLD on rank 0, in rank
 * order, each part headed "rank R:\n" (for per-rank reports: only rank 0's
 * standard output is shown under mpirun). Every rank must call it. Rank 0
 * gets *all (free with keel_free); the others get NULL. Without MPI (or
 * one rank), *all is a copy of `mine` under "rank 0:". */
KEEL_API keel_status keel_dist_gather_text(const char *mine, char **all);
/* Ends every rank of the job (MPI_Abort on MPI_COMM_WORLD) with `code`: for
 * a rank that failed while its peers may wait in a collective. Returns only
 * when MPI is not initialized. */
KEEL_API void keel_dist_abort(int code);

#ifdef __cplusplus
}
#endif
#endif /* KEEL_DIST_H */
