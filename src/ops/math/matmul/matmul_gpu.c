/* matmul_gpu.c: MatMul, Gemm and FusedMatMul on a device, through the
 * device's blas group (device/dev_blas.h: cuBLAS, or the emulated
 * device's reference loops).
 *
 * Which nodes run here is the place pass's decision (passes/pass_place.c,
 * gpu_takes_blas: float32, known ranks, a device with a BLAS); binding
 * gives a node placed on the device the implementation whose `device` is
 * the GPU's, and these supports() only confirm the placement. Shapes and
 * errors are the CPU kernels' (matmul_plan.h, matmul_fused.h): the same
 * node gives the same output shape on either side. Nothing here touches
 * the bytes of a tensor on the host.
 *
 *   MatMul  one strided-batched product per slice of the batch dims that
 *           one stride per operand expresses (a slice is the whole batch
 *           unless both operands broadcast on different dims); a B shared
 *           by every batch of A folds into one tall product.
 *   Gemm    Y = C broadcast onto [M, N] (fill_2d), then the product with
 *           alpha, beta, transA, transB.
 *   FusedMatMul  the product, then the element-wise group's kernels: bias
 *           and residual as broadcast Adds, the activation (any of
 *           activation.h's) by the unary kernel with its parameters.
 */
#include "ops/math/matmul/matmul_gpu.h"

#include "base/status.h"
#include "device/dev_blas.h"
#include "device/device.h"
#include "ops/common/activation.h"
#include "ops/math/matmul/matmul_fused.h"
#include "ops/math/matmul/matmul_plan.h"

/* The device's BLAS; the place pass keeps these ops off a device without
 * one, so its absence here is a placement made for another device. */
static keel_status blas_of(keel_kctx *k, const keel_dev_blas **b) {
  if (!k->dev || !k->dev->blas)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s placed on %s, which has no BLAS (%s)", k->node->op_type,
                    k->dev ? k->dev->name : "no device", k->dev ? k->dev->desc : "");
  *b = k->dev->blas;
  return KEEL_OK;
}

/* ============================================================ MatMul */

/* Whether operand strides s (in matrices) over batch dims [j, nb) are all
 * 0 (*zero) or the output's own contiguous strides (the operand has the
 * output's dims there): then one stride per operand walks the slice. A
 * dim of 1 fits either. */
static bool slice_fits(const keel_mm_plan *p, int j, const int64_t *s, bool *zero) {
  bool all_zero = true, all_full = true;
  int64_t cont = 1;
  for (int d = p->nb - 1; d >= j; d--) {
    if (p->batch[d] != 1) {
      all_zero &= s[d] == 0;
      all_full &= s[d] == cont;
    }
    cont *= p->batch[d];
  }
  *zero = all_zero;
  return all_zero || all_full;
}

static keel_status gpu_matmul(keel_kctx *k) {
  const keel_tensor *a, *b;
  const keel_dev_blas *bl;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &a));
  KEEL_TRY(keel_k_in_f32(k, 1, false, &b));
  KEEL_TRY(blas_of(k, &bl));
  keel_mm_plan p;
  KEEL_TRY(keel_mm_plan_make(a, b, &p));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, p.rank, p.shape, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  /* the outer dims [0, j) loop here; the inner ones are one call each */
  int j = 0;
  bool za = false, zb = false;
  while (j < p.nb && !(slice_fits(&p, j, p.sa, &za) && slice_fits(&p, j, p.sb, &zb))) j++;
  if (j == p.nb) za = zb = false; /* one matrix per call: strides unused */
  int64_t inner = 1, outer = 1;
  for (int d = 0; d < p.nb; d++) *(d < j ? &outer : &inner) *= p.batch[d];
  int64_t ma = p.M * p.K, mb = p.K * p.N, mc = p.M * p.N;
  keel_dev_gemm g = {.M = p.M, .N = p.N, .K = p.K, .lda = p.K, .ldb = p.N, .ldc = p.N,
                     .batch = inner, .sa = za ? 0 : ma, .sb = zb ? 0 : mb, .sc = mc,
                     .alpha = 1.0f, .beta = 0.0f};
  if (inner > 1 && zb && !za) /* B shared by every A: one tall product */
    g.M *= inner, g.batch = 1;
  const float *A = a->data, *B = b->data;
  float *C = y->data;
  for (int64_t o = 0; o < outer; o++) {
    int64_t r = o, oa = 0, ob = 0;
    for (int d = j - 1; d >= 0; d--) {
      int64_t c = r % p.batch[d];
      r /= p.batch[d];
      oa += c * p.sa[d], ob += c * p.sb[d];
    }
    /* an empty operand (K = 0) has no bytes: no offset into NULL */
    KEEL_TRY(bl->sgemm(k->dev, &g, A ? A + oa * ma : NULL, B ? B + ob * mb : NULL, C + o * inner * mc));
  }
  return KEEL_OK;
}

