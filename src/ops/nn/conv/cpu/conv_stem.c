/* conv_stem.c: NhwcConv (ops/nn/conv/conv_nhwc.h) for convolutions of few input
 * channels (1-4: a network's first conv, on the image), keel's own
 * AVX-512 kernel, the implementation "stem".
 *
 * Why keel's own: with 3 input channels a channels-last kernel has almost
 * nothing to vectorize along its reduction, and oneDNN's (brgconv) runs
 * the detector's 3->16 stem at about 50 GFLOP/s, a fifth of this CPU's
 * peak (measured with `keel bench --flops`). Here the vectors run along
 * the output channels instead: a block of P output pixels by V vectors of
 * 16 output channels stays in registers (8 x 1 or 4 x 2 accumulators) while
 * every tap (channel, row, column of the window) adds its input value,
 * broadcast, times the tap's weight vectors. Each weight vector serves P
 * pixels and each input value V vectors, so loads stay at about one per
 * multiply-add: near the FMA peak.
 *
 * Input in either layout: channels-last X, or the image as the file gives
 * it (keel.in_nchw, the usual case for a stem: no staging needed). Output
 * channels-last. Bias starts the accumulators; the fused activation is
 * applied as they are stored where it is ReLU, Clip, HardSwish or
 * HardSigmoid-times-x, else on each finished row while it is in cache
 * (SiLU by vmath's fast form, as the oneDNN path does). Rows go to the
 * session's pool.
 *
 * Prepared once per node: W [M, C, kh, kw] repacked as [C][kh][kw][M] (the
 * taps' output-channel vectors), from the session's allocator, tagged
 * with the node. Taken by nodes with C <= 4, M 16 or 32,
 * one group, dilation 1, no residual Z, channels-last output, on CPUs
 * with AVX-512F; the others go on to oneDNN.
 */
#include "ops/common/activation.h"
#include "ops/nn/conv/conv_nhwc.h"
#include "ops/common/vmath.h"

#include "base/pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "ops/common/cpu/act512.h"
#define ST_X86 1
#endif

#ifdef ST_X86

#define ST512 __attribute__((target("avx512f")))

typedef struct st_job {
  const keel_nhwc_geom *g;
  const float *x, *w, *b;       /* X, W as [C][kh][kw][M], B or NULL       */
  float *y;
  keel_act act;
  bool act_inline;              /* applied at the stores                   */
} st_job;

/* P pixels from ox on of output row oy, V vectors of output channels:
 * P x V accumulators. EDGE (a constant): taps whose input column lies in
 * the padding are skipped per pixel (else every window lies inside the
 * row). X is read through strides: between channels, rows and columns
 * (NCHW or NHWC alike). */
#define DEF_ST_BLOCK(P, V, EDGE)                                                                 \
  ST512 static void st_block_##P##_##V##_##EDGE(const st_job *j, const float *x, int64_t oy,    \
                                                int64_t ox, float *y) {                          \
    const keel_nhwc_geom *g = j->g;                                                              \
    const keel_win *w = &g->w;                                                                   \
    int64_t H = w->in[0], W = w->in[1], M = g->m, KH = w->k[0], KW = w->k[1], sw = w->s[1];      \
    int64_t cs = g->in_nchw ? 1 : g->c, rs = W * cs, chs = g->in_nchw ? H * W : 1, ps = sw * cs; \
    int64_t iy0 = oy * w->s[0] - w->pb[0], ix0 = ox * sw - w->pb[1];                             \
    int64_t ky0 = KEEL_MAX(0, -iy0), ky1 = KEEL_MIN(KH, H - iy0);                                 \
    __m512 acc[P][V];                                                                            \
    _Pragma("GCC unroll 8") for (int p = 0; p < (P); p++)                                        \
      _Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                                      \
        acc[p][v] = j->b ? _mm512_loadu_ps(j->b + 16 * v) : _mm512_setzero_ps();                 \
    for (int64_t c = 0; c < g->c; c++)                                                           \
      for (int64_t ky = ky0; ky < ky1; ky++) {                                                   \
        const float *xr = x + c * chs + (iy0 + ky) * rs;                                         \
        const float *wr = j->w + (c * KH + ky) * KW * M;                                         \
        for (int64_t kx = 0; kx < KW; kx++) {                                                    \
          __m512 wv[V];                                                                          \
          _Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                                  \
            wv[v] = _mm512_loadu_ps(wr + kx * M + 16 * v);                                       \
          const float *xp = xr + (ix0 + kx) * cs;                                                \
          _Pragma("GCC unroll 8") for (int p = 0; p < (P); p++) {                                \
            if ((EDGE) && (ix0 + kx + p * sw < 0 || ix0 + kx + p * sw >= W)) continue;           \
            __m512 xv = _mm512_set1_ps(xp[p * ps]);                                              \
            _Pragma("GCC unroll 4") for (int v = 0; v < (V); v++)                                \
              acc[p][v] = _mm512_fmadd_ps(xv, wv[v], acc[p][v]);                                 \
          }                                                                                      \
        }                                                                                        \
      }                                                                                          \
    _Pragma("GCC unroll 8") for (int p = 0; p < (P); p++)                                        \
      _Pragma("GCC unroll 4") for (int v = 0; v < (V); v++) {                                    \
        __m512 r = j->act_inline ? keel_act512(&j->act, acc[p][v]) : acc[p][v];                  \
        _mm512_storeu_ps(y + (ox + p) * M + 16 * v, r);                                          \
      }                                                                                          \
  }
