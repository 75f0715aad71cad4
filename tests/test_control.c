/* test_control.c: control flow with memory that holds steady.
 *
 *  - If inside a Loop of 1000 iterations whose branches make different
 *    sizes: allocated bytes read by the per-iteration hook do not grow. The
 *    same model with the test-only leak switch on (branch results kept
 *    alive, the detector-training bug) must fail that check.
 *  - Loop > If > Loop > If, four levels, against a C reference.
 *  - Scan (opset 9) with reversed input and an output on axis 1.
 *  - Loop-carried values whose shape changes every iteration, with a
 *    value_info that lies about the shape.
 *  - A stale parent frame is reported (KEEL_ERR_STALE), never read.
 *  - After every run allocated bytes return to the same figure, and to zero
 *    after destroy.
 */
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "mb.h"

static const int64_t ONE[1] = {1};

/* ======================================================= hook records */

typedef struct hook_log {
  int64_t n;
  size_t first, max_after_warmup, last;
} hook_log;

static void on_iter(void *ud, const char *loop, int64_t it, size_t bytes) {
  hook_log *h = ud;
  (void)loop;
  if (h->n == 0) h->first = bytes;
  if (it >= 2 && bytes > h->max_after_warmup) h->max_after_warmup = bytes;
  if (it == 2) h->max_after_warmup = bytes;
  h->last = bytes;
  h->n++;
}

/* ============================================ If inside a 1000-Loop */

/* body(i, cond, acc): y = If(i % 2 == 0) then Concat(x, x) [2n] else x * 2 [n];
 * acc' = acc + ReduceSum(y). */
static mb_graph *if_in_loop_body(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "acc", KEEL_FLOAT, 1, ONE);
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "acc_out", KEEL_FLOAT, 1, ONE);
  int64_t two = 2, zero = 0;
  mb_init(b, "two", KEEL_INT64, 0, NULL, &two);
  mb_init(b, "zero", KEEL_INT64, 0, NULL, &zero);
  mb_add(b, "Mod", "i,two", "r");
  mb_add(b, "Equal", "r,zero", "even");
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "y", KEEL_FLOAT, -1, NULL);
  mb_attr_i(mb_add(t, "Concat", "x,x", "y"), "axis", 0);
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "y2", KEEL_FLOAT, -1, NULL);
  float f2 = 2;
  mb_init(e, "f2", KEEL_FLOAT, 0, NULL, &f2);
  mb_add(e, "Mul", "x,f2", "y2");
  mb_node *n = mb_add(b, "If", "even", "y");
  mb_name(n, "branch");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  mb_attr_i(mb_add(b, "ReduceSum", "y", "s"), "keepdims", 1);
  mb_add(b, "Add", "acc,s", "acc_out");
  mb_add(b, "Identity", "c", "c_out");
  return b;
}

static keel_session_t *if_in_loop(const keel_options *opts) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){256});
  mb_input(g, "M", KEEL_INT64, 0, NULL);
  mb_output(g, "acc", KEEL_FLOAT, -1, NULL);
  float z = 0;
  uint8_t t = 1;
  mb_init(g, "acc0", KEEL_FLOAT, 1, ONE, &z);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_node *n = mb_add(g, "Loop", "M,true,acc0", "acc");
  mb_name(n, "loop");
  mb_attr_g(n, "body", if_in_loop_body());
  return mb_session_opts(g, 13, opts);
}

/* Runs the model once with the hook on; returns the run status. */
static keel_status run_if_loop(keel_session_t *s, int64_t iters, double *acc) {
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = 1;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){256}, x),
                         mb_tensor(s, KEEL_INT64, 0, NULL, &iters)};
  keel_value_t *out[1] = {0};
  keel_status st = keel_run(s, (const char *[]){"x", "M"}, in, 2, out);
  if (!st) *acc = keel_value_at(out[0], 0);
  keel_value_release(out[0]);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  return st;
}

static void if_inside_loop_is_steady(void) {
  hook_log log = {0};
  keel_options o = {.size = sizeof o, .on_iteration = on_iter, .iteration_ud = &log};
  keel_session_t *s = if_in_loop(&o);
  CHECK(s != NULL);
  if (!s) return;
  double acc = 0;
  CHECK_OK(run_if_loop(s, 1000, &acc));
  CHECK(log.n == 1000);
  CHECK_NEAR(acc, 500 * 512.0 + 500 * 512.0, 1e-3); /* even: 2n ones, odd: n twos */
  /* from the third iteration on, allocated bytes never exceed what they
   * were there: nothing an iteration made survives it */
  CHECK(log.last == log.max_after_warmup);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  CHECK(st.allocated == 0);
  keel_session_destroy(s);
}

