/* conv_dnnl.c: NhwcConv (ops/nn/conv/conv_nhwc.h) on oneDNN's convolutions, the
 * implementation "onednn".
 *
 * Prepared once per node: W reordered into the layout oneDNN's kernel asks
 * for (a block of the session's allocator, "prepared state of node ...";
 * the file's pages under the original go back when no other node reads
 * it). Per input shape, on the first run that meets it: the primitives.
 * The work is cut into bands of output rows, at most one per pool thread
 * (per image when the batch is smaller than the pool): channels-last
 * makes a band of rows one dense tensor in and one out, so each band is
 * a whole oneDNN convolution with its own top and bottom padding. Bands
 * of the same geometry share one primitive (a first, a middle and a last
 * at most); the pool runs them, each on one thread (dnnl_glue.h). A
 * primitive whose kernel wants W in another layout gets its own reordered
 * copy (counted like the first).
 *
 * Fused: the activation (ops/common/activation.h) as oneDNN post-ops where
 * oneDNN has the same function (else keel applies it to each band while
 * it is hot), and the residual Z as a sum post-op: the band of Y starts as
 * Z's (Y takes Z's buffer when Z dies here). A Z that broadcasts is
 * added by keel after a plain convolution.
 *
 * A 1x1 conv (stride 1, no pads, one group) whose first run has at most
 * GEMV_PIXELS output pixels (a squeeze-excite block's, on a 1x1 map) is
 * a product of those pixels by W as the file stores it ([M, C] rows):
 * keel's own (gemv.h) runs it where that has its vector kernel (path 4),
 * for every later shape of as few pixels too; W is never packed for it
 * and its pages stay. A larger shape of such a node still goes to oneDNN.
 * A conv of W of 1 MiB or more whose first run has few output pixels
 * (keel_stream_fits: ResNet-50's 7x7 layers) runs on keel's streamed
 * kernel (conv_stream.h, path 5) for every shape after: oneDNN's kernel
 * waits there on W coming from memory. W is packed for it then, and the
 * file's pages under the original go back. A 3x3 stride-1 conv of 128+
 * input channels whose first run has 14x14 outputs or more runs on keel's
 * Winograd kernel (conv_wg.h, path 6), W kept as [C][9][M] for it.
 * Without AVX-512, a deep strided KxK conv, or one on a map of at most
 * 7x7, takes path 7 for good (select.c, keel_conv_lowered_fits): in bands
 * as path 1, each band's output pixels' windows copied as rows of
 * kh*kw*C inputs into the worker's scratch (lower_rows) and multiplied by
 * W packed once as a [kh*kw*C, M] matrix on oneDNN's matmul. So does, on
 * AVX-512, a 1x1 conv of few pixels and many channels
 * (keel_conv_pointwise_mm_fits), whose band of pixels is its rows as it
 * lies (no copy), W's rows padded.
 *
 * Shapes: a node keeps the primitives of up to SHAPES input shapes; a new
 * one evicts the least recently used shape no run is using (when every
 * one is in use, the run makes a private set and frees it after). Hits,
 * misses and evictions are counted in keel_stats.
 */
#include <math.h>

#include "base/pool.h"
#include "base/prim.h"
#include "mem/alloc.h"
#include "base/sysmem.h"
#include "onnx/onnx.h"
#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/nn/conv/conv_nhwc.h"
#include "ops/nn/conv/cpu/conv_stream.h"
#include "ops/nn/conv/cpu/conv_wg.h"
#include "ops/math/matmul/select.h"
#include "ops/nn/conv/select.h"
#include "ops/common/gemv.h"
#include "ops/dnnl/conv_wino.h"
#include "ops/dnnl/dnnl_glue.h"

#define MAX_BANDS 64            /* bands of one image                       */
#define PRIMS 4                 /* band geometries (first, middle, last), or
                                   output-channel parts                    */

/* One band geometry: input rows taken, the pads above and below them,
 * output rows made. */
typedef struct band_geo {
  int64_t ih, pt, pb, oh;
} band_geo;

/* key: N, H, W (C is the node's), bare */
typedef struct cd_entry {
  keel_dnnl_entry base;
  bool bare;                    /* no post-ops (a broadcasting Z)           */
  int nbands, nprims;
  int64_t oh0[MAX_BANDS + 1];   /* band b: output rows [oh0[b], oh0[b+1])   */
  int64_t ih0[MAX_BANDS];       /* its first input row                      */
  uint8_t prim_of[MAX_BANDS];
  band_geo geo[PRIMS];
  keel_dnnl_prim prim[PRIMS];
  const void *w[PRIMS];         /* the weights each primitive reads         */
  void *w_own[PRIMS];           /* reordered copies this entry owns         */
  size_t scratch;               /* the largest scratchpad, bytes            */
  bool act_in_post[PRIMS];      /* the activation is a post-op of prim[p]   */
  bool oc;                      /* band q: output channels part q, all rows */
  bool gemv;                    /* path 4: keel_gemv on W in place         */
  bool stream;                  /* path 5: keel's streamed kernel           */
  bool wg;                      /* path 6: keel's Winograd kernel           */
  bool lowered;                 /* path 7: windows as rows, oneDNN's matmul */
  keel_wino_plan *wino;         /* the Winograd path's, instead (conv_wino.h) */
} cd_entry;

