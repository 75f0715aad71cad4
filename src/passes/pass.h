/* pass.h: the one ordered list of graph passes that run at load, between
 * reading the model (onnx/) and resolving names into slots (ir/scope.c).
 *
 *   inline functions (in the loader) -> train -> autodiff -> [shard] -> identity
 *   and constant folding, dead nodes -> fusion -> layout -> activation fusion
 *   -> place (only for a GPU) -> resolve -> plan
 *
 * A pass is a function of the whole model: it sees every graph, sub-graphs
 * of If/Loop/Scan included (m->graphs), works on value names, and may
 * replace nodes (keel_graph_replace_node) or add constants (keel_ir_add_const,
 * the one helper for that). A node a pass makes out of several keeps their
 * names in fused, so reports, traces and errors still name the nodes
 * of the file.
 *
 * Optimizing passes can be switched off per session
 * (KEEL_OPT_NO_GRAPH_PASSES) to run the model exactly as written: the tests
 * compare the two.
 */
#ifndef KEEL_PASS_H
#define KEEL_PASS_H

#include "ir/ir.h"

typedef struct keel_pass {
  const char *name;
  keel_status (*run)(keel_model *m);
  bool optimizing;             /* skipped with KEEL_OPT_NO_GRAPH_PASSES    */
} keel_pass;

/* Runs the pipeline in order; optimize = false runs only the passes that
 * give the model its meaning (autodiff). */
KEEL_INTERNAL keel_status keel_ir_passes(keel_model *m, bool optimize);

/* Runs the passes that give the model its meaning, in order, up to and
 * including `last` (keel shard: autodiff, then shard; no fusion, so the
 * written model stays plain ONNX). */
KEEL_INTERNAL keel_status keel_ir_passes_through(keel_model *m, const char *last);

/* The driver every fusion pass shares: for each node i of g (in order)
 * not yet dropped, `try_at` may match a pattern starting there and rewrite
 * it (the matched nodes but one are marked in drop[]); it says whether it
 * did in *fused. Then the dropped nodes leave the graph, once. For each
 * graph of the model (sub-graphs included). */
typedef keel_status (*keel_fuse_fn)(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused);
KEEL_INTERNAL keel_status keel_pass_fuse_all(keel_model *m, keel_fuse_fn try_at);
/* True when one of the n matched nodes is already dropped (another match
 * took it): a match must not overlap one already rewritten. */
KEEL_INTERNAL bool keel_pass_overlaps(const bool *drop, const int32_t *nodes, int n);

/* A value name no node, constant or graph output of g uses: base.tag, or
 * base.tagN (arena memory); NULL after 1000 tries or on OOM. */
KEEL_INTERNAL const char *keel_pass_fresh(keel_model *m, const keel_graph *g, const char *base,
                                          const char *tag);

/* A graph's nodes rebuilt in order, for a pass that rewrites many of them
 * (lift-conv1d, split-concat-conv): every node kept or made is pushed
 * (keel_sys memory, grown by doubling), then the pass installs v[0..n)
 * with keel_graph_set_nodes (one arena copy) and frees the list, on
 * success or error. `pass` and `g` name the pass and the graph in the
 * out-of-memory message. */
typedef struct keel_node_list {
  const char *pass;
  const keel_graph *g;
  keel_node *v;
  int32_t n, cap;
} keel_node_list;
KEEL_INTERNAL keel_status keel_node_list_push(keel_node_list *l, const keel_node *n);
KEEL_INTERNAL void keel_node_list_free(keel_node_list *l);
/* Elementwise ops of ai.onnx that act on each element alone, so they
 * commute with a transpose or a reshape that keeps the elements (the
 * layout pass, lift-conv1d): of one data input whose other inputs, if
 * any, are scalars or attributes (Clip's bounds) ... */
KEEL_INTERNAL extern const char *const keel_pass_unary_ops[];
/* ... and of several data inputs, with numpy broadcasting. */
KEEL_INTERNAL extern const char *const keel_pass_nary_ops[];
/* Whether n is an ai.onnx op named in `list` (NULL-terminated). */
KEEL_INTERNAL bool keel_pass_op_in(const keel_node *n, const char *const *list);
/* How many times g's nodes read `name` as a direct input (keel_ir_uses
 * also counts sub-graphs and graph outputs). */
KEEL_INTERNAL int32_t keel_pass_direct_reads(const keel_graph *g, const char *name);

/* Whether some node of some graph of m satisfies `pred`: a pass's quick
 * test before it pays for shape inference. */
typedef bool (*keel_node_pred)(const keel_model *m, const keel_graph *g, const keel_node *n);
KEEL_INTERNAL bool keel_pass_any_node(const keel_model *m, keel_node_pred pred);

