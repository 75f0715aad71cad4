/* dist.c: the command under mpirun. A shard folder (rank_0.onnx ...
 * rank_{N-1}.onnx, as `keel shard` writes) makes each rank load its own
 * file; MPI starts when such a folder is given or the process was started
 * by an MPI launcher. Rank 0 alone prints on stdout; errors on stderr name
 * the rank; a rank that fails ends the whole job (MPI_Abort), so no peer
 * waits in a collective for it. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "keel_dist.h"

static bool g_on;
static int g_rank, g_size = 1;
static char g_tag[32];
static bool g_keep_stdout;

void cli_dist_keep_stdout(void) { g_keep_stdout = true; }

bool cli_dist_on(void) { return g_on; }
int cli_dist_rank(void) { return g_rank; }
const char *cli_dist_tag(void) { return g_tag; }

bool cli_is_shard_dir(const char *path) {
  char f[4200];
  snprintf(f, sizeof f, "%s/rank_0.onnx", path);
  return cli_is_dir(path) && cli_is_file(f);
}

int cli_dist_start(void) {
  if (g_on) return 0;
  keel_status st = keel_dist_init();
  if (st) {
    fprintf(stderr, "keel: cannot start MPI: %s\n", keel_last_error());
    return 1;
  }
  g_on = true;
  g_rank = keel_dist_rank();
  g_size = keel_dist_size();
  snprintf(g_tag, sizeof g_tag, "rank %d: ", g_rank);
  if (g_rank != 0 && !g_keep_stdout && !freopen("/dev/null", "w", stdout)) return 1;
  return 0;
}

int cli_dist_model(const char *dir, char *model, size_t cap) {
  int n = 0;
  for (;; n++) {
    snprintf(model, cap, "%s/rank_%d.onnx", dir, n);
    if (!cli_is_file(model)) break;
  }
  snprintf(model, cap, "%s/rank_%d.onnx", dir, g_rank);
  if (n == g_size) return 0;
  fprintf(stderr, "keel: %s%s holds rank_0.onnx ... rank_%d.onnx (%d ranks) but the job has "
          "%d rank(s): start it with mpirun -np %d\n", g_tag, dir, n - 1, n, g_size, n);
  return 1;
}

int cli_dist_begin(const char *path, char *model, size_t cap) {
  snprintf(model, cap, "%s", path);
  bool shard = cli_is_shard_dir(path);
  if (!shard && !keel_dist_launched()) return 0;
  int rc = cli_dist_start();
  if (rc || !shard) return rc;
  return cli_dist_model(path, model, cap);
}

int cli_dist_end(int rc) {
  if (!g_on) return rc;
  fflush(stdout);
  if (rc && g_size > 1) {
    fprintf(stderr, "keel: %sfailed (exit %d): ending every rank of the job\n", g_tag, rc);
    fflush(stderr);
    /* give the launcher a moment to forward the message (MPICH's Hydra
     * drops output still in flight when the job is aborted) */
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    keel_dist_abort(rc);
  }
  keel_status st = keel_dist_finalize();
  if (st && !rc) {
    fprintf(stderr, "keel: %s%s\n", g_tag, keel_last_error());
    rc = 1;
  }
  return rc;
}
