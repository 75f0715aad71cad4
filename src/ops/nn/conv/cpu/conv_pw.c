/* conv_pw.c: NhwcConv (ops/nn/conv/conv_nhwc.h) for 1x1 convolutions of few
 * input channels, keel's own AVX-512 kernel, the implementation
 * "pointwise".
 *
 * Why keel's own: a 1x1 conv with stride 1 and no pads on channels-last
 * tensors is the product Y[P, M] = X[P, C] W[M, C]ᵀ of every pixel by
 * W, and with C at most PW_MAX_C (a mobile net's expansion and
 * projection convs: 16 -> 64 at 112x112) oneDNN's kernel (brgconv_1x1)
 * reached 85 GFLOP/s on MobileNetV3's 16 -> 64 layer where ONNX Runtime's
 * took about half its time (`keel bench --flops`, the per-node trace).
 * With a residual Z it takes convs of up to PW_MAX_C_Z input channels:
 * oneDNN's sum post-op cost ResNet-50's 64- and 128-channel conv3+Add
 * nodes 0.08-0.15 ms each more than this kernel's add at the stores
 * (alternating runs, one thread); at 256 channels and more oneDNN's
 * blocking wins back more than the sum costs.
 * Here a tile of PT pixels by NV vectors of 16 output channels (6 x 4,
 * 8 x 3, 12 x 2 or 16 x 1: 16-24 accumulators) stays in registers while
 * every input channel adds its PT values, broadcast, times the channel's
 * NV weight vectors; 48 pixels at a time go through every block of output
 * channels while their inputs are in L1. Bias starts the accumulators; a residual
 * Z of Y's shape is added and the activation applied as they are stored
 * (ReLU, Clip, HardSwish, HardSigmoid-times-x; the others on the task's
 * rows while they are in cache); a Z that broadcasts is added after, as
 * the oneDNN path does. Tasks of PW_TASK pixels go to the session's pool.
 *
 * Prepared once per node: W repacked per block of output channels as
 * [C][16 NV] (zero-padded to whole vectors), from the session's
 * allocator, tagged with the node. Taken by nodes with a constant W of
 * C <= PW_MAX_C (PW_MAX_C_Z with Z), one group, a 1x1 window with stride 1
 * and no pads, channels-last in and out, on CPUs with AVX-512F.
 */
#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/nn/conv/conv_nhwc.h"

#include "base/pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "ops/common/cpu/act512.h"
#define PW_X86 1
#endif

#define PW_MAX_C 32             /* input channels at most                 */
#define PW_MAX_C_Z 128          /* ... with a residual Z                  */
#define PW_MAX_BLK 64           /* blocks of output channels at most      */
#define PW_TASK 96              /* pixels per pool task (a multiple of every PT) */

#ifdef PW_X86

#define PW512 __attribute__((target("avx512f")))

typedef struct pw_state {
  int64_t c, m;
  int nblk;
  int nv[PW_MAX_BLK];           /* vectors of block b                     */
  int64_t m0[PW_MAX_BLK + 1];   /* block b: output channels [m0[b], m0[b+1]) */
  int64_t off[PW_MAX_BLK];      /* its packed weights: w + off[b]         */
  float w[];                    /* block b: C rows of 16 nv[b] floats     */
} pw_state;

typedef struct pw_job {
  const pw_state *s;
  const float *x, *b, *z;       /* X [P, C], B or NULL, Z [P, M] or NULL  */
  float *y;                     /* Y [P, M]                               */
  int64_t P;
  keel_act act;
  bool act_inline;
} pw_job;

/* PT pixels from p0 by block b (NV vectors; the last one's lanes past the
 * block's channels masked by `last`). CC: the input channels as a
 * constant (8, 16, 24, 32), or 0 for any count. With C a constant each pixel's
 * input is an immediate displacement from one pointer; with C in a
 * register the 16 pixels' offsets took 16 registers, and GCC kept some in
 * vector registers and on the stack, moved back for every channel (the
 * held-out detector's 32 -> 16 1x1 conv at 160x160: 343 us against ONNX
 * Runtime's 220). */
