/* attention_gpu.c: FusedAttention (attention_fused.c) on a device,
 * composed of the device's kernel groups:
 *
 *     S = scale * Q K^T     blas group: one strided sgemm per batch over
 *                           the heads (Q and K by their strides: layouts
 *                           [B, H, S, D] or [B, S, H, D], K as rows or
 *                           given transposed, broadcast heads stride 0)
 *     P = softmax(mask(S))  attn group: the mask (add, where, where_not
 *                           with fill) broadcast by strides, NaN rows where
 *                           every key is masked (dev_attn.h)
 *     Y = P V               blas group again, into Y by its strides
 *
 * which is keel_sdpa's computation (attention.h) for what FusedAttention
 * asks of it: Hq = Hkv, the causal flag (keys past the row's own index
 * masked), no window, offsets or softcap, and nan_rows; q, k and v by
 * their strides, packed columns of one tensor included. S is the scores
 * of one batch's heads, [h, Sq, Skv] in device
 * scratch (keel_k_scratch: the device heap for a GPU node), as many heads
 * at a time as fit SCORES_MAX floats (at least one), reused chunk after
 * chunk: scratch does not grow with B, nor with H past the cap.
 *
 * Which nodes run here is the place pass's decision (passes/pass_place.c:
 * float32 operands of rank 3 or 4, a float32 or bool mask of rank up to
 * 4, a device with a BLAS); the reading of the node is the CPU op's
 * (keel_fa_plan), so shapes and errors agree on both sides. */
#include "base/status.h"
#include "device/dev_attn.h"
#include "device/dev_blas.h"
#include "device/device.h"
#include "ops/nn/attention/attention_fused.h"

/* Score floats in device scratch at most (64 MiB), unless one head's
 * [Sq, Skv] is larger. */
#define SCORES_MAX ((int64_t)16 << 20)

static keel_status gpu_fused_attention(keel_kctx *k) {
  keel_sdpa s;
  keel_tensor *y;
  int kind;
  KEEL_TRY(keel_fa_plan(k, &s, &y, &kind));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  keel_device *d = k->dev;
  if (!d || !d->blas || !d->attn)
    return keel_err(KEEL_ERR_UNSUPPORTED, "FusedAttention placed on %s, which has no %s",
                    d ? d->name : "no device", d && !d->blas ? "BLAS" : "attention kernels");
  const keel_dev_blas *bl = d->blas;
  int64_t H = s.Hq, Sq = s.Sq, Skv = s.Skv;
  /* Y = P V with P [Sq, Skv] per head; over no keys (K = 0) it is zeros */
  keel_dev_gemm pv = {.M = Sq, .N = s.Dv, .K = Skv, .lda = Skv, .ldb = s.v.ss, .ldc = s.y_ss,
                      .batch = H, .sa = Sq * Skv, .sb = s.v.sh, .sc = s.y_sh,
                      .alpha = 1.0f, .beta = 0.0f};
  if (Skv == 0) {
    pv.lda = 1, pv.ldb = s.Dv, pv.sa = pv.sb = 0;
    for (int64_t b = 0; b < s.B; b++) KEEL_TRY(bl->sgemm(d, &pv, s.q.p, s.v.p, s.y + b * s.y_sb));
    return KEEL_OK;
  }
  if (s.Dk == 0)
    return keel_err(KEEL_ERR_UNSUPPORTED, "FusedAttention (ai.keel.internal, opset 1): head size 0");
  /* scores of at most SCORES_MAX floats at a time: a chunk of heads (one
   * head's whole [Sq, Skv] at least) */
  int64_t hc = SCORES_MAX / (Sq * Skv);
  hc = hc < 1 ? 1 : hc > H ? H : hc;
  void *scratch;
  KEEL_TRY(keel_k_scratch_n(k, hc * Sq * Skv, sizeof(float), &scratch));
  float *S = scratch;
  /* K as rows [Skv, Dk] (op(B) = K^T) or given transposed [Dk, Skv] */
  keel_dev_gemm qk = {.tb = !s.k_t, .M = Sq, .N = Skv, .K = s.Dk, .lda = s.q.ss, .ldb = s.k.ss,
                      .ldc = Skv, .sa = s.q.sh, .sb = s.k.sh, .sc = Sq * Skv,
                      .alpha = s.scale, .beta = 0.0f};
  keel_dev_mask m = {KEEL_DEV_MASK_NONE, NULL, 0, 0, 0, s.fill, s.causal};
  if (s.mask.p || s.cond) {
    m.kind = s.mask.p ? KEEL_DEV_MASK_ADD : s.keep ? KEEL_DEV_MASK_WHERE_NOT : KEEL_DEV_MASK_WHERE;
    m.sh = s.mask.sh, m.ss = s.mask.ss, m.sk = s.mask_bcast_keys ? 0 : 1;
  }
  for (int64_t b = 0; b < s.B; b++)
    for (int64_t h = 0; h < H; h += hc) {
      int64_t nh = H - h < hc ? H - h : hc;
      qk.batch = pv.batch = nh;
      KEEL_TRY(bl->sgemm(d, &qk, s.q.p + b * s.q.sb + h * s.q.sh, s.k.p + b * s.k.sb + h * s.k.sh, S));
      int64_t mo = b * s.mask.sb + h * s.mask.sh;
      if (m.kind == KEEL_DEV_MASK_ADD) m.p = s.mask.p + mo;
      else if (m.kind != KEEL_DEV_MASK_NONE) m.p = s.cond + mo;
      KEEL_TRY(d->attn->masked_softmax(d, nh, Sq, Skv, &m, S));
      KEEL_TRY(bl->sgemm(d, &pv, S, s.v.p + b * s.v.sb + h * s.v.sh, s.y + b * s.y_sb + h * s.y_sh));
    }
  return KEEL_OK;
}

static const keel_impl gpu_fused_attention_impl = {
    "gpu", keel_prep_on_gpu, NULL, NULL, gpu_fused_attention,
    "placed on the GPU (float32; mask none, add, where, where_not; causal; any layout)", KEEL_NODE_GPU};
const keel_impl *const keel_gpu_fused_attention_impls[] = {&gpu_fused_attention_impl, NULL};
