/* test_gpu_conv.c: the `conv` kernel group (device/dev_conv.h) on a GPU
 * (kernels/conv.cu through cuda_conv.c) against its naive reference on
 * the emulated device (emu_conv.c):
 *   - conv2d over geometries with pads (asymmetric), strides, dilations,
 *     groups, depthwise, 1x1, 1-D (height 1), with and without bias, each
 *     fused activation; relative agreement 1e-4 (float sums against
 *     double ones, up to 3*3*64 terms);
 *   - pool2d max (exact: the same taps in the same order) and average
 *     (1e-6), with and without count_include_pad, windows past the end
 *     (ceil_mode), NaN taps;
 *   - global_pool max (exact) and mean (1e-6), planes of 1 to 5000;
 *   - conv_transpose2d over strides, dilations, pads, groups, 1-D, with
 *     and without bias (1e-4);
 *   - resample: nearest (exact), 2 and 4 taps with zero weights, inner 1
 *     and wider, out-of-range outputs (exact up to a fused multiply-add:
 *     1e-6).
 * ctest label `gpu`; without a GPU it says so and exits 77 (skipped). */
#include "device/dev_conv.h"
#include "gpupair.h"

/* output size of a window (floor, or ceil without a window starting in
 * the end pad), as keel_win_forward computes it */
static int64_t out_of(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, bool ceil) {
  int64_t span = in + pb + pe - (k - 1) * d - 1;
  int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (o - 1) * s >= in + pb) o--;
  return o;
}

static void fill_out(keel_dev_win2 *w, bool ceil) {
  w->oh = out_of(w->ih, w->kh, w->sh, w->dh, w->ph, w->peh, ceil);
  w->ow = out_of(w->iw, w->kw, w->sw, w->dw, w->pw, w->pew, ceil);
}

typedef struct conv_case {
  int64_t n, c, m, group, ih, iw, kh, kw, sh, sw, dh, dw, ph, pw, peh, pew;
} conv_case;

/* a case's geometry, the output size left to the caller */
static keel_dev_conv2 geom_of(const conv_case *c) {
  return (keel_dev_conv2){.w = {.ih = c->ih, .iw = c->iw, .kh = c->kh, .kw = c->kw, .sh = c->sh, .sw = c->sw,
                                .dh = c->dh, .dw = c->dw, .ph = c->ph, .pw = c->pw, .peh = c->peh, .pew = c->pew},
                          .n = c->n, .c = c->c, .m = c->m, .group = c->group};
}

