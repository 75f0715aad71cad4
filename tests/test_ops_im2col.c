/* test_ops_im2col.c: Col2Im and DeformConv through real sessions against
 * naive references written here. Col2Im: random 1-3-D images, blocks,
 * strides, dilations and pads, in float, double, float16 and bfloat16; the reference walks every output pixel and
 * searches every (tap, block) pair that lands on it. DeformConv: random 2-D
 * cases (groups, offset groups, mask, bias, strides, dilations, pads,
 * fractional offsets, some outside the image) against a per-output-element
 * bilinear formula; float16 and double too; zero offsets must equal a
 * plain Conv. Bad shapes and attributes are errors after which the session
 * still runs. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x853C49E6748FEA9Bull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }
static double frand(void) { return (double)(next() % 20001) / 10000.0 - 1.0; }

/* ========================================================= harness */

#define MAXE 4096

/* Input names I0.. with dtypes; outputs Y. */
static mb_graph *graph_for(const char *op, int n_in, const int *dts, mb_node **node) {
  static const char *names[] = {"I0", "I1", "I2", "I3", "I4"};
  mb_graph *g = mb_graph_new("main");
  char ins[32] = "";
  for (int i = 0; i < n_in; i++) {
    if (dts[i] >= 0) mb_input(g, names[i], dts[i], -1, NULL);
    strcat(ins, i ? "," : "");
    if (dts[i] >= 0) strcat(ins, names[i]);
  }
  mb_output(g, "Y", KEEL_UNDEFINED, -1, NULL);
  *node = mb_add(g, op, ins, "Y");
  return g;
}

/* A tensor of dtype dt from doubles (rounded by the type). */
static keel_value_t *tensor_of(keel_session_t *s, int dt, int rank, const int64_t *d, const double *v) {
  static uint8_t buf[MAXE * 8];
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= d[i];
  for (int64_t i = 0; i < n; i++) keel_elem_set_f64(dt, buf, (size_t)i, v[i]);
  return mb_tensor(s, dt, rank, d, buf);
}

static double as_dt(int dt, double v) {
  uint8_t b[8];
  keel_elem_set_f64(dt, b, 0, v);
  return keel_elem_get_f64(dt, b, 0);
}

static bool same_values(const keel_value_t *v, int rank, const int64_t *d, const double *want, double tol) {
  if (!v || keel_value_rank(v) != rank) return false;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (keel_value_shape(v)[i] != d[i]) return false;
    n *= d[i];
  }
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(keel_value_at(v, i) - want[i]) <= tol * (1 + fabs(want[i])))) {
      fprintf(stderr, "  element %lld: got %.9g, expected %.9g\n", (long long)i, keel_value_at(v, i), want[i]);
      return false;
    }
  return true;
}

/* ========================================================== Col2Im */

typedef struct geo {
  int nd;
  int64_t img[3], blk[3], s[3], d[3], pb[3], pe[3], nb[3];
} geo;

/* Random geometry with at least one block per dim. */
static void random_geo(geo *g) {
  g->nd = (int)rnd(1, 3);
  for (int i = 0; i < g->nd; i++) {
    for (;;) {
      g->img[i] = rnd(1, 5), g->blk[i] = rnd(1, 3), g->s[i] = rnd(1, 2), g->d[i] = rnd(1, 2);
      g->pb[i] = rnd(0, 1), g->pe[i] = rnd(0, 1);
      int64_t span = g->img[i] + g->pb[i] + g->pe[i] - ((g->blk[i] - 1) * g->d[i] + 1);
      if (span >= 0) {
        g->nb[i] = span / g->s[i] + 1;
        break;
      }
    }
  }
}

static void set_geo_attrs(mb_node *n, const geo *g) {
  int64_t pads[6];
  for (int i = 0; i < g->nd; i++) pads[i] = g->pb[i], pads[g->nd + i] = g->pe[i];
  mb_attr_ints(n, "strides", g->nd, g->s);
  mb_attr_ints(n, "dilations", g->nd, g->d);
  mb_attr_ints(n, "pads", 2 * g->nd, pads);
}

