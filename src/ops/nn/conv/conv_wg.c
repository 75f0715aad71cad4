/* conv_wg.c: keel's Winograd F(2x2, 3x3) kernel (conv_wg.h). */
#include "ops/nn/conv/conv_wg.h"

#include <string.h>

#include "base/pool.h"
#include "ops/common/tile512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "ops/common/act512.h"
#define WG_X86 1
#endif

#define WG_GROUP 256            /* tiles transformed and multiplied at once, */
#define WG_GROUP_BYTES ((int64_t)4 << 20) /* ... and at most this much V and M */

keel_status keel_wg_pack(keel_heap *heap, keel_owner owner, _Atomic uint64_t *counter,
                         const float *w, int64_t m, int64_t c, keel_wg_w *out) {
  *out = (keel_wg_w){m, c, NULL};
  void *p = NULL;
  KEEL_TRY(keel_prep_alloc_counted(heap, owner, counter, sizeof(float) * (size_t)(m * c * 9), &p));
  out->w = p;
  for (int64_t ci = 0; ci < c; ci++) /* [C][9][M] */
    for (int64_t t = 0; t < 9; t++)
      for (int64_t mo = 0; mo < m; mo++) out->w[(ci * 9 + t) * m + mo] = w[(mo * c + ci) * 9 + t];
  return KEEL_OK;
}

void keel_wg_free(keel_wg_w *p, keel_heap *heap, _Atomic uint64_t *counter) {
  keel_prep_free_counted(p->w, heap, counter);
  p->w = NULL;
}

#ifdef WG_X86

#define WG512 __attribute__((target("avx512f")))

/* What the kernel computes, whatever the map's size. */
static bool wg_can(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  const keel_win *w = &g->w;
  if (kh != 3 || kw != 3 || g->group != 1 || g->in_nchw || g->out_nchw || g->c % 16 ||
      g->m % 64 || g->c < 64 || g->m < 64)
    return false;
  for (int i = 0; i < 2; i++)
    if (w->k[i] != 3 || w->s[i] != 1 || w->d[i] != 1 || w->pb[i] < 0 || w->pb[i] > 2 ||
        w->pe[i] < 0 || w->pe[i] > 2)
      return false;
  return true;
}

bool keel_wg_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && wg_can(g, kh, kw) && g->c >= 128 &&
         g->w.out[0] * g->w.out[1] >= 14 * 14;
}

typedef struct wg_job {
  const keel_wg_w *p;
  const keel_nhwc_args *a;
  int64_t C, M, nb, th, tw, T;  /* tiles per image: th x tw = T           */
  float *U;                     /* per worker: [8][C][64], half of U's ξ for
                                   a block of 64 outputs                   */
  float *V, *Mx;                /* [16][tn][C], [16][tn][M]: this group's  */
  int64_t t0, tn;               /* the group: tiles [t0, t0 + tn) of all images */
  int ntask;
  bool act_inline;
} wg_job;

/* One side of U = G g Gᵀ: the 4 rows G (a, b, d) of 3, for 16 output
 * channels at a time. G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]. */
WG512 static void g_rows(__m512 a, __m512 b, __m512 d, __m512 o[4]) {
  const __m512 h = _mm512_set1_ps(0.5f);
  o[0] = a;
  o[1] = _mm512_mul_ps(h, _mm512_add_ps(_mm512_add_ps(a, b), d));
  o[2] = _mm512_mul_ps(h, _mm512_add_ps(_mm512_sub_ps(a, b), d));
  o[3] = d;
}

/* U[ξ] for ξ = 4 i + k, i in [2 h, 2 h + 2), of output block b, into a
 * worker's panel [8][C][64] (in L2 while its products run). */
WG512 static void wg_weights(const wg_job *j, int64_t b, int h, float *U) {
  int64_t C = j->C, M = j->M;
  for (int64_t c = 0; c < C; c++)
    for (int64_t l = 0; l < 64; l += 16) {
      const float *g = j->p->w + c * 9 * M + b * 64 + l;
      __m512 gg[3][4]; /* G g, per kernel column: its 4 rows */
      for (int k = 0; k < 3; k++)
        g_rows(_mm512_loadu_ps(g + k * M), _mm512_loadu_ps(g + (3 + k) * M),
               _mm512_loadu_ps(g + (6 + k) * M), gg[k]);
      for (int i = 2 * h; i < 2 * h + 2; i++) {
        __m512 u[4];
        g_rows(gg[0][i], gg[1][i], gg[2][i], u);
        for (int k = 0; k < 4; k++)
          _mm512_storeu_ps(U + (((i - 2 * h) * 4 + k) * C + c) * 64 + l, u[k]);
      }
    }
}

