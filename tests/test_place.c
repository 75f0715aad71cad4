/* test_place.c: placement for a GPU (src/passes/pass_place.c, issue 25),
 * on any machine.
 *
 * keel_options.device "cuda" with KEEL_OPT_PLAN_ONLY makes the placement
 * without opening a device and runs every node on the CPU, the copies as
 * host copies. So:
 *   - a hand-made graph's placement is checked node by node: float32 ops
 *     with a GPU kernel on the GPU (a MatMul by a constant among them, as
 *     the FusedMatMul the fuse-matmul pass makes of it), the rest (int64
 *     arithmetic, a Softmax not over the last axis, a type that cannot be
 *     inferred) on the CPU, one MemcpyFromHost per value that crosses to the GPU (a
 *     graph input read by two GPU nodes is copied once; constants are not
 *     copied), one MemcpyToHost per value the host reads back (a graph
 *     output, a CPU reader);
 *   - a Loop body's nodes are placed, the Loop itself stays on the CPU;
 *   - the placed graph gives the plain graph's outputs bit for bit (the
 *     same kernels), and the session ends with zero bytes held;
 *   - without KEEL_OPT_PLAN_ONLY, a session for a GPU that is not there is
 *     refused with KEEL_ERR_UNSUPPORTED naming the device and the reason,
 *     nothing leaked; a malformed device string is KEEL_ERR_INVALID_ARG;
 *     "cpu" is the plain session. (Running placed nodes on a device:
 *     test_device.c, on the emulated one.)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "keel_stats.h"
#include "mb.h"

/* x [2, 8] float -> Add(x, b) -> Relu -> MatMul(w) -> Softmax(axis 1)
 * -> Softmax(axis 0) -> y; also Mul(x, x) -> z (x read by two GPU nodes),
 * Shape(x) -> Add(s, one) (int64) -> n, and Relu of an untyped input u. */
static mb_graph *graph(void) {
  static float b[8], w[64];
  static int64_t one[1] = {1};
  for (int i = 0; i < 8; i++) b[i] = 0.25f * (float)i - 1.0f;
  for (int i = 0; i < 64; i++) w[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){2, 8});
  mb_input(g, "u", 0, -1, NULL);
  mb_init(g, "b", KEEL_FLOAT, 1, (int64_t[]){8}, b);
  mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){8, 8}, w);
  mb_init(g, "one", KEEL_INT64, 1, (int64_t[]){1}, one);
  mb_name(mb_add(g, "Add", "x,b", "a"), "add");
  mb_name(mb_add(g, "Relu", "a", "r"), "relu");
  mb_name(mb_add(g, "MatMul", "r,w", "m"), "matmul");
  mb_node *s1 = mb_add(g, "Softmax", "m", "p");
  mb_name(s1, "softmax_last");
  mb_attr_i(s1, "axis", 1);
  mb_node *s0 = mb_add(g, "Softmax", "p", "y");
  mb_name(s0, "softmax_first");
  mb_attr_i(s0, "axis", 0);
  mb_name(mb_add(g, "Mul", "x,x", "z"), "square");
  mb_name(mb_add(g, "Shape", "x", "s"), "shape");
  mb_name(mb_add(g, "Add", "s,one", "n"), "add_int");
  mb_name(mb_add(g, "Relu", "u", "ur"), "relu_untyped");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "z", KEEL_FLOAT, -1, NULL);
  mb_output(g, "n", KEEL_INT64, -1, NULL);
  mb_output(g, "ur", KEEL_FLOAT, -1, NULL);
  return g;
}

static char *describe(keel_session_t *s, unsigned what) {
  char *t = NULL;
  CHECK_OK(keel_session_describe(s, what, &t));
  return t;
}

/* The node line of `name` in keel info --nodes' text says `dev`. */
static bool placed(const char *text, const char *name, const char *dev) {
  char want[128];
  snprintf(want, sizeof want, " %s '%s' (", dev, name);
  return strstr(text, want) != NULL;
}

