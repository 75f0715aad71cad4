/* comm.c: MPI for keel: initialized lazily (the first session whose model
 * holds a collective, or keel_dist_init), finalized only by whoever
 * initialized it (explicitly, or at exit), one lock around every call keel makes (keel asks for
 * MPI_THREAD_SERIALIZED), MPI_ERRORS_RETURN on each communicator a session
 * uses, and MPI's error codes turned into messages that name the rank.
 *
 * Built without MPI (KEEL_MPI=OFF), the same public functions report a
 * world of one process and collectives fail as unsupported. */
#include "dist/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "keel_dist.h"

/* "rank R:\n" + text + a newline when it lacks one, appended to a buffer. */
static char *append_part(char *buf, size_t *len, int rank, const char *text, size_t n) {
  char head[32];
  int h = snprintf(head, sizeof head, "rank %d:\n", rank);
  bool nl = n && text[n - 1] != '\n';
  char *q = realloc(buf, *len + (size_t)h + n + 2);
  if (!q) {
    free(buf);
    return NULL;
  }
  memcpy(q + *len, head, (size_t)h);
  memcpy(q + *len + h, text, n);
  *len += (size_t)h + n;
  if (nl) q[(*len)++] = '\n';
  q[*len] = 0;
  return q;
}

int keel_dist_launched(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                               "PMI_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < KEEL_COUNTOF(vars); i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

keel_status keel_dist_no_mpi(const keel_node *n) {
  return keel_err(KEEL_ERR_UNSUPPORTED,
                  "unsupported: op %s (domain %s, opset %lld): keel was built without MPI "
                  "(cmake -DKEEL_MPI=ON with libopenmpi-dev or libmpich-dev)",
                  n->op_type, n->domain[0] ? n->domain : "ai.onnx", (long long)n->opset);
}

/* The first collective node of the model, or NULL. */
static const keel_node *first_collective(const keel_model *m) {
  for (int32_t i = 0; i < m->n_graphs; i++)
    for (int32_t k = 0; k < m->graphs[i]->n_nodes; k++)
      if (keel_dist_is_collective(&m->graphs[i]->nodes[k])) return &m->graphs[i]->nodes[k];
  return NULL;
}

#ifndef KEEL_HAVE_MPI

int keel_dist_available(void) { return 0; }
keel_status keel_dist_init(void) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "keel_dist_init: keel was built without MPI");
}
int keel_dist_rank(void) { return 0; }
int keel_dist_size(void) { return 1; }
keel_status keel_dist_finalize(void) { return KEEL_OK; }
void keel_dist_abort(int code) { (void)code; }

keel_status keel_dist_gather_text(const char *mine, char **all) {
  size_t len = 0;
  *all = append_part(NULL, &len, 0, mine ? mine : "", mine ? strlen(mine) : 0);
  return *all ? KEEL_OK : keel_err(KEEL_ERR_OUT_OF_MEMORY, "gathering reports");
}

keel_status keel_dist_bind(const keel_model *m, const void *comm) {
  (void)comm;
  const keel_node *n = first_collective(m);
  if (!n) return KEEL_OK;
  char lb[256];
  keel_status st = keel_dist_no_mpi(n);
  return keel_err_prefix(st, "node %s", keel_node_label(n, lb, sizeof lb));
}

#else /* KEEL_HAVE_MPI */

static keel_mutex g_lock;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_we_initialized;   /* keel called MPI_Init_thread            */

static void lock_init(void) { keel_mutex_init(&g_lock); }
void keel_dist_lock(void) {
  pthread_once(&g_once, lock_init);
  keel_mutex_lock(&g_lock);
}
void keel_dist_unlock(void) { keel_mutex_unlock(&g_lock); }

int keel_dist_available(void) { return 1; }

static bool mpi_up(void) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  return up && !down;
}

/* At exit: MPI that keel started and nobody finalized (a program that
 * never calls keel_dist_finalize) is finalized, so launchers do not report
 * an abnormal end. */
static void finalize_at_exit(void) { keel_dist_finalize(); }

keel_status keel_dist_init(void) {
  keel_dist_lock();
  keel_status st = KEEL_OK;
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (down) st = keel_err(KEEL_ERR_INVALID_ARG, "MPI was already finalized in this process");
  else if (!up) {
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) st = keel_err(KEEL_ERR_INVALID_ARG, "MPI_Init_thread failed (%d)", rc);
    else {
      g_we_initialized = true;
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      atexit(finalize_at_exit);
    }
  }
  keel_dist_unlock();
  return st;
}

