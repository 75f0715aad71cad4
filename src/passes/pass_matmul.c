/* pass_matmul.c: fuse-matmul: a product by a constant matrix and the
 * elementwise ops exporters put after it become one FusedMatMul
 * (ops/math/matmul/matmul_fused.h) of ai.keel.internal:
 *
 *   MatMul(A, B)                      B a float32 [K, N] constant
 *   Gemm(A, B, C)                     alpha = beta = 1 (or absent), transA 0,
 *                                     B a float32 2-D constant, C absent or
 *                                     N constant values
 * followed, each step only when it is the only reader of the previous
 * output, by
 *   Add(., bias)                      N constant values (nn.Linear's bias)
 *   Add(., z)                         anything else: the residual Z
 *   an activation                     Relu, LeakyRelu, Clip (constant bounds),
 *                                     Sigmoid, Tanh, HardSigmoid, HardSwish,
 *                                     Gelu (opset 20, or fuse-gelu's)
 * in that order (bias, then residual, then activation, as the kernel
 * computes them). The fused node keeps the product's name, writes the last
 * op's output and lists the others, so reports and traces still name them.
 * B's pages go back once packed when nothing else reads it
 * (keel.weights_private).
 */
#include <math.h>
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ops/common/activation.h"
#include "passes/pass.h"

#define FMM_DOMAIN "ai.keel.internal"

static bool op_is(const keel_node *n, const char *op) {
  return !n->domain[0] && !strcmp(n->op_type, op) && n->n_out == 1 && !n->n_subs;
}

static const keel_tensor *const_of(const keel_model *m, const keel_graph *g, const char *name) {
  int32_t c = name[0] ? keel_ir_const_of(m, g, name) : -1;
  return c < 0 ? NULL : &m->consts[c];
}

/* A float32 constant of n values whose leading dims are 1. */
static bool is_bias(const keel_model *m, const keel_graph *g, const char *name, int64_t n) {
  const keel_tensor *t = const_of(m, g, name);
  if (!t || t->dtype != KEEL_FLOAT || keel_tensor_numel(t) != n || t->rank < 1) return false;
  for (int i = 0; i + 1 < t->rank; i++)
    if (t->shape[i] != 1) return false;
  return true;
}

static int64_t attr_i(const keel_node *n, const char *name, int64_t def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a ? a->i : def;
}
static float attr_f(const keel_node *n, const char *name, float def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a ? a->f : def;
}

/* The start of a chain: B's constant, N, transB and the Gemm's C. */
typedef struct fmm {
  int32_t nodes[5];            /* the product, then what it takes over    */
  int n;
  const char *a, *b, *bias, *z, *y;
  int64_t N;
  bool transb;
  keel_act act;
} fmm;

static bool start(const keel_model *m, const keel_graph *g, const keel_node *n, fmm *f) {
  memset(f, 0, sizeof *f);
  if (op_is(n, "MatMul") && n->n_in == 2) {
    const keel_tensor *b = const_of(m, g, n->in_names[1]);
    if (!b || b->dtype != KEEL_FLOAT || b->rank != 2 || keel_tensor_numel(b) == 0) return false;
    f->N = b->shape[1];
  } else if (op_is(n, "Gemm") && n->n_in >= 2) {
    const keel_tensor *b = const_of(m, g, n->in_names[1]);
    if (!b || b->dtype != KEEL_FLOAT || b->rank != 2 || keel_tensor_numel(b) == 0) return false;
    if (attr_i(n, "transA", 0) || attr_f(n, "alpha", 1.0f) != 1.0f) return false;
    f->transb = attr_i(n, "transB", 0) != 0;
    f->N = f->transb ? b->shape[0] : b->shape[1];
    if (n->n_in > 2 && n->in_names[2][0]) {
      if (attr_f(n, "beta", 1.0f) != 1.0f || !is_bias(m, g, n->in_names[2], f->N)) return false;
      f->bias = n->in_names[2];
    }
  } else {
    return false;
  }
  if (!n->in_names[0][0] || !n->out_names[0][0]) return false;
  f->a = n->in_names[0], f->b = n->in_names[1], f->y = n->out_names[0];
  f->nodes[f->n++] = n->index;
  return true;
}

/* The activation of node a (reading only y), or false. */
static bool act_of(const keel_model *m, const keel_graph *g, const keel_node *a, keel_act *act) {
  *act = (keel_act){KEEL_ACT_NONE, 0, 0};
  if (a->domain[0] || a->n_out != 1) return false;
  const char *op = a->op_type;
  if (!strcmp(op, "Gelu")) {
    const keel_attr *ap = keel_node_attr(a, "approximate");
    bool t = ap && ap->s && !strcmp(ap->s, "tanh");
    if (ap && ap->s && !t && strcmp(ap->s, "none")) return false;
    act->kind = t ? KEEL_ACT_GELU_TANH : KEEL_ACT_GELU;
    return a->n_in == 1;
  }
  keel_act_kind k = keel_act_from_op(op);
  if (!k || k >= KEEL_ACT_SILU) return false;
  act->kind = k;
  switch (k) {
    case KEEL_ACT_LEAKY: act->a = attr_f(a, "alpha", 0.01f); break;
    case KEEL_ACT_HSIGMOID: act->a = attr_f(a, "alpha", 0.2f), act->b = attr_f(a, "beta", 0.5f); break;
    case KEEL_ACT_CLIP:
      act->a = -INFINITY, act->b = INFINITY;
      if (a->opset < 11) {
        act->a = attr_f(a, "min", -INFINITY), act->b = attr_f(a, "max", INFINITY);
      } else {
        if (a->n_in > 1 && a->in_names[1][0] && !keel_ir_const_f32(m, g, a->in_names[1], &act->a))
          return false;
        if (a->n_in > 2 && a->in_names[2][0] && !keel_ir_const_f32(m, g, a->in_names[2], &act->b))
          return false;
      }
      return true;
    default: break;
  }
  return a->n_in == 1;
}

