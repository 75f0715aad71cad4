/* pass_layout.c: the layout pass: convolution chains run channels-last.
 *
 * oneDNN's fast convolutions read and write NHWC; the file's graph is
 * NCHW. The pass
 *   1. puts every 2-D float Conv with a constant W in NHWC form:
 *        Transpose(0,2,3,1) -> NhwcConv (ops/nn/conv/conv_nhwc.h) -> Transpose(0,3,1,2)
 *      (the transposes' nodes are named "keel.layout/<conv>/to_nhwc" and
 *      ".../to_nchw");
 *   1b. has a strided 1x1 NhwcConv without pads read a subsample of its
 *      input (a Slice with steps, "keel.layout/<conv>/subsample") at
 *      stride 1 where the selection says so (keel_conv_subsample_first);
 *   2. sinks each to_nchw Transpose below the nodes that read it whenever
 *      the node can work on the NHWC tensor as well: elementwise ops (the
 *      other operands being NHWC too, or constants, which get an NHWC
 *      copy), Concat (its axis moves), Resize (its scales, sizes and roi
 *      move), MaxPool / AveragePool / the global pools (their NHWC kernels,
 *      ops/nn/pool/pool_nhwc.c), Reduce* with constant axes (the axes
 *      move; without keepdims the output is the same tensor when C is
 *      reduced or H and W both are: no Transpose after). A sunk Transpose that meets its inverse vanishes
 *      with it, so between two convs nothing is transposed; what remains
 *      is one Transpose into a chain and one out of it (a Transpose that
 *      only moves size-1 dims, after a global pool, is a view at run time);
 *   3. folds a residual Add of an NhwcConv's output into the conv (Z: a
 *      sum post-op), so that the activation after the Add (fuse-activation,
 *      which runs next) folds in too;
 *   4. hands the Transposes left at the chain's edges to the convs next to
 *      them where it can (keel.in_nchw, keel.out_nchw: conv_nhwc.h).
 * Which Convs go channels-last is the convolutions' selection's call
 * (ops/nn/conv/select.h, keel_conv_layout_nhwc): with oneDNN, every one;
 * without it, those keel's own channels-last kernel takes and wins on
 * (it then needs the input sizes: shape inference, once). Step 4 too
 * (keel_conv_takes_edges: only oneDNN's kernels read NCHW bands).
 * A node the pass makes or moves keeps the names of the file: NhwcConv is
 * the Conv's node with its name and lists the Add it took over; moved
 * nodes keep their names; only values and Transposes get new names.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shapes.h"
#include "ops/nn/conv/conv_nhwc.h"
#include "ops/nn/conv/select.h"
#include "passes/pass.h"

#define LAYOUT_PREFIX "keel.layout/"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1};
static const int64_t TO_NCHW[4] = {0, 3, 1, 2};

/* The pass edits g's nodes in a working array (g->nodes points at it
 * while the pass runs, so the IR queries see it) and installs it in the
 * arena once at the end. */
typedef struct lay {
  keel_model *m;
  keel_graph *g;
  int64_t opset;               /* ai.onnx's, for the Transposes it makes   */
  int32_t fresh;               /* counter for new value names              */
  keel_node *v;                /* the working array (keel_sys memory)      */
  int32_t cap;
  const keel_shapes *shapes;   /* the model's inferred shapes, where the
                                  selection needs the input sizes, or NULL */
} lay;

static keel_status oom(const lay *L) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "layout pass in graph '%s'", L->g->path);
}

/* Node `at` of the working array becomes n_with nodes (none: removed). */
static keel_status replace(lay *L, int32_t at, const keel_node *with, int32_t n_with) {
  keel_graph *g = L->g;
  int32_t n = g->n_nodes - 1 + n_with;
  if (n + 1 > L->cap) {
    int32_t cap = KEEL_MAX(2 * L->cap, n + 16);
    keel_node *v = keel_sys_realloc(L->v, sizeof(keel_node) * (size_t)L->cap,
                                    sizeof(keel_node) * (size_t)cap);
    if (!v) return oom(L);
    L->v = v, L->cap = cap;
    g->nodes = v;
  }
  keel_node *v = L->v;
  memmove(v + at + n_with, v + at + 1, sizeof(keel_node) * (size_t)(g->n_nodes - at - 1));
  if (n_with) memcpy(v + at, with, sizeof(keel_node) * (size_t)n_with);
  g->n_nodes = n;
  return KEEL_OK;
}

