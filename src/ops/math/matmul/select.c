/* select.c: which implementation runs a matrix product, and why (select.h). */
#include "ops/math/matmul/select.h"

#include "ops/common/gemv.h"
#include "ops/math/matmul/matmul_fused.h"
#include "ops/math/matmul/matmul_gpu.h"

/* ============================================ 2. binding: the list */

/* FusedMatMul: a node placed on the GPU runs the device's (matmul_gpu.c;
 * binding only offers it GPU implementations). On the CPU: oneDNN's
 * matmul where B is a constant 2-D float matrix and oneDNN is present and
 * allowed; else the reference, keel's GEMM (OpenBLAS, or oneDNN's sgemm
 * where keel has it), which takes every case the op allows. */
#if KEEL_HAVE_DNNL
const keel_impl *const keel_matmul_fused_impls[] = {&keel_gpu_fused_matmul_impl, &keel_matmul_fused_dnnl, NULL};
#else
const keel_impl *const keel_matmul_fused_impls[] = {&keel_gpu_fused_matmul_impl, NULL};
#endif

/* ============================================ 3. each run of "onednn" */

/* In order:
 *  - a product under 2^18 multiply-adds whose B is small (kept as the file
 *    has it) runs on keel's GEMM: for it the calls into oneDNN (a stream,
 *    memory objects, the shape cache) cost more than the product (the LSTM
 *    bench's 16 x 128 x 32 head);
 *  - a node whose first run has at most 4 rows (a classifier on one image)
 *    takes keel's gemv for good where it has its vector kernel: B is
 *    streamed once as the file has it, never packed; a taller run of such
 *    a node still goes to oneDNN;
 *  - else oneDNN's primitive, on B packed once. */
keel_mm_path keel_matmul_select_path(keel_mm_path mode, const keel_mm_facts *f) {
  if (f->keep_b && f->M * f->N * f->K < KEEL_MM_SMALL_PRODUCT) return KEEL_MM_SMALL;
  if (mode == KEEL_MM_UNDECIDED)
    return f->M <= KEEL_MM_GEMV_ROWS && keel_gemv_fast() ? KEEL_MM_GEMV : KEEL_MM_LIB;
  return mode == KEEL_MM_GEMV && f->M <= KEEL_MM_GEMV_ROWS ? KEEL_MM_GEMV : KEEL_MM_LIB;
}

/* Fewer than 8 rows per split: one part of B's columns per split (at least
 * KEEL_MM_PART_MIN_COLS columns each: thinner parts waste the kernels'
 * tiles), so a product of few rows (M = 1) still uses the pool, each
 * thread reading its own part of B. */
int keel_matmul_parts(int64_t M, int64_t N, int splits) {
  int64_t parts = 1;
  if (M < 8 * (int64_t)splits)
    parts = KEEL_MIN(KEEL_MIN((int64_t)splits, N / KEEL_MM_PART_MIN_COLS), KEEL_MM_MAX_PARTS);
  return (int)KEEL_MAX(1, parts);
}

int keel_matmul_bands(int64_t M, int splits) {
  return (int)KEEL_MAX(1, KEEL_MIN(KEEL_MIN((int64_t)splits, M / 8), KEEL_MM_MAX_BANDS));
}

/* Rows a multiple of 512 bytes apart (N = 512, 768, 1024, ... floats) map
 * the rows a kernel reads together to few cache sets. oneDNN 2.6's
 * gemm:jit matmul (its AVX2 kernels) ran 128 x 256 x 1024 at 47 GFLOP/s
 * against 96 with one cache line (16 floats) more per row, N = 512 at 64
 * against 94, N = 2048 at 46 against 97; strides that are not such a
 * multiple (576, 1000) ran at 95-97 either way, and no shape measured was
 * slower padded beyond noise (AMD EPYC Zen 3, one thread, alternating:
 * build/gemm_ld, bench/gemm_ld.c). */
int64_t keel_matmul_ld(int64_t ld) {
  return ld % 128 == 0 ? ld + 16 : ld;
}

/* ============================================= 4. keel's own GEMM */

/* Panels of the longer side: 16 rows or 64 columns at least, which keep
 * OpenBLAS's kernels on full tiles. */
bool keel_gemm_split(int64_t M, int64_t N, int64_t K, int splits, bool *by_rows, int64_t *grain) {
  if (splits <= 1 || M * N * K < KEEL_GEMM_PAR_MIN) return false;
  *by_rows = M >= N;
  *grain = *by_rows ? 16 : 64;
  return true;
}