/* Grows the chain from its current output f->y. */
static void grow(const keel_model *m, const keel_graph *g, fmm *f) {
  for (int step = 0; step < 3; step++) {
    int32_t r = keel_ir_only_reader(g, f->y);
    if (r < 0) return;
    const keel_node *n = &g->nodes[r];
    if (op_is(n, "Add") && n->n_in == 2 && !f->z && !f->act.kind) {
      int k = !strcmp(n->in_names[0], f->y) ? 1 : 0;
      if (!strcmp(n->in_names[k], f->y)) return; /* y + y */
      if (!f->bias && is_bias(m, g, n->in_names[k], f->N)) f->bias = n->in_names[k];
      else if (n->in_names[k][0]) f->z = n->in_names[k];
      else return;
    } else if (f->act.kind || !act_of(m, g, n, &f->act)) {
      return;
    }
    f->nodes[f->n++] = r;
    f->y = n->out_names[0];
  }
}

static keel_status rewrite(keel_model *m, keel_graph *g, const fmm *f, bool *drop) {
  keel_arena *ar = m->arena;
  keel_node *n = &g->nodes[f->nodes[0]];
  const char **ins = keel_arena_array(ar, 5, sizeof(char *));
  const char **outs = keel_arena_array(ar, 2, sizeof(char *));
  keel_attr *at = keel_arena_array(ar, 4, sizeof(keel_attr));
  float *params = keel_arena_array(ar, 2, sizeof(float));
  if (!ins || !outs || !at || !params)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fusing a matrix product in graph '%s'", g->path);
  for (int i = 1; i < f->n; i++) {
    KEEL_TRY(keel_ir_fuse_label(ar, n, &g->nodes[f->nodes[i]]));
    drop[f->nodes[i]] = true;
  }
  ins[0] = f->a, ins[1] = f->b, ins[2] = f->bias ? f->bias : "", ins[3] = f->z ? f->z : "";
  int nin = f->z ? 4 : f->bias ? 3 : 2;
  outs[0] = f->y;
  int na = 0;
  at[na++] = (keel_attr){.name = "transB", .type = KEEL_ATTR_INT, .i = f->transb};
  at[na++] = (keel_attr){.name = "keel.weights_private", .type = KEEL_ATTR_INT,
                         .i = keel_ir_uses(m->main, f->b) == 1};
  if (f->act.kind) {
    static const char *const names[] = {[KEEL_ACT_RELU] = "Relu", [KEEL_ACT_LEAKY] = "LeakyRelu",
                                        [KEEL_ACT_CLIP] = "Clip", [KEEL_ACT_HSIGMOID] = "HardSigmoid",
                                        [KEEL_ACT_HSWISH] = "HardSwish", [KEEL_ACT_SIGMOID] = "Sigmoid",
                                        [KEEL_ACT_TANH] = "Tanh", [KEEL_ACT_GELU] = "Gelu",
                                        [KEEL_ACT_GELU_TANH] = "GeluTanh"};
    const char *s = names[f->act.kind];
    params[0] = f->act.a, params[1] = f->act.b;
    at[na++] = (keel_attr){.name = KEEL_ACT_ATTR, .type = KEEL_ATTR_STRING, .s = s, .slen = strlen(s)};
    at[na++] = (keel_attr){.name = KEEL_ACT_PARAMS, .type = KEEL_ATTR_FLOATS, .n = 2, .floats = params};
  }
  n->op_type = "FusedMatMul";
  n->domain = FMM_DOMAIN;
  n->opset = 1;
  n->in_names = ins, n->n_in = nin, n->in = NULL;
  n->out_names = outs, n->n_out = 1;
  n->attrs = at, n->n_attr = na;
  return KEEL_OK;
}

static keel_status fuse_at(keel_model *m, keel_graph *g, int32_t i, bool *drop, bool *fused) {
  fmm f;
  if (!start(m, g, &g->nodes[i], &f)) return KEEL_OK;
  grow(m, g, &f);
  *fused = true;
  return rewrite(m, g, &f, drop);
}

keel_status keel_pass_fuse_matmul(keel_model *m) {
  /* a training graph's products are by parameters (inputs), and its
   * allocated bytes are exactly parameters and state: left alone */
  if (m->no_library || m->train) return KEEL_OK;
  return keel_pass_fuse_all(m, fuse_at);
}
