/* pass_place.c: placement (issue 25): which nodes run on the GPU.
 *
 * Runs last, and only for a session made for a GPU (keel_options.device
 * "cuda[:N]": m->gpu). Each node of every graph goes to the GPU when a
 * GPU kernel computes it for the element types and ranks inferred at load
 * (ir/shapes.h), and stays on the CPU otherwise: a type or rank that
 * cannot be known keeps the node on the CPU, never a guess. If, Loop and
 * Scan stay on the CPU (a condition or a trip count is read by the host);
 * their bodies' nodes are placed like any other.
 *
 * Then, per graph, values cross between the devices through explicit
 * nodes, named as ONNX Runtime names them:
 *   - MemcpyFromHost: a value made on the CPU (a node's output, a graph
 *     input, an outer value a body reads) that a GPU node reads, copied
 *     once before its first GPU reader, which all read the copy
 *     ("<value>.gpu");
 *   - MemcpyToHost: a GPU node's output that a CPU node, a sub-graph or
 *     the graph's outputs read: the GPU node writes "<value>.gpu" and the
 *     copy, right after it, makes the value itself.
 * Constant inputs of GPU nodes (weights) are not copied per run: they
 * belong on the device from binding.
 * The nodes the pass makes are named "keel.place/<value>/to_gpu" and
 * ".../to_host"; placed nodes keep their names.
 *
 * The GPU kernels are those of src/device/kernels (float32): element-wise
 * Add, Sub, Mul, Div, Max, Min, Pow with broadcasting up to rank 8; Relu,
 * Neg, Abs, Sqrt, Exp, Sigmoid, Tanh, Log, Erf, Gelu (and com.microsoft's),
 * Reciprocal, Floor, Ceil, Softplus, LeakyRelu, Elu, HardSigmoid,
 * HardSwish, Cos, Sin, Clip (constant bounds); Softmax over the last axis;
 * the blas group's MatMul, Gemm and FusedMatMul (gpu_takes_blas);
 * FusedAttention (gpu_takes_attn: blas products and the attn group);
 * the move group (gpu_takes_move, place_views: views, Transpose, Concat,
 * Split, Slice, Expand, Gather, Where, Cast); the norm group
 * (gpu_takes_norm: LayerNormalization, ReduceSum/Mean/Max over adjacent
 * axes); the conv group (gpu_takes_conv: Conv 1-D and 2-D with its
 * fused activation, ConvTranspose 1-D and 2-D, MaxPool, AveragePool, the
 * global pools; the layout pass leaves them NCHW in such a session;
 * gpu_takes_image: Resize and Upsample, float32, any rank); the rnn
 * group (gpu_takes_rnn: LSTM and GRU with the default activations). When the GPU implementations
 * join the families' selections (select.c), this table becomes their
 * supports().
 *
 * Inputs read on the host. Some inputs of a GPU node only shape its work
 * (Reshape's shape, Squeeze's axes, Slice's starts...): the node's kernel
 * reads them on the host, so they must stay host tensors. Which ones is a
 * pure function of the node (keel_place_host_input, passes/place.h), read
 * by everyone who must agree: here (no MemcpyFromHost for them; a GPU
 * reader of them counts as a host reader, so a value made on the GPU is
 * copied back for it; gpu_reads_from leaves them alone), session.c (such
 * a constant is not copied to the device) and run.c (the node gets the
 * host's constant). Shape and Size on the CPU read only the dims of a
 * device value: they need no MemcpyToHost (reads_dims_only).
 */
#include <stdio.h>

#include "base/status.h"
#include "ir/shapes.h"
#include "ops/common/activation.h"
#include "passes/pass.h"
#include "passes/place.h"

#define PLACE_PREFIX "keel.place/"
#define GPU_MAX_RANK 8

static const char *const GPU_BINARY[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
static const char *const GPU_UNARY[] = {"Relu",       "Neg",        "Abs",   "Sqrt",     "Exp",
                                        "Sigmoid",    "Tanh",       "Log",   "Erf",      "Gelu",
                                        "Reciprocal", "Floor",      "Ceil",  "Softplus", "LeakyRelu",
                                        "Elu",        "HardSigmoid", "HardSwish", "Cos", "Sin"};

static bool one_of(const char *op, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(op, list[i])) return true;
  return false;
}

/* A float32 tensor of known rank up to GPU_MAX_RANK. */
static bool gpu_tensor(const keel_shapes *S, const keel_graph *g, const char *name) {
  const keel_sshape *v = name[0] ? keel_shapes_find(S, g, name) : NULL;
  return v && v->dtype == KEEL_FLOAT && v->rank >= 0 && v->rank <= GPU_MAX_RANK;
}