/* The broken variant: the leak switch keeps every branch result alive, and
 * the same check must catch it. */
static void leak_switch_is_caught(void) {
  hook_log log = {0};
  keel_options o = {.size = sizeof o, .on_iteration = on_iter, .iteration_ud = &log};
  keel_session_t *s = if_in_loop(&o);
  CHECK(s != NULL);
  if (!s) return;
  s->debug_leak_branch_results = true;
  double acc = 0;
  CHECK_OK(run_if_loop(s, 1000, &acc));
  CHECK(log.last > log.first + 100 * 256 * sizeof(float)); /* grew per iteration */
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  CHECK(st.allocated > 0); /* and survived the run */
  keel_session_destroy(s);
}

/* ====================================== Loop > If > Loop > If, 4 deep */

static double ref4(double x, int n_outer, int n_inner) {
  double v = x;
  for (int i = 0; i < n_outer; i++) {
    if (i % 2 == 0) { /* level 2: then runs the inner loop */
      for (int j = 0; j < n_inner; j++) v = (j % 2) ? v + j : v - 1;
    } else {
      v = v * 2;
    }
  }
  return v;
}

/* Builds: Loop(n_outer) body_i: If(i even) then Loop(n_inner) body_j:
 * If(j odd) then v+j else v-1 ; else v*2. */
static keel_session_t *four_levels(void) {
  int64_t two = 2, zero = 0, one = 1;
  float m1 = 1, f2 = 2;
  /* level 4 branches */
  mb_graph *t4 = mb_graph_new("t4");
  mb_output(t4, "a4", KEEL_FLOAT, -1, NULL);
  mb_add(t4, "Add", "v3,jf", "a4");
  mb_graph *e4 = mb_graph_new("e4");
  mb_output(e4, "b4", KEEL_FLOAT, -1, NULL);
  mb_init(e4, "m1", KEEL_FLOAT, 0, NULL, &m1);
  mb_add(e4, "Sub", "v3,m1", "b4");
  /* level 3: inner loop body */
  mb_graph *b3 = mb_graph_new("b3");
  mb_input(b3, "j", KEEL_INT64, 0, NULL);
  mb_input(b3, "c3", KEEL_BOOL, 0, NULL);
  mb_input(b3, "v3", KEEL_FLOAT, -1, NULL);
  mb_output(b3, "c3o", KEEL_BOOL, 0, NULL);
  mb_output(b3, "v3o", KEEL_FLOAT, -1, NULL);
  mb_init(b3, "two3", KEEL_INT64, 0, NULL, &two);
  mb_init(b3, "one3", KEEL_INT64, 0, NULL, &one);
  mb_add(b3, "Mod", "j,two3", "jr");
  mb_add(b3, "Equal", "jr,one3", "odd");
  mb_attr_i(mb_add(b3, "Cast", "j", "jf"), "to", KEEL_FLOAT);
  mb_node *if4 = mb_add(b3, "If", "odd", "v3o");
  mb_name(if4, "if4");
  mb_attr_g(if4, "then_branch", t4);
  mb_attr_g(if4, "else_branch", e4);
  mb_add(b3, "Identity", "c3", "c3o");
  /* level 2 branches: then = inner loop over v1, else = v1 * 2 */
  mb_graph *t2 = mb_graph_new("t2");
  mb_output(t2, "a2", KEEL_FLOAT, -1, NULL);
  mb_node *l3 = mb_add(t2, "Loop", "N_inner,,v1", "a2");
  mb_name(l3, "loop3");
  mb_attr_g(l3, "body", b3);
  mb_graph *e2 = mb_graph_new("e2");
  mb_output(e2, "b2", KEEL_FLOAT, -1, NULL);
  mb_init(e2, "f2", KEEL_FLOAT, 0, NULL, &f2);
  mb_add(e2, "Mul", "v1,f2", "b2");
  /* level 1: outer loop body */
  mb_graph *b1 = mb_graph_new("b1");
  mb_input(b1, "i", KEEL_INT64, 0, NULL);
  mb_input(b1, "c1", KEEL_BOOL, 0, NULL);
  mb_input(b1, "v1", KEEL_FLOAT, -1, NULL);
  mb_output(b1, "c1o", KEEL_BOOL, 0, NULL);
  mb_output(b1, "v1o", KEEL_FLOAT, -1, NULL);
  mb_init(b1, "two1", KEEL_INT64, 0, NULL, &two);
  mb_init(b1, "zero1", KEEL_INT64, 0, NULL, &zero);
  mb_add(b1, "Mod", "i,two1", "ir");
  mb_add(b1, "Equal", "ir,zero1", "even");
  mb_node *if2 = mb_add(b1, "If", "even", "v1o");
  mb_name(if2, "if2");
  mb_attr_g(if2, "then_branch", t2);
  mb_attr_g(if2, "else_branch", e2);
  mb_add(b1, "Identity", "c1", "c1o");
  /* main */
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){3});
  mb_input(g, "N_outer", KEEL_INT64, 0, NULL);
  mb_input(g, "N_inner", KEEL_INT64, 0, NULL);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_node *l1 = mb_add(g, "Loop", "N_outer,,x", "y");
  mb_name(l1, "loop1");
  mb_attr_g(l1, "body", b1);
  return mb_session(g, 13);
}

