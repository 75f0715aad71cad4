/* test_device_move.c: the `move` kernel group (device/dev_move.h) and the
 * placement of views and copies (passes/pass_place.c), on the emulated
 * device ("emu": the kernels' C reference, device pointers that fault on
 * the host) or on KEEL_TEST_DEVICE (tools/gpu_check.sh: cuda:0).
 *
 * Each case is a small graph run on the device and on the CPU with the
 * same inputs: the outputs must be identical bytes (moves do no
 * arithmetic), the named nodes must be placed on the GPU, and the count of
 * copies between host and device must be the expected one:
 *   - views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) of a value on
 *     the GPU sit there with no copy; their shape and axes inputs, constant
 *     or computed on the CPU (Shape), are read on the host: no constant on
 *     the device, no MemcpyFromHost; CPU Shape and Size of a device value
 *     need no MemcpyToHost;
 *   - Transpose (several perms), Concat (axes 0, 1, -1), Split (an input,
 *     an attribute, equal parts, num_outputs), Slice (negative steps,
 *     clamped ends, default axes), Expand, Gather (int64 and int32
 *     indices, negative ones, axis 0 and 1), Where (broadcast condition),
 *     Cast float32 <-> int64, int32, bool;
 *   - device bytes steady over repeated runs, none left after destroy.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devcase.h"
#include "keel_stats.h"
#include "mb.h"

static const char *g_dev = "emu:0";

typedef mb_graph *(*make_fn)(void);

typedef struct input {
  const char *name;
  int dtype, rank;
  int64_t dims[4];
  const void *data;
} input;

/* Counts of "MemcpyFromHost"/"MemcpyToHost" in the placement's summary
 * line ("copies: N MemcpyFromHost, M MemcpyToHost"). */
static void copies(const char *t, int *from, int *to) {
  *from = *to = -1;
  const char *c = t ? strstr(t, "copies: ") : NULL;
  if (c) sscanf(c, "copies: %d MemcpyFromHost, %d MemcpyToHost", from, to);
}

/* Runs `make`'s graph on the device and the CPU, `runs` times: identical
 * outputs; each name in gpu_nodes ("name (Op)") placed on the GPU; the
 * copies as given (-1: not checked); device bytes steady from run 1. */
static void check_case(const char *what, make_fn make, int opset, const input *in, int n_in,
                       int n_out, const char *const *gpu_nodes, int want_from, int want_to) {
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(make(), opset, &o), *plain = mb_session(make(), opset);
  CHECK(s && plain);
  if (!s || !plain) {
    fprintf(stderr, "  case %s: no session\n", what);
    keel_session_destroy(s), keel_session_destroy(plain);
    return;
  }
  char *t = NULL;
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  for (int i = 0; gpu_nodes[i]; i++) {
    char want[128];
    snprintf(want, sizeof want, "gpu '%s", gpu_nodes[i]);
    if (!t || !strstr(t, want)) {
      fprintf(stderr, "  case %s: %s is not on the GPU\n%s\n", what, gpu_nodes[i], t ? t : "");
      CHECK(false);
    }
  }
  int from, to;
  copies(t, &from, &to);
  if ((want_from >= 0 && from != want_from) || (want_to >= 0 && to != want_to)) {
    fprintf(stderr, "  case %s: copies %d from host, %d to host; expected %d, %d\n%s\n", what, from,
            to, want_from, want_to, t ? t : "");
    CHECK(false);
  }
  keel_free(t);
  const char *names[8];
  for (int i = 0; i < n_in; i++) names[i] = in[i].name;
  uint64_t first = 0;
  for (int run = 0; run < 3; run++) {
    keel_value_t *outs[2][8] = {{0}};
    keel_session_t *ss[2] = {s, plain};
    for (int k = 0; k < 2; k++) {
      keel_value_t *v[8];
      for (int i = 0; i < n_in; i++) v[i] = mb_tensor(ss[k], in[i].dtype, in[i].rank, in[i].dims, in[i].data);
      CHECK_OK(keel_run(ss[k], names, v, n_in, outs[k]));
      for (int i = 0; i < n_in; i++) keel_value_release(v[i]);
    }
    for (int i = 0; i < n_out; i++) { /* bytes moved, not computed: bit for bit */
      bool same = devcase_identical(outs[0][i], outs[1][i]);
      if (!same) fprintf(stderr, "  case %s: output %d differs from the CPU's\n", what, i);
      CHECK(same);
      keel_value_release(outs[0][i]), keel_value_release(outs[1][i]);
    }
    devcase_steady(s, run, &first);
  }
  devcase_end(s, plain);
}

