/* pool_gpu.c: MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool on
 * a device (device/dev_conv.h), for the nodes the place pass put there
 * (passes/pass_place.c, gpu_takes_conv: float32 X of rank 3 or 4 for the
 * windowed pools, of rank 2 or more for the global ones; MaxPool without
 * its Indices output).
 *
 * The shapes are the CPU kernels' (pool.c): the window from
 * keel_pool_setup (kernel_shape, pads, strides, dilations, auto_pad,
 * ceil_mode, the same errors), Y (N, C, out...); the global pools' Y
 * (N, C, 1...). A 1-D pool runs as a 2-D one of height 1. */
#include "ops/nn/pool/pool_gpu.h"

#include "base/status.h"
#include "device/dev_conv.h"
#include "ops/common/conv_util.h"
#include "ops/nn/conv/conv_gpu.h"

static keel_status no_kernels(const keel_kctx *k) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s has no pooling kernels", k->node->op_type,
                  k->dev ? k->dev->name : "no device");
}

static keel_status gpu_pool(keel_kctx *k, keel_dev_pool_kind kind) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->dtype != KEEL_FLOAT || (x->rank != 3 && x->rank != 4))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: float32 X of rank 3 or 4 only", k->node->op_type);
  if (kind == KEEL_DEV_POOL_MAX && keel_k_has_out(k, 1))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU MaxPool: no Indices output on the device");
  keel_win w;
  KEEL_TRY(keel_pool_setup(k, x, 2, &w));
  int64_t shape[4] = {x->shape[0], x->shape[1], w.out[0], w.out[1]}, planes;
  if (keel_mul64_ovf(x->shape[0], x->shape[1], &planes)) return keel_err(KEEL_ERR_SHAPE, "N x C overflows");
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, shape, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  if (!k->dev || !k->dev->conv) return no_kernels(k);
  keel_dev_win2 v = keel_gpu_win2(&w);
  bool incl = kind == KEEL_DEV_POOL_AVG && keel_k_attr_i(k, "count_include_pad", 0) != 0;
  return k->dev->conv->pool2d(k->dev, kind, incl, planes, &v, x->data, y->data);
}

static keel_status gpu_global(keel_kctx *k, keel_dev_pool_kind kind) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->rank < 2)
    return keel_err(KEEL_ERR_SHAPE, "X must be (N, C, D1, ...), got rank %d", x->rank);
  if (x->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: float32 X only", k->node->op_type);
  int64_t shape[KEEL_MAX_RANK], planes;
  if (keel_mul64_ovf(x->shape[0], x->shape[1], &planes)) return keel_err(KEEL_ERR_SHAPE, "N x C overflows");
  shape[0] = x->shape[0], shape[1] = x->shape[1];
  for (int i = 2; i < x->rank; i++) shape[i] = 1;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, shape, &y));
  if (!planes) return KEEL_OK;
  int64_t n = keel_tensor_numel(x) / planes;
  if (n < 1)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: empty spatial dims", k->node->op_type);
  if (!k->dev || !k->dev->conv) return no_kernels(k);
  return k->dev->conv->global_pool(k->dev, kind, planes, n, x->data, y->data);
}

static keel_status gpu_maxpool(keel_kctx *k) { return gpu_pool(k, KEEL_DEV_POOL_MAX); }
static keel_status gpu_avgpool(keel_kctx *k) { return gpu_pool(k, KEEL_DEV_POOL_AVG); }
static keel_status gpu_global_max(keel_kctx *k) { return gpu_global(k, KEEL_DEV_POOL_MAX); }
static keel_status gpu_global_avg(keel_kctx *k) { return gpu_global(k, KEEL_DEV_POOL_AVG); }

#define GPU_IMPL(fn, rule) {"gpu", keel_prep_on_gpu, NULL, NULL, fn, rule, KEEL_NODE_GPU}
static const keel_impl maxpool_impl = GPU_IMPL(gpu_maxpool, "placed on the GPU (float32, 1-D or 2-D, no Indices)");
static const keel_impl avgpool_impl = GPU_IMPL(gpu_avgpool, "placed on the GPU (float32, 1-D or 2-D)");
static const keel_impl global_max_impl = GPU_IMPL(gpu_global_max, "placed on the GPU (float32)");
static const keel_impl global_avg_impl = GPU_IMPL(gpu_global_avg, "placed on the GPU (float32)");
const keel_impl *const keel_gpu_maxpool_impls[] = {&maxpool_impl, NULL};
const keel_impl *const keel_gpu_avgpool_impls[] = {&avgpool_impl, NULL};
const keel_impl *const keel_gpu_global_maxpool_impls[] = {&global_max_impl, NULL};
const keel_impl *const keel_gpu_global_avgpool_impls[] = {&global_avg_impl, NULL};
