/* conv_nhwc.c: NhwcConv (conv_nhwc.h): the geometry every implementation
 * shares, the residual's broadcast, and the reference kernel, plain loops
 * over the output (one (image, output row) per pool task), against which
 * tests/test_conv_nhwc.c checks the oneDNN implementation. */
#include "ops/nn/conv/conv_nhwc.h"
#include "ops/nn/conv/select.h"

#include "base/pool.h"
#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/common/transpose.h"

keel_status keel_nhwc_geom_of(keel_kctx *k, const keel_tensor *x, const keel_tensor *wt,
                              const keel_tensor *b, keel_nhwc_geom *g) {
  if (x->dtype != KEEL_FLOAT || wt->dtype != KEEL_FLOAT || (b && b->dtype != KEEL_FLOAT))
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "NhwcConv (domain ai.keel.internal, opset 1): X %s, W %s%s%s: only float32",
                    keel_dtype_name((keel_dtype)x->dtype), keel_dtype_name((keel_dtype)wt->dtype),
                    b ? ", B " : "", b ? keel_dtype_name((keel_dtype)b->dtype) : "");
  if (x->rank != 4 || wt->rank != 4)
    return keel_err(KEEL_ERR_SHAPE, "X (N, H, W, C) has rank %d and W rank %d: expected 4 and 4",
                    x->rank, wt->rank);
  int64_t group = keel_k_attr_i(k, "group", 1);
  bool in_nchw = keel_k_attr_i(k, "keel.in_nchw", 0) != 0;
  int hd = in_nchw ? 2 : 1; /* X's first spatial dim */
  *g = (keel_nhwc_geom){.n = x->shape[0], .c = x->shape[in_nchw ? 1 : 3], .m = wt->shape[0],
                        .group = group, .in_nchw = in_nchw,
                        .out_nchw = keel_k_attr_i(k, "keel.out_nchw", 0) != 0};
  if (group < 1 || g->m % group)
    return keel_err(KEEL_ERR_INVALID_MODEL, "group %lld does not divide W's %lld output channels",
                    (long long)group, (long long)g->m);
  g->cg = wt->shape[1], g->mg = g->m / group;
  if (g->cg * group != g->c)
    return keel_err(KEEL_ERR_SHAPE, "X has %lld channels but W expects %lld x group %lld",
                    (long long)g->c, (long long)g->cg, (long long)group);
  if (b && (b->rank != 1 || b->shape[0] != g->m)) {
    char sb[128];
    return keel_err(KEEL_ERR_SHAPE, "B has shape %s, expected [%lld]",
                    keel_shape_str(b->rank, b->shape, sb, sizeof sb), (long long)g->m);
  }
  keel_win *w = &g->w;
  w->nd = 2;
  int nk;
  const int64_t *ks = keel_k_attr_ints(k, "kernel_shape", &nk);
  if (nk && nk != 2)
    return keel_err(KEEL_ERR_INVALID_MODEL, "kernel_shape has %d values for 2 spatial dims", nk);
  for (int i = 0; i < 2; i++) {
    w->in[i] = x->shape[hd + i], w->k[i] = wt->shape[2 + i];
    if (w->k[i] < 1) return keel_err(KEEL_ERR_SHAPE, "W's kernel dim %d is %lld", i, (long long)w->k[i]);
    if (nk && ks[i] != w->k[i])
      return keel_err(KEEL_ERR_INVALID_MODEL, "kernel_shape[%d] = %lld but W's kernel has %lld", i,
                      (long long)ks[i], (long long)w->k[i]);
  }
  KEEL_TRY(keel_win_read(k, w));
  KEEL_TRY(keel_win_forward(w, false));
  g->yshape[0] = g->n, g->yshape[1] = w->out[0], g->yshape[2] = w->out[1], g->yshape[3] = g->m;
  if (g->out_nchw)
    g->yshape[1] = g->m, g->yshape[2] = w->out[0], g->yshape[3] = w->out[1];
  return KEEL_OK;
}

/* A band of rows is one block of a 2-D transpose each way: [C][H*W]
 * (the band's columns) <-> [rows*W][C], on the Transpose op's tiles
 * (ops/common/transpose.c). Plain loops here were 0.3 ms of a
 * ShuffleNet's 3.8 ms (the convs after each channel shuffle read NCHW:
 * 116-464 channels), Intel Xeon, one thread. */
