/* test_ops_conv.c: Conv, ConvTranspose, ConvInteger and QLinearConv through
 * real sessions, against naive direct-loop references written here, on
 * random shapes, strides, pads, dilations, groups and auto_pad modes; plus
 * the im2col chunking and 1x1 paths, float16/double, and error cases (the
 * session must stay usable after each). */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }
static double frand(void) { return (double)(next() % 2001) / 1000.0 - 1.0; }

/* ====================================================== geometry */

typedef struct cgeo {
  int nd, n, group, cg, mg, bias, explicit_kernel;
  int64_t in[3], k[3], s[3], d[3], pads[6], opad[3], oshape[3];
  int use_oshape, omit_pads;
  const char *auto_pad;
  int64_t out[3], pb[3]; /* filled by the reference geometry */
} cgeo;

static int64_t prod3(int nd, const int64_t *v) {
  int64_t p = 1;
  for (int i = 0; i < nd; i++) p *= v[i];
  return p;
}
static int64_t fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Conv output sizes, written from the ONNX text; false when invalid. */
static bool conv_geometry(cgeo *g) {
  for (int i = 0; i < g->nd; i++) {
    int64_t ext = (g->k[i] - 1) * g->d[i] + 1, in = g->in[i], s = g->s[i];
    if (!strcmp(g->auto_pad, "SAME_UPPER") || !strcmp(g->auto_pad, "SAME_LOWER")) {
      g->out[i] = (in + s - 1) / s;
      int64_t total = (g->out[i] - 1) * s + ext - in;
      if (total < 0) total = 0;
      g->pb[i] = !strcmp(g->auto_pad, "SAME_UPPER") ? total / 2 : total - total / 2;
    } else {
      int64_t pb = 0, pe = 0;
      if (!strcmp(g->auto_pad, "NOTSET")) pb = g->pads[i], pe = g->pads[g->nd + i];
      if (in + pb + pe < ext) return false;
      g->out[i] = (in + pb + pe - ext) / s + 1;
      g->pb[i] = pb;
    }
  }
  return true;
}

/* ConvTranspose output sizes; false when invalid. */
static bool convtr_geometry(cgeo *g) {
  for (int i = 0; i < g->nd; i++) {
    int64_t full = g->s[i] * (g->in[i] - 1) + g->opad[i] + (g->k[i] - 1) * g->d[i] + 1;
    bool same = !strcmp(g->auto_pad, "SAME_UPPER") || !strcmp(g->auto_pad, "SAME_LOWER");
    if (g->use_oshape || same) {
      g->out[i] = g->use_oshape ? g->oshape[i] : g->in[i] * g->s[i];
      int64_t total = full - g->out[i];
      g->pb[i] = !strcmp(g->auto_pad, "SAME_UPPER") ? fdiv(total, 2) : total - fdiv(total, 2);
    } else if (!strcmp(g->auto_pad, "VALID")) {
      g->out[i] = full, g->pb[i] = 0;
    } else {
      g->out[i] = full - g->pads[i] - g->pads[g->nd + i], g->pb[i] = g->pads[i];
    }
    if (g->out[i] < 1) return false;
  }
  return true;
}

/* ====================================================== references */

/* Naive direct convolution: every output, every input channel of its
 * group, every kernel tap, with the bounds checked per tap. */
static void ref_conv(const cgeo *g, const double *x, const double *w, const double *b, double *y) {
  int64_t C = g->cg * g->group, M = g->mg * g->group;
  int64_t isz = prod3(g->nd, g->in), osz = prod3(g->nd, g->out), ksz = prod3(g->nd, g->k);
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t op = 0; op < osz; op++) {
        int64_t o[3], gi = m / g->mg, r = op;
        for (int d = g->nd - 1; d >= 0; d--) o[d] = r % g->out[d], r /= g->out[d];
        double acc = g->bias ? b[m] : 0;
        for (int64_t c = 0; c < g->cg; c++)
          for (int64_t t = 0; t < ksz; t++) {
            int64_t kc[3], idx = 0, rt = t;
            bool ok = true;
            for (int d = g->nd - 1; d >= 0; d--) kc[d] = rt % g->k[d], rt /= g->k[d];
            for (int d = 0; d < g->nd; d++) {
              int64_t ic = o[d] * g->s[d] - g->pb[d] + kc[d] * g->d[d];
              ok = ok && ic >= 0 && ic < g->in[d];
              idx = idx * g->in[d] + ic;
            }
            if (ok) acc += x[(n * C + gi * g->cg + c) * isz + idx] * w[(m * g->cg + c) * ksz + t];
          }
        y[(n * M + m) * osz + op] = acc;
      }
}