static const char *fresh_name(lay *L, const char *base, const char *what) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s::%s%d", base, what, L->fresh++);
  return keel_arena_strdup(L->m->arena, buf);
}

static bool perm_is(const keel_node *n, const int64_t *p) {
  if (strcmp(n->op_type, "Transpose") || n->domain[0] || n->n_in != 1 || n->n_out != 1) return false;
  const keel_attr *a = keel_node_attr(n, "perm");
  return a && a->type == KEEL_ATTR_INTS && a->n == 4 && !memcmp(a->ints, p, 4 * sizeof(int64_t));
}

/* One of the pass's own to_nchw Transposes. */
static bool is_ours_to_nchw(const keel_node *n) {
  return perm_is(n, TO_NCHW) && !strncmp(n->name, LAYOUT_PREFIX, strlen(LAYOUT_PREFIX));
}

/* A node with the given op, inputs and outputs (names copied as given:
 * arena strings). */
static keel_status make_node(lay *L, keel_node *n, const char *name, const char *op,
                             const char *domain, int64_t opset, int n_in, const char *const *ins,
                             const char *out) {
  keel_arena *a = L->m->arena;
  memset(n, 0, sizeof *n);
  n->name = name, n->op_type = op, n->domain = domain, n->opset = opset;
  n->in_names = keel_arena_array(a, (size_t)n_in + 1, sizeof(char *));
  n->out_names = keel_arena_array(a, 2, sizeof(char *));
  if (!n->in_names || !n->out_names) return oom(L);
  for (int i = 0; i < n_in; i++) n->in_names[i] = ins[i];
  n->out_names[0] = out;
  n->n_in = n_in, n->n_out = 1;
  return KEEL_OK;
}

static keel_status make_transpose(lay *L, keel_node *n, const char *name, const char *in,
                                  const char *out, const int64_t *perm) {
  KEEL_TRY(make_node(L, n, name, "Transpose", "", L->opset, 1, &in, out));
  keel_attr *at = keel_arena_array(L->m->arena, 1, sizeof(keel_attr));
  int64_t *p = keel_arena_array(L->m->arena, 4, sizeof(int64_t));
  if (!at || !p) return oom(L);
  memcpy(p, perm, 4 * sizeof(int64_t));
  *at = (keel_attr){.name = "perm", .type = KEEL_ATTR_INTS, .n = 4, .ints = p};
  n->attrs = at, n->n_attr = 1;
  return KEEL_OK;
}

/* A copy of n's attribute array with room for `extra` more. */
static keel_attr *attrs_plus(lay *L, const keel_node *n, int extra) {
  keel_attr *a = keel_arena_array(L->m->arena, (size_t)(n->n_attr + extra) + 1, sizeof(keel_attr));
  if (a && n->n_attr) memcpy(a, n->attrs, sizeof(keel_attr) * (size_t)n->n_attr);
  return a;
}

/* How many times `name` is read anywhere in the model (every graph, sub-
 * graphs included, and graph outputs): shadowing only adds to it. */
static int32_t model_uses(const keel_model *m, const char *name) {
  return keel_ir_uses(m->main, name);
}

/* ========================================================= convert */

static bool convertible(const lay *L, const keel_node *n) {
  if (strcmp(n->op_type, "Conv") || n->domain[0] || n->n_out != 1 || n->n_in < 2 ||
      !n->out_names[0][0] || !n->in_names[0][0] || n->n_in > 3)
    return false;
  int32_t c = keel_ir_const_of(L->m, L->g, n->in_names[1]);
  if (c < 0) return false;
  const keel_sshape *x = L->shapes ? keel_shapes_find(L->shapes, L->g, n->in_names[0]) : NULL;
  int64_t hw[2];
  bool sized = x && x->rank == 4 && x->d[2].sym == KEEL_SYM_KNOWN && x->d[3].sym == KEEL_SYM_KNOWN;
  if (sized) hw[0] = x->d[2].add, hw[1] = x->d[3].add;
  const char *why;
  return keel_conv_layout_nhwc(n, &L->m->consts[c], L->m->no_library, sized ? hw : NULL, &why);
}

