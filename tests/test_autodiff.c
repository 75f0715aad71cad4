/* test_autodiff.c: the Gradient operator, checked against finite
 * differences of the forward model (both run by keel, in double), for a
 * small network with broadcasting; the recomputation path (Gradient fed
 * other tensors than its xs); zeros for unconnected xs; and a clear error
 * for an op without a derivative rule. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define TRAIN "ai.onnx.preview.training"

/* y = Log(Exp(Tanh(x W + b)) * Sigmoid(x W + b) + 1) - Neg(Relu(x W)) / c
 * and, when `grad`, Gradient(xs=[x, W, b], y) fed with `feed` names. */
static mb_graph *net(bool grad, const char *feed_x) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_DOUBLE, 2, (int64_t[]){2, 3});
  mb_input(g, "W", KEEL_DOUBLE, 2, (int64_t[]){3, 4});
  mb_input(g, "b", KEEL_DOUBLE, 1, (int64_t[]){4});
  mb_input(g, "x2", KEEL_DOUBLE, 2, (int64_t[]){2, 3});
  double one = 1, c = 3;
  mb_init(g, "one", KEEL_DOUBLE, 0, NULL, &one);
  mb_init(g, "c", KEEL_DOUBLE, 0, NULL, &c);
  mb_add(g, "MatMul", "x,W", "h");
  mb_add(g, "Add", "h,b", "h2");
  mb_add(g, "Tanh", "h2", "t");
  mb_add(g, "Sigmoid", "h2", "s");
  mb_add(g, "Exp", "t", "e");
  mb_add(g, "Mul", "e,s", "m");
  mb_add(g, "Add", "m,one", "m1");
  mb_add(g, "Log", "m1", "l");
  mb_add(g, "Relu", "h", "r");
  mb_add(g, "Neg", "r", "nr");
  mb_add(g, "Div", "nr,c", "d");
  mb_add(g, "Sub", "l,d", "y");
  mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  if (grad) {
    mb_output(g, "dx", KEEL_DOUBLE, -1, NULL);
    mb_output(g, "dW", KEEL_DOUBLE, -1, NULL);
    mb_output(g, "db", KEEL_DOUBLE, -1, NULL);
    char ins[64];
    snprintf(ins, sizeof ins, "%s,W,b", feed_x);
    mb_node *n = mb_add(g, "Gradient", ins, "dx,dW,db");
    mb_domain(n, TRAIN);
    mb_name(n, "grad");
    mb_attr_s(n, "y", "y");
    mb_attr_strs(n, "xs", 3, (const char *[]){"x", "W", "b"});
  }
  return g;
}

static double x_[6] = {0.3, -0.8, 0.5, 1.2, -0.1, 0.7};
static double x2_[6] = {-0.4, 0.9, 0.2, -1.1, 0.6, 0.05};
static double W_[12] = {0.2, -0.5, 0.8, 0.1, -0.3, 0.4, 0.6, -0.9, 0.7, 0.05, -0.2, 0.3};
static double b_[4] = {0.1, -0.2, 0.3, 0.0};

static keel_session_t *session(bool grad, const char *feed) {
  size_t len;
  mb_graph *g = net(grad, feed);
  /* the model imports the training domain */
  uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, NULL, &s));
  free(bytes);
  return s;
}

/* sum(y) for the forward model at (x, W, b). */
static double forward_sum(keel_session_t *s, const double *x, const double *W, const double *b) {
  keel_value_t *in[4] = {mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 3}, x),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){3, 4}, W),
                         mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){4}, b),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 3}, x2_)};
  keel_value_t *out[1] = {0};
  double sum = NAN;
  if (!keel_run(s, (const char *[]){"x", "W", "b", "x2"}, in, 4, out)) {
    sum = 0;
    for (int64_t i = 0; i < keel_value_numel(out[0]); i++) sum += keel_value_at(out[0], i);
  }
  keel_value_release(out[0]);
  for (int i = 0; i < 4; i++) keel_value_release(in[i]);
  return sum;
}

