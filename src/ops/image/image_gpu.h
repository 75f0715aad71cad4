/* image_gpu.h: Resize's and Upsample's GPU implementations (image_gpu.c),
 * listed in their op rows (image.c): only nodes the place pass put on the
 * GPU reach them. */
#ifndef KEEL_OPS_IMAGE_GPU_H
#define KEEL_OPS_IMAGE_GPU_H

#include "ops/kernel.h"

extern const keel_impl *const keel_gpu_resize_impls[];
extern const keel_impl *const keel_gpu_upsample_impls[];

#endif