/* Conv i becomes to_nhwc -> NhwcConv -> to_nchw. */
static keel_status convert(lay *L, int32_t i) {
  keel_graph *g = L->g;
  keel_node c = g->nodes[i];
  char nm[512];
  const char *base = c.name[0] ? c.name : c.out_names[0];
  const char *xn = fresh_name(L, c.out_names[0], "nhwc_in");
  const char *yn = fresh_name(L, c.out_names[0], "nhwc");
  snprintf(nm, sizeof nm, LAYOUT_PREFIX "%s/to_nhwc", base);
  const char *tin = keel_arena_strdup(L->m->arena, nm);
  snprintf(nm, sizeof nm, LAYOUT_PREFIX "%s/to_nchw", base);
  const char *tout = keel_arena_strdup(L->m->arena, nm);
  if (!xn || !yn || !tin || !tout) return oom(L);
  keel_node out[3];
  KEEL_TRY(make_transpose(L, &out[0], tin, c.in_names[0], xn, TO_NHWC));
  const char *ins[3] = {xn, c.in_names[1], c.n_in > 2 ? c.in_names[2] : ""};
  KEEL_TRY(make_node(L, &out[1], c.name, "NhwcConv", KEEL_NHWC_DOMAIN, 1, c.n_in, ins, yn));
  keel_attr *at = attrs_plus(L, &c, 1);
  if (!at) return oom(L);
  at[c.n_attr] = (keel_attr){.name = "keel.weights_private", .type = KEEL_ATTR_INT,
                             .i = model_uses(L->m, c.in_names[1]) == 1};
  out[1].attrs = at, out[1].n_attr = c.n_attr + 1;
  out[1].n_fused = c.n_fused, out[1].fused = c.fused;
  KEEL_TRY(make_transpose(L, &out[2], tout, yn, c.out_names[0], TO_NCHW));
  return replace(L, i, out, 3);
}

/* ============================================================ sink */

/* Readers of `name` among g's nodes (direct inputs). */
static int32_t first_reader(const keel_graph *g, const char *name, int32_t from) {
  for (int32_t i = from; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_in; k++)
      if (!strcmp(g->nodes[i].in_names[k], name)) return i;
  return -1;
}

static bool is_graph_output(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_out; i++)
    if (!strcmp(g->out_names[i], name)) return true;
  return false;
}


/* The NHWC form of input `name` of a node being moved below a transpose:
 * the transpose's input, another of the pass's to_nchw transposes' input,
 * or an NHWC copy of a constant (rank <= 4, broadcast to rank 4 first).
 * NULL when there is none. */
static const char *nhwc_form(lay *L, const char *name, const char *y, const char *x) {
  if (!strcmp(name, y)) return x;
  if (!name[0]) return name;
  keel_graph *g = L->g;
  int32_t p = keel_ir_producer(g, name);
  if (p >= 0) return is_ours_to_nchw(&g->nodes[p]) ? g->nodes[p].in_names[0] : NULL;
  int32_t c = keel_ir_const_of(L->m, g, name);
  if (c < 0) return NULL;
  const keel_tensor *t = &L->m->consts[c];
  if (t->dtype == KEEL_STRING || t->rank > 4) return NULL;
  if (keel_tensor_numel(t) <= 1 && t->rank <= 1) return name; /* a scalar is any layout */
  int64_t d[4] = {1, 1, 1, 1};
  for (int i = 0; i < t->rank; i++) d[4 - t->rank + i] = t->shape[i];
  keel_tensor nt = *t;
  nt.rank = 4;
  for (int i = 0; i < 4; i++) nt.shape[i] = d[TO_NHWC[i]];
  size_t es = keel_dtype_size((keel_dtype)t->dtype), nb = keel_tensor_nbytes(t);
  if (!es || (nb && !t->data)) return NULL;
  uint8_t *dst = keel_arena_alloc(L->m->arena, nb ? nb : 1, KEEL_ALIGN);
  if (!dst) return NULL;
  const uint8_t *src = t->data;
  for (int64_t a = 0, o = 0; a < nt.shape[0]; a++)
    for (int64_t h = 0; h < nt.shape[1]; h++)
      for (int64_t w = 0; w < nt.shape[2]; w++)
        for (int64_t cc = 0; cc < nt.shape[3]; cc++, o++) {
          int64_t at = ((a * d[1] + cc) * d[2] + h) * d[3] + w;
          memcpy(dst + (size_t)o * es, src + (size_t)at * es, es);
        }
  nt.data = dst;
  nt.buf = NULL;
  const char *nm = fresh_name(L, name, "nhwc");
  if (!nm || keel_ir_add_const(L->m, g, nm, &nt, NULL)) return NULL;
  return nm;
}