typedef struct cd_state {
  keel_dnnl_cache cache;        /* primitives per input shape              */
  keel_dnnl_figures *fig;
  int splits;                   /* parts the work is cut into (keel_pool_splits) */
  int64_t m, c, group, kh, kw;
  bool has_bias;
  keel_act act;
  dnnl_memory_desc_t b_md;
  keel_dnnl_store store;        /* the session's allocator, the node's tag  */
  keel_dnnl_packed pk;          /* W packed by the first primitive (under the
                                   cache's lock) in the layout it wants     */
  const keel_tensor *orig;      /* W as the file has it, until then        */
  dnnl_memory_desc_t plain_md;  /* its layout                              */
  const struct keel_model *model; /* to give its pages back (drop_orig)     */
  bool drop_orig;
  bool has_z;                   /* a residual input: not the Winograd path */
  int path;                     /* 0 until the first run: 1 direct, 2 Winograd,
                                   3 direct in output-channel parts, 4 gemv,
                                   5 streamed (conv_stream.h), 6 keel's
                                   Winograd (conv_wg.h), 7 windows as rows
                                   on oneDNN's matmul                      */
  keel_stream_w stream;         /* path 5: W packed for it                 */
  keel_wg_w wg;                 /* path 6: W packed for it                 */
  float *lw;                    /* path 7: W as [kh kw C, M], rows lw_ld apart */
  int64_t lw_ld;
  size_t lw_bytes;
  keel_wino_node *wino;         /* the Winograd path's node state; NULL where
                                   the window and channels rule it out     */
  /* path 3: W in parts of output channels (multiples of 16), each packed by
   * its first primitive */
  int noc, packed_oc;
  int64_t oc0[PRIMS + 1];
  keel_dnnl_packed pk_oc[PRIMS];
} cd_state;

/* ===================================================== primitives */

/* The band [oh0, oh1) of an image: the input rows under it and its pads. */
static band_geo band_of(const keel_win *w, int64_t oh0, int64_t oh1, int64_t *ih0) {
  int64_t ext = keel_win_ext(w, 0);
  int64_t s0 = oh0 * w->s[0] - w->pb[0], e0 = (oh1 - 1) * w->s[0] - w->pb[0] + ext;
  int64_t lo = KEEL_MAX(s0, 0), hi = KEEL_MIN(e0, w->in[0]);
  *ih0 = lo;
  return (band_geo){hi - lo, lo - s0, e0 - hi, oh1 - oh0};
}

/* Cuts the rows into about nb bands of one height (the last may be
 * shorter), so that they need a first, a middle and a last geometry at
 * most (uneven cuts, 8 and 9 rows, would need more and fell back to one
 * band); false when a band would read no input row (then one band, the
 * whole image, is used). */
static bool cut_bands(cd_entry *e, const keel_win *w, int nb) {
  int64_t OH = w->out[0], hb = (OH + nb - 1) / nb;
  nb = (int)((OH + hb - 1) / hb);
  e->nbands = nb, e->nprims = 0;
  for (int b = 0; b <= nb; b++) e->oh0[b] = KEEL_MIN(hb * b, OH);
  for (int b = 0; b < nb; b++) {
    band_geo g = band_of(w, e->oh0[b], e->oh0[b + 1], &e->ih0[b]);
    if (g.ih <= 0) return false;
    int p = 0;
    while (p < e->nprims && memcmp(&e->geo[p], &g, sizeof g)) p++;
    if (p == e->nprims) {
      if (p == PRIMS) return false;
      e->geo[e->nprims++] = g;
    }
    e->prim_of[b] = (uint8_t)p;
  }
  return true;
}

/* What one primitive is made of beyond the node: its input and output
 * sizes, the pads along H, the weights it reads (W, or output channels
 * [m0, m0 + mq) of W) and where they are packed. */
typedef struct prim_spec {
  int64_t ih, oh, pt, pb;       /* input rows, output rows, pads above/below */
  int64_t m0, mq;               /* output channels                         */
  keel_dnnl_packed *pk;         /* W's (part's) packed copy                */
  dnnl_memory_desc_t *plain, *b_md;
  bool sum, bare;
} prim_spec;

/* The descriptor of primitive p, its weights (packed by the first
 * primitive that reads them, reordered when another kernel wants another
 * layout) and the primitive (its JIT code: what costs memory outside
 * keel). *packed_now: this call packed them. */
