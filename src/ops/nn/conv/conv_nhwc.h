/* conv_nhwc.h: NhwcConv (domain ai.keel.internal, opset 1), the 2-D float
 * convolution the layout pass (passes/pass_layout.c) puts in place of a Conv
 * with a constant W, on channels-last tensors:
 *
 *   Y = act(conv(X, W) + B + Z)
 *
 *   X  [N, H, W, C]               float32, channels last
 *   W  [M, C/group, kh, kw]       float32, ONNX's layout (a constant)
 *   B  [M]                        optional
 *   Z  optional: a residual added before the activation (the pass folds an
 *      Add into the conv); broadcast against [N, OH, OW, M] as Add would,
 *      so Y takes the broadcast shape
 *   Y  [N, OH, OW, M]
 *
 * Attributes: Conv's (kernel_shape, strides, pads, dilations, auto_pad,
 * group) and the fused activation of ops/common/activation.h, applied after Z.
 * At the edges of a channels-last chain the layout pass may give the conv
 * its neighbour Transpose's work: keel.in_nchw (X is [N, C, H, W]) and
 * keel.out_nchw (Y is [N, M, OH, OW]; not with Z), each band then moved
 * between the layouts in cache.
 * The reference kernel (conv_nhwc.c) is naive loops. On AVX-512 CPUs keel's
 * own kernels take, in this order, convs of 1-4 input channels (a
 * network's stem, conv_stem.c), 1x1 convs of few input channels
 * (conv_pw.c) and 5x5 depthwise convs (conv_dw.c); where no oneDNN runs,
 * keel's Winograd kernel takes the 3x3 convs of 128+ channels from
 * binding (cpu/conv_wg.h); the others run on the
 * oneDNN implementation (dnnl/conv_dnnl.c) when keel has oneDNN, which
 * hands a conv of large W and few output pixels to keel's streamed
 * kernel (conv_stream.h), and a 3x3 of 128+ channels on a larger map to
 * keel's Winograd kernel (conv_wg.h), on its first run. The fast
 * kernels share the call's set-up below (keel_nhwc_in, keel_nhwc_out,
 * keel_nhwc_finish): inputs, geometry, Y (in Z's buffer where it may be)
 * and a residual that broadcasts.
 */
#ifndef KEEL_CONV_NHWC_H
#define KEEL_CONV_NHWC_H

#include "ops/common/activation.h"
#include "ops/common/conv_util.h"

#define KEEL_NHWC_DOMAIN "ai.keel.internal"

/* The geometry of one call. */
typedef struct keel_nhwc_geom {
  keel_win w;                  /* 2 spatial dims, pads resolved           */
  int64_t n, c, m, group, cg, mg; /* batch, channels in/out, groups, per group */
  bool in_nchw, out_nchw;      /* keel.in_nchw, keel.out_nchw             */
  int64_t yshape[4];           /* [N, OH, OW, M], or [N, M, OH, OW]       */
} keel_nhwc_geom;

/* Rows [r0, r0 + nr) of one NCHW image (C x H x W) as NHWC [nr, W, C]
 * into dst, and back: NHWC [nr, W, C] into those rows of y. */
KEEL_INTERNAL void keel_nchw_rows_to_nhwc(const float *x, int64_t c, int64_t h, int64_t w,
                                          int64_t r0, int64_t nr, float *dst);
KEEL_INTERNAL void keel_nhwc_rows_to_nchw(const float *src, int64_t c, int64_t h, int64_t w,
                                          int64_t r0, int64_t nr, float *y);

/* Checks X (NHWC), W and B against each other and the attributes and
 * resolves the window (the messages name what is wrong). */
KEEL_INTERNAL keel_status keel_nhwc_geom_of(keel_kctx *k, const keel_tensor *x, const keel_tensor *w,
                                            const keel_tensor *b, keel_nhwc_geom *g);

/* Z's part: the output shape of conv (cshape) + z (rank <= 4, numpy
 * broadcasting); *same when it is cshape itself. */
KEEL_INTERNAL keel_status keel_nhwc_z_shape(const keel_tensor *z, const int64_t cshape[4],
                                            int64_t yshape[4], bool *same);