static void check_conv(void) {
  static const conv_case cases[] = {
      {2, 3, 4, 1, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 4, 6, 1, 11, 10, 3, 2, 2, 3, 1, 1, 0, 1, 2, 1},
      {2, 2, 3, 1, 12, 12, 3, 3, 1, 1, 2, 3, 1, 2, 0, 1},
      {1, 6, 4, 2, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 8, 8, 8, 10, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {1, 64, 64, 64, 28, 28, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},
      {1, 64, 32, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {3, 16, 12, 1, 7, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
      {2, 4, 6, 2, 1, 17, 1, 3, 1, 2, 1, 2, 0, 2, 0, 1}, /* 1-D */
      {1, 3, 8, 1, 224, 224, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
    const conv_case *c = &cases[i];
    keel_dev_conv2 g = geom_of(c);
    fill_out(&g.w, false);
    int64_t nx = c->n * c->c * c->ih * c->iw, nw = c->m * (c->c / c->group) * c->kh * c->kw;
    int64_t ny = c->n * c->m * g.w.oh * g.w.ow;
    float *x = frands(nx), *w = frands(nw), *b = frands(c->m);
    keel_block *xb[2], *wb[2], *bb[2], *yb[2];
    for (int s = 0; s < 2; s++)
      xb[s] = put(s, x, (size_t)nx * 4), wb[s] = put(s, w, (size_t)nw * 4), bb[s] = put(s, b, (size_t)c->m * 4),
      yb[s] = put(s, NULL, (size_t)ny * 4);
    for (int act = 0; act <= KEEL_DEV_ACT_HSIGMOID_MUL; act++) {
      g.act = act;
      g.act_a = act == KEEL_DEV_ACT_CLIP ? -0.5f : act == KEEL_DEV_ACT_LEAKY ? 0.1f : 0.2f;
      g.act_b = act == KEEL_DEV_ACT_CLIP ? 0.7f : 0.5f;
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->conv->conv2d(g_d[s], &g, (float *)xb[s]->ptr, (float *)wb[s]->ptr,
                                      act % 2 ? NULL : (float *)bb[s]->ptr, (float *)yb[s]->ptr));
      char what[64];
      snprintf(what, sizeof what, "conv (act %d)", act);
      close_enough(what, i, yb, ny, 1e-4);
    }
    for (int s = 0; s < 2; s++)
      keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], wb[s]), keel_heap_free(g_h[s], bb[s]),
      keel_heap_free(g_h[s], yb[s]);
    free(x), free(w), free(b);
  }
}

static void check_pools(void) {
  /* ih, iw, kh, kw, sh, sw, dh, dw, ph, pw, peh, pew; then ceil_mode */
  static const int64_t wins[][13] = {
      {11, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0}, {10, 9, 3, 2, 2, 2, 1, 1, 0, 1, 1, 0, 1},
      {12, 12, 2, 3, 1, 2, 2, 2, 0, 0, 0, 0, 0}, {10, 9, 3, 3, 2, 2, 1, 1, 1, 0, 1, 2, 1},
      {1, 15, 1, 4, 1, 3, 1, 1, 0, 1, 0, 2, 1},  {112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},
  };
  for (int i = 0; i < (int)(sizeof wins / sizeof *wins); i++) {
    const int64_t *v = wins[i];
    keel_dev_win2 w = {.ih = v[0], .iw = v[1], .kh = v[2], .kw = v[3], .sh = v[4], .sw = v[5], .dh = v[6],
                       .dw = v[7], .ph = v[8], .pw = v[9], .peh = v[10], .pew = v[11]};
    fill_out(&w, v[12] != 0);
    int64_t planes = 6, nx = planes * w.ih * w.iw, ny = planes * w.oh * w.ow;
    float *x = frands(nx);
    x[0] = NAN, x[nx / 2] = NAN; /* a NaN tap loses to the others */
    keel_block *xb[2], *yb[2];
    for (int s = 0; s < 2; s++) xb[s] = put(s, x, (size_t)nx * 4), yb[s] = put(s, NULL, (size_t)ny * 4);
    for (int kind = 0; kind < 3; kind++) {
      keel_dev_pool_kind k = kind ? KEEL_DEV_POOL_AVG : KEEL_DEV_POOL_MAX;
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->conv->pool2d(g_d[s], k, kind == 2, planes, &w, (float *)xb[s]->ptr, (float *)yb[s]->ptr));
      close_enough(kind == 0 ? "maxpool" : kind == 1 ? "avgpool" : "avgpool incl", i, yb, ny, kind ? 1e-6 : 0);
    }
    for (int s = 0; s < 2; s++) keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], yb[s]);
    free(x);
  }
  static const int64_t sizes[] = {1, 7, 49, 256, 5000};
  for (int i = 0; i < 5; i++) {
    int64_t planes = 37, n = sizes[i];
    float *x = frands(planes * n);
    x[3 * n] = NAN; /* plane 3: NaN loses the max unless n is 1; the mean is NaN */
    keel_block *xb[2], *yb[2];
    for (int s = 0; s < 2; s++) xb[s] = put(s, x, (size_t)(planes * n) * 4), yb[s] = put(s, NULL, (size_t)planes * 4);
    for (int kind = 0; kind < 2; kind++) {
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->conv->global_pool(g_d[s], (keel_dev_pool_kind)kind, planes, n, (float *)xb[s]->ptr,
                                           (float *)yb[s]->ptr));
      close_enough(kind ? "global mean" : "global max", i, yb, planes, kind ? 1e-6 : 0);
    }
    for (int s = 0; s < 2; s++) keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], yb[s]);
    free(x);
  }
}