static keel_status make_prim_of(cd_state *s, cd_entry *e, int p, const keel_win *w,
                                const prim_spec *ps, bool *packed_now) {
  int64_t gm = ps->mq / s->group, gc = s->c / s->group;
  dnnl_dims_t sd = {1, s->c, ps->ih, w->in[1]}, dd = {1, ps->mq, ps->oh, w->out[1]};
  dnnl_dims_t wd5 = {s->group, gm, gc, s->kh, s->kw}, wd4 = {ps->mq, s->c, s->kh, s->kw};
  dnnl_dims_t strides = {w->s[0], w->s[1]}, dil = {w->d[0] - 1, w->d[1] - 1};
  dnnl_dims_t pl = {ps->pt, w->pb[1]}, pr = {ps->pb, w->pe[1]};
  dnnl_memory_desc_t src, dst, wany;
  *packed_now = false;
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nhwc), "src"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nhwc), "dst"));
  KEEL_TRY(keel_dnnl_check(s->group > 1 ? dnnl_memory_desc_init_by_tag(&wany, 5, wd5, dnnl_f32,
                                                                         dnnl_format_tag_any)
                                        : dnnl_memory_desc_init_by_tag(&wany, 4, wd4, dnnl_f32,
                                                                       dnnl_format_tag_any),
                           "weights"));
  /* the packed layout first, so that every shape shares its W; any layout
   * (and a copy of W in it) only when no kernel takes that */
  const dnnl_memory_desc_t *b_md = s->has_bias ? ps->b_md : NULL;
  dnnl_convolution_desc_t cd, cd_any;
  KEEL_TRY(keel_dnnl_check(
      dnnl_dilated_convolution_forward_desc_init(&cd_any, dnnl_forward_inference,
                                                 dnnl_convolution_direct, &src, &wany, b_md, &dst,
                                                 strides, dil, pl, pr),
      "convolution descriptor"));
  bool fixed = ps->pk->w &&
               dnnl_dilated_convolution_forward_desc_init(
                   &cd, dnnl_forward_inference, dnnl_convolution_direct, &src, &ps->pk->md, b_md,
                   &dst, strides, dil, pl, pr) == dnnl_success;
  dnnl_primitive_attr_t attr;
  KEEL_TRY(keel_dnnl_attr_post(&attr, &s->act, ps->sum, ps->bare, &e->act_in_post[p]));
  dnnl_primitive_desc_t pd = NULL;
  keel_status st = keel_dnnl_pd_make(&pd, &cd_any, attr, "convolution primitive descriptor");
  if (!st && fixed) pd = keel_dnnl_pd_prefer(pd, &cd, attr, &ps->pk->md);
  dnnl_primitive_attr_destroy(attr);
  if (st) return st;
  const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  e->scratch = KEEL_MAX(e->scratch, keel_dnnl_scratch_bytes(pd));
  const float *from = (const float *)s->orig->data + ps->m0 * gc * s->kh * s->kw;
  st = keel_dnnl_weights(&s->store, ps->pk, ps->plain, from, wq, &e->w[p], &e->w_own[p],
                         packed_now);
  if (!st) st = keel_dnnl_prim_make(pd, s->fig, &e->prim[p]);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* Path 7: W as a [kh kw C, M] matrix, its rows keel_matmul_ld(M) floats
 * apart (row (ky kw + kx) C + c holds W[:, c, ky, kx]), for good: the
 * file's pages under W go back when no other node reads them. */
static keel_status pack_lowered(cd_state *s) {
  int64_t T = s->kh * s->kw, K = T * s->c, M = s->m, ld = keel_matmul_ld(M);
  /* a 1x1's B padded as well: oneDNN then runs gemm:jit (select.c,
   * keel_conv_pointwise_mm_fits) */
  if (T == 1 && ld == M) ld = (M + 15) / 16 * 16 + 16;
  size_t bytes = sizeof(float) * (size_t)(K * ld);
  void *p;
  KEEL_TRY(keel_prep_alloc_counted(s->store.heap, s->store.owner, s->store.bytes, bytes, &p));
  float *b = p;
  const float *w = s->orig->data;
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < s->c; c++) {
      float *row = b + (t * s->c + c) * ld;
      for (int64_t m = 0; m < M; m++) row[m] = w[(m * s->c + c) * T + t];
      for (int64_t m = M; m < ld; m++) row[m] = 0.0f;
    }
  s->lw = b, s->lw_ld = ld, s->lw_bytes = bytes;
  if (s->drop_orig) keel_model_drop_const(s->model, s->orig, NULL, NULL);
  s->drop_orig = false;
  return KEEL_OK;
}

/* Path 7, band geometry p: its output pixels' windows [rows, kh kw C]
 * (made by lower_rows in the worker's scratch) times the packed W on
 * oneDNN's matmul, into the band's rows of Y; post-ops as for a
 * convolution. */
static keel_status make_prim_low(cd_state *s, cd_entry *e, int p, const keel_win *w, bool sum) {
  int64_t rows = e->geo[p].oh * w->out[1], K = s->kh * s->kw * s->c;
  dnnl_dims_t sd = {rows, K}, wd = {K, s->m}, dd = {rows, s->m}, bd = {1, s->m};
  dnnl_dims_t wst = {s->lw_ld, 1};
  dnnl_memory_desc_t src, wmd, dst, bmd;
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&src, 2, sd, dnnl_f32, dnnl_ab), "src"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_strides(&wmd, 2, wd, dnnl_f32, wst),
                           "weights"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&dst, 2, dd, dnnl_f32, dnnl_ab), "dst"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab), "bias"));
  dnnl_matmul_desc_t md;
  KEEL_TRY(keel_dnnl_check(dnnl_matmul_desc_init(&md, &src, &wmd, s->has_bias ? &bmd : NULL, &dst),
                           "matmul descriptor"));
  dnnl_primitive_attr_t attr;
  KEEL_TRY(keel_dnnl_attr_post(&attr, &s->act, sum, e->bare, &e->act_in_post[p]));
  dnnl_primitive_desc_t pd = NULL;
  keel_status st = keel_dnnl_pd_make(&pd, &md, attr, "matmul primitive descriptor");
  dnnl_primitive_attr_destroy(attr);
  if (st) return st;
  e->scratch = KEEL_MAX(e->scratch, keel_dnnl_scratch_bytes(pd));
  e->w[p] = s->lw;
  st = keel_dnnl_prim_make(pd, s->fig, &e->prim[p]);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* Band geometry p: all output channels, W packed in s->pk. */