static void col2im_case(void) {
  static double cols[MAXE], want[MAXE];
  geo g;
  random_geo(&g);
  int64_t N = rnd(1, 2), C = rnd(1, 2), K = 1, L = 1, P = 1;
  for (int i = 0; i < g.nd; i++) K *= g.blk[i], L *= g.nb[i], P *= g.img[i];
  int64_t xd[3] = {N, C * K, L};
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16, KEEL_BFLOAT16};
  int dt = dts[rnd(0, 3)];
  for (int64_t i = 0; i < N * C * K * L; i++) cols[i] = as_dt(dt, frand());
  /* naive: for every pixel, every (tap, block) pair that covers it */
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t p = 0; p < P; p++) {
        double acc = 0;
        for (int64_t kf = 0; kf < K; kf++)
          for (int64_t l = 0; l < L; l++) {
            int64_t pr = p, kr = kf, lr = l;
            bool hit = true;
            for (int i = g.nd - 1; i >= 0; i--) {
              int64_t pi = pr % g.img[i], ki = kr % g.blk[i], li = lr % g.nb[i];
              pr /= g.img[i], kr /= g.blk[i], lr /= g.nb[i];
              hit = hit && li * g.s[i] - g.pb[i] + ki * g.d[i] == pi;
            }
            if (hit) acc += cols[((n * C + c) * K + kf) * L + l];
          }
        want[(n * C + c) * P + p] = acc;
      }
  mb_node *nd;
  mb_graph *gr = graph_for("Col2Im", 3, (int[]){dt, KEEL_INT64, KEEL_INT64}, &nd);
  set_geo_attrs(nd, &g);
  keel_session_t *s = mb_session(gr, 18);
  int64_t nd1 = g.nd;
  keel_value_t *in[3] = {tensor_of(s, dt, 3, xd, cols), mb_tensor(s, KEEL_INT64, 1, &nd1, g.img),
                         mb_tensor(s, KEEL_INT64, 1, &nd1, g.blk)};
  keel_value_t *out = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"I0", "I1", "I2"}, in, 3, &out));
  int64_t yd[5] = {N, C};
  memcpy(yd + 2, g.img, sizeof(int64_t) * (size_t)g.nd);
  CHECK(same_values(out, g.nd + 2, yd, want, dt == KEEL_FLOAT16 ? 2e-3 : dt == KEEL_BFLOAT16 ? 1e-2 : 1e-5));
  keel_value_release(out);
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
}

/* Wrong column counts, mismatched shape lengths and zero blocks. */
static void col2im_errors(void) {
  mb_node *nd;
  mb_graph *gr = graph_for("Col2Im", 3, (int[]){KEEL_FLOAT, KEEL_INT64, KEEL_INT64}, &nd);
  keel_session_t *s = mb_session(gr, 18);
  static const double z[64] = {0};
  struct { int64_t xd[3], ni, img[2], nb, blk[2]; keel_status want; } cases[] = {
      {{1, 4, 16}, 2, {5, 5}, 2, {2, 2}, KEEL_OK},
      {{1, 4, 15}, 2, {5, 5}, 2, {2, 2}, KEEL_ERR_SHAPE},   /* 16 blocks, not 15 */
      {{1, 3, 16}, 2, {5, 5}, 2, {2, 2}, KEEL_ERR_SHAPE},   /* 3 is not C * 4 */
      {{1, 4, 16}, 2, {5, 5}, 1, {2, 2}, KEEL_ERR_SHAPE},   /* block_shape length */
      {{1, 4, 16}, 2, {5, 5}, 2, {0, 2}, KEEL_ERR_SHAPE},   /* zero block */
      {{1, 4, 16}, 2, {1, 5}, 2, {2, 2}, KEEL_ERR_SHAPE},   /* block larger than image */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    keel_value_t *in[3] = {tensor_of(s, KEEL_FLOAT, 3, cases[c].xd, z),
                           mb_tensor(s, KEEL_INT64, 1, &cases[c].ni, cases[c].img),
                           mb_tensor(s, KEEL_INT64, 1, &cases[c].nb, cases[c].blk)};
    keel_value_t *out = NULL;
    CHECK_STATUS(keel_run(s, (const char *[]){"I0", "I1", "I2"}, in, 3, &out), cases[c].want);
    keel_value_release(out);
    for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  }
  keel_session_destroy(s);
}

