/* conv_fast.c: faster implementations of Conv (kernel.h's keel_impl),
 * bound at session creation where they apply; conv.c's im2col + GEMM
 * kernel stays the reference for everything else and for the tests.
 *
 * depthwise: 2-D float Conv with group == C == M (one filter per channel,
 * MobileNet's and EfficientNet's 3x3 and 5x5 layers). im2col turns each of
 * those into a GEMM with one output row, which runs at a few GFLOP/s; this
 * kernel computes each output plane directly instead: the input plane is
 * copied once into a zero-padded per-worker buffer, then every output row
 * accumulates k*k shifted rows of it, a loop the compiler vectorizes
 * (compiled for AVX-512, AVX2+FMA and baseline x86-64, chosen at run time).
 * Planes (image, channel) are spread over the session's pool. A fused
 * activation (ir/pass_fuse.c) is applied to each plane while it is hot.
 */
#include <stdatomic.h>

#include "activation.h"
#include "conv_util.h"
#include "../base/pool.h"

/* ========================================================== geometry */

typedef struct dw_job {
  keel_win w;                   /* 2 spatial dims                         */
  int64_t c;                    /* channels (== group == M)               */
  int64_t hp, wp;               /* padded plane                           */
  const float *x, *wt, *b;      /* (N,C,H,W), (C,1,kh,kw), (C) or NULL    */
  float *y;                     /* (N,C,OH,OW)                            */
  float *pad;                   /* threads * hp * wp                      */
  keel_act act;
} dw_job;

/* ============================================================ planes */

/* One output plane from its padded input plane p (hp x wp). Written once,
 * compiled three times (the loop over ox is what vectorizes). */
#define DW_PLANE_BODY                                                                   \
  const keel_win *w = &j->w;                                                            \
  int64_t OH = w->out[0], OW = w->out[1], kh = w->k[0], kw = w->k[1];                   \
  int64_t sh = w->s[0], sw = w->s[1], dh = w->d[0], dwl = w->d[1], wp = j->wp;          \
  for (int64_t oy = 0; oy < OH; oy++) {                                                 \
    float *row = y + oy * OW;                                                           \
    for (int64_t ox = 0; ox < OW; ox++) row[ox] = bias;                                 \
    for (int64_t ky = 0; ky < kh; ky++) {                                               \
      const float *src = p + (oy * sh + ky * dh) * wp;                                  \
      for (int64_t kx = 0; kx < kw; kx++) {                                             \
        float f = wt[ky * kw + kx];                                                     \
        const float *s = src + kx * dwl;                                                \
        if (sw == 1)                                                                    \
          for (int64_t ox = 0; ox < OW; ox++) row[ox] += f * s[ox];                     \
        else                                                                            \
          for (int64_t ox = 0; ox < OW; ox++) row[ox] += f * s[ox * sw];                \
      }                                                                                 \
    }                                                                                   \
  }

typedef void (*dw_plane_fn)(const dw_job *j, const float *p, const float *wt, float bias,
                            float *y);