/* The transposed window's output size: s*(in-1) + (k-1)*d + 1 - pads. */
static void check_conv_transpose(void) {
  static const conv_case cases[] = {
      {2, 3, 4, 1, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {1, 4, 6, 2, 7, 6, 3, 2, 1, 3, 2, 1, 0, 1, 2, 0},
      {1, 8, 8, 8, 6, 6, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1},
      {2, 4, 6, 2, 1, 9, 1, 3, 1, 2, 1, 2, 0, 1, 0, 0}, /* 1-D */
      {1, 32, 16, 1, 20, 20, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
    const conv_case *c = &cases[i];
    keel_dev_conv2 g = geom_of(c);
    g.w.oh = c->sh * (c->ih - 1) + (c->kh - 1) * c->dh + 1 - c->ph - c->peh;
    g.w.ow = c->sw * (c->iw - 1) + (c->kw - 1) * c->dw + 1 - c->pw - c->pew;
    int64_t nx = c->n * c->c * c->ih * c->iw, nw = c->c * (c->m / c->group) * c->kh * c->kw;
    int64_t ny = c->n * c->m * g.w.oh * g.w.ow;
    float *x = frands(nx), *w = frands(nw), *b = frands(c->m);
    keel_block *xb[2], *wb[2], *bb[2], *yb[2];
    for (int s = 0; s < 2; s++)
      xb[s] = put(s, x, (size_t)nx * 4), wb[s] = put(s, w, (size_t)nw * 4), bb[s] = put(s, b, (size_t)c->m * 4),
      yb[s] = put(s, NULL, (size_t)ny * 4);
    for (int bias = 0; bias < 2; bias++) {
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->conv->conv_transpose2d(g_d[s], &g, (float *)xb[s]->ptr, (float *)wb[s]->ptr,
                                                bias ? (float *)bb[s]->ptr : NULL, (float *)yb[s]->ptr));
      close_enough(bias ? "conv_transpose (bias)" : "conv_transpose", i, yb, ny, 1e-4);
    }
    for (int s = 0; s < 2; s++)
      keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], wb[s]), keel_heap_free(g_h[s], bb[s]),
      keel_heap_free(g_h[s], yb[s]);
    free(x), free(w), free(b);
  }
}

static void check_resample(void) {
  /* outer, nin, nout, inner, taps (1: nearest) */
  static const int64_t cases[][5] = {{6, 5, 11, 1, 1}, {3, 8, 3, 7, 1},  {4, 9, 17, 1, 2},
                                     {2, 6, 13, 5, 2}, {5, 7, 16, 3, 4}, {1, 33, 64, 64, 2}};
  for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
    const int64_t *c = cases[i];
    int64_t outer = c[0], nin = c[1], nout = c[2], inner = c[3], taps = c[4];
    int64_t nx = outer * nin * inner, ny = outer * nout * inner, cells = nout * taps;
    float *x = frands(nx), *w = frands(cells);
    int64_t *idx = malloc((size_t)cells * sizeof *idx);
    uint8_t *oob = calloc((size_t)nout, 1);
    for (int64_t j = 0; j < cells; j++) {
      idx[j] = (j * 7 + 3) % nin;
      if (j % 5 == 2) w[j] = 0; /* skipped taps */
    }
    oob[nout / 2] = 1;
    keel_block *xb[2], *yb[2], *ib[2], *wb[2], *ob[2];
    for (int s = 0; s < 2; s++)
      xb[s] = put(s, x, (size_t)nx * 4), yb[s] = put(s, NULL, (size_t)ny * 4),
      ib[s] = put(s, idx, (size_t)cells * 8), wb[s] = put(s, w, (size_t)cells * 4), ob[s] = put(s, oob, (size_t)nout);
    for (int with_oob = 0; with_oob < 2; with_oob++) {
      for (int s = 0; s < 2; s++)
        CHECK_OK(g_d[s]->conv->resample(g_d[s], outer, nin, nout, inner, taps, (const int64_t *)ib[s]->ptr,
                                        taps == 1 ? NULL : (const float *)wb[s]->ptr,
                                        with_oob ? (const uint8_t *)ob[s]->ptr : NULL, -2.5f,
                                        (float *)xb[s]->ptr, (float *)yb[s]->ptr));
      close_enough(taps == 1 ? "resample nearest" : "resample", i, yb, ny, taps == 1 ? 0 : 1e-6);
    }
    for (int s = 0; s < 2; s++)
      keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], yb[s]), keel_heap_free(g_h[s], ib[s]),
      keel_heap_free(g_h[s], wb[s]), keel_heap_free(g_h[s], ob[s]);
    free(x), free(w), free(idx), free(oob);
  }
}

int main(void) {
  int rc = gpupair_open();
  if (rc) return rc;
  CHECK(g_d[0]->conv && g_d[1]->conv);
  check_conv();
  check_pools();
  check_conv_transpose();
  check_resample();
  return gpupair_close();
}
