/* conv_fast.c: faster implementations of Conv (kernel.h's keel_impl),
 * bound at session creation where they apply; conv.c's im2col + GEMM
 * kernel stays the reference for everything else and for the tests.
 *
 * depthwise: 2-D float Conv with group == C == M (one filter per channel,
 * MobileNet's and EfficientNet's 3x3 and 5x5 layers). im2col turns each of
 * those into a GEMM with one output row, which runs at a few GFLOP/s; this
 * kernel computes them directly, CB = 16 channels at a time: the block's
 * input planes are copied once, channel-minor and zero-padded, into a
 * per-worker buffer (hp, wp, CB), and the filters were regrouped the same
 * way when the session was created (prepared state), so every tap of every
 * output pixel is one CB-wide multiply-add whatever the stride or the
 * image size (compiled for AVX-512, AVX2+FMA and baseline x86-64, chosen
 * at run time). Blocks (image, channel block) are spread over the
 * session's pool. A fused activation (ir/pass_fuse.c) is applied to each
 * block while it is hot.
 */
#include <stdatomic.h>

#include "activation.h"
#include "conv_util.h"
#include "../base/pool.h"

/* ========================================================== geometry */

/* Channels per block: one AVX-512 register, two AVX2 registers. */
#define CB 16

/* Prepared state: W (C, 1, kh, kw) regrouped as [C/CB][kh*kw][CB] (the
 * channel tail zero-filled) so that one tap of a block is one vector. */
typedef struct dw_prep {
  int64_t c, kh, kw, nblocks;
  const float *w;               /* nblocks * kh*kw * CB                   */
} dw_prep;

typedef struct dw_job {
  keel_win w;                   /* 2 spatial dims                         */
  int64_t c, nblocks;
  int64_t hp, wp;               /* padded plane                           */
  const float *x, *b;           /* (N,C,H,W), (C) or NULL                 */
  const dw_prep *prep;
  float *y;                     /* (N,C,OH,OW)                            */
  float *pad;                   /* threads * hp * wp * CB                 */
  keel_act act;
} dw_job;

/* ============================================================ blocks */

/* One block of CB channels: p (hp, wp, CB) is the zero-padded input, wt
 * (taps, CB) the filters, bias[CB]; writes CB output planes of y (plane
 * stride `out`, `nc` of them real). The loop over the CB lanes is what
 * vectorizes; it is written once and compiled three times. */
#define DW_BLOCK_BODY                                                                   \
  const keel_win *w = &j->w;                                                            \
  int64_t OH = w->out[0], OW = w->out[1], kh = w->k[0], kw = w->k[1];                   \
  int64_t sh = w->s[0], sw = w->s[1], dh = w->d[0], dwl = w->d[1], wp = j->wp;          \
  int64_t out = w->out_size;                                                            \
  for (int64_t oy = 0; oy < OH; oy++)                                                   \
    for (int64_t ox = 0; ox < OW; ox++) {                                               \
      float acc[CB];                                                                    \
      for (int l = 0; l < CB; l++) acc[l] = bias[l];                                    \
      for (int64_t ky = 0; ky < kh; ky++) {                                             \
        const float *row = p + ((oy * sh + ky * dh) * wp + ox * sw) * CB;               \
        const float *f = wt + ky * kw * CB;                                             \
        for (int64_t kx = 0; kx < kw; kx++)                                             \
          for (int l = 0; l < CB; l++) acc[l] += f[kx * CB + l] * row[kx * dwl * CB + l]; \
      }                                                                                 \
      float *yo = y + oy * OW + ox;                                                     \
      for (int l = 0; l < nc; l++) yo[l * out] = acc[l];                                \
    }

typedef void (*dw_block_fn)(const dw_job *j, const float *p, const float *wt,
                            const float *bias, int nc, float *y);

