/* select.h: how FusedAttention runs, and why (select.c).
 *
 * The fuse-attention pass (passes/pass_attention.c) makes one
 * FusedAttention node of an exported MatMul -> scale -> mask -> Softmax ->
 * MatMul chain; it has one implementation (attention_fused.c), which runs
 * a node in one of two ways, decided per run by keel_attention_panels:
 * tasks of (batch, head, block of 32 query rows) with sgemm products, or,
 * where keel's panel products have their AVX-512 kernel, tasks of whole
 * heads on K and V packed once per head. The decision uses the pool's
 * splits (keel_pool_splits), so KEEL_OPT_DETERMINISTIC gives the same
 * bits at any thread count.
 */
#ifndef KEEL_ATTENTION_SELECT_H
#define KEEL_ATTENTION_SELECT_H

#include "ops/kernel.h"

/* What a run knows: Q [B, H, Sq, D], K [.., Skv, D], V [.., Skv, Dv]. */
typedef struct keel_attn_facts {
  int64_t B, H, D, Dv, Skv;
} keel_attn_facts;

/* Whole heads on packed K and V: the panel product is AVX-512's, V fits
 * one panel, K's rows and the keys are bounded (the packed copies stay in
 * a worker's cache), and there are heads enough for every split. */
KEEL_INTERNAL bool keel_attention_panels(const keel_attn_facts *f, int splits);

/* Otherwise, query rows per task (of Sq), for a mask that cuts no keys:
 * 32, doubled while every split still gets four tasks and a block of
 * scores stays within 128 KB (one sgemm of more rows runs faster than
 * several of 32); at most KEEL_ATTN_QB_MAX, and no more once it holds
 * every query row. A -inf mask keeps 32, so its
 * blocks skip the keys above the diagonal. */
#define KEEL_ATTN_QB_MAX 256
KEEL_INTERNAL int64_t keel_attention_block_rows(const keel_attn_facts *f, int splits, int64_t Sq);

#endif /* KEEL_ATTENTION_SELECT_H */
