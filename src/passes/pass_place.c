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
 * Neg, Abs, Sqrt, Exp, Sigmoid, Tanh, Log; Softmax over the last axis;
 * and the blas group's MatMul, Gemm and FusedMatMul (gpu_takes_blas).
 * When the GPU implementations join the families' selections (select.c),
 * this table becomes their supports().
 */
#include <stdio.h>

#include "base/status.h"
#include "ir/shapes.h"
#include "ops/common/activation.h"
#include "passes/pass.h"

#define PLACE_PREFIX "keel.place/"
#define GPU_MAX_RANK 8

static const char *const GPU_BINARY[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
static const char *const GPU_UNARY[] = {"Relu", "Neg", "Abs", "Sqrt", "Exp", "Sigmoid", "Tanh", "Log"};

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
 * FusedMatMul with its bias and residual, when its fused activation is
 * one the device has (none, Relu, Sigmoid, Tanh). Not on a device whose
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
    bool act_ok = act.kind == KEEL_ACT_NONE || act.kind == KEEL_ACT_RELU ||
                  act.kind == KEEL_ACT_SIGMOID || act.kind == KEEL_ACT_TANH;
    return act_ok && n->n_in >= 2 && n->n_in <= 4 && gpu_matrix_operand(S, g, n->in_names[0]) &&
           gpu_tensor(S, g, n->in_names[1]) && gpu_tensor_opt(S, g, n, 2) && gpu_tensor_opt(S, g, n, 3);
  }
  return false;
}

/* views, Transpose, Concat, Gather, ... (device/dev_move.h) */
static bool gpu_takes_move(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  (void)S, (void)g, (void)n;
  return false;
}

/* LayerNormalization, reductions, ... (device/dev_norm.h) */
static bool gpu_takes_norm(const keel_shapes *S, const keel_graph *g, const keel_node *n) {
  (void)S, (void)g, (void)n;
  return false;
}

/* Whether a GPU kernel computes node n (its inputs and outputs as
 * inferred). */
static bool gpu_takes(const keel_model *m, const keel_shapes *S, const keel_graph *g,
                      const keel_node *n) {
  if (gpu_takes_blas(m, S, g, n) || gpu_takes_move(S, g, n) || gpu_takes_norm(S, g, n)) return true;
  /* the element-wise group (device.h's own kernels) */
  if (n->domain[0] && strcmp(n->domain, "ai.onnx")) return false;
  if (n->n_subs || n->n_out != 1 || !gpu_tensor(S, g, n->out_names[0])) return false;
  const char *op = n->op_type;
  if (one_of(op, GPU_BINARY, sizeof GPU_BINARY / sizeof *GPU_BINARY))
    return n->n_in == 2 && gpu_tensor(S, g, n->in_names[0]) && gpu_tensor(S, g, n->in_names[1]);
  if (one_of(op, GPU_UNARY, sizeof GPU_UNARY / sizeof *GPU_UNARY))
    return n->n_in == 1 && gpu_tensor(S, g, n->in_names[0]);
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

/* Whether `name` is read by a CPU node of g, a sub-graph (by capture) or
 * g's outputs: anything but g's own GPU nodes. */
static bool read_on_host(const keel_graph *g, const char *name) {
  int32_t gpu_reads = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    if (n->device != KEEL_NODE_GPU) continue;
    for (int32_t k = 0; k < n->n_in; k++) gpu_reads += !strcmp(n->in_names[k], name);
  }
  return keel_ir_uses(g, name) > gpu_reads;
}

/* GPU readers of `from` in g read `to` instead. */
static void gpu_reads_from(keel_graph *g, const char *from, const char *to) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    if (n->device != KEEL_NODE_GPU) continue;
    for (int32_t k = 0; k < n->n_in; k++)
      if (!strcmp(n->in_names[k], from)) n->in_names[k] = to;
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
 * "<value>.gpu" and copied back by a MemcpyToHost right after it. */
static keel_status copies_out(place *P, keel_graph *g, int32_t *i) {
  const char *v = g->nodes[*i].out_names[0];
  if (!v[0] || !read_on_host(g, v)) return KEEL_OK;
  const char *dv = keel_pass_fresh(P->m, g, v, "gpu");
  if (!dv) return oom(g);
  gpu_reads_from(g, v, dv);
  keel_node with[2];
  with[0] = g->nodes[*i];
  with[0].out_names = keel_arena_array(P->m->arena, 1, sizeof(char *));
  if (!with[0].out_names) return oom(g);
  with[0].out_names[0] = dv;
  KEEL_TRY(copy_node(P, g, &with[1], "MemcpyToHost", dv, v, v, "to_host"));
  KEEL_TRY(keel_graph_replace_node(P->m->arena, g, *i, with, 2));
  (*i)++;
  P->copies_out++;
  return KEEL_OK;
}

static keel_status place_graph(place *P, keel_graph *g) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    g->nodes[i].device = gpu_takes(P->m, P->S, g, &g->nodes[i]) ? KEEL_NODE_GPU : KEEL_NODE_CPU;
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