/* Naive transposed convolution: scatter every input element through every
 * tap into the output. */
static void ref_convtr(const cgeo *g, const double *x, const double *w, const double *b,
                       double *y) {
  int64_t C = g->cg * g->group, M = g->mg * g->group;
  int64_t isz = prod3(g->nd, g->in), osz = prod3(g->nd, g->out), ksz = prod3(g->nd, g->k);
  for (int64_t i = 0; i < g->n * M * osz; i++) y[i] = g->bias ? b[(i / osz) % M] : 0;
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t ip = 0; ip < isz; ip++) {
        int64_t ic[3], r = ip, gi = c / g->cg;
        for (int d = g->nd - 1; d >= 0; d--) ic[d] = r % g->in[d], r /= g->in[d];
        for (int64_t m = 0; m < g->mg; m++)
          for (int64_t t = 0; t < ksz; t++) {
            int64_t kc[3], idx = 0, rt = t;
            bool ok = true;
            for (int d = g->nd - 1; d >= 0; d--) kc[d] = rt % g->k[d], rt /= g->k[d];
            for (int d = 0; d < g->nd; d++) {
              int64_t oc = ic[d] * g->s[d] - g->pb[d] + kc[d] * g->d[d];
              ok = ok && oc >= 0 && oc < g->out[d];
              idx = idx * g->out[d] + oc;
            }
            if (ok)
              y[(n * M + gi * g->mg + m) * osz + idx] +=
                  x[(n * C + c) * isz + ip] * w[(c * g->mg + m) * ksz + t];
          }
      }
}

/* ======================================================== sessions */

static void set_attrs(mb_node *nd, const cgeo *g, bool tr) {
  mb_attr_ints(nd, "strides", g->nd, g->s);
  mb_attr_ints(nd, "dilations", g->nd, g->d);
  mb_attr_i(nd, "group", g->group);
  if (strcmp(g->auto_pad, "NOTSET")) mb_attr_s(nd, "auto_pad", g->auto_pad);
  else if (!g->omit_pads) mb_attr_ints(nd, "pads", 2 * g->nd, g->pads);
  if (g->explicit_kernel) mb_attr_ints(nd, "kernel_shape", g->nd, g->k);
  if (tr && g->use_oshape) mb_attr_ints(nd, "output_shape", g->nd, g->oshape);
  if (tr) mb_attr_ints(nd, "output_padding", g->nd, g->opad);
}

static keel_session_t *conv_session(const cgeo *g, const char *op, int dtype) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", dtype, -1, NULL);
  mb_input(gr, "W", dtype, -1, NULL);
  if (g->bias) mb_input(gr, "B", dtype, -1, NULL);
  mb_output(gr, "Y", dtype, -1, NULL);
  mb_node *nd = mb_add(gr, op, g->bias ? "X,W,B" : "X,W", "Y");
  set_attrs(nd, g, !strcmp(op, "ConvTranspose"));
  /* 1, 2, 3 threads in turn: Conv's tasks and ConvTranspose's channel
   * blocks split over the pool (whatever the machine's core count) */
  static int calls;
  keel_options o = {.size = sizeof o, .threads = 1 + calls++ % 3};
  return mb_session_opts(gr, 13, &o);
}

/* Stores doubles as dtype (float16 rounds; the caller's copy is updated to
 * the rounded values so the reference sees what keel sees). */
static void *pack(int dtype, double *v, int64_t n) {
  size_t es = dtype == KEEL_DOUBLE ? 8 : dtype == KEEL_FLOAT ? 4 : 2;
  char *p = malloc((size_t)n * es + 1);
  for (int64_t i = 0; i < n; i++) {
    if (dtype == KEEL_DOUBLE) ((double *)p)[i] = v[i];
    else if (dtype == KEEL_FLOAT) ((float *)p)[i] = (float)v[i], v[i] = (float)v[i];
    else {
      uint16_t h = keel_f32_to_f16((float)v[i]);
      ((uint16_t *)p)[i] = h, v[i] = keel_f16_to_f32(h);
    }
  }
  return p;
}

