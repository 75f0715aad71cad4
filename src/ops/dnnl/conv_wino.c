/* conv_wino.c: NhwcConv's Winograd path (conv_wino.h). */
#include "ops/dnnl/conv_wino.h"

#if KEEL_HAVE_DNNL

#include "base/pool.h"
#include "base/sysmem.h"

/* What W's Winograd transform may take beyond W itself, per node: keel's
 * memory bound allows weights 10 % of slack, and ResNet-50's 128- and
 * 256-channel 3x3 layers would add 18 MB (their transforms are 1.8x and
 * 4x); its 64-channel ones add 0.1 MB each. */
#define WINO_EXTRA ((size_t)256 << 10)

struct keel_wino_plan {
  int64_t n, h, w, oh, ow;
  int nparts;
  int64_t c0[KEEL_WINO_PARTS + 1]; /* input channel parts (multiples of 16) */
  keel_dnnl_prim conv[KEEL_WINO_PARTS], to_blk[KEEL_WINO_PARTS], from_blk[KEEL_WINO_PARTS];
  dnnl_memory_desc_t x_part[KEEL_WINO_PARTS], xb_part[KEEL_WINO_PARTS]; /* to_blk: from, to */
  dnnl_memory_desc_t yb_part[KEEL_WINO_PARTS], y_part[KEEL_WINO_PARTS]; /* from_blk         */
  bool act_in_post[KEEL_WINO_PARTS];
  size_t scratch;               /* the largest conv scratchpad              */
  size_t xb_bytes, yb_bytes;    /* the blocked copies of X and Y            */
};

/* An NHWC tensor's channels [c0, c0 + cn) as a view: dims (N, cn, H, W),
 * the whole tensor's strides. */
static dnnl_status_t nhwc_view(dnnl_memory_desc_t *md, int64_t n, int64_t cn, int64_t h, int64_t w,
                               int64_t c_all) {
  dnnl_dims_t d = {n, cn, h, w}, st = {h * w * c_all, 1, w * c_all, c_all};
  return dnnl_memory_desc_init_by_strides(md, 4, d, dnnl_f32, st);
}

static dnnl_status_t blocked(dnnl_memory_desc_t *md, int64_t n, int64_t c, int64_t h, int64_t w) {
  dnnl_dims_t d = {n, c, h, w};
  return dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, dnnl_nChw16c);
}

/* The Winograd primitive for output part q (bias and the activation as
 * post-ops where oneDNN has it); its weights, packed on the node's first
 * plan. */
static keel_status make_conv(keel_wino_node *n, keel_wino_plan *p, int q) {
  int64_t mq = n->oc0[q + 1] - n->oc0[q];
  dnnl_memory_desc_t src, dst, wany;
  dnnl_dims_t wd = {mq, n->c, 3, 3}, bd = {mq}, one = {1, 1}, zero = {0, 0};
  KEEL_TRY(keel_dnnl_check(blocked(&src, 1, n->c, p->h, p->w), "src"));
  KEEL_TRY(keel_dnnl_check(blocked(&dst, 1, mq, p->oh, p->ow), "dst"));
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any),
                           "weights"));
  dnnl_memory_desc_t b_md;
  KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_a), "bias"));
  dnnl_convolution_desc_t cd;
  /* a 3x3 stride-1 conv of oh x ow outputs from h x w inputs: pads of
   * oh - h + 2 rows (the plan checked they are the node's) */
  dnnl_dims_t pl = {(p->oh - p->h + 2) / 2, (p->ow - p->w + 2) / 2};
  dnnl_dims_t pr = {p->oh - p->h + 2 - pl[0], p->ow - p->w + 2 - pl[1]};
  KEEL_TRY(keel_dnnl_check(dnnl_dilated_convolution_forward_desc_init(
                               &cd, dnnl_forward_inference, dnnl_convolution_winograd, &src, &wany,
                               n->has_bias ? &b_md : NULL, &dst, one, zero, pl, pr),
                           "Winograd descriptor"));
  dnnl_primitive_attr_t attr;
  KEEL_TRY(keel_dnnl_attr_post(&attr, &n->act, false, false, &p->act_in_post[q]));
  dnnl_primitive_desc_t pd = NULL;
  keel_status st = keel_dnnl_pd_make(&pd, &cd, attr, "Winograd primitive descriptor");
  dnnl_primitive_attr_destroy(attr);
  if (st) return keel_err(KEEL_ERR_UNSUPPORTED, "no Winograd kernel: %s", keel_last_error());
  const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  size_t plain_bytes = (size_t)(mq * n->c * 9) * sizeof(float);
  keel_dnnl_packed *pk = &n->pk[q];
  if (!pk->w && dnnl_memory_desc_get_size(wq) > plain_bytes + WINO_EXTRA / (size_t)n->nparts) {
    /* W's transform is 1.8-4x W: where that is much, memory comes first */
    dnnl_primitive_desc_destroy(pd);
    return keel_err(KEEL_ERR_UNSUPPORTED, "Winograd weights of %zu bytes for %zu",
                    dnnl_memory_desc_get_size(wq), plain_bytes);
  }
  if (pk->w && !dnnl_memory_desc_equal(wq, &pk->md)) { /* cannot happen: one layout per part */
    st = keel_err(KEEL_ERR_RUNTIME, "oneDNN: a Winograd kernel wants another weights layout");
  } else { /* the node's first plan transforms W's part; later ones read it */
    dnnl_memory_desc_t plain;
    const void *use;
    void *own = NULL; /* never made: the layouts are equal */
    bool packed_now;
    st = keel_dnnl_check(dnnl_memory_desc_init_by_tag(&plain, 4, wd, dnnl_f32, dnnl_oihw),
                         "weights");
    if (!st)
      st = keel_dnnl_weights(&n->store, pk, &plain, n->w_plain + n->oc0[q] * n->c * 9, wq, &use,
                             &own, &packed_now);
  }
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

