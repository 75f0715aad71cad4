/* conv_dw.c: NhwcConv (ops/nn/conv/conv_nhwc.h) for depthwise convolutions, keel's
 * own AVX-512 kernel, the implementation "depthwise".
 *
 * Why keel's own: on MobileNetV3's 5x5 depthwise layers oneDNN's kernel
 * (brdgmm_dw) took 1.3-1.6x this one's time (DW_MAX_C below).
 * Channels-last puts 16 channels of one pixel in a vector, and a
 * depthwise conv never mixes channels: a block of 16 channels is its own
 * problem. For one output row and one block the 25 weight vectors are
 * loaded once, and a tile of 4 output pixels keeps its sums in registers
 * while each input column under the tile is loaded once per kernel row and
 * multiplied into every output of the tile whose window covers it. Pixels
 * whose windows leave the image along W take the same path one at a time
 * with the columns checked; rows whose windows leave it skip those kernel
 * rows. Bias starts the sums; the activation is applied at the stores
 * (ReLU, Clip, HardSwish, HardSigmoid-times-x; the others on the finished
 * row). Rows (image, output row) go to the session's pool.
 *
 * Prepared once per node: W [C, 1, 5, 5] repacked as [5][5][C16] (C16:
 * C rounded up to 16, zero lanes), from the session's allocator, tagged
 * with the node. Taken by nodes with group = C = M <= DW_MAX_C, a 5x5
 * window of stride 1 or 2, dilation 1, no residual, channels-last in and
 * out, on CPUs with AVX-512F.
 */
#include "ops/common/activation.h"
#include "ops/nn/conv/conv_nhwc.h"

#include "base/pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "ops/common/cpu/act512.h"
#define DW_X86 1
#endif

/* Bound only where it measured faster than oneDNN's kernel: 5x5 windows
 * of at most DW_MAX_C channels (MobileNetV3's 72- and 120-channel layers at
 * 56x56 and 28x28: 0.043-0.047 -> 0.037-0.040 ms and 0.060-0.070 ->
 * 0.042-0.044 ms, one thread). On its 3x3 layers (64 and 72 channels at
 * 112x112 and 56x56) it took up to twice oneDNN's time, and on 7x7 maps
 * (960 channels) its checked edge path dominates; those stay on oneDNN.
 */
#define DW_MAX_C 128

#ifdef DW_X86

#define DW512 __attribute__((target("avx512f")))

typedef struct dw_job {
  const keel_nhwc_geom *g;
  const float *x, *w, *b;       /* X, W as [K][K][C16], B or NULL          */
  float *y;
  int64_t c16;
  keel_act act;
  bool act_inline;
} dw_job;

/* Output row oy of image n, channels [c0, c0 + 16) (lanes past C masked
 * by m): tiles of PX pixels inside the image along W, the rest one pixel
 * at a time. K and S are constants at every call. */
