/* test_grad_shape_kernels.c: the helper kernels of ops/shape/shape_backward.c (and
 * ZerosLike of a sequence, ops/training/backward.c) run directly from a model importing
 * "ai.keel.internal": GatherGrad against a naive scatter-add in float64 and
 * float32 (sizes large enough for the thread pool to split the work),
 * SliceGrad likewise, GradAdd of tensors and of sequences, SequenceAtGrad,
 * ConcatFromSequenceGrad, and their refusals of inputs that do not fit. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define KI "ai.keel.internal"

static keel_session_t *session(mb_graph *g, int opset) {
  size_t len;
  uint8_t *bytes = mb_model_domains(g, opset, KI, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  if (st) fprintf(stderr, "session: %s\n", keel_last_error());
  return s;
}

/* Runs s on n inputs; returns the status, *out the first output. */
static keel_status run(keel_session_t *s, int n, const char *const *names, keel_value_t **in,
                       keel_value_t **out) {
  keel_status st = keel_run(s, names, in, (size_t)n, out);
  for (int i = 0; i < n; i++) keel_value_release(in[i]);
  return st;
}

/* ========================================================= GatherGrad */

typedef struct gg_case {
  int rank;
  int64_t x[4];
  int axis;
  int ind_rank;
  int64_t ind[2];
} gg_case;

static void naive_gather_grad(const gg_case *c, const double *gy, const int64_t *idx, double *gx) {
  int axis = c->axis < 0 ? c->axis + c->rank : c->axis;
  int64_t outer = 1, inner = 1, dim = c->x[axis], ni = 1, nx = 1;
  for (int d = 0; d < axis; d++) outer *= c->x[d];
  for (int d = axis + 1; d < c->rank; d++) inner *= c->x[d];
  for (int d = 0; d < c->ind_rank; d++) ni *= c->ind[d];
  for (int d = 0; d < c->rank; d++) nx *= c->x[d];
  memset(gx, 0, sizeof(double) * (size_t)nx);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t t = 0; t < ni; t++) {
      int64_t r = idx[t] < 0 ? idx[t] + dim : idx[t];
      for (int64_t j = 0; j < inner; j++) gx[(o * dim + r) * inner + j] += gy[(o * ni + t) * inner + j];
    }
}

/* One GatherGrad run in `dtype`; the result checked against the naive one. */
static void gather_grad_case(const gg_case *c, int dtype) {
  int axis = c->axis < 0 ? c->axis + c->rank : c->axis;
  int64_t gshape[8], ni = 1, ng = 1, nx = 1;
  int gr = 0;
  for (int d = 0; d < axis; d++) gshape[gr++] = c->x[d];
  for (int d = 0; d < c->ind_rank; d++) gshape[gr++] = c->ind[d], ni *= c->ind[d];
  for (int d = axis + 1; d < c->rank; d++) gshape[gr++] = c->x[d];
  for (int d = 0; d < gr; d++) ng *= gshape[d];
  for (int d = 0; d < c->rank; d++) nx *= c->x[d];
  double *gy = malloc(sizeof(double) * (size_t)ng), *want = malloc(sizeof(double) * (size_t)nx);
  float *gyf = malloc(sizeof(float) * (size_t)ng), *xf = calloc((size_t)nx, sizeof(float));
  double *xd = calloc((size_t)nx, sizeof(double));
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)ni);
  for (int64_t i = 0; i < ng; i++) gy[i] = gyf[i] = (float)sin(0.37 * (double)i);
  for (int64_t i = 0; i < ni; i++) idx[i] = (i * 7) % c->x[axis] - (i % 3 == 0 ? c->x[axis] : 0);
  naive_gather_grad(c, gy, idx, want);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "gy", dtype, gr, gshape);
  mb_input(g, "x", dtype, c->rank, c->x);
  mb_input(g, "ind", KEEL_INT64, c->ind_rank, c->ind);
  mb_output(g, "gx", dtype, -1, NULL);
  mb_node *n = mb_add(g, "GatherGrad", "gy,x,ind", "gx");
  mb_domain(n, KI);
  mb_attr_i(n, "axis", c->axis);
  keel_session_t *s = session(g, 13);
  CHECK(s != NULL);
  if (s) {
    bool f = dtype == KEEL_FLOAT;
    keel_value_t *in[3] = {mb_tensor(s, dtype, gr, gshape, f ? (void *)gyf : (void *)gy),
                           mb_tensor(s, dtype, c->rank, c->x, f ? (void *)xf : (void *)xd),
                           mb_tensor(s, KEEL_INT64, c->ind_rank, c->ind, idx)};
    keel_value_t *out = NULL;
    CHECK_OK(run(s, 3, (const char *[]){"gy", "x", "ind"}, in, &out));
    CHECK(out && keel_value_numel(out) == nx && keel_value_rank(out) == c->rank);
    double worst = 0;
    for (int64_t i = 0; out && i < nx; i++) worst = fmax(worst, fabs(keel_value_at(out, i) - want[i]));
    CHECK(worst <= (f ? 1e-5 : 1e-12));
    if (worst > (f ? 1e-5 : 1e-12)) fprintf(stderr, "GatherGrad axis %d: off by %g\n", c->axis, worst);
    keel_value_release(out);
    keel_session_destroy(s);
  }
  free(gy), free(want), free(gyf), free(xf), free(xd), free(idx);
}