/* ============================================================== Gemm */

static keel_status gpu_gemm(keel_kctx *k) {
  const keel_tensor *a, *b, *c;
  const keel_dev_blas *bl;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &a));
  KEEL_TRY(keel_k_in_f32(k, 1, false, &b));
  KEEL_TRY(keel_k_in_f32(k, 2, true, &c));
  KEEL_TRY(blas_of(k, &bl));
  keel_gemm_args g;
  KEEL_TRY(keel_gemm_setup(k, a, b, c, &g));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 2, (int64_t[]){g.M, g.N}, &y));
  if (g.M == 0 || g.N == 0) return KEEL_OK;
  /* g.c is NULL when beta is 0: then C is never read, as on the CPU */
  if (g.c) KEEL_TRY(bl->fill_2d(k->dev, g.M, g.N, g.c->data, g.cst[0], g.cst[1], y->data));
  keel_dev_gemm d = {.ta = g.ta, .tb = g.tb, .M = g.M, .N = g.N, .K = g.K, .lda = a->shape[1],
                     .ldb = b->shape[1], .ldc = g.N, .batch = 1, .sc = g.M * g.N,
                     .alpha = g.alpha, .beta = g.c ? g.beta : 0.0f};
  return bl->sgemm(k->dev, &d, a->data, b->data, y->data);
}

/* ======================================================= FusedMatMul */

/* The device's unary kernel for a fused activation (each of
 * activation.h's kinds; its a and b are the kernel's parameters). */
static bool act_code(keel_act_kind kind, keel_dev_unop *op) {
  switch (kind) {
    case KEEL_ACT_RELU: return *op = KEEL_DEV_RELU, true;
    case KEEL_ACT_LEAKY: return *op = KEEL_DEV_LEAKY, true;
    case KEEL_ACT_CLIP: return *op = KEEL_DEV_CLIP, true;
    case KEEL_ACT_HSIGMOID: return *op = KEEL_DEV_HSIGMOID, true;
    case KEEL_ACT_HSWISH: return *op = KEEL_DEV_HSWISH, true;
    case KEEL_ACT_SIGMOID: return *op = KEEL_DEV_SIGMOID, true;
    case KEEL_ACT_TANH: return *op = KEEL_DEV_TANH, true;
    case KEEL_ACT_SILU: return *op = KEEL_DEV_SILU, true;
    case KEEL_ACT_HSIGMOID_MUL: return *op = KEEL_DEV_HSIGMOID_MUL, true;
    case KEEL_ACT_GELU: return *op = KEEL_DEV_GELU, true;
    case KEEL_ACT_GELU_TANH: return *op = KEEL_DEV_GELU_TANH, true;
    default: return false;
  }
}

/* dims of rank r with leading 1s up to rank `to` */
static void pad_dims(int r, const int64_t *dims, int to, int64_t *out) {
  for (int i = 0; i < to; i++) out[i] = i < to - r ? 1 : dims[i - (to - r)];
}

