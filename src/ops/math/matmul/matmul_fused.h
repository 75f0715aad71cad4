/* matmul_fused.h: FusedMatMul (domain ai.keel.internal, opset 1), what the
 * fuse-matmul pass (passes/pass_matmul.c) makes of a MatMul or Gemm by a
 * constant matrix and the ops after it:
 *
 *   Y = act(A op(B) + bias + Z)
 *
 *   A     [..., K] float32 (rank >= 1; rank 1 is one row, dropped from Y)
 *   B     [K, N] constant float32, or [N, K] with transB = 1
 *   bias  optional, N values (any shape of N elements with leading 1s)
 *   Z     optional, broadcast against [..., N] as Add would (Y takes the
 *         broadcast shape): a residual
 *   Y     [..., N]
 *
 * The fused activation (ops/common/activation.h) comes last. The reference
 * kernel (matmul_fused.c) is keel's GEMM and one pass for the rest; the
 * oneDNN implementation (dnnl/matmul_dnnl.c) packs B once and runs the
 * product with bias, residual and activation as post-ops.
 */
#ifndef KEEL_MATMUL_FUSED_H
#define KEEL_MATMUL_FUSED_H

#include "ops/kernel.h"

typedef struct keel_fmm_geom {
  int64_t M, K, N;             /* A as M x K rows                         */
  bool transb;
  int yrank;                   /* the product's shape (before Z)          */
  int64_t yshape[KEEL_MAX_RANK];
} keel_fmm_geom;

/* Checks A, B and bias against each other (the messages name what is
 * wrong) and gives the product's geometry. */
KEEL_INTERNAL keel_status keel_fmm_geom_of(keel_kctx *k, const keel_tensor *a,
                                           const keel_tensor *b, const keel_tensor *bias,
                                           keel_fmm_geom *g);

/* Y's shape with Z: the broadcast of the product's and Z's; *same when it
 * is the product's and Z has it too. */
KEEL_INTERNAL keel_status keel_fmm_z_shape(const keel_fmm_geom *g, const keel_tensor *z, int *rank,
                                           int64_t *shape, bool *same);

/* The reference kernel. */
KEEL_INTERNAL keel_status keel_op_fused_matmul_ref(keel_kctx *k);

#if KEEL_HAVE_DNNL
extern const keel_impl keel_matmul_fused_dnnl;
#endif

#endif /* KEEL_MATMUL_FUSED_H */
