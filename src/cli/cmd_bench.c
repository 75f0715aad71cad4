/* cmd_bench.c: `keel bench`: latency (median, p90), runs per second, peak
 * RSS and the allocator's peaks over timed runs that carry no profiling;
 * then separate profiled runs for a per-op-type time table and, with
 * --flops, the achieved GFLOP/s of Conv, MatMul and Gemm nodes (FLOPs from
 * the shapes the profiler records at each node's last execution). Process
 * CPU time per run beside the wall time: on a shared machine it moves less. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

typedef struct bench_args {
  const char *model, *data, *json;
  const char *inputs[KEEL_CLI_MAX_INPUTS];
  size_t n_inputs;
  long iters, warmup, profile_runs;
  int threads;
  const char *device;          /* --device: keel_options.device            */
  bool flops;
  bool deterministic;          /* --deterministic                          */
  double peak_gflops;
  size_t mem_limit;
} bench_args;

/* One row of the per-op-type table (or of the FLOP table). */
typedef struct op_row {
  char name[64];
  uint64_t nodes, executions, ns;
  double flops;
} op_row;

typedef struct bench_result {
  double median, p90, min, mean;    /* seconds */
  double cpu_median;                /* process CPU seconds per run, all threads */
  uint64_t peak_rss, alloc_peak, reserved_peak, weight_bytes;
  uint64_t prepared;            /* prepared state at the end (in alloc_peak) */
  char device[32];              /* the session's device, or ""            */
  uint64_t dev_alloc_peak, dev_reserved_peak; /* its heap's peaks        */
  op_row *ops, *fl;
  size_t n_ops, n_fl;
  uint64_t prof_ns, wall_ns;        /* summed over the profiled runs */
  double prof_cpu_per_wall;         /* process CPU / wall over them     */
} bench_result;

/* ============================================================= options */

static bool parse_long(const char *s, long min, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || end == s || v < min) return false;
  *out = v;
  return true;
}

static int parse_opt(int argc, char **argv, int *i, bench_args *a) {
  const char *s = argv[*i];
  bool has_val = *i + 1 < argc;
  const char *v = has_val ? argv[*i + 1] : NULL;
  if (has_val) ++*i;
  if (!strcmp(s, "--data") && v) a->data = v;
  else if (!strcmp(s, "--json") && v) a->json = v;
  else if (!strcmp(s, "--input") && v && a->n_inputs < KEEL_CLI_MAX_INPUTS) a->inputs[a->n_inputs++] = v;
  else if (!strcmp(s, "--iters") && v) return parse_long(v, 1, &a->iters) ? 0 : cli_usage("bench", "--iters needs a positive number");
  else if (!strcmp(s, "--warmup") && v) return parse_long(v, 0, &a->warmup) ? 0 : cli_usage("bench", "--warmup needs a number >= 0");
  else if (!strcmp(s, "--threads") && v) return cli_parse_threads(v, &a->threads) ? 0 : cli_usage("bench", "bad --threads (0..256)");
  else if (!strcmp(s, "--device") && v) a->device = v;
  else if (!strcmp(s, "--profile-runs") && v) return parse_long(v, 0, &a->profile_runs) ? 0 : cli_usage("bench", "--profile-runs needs a number >= 0");
  else if (!strcmp(s, "--mem-limit") && v) return cli_parse_size(v, &a->mem_limit) ? 0 : cli_usage("bench", "bad --mem-limit");
  else if (!strcmp(s, "--peak") && v) {
    a->peak_gflops = strtod(v, NULL);
    a->flops = true;
    return a->peak_gflops > 0 ? 0 : cli_usage("bench", "--peak needs GFLOP/s > 0");
  } else {
    if (has_val) --*i; /* the flag took no value */
    if (!strcmp(s, "--flops")) a->flops = true;
    else if (!strcmp(s, "--deterministic")) a->deterministic = true;
    else {
      char msg[256];
      snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", s);
      return cli_usage("bench", msg);
    }
  }
  return 0;
}

