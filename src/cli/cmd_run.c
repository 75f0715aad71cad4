/* cmd_run.c: `keel run`: load, run (N times), print outputs and memory. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

typedef struct run_args {
  const char *model, *data, *out_dir, *trace;
  bool mem_report;
  long mem_top;
  const char *inputs[KEEL_CLI_MAX_INPUTS];
  size_t n_inputs;
  long iters;
  size_t mem_limit;
  int threads;
  const char *device;          /* --device: keel_options.device            */
  long timeout_ms;          /* --timeout: per-run deadline; 0 = none       */
  long long max_iterations; /* --max-iterations: the iteration guard       */
  bool no_auto_trim;        /* --no-auto-trim                              */
  bool deterministic;       /* --deterministic                             */
  long trim_window, trim_margin; /* --trim-window RUNS, --trim-margin PCT  */
} run_args;

static int parse(int argc, char **argv, run_args *a) {
  memset(a, 0, sizeof *a);
  a->iters = 1;
  a->mem_top = 20;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    bool has_val = i + 1 < argc;
    if (!strcmp(s, "--data") && has_val) a->data = argv[++i];
    else if (!strcmp(s, "--out") && has_val) a->out_dir = argv[++i];
    else if (!strcmp(s, "--trace") && has_val) a->trace = argv[++i];
    else if (!strcmp(s, "--mem-report")) a->mem_report = true;
    else if (!strcmp(s, "--mem-top") && has_val) {
      a->mem_report = true;
      a->mem_top = strtol(argv[++i], NULL, 10);
      if (a->mem_top < 1) return cli_usage("run", "--mem-top needs a positive number");
    }
    else if (!strcmp(s, "--input") && has_val && a->n_inputs < KEEL_CLI_MAX_INPUTS)
      a->inputs[a->n_inputs++] = argv[++i];
    else if (!strcmp(s, "--iters") && has_val) {
      char *end;
      a->iters = strtol(argv[++i], &end, 10);
      if (*end || a->iters < 1) return cli_usage("run", "--iters needs a positive number");
    } else if (!strcmp(s, "--threads") && has_val) {
      if (!cli_parse_threads(argv[++i], &a->threads)) return cli_usage("run", "bad --threads");
    } else if (!strcmp(s, "--device") && has_val) {
      a->device = argv[++i];
    } else if (!strcmp(s, "--timeout") && has_val) {
      char *end;
      a->timeout_ms = strtol(argv[++i], &end, 10);
      if (*end || a->timeout_ms < 1) return cli_usage("run", "--timeout needs a positive number of ms");
    } else if (!strcmp(s, "--max-iterations") && has_val) {
      char *end;
      a->max_iterations = strtoll(argv[++i], &end, 10);
      if (*end || !a->max_iterations) return cli_usage("run", "--max-iterations needs a non-zero number (< 0: no guard)");
    } else if (!strcmp(s, "--deterministic")) {
      a->deterministic = true;
    } else if (!strcmp(s, "--no-auto-trim")) {
      a->no_auto_trim = true;
    } else if (!strcmp(s, "--trim-window") && has_val) {
      char *end;
      a->trim_window = strtol(argv[++i], &end, 10);
      if (*end || a->trim_window < 1) return cli_usage("run", "--trim-window needs a positive number of runs");
    } else if (!strcmp(s, "--trim-margin") && has_val) {
      char *end;
      a->trim_margin = strtol(argv[++i], &end, 10);
      if (*end || a->trim_margin < 0) return cli_usage("run", "--trim-margin needs a percentage");
      if (!a->trim_margin) a->trim_margin = -1; /* 0 in keel_options means the default */
    } else if (!strcmp(s, "--mem-limit") && has_val) {
      if (!cli_parse_size(argv[++i], &a->mem_limit)) return cli_usage("run", "bad --mem-limit");
    } else if (s[0] == '-') {
      char msg[256];
      snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", s);
      return cli_usage("run", msg);
    } else if (!a->model) a->model = s;
    else return cli_usage("run", "more than one model given");
  }
  if (!a->model) return cli_usage("run", "no model given");
  if (!cli_is_file(a->model) && !cli_is_shard_dir(a->model)) {
    char msg[4200];
    snprintf(msg, sizeof msg, "%s: no such file (nor a folder of rank_R.onnx)", a->model);
    return cli_usage("run", msg);
  }
  if (a->data && !cli_is_dir(a->data)) return cli_usage("run", "--data is not a folder");
  return 0;
}