/* Indices out of range and a gradient of the wrong shape are refused. */
static void gather_grad_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "gy", KEEL_FLOAT, -1, NULL);
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){3, 2});
  mb_input(g, "ind", KEEL_INT64, 1, (int64_t[]){2});
  mb_output(g, "gx", KEEL_FLOAT, -1, NULL);
  mb_domain(mb_add(g, "GatherGrad", "gy,x,ind", "gx"), KI);
  keel_session_t *s = session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  const char *names[] = {"gy", "x", "ind"};
  float gy[4] = {1, 2, 3, 4}, x[6] = {0};
  keel_value_t *out = NULL;
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, gy),
                         mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, x),
                         mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){0, 3})};
  CHECK_STATUS(run(s, 3, names, in, &out), KEEL_ERR_RUNTIME);
  CHECK(strstr(keel_last_error(), "out of range") != NULL);
  keel_value_t *in2[3] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 1}, gy),
                          mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, x),
                          mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){0, -3})};
  CHECK_STATUS(run(s, 3, names, in2, &out), KEEL_ERR_SHAPE);
  keel_value_t *in3[3] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, gy),
                          mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 2}, x),
                          mb_tensor(s, KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, -3})};
  CHECK_OK(run(s, 3, names, in3, &out));
  const float want[6] = {3, 4, 0, 0, 1, 2};
  for (int i = 0; out && i < 6; i++) CHECK(keel_value_at(out, i) == want[i]);
  keel_value_release(out);
  keel_session_destroy(s);
}

/* ============================================================ GradAdd */

static void grad_add_tensors(void) {
  enum { N = 70001 };
  float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
  for (int i = 0; i < N; i++) a[i] = (float)i * 0.5f, b[i] = 1.0f - (float)i;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_FLOAT, 1, (int64_t[]){N});
  mb_input(g, "b", KEEL_FLOAT, -1, NULL);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_domain(mb_add(g, "GradAdd", "a,b", "y"), KI);
  keel_session_t *s = session(g, 13);
  CHECK(s != NULL);
  if (s) {
    const char *names[] = {"a", "b"};
    keel_value_t *out = NULL;
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N}, a),
                           mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N}, b)};
    CHECK_OK(run(s, 2, names, in, &out));
    int bad = 0;
    for (int i = 0; out && i < N; i++) bad += keel_value_at(out, i) != (double)(a[i] + b[i]);
    CHECK(out && bad == 0);
    keel_value_release(out);
    /* shapes that differ (even when broadcastable) are refused */
    keel_value_t *in2[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){N}, a),
                            mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, b)};
    CHECK_STATUS(run(s, 2, names, in2, &out), KEEL_ERR_SHAPE);
    CHECK(strstr(keel_last_error(), "GradAdd") != NULL);
    keel_session_destroy(s);
  }
  free(a), free(b);
}