static void four_levels_match_reference(void) {
  keel_session_t *s = four_levels();
  CHECK(s != NULL);
  if (!s) return;
  const keel_model *m = s->m;
  int deepest = 0;
  for (int32_t i = 0; i < m->n_graphs; i++) deepest = KEEL_MAX(deepest, m->graphs[i]->depth);
  CHECK(deepest == 4);
  uint64_t after_first = 0;
  for (int run = 0; run < 20; run++) {
    float x[3] = {0.5f, -2, 7};
    int64_t no = 3 + run % 3, ni = 4 + run % 2;
    keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, x),
                           mb_tensor(s, KEEL_INT64, 0, NULL, &no),
                           mb_tensor(s, KEEL_INT64, 0, NULL, &ni)};
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x", "N_outer", "N_inner"}, in, 3, out));
    for (int k = 0; out[0] && k < 3; k++)
      CHECK_NEAR(keel_value_at(out[0], k), ref4(x[k], (int)no, (int)ni), 1e-4);
    keel_value_release(out[0]);
    for (int k = 0; k < 3; k++) keel_value_release(in[k]);
    keel_stats st = {.size = sizeof st};
    keel_stats_get(s, &st);
    if (run == 0) after_first = st.allocated;
    CHECK(st.allocated == after_first);
  }
  keel_session_destroy(s);
}

/* ============================================ shape-changing carried */

/* y grows by one row per iteration; value_info claims y is [1, 2]. */
static void carried_shape_changes(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "y", KEEL_FLOAT, 2, (int64_t[]){1, 2}); /* wrong after iteration 0 */
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "y_out", KEEL_FLOAT, 2, (int64_t[]){1, 2});
  mb_output(b, "scan", KEEL_FLOAT, -1, NULL);
  mb_value_info(b, "y_out", KEEL_FLOAT, 2, (int64_t[]){1, 2});
  mb_attr_i(mb_add(b, "Concat", "y,row", "y_out"), "axis", 0);
  mb_attr_i(mb_add(b, "Cast", "i", "fi"), "to", KEEL_FLOAT);
  mb_add(b, "Identity", "fi", "scan");
  mb_add(b, "Identity", "c", "c_out");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "row", KEEL_FLOAT, 2, (int64_t[]){1, 2});
  mb_input(g, "M", KEEL_INT64, 0, NULL);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "iters", KEEL_FLOAT, -1, NULL);
  mb_attr_g(mb_add(g, "Loop", "M,,row", "y,iters"), "body", b);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  float row[2] = {1, 2};
  int64_t M = 37; /* past the scan buffer's first capacities: it grows */
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, 2}, row),
                         mb_tensor(s, KEEL_INT64, 0, NULL, &M)};
  keel_value_t *out[2] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"row", "M"}, in, 2, out));
  CHECK(out[0] && keel_value_rank(out[0]) == 2 && keel_value_shape(out[0])[0] == M + 1);
  CHECK(out[1] && keel_value_rank(out[1]) == 1 && keel_value_shape(out[1])[0] == M);
  CHECK(out[1] && keel_value_at(out[1], 36) == 36.0);
  for (int k = 0; k < 2; k++) keel_value_release(out[k]), keel_value_release(in[k]);
  keel_session_destroy(s);
}