static int fail(const char *what, keel_status st) {
  fprintf(stderr, "keel: %s%s: %s: %s\n", cli_dist_tag(), what, keel_status_str(st),
          keel_last_error());
  return 1;
}

static int write_outputs(keel_session_t *s, keel_value_t **outs, const char *dir) {
  mkdir(dir, 0755);
  for (size_t i = 0; i < keel_session_output_count(s); i++) {
    keel_io_info io;
    keel_session_output(s, i, &io);
    void *bytes;
    size_t len;
    keel_status st = keel_value_to_pb(outs[i], io.name, &bytes, &len);
    if (st) return fail("writing outputs", st);
    char path[4096];
    snprintf(path, sizeof path, "%s/output_%zu.pb", dir, i);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(bytes, 1, len, f) == len;
    if (f) ok = fclose(f) == 0 && ok;
    keel_free(bytes);
    if (!ok) {
      fprintf(stderr, "keel: cannot write %s\n", path);
      return 1;
    }
  }
  return 0;
}

static int print_mem_report(keel_session_t *s, int top) {
  char *text;
  keel_status st = keel_profile_mem_report(s, top, &text);
  if (st) return fail("memory report", st);
  if (cli_dist_on()) { /* every rank's report and memory, printed by rank 0 */
    keel_stats ms = {.size = sizeof ms};
    keel_stats_get(s, &ms);
    size_t n = strlen(text);
    char *both = malloc(n + 200);
    if (!both) {
      keel_free(text);
      return fail("memory report", KEEL_ERR_OUT_OF_MEMORY);
    }
    snprintf(both, n + 200, "%smemory of this rank: allocated %llu B (peak %llu B), reserved %llu B\n",
             text, (unsigned long long)ms.allocated, (unsigned long long)ms.allocated_peak,
             (unsigned long long)ms.reserved);
    keel_free(text);
    char *all = NULL;
    st = keel_dist_gather_text(both, &all);
    free(both);
    if (st) return fail("memory report", st);
    text = all;
  }
  if (text) printf("memory by node (top %d by bytes allocated, over all runs):\n%s", top, text);
  keel_free(text);
  return 0;
}

static int write_trace(keel_session_t *s, const char *trace) {
  char *json, path[4096];
  /* under mpirun, one trace per rank: t.json -> t.rank1.json */
  const char *dot = strrchr(trace, '.');
  if (!cli_dist_on()) snprintf(path, sizeof path, "%s", trace);
  else if (dot && !strchr(dot, '/'))
    snprintf(path, sizeof path, "%.*s.rank%d%s", (int)(dot - trace), trace, cli_dist_rank(), dot);
  else snprintf(path, sizeof path, "%s.rank%d", trace, cli_dist_rank());
  keel_status st = keel_profile_trace_json(s, &json);
  if (st) return fail("trace", st);
  FILE *f = fopen(path, "w");
  bool ok = f && fputs(json, f) >= 0;
  if (f) ok = fclose(f) == 0 && ok;
  keel_free(json);
  if (!ok) {
    fprintf(stderr, "keel: cannot write %s\n", path);
    return 1;
  }
  printf("trace  %s%s (open in https://ui.perfetto.dev or chrome://tracing)\n", path,
         cli_dist_on() ? ", one file per rank" : "");
  return 0;
}

