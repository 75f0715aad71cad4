/* test_ops_sequence.c: the sequence family's error paths through real
 * sessions (the happy paths run in the conformance suites and the control
 * flow tests): inputs the fuzzer found, each refused with a message, after
 * which the same session still runs. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "mb.h"

/* ===================================================== SplitToSequence */

/* Split sizes whose sum overflows int64 ({INT64_MAX, 2} on an axis of 3)
 * were summed unchecked (signed overflow, UB): now an error. */
static void check_split_sizes_overflow(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_input(g, "S", KEEL_INT64, -1, NULL);
  mb_output_seq(g, "Y", KEEL_FLOAT);
  mb_add(g, "SplitToSequence", "X,S", "Y");
  keel_session_t *s = mb_session(g, 12);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, (float[]){1, 2, 3}),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){INT64_MAX, 2})};
  keel_value_t *out[1] = {0};
  const char *names[] = {"X", "S"};
  CHECK_STATUS(keel_run(s, names, in, 2, out), KEEL_ERR_RUNTIME);
  CHECK(strstr(keel_last_error(), "split sizes") != NULL);
  keel_value_release(in[1]);
  in[1] = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 2});
  CHECK_OK(keel_run(s, names, in, 2, out));
  CHECK(out[0] && keel_sequence_length(out[0]) == 2);
  keel_value_release(out[0]), keel_value_release(in[0]), keel_value_release(in[1]);
  keel_session_destroy(s);
}

int main(void) {
  check_split_sizes_overflow();
  return check_report();
}