#define DEF_DW_ROW(K, S, PX)                                                                       \
  DW512 static void dw_row_##K##_##S(const dw_job *j, int64_t n, int64_t oy, int64_t c0,          \
                                     __mmask16 m) {                                               \
    const keel_nhwc_geom *g = j->g;                                                               \
    const keel_win *w = &g->w;                                                                    \
    int64_t H = w->in[0], W = w->in[1], OW = w->out[1], C = g->c, pl = w->pb[1];                  \
    int64_t iy0 = oy * (S) - w->pb[0];                                                            \
    int ky0 = (int)KEEL_MAX(0, -iy0), ky1 = (int)KEEL_MIN((K), H - iy0);                          \
    __m512 wv[K][K];                                                                              \
    _Pragma("GCC unroll 5") for (int a = 0; a < (K); a++)                                         \
      _Pragma("GCC unroll 5") for (int b = 0; b < (K); b++)                                       \
        wv[a][b] = _mm512_loadu_ps(j->w + (a * (K) + b) * j->c16 + c0);                            \
    __m512 bias = j->b ? _mm512_maskz_loadu_ps(m, j->b + c0) : _mm512_setzero_ps();               \
    const float *xn = j->x + n * H * W * C + c0;                                                  \
    float *yr = j->y + ((n * w->out[0] + oy) * OW) * C + c0;                                      \
    int64_t ox = 0; /* windows that start left of the image, checked */                         \
    for (; ox < OW && ox * (S) - pl < 0; ox++)                                                    \
      dw_one_##K##_##S(j, xn, yr, ox, iy0, ky0, ky1, wv, bias, m);                               \
    /* whole tiles: every column of every window inside the image */                             \
    for (; ox + (PX) <= OW && (ox + (PX) - 1) * (S) - pl + (K) <= W; ox += (PX)) {                 \
      __m512 acc[PX];                                                                             \
      _Pragma("GCC unroll 8") for (int p = 0; p < (PX); p++) acc[p] = bias;                       \
      int64_t ix0 = ox * (S) - pl;                                                                \
      for (int a = ky0; a < ky1; a++) {                                                           \
        const float *xr = xn + ((iy0 + a) * W + ix0) * C;                                         \
        _Pragma("GCC unroll 32") for (int t = 0; t < ((PX) - 1) * (S) + (K); t++) {               \
          __m512 xv = _mm512_maskz_loadu_ps(m, xr + t * C);                                       \
          _Pragma("GCC unroll 8") for (int p = 0; p < (PX); p++) {                                \
            int b = t - p * (S);                                                                  \
            if (b >= 0 && b < (K)) acc[p] = _mm512_fmadd_ps(xv, wv[a][b], acc[p]);                \
          }                                                                                       \
        }                                                                                         \
      }                                                                                           \
      _Pragma("GCC unroll 8") for (int p = 0; p < (PX); p++) {                                    \
        __m512 r = j->act_inline ? keel_act512(&j->act, acc[p]) : acc[p];                         \
        _mm512_mask_storeu_ps(yr + (ox + p) * C, m, r);                                           \
      }                                                                                           \
    }                                                                                             \
    for (; ox < OW; ox++) dw_one_##K##_##S(j, xn, yr, ox, iy0, ky0, ky1, wv, bias, m);            \
  }

/* One output pixel, columns checked. */
#define DEF_DW_ONE(K, S)                                                                           \
  DW512 static inline __attribute__((always_inline)) void dw_one_##K##_##S(                      \
      const dw_job *j, const float *xn, float *yr, int64_t ox, int64_t iy0, int ky0, int ky1,     \
      __m512 wv[K][K], __m512 bias, __mmask16 m) {                                                \
    const keel_win *w = &j->g->w;                                                                 \
    int64_t W = w->in[1], C = j->g->c, ix0 = ox * (S) - w->pb[1];                                 \
    __m512 acc = bias;                                                                            \
    for (int a = ky0; a < ky1; a++)                                                               \
      _Pragma("GCC unroll 5") for (int b = 0; b < (K); b++) {                                     \
        int64_t ix = ix0 + b;                                                                     \
        if (ix < 0 || ix >= W) continue;                                                          \
        __m512 xv = _mm512_maskz_loadu_ps(m, xn + ((iy0 + a) * W + ix) * C);                      \
        acc = _mm512_fmadd_ps(xv, wv[a][b], acc);                                                 \
      }                                                                                           \
    __m512 r = j->act_inline ? keel_act512(&j->act, acc) : acc;                                   \
    _mm512_mask_storeu_ps(yr + ox * C, m, r);                                                     \
  }

DEF_DW_ONE(5, 1)
DEF_DW_ONE(5, 2)
DEF_DW_ROW(5, 1, 4)
DEF_DW_ROW(5, 2, 4)
#undef DEF_DW_ROW
#undef DEF_DW_ONE

typedef void (*dw_row_fn)(const dw_job *, int64_t, int64_t, int64_t, __mmask16);

