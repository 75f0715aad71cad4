/* conv_fast.c: faster implementations of Conv (kernel.h's keel_impl),
 * bound at session creation where they apply; conv.c's im2col + GEMM
 * kernel stays the reference for everything else and for the tests.
 *
 * depthwise: 2-D float Conv with group == C == M (one filter per channel,
 * MobileNet's and EfficientNet's 3x3 and 5x5 layers). im2col turns each of
 * those into a GEMM with one output row, which runs at a few GFLOP/s; this
 * kernel computes them directly in NCHW, one channel plane per task: the
 * plane is copied once into a per-worker buffer, zero-padded and, for a
 * stride s > 1, split into s column phases per row (phase f holds columns
 * f, f+s, f+2s, ...), so that every tap of VL = 16 consecutive outputs of
 * a row is one unaligned 16-float load, whatever the stride or dilation.
 * DR = 4 output rows are accumulated at once in vector registers (four
 * independent FMA chains); the bias starts the sums and a fused
 * activation (passes/pass_fuse.c) is applied to the plane while it is hot.
 * The body is written once with GCC vector types and compiled for
 * AVX-512, AVX2+FMA and baseline x86-64, chosen at run time. Planes
 * (image, channel) are spread over the session's pool.
 */
#include <stdatomic.h>

#include "ops/common/activation.h"
#include "ops/common/conv_util.h"
#include "base/pool.h"

/* ========================================================== geometry */

#define VL 16                   /* outputs per vector (one zmm, two ymm)  */
#define DR 4                    /* output rows accumulated together       */
#define DW_MAX_TAPS 64          /* larger kernels take the reference      */

typedef float dw_v __attribute__((vector_size(VL * sizeof(float))));

/* Prepared state: W (C, 1, kh, kw) copied, with the sizes it was made for. */
typedef struct dw_prep {
  int64_t c, kh, kw;
  const float *w;               /* c * kh*kw                              */
} dw_prep;

typedef struct dw_job {
  keel_win w;                   /* 2 spatial dims                         */
  int64_t c;
  int64_t hp;                   /* padded rows (OH rounded up to DR)      */
  int64_t L, rs;                /* one phase's length; row stride s*L     */
  int64_t off[DW_MAX_TAPS];     /* tap -> offset in the padded plane      */
  const float *x, *b;           /* (N,C,H,W), (C) or NULL                 */
  const dw_prep *prep;
  float *y;                     /* (N,C,OH,OW)                            */
  float *pad;                   /* threads * hp * rs                      */
  keel_act act;
} dw_job;

/* ============================================================ planes */

/* The copy into the padded plane is inlined into each compiled plane
 * function, so it vectorizes for that instruction set too. */
#define DW_INLINE static inline __attribute__((always_inline))