/* The kernel groups' rules (device/device.h): whether the group's GPU
 * implementation computes node n, its inputs and outputs as inferred. */

/* An optional input: absent, or a GPU tensor. */
static bool gpu_tensor_opt(const keel_shapes *S, const keel_graph *g, const keel_node *n, int i) {
  return i >= n->n_in || !n->in_names[i][0] || gpu_tensor(S, g, n->in_names[i]);
}

/* A float32 tensor of known rank 1 to GPU_MAX_RANK: a MatMul operand. */
static bool gpu_matrix_operand(const keel_shapes *S, const keel_graph *g, const char *name) {
  const keel_sshape *v = name[0] ? keel_shapes_find(S, g, name) : NULL;
  return gpu_tensor(S, g, name) && v->rank >= 1;
}

/* MatMul, Gemm (device/dev_blas.h; ops/math/matmul/matmul_gpu.c): float32
 * operands of known rank, every attribute and broadcast the ops allow;
 * FusedMatMul with its bias and residual and any fused activation (the
 * unary kernel has each of activation.h's). Not on a device whose
 * BLAS did not load (m->gpu_no_blas). */
static bool gpu_takes_blas(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                           const keel_node *n) {
  if (m->gpu_no_blas || n->n_subs || n->n_out != 1 || !gpu_tensor(S, g, n->out_names[0])) return false;
  bool onnx = !n->domain[0] || !strcmp(n->domain, "ai.onnx");
  const char *op = n->op_type;
  if (onnx && !strcmp(op, "MatMul"))
    return n->n_in == 2 && gpu_matrix_operand(S, g, n->in_names[0]) &&
           gpu_matrix_operand(S, g, n->in_names[1]);
  if (onnx && !strcmp(op, "Gemm"))
    return (n->n_in == 2 || n->n_in == 3) && gpu_tensor(S, g, n->in_names[0]) &&
           gpu_tensor(S, g, n->in_names[1]) && gpu_tensor_opt(S, g, n, 2);
  if (!strcmp(n->domain, "ai.keel.internal") && !strcmp(op, "FusedMatMul")) {
    keel_act act;
    if (keel_act_of(n, &act)) {
      keel_err_clear(); /* the binding reports a bad activation */
      return false;
    }
    return n->n_in >= 2 && n->n_in <= 4 && gpu_matrix_operand(S, g, n->in_names[0]) &&
           gpu_tensor(S, g, n->in_names[1]) && gpu_tensor_opt(S, g, n, 2) && gpu_tensor_opt(S, g, n, 3);
  }
  return false;
}

/* Whether n is the ai.onnx op `op`. */
static bool is_op(const keel_node *n, const char *op) {
  return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !strcmp(n->op_type, op);
}

/* The views: their output shares the input's bytes (keel_k_view,
 * keel_k_out_ref), so on the device they read and write no bytes. */
static const char *const GPU_VIEWS[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};

static bool is_view(const keel_node *n) {
  return (!n->domain[0] || !strcmp(n->domain, "ai.onnx")) && !n->n_subs && n->n_out == 1 &&
         one_of(n->op_type, GPU_VIEWS, sizeof GPU_VIEWS / sizeof *GPU_VIEWS);
}