static keel_status dw_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
  const dw_job *j = ctx;
  const keel_nhwc_geom *g = j->g;
  int64_t OH = g->w.out[0], OW = g->w.out[1], C = g->c;
  dw_row_fn f = g->w.s[0] == 2 ? dw_row_5_2 : dw_row_5_1;
  (void)worker;
  for (int64_t r = r0; r < r1; r++) {
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
      int64_t left = C - c0;
      __mmask16 m = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
      f(j, r / OH, r % OH, c0, m);
    }
    if (!j->act_inline)
      keel_act_apply_fast_f32(&j->act, j->y + r * OW * C, OW * C);
  }
  return KEEL_OK;
}

static keel_status dw_run(keel_kctx *k) {
  keel_nhwc_io io;
  KEEL_TRY(keel_nhwc_in(k, &io));
  const keel_nhwc_geom *g = &io.g;
  const keel_win *w = &g->w;
  if (io.z || g->group != g->c || g->m != g->c || g->in_nchw || g->out_nchw || w->k[0] != 5 ||
      w->k[1] != 5 || w->s[0] != w->s[1] || (w->s[0] != 1 && w->s[0] != 2) || w->d[0] != 1 ||
      w->d[1] != 1)
    return keel_err(KEEL_ERR_INTERNAL, "the depthwise kernel got a convolution it did not bind");
  KEEL_TRY(keel_nhwc_out(k, &io, false));
  if (keel_tensor_numel(io.y) == 0) return KEEL_OK;
  dw_job j = {g, io.x->data, k->prep, io.b ? io.b->data : NULL, io.c, (g->c + 15) / 16 * 16,
              {0}, false};
  KEEL_TRY(keel_act_of(k->node, &j.act));
  j.act_inline = keel_act512_inline(j.act.kind);
  /* a task gets at least ~32K multiply-adds */
  int64_t row = KEEL_MAX(1, w->out[1] * g->c * w->k[0] * w->k[1]);
  return keel_pool_for(k->pool, g->n * w->out[0], KEEL_MAX(1, 32768 / row), dw_rows, &j);
}

/* ========================================================== binding */

/* W [C, 1, 5, 5] constant float, C <= DW_MAX_C, group C, stride 1 or 2 (the
 * same both ways), dilation 1, no Z, channels-last in and out; an
 * AVX-512F CPU. */
static bool dw_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !wt || wt->dtype != KEEL_FLOAT || wt->rank != 4 ||
      wt->shape[0] < 1 || wt->shape[0] > DW_MAX_C || wt->shape[1] != 1 || wt->shape[2] != 5 ||
      wt->shape[3] != 5)
    return false;
  const keel_attr *ga = keel_node_attr(n, "group");
  if (!ga || ga->i != wt->shape[0] || (n->n_in > 3 && n->in_names[3][0]) ||
      keel_nhwc_attr_on(n, "keel.in_nchw") || keel_nhwc_attr_on(n, "keel.out_nchw"))
    return false;
  keel_win w;
  if (!keel_nhwc_node_win(n, wt->shape[2], wt->shape[3], &w)) return false;
  return w.d[0] == 1 && w.d[1] == 1 && w.s[0] == w.s[1] && (w.s[0] == 1 || w.s[0] == 2);
}

/* W as [K][K][C16]. */
static keel_status dw_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *wt = p->consts[1];
  int64_t C = wt->shape[0], K = wt->shape[2];
  return keel_nhwc_prep_taps(p, C, K * K, (C + 15) / 16 * 16, state);
}

const keel_impl keel_conv_nhwc_dw = {"depthwise", dw_supports, dw_prepare, keel_prep_block_release,
                                     dw_run,
                                     "depthwise 5x5, stride 1 or 2, no residual, channels-last "
                                     "both sides, AVX-512"};

#else /* not x86: never bound */

const keel_impl keel_conv_nhwc_dw = {"depthwise", keel_prep_never, NULL, NULL, NULL};

#endif