int keel_dist_rank(void) {
  int r = 0;
  keel_dist_lock();
  if (mpi_up()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  keel_dist_unlock();
  return r;
}

int keel_dist_size(void) {
  int n = 1;
  keel_dist_lock();
  if (mpi_up()) MPI_Comm_size(MPI_COMM_WORLD, &n);
  keel_dist_unlock();
  return n;
}

keel_status keel_dist_finalize(void) {
  keel_dist_lock();
  keel_status st = KEEL_OK;
  if (g_we_initialized && mpi_up()) {
    keel_dist_free_ops();
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) st = keel_err(KEEL_ERR_INVALID_ARG, "MPI_Finalize failed (%d)", rc);
    g_we_initialized = false;
  }
  keel_dist_unlock();
  return st;
}

void keel_dist_abort(int code) {
  if (mpi_up()) MPI_Abort(MPI_COMM_WORLD, code);
}

/* Lengths first (MPI_Gather), then the bytes (MPI_Gatherv) on rank 0. */
keel_status keel_dist_gather_text(const char *mine, char **all) {
  *all = NULL;
  if (!mpi_up() || keel_dist_size() == 1) {
    size_t len = 0;
    *all = append_part(NULL, &len, 0, mine ? mine : "", mine ? strlen(mine) : 0);
    return *all ? KEEL_OK : keel_err(KEEL_ERR_OUT_OF_MEMORY, "gathering reports");
  }
  int rank = keel_dist_rank(), size = keel_dist_size(), n = mine ? (int)strlen(mine) : 0;
  int *lens = rank == 0 ? calloc((size_t)size, sizeof(int)) : NULL;
  int *offs = rank == 0 ? calloc((size_t)size, sizeof(int)) : NULL;
  if (rank == 0 && (!lens || !offs)) n = -1; /* still take part, then fail */
  keel_dist_lock();
  int rc = MPI_Gather(&n, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  keel_dist_unlock();
  keel_status st = keel_dist_check(rc, MPI_COMM_WORLD, "MPI_Gather (report lengths)");
  size_t total = 0;
  for (int r = 0; rank == 0 && !st && r < size; r++) offs[r] = (int)total, total += (size_t)(lens[r] > 0 ? lens[r] : 0);
  char *bytes = rank == 0 ? malloc(total + 1) : NULL;
  for (int r = 0; rank == 0 && r < size && lens; r++) if (lens[r] < 0) lens[r] = 0;
  keel_dist_lock();
  rc = MPI_Gatherv(mine ? mine : "", n > 0 ? n : 0, MPI_CHAR, bytes, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD);
  keel_dist_unlock();
  if (!st) st = keel_dist_check(rc, MPI_COMM_WORLD, "MPI_Gatherv (reports)");
  size_t len = 0;
  char *out = NULL;
  for (int r = 0; rank == 0 && !st && bytes && r < size; r++) {
    out = append_part(out, &len, r, bytes + offs[r], (size_t)lens[r]);
    if (!out) st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "gathering reports");
  }
  if (rank == 0 && !st && !bytes) st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "gathering reports");
  free(bytes), free(lens), free(offs);
  if (st) free(out);
  else *all = out;
  return st;
}

MPI_Comm keel_dist_comm(const void *comm) {
  const MPI_Comm *c = comm;
  return c ? *c : MPI_COMM_WORLD;
}

keel_status keel_dist_check(int rc, MPI_Comm c, const char *call) {
  if (rc == MPI_SUCCESS) return KEEL_OK;
  int rank = -1, size = -1, len = 0, cls = 0;
  char msg[MPI_MAX_ERROR_STRING + 1] = "";
  keel_dist_lock();
  MPI_Comm_rank(c, &rank);
  MPI_Comm_size(c, &size);
  MPI_Error_class(rc, &cls);
  MPI_Error_string(rc, msg, &len);
  keel_dist_unlock();
  return keel_err(KEEL_ERR_INVALID_ARG, "%s failed on rank %d of %d: %s (MPI error class %d)",
                  call, rank, size, msg, cls);
}

keel_status keel_dist_bind(const keel_model *m, const void *comm) {
  if (!first_collective(m)) return KEEL_OK;
  KEEL_TRY(keel_dist_init());
  MPI_Comm c = keel_dist_comm(comm);
  if (c == MPI_COMM_NULL)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_options.comm points at MPI_COMM_NULL");
  keel_dist_lock();
  int rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  keel_dist_unlock();
  return keel_dist_check(rc, c, "MPI_Comm_set_errhandler");
}

#endif /* KEEL_HAVE_MPI */
