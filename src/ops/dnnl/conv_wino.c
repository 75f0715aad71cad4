/* conv_wino.c: NhwcConv's Winograd path (conv_wino.h). */
#include "ops/dnnl/conv_wino.h"

#if KEEL_HAVE_DNNL

#include "base/pool.h"
#include "base/sysmem.h"
#include <string.h>

/* What W's Winograd transform may take beyond W itself, per node: keel's
 * memory bound allows weights 10 % of slack, and ResNet-50's 128- and
 * 256-channel 3x3 layers would add 18 MB (their transforms are 1.8x and
 * 4x); its 64-channel ones add 0.1 MB each. Parts of the output channels
 * share it in proportion to their channels. */
#define WINO_EXTRA ((size_t)256 << 10)

struct keel_wino_plan {
  int64_t n, h, w, oh, ow;
  int nparts;                   /* tasks: bands of output rows, or parts of
                                   the output channels (the node's bands)  */
  int64_t c0[KEEL_WINO_PARTS + 1]; /* parts: input channel parts (by 16s)   */
  int64_t r0[KEEL_WINO_PARTS + 1]; /* bands: output rows                    */
  int64_t i0[KEEL_WINO_PARTS], i1[KEEL_WINO_PARTS]; /* bands: input rows read */
  int64_t xb_at[KEEL_WINO_PARTS]; /* bands: the blocked input's offset      */
  int64_t hb[KEEL_WINO_PARTS];    /* bands: its rows                         */
  int64_t zt[KEEL_WINO_PARTS], zb[KEEL_WINO_PARTS]; /* bands: rows of zeros
                                     above and below X's rows in it         */
  keel_dnnl_prim conv[KEEL_WINO_PARTS], to_blk[KEEL_WINO_PARTS], from_blk[KEEL_WINO_PARTS];
  dnnl_memory_desc_t x_part[KEEL_WINO_PARTS], xb_part[KEEL_WINO_PARTS]; /* to_blk: from, to */
  dnnl_memory_desc_t yb_part[KEEL_WINO_PARTS], y_part[KEEL_WINO_PARTS]; /* from_blk         */
  bool act_in_post[KEEL_WINO_PARTS];
  size_t scratch;               /* the largest conv scratchpad              */
  size_t xb_bytes, yb_bytes;    /* the blocked copies of X and Y            */
};

/* Channels [.., + cn) and rows [.., + rows) of an NHWC tensor of c_all
 * channels and h_all rows, as a view: dims (N, cn, rows, W), the whole
 * tensor's strides. */
static dnnl_status_t nhwc_view(dnnl_memory_desc_t *md, int64_t n, int64_t cn, int64_t rows,
                               int64_t h_all, int64_t w, int64_t c_all) {
  dnnl_dims_t d = {n, cn, rows, w}, st = {h_all * w * c_all, 1, w * c_all, c_all};
  return dnnl_memory_desc_init_by_strides(md, 4, d, dnnl_f32, st);
}

static dnnl_status_t blocked(dnnl_memory_desc_t *md, int64_t n, int64_t c, int64_t h, int64_t w) {
  dnnl_dims_t d = {n, c, h, w};
  return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, dnnl_nChw16c);
}

/* What one primitive computes: output channels [oc0[oq], oc0[oq + 1])
 * (W's part oq) of `rows` output rows from `h` input rows, with pt / pb
 * rows of zeros above / below them. */
typedef struct wino_shape {
  int oq;
  int64_t h, rows, pt, pb;
} wino_shape;

/* Which Winograd kernel a primitive may use: one that reads the node's
 * transform of W where it exists, else one whose transform is at most
 * `most` bytes (W's transform is 1.8x W for F(2,3), 4x for F(4,3): where
 * that is much, memory comes first). */
typedef struct w_want {
  const keel_dnnl_packed *pk;
  size_t most;
} w_want;

static bool w_fits(const dnnl_memory_desc_t *w, void *ctx) {
  const w_want *want = ctx;
  if (want->pk->w) return dnnl_memory_desc_equal(w, &want->pk->md);
  return dnnl_memory_desc_get_size(w) <= want->most;
}

/* Primitive q of plan p (bias and the activation as post-ops where oneDNN
 * has it); its weights, packed by the node's first plan. */
