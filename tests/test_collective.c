/* test_collective.c: the collectives (src/dist) in one process.
 *
 * Built with MPI: a job of one rank (MPI's singleton start, no mpirun), on
 * MPI_COMM_WORLD and on keel_options.comm = &MPI_COMM_SELF: AllReduce of
 * float, float16, bfloat16 and int64 inputs at once (variadic) is the
 * identity, AllGather and AllToAll with group_size 1 too (the naive
 * reference of a one-rank group); a group_size that differs from the
 * communicator's size and a bool AllReduce are clear errors. Multi-rank results against numpy are test_dist.sh's job.
 * Built without MPI: every collective is refused at session creation with
 * KEEL_ERR_UNSUPPORTED naming op, domain, opset and the missing MPI. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "keel_dist.h"
#include "mb.h"

#ifdef KEEL_HAVE_MPI
#include <mpi.h>
#endif

#define MS "com.microsoft"

static keel_session_t *load(mb_graph *g, const keel_options *opts, keel_status *st) {
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 17, MS, 1, &len);
  keel_session_t *s = NULL;
  *st = keel_session_create_from_memory(bytes, len, NULL, opts, &s);
  free(bytes);
  return s;
}

/* One collective node over inputs X0..X{n-1} of the given types, [2,3]. */
static mb_graph *one_node(const char *op, int n, const int *dts, int64_t group, int64_t axis) {
  mb_graph *g = mb_graph_new("main");
  char ins[128] = "", outs[128] = "";
  for (int i = 0; i < n; i++) {
    char a[16], b[16];
    snprintf(a, sizeof a, "%sX%d", i ? "," : "", i);
    snprintf(b, sizeof b, "%sY%d", i ? "," : "", i);
    strcat(ins, a), strcat(outs, b);
    mb_input(g, a + (i ? 1 : 0), dts[i], 2, (int64_t[]){2, 3});
    mb_output(g, b + (i ? 1 : 0), dts[i], -1, NULL);
  }
  mb_node *nd = mb_add(g, op, ins, outs);
  mb_domain(nd, MS);
  if (group) mb_attr_i(nd, "group_size", group);
  if (axis >= 0) mb_attr_i(nd, "axis", axis);
  return g;
}

#ifndef KEEL_HAVE_MPI
static void check_no_mpi(void) {
  const char *ops[] = {"AllReduce", "AllGather", "AllToAll"};
  for (int i = 0; i < 3; i++) {
    keel_status st;
    keel_session_t *s = load(one_node(ops[i], 1, (int[]){KEEL_FLOAT}, 1, -1), NULL, &st);
    CHECK(st == KEEL_ERR_UNSUPPORTED && !s);
    const char *e = keel_last_error();
    CHECK(strstr(e, ops[i]) && strstr(e, "domain com.microsoft") && strstr(e, "opset 1") &&
          strstr(e, "built without MPI"));
    keel_session_destroy(s);
  }
  CHECK_STATUS(keel_dist_init(), KEEL_ERR_UNSUPPORTED);
  CHECK(keel_dist_rank() == 0 && keel_dist_size() == 1);
}
#else

/* Runs s on inputs of the given types ([2,3], values i - 2) and checks each
 * output equals its input (a one-rank group). */