static int parse(int argc, char **argv, bench_args *a) {
  memset(a, 0, sizeof *a);
  a->iters = 20;
  a->warmup = 3;
  a->profile_runs = -1;
  for (int i = 0; i < argc; i++) {
    if (argv[i][0] == '-') {
      int rc = parse_opt(argc, argv, &i, a);
      if (rc) return rc;
    } else if (!a->model) a->model = argv[i];
    else return cli_usage("bench", "more than one model given");
  }
  if (!a->model) return cli_usage("bench", "no model given");
  if (!cli_is_file(a->model)) {
    char msg[4200];
    snprintf(msg, sizeof msg, "%s: no such file", a->model);
    return cli_usage("bench", msg);
  }
  if (a->data && !cli_is_dir(a->data)) return cli_usage("bench", "--data is not a folder");
  if (a->profile_runs < 0) a->profile_runs = a->iters < 3 ? a->iters : 3;
  return 0;
}

static int fail(const char *what, keel_status st) {
  fprintf(stderr, "keel: %s: %s: %s\n", what, keel_status_str(st), keel_last_error());
  return 1;
}

/* =============================================================== runs */

/* Peak resident set of this process (VmHWM), in bytes; 0 if unknown. */
static uint64_t peak_rss(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

/* The model's weight bytes (keel_session_describe's "weight_bytes"). */
static uint64_t weight_bytes(const keel_session_t *s) {
  char *json;
  if (keel_session_describe(s, 1, &json)) return 0;
  const char *p = strstr(json, "\"weight_bytes\":");
  uint64_t w = p ? strtoull(p + strlen("\"weight_bytes\":"), NULL, 10) : 0;
  keel_free(json);
  return w;
}

/* Issue 8's memory bound: 1.1 x weights + peak allocated activations +
 * 16 MB. Prepared state (packed or reordered weights) is the weights in
 * another layout: counted by the first term, so taken out of the peak. */
static double rss_bound(const bench_result *r) {
  return 1.1 * (double)r->weight_bytes + (double)(r->alloc_peak - r->prepared) +
         16.0 * 1048576.0;
}

/* CPU time of the whole process (every thread), in seconds. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* `n` runs; times[i] (wall) and cpu[i] (process CPU) in seconds when not
 * NULL. */
static int run_n(keel_session_t *s, cli_inputs *in, long n, double *times, double *cpu) {
  size_t nout = keel_session_output_count(s);
  keel_value_t **outs = calloc(nout + 1, sizeof *outs);
  if (!outs) return fail("bench", KEEL_ERR_OUT_OF_MEMORY);
  int rc = 0;
  for (long it = 0; it < n && !rc; it++) {
    double c0 = cpu ? cpu_now() : 0, t0 = cli_now();
    keel_status st = keel_run(s, in->names, in->values, in->n, outs);
    if (times) times[it] = cli_now() - t0;
    if (cpu) cpu[it] = cpu_now() - c0;
    if (st) rc = fail("run", st);
    for (size_t i = 0; i < nout && !st; i++) keel_value_release(outs[i]), outs[i] = NULL;
  }
  free(outs);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of n sorted values. */
static double quantile(const double *sorted, size_t n, double q) {
  size_t k = (size_t)(q * (double)n + 0.999999);
  return sorted[k == 0 ? 0 : (k > n ? n : k) - 1];
}

static int timed_runs(keel_session_t *s, cli_inputs *in, const bench_args *a, double *times,
                      double *cpu, bench_result *r) {
  int rc = run_n(s, in, a->warmup, NULL, NULL);
  if (rc) return rc;
  keel_stats_reset_peaks(s);
  if ((rc = run_n(s, in, a->iters, times, cpu))) return rc;
  r->peak_rss = peak_rss();
  r->weight_bytes = weight_bytes(s);
  keel_stats st = {.size = sizeof st};
  if (keel_stats_get(s, &st) == KEEL_OK)
    r->alloc_peak = st.allocated_peak, r->reserved_peak = st.reserved_peak,
    r->prepared = st.prepared_bytes < st.allocated_peak ? st.prepared_bytes : st.allocated_peak;
  keel_stats ds = {.size = sizeof ds};
  const char *dev = NULL;
  if (keel_stats_get_device(s, &ds, &dev) == KEEL_OK) { /* a session with a device */
    snprintf(r->device, sizeof r->device, "%s", dev);
    r->dev_alloc_peak = ds.allocated_peak, r->dev_reserved_peak = ds.reserved_peak;
  }
  size_t n = (size_t)a->iters;
  double *sorted = malloc(n * sizeof *sorted), sum = 0;
  if (!sorted) return fail("bench", KEEL_ERR_OUT_OF_MEMORY);
  for (size_t i = 0; i < n; i++) sum += times[i], sorted[i] = times[i];
  qsort(sorted, n, sizeof *sorted, cmp_double);
  r->p90 = quantile(sorted, n, 0.9);
  r->min = sorted[0];
  r->median = cli_median(sorted, n);
  r->mean = sum / (double)n;
  for (size_t i = 0; i < n; i++) sorted[i] = cpu[i];
  r->cpu_median = cli_median(sorted, n);
  free(sorted);
  return 0;
}

/* ======================================================= op-type table */

static op_row *row_for(op_row **rows, size_t *n, const char *name) {
  for (size_t i = 0; i < *n; i++)
    if (!strcmp((*rows)[i].name, name)) return &(*rows)[i];
  op_row *q = realloc(*rows, (*n + 1) * sizeof *q);
  if (!q) return NULL;
  *rows = q;
  op_row *r = &q[(*n)++];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  return r;
}

static int64_t numel(int rank, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  return n;
}

/* FLOPs of one execution (2 per multiply-add) and the class it counts in;
 * 0 for nodes that are not Conv/ConvTranspose/MatMul/Gemm (or fused forms
 * whose op type names them) or whose shapes were not recorded. */
static double node_flops(const keel_node_mem *m, char *cls, size_t cap) {
  const int64_t *x = m->in_dims[0], *w = m->in_dims[1];
  int xr = m->in_rank[0], wr = m->in_rank[1], yr = m->out_rank;
  if (xr < 1 || wr < 1 || yr < 1) return 0;
  double y = (double)numel(yr, m->out_dims);
  if (strstr(m->op, "ConvTranspose")) {
    snprintf(cls, cap, "ConvTranspose");
    return xr > 1 && x[1] ? 2.0 * (double)numel(xr, x) * (double)numel(wr, w) / (double)x[1] : 0;
  }
  if (strstr(m->op, "Conv")) {
    if (xr < 3 || wr < 3 || !w[0] || !w[1]) return 0;
    /* the layout pass's NhwcConv has its channels last */
    int64_t group = x[strstr(m->op, "Nhwc") ? xr - 1 : 1] / w[1];
    bool one = numel(wr - 2, w + 2) == 1;
    if (group == 1) snprintf(cls, cap, "Conv dense %s", one ? "1x1" : "KxK");
    else if (w[1] == 1) snprintf(cls, cap, "Conv depthwise");
    else snprintf(cls, cap, "Conv grouped");
    return 2.0 * y * (double)numel(wr, w) / (double)w[0];
  }
  if (strstr(m->op, "MatMul")) {
    snprintf(cls, cap, "MatMul");
    return 2.0 * y * (double)x[xr - 1];
  }
  if (strstr(m->op, "Gemm")) {
    snprintf(cls, cap, "Gemm");
    int64_t rows = m->out_dims[0];
    return rows ? 2.0 * y * (double)numel(xr, x) / (double)rows : 0;
  }
  return 0;
}

static int by_ns(const void *a, const void *b) {
  const op_row *x = a, *y = b;
  return x->ns != y->ns ? (y->ns > x->ns ? 1 : -1) : strcmp(x->name, y->name);
}

static int summarize(const keel_node_mem *m, size_t n, const bench_args *a, bench_result *r) {
  for (size_t i = 0; i < n; i++) {
    op_row *o = row_for(&r->ops, &r->n_ops, m[i].op);
    if (!o) return fail("bench", KEEL_ERR_OUT_OF_MEMORY);
    o->nodes++, o->executions += m[i].executions, o->ns += m[i].ns;
    if (!strcmp(m[i].path, "main")) r->prof_ns += m[i].ns;
    char cls[64];
    double f = a->flops ? node_flops(&m[i], cls, sizeof cls) : 0;
    if (f <= 0) continue;
    op_row *c = row_for(&r->fl, &r->n_fl, cls);
    if (!c) return fail("bench", KEEL_ERR_OUT_OF_MEMORY);
    c->nodes++, c->executions += m[i].executions, c->ns += m[i].ns;
    c->flops += f * (double)m[i].executions;
  }
  if (r->n_ops) qsort(r->ops, r->n_ops, sizeof *r->ops, by_ns);
  if (r->n_fl) qsort(r->fl, r->n_fl, sizeof *r->fl, by_ns);
  return 0;
}

/* Separate runs under the profiler: per-node time and shapes. */
static int profiled_runs(keel_session_t *s, cli_inputs *in, const bench_args *a,
                         bench_result *r) {
  if (!a->profile_runs) return 0;
  keel_status st = keel_profile_start(s, KEEL_PROFILE_MEMORY);
  if (st) return fail("profile", st);
  double t0 = cli_now(), c0 = cpu_now();
  int rc = run_n(s, in, a->profile_runs, NULL, NULL);
  double wall = cli_now() - t0;
  r->wall_ns = (uint64_t)(wall * 1e9);
  r->prof_cpu_per_wall = wall > 0 ? (cpu_now() - c0) / wall : 0;
  keel_profile_stop(s);
  if (rc) return rc;
  size_t n = keel_profile_nodes(s, NULL, 0);
  keel_node_mem *m = calloc(n + 1, sizeof *m);
  if (!m) return fail("bench", KEEL_ERR_OUT_OF_MEMORY);
  keel_profile_nodes(s, m, n);
  rc = summarize(m, n, a, r);
  free(m);
  return rc;
}

/* ============================================================ printing */

static void print_ops(const bench_args *a, const bench_result *r) {
  double runs = (double)a->profile_runs, total = (double)r->prof_ns;
  printf("time by op type (%ld profiled run(s), not in the figures above; %.3f ms/run wall):\n",
         a->profile_runs, (double)r->wall_ns / runs / 1e6);
  printf("  %-24s %6s %10s %11s %7s\n", "op", "nodes", "execs/run", "ms/run", "share");
  for (size_t i = 0; i < r->n_ops; i++) {
    const op_row *o = &r->ops[i];
    printf("  %-24.24s %6llu %10.0f %11.3f %6.1f%%\n", o->name, (unsigned long long)o->nodes,
           (double)o->executions / runs, (double)o->ns / runs / 1e6,
           total > 0 ? 100.0 * (double)o->ns / total : 0.0);
  }
  double outside = (double)r->wall_ns - total;
  printf("  %-24s %6s %10s %11.3f %6.1f%% of wall\n", "(outside nodes)", "", "",
         outside / runs / 1e6, r->wall_ns ? 100.0 * outside / (double)r->wall_ns : 0.0);
  printf("  (shares of the top-level nodes' time; control-flow rows include their bodies)\n");
}

/* GFLOP/s on CPU time: node wall time scaled by the profiled runs' process
 * CPU / wall (an estimate that takes out the time a shared machine gives
 * to others; above 1 thread it is per CPU-second, i.e. per core). */
static double cpu_gflops(const op_row *c, const bench_result *r) {
  double cpu_ns = (double)c->ns * r->prof_cpu_per_wall;
  return cpu_ns > 0 ? c->flops / cpu_ns : 0;
}

static void flops_row(const char *name, uint64_t nodes, double flops, double ns,
                      const bench_args *a, const bench_result *r) {
  double runs = (double)a->profile_runs;
  op_row c = {.ns = (uint64_t)ns, .flops = flops};
  double g = cpu_gflops(&c, r);
  printf("  %-20s %6llu %11.3f %11.3f %9.1f %9.1f", name, (unsigned long long)nodes,
         flops / runs / 1e9, ns / runs / 1e6, ns > 0 ? flops / ns : 0.0, g);
  if (a->peak_gflops > 0) printf("   %5.1f%%", 100.0 * g / a->peak_gflops);
  printf("\n");
}

static void print_flops(const bench_args *a, const bench_result *r) {
  if (!r->n_fl) {
    printf("FLOPs: no Conv, ConvTranspose, MatMul or Gemm node ran\n");
    return;
  }
  printf("FLOPs by class (2 per multiply-add, from the shapes of each node's last run;\n"
         "  CPU: on CPU time, node time x the profiled runs' CPU/wall %.2f):\n", r->prof_cpu_per_wall);
  printf("  %-20s %6s %11s %11s %9s %9s%s\n", "class", "nodes", "GFLOP/run", "ms/run", "GFLOP/s",
         "CPU", a->peak_gflops > 0 ? "   of peak" : "");
  double tf = 0, tns = 0;
  uint64_t tn = 0;
  for (size_t i = 0; i < r->n_fl; i++) {
    const op_row *c = &r->fl[i];
    tf += c->flops, tns += (double)c->ns, tn += c->nodes;
    flops_row(c->name, c->nodes, c->flops, (double)c->ns, a, r);
  }
  flops_row("all of them", tn, tf, tns, a, r);
  if (a->peak_gflops > 0)
    printf("  (of peak: CPU-time GFLOP/s over --peak %.1f, e.g. fma_peak's 1-thread CPU-time figure)\n",
           a->peak_gflops);
}

static void print_result(const bench_args *a, const bench_result *r) {
  char b1[32], b2[32], b3[32];
  printf("model     %s\n", a->model);
  if (a->threads) printf("threads   %d (keel_options.threads)\n", a->threads);
  else printf("threads   default\n");
  printf("latency   median %.3f ms   p90 %.3f ms   min %.3f ms   mean %.3f ms\n",
         r->median * 1e3, r->p90 * 1e3, r->min * 1e3, r->mean * 1e3);
  printf("          over %ld timed run(s) after %ld warmup run(s)\n", a->iters, a->warmup);
  printf("rate      %.2f runs/s\n", r->median > 0 ? 1.0 / r->median : 0.0);
  printf("cpu       median %.3f ms per run (process CPU time, every thread)\n", r->cpu_median * 1e3);
  printf("memory    peak RSS %s   allocated peak %s   reserved peak %s\n",
         cli_bytes(r->peak_rss, b1, sizeof b1), cli_bytes(r->alloc_peak, b2, sizeof b2),
         cli_bytes(r->reserved_peak, b3, sizeof b3));
  if (r->device[0])
    printf("device    %s: allocated peak %s   reserved peak %s\n", r->device,
           cli_bytes(r->dev_alloc_peak, b1, sizeof b1), cli_bytes(r->dev_reserved_peak, b2, sizeof b2));
  char b4[32], b5[32];
  printf("bound     1.1 x weights %s + allocated peak less prepared weights + 16 MB = %s: peak RSS is %.2f of it\n",
         cli_bytes(r->weight_bytes, b4, sizeof b4), cli_bytes((uint64_t)rss_bound(r), b5, sizeof b5),
         (double)r->peak_rss / rss_bound(r));
  if (a->profile_runs) print_ops(a, r);
  if (a->profile_runs && a->flops) print_flops(a, r);
}

static void json_rows(FILE *f, const char *key, const op_row *rows, size_t n, double runs,
                      double total) {
  fprintf(f, ",\n \"%s\": [", key);
  for (size_t i = 0; i < n; i++) {
    const op_row *o = &rows[i];
    fprintf(f, "%s\n  {\"name\": \"%s\", \"nodes\": %llu, \"executions_per_run\": %.3f, "
               "\"ms_per_run\": %.6f, \"share\": %.6f, \"flop_per_run\": %.0f, \"gflops\": %.3f}",
            i ? "," : "", o->name, (unsigned long long)o->nodes, (double)o->executions / runs,
            (double)o->ns / runs / 1e6, total > 0 ? (double)o->ns / total : 0.0,
            o->flops / runs, o->ns ? o->flops / (double)o->ns : 0.0);
  }
  fprintf(f, "\n ]");
}

static void json_times(FILE *f, const char *key, const double *t, long n) {
  fprintf(f, ",\n \"%s\": [", key);
  for (long i = 0; i < n; i++) fprintf(f, "%s%.6f", i ? ", " : "", t[i] * 1e3);
  fprintf(f, "]");
}

static int write_json(const bench_args *a, const bench_result *r, const double *times,
                      const double *cpu) {
  FILE *f = fopen(a->json, "w");
  if (!f) {
    fprintf(stderr, "keel: cannot write %s\n", a->json);
    return 1;
  }
  fprintf(f, "{\"runtime\": \"keel\", \"threads\": %d, \"iters\": %ld, \"warmup\": %ld,\n"
             " \"median_ms\": %.6f, \"p90_ms\": %.6f, \"min_ms\": %.6f, \"mean_ms\": %.6f,"
             " \"runs_per_s\": %.3f,\n \"peak_rss\": %llu, \"allocated_peak\": %llu,"
             " \"reserved_peak\": %llu,\n \"weight_bytes\": %llu, \"rss_bound\": %.0f,"
             " \"profile_runs\": %ld, \"profile_wall_ms\": %.6f, \"cpu_median_ms\": %.6f",
          a->threads, a->iters, a->warmup, r->median * 1e3, r->p90 * 1e3, r->min * 1e3,
          r->mean * 1e3, r->median > 0 ? 1.0 / r->median : 0.0, (unsigned long long)r->peak_rss,
          (unsigned long long)r->alloc_peak, (unsigned long long)r->reserved_peak,
          (unsigned long long)r->weight_bytes, rss_bound(r), a->profile_runs,
          a->profile_runs ? (double)r->wall_ns / (double)a->profile_runs / 1e6 : 0.0,
          r->cpu_median * 1e3);
  if (r->device[0])
    fprintf(f, ",\n \"device\": \"%s\", \"device_allocated_peak\": %llu, \"device_reserved_peak\": %llu",
            r->device, (unsigned long long)r->dev_alloc_peak, (unsigned long long)r->dev_reserved_peak);
  json_times(f, "times_ms", times, a->iters);
  json_times(f, "cpu_times_ms", cpu, a->iters);
  double runs = a->profile_runs ? (double)a->profile_runs : 1.0;
  json_rows(f, "ops", r->ops, r->n_ops, runs, (double)r->prof_ns);
  json_rows(f, "flops", r->fl, r->n_fl, runs, (double)r->prof_ns);
  fprintf(f, "\n}\n");
  return fclose(f) ? 1 : 0;
}

/* ============================================================== command */

static int bench(keel_session_t *s, const bench_args *a) {
  cli_inputs in = {0};
  keel_status st = KEEL_OK;
  if (a->data) st = cli_load_data_dir(s, a->data, &in);
  for (size_t i = 0; i < a->n_inputs && !st; i++) st = cli_load_named(s, a->inputs[i], &in);
  if (!st) st = cli_generate_missing(s, &in, stdout);
  int rc = st ? fail("inputs", st) : 0;
  bench_result r = {0};
  double *times = calloc((size_t)a->iters, sizeof *times);
  double *cpu = calloc((size_t)a->iters, sizeof *cpu);
  if (!rc && (!times || !cpu)) rc = fail("bench", KEEL_ERR_OUT_OF_MEMORY);
  if (!rc) rc = timed_runs(s, &in, a, times, cpu, &r);
  if (!rc) rc = profiled_runs(s, &in, a, &r);
  if (!rc) print_result(a, &r);
  if (!rc && a->json) rc = write_json(a, &r, times, cpu);
  free(times);
  free(cpu);
  free(r.ops);
  free(r.fl);
  cli_inputs_free(&in);
  return rc;
}

int cmd_bench(int argc, char **argv) {
  bench_args a;
  int rc = parse(argc, argv, &a);
  if (rc) return rc;
  keel_options opts = {.size = sizeof opts, .mem_limit = a.mem_limit, .threads = a.threads, .device = a.device,
                       .flags = a.deterministic ? KEEL_OPT_DETERMINISTIC : 0};
  keel_session_t *s;
  keel_status st = keel_session_create(a.model, &opts, &s);
  if (st) return fail("load", st);
  rc = bench(s, &a);
  keel_session_destroy(s);
  uint64_t left = keel_process_bytes();
  if (left && !rc) {
    fprintf(stderr, "keel: after destroy keel still holds %llu bytes\n", (unsigned long long)left);
    rc = 1;
  }
  return rc;
}