#define DEF_PW_TILE(PT, NV, CC)                                                                  \
  PW512 static void pw_tile_##PT##_##NV##_c##CC(const pw_job *j, int b, int64_t p0,              \
                                                 __mmask16 last) {                               \
    const pw_state *s = j->s;                                                                    \
    const int64_t C = (CC) ? (CC) : s->c;                                                        \
    int64_t M = s->m, m0 = s->m0[b];                                                             \
    const float *x = j->x + p0 * C, *w = s->w + s->off[b];                                       \
    __mmask16 mk[NV];                                                                            \
    _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) mk[v] =                               \
        v == (NV) - 1 ? last : (__mmask16)0xFFFF;                                                \
    __m512 acc[PT][NV];                                                                          \
    _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) {                                     \
      __m512 bv = j->b ? _mm512_maskz_loadu_ps(mk[v], j->b + m0 + 16 * v) : _mm512_setzero_ps(); \
      _Pragma("GCC unroll 16") for (int p = 0; p < (PT); p++) acc[p][v] = bv;                    \
    }                                                                                            \
    for (int64_t c = 0; c < C; c++) {                                                            \
      __m512 wv[NV];                                                                             \
      _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                                     \
        wv[v] = _mm512_loadu_ps(w + c * 16 * (NV) + 16 * v);                                     \
      _Pragma("GCC unroll 16") for (int p = 0; p < (PT); p++) {                                  \
        __m512 xv = _mm512_set1_ps(x[p * C + c]);                                                \
        _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++)                                   \
          acc[p][v] = _mm512_fmadd_ps(xv, wv[v], acc[p][v]);                                     \
      }                                                                                          \
    }                                                                                            \
    _Pragma("GCC unroll 16") for (int p = 0; p < (PT); p++) {                                    \
      float *y = j->y + (p0 + p) * M + m0;                                                       \
      const float *z = j->z ? j->z + (p0 + p) * M + m0 : NULL;                                   \
      _Pragma("GCC unroll 4") for (int v = 0; v < (NV); v++) {                                   \
        __m512 r = acc[p][v];                                                                    \
        if (z) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mk[v], z + 16 * v));                   \
        if (j->act_inline) r = keel_act512(&j->act, r);                                          \
        _mm512_mask_storeu_ps(y + 16 * v, mk[v], r);                                             \
      }                                                                                          \
    }                                                                                            \
  }
#define DEF_PW_TILES(CC)  \
  DEF_PW_TILE(6, 4, CC)   \
  DEF_PW_TILE(8, 3, CC)   \
  DEF_PW_TILE(12, 2, CC)  \
  DEF_PW_TILE(16, 1, CC)
DEF_PW_TILES(0)
DEF_PW_TILES(8)
DEF_PW_TILES(16)
DEF_PW_TILES(24)
DEF_PW_TILES(32)
DEF_PW_TILE(1, 4, 0)
DEF_PW_TILE(1, 3, 0)
DEF_PW_TILE(1, 2, 0)
DEF_PW_TILE(1, 1, 0)
#undef DEF_PW_TILES
#undef DEF_PW_TILE

typedef void (*pw_tile_fn)(const pw_job *, int, int64_t, __mmask16);

/* The full tiles by vectors per block (1-4), for C = 8, 16, 24, 32 (the
 * counts mobile nets use most) or any. */
#define PW_FULL(CC) {pw_tile_16_1_c##CC, pw_tile_12_2_c##CC, pw_tile_8_3_c##CC, pw_tile_6_4_c##CC}
static const pw_tile_fn *pw_full(int64_t c) {
  static const pw_tile_fn tiles[5][4] = {PW_FULL(0), PW_FULL(8), PW_FULL(16), PW_FULL(24),
                                         PW_FULL(32)};
  return tiles[c % 8 == 0 && c <= 32 ? c / 8 : 0];
}
#undef PW_FULL

/* Asks for Z's rows [r0, r1) of block b: the ones the same tile of the
 * next 48 pixels adds. Z comes from memory (ResNet-50's conv3 + Add on
 * 56x56: 3.2 MB), and a tile's rows are 1 KB apart, which the hardware
 * prefetchers do not follow. */
static void pw_prefetch_z(const pw_job *j, int b, int64_t r0, int64_t r1) {
  if (!j->z) return;
  const pw_state *s = j->s;
  int64_t bytes = (s->m0[b + 1] - s->m0[b]) * (int64_t)sizeof(float);
  for (int64_t r = r0; r < r1; r++) {
    const char *z = (const char *)(j->z + r * s->m + s->m0[b]);
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(z + o, _MM_HINT_T0);
  }
}

static keel_status pw_task(void *ctx, int64_t t0, int64_t t1, int worker) {
  static const pw_tile_fn one[4] = {pw_tile_1_1_c0, pw_tile_1_2_c0, pw_tile_1_3_c0,
                                     pw_tile_1_4_c0};
  static const int pt[4] = {16, 12, 8, 6};
  const pw_job *j = ctx;
  const pw_state *s = j->s;
  const pw_tile_fn *full = pw_full(s->c);
  (void)worker;
  int64_t p0 = t0 * PW_TASK, p1 = KEEL_MIN(t1 * PW_TASK, j->P);
  for (int64_t p = p0; p < p1;) {
    /* pixels [p, p + 48) through every block while they are in L1 */
    int64_t q1 = KEEL_MIN(p + 48, p1);
    for (int b = 0; b < s->nblk; b++) {
      int v = s->nv[b] - 1;
      int64_t left = s->m0[b + 1] - s->m0[b] - 16 * v;
      __mmask16 last = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
      int64_t q = p;
      for (; q + pt[v] <= q1; q += pt[v]) {
        pw_prefetch_z(j, b, q + 48, KEEL_MIN(q + 48 + pt[v], p1));
        full[v](j, b, q, last);
      }
      for (; q < q1; q++) one[v](j, b, q, last);
    }
    p = q1;
  }
  if (!j->act_inline) keel_act_apply_fast_f32(&j->act, j->y + p0 * s->m, (p1 - p0) * s->m);
  return KEEL_OK;
}