/* ====================================================== DeformConv */

/* Bilinear sample of img (H, W) at (y, x), zero outside. */
static double bilinear(const double *img, int64_t H, int64_t W, double y, double x) {
  double y0 = floor(y), x0 = floor(x), acc = 0;
  for (int dy = 0; dy < 2; dy++)
    for (int dx = 0; dx < 2; dx++) {
      int64_t yy = (int64_t)y0 + dy, xx = (int64_t)x0 + dx;
      if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
      double wy = dy ? y - y0 : 1 - (y - y0), wx = dx ? x - x0 : 1 - (x - x0);
      acc += wy * wx * img[yy * W + xx];
    }
  return acc;
}

typedef struct dcase {
  int dt;
  int64_t N, C, M, G, OG, H, W, kh, kw, s[2], d[2], p[4], oh, ow;
  bool with_b, with_mask, zero_off;
} dcase;

static void random_dcase(dcase *c) {
  static const int dts[] = {KEEL_FLOAT, KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16};
  c->dt = dts[rnd(0, 3)];
  c->G = rnd(1, 2), c->OG = rnd(1, 2);
  c->C = c->G * c->OG * rnd(1, 2), c->M = c->G * rnd(1, 2), c->N = rnd(1, 2);
  for (;;) {
    c->H = rnd(2, 5), c->W = rnd(2, 5), c->kh = rnd(1, 3), c->kw = rnd(1, 3);
    for (int i = 0; i < 2; i++) c->s[i] = rnd(1, 2), c->d[i] = rnd(1, 2);
    for (int i = 0; i < 4; i++) c->p[i] = rnd(0, 1);
    int64_t sh = c->H + c->p[0] + c->p[2] - ((c->kh - 1) * c->d[0] + 1);
    int64_t sw = c->W + c->p[1] + c->p[3] - ((c->kw - 1) * c->d[1] + 1);
    if (sh < 0 || sw < 0) continue;
    c->oh = sh / c->s[0] + 1, c->ow = sw / c->s[1] + 1;
    break;
  }
  c->with_b = rnd(0, 1), c->with_mask = rnd(0, 1), c->zero_off = rnd(0, 4) == 0;
}

/* y[n, m, i, j] = B[m] + sum over c in m's group and taps (a, b) of
 * W[m, c', a, b] * mask * bilinear(X[n, c], position + offset). */
static void ref_deform(const dcase *c, const double *x, const double *w, const double *off,
                       const double *b, const double *mask, double *y) {
  int64_t K = c->kh * c->kw, cg = c->C / c->G, mg = c->M / c->G, cpo = c->C / c->OG;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t m = 0; m < c->M; m++)
      for (int64_t i = 0; i < c->oh; i++)
        for (int64_t j = 0; j < c->ow; j++) {
          double acc = b ? b[m] : 0;
          int64_t gi = m / mg;
          for (int64_t ci = 0; ci < cg; ci++) {
            int64_t ch = gi * cg + ci, og = ch / cpo;
            for (int64_t a = 0; a < c->kh; a++)
              for (int64_t bb = 0; bb < c->kw; bb++) {
                int64_t kf = a * c->kw + bb;
                int64_t obase = ((n * c->OG + og) * K + kf) * 2;
                double dy = off[((obase + 0) * c->oh + i) * c->ow + j];
                double dx = off[((obase + 1) * c->oh + i) * c->ow + j];
                double py = (double)(i * c->s[0] - c->p[0] + a * c->d[0]) + dy;
                double px = (double)(j * c->s[1] - c->p[1] + bb * c->d[1]) + dx;
                double mk = mask ? mask[(((n * c->OG + og) * K + kf) * c->oh + i) * c->ow + j] : 1;
                double v = bilinear(x + (n * c->C + ch) * c->H * c->W, c->H, c->W, py, px);
                acc += w[((m * cg + ci) * c->kh + a) * c->kw + bb] * mk * v;
              }
          }
          y[((n * c->M + m) * c->oh + i) * c->ow + j] = acc;
        }
}