/* Compares a result with the reference; prints the first mismatch. */
static bool close_to(const keel_value_t *v, const double *ref, int64_t n, double tol,
                     const char *what) {
  if (!v || keel_value_numel(v) != n) {
    fprintf(stderr, "%s: %lld elements, expected %lld\n", what,
            v ? (long long)keel_value_numel(v) : -1LL, (long long)n);
    return false;
  }
  for (int64_t i = 0; i < n; i++) {
    double a = keel_value_at(v, i);
    if (!(fabs(a - ref[i]) <= tol * (1 + fabs(ref[i])))) {
      fprintf(stderr, "%s: element %lld = %.7g, expected %.7g\n", what, (long long)i, a, ref[i]);
      return false;
    }
  }
  return true;
}

static void rand_fill(double *v, int64_t n) {
  for (int64_t i = 0; i < n; i++) v[i] = frand();
}

/* Runs one Conv / ConvTranspose case and compares with the reference. */
static void run_case(cgeo *g, bool tr, int dtype) {
  if (!(tr ? convtr_geometry(g) : conv_geometry(g))) return;
  int64_t C = g->cg * g->group, M = g->mg * g->group, ksz = prod3(g->nd, g->k);
  int64_t xd[5] = {g->n, C}, wd[5] = {tr ? C : M, tr ? g->mg : g->cg}, yn;
  memcpy(xd + 2, g->in, sizeof(int64_t) * (size_t)g->nd);
  memcpy(wd + 2, g->k, sizeof(int64_t) * (size_t)g->nd);
  int64_t nx = g->n * C * prod3(g->nd, g->in), nw = wd[0] * wd[1] * ksz;
  yn = g->n * M * prod3(g->nd, g->out);
  double *x = malloc(sizeof(double) * (size_t)nx), *w = malloc(sizeof(double) * (size_t)nw);
  double b[128], *y = malloc(sizeof(double) * (size_t)yn);
  rand_fill(x, nx), rand_fill(w, nw), rand_fill(b, M);
  keel_session_t *s = conv_session(g, tr ? "ConvTranspose" : "Conv", dtype);
  CHECK(s != NULL);
  void *px = pack(dtype, x, nx), *pw = pack(dtype, w, nw), *pb = pack(dtype, b, M);
  (tr ? ref_convtr : ref_conv)(g, x, w, b, y);
  keel_value_t *in[3] = {mb_tensor(s, dtype, g->nd + 2, xd, px), mb_tensor(s, dtype, g->nd + 2, wd, pw),
                         mb_tensor(s, dtype, 1, (int64_t[]){M}, pb)};
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X", "W", "B"}, in, g->bias ? 3 : 2, out));
  char what[160];
  snprintf(what, sizeof what, "%s nd=%d group=%d %s dtype=%d", tr ? "ConvTranspose" : "Conv",
           g->nd, g->group, g->auto_pad, dtype);
  CHECK(close_to(out[0], y, yn, dtype == KEEL_FLOAT16 ? 2e-2 : 1e-4, what));
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_value_release(out[0]);
  keel_session_destroy(s);
  free(x), free(w), free(y), free(px), free(pw), free(pb);
}

