/* conv_gpu.h: Conv's GPU implementation (conv_gpu.c), listed last in
 * keel_conv_impls (select.c): only nodes the place pass put on the GPU
 * reach it. */
#ifndef KEEL_CONV_GPU_H
#define KEEL_CONV_GPU_H

#include "device/dev_conv.h"
#include "ops/common/conv_util.h"
#include "ops/kernel.h"

extern const keel_impl keel_gpu_conv;
/* ConvTranspose's (its op row, conv.c) */
extern const keel_impl *const keel_gpu_conv_transpose_impls[];

/* A 1-D or 2-D window (keel_win_forward's) as the device's 2-D one: a 1-D
 * window is one of height 1. Shared with the pools (pool_gpu.c). */
KEEL_INTERNAL keel_dev_win2 keel_gpu_win2(const keel_win *w);

#endif