static void dw_block_base(const dw_job *j, const float *p, const float *wt, const float *bias,
                          int nc, float *y) {
  DW_BLOCK_BODY
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void dw_block_avx2(const dw_job *j, const float *p,
                                                              const float *wt,
                                                              const float *bias, int nc,
                                                              float *y) {
  DW_BLOCK_BODY
}
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void dw_block_avx512(
    const dw_job *j, const float *p, const float *wt, const float *bias, int nc, float *y) {
  DW_BLOCK_BODY
}
#endif

static dw_block_fn dw_pick(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return dw_block_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return dw_block_avx2;
#endif
  return dw_block_base;
}

static _Atomic(dw_block_fn) g_dw_block; /* picked once, at the first bind */

/* p (hp, wp, CB) = channels c0 .. c0+nc of image x (C, H, W), shifted by
 * the begin pads, zeros elsewhere: the padding rows and columns and, in a
 * tail block, the lanes past nc. Only those are cleared, not the whole
 * buffer: the interior is overwritten anyway. */
static void dw_pad(const dw_job *j, const float *x, int nc, float *p) {
  const keel_win *w = &j->w;
  int64_t H = w->in[0], W = w->in[1], t = w->pb[0], l = w->pb[1], wp = j->wp;
  int64_t r0 = KEEL_MIN(KEEL_MAX(t, 0), j->hp), r1 = KEEL_MAX(KEEL_MIN(t + H, j->hp), r0);
  int64_t q0 = KEEL_MIN(KEEL_MAX(l, 0), wp), q1 = KEEL_MAX(KEEL_MIN(l + W, wp), q0);
  size_t row = sizeof(float) * (size_t)(wp * CB);
  memset(p, 0, row * (size_t)r0);
  memset(p + r1 * wp * CB, 0, row * (size_t)(j->hp - r1));
  for (int64_t r = r0; r < r1; r++) {
    float *pr = p + r * wp * CB;
    memset(pr, 0, sizeof(float) * (size_t)(q0 * CB));
    memset(pr + q1 * CB, 0, sizeof(float) * (size_t)((wp - q1) * CB));
    if (nc < CB)
      for (int64_t q = q0; q < q1; q++) memset(pr + q * CB + nc, 0, sizeof(float) * (size_t)(CB - nc));
  }
  /* pixel by pixel, its nc channels side by side: the writes are
   * contiguous, the reads nc sequential streams */
  for (int64_t r = r0; r < r1; r++) {
    const float *src = x + (r - t) * W; /* row r - t of channel 0 */
    float *dst = p + r * wp * CB;
    for (int64_t q = q0; q < q1; q++)
      for (int ch = 0; ch < nc; ch++) dst[q * CB + ch] = src[ch * H * W + q - l];
  }
}

static keel_status dw_blocks(void *ctx, int64_t b, int64_t e, int worker) {
  const dw_job *j = ctx;
  const keel_win *w = &j->w;
  float *p = j->pad + (size_t)worker * (size_t)(j->hp * j->wp * CB);
  int64_t taps = w->k_size, in = w->in_size, out = w->out_size;
  dw_block_fn block = atomic_load_explicit(&g_dw_block, memory_order_relaxed);
  for (int64_t i = b; i < e; i++) { /* block i = image i / nblocks, channels (i % nblocks) * CB */
    int64_t n = i / j->nblocks, cb = i % j->nblocks, c0 = cb * CB;
    int nc = (int)KEEL_MIN(CB, j->c - c0);
    float bias[CB] = {0};
    if (j->b) memcpy(bias, j->b + c0, sizeof(float) * (size_t)nc);
    const float *x = j->x + (n * j->c + c0) * in;
    float *y = j->y + (n * j->c + c0) * out;
    dw_pad(j, x, nc, p);
    block(j, p, j->prep->w + cb * taps * CB, bias, nc, y);
    keel_act_apply_f32(&j->act, y, nc * out);
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
  const dw_prep *prep = k->prep;
  if (prep->c != group || prep->kh != wt->shape[2] || prep->kw != wt->shape[3])
    return keel_op_conv_ref(k);
  dw_job j = {.c = group, .nblocks = prep->nblocks, .x = x->data, .b = b ? b->data : NULL,
              .prep = prep};
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
  int64_t blocks = x->shape[0] * j.nblocks;
  if (blocks == 0 || w->out_size == 0) return KEEL_OK;
  j.y = y->data;
  int threads = keel_pool_threads(k->pool);
  void *pad;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * j.hp * j.wp * CB, sizeof(float), &pad));
  j.pad = pad;
  return keel_pool_for(k->pool, blocks, 1, dw_blocks, &j);
}

/* Depthwise when W is a constant (C, 1, kh, kw) and group == C. */
static bool dw_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  const keel_attr *g = keel_node_attr(n, "group");
  if (!wt || !g || wt->dtype != KEEL_FLOAT || wt->rank != 4 || wt->shape[1] != 1) return false;
  if (g->i != wt->shape[0] || g->i < 2) return false;
  if (!atomic_load(&g_dw_block)) atomic_store(&g_dw_block, dw_pick()); /* same on every thread */
  return true;
}

/* Regroups the constant W into [C/CB][taps][CB]. */
static keel_status dw_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *wt = p->consts[1];
  int64_t c = wt->shape[0], taps = wt->shape[2] * wt->shape[3], nb = (c + CB - 1) / CB;
  size_t bytes = sizeof(dw_prep) + KEEL_ALIGN + (size_t)(nb * taps * CB) * sizeof(float);
  void *blk;
  KEEL_TRY(keel_prep_alloc(p, bytes, &blk));
  dw_prep *d = blk;
  float *w = (float *)(void *)((uint8_t *)blk + KEEL_ALIGN);
  *d = (dw_prep){c, wt->shape[2], wt->shape[3], nb, w};
  const float *src = wt->data;
  memset(w, 0, (size_t)(nb * taps * CB) * sizeof(float));
  for (int64_t ch = 0; ch < c; ch++)
    for (int64_t t = 0; t < taps; t++) w[((ch / CB) * taps + t) * CB + ch % CB] = src[ch * taps + t];
  *state = d;
  return KEEL_OK;
}

static const keel_impl g_dw = {"depthwise", dw_supports, dw_prepare, keel_prep_block_release,
                                dw_run};
const keel_impl *const keel_conv_impls[] = {&g_dw, NULL};
