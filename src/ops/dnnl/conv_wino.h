/* conv_wino.h: NhwcConv's Winograd path (conv_wino.c), for the 3x3
 * stride-1 convolutions oneDNN has Winograd kernels for (AVX-512 CPUs):
 * 1.8-2.1x its direct kernel on ResNet-50's 3x3 layers of 14x14 and more
 * (measured), reorders to and from its blocked layout included.
 *
 * Those kernels read and write oneDNN's blocked layout (16 channels
 * innermost), so a run is: the NHWC input reordered into a blocked scratch
 * copy (one part of its channel blocks per pool thread), then one
 * Winograd primitive per part of the output channel blocks (a part is a
 * contiguous chunk of the blocked output), each followed, in the same
 * task, by the activation keel applies itself and the reorder of its
 * chunk back into Y's channels. A node takes this path or the direct one
 * for good on its first run (its weights exist in one form only: W's
 * Winograd transform per part, made then, after which the file's pages go
 * back). A transform more than 256 KB bigger than W is refused (the node
 * stays direct): it is 1.8x to 4x W, and memory comes first.
 */
#ifndef KEEL_CONV_WINO_H
#define KEEL_CONV_WINO_H

#include "ops/common/activation.h"
#include "ops/nn/conv/conv_nhwc.h"
#include "ops/dnnl/dnnl_glue.h"

#if KEEL_HAVE_DNNL

#define KEEL_WINO_PARTS 8

/* What the path needs of the node. */
typedef struct keel_wino_node {
  keel_dnnl_store store;         /* where its weights' blocks come from  */
  keel_dnnl_figures *fig;
  int splits;                     /* parts the work is cut into          */
  int64_t c, m;
  bool has_bias;
  keel_act act;
  const float *w_plain;         /* W as (M, C, 3, 3), until packed         */
  /* the node's weights: one Winograd transform per output part, made by
   * the first plan (under the node's cache lock) */
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
