/* conv_wg.h: keel's own Winograd F(2x2, 3x3) kernel for 3x3 stride-1
 * convolutions on channels-last tensors (conv_wg.c): NhwcConv's path 6,
 * which the oneDNN implementation (dnnl/conv_dnnl.c) takes for good on a
 * node's first run where keel_wg_fits holds (keel_stats.winograd_convs
 * counts those nodes).
 *
 * Why: a 3x3 conv makes each 2x2 block of outputs from a 4x4 block of
 * inputs; in the transformed domain that is 16 products per channel pair
 * instead of 36 multiply-adds, so the multiply-adds are 2.25x fewer.
 * oneDNN's Winograd kernels (F(4x4, 3x3), blocked layouts) measured slower
 * than its direct kernel on ResNet-50's 128- and 256-channel layers and
 * keep W's transform (1.8-4x W) for good; this one, in a loop of its own on
 * this 2-vCPU EPYC: a 128-channel 3x3 conv on 28x28 0.51 ms against
 * oneDNN's direct 0.89, 256 channels on 14x14 0.65 against 0.89.
 *
 * A run: U = G g Gᵀ for every (input, output) channel pair from W (kept
 * as [C][9][M], the file's bytes in another order), once per run, into
 * scratch (no second copy of W for good: memory first); then per group of
 * at most WG_GROUP tiles: V = Bᵀ d B of each tile's 4x4 input (zeros in
 * the padding), 16 products V[ξ] x U[ξ] (tiles of 7 by 64 output channels
 * in 28 AVX-512 accumulators, as conv_stream.c's), and Y = Aᵀ m A of each
 * tile plus B (+ Z), through the activation. Each phase splits over the
 * pool's threads. Float error: transforms of F(2x2, 3x3) add a few ulps
 * (the tests hold it to the direct kernels' tolerance).
 */
#ifndef KEEL_CONV_WG_H
#define KEEL_CONV_WG_H

#include "conv_nhwc.h"

/* W packed for the kernel: [C][kh kw][M]. */
typedef struct keel_wg_w {
  int64_t m, c;
  float *w;
} keel_wg_w;

/* True on AVX-512F CPUs for a 3x3 window of stride 1 and dilation 1, one
 * group, pads of at most 2, C a multiple of 16 and M of 64 (both at least
 * 64), channels-last both sides, and at least 14x14 output pixels per
 * image (on 7x7 maps, with W of 2-9 MB, transforming W costs more than it
 * saves). */
KEEL_INTERNAL bool keel_wg_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw);
KEEL_INTERNAL keel_status keel_wg_pack(keel_heap *heap, keel_owner owner,
                                       _Atomic uint64_t *counter, const float *w, int64_t m,
                                       int64_t c, keel_wg_w *out);
KEEL_INTERNAL void keel_wg_free(keel_wg_w *p, keel_heap *heap, _Atomic uint64_t *counter);
KEEL_INTERNAL keel_status keel_wg_run(keel_kctx *k, const keel_wg_w *p, const keel_nhwc_args *a);

#endif /* KEEL_CONV_WG_H */
