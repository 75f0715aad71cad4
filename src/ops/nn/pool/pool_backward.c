/* pool_backward.c: the backward kernels of the pools (forward kernels in
 * pool.c; rules in autodiff/grad_nn.c), in the domain "ai.keel.internal":
 *   MaxPoolGrad, AveragePoolGrad      dX (attribute global=1: the Global* ops)
 *
 * Both take float and double and split the (N, C) planes over the
 * session's pool; the window is read as pool.c reads it.
 */
#include "base/pool.h"
#include "ops/common/backward_util.h"
#include "ops/common/conv_util.h"

/* ============================================================ pools */

/* The window of MaxPool / AveragePool (as ops/nn/pool/pool.c reads it), or of the
 * Global* ops (attribute global=1): the whole plane. */
static keel_status pg_setup(keel_kctx *k, const keel_tensor *x, keel_win *w) {
  if (x->rank < 3)
    return keel_err(KEEL_ERR_SHAPE, "%s: X must be (N, C, D1, ...), got rank %d",
                    k->node->op_type, x->rank);
  memset(w, 0, sizeof *w);
  w->nd = x->rank - 2;
  bool global = keel_k_attr_i(k, "global", 0) != 0;
  int nk = 0;
  const int64_t *ks = global ? NULL : keel_k_attr_ints(k, "kernel_shape", &nk);
  if (!global && nk != w->nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: kernel_shape has %d values for %d spatial dims",
                    k->node->op_type, nk, w->nd);
  for (int i = 0; i < w->nd; i++) {
    w->in[i] = x->shape[i + 2];
    w->k[i] = global ? KEEL_MAX(w->in[i], 1) : ks[i];
    if (w->k[i] < 1 || w->k[i] > KEEL_WIN_ATTR_MAX)
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: kernel_shape[%d] = %lld is out of range",
                      k->node->op_type, i, (long long)w->k[i]);
  }
  if (global) {
    for (int i = 0; i < w->nd; i++) w->s[i] = w->d[i] = 1;
    return keel_win_forward(w, false);
  }
  KEEL_TRY(keel_win_read(k, w));
  for (int i = 0; i < w->nd && w->auto_pad == KEEL_PAD_NOTSET; i++)
    if (w->pb[i] >= keel_win_ext(w, i) || w->pe[i] >= keel_win_ext(w, i))
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: pads of spatial dim %d reach the kernel span",
                      k->node->op_type, i);
  return keel_win_forward(w, keel_k_attr_i(k, "ceil_mode", 0) != 0);
}

static int64_t pg_cdiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/* The plane offsets under the window of output position o (ops/nn/pool/pool.c's
 * win_taps, in the same order); *inside: the taps inside the padded
 * extent (count_include_pad's divisor). */
static int64_t pg_taps(const keel_win *w, const int64_t *o, int64_t *taps, int64_t *inside) {
  int64_t lo[KEEL_MAX_RANK], hi[KEEL_MAX_RANK], s0[KEEL_MAX_RANK], j[KEEL_MAX_RANK];
  int nd = w->nd;
  bool empty = false;
  *inside = 1;
  for (int d = 0; d < nd; d++) {
    int64_t dl = w->d[d];
    s0[d] = o[d] * w->s[d] - w->pb[d];
    lo[d] = KEEL_MAX(0, pg_cdiv(-s0[d], dl));
    hi[d] = KEEL_MIN(w->k[d], pg_cdiv(w->in[d] - s0[d], dl));
    int64_t plo = KEEL_MAX(0, pg_cdiv(-w->pb[d] - s0[d], dl));
    int64_t phi = KEEL_MIN(w->k[d], pg_cdiv(w->in[d] + w->pe[d] - s0[d], dl));
    *inside *= KEEL_MAX(0, phi - plo);
    empty |= hi[d] <= lo[d];
    j[d] = lo[d];
  }
  if (empty) return 0;
  int64_t n = 0;
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off = off * w->in[d] + s0[d] + j[d] * w->d[d];
    taps[n++] = off;
    int d = nd - 1;
    while (d >= 0 && ++j[d] == hi[d]) j[d] = lo[d], d--;
    if (d < 0) return n;
  }
}

