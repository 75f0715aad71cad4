/* opcase.h: one-node op cases for the transformer-op tests: inputs and
 * expected outputs held as doubles, converted to any element type, the
 * model built with mb.h, run, and each output compared within a
 * tolerance (NaN matches NaN, -inf matches -inf). Header-only: each test
 * program includes it once. */
#ifndef KEEL_OPCASE_H
#define KEEL_OPCASE_H

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t oc_rng = 0x9E3779B97F4A7C15ull;
static uint64_t oc_next(void) {
  oc_rng ^= oc_rng << 13, oc_rng ^= oc_rng >> 7, oc_rng ^= oc_rng << 17;
  return oc_rng;
}
static int rnd(int n) { return (int)(oc_next() % (uint64_t)n); }
static double frand(void) { return (double)(oc_next() % 20001) / 10000.0 - 1.0; } /* [-1, 1] */

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* The value as dtype dt holds it. */
static double as_dtype(int dt, double v) {
  uint8_t b[8];
  keel_elem_set_f64(dt, b, 0, v);
  return keel_elem_get_f64(dt, b, 0);
}

/* A graph input or expected output; v has numel(rank, dims) doubles
 * (malloc'ed by tv_new, freed by tv_free). */
typedef struct tv {
  const char *name;
  int dt, rank;
  int64_t dims[6];
  double *v;
} tv;

static tv tv_new(const char *name, int dt, int rank, const int64_t *dims) {
  tv t = {name, dt, rank, {0}, NULL};
  if (rank) memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  t.v = calloc((size_t)numel(rank, dims) + 1, sizeof(double));
  return t;
}
static void tv_free(tv *t) {
  free(t->v);
  t->v = NULL;
}
/* Random values in [-amp, amp], representable in t's type. */
static void tv_rand(tv *t, double amp) {
  for (int64_t i = 0; i < numel(t->rank, t->dims); i++) t->v[i] = as_dtype(t->dt, frand() * amp);
}

/* An attribute: kind 'i', 'f', 's' or 'I' (ints). */
typedef struct attr {
  const char *name;
  int kind;
  int64_t i;
  float f;
  const char *s;
} attr;

static keel_value_t *value_of(keel_session_t *s, const tv *t) {
  int64_t n = numel(t->rank, t->dims);
  uint8_t *buf = malloc((size_t)(n + 1) * 8);
  for (int64_t i = 0; i < n; i++) keel_elem_set_f64(t->dt, buf, (size_t)i, t->v[i]);
  keel_value_t *out = NULL;
  CHECK_OK(keel_tensor_create(s, (keel_dtype)t->dt, t->rank, t->dims, buf, &out));
  free(buf);
  return out;
}

/* One node of `op` (domain "" or e.g. "com.microsoft" at opset 1) on
 * inputs in[] (a NULL name is omitted), outputs out_names
 * (comma-separated, empty names allowed). */
static keel_session_t *oc_session(const char *domain, const char *op, int opset, const tv *in,
                                  int n_in, const char *out_names, const attr *attrs) {
  mb_graph *g = mb_graph_new("main");
  char ins[512] = "", outs[256];
  for (int i = 0; i < n_in; i++) {
    if (i) strcat(ins, ",");
    if (!in[i].name) continue;
    strcat(ins, in[i].name);
    mb_input(g, in[i].name, in[i].dt, in[i].rank, in[i].dims);
  }
  snprintf(outs, sizeof outs, "%s", out_names);
  for (char *p = strtok(outs, ","); p; p = strtok(NULL, ","))
    if (*p) mb_output(g, p, KEEL_UNDEFINED, -1, NULL);
  mb_node *n = mb_add(g, op, ins, out_names);
  for (const attr *a = attrs; a && a->name; a++) {
    if (a->kind == 'i') mb_attr_i(n, a->name, a->i);
    else if (a->kind == 'f') mb_attr_f(n, a->name, a->f);
    else if (a->kind == 's') mb_attr_s(n, a->name, a->s);
  }
  if (domain && *domain) {
    mb_domain(n, domain);
    size_t len;
    uint8_t *bytes = mb_model_domains(g, 21, domain, opset, &len);
    keel_session_t *s = NULL;
    if (keel_session_create_from_memory(bytes, len, NULL, NULL, &s))
      fprintf(stderr, "session: %s\n", keel_last_error());
    free(bytes);
    return s;
  }
  return mb_session(g, opset);
}

