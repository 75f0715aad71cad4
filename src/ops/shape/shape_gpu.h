/* shape_gpu.h: the GPU implementations of the shape family (shape_gpu.c),
 * listed in those ops' rows. */
#ifndef KEEL_SHAPE_GPU_H
#define KEEL_SHAPE_GPU_H

#include "ops/kernel.h"

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose, Concat,
 * Split, Slice, Expand: the op's own kernel, which moves bytes on the
 * device for a placed node (shape.c, sh_copy_k). */
extern const keel_impl *const keel_gpu_move_impls[];
/* Gather (device/dev_move.h: gather). */
extern const keel_impl *const keel_gpu_gather_impls[];

#endif
