/* conv_stream.c: the streamed convolution kernel (conv_stream.h). */
#include "ops/nn/conv/cpu/conv_stream.h"

#include <string.h>

#include "base/pool.h"
#include "ops/common/cpu/tile512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "ops/common/cpu/act512.h"
#define CS_X86 1
#endif

#define CS_PT KEEL_TILE512_PX  /* pixels per tile at most                 */
#define CS_CC 256               /* channels per chunk of W                 */
#define CS_MIN_W ((int64_t)1 << 20) /* bytes of W from which it is taken   */
#define CS_MAX_PX 64            /* output pixels up to which it is taken   */
#define CS_MAX_PX_S2 256        /* ... for a 1x1 window of stride 2 or more */
#define CS_SPAN_TILES 128       /* tiles whose sums a worker holds at once (a
                                   later shape's larger map goes in spans) */

keel_status keel_stream_pack(keel_heap *heap, keel_owner owner, _Atomic uint64_t *counter,
                             const float *w, int64_t m, int64_t c, int64_t kh, int64_t kw,
                             keel_stream_w *out) {
  int64_t taps = kh * kw, nb = (m + 63) / 64, k = taps * c;
  *out = (keel_stream_w){m, c, kh, kw, nb, NULL};
  void *p = NULL;
  KEEL_TRY(keel_prep_alloc_counted(heap, owner, counter, sizeof(float) * (size_t)(nb * k * 64), &p));
  out->w = p;
  for (int64_t b = 0; b < nb; b++)
    for (int64_t t = 0; t < taps; t++)
      for (int64_t ci = 0; ci < c; ci++) {
        float *d = out->w + ((b * taps + t) * c + ci) * 64;
        for (int64_t l = 0; l < 64; l++) {
          int64_t mo = b * 64 + l;
          d[l] = mo < m ? w[(mo * c + ci) * taps + t] : 0.0f;
        }
      }
  return KEEL_OK;
}

void keel_stream_free(keel_stream_w *p, keel_heap *heap, _Atomic uint64_t *counter) {
  keel_prep_free_counted(p->w, heap, counter);
  p->w = NULL;
}

#ifdef CS_X86

#define CS512 __attribute__((target("avx512f")))

bool keel_stream_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || g->group != 1 || g->in_nchw || g->out_nchw)
    return false;
  const keel_win *w = &g->w;
  int64_t px = g->n * w->out[0] * w->out[1];
  bool strided_1x1 = kh == 1 && kw == 1 && (w->s[0] > 1 || w->s[1] > 1);
  return g->m * g->c * kh * kw * (int64_t)sizeof(float) >= CS_MIN_W && px >= 1 &&
         px <= (strided_1x1 ? CS_MAX_PX_S2 : CS_MAX_PX);
}

typedef struct cs_job {
  const keel_stream_w *p;
  const keel_nhwc_args *a;
  int64_t P, rows, tpr;        /* pixels; tiled rows and tiles per row     */
  bool flat;                   /* 1x1 stride 1, no pads: pixels in a line  */
  int ntasks;
  float *scratch;              /* per worker: span_px rows of 64 sums      */
  int64_t span_px;             /* pixels of the largest span of tiles      */
  float *bias;                 /* nb x 64: B, zeros past M (or none)       */
  bool act_inline;
} cs_job;

/* Tile i: its first pixel, its size, and its output row (image n, row oh). */
static void tile_of(const cs_job *j, int64_t i, int64_t *p0, int *pt, int64_t *n, int64_t *oh) {
  const keel_win *w = &j->a->g->w;
  if (j->flat) {
    int64_t nt = j->rows * j->tpr;
    *p0 = j->P * i / nt;
    *pt = (int)(j->P * (i + 1) / nt - *p0);
    *n = *oh = 0;
    return;
  }
  int64_t r = i / j->tpr, q = i % j->tpr, ow = w->out[1];
  *p0 = r * ow + ow * q / j->tpr;
  *pt = (int)(r * ow + ow * (q + 1) / j->tpr - *p0);
  *n = r / w->out[0], *oh = r % w->out[0];
}

