/* bench_svc.c: memory of a long-running service (issue 13), on the
 * width-varying conv model of tests/svc_model.h (a text-line recogniser in
 * miniature: [1, 1, 32, W] > Conv > Relu > Conv > ReduceMean).
 *
 *  varying  32 widths (100, 200, ... 3200) cycled for N runs (10,000):
 *           RSS after warm-up against its peak, reserved against the
 *           largest single-shape working set (a fresh session that only
 *           runs width 3200), releases and regrets of the trim policy.
 *  burst    20 runs at width 3200, then 380 at width 100, with the
 *           automatic trim on and off: reserved and RSS per run.
 *  steady   10,000 runs at width 100: segment releases (must be 0).
 *
 *   ./build/bench_svc [--runs N] [--plot FILE.svg] [--model FILE.onnx]
 *
 * --plot draws reserved and RSS per run of the burst and varying runs;
 * --model writes the model for bench/ort_svc.js (the same workload on ONNX
 * Runtime). RSS comes from /proc/self/statm, so figures are per process:
 * run one bench per process for clean numbers (this one runs the keel
 * workloads in sequence, each on a fresh session; RSS includes what the
 * earlier ones left to the C library, a few hundred KB).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "svc_model.h"

#define WIDTHS 32
#define WARMUP (WIDTHS * 10)

typedef struct series {
  double *reserved, *rss, *allocated;
  int n;
} series;

static series series_new(int n) {
  series s = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double)),
              calloc((size_t)n, sizeof(double)), 0};
  return s;
}

static void series_add(series *s, keel_session_t *k) {
  keel_stats st = svc_stats(k);
  s->reserved[s->n] = (double)st.reserved;
  s->allocated[s->n] = (double)st.allocated_peak;
  s->rss[s->n] = (double)svc_rss();
  s->n++;
  keel_stats_reset_peaks(k);
}

static void series_free(series *s) {
  free(s->reserved), free(s->rss), free(s->allocated);
}

static double mb(double b) { return b / 1048576.0; }

static uint64_t single_shape(int64_t w) {
  keel_session_t *s = svc_session(NULL);
  for (int r = 0; r < 5; r++) svc_run(s, w, NULL);
  uint64_t res = svc_stats(s).reserved;
  keel_session_destroy(s);
  return res;
}

static void varying(int runs, series *out) {
  uint64_t largest = single_shape(100 * WIDTHS);
  double base = (double)svc_rss(); /* the host's baseline, as for ONNX Runtime */
  keel_session_t *s = svc_session(NULL);
  double rss_min = 1e300, rss_max = 0, res_max = 0;
  for (int r = 0; r < runs; r++) {
    if (svc_run(s, 100 * (1 + (r * 7) % WIDTHS), NULL)) {
      fprintf(stderr, "run %d: %s\n", r, keel_last_error());
      exit(1);
    }
    series_add(out, s);
    if (r >= WARMUP) {
      rss_min = KEEL_CLI_MAX(0, rss_min < out->rss[r] ? rss_min : out->rss[r]);
      rss_max = KEEL_CLI_MAX(rss_max, out->rss[r]);
      res_max = KEEL_CLI_MAX(res_max, out->reserved[r]);
    }
  }
  keel_stats st = svc_stats(s);
  printf("varying: %d runs over %d widths (100..%d, in steps of 100, order r*7 mod 32)\n", runs,
         WIDTHS, 100 * WIDTHS);
  printf("  after %d warm-up runs: RSS %.1f..%.1f MB (lowest %.1f%% below the peak)\n", WARMUP,
         mb(rss_min), mb(rss_max), 100.0 * (rss_max - rss_min) / rss_max);
  printf("  native memory (RSS minus the %.1f MB before the session): %.1f..%.1f MB\n",
         mb(base), mb(rss_min - base), mb(rss_max - base));
  printf("  reserved at most %.1f MB; largest single shape (width %d alone) %.1f MB: %.2fx\n",
         mb(res_max), 100 * WIDTHS, mb((double)largest), res_max / (double)largest);
  printf("  trim: %llu releases, %llu regrets, window now %llu runs; %llu segment grows in all\n",
         (unsigned long long)st.n_auto_release, (unsigned long long)st.n_trim_regret,
         (unsigned long long)st.trim_window, (unsigned long long)st.n_segment_alloc);
  keel_session_destroy(s);
}