/* A float or int64 1-D constant of 4 values, permuted into NHWC order as a
 * new constant; "" stays "". NULL when it is not such a constant. For
 * roi (8 values) each half is permuted. */
static const char *permuted_const(lay *L, const char *name) {
  if (!name[0]) return name;
  int32_t c = keel_ir_const_of(L->m, L->g, name);
  if (c < 0) return NULL;
  const keel_tensor *t = &L->m->consts[c];
  int64_t n = keel_tensor_numel(t);
  if (n == 0) return name;
  if (t->rank != 1 || (n != 4 && n != 8) || (t->dtype != KEEL_FLOAT && t->dtype != KEEL_INT64))
    return NULL;
  size_t es = keel_dtype_size((keel_dtype)t->dtype);
  uint8_t *dst = keel_arena_alloc(L->m->arena, (size_t)n * es, KEEL_ALIGN);
  if (!dst) return NULL;
  for (int64_t h = 0; h < n / 4; h++)
    for (int i = 0; i < 4; i++)
      memcpy(dst + (size_t)(h * 4 + i) * es, (const uint8_t *)t->data + (size_t)(h * 4 + TO_NHWC[i]) * es, es);
  keel_tensor nt = *t;
  nt.data = dst, nt.buf = NULL;
  const char *nm = fresh_name(L, name, "nhwc");
  if (!nm || keel_ir_add_const(L->m, L->g, nm, &nt, NULL)) return NULL;
  return nm;
}

static int64_t norm_axis(int64_t a) { return a < 0 ? a + 4 : a; }

static const char *const REDUCE_OPS[] = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                                         "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                         "ReduceLogSumExp", "ReduceSumSquare", NULL};

/* A Reduce* node r reading y = to_nchw(x) as its data: the same reduction
 * of x over the NHWC positions of its axes (a constant input or the
 * attribute), which fills ins (axes input) or *attrs (attribute). *back:
 * the output needs the to_nchw Transpose (keepdims); without keepdims the
 * output is the same tensor when the kept axes keep their order (C
 * reduced, or H and W both): otherwise, and for axes that are not
 * constant, *ok stays false. */
static keel_status reduce_nhwc(lay *L, const keel_node *r, const char **ins, keel_attr **attrs,
                               bool *back, bool *ok) {
  *ok = false;
  bool from_input = r->n_in > 1 && r->in_names[1][0];
  const keel_attr *ax = keel_node_attr(r, "axes");
  const int64_t *axes = NULL;
  int64_t n = 0;
  if (from_input) {
    int32_t c = keel_ir_const_of(L->m, L->g, r->in_names[1]);
    if (c < 0) return KEEL_OK;
    const keel_tensor *t = &L->m->consts[c];
    if (t->dtype != KEEL_INT64 || t->rank != 1 || !t->data) return KEEL_OK;
    axes = t->data, n = t->shape[0];
  } else if (ax) {
    if (ax->type != KEEL_ATTR_INTS) return KEEL_OK;
    axes = ax->ints, n = ax->n;
  }
  const keel_attr *noop = keel_node_attr(r, "noop_with_empty_axes");
  if (n == 0 && noop && noop->i) return KEEL_OK;
  bool mask[4] = {n == 0, n == 0, n == 0, n == 0};
  for (int64_t i = 0; i < n; i++) {
    int64_t a = norm_axis(axes[i]);
    if (a < 0 || a > 3 || mask[a]) return KEEL_OK;
    mask[a] = true;
  }
  const keel_attr *kd = keel_node_attr(r, "keepdims");
  *back = !kd || kd->i;
  if (!*back && !mask[1] && !(mask[2] && mask[3])) return KEEL_OK;
  int64_t *nv = keel_arena_array(L->m->arena, 4, sizeof(int64_t));
  if (!nv) return oom(L);
  int64_t k = 0;
  for (int a = 0; a < 4; a++) /* NHWC axis a holds NCHW axis TO_NHWC[a] */
    if (mask[TO_NHWC[a]] && n) nv[k++] = a;
  if (from_input) {
    keel_tensor t = {.dtype = KEEL_INT64, .rank = 1, .shape = {k}, .data = nv};
    const char *nm = fresh_name(L, r->in_names[1], "nhwc");
    if (!nm) return oom(L);
    KEEL_TRY(keel_ir_add_const(L->m, L->g, nm, &t, NULL));
    ins[1] = nm;
  } else if (ax) {
    if (!(*attrs = attrs_plus(L, r, 0))) return oom(L);
    (*attrs)[ax - r->attrs].ints = nv;
  }
  *ok = true;
  return KEEL_OK;
}