/* Tile g of all images: its image and first output row and column. */
static void tile_at(const wg_job *j, int64_t g, int64_t *n, int64_t *oy, int64_t *ox) {
  *n = g / j->T;
  *oy = 2 * ((g % j->T) / j->tw), *ox = 2 * ((g % j->T) % j->tw);
}

/* V = Bᵀ d B for the group's tiles [i0, i1), 16 channels at a time.
 * Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
WG512 static keel_status wg_input(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  const keel_win *w = &j->a->g->w;
  int64_t C = j->C, H = w->in[0], W = w->in[1];
  const __m512 z = _mm512_setzero_ps();
  (void)worker;
  for (int64_t i = j->tn * q0 / j->ntask; i < j->tn * q1 / j->ntask; i++) {
    int64_t n, oy, ox;
    tile_at(j, j->t0 + i, &n, &oy, &ox);
    const float *x = j->a->x + n * H * W * C;
    for (int64_t c = 0; c < C; c += 16) {
      __m512 d[4][4], e[4][4];
      for (int r = 0; r < 4; r++)
        for (int s = 0; s < 4; s++) {
          int64_t iy = oy - w->pb[0] + r, ix = ox - w->pb[1] + s;
          d[r][s] = iy >= 0 && iy < H && ix >= 0 && ix < W
                        ? _mm512_loadu_ps(x + (iy * W + ix) * C + c)
                        : z;
        }
      for (int s = 0; s < 4; s++) {
        e[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
        e[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
        e[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
        e[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
      }
      for (int r = 0; r < 4; r++) {
        __m512 v[4] = {_mm512_sub_ps(e[r][0], e[r][2]), _mm512_add_ps(e[r][1], e[r][2]),
                       _mm512_sub_ps(e[r][2], e[r][1]), _mm512_sub_ps(e[r][1], e[r][3])};
        for (int s = 0; s < 4; s++)
          _mm512_storeu_ps(j->V + ((r * 4 + s) * j->tn + i) * C + c, v[s]);
      }
    }
  }
  return KEEL_OK;
}

/* The products V[ξ] U[ξ] of task q: output block q / 2, the half q % 2
 * of the 16 ξ (U made here: W's transform never leaves the worker's L2). */
static keel_status wg_products(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  int64_t C = j->C, M = j->M, nt = (j->tn + KEEL_TILE512_PX - 1) / KEEL_TILE512_PX;
  float *U = j->U + (int64_t)worker * 8 * C * 64;
  for (int64_t q = q0; q < q1; q++) {
    int64_t b = q / 2;
    int h = (int)(q % 2);
    wg_weights(j, b, h, U);
    for (int64_t xh = 0; xh < 8; xh++) {
      int64_t xi = 8 * h + xh;
      keel_tile512 t = {.w = U + xh * C * 64, .cc = C, .rs = M};
      for (int64_t i = 0; i < nt; i++) {
        int64_t r0 = j->tn * i / nt, r1 = j->tn * (i + 1) / nt;
        for (int64_t r = r0; r < r1; r++) t.x[r - r0] = j->V + (xi * j->tn + r) * C;
        t.acc = j->Mx + (xi * j->tn + r0) * M + b * 64;
        for (int64_t r = r0; r < r1; r++) memset(t.acc + (r - r0) * M, 0, 64 * sizeof(float));
        keel_tile512_run(&t, (int)(r1 - r0));
      }
    }
  }
  return KEEL_OK;
}

/* Y = Aᵀ m A + B (+ Z), through the activation, for the group's tiles
 * [i0, i1). Aᵀ = [1 1 1 0; 0 1 -1 -1]. */
