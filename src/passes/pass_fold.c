/* pass_fold.c: fold-constants and remove-dead, the canonicalizing passes
 * that run first among the optimizing ones (after fold-identity).
 *
 * fold-constants: a node whose every input is a constant (an initializer, a
 * Constant node the loader folded, or the output of a node this pass has
 * folded before it) is run once, at load, by its reference kernel on a
 * private heap; its outputs become constants of its graph (copied into the
 * model's arena) and the node leaves the graph. Exporters write such chains
 * around weights and shapes: paddle2onnx's Constant-node scalars through
 * Cast, Unsqueeze and Concat, tf2onnx's Transpose and Cast of weights,
 * PyTorch's Sqrt of a constant as the attention scale, and the constant
 * pieces of a Reshape's shape. Folded nodes are counted in m->fold (keel
 * info), not named: the constants they made keep the nodes' output names.
 *
 * Left to run, as written:
 *   - nodes with a sub-graph, random ops and Dropout (a draw is not a
 *     constant), QuantizeLinear and DequantizeLinear (the quantized fusions
 *     and kernels look for them), domains other than ai.onnx, ai.onnx.ml and
 *     com.microsoft, nodes with no input;
 *   - string, sub-byte and float8 tensors in or out;
 *   - nodes whose outputs together would take more than the cap,
 *     max(1 MiB, the bytes the node reads): a Transpose or a Cast of a
 *     weight folds, an Expand or a ConstantOfShape that multiplies its input
 *     does not (counted in m->fold.over_cap). The private heap's limit keeps
 *     a kernel from allocating far past it before the check;
 *   - a node whose kernel fails: the run reports the error with its context
 *     as it would have without the pass.
 * Outputs are always copied, never aliased: another node may give an
 * original's pages back once it has packed them (keel_model_drop_const).
 *
 * remove-dead: a node none of whose outputs is read (by a node of its graph
 * or of a sub-graph below, or as a graph output) leaves the graph, and then
 * the nodes only it read. Kept: nodes with sub-graphs, random ops (removing
 * one would shift the draws of the others), ops keel does not know (their
 * error stays), and domains other than the three above (keel's collectives
 * run on every rank).
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "mem/alloc.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "passes/pass.h"

#define FOLD_CAP_MIN ((uint64_t)1 << 20)
/* room for a kernel's scratch on top of its outputs */
#define FOLD_SCRATCH ((uint64_t)16 << 20)

static bool pure_domain(const char *d) {
  return !d[0] || !strcmp(d, "ai.onnx.ml") || !strcmp(d, "com.microsoft");
}

/* The op of n when n is one remove-dead may drop (and fold-constants may
 * run): a known, deterministic op of a pure domain, no sub-graph. */
static const keel_opdef *pure_op(const keel_node *n) {
  if (n->n_subs || !pure_domain(n->domain)) return NULL;
  const keel_opdef *op = keel_ops_find(n->domain, n->op_type, n->opset);
  return op && !(op->flags & KEEL_OPF_RANDOM) ? op : NULL;
}

static bool plain_dtype(int dt) {
  return dt != KEEL_UNDEFINED && dt != KEEL_STRING && !(KEEL_T(dt) & KEEL_TS_SMALL);
}

/* ==================================================== fold-constants */

typedef struct made {
  const char *name;
  keel_tensor t;
} made;

typedef struct folder {
  keel_model *m;
  keel_heap *heap;             /* made at the first node run              */
  made *made;                  /* this graph's folded outputs so far      */
  int32_t n_made, cap_made;
} folder;

/* The constant `name` denotes in g, this pass's own included; NULL when it
 * is computed at run time. */
static const keel_tensor *const_in(const folder *F, const keel_graph *g, const char *name) {
  for (int32_t i = F->n_made - 1; i >= 0; i--)
    if (!strcmp(F->made[i].name, name)) return &F->made[i].t;
  int32_t c = keel_ir_const_of(F->m, g, name);
  return c < 0 ? NULL : &F->m->consts[c];
}

static bool folds_never(const keel_node *n) {
  static const char *const ops[] = {"Dropout", "QuantizeLinear", "DequantizeLinear",
                                    "DynamicQuantizeLinear"};
  for (size_t i = 0; i < KEEL_COUNTOF(ops); i++)
    if (!strcmp(n->op_type, ops[i])) return true;
  return false;
}

static keel_status note_made(folder *F, const char *name, const keel_tensor *t) {
  if (F->n_made == F->cap_made) {
    int32_t nc = F->cap_made ? 2 * F->cap_made : 16;
    made *p = keel_sys_realloc(F->made, (size_t)F->cap_made * sizeof *p, (size_t)nc * sizeof *p);
    if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding constants");
    F->made = p, F->cap_made = nc;
  }
  F->made[F->n_made++] = (made){name, *t};
  return KEEL_OK;
}