static keel_status make_prim(cd_state *s, cd_entry *e, int p, const keel_win *w, bool sum) {
  const band_geo *g = &e->geo[p];
  prim_spec ps = {g->ih,     g->oh,        g->pt,    g->pb, 0,      s->m,
                  &s->pk, &s->plain_md, &s->b_md, sum,   e->bare};
  bool packed_now;
  keel_status st = make_prim_of(s, e, p, w, &ps, &packed_now);
  /* nothing reads the original any more when this node alone did */
  if (!st && packed_now && s->drop_orig) keel_model_drop_const(s->model, s->orig, NULL, NULL);
  if (packed_now) s->drop_orig = false;
  return st;
}

/* The node's output-channel parts (path 3, its first run): one per thread,
 * in blocks of 16 channels. */
static void cut_parts(cd_state *s) {
  int64_t blocks = s->m / 16;
  int parts = s->splits;
  for (int q = 0; q <= parts; q++) s->oc0[q] = 16 * (blocks * q / parts);
  s->noc = parts; /* cut: later shapes take the same parts */
}

/* Part q of the output channels (path 3): the whole image in, the part's
 * channels out into a dense [OH, OW, mq] scratch (cd_band copies them into
 * Y), W's part packed in s->pk_oc[q]. */
static keel_status make_prim_oc(cd_state *s, cd_entry *e, int q, const keel_win *w) {
  int64_t mq = s->oc0[q + 1] - s->oc0[q];
  dnnl_memory_desc_t plain, bmd; /* the part's weights as the file has them, its bias */
  dnnl_dims_t wd = {mq, s->c, s->kh, s->kw}, bd = {mq};
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a), "bias"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&plain, 4, wd, dnnl_f32, dnnl_oihw),
                           "weights"));
  prim_spec ps = {w->in[0], w->out[0], w->pb[0], w->pe[0], s->oc0[q], mq, &s->pk_oc[q],
                  &plain, &bmd, false, false};
  bool packed_now;
  keel_status st = make_prim_of(s, e, q, w, &ps, &packed_now);
  /* every part packed: nothing reads the original any more when this node
   * alone did */
  if (!st && packed_now && ++s->packed_oc == s->noc && s->drop_orig) {
    keel_model_drop_const(s->model, s->orig, NULL, NULL);
    s->drop_orig = false;
  }
  return st;
}

static void entry_free(cd_state *s, cd_entry *e) {
  if (!e) return;
  if (e->wino) keel_wino_plan_free(s->wino, e->wino);
  for (int p = 0; p < PRIMS; p++) {
    keel_dnnl_prim_free(&e->prim[p], s->fig);
    keel_prep_free_counted(e->w_own[p], s->store.heap, s->store.bytes);
  }
  keel_sys_free(e, sizeof *e);
}

static void entry_drop(void *ctx, keel_dnnl_entry *e) { entry_free(ctx, (cd_entry *)e); }

/* oneDNN's Winograd path is out for good (or the node goes): its state too. */
static void drop_wino(cd_state *s) {
  if (!s->wino) return;
  keel_wino_node_free(s->wino);
  keel_sys_free(s->wino, sizeof *s->wino);
  s->wino = NULL;
}

/* Path 5 or 6 (keel's own kernel) for good, once its packing of W
 * succeeded: counted, the file's pages under W given back, oneDNN's
 * Winograd state (never used now) freed. */
static keel_status take_own(cd_state *s, int path, keel_status packed, _Atomic uint64_t *count) {
  if (packed) return packed;
  drop_wino(s);
  s->path = path;
  atomic_fetch_add(count, 1);
  if (s->drop_orig) keel_model_drop_const(s->model, s->orig, NULL, NULL);
  s->drop_orig = false;
  return KEEL_OK;
}

/* What a new entry needs beyond its key. */
typedef struct cd_make_arg {
  const keel_nhwc_geom *g;
  bool sum;
} cd_make_arg;

