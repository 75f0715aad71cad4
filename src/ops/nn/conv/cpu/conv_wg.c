/* conv_wg.c: keel's Winograd F(2x2, 3x3) kernel (conv_wg.h). */
#include "ops/nn/conv/cpu/conv_wg.h"

#include <string.h>

#include "base/pool.h"
#include "ops/common/conv_util.h"
#include "ops/common/cpu/tile512.h"
#include "ops/dnnl/dnnl_glue.h"
#include "ops/nn/conv/select.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "ops/common/cpu/act512.h"
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
#define WG256 __attribute__((target("avx2,fma")))

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

static bool wg_isa(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ||
         (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
}

bool keel_wg_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  return wg_isa() && wg_can(g, kh, kw) && g->c >= 128 && g->w.out[0] * g->w.out[1] >= 14 * 14;
}

bool keel_wg_takes(const keel_node *n, const keel_tensor *w) {
  if (!wg_isa() || !w || w->dtype != KEEL_FLOAT || w->rank != 4 || w->shape[2] != 3 ||
      w->shape[3] != 3)
    return false;
  const keel_attr *ga = keel_node_attr(n, "group");
  if ((ga && ga->i != 1) || keel_nhwc_attr_on(n, "keel.in_nchw") ||
      keel_nhwc_attr_on(n, "keel.out_nchw"))
    return false;
  keel_nhwc_geom g = {.n = 1, .c = w->shape[1], .m = w->shape[0], .group = 1};
  /* explicit pads as written; auto_pad's (resolved per run) are 1 on each
   * side of a 3x3 window at stride 1, or none for VALID */
  return keel_nhwc_node_win(n, 3, 3, &g.w) && wg_can(&g, 3, 3) && g.c >= 128;
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

/* Tile g of all images: its image and first output row and column. */
static void tile_at(const wg_job *j, int64_t g, int64_t *n, int64_t *oy, int64_t *ox) {
  *n = g / j->T;
  *oy = 2 * ((g % j->T) / j->tw), *ox = 2 * ((g % j->T) % j->tw);
}

/* The transforms, once per ISA (conv_wg_xf.h): _512 with AVX-512F (the
 * activation inline where act512.h computes it), _256 with AVX2 and FMA. */
#define WG_L 16
#define WG_SFX _512
#define WG_TARGET WG512
#define WG_ACT(act, y) ((wg_vec_512)keel_act512(act, (__m512)(y)))
#include "ops/nn/conv/cpu/conv_wg_xf.h"
#undef WG_ACT
#undef WG_TARGET
#undef WG_SFX
#undef WG_L

#define WG_L 8
#define WG_SFX _256
#define WG_TARGET WG256
#include "ops/nn/conv/cpu/conv_wg_xf.h"
#undef WG_TARGET
#undef WG_SFX
#undef WG_L

/* The products V[ξ] U[ξ] of task q: the half q / nb of the 16 ξ, output
 * block q % nb (U made here: W's transform never leaves the worker's L2).
 * A pool thread's home range of tasks (base/pool.c) is then mostly one
 * half: it reads half of V, not all of it from both cores (two threads
 * cut the other way, blocks in halves, made x_paddle_crnn's and
 * paddle_ocr_rec's convs 25% slower). */
static keel_status wg_products_512(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  int64_t C = j->C, M = j->M, nt = (j->tn + KEEL_TILE512_PX - 1) / KEEL_TILE512_PX;
  float *U = j->U + (int64_t)worker * 8 * C * 64;
  for (int64_t q = q0; q < q1; q++) {
    int64_t b = q % j->nb;
    int h = (int)(q / j->nb);
    wg_weights_512(j, b, h, U);
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

/* The same products without AVX-512: per ξ, one product of the group's
 * tiles [tn, C] by U[ξ]'s [C, 64] panel on keel's GEMM (oneDNN's sgemm or
 * OpenBLAS, on this worker alone). */
static keel_status wg_products_256(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  int64_t C = j->C, M = j->M;
  float *U = j->U + (int64_t)worker * 8 * C * 64;
  for (int64_t q = q0; q < q1; q++) {
    int64_t b = q % j->nb;
    int h = (int)(q / j->nb);
    wg_weights_256(j, b, h, U);
    for (int64_t xh = 0; xh < 8; xh++) {
      int64_t xi = 8 * h + xh;
      keel_gemm_f32(NULL, false, false, j->tn, 64, C, 1.0f, j->V + xi * j->tn * C, C,
                    U + xh * C * 64, 64, 0.0f, j->Mx + xi * j->tn * M + b * 64, M);
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
  bool avx512 = __builtin_cpu_supports("avx512f");
  j.act_inline = avx512 && keel_act512_inline(a->act.kind);
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
    KEEL_TRY(keel_pool_for(k->pool, j.ntask, 1, avx512 ? wg_input_512 : wg_input_256, &j));
    KEEL_TRY(keel_pool_for(k->pool, 2 * j.nb, 1, avx512 ? wg_products_512 : wg_products_256, &j));
    KEEL_TRY(keel_pool_for(k->pool, j.ntask, 1, avx512 ? wg_output_512 : wg_output_256, &j));
  }
  if (!j.act_inline) keel_act_apply_fast_f32(&a->act, a->y, g->n * g->w.out[0] * g->w.out[1] * j.M);
  return KEEL_OK;
}

#else /* not x86: never taken */

bool keel_wg_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw) {
  (void)g, (void)kh, (void)kw;
  return false;
}

bool keel_wg_takes(const keel_node *n, const keel_tensor *w) {
  (void)n, (void)w;
  return false;
}

keel_status keel_wg_run(keel_kctx *k, const keel_wg_w *p, const keel_nhwc_args *a) {
  (void)k, (void)p, (void)a;
  return keel_err(KEEL_ERR_INTERNAL, "the Winograd kernel is not built for this CPU");
}

#endif

/* ================================ the implementation bound at binding */

/* Where no oneDNN runs, NhwcConv's implementation list holds this one: the
 * node runs on the Winograd kernel from its binding (W packed then), for
 * every input size (the kernel computes any map; the layout pass made the
 * node channels-last only where the map is large enough for it to win:
 * ops/nn/conv/select.c). With oneDNN, its implementation takes such a
 * node and chooses this kernel on the first run instead (path 6). */
typedef struct wg_state {
  keel_wg_w w;
  _Atomic uint64_t *bytes;      /* the session's prepared bytes             */
  _Atomic uint64_t *count;      /* keel_stats.winograd_convs                */
} wg_state;

static keel_status wgi_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *w = p->consts[1];
  wg_state *s;
  KEEL_TRY(keel_prep_alloc(p, sizeof *s, (void **)&s));
  *s = (wg_state){{0}, p->bytes, &p->lib->winograd};
  keel_status st = keel_wg_pack(p->heap, p->owner, p->bytes, w->data, w->shape[0], w->shape[1], &s->w);
  if (st) {
    keel_prep_block_release(s, p->heap);
    return st;
  }
  atomic_fetch_add(s->count, 1);
  *state = s;
  return KEEL_OK;
}

static void wgi_release(void *state, keel_heap *heap) {
  wg_state *s = state;
  if (!s) return;
  keel_wg_free(&s->w, heap, s->bytes);
  atomic_fetch_sub(s->count, 1);
  keel_prep_block_release(s, heap);
}

static keel_status wgi_run(keel_kctx *k) {
  const wg_state *s = k->prep;
  keel_nhwc_io io;
  KEEL_TRY(keel_nhwc_in(k, &io));
  KEEL_TRY(keel_nhwc_out(k, &io, false));
  const keel_nhwc_geom *g = &io.g;
  if (g->n * g->w.out[0] * g->w.out[1] * g->m == 0) return keel_nhwc_finish(k, &io);
  keel_act act = KEEL_ACT_OFF;
  if (!io.bare) KEEL_TRY(keel_act_of(k->node, &act));
  keel_nhwc_args a = {g, io.x->data, io.b ? io.b->data : NULL, io.zc, io.z_in_y, io.c, act};
  KEEL_TRY(keel_wg_run(k, &s->w, &a));
  return keel_nhwc_finish(k, &io);
}

const keel_impl keel_conv_nhwc_wg = {"winograd", keel_conv_wg_at_binding, wgi_prepare, wgi_release,
                                     wgi_run,
                                     "no oneDNN: 3x3, stride 1, one group, 128+ channels by 16s, "
                                     "outputs by 64s, channels-last both sides, AVX2+FMA or "
                                     "AVX-512"};
