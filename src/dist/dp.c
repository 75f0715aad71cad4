/* dp.c: the MPI calls of data-parallel training (dp.h). Each call takes
 * keel's MPI lock (comm.c: MPI_THREAD_SERIALIZED) and turns MPI's error
 * codes into messages naming the rank. Counts above INT_MAX go in pieces. */
#include "dist/dp.h"

#include <limits.h>

#include "dist/comm.h"
#include "keel_dist.h"

#ifndef KEEL_HAVE_MPI

static keel_status no_mpi(const char *what) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "data-parallel training (%s): keel was built without MPI "
                  "(cmake -DKEEL_MPI=ON with libopenmpi-dev or libmpich-dev)", what);
}
keel_status keel_dp_world(const void *comm, int *rank, int *size) {
  (void)comm, (void)rank, (void)size;
  return no_mpi("world");
}
keel_status keel_dp_agree(const void *comm, uint64_t v, const char *what) {
  (void)comm, (void)v;
  return no_mpi(what);
}
keel_status keel_dp_bcast(const void *comm, void *data, size_t bytes, int root) {
  (void)comm, (void)data, (void)bytes, (void)root;
  return no_mpi("broadcast");
}
keel_status keel_dp_max_i32(const void *comm, int32_t *v, int n) {
  (void)comm, (void)v, (void)n;
  return no_mpi("status exchange");
}
keel_status keel_dp_reqs_new(int cap, keel_dp_reqs **out) {
  (void)cap, (void)out;
  return no_mpi("gradient sums");
}
void keel_dp_reqs_free(keel_dp_reqs *q) { (void)q; }
keel_status keel_dp_sum_start(const void *comm, keel_dp_reqs *q, float *buf, int64_t n) {
  (void)comm, (void)q, (void)buf, (void)n;
  return no_mpi("gradient sum");
}
void keel_dp_progress(keel_dp_reqs *q) { (void)q; }
keel_status keel_dp_wait(const void *comm, keel_dp_reqs *q) {
  (void)comm, (void)q;
  return no_mpi("gradient sum");
}

keel_status keel_dp_allgather_f32(const void *comm, float *buf, const int64_t *counts, const int64_t *displs,
                                  int size) {
  (void)comm, (void)buf, (void)counts, (void)displs, (void)size;
  return no_mpi("parameter gather");
}

#else

#include <stdlib.h>

keel_status keel_dp_world(const void *comm, int *rank, int *size) {
  KEEL_TRY(keel_dist_init());
  MPI_Comm c = keel_dist_comm(comm);
  if (c == MPI_COMM_NULL) return keel_err(KEEL_ERR_INVALID_ARG, "keel_train_options.comm points at MPI_COMM_NULL");
  keel_dist_lock();
  int rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c, rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c, size);
  keel_dist_unlock();
  return keel_dist_check(rc, c, "data-parallel setup (MPI_Comm_rank/size)");
}

/* max(v) and max(~v) over the ranks: all equal iff both are this rank's. */
keel_status keel_dp_agree(const void *comm, uint64_t v, const char *what) {
  MPI_Comm c = keel_dist_comm(comm);
  uint64_t mine[2] = {v, ~v}, all[2] = {0, 0};
  keel_dist_lock();
  int rc = MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_MAX, c);
  keel_dist_unlock();
  KEEL_TRY(keel_dist_check(rc, c, "MPI_Allreduce (agreement)"));
  if (all[0] == v && all[1] == ~v) return KEEL_OK;
  int rank = -1;
  keel_dist_lock();
  MPI_Comm_rank(c, &rank);
  keel_dist_unlock();
  return keel_err(KEEL_ERR_INVALID_ARG, "data-parallel: ranks disagree on %s (rank %d: %016llx, "
                  "the largest over the ranks: %016llx)", what, rank, (unsigned long long)v,
                  (unsigned long long)all[0]);
}

