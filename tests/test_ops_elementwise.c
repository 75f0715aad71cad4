/* test_ops_elementwise.c: the broadcast driver against its naive reference
 * on random shapes (also cut in chunks over a pool: chunks that start and
 * end inside a run of the innermost dim), every binary op through a real
 * session, and errors. */
#include <string.h>

#include "base/pool.h"
#include "check.h"
#include "mb.h"
#include "ops/common/bcast.h"

static keel_pool *g_pool; /* 3 threads, 16 splits */

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static void add_f32(const void *pa, int64_t sa, const void *pb, int64_t sb, void *po,
                    int64_t n) {
  const float *a = pa, *b = pb;
  float *o = po;
  for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * 3.0f + b[i * sb];
}

/* Random broadcast-compatible shapes: each dim of a and b is the output's
 * or 1, and ranks may differ. */
static void random_case(void) {
  int r = 1 + (int)(next() % 5);
  int64_t out[KEEL_MAX_RANK], sa[KEEL_MAX_RANK], sb[KEEL_MAX_RANK];
  for (int i = 0; i < r; i++) out[i] = 1 + (int64_t)(next() % 5);
  int ra = r - (int)(next() % 2), rb = r - (int)(next() % (size_t)r);
  for (int i = 0; i < ra; i++) sa[i] = next() % 3 ? out[r - ra + i] : 1;
  for (int i = 0; i < rb; i++) sb[i] = next() % 3 ? out[r - rb + i] : 1;
  float A[4096], B[4096], O1[4096], O2[4096], O3[4096];
  keel_tensor a = {.data = A, .dtype = KEEL_FLOAT, .rank = ra};
  keel_tensor b = {.data = B, .dtype = KEEL_FLOAT, .rank = rb};
  memcpy(a.shape, sa, sizeof(int64_t) * (size_t)ra);
  memcpy(b.shape, sb, sizeof(int64_t) * (size_t)rb);
  for (int64_t i = 0; i < keel_tensor_numel(&a); i++) A[i] = (float)(next() % 100);
  for (int64_t i = 0; i < keel_tensor_numel(&b); i++) B[i] = (float)(next() % 100);
  int ro;
  int64_t so[KEEL_MAX_RANK];
  CHECK_OK(keel_broadcast_shape(ra, sa, rb, sb, &ro, so));
  keel_tensor o1 = {.data = O1, .dtype = KEEL_FLOAT, .rank = ro};
  memcpy(o1.shape, so, sizeof(int64_t) * (size_t)ro);
  keel_tensor o2 = o1;
  o2.data = O2;
  keel_tensor o3 = o1;
  o3.data = O3;
  keel_bcast_binary(&a, &b, &o1, add_f32);
  keel_bcast_binary_naive(&a, &b, &o2, add_f32);
  CHECK(memcmp(O1, O2, sizeof(float) * (size_t)keel_tensor_numel(&o1)) == 0);
  /* a cost that makes every element its own grain: chunks of n / 64 */
  CHECK_OK(keel_bcast_binary_pool(g_pool, &a, &b, &o3, add_f32, 1e6));
  CHECK(memcmp(O3, O2, sizeof(float) * (size_t)keel_tensor_numel(&o1)) == 0);
}

static void check_broadcast_errors(void) {
  int r;
  int64_t out[KEEL_MAX_RANK];
  CHECK_STATUS(keel_broadcast_shape(2, (int64_t[]){2, 3}, 1, (int64_t[]){4}, &r, out),
               KEEL_ERR_SHAPE);
  CHECK_OK(keel_broadcast_shape(2, (int64_t[]){2, 1}, 3, (int64_t[]){5, 1, 7}, &r, out));
  CHECK(r == 3 && out[0] == 5 && out[1] == 2 && out[2] == 7);
}

/* One binary op on int32 data through a session, against C. */
/* Equal on strings (opset 19), broadcast: equal length and bytes, embedded
 * NUL bytes included. */
static void check_equal_strings(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "A", KEEL_STRING, 2, (int64_t[]){2, 2});
  mb_input(g, "B", KEEL_STRING, 1, (int64_t[]){2});
  mb_output(g, "C", KEEL_BOOL, -1, NULL);
  mb_add(g, "Equal", "A,B", "C");
  keel_session_t *s = mb_session(g, 19);
  CHECK(s != NULL);
  if (!s) return;
  keel_string A[4] = {{"ab", 2}, {"", 0}, {"a\0c", 3}, {"x", 1}}, B[2] = {{"ab", 2}, {"a\0d", 3}};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 2}, A),
                         mb_tensor(s, KEEL_STRING, 1, (int64_t[]){2}, B)};
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"A", "B"}, in, 2, out));
  double want[4] = {1, 0, 0, 0};
  for (int i = 0; out[0] && i < 4; i++) CHECK(keel_value_at(out[0], i) == want[i]);
  keel_value_release(out[0]);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
}

