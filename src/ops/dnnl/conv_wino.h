/* conv_wino.h: NhwcConv's Winograd path (conv_wino.c), for the 3x3
 * stride-1 convolutions oneDNN has Winograd kernels for (AVX-512 CPUs):
 * 1.8-2.1x its direct kernel on ResNet-50's 3x3 layers of 14x14 and more
 * (measured), reorders to and from its blocked layout included.
 *
 * Those kernels read and write oneDNN's blocked layout (16 channels
 * innermost). A run cuts the image into bands of output rows, one per pool
 * thread: each band's input rows (and the one or two above and below that
 * its windows read) are reordered into a blocked scratch copy, convolved
 * by one Winograd primitive over every channel, the activation keel
 * applies itself run, and the band reordered back into Y's rows, all in
 * one task. Where the rows are too few for two bands of
 * KEEL_WINO_BAND_ROWS (small maps on 2+ threads) a node cuts the output
 * channel blocks into parts instead: the input reordered in parts of its
 * channels, then one primitive per part of W over the whole image. Parts
 * transform the whole input once per part, which on 64-channel layers
 * cost as much as the product: ResNet-50's 56x56 64 -> 64 layers ran
 * 1.16x faster on 2 threads than on 1 in two parts, 1.8x in two bands
 * (Intel Xeon, Emerald Rapids, `keel run --trace`). A node takes bands or
 * parts on its first run (parts where oneDNN has no kernel for a band),
 * and this path or the direct one, for good: W's Winograd transform,
 * whole or per part, is made then. oneDNN's F(2,3) kernel lays the
 * transform out by the map's size, so a later shape may find no kernel
 * that reads it: that shape runs direct (conv_dnnl.c keeps W for it).
 * Among oneDNN's Winograd kernels the first whose transform costs at most
 * 256 KB more than W is taken (1.8x W for F(2,3), 4x for F(4,3)): memory
 * comes first; where none, the node stays direct.
 */
#ifndef KEEL_CONV_WINO_H
#define KEEL_CONV_WINO_H

#include "ops/common/activation.h"
#include "ops/nn/conv/conv_nhwc.h"
#include "ops/dnnl/dnnl_glue.h"

#if KEEL_HAVE_DNNL

#define KEEL_WINO_PARTS 8
/* A band's fewest output rows: its halo (up to 2 input rows read twice)
 * and its last tile row stay a small part of it. */
#define KEEL_WINO_BAND_ROWS 8

/* What the path needs of the node. */
typedef struct keel_wino_node {
  keel_dnnl_store store;         /* where its weights' blocks come from  */
  keel_dnnl_figures *fig;
  int splits;                     /* parts the work is cut into          */
  int64_t c, m;
  bool has_bias;
  keel_act act;
  const float *w_plain;         /* W as (M, C, 3, 3), until packed         */
  /* the node's weights: one Winograd transform per output part (one
   * part where it runs in bands), made by the first plan (under the
   * node's cache lock) */
  bool bands;
  int nparts;
  int64_t oc0[KEEL_WINO_PARTS + 1];
  keel_dnnl_packed pk[KEEL_WINO_PARTS];
} keel_wino_node;

typedef struct keel_wino_plan keel_wino_plan;

/* Which convolutions take this path: keel_conv_dnnl_wino_fits
 * (ops/nn/conv/select.h). */
/* The primitives for one input shape (and the node's weights on its first
 * call). KEEL_ERR_UNSUPPORTED when oneDNN has no Winograd kernel here. */
KEEL_INTERNAL keel_status keel_wino_plan_make(keel_wino_node *n, const keel_nhwc_geom *g,
                                              keel_wino_plan **out);
KEEL_INTERNAL void keel_wino_plan_free(keel_wino_node *n, keel_wino_plan *p);
/* Frees the node's weights. */
KEEL_INTERNAL void keel_wino_node_free(keel_wino_node *n);

/* Y (NHWC, allocated) from X (NHWC) and the bias (or NULL). */
KEEL_INTERNAL keel_status keel_wino_run(keel_kctx *k, const keel_wino_node *n,
                                        const keel_wino_plan *p, const keel_nhwc_geom *g,
                                        const float *x, const float *b, float *y);

#endif
#endif /* KEEL_CONV_WINO_H */
