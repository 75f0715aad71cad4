/* math_gpu.h: the GPU implementations of the element-wise, unary and
 * softmax families (math_gpu.c), listed in those ops' rows. */
#ifndef KEEL_MATH_GPU_H
#define KEEL_MATH_GPU_H

#include "ops/kernel.h"

/* NULL-ended lists holding the one GPU implementation of each family. */
extern const keel_impl *const keel_gpu_binary_impls[];
extern const keel_impl *const keel_gpu_unary_impls[];
extern const keel_impl keel_gpu_softmax_impl;
/* Where and Cast (device/dev_move.h) */
extern const keel_impl *const keel_gpu_where_impls[];
extern const keel_impl *const keel_gpu_cast_impls[];
/* ReduceSum, ReduceMean, ReduceMax over the last axis (device/dev_norm.h) */
extern const keel_impl *const keel_gpu_reduce_impls[];

#endif