static float X[24], W[16];
static void fill(void) {
  for (int i = 0; i < 24; i++) X[i] = (float)((i * 7) % 13) - 6.5f;
  for (int i = 0; i < 16; i++) W[i] = 0.5f * (float)i - 3.0f;
}
#define XIN {"x", KEEL_FLOAT, 3, {2, 3, 4}, X}

/* ------------------------------------------------------------ views */

/* x [2,3,4] -> Relu -> Reshape([4,6]) -> Unsqueeze([0]) -> Squeeze([0])
 * -> Flatten(axis 1) -> Identity -> Neg -> y; Reshape(r, Shape(t)) -> z
 * (t a CPU input: the shape is computed on the host); Shape(r) -> s and
 * Size(r) -> n read the device value's dims. */
static mb_graph *views(void) {
  static int64_t shape[2] = {4, 6}, zero[1] = {0};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_input(g, "t", KEEL_FLOAT, 2, (int64_t[]){6, 4});
  mb_init(g, "shape", KEEL_INT64, 1, (int64_t[]){2}, shape);
  mb_init(g, "zero", KEEL_INT64, 1, (int64_t[]){1}, zero);
  mb_name(mb_add(g, "Relu", "x", "r"), "relu");
  mb_name(mb_add(g, "Reshape", "r,shape", "a"), "reshape");
  mb_name(mb_add(g, "Unsqueeze", "a,zero", "b"), "unsqueeze");
  mb_name(mb_add(g, "Squeeze", "b,zero", "c"), "squeeze");
  mb_name(mb_add(g, "Flatten", "c", "d"), "flatten");
  mb_name(mb_add(g, "Identity", "d", "e"), "identity");
  mb_name(mb_add(g, "Neg", "e", "y"), "neg");
  mb_name(mb_add(g, "Shape", "t", "ts"), "tshape");
  mb_name(mb_add(g, "Reshape", "r,ts", "rz"), "reshape2");
  mb_name(mb_add(g, "Abs", "rz", "z"), "abs");
  mb_name(mb_add(g, "Shape", "r", "s"), "shape");
  mb_name(mb_add(g, "Size", "r", "n"), "size");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "z", KEEL_FLOAT, -1, NULL);
  mb_output(g, "s", KEEL_INT64, -1, NULL);
  mb_output(g, "n", KEEL_INT64, -1, NULL);
  return g;
}

static void check_views(void) {
  static float T[24];
  input in[] = {XIN, {"t", KEEL_FLOAT, 2, {6, 4}, T}};
  const char *gpu[] = {"reshape' (Reshape)", "unsqueeze' (Unsqueeze)", "squeeze' (Squeeze)",
                       "flatten' (Flatten)", "identity' (Identity)", "reshape2' (Reshape)", NULL};
  /* x in; y, z out: the views, their shapes and Shape/Size add no copy */
  check_case("views", views, 13, in, 2, 4, gpu, 1, 2);
  /* no constant is on the device: the shapes and axes stay the host's */
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(views(), 13, &o);
  CHECK(s != NULL);
  if (s) {
    keel_stats st = {.size = sizeof st};
    CHECK_OK(keel_stats_get_device(s, &st, NULL));
    CHECK(st.allocated == 0);
  }
  keel_session_destroy(s);
  /* opset 11: Squeeze/Unsqueeze axes as attributes */
}

/* A view of a host value that only GPU nodes read goes to the GPU, the
 * copy moving before it (the same bytes): x -> Reshape -> Relu, both on
 * the GPU, one MemcpyFromHost of x. */