/* Moves transpose t (x -> y) below reader r: r then reads NHWC and a new
 * to_nchw transpose writes r's old output. False when r cannot move. */
static keel_status sink_into(lay *L, int32_t ti, int32_t ri, bool *moved) {
  keel_graph *g = L->g;
  *moved = false;
  const char *x = g->nodes[ti].in_names[0], *y = g->nodes[ti].out_names[0];
  keel_node *r = &g->nodes[ri];
  if (r->n_subs || r->n_out != 1 || !r->out_names[0][0]) return KEEL_OK;
  const char **ins = keel_arena_array(L->m->arena, (size_t)r->n_in + 1, sizeof(char *));
  if (!ins) return oom(L);
  const char *op = r->op_type, *domain = r->domain;
  keel_attr *attrs = NULL;
  int n_attr = r->n_attr;
  bool back = true; /* r's output goes back to NCHW through a Transpose */
  if (keel_pass_op_in(r, keel_pass_unary_ops)) {
    if (strcmp(r->in_names[0], y)) return KEEL_OK;
    ins[0] = x;
    for (int32_t k = 1; k < r->n_in; k++) { /* Clip's bounds: scalars */
      int32_t c = r->in_names[k][0] ? keel_ir_const_of(L->m, g, r->in_names[k]) : 0;
      if (c < 0) return KEEL_OK;
      ins[k] = r->in_names[k];
    }
  } else if (keel_pass_op_in(r, keel_pass_nary_ops) || (!strcmp(op, "Concat") && !domain[0])) {
    for (int32_t k = 0; k < r->n_in; k++)
      if (!(ins[k] = nhwc_form(L, r->in_names[k], y, x))) return KEEL_OK;
    if (!strcmp(op, "Concat")) {
      const keel_attr *ax = keel_node_attr(r, "axis");
      if (!ax || !(attrs = attrs_plus(L, r, 0))) return ax ? oom(L) : KEEL_OK;
      int64_t a = norm_axis(ax->i);
      if (a < 0 || a > 3) return KEEL_OK;
      attrs[ax - r->attrs].i = TO_NCHW[a];
    }
  } else if (!strcmp(op, "Resize") && !domain[0] && r->opset >= 11 && r->n_in >= 2 &&
             !strcmp(r->in_names[0], y) && !keel_node_attr(r, "axes")) {
    ins[0] = x;
    for (int32_t k = 1; k < r->n_in; k++)
      if (!(ins[k] = permuted_const(L, r->in_names[k]))) return KEEL_OK;
  } else if (keel_pass_op_in(r, REDUCE_OPS) && !strcmp(r->in_names[0], y)) {
    bool ok;
    for (int32_t k = 0; k < r->n_in; k++) ins[k] = r->in_names[k];
    ins[0] = x;
    KEEL_TRY(reduce_nhwc(L, r, ins, &attrs, &back, &ok));
    if (!ok) return KEEL_OK;
  } else if (!domain[0] && !strcmp(r->in_names[0], y) && r->n_in == 1 &&
             (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool") ||
              !strcmp(op, "GlobalAveragePool") || !strcmp(op, "GlobalMaxPool"))) {
    const keel_attr *ks = keel_node_attr(r, "kernel_shape");
    if (ks && ks->n != 2) return KEEL_OK;
    const keel_attr *so = keel_node_attr(r, "storage_order");
    if (so && so->i) return KEEL_OK; /* only the Indices output would differ; be plain */
    ins[0] = x;
    op = !strcmp(op, "MaxPool")           ? "NhwcMaxPool"
         : !strcmp(op, "AveragePool")     ? "NhwcAveragePool"
         : !strcmp(op, "GlobalMaxPool")   ? "NhwcGlobalMaxPool"
                                          : "NhwcGlobalAveragePool";
    domain = KEEL_NHWC_DOMAIN;
  } else {
    return KEEL_OK;
  }
  if (!back) { /* the same tensor: r keeps its output */
    r->in_names = ins;
    if (attrs) r->attrs = attrs;
    *moved = true;
    return KEEL_OK;
  }
  const char *old_out = r->out_names[0];
  const char *nout = fresh_name(L, old_out, "nhwc");
  char nm[512];
  snprintf(nm, sizeof nm, LAYOUT_PREFIX "%s/to_nchw", r->name[0] ? r->name : old_out);
  const char *tname = keel_arena_strdup(L->m->arena, nm);
  const char **outs = keel_arena_array(L->m->arena, 2, sizeof(char *));
  if (!nout || !tname || !outs) return oom(L);
  outs[0] = nout;
  keel_node nodes[2];
  nodes[0] = *r;
  nodes[0].in_names = ins, nodes[0].out_names = outs;
  if (domain != r->domain) nodes[0].opset = 1;
  nodes[0].op_type = op, nodes[0].domain = domain;
  if (attrs) nodes[0].attrs = attrs, nodes[0].n_attr = n_attr;
  KEEL_TRY(make_transpose(L, &nodes[1], tname, nout, old_out, TO_NCHW));
  KEEL_TRY(replace(L, ri, nodes, 2));
  *moved = true;
  return KEEL_OK;
}