/* Output v as a constant: a copy in the model's arena (keel_ir_add_consts
 * gives it a STATIC buffer when the graph's folds are committed). */
static keel_status keep(keel_model *m, const keel_val *v, keel_tensor *out) {
  const keel_tensor *t = &v->t;
  size_t nb = keel_tensor_nbytes(t);
  *out = (keel_tensor){.dtype = t->dtype, .rank = t->rank};
  memcpy(out->shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
  if (!nb) return KEEL_OK;
  void *p = keel_arena_alloc(m->arena, nb, 64);
  if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "a folded constant of %zu bytes", nb);
  memcpy(p, t->data, nb);
  out->data = p;
  return KEEL_OK;
}

/* Runs node n of g on its constant inputs; *done when its outputs are now
 * constants (in F->made). Kernel errors and outputs over the cap leave the
 * node as it is. */
static keel_status try_fold(folder *F, keel_graph *g, const keel_node *n, const keel_opdef *op,
                            bool *done) {
  *done = false;
  if (n->n_in > KEEL_IMPL_MAX_IN) return KEEL_OK;
  keel_val in[KEEL_IMPL_MAX_IN];
  const keel_val *inp[KEEL_IMPL_MAX_IN];
  uint64_t in_bytes = 0;
  int32_t present = 0;
  for (int32_t i = 0; i < n->n_in; i++) {
    inp[i] = NULL;
    if (!n->in_names[i][0]) continue;
    const keel_tensor *t = const_in(F, g, n->in_names[i]);
    if (!t || !plain_dtype(t->dtype)) return KEEL_OK;
    in[i] = (keel_val){.kind = KEEL_V_TENSOR, .t = *t};
    inp[i] = &in[i];
    in_bytes += keel_tensor_nbytes(t);
    present++;
  }
  if (!present) return KEEL_OK;
  uint64_t cap = KEEL_MAX(FOLD_CAP_MIN, in_bytes);
  if (!F->heap && !(F->heap = keel_heap_create(0)))
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding constants: a heap");
  keel_heap_set_limit(F->heap, (size_t)(cap + FOLD_SCRATCH));
  int32_t n_targets = KEEL_MAX(n->n_out, KEEL_K_MIN_OUTS);
  keel_val outs[KEEL_K_MIN_OUTS + 64];
  keel_val *outp[KEEL_K_MIN_OUTS + 64];
  if (n_targets > (int32_t)KEEL_COUNTOF(outs)) return KEEL_OK;
  for (int32_t i = 0; i < n_targets; i++) outs[i] = (keel_val){0}, outp[i] = &outs[i];
  keel_kctx k = {.node = n, .in = inp, .out = outp, .n_in = n->n_in, .n_out = n->n_out,
                 .heap = F->heap};
  keel_status st = op->fn(&k);
  for (int32_t j = 0; j < k.n_scratch; j++) keel_heap_free(F->heap, k.scratch[j]);
  uint64_t out_bytes = 0;
  bool ok = !st;
  for (int32_t i = 0; ok && i < n->n_out; i++) {
    if (!n->out_names[i][0]) continue;
    ok = outs[i].kind == KEEL_V_TENSOR && plain_dtype(outs[i].t.dtype);
    if (ok) out_bytes += keel_tensor_nbytes(&outs[i].t);
  }
  bool over = st == KEEL_ERR_OUT_OF_MEMORY || (ok && out_bytes > cap);
  if (st) keel_err_clear();
  F->m->fold.over_cap += over;
  ok = ok && !over;
  keel_status kept = KEEL_OK;
  for (int32_t i = 0; ok && !kept && i < n->n_out; i++) {
    if (!n->out_names[i][0]) continue;
    keel_tensor t;
    kept = keep(F->m, &outs[i], &t);
    if (!kept) kept = note_made(F, n->out_names[i], &t);
  }
  for (int32_t i = 0; i < n_targets; i++) keel_val_clear(&outs[i]);
  if (kept) return kept;
  if (ok) {
    F->m->fold.folded++;
    F->m->fold.folded_bytes += out_bytes;
  }
  *done = ok;
  return KEEL_OK;
}