static keel_status gpu_fused_matmul(keel_kctx *k) {
  const keel_tensor *a, *b, *bias, *z;
  const keel_dev_blas *bl;
  KEEL_TRY(keel_k_in_f32(k, 0, false, &a));
  KEEL_TRY(keel_k_in_f32(k, 1, false, &b));
  KEEL_TRY(keel_k_in_f32(k, 2, true, &bias));
  KEEL_TRY(keel_k_in_f32(k, 3, true, &z));
  KEEL_TRY(blas_of(k, &bl));
  keel_fmm_geom g;
  KEEL_TRY(keel_fmm_geom_of(k, a, b, bias, &g));
  keel_act act;
  KEEL_TRY(keel_act_of(k->node, &act));
  keel_dev_unop act_op = KEEL_DEV_RELU;
  if (act.kind != KEEL_ACT_NONE && !act_code(act.kind, &act_op))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU FusedMatMul: no device kernel for the fused activation %d",
                    (int)act.kind);
  int rank = g.yrank;
  int64_t shape[KEEL_MAX_RANK];
  bool same = true;
  memcpy(shape, g.yshape, sizeof(int64_t) * (size_t)rank);
  if (z) KEEL_TRY(keel_fmm_z_shape(&g, z, &rank, shape, &same));
  if (rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU FusedMatMul: rank %d (at most %d)", rank, KEEL_DEV_MAX_RANK);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, rank, shape, &y));
  int64_t ny = keel_tensor_numel(y);
  if (!ny) return KEEL_OK;
  float *c = y->data; /* the product, in Y unless Z widens it */
  if (!same) {
    void *t;
    KEEL_TRY(keel_k_scratch_n(k, g.M * g.N, sizeof(float), &t));
    c = t;
  }
  keel_dev_gemm d = {.tb = g.transb, .M = g.M, .N = g.N, .K = g.K, .lda = g.K,
                     .ldb = g.transb ? g.K : g.N, .ldc = g.N, .batch = 1, .sc = g.M * g.N,
                     .alpha = 1.0f, .beta = 0.0f};
  KEEL_TRY(bl->sgemm(k->dev, &d, a->data, b->data, c));
  /* then as the reference: + bias, + Z, the activation, each in place
   * (every element-wise kernel reads element i before it writes it) */
  if (bias) {
    int64_t mn[2] = {g.M, g.N}, bn[2] = {1, g.N};
    KEEL_TRY(keel_device_binary(k->dev, KEEL_DEV_ADD, 2, mn, mn, c, bn, bias->data, c));
  }
  if (z) {
    int64_t cd[KEEL_MAX_RANK], zd[KEEL_MAX_RANK];
    pad_dims(g.yrank, g.yshape, rank, cd);
    pad_dims(z->rank, z->shape, rank, zd);
    KEEL_TRY(keel_device_binary(k->dev, KEEL_DEV_ADD, rank, shape, cd, c, zd, z->data, y->data));
  }
  if (act.kind != KEEL_ACT_NONE)
    KEEL_TRY(keel_device_unary_p(k->dev, act_op, act.a, act.b, ny, y->data, y->data));
  return KEEL_OK;
}

/* =================================================== the impl lists */

#define GPU_IMPL(fn, rule) {"gpu", keel_prep_on_gpu, NULL, NULL, fn, rule, KEEL_NODE_GPU}
static const keel_impl gpu_matmul_impl =
    GPU_IMPL(gpu_matmul, "placed on the GPU (float32, any ranks, batch broadcast)");
static const keel_impl gpu_gemm_impl =
    GPU_IMPL(gpu_gemm, "placed on the GPU (float32, every attribute, C broadcast)");
const keel_impl keel_gpu_fused_matmul_impl =
    GPU_IMPL(gpu_fused_matmul, "placed on the GPU (float32; bias, residual, any fused activation)");

const keel_impl *const keel_gpu_matmul_impls[] = {&gpu_matmul_impl, NULL};
const keel_impl *const keel_gpu_gemm_impls[] = {&gpu_gemm_impl, NULL};
