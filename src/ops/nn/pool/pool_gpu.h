/* pool_gpu.h: the pools' GPU implementations (pool_gpu.c), in the pool
 * rows' impl lists (pool.c). */
#ifndef KEEL_POOL_GPU_H
#define KEEL_POOL_GPU_H

#include "ops/kernel.h"

extern const keel_impl *const keel_gpu_maxpool_impls[];
extern const keel_impl *const keel_gpu_avgpool_impls[];
extern const keel_impl *const keel_gpu_global_maxpool_impls[];
extern const keel_impl *const keel_gpu_global_avgpool_impls[];

#endif