static keel_status entry_make(void *ctx, const int64_t *key, const void *argp,
                              keel_dnnl_entry **out) {
  cd_state *s = ctx;
  const cd_make_arg *arg = argp;
  const keel_nhwc_geom *g = arg->g;
  cd_entry *e = keel_sys_calloc(1, sizeof *e);
  if (!e) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a convolution's primitives");
  e->bare = key[3] != 0;
  /* the kernel for this shape: ops/nn/conv/select.c says which and why */
  keel_conv_facts f = {g, s->kh, s->kw, s->group, s->m, s->has_z, e->bare, s->wino != NULL, s->splits};
  keel_conv_path path = keel_conv_select_path((keel_conv_path)s->path, &f);
  if (path == KEEL_CONV_GEMV) {
    /* W stays where it is for good: path 4 reads it */
    s->path = 4, s->drop_orig = false;
    e->gemv = true;
    *out = &e->base;
    return KEEL_OK;
  }
  /* keel's streamed or Winograd kernel: W exists in its packing only from
   * the first run on, so every later shape runs on it too */
  e->stream = path == KEEL_CONV_STREAM;
  e->wg = path == KEEL_CONV_WG;
  if (e->stream || e->wg) {
    keel_status st = KEEL_OK;
    const keel_dnnl_store *ws = &s->store;
    if (s->path == 0 && e->stream)
      st = take_own(s, 5, keel_stream_pack(ws->heap, ws->owner, ws->bytes, s->orig->data, s->m,
                                           s->c, s->kh, s->kw, &s->stream),
                    &s->fig->streamed);
    else if (s->path == 0)
      st = take_own(s, 6, keel_wg_pack(ws->heap, ws->owner, ws->bytes, s->orig->data, s->m, s->c,
                                       &s->wg),
                    &s->fig->winograd);
    if (st) {
      entry_free(s, e);
      return st;
    }
    *out = &e->base;
    return KEEL_OK;
  }
  if (path == KEEL_CONV_DNNL_WINO) {
    keel_status ws = keel_wino_plan_make(s->wino, g, &e->wino);
    if (!ws) {
      if (s->path == 0) {
        /* W stays as well: a later shape whose Winograd kernel cannot read
         * this transform (oneDNN's F(2,3) kernel lays W out by the map's
         * size: 7x7 maps want another layout than 28x28) runs direct */
        s->path = 2, s->drop_orig = false;
        atomic_fetch_add(&s->fig->dnnl_wino, 1);
      }
      *out = &e->base;
      return KEEL_OK;
    }
    if (ws != KEEL_ERR_UNSUPPORTED) {
      entry_free(s, e);
      return ws;
    }
    keel_err_clear();
    if (s->path == 2) { /* this shape alone, direct, from W */
      path = KEEL_CONV_BANDS;
    } else { /* no Winograd kernel here: direct, for good */
      drop_wino(s);
      f.dnnl_wino = false;
      path = keel_conv_select_path((keel_conv_path)s->path, &f);
    }
  }
  if (path == KEEL_CONV_OC_PARTS) {
    keel_status st = KEEL_OK;
    if (!s->noc) cut_parts(s);
    s->path = 3;
    e->oc = true;
    e->nbands = e->nprims = s->noc;
    for (int q = 0; q < s->noc && !st; q++) st = make_prim_oc(s, e, q, &g->w);
    if (st) {
      entry_free(s, e);
      return st;
    }
    *out = &e->base;
    return KEEL_OK;
  }
  if (path == KEEL_CONV_LOWERED && !s->lw) {
    keel_status st = pack_lowered(s);
    if (st) {
      entry_free(s, e);
      return st;
    }
    drop_wino(s);
  }
  e->lowered = path == KEEL_CONV_LOWERED;
  if (s->path != 2) s->path = e->lowered ? 7 : 1;
  /* bands: one per thread while the batch leaves threads idle; a small
   * conv (a squeeze-excite block's, on a 1x1 map) stays whole: waking a
   * worker costs more than it would save */
  int64_t macs = g->n * g->w.out[0] * g->w.out[1] * g->m * g->cg * s->kh * s->kw;
  int64_t per = g->n >= s->splits || macs < KEEL_CONV_SMALL ? 1 : (s->splits + g->n - 1) / g->n;
  if (g->in_nchw || g->out_nchw) { /* bands staged through a worker's scratch:
                                      about 256 KB of what is staged */
    int64_t row = KEEL_MAX(g->in_nchw ? g->w.in[1] * g->c * g->w.s[0] : 0,
                           g->out_nchw ? g->w.out[1] * g->m : 0) * 4;
    int64_t rows = KEEL_MAX(1, ((int64_t)256 << 10) / KEEL_MAX(row, 1));
    per = KEEL_MAX(per, (g->w.out[0] + rows - 1) / rows);
    /* a whole number of bands per thread: ResNet-50's stem in 3 bands kept
     * one of 2 threads idle a third of its time (0.82 ms against 0.6) */
    if (g->n < s->splits) per = (per + s->splits - 1) / s->splits * s->splits;
  }
  int nb = (int)KEEL_MIN(KEEL_MIN(per, g->w.out[0]), MAX_BANDS);
  /* no primitive when no window reaches an input row: Y is B (+ Z) */
  if (!cut_bands(e, &g->w, nb) && !cut_bands(e, &g->w, 1)) e->nprims = 0;
  keel_status st = KEEL_OK;
  for (int p = 0; p < e->nprims && !st; p++)
    st = e->lowered ? make_prim_low(s, e, p, &g->w, arg->sum) : make_prim(s, e, p, &g->w, arg->sum);
  if (st) {
    entry_free(s, e);
    return st;
  }
  *out = &e->base;
  return KEEL_OK;
}

/* ============================================================== run */

typedef struct cd_job {
  const cd_state *s;
  const cd_entry *e;
  const keel_nhwc_geom *g;
  const float *x, *b, *z;       /* z: copied into each band first (sum)     */
  bool z_in_y;                  /* Y took Z's buffer: it holds Z already    */
  float *y;
  uint8_t *scratch;             /* per worker: oneDNN's scratchpad, then the
                                   staged input and output bands           */
  size_t per_worker, pad, stage_in; /* bytes: all of it; oneDNN's scratchpad
                                   (aligned up); the input band's          */
  size_t windows;               /* offset of path 7's windows [rows, kh kw C] */
} cd_job;

/* Primitive p of e from x into y, with the worker's scratchpad ws and the
 * bias b (NULL: none). */
static keel_status exec_prim(const cd_entry *e, int p, const float *x, float *y, uint8_t *ws,
                             const float *b) {
  keel_dnnl_op_args o = {x, e->w[p], b, y, ws, e->scratch};
  return keel_dnnl_exec_op(e->prim[p].p, &o);
}

/* Path 3: output channels part q of image n, made dense in the worker's
 * `part` scratch, then copied pixel by pixel into Y's channels. */
