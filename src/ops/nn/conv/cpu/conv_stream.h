/* conv_stream.h: keel's own kernel for convolutions whose weights are
 * many and whose output pixels are few (conv_stream.c): NhwcConv's
 * "streamed" path, which the oneDNN implementation (dnnl/conv_dnnl.c)
 * takes for good on a node's first run where keel_stream_fits holds
 * (keel_stats.streamed_convs counts those nodes).
 *
 * Why: ResNet-50's 7x7 layers read 2-9.4 MB of weights for 49 pixels, and
 * oneDNN's kernel waits on W coming from memory (a 512 -> 512 3x3 conv:
 * 1.19 ms with W cold, 0.79 ms with W in cache, in a loop of its own). This
 * kernel asks for the next chunk of W while it multiplies the current one
 * (prefetches spread over the chunk's multiply-adds) and does no work on
 * the padding: in a chain of eight such convs (min of per-node medians,
 * alternating binaries, 1 thread) 0.84 ms against oneDNN's 1.03; 1x1
 * 512 <-> 2048 convs on 7x7, 0.44 against 0.49 ms.
 *
 * Work: Y[p, m] = act(B[m] + sum over taps and channels of X * W + Z),
 * per block of 64 output channels: the sums start as B, then each chunk
 * of W (one tap, 256 channels: 64 KB, from L2) adds its products to every
 * tile of at most 7 output pixels of a row (any pixels of a 1x1 stride-1
 * conv) in 28 AVX-512 accumulators, only the pixels whose window reads
 * the tap (an interval of the tile); then the sums, plus Z, through the
 * activation, go to Y. Blocks go to the pool's threads, each streaming
 * its own part of W.
 */
#ifndef KEEL_CONV_STREAM_H
#define KEEL_CONV_STREAM_H

#include "ops/common/activation.h"
#include "ops/nn/conv/conv_nhwc.h"

/* W packed for the kernel: per block of 64 output channels, per tap, per
 * channel, 64 floats (zeros past M). */
typedef struct keel_stream_w {
  int64_t m, c, kh, kw, nb;
  float *w;                    /* nb x (kh kw c) x 64, from the node's store */
} keel_stream_w;

/* True when this CPU has the kernel (AVX-512F) and the convolution is one
 * it wins on (measured against oneDNN's brgconv, W cold): one group,
 * channels-last in and out, W at least 1 MiB, and at most 64 output pixels
 * (N x OH x OW), or at most 256 for a 1x1 window of stride 2 or more. */
KEEL_INTERNAL bool keel_stream_fits(const keel_nhwc_geom *g, int64_t kh, int64_t kw);

/* W [M, C, kh, kw] packed into *out, a block of prepared state with the
 * node's tag and the session's counter (keel_prep_alloc_counted). */
KEEL_INTERNAL keel_status keel_stream_pack(keel_heap *heap, keel_owner owner,
                                           _Atomic uint64_t *counter, const float *w, int64_t m,
                                           int64_t c, int64_t kh, int64_t kw, keel_stream_w *out);
KEEL_INTERNAL void keel_stream_free(keel_stream_w *p, keel_heap *heap, _Atomic uint64_t *counter);

/* One run (keel_nhwc_args). */
KEEL_INTERNAL keel_status keel_stream_run(keel_kctx *k, const keel_stream_w *p,
                                          const keel_nhwc_args *a);

#endif /* KEEL_CONV_STREAM_H */