/* GradAdd of [a, b] and [b, a], ZerosLike of [a, b] added to it, read
 * back with ConcatFromSequence. */
static void grad_add_sequences(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_DOUBLE, 2, (int64_t[]){1, 2});
  mb_input(g, "b", KEEL_DOUBLE, 2, (int64_t[]){1, 2});
  mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  mb_add(g, "SequenceConstruct", "a,b", "s");
  mb_add(g, "SequenceConstruct", "b,a", "t");
  mb_domain(mb_add(g, "GradAdd", "s,t", "u"), KI);
  mb_domain(mb_add(g, "ZerosLike", "s", "z"), KI);
  mb_domain(mb_add(g, "GradAdd", "u,z", "v"), KI);
  mb_add(g, "ConcatFromSequence", "v", "y");
  keel_session_t *s = session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *out = NULL;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, (double[]){1, 2}),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, (double[]){10, 20})};
  CHECK_OK(run(s, 2, (const char *[]){"a", "b"}, in, &out));
  CHECK(out && keel_value_rank(out) == 2 && keel_value_shape(out)[0] == 2);
  const double want[4] = {11, 22, 11, 22};
  for (int i = 0; out && i < 4; i++) CHECK(keel_value_at(out, i) == want[i]);
  keel_value_release(out);
  keel_session_destroy(s);
}

/* ======================================= SequenceAtGrad, ConcatFromSequenceGrad */

static void sequence_kernels(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_DOUBLE, 2, (int64_t[]){1, 2});
  mb_input(g, "b", KEEL_DOUBLE, 2, (int64_t[]){2, 2});
  mb_input(g, "g", KEEL_DOUBLE, -1, NULL);
  mb_input(g, "p", KEEL_INT64, 0, NULL);
  mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  mb_output(g, "back", KEEL_DOUBLE, -1, NULL);
  mb_add(g, "SequenceConstruct", "a,b,a", "s");
  mb_domain(mb_add(g, "SequenceAtGrad", "s,p,g", "d"), KI);
  mb_add(g, "ConcatFromSequence", "d", "y");
  mb_node *c = mb_add(g, "ConcatFromSequenceGrad", "y,s", "pieces");
  mb_domain(c, KI);
  mb_add(g, "ConcatFromSequence", "pieces", "back");
  keel_session_t *s = session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  const char *names[] = {"a", "b", "g", "p"};
  double a[2] = {1, 2}, b[4] = {3, 4, 5, 6}, gg[4] = {7, 8, 9, 10};
  keel_value_t *out[2] = {0};
  keel_value_t *in[4] = {mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, a),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 2}, b),
                         mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 2}, gg),
                         mb_tensor(s, KEEL_INT64, 0, NULL, (int64_t[]){-2})};
  CHECK_OK(run(s, 4, names, in, out));
  const double want[8] = {0, 0, 7, 8, 9, 10, 0, 0};
  CHECK(out[0] && keel_value_numel(out[0]) == 8 && out[1] && keel_value_numel(out[1]) == 8);
  for (int i = 0; out[0] && out[1] && i < 8; i++)
    CHECK(keel_value_at(out[0], i) == want[i] && keel_value_at(out[1], i) == want[i]);
  keel_value_release(out[0]), keel_value_release(out[1]);
  /* g shaped as another element, and a position past the end */
  keel_value_t *in2[4] = {mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, a),
                          mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 2}, b),
                          mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, gg),
                          mb_tensor(s, KEEL_INT64, 0, NULL, (int64_t[]){1})};
  CHECK_STATUS(run(s, 4, names, in2, out), KEEL_ERR_SHAPE);
  keel_value_t *in3[4] = {mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, a),
                          mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){2, 2}, b),
                          mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){1, 2}, gg),
                          mb_tensor(s, KEEL_INT64, 0, NULL, (int64_t[]){3})};
  CHECK_STATUS(run(s, 4, names, in3, out), KEEL_ERR_RUNTIME);
  keel_session_destroy(s);
}

