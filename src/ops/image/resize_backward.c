/* resize_backward.c: the backward kernel of Resize (forward kernel in
 * image.c; rule in autodiff/grad_nn.c), in the domain "ai.keel.internal":
 *   ResizeGrad(gY, X, scales?, sizes?)  dX of a 4-D Resize that changes H
 *       and W only, modes nearest and linear: each output's gradient spread
 *       over the taps the forward read it from.
 *
 * It takes float and double and splits the (N, C) planes over the
 * session's pool.
 */
#include <math.h>

#include "base/pool.h"
#include "ops/common/backward_util.h"

/* ========================================================== Resize */

enum { RG_HALF, RG_PYTORCH, RG_ALIGN, RG_ASYM };
enum { RG_NEAR_FLOOR_PREF, RG_NEAR_CEIL_PREF, RG_NEAR_FLOOR, RG_NEAR_CEIL, RG_NEAR_SIMPLE };

typedef struct rg_axis {
  int64_t in, out, n;           /* sizes; taps per output (1 or 2)       */
  double scale;
  int64_t *idx;                 /* out * n input indices                 */
  double *w;                    /* out * n weights                       */
} rg_axis;

static int rg_pick(const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

/* x_original of output index x (ops/image/image.c's formulas for these modes). */
static double rg_coord(const rg_axis *a, int ctm, int64_t x) {
  double in = (double)a->in, s = a->scale, xf = (double)x, v;
  bool one = a->out == 1;
  switch (ctm) {
    case RG_ALIGN: v = one ? 0 : xf * (in - 1) / (s * in - 1); break;
    case RG_ASYM: v = xf / s; break;
    case RG_PYTORCH: v = one ? 0 : (xf + 0.5) / s - 0.5; break;
    default: v = (xf + 0.5) / s - 0.5; break;
  }
  double lim = 4 * in + 8;
  return v >= -lim ? (v <= lim ? v : lim) : -lim;
}

static int64_t rg_clamp(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* One axis's taps, as the forward picks them. */
static void rg_fill(rg_axis *a, bool linear, int ctm, int nmode, bool exclude) {
  for (int64_t j = 0; j < a->out; j++) {
    double x = rg_coord(a, ctm, j), f = floor(x), r = x - f;
    int64_t *idx = a->idx + j * a->n;
    double *w = a->w + j * a->n;
    if (!linear) {
      int64_t i = (int64_t)f;
      if (r != 0) switch (nmode) {
          case RG_NEAR_FLOOR_PREF: i += r > 0.5; break;
          case RG_NEAR_CEIL_PREF: i += r >= 0.5; break;
          case RG_NEAR_CEIL: i += 1; break;
          case RG_NEAR_SIMPLE: i += a->scale < 1; break;
          default: break;
        }
      idx[0] = rg_clamp(i, a->in), w[0] = 1;
      continue;
    }
    if (r == 0) f -= 1, r = 1;
    int64_t base = (int64_t)f;
    double sum = 0;
    for (int q = 0; q < 2; q++) {
      int64_t pos = base + q;
      double wq = q ? r : 1 - r;
      if (exclude && (pos < 0 || pos >= a->in)) wq = 0;
      idx[q] = rg_clamp(pos, a->in), w[q] = wq, sum += wq;
    }
    if (exclude && sum != 0) w[0] /= sum, w[1] /= sum;
  }
}

typedef struct rg_job {
  const rg_axis *h, *w;
  bool dbl;
  const void *gy;
  void *dx;
} rg_job;

/* Planes [c0, c1): every output's gradient spread over its taps. */
static keel_status rg_task(void *ctx, int64_t c0, int64_t c1, int worker) {
  (void)worker;
  const rg_job *j = ctx;
  const rg_axis *h = j->h, *w = j->w;
  int64_t ip = h->in * w->in, op = h->out * w->out;
  for (int64_t c = c0; c < c1; c++) {
    for (int64_t i = 0; i < ip; i++) keel_bw_st(j->dx, j->dbl, c * ip + i, 0);
    for (int64_t oh = 0; oh < h->out; oh++)
      for (int64_t ow = 0; ow < w->out; ow++) {
        double g = keel_bw_ld(j->gy, j->dbl, c * op + oh * w->out + ow);
        for (int64_t a = 0; a < h->n; a++)
          for (int64_t b = 0; b < w->n; b++) {
            int64_t at = c * ip + h->idx[oh * h->n + a] * w->in + w->idx[ow * w->n + b];
            keel_assert_internal(at >= c * ip && at < (c + 1) * ip);
            double v = g * h->w[oh * h->n + a] * w->w[ow * w->n + b];
            keel_bw_st(j->dx, j->dbl, at, keel_bw_ld(j->dx, j->dbl, at) + v);
          }
      }
  }
  return KEEL_OK;
}

/* Output sizes and scales from scales (input 2) or sizes (input 3), as
 * the forward reads them; N and C must keep their size. */
static keel_status rg_geometry(keel_kctx *k, const keel_tensor *x, rg_axis *ax) {
  const keel_tensor *sc, *sz;
  KEEL_TRY(keel_k_in_opt(k, 2, &sc));
  KEEL_TRY(keel_k_in_opt(k, 3, &sz));
  int64_t nsc = sc ? keel_tensor_numel(sc) : 0, nsz = sz ? keel_tensor_numel(sz) : 0;
  if ((nsc != 0) == (nsz != 0) || (nsc && nsc != 4) || (nsz && nsz != 4))
    return keel_err(KEEL_ERR_SHAPE, "ResizeGrad: needs 4 scales or 4 sizes (got %lld and %lld)",
                    (long long)nsc, (long long)nsz);
  for (int d = 0; d < 4; d++) {
    ax[d].in = x->shape[d];
    if (nsc) {
      ax[d].scale = keel_elem_get_f64(sc->dtype, sc->data, (size_t)d);
      if (!(ax[d].scale > 0) || !isfinite(ax[d].scale) || ax[d].scale * (double)ax[d].in > 1e15)
        return keel_err(KEEL_ERR_SHAPE, "ResizeGrad: scales[%d] = %g is out of range", d, ax[d].scale);
      ax[d].out = (int64_t)floor(ax[d].scale * (double)ax[d].in);
    } else {
      ax[d].out = keel_elem_get_i64(sz->dtype, sz->data, (size_t)d);
      if (ax[d].out < 0) return keel_err(KEEL_ERR_SHAPE, "ResizeGrad: sizes[%d] is negative", d);
      ax[d].scale = ax[d].in ? (double)ax[d].out / (double)ax[d].in : 1;
    }
  }
  if (ax[0].out != ax[0].in || ax[1].out != ax[1].in)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of Resize: only H and W may change size");
  return KEEL_OK;
}

/* Inputs (gY, X, scales?, sizes?) for a 4-D X; attributes mode,
 * coordinate_transformation_mode, nearest_mode, exclude_outside. */
static keel_status op_resize_grad(keel_kctx *k) {
  static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                     "asymmetric", NULL};
  static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil",
                                    "simple", NULL};
  const keel_tensor *gy, *x;
  KEEL_TRY(keel_bw_fd_input(k, 1, -1, &x));
  KEEL_TRY(keel_bw_fd_input(k, 0, x->dtype, &gy));
  if (x->rank != 4) return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of Resize: X must be 4-D");
  const char *mode = keel_k_attr_s(k, "mode", "nearest");
  const char *cs = keel_k_attr_s(k, "coordinate_transformation_mode", "half_pixel");
  const char *ns = keel_k_attr_s(k, "nearest_mode", "round_prefer_floor");
  int ctm = rg_pick(cs, ctms), nmode = rg_pick(ns, nms);
  bool linear = !strcmp(mode, "linear");
  if (ctm < 0 || nmode < 0 || (!linear && strcmp(mode, "nearest")))
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient of Resize: mode %s, %s, %s", mode, cs, ns);
  rg_axis ax[4];
  KEEL_TRY(rg_geometry(k, x, ax));
  int64_t ys[4] = {ax[0].out, ax[1].out, ax[2].out, ax[3].out};
  KEEL_TRY(keel_bw_same_shape(k, gy, "the gradient", 4, ys));
  keel_tensor *dx;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, 4, x->shape, &dx));
  if (!keel_tensor_numel(dx)) return KEEL_OK;
  int64_t nt = linear ? 2 : 1;
  void *pi, *pw;
  KEEL_TRY(keel_k_scratch_n(k, (ax[2].out + ax[3].out) * nt + 1, sizeof(int64_t), &pi));
  KEEL_TRY(keel_k_scratch_n(k, (ax[2].out + ax[3].out) * nt + 1, sizeof(double), &pw));
  bool exclude = keel_k_attr_i(k, "exclude_outside", 0) != 0;
  for (int d = 2; d < 4; d++) {
    ax[d].n = nt;
    ax[d].idx = (int64_t *)pi + (d == 3 ? ax[2].out * nt : 0);
    ax[d].w = (double *)pw + (d == 3 ? ax[2].out * nt : 0);
    rg_fill(&ax[d], linear, ctm, nmode, exclude);
  }
  rg_job j = {&ax[2], &ax[3], x->dtype == KEEL_DOUBLE, gy->data, dx->data};
  return keel_pool_for(k->pool, ax[0].in * ax[1].in, 1, rg_task, &j);
}

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_resize[] = {
    {D, "ResizeGrad", 1, KEEL_OPSET_MAX, op_resize_grad, 0, FD},
    {0},
};
#undef FD
#undef D
