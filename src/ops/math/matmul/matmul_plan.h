/* matmul_plan.h: how MatMul and Gemm read their operands (matmul.c), one
 * definition for the CPU kernels and the GPU's (matmul_gpu.c), so that
 * both give every node the same output shape and the same errors. */
#ifndef KEEL_MATMUL_PLAN_H
#define KEEL_MATMUL_PLAN_H

#include "ops/kernel.h"

/* How a MatMul maps onto GEMMs: sizes, promoted operand shapes, and the
 * batch broadcast. Strides count whole matrices (0: broadcast). */
typedef struct keel_mm_plan {
  int64_t M, N, K;
  int ra, rb;                        /* operand ranks after 1-D promotion  */
  int64_t as[KEEL_MAX_RANK];         /* A's promoted shape (..., M, K)     */
  int64_t bs[KEEL_MAX_RANK];         /* B's promoted shape (..., K, N)     */
  int nb;                            /* broadcast batch rank               */
  int64_t batch[KEEL_MAX_RANK];
  int64_t sa[KEEL_MAX_RANK], sb[KEEL_MAX_RANK];
  int64_t nbatch, na, nbm;           /* output batches; A's, B's matrices  */
  bool fold;                         /* one (nbatch*M, K) x (K, N) GEMM    */
  int rank;
  int64_t shape[KEEL_MAX_RANK];      /* output shape                       */
} keel_mm_plan;

/* MatMul's numpy rules: 1-D operands promoted (and the added dim dropped
 * from the output), batch dims broadcast, K checked. */
KEEL_INTERNAL keel_status keel_mm_plan_make(const keel_tensor *a, const keel_tensor *b,
                                            keel_mm_plan *p);

/* Gemm's attributes and operands, checked. */
typedef struct keel_gemm_args {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  const keel_tensor *c;              /* NULL when absent or beta == 0     */
  int64_t cst[2];                    /* C's broadcast strides over (M, N) */
} keel_gemm_args;

/* A and B matrices of one type with C; transA, transB, alpha, beta; C
 * broadcast onto [M, N] (exactly [M, N] before opset 7 without
 * broadcast=1). */
KEEL_INTERNAL keel_status keel_gemm_setup(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                                          const keel_tensor *c, keel_gemm_args *g);

#endif /* KEEL_MATMUL_PLAN_H */