static const char *PADS[] = {"NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};

static void random_geo(cgeo *g, bool tr) {
  memset(g, 0, sizeof *g);
  g->nd = (int)rnd(1, 3);
  g->n = (int)rnd(1, 2), g->group = (int)rnd(1, 3), g->cg = (int)rnd(1, 3), g->mg = (int)rnd(1, 3);
  g->bias = (int)rnd(0, 1), g->explicit_kernel = (int)rnd(0, 1);
  g->auto_pad = PADS[rnd(0, 4)];
  for (int i = 0; i < g->nd; i++) {
    g->in[i] = rnd(1, g->nd == 3 ? 5 : 8), g->k[i] = rnd(1, 3), g->s[i] = rnd(1, 3);
    g->d[i] = rnd(1, 2), g->pads[i] = rnd(0, 2), g->pads[g->nd + i] = rnd(0, 2);
    g->opad[i] = tr ? rnd(0, g->s[i] - 1) : 0;
  }
  if ((g->omit_pads = next() % 4 == 0)) memset(g->pads, 0, sizeof g->pads); /* default: zeros */
  if (tr && (g->use_oshape = next() % 4 == 0))
    for (int i = 0; i < g->nd; i++)
      g->oshape[i] = g->s[i] * (g->in[i] - 1) + (g->k[i] - 1) * g->d[i] + 1 + rnd(-2, 1);
}

static void check_random(void) {
  for (int i = 0; i < 120; i++) {
    cgeo g;
    random_geo(&g, false);
    run_case(&g, false, i % 10 == 0 ? KEEL_DOUBLE : KEEL_FLOAT);
  }
  for (int i = 0; i < 80; i++) {
    cgeo g;
    random_geo(&g, true);
    run_case(&g, true, i % 10 == 0 ? KEEL_DOUBLE : KEEL_FLOAT);
  }
}

/* Fixed shapes for the special paths: pointwise (no im2col), an im2col
 * big enough to be chunked, depthwise, float16. */
static void check_paths(void) {
  cgeo g = {.nd = 2, .n = 2, .group = 1, .cg = 5, .mg = 3, .bias = 1, .auto_pad = "NOTSET",
            .in = {6, 7}, .k = {1, 1}, .s = {1, 1}, .d = {1, 1}};
  run_case(&g, false, KEEL_FLOAT); /* 1x1 stride 1: one GEMM */
  cgeo big = {.nd = 2, .n = 1, .group = 1, .cg = 2, .mg = 2, .bias = 1, .auto_pad = "SAME_UPPER",
              .in = {250, 250}, .k = {3, 3}, .s = {1, 1}, .d = {1, 1}};
  run_case(&big, false, KEEL_FLOAT); /* col would be 4.5 MB: chunked */
  cgeo dw = {.nd = 2, .n = 1, .group = 6, .cg = 1, .mg = 2, .bias = 0, .auto_pad = "NOTSET",
             .in = {9, 8}, .k = {3, 3}, .s = {2, 1}, .d = {1, 2}, .pads = {1, 1, 1, 1}};
  run_case(&dw, false, KEEL_FLOAT);
  run_case(&dw, false, KEEL_FLOAT16);
  run_case(&dw, true, KEEL_FLOAT16);
  cgeo trbig = {.nd = 2, .n = 1, .group = 1, .cg = 1, .mg = 120, .bias = 1, .auto_pad = "NOTSET",
                .in = {32, 32}, .k = {3, 3}, .s = {2, 2}, .d = {1, 1}};
  run_case(&trbig, true, KEEL_FLOAT); /* col would be 4.4 MB: chunked */
}

/* ================================================== quantized convs */

/* Zero points, scales and bias of a quantized case (M <= 9). */
typedef struct qparams {
  uint8_t xz;
  int8_t wz[16];
  int32_t bias[16];
  float xs, ws[16], ys;
} qparams;

static keel_session_t *qconv_session(const cgeo *g, bool qlinear, int64_t M, const qparams *q) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "x", KEEL_UINT8, -1, NULL);
  mb_input(gr, "w", KEEL_INT8, -1, NULL);
  mb_init(gr, "xz", KEEL_UINT8, 0, NULL, &q->xz);
  mb_init(gr, "wz", KEEL_INT8, 1, (int64_t[]){M}, q->wz);
  mb_init(gr, "xs", KEEL_FLOAT, 0, NULL, &q->xs);
  mb_init(gr, "ws", KEEL_FLOAT, 1, (int64_t[]){M}, q->ws);
  mb_init(gr, "ys", KEEL_FLOAT, 0, NULL, &q->ys);
  mb_init(gr, "yz", KEEL_UINT8, 0, NULL, (uint8_t[]){128});
  mb_init(gr, "b", KEEL_INT32, 1, (int64_t[]){M}, q->bias);
  mb_output(gr, "y", qlinear ? KEEL_UINT8 : KEEL_INT32, -1, NULL);
  const char *ins = !qlinear ? "x,w,xz,wz" : g->bias ? "x,xs,xz,w,ws,wz,ys,yz,b" : "x,xs,xz,w,ws,wz,ys,yz";
  set_attrs(mb_add(gr, qlinear ? "QLinearConv" : "ConvInteger", ins, "y"), g, false);
  return mb_session(gr, 13);
}

/* ConvInteger and QLinearConv on uint8 x, int8 w with per-channel zero
 * points and scales, against the reference on shifted values. */