static void dw_plane_base(const dw_job *j, const float *p, const float *wt, float bias,
                          float *y) {
  DW_PLANE_BODY
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void dw_plane_avx2(const dw_job *j, const float *p,
                                                              const float *wt, float bias,
                                                              float *y) {
  DW_PLANE_BODY
}
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void dw_plane_avx512(
    const dw_job *j, const float *p, const float *wt, float bias, float *y) {
  DW_PLANE_BODY
}
#endif

static dw_plane_fn dw_pick(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return dw_plane_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return dw_plane_avx2;
#endif
  return dw_plane_base;
}

/* Copies plane x (H x W) into p (hp x wp) at offset (pb0, pb1), zeros
 * around it. */
static void dw_pad(const dw_job *j, const float *x, float *p) {
  const keel_win *w = &j->w;
  int64_t H = w->in[0], W = w->in[1], t = w->pb[0], l = w->pb[1];
  for (int64_t r = 0; r < j->hp; r++) {
    float *dst = p + r * j->wp;
    int64_t iy = r - t;
    if (iy < 0 || iy >= H) {
      memset(dst, 0, sizeof(float) * (size_t)j->wp);
      continue;
    }
    int64_t x0 = KEEL_MIN(l, j->wp), n = KEEL_MAX(KEEL_MIN(W, j->wp - l), 0);
    memset(dst, 0, sizeof(float) * (size_t)x0);
    memcpy(dst + l, x + iy * W, sizeof(float) * (size_t)n);
    if (l + n < j->wp) memset(dst + l + n, 0, sizeof(float) * (size_t)(j->wp - l - n));
  }
}

static _Atomic(dw_plane_fn) g_dw_plane; /* picked once, at the first bind */

static keel_status dw_planes(void *ctx, int64_t b, int64_t e, int worker) {
  const dw_job *j = ctx;
  const keel_win *w = &j->w;
  float *p = j->pad + (size_t)worker * (size_t)(j->hp * j->wp);
  int64_t ks = w->k_size, in = w->in_size, out = w->out_size;
  for (int64_t i = b; i < e; i++) { /* plane i = image i / C, channel i % C */
    int64_t c = i % j->c;
    dw_pad(j, j->x + i * in, p);
    float *y = j->y + i * out;
    dw_plane_fn plane = atomic_load_explicit(&g_dw_plane, memory_order_relaxed);
    plane(j, p, j->wt + c * ks, j->b ? j->b[c] : 0.0f, y);
    keel_act_apply_f32(&j->act, y, out);
  }
  return KEEL_OK;
}

/* ======================================================= the kernel */

/* kernel_shape, when given, must be W's spatial dims (the reference
 * words the error otherwise). */
static bool kernel_shape_ok(keel_kctx *k, const keel_tensor *wt) {
  int n;
  const int64_t *ks = keel_k_attr_ints(k, "kernel_shape", &n);
  return n == 0 || (n == 2 && ks[0] == wt->shape[2] && ks[1] == wt->shape[3]);
}

static keel_status dw_run(keel_kctx *k) {
  const keel_tensor *x, *wt, *b;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &wt));
  KEEL_TRY(keel_k_in_opt(k, 2, &b));
  int64_t group = keel_k_attr_i(k, "group", 1);
  /* anything unusual gets the reference, which also words the errors */
  if (x->dtype != KEEL_FLOAT || x->rank != 4 || x->shape[1] != group || wt->rank != 4 ||
      wt->shape[0] != group || wt->shape[1] != 1 || (b && (b->rank != 1 || b->shape[0] != group)) ||
      !kernel_shape_ok(k, wt))
    return keel_op_conv_ref(k);
  dw_job j = {.c = group, .x = x->data, .wt = wt->data, .b = b ? b->data : NULL};
  keel_win *w = &j.w;
  w->nd = 2;
  for (int i = 0; i < 2; i++) w->in[i] = x->shape[2 + i], w->k[i] = wt->shape[2 + i];
  KEEL_TRY(keel_win_read(k, w));
  KEEL_TRY(keel_win_forward(w, false));
  KEEL_TRY(keel_act_of(k->node, &j.act));
  j.hp = (w->out[0] - 1) * w->s[0] + (w->k[0] - 1) * w->d[0] + 1;
  j.wp = (w->out[1] - 1) * w->s[1] + (w->k[1] - 1) * w->d[1] + 1;
  keel_tensor *y;
  int64_t shape[4] = {x->shape[0], group, w->out[0], w->out[1]};
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, shape, &y));
  int64_t planes = x->shape[0] * group;
  if (planes == 0 || w->out_size == 0) return KEEL_OK;
  j.y = y->data;
  int threads = keel_pool_threads(k->pool);
  void *pad;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * j.hp * j.wp, sizeof(float), &pad));
  j.pad = pad;
  return keel_pool_for(k->pool, planes, 1, dw_planes, &j);
}

/* Depthwise when W is a constant (C, 1, kh, kw) and group == C. */
static bool dw_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  const keel_attr *g = keel_node_attr(n, "group");
  if (!wt || !g || wt->dtype != KEEL_FLOAT || wt->rank != 4 || wt->shape[1] != 1) return false;
  if (g->i != wt->shape[0] || g->i < 2) return false;
  if (!atomic_load(&g_dw_plane)) atomic_store(&g_dw_plane, dw_pick()); /* same on every thread */
  return true;
}

static const keel_impl g_dw = {"depthwise", dw_supports, NULL, NULL, dw_run};
const keel_impl *const keel_conv_impls[] = {&g_dw, NULL};