/* The input row of tap row kh for output row oh, or -1 in the padding. */
static int64_t in_row(const keel_win *w, int64_t oh, int64_t kh) {
  int64_t ih = oh * w->s[0] + kh * w->d[0] - w->pb[0];
  return ih >= 0 && ih < w->in[0] ? ih : -1;
}

/* Stores block b's sums of pixels [p0, p1) (rows of 64) plus Z, through
 * the activation, into Y's channels of the block, the lanes past M masked. */
CS512 static void cs_store(const cs_job *j, const float *acc, int64_t b, int64_t p0, int64_t p1) {
  const keel_nhwc_args *a = j->a;
  int64_t M = j->p->m, m0 = b * 64;
  __mmask16 mk[4];
  for (int v = 0; v < 4; v++) {
    int64_t left = M - m0 - 16 * v;
    mk[v] = (__mmask16)(left >= 16 ? 0xFFFF : left <= 0 ? 0 : (1u << left) - 1);
  }
  const float *z = a->z_in_y ? a->y : a->z;
  for (int64_t p = p0; p < p1; p++) {
    float *y = a->y + p * M + m0;
    const float *zr = z ? z + p * M + m0 : NULL;
    for (int v = 0; v < 4 && mk[v]; v++) {
      __m512 r = _mm512_loadu_ps(acc + (p - p0) * 64 + 16 * v);
      if (zr) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mk[v], zr + 16 * v));
      if (j->act_inline) r = keel_act512(&a->act, r);
      _mm512_mask_storeu_ps(y + 16 * v, mk[v], r);
    }
  }
}

/* Blocks [b0, b1) of output channels of task q, per span of tiles (all
 * of them but on a map far larger than the kernel is chosen for). Per
 * block: the sums start as B; each chunk (tap, channels) of W, in the
 * order they lie, adds its products to every tile's pixels whose window
 * reads it (none of the padding's: the pixels of a tile that a tap reads
 * are an interval), the next chunk prefetched meanwhile; then the sums go
 * to Y. */
static keel_status cs_task(void *ctx, int64_t q0, int64_t q1, int worker) {
  const cs_job *j = ctx;
  const keel_stream_w *p = j->p;
  const keel_nhwc_args *a = j->a;
  const keel_win *w = &a->g->w;
  int64_t C = p->c, taps = p->kh * p->kw, nch = (C + CS_CC - 1) / CS_CC;
  int64_t ntile = j->rows * j->tpr, H = w->in[0], W = w->in[1];
  float *acc = j->scratch + (size_t)worker * (size_t)(j->span_px * 64);
  const float *wend = p->w + p->nb * taps * C * 64;
  for (int64_t q = q0; q < q1; q++)
    for (int64_t s0 = 0; s0 < ntile; s0 += CS_SPAN_TILES) {
      int64_t s1 = KEEL_MIN(ntile, s0 + CS_SPAN_TILES), n, oh, P0, P1;
      int pt;
      tile_of(j, s0, &P0, &pt, &n, &oh);
      tile_of(j, s1 - 1, &P1, &pt, &n, &oh);
      P1 += pt;
      for (int64_t b = p->nb * q / j->ntasks; b < p->nb * (q + 1) / j->ntasks; b++) {
        for (int64_t px = 0; px < P1 - P0; px++)
          memcpy(acc + px * 64, j->bias + b * 64, 64 * sizeof(float));
        const float *wc = p->w + b * taps * C * 64;
        for (int64_t t = 0; t < taps; t++) {
          int64_t kh = t / p->kw, kw = t % p->kw;
          for (int64_t ch = 0; ch < nch; ch++) {
            int64_t c0 = ch * CS_CC, cc = KEEL_MIN(CS_CC, C - c0);
            const float *next = wc + cc * 64;
            int64_t lines = next < wend ? KEEL_MIN(CS_CC, C - (c0 + cc) % C) * 4 : 0;
            int64_t per = (lines + (s1 - s0) - 1) / (s1 - s0);
            for (int64_t i = s0; i < s1; i++) {
              int64_t p0;
              int k0 = 0, k1 = 0;
              tile_of(j, i, &p0, &pt, &n, &oh);
              keel_tile512 ti = {.w = wc, .cc = cc, .rs = 64};
              ti.pf = (const char *)next + KEEL_MIN((i - s0) * per, lines) * 64;
              ti.npf = KEEL_MAX(0, KEEL_MIN(per, lines - (i - s0) * per));
              int64_t ih = j->flat ? 0 : in_row(w, oh, kh);
              for (int k = 0; k < pt && ih >= 0; k++) {
                const float *src = NULL;
                if (j->flat) {
                  src = a->x + (p0 + k) * C;
                } else {
                  int64_t iw = ((p0 + k) % w->out[1]) * w->s[1] + kw * w->d[1] - w->pb[1];
                  if (iw >= 0 && iw < W) src = a->x + ((n * H + ih) * W + iw) * C;
                }
                if (!src) continue;
                if (k1 == 0) k0 = k;
                ti.x[k - k0] = src + c0;
                k1 = k + 1;
              }
              if (k1 == 0) { /* the tap reads only padding here */
                for (int64_t l = 0; l < ti.npf; l++) _mm_prefetch(ti.pf + l * 64, _MM_HINT_T1);
                continue;
              }
              ti.acc = acc + (p0 + k0 - P0) * 64;
              keel_tile512_run(&ti, k1 - k0);
            }
            wc = next;
          }
        }
        cs_store(j, acc, b, P0, P1);
      }
    }
  return KEEL_OK;
}

