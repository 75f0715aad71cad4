/* test_observe.c: seeing where memory goes.
 *  - the per-node memory report adds up to the allocator's own figures on a
 *    control-flow model (every block attributed exactly once);
 *  - a planted leak (test-only hook) is named exactly: graph path, node,
 *    value, iterations; a healthy model reports nothing;
 *  - the memory cap: a run over the cap fails cleanly, names the node and
 *    the figures, the next (smaller) run in the same session succeeds, and
 *    nothing is left allocated;
 *  - tags off (KEEL_OPT_NO_OWNER_TAGS) gives the same results. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

static const char *const NAMES[3] = {"h0", "start", "max_len"};

static keel_session_t *greedy(const keel_options *o) {
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create("tests/models/greedy_decode/model.onnx", o, &s));
  return s;
}

static void greedy_inputs(keel_session_t *s, keel_value_t **in) {
  float h0[8] = {0.3f, -1, 0.5f, 2, -0.7f, 0.1f, 1.1f, -0.2f};
  int64_t start = 1, max_len = 12;
  in[0] = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, 8}, h0);
  in[1] = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, &start);
  in[2] = mb_tensor(s, KEEL_INT64, 0, NULL, &max_len);
}

static keel_stats stats(keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  return st;
}

static keel_status run(keel_session_t *s, keel_value_t **in, int64_t *n_tokens) {
  keel_value_t *out[2] = {0};
  keel_status st = keel_run(s, NAMES, in, 3, out);
  if (!st && n_tokens) *n_tokens = keel_value_numel(out[0]);
  keel_value_release(out[0]), keel_value_release(out[1]);
  return st;
}

static void report_sums_match_allocator(void) {
  keel_session_t *s = greedy(NULL);
  if (!s) return;
  keel_value_t *in[3];
  greedy_inputs(s, in);
  keel_stats before = stats(s);
  CHECK_OK(keel_profile_start(s, KEEL_PROFILE_MEMORY | KEEL_PROFILE_TRACE));
  for (int r = 0; r < 3; r++) CHECK_OK(run(s, in, NULL));
  keel_profile_stop(s);
  keel_stats after = stats(s);
  keel_node_mem m[256];
  size_t n = keel_profile_nodes(s, m, 256);
  CHECK(n > 10 && n <= 256);
  uint64_t bytes = 0, allocs = 0, loop_runs = 0, body_runs = 0, ob, oa;
  for (size_t i = 0; i < n; i++) {
    bytes += m[i].bytes_allocated, allocs += m[i].n_allocs;
    if (!strcmp(m[i].op, "Loop")) loop_runs = m[i].executions;
    if ((!strcmp(m[i].op, "Gemm") || !strcmp(m[i].op, "FusedMatMul")) && strstr(m[i].path, "body"))
      body_runs = m[i].executions; /* the Gemm, fused with its bias and activation */
    CHECK(m[i].peak_live >= m[i].live_now);
  }
  keel_profile_other(s, &ob, &oa);
  CHECK(bytes + ob == after.bytes_allocated_total - before.bytes_allocated_total);
  CHECK(allocs + oa == after.n_alloc - before.n_alloc);
  CHECK(loop_runs == 3);
  CHECK(body_runs > loop_runs); /* summed over iterations */
  char *text = NULL;
  CHECK_OK(keel_profile_mem_report(s, 5, &text));
  CHECK(text && strstr(text, "all nodes") && strstr(text, "peak live"));
  keel_free(text);
  char *json = NULL;
  CHECK_OK(keel_profile_trace_json(s, &json));
  CHECK(json && strstr(json, "\"ph\": \"X\"") && strstr(json, "\"allocated\"") &&
        strstr(json, "\"reserved\""));
  keel_free(json);
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
}

/* Every line of a leak report names the planted value; healthy runs report
 * nothing. */