bool keel_place_host_input(const keel_node *n, int32_t i) {
  if (n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
  const char *op = n->op_type;
  if (!strcmp(op, "Range")) return true; /* start, limit, delta: the count's */
  if (i < 1) return false;
  if (!strcmp(op, "Reshape")) return i == 1 && n->opset >= 5;
  if (!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze")) return i == 1 && n->opset >= 13;
  if (!strcmp(op, "Split")) return i == 1 && (n->opset >= 13 || n->opset == 1);
  if (!strcmp(op, "Slice")) return n->opset >= 10;
  if (!strcmp(op, "Expand")) return i == 1;
  if (!strcmp(op, "ReduceSum")) return i == 1 && n->opset >= 13;
  if (!strcmp(op, "ReduceMean") || !strcmp(op, "ReduceMax")) return i == 1 && n->opset >= 18;
  if (!strcmp(op, "Resize")) return true; /* roi, scales, sizes: the plan's */
  if (!strcmp(op, "Upsample")) return i == 1 && n->opset >= 9;
  return false;
}

/* A fixed-size tensor of known rank up to GPU_MAX_RANK: what the move
 * kernels copy (they move elements of 1, 2, 4 or 8 bytes). */
static bool gpu_int_tensor(const keel_shapes *S, const keel_graph *g, const char *name) {
  const keel_sshape *v = name[0] ? keel_shapes_find(S, g, name) : NULL;
  return v && (v->dtype == KEEL_INT64 || v->dtype == KEEL_INT32) && v->rank >= 0 &&
         v->rank <= GPU_MAX_RANK;
}

/* Every input but the host-read ones (which need only be given) float32. */
static bool gpu_inputs(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  for (int32_t i = 0; i < n->n_in; i++)
    if (!keel_place_host_input(n, i) && (i == 0 || n->in_names[i][0]) &&
        !gpu_tensor(S, g, n->in_names[i]))
      return false;
  return n->n_in >= 1;
}

/* Cast between float32 and int64, int32 or bool (kernels/move.cu) */
static bool gpu_cast_type(int32_t t) {
  return t == KEEL_FLOAT || t == KEEL_INT64 || t == KEEL_INT32 || t == KEEL_BOOL;
}

/* views, Transpose, Concat, Gather, ... (device/dev_move.h). The views
 * are placed later (place_views: only where their input is on the GPU);
 * the copies here are every float32 Transpose, Concat, Split, Slice,
 * Expand, Gather, Where, and Cast to or from float32. */
static bool gpu_takes_move(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  if ((n->domain[0] && strcmp(n->domain, "ai.onnx")) || n->n_subs || n->n_out < 1) return false;
  for (int32_t i = 0; i < n->n_out; i++)
    if (!n->out_names[i][0]) return false; /* an omitted output: keep it simple */
  const char *op = n->op_type;
  if (!strcmp(op, "Cast")) {
    const keel_attr *to = keel_node_attr(n, "to");
    if (!to || to->type != KEEL_ATTR_INT) return false;
    const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
    const keel_sshape *y = keel_shapes_find(S, g, n->out_names[0]);
    return n->n_in == 1 && n->n_out == 1 && x && y && x->rank >= 0 && x->rank <= GPU_MAX_RANK &&
           gpu_cast_type(x->dtype) && gpu_cast_type(y->dtype) &&
           (x->dtype == KEEL_FLOAT || y->dtype == KEEL_FLOAT);
  }
  if (!gpu_tensor(S, g, n->out_names[0])) return false;
  if (!strcmp(op, "Gather"))
    return n->n_in == 2 && n->n_out == 1 && gpu_tensor(S, g, n->in_names[0]) &&
           gpu_int_tensor(S, g, n->in_names[1]);
  if (!strcmp(op, "Where")) {
    const keel_sshape *c = n->n_in == 3 ? keel_shapes_find(S, g, n->in_names[0]) : NULL;
    return c && c->dtype == KEEL_BOOL && c->rank >= 0 && c->rank <= GPU_MAX_RANK &&
           gpu_tensor(S, g, n->in_names[1]) && gpu_tensor(S, g, n->in_names[2]);
  }
  if (!strcmp(op, "Split")) {
    if (n->n_out > 64) return false; /* its sizes on the stack (shape.c, op_split) */
    for (int32_t i = 1; i < n->n_out; i++)
      if (!gpu_tensor(S, g, n->out_names[i])) return false;
    return gpu_inputs(S, g, n);
  }
  if (n->n_out != 1) return false;
  if (!strcmp(op, "Transpose") || !strcmp(op, "Concat") || !strcmp(op, "Slice") ||
      !strcmp(op, "Expand"))
    return gpu_inputs(S, g, n);
  return false;
}

/* The constant int64 values of `name`, when it is a constant of at most
 * cap values: their count, else -1. */
static int const_ints(const keel_model *m, const keel_graph *g, const char *name, int64_t *buf,
                      int cap) {
  int32_t c = name[0] ? keel_ir_const_of(m, g, name) : -1;
  if (c < 0) return -1;
  const keel_tensor *t = &m->consts[c];
  int64_t n = keel_tensor_numel(t);
  if (t->dtype != KEEL_INT64 || t->rank > 1 || n > cap || (n && !t->data)) return -1;
  for (int64_t i = 0; i < n; i++) buf[i] = ((const int64_t *)t->data)[i];
  return (int)n;
}

/* LayerNormalization, reductions, ... (device/dev_norm.h):
 *   - LayerNormalization over the axes from `axis` on, scale and bias of
 *     exactly those dims' rank (no other broadcast);
 *   - ReduceSum, ReduceMean, ReduceMax over adjacent axes of known sizes,
 *     the axes an attribute or a constant input (axes apart, or computed
 *     at run time, stay on the CPU). */
static bool gpu_takes_norm(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                           const keel_node *n) {
  if ((n->domain[0] && strcmp(n->domain, "ai.onnx")) || n->n_subs || n->n_out < 1) return false;
  const char *op = n->op_type;
  if (!strcmp(op, "LayerNormalization")) {
    if (n->n_in < 2 || !gpu_tensor(S, g, n->in_names[0]) || !gpu_tensor(S, g, n->in_names[1]))
      return false;
    if (!gpu_tensor(S, g, n->out_names[0])) return false;
    /* Mean and InvStdDev: stash_type's type (float32, checked below),
     * which inference may leave unknown; their rank must be known */
    for (int32_t i = 1; i < n->n_out; i++) {
      const keel_sshape *o = n->out_names[i][0] ? keel_shapes_find(S, g, n->out_names[i]) : NULL;
      if (n->out_names[i][0] && (!o || o->rank < 0 || (o->dtype && o->dtype != KEEL_FLOAT))) return false;
    }
    const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
    const keel_sshape *sc = keel_shapes_find(S, g, n->in_names[1]);
    const keel_sshape *b = n->n_in > 2 && n->in_names[2][0] ? keel_shapes_find(S, g, n->in_names[2]) : NULL;
    const keel_attr *a = keel_node_attr(n, "axis");
    int64_t axis = a ? a->i : -1;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return false;
    if (n->n_in > 2 && n->in_names[2][0] && (!b || b->dtype != KEEL_FLOAT)) return false;
    const keel_attr *st = keel_node_attr(n, "stash_type");
    if (st && st->i != KEEL_FLOAT) return false; /* Mean, InvStdDev in float32 only */
    return sc->rank == x->rank - axis && (!b || b->rank == x->rank - axis);
  }
  bool sum = !strcmp(op, "ReduceSum"), mean = !strcmp(op, "ReduceMean"), max = !strcmp(op, "ReduceMax");
  if (!sum && !mean && !max) return false;
  if (n->n_out != 1 || !gpu_tensor(S, g, n->in_names[0]) || !gpu_tensor(S, g, n->out_names[0]))
    return false;
  const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
  int64_t axes[GPU_MAX_RANK];
  int na;
  if ((sum && n->opset >= 13) || (!sum && n->opset >= 18)) {
    if (n->n_in < 2 || !n->in_names[1][0]) return false; /* no axes: all, or a no-op */
    na = const_ints(m, g, n->in_names[1], axes, GPU_MAX_RANK);
  } else {
    const keel_attr *a = keel_node_attr(n, "axes");
    if (!a || a->type != KEEL_ATTR_INTS || a->n < 1 || a->n > GPU_MAX_RANK) return false;
    na = a->n;
    for (int i = 0; i < na; i++) axes[i] = a->ints[i];
  }
  if (na < 1 || x->rank < 1) return false;
  /* the axes adjacent once sorted, their dims known and not 0 (an empty
   * row has no max) */
  bool red[GPU_MAX_RANK] = {false};
  int a0 = GPU_MAX_RANK, a1 = -1;
  for (int i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
    if (a < 0 || a >= x->rank || red[a]) return false;
    const keel_sdim *d = &x->d[a];
    if (d->sym != KEEL_SYM_KNOWN || d->add <= 0) return false;
    red[a] = true, a0 = a < a0 ? (int)a : a0, a1 = a > a1 ? (int)a : a1;
  }
  return a1 - a0 + 1 == na;
}

/* Conv and the pools (device/dev_conv.h; ops/nn/conv/conv_gpu.c,
 * ops/nn/pool/pool_gpu.c), float32 NCHW:
 *   - Conv 1-D or 2-D (X of rank 3 or 4; W of its rank, B of rank 1,
 *     constants or computed), every pad, stride, dilation, group and
 *     auto_pad, and a fused activation the device has (all but the
 *     Gelus);
 *   - MaxPool (without Indices) and AveragePool 1-D or 2-D, every window
 *     attribute (ceil_mode, count_include_pad, dilations);
 *   - GlobalMaxPool and GlobalAveragePool of any rank from 2.
 * 3-D windows stay on the CPU. */
static bool gpu_takes_conv(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  if ((n->domain[0] && strcmp(n->domain, "ai.onnx")) || n->n_subs || n->n_in < 1 || n->n_out < 1)
    return false;
  if (!gpu_tensor(S, g, n->in_names[0]) || !gpu_tensor(S, g, n->out_names[0])) return false;
  int rank = keel_shapes_find(S, g, n->in_names[0])->rank;
  const char *op = n->op_type;
  if (!strcmp(op, "GlobalMaxPool") || !strcmp(op, "GlobalAveragePool"))
    return n->n_in == 1 && n->n_out == 1 && rank >= 2;
  if (rank != 3 && rank != 4) return false;
  if (!strcmp(op, "MaxPool")) /* Indices, when asked for, only on the CPU */
    return n->n_in == 1 && (n->n_out == 1 || (n->n_out == 2 && !n->out_names[1][0]));
  if (!strcmp(op, "AveragePool")) return n->n_in == 1 && n->n_out == 1;
  bool tr = !strcmp(op, "ConvTranspose");
  if ((strcmp(op, "Conv") && !tr) || n->n_out != 1 || n->n_in < 2 || n->n_in > 3) return false;
  keel_act act;
  if (keel_act_of(n, &act)) {
    keel_err_clear(); /* the binding reports a bad activation */
    return false;
  }
  if (act.kind == KEEL_ACT_GELU || act.kind == KEEL_ACT_GELU_TANH) return false;
  if (tr && act.kind != KEEL_ACT_NONE) return false; /* the kernel has none */
  /* W and B need not be constants (the kernels read them as any input):
   * a computed one is copied over like X */
  const keel_sshape *w = gpu_tensor(S, g, n->in_names[1]) ? keel_shapes_find(S, g, n->in_names[1]) : NULL;
  const keel_sshape *b = n->n_in > 2 && n->in_names[2][0] ? keel_shapes_find(S, g, n->in_names[2]) : NULL;
  return w && w->rank == rank && (n->n_in < 3 || !n->in_names[2][0] ||
                                  (gpu_tensor(S, g, n->in_names[2]) && b->rank == 1));
}

/* Clip: float32, its bounds absent, attributes (before opset 11) or
 * float32 scalar constants, which the kernel takes as parameters (read on
 * the host at binding; a bound computed at run time stays on the CPU). */
static bool gpu_takes_clip(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                           const keel_node *n) {
  if (n->n_in < 1 || n->n_in > 3 || !gpu_tensor(S, g, n->in_names[0])) return false;
  for (int32_t i = 1; i < n->n_in; i++) {
    if (!n->in_names[i][0]) continue;
    int32_t c = n->opset >= 11 ? keel_ir_const_of(m, g, n->in_names[i]) : -1;
    const keel_tensor *t = c >= 0 ? &m->consts[c] : NULL;
    if (!t || t->dtype != KEEL_FLOAT || keel_tensor_numel(t) != 1 || !t->data) return false;
  }
  return true;
}

/* FusedAttention (ops/nn/attention/attention_gpu.c: the blas group's two
 * products around the attn group's masked softmax): float32 Q, K, V all
 * of rank 4 or all of rank 3, the mask mask_kind names (float32 for add,
 * bool for where and where_not) of known rank up to 4, a device with a
 * BLAS. Any layout attribute; the rest the op checks as on the CPU. */
static bool gpu_takes_attn(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                           const keel_node *n) {
  if (m->gpu_no_blas || n->n_subs || n->n_out != 1 || n->n_in < 3 || n->n_in > 4 ||
      !gpu_tensor(S, g, n->out_names[0]))
    return false;
  int32_t r = -1;
  for (int32_t i = 0; i < 3; i++) {
    const keel_sshape *v = gpu_tensor(S, g, n->in_names[i]) ? keel_shapes_find(S, g, n->in_names[i]) : NULL;
    if (!v || (v->rank != 3 && v->rank != 4) || (r >= 0 && v->rank != r)) return false;
    r = v->rank;
  }
  const keel_attr *a = keel_node_attr(n, "mask_kind");
  if (a && a->type != KEEL_ATTR_STRING) return false;
  const char *kind = a ? a->s : "none";
  bool has = n->n_in > 3 && n->in_names[3][0], add = !strcmp(kind, "add");
  if (!strcmp(kind, "none")) return !has;
  if (!has || (!add && strcmp(kind, "where") && strcmp(kind, "where_not"))) return false;
  const keel_sshape *mk = keel_shapes_find(S, g, n->in_names[3]);
  return mk && mk->rank >= 0 && mk->rank <= 4 && mk->dtype == (add ? KEEL_FLOAT : KEEL_BOOL);
}

/* Resize (opset 10 on) and Upsample: float32 X and Y of known rank; the
 * scales, sizes and roi are read on the host (keel_place_host_input), the
 * plan checks them as on the CPU (ops/image/image_gpu.c). */
static bool gpu_takes_image(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  if ((n->domain[0] && strcmp(n->domain, "ai.onnx")) || n->n_subs || n->n_in < 1 ||
      n->n_out != 1 || (strcmp(n->op_type, "Resize") && strcmp(n->op_type, "Upsample")))
    return false;
  return gpu_tensor(S, g, n->in_names[0]) && gpu_tensor(S, g, n->out_names[0]);
}

/* LSTM and GRU (device/dev_rnn.h; ops/nn/rnn/rnn_gpu.c): float32 X of
 * rank 3, W and R, optional B, initial_h, initial_c; the default
 * activations, no clip, layout 0, no sequence_lens, LSTM without
 * input_forget or peepholes; a device with a BLAS. */
static bool gpu_takes_rnn(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                          const keel_node *n) {
  bool lstm = !strcmp(n->op_type, "LSTM");
  if ((n->domain[0] && strcmp(n->domain, "ai.onnx")) || n->n_subs || m->gpu_no_blas ||
      (!lstm && strcmp(n->op_type, "GRU")) || n->n_in < 3)
    return false;
  if (keel_node_attr(n, "activations") || keel_node_attr(n, "clip")) return false;
  const keel_attr *a = keel_node_attr(n, "layout");
  if (a && a->i) return false;
  a = keel_node_attr(n, "input_forget");
  if (lstm && a && a->i) return false;
  if (n->n_in > 4 && n->in_names[4][0]) return false;          /* sequence_lens */
  if (lstm && n->n_in > 7 && n->in_names[7][0]) return false;  /* P */
  const keel_sshape *x = gpu_tensor(S, g, n->in_names[0]) ? keel_shapes_find(S, g, n->in_names[0]) : NULL;
  if (!x || x->rank != 3 || !gpu_tensor(S, g, n->in_names[1]) || !gpu_tensor(S, g, n->in_names[2]))
    return false;
  for (int32_t i = 3; i < n->n_in && i < 7; i++)
    if (i != 4 && !gpu_tensor_opt(S, g, n, i)) return false;
  for (int32_t i = 0; i < n->n_out; i++)
    if (n->out_names[i][0] && !gpu_tensor(S, g, n->out_names[i])) return false;
  return true;
}

/* Whether a GPU kernel computes node n (its inputs and outputs as
 * inferred). */
static bool gpu_takes(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                      const keel_node *n) {
  if (gpu_takes_blas(m, S, g, n) || gpu_takes_move(S, g, n) || gpu_takes_norm(m, S, g, n) ||
      gpu_takes_conv(S, g, n) || gpu_takes_image(S, g, n) || gpu_takes_rnn(m, S, g, n))
    return true;
  if (!strcmp(n->domain, "ai.keel.internal") && !strcmp(n->op_type, "FusedAttention"))
    return gpu_takes_attn(m, S, g, n);
  /* com.microsoft's Gelu: the exact form, one input; Y has X's type (the
   * schema's; inference gives com.microsoft's ops no types), its rank known */
  if (!strcmp(n->domain, "com.microsoft") && !strcmp(n->op_type, "Gelu")) {
    const keel_sshape *y = n->n_out == 1 ? keel_shapes_find(S, g, n->out_names[0]) : NULL;
    return !n->n_subs && n->n_in == 1 && gpu_tensor(S, g, n->in_names[0]) && y && y->rank >= 0 &&
           y->rank <= GPU_MAX_RANK && (!y->dtype || y->dtype == KEEL_FLOAT);
  }
  /* the element-wise group (device.h's own kernels) */
  if (n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
  if (!strcmp(n->op_type, "Range") && !n->n_subs && n->n_out == 1) {
    /* its values made on the host, copied (shape_gen.c) */
    const keel_sshape *y = keel_shapes_find(S, g, n->out_names[0]);
    return n->n_in == 3 && n->opset >= 11 && y && y->rank == 1 &&
           (y->dtype == KEEL_FLOAT || y->dtype == KEEL_INT64 || y->dtype == KEEL_INT32);
  }
  if (n->n_subs || n->n_out != 1 || !gpu_tensor(S, g, n->out_names[0])) return false;
  const char *op = n->op_type;
  if (one_of(op, GPU_BINARY, sizeof GPU_BINARY / sizeof *GPU_BINARY))
    return n->n_in == 2 && gpu_tensor(S, g, n->in_names[0]) && gpu_tensor(S, g, n->in_names[1]);
  if (one_of(op, GPU_UNARY, sizeof GPU_UNARY / sizeof *GPU_UNARY))
    return n->n_in == 1 && gpu_tensor(S, g, n->in_names[0]);
  if (!strcmp(op, "Clip")) return gpu_takes_clip(m, S, g, n);
  if (!strcmp(op, "Softmax") && n->n_in == 1 && gpu_tensor(S, g, n->in_names[0])) {
    const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
    const keel_attr *a = keel_node_attr(n, "axis");
    int64_t axis = a ? a->i : (n->opset >= 13 ? -1 : 1);
    if (axis < 0) axis += x->rank;
    /* before opset 13 the axis flattens the dims after it: the last axis
     * only when it is the last dim */
    return x->rank >= 1 && axis == x->rank - 1;
  }
  return false;
}

typedef struct place {
  keel_model *m;
  const keel_shapes *S;
  int32_t copies_in, copies_out;
} place;

static keel_status oom(const keel_graph *g) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "placement in graph '%s'", g->path);
}

/* A one-input, one-output copy node. */
static keel_status copy_node(place *P, keel_graph *g, keel_node *c, const char *op, const char *from,
                             const char *to, const char *value, const char *what) {
  keel_arena *a = P->m->arena;
  char nm[600];
  snprintf(nm, sizeof nm, PLACE_PREFIX "%s/%s", value, what);
  memset(c, 0, sizeof *c);
  c->name = keel_arena_strdup(a, nm);
  c->op_type = op, c->domain = "", c->opset = 1;
  c->in_names = keel_arena_array(a, 1, sizeof(char *));
  c->out_names = keel_arena_array(a, 1, sizeof(char *));
  if (!c->name || !c->in_names || !c->out_names) return oom(g);
  c->in_names[0] = from, c->out_names[0] = to;
  c->n_in = 1, c->n_out = 1;
  c->device = KEEL_NODE_CPU; /* the copy is the host's call */
  return KEEL_OK;
}

/* Whether CPU node n reads only the dims of its input k, never its bytes:
 * Shape and Size (their kernels look at the tensor's shape alone), which
 * may then read a device tensor where it is. */
static bool reads_dims_only(const keel_node *n, int32_t k) {
  return k == 0 && n->device != KEEL_NODE_GPU && (is_op(n, "Shape") || is_op(n, "Size"));
}

/* Whether `name` is read by a CPU node of g (but for its dims alone), a
 * sub-graph (by capture), g's outputs, or a GPU node's host-read input:
 * anything but g's own GPU nodes reading it on the device. */
static bool read_on_host(const keel_graph *g, const char *name) {
  int32_t device_reads = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++)
      if (!strcmp(n->in_names[k], name))
        device_reads += (n->device == KEEL_NODE_GPU && !keel_place_host_input(n, k)) ||
                        reads_dims_only(n, k);
  }
  return keel_ir_uses(g, name) > device_reads;
}

