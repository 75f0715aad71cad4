/* gradcheck.h: a derivative rule checked against central finite
 * differences, in float64, through keel itself.
 *
 *   static void body(mb_graph *g, void *ctx) {        // reads the inputs,
 *     mb_node *n = mb_add(g, "Softmax", "x", "y");     // writes "y"
 *     mb_attr_i(n, "axis", 1);
 *   }
 *   gc_input in[] = {{"x", 2, {2, 3}, xdata, true}};
 *   gc_check("softmax axis 1", body, NULL, in, 1, 13, 1e-6);
 *
 * The checked scalar is L = sum(y * R) for a fixed R of y's shape (so a
 * rule that is right only for sum(y) still fails), differentiated by a
 * Gradient node with xs = the inputs marked `diff`. Inputs not marked
 * (indices, shapes: set `dtype` to KEEL_INT64 and `idata`) are fed as is.
 * The body may build sub-graphs (If, Loop, Scan) with mb_attr_g. */
#ifndef KEEL_GRADCHECK_H
#define KEEL_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"

#define GC_MAX_RANK 8

typedef struct gc_input {
  const char *name;
  int rank;
  int64_t dims[GC_MAX_RANK];
  const double *data;          /* float64 inputs                          */
  bool diff;                   /* differentiate L with respect to it      */
  int dtype;                   /* 0: KEEL_DOUBLE; else e.g. KEEL_INT64   */
  const void *idata;           /* data of a non-double input              */
} gc_input;

typedef void (*gc_body_fn)(mb_graph *g, void *ctx);

/* gc_check: every gradient element against (L(x+h) - L(x-h)) / 2h with
 * |analytic - numeric| <= tol * (1 + |numeric|); failures go through
 * check.h with `label`. `opset`: the model's ai.onnx opset.
 * gc_gradients: the gradients themselves (for callers with their own
 * expectations): grads[i] gets numel doubles for each diff input, in
 * order (malloc'ed, free each); false (after a check failure) when keel
 * refuses. Header-only, so failures count in the including test. */
#define TRAIN "ai.onnx.preview.training"

static int64_t numel(const gc_input *x) {
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) n *= x->dims[d];
  return n;
}

static int dtype_of(const gc_input *x) { return x->dtype ? x->dtype : KEEL_DOUBLE; }

/* The graph: inputs, the body, L = y * R (+ Gradient when `grad`). R has
 * y's shape (y_rank/y_dims, from a first forward run). */
static keel_session_t *build(gc_body_fn body, void *ctx, const gc_input *in, int n_in, int opset,
                             int y_rank, const int64_t *y_dims, const double *R, bool grad) {
  mb_graph *g = mb_graph_new("main");
  for (int i = 0; i < n_in; i++) mb_input(g, in[i].name, dtype_of(&in[i]), in[i].rank, in[i].dims);
  body(g, ctx);
  if (R) {
    mb_init(g, "gc_R", KEEL_DOUBLE, y_rank, y_dims, R);
    mb_add(g, "Mul", "y,gc_R", "gc_L");
    mb_output(g, "gc_L", KEEL_DOUBLE, -1, NULL);
  } else {
    mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  }
  if (grad) {
    char ins[2048] = "", outs[2048] = "";
    const char *xs[64];
    int nx = 0;
    for (int i = 0; i < n_in && nx < 64; i++) {
      if (!in[i].diff) continue;
      char o[256];
      snprintf(o, sizeof o, "gc_d_%s", in[i].name);
      mb_output(g, o, KEEL_DOUBLE, -1, NULL);
      snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%s", nx ? "," : "", in[i].name);
      snprintf(outs + strlen(outs), sizeof outs - strlen(outs), "%s%s", nx ? "," : "", o);
      xs[nx++] = in[i].name;
    }
    mb_node *n = mb_add(g, "Gradient", ins, outs);
    mb_domain(n, TRAIN);
    mb_name(n, "gc_gradient");
    mb_attr_s(n, "y", "gc_L");
    mb_attr_strs(n, "xs", nx, xs);
  }
  size_t len;
  uint8_t *bytes = mb_model_domains(g, opset, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  if (st) fprintf(stderr, "gradcheck: %s\n", keel_last_error());
  return st ? NULL : s;
}

/* Runs s on the inputs (double ones from `vals`); out[0..n_out) filled. */
static bool run(keel_session_t *s, const gc_input *in, int n_in, double *const *vals,
                keel_value_t **out) {
  keel_value_t *v[64];
  const char *names[64];
  for (int i = 0; i < n_in; i++) {
    names[i] = in[i].name;
    v[i] = mb_tensor(s, dtype_of(&in[i]), in[i].rank, in[i].dims,
                     in[i].dtype && in[i].dtype != KEEL_DOUBLE ? in[i].idata : (const void *)vals[i]);
  }
  keel_status st = keel_run(s, names, v, (size_t)n_in, out);
  if (st) fprintf(stderr, "gradcheck: %s\n", keel_last_error());
  for (int i = 0; i < n_in; i++) keel_value_release(v[i]);
  return st == KEEL_OK;
}

static double sum_of(keel_value_t *v) {
  double s = 0;
  for (int64_t i = 0; i < keel_value_numel(v); i++) s += keel_value_at(v, i);
  return s;
}

/* y's shape from a plain forward run; R filled with fixed values. */
static double *make_R(gc_body_fn body, void *ctx, const gc_input *in, int n_in, int opset,
                      double *const *vals, int *rank, int64_t *dims) {
  keel_session_t *s = build(body, ctx, in, n_in, opset, 0, NULL, NULL, false);
  keel_value_t *y = NULL;
  double *R = NULL;
  if (s && run(s, in, n_in, vals, &y) && keel_value_rank(y) >= 0) {
    *rank = keel_value_rank(y);
    memcpy(dims, keel_value_shape(y), sizeof(int64_t) * (size_t)*rank);
    int64_t n = keel_value_numel(y);
    R = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) R[i] = 0.5 + 0.37 * sin(1.3 * (double)i + 0.2);
  }
  keel_value_release(y);
  keel_session_destroy(s);
  return R;
}