/* Central differences of sum(y) against each gradient output. */
static void check_against_fd(keel_session_t *fwd, keel_value_t *const *g, const double *x) {
  double *params[3] = {(double[6]){0}, (double[12]){0}, (double[4]){0}};
  memcpy(params[0], x, sizeof x_), memcpy(params[1], W_, sizeof W_), memcpy(params[2], b_, sizeof b_);
  int sizes[3] = {6, 12, 4};
  for (int p = 0; p < 3; p++) {
    CHECK(g[1 + p] && keel_value_numel(g[1 + p]) == sizes[p]);
    for (int i = 0; g[1 + p] && i < sizes[p]; i++) {
      double keep = params[p][i], h = 1e-6;
      params[p][i] = keep + h;
      double up = forward_sum(fwd, params[0], params[1], params[2]);
      params[p][i] = keep - h;
      double down = forward_sum(fwd, params[0], params[1], params[2]);
      params[p][i] = keep;
      CHECK_NEAR(keel_value_at(g[1 + p], i), (up - down) / (2 * h), 1e-6);
    }
  }
}

static void gradients_match_finite_differences(const char *feed, const double *at) {
  keel_session_t *s = session(true, feed), *fwd = session(false, "x");
  if (!s || !fwd) return;
  keel_value_t *in[4] = {mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 3}, x_),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){3, 4}, W_),
                         mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){4}, b_),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 3}, x2_)};
  keel_value_t *out[4] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x", "W", "b", "x2"}, in, 4, out));
  if (out[0]) check_against_fd(fwd, out, at);
  for (int i = 0; i < 4; i++) keel_value_release(out[i]), keel_value_release(in[i]);
  keel_session_destroy(s);
  keel_session_destroy(fwd);
}

/* dy/du for a u that y does not depend on is zeros; a node on the path
 * without a derivative rule is a clear UNSUPPORTED naming it. */
static void zeros_and_unsupported(void) {
  for (int bad = 0; bad < 2; bad++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "a", KEEL_FLOAT, 1, (int64_t[]){3});
    mb_input(g, "u", KEEL_FLOAT, 1, (int64_t[]){3});
    mb_output(g, "y", KEEL_FLOAT, -1, NULL);
    mb_output(g, "da", KEEL_FLOAT, -1, NULL);
    mb_output(g, "du", KEEL_FLOAT, -1, NULL);
    mb_name(mb_add(g, bad ? "Det" : "Neg", "a", "y"), "op_on_path");
    mb_node *n = mb_add(g, "Gradient", "a,u", "da,du");
    mb_domain(n, TRAIN);
    mb_attr_s(n, "y", "y");
    mb_attr_strs(n, "xs", 2, (const char *[]){"a", "u"});
    size_t len;
    uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
    keel_session_t *s = NULL;
    keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
    free(bytes);
    if (bad) {
      CHECK(st == KEEL_ERR_UNSUPPORTED && strstr(keel_last_error(), "op_on_path"));
      continue;
    }
    CHECK_OK(st);
    if (!s) continue;
    float a[3] = {1, 2, 3}, u[3] = {4, 5, 6};
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, a),
                           mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, u)};
    keel_value_t *out[3] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"a", "u"}, in, 2, out));
    for (int i = 0; out[0] && i < 3; i++) {
      CHECK(keel_value_at(out[1], i) == -1.0);
      CHECK(keel_value_at(out[2], i) == 0.0);
    }
    for (int i = 0; i < 3; i++) keel_value_release(out[i]);
    keel_value_release(in[0]), keel_value_release(in[1]);
    keel_session_destroy(s);
  }
}

/* A node on the path with too few inputs for its rule: an error, not a
 * read past its input list (a fuzzer finding). */
static void short_node_is_refused(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_FLOAT, 1, (int64_t[]){3});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "da", KEEL_FLOAT, -1, NULL);
  mb_name(mb_add(g, "Mul", "a", "y"), "one_input_mul");
  mb_node *n = mb_add(g, "Gradient", "a", "da");
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "y");
  mb_attr_strs(n, "xs", 1, (const char *[]){"a"});
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  CHECK_STATUS(keel_session_create_from_memory(bytes, len, NULL, NULL, &s), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "one_input_mul") != NULL);
  free(bytes);
}

int main(void) {
  short_node_is_refused();
  zeros_and_unsupported();
  /* fed with x itself: forward values reused */
  gradients_match_finite_differences("x", x_);
  /* fed with another tensor: the region is recomputed at x2 */
  gradients_match_finite_differences("x2", x2_);
  return check_report();
}