void keel_nchw_rows_to_nhwc(const float *x, int64_t c, int64_t h, int64_t w, int64_t r0,
                            int64_t nr, float *dst) {
  keel_tr_pick(sizeof(float))(x + r0 * w, dst, c, h * w, 0, c, 0, nr * w);
}

void keel_nhwc_rows_to_nchw(const float *src, int64_t c, int64_t h, int64_t w, int64_t r0,
                            int64_t nr, float *y) {
  keel_tr_pick(sizeof(float))(src, y + r0 * w, h * w, c, 0, nr * w, 0, c);
}

keel_status keel_nhwc_z_shape(const keel_tensor *z, const int64_t cshape[4], int64_t yshape[4],
                              bool *same) {
  if (z->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_SHAPE, "the residual Z is %s, expected float32",
                    keel_dtype_name((keel_dtype)z->dtype));
  if (z->rank > 4) return keel_err(KEEL_ERR_SHAPE, "the residual Z has rank %d (> 4)", z->rank);
  int r;
  KEEL_TRY(keel_broadcast_shape(4, cshape, z->rank, z->shape, &r, yshape));
  *same = z->rank == 4 && !memcmp(z->shape, cshape, sizeof(int64_t) * 4) &&
          !memcmp(yshape, cshape, sizeof(int64_t) * 4);
  return KEEL_OK;
}

keel_status keel_nhwc_in(keel_kctx *k, keel_nhwc_io *io) {
  memset(io, 0, sizeof *io);
  KEEL_TRY(keel_k_in(k, 0, &io->x));
  KEEL_TRY(keel_k_in(k, 1, &io->w));
  KEEL_TRY(keel_k_in_opt(k, 2, &io->b));
  KEEL_TRY(keel_k_in_opt(k, 3, &io->z));
  return keel_nhwc_geom_of(k, io->x, io->w, io->b, &io->g);
}

keel_status keel_nhwc_out(keel_kctx *k, keel_nhwc_io *io, bool z_apart) {
  const keel_nhwc_geom *g = &io->g;
  const keel_tensor *z = io->z;
  int64_t yshape[4];
  bool same = true;
  memcpy(yshape, g->yshape, sizeof yshape);
  if (z) KEEL_TRY(keel_nhwc_z_shape(z, g->yshape, yshape, &same));
  same = same && !z_apart;
  /* not Z's buffer when Z is X too: kernels read X after writing Y */
  if (z && same && z->data != io->x->data)
    KEEL_TRY(keel_k_reuse(k, 0, 3, KEEL_FLOAT, 4, yshape, &io->y));
  else
    KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, yshape, &io->y));
  io->bare = z && !same;
  io->z_in_y = z && same && io->y->data == z->data;
  io->zc = z && same && !io->z_in_y ? z->data : NULL;
  io->c = io->y->data;
  if (io->bare && keel_tensor_numel(io->y)) {
    void *t;
    KEEL_TRY(keel_k_scratch_n(k, g->n * g->w.out[0] * g->w.out[1] * g->m, sizeof(float), &t));
    io->c = t;
  }
  return KEEL_OK;
}

keel_status keel_nhwc_finish(keel_kctx *k, const keel_nhwc_io *io) {
  if (!io->bare || !keel_tensor_numel(io->y)) return KEEL_OK;
  keel_act act;
  KEEL_TRY(keel_act_of(k->node, &act));
  const keel_nhwc_geom *g = &io->g;
  int64_t core[4] = {g->n, g->w.out[0], g->w.out[1], g->m}; /* the product, NHWC */
  keel_bcast_add_f32(io->c, 4, core, io->z, io->y);
  keel_act_apply_fast_f32(&act, io->y->data, keel_tensor_numel(io->y));
  return KEEL_OK;
}

/* ========================================================= reference */

typedef struct ref_job {
  const keel_nhwc_geom *g;
  const float *x, *w, *b;
  float *y;
} ref_job;

static keel_status ref_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
  const ref_job *j = ctx;
  const keel_nhwc_geom *g = j->g;
  const keel_win *w = &g->w;
  int64_t H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
  int64_t KH = w->k[0], KW = w->k[1];
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = r / OH, oh = r % OH;
    for (int64_t ow = 0; ow < OW; ow++) {
      float *yp = j->y + ((n * OH + oh) * OW + ow) * g->m;
      for (int64_t m = 0; m < g->m; m++) {
        int64_t grp = m / g->mg;
        float acc = j->b ? j->b[m] : 0.0f;
        for (int64_t kh = 0; kh < KH; kh++) {
          int64_t ih = oh * w->s[0] - w->pb[0] + kh * w->d[0];
          if (ih < 0 || ih >= H) continue;
          for (int64_t kw = 0; kw < KW; kw++) {
            int64_t iw = ow * w->s[1] - w->pb[1] + kw * w->d[1];
            if (iw < 0 || iw >= W) continue;
            const float *xp = j->x + ((n * H + ih) * W + iw) * g->c + grp * g->cg;
            const float *wp = j->w + m * g->cg * KH * KW + kh * KW + kw;
            for (int64_t ci = 0; ci < g->cg; ci++) acc += xp[ci] * wp[ci * KH * KW];
          }
        }
        yp[m] = acc;
      }
    }
  }
  (void)worker;
  return KEEL_OK;
}