static keel_status cd_part(const cd_job *j, int64_t n, int q, uint8_t *ws, float *part) {
  const keel_nhwc_geom *g = j->g;
  int64_t m0 = j->s->oc0[q], mq = j->s->oc0[q + 1] - m0, P = g->w.out[0] * g->w.out[1];
  const float *x = j->x + n * g->w.in[0] * g->w.in[1] * g->c;
  KEEL_TRY(exec_prim(j->e, q, x, part, ws, j->b ? j->b + m0 : NULL));
  if (!j->e->act_in_post[q]) keel_act_apply_fast_f32(&j->s->act, part, P * mq);
  float *y = j->y + n * P * g->m + m0;
  for (int64_t i = 0; i < P; i++)
    memcpy(y + i * g->m, part + i * mq, (size_t)mq * sizeof(float));
  return KEEL_OK;
}

/* Path 7: output rows [oy0, oy1) of one image (img, channels-last): each
 * pixel's window as a row of kh kw C inputs, zeros where it reads the
 * padding. */
static void lower_rows(const keel_nhwc_geom *g, const float *img, int64_t oy0, int64_t oy1,
                       float *rows) {
  const keel_win *w = &g->w;
  int64_t C = g->c, H = w->in[0], W = w->in[1], OW = w->out[1], kh = w->k[0], kw = w->k[1];
  int64_t K = kh * kw * C;
  for (int64_t oy = oy0; oy < oy1; oy++)
    for (int64_t ox = 0; ox < OW; ox++) {
      float *row = rows + ((oy - oy0) * OW + ox) * K;
      for (int64_t ky = 0; ky < kh; ky++) {
        int64_t iy = oy * w->s[0] - w->pb[0] + ky * w->d[0];
        for (int64_t kx = 0; kx < kw; kx++) {
          int64_t ix = ox * w->s[1] - w->pb[1] + kx * w->d[1];
          float *dst = row + (ky * kw + kx) * C;
          if (iy >= 0 && iy < H && ix >= 0 && ix < W)
            memcpy(dst, img + (iy * W + ix) * C, (size_t)C * sizeof(float));
          else
            memset(dst, 0, (size_t)C * sizeof(float));
        }
      }
    }
}

static keel_status cd_band(void *ctx, int64_t t0, int64_t t1, int worker) {
  const cd_job *j = ctx;
  const cd_entry *e = j->e;
  const keel_nhwc_geom *g = j->g;
  int64_t H = g->w.in[0], W = g->w.in[1], OH = g->w.out[0], OW = g->w.out[1];
  /* this worker's scratch (none when the band needs neither a scratchpad
   * nor staging) */
  uint8_t *ws = j->scratch ? j->scratch + (size_t)worker * j->per_worker : NULL;
  float *in_stage = ws ? (float *)(void *)(ws + j->pad) : NULL;
  float *out_stage = ws ? (float *)(void *)(ws + j->pad + j->stage_in) : NULL;
  for (int64_t t = t0; t < t1 && e->oc; t++) /* path 3: part q of the channels */
    KEEL_TRY(cd_part(j, t / e->nbands, (int)(t % e->nbands), ws, out_stage));
  for (int64_t t = t0; t < t1 && !e->oc; t++) {
    int64_t n = t / e->nbands;
    int b = (int)(t % e->nbands), p = e->prim_of[b];
    int64_t off = (n * OH + e->oh0[b]) * OW * g->m, len = (e->oh0[b + 1] - e->oh0[b]) * OW * g->m;
    float *y = g->out_nchw ? out_stage : j->y + off;
    if (j->z) memcpy(y, j->z + off, (size_t)len * sizeof(float));
    if (!e->nprims) { /* every window lies in the padding */
      bool add = j->z || j->z_in_y;
      for (int64_t i = 0; i < len; i++) {
        float v = j->b ? j->b[i % g->m] : 0.0f;
        y[i] = add ? y[i] + v : v;
      }
      if (!e->bare) keel_act_apply_fast_f32(&j->s->act, y, len);
      if (g->out_nchw)
        keel_nhwc_rows_to_nchw(y, g->m, OH, OW, e->oh0[b], e->oh0[b + 1] - e->oh0[b],
                               j->y + n * OH * OW * g->m);
      continue;
    }
    const float *x = j->x + (n * H + e->ih0[b]) * W * g->c;
    if (e->lowered && keel_win_is_pointwise(&g->w)) {
      /* path 7 on a 1x1 window: the band's pixels are its rows already */
    } else if (e->lowered) { /* path 7: the band's windows as rows */
      float *win = (float *)(void *)(ws + j->windows);
      lower_rows(g, j->x + n * H * W * g->c, e->oh0[b], e->oh0[b + 1], win);
      x = win;
    } else if (g->in_nchw) { /* this band's rows, channels-last, in the worker's scratch */
      keel_nchw_rows_to_nhwc(j->x + n * g->c * H * W, g->c, H, W, e->ih0[b], e->geo[p].ih,
                             in_stage);
      x = in_stage;
    }
    KEEL_TRY(exec_prim(e, p, x, y, ws, j->b));
    if (!e->act_in_post[p] && !e->bare) keel_act_apply_fast_f32(&j->s->act, y, len);
    if (g->out_nchw) /* the band back into Y's rows of every channel */
      keel_nhwc_rows_to_nchw(y, g->m, OH, OW, e->oh0[b], e->oh0[b + 1] - e->oh0[b],
                             j->y + n * OH * OW * g->m);
  }
  return KEEL_OK;
}

/* A 1x1 window with stride 1 and no pads maps pixels to pixels: every
 * image's pixels, one after the other, are one column of N*H*W rows
 * (channels-last keeps them contiguous), so bands can split pixels
 * evenly (a 7x7 map into 25 and 24, not 4 and 3 rows of 7). Only where
 * rows split badly: oneDNN's kernels are 5-10 % slower on a column. */