static void check_quantized(bool qlinear) {
  cgeo g;
  do random_geo(&g, false);
  while (g.nd != 2);
  g.bias = qlinear ? g.bias : 0;
  if (!conv_geometry(&g)) return;
  int64_t C = g.cg * g.group, M = g.mg * g.group, ksz = g.k[0] * g.k[1], osz = g.out[0] * g.out[1];
  int64_t nx = g.n * C * g.in[0] * g.in[1], nw = M * g.cg * ksz, ny = g.n * M * osz;
  qparams q = {.xz = (uint8_t)rnd(0, 255), .xs = 0.02f, .ys = 0.5f};
  uint8_t *x = malloc((size_t)nx);
  int8_t *w = malloc((size_t)nw);
  double *xd = malloc(sizeof(double) * (size_t)nx), *wd = malloc(sizeof(double) * (size_t)nw);
  double bd[16], *y = malloc(sizeof(double) * (size_t)ny);
  for (int64_t i = 0; i < M; i++)
    q.wz[i] = (int8_t)rnd(-5, 5), q.ws[i] = 0.01f * (float)rnd(1, 9),
    q.bias[i] = (int32_t)rnd(-500, 500), bd[i] = q.bias[i];
  for (int64_t i = 0; i < nx; i++) x[i] = (uint8_t)rnd(0, 255), xd[i] = x[i] - q.xz;
  for (int64_t i = 0; i < nw; i++) w[i] = (int8_t)rnd(-128, 127), wd[i] = w[i] - q.wz[i / (g.cg * ksz)];
  ref_conv(&g, xd, wd, bd, y);
  for (int64_t i = 0; qlinear && i < ny; i++) { /* requantize the reference the same way */
    int64_t m = (i / osz) % M;
    float v = rintf((float)(int32_t)y[i] * (q.xs * q.ws[m] / q.ys)) + 128.0f;
    y[i] = v < 0 ? 0 : v > 255 ? 255 : v;
  }
  keel_session_t *s = qconv_session(&g, qlinear, M, &q);
  CHECK(s != NULL);
  int64_t xs4[4] = {g.n, C, g.in[0], g.in[1]}, ws4[4] = {M, g.cg, g.k[0], g.k[1]};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_UINT8, 4, xs4, x), mb_tensor(s, KEEL_INT8, 4, ws4, w)};
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"x", "w"}, in, 2, out));
  CHECK(close_to(out[0], y, ny, 0, qlinear ? "QLinearConv" : "ConvInteger"));
  keel_value_release(in[0]), keel_value_release(in[1]), keel_value_release(out[0]);
  keel_session_destroy(s);
  free(x), free(w), free(xd), free(wd), free(y);
}

/* ========================================================== errors */

/* A Conv with fixed attributes; bad inputs must fail cleanly and leave the
 * session usable. */
static void check_errors(void) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
  mb_input(gr, "W", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "Conv", "X,W", "Y");
  mb_attr_ints(nd, "pads", 4, (int64_t[]){1, 1, 1, 1});
  keel_session_t *s = mb_session(gr, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 3, 4, 4}, NULL);
  keel_value_t *w_ok = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){2, 3, 3, 3}, NULL);
  keel_value_t *w_ch = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){2, 4, 3, 3}, NULL);
  keel_value_t *w_big = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){2, 3, 7, 3}, NULL);
  keel_value_t *w_rank = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){2, 3, 3}, NULL);
  keel_value_t *out[1] = {0};
  const char *names[] = {"X", "W"};
  CHECK_STATUS(keel_run(s, names, (keel_value_t *[]){x, w_ch}, 2, out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "channels") != NULL);
  CHECK_STATUS(keel_run(s, names, (keel_value_t *[]){x, w_big}, 2, out), KEEL_ERR_SHAPE);
  CHECK_STATUS(keel_run(s, names, (keel_value_t *[]){x, w_rank}, 2, out), KEEL_ERR_SHAPE);
  CHECK_OK(keel_run(s, names, (keel_value_t *[]){x, w_ok}, 2, out));
  CHECK(out[0] && keel_value_numel(out[0]) == 2 * 4 * 4);
  keel_value_release(out[0]);
  keel_value_t *x0 = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){0, 3, 4, 4}, NULL); /* no images */
  CHECK_OK(keel_run(s, names, (keel_value_t *[]){x0, w_ok}, 2, out));
  CHECK(out[0] && keel_value_rank(out[0]) == 4 && keel_value_shape(out[0])[0] == 0 &&
        keel_value_shape(out[0])[1] == 2);
  keel_value_release(out[0]), keel_value_release(x0);
  keel_value_release(x), keel_value_release(w_ok), keel_value_release(w_ch);
  keel_value_release(w_big), keel_value_release(w_rank);
  keel_session_destroy(s);
}

/* Bad attributes: each model loads (kernels validate at run time) and the
 * run fails with INVALID_MODEL. */