/* GPU readers of `from` in g read `to` instead (but for the inputs they
 * read on the host). */
static void gpu_reads_from(keel_graph *g, const char *from, const char *to) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    if (n->device != KEEL_NODE_GPU) continue;
    for (int32_t k = 0; k < n->n_in; k++)
      if (!strcmp(n->in_names[k], from) && !keel_place_host_input(n, k)) n->in_names[k] = to;
  }
}

/* Whether `name` is on the GPU in g: made by a GPU node or copied there. */
static bool made_on_gpu(const keel_graph *g, const char *name) {
  int32_t p = keel_ir_producer(g, name);
  return p >= 0 && (g->nodes[p].device == KEEL_NODE_GPU ||
                    (!g->nodes[p].domain[0] && !strcmp(g->nodes[p].op_type, "MemcpyFromHost")));
}

/* Node i is a GPU node: each of its inputs made on the host (not a
 * constant) gets one MemcpyFromHost before the first GPU reader. */
static keel_status copies_in(place *P, keel_graph *g, int32_t *i) {
  for (int32_t k = 0; k < g->nodes[*i].n_in; k++) {
    const char *v = g->nodes[*i].in_names[k];
    if (!v[0] || made_on_gpu(g, v) || keel_ir_const_of(P->m, g, v) >= 0) continue;
    if (keel_place_host_input(&g->nodes[*i], k)) continue; /* read where it is */
    const char *dv = keel_pass_fresh(P->m, g, v, "gpu");
    if (!dv) return oom(g);
    keel_node with[2];
    KEEL_TRY(copy_node(P, g, &with[0], "MemcpyFromHost", v, dv, v, "to_gpu"));
    gpu_reads_from(g, v, dv);
    with[1] = g->nodes[*i];
    KEEL_TRY(keel_graph_replace_node(P->m->arena, g, *i, with, 2));
    (*i)++;
    P->copies_in++;
  }
  return KEEL_OK;
}

