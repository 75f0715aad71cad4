/* shard.h: tensor-parallel sharding of transformer blocks (pass_shard.c),
 * the pass behind `keel shard MODEL --tp N --out DIR`.
 *
 * With m->shard set, the pass rewrites the model into rank `rank`'s part
 * of a tp-way split, Megatron-LM style; without it, it does nothing (every
 * ordinary load). Blocks are found by dataflow, never by names: a block is
 * the set of nodes between column-parallel projections (MatMul by a 2-D
 * weight whose input is replicated) and one row-parallel projection (a
 * MatMul by a 2-D weight whose input derives from them), through
 * elementwise ops, Reshape / Transpose / Softmax and activation-activation
 * MatMuls (attention). Each rank keeps 1/tp of the projections' columns
 * (rows for the row-parallel one) and of the heads; the Reshape shapes
 * that encode the head count or width are rewritten (constants divided,
 * computed ones divided by a Div node); a com.microsoft AllReduce follows
 * the row-parallel MatMul, before its bias Add. What cannot be split
 * correctly is refused naming the node (tp not dividing the heads, a block
 * value read outside the block, an op the block cannot hold).
 * With split_vocab the LM head (a weight MatMul outside the blocks whose
 * output width is the vocabulary of an embedding Gather) is column-parallel
 * followed by an AllGather on the last axis, and the embeddings of that
 * vocabulary are row-parallel: each rank looks up its own rows (a zero
 * row for the others' tokens), an AllReduce sums them. Position tables
 * (another row count) stay replicated.
 */
#ifndef KEEL_SHARD_H
#define KEEL_SHARD_H

#include "ir/ir.h"

#define KEEL_SHARD_MAX_COLL 256

typedef struct keel_shard_coll {
  const char *graph;           /* graph path                               */
  const char *node;            /* the collective's node name               */
  const char *op;              /* AllReduce / AllGather                    */
  const char *after;           /* the node whose output it combines        */
} keel_shard_coll;

typedef struct keel_shard_cfg {
  int32_t tp, rank;
  bool split_vocab;
  /* filled by the pass */
  int32_t n_blocks, n_attention, n_mlp, n_vocab_heads, n_vocab_embeddings, n_coll;
  uint64_t sharded_bytes;      /* this rank's bytes of sharded weights     */
  uint64_t sharded_full_bytes; /* the same weights unsharded               */
  keel_shard_coll coll[KEEL_SHARD_MAX_COLL];
  /* weight projections in no recognised block: left whole on every rank */
  int32_t n_replicated;
  const char *replicated[8];   /* the first few: "graph: 'node'"          */
} keel_shard_cfg;

KEEL_INTERNAL keel_status keel_pass_shard(keel_model *m);

#endif /* KEEL_SHARD_H */