static int64_t dw_ceil_div(int64_t a, int64_t b) { /* b > 0 */
  return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

/* One padded row r of p: phase f, index i holds padded column f + s*i,
 * i.e. input column f + s*i - pl, zero outside the image. */
DW_INLINE void dw_pad_row(const dw_job *j, const float *src, float *row) {
  int64_t W = j->w.in[1], pl = j->w.pb[1], s = j->w.s[1], L = j->L;
  if (s == 1) {
    int64_t i0 = KEEL_MIN(KEEL_MAX(pl, 0), L), i1 = KEEL_MAX(KEEL_MIN(pl + W, L), i0);
    memset(row, 0, sizeof(float) * (size_t)i0);
    if (i1 > i0) memcpy(row + i0, src + i0 - pl, sizeof(float) * (size_t)(i1 - i0));
    memset(row + i1, 0, sizeof(float) * (size_t)(L - i1));
    return;
  }
  for (int64_t f = 0; f < s; f++) { /* i in [i0, i1): inside the image */
    float *ph = row + f * L;
    int64_t i0 = KEEL_MIN(KEEL_MAX(dw_ceil_div(pl - f, s), 0), L);
    int64_t i1 = KEEL_MAX(KEEL_MIN(dw_ceil_div(pl + W - f, s), L), i0);
    const float *sp = src + f - pl;
    memset(ph, 0, sizeof(float) * (size_t)i0);
    if (s == 2) /* a constant stride: it vectorizes */
      for (int64_t i = i0; i < i1; i++) ph[i] = sp[2 * i];
    else
      for (int64_t i = i0; i < i1; i++) ph[i] = sp[s * i];
    memset(ph + i1, 0, sizeof(float) * (size_t)(L - i1));
  }
}

/* p (hp, rs) = plane x (H, W) padded and phase-split. */
DW_INLINE void dw_pad(const dw_job *j, const float *x, float *p) {
  int64_t H = j->w.in[0], W = j->w.in[1], pt = j->w.pb[0];
  for (int64_t r = 0; r < j->hp; r++) {
    int64_t iy = r - pt;
    if (iy < 0 || iy >= H) memset(p + r * j->rs, 0, sizeof(float) * (size_t)j->rs);
    else dw_pad_row(j, x + iy * W, p + r * j->rs);
  }
}

/* One plane: x (H, W) is copied into p padded and phase-split, then
 * with wt, its kh*kw taps, gives the (OH, OW) output y. Row oy of the output reads rows
 * oy*sh + ky*dh of p (the rows past OH's last block of DR are zeros). */
#define DW_LD(v, q) memcpy(&(v), (q), sizeof(v))
#define DW_PLANE_BODY                                                                   \
  dw_pad(j, x, p);                                                                     \
  int64_t OH = j->w.out[0], OW = j->w.out[1], taps = j->w.k_size;                      \
  int64_t step = j->w.s[0] * j->rs;                                                    \
  const int64_t *off = j->off;                                                         \
  for (int64_t oy = 0; oy < OH; oy += DR) {                                            \
    int nr = (int)KEEL_MIN(DR, OH - oy);                                               \
    const float *p0 = p + oy * step;                                                   \
    for (int64_t ox = 0; ox < OW; ox += VL) {                                          \
      /* four named sums, not an array: they stay in registers */                      \
      dw_v a0 = (dw_v){0} + bias, a1 = a0, a2 = a0, a3 = a0, v0, v1, v2, v3;           \
      for (int64_t t = 0; t < taps; t++) {                                             \
        const float *q = p0 + off[t] + ox;                                             \
        float f = wt[t];                                                               \
        DW_LD(v0, q), DW_LD(v1, q + step), DW_LD(v2, q + 2 * step), DW_LD(v3, q + 3 * step); \
        a0 += f * v0, a1 += f * v1, a2 += f * v2, a3 += f * v3;                        \
      }                                                                                \
      float *yo = y + oy * OW + ox;                                                    \
      if (OW - ox >= VL && nr == DR) { /* whole vectors */                             \
        memcpy(yo, &a0, sizeof a0), memcpy(yo + OW, &a1, sizeof a1);                   \
        memcpy(yo + 2 * OW, &a2, sizeof a2), memcpy(yo + 3 * OW, &a3, sizeof a3);      \
        continue;                                                                      \
      }                                                                                \
      float res[DR][VL];                                                               \
      memcpy(res[0], &a0, sizeof a0), memcpy(res[1], &a1, sizeof a1);                  \
      memcpy(res[2], &a2, sizeof a2), memcpy(res[3], &a3, sizeof a3);                  \
      size_t n = sizeof(float) * (size_t)KEEL_MIN(VL, OW - ox);                        \
      for (int i = 0; i < nr; i++) memcpy(yo + i * OW, res[i], n);                     \
    }                                                                                  \
  }

typedef void (*dw_plane_fn)(const dw_job *j, const float *x, float *p, const float *wt,
                            float bias, float *y);

static void dw_plane_base(const dw_job *j, const float *x, float *p, const float *wt,
                          float bias, float *y) {
  DW_PLANE_BODY
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void dw_plane_avx2(const dw_job *j, const float *x,
                                                              float *p, const float *wt,
                                                              float bias, float *y) {
  DW_PLANE_BODY
}
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void dw_plane_avx512(
    const dw_job *j, const float *x, float *p, const float *wt, float bias, float *y) {
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

static _Atomic(dw_plane_fn) g_dw_plane; /* picked once, at the first bind */

static keel_status dw_planes(void *ctx, int64_t b, int64_t e, int worker) {
  const dw_job *j = ctx;
  float *p = j->pad + (size_t)worker * (size_t)(j->hp * j->rs);
  int64_t taps = j->w.k_size, in = j->w.in_size, out = j->w.out_size;
  dw_plane_fn plane = atomic_load_explicit(&g_dw_plane, memory_order_relaxed);
  for (int64_t i = b; i < e; i++) { /* plane i = image i / c, channel i % c */
    int64_t ch = i % j->c;
    float *y = j->y + i * out;
    plane(j, j->x + i * in, p, j->prep->w + ch * taps, j->b ? j->b[ch] : 0.0f, y);
    keel_act_apply_f32(&j->act, y, out);
  }
  return KEEL_OK;
}

/* The padded plane's sizes and each tap's offset in it. */
static void dw_layout(dw_job *j) {
  const keel_win *w = &j->w;
  int64_t oh = (w->out[0] + DR - 1) / DR * DR, ow = (w->out[1] + VL - 1) / VL * VL;
  int64_t s = w->s[1];
  j->hp = (oh - 1) * w->s[0] + (w->k[0] - 1) * w->d[0] + 1;
  j->L = ow + (w->k[1] - 1) * w->d[1] / s;
  j->rs = s * j->L;
  for (int64_t ky = 0; ky < w->k[0]; ky++)
    for (int64_t kx = 0; kx < w->k[1]; kx++) {
      int64_t t = kx * w->d[1];
      j->off[ky * w->k[1] + kx] = ky * w->d[0] * j->rs + (t % s) * j->L + t / s;
    }
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
  dw_job j = {.c = group, .x = x->data, .b = b ? b->data : NULL, .prep = prep};
  keel_win *w = &j.w;
  w->nd = 2;
  for (int i = 0; i < 2; i++) w->in[i] = x->shape[2 + i], w->k[i] = wt->shape[2 + i];
  KEEL_TRY(keel_win_read(k, w));
  KEEL_TRY(keel_win_forward(w, false));
  KEEL_TRY(keel_act_of(k->node, &j.act));
  keel_tensor *y;
  int64_t shape[4] = {x->shape[0], group, w->out[0], w->out[1]};
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, shape, &y));
  int64_t planes = x->shape[0] * group;
  if (planes == 0 || w->out_size == 0) return KEEL_OK;
  dw_layout(&j);
  j.y = y->data;
  int threads = keel_pool_threads(k->pool);
  void *pad;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * j.hp * j.rs, sizeof(float), &pad));
  j.pad = pad;
  return keel_pool_for(k->pool, planes, 1, dw_planes, &j);
}