static keel_status make_conv(keel_wino_node *n, keel_wino_plan *p, int q, const keel_win *win,
                             wino_shape sh) {
  int64_t mq = n->oc0[sh.oq + 1] - n->oc0[sh.oq];
  dnnl_memory_desc_t src, dst, wany;
  dnnl_dims_t wd = {mq, n->c, 3, 3}, bd = {mq}, one = {1, 1}, zero = {0, 0};
  KEEL_TRY(keel_dnnl_check(blocked(&src, 1, n->c, sh.h, p->w), "src"));
  KEEL_TRY(keel_dnnl_check(blocked(&dst, 1, mq, sh.rows, p->ow), "dst"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any),
                           "weights"));
  dnnl_memory_desc_t b_md;
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), "bias"));
  dnnl_convolution_desc_t cd;
  /* a 3x3 stride-1 conv: ow = w + left + right - 2 */
  dnnl_dims_t pl = {sh.pt, win->pb[1]}, pr = {sh.pb, p->ow - p->w + 2 - win->pb[1]};
  KEEL_TRY(keel_dnnl_check(dnnl_dilated_convolution_forward_desc_init(
                               &cd, dnnl_forward_inference, dnnl_convolution_winograd, &src, &wany,
                               n->has_bias ? &b_md : NULL, &dst, one, zero, pl, pr),
                           "Winograd descriptor"));
  size_t plain_bytes = (size_t)(mq * n->c * 9) * sizeof(float);
  keel_dnnl_packed *pk = &n->pk[sh.oq];
  w_want want = {pk, plain_bytes + (size_t)((double)WINO_EXTRA * (double)mq / (double)n->m)};
  /* the activation as a post-op where a Winograd kernel takes it (the
   * F(2,3) kernel takes Relu, not Tanh or the like), else applied after */
  dnnl_primitive_desc_t pd = NULL;
  for (int bare = 0; bare < 2 && !pd; bare++) {
    dnnl_primitive_attr_t attr;
    KEEL_TRY(keel_dnnl_attr_post(&attr, &n->act, false, bare, &p->act_in_post[q]));
    pd = keel_dnnl_pd_pick(&cd, attr, w_fits, &want);
    dnnl_primitive_attr_destroy(attr);
    if (!p->act_in_post[q]) break; /* no post-op was asked: nothing to retry */
  }
  if (!pd)
    return pk->w ? keel_err(KEEL_ERR_UNSUPPORTED,
                            "no Winograd kernel for %lld rows that reads the node's weights",
                            (long long)sh.rows)
                 : keel_err(KEEL_ERR_UNSUPPORTED,
                            "no Winograd kernel whose weights take at most %zu bytes for %zu",
                            want.most, plain_bytes);
  const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  dnnl_memory_desc_t plain;
  const void *use;
  void *own = NULL; /* never made: the layouts are equal */
  bool packed_now;
  /* the node's first plan transforms W's part; later ones read it */
  keel_status st =
      keel_dnnl_check(dnnl_memory_desc_init_by_tag(&plain, 4, wd, dnnl_f32, dnnl_oihw), "weights");
  if (!st)
    st = keel_dnnl_weights(&n->store, pk, &plain, n->w_plain + n->oc0[sh.oq] * n->c * 9, wq, &use,
                           &own, &packed_now);
  p->scratch = KEEL_MAX(p->scratch, keel_dnnl_scratch_bytes(pd));
  if (!st) st = keel_dnnl_prim_make(pd, n->fig, &p->conv[q]);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

void keel_wino_plan_free(keel_wino_node *n, keel_wino_plan *p) {
  if (!p) return;
  for (int q = 0; q < KEEL_WINO_PARTS; q++) {
    keel_dnnl_prim_free(&p->conv[q], n->fig);
    keel_dnnl_prim_free(&p->to_blk[q], n->fig);
    keel_dnnl_prim_free(&p->from_blk[q], n->fig);
  }
  keel_sys_free(p, sizeof *p);
}

void keel_wino_node_free(keel_wino_node *n) {
  for (int q = 0; q < KEEL_WINO_PARTS; q++) {
    keel_prep_free_counted(n->pk[q].w, n->store.heap, n->store.bytes);
    n->pk[q].w = NULL;
  }
}

/* Bands for `oh` output rows over `splits` parts: at least
 * KEEL_WINO_BAND_ROWS rows each, at most KEEL_WINO_PARTS. */
