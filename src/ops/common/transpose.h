/* transpose.h: 2-D transpose block kernels, shared by the Transpose op
 * (ops/shape/shape.c) and the NCHW <-> NHWC edges of the channels-last
 * convolutions (ops/nn/conv/conv_nhwc.c). */
#ifndef KEEL_OPS_TRANSPOSE_H
#define KEEL_OPS_TRANSPOSE_H

#include "base/common.h"

/* dst[c * R + r] = src[r * C + c] for rows [r0, r1) x columns [c0, c1):
 * src's rows are C elements apart, dst's R (so a block of a larger
 * matrix, or of a matrix whose rows are further apart than its width, is
 * one call). */
typedef void (*keel_tr_fn)(const void *src, void *dst, int64_t R, int64_t C, int64_t r0,
                           int64_t r1, int64_t c0, int64_t c1);

/* The kernel for es-byte elements (1, 2, 4 or 8) on this CPU. */
KEEL_INTERNAL keel_tr_fn keel_tr_pick(size_t es);

#endif /* KEEL_OPS_TRANSPOSE_H */