/* True for a 1x1 window of stride 1 without pads: pixels map to pixels. */
static inline bool keel_win_is_pointwise(const keel_win *w) {
  for (int i = 0; i < 2; i++)
    if (w->k[i] != 1 || w->s[i] != 1 || w->pb[i] || w->pe[i]) return false;
  return true;
}

/* One call of a fast NhwcConv kernel: its inputs and geometry
 * (keel_nhwc_in), then Y and where the product goes (keel_nhwc_out), then,
 * when Z broadcasts, Z and the activation (keel_nhwc_finish). */
typedef struct keel_nhwc_io {
  const keel_tensor *x, *w, *b, *z; /* B, Z: NULL when absent               */
  keel_nhwc_geom g;
  keel_tensor *y;
  float *c;                      /* the product's destination: Y, or scratch */
  const float *zc;               /* Z for the kernel to add (Y's shape, not in
                                    Y already), or NULL                     */
  bool z_in_y;                   /* Y took Z's buffer: it holds Z already   */
  bool bare;                     /* Z is added after (keel_nhwc_finish), and the
                                    activation with it: the kernel applies
                                    neither                                 */
} keel_nhwc_io;
KEEL_INTERNAL keel_status keel_nhwc_in(keel_kctx *k, keel_nhwc_io *io);
/* What keel's own kernels behind the oneDNN implementation take for one
 * run (conv_stream.h, conv_wg.h): X (NHWC), B or NULL, Z of Y's shape or
 * NULL (z_in_y: Y holds Z already), Y (NHWC), the activation
 * (KEEL_ACT_OFF for a bare product: no Z either). */
typedef struct keel_nhwc_args {
  const keel_nhwc_geom *g;
  const float *x, *b, *z;
  bool z_in_y;
  float *y;
  keel_act act;
} keel_nhwc_args;
#define KEEL_ACT_OFF ((keel_act){KEEL_ACT_NONE, 0, 0})
/* Y, taking Z's buffer when Z has Y's shape, dies here and is not X too;
 * a scratch product (bare) when Z broadcasts or `z_apart` (a kernel that
 * cannot add this Z itself). */
KEEL_INTERNAL keel_status keel_nhwc_out(keel_kctx *k, keel_nhwc_io *io, bool z_apart);
KEEL_INTERNAL keel_status keel_nhwc_finish(keel_kctx *k, const keel_nhwc_io *io);

/* For keel's own implementations' binding and packing (conv_stem.c,
 * conv_pw.c, conv_dw.c): an int attribute that is set and not 0; the
 * prepared state of W's taps (W as m rows of `taps` values) as `taps` rows
 * of mpad floats, the m values of each tap then zeros: the output (or
 * depthwise) channels of one tap contiguous, for vector loads along them. */
static inline bool keel_nhwc_attr_on(const keel_node *n, const char *name) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->i;
}
/* The node's window attributes for a kh x kw kernel (strides, dilations,
 * explicit pads) into *w; false when they do not read (the reference's run
 * then words the error). */
KEEL_INTERNAL bool keel_nhwc_node_win(const keel_node *n, int64_t kh, int64_t kw, keel_win *w);
KEEL_INTERNAL keel_status keel_nhwc_prep_taps(const keel_prep_ctx *p, int64_t m, int64_t taps,
                                              int64_t mpad, void **state);

/* Convolutions of 1-4 input channels on AVX-512 CPUs (conv_stem.c), tried
 * first. */
extern const keel_impl keel_conv_nhwc_stem;
/* 1x1 convolutions of few input channels on AVX-512 CPUs (conv_pw.c), tried
 * next. */
extern const keel_impl keel_conv_nhwc_pw;
/* Depthwise 3x3 and 5x5 convolutions on AVX-512 CPUs (conv_dw.c), tried
 * next. */
extern const keel_impl keel_conv_nhwc_dw;
#if KEEL_HAVE_DNNL
extern const keel_impl keel_conv_nhwc_dnnl;
#endif

#endif /* KEEL_CONV_NHWC_H */