/* Depthwise when W is a constant (C, 1, kh, kw) and group == C. */
static bool dw_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  const keel_attr *g = keel_node_attr(n, "group");
  if (!wt || !g || wt->dtype != KEEL_FLOAT || wt->rank != 4 || wt->shape[1] != 1) return false;
  if (g->i != wt->shape[0] || g->i < 2 || wt->shape[2] * wt->shape[3] > DW_MAX_TAPS) return false;
  if (!atomic_load(&g_dw_plane)) atomic_store(&g_dw_plane, dw_pick()); /* same on every thread */
  return true;
}

/* Copies the constant W (C, 1, kh, kw). */
static keel_status dw_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *wt = p->consts[1];
  int64_t c = wt->shape[0], taps = wt->shape[2] * wt->shape[3];
  size_t bytes = sizeof(dw_prep) + KEEL_ALIGN + (size_t)(c * taps) * sizeof(float);
  void *blk;
  KEEL_TRY(keel_prep_alloc(p, bytes, &blk));
  dw_prep *d = blk;
  float *w = (float *)(void *)((uint8_t *)blk + KEEL_ALIGN);
  *d = (dw_prep){c, wt->shape[2], wt->shape[3], w};
  memcpy(w, wt->data, (size_t)(c * taps) * sizeof(float));
  *state = d;
  return KEEL_OK;
}

const keel_impl keel_conv_dw = {"depthwise", dw_supports, dw_prepare, keel_prep_block_release, dw_run,
                                "a constant W of one channel per group (group == C >= 2), at most "
                                "the kernel's taps"};
