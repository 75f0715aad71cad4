/* cli.h: helpers shared by the `keel` subcommands. The command may exit on
 * usage errors (status 2); everything else goes through the library. */
#ifndef KEEL_CLI_H
#define KEEL_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "keel.h"
#include "keel_dist.h"
#include "keel_stats.h"

#define KEEL_CLI_MAX_INPUTS 256

int cmd_run(int argc, char **argv);
int cmd_test(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_memcheck(int argc, char **argv);
int cmd_ops(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_shard(int argc, char **argv);
int cmd_train(int argc, char **argv);

/* The session of the model at `path` as the ONNX writer writes it back
 * (roundtrip.c; `keel test --roundtrip`). */
keel_status cli_roundtrip_session(const char *path, const keel_options *opts, keel_session_t **out);

/* Under mpirun (dist.c). cli_dist_begin resolves the model of `path` for
 * this rank (a shard folder gives DIR/rank_R.onnx) and starts MPI when a
 * shard folder is given or an MPI launcher started the process; ranks
 * other than 0 then print nothing on stdout. 0 or an exit code (message
 * printed). cli_dist_end(rc): a failed rank ends every rank (MPI_Abort),
 * else MPI is finalized; returns rc. */
bool cli_is_shard_dir(const char *path);
int cli_dist_start(void);
int cli_dist_begin(const char *path, char *model, size_t cap);
/* A shard folder's model for this rank; 1 (message printed) when the
 * folder's rank count differs from the job's. */
int cli_dist_model(const char *dir, char *model, size_t cap);
int cli_dist_end(int rc);
/* Before cli_dist_begin: every rank keeps its stdout (keel memcheck). */
void cli_dist_keep_stdout(void);
bool cli_dist_on(void);
int cli_dist_rank(void);
const char *cli_dist_tag(void); /* "rank R: " under MPI, else ""       */

/* Prints the usage text (of one command, or all when cmd is NULL) to
 * stderr and returns 2. */
int cli_usage(const char *cmd, const char *problem);

/* Reads a whole file into malloc'ed memory; NULL with *err set. */
void *cli_read_file(const char *path, size_t *len, const char **err);
bool cli_is_dir(const char *path);
bool cli_is_file(const char *path);

/* Parses "123", "64K", "512M", "2G" into bytes; false when malformed. */
bool cli_parse_size(const char *s, size_t *out);
/* --threads N: 1..256 (0 means the default: every CPU). */
bool cli_parse_threads(const char *s, int *out);

/* A set of named inputs for one run. */
typedef struct cli_inputs {
  size_t n;
  const char *names[KEEL_CLI_MAX_INPUTS];
  keel_value_t *values[KEEL_CLI_MAX_INPUTS];
  char *owned_names[KEEL_CLI_MAX_INPUTS];
} cli_inputs;

/* Loads input_K.pb files of a data-set folder, matched in order to the
 * model's inputs that have no initializer. */
keel_status cli_load_data_dir(keel_session_t *s, const char *dir, cli_inputs *in);
/* Loads one NAME=FILE.pb pair. */
keel_status cli_load_named(keel_session_t *s, const char *spec, cli_inputs *in);
/* Fills every input not yet given with deterministic values (symbolic and
 * unknown dimensions become 1); writes a note per input to `note`. */
keel_status cli_generate_missing(keel_session_t *s, cli_inputs *in, FILE *note);
void cli_inputs_free(cli_inputs *in);

/* Loads output_K.pb of a data set as expected values, kinds from the model. */
keel_status cli_load_expected(keel_session_t *s, const char *dir, keel_value_t **out,
                              size_t n_out, size_t *n_found);

/* One-line summary of a value: type, shape and a few numbers. */
void cli_describe(const keel_value_t *v, char *buf, size_t cap);
/* The verdict line of a leak and the blocks allocated since `mark` that
 * are still alive, by owner (graph path, node, value, iteration), as
 * `keel memcheck` and `keel train` print them:
 *   verdict: LEAK: <why>; <bytes> allocated since <since> is still alive:
 * Returns 1 (the exit status of a leak). */
int cli_leak_report(keel_session_t *s, uint64_t mark, const char *why, const char *since);

/* Stats printer for keel_stats_print. */
void cli_print_line(void *arg, const char *line);

/* Seconds as "12.345 ms", "3.210 us" or "420 ns", whichever shows digits
 * (a sub-microsecond model printed "0.000 ms"); returns buf. */
const char *cli_duration(double seconds, char *buf, size_t cap);

/* "825.0 MB", "1.5 KB", "312 B" into buf; returns buf. */
const char *cli_bytes(uint64_t b, char *buf, size_t cap);

/* Progress of a long command (progress.c). */
typedef struct cli_progress {
  const char *what;
  long total;
  bool tty, shown;
  bool quiet;                 /* under mpirun, ranks other than 0 */
  double t0;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *what, long total);
void cli_progress_update(cli_progress *p, long done);
void cli_progress_clear(cli_progress *p);
void cli_progress_end(cli_progress *p);

/* SVG line charts (plot.c). */
#define KEEL_CLI_MAX(a, b) ((a) > (b) ? (a) : (b))
typedef struct cli_series {
  const char *name, *color;
  const double *y;
  size_t n;
  int axis;   /* 0: left y axis, 1: right y axis (its own scale) */
} cli_series;
typedef struct cli_panel {
  const char *title, *xlabel;
  const cli_series *series;
  int n_series;
} cli_panel;
int cli_svg_write(const char *path, const char *title, const cli_panel *panels, int n_panels);

/* Median of n doubles (sorts in place). */
double cli_median(double *x, size_t n);
double cli_now(void);

#endif