keel_status keel_dp_bcast(const void *comm, void *data, size_t bytes, int root) {
  MPI_Comm c = keel_dist_comm(comm);
  for (size_t off = 0; off < bytes;) {
    int n = (int)(bytes - off > (size_t)INT_MAX ? (size_t)INT_MAX : bytes - off);
    keel_dist_lock();
    int rc = MPI_Bcast((char *)data + off, n, MPI_BYTE, root, c);
    keel_dist_unlock();
    KEEL_TRY(keel_dist_check(rc, c, "MPI_Bcast (parameters)"));
    off += (size_t)n;
  }
  return KEEL_OK;
}

keel_status keel_dp_max_i32(const void *comm, int32_t *v, int n) {
  MPI_Comm c = keel_dist_comm(comm);
  keel_dist_lock();
  int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT32_T, MPI_MAX, c);
  keel_dist_unlock();
  return keel_dist_check(rc, c, "MPI_Allreduce (step status)");
}

struct keel_dp_reqs {
  int n, cap;
  MPI_Request *r;
};

keel_status keel_dp_reqs_new(int cap, keel_dp_reqs **out) {
  keel_dp_reqs *q = calloc(1, sizeof *q);
  if (q) q->r = calloc((size_t)cap + 1, sizeof(MPI_Request));
  if (!q || !q->r) {
    free(q);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel: gradient requests");
  }
  q->cap = cap;
  *out = q;
  return KEEL_OK;
}

void keel_dp_reqs_free(keel_dp_reqs *q) {
  if (!q) return;
  free(q->r);
  free(q);
}

keel_status keel_dp_sum_start(const void *comm, keel_dp_reqs *q, float *buf, int64_t n) {
  MPI_Comm c = keel_dist_comm(comm);
  int rc = MPI_SUCCESS;
  keel_dist_lock();
  for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += INT_MAX) {
    if (q->n == q->cap) {
      keel_dist_unlock();
      return keel_err(KEEL_ERR_INTERNAL, "data-parallel: more than %d pending gradient sums", q->cap);
    }
    int m = (int)(n - off > INT_MAX ? INT_MAX : n - off);
    rc = MPI_Iallreduce(MPI_IN_PLACE, buf + off, m, MPI_FLOAT, MPI_SUM, c, &q->r[q->n++]);
  }
  keel_dist_unlock();
  return keel_dist_check(rc, c, "MPI_Iallreduce (gradients)");
}

void keel_dp_progress(keel_dp_reqs *q) {
  int done = 0;
  keel_dist_lock();
  if (q->n) MPI_Testall(q->n, q->r, &done, MPI_STATUSES_IGNORE);
  keel_dist_unlock();
}

keel_status keel_dp_wait(const void *comm, keel_dp_reqs *q) {
  MPI_Comm c = keel_dist_comm(comm);
  keel_dist_lock();
  int rc = q->n ? MPI_Waitall(q->n, q->r, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
  q->n = 0;
  keel_dist_unlock();
  return keel_dist_check(rc, c, "MPI_Waitall (gradients)");
}

keel_status keel_dp_allgather_f32(const void *comm, float *buf, const int64_t *counts, const int64_t *displs,
                                  int size) {
  MPI_Comm c = keel_dist_comm(comm);
  int *cnt = calloc((size_t)size * 2 + 1, sizeof(int));
  if (!cnt) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "data-parallel: gather counts");
  int *dis = cnt + size;
  for (int r = 0; r < size; r++) {
    if (counts[r] > INT_MAX || displs[r] > INT_MAX) {
      free(cnt);
      return keel_err(KEEL_ERR_UNSUPPORTED, "data-parallel: --shard-optimizer gathers at most %d floats per "
                      "rank, rank %d holds %lld", INT_MAX, r, (long long)counts[r]);
    }
    cnt[r] = (int)counts[r], dis[r] = (int)displs[r];
  }
  keel_dist_lock();
  int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, dis, MPI_FLOAT, c);
  keel_dist_unlock();
  free(cnt);
  return keel_dist_check(rc, c, "MPI_Allgatherv (updated parameters)");
}

#endif
