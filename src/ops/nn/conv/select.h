/* select.h: which implementation runs a convolution, and why (select.c).
 *
 * Every choice keel makes for a float convolution is here, in the order it
 * is made:
 *
 *  1. The layout pass (passes/pass_layout.c) asks keel_conv_layout_nhwc
 *     whether a Conv runs channels-last (as NhwcConv) or stays NCHW.
 *  2. Binding (exec/session.c, once per node) takes the first
 *     implementation of the node's list whose supports() accepts it:
 *     keel_conv_impls for Conv, keel_nhwc_conv_impls for NhwcConv; none:
 *     the op's reference kernel. Each implementation's `rule` says in words
 *     when it takes a node, and `keel info MODEL --nodes` prints it.
 *  3. oneDNN's implementation of NhwcConv ("onednn") decides on the node's
 *     first run, when the input's size is known, which kernel runs it for
 *     good: keel_conv_select_path.
 *
 * The predicates each kernel states about itself (keel_stream_fits,
 * keel_wg_fits, and the supports() of stem, pointwise, depthwise and
 * dense) stay beside their kernels, since they say what the kernel can do;
 * this file says which one is asked first and what wins.
 */
#ifndef KEEL_CONV_SELECT_H
#define KEEL_CONV_SELECT_H

#include "ops/kernel.h"
#include "ops/nn/conv/conv_nhwc.h"

/* The implementation lists, tried in order at binding. */
extern const keel_impl *const keel_conv_impls[];      /* Conv (NCHW)         */
extern const keel_impl *const keel_nhwc_conv_impls[]; /* NhwcConv            */

/* =========================================== 1. the layout decision */

/* Whether Conv node n (W the constant `w`, 4-D float; hw its input's
 * height and width where known at load, else NULL) should run as
 * NhwcConv. With oneDNN present and allowed (no_library false), every such
 * Conv: oneDNN's channels-last kernels, and keel's own beside them, beat
 * the NCHW kernels on every model measured. Without it, only a Conv that
 * keel's own channels-last kernel takes and wins on (the Winograd kernel,
 * 3x3 convs of 128+ channels with an output of 14x14 or more). *why: the
 * rule, for keel info and the tests. */
KEEL_INTERNAL bool keel_conv_layout_nhwc(const keel_node *n, const keel_tensor *w, bool no_library,
                                         const int64_t *hw, const char **why);
/* Whether keel_conv_layout_nhwc needs the input sizes (shape inference at
 * load): only where no oneDNN runs. */
KEEL_INTERNAL bool keel_conv_layout_wants_size(bool no_library);
/* Whether the layout pass may hand a chain's edge Transposes to its convs
 * (keel.in_nchw, keel.out_nchw): only oneDNN's implementation reads and
 * writes NCHW bands; keel's kernels without it would leave such a conv on
 * the naive reference. */
KEEL_INTERNAL bool keel_conv_takes_edges(bool no_library);
/* Whether 1-D convolutions run as 2-D ones of height 1 (the lift-conv1d
 * pass, passes/pass_conv1d.c): only where oneDNN's channels-last kernels
 * run them; keel's own 1-D path is im2col + GEMM. */
KEEL_INTERNAL bool keel_conv_lift_1d(bool no_library);
/* Whether a Conv of a channel Concat runs as the sum of its parts' convs
 * (the split-concat-conv pass, passes/pass_catconv.c): only where oneDNN's
 * channels-last kernels run them (each sum then a post-op); keel's NCHW
 * convs would add an Add pass per part. */
KEEL_INTERNAL bool keel_conv_split_concat(bool no_library);
/* supports() of keel_conv_nhwc_wg: no oneDNN runs, and the Winograd
 * kernel takes the node (keel_wg_takes). */
KEEL_INTERNAL bool keel_conv_wg_at_binding(const keel_prep_ctx *p);

/* Whether NhwcConv node n (W the constant `w`), a 1x1 conv of stride
 * s > 1 without pads, should read its input subsampled: the layout pass
 * then puts a Slice with steps (s[0], s[1]) on H and W before it and gives
 * the conv stride 1. On CPUs without AVX-512 (measured there). */
KEEL_INTERNAL bool keel_conv_subsample_first(const keel_node *n, const keel_tensor *w,
                                             int64_t s[2]);

/* ==================================== 3. the first run, in "onednn" */

