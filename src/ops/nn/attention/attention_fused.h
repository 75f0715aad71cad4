/* attention_fused.h: FusedAttention's reading of its inputs and attributes
 * into the attention core's description (attention_fused.c), shared by
 * the CPU op and its GPU implementation (attention_gpu.c). */
#ifndef KEEL_ATTENTION_FUSED_H
#define KEEL_ATTENTION_FUSED_H

#include "ops/nn/attention/attention.h"

/* mask_kind attribute values */
enum { KEEL_FA_MASK_NONE, KEEL_FA_MASK_ADD, KEEL_FA_MASK_WHERE, KEEL_FA_MASK_WHERE_NOT };

/* Checks the node's operands, mask and attributes, makes Y (*y) and fills
 * *s: Hq = Hkv, operands and mask by strides (0 where broadcast), the
 * bool mask in s->cond with s->keep and s->fill, nan_rows. Reads no
 * tensor's bytes (they may be device memory). The caller handles an empty
 * Y, Skv == 0 (zeros) and Dk == 0 (unsupported). */
KEEL_INTERNAL keel_status keel_fa_plan(keel_kctx *k, keel_sdpa *s, keel_tensor **y, int *mask_kind);

/* the GPU implementation (attention_gpu.c), NULL-ended */
extern const keel_impl *const keel_gpu_fused_attention_impls[];

#endif /* KEEL_ATTENTION_FUSED_H */
