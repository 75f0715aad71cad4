/* select.h: how the attention core runs, and why (select.c).
 *
 * Every attention op runs on one core (attention.h: ONNX Attention, the
 * com.microsoft attentions, FusedAttention of the fuse-attention pass),
 * which runs a call in one of two ways, decided per run by
 * keel_attention_panels unless the caller names one: tasks of (batch,
 * head, block of query rows) with sgemm products, or, where keel's panel
 * products have their AVX-512 kernel, tasks of whole heads on K and V
 * packed once per head; keel_attention_block_rows sizes the blocks. The
 * decisions use the pool's splits (keel_pool_splits), so
 * KEEL_OPT_DETERMINISTIC gives the same bits at any thread count.
 */
#ifndef KEEL_ATTENTION_SELECT_H
#define KEEL_ATTENTION_SELECT_H

#include "ops/kernel.h"

/* What a run knows: Q [B, H, Sq, D], K [.., Skv, D], V [.., Skv, Dv], and
 * whether rows of one block may keep different keys (causal, a window, a
 * bool mask with a -inf fill: the block's keys are cut to their union). */
typedef struct keel_attn_facts {
  int64_t B, H, D, Dv, Skv;
  bool cut;
} keel_attn_facts;

/* Whole heads on packed K and V: the panel product is AVX-512's, V fits
 * one panel, K's rows and the keys are bounded (the packed copies stay in
 * a worker's cache), and there are heads enough for every split. */
KEEL_INTERNAL bool keel_attention_panels(const keel_attn_facts *f, int splits);

/* Otherwise, query rows per task (of Sq), where rows cut no keys: 32,
 * doubled while every split still gets four tasks and a block of scores
 * stays within 128 KB (one sgemm of more rows runs faster than several of
 * 32); at most KEEL_ATTN_QB_MAX, and no more once it holds every query
 * row. Where they cut (f->cut) 32, so that a causal block skips the keys
 * above the diagonal; the panels' blocks are 32 rows too. */
#define KEEL_ATTN_QB_MAX 256
KEEL_INTERNAL int64_t keel_attention_block_rows(const keel_attn_facts *f, int splits, int64_t Sq);

#endif /* KEEL_ATTENTION_SELECT_H */