static void check_bad_attr(const char *name, int n, const int64_t *v, const char *sattr) {
  mb_graph *gr = mb_graph_new("main");
  mb_input(gr, "X", KEEL_FLOAT, -1, NULL);
  mb_input(gr, "W", KEEL_FLOAT, -1, NULL);
  mb_output(gr, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *nd = mb_add(gr, "Conv", "X,W", "Y");
  if (sattr) mb_attr_s(nd, name, sattr);
  else mb_attr_ints(nd, name, n, v);
  keel_session_t *s = mb_session(gr, 13);
  if (!s) return; /* rejected at load: fine too */
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 4, 4}, NULL);
  keel_value_t *w = mb_tensor(s, KEEL_FLOAT, 4, (int64_t[]){1, 1, 2, 2}, NULL);
  keel_value_t *out[1] = {0};
  CHECK_STATUS(keel_run(s, (const char *[]){"X", "W"}, (keel_value_t *[]){x, w}, 2, out),
               KEEL_ERR_INVALID_MODEL);
  keel_value_release(x), keel_value_release(w);
  keel_session_destroy(s);
}

static void check_bad_attrs(void) {
  check_bad_attr("pads", 2, (int64_t[]){1, 1}, NULL);             /* wrong count */
  check_bad_attr("pads", 4, (int64_t[]){1, -1, 1, 1}, NULL);      /* negative */
  check_bad_attr("strides", 2, (int64_t[]){0, 1}, NULL);          /* zero stride */
  check_bad_attr("dilations", 2, (int64_t[]){1, -2}, NULL);       /* negative dilation */
  check_bad_attr("kernel_shape", 2, (int64_t[]){3, 3}, NULL);     /* disagrees with W */
  check_bad_attr("strides", 2, (int64_t[]){1, 1ll << 40}, NULL);  /* absurd */
  check_bad_attr("auto_pad", 0, NULL, "SAME");                    /* unknown mode */
}

/* ================================================ fuzz regressions */

/* X with an empty spatial axis (1, 1, 0, 3) padded to a non-empty output:
 * X had no data and the kernel formed NULL + 0 (UB). Every tap reads
 * padding, so Y is the bias, for Conv (float, float16) and ConvInteger. */
static void check_empty_spatial_input(void) {
  for (int dt = 0; dt < 3; dt++) {
    int xt = dt == 0 ? KEEL_FLOAT : dt == 1 ? KEEL_FLOAT16 : KEEL_UINT8;
    mb_graph *gr = mb_graph_new("main");
    mb_input(gr, "X", xt, -1, NULL);
    mb_input(gr, "W", xt, -1, NULL);
    if (dt < 2) mb_input(gr, "B", xt, -1, NULL);
    mb_output(gr, "Y", KEEL_UNDEFINED, -1, NULL);
    mb_node *nd = mb_add(gr, dt < 2 ? "Conv" : "ConvInteger", dt < 2 ? "X,W,B" : "X,W", "Y");
    mb_attr_ints(nd, "pads", 4, (int64_t[]){1, 0, 1, 0});
    keel_session_t *s = mb_session(gr, 13);
    CHECK(s != NULL);
    if (!s) continue;
    uint16_t h[4] = {0x3C00, 0x3C00, 0x4000, 0x4000}; /* 1, 1, 2, 2 in float16 */
    float f[4] = {1, 1, 2, 2};
    uint8_t u[4] = {1, 1, 2, 2};
    const void *wv = dt == 0 ? (const void *)f : dt == 1 ? (const void *)h : (const void *)u;
    keel_value_t *in[3] = {mb_tensor(s, xt, 4, (int64_t[]){1, 1, 0, 3}, NULL),
                           mb_tensor(s, xt, 4, (int64_t[]){2, 1, 1, 2}, wv),
                           dt < 2 ? mb_tensor(s, xt, 1, (int64_t[]){2}, dt ? (const void *)(h + 1)
                                                                            : (const void *)(f + 1))
                                  : NULL};
    keel_value_t *out[1] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X", "W", "B"}, in, dt < 2 ? 3 : 2, out));
    /* (1, 2, 2, 2): output rows -1 + 0 + 1 + 1 = 2 (both in the padding) */
    CHECK(out[0] && keel_value_numel(out[0]) == 8);
    for (int64_t i = 0; out[0] && i < 8; i++)
      CHECK(keel_value_at(out[0], i) == (dt == 2 ? 0 : i < 4 ? 1 : 2));
    for (int i = 0; i < 3; i++) keel_value_release(in[i]);
    keel_value_release(out[0]);
    keel_session_destroy(s);
  }
}

int main(void) {
  check_empty_spatial_input();
  check_random();
  check_paths();
  for (int i = 0; i < 12; i++) check_quantized(i % 2 == 0);
  check_errors();
  check_bad_attrs();
  return check_report();
}