static double **copy_inputs(const gc_input *in, int n_in) {
  double **vals = calloc((size_t)n_in, sizeof(double *));
  for (int i = 0; i < n_in; i++) {
    if (dtype_of(&in[i]) != KEEL_DOUBLE) continue;
    int64_t n = numel(&in[i]);
    vals[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (n) memcpy(vals[i], in[i].data, sizeof(double) * (size_t)n);
  }
  return vals;
}

static void free_inputs(double **vals, int n_in) {
  for (int i = 0; i < n_in; i++) free(vals[i]);
  free(vals);
}

static bool gc_gradients(gc_body_fn body, void *ctx, const gc_input *in, int n_in, int opset,
                  double **grads) {
  int rank = 0;
  int64_t dims[GC_MAX_RANK * 2];
  double **vals = copy_inputs(in, n_in);
  double *R = make_R(body, ctx, in, n_in, opset, vals, &rank, dims);
  keel_session_t *s = R ? build(body, ctx, in, n_in, opset, rank, dims, R, true) : NULL;
  keel_value_t *out[65] = {0};
  bool ok = s && run(s, in, n_in, vals, out);
  CHECK(ok);
  for (int i = 0, k = 1; i < n_in; i++) {
    if (!in[i].diff) continue;
    int64_t n = numel(&in[i]);
    grads[k - 1] = calloc((size_t)(n ? n : 1), sizeof(double));
    if (ok && keel_value_numel(out[k]) != n) {
      ok = false;
      CHECK(!"gradient has the input's size");
    }
    for (int64_t j = 0; ok && j < n; j++) grads[k - 1][j] = keel_value_at(out[k], j);
    k++;
  }
  for (int i = 0; i < 65; i++) keel_value_release(out[i]);
  keel_session_destroy(s);
  free(R);
  free_inputs(vals, n_in);
  return ok;
}

static void gc_check(const char *label, gc_body_fn body, void *ctx, const gc_input *in, int n_in,
              int opset, double tol) {
  double *grads[64] = {0};
  int before = check_failures;
  bool ok = gc_gradients(body, ctx, in, n_in, opset, grads);
  int rank = 0;
  int64_t dims[GC_MAX_RANK * 2];
  double **vals = copy_inputs(in, n_in);
  double *R = ok ? make_R(body, ctx, in, n_in, opset, vals, &rank, dims) : NULL;
  keel_session_t *f = R ? build(body, ctx, in, n_in, opset, rank, dims, R, false) : NULL;
  for (int i = 0, k = 0; f && i < n_in; i++) {
    if (!in[i].diff) continue;
    for (int64_t j = 0; j < numel(&in[i]); j++) {
      double keep = vals[i][j], h = 1e-6 * (1 + fabs(keep)), up = NAN, down = NAN;
      keel_value_t *o = NULL;
      vals[i][j] = keep + h;
      if (run(f, in, n_in, vals, &o)) up = sum_of(o);
      keel_value_release(o), o = NULL;
      vals[i][j] = keep - h;
      if (run(f, in, n_in, vals, &o)) down = sum_of(o);
      keel_value_release(o);
      vals[i][j] = keep;
      double num = (up - down) / (2 * h), an = grads[k][j];
      if (!(fabs(an - num) <= tol * (1 + fabs(num)))) {
        fprintf(stderr, "gradcheck %s: d/d%s[%lld] = %.9g, finite differences %.9g\n", label,
                in[i].name, (long long)j, an, num);
        CHECK(fabs(an - num) <= tol * (1 + fabs(num)));
        break;
      }
    }
    k++;
  }
  if (ok && !f) CHECK(!"forward model builds");
  for (int i = 0; i < 64; i++) free(grads[i]);
  keel_session_destroy(f);
  free(R);
  free_inputs(vals, n_in);
  if (check_failures != before) fprintf(stderr, "gradcheck %s: FAILED\n", label);
}

#endif