DEF_ST_BLOCK(8, 1, 0)
DEF_ST_BLOCK(8, 1, 1)
DEF_ST_BLOCK(1, 1, 1)
DEF_ST_BLOCK(4, 2, 0)
DEF_ST_BLOCK(4, 2, 1)
DEF_ST_BLOCK(1, 2, 1)
#undef DEF_ST_BLOCK

typedef void (*st_block_fn)(const st_job *, const float *, int64_t, int64_t, float *);

/* Output row oy of image n: blocks of P pixels (inside ones unchecked),
 * the pixels left one at a time. */
static void st_row(const st_job *j, int64_t n, int64_t oy) {
  static const st_block_fn in[2] = {st_block_8_1_0, st_block_4_2_0};
  static const st_block_fn edge[2] = {st_block_8_1_1, st_block_4_2_1};
  static const st_block_fn one[2] = {st_block_1_1_1, st_block_1_2_1};
  static const int pix[2] = {8, 4};
  const keel_nhwc_geom *g = j->g;
  const keel_win *w = &g->w;
  int64_t OH = w->out[0], OW = w->out[1], M = g->m, sw = w->s[1], pl = w->pb[1];
  int v = (int)(M / 16) - 1, P = pix[v];
  const float *x = j->x + n * g->c * w->in[0] * w->in[1];
  float *y = j->y + (n * OH + oy) * OW * M;
  int64_t ox = 0;
  for (; ox + P <= OW; ox += P) {
    bool inside = ox * sw - pl >= 0 && (ox + P - 1) * sw - pl + w->k[1] <= w->in[1];
    (inside ? in : edge)[v](j, x, oy, ox, y);
  }
  for (; ox < OW; ox++) one[v](j, x, oy, ox, y);
  if (j->act_inline) return;
  if (j->act.kind == KEEL_ACT_SILU) keel_vm_silu_fast(y, OW * M);
  else keel_act_apply_f32(&j->act, y, OW * M);
}

static keel_status st_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
  const st_job *j = ctx;
  int64_t OH = j->g->w.out[0];
  (void)worker;
  for (int64_t r = r0; r < r1; r++) st_row(j, r / OH, r % OH);
  return KEEL_OK;
}

static keel_status st_run(keel_kctx *k) {
  keel_nhwc_io io;
  KEEL_TRY(keel_nhwc_in(k, &io));
  const keel_nhwc_geom *g = &io.g;
  if (io.z || g->group != 1 || g->out_nchw || g->w.d[0] != 1 || g->w.d[1] != 1)
    return keel_err(KEEL_ERR_INTERNAL, "the stem kernel got a convolution it did not bind");
  KEEL_TRY(keel_nhwc_out(k, &io, false));
  if (keel_tensor_numel(io.y) == 0) return KEEL_OK;
  st_job j = {g, io.x->data, k->prep, io.b ? io.b->data : NULL, io.c, {0}, false};
  KEEL_TRY(keel_act_of(k->node, &j.act));
  j.act_inline = keel_act512_inline(j.act.kind);
  /* a task gets at least ~64K multiply-adds */
  int64_t row = KEEL_MAX(1, g->w.out[1] * g->m * g->c * g->w.k[0] * g->w.k[1]);
  return keel_pool_for(k->pool, g->n * g->w.out[0], KEEL_MAX(1, 65536 / row), st_rows, &j);
}

/* ========================================================== binding */

/* W [M, C, kh, kw] constant float with C <= 4, M = 16 or 32 (ResNet-50's
 * 64-channel stem measured faster on oneDNN's kernel), one
 * group, no Z, channels-last output, dilation 1, window attributes that
 * read; an AVX-512F CPU. */
static bool st_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !wt || wt->dtype != KEEL_FLOAT || wt->rank != 4 ||
      wt->shape[1] < 1 || wt->shape[1] > 4 || wt->shape[0] % 16 || wt->shape[0] < 16 ||
      wt->shape[0] > 32 || keel_tensor_numel(wt) == 0)
    return false;
  const keel_attr *ga = keel_node_attr(n, "group");
  if ((ga && ga->i != 1) || (n->n_in > 3 && n->in_names[3][0]) ||
      keel_nhwc_attr_on(n, "keel.out_nchw"))
    return false;
  keel_win w;
  if (!keel_nhwc_node_win(n, wt->shape[2], wt->shape[3], &w)) return false;
  return w.d[0] == 1 && w.d[1] == 1;
}

/* W as [C][kh][kw][M]. */
static keel_status st_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *wt = p->consts[1];
  return keel_nhwc_prep_taps(p, wt->shape[0], wt->shape[1] * wt->shape[2] * wt->shape[3],
                             wt->shape[0], state);
}

const keel_impl keel_conv_nhwc_stem = {"stem", st_supports, st_prepare, keel_prep_block_release,
                                       st_run,
                                       "1-4 input channels, 16 or 32 output channels, one group, "
                                       "no residual, AVX-512"};

#else /* not x86: never bound */

const keel_impl keel_conv_nhwc_stem = {"stem", keel_prep_never, NULL, NULL, NULL};

#endif