static int band_count(int64_t oh, int splits) {
  return (int)KEEL_MAX(1, KEEL_MIN(KEEL_MIN((int64_t)splits, oh / KEEL_WINO_BAND_ROWS),
                                   KEEL_WINO_PARTS));
}

/* Band mode: bands of output rows by 4s, each reading its rows' windows.
 * oneDNN's F(2,3) kernel takes only pads equal above and below, so where
 * the image has two or more bands each band's blocked copy holds every
 * input row its windows read, the image's pads as rows of zeros
 * (zt above, zb below), and its primitive has no pads on H; one band is
 * the whole image with the node's pads. */
static keel_status plan_bands(keel_wino_node *n, keel_wino_plan *p, const keel_win *win) {
  int nb = band_count(p->oh, n->splits);
  int64_t tiles = (p->oh + 3) / 4, pt = win->pb[0];
  p->nparts = nb;
  for (int q = 0; q <= nb; q++) p->r0[q] = KEEL_MIN(p->oh, 4 * (tiles * q / nb));
  int64_t at = 0;
  for (int q = 0; q < nb; q++) {
    int64_t rows = p->r0[q + 1] - p->r0[q];
    int64_t a = p->r0[q] - pt, b = p->r0[q + 1] - pt + 2; /* rows [a, b), pads included */
    p->i0[q] = KEEL_MAX(a, 0), p->i1[q] = KEEL_MIN(b, p->h);
    int64_t hi = p->i1[q] - p->i0[q]; /* rows of X read */
    wino_shape sh = {0, hi, rows, p->i0[q] - a, b - p->i1[q]};
    p->zt[q] = p->zb[q] = 0;
    if (nb > 1) { /* the pads as rows of the copy */
      p->zt[q] = sh.pt, p->zb[q] = sh.pb;
      sh.h = b - a, sh.pt = sh.pb = 0;
    }
    p->xb_at[q] = at, p->hb[q] = sh.h;
    at += n->c * sh.h * p->w;
    KEEL_TRY(make_conv(n, p, q, win, sh));
    KEEL_TRY(keel_dnnl_check(nhwc_view(&p->x_part[q], 1, n->c, hi, p->h, p->w, n->c),
                             "an input band"));
    dnnl_memory_desc_t whole;
    dnnl_dims_t d = {1, n->c, hi, p->w}, off = {0, 0, p->zt[q], 0};
    KEEL_TRY(keel_dnnl_check(blocked(&whole, 1, n->c, sh.h, p->w), "a blocked input band"));
    KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_submemory(&p->xb_part[q], &whole, d, off),
                             "a blocked input band's rows"));
    KEEL_TRY(keel_dnnl_reorder_prim(&p->x_part[q], &p->xb_part[q], n->fig, &p->to_blk[q]));
    KEEL_TRY(keel_dnnl_check(blocked(&p->yb_part[q], 1, n->m, rows, p->ow), "a blocked output band"));
    KEEL_TRY(keel_dnnl_check(nhwc_view(&p->y_part[q], 1, n->m, rows, p->oh, p->ow, n->m),
                             "an output band"));
    KEEL_TRY(keel_dnnl_reorder_prim(&p->yb_part[q], &p->y_part[q], n->fig, &p->from_blk[q]));
  }
  p->xb_bytes = (size_t)at * sizeof(float);
  return KEEL_OK;
}

/* Part mode: one primitive per part of W's output channel blocks, each
 * over the whole image; the input reordered in parts of its channels. */
static keel_status plan_parts(keel_wino_node *n, keel_wino_plan *p, const keel_win *win) {
  int64_t cb = n->c / 16;
  p->nparts = n->nparts;
  for (int q = 0; q <= p->nparts; q++) p->c0[q] = 16 * (cb * q / p->nparts);
  for (int q = 0; q < p->nparts; q++) {
    int64_t cq = p->c0[q + 1] - p->c0[q], mq = n->oc0[q + 1] - n->oc0[q];
    wino_shape sh = {q, p->h, p->oh, win->pb[0], p->oh - p->h + 2 - win->pb[0]};
    KEEL_TRY(make_conv(n, p, q, win, sh));
    KEEL_TRY(keel_dnnl_check(nhwc_view(&p->x_part[q], 1, cq, p->h, p->h, p->w, n->c),
                             "an input view"));
    KEEL_TRY(keel_dnnl_check(blocked(&p->xb_part[q], 1, cq, p->h, p->w), "an input part"));
    if (cq) KEEL_TRY(keel_dnnl_reorder_prim(&p->x_part[q], &p->xb_part[q], n->fig, &p->to_blk[q]));
    KEEL_TRY(keel_dnnl_check(blocked(&p->yb_part[q], 1, mq, p->oh, p->ow), "an output part"));
    KEEL_TRY(keel_dnnl_check(nhwc_view(&p->y_part[q], 1, mq, p->oh, p->oh, p->ow, n->m),
                             "an output view"));
    KEEL_TRY(keel_dnnl_reorder_prim(&p->yb_part[q], &p->y_part[q], n->fig, &p->from_blk[q]));
  }
  p->xb_bytes = (size_t)(n->c * p->h * p->w) * sizeof(float);
  return KEEL_OK;
}

