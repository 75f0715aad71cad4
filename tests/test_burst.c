/* test_burst.c: a burst of wide inputs leaves nothing behind on the fast
 * kernels (issue 22): a text recogniser in the manner of PaddleOCR's CRNN
 * (input [1, 3, 48, W]; Conv+BatchNorm+Relu, pools that take the height to
 * 1, a sequence of W/4 steps, an LSTM and a MatMul head), run as a service
 * runs it: 20 runs at W = 3200, then runs at W = 100, with the normal
 * kernels (oneDNN / NHWC where the machine has them).
 *
 * Within 10 small runs after the burst, reserved bytes are at most 1.2x
 * what a session that only ever ran W = 100 keeps, and (without a
 * sanitizer's allocator) so is the process's RSS. What the burst made on
 * a node's first run at its shape (per-shape caches, primitives, their
 * packed weights) must not pin a segment of the burst's activations.
 *
 * BURST_DUMP=1 prints the live blocks and the segments they sit in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "keel_stats.h"
#include "mb.h"
#include "mem/alloc.h"
#include "svc_model.h" /* svc_rss */

#define H 48
#define HID 48  /* LSTM hidden units */
#define CLS 97  /* classes of the head */

static float *filled(size_t n, int seed, float scale) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)((int)((i * (size_t)(seed * 2 + 7)) % 23) - 11) * scale;
  return p;
}

/* Conv 3x3 (pads 1) from `in` (ci channels) to co channels, BatchNorm, Relu;
 * returns the Relu's output name in `out`. */
static void conv_bn_relu(mb_graph *g, const char *in, int ci, int co, int i, char *out) {
  char w[16], sc[16], b[16], m[16], v[16], c[16], bn[16], ins[96];
  snprintf(w, sizeof w, "w%d", i), snprintf(sc, sizeof sc, "s%d", i), snprintf(b, sizeof b, "b%d", i);
  snprintf(m, sizeof m, "m%d", i), snprintf(v, sizeof v, "v%d", i);
  snprintf(c, sizeof c, "c%d", i), snprintf(bn, sizeof bn, "n%d", i), snprintf(out, 16, "r%d", i);
  float *wd = filled((size_t)co * ci * 9, i, 0.03f);
  float *sd = filled((size_t)co, i + 1, 0.01f), *bd = filled((size_t)co, i + 2, 0.01f);
  float *md = filled((size_t)co, i + 3, 0.01f), *vd = malloc((size_t)co * sizeof *vd);
  for (int k = 0; k < co; k++) sd[k] += 1.0f, vd[k] = 1.0f + 0.01f * (float)(k % 5);
  mb_init(g, w, KEEL_FLOAT, 4, (int64_t[]){co, ci, 3, 3}, wd);
  mb_init(g, sc, KEEL_FLOAT, 1, (int64_t[]){co}, sd);
  mb_init(g, b, KEEL_FLOAT, 1, (int64_t[]){co}, bd);
  mb_init(g, m, KEEL_FLOAT, 1, (int64_t[]){co}, md);
  mb_init(g, v, KEEL_FLOAT, 1, (int64_t[]){co}, vd);
  free(wd), free(sd), free(bd), free(md), free(vd);
  snprintf(ins, sizeof ins, "%s,%s", in, w);
  mb_attr_ints(mb_add(g, "Conv", ins, c), "pads", 4, (int64_t[]){1, 1, 1, 1});
  snprintf(ins, sizeof ins, "%s,%s,%s,%s,%s", c, sc, b, m, v);
  mb_add(g, "BatchNormalization", ins, bn);
  mb_add(g, "Relu", bn, out);
}

static void pool(mb_graph *g, const char *op, const char *in, const char *out, int kh, int kw) {
  mb_node *n = mb_add(g, op, in, out);
  mb_attr_ints(n, "kernel_shape", 2, (int64_t[]){kh, kw});
  mb_attr_ints(n, "strides", 2, (int64_t[]){kh, kw});
}

/* [1,3,48,W] -> conv 16 > max 2x2 -> conv 32 > max 2x2 -> conv 64 > conv 64
 * > max (2,1) -> [1,64,6,W/4] -> avg (6,1) -> [1,64,1,W/4] -> [W/4,1,64]
 * -> LSTM 48 -> [W/4,48] -> MatMul 48x97 + bias -> Softmax. */