static void check_session_op(const char *op, int32_t (*ref)(int32_t, int32_t), int out_bool) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "A", KEEL_INT32, 2, (int64_t[]){2, 3});
  mb_input(g, "B", KEEL_INT32, -1, NULL); /* unchecked: the kernel must catch it */
  mb_output(g, "C", out_bool ? KEEL_BOOL : KEEL_INT32, -1, NULL);
  mb_add(g, op, "A,B", "C");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  int32_t A[6] = {-7, 5, 0, 9, -3, 4}, B[3] = {2, -3, 5};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_INT32, 2, (int64_t[]){2, 3}, A),
                         mb_tensor(s, KEEL_INT32, 1, (int64_t[]){3}, B)};
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"A", "B"}, in, 2, out));
  for (int i = 0; out[0] && i < 6; i++) {
    double want = ref(A[i], B[i % 3]);
    if (out_bool) want = want != 0;
    CHECK(keel_value_at(out[0], i) == want);
  }
  keel_value_release(out[0]);
  /* a shape that does not broadcast: an error, and the session lives on */
  keel_value_t *bad = mb_tensor(s, KEEL_INT32, 1, (int64_t[]){4}, (int32_t[]){1, 2, 3, 4});
  keel_value_t *in2[2] = {in[0], bad};
  CHECK_STATUS(keel_run(s, (const char *[]){"A", "B"}, in2, 2, out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "broadcast") != NULL);
  CHECK_OK(keel_run(s, (const char *[]){"A", "B"}, in, 2, out));
  keel_value_release(out[0]);
  keel_value_release(bad);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
}

static int32_t r_add(int32_t a, int32_t b) { return a + b; }
static int32_t r_sub(int32_t a, int32_t b) { return a - b; }
static int32_t r_mul(int32_t a, int32_t b) { return a * b; }
static int32_t r_div(int32_t a, int32_t b) { return a / b; }
static int32_t r_gt(int32_t a, int32_t b) { return a > b; }
static int32_t r_eq(int32_t a, int32_t b) { return a == b; }

/* PRelu's slope must have X's type (it was once read as X's type). */
static void prelu_types_must_match(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_DOUBLE, 1, (int64_t[]){4});
  mb_input(g, "S", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(g, "Y", KEEL_DOUBLE, -1, NULL);
  mb_add(g, "PRelu", "X,S", "Y");
  keel_session_t *s = mb_session(g, 16);
  if (!s) return;
  double x[4] = {-1, 2, -3, 4};
  float sl[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){4}, x),
                         mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, sl)}, *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"X", "S"}, in, 2, out), KEEL_ERR_SHAPE);
  keel_value_release(in[0]), keel_value_release(in[1]);
  keel_session_destroy(s);
}

/* Legacy (opset < 7) broadcast with axis = INT64_MAX (fuzzer): the fit
 * check computed axis + rank(B), a signed overflow; now a shape error. */
static void legacy_broadcast_huge_axis(void) {
  for (int t = 0; t < 2; t++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "A", KEEL_FLOAT, 2, (int64_t[]){2, 3});
    mb_input(g, "B", KEEL_FLOAT, 1, (int64_t[]){3});
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    mb_node *n = mb_add(g, "Add", "A,B", "Y");
    mb_attr_i(n, "broadcast", 1);
    mb_attr_i(n, "axis", t == 0 ? INT64_MAX : 1);
    keel_session_t *s = mb_session(g, 6);
    CHECK(s != NULL);
    if (!s) continue;
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, a),
                           mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, b)}, *out[1] = {0};
    if (t == 0) {
      CHECK_STATUS(keel_run(s, (const char *[]){"A", "B"}, in, 2, out), KEEL_ERR_SHAPE);
      CHECK(strstr(keel_last_error(), "axis") != NULL);
    } else {
      CHECK_OK(keel_run(s, (const char *[]){"A", "B"}, in, 2, out));
      CHECK(out[0] && keel_value_at(out[0], 5) == 36);
    }
    keel_value_release(in[0]), keel_value_release(in[1]), keel_value_release(out[0]);
    keel_session_destroy(s);
  }
}

int main(void) {
  prelu_types_must_match();
  legacy_broadcast_huge_axis();
  CHECK_OK(keel_pool_create(3, 16, &g_pool));
  for (int i = 0; i < 500; i++) random_case();
  keel_pool_destroy(g_pool);
  check_broadcast_errors();
  check_session_op("Add", r_add, 0);
  check_session_op("Sub", r_sub, 0);
  check_session_op("Mul", r_mul, 0);
  check_session_op("Div", r_div, 0);
  check_session_op("Greater", r_gt, 1);
  check_session_op("Equal", r_eq, 1);
  check_equal_strings();
  return check_report();
}