static void planted_leak_is_named(void) {
  keel_session_t *s = greedy(NULL);
  if (!s) return;
  keel_value_t *in[3];
  greedy_inputs(s, in);
  CHECK_OK(run(s, in, NULL));
  uint64_t mark = keel_mem_mark(s);
  CHECK_OK(run(s, in, NULL));
  keel_live_filter f = {.size = sizeof f, .since = mark};
  char *rep = NULL;
  uint64_t bytes = 1;
  CHECK_OK(keel_mem_live_report(s, &f, 0, &rep, &bytes));
  CHECK(bytes == 0 && rep && strstr(rep, "no live blocks"));
  keel_free(rep);
  CHECK_STATUS(keel_debug_plant_leak(s, "no_such_value"), KEEL_ERR_INVALID_ARG);
  CHECK_OK(keel_debug_plant_leak(s, "/cell/Add_2_output_0"));
  int64_t tokens = 0;
  CHECK_OK(run(s, in, &tokens));
  CHECK_OK(keel_mem_live_report(s, &f, 0, &rep, &bytes));
  CHECK(bytes > 0);
  int lines = 0;
  for (char *l = rep ? strtok(rep, "\n") : NULL; l; l = strtok(NULL, "\n"), lines++)
    CHECK(strstr(l, "main/Loop/body: node '/cell/Add_2' (Add) value '/cell/Add_2_output_0' iteration"));
  CHECK(lines == tokens - 1); /* one block per iteration of the decode loop */
  keel_free(rep);
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_session_destroy(s); /* the planted references die with the session */
}

/* A cap too small for a large input, then a small input, one session.
 * Inputs wrap caller memory, so only the model's own tensors count. */
static keel_status run_concat(keel_session_t *s, float *x, int64_t n, double *y0) {
  keel_value_t *in[1] = {NULL}, *out[1] = {NULL};
  keel_status st = keel_tensor_wrap(s, KEEL_FLOAT, 1, &n, x, NULL, NULL, &in[0]);
  if (!st) st = keel_run(s, (const char *[]){"x"}, in, 1, out);
  if (!st) *y0 = keel_value_at(out[0], n); /* the second copy's first element */
  keel_value_release(out[0]);
  keel_value_release(in[0]);
  return st;
}

static void memory_cap(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){-1});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_node *c = mb_add(g, "Concat", "x,x", "c");
  mb_name(c, "twice");
  mb_attr_i(c, "axis", 0);
  mb_name(mb_add(g, "Relu", "c", "y"), "relu");
  keel_options o = {.size = sizeof o, .mem_limit = 8u << 20};
  keel_session_t *s = mb_session_opts(g, 13, &o);
  CHECK(s != NULL);
  if (!s) return;
  int64_t big = 4 << 20; /* 16 MB in, 32 MB concatenated: over the cap */
  float *x = calloc((size_t)big, sizeof *x);
  x[0] = 3;
  double y0 = 0;
  CHECK_STATUS(run_concat(s, x, big, &y0), KEEL_ERR_OUT_OF_MEMORY);
  const char *e = keel_last_error();
  CHECK(strstr(e, "'twice' (Concat)") && strstr(e, "33554432 bytes") && strstr(e, "cap"));
  keel_stats st = stats(s);
  CHECK(st.allocated == 0 && st.reserved <= o.mem_limit && st.n_oom >= 1);
  CHECK_OK(run_concat(s, x, 1000, &y0)); /* the same session, a size that fits */
  CHECK(y0 == 3);
  st = stats(s);
  CHECK(st.allocated == 0 && st.reserved_peak <= o.mem_limit);
  /* raising the cap lets the large run through */
  keel_mem_set_limit(s, 64u << 20);
  CHECK_OK(run_concat(s, x, big, &y0));
  CHECK(stats(s).allocated == 0);
  free(x);
  keel_session_destroy(s);
}

/* With tags off, runs give the same results and reports name the session. */
static void tags_off(void) {
  keel_options o = {.size = sizeof o, .flags = KEEL_OPT_NO_OWNER_TAGS};
  keel_session_t *s = greedy(&o), *t = greedy(NULL);
  if (!s || !t) return;
  keel_value_t *a[3], *b[3];
  greedy_inputs(s, a);
  greedy_inputs(t, b);
  int64_t na = 0, nb = 0;
  CHECK_OK(run(s, a, &na));
  CHECK_OK(run(t, b, &nb));
  CHECK(na == nb && na > 1);
  for (int i = 0; i < 3; i++) keel_value_release(a[i]), keel_value_release(b[i]);
  keel_session_destroy(s);
  keel_session_destroy(t);
}

int main(void) {
  report_sums_match_allocator();
  planted_leak_is_named();
  memory_cap();
  tags_off();
  return check_report();
}