static mb_graph *cpu_view(void) {
  static int64_t shape[1] = {-1};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_init(g, "shape", KEEL_INT64, 1, (int64_t[]){1}, shape);
  mb_name(mb_add(g, "Reshape", "x,shape", "a"), "reshape");
  mb_name(mb_add(g, "Relu", "a", "y"), "relu");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_cpu_view(void) {
  input in[] = {XIN};
  const char *gpu[] = {"relu' (Relu)", "reshape' (Reshape)", NULL};
  check_case("view of a CPU value", cpu_view, 13, in, 1, 1, gpu, 1, 1);
  keel_options o = {.size = sizeof o, .device = g_dev};
  keel_session_t *s = mb_session_opts(cpu_view(), 13, &o);
  char *t = NULL;
  if (s) CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &t));
  CHECK(t && strstr(t, "gpu 'reshape' (Reshape)") && strstr(t, "keel.place/x/to_gpu"));
  keel_free(t);
  keel_session_destroy(s);
}

/* ------------------------------------------------------- Transpose */

static int64_t g_perm[3];
static bool g_perm_default;
static mb_graph *transpose(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_node *n = mb_add(g, "Transpose", "x", "y");
  mb_name(n, "transpose");
  if (!g_perm_default) mb_attr_ints(n, "perm", 3, g_perm);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_transpose(void) {
  static const int64_t perms[][3] = {{0, 1, 2}, {2, 0, 1}, {1, 0, 2}, {0, 2, 1}, {2, 1, 0}};
  input in[] = {XIN};
  const char *gpu[] = {"transpose' (Transpose)", NULL};
  for (int i = 0; i < 6; i++) {
    g_perm_default = i == 5;
    if (i < 5) memcpy(g_perm, perms[i], sizeof g_perm);
    check_case("transpose", transpose, 13, in, 1, 1, gpu, 1, 1);
  }
}

/* ---------------------------------------------------------- Concat */

static int64_t g_axis;
static mb_graph *concat(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_init(g, "w", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4}, X);
  mb_name(mb_add(g, "Relu", "x", "r"), "relu");
  mb_node *n = mb_add(g, "Concat", "x,r,w", "y");
  mb_name(n, "concat");
  mb_attr_i(n, "axis", g_axis);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_concat(void) {
  input in[] = {XIN};
  const char *gpu[] = {"concat' (Concat)", NULL};
  for (g_axis = -3; g_axis < 3; g_axis++) check_case("concat", concat, 13, in, 1, 1, gpu, 1, 1);
}

/* ----------------------------------------------------------- Split */

static int g_split;
static mb_graph *split(void) {
  static int64_t sizes[2] = {1, 3};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_init(g, "sizes", KEEL_INT64, 1, (int64_t[]){2}, sizes);
  mb_node *n;
  switch (g_split) {
    case 0: /* sizes as an input (opset 13), axis 2 */
      n = mb_add(g, "Split", "x,sizes", "a,b");
      mb_attr_i(n, "axis", 2);
      break;
    case 1: /* equal parts, axis 0 */
      n = mb_add(g, "Split", "x", "a,b");
      break;
    default: /* num_outputs (opset 18): 4 -> 2, 2 along axis -1 */
      n = mb_add(g, "Split", "x", "a,b");
      mb_attr_i(n, "axis", -1);
      mb_attr_i(n, "num_outputs", 2);
  }
  mb_name(n, "split");
  mb_name(mb_add(g, "Relu", "b", "rb"), "relu");
  mb_output(g, "a", KEEL_FLOAT, -1, NULL);
  mb_output(g, "rb", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_split(void) {
  input in[] = {XIN};
  const char *gpu[] = {"split' (Split)", "relu' (Relu)", NULL};
  for (g_split = 0; g_split < 3; g_split++)
    check_case("split", split, g_split == 2 ? 18 : 13, in, 1, 2, gpu, 1, 2);
}

/* ----------------------------------------------------------- Slice */

static int g_slice;
static mb_graph *slice(void) {
  static const int64_t cases[][4][3] = {
      /* starts, ends, axes, steps */
      {{0, 1, 0}, {2, 3, 4}, {0, 1, 2}, {1, 1, 2}},
      {{-1, 100, -1}, {-100, -100, -5}, {0, 1, 2}, {-1, -2, -1}},
      {{1, 0, 1}, {2, 2, 3}, {2, 1, 0}, {1, 1, 1}},
  };
  const int64_t(*c)[3] = cases[g_slice];
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_init(g, "starts", KEEL_INT64, 1, (int64_t[]){3}, c[0]);
  mb_init(g, "ends", KEEL_INT64, 1, (int64_t[]){3}, c[1]);
  mb_init(g, "axes", KEEL_INT64, 1, (int64_t[]){3}, c[2]);
  mb_init(g, "steps", KEEL_INT64, 1, (int64_t[]){3}, c[3]);
  mb_name(mb_add(g, "Slice", g_slice == 2 ? "x,starts,ends,axes" : "x,starts,ends,axes,steps", "y"),
          "slice");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_slice(void) {
  input in[] = {XIN};
  const char *gpu[] = {"slice' (Slice)", NULL};
  for (g_slice = 0; g_slice < 3; g_slice++) check_case("slice", slice, 13, in, 1, 1, gpu, 1, 1);
}

/* ---------------------------------------------------------- Expand */

static mb_graph *expand(void) {
  static int64_t shape[3] = {2, 1, 4};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "v", KEEL_FLOAT, 2, (int64_t[]){3, 1});
  mb_init(g, "shape", KEEL_INT64, 1, (int64_t[]){3}, shape);
  mb_name(mb_add(g, "Expand", "v,shape", "y"), "expand");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_expand(void) {
  input in[] = {{"v", KEEL_FLOAT, 2, {3, 1}, W}};
  const char *gpu[] = {"expand' (Expand)", NULL};
  check_case("expand", expand, 13, in, 1, 1, gpu, 1, 1);
}

/* ---------------------------------------------------------- Gather */

static int g_gather;
static mb_graph *gather(void) {
  static int32_t i32[3] = {2, -1, 0};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_input(g, "i", KEEL_INT64, 2, (int64_t[]){2, 2});
  mb_init(g, "j", KEEL_INT32, 1, (int64_t[]){3}, i32);
  mb_node *n = mb_add(g, "Gather", g_gather ? "x,j" : "x,i", "y");
  mb_name(n, "gather");
  mb_attr_i(n, "axis", g_gather);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_gather(void) {
  static int64_t idx[4] = {1, -2, 0, 1};
  input in[] = {XIN, {"i", KEEL_INT64, 2, {2, 2}, idx}};
  const char *gpu[] = {"gather' (Gather)", NULL};
  g_gather = 0; /* int64 indices from the host: x and i copied in */
  check_case("gather int64", gather, 13, in, 2, 1, gpu, 2, 1);
  g_gather = 1; /* int32 constant indices, on the device from binding */
  check_case("gather int32", gather, 13, in, 2, 1, gpu, 1, 1);
}

/* ----------------------------------------------------------- Where */

static mb_graph *where(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "c", KEEL_BOOL, 2, (int64_t[]){3, 1});
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_init(g, "w", KEEL_FLOAT, 1, (int64_t[]){4}, W);
  mb_name(mb_add(g, "Where", "c,x,w", "y"), "where");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_where(void) {
  static uint8_t c[3] = {1, 0, 1};
  input in[] = {{"c", KEEL_BOOL, 2, {3, 1}, c}, XIN};
  const char *gpu[] = {"where' (Where)", NULL};
  check_case("where", where, 13, in, 2, 1, gpu, 2, 1);
}

/* ------------------------------------------------------------ Cast */

static int g_cast;
static mb_graph *cast(void) {
  static const int to[] = {KEEL_INT64, KEEL_INT32, KEEL_BOOL};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){2, 3, 4});
  mb_name(mb_add(g, "Relu", "x", "r"), "relu");
  mb_node *n = mb_add(g, "Cast", "r", "i");
  mb_name(n, "cast");
  mb_attr_i(n, "to", to[g_cast]);
  n = mb_add(g, "Cast", "i", "f");
  mb_name(n, "back");
  mb_attr_i(n, "to", KEEL_FLOAT);
  mb_name(mb_add(g, "Neg", "f", "y"), "neg");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_cast(void) {
  input in[] = {XIN};
  const char *gpu[] = {"cast' (Cast)", "back' (Cast)", NULL};
  for (g_cast = 0; g_cast < 3; g_cast++) check_case("cast", cast, 13, in, 1, 1, gpu, 1, 1);
}

int main(void) {
  g_dev = devcase_device();
  fprintf(stderr, "test_device_move: on %s\n", g_dev);
  fill();
  check_views();
  check_cpu_view();
  check_transpose();
  check_concat();
  check_split();
  check_slice();
  check_expand();
  check_gather();
  check_where();
  check_cast();
  CHECK(keel_process_device_bytes() == 0);
  return check_report();
}
