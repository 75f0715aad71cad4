/* cuda_norm.c: the `norm` group (dev_norm.h) on an NVIDIA GPU: launches of
 * kernels/norm.cu (one block of 256 threads per row; a reduction over
 * middle axes one thread per output, its neighbours reading neighbouring
 * floats). */
#include "base/status.h"
#include "device/cuda.h"
#include "device/dev_norm.h"

static keel_cuda_dev *dev_of(keel_device *d) { return (keel_cuda_dev *)d->impl; }
static unsigned grid_rows(int64_t rows) { return (unsigned)(rows < 65535 ? rows : 65535); }

static keel_status cu_layernorm(keel_device *d, int64_t rows, int64_t cols, const float *x,
                                const float *scale, const float *bias, float eps, float *y,
                                float *mean, float *inv_std) {
  if (rows <= 0 || cols <= 0) return KEEL_OK;
  void *args[] = {&rows, &cols, &x, &scale, &bias, &eps, &y, &mean, &inv_std};
  return keel_cuda_launch(dev_of(d), "keel_norm_layernorm", grid_rows(rows), 1, 256, 0, args);
}

static keel_status cu_reduce(keel_device *d, keel_dev_reduce op, int64_t rows, int64_t cols,
                             const float *x, float *y) {
  if (cols < 1) return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: a reduction over an empty axis");
  if (rows <= 0) return KEEL_OK;
  int32_t code = (int32_t)op;
  void *args[] = {&code, &rows, &cols, &x, &y};
  return keel_cuda_launch(dev_of(d), "keel_norm_reduce", grid_rows(rows), 1, 256, 0, args);
}

static keel_status cu_reduce_mid(keel_device *d, keel_dev_reduce op, int64_t outer, int64_t n,
                                 int64_t inner, const float *x, float *y) {
  if (n < 1) return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: a reduction over an empty axis");
  int64_t total = outer * inner;
  if (total <= 0) return KEEL_OK;
  int32_t code = (int32_t)op;
  void *args[] = {&code, &outer, &n, &inner, &x, &y};
  return keel_cuda_launch(dev_of(d), "keel_norm_reduce_mid", keel_cuda_grid_for(dev_of(d), total), 1,
                          256, 0, args);
}

const keel_dev_norm keel_cuda_norm = {cu_layernorm, cu_reduce, cu_reduce_mid};