/* A to_nhwc Transpose r reading y = to_nchw(x): r's readers read x. */
static keel_status cancel(lay *L, int32_t ti, int32_t ri, bool *moved) {
  keel_graph *g = L->g;
  const char *x = g->nodes[ti].in_names[0], *z = g->nodes[ri].out_names[0];
  *moved = false;
  if (is_graph_output(g, z) || keel_ir_uses(g, z) != keel_pass_direct_reads(g, z)) {
    /* an output or a sub-graph's capture keeps its name: an Identity */
    keel_node *r = &g->nodes[ri];
    const char **ins = keel_arena_array(L->m->arena, 2, sizeof(char *));
    if (!ins) return oom(L);
    ins[0] = x;
    r->op_type = "Identity", r->in_names = ins, r->n_attr = 0, r->attrs = NULL;
    *moved = true;
    return KEEL_OK;
  }
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_in; k++)
      if (!strcmp(g->nodes[i].in_names[k], z)) g->nodes[i].in_names[k] = x;
  KEEL_TRY(replace(L, ri, NULL, 0));
  *moved = true;
  return KEEL_OK;
}

/* One move anywhere in g; *moved says whether one was made. */
static keel_status sink_once(lay *L, bool *moved) {
  keel_graph *g = L->g;
  *moved = false;
  for (int32_t t = 0; t < g->n_nodes; t++) {
    if (!is_ours_to_nchw(&g->nodes[t])) continue;
    const char *y = g->nodes[t].out_names[0];
    if (!keel_pass_direct_reads(g, y) && !keel_ir_uses(g, y) && !is_graph_output(g, y)) {
      KEEL_TRY(replace(L, t, NULL, 0)); /* dead */
      *moved = true;
      return KEEL_OK;
    }
    for (int32_t r = first_reader(g, y, 0); r >= 0; r = first_reader(g, y, r + 1)) {
      if (perm_is(&g->nodes[r], TO_NHWC)) KEEL_TRY(cancel(L, t, r, moved));
      else KEEL_TRY(sink_into(L, t, r, moved));
      if (*moved) return KEEL_OK;
    }
  }
  return KEEL_OK;
}

/* ======================================================= residual */

static bool is_nhwc_conv(const keel_node *n) {
  return !strcmp(n->op_type, "NhwcConv") && !strcmp(n->domain, KEEL_NHWC_DOMAIN);
}

/* Add(NhwcConv(..), z) -> NhwcConv(.., z) when the conv has no activation
 * yet and the Add is its only reader. The fused conv takes the Add's place
 * in the node order (valid: its inputs all come before the Add), so that
 * z's producer, when the file has it after the conv (ResNet's downsample
 * after conv3), still runs just before it: z then comes from cache and is
 * not live across the convs in between. */