/* Node i is a GPU node: each output the host reads is written as
 * "<value>.gpu" and copied back by a MemcpyToHost right after it (one
 * per output, in the outputs' order). */
static keel_status copies_out(place *P, keel_graph *g, int32_t *i) {
  int32_t at = *i;
  for (int32_t o = 0; o < g->nodes[at].n_out; o++) {
    const char *v = g->nodes[at].out_names[o];
    if (!v[0] || !read_on_host(g, v)) continue;
    const char *dv = keel_pass_fresh(P->m, g, v, "gpu");
    if (!dv) return oom(g);
    gpu_reads_from(g, v, dv);
    keel_node with[2];
    with[0] = g->nodes[at];
    const char **outs = keel_arena_array(P->m->arena, (size_t)with[0].n_out, sizeof(char *));
    if (!outs) return oom(g);
    memcpy(outs, with[0].out_names, sizeof(char *) * (size_t)with[0].n_out);
    outs[o] = dv;
    with[0].out_names = outs;
    KEEL_TRY(copy_node(P, g, &with[1], "MemcpyToHost", dv, v, v, "to_host"));
    /* the copy goes right after the node, before the earlier outputs'
     * copies: the order among copies does not matter */
    KEEL_TRY(keel_graph_replace_node(P->m->arena, g, at, with, 2));
    (*i)++;
    P->copies_out++;
  }
  return KEEL_OK;
}

