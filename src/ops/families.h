/* families.h: the op families, one file each under src/ops/ (control flow
 * lives in exec/control.c). Each table ends with a zero row. */
#ifndef KEEL_FAMILIES_H
#define KEEL_FAMILIES_H

#include "ops/kernel.h"

#define KEEL_FAMILIES(X) \
  X(elementwise)         \
  X(unary)               \
  X(shape)               \
  X(memcpy)              \
  X(shape_gen)           \
  X(gather_scatter)      \
  X(matmul)              \
  X(matmul_fused)        \
  X(conv)                \
  X(conv_nhwc)           \
  X(im2col)              \
  X(pool)                \
  X(pool_nhwc)           \
  X(reduce)              \
  X(norm)                \
  X(rnn)                 \
  X(image)               \
  X(image_decode)         \
  X(signal)              \
  X(linalg)              \
  X(quant)               \
  X(optimizer)           \
  X(strings)             \
  X(random)              \
  X(constant)            \
  X(grad)                \
  X(grad_shape)          \
  X(grad_math)           \
  X(grad_matmul)         \
  X(grad_conv)           \
  X(grad_pool)           \
  X(grad_norm)           \
  X(grad_resize)         \
  X(grad_tape)           \
  X(sequence)            \
  X(attention)           \
  X(attention_fused)     \
  X(transformer)         \
  X(linear_attention)    \
  X(flex_attention)      \
  X(attention_ms)        \
  X(contrib)             \
  X(contrib_quant)       \
  X(ml_tree)             \
  X(ml_linear)           \
  X(ml_misc)             \
  X(collective)          \
  X(control)

#define KEEL_FAMILY_DECL(f) extern const keel_opdef keel_ops_##f[];
KEEL_FAMILIES(KEEL_FAMILY_DECL)
#undef KEEL_FAMILY_DECL


#endif