/* Range's expanded form (fuzzer): a Loop whose condition only passes
 * through (Identity), so it runs its whole trip count, stacking v each
 * iteration. Trip counts from fuzzed bytes (~7e18) hung the run: with a
 * float per iteration it took millions of iterations for the doubling
 * stack to hit the memory cap, and with an empty v (test_loop11 with y
 * = []) the cap is never reached. Now a count the cap cannot hold fails in
 * iteration 0 (the stack is sized for all of them), and one above 2^31 - 1
 * is refused before the first iteration. */
static void loop_fixed_trip_count(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "v", KEEL_FLOAT, -1, NULL);
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_FLOAT, -1, NULL);
  mb_output(b, "range", KEEL_FLOAT, -1, NULL);
  float one = 1;
  mb_init(b, "one", KEEL_FLOAT, 0, NULL, &one);
  mb_add(b, "Identity", "c", "c_out");
  mb_add(b, "Add", "v,one", "v_out");
  mb_add(b, "Identity", "v", "range");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "M", KEEL_INT64, 0, NULL);
  mb_input(g, "v0", KEEL_FLOAT, -1, NULL);
  mb_output(g, "v", KEEL_FLOAT, -1, NULL);
  mb_output(g, "r", KEEL_FLOAT, -1, NULL);
  mb_attr_g(mb_add(g, "Loop", "M,,v0", "v,r"), "body", b);
  hook_log h = {0};
  keel_options o = {.size = sizeof o, .mem_limit = 16u << 20, .on_iteration = on_iter,
                    .iteration_ud = &h};
  keel_session_t *s = mb_session_opts(g, 13, &o);
  CHECK(s != NULL);
  if (!s) return;
  float v0 = 0;
  struct {
    int64_t trip;
    int64_t rank; /* of v0: 0 a float, 1 empty */
    keel_status want;
  } cases[] = {{1ll << 30, 0, KEEL_ERR_OUT_OF_MEMORY}, /* 4 GB of stack, 16 MB cap */
               {INT64_MAX, 0, KEEL_ERR_TIMEOUT},       /* past the iteration guard */
               {1ll << 40, 1, KEEL_ERR_TIMEOUT},       /* never fills the cap */
               {5, 0, KEEL_OK},
               {1000, 1, KEEL_OK}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    keel_value_t *in[2] = {mb_tensor(s, KEEL_INT64, 0, NULL, &cases[t].trip),
                           mb_tensor(s, KEEL_FLOAT, (int)cases[t].rank, (int64_t[]){0}, &v0)};
    keel_value_t *out[2] = {0};
    h.n = 0;
    CHECK_STATUS(keel_run(s, (const char *[]){"M", "v0"}, in, 2, out), cases[t].want);
    CHECK(h.n == (cases[t].want ? 0 : cases[t].trip)); /* iterations that completed */
    if (t == 3)
      for (int k = 0; out[1] && k < 5; k++) CHECK(keel_value_at(out[1], k) == k);
    if (t == 4)
      CHECK(out[1] && keel_value_rank(out[1]) == 2 && keel_value_shape(out[1])[0] == 1000 &&
            keel_value_shape(out[1])[1] == 0);
    for (int k = 0; k < 2; k++) keel_value_release(out[k]), keel_value_release(in[k]);
  }
  keel_session_destroy(s);
}

/* ================================================================ Scan */

/* Cumulative sum over a reversed scan input; output stacked on axis 1. */
static void scan_axes_and_directions(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "sum", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_input(b, "x", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "sum_out", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "scan_out", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_add(b, "Add", "sum,x", "sum_out");
  mb_add(b, "Identity", "sum_out", "scan_out");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "init", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_input(g, "xs", KEEL_FLOAT, 2, (int64_t[]){4, 2});
  mb_output(g, "final", KEEL_FLOAT, -1, NULL);
  mb_output(g, "ys", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "Scan", "init,xs", "final,ys");
  mb_attr_g(n, "body", b);
  mb_attr_i(n, "num_scan_inputs", 1);
  mb_attr_ints(n, "scan_input_directions", 1, (int64_t[]){1});
  mb_attr_ints(n, "scan_output_axes", 1, (int64_t[]){1});
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  float init[2] = {0, 0}, xs[8] = {1, 10, 2, 20, 3, 30, 4, 40};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){2}, init),
                         mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){4, 2}, xs)};
  keel_value_t *out[2] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"init", "xs"}, in, 2, out));
  CHECK(out[0] && keel_value_at(out[0], 0) == 10 && keel_value_at(out[0], 1) == 100);
  /* reversed: running sums 4, 7, 9, 10; stacked on axis 1 -> shape [2, 4] */
  CHECK(out[1] && keel_value_shape(out[1])[0] == 2 && keel_value_shape(out[1])[1] == 4);
  double want[8] = {4, 7, 9, 10, 40, 70, 90, 100};
  for (int k = 0; out[1] && k < 8; k++) CHECK(keel_value_at(out[1], k) == want[k]);
  for (int k = 0; k < 2; k++) keel_value_release(out[k]), keel_value_release(in[k]);
  keel_session_destroy(s);
}

