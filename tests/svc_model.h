/* svc_model.h: the width-varying conv model of the service tests and
 * benchmarks (issue 13), a text-line recogniser in miniature: an image
 * [1, 1, 32, W] through Conv 3x3 (8 channels) > Relu > Conv 3x3 (8) >
 * ReduceMean over the width, giving [1, 8, 32]. Its working set grows with
 * W: about 3 MB of activations at W = 3200, 100 KB at W = 100.
 *
 * Header-only (static functions) so tests and bench/ share it. */
#ifndef KEEL_SVC_MODEL_H
#define KEEL_SVC_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel_stats.h"
#include "mb.h"

#define SVC_H 32
#define SVC_C 8

static inline mb_graph *svc_graph(void) {
  static float w1[SVC_C * 9], w2[SVC_C * SVC_C * 9];
  for (int i = 0; i < SVC_C * 9; i++) w1[i] = (float)((i * 7) % 11 - 5) / 10.0f;
  for (int i = 0; i < SVC_C * SVC_C * 9; i++) w2[i] = (float)((i * 5) % 13 - 6) / 20.0f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){1, 1, SVC_H, -1});
  mb_output(g, "y", KEEL_FLOAT, 3, (int64_t[]){1, SVC_C, SVC_H});
  mb_init(g, "w1", KEEL_FLOAT, 4, (int64_t[]){SVC_C, 1, 3, 3}, w1);
  mb_init(g, "w2", KEEL_FLOAT, 4, (int64_t[]){SVC_C, SVC_C, 3, 3}, w2);
  mb_attr_ints(mb_add(g, "Conv", "x,w1", "c1"), "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_add(g, "Relu", "c1", "r1");
  mb_attr_ints(mb_add(g, "Conv", "r1,w2", "c2"), "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_node *m = mb_add(g, "ReduceMean", "c2", "y");
  mb_attr_ints(m, "axes", 1, (int64_t[]){3});
  mb_attr_i(m, "keepdims", 0);
  return g;
}

/* With the reference kernels: the tests' memory figures assume conv.c's
 * im2col buffer, which grows with the width (the faster conv kernels cap
 * their scratch, and the burst would no longer stand out). */
static inline keel_session_t *svc_session(const keel_options *o) {
  keel_options r = o ? *o : (keel_options){.size = sizeof r};
  r.flags |= KEEL_OPT_REFERENCE_KERNELS;
  return mb_session_opts(svc_graph(), 13, &r);
}

/* One run at width w; returns the status (outputs released). */
static inline keel_status svc_run(keel_session_t *s, int64_t w, const keel_run_opts *ro) {
  size_t n = (size_t)(SVC_H * w);
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(i % 17) / 17.0f;
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, SVC_H, w}, x)};
  free(x);
  keel_value_t *out[1] = {0};
  keel_status st = keel_run_ex(s, (const char *[]){"x"}, in, 1, out, ro);
  keel_value_release(out[0]);
  keel_value_release(in[0]);
  return st;
}

/* Resident set size of this process in bytes (Linux; 0 elsewhere). */
static inline unsigned long long svc_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0, res = 0;
  if (!f) return 0;
  if (fscanf(f, "%llu %llu", &pages, &res) != 2) res = 0;
  fclose(f);
  return res * 4096ull;
}

static inline keel_stats svc_stats(keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  return st;
}

#endif
