/* dev_norm.h: the `norm` kernel group (device.h): LayerNormalization and
 * the reductions (ReduceSum, ReduceMean, ReduceMax over a run of adjacent
 * axes). Both backends fill the table:
 * emu_norm.c (the naive C reference) and cuda_norm.c (kernels/norm.cu).
 * float32; pointers are device pointers. */
#ifndef KEEL_DEVICE_DEV_NORM_H
#define KEEL_DEVICE_DEV_NORM_H

#include "device/device.h"

typedef enum keel_dev_reduce { KEEL_DEV_RSUM, KEEL_DEV_RMEAN, KEEL_DEV_RMAX } keel_dev_reduce;

typedef struct keel_dev_norm {
  /* Per row r of `cols` floats: mean m, variance v (of the deviations,
   * divided by cols), inv = 1 / sqrt(v + eps);
   * y = (x - m) * inv * scale[c] + bias[c] (bias NULL: 0). mean and
   * inv_std (rows floats each) are written when not NULL. */
  keel_status (*layernorm)(keel_device *d, int64_t rows, int64_t cols, const float *x,
                           const float *scale, const float *bias, float eps, float *y, float *mean,
                           float *inv_std);
  /* y[r] = the sum, mean or max of row r's `cols` floats (cols >= 1; a NaN
   * in a row makes its max NaN, as the CPU's). */
  keel_status (*reduce)(keel_device *d, keel_dev_reduce op, int64_t rows, int64_t cols,
                        const float *x, float *y);
  /* X (outer, n, inner): y[o, i] = the sum, mean or max over j of
   * x[o, j, i] (n >= 1), taken in j order: a reduction over axes that
   * are not the last. The max as reduce's. */
  keel_status (*reduce_mid)(keel_device *d, keel_dev_reduce op, int64_t outer, int64_t n,
                            int64_t inner, const float *x, float *y);
} keel_dev_norm;

KEEL_INTERNAL extern const keel_dev_norm keel_emu_norm;
KEEL_INTERNAL extern const keel_dev_norm keel_cuda_norm;

#endif /* KEEL_DEVICE_DEV_NORM_H */