static void fill(double *v, int64_t n, int dt, double scale) {
  for (int64_t i = 0; i < n; i++) v[i] = as_dt(dt, frand() * scale);
}

static void deform_case(void) {
  static double x[MAXE], w[MAXE], off[MAXE], b[16], mask[MAXE], want[MAXE];
  dcase c;
  random_dcase(&c);
  int64_t K = c.kh * c.kw, O = c.oh * c.ow;
  int64_t xd[4] = {c.N, c.C, c.H, c.W}, wd[4] = {c.M, c.C / c.G, c.kh, c.kw};
  int64_t od[4] = {c.N, c.OG * K * 2, c.oh, c.ow}, md[4] = {c.N, c.OG * K, c.oh, c.ow};
  fill(x, c.N * c.C * c.H * c.W, c.dt, 1);
  fill(w, c.M * (c.C / c.G) * K, c.dt, 1);
  fill(off, c.N * c.OG * K * 2 * O, c.dt, c.zero_off ? 0 : 2.5);
  fill(b, c.M, c.dt, 1);
  fill(mask, c.N * c.OG * K * O, c.dt, 1);
  ref_deform(&c, x, w, off, c.with_b ? b : NULL, c.with_mask ? mask : NULL, want);
  mb_node *n;
  int dts[5] = {c.dt, c.dt, c.dt, c.with_b ? c.dt : -1, c.with_mask ? c.dt : -1};
  mb_graph *g = graph_for("DeformConv", c.with_mask ? 5 : c.with_b ? 4 : 3, dts, &n);
  mb_attr_ints(n, "strides", 2, c.s);
  mb_attr_ints(n, "dilations", 2, c.d);
  mb_attr_ints(n, "pads", 4, c.p);
  if (c.G > 1 || rnd(0, 1)) mb_attr_i(n, "group", c.G);
  if (c.OG > 1 || rnd(0, 1)) mb_attr_i(n, "offset_group", c.OG);
  if (rnd(0, 1)) mb_attr_ints(n, "kernel_shape", 2, (int64_t[]){c.kh, c.kw});
  keel_session_t *s = mb_session(g, rnd(0, 1) ? 19 : 22);
  keel_value_t *in[5] = {tensor_of(s, c.dt, 4, xd, x), tensor_of(s, c.dt, 4, wd, w),
                         tensor_of(s, c.dt, 4, od, off), tensor_of(s, c.dt, 1, &c.M, b),
                         tensor_of(s, c.dt, 4, md, mask)};
  const char *names[5] = {"I0", "I1", "I2", "I3", "I4"};
  keel_value_t *vals[5];
  size_t nv = 0;
  for (int i = 0; i < 5; i++)
    if (dts[i] >= 0) names[nv] = names[i], vals[nv++] = in[i];
  keel_value_t *out = NULL;
  CHECK_OK(keel_run(s, names, vals, nv, &out));
  int64_t yd[4] = {c.N, c.M, c.oh, c.ow};
  bool ok = same_values(out, 4, yd, want, c.dt == KEEL_FLOAT16 ? 2e-2 : 1e-4);
  CHECK(ok);
  if (!ok) fprintf(stderr, "  DeformConv %s G %lld OG %lld\n", keel_dtype_name(c.dt), (long long)c.G, (long long)c.OG);
  keel_value_release(out);
  for (int i = 0; i < 5; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
}

/* Zero offsets and no mask: DeformConv is Conv. */
static void deform_equals_conv(void) {
  static double x[2 * 3 * 6 * 5], w[4 * 3 * 3 * 2], off[2 * 12 * 4 * 4], y[2 * 4 * 4 * 4];
  int64_t xd[4] = {2, 3, 6, 5}, wd[4] = {4, 3, 3, 2}, od[4] = {2, 12, 4, 4};
  fill(x, 180, KEEL_FLOAT, 1);
  fill(w, 72, KEEL_FLOAT, 1);
  memset(off, 0, sizeof off);
  keel_value_t *outs[2] = {0};
  for (int which = 0; which < 2; which++) {
    mb_node *n;
    mb_graph *g = graph_for(which ? "Conv" : "DeformConv", which ? 2 : 3,
                            (int[]){KEEL_FLOAT, KEEL_FLOAT, KEEL_FLOAT}, &n);
    keel_session_t *s = mb_session(g, 22);
    keel_value_t *in[3] = {tensor_of(s, KEEL_FLOAT, 4, xd, x), tensor_of(s, KEEL_FLOAT, 4, wd, w),
                           tensor_of(s, KEEL_FLOAT, 4, od, off)};
    CHECK_OK(keel_run(s, (const char *[]){"I0", "I1", "I2"}, in, which ? 2 : 3, &outs[which]));
    for (int i = 0; i < 3; i++) keel_value_release(in[i]);
    keel_session_destroy(s);
  }
  for (int i = 0; i < 128 && outs[0] && outs[1]; i++) y[i] = keel_value_at(outs[1], i);
  CHECK(same_values(outs[0], 4, (int64_t[]){2, 4, 4, 4}, y, 1e-5));
  keel_value_release(outs[0]);
  keel_value_release(outs[1]);
}

/* Offsets of the wrong shape, channels that do not split into groups, a
 * mask of the wrong shape, integer inputs. */
static void deform_errors(void) {
  static const double z[512] = {0};
  struct { int64_t xd[4], wd[4], od[4], md[4]; int64_t group, og; int dt; keel_status want; } cases[] = {
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 8, 3, 3}, {1, 4, 3, 3}, 1, 1, KEEL_FLOAT, KEEL_OK},
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 8, 2, 3}, {1, 4, 3, 3}, 1, 1, KEEL_FLOAT, KEEL_ERR_SHAPE},
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 6, 3, 3}, {1, 4, 3, 3}, 1, 1, KEEL_FLOAT, KEEL_ERR_SHAPE},
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 8, 3, 3}, {1, 3, 3, 3}, 1, 1, KEEL_FLOAT, KEEL_ERR_SHAPE},
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 8, 3, 3}, {1, 4, 3, 3}, 2, 1, KEEL_FLOAT, KEEL_ERR_SHAPE},
      {{1, 3, 4, 4}, {2, 3, 2, 2}, {1, 16, 3, 3}, {1, 8, 3, 3}, 1, 2, KEEL_FLOAT, KEEL_ERR_SHAPE},
      {{1, 2, 4, 4}, {2, 2, 2, 2}, {1, 8, 3, 3}, {1, 4, 3, 3}, 1, 1, KEEL_INT32, KEEL_ERR_UNSUPPORTED},
      {{1, 2, 1, 4}, {2, 2, 2, 2}, {1, 8, 3, 3}, {1, 4, 3, 3}, 1, 1, KEEL_FLOAT, KEEL_ERR_SHAPE},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    mb_node *n;
    int dt = cases[c].dt;
    mb_graph *g = graph_for("DeformConv", 5, (int[]){dt, dt, dt, -1, dt}, &n);
    mb_attr_i(n, "group", cases[c].group);
    mb_attr_i(n, "offset_group", cases[c].og);
    keel_session_t *s = mb_session(g, 22);
    keel_value_t *in[4] = {tensor_of(s, dt, 4, cases[c].xd, z), tensor_of(s, dt, 4, cases[c].wd, z),
                           tensor_of(s, dt, 4, cases[c].od, z), tensor_of(s, dt, 4, cases[c].md, z)};
    keel_value_t *out = NULL;
    CHECK_STATUS(keel_run(s, (const char *[]){"I0", "I1", "I2", "I4"}, in, 4, &out), cases[c].want);
    keel_value_release(out);
    for (int i = 0; i < 4; i++) keel_value_release(in[i]);
    keel_session_destroy(s);
  }
}

int main(void) {
  for (int i = 0; i < 200; i++) col2im_case();
  col2im_errors();
  for (int i = 0; i < 150; i++) deform_case();
  deform_equals_conv();
  deform_errors();
  return check_report();
}
