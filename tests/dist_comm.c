/* dist_comm.c: a program that owns MPI and hands keel a communicator of
 * its own (keel_options.comm), run by test_dist.sh under mpirun -np 4.
 * The 4 ranks split into two groups of 2 (MPI_Comm_split); each group runs
 * tests/dist/np2/allreduce (rank r adds r + 1, then AllReduce of float,
 * float16, bfloat16 and int64) on its own input: the sums must be the
 * group's own (2 x + 3), never mixed with the other group's. keel must not
 * finalize MPI it did not start, and must hold zero bytes at the end. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "keel.h"
#include "keel_dist.h"
#include "keel_stats.h"

static int fail(int rank, const char *what) {
  fprintf(stderr, "dist_comm: rank %d: %s: %s\n", rank, what, keel_last_error());
  return 1;
}

static int run_group(const char *dir, MPI_Comm sub, int rank, int color) {
  int sr;
  MPI_Comm_rank(sub, &sr);
  char path[4096];
  snprintf(path, sizeof path, "%s/np2/allreduce/rank_%d.onnx", dir, sr);
  keel_options o = {.size = sizeof o, .comm = &sub};
  keel_session_t *s;
  if (keel_session_create(path, &o, &s)) return fail(rank, "load");
  float x[15];
  for (int i = 0; i < 15; i++) x[i] = (float)(i - 7 + 100 * color);
  keel_value_t *in, *out[4] = {0};
  int64_t shape[2] = {3, 5};
  const char *names[] = {"x"};
  int rc = 0;
  if (keel_tensor_create(s, KEEL_FLOAT, 2, shape, x, &in)) return fail(rank, "input");
  if (keel_run(s, names, &in, 1, out)) rc = fail(rank, "run");
  for (int i = 0; i < 15 && !rc; i++) {
    const float *y = keel_value_data(out[0]);
    const int64_t *l = keel_value_data(out[3]);
    if (y[i] != 2 * x[i] + 3 || l[i] != (int64_t)(2 * x[i] + 3)) {
      fprintf(stderr, "dist_comm: rank %d: element %d is %g / %lld, want %g\n", rank, i,
              (double)y[i], (long long)l[i], (double)(2 * x[i] + 3));
      rc = 1;
    }
  }
  for (int i = 0; i < 4; i++) keel_value_release(out[i]);
  keel_value_release(in);
  keel_session_destroy(s);
  return rc;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 4 || argc < 2) {
    fprintf(stderr, "dist_comm: run as mpirun -np 4 dist_comm tests/dist\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &sub);
  rc = run_group(argv[1], sub, rank, rank / 2);
  if (keel_dist_finalize()) rc = fail(rank, "keel_dist_finalize");
  int up = 0;
  MPI_Initialized(&up);
  if (!up) rc = fail(rank, "MPI was finalized by keel");
  if (keel_process_bytes()) {
    fprintf(stderr, "dist_comm: rank %d: keel holds %llu bytes\n", rank,
            (unsigned long long)keel_process_bytes());
    rc = 1;
  }
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!rank) printf("dist_comm: %s\n", all ? "FAILED" : "two groups of 2 on their own communicators: ok");
  MPI_Comm_free(&sub);
  MPI_Finalize();
  return all;
}
