/* cuda_conv.c: the `conv` group (dev_conv.h) on an NVIDIA GPU: launches of
 * kernels/conv.cu (keel's own kernels; no cuDNN). The geometry structs
 * go to the kernels by value, as dev_conv.h lays them out. */
#include "base/status.h"
#include "device/cuda.h"
#include "device/dev_conv.h"

static keel_cuda_dev *dev_of(keel_device *d) { return (keel_cuda_dev *)d->impl; }

static keel_status cu_conv2d(keel_device *d, const keel_dev_conv2 *g, const float *x,
                             const float *w, const float *b, float *y) {
  if (g->group < 1 || g->c % g->group || g->m % g->group)
    return keel_err(KEEL_ERR_INTERNAL, "GPU conv: %lld input and %lld output channels in %lld groups",
                    (long long)g->c, (long long)g->m, (long long)g->group);
  int64_t n = g->n * g->m * g->w.oh * g->w.ow;
  if (n <= 0) return KEEL_OK;
  keel_dev_conv2 geom = *g;
  void *args[] = {&geom, &x, &w, &b, &y};
  return keel_cuda_launch(dev_of(d), "keel_conv_direct", keel_cuda_grid_for(dev_of(d), n), 1, 256, 0, args);
}

static keel_status cu_pool2d(keel_device *d, keel_dev_pool_kind kind, bool include_pad,
                             int64_t planes, const keel_dev_win2 *w, const float *x, float *y) {
  int64_t n = planes * w->oh * w->ow;
  if (n <= 0) return KEEL_OK;
  int32_t code = (int32_t)kind, incl = include_pad;
  keel_dev_win2 geom = *w;
  void *args[] = {&code, &incl, &planes, &geom, &x, &y};
  return keel_cuda_launch(dev_of(d), "keel_conv_pool", keel_cuda_grid_for(dev_of(d), n), 1, 256, 0, args);
}

static keel_status cu_global_pool(keel_device *d, keel_dev_pool_kind kind, int64_t planes, int64_t n,
                                  const float *x, float *y) {
  if (n < 1) return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: a global pool over empty planes");
  if (planes <= 0) return KEEL_OK;
  int32_t code = (int32_t)kind;
  void *args[] = {&code, &planes, &n, &x, &y};
  /* one block per plane: 256 threads, a power of two (the kernel's tree) */
  unsigned grid = (unsigned)(planes < 65535 ? planes : 65535);
  return keel_cuda_launch(dev_of(d), "keel_conv_global", grid, 1, 256, 0, args);
}

static keel_status cu_conv_transpose2d(keel_device *d, const keel_dev_conv2 *g, const float *x,
                                       const float *w, const float *b, float *y) {
  if (g->group < 1 || g->c % g->group || g->m % g->group || g->act != KEEL_DEV_ACT_NONE)
    return keel_err(KEEL_ERR_INTERNAL, "GPU conv_transpose: %lld input and %lld output channels "
                    "in %lld groups, activation %d", (long long)g->c, (long long)g->m,
                    (long long)g->group, (int)g->act);
  int64_t n = g->n * g->m * g->w.oh * g->w.ow;
  if (n <= 0) return KEEL_OK;
  keel_dev_conv2 geom = *g;
  void *args[] = {&geom, &x, &w, &b, &y};
  return keel_cuda_launch(dev_of(d), "keel_conv_transpose", keel_cuda_grid_for(dev_of(d), n), 1,
                          256, 0, args);
}

static keel_status cu_resample(keel_device *d, int64_t outer, int64_t nin, int64_t nout,
                               int64_t inner, int64_t taps, const int64_t *idx, const float *w,
                               const uint8_t *oob, float extrap, const float *x, float *y) {
  int64_t n = outer * nout * inner;
  if (n <= 0) return KEEL_OK;
  void *args[] = {&outer, &nin, &nout, &inner, &taps, &idx, &w, &oob, &extrap, &x, &y};
  return keel_cuda_launch(dev_of(d), "keel_conv_resample", keel_cuda_grid_for(dev_of(d), n), 1,
                          256, 0, args);
}

const keel_dev_conv keel_cuda_conv = {cu_conv2d, cu_pool2d, cu_global_pool,
                                      cu_conv_transpose2d, cu_resample};
