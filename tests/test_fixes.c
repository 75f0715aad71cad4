/* test_fixes.c: fixes found while measuring the service workloads
 * (issue 13), each checked here so it cannot come back:
 *
 *  - With KEEL_OPT_NO_OWNER_TAGS, a Loop's scan outputs (and every other
 *    block control flow makes for an output) stay attributed to the
 *    session; control flow used to add the output's index to site 0 and so
 *    named "values made through the API". One helper (keel_k_owner) now
 *    makes every output tag. With tags on they name the Loop's output.
 *  - keel_session_describe (keel info) counts the bytes of weights that are
 *    Constant nodes (paddle2onnx writes them so), not only initializers.
 *  - A Scan whose state input is omitted ("") is an error, not a NULL read
 *    (found by fuzz_run under its new deadline, which let it run long
 *    enough to get there).
 */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

/* Loop M times: carried v += x, scan output s = v (one carried value, so
 * the scan output is output 1 of the node: site 0 + 1 was the API's). */
static keel_session_t *scan_loop(unsigned flags) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "v", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(b, "s", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_add(b, "Identity", "c", "c_out");
  mb_add(b, "Add", "v,x", "v_out");
  mb_add(b, "Identity", "v_out", "s");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(g, "v", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(g, "stack", KEEL_FLOAT, 2, (int64_t[]){-1, 4});
  int64_t m = 6;
  bool t = true;
  float z[4] = {0};
  mb_init(g, "m", KEEL_INT64, 0, NULL, &m);
  mb_init(g, "go", KEEL_BOOL, 0, NULL, &t);
  mb_init(g, "zero", KEEL_FLOAT, 1, (int64_t[]){4}, z);
  mb_node *n = mb_add(g, "Loop", "m,go,zero", "v,stack");
  mb_name(n, "acc");
  mb_attr_g(n, "body", b);
  keel_options o = {.size = sizeof o, .flags = flags};
  return mb_session_opts(g, 13, &o);
}

static void tags_off_in_control_flow(void) {
  for (int off = 0; off < 2; off++) {
    keel_session_t *s = scan_loop(off ? KEEL_OPT_NO_OWNER_TAGS : 0);
    CHECK(s != NULL);
    if (!s) return;
    float x[4] = {1, 2, 3, 4};
    keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, x)};
    keel_value_t *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x"}, in, 1, out));
    keel_value_release(in[0]);
    CHECK(out[1] && keel_value_at(out[1], 4 * 5 + 3) == 24); /* 6 * 4 */
    char *rep = NULL;
    uint64_t bytes = 0;
    CHECK_OK(keel_mem_live_report(s, NULL, 0, &rep, &bytes));
    fprintf(stderr, "tags %s:\n%s", off ? "off" : "on", rep ? rep : "");
    CHECK(rep && !strstr(rep, "through the API")); /* no run input is alive */
    if (!off) CHECK(rep && strstr(rep, "value 'stack'"));
    keel_free(rep);
    keel_value_release(out[0]);
    keel_value_release(out[1]);
    keel_session_destroy(s);
  }
}

static void constant_node_weights(void) {
  static float w[256];
  for (int i = 0; i < 256; i++) w[i] = (float)i;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){16, 16});
  mb_output(g, "y", KEEL_FLOAT, 2, (int64_t[]){16, 16});
  mb_attr_t(mb_add(g, "Constant", "", "w"), "value", KEEL_FLOAT, 2, (int64_t[]){16, 16}, w);
  mb_attr_ints(mb_add(g, "Constant", "", "b"), "value_ints", 3, (int64_t[]){1, 2, 3});
  mb_add(g, "MatMul", "x,w", "y");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  char *text = NULL;
  CHECK_OK(keel_session_describe(s, 0, &text));
  /* 16 * 16 floats + 3 int64 */
  CHECK(text && strstr(text, "weights    1048 bytes in 2 constants") != NULL);
  if (text) fprintf(stderr, "%s", text);
  keel_free(text);
  CHECK_OK(keel_session_describe(s, 1, &text));
  CHECK(text && strstr(text, "\"weight_bytes\": 1048,") != NULL);
  keel_free(text);
  keel_session_destroy(s);
}

static void scan_state_omitted(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "s", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_input(b, "x", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "s_out", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(b, "y", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_add(b, "Add", "s,x", "s_out");
  mb_add(b, "Identity", "s_out", "y");
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "xs", KEEL_FLOAT, 2, (int64_t[]){3, 2});
  mb_output(g, "s", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(g, "ys", KEEL_FLOAT, 2, (int64_t[]){3, 2});
  mb_node *n = mb_add(g, "Scan", ",xs", "s,ys");
  mb_attr_i(n, "num_scan_inputs", 1);
  mb_attr_g(n, "body", b);
  keel_session_t *s = mb_session(g, 11);
  CHECK(s != NULL);
  if (!s) return;
  float x[6] = {1, 2, 3, 4, 5, 6};
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, x)};
  keel_value_t *out[2] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"xs"}, in, 1, out), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "state input 0 is omitted") != NULL);
  keel_value_release(in[0]);
  keel_session_destroy(s);
}

int main(void) {
  tags_off_in_control_flow();
  constant_node_weights();
  scan_state_omitted();
  return check_report();
}