static int run_loop(keel_session_t *s, const run_args *a, cli_inputs *in) {
  size_t nout = keel_session_output_count(s);
  keel_value_t **outs = calloc(nout + 1, sizeof *outs);
  double *times = calloc((size_t)a->iters, sizeof(double));
  int rc = 0;
  cli_progress pr;
  cli_progress_start(&pr, "run", a->iters);
  keel_run_opts ro = {.size = sizeof ro, .deadline_ms = (uint64_t)a->timeout_ms,
                      .max_iterations = a->max_iterations};
  for (long it = 0; it < a->iters && !rc; it++) {
    for (size_t i = 0; i < nout; i++) keel_value_release(outs[i]), outs[i] = NULL;
    double t0 = cli_now();
    keel_status st = keel_run_ex(s, in->names, in->values, in->n, outs, &ro);
    times[it] = cli_now() - t0;
    if (st) rc = fail("run", st);
    else if (a->iters >= 10) cli_progress_update(&pr, it + 1);
  }
  if (a->iters >= 10) cli_progress_end(&pr);
  if (!rc) {
    for (size_t i = 0; i < nout; i++) {
      keel_io_info io;
      keel_session_output(s, i, &io);
      char desc[512];
      cli_describe(outs[i], desc, sizeof desc);
      printf("output %s: %s\n", io.name, desc);
    }
    double med = cli_median(times, (size_t)a->iters);
    char tb[32];
    printf("time   %s median over %ld run(s)\n", cli_duration(med, tb, sizeof tb), a->iters);
    if (a->out_dir) rc = write_outputs(s, outs, a->out_dir);
  }
  for (size_t i = 0; i < nout; i++) keel_value_release(outs[i]);
  free(outs);
  free(times);
  return rc;
}

static void log_stderr(void *ud, int level, const char *msg) {
  (void)ud;
  fprintf(stderr, "keel: %s: %s\n", level == KEEL_LOG_ERROR ? "error" : level == KEEL_LOG_WARN ? "warning" : "info", msg);
}

static int run_model(const run_args *ra, const char *model) {
  run_args a = *ra;
  a.model = model;
  int rc = 0;
  keel_options opts = {.size = sizeof opts, .mem_limit = a.mem_limit, .log = log_stderr,
                       .threads = a.threads, .device = a.device,
                       .flags = (a.no_auto_trim ? KEEL_OPT_NO_AUTO_TRIM : 0u) |
                                (a.deterministic ? KEEL_OPT_DETERMINISTIC : 0u),
                       .trim_window = (unsigned)a.trim_window, .trim_margin_pct = (int)a.trim_margin};
  keel_session_t *s;
  keel_status st = keel_session_create(a.model, &opts, &s);
  if (st) return fail("load", st);
  cli_inputs in = {0};
  if (a.data) st = cli_load_data_dir(s, a.data, &in);
  for (size_t i = 0; i < a.n_inputs && !st; i++) st = cli_load_named(s, a.inputs[i], &in);
  if (!st) st = cli_generate_missing(s, &in, stdout);
  unsigned what = (a.mem_report ? KEEL_PROFILE_MEMORY : 0) | (a.trace ? KEEL_PROFILE_TRACE : 0);
  if (!st && what) st = keel_profile_start(s, what);
  if (st) rc = fail("inputs", st);
  else rc = run_loop(s, &a, &in);
  keel_profile_stop(s);
  if (!rc && a.mem_report) rc = print_mem_report(s, (int)a.mem_top);
  if (!rc && a.trace) rc = write_trace(s, a.trace);
  cli_inputs_free(&in);
  printf("memory after the last run:\n");
  keel_stats_print(s, cli_print_line, stdout);
  keel_session_destroy(s);
  uint64_t left = keel_process_bytes();
  printf("after destroy: keel holds %llu bytes\n", (unsigned long long)left);
  if (left && !rc) rc = 1;
  return rc;
}

int cmd_run(int argc, char **argv) {
  run_args a;
  int rc = parse(argc, argv, &a);
  if (rc) return rc;
  char model[4200];
  rc = cli_dist_begin(a.model, model, sizeof model);
  if (!rc) rc = run_model(&a, model);
  return cli_dist_end(rc);
}