static void burst(unsigned flags, series *out, double small) {
  keel_options o = {.size = sizeof o, .flags = flags};
  keel_session_t *s = svc_session(&o);
  for (int r = 0; r < 400; r++) {
    svc_run(s, r < 20 ? 3200 : 100, NULL);
    series_add(out, s);
  }
  int within = -1;
  if (small <= 0) small = out->reserved[399]; /* the small workload's steady state */
  for (int r = 20; r < 400 && within < 0; r++)
    if (out->reserved[r] <= 1.5 * small) within = r - 19;
  printf("burst (auto trim %s): reserved %.1f MB after the burst, %.1f MB at the end; within "
         "1.5x of the small steady state (%.1f MB) after %d small runs (-1: never); RSS %.1f MB "
         "-> %.1f MB\n",
         flags ? "off" : "on", mb(out->reserved[19]), mb(out->reserved[399]), mb(small), within,
         mb(out->rss[19]), mb(out->rss[399]));
  keel_session_destroy(s);
}

static void steady(int runs) {
  keel_session_t *s = svc_session(NULL);
  for (int r = 0; r < runs; r++) svc_run(s, 100, NULL);
  keel_stats st = svc_stats(s);
  printf("steady: %d runs at width 100: %llu segment grows, %llu releases, reserved %.1f MB\n",
         runs, (unsigned long long)st.n_segment_alloc, (unsigned long long)st.n_segment_free,
         mb((double)st.reserved));
  keel_session_destroy(s);
}

static int write_model(const char *path) {
  size_t len;
  uint8_t *bytes = mb_model(svc_graph(), 13, &len);
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(bytes, 1, len, f) == len;
  if (f) fclose(f);
  free(bytes);
  if (!ok) fprintf(stderr, "cannot write %s\n", path);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  int runs = 10000;
  const char *plot = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--plot") && i + 1 < argc) plot = argv[++i];
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) return write_model(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_svc [--runs N] [--plot FILE.svg] [--model FILE.onnx]\n");
      return 2;
    }
  }
  if (runs < WARMUP + 1) runs = WARMUP + 1;
  series on = series_new(400), off = series_new(400), var = series_new(runs);
  burst(0, &on, 0);
  burst(KEEL_OPT_NO_AUTO_TRIM, &off, on.reserved[399]);
  steady(runs);
  varying(runs, &var);
  int rc = 0;
  if (plot) {
    cli_series b[] = {{"reserved, auto trim on", "#1f77b4", on.reserved, 400, 0},
                      {"RSS, auto trim on", "#2ca02c", on.rss, 400, 0},
                      {"reserved, auto trim off", "#d62728", off.reserved, 400, 0},
                      {"RSS, auto trim off", "#ff7f0e", off.rss, 400, 0}};
    cli_series v[] = {{"reserved", "#1f77b4", var.reserved, (size_t)var.n, 0},
                      {"RSS", "#2ca02c", var.rss, (size_t)var.n, 0},
                      {"allocated peak of the run", "#9467bd", var.allocated, (size_t)var.n, 0}};
    cli_panel panels[] = {
        {"burst: 20 runs at width 3200, then 380 at width 100", "run", b, 4},
        {"varying: 32 widths (100..3200) cycled", "run", v, 3}};
    rc = cli_svg_write(plot, "keel: reserved memory returns by itself (bench_svc)", panels, 2);
    if (!rc) printf("plot   %s\n", plot);
  }
  series_free(&on), series_free(&off), series_free(&var);
  return rc;
}