static keel_status pw_run(keel_kctx *k) {
  keel_nhwc_io io;
  KEEL_TRY(keel_nhwc_in(k, &io));
  const keel_nhwc_geom *g = &io.g;
  if (g->in_nchw || g->out_nchw || g->group != 1 || !keel_win_is_pointwise(&g->w))
    return keel_err(KEEL_ERR_INTERNAL, "the pointwise kernel got a convolution it did not bind");
  KEEL_TRY(keel_nhwc_out(k, &io, false));
  int64_t P = g->n * g->w.out[0] * g->w.out[1];
  if (keel_tensor_numel(io.y) == 0) return KEEL_OK;
  /* Z added at the stores, read from Y itself when Y took its buffer */
  pw_job j = {k->prep, io.x->data, io.b ? io.b->data : NULL, io.zc, io.c, P, {0}, true};
  if (io.z_in_y) j.z = io.c;
  if (!io.bare) {
    KEEL_TRY(keel_act_of(k->node, &j.act));
    j.act_inline = keel_act512_inline(j.act.kind);
  }
  if (P) KEEL_TRY(keel_pool_for(k->pool, (P + PW_TASK - 1) / PW_TASK, 1, pw_task, &j));
  return keel_nhwc_finish(k, &io);
}

/* ========================================================== binding */

/* W [M, C, 1, 1] constant float with C <= PW_MAX_C (PW_MAX_C_Z with a
 * residual Z); one group, stride 1, no pads, channels-last in and out; an
 * AVX-512F CPU. */
static bool pw_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  bool has_z = n->n_in > 3 && n->in_names[3][0];
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !wt || wt->dtype != KEEL_FLOAT || wt->rank != 4 ||
      wt->shape[1] < 1 || wt->shape[1] > (has_z ? PW_MAX_C_Z : PW_MAX_C) || wt->shape[2] != 1 ||
      wt->shape[3] != 1 ||
      wt->shape[0] < 1 || (wt->shape[0] + 15) / 16 > 4 * PW_MAX_BLK)
    return false;
  const keel_attr *ga = keel_node_attr(n, "group");
  if ((ga && ga->i != 1) || keel_nhwc_attr_on(n, "keel.in_nchw") ||
      keel_nhwc_attr_on(n, "keel.out_nchw"))
    return false;
  keel_win w;
  if (!keel_nhwc_node_win(n, 1, 1, &w)) return false;
  /* (auto_pad pads a 1x1 window of stride 1 by nothing) */
  return w.s[0] == 1 && w.s[1] == 1 && !w.pb[0] && !w.pb[1] && !w.pe[0] && !w.pe[1];
}

/* W per block of output channels as [C][16 nv] (zero lanes past M). */
static keel_status pw_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *wt = p->consts[1];
  int64_t M = wt->shape[0], C = wt->shape[1], V = (M + 15) / 16;
  int nblk = (int)((V + 3) / 4);
  pw_state *s;
  KEEL_TRY(keel_prep_alloc(p, sizeof *s + sizeof(float) * (size_t)(C * 16 * V), (void **)&s));
  s->c = C, s->m = M, s->nblk = nblk;
  int64_t off = 0;
  const float *src = wt->data;
  for (int b = 0; b < nblk; b++) { /* vectors spread evenly over the blocks */
    int64_t v0 = V * b / nblk, v1 = V * (b + 1) / nblk;
    s->nv[b] = (int)(v1 - v0);
    s->m0[b] = 16 * v0;
    s->off[b] = off;
    for (int64_t c = 0; c < C; c++)
      for (int64_t l = 0; l < 16 * (v1 - v0); l++) {
        int64_t m = 16 * v0 + l;
        s->w[off + c * 16 * (v1 - v0) + l] = m < M ? src[m * C + c] : 0.0f;
      }
    off += C * 16 * (v1 - v0);
  }
  s->m0[nblk] = M;
  *state = s;
  return KEEL_OK;
}

const keel_impl keel_conv_nhwc_pw = {"pointwise", pw_supports, pw_prepare, keel_prep_block_release,
                                     pw_run,
                                     "1x1, stride 1, no pads, few input channels, one group, "
                                     "channels-last both sides, AVX-512"};

#else /* not x86: never bound */

const keel_impl keel_conv_nhwc_pw = {"pointwise", keel_prep_never, NULL, NULL, NULL};

#endif