typedef struct pg_job {
  const keel_win *w;
  bool max, include_pad, dbl;
  const void *gy, *x;
  void *dx;
  int64_t *taps, max_taps;      /* per-worker tap lists                  */
} pg_job;

/* Planes [c0, c1): dx = 0, then each output's gradient goes to the first
 * maximal tap (Max, the forward's choice; NaN as there) or to every tap
 * divided by the forward's divisor (Average). */
static keel_status pg_task(void *ctx, int64_t c0, int64_t c1, int worker) {
  const pg_job *j = ctx;
  const keel_win *w = j->w;
  int64_t *taps = j->taps + (int64_t)worker * j->max_taps, o[KEEL_MAX_RANK] = {0}, inside;
  for (int64_t c = c0; c < c1; c++)
    for (int64_t i = 0; i < w->in_size; i++) keel_bw_st(j->dx, j->dbl, c * w->in_size + i, 0);
  for (int64_t p = 0; p < w->out_size; p++) {
    int64_t n = pg_taps(w, o, taps, &inside), div = j->include_pad ? inside : n;
    for (int i = w->nd - 1; i >= 0; i--) { /* next output coordinate */
      if (++o[i] < w->out[i]) break;
      o[i] = 0;
    }
    if (!n || (!j->max && !div)) continue;
    for (int64_t c = c0; c < c1; c++) {
      int64_t xp = c * w->in_size;
      double g = keel_bw_ld(j->gy, j->dbl, c * w->out_size + p);
      if (j->max) {
        double best = 0;
        int64_t bi = -1;
        for (int64_t t = 0; t < n; t++) {
          double v = keel_bw_ld(j->x, j->dbl, xp + taps[t]);
          if (bi < 0 || v > best || best != best) best = v, bi = taps[t];
        }
        keel_assert_internal(bi >= 0 && bi < w->in_size);
        keel_bw_st(j->dx, j->dbl, xp + bi, keel_bw_ld(j->dx, j->dbl, xp + bi) + g);
      } else {
        double gd = g / (double)div;
        for (int64_t t = 0; t < n; t++)
          keel_bw_st(j->dx, j->dbl, xp + taps[t], keel_bw_ld(j->dx, j->dbl, xp + taps[t]) + gd);
      }
    }
  }
  return KEEL_OK;
}

/* Inputs (gY, X); output dX. */
static keel_status op_pool_grad(keel_kctx *k, bool max) {
  const keel_tensor *gy, *x;
  KEEL_TRY(keel_bw_fd_input(k, 1, -1, &x));
  KEEL_TRY(keel_bw_fd_input(k, 0, x->dtype, &gy));
  keel_win w;
  KEEL_TRY(pg_setup(k, x, &w));
  int64_t ys[KEEL_MAX_RANK];
  ys[0] = x->shape[0], ys[1] = x->shape[1];
  memcpy(ys + 2, w.out, sizeof(int64_t) * (size_t)w.nd);
  KEEL_TRY(keel_bw_same_shape(k, gy, "the gradient", x->rank, ys));
  keel_tensor *dx;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &dx));
  int64_t planes = x->shape[0] * x->shape[1];
  if (!keel_tensor_numel(dx)) return KEEL_OK;
  pg_job j = {&w, max, keel_k_attr_i(k, "count_include_pad", 0) != 0, x->dtype == KEEL_DOUBLE,
              gy->data, x->data, dx->data, NULL, 1};
  for (int i = 0; i < w.nd; i++) j.max_taps *= KEEL_MIN(w.k[i], w.in[i]);
  int threads = keel_pool_threads(k->pool);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * j.max_taps, sizeof(int64_t), &p));
  j.taps = p;
  return keel_pool_for(k->pool, planes, 1, pg_task, &j);
}

static keel_status op_maxpool_grad(keel_kctx *k) { return op_pool_grad(k, true); }
static keel_status op_avgpool_grad(keel_kctx *k) { return op_pool_grad(k, false); }

/* ============================================================= table */

#define D "ai.keel.internal"
#define FD (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_grad_pool[] = {
    {D, "MaxPoolGrad", 1, KEEL_OPSET_MAX, op_maxpool_grad, 0, FD},
    {D, "AveragePoolGrad", 1, KEEL_OPSET_MAX, op_avgpool_grad, 0, FD},
    {0},
};
#undef FD
#undef D