/* Passes (one file each). */
/* The training graph (pass_train.c): a no-op unless m->train is set. */
KEEL_INTERNAL keel_status keel_pass_train(keel_model *m);
KEEL_INTERNAL keel_status keel_pass_fuse_activation(keel_model *m);
KEEL_INTERNAL keel_status keel_pass_fold_identity(keel_model *m);
/* pass_fold.c: nodes of constants computed at load (under a size cap), and
 * nodes nothing reads removed; counted in m->fold. */
KEEL_INTERNAL keel_status keel_pass_fold_constants(keel_model *m);
KEEL_INTERNAL keel_status keel_pass_remove_dead(keel_model *m);
/* pass_reshape.c: a Reshape whose shape is computed from other shapes ->
 * a constant shape of 0s (copy) and one -1 that means the same on every
 * run, by symbolic shape inference; its chain then goes as dead. */
KEEL_INTERNAL keel_status keel_pass_canon_reshape(keel_model *m);
/* pass_cse.c: a node the same as an earlier one (op, attributes, inputs;
 * Shapes of values whose inferred shapes are equal) is computed once;
 * counted in m->fold.merged. */
KEEL_INTERNAL keel_status keel_pass_cse(keel_model *m);
/* pass_pad.c: a zero Pad of the spatial dims read by one Conv or
 * AveragePool -> the reader's own pads. */
KEEL_INTERNAL keel_status keel_pass_fold_pad(keel_model *m);
/* pass_fusedconv.c: com.microsoft FusedConv (ONNX Runtime's optimized
 * output) -> Conv [-> Add] [-> activation], for the passes after it. */
KEEL_INTERNAL keel_status keel_pass_canon_fusedconv(keel_model *m);
/* pass_bn.c: Conv + inference BatchNormalization with constant
 * parameters -> one Conv with folded weights and bias. */
KEEL_INTERNAL keel_status keel_pass_fold_batchnorm(keel_model *m);
/* pass_canon.c: HardSwish and HardSigmoid written as Add/Clip/Mul/Div in
 * the orders exporters use -> the one ONNX op. */
KEEL_INTERNAL keel_status keel_pass_canon_activation(keel_model *m);
/* pass_transpose.c: a last-two-axes swap spelled Reshape -> Transpose ->
 * Reshape (dynamo's K^T), and Transposes of Transposes, become one Transpose. */
KEEL_INTERNAL keel_status keel_pass_canon_transpose(keel_model *m);
KEEL_INTERNAL keel_status keel_pass_fuse_layernorm(keel_model *m);
KEEL_INTERNAL keel_status keel_pass_fuse_gelu(keel_model *m);
/* pass_causal.c: a FusedAttention whose additive mask is a causal -inf
 * Trilu built from the input length -> the attention's causal flag. */
KEEL_INTERNAL keel_status keel_pass_causal_mask(keel_model *m);
/* pass_qkv.c: a FusedAttention whose q, k, v are Reshapes of one Split (or
 * Slices) of a projection's output -> reading that output by columns. */
KEEL_INTERNAL keel_status keel_pass_attention_qkv(keel_model *m);
/* Products by a constant matrix with their bias, residual and activation
 * (pass_matmul.c). */
KEEL_INTERNAL keel_status keel_pass_fuse_matmul(keel_model *m);
/* pass_concat.c: a MaxPool / AveragePool of a channel Concat -> the
 * pooled parts concatenated. */
KEEL_INTERNAL keel_status keel_pass_sink_concat(keel_model *m);
/* pass_catconv.c: a Conv of a channel Concat -> the sum of the convs of
 * its parts (W split by input channels), where oneDNN runs convs. */
KEEL_INTERNAL keel_status keel_pass_split_concat_conv(keel_model *m);
/* pass_conv1d.c: 1-D convolution regions rewritten at rank 4 (height 1),
 * for the layout pass. */
KEEL_INTERNAL keel_status keel_pass_lift_conv1d(keel_model *m);
/* Channels-last convolution chains (pass_layout.c). */
KEEL_INTERNAL keel_status keel_pass_layout(keel_model *m);
/* Attention (pass_attention.c): MatMul..Softmax..MatMul into one node. */
KEEL_INTERNAL keel_status keel_pass_fuse_attention(keel_model *m);
/* pass_place.c: nodes a GPU kernel computes go to the GPU (m->gpu),
 * with MemcpyFromHost / MemcpyToHost nodes where values cross. */
KEEL_INTERNAL keel_status keel_pass_place(keel_model *m);

#endif /* KEEL_PASS_H */
