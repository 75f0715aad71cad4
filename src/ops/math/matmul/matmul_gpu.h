/* matmul_gpu.h: MatMul, Gemm and FusedMatMul on a device (matmul_gpu.c),
 * listed in those ops' rows; each takes only nodes the place pass put on
 * the GPU (passes/pass_place.c, gpu_takes_blas). */
#ifndef KEEL_MATMUL_GPU_H
#define KEEL_MATMUL_GPU_H

#include "ops/kernel.h"

/* NULL-ended lists holding the one GPU implementation of each op. */
extern const keel_impl *const keel_gpu_matmul_impls[];
extern const keel_impl *const keel_gpu_gemm_impls[];
extern const keel_impl keel_gpu_fused_matmul_impl;

#endif