keel_status keel_wino_plan_make(keel_wino_node *n, const keel_nhwc_geom *g, keel_wino_plan **out) {
  const keel_win *w = &g->w;
  keel_wino_plan *p = keel_sys_calloc(1, sizeof *p);
  if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a Winograd convolution's primitives");
  p->n = g->n, p->h = w->in[0], p->w = w->in[1], p->oh = w->out[0], p->ow = w->out[1];
  if (!n->nparts) { /* the node's parts of output channel blocks */
    int64_t mb = n->m / 16;
    n->nparts = (int)KEEL_MAX(1, KEEL_MIN(KEEL_MIN((int64_t)n->splits, mb), KEEL_WINO_PARTS));
    for (int q = 0; q <= n->nparts; q++) n->oc0[q] = 16 * (mb * q / n->nparts);
  }
  int64_t cb = n->c / 16;
  p->nparts = n->nparts;
  for (int q = 0; q <= p->nparts; q++) p->c0[q] = 16 * (cb * q / p->nparts);
  keel_status st = KEEL_OK;
  /* the pads this plan's primitive uses must be the node's */
  int64_t pt = (p->oh - p->h + 2) / 2, pl = (p->ow - p->w + 2) / 2;
  if (pt != w->pb[0] || pl != w->pb[1])
    st = keel_err(KEEL_ERR_UNSUPPORTED, "Winograd path: asymmetric pads");
  for (int q = 0; q < p->nparts && !st; q++) {
    int64_t cq = p->c0[q + 1] - p->c0[q], mq = n->oc0[q + 1] - n->oc0[q];
    st = make_conv(n, p, q);
    if (!st)
      st = keel_dnnl_check(nhwc_view(&p->x_part[q], 1, cq, p->h, p->w, n->c), "an input view");
    if (!st) st = keel_dnnl_check(blocked(&p->xb_part[q], 1, cq, p->h, p->w), "an input part");
    if (!st && cq) st = keel_dnnl_reorder_prim(&p->x_part[q], &p->xb_part[q], n->fig, &p->to_blk[q]);
    if (!st) st = keel_dnnl_check(blocked(&p->yb_part[q], 1, mq, p->oh, p->ow), "an output part");
    if (!st)
      st = keel_dnnl_check(nhwc_view(&p->y_part[q], 1, mq, p->oh, p->ow, n->m), "an output view");
    if (!st) st = keel_dnnl_reorder_prim(&p->yb_part[q], &p->y_part[q], n->fig, &p->from_blk[q]);
  }
  if (st) {
    keel_wino_plan_free(n, p);
    return st;
  }
  p->xb_bytes = (size_t)(n->c * p->h * p->w) * sizeof(float);
  p->yb_bytes = (size_t)(n->m * p->oh * p->ow) * sizeof(float);
  *out = p;
  return KEEL_OK;
}

typedef struct wino_job {
  const keel_wino_node *n;
  const keel_wino_plan *p;
  const float *x, *b;           /* this image                             */
  float *y, *xb, *yb;
  uint8_t *scratch;
} wino_job;

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

static keel_status conv_parts(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wino_job *j = ctx;
  const keel_wino_plan *p = j->p;
  const keel_wino_node *n = j->n;
  for (int64_t q = q0; q < q1; q++) {
    int64_t mq = n->oc0[q + 1] - n->oc0[q], len = mq * p->oh * p->ow;
    float *yb = j->yb + n->oc0[q] * p->oh * p->ow;
    keel_dnnl_op_args o = {j->xb, n->pk[q].w, j->b ? j->b + n->oc0[q] : NULL, yb,
                           p->scratch ? j->scratch + (size_t)worker * p->scratch : NULL,
                           p->scratch};
    KEEL_TRY(keel_dnnl_exec_op(p->conv[q].p, &o));
    if (!p->act_in_post[q]) keel_act_apply_fast_f32(&n->act, yb, len); /* any layout */
    keel_dnnl_arg r[2] = {{DNNL_ARG_FROM, &p->yb_part[q], yb},
                          {DNNL_ARG_TO, &p->y_part[q], j->y + n->oc0[q]}};
    KEEL_TRY(keel_dnnl_exec(p->from_blk[q].p, 2, r));
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
    KEEL_TRY(keel_pool_for(k->pool, p->nparts, 1, to_blocked, &j));
    KEEL_TRY(keel_pool_for(k->pool, p->nparts, 1, conv_parts, &j));
  }
  return KEEL_OK;
}

#endif /* KEEL_HAVE_DNNL */