static void pointwise(keel_nhwc_geom *g, int threads) {
  const keel_win *w = &g->w;
  if (!keel_win_is_pointwise(w)) return;
  int64_t per = g->n >= threads ? 1 : (threads + g->n - 1) / g->n, oh = w->out[0];
  if (per == 1 || oh % per == 0 || oh >= 8 * per) return;
  int64_t p = g->n * w->in[0] * w->in[1];
  g->n = 1;
  g->w.in[0] = g->w.out[0] = p;
  g->w.in[1] = g->w.out[1] = 1;
}

/* Bands or parts (paths 1 and 3) of entry e into io's product. */
static keel_status run_bands(keel_kctx *k, const cd_state *s, const cd_entry *e,
                             const keel_nhwc_geom *g, const float *x, const float *b,
                             const keel_nhwc_io *io) {
  cd_job j = {s, e, g, x, b, io->zc, io->z_in_y, io->c, NULL};
  int threads = keel_pool_threads(k->pool);
  int64_t rows = 0, irows = 0; /* the tallest band, out and in */
  for (int q = 0; q < e->nprims; q++)
    rows = KEEL_MAX(rows, e->geo[q].oh), irows = KEEL_MAX(irows, e->geo[q].ih);
  if (!e->nprims) rows = g->w.out[0];
  size_t align = 64;
  j.stage_in = g->in_nchw ? keel_align_up((size_t)(irows * g->w.in[1] * g->c) * 4, align) : 0;
  size_t stage_out =
      g->out_nchw ? keel_align_up((size_t)(rows * g->w.out[1] * g->m) * 4, align) : 0;
  for (int q = 0; e->oc && q < s->noc; q++) /* a part's channels, dense, before Y */
    stage_out = KEEL_MAX(stage_out, keel_align_up((size_t)(g->w.out[0] * g->w.out[1] *
                                                           (s->oc0[q + 1] - s->oc0[q])) * 4,
                                                  align));
  j.pad = keel_align_up(e->scratch, align);
  j.windows = j.pad + j.stage_in + stage_out;
  size_t windows = e->lowered && !keel_win_is_pointwise(&g->w) ? (size_t)(rows * g->w.out[1] * g->w.k[0] * g->w.k[1] * g->c) * 4 : 0;
  j.per_worker = j.windows + windows;
  void *sp = NULL;
  keel_status st = j.per_worker ? keel_k_scratch_n(k, threads, j.per_worker, &sp) : KEEL_OK;
  j.scratch = sp;
  return st ? st : keel_pool_for(k->pool, g->n * e->nbands, 1, cd_band, &j);
}

static keel_status cd_run(keel_kctx *k) {
  const cd_state *cs = k->prep;
  cd_state *s = (cd_state *)(uintptr_t)cs; /* the shape cache is behind its lock */
  keel_nhwc_io io;
  KEEL_TRY(keel_nhwc_in(k, &io));
  if ((io.b != NULL) != s->has_bias)
    return keel_err(KEEL_ERR_INVALID_MODEL, "B is %s at run time but was %s at binding",
                    io.b ? "given" : "omitted", s->has_bias ? "given" : "omitted");
  /* oneDNN 2.6's brgconv gets a sum post-op wrong (and crashes with an
   * eltwise after it) on output rows or columns whose windows lie wholly
   * in the padding (tests/test_conv_nhwc.c found both): keel adds Z then */
  const keel_win *gw = &io.g.w;
  bool z_apart = gw->pb[0] >= keel_win_ext(gw, 0) || gw->pe[0] >= keel_win_ext(gw, 0) ||
                 gw->pb[1] >= keel_win_ext(gw, 1) || gw->pe[1] >= keel_win_ext(gw, 1);
  KEEL_TRY(keel_nhwc_out(k, &io, z_apart));
  keel_nhwc_geom g = io.g; /* the kernels' view: pixels may become a column */
  if (!g.in_nchw && !g.out_nchw) pointwise(&g, s->splits);
  if (keel_tensor_numel(io.y) == 0) return KEEL_OK;
  if (g.n * g.w.out[0] * g.w.out[1] * g.m == 0) return keel_nhwc_finish(k, &io);
  const float *x = io.x->data, *b = io.b ? io.b->data : NULL;
  keel_dnnl_entry *ent;
  bool tmp;
  int64_t key[KEEL_DNNL_KEY] = {g.n, g.w.in[0], g.w.in[1], io.bare};
  cd_make_arg arg = {&g, io.zc || io.z_in_y};
  KEEL_TRY(keel_dnnl_cache_get(&s->cache, key, &arg, &ent, &tmp));
  cd_entry *e = (cd_entry *)ent;
  keel_status st;
  if (e->gemv) { /* pixels are rows of C, Y's rows of M */
    keel_gemv_args ga = {g.n * g.w.out[0] * g.w.out[1], g.c, g.m, x, g.c, s->orig->data,
                         true, b, io.z_in_y ? io.c : io.zc, io.c, g.m,
                         io.bare ? NULL : &s->act};
    st = keel_gemv(k->pool, &ga);
  } else if (e->stream || e->wg) { /* keel's own kernels */
    keel_nhwc_args sa = {&g, x, b, io.zc, io.z_in_y, io.c, io.bare ? KEEL_ACT_OFF : s->act};
    st = e->stream ? keel_stream_run(k, &s->stream, &sa) : keel_wg_run(k, &s->wg, &sa);
  } else if (e->wino) {
    st = keel_wino_run(k, s->wino, e->wino, &g, x, b, io.c);
  } else {
    st = run_bands(k, s, e, &g, x, b, &io);
  }
  keel_dnnl_cache_put(&s->cache, ent, tmp);
  KEEL_TRY(st);
  return keel_nhwc_finish(k, &io);
}

