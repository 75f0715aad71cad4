/* cmd_memcheck.c: `keel memcheck`: run a model N times and watch memory.
 *
 * After every run (outputs released) it prints allocated and reserved
 * bytes. Allocated bytes must not grow after the first run; when they do,
 * the verdict lists the blocks allocated since the first run that are still
 * alive, by owner (graph path, node, value, iteration). With --loop NAME it
 * also follows that loop's iterations in the last run: when allocated bytes
 * grow there, it names the blocks made inside the loop two or more
 * iterations ago that are still alive and that no running graph refers to
 * (left behind, as opposed to carried on). --plot draws both as SVG. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef struct mc_args {
  const char *model, *data, *plot, *loop, *plant;
  long iters;
  size_t mem_limit;
  int threads;
  const char *device;          /* --device: keel_options.device            */
  bool leak;
} mc_args;

/* Per-iteration figures of the chosen loop, in the current run. */
typedef struct iter_log {
  const char *loop;
  keel_session_t *s;
  double *alloc, *reserved;
  size_t n, cap;
  uint64_t growth_report_bytes;
  char *growth_report;
} iter_log;

static void on_iteration(void *ud, const char *loop, int64_t it, size_t allocated) {
  iter_log *L = ud;
  if (!L->loop || strcmp(loop, L->loop)) return;
  if (it == 0) L->n = 0;
  if (L->n == L->cap) {
    size_t nc = L->cap ? L->cap * 2 : 256;
    double *a = realloc(L->alloc, nc * sizeof *a), *r = a ? realloc(L->reserved, nc * sizeof *r) : NULL;
    if (a) L->alloc = a;
    if (!a || !r) return;
    L->reserved = r;
    L->cap = nc;
  }
  keel_stats st = {.size = sizeof st};
  keel_stats_get(L->s, &st);
  L->alloc[L->n] = (double)allocated;
  L->reserved[L->n++] = (double)st.reserved;
  /* blocks made inside the loop two or more iterations ago and still alive */
  if (it >= 2 && L->n >= 3 && L->alloc[L->n - 1] > L->alloc[1]) {
    keel_live_filter f = {.size = sizeof f, .inside_node = L->loop, .before_iteration = it - 1,
                          .unreferenced = 1};
    free(L->growth_report);
    L->growth_report = NULL;
    keel_mem_live_report(L->s, &f, 0, &L->growth_report, &L->growth_report_bytes);
  }
}

static int parse(int argc, char **argv, mc_args *a) {
  memset(a, 0, sizeof *a);
  a->iters = 10;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    bool v = i + 1 < argc;
    if (!strcmp(s, "--data") && v) a->data = argv[++i];
    else if (!strcmp(s, "--plot") && v) a->plot = argv[++i];
    else if (!strcmp(s, "--loop") && v) a->loop = argv[++i];
    else if (!strcmp(s, "--debug-leak-subgraphs")) a->leak = true;   /* test-only */
    else if (!strcmp(s, "--debug-plant-leak") && v) a->plant = argv[++i]; /* test-only */
    else if (!strcmp(s, "--iters") && v) {
      char *end;
      a->iters = strtol(argv[++i], &end, 10);
      if (*end || a->iters < 1) return cli_usage("memcheck", "--iters needs a positive number");
    } else if (!strcmp(s, "--threads") && v) {
      if (!cli_parse_threads(argv[++i], &a->threads)) return cli_usage("memcheck", "bad --threads");
    } else if (!strcmp(s, "--device") && i + 1 < argc) {
      a->device = argv[++i];
    } else if (!strcmp(s, "--mem-limit") && v) {
      if (!cli_parse_size(argv[++i], &a->mem_limit)) return cli_usage("memcheck", "bad --mem-limit");
    } else if (s[0] == '-') return cli_usage("memcheck", "unknown or incomplete option");
    else if (!a->model) a->model = s;
    else return cli_usage("memcheck", "more than one model given");
  }
  if (!a->model || !(cli_is_file(a->model) || cli_is_shard_dir(a->model)))
    return cli_usage("memcheck", "no model file (or folder of rank_R.onnx) given");
  if (a->data && !cli_is_dir(a->data)) return cli_usage("memcheck", "--data is not a folder");
  return 0;
}

static int plot(const mc_args *a, const double *alloc, const double *res, long n, const iter_log *L) {
  cli_series runs[2] = {{"allocated", "#1f77b4", alloc, (size_t)n, 0},
                        {"reserved", "#e8710a", res, (size_t)n, 1}};
  cli_series its[2] = {{"allocated", "#1f77b4", L->alloc, L->n, 0},
                       {"reserved", "#e8710a", L->reserved, L->n, 1}};
  char t2[256], title[512];
  snprintf(t2, sizeof t2, "Iterations of loop '%s' (last run)", a->loop ? a->loop : "");
  const char *base = a->model + strlen(a->model); /* the last two path parts */
  for (int slashes = 0; base > a->model && slashes < 2; base--)
    if (base[-1] == '/' && ++slashes == 2) break;
  snprintf(title, sizeof title, "keel memcheck: %s (%ld runs)", base, n);
  cli_panel panels[2] = {{"Memory after each run", "run", runs, 2}, {t2, "iteration", its, 2}};
  int np = a->loop && L->n ? 2 : 1;
  if (cli_svg_write(a->plot, title, panels, np)) {
    fprintf(stderr, "keel: cannot write %s\n", a->plot);
    return 1;
  }
  printf("plot   %s\n", a->plot);
  return 0;
}

