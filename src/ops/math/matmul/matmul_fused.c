/* matmul_fused.c: FusedMatMul (matmul_fused.h): geometry, the residual's
 * broadcast, and the reference kernel: keel's GEMM (conv_util.h) into Y,
 * then bias, Z and the activation in one more pass. */
#include "ops/math/matmul/matmul_fused.h"
#include "ops/math/matmul/select.h"

#include "ops/common/activation.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

keel_status keel_fmm_geom_of(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                             const keel_tensor *bias, keel_fmm_geom *g) {
  if (a->dtype != KEEL_FLOAT || b->dtype != KEEL_FLOAT || (bias && bias->dtype != KEEL_FLOAT))
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "FusedMatMul (domain ai.keel.internal, opset 1): A %s, B %s: only float32",
                    keel_dtype_name((keel_dtype)a->dtype), keel_dtype_name((keel_dtype)b->dtype));
  if (a->rank < 1 || b->rank != 2)
    return keel_err(KEEL_ERR_SHAPE, "A has rank %d and B rank %d: expected >= 1 and 2", a->rank,
                    b->rank);
  *g = (keel_fmm_geom){.transb = keel_k_attr_i(k, "transB", 0) != 0};
  g->K = a->shape[a->rank - 1];
  int64_t bk = g->transb ? b->shape[1] : b->shape[0];
  g->N = g->transb ? b->shape[0] : b->shape[1];
  if (bk != g->K) {
    char sa[128], sb[128];
    return keel_err(KEEL_ERR_SHAPE, "A %s and B %s%s do not multiply",
                    keel_shape_str(a->rank, a->shape, sa, sizeof sa),
                    keel_shape_str(b->rank, b->shape, sb, sizeof sb), g->transb ? " (transposed)" : "");
  }
  g->M = 1;
  g->yrank = a->rank == 1 ? 1 : a->rank;
  for (int i = 0; i + 1 < a->rank; i++) g->M *= a->shape[i], g->yshape[i] = a->shape[i];
  g->yshape[g->yrank - 1] = g->N;
  if (bias) {
    bool ok = keel_tensor_numel(bias) == g->N;
    for (int i = 0; ok && i + 1 < bias->rank; i++) ok = bias->shape[i] == 1;
    if (!ok) {
      char sb[128];
      return keel_err(KEEL_ERR_SHAPE, "the bias has shape %s, expected %lld values",
                      keel_shape_str(bias->rank, bias->shape, sb, sizeof sb), (long long)g->N);
    }
  }
  return keel_blas_fits(KEEL_MAX(KEEL_MAX(g->M, g->N), g->K));
}

keel_status keel_fmm_z_shape(const keel_fmm_geom *g, const keel_tensor *z, int *rank,
                             int64_t *shape, bool *same) {
  if (z->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_SHAPE, "the residual Z is %s, expected float32",
                    keel_dtype_name((keel_dtype)z->dtype));
  KEEL_TRY(keel_broadcast_shape(g->yrank, g->yshape, z->rank, z->shape, rank, shape));
  *same = *rank == g->yrank && z->rank == g->yrank &&
          !memcmp(shape, g->yshape, sizeof(int64_t) * (size_t)g->yrank) &&
          !memcmp(z->shape, g->yshape, sizeof(int64_t) * (size_t)g->yrank);
  return KEEL_OK;
}

keel_status keel_op_fused_matmul_ref(keel_kctx *k) {
  const keel_tensor *a, *b, *bias, *z;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(keel_k_in_opt(k, 2, &bias));
  KEEL_TRY(keel_k_in_opt(k, 3, &z));
  keel_fmm_geom g;
  KEEL_TRY(keel_fmm_geom_of(k, a, b, bias, &g));
  keel_act act;
  KEEL_TRY(keel_act_of(k->node, &act));
  int rank = g.yrank;
  int64_t shape[KEEL_MAX_RANK];
  bool same = true;
  memcpy(shape, g.yshape, sizeof(int64_t) * (size_t)rank);
  if (z) KEEL_TRY(keel_fmm_z_shape(&g, z, &rank, shape, &same));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, rank, shape, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  float *c = y->data;
  if (!same) {
    void *t;
    KEEL_TRY(keel_k_scratch_n(k, g.M * g.N, sizeof(float), &t));
    c = t;
  }
  keel_gemm_f32(k->pool, false, g.transb, g.M, g.N, g.K, 1.0f, a->data, g.K, b->data,
                g.transb ? g.K : g.N, 0.0f, c, g.N);
  if (bias) {
    const float *bv = bias->data;
    for (int64_t m = 0; m < g.M; m++)
      for (int64_t n = 0; n < g.N; n++) c[m * g.N + n] += bv[n];
  }
  if (z) keel_bcast_add_f32(c, g.yrank, g.yshape, z, y);
  keel_act_apply_f32(&act, y->data, keel_tensor_numel(y));
  return KEEL_OK;
}


const keel_opdef keel_ops_matmul_fused[] = {
    {"ai.keel.internal", "FusedMatMul", 1, KEEL_OPSET_MAX, keel_op_fused_matmul_ref, 0, KEEL_T(KEEL_FLOAT),
     keel_matmul_fused_impls},
    {0},
};