/* ========================================================== binding */

/* A constant float W, a group count that divides it, and window
 * attributes that read (a malformed one keeps the reference, whose run
 * then words the error as Conv's does). */
static bool cd_supports(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  const keel_tensor *wt = n->n_in > 1 ? p->consts[1] : NULL;
  if (p->no_library || !keel_dnnl_available() || !wt || wt->dtype != KEEL_FLOAT ||
      wt->rank != 4 || keel_tensor_numel(wt) == 0)
    return false;
  const keel_attr *ga = keel_node_attr(n, "group");
  int64_t group = ga ? ga->i : 1;
  if (group < 1 || wt->shape[0] % group) return false;
  const keel_attr *on = keel_node_attr(n, "keel.out_nchw");
  if (on && on->i && n->n_in > 3 && n->in_names[3][0]) return false; /* the reference refuses */
  keel_win w;
  return keel_nhwc_node_win(n, wt->shape[2], wt->shape[3], &w);
}

static void cd_release(void *state, keel_heap *heap) {
  cd_state *s = state;
  if (!s) return;
  keel_dnnl_cache_free(&s->cache);
  drop_wino(s);
  keel_prep_free_counted(s->pk.w, heap, s->store.bytes);
  keel_stream_free(&s->stream, heap, s->store.bytes);
  if (s->path == 5) atomic_fetch_sub(&s->fig->streamed, 1);
  keel_wg_free(&s->wg, heap, s->store.bytes);
  keel_prep_free_counted(s->lw, heap, s->store.bytes);
  if (s->path == 6) atomic_fetch_sub(&s->fig->winograd, 1);
  if (s->path == 2) atomic_fetch_sub(&s->fig->dnnl_wino, 1);
  for (int q = 0; q < PRIMS; q++) keel_prep_free_counted(s->pk_oc[q].w, heap, s->store.bytes);
  keel_sys_free(s, sizeof *s);
}

static keel_status cd_prepare(const keel_prep_ctx *p, void **state) {
  const keel_node *n = p->node;
  const keel_tensor *wt = p->consts[1];
  cd_state *s = keel_sys_calloc(1, sizeof *s);
  if (!s) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a convolution's prepared state");
  s->fig = p->lib;
  s->store = (keel_dnnl_store){p->heap, p->owner, p->bytes};
  keel_dnnl_cache_init(&s->cache, entry_make, entry_drop, s, p->lib);
  s->splits = KEEL_MAX(1, p->splits);
  const keel_attr *ga = keel_node_attr(n, "group");
  s->group = ga ? ga->i : 1;
  s->m = wt->shape[0], s->c = wt->shape[1] * s->group, s->kh = wt->shape[2], s->kw = wt->shape[3];
  s->has_bias = n->n_in > 2 && n->in_names[2][0];
  keel_status st = keel_act_of(n, &s->act);
  dnnl_dims_t bd = {s->m};
  if (!st)
    st = keel_dnnl_check(dnnl_memory_desc_init_by_tag(&s->b_md, 1, bd, dnnl_f32, dnnl_a), "bias");
  /* W stays as the file has it until the first run picks its layout */
  dnnl_dims_t wd5 = {s->group, s->m / s->group, s->c / s->group, s->kh, s->kw};
  dnnl_dims_t wd4 = {s->m, s->c, s->kh, s->kw};
  if (!st)
    st = keel_dnnl_check(
        s->group > 1 ? dnnl_memory_desc_init_by_tag(&s->plain_md, 5, wd5, dnnl_f32, dnnl_goihw)
                     : dnnl_memory_desc_init_by_tag(&s->plain_md, 4, wd4, dnnl_f32, dnnl_oihw),
        "plain weights");
  if (st) {
    cd_release(s, p->heap);
    return st;
  }
  const keel_attr *own = keel_node_attr(n, "keel.weights_private");
  s->orig = wt, s->model = p->model, s->drop_orig = own && own->i && p->model;
  s->has_z = n->n_in > 3 && n->in_names[3][0];
  /* the Winograd path's state only where keel_conv_dnnl_wino_fits can hold (3x3, one
   * group, channels by 16s, at least 64, no residual) */
  if (s->kh == 3 && s->kw == 3 && s->group == 1 && s->c % 16 == 0 && s->m % 16 == 0 &&
      s->c >= 64 && s->m >= 64 && !s->has_z) {
    s->wino = keel_sys_calloc(1, sizeof *s->wino);
    if (!s->wino) {
      cd_release(s, p->heap);
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a convolution's prepared state");
    }
    *s->wino = (keel_wino_node){.store = s->store, .fig = p->lib,   .splits = s->splits,
                                .c = s->c,         .m = s->m,      .has_bias = s->has_bias,
                                .act = s->act,     .w_plain = wt->data};
  }
  *state = s;
  return KEEL_OK;
}

const keel_impl keel_conv_nhwc_dnnl = {"onednn", cd_supports, cd_prepare, cd_release, cd_run,
                                       "any other case; the kernel is chosen on the first run "
                                       "(ops/nn/conv/select.c, keel_conv_select_path)"};