static mb_graph *crnn_graph(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 4, (int64_t[]){1, 3, H, -1});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  char r[16];
  conv_bn_relu(g, "x", 3, 16, 1, r);
  pool(g, "MaxPool", r, "p1", 2, 2);
  conv_bn_relu(g, "p1", 16, 32, 2, r);
  pool(g, "MaxPool", r, "p2", 2, 2);
  conv_bn_relu(g, "p2", 32, 64, 3, r);
  conv_bn_relu(g, "r3", 64, 64, 4, r);
  pool(g, "MaxPool", r, "p3", 2, 1);
  pool(g, "AveragePool", "p3", "p4", 6, 1);
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){3}, (int64_t[]){1, 64, -1});
  mb_add(g, "Reshape", "p4,shp", "seq");                                          /* [1,64,T] */
  mb_attr_ints(mb_add(g, "Transpose", "seq", "tseq"), "perm", 3, (int64_t[]){2, 0, 1}); /* [T,1,64] */
  float *lw = filled(4 * HID * 64, 11, 0.02f), *lr = filled(4 * HID * HID, 12, 0.02f);
  float *lb = filled(8 * HID, 13, 0.01f);
  mb_init(g, "lw", KEEL_FLOAT, 3, (int64_t[]){1, 4 * HID, 64}, lw);
  mb_init(g, "lr", KEEL_FLOAT, 3, (int64_t[]){1, 4 * HID, HID}, lr);
  mb_init(g, "lb", KEEL_FLOAT, 2, (int64_t[]){1, 8 * HID}, lb);
  free(lw), free(lr), free(lb);
  mb_attr_i(mb_add(g, "LSTM", "tseq,lw,lr,lb", "ly"), "hidden_size", HID); /* [T,1,1,HID] */
  mb_init(g, "shp2", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){-1, HID});
  mb_add(g, "Reshape", "ly,shp2", "feat");
  float *hw = filled(HID * CLS, 14, 0.03f), *hb = filled(CLS, 15, 0.01f);
  mb_init(g, "hw", KEEL_FLOAT, 2, (int64_t[]){HID, CLS}, hw);
  mb_init(g, "hb", KEEL_FLOAT, 1, (int64_t[]){CLS}, hb);
  free(hw), free(hb);
  mb_add(g, "MatMul", "feat,hw", "logit");
  mb_add(g, "Add", "logit,hb", "z");
  mb_attr_i(mb_add(g, "Softmax", "z", "y"), "axis", -1);
  return g;
}

static keel_session_t *crnn_session(void) {
  keel_options o = {.size = sizeof o, .threads = 2};
  return mb_session_opts(crnn_graph(), 14, &o);
}

static keel_status crnn_run(keel_session_t *s, int64_t w) {
  size_t n = (size_t)(3 * H * w);
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(i % 19) / 19.0f - 0.5f;
  keel_value_t *in[1] = {mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 3, H, w}, x)};
  free(x);
  keel_value_t *out[1] = {0};
  keel_status st = keel_run(s, (const char *[]){"x"}, in, 1, out);
  if (!st && keel_value_numel(out[0]) != (w / 4) * CLS) st = KEEL_ERR_INTERNAL;
  keel_value_release(out[0]);
  keel_value_release(in[0]);
  return st;
}

static unsigned long long rss(void) { return svc_rss(); }

static keel_stats stats(keel_session_t *s) {
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  return st;
}

static void dump_block(void *ud, const keel_block *b) {
  (void)ud;
  fprintf(stderr, "  block %8zu B (req %8zu) pool %d (2: kept) segment %p seq %llu site %u\n",
          b->size, b->req, b->pool, (void *)b->seg, (unsigned long long)b->seq,
          keel_block_owner(b).site);
}

static void dump(keel_session_t *s, const char *when) {
  if (!getenv("BURST_DUMP")) return;
  keel_stats st = stats(s);
  fprintf(stderr,
          "== %s: reserved %llu, allocated %llu, %llu segments; rss %llu; oneDNN's malloc %llu in "
          "%llu primitives\n",
          when, (unsigned long long)st.reserved, (unsigned long long)st.allocated,
          (unsigned long long)st.n_segments, rss(), (unsigned long long)st.library_bytes,
          (unsigned long long)st.library_objects);
  keel_heap_foreach_live(s->heap, dump_block, NULL);
  char *rep = NULL;
  if (!keel_mem_live_report(s, NULL, 0, &rep, NULL)) fprintf(stderr, "%s\n", rep);
  keel_free(rep);
}

int main(void) {
  /* the small workload alone: its steady figures after 30 runs */
  keel_session_t *s = crnn_session();
  CHECK(s != NULL);
  if (!s) return check_report();
  for (int r = 0; r < 30; r++) CHECK_OK(crnn_run(s, 100));
  keel_stats small = stats(s);
  unsigned long long rss_small = rss();
  dump(s, "small only");
  keel_session_destroy(s);

  /* the burst, then small runs */
  s = crnn_session();
  CHECK(s != NULL);
  if (!s) return check_report();
  for (int r = 0; r < 20; r++) CHECK_OK(crnn_run(s, 3200));
  keel_stats big = stats(s);
  dump(s, "after the burst");
  for (int r = 0; r < 10; r++) CHECK_OK(crnn_run(s, 100));
  keel_stats after = stats(s);
  unsigned long long rss_after = rss();
  dump(s, "10 small runs after the burst");
  fprintf(stderr,
          "small only (30 runs at W=100): reserved %llu, rss %llu\n"
          "burst (20 runs at W=3200): reserved %llu (peak %llu)\n"
          "then 10 runs at W=100: reserved %llu, rss %llu, %llu auto releases (%llu bytes)\n",
          (unsigned long long)small.reserved, rss_small, (unsigned long long)big.reserved,
          (unsigned long long)big.reserved_peak, (unsigned long long)after.reserved, rss_after,
          (unsigned long long)after.n_auto_release, (unsigned long long)after.bytes_auto_release);
  CHECK(big.reserved > 2 * small.reserved); /* the burst really took more */
  CHECK(after.reserved * 5 <= small.reserved * 6);
#if !KEEL_TEST_SANITIZED && !(defined(KEEL_DEBUG) && KEEL_DEBUG >= 2)
  /* the RSS of the small-only session was measured while it was alive, in
   * a process that had not yet run the burst */
  CHECK(rss_after * 5 <= rss_small * 6);
#endif
  keel_session_destroy(s);
  return check_report();
}
