/* select.h: which implementation runs a matrix product, and why (select.c).
 *
 * Every choice keel makes for a float matrix product is here, in the order
 * it is made:
 *
 *  1. The fuse-matmul pass (passes/pass_matmul.c) writes a MatMul or Gemm
 *     whose B is a constant 2-D matrix, with its bias, residual and
 *     activation, as one FusedMatMul.
 *  2. Binding (exec/session.c, once per node) takes the first
 *     implementation of keel_matmul_fused_impls whose supports() accepts
 *     the node; none: the op's reference kernel, keel's GEMM (matmul.c).
 *     Each implementation's `rule` says in words when it takes a node, and
 *     `keel info MODEL --nodes` prints it.
 *  3. oneDNN's implementation ("onednn") decides per run, from the rows M
 *     of A: keel_matmul_select_path (a small product on keel's GEMM, a few
 *     rows on keel's gemv, else oneDNN's primitive); its first run with
 *     oneDNN cuts the work for good: keel_matmul_parts (column parts of B)
 *     or, per M, keel_matmul_bands (bands of rows); B is packed in the
 *     layout oneDNN asks for, a plain one with its rows spaced by
 *     keel_matmul_ld.
 *  4. keel's GEMM (MatMul and Gemm left as they are, the reference
 *     FusedMatMul) splits one product over the pool: keel_gemm_split.
 *
 * Every cut is made for the pool's splits (keel_pool_splits), never for
 * the threads that happen to run it, so KEEL_OPT_DETERMINISTIC gives the
 * same bits at any thread count.
 */
#ifndef KEEL_MATMUL_SELECT_H
#define KEEL_MATMUL_SELECT_H

#include "ops/kernel.h"

/* The implementation list of FusedMatMul, tried in order at binding. */
extern const keel_impl *const keel_matmul_fused_impls[];

/* ============================================ 3. each run of "onednn" */

#define KEEL_MM_GEMV_ROWS 4                 /* rows keel's gemv takes     */
#define KEEL_MM_SMALL_PRODUCT ((int64_t)1 << 18) /* multiply-adds         */
#define KEEL_MM_KEEP_B_BYTES ((size_t)64 << 10)  /* B kept as the file has it */
#define KEEL_MM_MAX_BANDS 64                /* bands of rows at most      */
#define KEEL_MM_MAX_PARTS 8                 /* column parts of B at most  */
#define KEEL_MM_PART_MIN_COLS 64            /* columns a part has at least */

typedef enum keel_mm_path {
  KEEL_MM_UNDECIDED = 0,       /* no run with oneDNN or gemv yet            */
  KEEL_MM_SMALL = 1,           /* keel's GEMM (the reference kernel)        */
  KEEL_MM_GEMV = 2,            /* keel's product by B in place (gemv.h)     */
  KEEL_MM_LIB = 3              /* oneDNN's matmul primitive, bands or parts */
} keel_mm_path;

/* What a run knows. */
typedef struct keel_mm_facts {
  int64_t M, N, K;             /* A is M x K, B K x N                       */
  bool keep_b;                 /* B is small enough to be kept as the file
                                  has it (KEEL_MM_KEEP_B_BYTES)             */
} keel_mm_facts;

/* The path of this run. `mode` is what the node's first run that was not
 * small chose (KEEL_MM_UNDECIDED before it): the caller keeps the result
 * as the node's mode when it was undecided and the result is not
 * KEEL_MM_SMALL. */
KEEL_INTERNAL keel_mm_path keel_matmul_select_path(keel_mm_path mode, const keel_mm_facts *f);

/* Column parts of B, chosen on the first oneDNN run from its M: one (row
 * mode) unless the rows are too few to give every split 8 of them. */
KEEL_INTERNAL int keel_matmul_parts(int64_t M, int64_t N, int splits);

/* Bands of rows in row mode: at least 8 rows each, at most one per split. */
KEEL_INTERNAL int keel_matmul_bands(int64_t M, int splits);

/* The row stride (in floats) of B's packed copy when oneDNN asks for a
 * plain layout with rows `ld` floats apart: `ld`, or more where `ld` would
 * put the rows a kernel reads together into few cache sets. */
KEEL_INTERNAL int64_t keel_matmul_ld(int64_t ld);

/* ============================================= 4. keel's own GEMM */

/* Below this many multiply-adds a product is one call on the caller: the
 * wake-up of the workers would cost more than it saves. */
#define KEEL_GEMM_PAR_MIN ((int64_t)1 << 18)

/* Whether keel's GEMM splits an M x N x K product over the pool, and how:
 * panels of *grain rows (when *by_rows) or columns, as keel_pool_for's
 * grain. */
KEEL_INTERNAL bool keel_gemm_split(int64_t M, int64_t N, int64_t K, int splits, bool *by_rows,
                                   int64_t *grain);

#endif /* KEEL_MATMUL_SELECT_H */
