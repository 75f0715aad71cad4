/* norm_gpu.h: LayerNormalization's GPU implementation (norm_gpu.c). */
#ifndef KEEL_NORM_GPU_H
#define KEEL_NORM_GPU_H

#include "ops/kernel.h"

extern const keel_impl *const keel_gpu_layernorm_impls[];

#endif