/* A view goes to the GPU when its input is made there (by a GPU node or
 * a view placed there): it then costs nothing and its readers on the GPU
 * need no copy. A view of a host value stays on the host (placing it
 * would only move the copy). Repeated until nothing changes, since nodes
 * need not be in order. */
static void place_views(const keel_model *m, const keel_shapes *S, keel_graph *g) {
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      keel_node *n = &g->nodes[i];
      if (n->device == KEEL_NODE_GPU || !is_view(n) || n->n_in < 1 || !n->in_names[0][0]) continue;
      const keel_sshape *y = keel_shapes_find(S, g, n->out_names[0]);
      if (!y || y->rank < 0 || y->rank > GPU_MAX_RANK) continue;
      int32_t p = keel_ir_producer(g, n->in_names[0]);
      bool after_gpu = p >= 0 && g->nodes[p].device == KEEL_NODE_GPU &&
                       gpu_tensor(S, g, n->in_names[0]);
      /* or a view of a host value (a graph input, a CPU node's output;
       * not a constant) that only GPU nodes read on the device: the copy
       * moves before it (the same bytes), the view joins its readers */
      const keel_sshape *x = keel_shapes_find(S, g, n->in_names[0]);
      bool before_gpu = !after_gpu && x && x->dtype && keel_ir_const_of(m, g, n->in_names[0]) < 0 &&
                        keel_ir_uses(g, n->out_names[0]) > 0 && !read_on_host(g, n->out_names[0]);
      if (!after_gpu && !before_gpu) continue;
      n->device = KEEL_NODE_GPU;
      changed = true;
    }
  }
}

static keel_status place_graph(place *P, keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    n->device = gpu_takes(P->m, P->S, g, n) ? KEEL_NODE_GPU : KEEL_NODE_CPU;
    if (n->device == KEEL_NODE_GPU &&
        (gpu_takes_blas(P->m, P->S, g, n) || !strcmp(n->op_type, "FusedAttention")))
      P->m->gpu_uses_blas = true;
  }
  place_views(P->m, P->S, g);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].device != KEEL_NODE_GPU) continue;
    KEEL_TRY(copies_in(P, g, &i));
    KEEL_TRY(copies_out(P, g, &i));
  }
  return KEEL_OK;
}

keel_status keel_pass_place(keel_model *m) {
  if (!m->gpu) return KEEL_OK;
  keel_shapes *S;
  KEEL_TRY(keel_shapes_infer(m, &S));
  place P = {m, S, 0, 0};
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = place_graph(&P, m->graphs[i]);
  keel_shapes_free(S);
  return st;
}
