/* attention.h: the scaled-dot-product attention core that every attention
 * op calls: ONNX Attention (attention_onnx.c), the com.microsoft
 * attentions (attention_ms.c) and FusedAttention, the node of the
 * fuse-attention pass (attention_fused.c); FlexAttention
 * (flex_attention.c), whose sub-graphs need the whole score tensor, runs
 * the core's stages over whole heads (the end of this file).
 *
 * For each batch b, query head h and query row i it computes
 *
 *     s[j] = scale * <Q[b,h,i,:], K[b,g,j,:]>          g = h / (Hq / Hkv)
 *     s[j] = softcap * tanh(s[j] / softcap)           when softcap > 0
 *     x[j] = s[j] + mask[b,h,i,j]                     an additive mask, or
 *     x[j] = cond[b,h,i,j] == keep ? s[j] : fill      a bool one,
 *            for j in the row's allowed range, else -inf
 *     p    = softmax(x)
 *     Y[b,h,i,:] = sum_j p[j] V[b,g,j,:]
 *
 * in float. The allowed range of a row is an interval [lo, hi) of keys:
 * with p = i + offset[b] the query's absolute position, causal keeps
 * j <= p, a sliding window keeps p - left <= j <= p + right, kv_len keeps
 * j < kv_len[b] (right padding) and a mask shorter than the keys keeps
 * j < mask_len (ONNX pads the mask with -inf). A bool mask whose fill is
 * -inf narrows it further to the row's first and last kept key (a causal
 * mask given as a tensor skips the keys above the diagonal). A row is
 * fully masked when its interval is empty or every x in it is -inf: its
 * probabilities are zero and its output is zeros, or NaN with nan_rows
 * (what an unfused Softmax gives).
 *
 * Every operand is addressed by element strides (batch, head, row; the
 * last dim contiguous, 0 strides broadcast), so 3-D [B, S, H*D] and 4-D
 * [B, H, S, D] layouts are read in place without a transpose; K may also
 * be given transposed ([.., Dk, Skv], k_t: a MatMul's Kt). The work runs
 * on the kctx's pool in tasks that each write their own rows (so the bits
 * do not depend on the thread count): a block of query rows of one head
 * (or, decoding a single query, the heads of one GQA group, which share
 * their K and V), or a whole head whose K (scale folded in) and V are
 * packed once into keel's panel layout (ops/common/panel_gemm.h) so each
 * block's two products run on keel's register-tiled kernel. select.c
 * chooses the panels and the rows per block unless the caller does. A
 * block's scores are one product over the union of its rows' keys, each
 * row's mask and softmax (keel_vm_softmax_row) a pass over its own keys,
 * and the output rows a second product with the same keys of V. Scratch
 * is one block of scores per worker, whatever the sequence lengths. */
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

/* How the tasks run (keel_sdpa.path). */
enum {
  KEEL_SDPA_AUTO = 0,   /* as select.c says (keel_attention_panels)         */
  KEEL_SDPA_BLOCKS = 1, /* blocks of query rows, OpenBLAS products          */
  KEEL_SDPA_PANELS = 2  /* whole heads on packed panels, where V fits one
                           panel (Dv <= KEEL_PANEL_NP) and no GQA group
                           decodes; else blocks                             */
};

/* A zeroed keel_sdpa is the plain form: K as rows, no mask, zeros for a
 * fully masked row, select.c's choices. */
typedef struct keel_sdpa {
  int64_t B, Hq, Hkv, Sq, Skv, Dk, Dv;
  keel_sdpa_t q, k, v;          /* (B,Hq,Sq,Dk) (B,Hkv,Skv,Dk) (B,Hkv,Skv,Dv) */
  bool k_t;                     /* K given transposed, (B,Hkv,Dk,Skv): k.ss
                                   steps over Dk, the keys are contiguous   */
  float *y;                     /* (B,Hq,Sq,Dv) with strides y_sb/y_sh/y_ss  */
  int64_t y_sb, y_sh, y_ss;
  keel_sdpa_t mask;             /* additive float; p == NULL: none. A row has
                                   mask_len values; strides may be 0        */
  const uint8_t *cond;          /* or a bool mask (mask.p NULL) read with
                                   mask's strides and mask_len              */
  bool keep;                    /* cond true keeps a key (else it masks it) */
  float fill;                   /* the score cond gives a masked key        */
  bool mask_bcast_keys;         /* one mask value for all keys of a row     */
  int64_t mask_len;
  float scale, softcap;         /* softcap <= 0: none                       */
  bool causal;
  int64_t left, right;          /* window sides; < 0: unbounded             */
  const int64_t *offset;        /* (B) position of query row 0; NULL: all 0 */
  const int64_t *kv_len;        /* (B) valid keys; NULL: all Skv            */
  float *qk;                    /* (B,Hq,Sq,Skv) dense, or NULL             */
  int qk_mode;                  /* KEEL_SDPA_QK_*                           */
  bool nan_rows;                /* a fully masked row's output is NaN       */
  int path;                     /* KEEL_SDPA_AUTO / _BLOCKS / _PANELS       */
  int64_t block_rows;           /* query rows per block; 0: select.c's      */
} keel_sdpa;

/* Runs the attention described by a on k's pool. Scratch comes from k.
 * Shapes are the caller's to check; this returns an error only when
 * scratch cannot be had or a dimension exceeds what BLAS indexes. */
KEEL_INTERNAL keel_status keel_sdpa_f32(keel_kctx *k, const keel_sdpa *a);

/* The core's stages over whole heads, for an op that changes the scores
 * or the probabilities between them (FlexAttention's score_mod and
 * prob_mod sub-graphs): the same score product, row softmax and value
 * product as the blocks above, on dense tensors Q (B,Hq,Sq,Dk),
 * K (B,Hkv,Skv,Dk), V (B,Hkv,Skv,Dv), scores and probabilities
 * (B,Hq,Sq,Skv) and Y (B,Hq,Sq,Dv), in float or double. */
typedef struct keel_sdpa_heads {
  int ct;                       /* KEEL_FLOAT or KEEL_DOUBLE                */
  int64_t B, Hq, Hkv, Sq, Skv, Dk, Dv;
  double scale;
} keel_sdpa_heads;

/* s = scale * Q K^T, head by head. */
KEEL_INTERNAL void keel_sdpa_scores(const keel_sdpa_heads *h, const void *q, const void *k,
                                    void *s);
/* p = softmax of each row of s over the keys; a row whose every score is
 * -inf becomes NaN (no fully-masked-row rule: as a plain Softmax). */
KEEL_INTERNAL void keel_sdpa_softmax(const keel_sdpa_heads *h, const void *s, void *p);
/* y = p V, head by head. */
KEEL_INTERNAL void keel_sdpa_values(const keel_sdpa_heads *h, const void *p, const void *v,
                                    void *y);

#endif /* KEEL_ATTENTION_H */
