/* dev_attn.h: the `attn` kernel group (device.h): what attention needs on
 * a device beyond the blas group's products. FusedAttention on the device
 * (ops/nn/attention/attention_gpu.c) is scores = scale * Q K^T by the
 * blas group's strided sgemm, this group's masked softmax over the score
 * rows in place, then Y = P V by sgemm again.
 *
 * The masked softmax is keel_sdpa's row step (ops/nn/attention/
 * attention.h) for the cases FusedAttention has: per row of scores s,
 *     x[j] = s[j] + mask[j]                 (add: a float mask)
 *     x[j] = cond[j] ? fill : s[j]          (where)
 *     x[j] = cond[j] ? s[j] : fill          (where_not; cond bool bytes)
 *     x[j] = -inf for j > i                 (causal, with any of the above;
 *                                            i the row's query index)
 *     p    = softmax(x)
 * and a row whose every x is -inf (fully masked; NaN scores are skipped
 * by the max as on the CPU) becomes NaN, which the value product carries
 * into its output row: the NaN rows of the unfused Softmax (keel_sdpa's
 * nan_rows). Both backends fill the table: emu_attn.c (the naive C
 * reference) and cuda_attn.c (kernels/attn.cu). Pointers are device
 * pointers. */
#ifndef KEEL_DEVICE_DEV_ATTN_H
#define KEEL_DEVICE_DEV_ATTN_H

#include "device/device.h"

typedef enum keel_dev_mask_kind {
  KEEL_DEV_MASK_NONE, KEEL_DEV_MASK_ADD, KEEL_DEV_MASK_WHERE, KEEL_DEV_MASK_WHERE_NOT
} keel_dev_mask_kind;

/* A mask over scores [H, Sq, Skv] (one batch): element (h, i, j) at
 * p + h * sh + i * ss + j * sk, any stride 0 where the mask broadcasts. */
typedef struct keel_dev_mask {
  keel_dev_mask_kind kind;
  const void *p;               /* float (add) or bool bytes (where, _not)  */
  int64_t sh, ss, sk;
  float fill;                  /* where, where_not: a masked key's score   */
  bool causal;                 /* keys j > i masked in query row i         */
} keel_dev_mask;

typedef struct keel_dev_attn {
  /* s: H * Sq rows of Skv floats (row h * Sq + i), masked and turned into
   * probabilities in place (above). */
  keel_status (*masked_softmax)(keel_device *d, int64_t H, int64_t Sq, int64_t Skv,
                                const keel_dev_mask *m, float *s);
} keel_dev_attn;

KEEL_INTERNAL extern const keel_dev_attn keel_emu_attn;
KEEL_INTERNAL extern const keel_dev_attn keel_cuda_attn;

#endif /* KEEL_DEVICE_DEV_ATTN_H */