/* ========================================================== SliceGrad */

/* x [64, 40, 33]: axis 0 from 60 down to 2 by -3, axis 2 from 1 by 2
 * (ends clamped), axis 1 whole; float32 and float64 against a naive loop. */
static void slice_grad_case(int dtype) {
  enum { X0 = 64, X1 = 40, X2 = 33 };
  int64_t xs[3] = {X0, X1, X2}, gs[3] = {0, X1, 0};
  for (int64_t i = 60; i > 2; i -= 3) gs[0]++;
  for (int64_t i = 1; i < X2; i += 2) gs[2]++;
  int64_t ng = gs[0] * gs[1] * gs[2], nx = X0 * X1 * X2;
  double *gy = malloc(sizeof(double) * (size_t)ng), *want = calloc((size_t)nx, sizeof(double));
  float *gyf = malloc(sizeof(float) * (size_t)ng);
  void *x = calloc((size_t)nx, sizeof(double));
  for (int64_t i = 0; i < ng; i++) gy[i] = gyf[i] = (float)cos(0.11 * (double)i);
  for (int64_t a = 0; a < gs[0]; a++)
    for (int64_t b = 0; b < gs[1]; b++)
      for (int64_t c = 0; c < gs[2]; c++)
        want[((60 - 3 * a) * X1 + b) * X2 + 1 + 2 * c] = gy[(a * gs[1] + b) * gs[2] + c];
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "gy", dtype, 3, gs);
  mb_input(g, "x", dtype, 3, xs);
  mb_init(g, "st", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){60, 1});
  mb_init(g, "en", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, INT64_MAX});
  mb_init(g, "ax", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){0, -1});
  mb_init(g, "sp", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){-3, 2});
  mb_output(g, "gx", dtype, -1, NULL);
  mb_domain(mb_add(g, "SliceGrad", "gy,x,st,en,ax,sp", "gx"), KI);
  keel_session_t *s = session(g, 13);
  CHECK(s != NULL);
  if (s) {
    bool f = dtype == KEEL_FLOAT;
    keel_value_t *in[2] = {mb_tensor(s, dtype, 3, gs, f ? (void *)gyf : (void *)gy),
                           mb_tensor(s, dtype, 3, xs, x)};
    keel_value_t *out = NULL;
    CHECK_OK(run(s, 2, (const char *[]){"gy", "x"}, in, &out));
    int bad = !out || keel_value_numel(out) != nx;
    for (int64_t i = 0; !bad && i < nx; i++) bad += keel_value_at(out, i) != want[i];
    CHECK(bad == 0);
    keel_value_release(out);
    /* a gradient of another shape is refused */
    keel_value_t *in2[2] = {mb_tensor(s, dtype, 3, xs, x), mb_tensor(s, dtype, 3, xs, x)};
    CHECK_STATUS(run(s, 2, (const char *[]){"gy", "x"}, in2, &out), KEEL_ERR_SHAPE);
    keel_session_destroy(s);
  }
  free(gy), free(want), free(gyf), free(x);
}

int main(void) {
  const gg_case cases[] = {
      {2, {30, 300}, 0, 1, {40}},        /* embedding rows, some repeated   */
      {3, {3, 7, 130}, 1, 2, {2, 5}},    /* a middle axis, 2-D indices      */
      {3, {40, 6, 2}, -1, 1, {3}},       /* the last axis, many outer rows  */
      {2, {9, 4}, 0, 0, {0}},            /* a scalar index                  */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gather_grad_case(&cases[i], KEEL_DOUBLE);
    gather_grad_case(&cases[i], KEEL_FLOAT);
  }
  gather_grad_errors();
  slice_grad_case(KEEL_DOUBLE);
  slice_grad_case(KEEL_FLOAT);
  grad_add_tensors();
  grad_add_sequences();
  sequence_kernels();
  return check_report();
}