static keel_status oc_run(keel_session_t *s, const tv *in, int n_in, keel_value_t **out) {
  const char *names[16];
  keel_value_t *vals[16];
  int n = 0;
  for (int i = 0; i < n_in; i++)
    if (in[i].name) names[n] = in[i].name, vals[n++] = value_of(s, &in[i]);
  keel_status st = keel_run(s, names, vals, (size_t)n, out);
  for (int i = 0; i < n; i++) keel_value_release(vals[i]);
  return st;
}

/* Output v against want (shape and dtype included). */
static bool same_output(const keel_value_t *v, const tv *want, double tol) {
  if (!v || keel_value_dtype(v) != want->dt || keel_value_rank(v) != want->rank) {
    fprintf(stderr, "  output %s: wrong dtype or rank\n", want->name);
    return false;
  }
  for (int i = 0; i < want->rank; i++)
    if (keel_value_shape(v)[i] != want->dims[i]) {
      fprintf(stderr, "  output %s: dim %d is %lld, expected %lld\n", want->name, i,
              (long long)keel_value_shape(v)[i], (long long)want->dims[i]);
      return false;
    }
  if (want->dt == KEEL_FLOAT16 || want->dt == KEEL_BFLOAT16) tol = tol > 1e-2 ? tol : 1e-2;
  for (int64_t i = 0; i < keel_value_numel(v); i++) {
    double a = keel_value_at(v, i), b = want->v[i];
    bool ok = isnan(b) ? isnan(a) : isinf(b) ? a == b : fabs(a - b) <= tol * (1 + fabs(b));
    if (!ok) {
      fprintf(stderr, "  output %s element %lld: got %.9g, expected %.9g\n", want->name,
              (long long)i, a, b);
      return false;
    }
  }
  return true;
}

/* Runs the case and checks the n_out expected outputs; returns whether
 * all matched. */
static bool oc_check(const char *domain, const char *op, int opset, const tv *in, int n_in,
                     const char *out_names, const attr *attrs, const tv *want, int n_out,
                     double tol) {
  keel_session_t *s = oc_session(domain, op, opset, in, n_in, out_names, attrs);
  CHECK(s != NULL);
  if (!s) return false;
  keel_value_t *out[8] = {0};
  keel_status st = oc_run(s, in, n_in, out);
  CHECK_OK(st);
  bool all = st == KEEL_OK;
  for (int i = 0; all && i < n_out; i++) {
    bool ok = same_output(out[i], &want[i], tol);
    CHECK(ok);
    all = all && ok;
  }
  for (int i = 0; i < 8; i++) keel_value_release(out[i]);
  keel_session_destroy(s);
  return all;
}

/* Runs the case expecting status `want` (an error at load or run). */
static void oc_fails(const char *domain, const char *op, int opset, const tv *in, int n_in,
                     const char *out_names, const attr *attrs, keel_status want) {
  keel_session_t *s = oc_session(domain, op, opset, in, n_in, out_names, attrs);
  if (!s) {
    CHECK(want != KEEL_OK);
    return;
  }
  keel_value_t *out[8] = {0};
  CHECK_STATUS(oc_run(s, in, n_in, out), want);
  for (int i = 0; i < 8; i++) keel_value_release(out[i]);
  keel_session_destroy(s);
}

#endif /* KEEL_OPCASE_H */
