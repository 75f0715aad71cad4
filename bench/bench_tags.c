/* bench_tags.c: what owner tags cost. A model of many small nodes (a chain
 * of Add/Mul/Relu on a 16-element tensor, inside a Loop so tags also carry
 * iterations) runs on two sessions, tags on and off, in alternating rounds
 * on this (noisy, shared) machine; it prints the median time per run of
 * each and the median of the per-round ratios.
 *
 *   ./build/bench_tags [rounds] [runs per round]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "keel.h"
#include "keel_stats.h"
#include "mb.h"

#define CHAIN 300
#define ITERS 10

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Loop(ITERS) body: v = Relu(v * a + b) repeated CHAIN times. */
static mb_graph *model(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "v0", KEEL_FLOAT, 1, (int64_t[]){16});
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  char prev[32] = "v0", cur[32], t1[32], t2[32];
  for (int k = 0; k < CHAIN; k++) {
    snprintf(t1, sizeof t1, "m%d", k), snprintf(t2, sizeof t2, "a%d", k);
    snprintf(cur, sizeof cur, k == CHAIN - 1 ? "v_out" : "v%d", k + 1);
    char ins[96];
    snprintf(ins, sizeof ins, "%s,sa", prev);
    mb_add(b, "Mul", ins, t1);
    snprintf(ins, sizeof ins, "%s,sb", t1);
    mb_add(b, "Add", ins, t2);
    mb_add(b, "Relu", t2, cur);
    snprintf(prev, sizeof prev, "%s", cur);
  }
  mb_output(b, "v_out", KEEL_FLOAT, 1, (int64_t[]){16});
  mb_add(b, "Identity", "c", "c_out");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){16});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  float sa = 0.999f, sb = 0.001f;
  int64_t M = ITERS;
  mb_init(g, "sa", KEEL_FLOAT, 0, NULL, &sa);
  mb_init(g, "sb", KEEL_FLOAT, 0, NULL, &sb);
  mb_init(g, "M", KEEL_INT64, 0, NULL, &M);
  mb_attr_g(mb_add(g, "Loop", "M,,x", "y"), "body", b);
  return g;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double time_runs(keel_session_t *s, keel_value_t *x, int runs) {
  double t0 = now();
  for (int r = 0; r < runs; r++) {
    keel_value_t *out[1] = {0};
    if (keel_run(s, (const char *[]){"x"}, &x, 1, out)) {
      fprintf(stderr, "run failed: %s\n", keel_last_error());
      exit(1);
    }
    keel_value_release(out[0]);
  }
  return (now() - t0) / runs;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 21, runs = argc > 2 ? atoi(argv[2]) : 20;
  keel_options off = {.size = sizeof off, .flags = KEEL_OPT_NO_OWNER_TAGS};
  keel_session_t *s_on = mb_session(model(), 13), *s_off = mb_session_opts(model(), 13, &off);
  if (!s_on || !s_off) return 1;
  float xs[16];
  for (int i = 0; i < 16; i++) xs[i] = (float)i;
  keel_value_t *x_on = mb_tensor(s_on, KEEL_FLOAT, 1, (int64_t[]){16}, xs);
  keel_value_t *x_off = mb_tensor(s_off, KEEL_FLOAT, 1, (int64_t[]){16}, xs);
  time_runs(s_on, x_on, runs), time_runs(s_off, x_off, runs); /* warm up */
  double *on = calloc((size_t)rounds, sizeof *on), *offt = calloc((size_t)rounds, sizeof *offt),
         *ratio = calloc((size_t)rounds, sizeof *ratio);
  for (int r = 0; r < rounds; r++) {
    if (r % 2) offt[r] = time_runs(s_off, x_off, runs), on[r] = time_runs(s_on, x_on, runs);
    else on[r] = time_runs(s_on, x_on, runs), offt[r] = time_runs(s_off, x_off, runs);
    ratio[r] = on[r] / offt[r];
  }
  int nodes = 3 * CHAIN * ITERS;
  double mr = median(ratio, rounds), mon = median(on, rounds), moff = median(offt, rounds);
  printf("model: a Loop of %d iterations over %d small nodes: %d node executions per run\n",
         ITERS, 3 * CHAIN + 1, nodes);
  printf("tags on : %.1f us/run (%.0f ns per node)\n", mon * 1e6, mon * 1e9 / nodes);
  printf("tags off: %.1f us/run (%.0f ns per node)\n", moff * 1e6, moff * 1e9 / nodes);
  printf("on/off ratio: median %.3f over %d alternating rounds of %d runs (min %.3f, max %.3f)\n",
         mr, rounds, runs, ratio[0], ratio[rounds - 1]);
  keel_value_release(x_on), keel_value_release(x_off);
  keel_session_destroy(s_on), keel_session_destroy(s_off);
  free(on), free(offt), free(ratio);
  return 0;
}