/* The node's tasks on its first plan: bands, or parts of the output
 * channel blocks. */
static void cut_node(keel_wino_node *n, bool bands) {
  int64_t mb = n->m / 16;
  n->bands = bands;
  n->nparts = bands ? 1
                    : (int)KEEL_MAX(1, KEEL_MIN(KEEL_MIN((int64_t)n->splits, mb), KEEL_WINO_PARTS));
  for (int q = 0; q <= n->nparts; q++) n->oc0[q] = 16 * (mb * q / n->nparts);
}

static keel_status plan_new(keel_wino_node *n, const keel_nhwc_geom *g, keel_wino_plan **out) {
  const keel_win *w = &g->w;
  keel_wino_plan *p = keel_sys_calloc(1, sizeof *p);
  if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a Winograd convolution's primitives");
  p->n = g->n, p->h = w->in[0], p->w = w->in[1], p->oh = w->out[0], p->ow = w->out[1];
  keel_status st = KEEL_OK;
  /* oneDNN's pads: at most 1 on each side here (ResNet's, and the
   * exporters' "same" for 3x3) */
  int64_t pbot = p->oh - p->h + 2 - w->pb[0], pright = p->ow - p->w + 2 - w->pb[1];
  if (w->pb[0] > 1 || w->pb[1] > 1 || pbot < 0 || pbot > 1 || pright < 0 || pright > 1)
    st = keel_err(KEEL_ERR_UNSUPPORTED, "Winograd path: pads other than 0 or 1");
  if (!st) st = n->bands ? plan_bands(n, p, w) : plan_parts(n, p, w);
  if (st) {
    keel_wino_plan_free(n, p);
    return st;
  }
  p->yb_bytes = (size_t)(n->m * p->oh * p->ow) * sizeof(float);
  *out = p;
  return KEEL_OK;
}

keel_status keel_wino_plan_make(keel_wino_node *n, const keel_nhwc_geom *g, keel_wino_plan **out) {
  bool first = !n->nparts;
  if (first) cut_node(n, band_count(g->w.out[0], n->splits) >= 2 || n->splits == 1);
  keel_status st = plan_new(n, g, out);
  if (st == KEEL_ERR_UNSUPPORTED && first && n->bands && n->splits > 1) {
    /* oneDNN has no kernel for a band (its F(2,3) kernel refuses maps
     * small beside W): parts of the channels, each over the whole map */
    keel_err_clear();
    keel_wino_node_free(n);
    cut_node(n, false);
    st = plan_new(n, g, out);
  }
  if (st && first) {
    keel_wino_node_free(n);
    n->nparts = 0;
  }
  return st;
}

typedef struct wino_job {
  const keel_wino_node *n;
  const keel_wino_plan *p;
  const float *x, *b;           /* this image                             */
  float *y, *xb, *yb;
  uint8_t *scratch;
} wino_job;

/* Primitive q of the plan on blocked input xb into blocked output yb of
 * len floats (the activation after it where oneDNN did not apply it),
 * then yb reordered into y. */
static keel_status conv_one(const wino_job *j, int64_t q, int oq, const float *xb, float *yb,
                            int64_t len, float *y, int worker) {
  const keel_wino_plan *p = j->p;
  const keel_wino_node *n = j->n;
  keel_dnnl_op_args o = {xb, n->pk[oq].w, j->b ? j->b + n->oc0[oq] : NULL, yb,
                         p->scratch ? j->scratch + (size_t)worker * p->scratch : NULL, p->scratch};
  KEEL_TRY(keel_dnnl_exec_op(p->conv[q].p, &o));
  if (!p->act_in_post[q]) keel_act_apply_fast_f32(&n->act, yb, len); /* any layout */
  keel_dnnl_arg r[2] = {{DNNL_ARG_FROM, &p->yb_part[q], yb}, {DNNL_ARG_TO, &p->y_part[q], y}};
  return keel_dnnl_exec(p->from_blk[q].p, 2, r);
}