static keel_status fold_adds(lay *L) {
  keel_graph *g = L->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *a = &g->nodes[i];
    if (strcmp(a->op_type, "Add") || a->domain[0] || a->n_in != 2 || a->n_out != 1) continue;
    for (int k = 0; k < 2; k++) {
      int32_t p = keel_ir_producer(g, a->in_names[k]);
      if (p < 0 || keel_ir_only_reader(g, a->in_names[k]) != i) continue;
      keel_node *c = &g->nodes[p];
      if (!is_nhwc_conv(c) || c->n_in > 3 || keel_node_attr(c, "keel.activation") ||
          !strcmp(a->in_names[1 - k], a->in_names[k]))
        continue;
      const char **ins = keel_arena_array(L->m->arena, 5, sizeof(char *));
      if (!ins) return oom(L);
      KEEL_TRY(keel_ir_fuse_label(L->m->arena, c, a));
      for (int32_t j = 0; j < 3; j++) ins[j] = j < c->n_in ? c->in_names[j] : "";
      ins[3] = a->in_names[1 - k];
      c->in_names = ins, c->n_in = 4;
      c->out_names[0] = a->out_names[0];
      keel_node fused = *c;
      KEEL_TRY(replace(L, i, &fused, 1)); /* at the Add's place (p < i) */
      KEEL_TRY(replace(L, p, NULL, 0));
      i = -1; /* indexes moved: start over */
      break;
    }
  }
  return KEEL_OK;
}

/* Sets an int attribute on node n (a copy of its array with one more). */
static keel_status set_flag(lay *L, keel_node *n, const char *name) {
  keel_attr *at = attrs_plus(L, n, 1);
  if (!at) return oom(L);
  at[n->n_attr] = (keel_attr){.name = name, .type = KEEL_ATTR_INT, .i = 1};
  n->attrs = at, n->n_attr++;
  return KEEL_OK;
}

/* The chain's edges: a to_nhwc Transpose read only by an NhwcConv's X
 * hands the conv its work (keel.in_nchw); a to_nchw Transpose of an
 * NhwcConv's output that nothing else reads, of a conv without a
 * residual, likewise (keel.out_nchw). The conv then moves each band
 * between the layouts while it is in cache, and the whole-tensor copy
 * (and its memory) is gone. */
static keel_status absorb_edges(lay *L) {
  keel_graph *g = L->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *t = &g->nodes[i];
    if (strncmp(t->name, LAYOUT_PREFIX, strlen(LAYOUT_PREFIX))) continue;
    if (perm_is(t, TO_NHWC)) {
      int32_t r = keel_ir_only_reader(g, t->out_names[0]);
      keel_node *c = r >= 0 ? &g->nodes[r] : NULL;
      if (!c || !is_nhwc_conv(c) || strcmp(c->in_names[0], t->out_names[0])) continue;
      const char **ins = keel_arena_array(L->m->arena, (size_t)c->n_in + 1, sizeof(char *));
      if (!ins) return oom(L);
      memcpy(ins, c->in_names, sizeof(char *) * (size_t)c->n_in);
      ins[0] = t->in_names[0];
      c->in_names = ins;
      KEEL_TRY(set_flag(L, c, "keel.in_nchw"));
    } else if (perm_is(t, TO_NCHW)) {
      int32_t p = keel_ir_producer(g, t->in_names[0]);
      keel_node *c = p >= 0 ? &g->nodes[p] : NULL;
      if (!c || !is_nhwc_conv(c) || (c->n_in > 3 && c->in_names[3][0]) ||
          keel_ir_only_reader(g, t->in_names[0]) != i)
        continue;
      c->out_names[0] = t->out_names[0];
      KEEL_TRY(set_flag(L, c, "keel.out_nchw"));
    } else {
      continue;
    }
    KEEL_TRY(replace(L, i, NULL, 0));
    i--;
  }
  return KEEL_OK;
}

/* ======================================================= subsample */

/* A strided 1x1 NhwcConv that its selection wants subsampled
 * (keel_conv_subsample_first) reads Slice(X, [0, 0], [max, max], axes
 * [1, 2], steps s) (a node named "keel.layout/<conv>/subsample") and runs
 * at stride 1. */