/* Running sum body for the Scan error cases: (sum [2], x [2]) -> (sum', sum'). */
static mb_graph *sum_body(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "sum", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_input(b, "x", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "sum_out", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "scan_out", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_add(b, "Add", "sum,x", "sum_out");
  mb_add(b, "Identity", "sum_out", "scan_out");
  return b;
}

/* Opset 8 (fuzzer): a state whose batch axis (1) is shorter than the scan
 * input's (3) was sliced past its end; now a shape error, and the session
 * still runs matching inputs. */
static void scan8_batch_mismatch(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "init", KEEL_FLOAT, -1, NULL);
  mb_input(g, "xs", KEEL_FLOAT, -1, NULL);
  mb_output(g, "final", KEEL_FLOAT, -1, NULL);
  mb_output(g, "ys", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "Scan", ",init,xs", "final,ys");
  mb_attr_g(n, "body", sum_body());
  mb_attr_i(n, "num_scan_inputs", 1);
  keel_session_t *s = mb_session(g, 8);
  CHECK(s != NULL);
  if (!s) return;
  float xs[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, init[6] = {0};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, 2}, init),
                         mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){3, 2, 2}, xs)};
  keel_value_t *out[2] = {0};
  const char *names[] = {"init", "xs"};
  CHECK_STATUS(keel_run(s, names, in, 2, out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "batch axis") != NULL);
  keel_value_release(in[0]);
  in[0] = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, init);
  CHECK_OK(keel_run(s, names, in, 2, out));
  /* batch 2 sums rows {9, 10} and {11, 12} */
  CHECK(out[0] && keel_value_at(out[0], 4) == 20 && keel_value_at(out[0], 5) == 22);
  for (int k = 0; k < 2; k++) keel_value_release(out[k]), keel_value_release(in[k]);
  keel_session_destroy(s);
}

/* An axes list shorter than num_scan_inputs was read past its end. */
static void scan_short_axes_list(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "x", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_input(b, "y", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "z", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_add(b, "Add", "x,y", "z");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "xs", KEEL_FLOAT, -1, NULL);
  mb_output(g, "zs", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "Scan", "xs,xs", "zs");
  mb_attr_g(n, "body", b);
  mb_attr_i(n, "num_scan_inputs", 2);
  mb_attr_ints(n, "scan_input_axes", 1, (int64_t[]){0});
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, NULL), *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"xs"}, &x, 1, out), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "axes") != NULL);
  keel_value_release(x);
  keel_session_destroy(s);
}

/* ========================================================== staleness */

/* A branch that reads an outer value, run against a parent frame that has
 * moved on: the read is refused with KEEL_ERR_STALE. */
static void stale_parent_is_an_error(void) {
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "T", KEEL_FLOAT, -1, NULL);
  mb_add(t, "Neg", "X", "T");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "E", KEEL_FLOAT, -1, NULL);
  mb_add(e, "Abs", "X", "E");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, ONE);
  mb_input(g, "C", KEEL_BOOL, 0, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "If", "C", "Y");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_runctx *R;
  CHECK_OK(keel_run_acquire(s, &R));
  keel_frame *parent = &R->frames[s->m->main->id];
  const keel_graph *then = s->m->main->nodes[0].subs[0];
  keel_val out = {0};
  /* the parent is not active: a cached pointer to it would be stale */
  CHECK_STATUS(keel_exec_graph(R, then, parent, NULL, 0, &out, 0), KEEL_ERR_STALE);
  CHECK(out.kind == KEEL_V_EMPTY);
  CHECK(keel_frame_is_empty(&R->frames[then->id]));
  keel_run_release(R);
  keel_session_destroy(s);
}

int main(void) {
  if_inside_loop_is_steady();
  leak_switch_is_caught();
  four_levels_match_reference();
  carried_shape_changes();
  loop_fixed_trip_count();
  scan_axes_and_directions();
  scan8_batch_mismatch();
  scan_short_axes_list();
  stale_parent_is_an_error();
  return check_report();
}
