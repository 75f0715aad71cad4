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
 * A run, per group of at most 256 tiles and 4 MiB of V and M (the
 * scratch's bound): V = Bᵀ d B
 * of each tile's 4x4 input (zeros in the padding); then per task (a block
 * of 64 output channels, half of the 16 ξ) U[ξ] = G g Gᵀ from W (kept as
 * [C][9][M], the file's bytes in another order: no second copy of W for
 * good, memory first) into the worker's own panel, which stays in L2 while
 * the products V[ξ] x U[ξ] run on the tile kernel (tile512.h: 7 tiles by
 * 64 outputs in 28 AVX-512 accumulators; without AVX-512, one product of
 * the group's tiles by the panel on keel's GEMM); then Y = Aᵀ m A of each
 * tile plus B (+ Z), through the activation. Each phase splits over the
 * pool's threads. The transforms are written once (conv_wg_xf.h) and
 * built for AVX-512 (16 channels a step) and AVX2 (8). On an AVX2-only
 * AMD EPYC (Zen 3), ResNet-50's 3x3 convs went from 45-47 ms to 37-38.5
 * per run on one thread (keel bench --flops, "Conv dense KxK", runs
 * alternating; the machine's noise was several ms). Float error: F(2x2, 3x3)'s transforms add a few ulps (the
 * tests allow twice the direct kernels' tolerance).
 */
#ifndef KEEL_CONV_WG_H
#define KEEL_CONV_WG_H

#include "ops/nn/conv/conv_nhwc.h"

/* W packed for the kernel: [C][kh kw][M]. */
typedef struct keel_wg_w {
  int64_t m, c;
  float *w;
} keel_wg_w;

/* True on AVX-512F or AVX2+FMA CPUs for a 3x3 window of stride 1 and dilation 1, one
 * group, pads of at most 2, C a multiple of 16 and at least 128 (on
 * ResNet-50's 64-channel layers oneDNN's Winograd measured 0.2-0.3 ms
 * faster), M a multiple of 64, channels-last both sides, and at least
 * 14x14 output pixels per image (on 7x7 maps, with W of 2-9 MB,
 * transforming W costs more than it saves: the streamed kernel's). */
KEEL_INTERNAL bool keel_wg_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw);
/* What the kernel can compute for NhwcConv node n whatever the map's size:
 * the CPU, W (a constant float [M, C, 3, 3]: C >= 128 by 16s, M by 64s)
 * and the attributes (stride 1, dilation 1, one group, pads of at most 2,
 * channels-last both sides). */
KEEL_INTERNAL bool keel_wg_takes(const keel_node *n, const keel_tensor *w);
/* NhwcConv on this kernel from binding, where no oneDNN runs (select.c:
 * keel_conv_wg_at_binding). */
extern const keel_impl keel_conv_nhwc_wg;
KEEL_INTERNAL keel_status keel_wg_pack(keel_heap *heap, keel_owner owner,
                                       _Atomic uint64_t *counter, const float *w, int64_t m,
                                       int64_t c, keel_wg_w *out);
KEEL_INTERNAL void keel_wg_free(keel_wg_w *p, keel_heap *heap, _Atomic uint64_t *counter);
KEEL_INTERNAL keel_status keel_wg_run(keel_kctx *k, const keel_wg_w *p, const keel_nhwc_args *a);

#endif /* KEEL_CONV_WG_H */
