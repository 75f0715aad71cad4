/* dev_conv.h: the `conv` kernel group (device.h): float32 convolutions,
 * pools and resampling over NCHW tensors, for Conv and ConvTranspose
 * (ops/nn/conv/conv_gpu.c), MaxPool, AveragePool, GlobalMaxPool,
 * GlobalAveragePool (ops/nn/pool/pool_gpu.c), Resize and Upsample
 * (ops/image/image_gpu.c). Both backends fill the table: emu_conv.c
 * (the naive C reference) and cuda_conv.c (kernels/conv.cu, keel's own
 * kernels: no cuDNN).
 *
 * Windows are 2-D; a 1-D op is the 2-D one with a height of 1 (kh = sh =
 * dh = 1, no pads on H). The caller resolves auto_pad and ceil_mode into
 * pads and output sizes (ops/common/conv_util.h, keel_win_forward), as
 * the CPU kernels do, so both sides compute the same shapes. Pointers are
 * device pointers. */
#ifndef KEEL_DEVICE_DEV_CONV_H
#define KEEL_DEVICE_DEV_CONV_H

#include "device/device.h"

/* An activation applied to each output after the bias: the codes and
 * formulas of ops/common/activation.h (keel_act_kind, which device/ may
 * not include: conv_gpu.c maps one onto the other by name). */
typedef enum keel_dev_act_kind {
  KEEL_DEV_ACT_NONE = 0, KEEL_DEV_ACT_RELU, KEEL_DEV_ACT_LEAKY, KEEL_DEV_ACT_CLIP,
  KEEL_DEV_ACT_HSIGMOID, KEEL_DEV_ACT_HSWISH, KEEL_DEV_ACT_SIGMOID, KEEL_DEV_ACT_TANH,
  KEEL_DEV_ACT_SILU, KEEL_DEV_ACT_HSIGMOID_MUL
} keel_dev_act_kind;

/* One 2-D window over (planes, ih, iw): taps at (oy*sh - ph + ky*dh,
 * ox*sw - pw + kx*dw); taps outside the input are padding. peh, pew (the
 * pads after) only count for AveragePool's count_include_pad. */
typedef struct keel_dev_win2 {
  int64_t ih, iw, oh, ow;
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t ph, pw, peh, pew;
} keel_dev_win2;

/* A grouped convolution: X (n, c, ih, iw), W (m, c / group, kh, kw),
 * B (m) or NULL, Y (n, m, oh, ow). */
typedef struct keel_dev_conv2 {
  keel_dev_win2 w;
  int64_t n, c, m, group;
  int32_t act;                 /* keel_dev_act_kind                        */
  float act_a, act_b;          /* alpha, beta; Clip: min, max              */
} keel_dev_conv2;

typedef enum keel_dev_pool_kind { KEEL_DEV_POOL_MAX, KEEL_DEV_POOL_AVG } keel_dev_pool_kind;

typedef struct keel_dev_conv {
  /* Y = act(conv(X, W) + B) (see above). The padding is zeros. */
  keel_status (*conv2d)(keel_device *d, const keel_dev_conv2 *g, const float *x, const float *w,
                        const float *b, float *y);
  /* Y (planes, oh, ow) pooled from X (planes, ih, iw), the CPU's rules
   * (ops/nn/pool/pool.c): padding never takes part; max: ties keep the
   * first tap in row-major order, NaN only when every tap is NaN, an
   * empty window gives -inf; average: the float sum of the taps in
   * row-major order over the divisor (the real taps, or with
   * include_pad those inside the padded extent), an empty window 0. */
  keel_status (*pool2d)(keel_device *d, keel_dev_pool_kind kind, bool include_pad,
                        int64_t planes, const keel_dev_win2 *w, const float *x, float *y);
  /* y[p] = the max or the mean of plane p's n floats (n >= 1): the
   * global pools. Max as pool2d's; the mean's sum in double. */
  keel_status (*global_pool)(keel_device *d, keel_dev_pool_kind kind, int64_t planes, int64_t n,
                             const float *x, float *y);
  /* Y = convT(X, W) + B, the adjoint of conv2d's window: X (n, c, ih, iw)
   * is the grid, Y (n, m, oh, ow) the image; W (c, m / group, kh, kw); B
   * (m) or NULL. Output (oy, ox) gathers input (iy, ix) through tap (ky,
   * kx) where oy = iy*sh - ph + ky*dh (and so for x): the sum over input
   * channels, then taps in row-major order, then + B. act must be NONE. */
  keel_status (*conv_transpose2d)(keel_device *d, const keel_dev_conv2 *g, const float *x,
                                  const float *w, const float *b, float *y);
  /* One axis of a separable resampling (Resize, ops/image/image.c's
   * RS_PASS): X (outer, nin, inner) to Y (outer, nout, inner) with
   * y[o, j, i] = sum over q < taps of w[j*taps + q] * x[o, idx[j*taps + q], i],
   * the sum from 0 in q order, taps of weight 0 skipped; without w
   * (nearest) y[o, j, i] = x[o, idx[j], i] exactly; where oob[j] (oob may
   * be NULL) every y[o, j, i] is `extrap`. idx (int64, in [0, nin)), w and
   * oob are device pointers, like X and Y. */
  keel_status (*resample)(keel_device *d, int64_t outer, int64_t nin, int64_t nout, int64_t inner,
                          int64_t taps, const int64_t *idx, const float *w, const uint8_t *oob,
                          float extrap, const float *x, float *y);
} keel_dev_conv;

KEEL_INTERNAL extern const keel_dev_conv keel_emu_conv;
KEEL_INTERNAL extern const keel_dev_conv keel_cuda_conv;

#endif /* KEEL_DEVICE_DEV_CONV_H */