static keel_status fold_graph(folder *F, keel_graph *g) {
  F->n_made = 0;
  bool *drop = NULL;
  size_t cap = (size_t)g->n_nodes + 1;
  keel_status st = KEEL_OK;
  int32_t n_drop = 0;
  for (int32_t i = 0; i < g->n_nodes && !st; i++) {
    const keel_node *n = &g->nodes[i];
    const keel_opdef *op = n->n_in ? pure_op(n) : NULL;
    if (!op || folds_never(n)) continue;
    bool done;
    st = try_fold(F, g, n, op, &done);
    if (st || !done) continue;
    if (!drop && !(drop = keel_sys_calloc(cap, sizeof(bool))))
      st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding constants in graph '%s'", g->path);
    else drop[i] = true, n_drop++;
  }
  if (!st && n_drop) {
    const char **names = keel_sys_calloc((size_t)F->n_made + 1, sizeof(char *));
    keel_tensor *ts = keel_sys_calloc((size_t)F->n_made + 1, sizeof(keel_tensor));
    if (!names || !ts) st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "folding constants in graph '%s'", g->path);
    for (int32_t i = 0; !st && i < F->n_made; i++) names[i] = F->made[i].name, ts[i] = F->made[i].t;
    if (!st) st = keel_ir_add_consts(F->m, g, F->n_made, names, ts, NULL);
    if (!st) st = keel_graph_remove_nodes(F->m->arena, g, drop);
    keel_sys_free(names, ((size_t)F->n_made + 1) * sizeof(char *));
    keel_sys_free(ts, ((size_t)F->n_made + 1) * sizeof(keel_tensor));
  }
  keel_sys_free(drop, cap * sizeof(bool));
  return st;
}

keel_status keel_pass_fold_constants(keel_model *m) {
  folder F = {.m = m};
  keel_status st = KEEL_OK;
  /* a graph's captures come from graphs listed before it */
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = fold_graph(&F, m->graphs[i]);
  keel_sys_free(F.made, (size_t)F.cap_made * sizeof(made));
  if (F.heap) keel_heap_release(F.heap);
  return st;
}

/* ======================================================= remove-dead */

/* Reads of each name in a graph (at any depth below, and its outputs):
 * an open-addressing table for the pass's lifetime. */
typedef struct reads {
  const char **name;
  int32_t *count;
  size_t cap;                  /* a power of two                          */
} reads;

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static int32_t *reads_of(reads *r, const char *name, bool add) {
  for (size_t i = name_hash(name) & (r->cap - 1);; i = (i + 1) & (r->cap - 1)) {
    if (!r->name[i]) {
      if (!add) return NULL;
      r->name[i] = name;
      return &r->count[i];
    }
    if (!strcmp(r->name[i], name)) return &r->count[i];
  }
}

static size_t names_below(const keel_graph *g) {
  size_t n = (size_t)g->n_out;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    n += (size_t)g->nodes[i].n_in;
    for (int32_t s = 0; s < g->nodes[i].n_subs; s++) n += names_below(g->nodes[i].subs[s]);
  }
  return n;
}

/* Counts every read in g and below (a name a sub-graph defines itself is
 * counted too: that can only keep a node, never drop one wrongly). */
static void count_reads(reads *r, const keel_graph *g) {
  for (int32_t i = 0; i < g->n_out; i++) ++*reads_of(r, g->out_names[i], true);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++)
      if (n->in_names[k][0]) ++*reads_of(r, n->in_names[k], true);
    for (int32_t s = 0; s < n->n_subs; s++) count_reads(r, n->subs[s]);
  }
}

static bool unread(reads *r, const keel_node *n) {
  for (int32_t k = 0; k < n->n_out; k++) {
    if (!n->out_names[k][0]) continue;
    const int32_t *c = reads_of(r, n->out_names[k], false);
    if (c && *c > 0) return false;
  }
  return true;
}

static keel_status dead_graph(keel_model *m, keel_graph *g) {
  size_t cap = 16;
  while (cap < 2 * names_below(g) + 1) cap *= 2;
  reads r = {keel_sys_calloc(cap, sizeof(char *)), keel_sys_calloc(cap, sizeof(int32_t)), cap};
  bool *drop = keel_sys_calloc((size_t)g->n_nodes + 1, sizeof(bool));
  keel_status st = KEEL_OK;
  if (!r.name || !r.count || !drop)
    st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "remove-dead in graph '%s'", g->path);
  int32_t n_drop = 0;
  if (!st) count_reads(&r, g);
  /* from the last node back, again while a sweep drops something (a file
   * not in topological order needs more than one) */
  for (bool again = !st; again;) {
    again = false;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) {
      const keel_node *n = &g->nodes[i];
      if (drop[i] || !unread(&r, n) || !pure_op(n)) continue;
      drop[i] = true, n_drop++, again = true;
      for (int32_t k = 0; k < n->n_in; k++)
        if (n->in_names[k][0]) --*reads_of(&r, n->in_names[k], false);
    }
  }
  int32_t before = g->n_nodes;
  if (!st && n_drop) st = keel_graph_remove_nodes(m->arena, g, drop);
  if (!st) m->fold.dead += n_drop;
  keel_sys_free(r.name, cap * sizeof(char *));
  keel_sys_free(r.count, cap * sizeof(int32_t));
  keel_sys_free(drop, ((size_t)before + 1) * sizeof(bool));
  return st;
}

keel_status keel_pass_remove_dead(keel_model *m) {
  /* sub-graphs first: what they stop reading may free their parents' nodes */
  for (int32_t i = m->n_graphs - 1; i >= 0; i--) KEEL_TRY(dead_graph(m, m->graphs[i]));
  return KEEL_OK;
}