WG512 static keel_status wg_output(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  const keel_nhwc_args *a = j->a;
  const keel_win *w = &a->g->w;
  int64_t M = j->M, OH = w->out[0], OW = w->out[1];
  const float *z = a->z_in_y ? a->y : a->z;
  (void)worker;
  for (int64_t i = j->tn * q0 / j->ntask; i < j->tn * q1 / j->ntask; i++) {
    int64_t n, oy, ox;
    tile_at(j, j->t0 + i, &n, &oy, &ox);
    for (int64_t m = 0; m < M; m += 16) {
      __m512 q[16], r[2][4];
      for (int k = 0; k < 16; k++) q[k] = _mm512_loadu_ps(j->Mx + (k * j->tn + i) * M + m);
      for (int s = 0; s < 4; s++) {
        r[0][s] = _mm512_add_ps(_mm512_add_ps(q[s], q[4 + s]), q[8 + s]);
        r[1][s] = _mm512_sub_ps(_mm512_sub_ps(q[4 + s], q[8 + s]), q[12 + s]);
      }
      __m512 bv = a->b ? _mm512_loadu_ps(a->b + m) : _mm512_setzero_ps();
      for (int u = 0; u < 2 && oy + u < OH; u++) {
        __m512 o[2] = {_mm512_add_ps(_mm512_add_ps(r[u][0], r[u][1]), r[u][2]),
                       _mm512_sub_ps(_mm512_sub_ps(r[u][1], r[u][2]), r[u][3])};
        for (int v = 0; v < 2 && ox + v < OW; v++) {
          int64_t at = ((n * OH + oy + u) * OW + ox + v) * M + m;
          __m512 y = _mm512_add_ps(o[v], bv);
          if (z) y = _mm512_add_ps(y, _mm512_loadu_ps(z + at));
          if (j->act_inline) y = keel_act512(&a->act, y);
          _mm512_storeu_ps(a->y + at, y);
        }
      }
    }
  }
  return KEEL_OK;
}

keel_status keel_wg_run(keel_kctx *k, const keel_wg_w *p, const keel_nhwc_args *a) {
  const keel_nhwc_geom *g = a->g;
  if (!wg_can(g, 3, 3) || g->c != p->c || g->m != p->m)
    return keel_err(KEEL_ERR_INTERNAL, "the Winograd kernel got a convolution it did not pack");
  wg_job j = {.p = p, .C = p->c, .M = p->m, .nb = p->m / 64};
  j.th = (g->w.out[0] + 1) / 2, j.tw = (g->w.out[1] + 1) / 2, j.T = j.th * j.tw;
  int64_t all = g->n * j.T;
  if (all == 0) return KEEL_OK;
  j.a = a;
  j.act_inline = keel_act512_inline(a->act.kind);
  int64_t group = KEEL_MIN(all, KEEL_MAX(KEEL_TILE512_PX, KEEL_MIN(WG_GROUP, WG_GROUP_BYTES /
                                          (16 * (j.C + j.M) * (int64_t)sizeof(float)))));
  float *s;
  int threads = KEEL_MAX(1, keel_pool_threads(k->pool)); /* U per worker */
  j.ntask = keel_pool_splits(k->pool);
  KEEL_TRY(keel_k_scratch_n(k, threads * 8 * j.C * 64 + 16 * group * (j.C + j.M), sizeof(float),
                            (void **)&s));
  j.U = s, j.V = s + threads * 8 * j.C * 64, j.Mx = j.V + 16 * group * j.C;
  for (j.t0 = 0; j.t0 < all; j.t0 += group) {
    j.tn = KEEL_MIN(group, all - j.t0);
    KEEL_TRY(keel_pool_for(k->pool, j.ntask, 1, wg_input, &j));
    KEEL_TRY(keel_pool_for(k->pool, 2 * j.nb, 1, wg_products, &j));
    KEEL_TRY(keel_pool_for(k->pool, j.ntask, 1, wg_output, &j));
  }
  if (!j.act_inline) keel_act_apply_fast_f32(&a->act, a->y, g->n * g->w.out[0] * g->w.out[1] * j.M);
  return KEEL_OK;
}

#else /* not x86: never taken */

bool keel_wg_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  (void)g, (void)kh, (void)kw;
  return false;
}

keel_status keel_wg_run(keel_kctx *k, const keel_wg_w *p, const keel_nhwc_args *a) {
  (void)k, (void)p, (void)a;
  return keel_err(KEEL_ERR_INTERNAL, "the Winograd kernel is not built for this CPU");
}

#endif
