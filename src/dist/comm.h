/* comm.h: keel's MPI layer (src/dist): lazy initialization, the
 * communicator a session runs on, MPI errors as keel_status. Only this
 * room includes mpi.h; a build without MPI (no KEEL_HAVE_MPI) compiles the
 * same functions as "unsupported". */
#ifndef KEEL_DIST_COMM_H
#define KEEL_DIST_COMM_H

#include "base/status.h"
#include "ir/ir.h"

/* True when the node runs one of the collectives (collective.c). */
KEEL_INTERNAL bool keel_dist_is_collective(const keel_node *n);

/* At session creation, after binding: when the model holds a collective,
 * initializes MPI (if needed) and readies the session's communicator
 * (MPI_ERRORS_RETURN). Without MPI: KEEL_ERR_UNSUPPORTED naming the first
 * collective node. No-op for models without collectives. */
KEEL_INTERNAL keel_status keel_dist_bind(const keel_model *m, const void *comm);

/* The error for a collective in a build without MPI. */
KEEL_INTERNAL keel_status keel_dist_no_mpi(const keel_node *n);

#ifdef KEEL_HAVE_MPI
#include <mpi.h>

/* A session's communicator: *comm (keel_options.comm, a const MPI_Comm *)
 * or, when NULL, MPI_COMM_WORLD. */
KEEL_INTERNAL MPI_Comm keel_dist_comm(const void *comm);
/* rc from an MPI call as a keel_status: KEEL_OK, or an error naming the
 * call, this rank and the communicator size, and MPI's own message. */
KEEL_INTERNAL keel_status keel_dist_check(int rc, MPI_Comm c, const char *call);
/* Every MPI call keel makes is under this lock (MPI_THREAD_SERIALIZED). */
KEEL_INTERNAL void keel_dist_lock(void);
KEEL_INTERNAL void keel_dist_unlock(void);
/* Frees the float16 / bfloat16 sum ops (collective.c); before MPI_Finalize,
 * under the lock. */
KEEL_INTERNAL void keel_dist_free_ops(void);
#endif

#endif /* KEEL_DIST_COMM_H */