static keel_status op_nhwc_conv(keel_kctx *k) {
  keel_nhwc_io io; /* the reference makes Y its own way: always new, Z added after */
  KEEL_TRY(keel_nhwc_in(k, &io));
  const keel_tensor *x = io.x, *wt = io.w, *b = io.b, *z = io.z;
  keel_nhwc_geom g = io.g;
  keel_act act;
  KEEL_TRY(keel_act_of(k->node, &act));
  int64_t yshape[4];
  bool same = true;
  memcpy(yshape, g.yshape, sizeof yshape);
  if (z) KEEL_TRY(keel_nhwc_z_shape(z, g.yshape, yshape, &same));
  if (z && g.out_nchw)
    return keel_err(KEEL_ERR_INVALID_MODEL, "keel.out_nchw with a residual Z");
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, yshape, &y));
  int64_t ny = keel_tensor_numel(y), nc = g.n * g.w.out[0] * g.w.out[1] * g.m;
  if (ny == 0) return KEEL_OK;
  float *c = y->data;
  if (!same || g.out_nchw) {
    void *s;
    KEEL_TRY(keel_k_scratch_n(k, nc, sizeof(float), &s));
    c = s;
  }
  const float *xs = x->data;
  if (g.in_nchw) { /* the reference stages X channels-last */
    void *s;
    int64_t H = g.w.in[0], W = g.w.in[1];
    KEEL_TRY(keel_k_scratch_n(k, g.n * g.c * H * W, sizeof(float), &s));
    for (int64_t n = 0; n < g.n; n++)
      keel_nchw_rows_to_nhwc(xs + n * g.c * H * W, g.c, H, W, 0, H, (float *)s + n * g.c * H * W);
    xs = s;
  }
  if (nc) {
    ref_job j = {&g, xs, wt->data, b ? b->data : NULL, c};
    KEEL_TRY(keel_pool_for(k->pool, g.n * g.w.out[0], 1, ref_rows, &j));
  }
  int64_t core[4] = {g.n, g.w.out[0], g.w.out[1], g.m};
  if (z) keel_bcast_add_f32(c, 4, core, z, y);
  if (g.out_nchw) {
    int64_t P = g.w.out[0] * g.w.out[1];
    for (int64_t n = 0; n < g.n; n++)
      keel_nhwc_rows_to_nchw(c + n * P * g.m, g.m, g.w.out[0], g.w.out[1], 0, g.w.out[0],
                             (float *)y->data + n * P * g.m);
  }
  keel_act_apply_f32(&act, y->data, ny);
  return KEEL_OK;
}

bool keel_nhwc_node_win(const keel_node *n, int64_t kh, int64_t kw, keel_win *w) {
  keel_kctx k = {.node = n};
  *w = (keel_win){.nd = 2, .k = {kh, kw}};
  if (!keel_win_read(&k, w)) return true;
  keel_err_clear();
  return false;
}

keel_status keel_nhwc_prep_taps(const keel_prep_ctx *p, int64_t m, int64_t taps, int64_t mpad,
                                void **state) {
  float *dst;
  KEEL_TRY(keel_prep_alloc(p, sizeof(float) * (size_t)(taps * mpad), (void **)&dst));
  const float *src = p->consts[1]->data;
  for (int64_t t = 0; t < taps; t++)
    for (int64_t c = 0; c < mpad; c++) dst[t * mpad + c] = c < m ? src[c * taps + t] : 0.0f;
  *state = dst;
  return KEEL_OK;
}

const keel_opdef keel_ops_conv_nhwc[] = {
    {KEEL_NHWC_DOMAIN, "NhwcConv", 1, KEEL_OPSET_MAX, op_nhwc_conv, 0, KEEL_T(KEEL_FLOAT), keel_nhwc_conv_impls},
    {0},
};