/* The runs; fills alloc/res per run and returns the first run at which
 * allocated bytes, host or device, exceeded those of run 1 (0 = none). */
static keel_status runs(keel_session_t *s, const mc_args *a, cli_inputs *in, double *alloc,
                        double *res, long *grew_at, uint64_t *mark, uint64_t *dev_first) {
  size_t nout = keel_session_output_count(s);
  keel_value_t **outs = calloc(nout + 1, sizeof *outs);
  cli_progress pr;
  cli_progress_start(&pr, "memcheck", a->iters);
  keel_status st = KEEL_OK;
  for (long it = 1; it <= a->iters && !st; it++) {
    st = keel_run(s, in->names, in->values, in->n, outs);
    for (size_t i = 0; i < nout; i++) keel_value_release(outs[i]), outs[i] = NULL;
    if (st) break;
    keel_stats ks = {.size = sizeof ks}, kd = {.size = sizeof kd};
    keel_stats_get(s, &ks);
    /* a session with a device: its heap's figures too, under the same rule */
    const char *dev = NULL;
    bool has_dev = keel_stats_get_device(s, &kd, &dev) == KEEL_OK;
    alloc[it - 1] = (double)ks.allocated, res[it - 1] = (double)ks.reserved;
    char b1[32], b2[32], b3[32], b4[32], dl[128] = "";
    if (has_dev)
      snprintf(dl, sizeof dl, "; %s: allocated %s, reserved %s", dev, cli_bytes(kd.allocated, b3, sizeof b3),
               cli_bytes(kd.reserved, b4, sizeof b4));
    cli_progress_clear(&pr);
    printf("run %ld: allocated %s, reserved %s%s\n", it, cli_bytes(ks.allocated, b1, sizeof b1),
           cli_bytes(ks.reserved, b2, sizeof b2), dl);
    fflush(stdout);
    if (it == 1) *mark = keel_mem_mark(s), *dev_first = kd.allocated;
    else if ((ks.allocated > (uint64_t)alloc[0] || (has_dev && kd.allocated > *dev_first)) && !*grew_at)
      *grew_at = it;
    cli_progress_update(&pr, it);
  }
  cli_progress_end(&pr);
  free(outs);
  return st;
}

static int verdict(keel_session_t *s, long grew_at, uint64_t mark, const iter_log *L) {
  int rc = 0;
  if (grew_at) {
    char why[128];
    snprintf(why, sizeof why, "allocated memory grew after the first run (first at run %ld)", grew_at);
    rc = cli_leak_report(s, mark, why, "run 1");
  }
  if (L->growth_report && L->growth_report_bytes) {
    char b[32];
    printf("verdict: LEAK: allocated memory grew across the iterations of loop '%s'; %s made "
           "inside it two or more iterations earlier was still alive:\n%s",
           L->loop, cli_bytes(L->growth_report_bytes, b, sizeof b), L->growth_report);
    rc = 1;
  }
  if (!rc) printf("verdict: steady: allocated memory did not grow after the first run%s\n",
                  L->loop ? " nor across loop iterations" : "");
  return rc;
}

static int memcheck_model(mc_args a, const char *model) {
  a.model = model;
  int rc = 0;
  iter_log L = {.loop = a.loop};
  keel_options opts = {.size = sizeof opts, .mem_limit = a.mem_limit, .threads = a.threads, .device = a.device, .on_iteration = on_iteration,
                       .iteration_ud = &L};
  keel_session_t *s;
  keel_status st = keel_session_create(a.model, &opts, &s);
  if (st) {
    fprintf(stderr, "keel: %s%s: %s\n", cli_dist_tag(), keel_status_str(st), keel_last_error());
    return 1;
  }
  L.s = s;
  keel_debug_leak_subgraph_results(s, a.leak);
  if (a.plant) st = keel_debug_plant_leak(s, a.plant);
  cli_inputs in = {0};
  if (!st && a.data) st = cli_load_data_dir(s, a.data, &in);
  if (!st) st = cli_generate_missing(s, &in, stdout);
  double *alloc = calloc((size_t)a.iters, sizeof *alloc), *res = calloc((size_t)a.iters, sizeof *res);
  long grew_at = 0;
  uint64_t mark = 0, dev_first = 0;
  if (!st) st = runs(s, &a, &in, alloc, res, &grew_at, &mark, &dev_first);
  if (st) {
    fprintf(stderr, "keel: %s%s: %s\n", cli_dist_tag(), keel_status_str(st), keel_last_error());
    rc = 1;
  } else {
    rc = verdict(s, grew_at, mark, &L);
    if (a.plot && plot(&a, alloc, res, a.iters, &L)) rc = 1;
  }
  free(alloc), free(res), free(L.alloc), free(L.reserved), free(L.growth_report);
  cli_inputs_free(&in);
  keel_session_destroy(s);
  return rc;
}

/* Under mpirun every rank checks and reports its own memory (mpirun
 * --tag-output tells the lines apart). */
int cmd_memcheck(int argc, char **argv) {
  mc_args a;
  int rc = parse(argc, argv, &a);
  if (rc) return rc;
  char model[4200];
  cli_dist_keep_stdout();
  rc = cli_dist_begin(a.model, model, sizeof model);
  if (!rc) rc = memcheck_model(a, model);
  return cli_dist_end(rc);
}