static void run_identity(keel_session_t *s, int n, const int *dts) {
  keel_value_t *in[4], *out[4] = {0};
  const char *names[4] = {"X0", "X1", "X2", "X3"};
  float f[6];
  uint16_t h[6], b[6];
  int64_t l[6];
  for (int i = 0; i < 6; i++) f[i] = (float)i - 2, l[i] = i - 2;
  const uint16_t fh[6] = {0xC000, 0xBC00, 0, 0x3C00, 0x4000, 0x4200}; /* -2..3 */
  const uint16_t fb[6] = {0xC000, 0xBF80, 0, 0x3F80, 0x4000, 0x4040};
  memcpy(h, fh, sizeof h), memcpy(b, fb, sizeof b);
  for (int i = 0; i < n; i++) {
    const void *d = dts[i] == KEEL_FLOAT ? (const void *)f : dts[i] == KEEL_FLOAT16 ? (const void *)h
                    : dts[i] == KEEL_BFLOAT16 ? (const void *)b : (const void *)l;
    in[i] = mb_tensor(s, dts[i], 2, (int64_t[]){2, 3}, d);
  }
  CHECK_OK(keel_run(s, names, in, (size_t)n, out));
  for (int i = 0; i < n; i++) {
    size_t es = dts[i] == KEEL_FLOAT ? 4 : dts[i] == KEEL_INT64 ? 8 : 2;
    CHECK(out[i] && keel_value_shape(out[i])[0] == 2 && keel_value_shape(out[i])[1] == 3);
    CHECK(out[i] && !memcmp(keel_value_data(out[i]), keel_value_data(in[i]), 6 * es));
    keel_value_release(in[i]), keel_value_release(out[i]);
  }
}

static void check_errors(const keel_options *opts) {
  keel_status st;
  keel_session_t *s = load(one_node("AllGather", 1, (int[]){KEEL_FLOAT}, 2, 0), opts, &st);
  CHECK_OK(st);
  float f[6] = {0};
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, f), *y = NULL;
  const char *nm[] = {"X0"};
  CHECK_STATUS(keel_run(s, nm, &x, 1, &y), KEEL_ERR_INVALID_ARG);
  CHECK(strstr(keel_last_error(), "group_size is 2 but the communicator has 1 ranks"));
  keel_value_release(x);
  keel_session_destroy(s);

  s = load(one_node("AllReduce", 1, (int[]){KEEL_BOOL}, 0, -1), opts, &st);
  CHECK_OK(st);
  bool bv[6] = {0};
  x = mb_tensor(s, KEEL_BOOL, 2, (int64_t[]){2, 3}, bv);
  CHECK_STATUS(keel_run(s, nm, &x, 1, &y), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "element type bool is not supported"));
  keel_value_release(x);
  keel_session_destroy(s);
}

static void check_mpi(void) {
  const int all[4] = {KEEL_FLOAT, KEEL_FLOAT16, KEEL_BFLOAT16, KEEL_INT64};
  MPI_Comm self = MPI_COMM_SELF;
  keel_options world = {.size = sizeof world}, on_self = {.size = sizeof on_self, .comm = &self};
  const keel_options *opts[2] = {&world, &on_self};
  for (int o = 0; o < 2; o++) {
    keel_status st;
    keel_session_t *s = load(one_node("AllReduce", 4, all, 0, -1), opts[o], &st);
    CHECK_OK(st);
    if (s) run_identity(s, 4, all), run_identity(s, 4, all);
    keel_session_destroy(s);
    for (int axis = 0; axis < 2; axis++) {
      s = load(one_node("AllGather", 2, (int[]){KEEL_FLOAT, KEEL_INT64}, 1, axis), opts[o], &st);
      CHECK_OK(st);
      if (s) run_identity(s, 2, (int[]){KEEL_FLOAT, KEEL_INT64});
      keel_session_destroy(s);
    }
    s = load(one_node("AllToAll", 2, (int[]){KEEL_FLOAT16, KEEL_BFLOAT16}, 1, -1), opts[o], &st);
    CHECK_OK(st);
    if (s) run_identity(s, 2, (int[]){KEEL_FLOAT16, KEEL_BFLOAT16});
    keel_session_destroy(s);
    check_errors(opts[o]);
  }
  CHECK(keel_dist_rank() == 0 && keel_dist_size() == 1);
  CHECK_OK(keel_dist_finalize());
}
#endif

int main(void) {
#ifdef KEEL_HAVE_MPI
  CHECK(keel_dist_available());
  CHECK(keel_dist_rank() == 0 && keel_dist_size() == 1); /* before MPI starts */
  check_mpi();
#else
  CHECK(!keel_dist_available());
  check_no_mpi();
#endif
  return check_report();
}