/* The kernel a channels-last convolution runs on, chosen on its first run
 * (values kept: keel_stats and the tests name them by number). */
typedef enum keel_conv_path {
  KEEL_CONV_UNDECIDED = 0,
  KEEL_CONV_BANDS = 1,         /* oneDNN's direct kernel, bands of rows     */
  KEEL_CONV_DNNL_WINO = 2,     /* oneDNN's Winograd kernel (conv_wino.h)    */
  KEEL_CONV_OC_PARTS = 3,      /* oneDNN's direct kernel, parts of channels */
  KEEL_CONV_GEMV = 4,          /* keel's product by W in place (gemv.h)     */
  KEEL_CONV_STREAM = 5,        /* keel's streamed kernel (conv_stream.h)    */
  KEEL_CONV_WG = 6,            /* keel's Winograd kernel (conv_wg.h)        */
  KEEL_CONV_LOWERED = 7        /* windows as rows (im2col), oneDNN's matmul */
} keel_conv_path;

/* What the first run knows. */
typedef struct keel_conv_facts {
  const keel_nhwc_geom *g;     /* this run's geometry                      */
  int64_t kh, kw, group, m;    /* the window, groups, output channels      */
  bool has_z;                  /* a residual input (a sum post-op)         */
  bool bare;                   /* no post-ops (Z broadcasts: added by keel) */
  bool dnnl_wino;              /* the node kept oneDNN's Winograd state    */
  int splits;                  /* parts the work is cut into (keel_pool_splits) */
} keel_conv_facts;

/* Multiply-adds below which a convolution is one band: waking a worker
 * costs more than it saves. */
#define KEEL_CONV_SMALL ((int64_t)1 << 18)
/* Output pixels up to which a 1x1 convolution is a product by W. */
#define KEEL_CONV_GEMV_PIXELS 4

/* The path for an input shape the node has not met, given the path its
 * first run chose (KEEL_CONV_UNDECIDED on that first run). Some choices
 * are for good: streamed and keel's Winograd own W's only packing, so
 * every later shape takes them too; the product by W runs every later
 * shape that is as small. KEEL_CONV_DNNL_WINO may fail to plan (oneDNN
 * has no such kernel on this CPU): the caller then asks again with
 * dnnl_wino false. */
KEEL_INTERNAL keel_conv_path keel_conv_select_path(keel_conv_path so_far, const keel_conv_facts *f);
KEEL_INTERNAL const char *keel_conv_path_name(keel_conv_path p);

/* The predicates of the paths that have no kernel file of their own. */
/* A pointwise conv of at most KEEL_CONV_GEMV_PIXELS output pixels
 * (channels-last, or a 1x1 map: the same bytes either way), on a CPU with
 * keel_gemv's vector kernel. */
KEEL_INTERNAL bool keel_conv_gemv_fits(const keel_conv_facts *f);
/* One image whose few output rows would leave threads idle in bands:
 * parts of the output channels instead (at most 4). */
KEEL_INTERNAL bool keel_conv_oc_parts_win(const keel_conv_facts *f);
/* oneDNN's Winograd kernel: 3x3, stride 1, dilation 1, one group,
 * channels in and out multiples of 16 and at least 64 (fewer leave the
 * transform too little to save), no residual input, and at least 14x14
 * outputs (on ResNet-50's 7x7 layers it measured slower than the direct
 * kernel). */
KEEL_INTERNAL bool keel_conv_dnnl_wino_fits(const keel_nhwc_geom *g, bool has_z);
/* Each output pixel's window as a row of kh*kw*C inputs (im2col, per
 * band, in the worker's scratch) times W as a [kh*kw*C, M] matrix on
 * oneDNN's matmul: on CPUs without AVX-512, a KxK conv (not 1x1) of one
 * group and 128+ input channels, channels-last both sides, that is
 * strided or makes at most 7x7 outputs per image (where oneDNN's AVX2
 * direct kernel is slow; 3x3 stride-1 convs on larger maps go to the
 * Winograd kernel first). */
KEEL_INTERNAL bool keel_conv_lowered_fits(const keel_conv_facts *f);
/* The part of it for 1x1 convs on AVX-512 (few pixels, many channels). */
KEEL_INTERNAL bool keel_conv_pointwise_mm_fits(const keel_conv_facts *f);

#endif /* KEEL_CONV_SELECT_H */