/* Bands: each its input rows reordered (the rows of zeros set), convolved,
 * reordered back. */
static keel_status band_tasks(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wino_job *j = ctx;
  const keel_wino_plan *p = j->p;
  int64_t c = j->n->c, m = j->n->m, row = p->w * 16;
  for (int64_t q = q0; q < q1; q++) {
    float *xb = j->xb + p->xb_at[q];
    if (p->zt[q] || p->zb[q])
      for (int64_t cb = 0; cb < c / 16; cb++) { /* nChw16c: each block's rows */
        float *blk = xb + cb * p->hb[q] * row;
        memset(blk, 0, sizeof(float) * (size_t)(p->zt[q] * row));
        memset(blk + (p->hb[q] - p->zb[q]) * row, 0, sizeof(float) * (size_t)(p->zb[q] * row));
      }
    keel_dnnl_arg a[2] = {{DNNL_ARG_FROM, &p->x_part[q], (void *)(uintptr_t)(j->x + p->i0[q] * p->w * c)},
                          {DNNL_ARG_TO, &p->xb_part[q], xb}};
    KEEL_TRY(keel_dnnl_exec(p->to_blk[q].p, 2, a));
    int64_t rows = p->r0[q + 1] - p->r0[q];
    KEEL_TRY(conv_one(j, q, 0, xb, j->yb + m * p->r0[q] * p->ow, m * rows * p->ow,
                      j->y + p->r0[q] * p->ow * m, worker));
  }
  return KEEL_OK;
}

static keel_status to_blocked(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wino_job *j = ctx;
  const keel_wino_plan *p = j->p;
  (void)worker;
  for (int64_t q = q0; q < q1; q++) {
    if (!p->to_blk[q].p) continue;
    keel_dnnl_arg a[2] = {{DNNL_ARG_FROM, &p->x_part[q], (void *)(uintptr_t)(j->x + p->c0[q])},
                          {DNNL_ARG_TO, &p->xb_part[q], j->xb + p->c0[q] * p->h * p->w}};
    KEEL_TRY(keel_dnnl_exec(p->to_blk[q].p, 2, a));
  }
  return KEEL_OK;
}

/* Parts: each of its output channels over the whole blocked input. */
static keel_status part_tasks(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wino_job *j = ctx;
  const keel_wino_plan *p = j->p;
  const keel_wino_node *n = j->n;
  for (int64_t q = q0; q < q1; q++) {
    int64_t mq = n->oc0[q + 1] - n->oc0[q];
    KEEL_TRY(conv_one(j, q, (int)q, j->xb, j->yb + n->oc0[q] * p->oh * p->ow, mq * p->oh * p->ow,
                      j->y + n->oc0[q], worker));
  }
  return KEEL_OK;
}

keel_status keel_wino_run(keel_kctx *k, const keel_wino_node *n, const keel_wino_plan *p,
                          const keel_nhwc_geom *g, const float *x, const float *b, float *y) {
  int threads = keel_pool_threads(k->pool);
  void *xb, *yb, *sp = NULL;
  KEEL_TRY(keel_k_scratch(k, p->xb_bytes, &xb));
  KEEL_TRY(keel_k_scratch(k, p->yb_bytes, &yb));
  if (p->scratch) KEEL_TRY(keel_k_scratch_n(k, threads, p->scratch, &sp));
  for (int64_t i = 0; i < g->n; i++) { /* image by image */
    wino_job j = {n, p, x + i * p->h * p->w * n->c, b, y + i * p->oh * p->ow * n->m, xb, yb, sp};
    if (n->bands) {
      KEEL_TRY(keel_pool_for(k->pool, p->nparts, 1, band_tasks, &j));
    } else {
      KEEL_TRY(keel_pool_for(k->pool, p->nparts, 1, to_blocked, &j));
      KEEL_TRY(keel_pool_for(k->pool, p->nparts, 1, part_tasks, &j));
    }
  }
  return KEEL_OK;
}

#endif /* KEEL_HAVE_DNNL */