static int count(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

static void check_graph(void) {
  keel_options o = {.size = sizeof o, .device = "cuda", .flags = KEEL_OPT_PLAN_ONLY};
  keel_session_t *s = mb_session_opts(graph(), 13, &o);
  keel_session_t *plain = mb_session(graph(), 13);
  CHECK(s && plain);
  if (!s || !plain) return;
  char *t = describe(s, KEEL_DESCRIBE_NODES);
  if (t) {
    CHECK(placed(t, "add", "gpu"));
    CHECK(placed(t, "relu", "gpu"));
    CHECK(placed(t, "matmul", "gpu"));        /* FusedMatMul: the blas group */
    CHECK(placed(t, "softmax_last", "gpu"));
    CHECK(placed(t, "softmax_first", "cpu")); /* not the last axis */
    CHECK(placed(t, "square", "gpu"));
    CHECK(placed(t, "shape", "cpu"));
    CHECK(placed(t, "add_int", "cpu"));       /* int64 */
    CHECK(placed(t, "relu_untyped", "cpu"));  /* the type is not known at load */
    /* x once (add and square read the copy; b and w, constants, are
     * not copied; r and m stay on the GPU from relu through matmul to
     * softmax_last): 1 MemcpyFromHost; p back to the host for
     * softmax_first, z an output: 2 MemcpyToHost */
    CHECK(count(t, "(MemcpyFromHost)") == 1);
    CHECK(count(t, "(MemcpyToHost)") == 2);
    CHECK(strstr(t, "'keel.place/x/to_gpu' (MemcpyFromHost)") != NULL);
    CHECK(strstr(t, "placement  cuda:0: 5 of 9 nodes on the GPU (55.6%), 4 on the CPU; copies: 1 "
                    "MemcpyFromHost, 2 MemcpyToHost") != NULL);
    if (count(t, "(MemcpyFromHost)") != 1) fprintf(stderr, "%s\n", t);
  }
  keel_free(t);
  /* the placed graph, run on the host, is the plain graph */
  float x[16], u[3] = {-1.0f, 2.0f, -3.0f};
  for (int i = 0; i < 16; i++) x[i] = (float)((i * 5) % 9) / 3.0f - 1.2f;
  keel_session_t *ss[2] = {s, plain};
  keel_value_t *outs[2][4] = {{0}};
  for (int k = 0; k < 2; k++) {
    keel_value_t *in[2] = {mb_tensor(ss[k], KEEL_FLOAT, 2, (int64_t[]){2, 8}, x),
                           mb_tensor(ss[k], KEEL_FLOAT, 1, (int64_t[]){3}, u)};
    CHECK_OK(keel_run(ss[k], (const char *[]){"x", "u"}, in, 2, outs[k]));
    keel_value_release(in[0]), keel_value_release(in[1]);
  }
  for (int i = 0; i < 4; i++) {
    CHECK(outs[0][i] && outs[1][i]);
    if (!outs[0][i] || !outs[1][i]) continue;
    size_t n = (size_t)keel_value_numel(outs[0][i]) * keel_dtype_size(keel_value_dtype(outs[0][i]));
    CHECK(keel_value_numel(outs[0][i]) == keel_value_numel(outs[1][i]) &&
          !memcmp(keel_value_data(outs[0][i]), keel_value_data(outs[1][i]), n));
    keel_value_release(outs[0][i]), keel_value_release(outs[1][i]);
  }
  keel_stats st = {.size = sizeof st};
  CHECK_OK(keel_stats_get(s, &st));
  CHECK(st.allocated == 0);
  keel_session_destroy(s);
  keel_session_destroy(plain);
}

/* A Loop whose body adds and multiplies a carried float vector: the body's
 * nodes go to the GPU, the Loop stays on the CPU; the carried value is
 * copied in and out of the body each iteration. */
static mb_graph *loop_graph(void) {
  static float two[1] = {2.0f};
  mb_graph *body = mb_graph_new("body");
  mb_input(body, "i", KEEL_INT64, 0, NULL);
  mb_input(body, "c", KEEL_BOOL, 0, NULL);
  mb_input(body, "v", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_init(body, "two", KEEL_FLOAT, 1, (int64_t[]){1}, two);
  mb_name(mb_add(body, "Mul", "v,two", "v2"), "double");
  mb_name(mb_add(body, "Tanh", "v2", "vo"), "tanh");
  mb_add(body, "Identity", "c", "co");
  mb_output(body, "co", KEEL_BOOL, 0, NULL);
  mb_output(body, "vo", KEEL_FLOAT, 1, (int64_t[]){4});
  static int64_t trips[1] = {5};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "v0", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_init(g, "trips", KEEL_INT64, 0, NULL, trips);
  mb_node *l = mb_add(g, "Loop", "trips,,v0", "vf");
  mb_name(l, "loop");
  mb_attr_g(l, "body", body);
  mb_output(g, "vf", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_loop(void) {
  keel_options o = {.size = sizeof o, .device = "cuda:1", .flags = KEEL_OPT_PLAN_ONLY};
  keel_session_t *s = mb_session_opts(loop_graph(), 13, &o);
  keel_session_t *plain = mb_session(loop_graph(), 13);
  CHECK(s && plain);
  if (!s || !plain) return;
  char *t = describe(s, KEEL_DESCRIBE_NODES);
  if (t) {
    CHECK(placed(t, "loop", "cpu"));
    CHECK(placed(t, "double", "gpu"));
    CHECK(placed(t, "tanh", "gpu"));
    CHECK(strstr(t, "placement  cuda:1: 2 of 4 nodes on the GPU") != NULL);
    CHECK(count(t, "(MemcpyFromHost)") == 1 && count(t, "(MemcpyToHost)") == 1);
  }
  keel_free(t);
  float v0[4] = {0.1f, -0.2f, 0.3f, 0.05f};
  keel_value_t *r[2] = {0};
  keel_session_t *ss[2] = {s, plain};
  for (int k = 0; k < 2; k++) {
    keel_value_t *in = mb_tensor(ss[k], KEEL_FLOAT, 1, (int64_t[]){4}, v0);
    CHECK_OK(keel_run(ss[k], (const char *[]){"v0"}, &in, 1, &r[k]));
    keel_value_release(in);
  }
  CHECK(r[0] && r[1] && !memcmp(keel_value_data(r[0]), keel_value_data(r[1]), 4 * sizeof(float)));
  keel_value_release(r[0]), keel_value_release(r[1]);
  keel_session_destroy(s);
  keel_session_destroy(plain);
}

static void check_refusals(void) {
  size_t len;
  uint8_t *bytes = mb_model(graph(), 13, &len);
  keel_session_t *s = NULL;
  keel_options o = {.size = sizeof o, .device = "cuda"};
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, &o, &s);
  CHECK(st == KEEL_ERR_UNSUPPORTED && !s);
  CHECK(strstr(keel_last_error(), "device cuda:0: ") != NULL);
  char why[256];
  if (!keel_gpu_count(why, sizeof why)) CHECK(strstr(keel_last_error(), why) != NULL);
  const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:0x", "emu:", "emux", "emu:1x"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    o.device = bad[i];
    st = keel_session_create_from_memory(bytes, len, NULL, &o, &s);
    CHECK(st == KEEL_ERR_INVALID_ARG && !s);
    CHECK(strstr(keel_last_error(), "expected cpu, cuda, cuda:N or emu") != NULL);
  }
  o.device = "cpu";
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, &o, &s));
  char *t = s ? describe(s, 0) : NULL;
  CHECK(t && !strstr(t, "placement") && !strstr(t, "Memcpy"));
  keel_free(t);
  keel_session_destroy(s);
  free(bytes);
}

int main(void) {
  check_graph();
  check_loop();
  check_refusals();
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