static keel_status subsample(lay *L, int32_t i, const int64_t s[2]) {
  keel_node c = L->g->nodes[i];
  keel_arena *a = L->m->arena;
  char nm[512];
  snprintf(nm, sizeof nm, LAYOUT_PREFIX "%s/subsample", c.name[0] ? c.name : c.out_names[0]);
  const char *sn = keel_arena_strdup(a, nm), *xn = fresh_name(L, c.out_names[0], "subsampled");
  int64_t *v = keel_arena_array(a, 8, sizeof(int64_t));
  const char **ins = keel_arena_array(a, (size_t)c.n_in + 1, sizeof(char *));
  keel_attr *at = attrs_plus(L, &c, 0);
  if (!sn || !xn || !v || !ins || !at) return oom(L);
  const int64_t vals[8] = {0, 0, INT64_MAX, INT64_MAX, 1, 2, s[0], s[1]};
  memcpy(v, vals, sizeof vals);
  const char *cn[4];
  keel_tensor ct[4];
  static const char *const what[4] = {"starts", "ends", "axes", "steps"};
  for (int k = 0; k < 4; k++) {
    cn[k] = fresh_name(L, sn, what[k]);
    if (!cn[k]) return oom(L);
    ct[k] = (keel_tensor){.dtype = KEEL_INT64, .rank = 1, .shape = {2}, .data = v + 2 * k};
  }
  KEEL_TRY(keel_ir_add_consts(L->m, L->g, 4, cn, ct, NULL));
  const char *sin[5] = {c.in_names[0], cn[0], cn[1], cn[2], cn[3]};
  keel_node out[2];
  KEEL_TRY(make_node(L, &out[0], sn, "Slice", "", 13, 5, sin, xn));
  memcpy(ins, c.in_names, sizeof(char *) * (size_t)c.n_in);
  ins[0] = xn;
  int64_t *ones = keel_arena_array(a, 2, sizeof(int64_t));
  if (!ones) return oom(L);
  ones[0] = ones[1] = 1;
  for (int k = 0; k < c.n_attr; k++)
    if (!strcmp(at[k].name, "strides")) at[k].ints = ones;
  out[1] = c;
  out[1].in_names = ins, out[1].attrs = at;
  return replace(L, i, out, 2);
}

static keel_status subsample_all(lay *L) {
  keel_graph *g = L->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    int64_t s[2];
    if (!is_nhwc_conv(n)) continue;
    int32_t c = keel_ir_const_of(L->m, g, n->in_names[1]);
    if (c < 0 || !keel_conv_subsample_first(n, &L->m->consts[c], s)) continue;
    KEEL_TRY(subsample(L, i, s));
    i++;
  }
  return KEEL_OK;
}

static keel_status layout_edit(lay *L) {
  keel_graph *g = L->g;
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (convertible(L, &g->nodes[i])) {
      KEEL_TRY(convert(L, i));
      i += 2;
    }
  KEEL_TRY(subsample_all(L));
  for (bool moved = true; moved;) KEEL_TRY(sink_once(L, &moved));
  KEEL_TRY(fold_adds(L));
  return keel_conv_takes_edges(L->m->no_library) ? absorb_edges(L) : KEEL_OK;
}

static keel_status layout_graph(keel_model *m, keel_graph *g, const keel_shapes *shapes) {
  lay L = {m, g, keel_model_opset(m, ""), 0, NULL, 0, shapes};
  if (L.opset < 1) return KEEL_OK;
  bool any = false;
  for (int32_t i = 0; i < g->n_nodes && !any; i++) any = convertible(&L, &g->nodes[i]);
  if (!any) return KEEL_OK;
  keel_node *orig = g->nodes;
  int32_t n0 = g->n_nodes;
  L.cap = n0 + 16;
  L.v = keel_sys_alloc(sizeof(keel_node) * (size_t)L.cap);
  if (!L.v) return oom(&L);
  memcpy(L.v, orig, sizeof(keel_node) * (size_t)n0);
  g->nodes = L.v;
  keel_status st = layout_edit(&L);
  /* installed once; on an error the graph goes back as it was (the model
   * is dropped then anyway) */
  if (!st) st = keel_graph_set_nodes(m->arena, g, L.v, g->n_nodes);
  if (st) g->nodes = orig, g->n_nodes = n0;
  keel_sys_free(L.v, sizeof(keel_node) * (size_t)L.cap);
  return st;
}

/* The shapes are inferred once, before any graph changes: the pass only
 * asks for the inputs of the file's Convs, whose names it keeps.
 *
 * A session with a device (m->gpu) keeps its Convs and pools NCHW: the
 * channels-last form is the CPU kernels' choice, and every Conv the pass
 * would convert (2-D float32, constant W) is one the place pass then puts
 * on the device (gpu_takes_conv), whose kernels read NCHW; a Transpose
 * pair around each would only cost two copies. What stays on the CPU
 * there runs on the NCHW kernels (Conv's keel_conv_impls, pool.c). */
keel_status keel_pass_layout(keel_model *m) {
  if (m->gpu) return KEEL_OK;
  keel_shapes *shapes = NULL;
  if (keel_conv_layout_wants_size(m->no_library)) KEEL_TRY(keel_shapes_infer(m, &shapes));
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = layout_graph(m, m->graphs[i], shapes);
  keel_shapes_free(shapes);
  return st;
}