keel_status keel_stream_run(keel_kctx *k, const keel_stream_w *p, const keel_nhwc_args *a) {
  const keel_nhwc_geom *g = a->g;
  const keel_win *w = &g->w;
  if (g->group != 1 || g->in_nchw || g->out_nchw || g->c != p->c || g->m != p->m ||
      w->k[0] != p->kh || w->k[1] != p->kw)
    return keel_err(KEEL_ERR_INTERNAL, "the streamed kernel got a convolution it did not pack");
  cs_job j = {.p = p, .a = a, .P = g->n * w->out[0] * w->out[1]};
  if (j.P == 0) return KEEL_OK;
  j.flat = keel_win_is_pointwise(w);
  if (j.flat) { /* pixels in a line: tiles of at most CS_PT */
    j.rows = 1, j.tpr = (j.P + CS_PT - 1) / CS_PT;
  } else {
    j.rows = g->n * w->out[0], j.tpr = (w->out[1] + CS_PT - 1) / CS_PT;
  }
  j.a = a;
  j.act_inline = keel_act512_inline(a->act.kind);
  int threads = keel_pool_threads(k->pool);
  j.ntasks = (int)KEEL_MIN(p->nb, keel_pool_splits(k->pool));
  /* a span: CS_SPAN_TILES tiles of at most CS_PT pixels */
  j.span_px = KEEL_MIN(j.P, (int64_t)CS_SPAN_TILES * CS_PT);
  KEEL_TRY(keel_k_scratch_n(k, ((int64_t)KEEL_MAX(1, threads) * j.span_px + p->nb) * 64,
                            sizeof(float), (void **)&j.scratch));
  j.bias = j.scratch + (int64_t)KEEL_MAX(1, threads) * j.span_px * 64;
  for (int64_t l = 0; l < p->nb * 64; l++) j.bias[l] = a->b && l < p->m ? a->b[l] : 0.0f;
  KEEL_TRY(keel_pool_for(k->pool, j.ntasks, 1, cs_task, &j));
  if (!j.act_inline) keel_act_apply_fast_f32(&a->act, a->y, j.P * g->m);
  return KEEL_OK;
}

#else /* not x86: never taken */

bool keel_stream_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  (void)g, (void)kh, (void)kw;
  return false;
}

keel_status keel_stream_run(keel_kctx *k, const keel_stream_w *p, const keel_nhwc_args *a) {
  (void)k, (void)p, (void)a;
  return keel_err(KEEL_ERR_INTERNAL, "the streamed kernel is not built for this CPU");
}

#endif
