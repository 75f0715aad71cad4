/* attention.h: the scaled-dot-product attention core that every attention
 * kernel shares (ONNX Attention, the com.microsoft attentions, a fused
 * attention from a graph pass).
 *
 * For each batch b, query head h and query row i it computes
 *
 *     s[j] = scale * <Q[b,h,i,:], K[b,g,j,:]>          g = h / (Hq / Hkv)
 *     s[j] = softcap * tanh(s[j] / softcap)           when softcap > 0
 *     x[j] = s[j] + mask[b,h,i,j]   for j in the row's allowed range, else -inf
 *     p    = softmax(x)          (all zeros when the row has no allowed key)
 *     Y[b,h,i,:] = sum_j p[j] V[b,g,j,:]
 *
 * in float. The allowed range of a row is an interval [lo, hi) of keys:
 * with p = i + offset[b] the query's absolute position, causal keeps
 * j <= p, a sliding window keeps p - left <= j <= p + right, kv_len keeps
 * j < kv_len[b] (right padding) and a mask shorter than the keys keeps
 * j < mask_len (ONNX pads the mask with -inf). A row is fully masked when
 * its interval is empty or every mask value in it is -inf; its
 * probabilities and output are zero.
 *
 * Every operand is addressed by element strides (batch, head, row; the
 * last dim is contiguous), so 3-D [B, S, H*D] and 4-D [B, H, S, D]
 * layouts are read in place without a transpose. QK^T and PV are OpenBLAS
 * sgemm calls over blocks of query rows (of one head, or when decoding a
 * single query, of a GQA group's heads), limited to the block's union of
 * allowed keys; each row's softmax is a max pass fused with the mask, an
 * exp pass and a scale, with no per-element branch. */
#ifndef KEEL_ATTENTION_H
#define KEEL_ATTENTION_H

#include "ops/kernel.h"

/* An operand: data plus element strides of batch, head and row. */
typedef struct keel_sdpa_t {
  const float *p;
  int64_t sb, sh, ss;
} keel_sdpa_t;

/* What the optional score output (qk) holds: the qk_matmul_output_mode
 * of ONNX Attention. */
enum {
  KEEL_SDPA_QK_RAW = 0,     /* scale * QK^T, softcapped when softcap > 0   */
  KEEL_SDPA_QK_SOFTCAP = 1, /* the same                                    */
  KEEL_SDPA_QK_BIAS = 2,    /* plus mask and -inf outside the allowed range */
  KEEL_SDPA_QK_PROBS = 3    /* the softmax probabilities                   */
};

typedef struct keel_sdpa {
  int64_t B, Hq, Hkv, Sq, Skv, Dk, Dv;
  keel_sdpa_t q, k, v;          /* (B,Hq,Sq,Dk) (B,Hkv,Skv,Dk) (B,Hkv,Skv,Dv) */
  float *y;                     /* (B,Hq,Sq,Dv) with strides y_sb/y_sh/y_ss  */
  int64_t y_sb, y_sh, y_ss;
  keel_sdpa_t mask;             /* additive float; p == NULL: none. A row has
                                   mask_len values; strides may be 0        */
  int64_t mask_len;
  float scale, softcap;         /* softcap <= 0: none                       */
  bool causal;
  int64_t left, right;          /* window sides; < 0: unbounded             */
  const int64_t *offset;        /* (B) position of query row 0; NULL: all 0 */
  const int64_t *kv_len;        /* (B) valid keys; NULL: all Skv            */
  float *qk;                    /* (B,Hq,Sq,Skv) dense, or NULL             */
  int qk_mode;                  /* KEEL_SDPA_QK_*                           */
} keel_sdpa;

/* Runs the attention described by a. Scratch comes from k (one block).
 * Shapes are the caller's to check; this returns an error only when
 * scratch cannot be had or a dimension exceeds what BLAS indexes. */
KEEL_INTERNAL keel_status keel_sdpa_f32(keel_kctx *k, const keel_sdpa *a);

/* keel_exp_neg_f32: ops/common/vmath.h */
#include "ops/common/vmath.h"

#endif /* KEEL_ATTENTION_H */
