/* pass_conv1d.c: lift-conv1d. 1-D convolutions run as 2-D convolutions of
 * height 1, so that the layout pass puts them channels-last on the 2-D
 * kernels (oneDNN's), as it does for images.
 *
 * A region of rank-3 values [N, C, L] made by 1-D Convs with a constant W
 * is rewritten at rank 4 [N, C, 1, L], each lifted value holding the same
 * elements as the value it stands for:
 *
 *   x -> Conv(W [M, C, k]) -> Relu -> Conv -> ... -> y
 *     =>  x -> Unsqueeze(2) -> Conv(W [M, C, 1, k]) -> Relu -> Conv -> ...
 *              -> Squeeze(2) -> y
 *
 * The region grows from each such Conv over the nodes that read lifted
 * values and mean the same at rank 4 with a 1 inserted at axis 2:
 *   - 1-D Convs with a constant W (kernel_shape [k] -> [1, k], strides,
 *     dilations and pads get the height's 1, 1 and 0, 0; auto_pad and
 *     group unchanged: a height of 1 with one tap pads nothing);
 *   - elementwise ops of one data input (the layout pass's list; Clip's
 *     bounds constant);
 *   - elementwise ops of several (Add, Mul, PRelu, ...) whose every input
 *     is lifted or a constant of rank <= 3: a constant of rank 2 or 3
 *     gets the 1 before its last dim (numpy broadcasting aligns the last
 *     dims: [C, 1] against [N, C, L] is [C, 1, 1] against [N, C, 1, L]),
 *     one of rank 0 or 1 stays as it is;
 *   - BatchNormalization of one output (its parameters are per channel);
 *   - MaxPool of one output and AveragePool, 1-D (kernel [k] -> [1, k]);
 *     GlobalAveragePool and GlobalMaxPool ([N, C, 1] -> [N, C, 1, 1]);
 *   - Concat whose inputs are all lifted or constants (axis 2 -> 3).
 * Each value that enters the region is unsqueezed once; each lifted value
 * read outside the region (another node, a sub-graph, a graph output)
 * is squeezed back under its own name right after the node that makes it.
 * Lifted nodes keep their names; new values are named "<value>.h1" and
 * the new nodes "keel.conv1d/<value>/unsqueeze" and ".../squeeze".
 *
 * Only where the selection says the 2-D path is the faster one
 * (keel_conv_lift_1d: oneDNN's channels-last kernels run) and not in a
 * session with a device (the layout pass is off there). A W that some
 * other node reads too is copied at rank 4 instead of being reshaped in
 * place.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ops/nn/conv/select.h"
#include "passes/pass.h"

#define PREFIX "keel.conv1d/"


typedef struct lift {
  keel_model *m;
  keel_graph *g;
  const char **to4;            /* per node: its output's lifted name      */
  bool *lifted;                /* per node                                */
  keel_node_list out;          /* the new node array                      */
  /* values that enter the region, each unsqueezed once */
  const char **entry_from, **entry_to;
  int32_t n_entry, cap_entry;
  int32_t count;               /* nodes lifted                            */
} lift;

static keel_status oom(const lift *L) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "lift-conv1d in graph '%s'", L->g->path);
}

static bool is_op(const keel_node *n, const char *op) {
  return !n->domain[0] && !strcmp(n->op_type, op) && !n->n_subs;
}

/* An int list attribute of exactly `n` values, or absent. */
static bool ints_or_absent(const keel_node *n, const char *name, int count) {
  const keel_attr *a = keel_node_attr(n, name);
  return !a || (a->type == KEEL_ATTR_INTS && a->n == count);
}

/* A 1-D float Conv by a constant W that the rewrite keeps exact. */
static bool conv1d(const lift *L, const keel_node *n) {
  if (!is_op(n, "Conv") || n->n_out != 1 || n->n_in < 2 || n->n_in > 3 || !n->in_names[0][0] ||
      !n->out_names[0][0])
    return false;
  int32_t c = keel_ir_const_of(L->m, L->g, n->in_names[1]);
  if (c < 0) return false;
  const keel_tensor *w = &L->m->consts[c];
  if (w->dtype != KEEL_FLOAT || w->rank != 3) return false;
  return ints_or_absent(n, "kernel_shape", 1) && ints_or_absent(n, "strides", 1) &&
         ints_or_absent(n, "dilations", 1) && ints_or_absent(n, "pads", 2);
}

/* The lifted name of `name` if a lifted node writes it, else NULL. */
static const char *lifted_name(const lift *L, const char *name, int32_t before) {
  if (!name[0]) return NULL;
  int32_t p = keel_ir_producer(L->g, name);
  if (p < 0 || p >= before || !L->lifted[p]) return NULL;
  return L->to4[p]; /* a lifted node has one output */
}

/* A constant read by a lifted node at rank <= 3: its rank-4 counterpart
 * under numpy broadcasting (a 1 before the last dim from rank 2 on; rank
 * 0 and 1 as they are). NULL when it is no such constant. */
static const char *const_form(lift *L, const char *name) {
  int32_t c = keel_ir_const_of(L->m, L->g, name);
  if (c < 0) return NULL;
  const keel_tensor *t = &L->m->consts[c];
  if (t->rank > 3) return NULL;
  if (t->rank <= 1) return name;
  keel_tensor nt = *t;
  nt.rank = t->rank + 1;
  nt.shape[t->rank] = t->shape[t->rank - 1];
  nt.shape[t->rank - 1] = 1;
  size_t nb = keel_tensor_nbytes(t);
  if (nb && !t->data) return NULL;
  uint8_t *dst = keel_arena_alloc(L->m->arena, nb ? nb : 1, KEEL_ALIGN);
  if (!dst) return NULL;
  if (nb) memcpy(dst, t->data, nb);
  nt.data = dst, nt.buf = NULL;
  const char *nm = keel_pass_fresh(L->m, L->g, name, "h1");
  if (!nm || keel_ir_add_const(L->m, L->g, nm, &nt, NULL)) return NULL;
  return nm;
}

/* Whether node i can join the region: its kind, and its inputs (lifted,
 * or what the kind allows). Decided before anything is rewritten. */
static bool joins(const lift *L, int32_t i) {
  const keel_node *n = &L->g->nodes[i];
  if (n->n_subs || n->n_out != 1 || !n->out_names[0][0] || !n->n_in) return false;
  if (conv1d(L, n)) return true; /* a seed: its X enters the region */
  if (keel_pass_op_in(n, keel_pass_nary_ops) || is_op(n, "Concat")) {
    bool any = false;
    for (int32_t k = 0; k < n->n_in; k++) {
      const char *in = n->in_names[k];
      if (!in[0]) return false;
      if (lifted_name(L, in, i)) {
        any = true;
        continue;
      }
      int32_t c = keel_ir_const_of(L->m, L->g, in);
      if (c < 0 || L->m->consts[c].rank > 3) return false;
    }
    if (is_op(n, "Concat")) {
      const keel_attr *ax = keel_node_attr(n, "axis");
      if (!ax || ax->i < -3 || ax->i > 2) return false;
    }
    return any;
  }
  /* the rest: one data input, lifted */
  if (!lifted_name(L, n->in_names[0], i)) return false;
  if (keel_pass_op_in(n, keel_pass_unary_ops)) {
    for (int32_t k = 1; k < n->n_in; k++)
      if (n->in_names[k][0] && keel_ir_const_of(L->m, L->g, n->in_names[k]) < 0) return false;
    return true;
  }
  if (is_op(n, "BatchNormalization")) {
    for (int32_t k = 1; k < n->n_in; k++)
      if (lifted_name(L, n->in_names[k], i)) return false;
    return true;
  }
  if (is_op(n, "MaxPool") || is_op(n, "AveragePool"))
    return n->n_in == 1 && ints_or_absent(n, "kernel_shape", 1) &&
           keel_node_attr(n, "kernel_shape") && ints_or_absent(n, "strides", 1) &&
           ints_or_absent(n, "dilations", 1) && ints_or_absent(n, "pads", 2);
  if (is_op(n, "GlobalAveragePool") || is_op(n, "GlobalMaxPool")) return n->n_in == 1;
  return false;
}

/* The 2-D form of a 1-D window attribute: the height's `h` values first
 * (pads: begin h, begin w, end h, end w). */
static keel_status widen(lift *L, keel_attr *a) {
  if (a->type != KEEL_ATTR_INTS) return KEEL_OK;
  bool pads = !strcmp(a->name, "pads");
  bool win = pads || !strcmp(a->name, "kernel_shape") || !strcmp(a->name, "strides") ||
             !strcmp(a->name, "dilations");
  if (!win) return KEEL_OK;
  int64_t *v = keel_arena_array(L->m->arena, (size_t)a->n * 2, sizeof(int64_t));
  if (!v) return oom(L);
  if (pads) v[0] = 0, v[1] = a->ints[0], v[2] = 0, v[3] = a->ints[1];
  else v[0] = 1, v[1] = a->ints[0];
  a->ints = v, a->n *= 2;
  return KEEL_OK;
}

static keel_status push(lift *L, const keel_node *n) { return keel_node_list_push(&L->out, n); }

/* Unsqueeze or Squeeze of axis 2, in the form of the node's opset (axes
 * an input from opset 13, an attribute before). */
static keel_status axis2_node(lift *L, int64_t opset, const char *op, const char *value,
                              const char *in, const char *out) {
  keel_arena *a = L->m->arena;
  char nm[600];
  snprintf(nm, sizeof nm, PREFIX "%s/%s", value, op[0] == 'U' ? "unsqueeze" : "squeeze");
  keel_node n = {.op_type = op, .domain = "", .opset = opset, .n_out = 1};
  n.name = keel_arena_strdup(a, nm);
  n.in_names = keel_arena_array(a, 3, sizeof(char *));
  n.out_names = keel_arena_array(a, 2, sizeof(char *));
  int64_t *axes = keel_arena_array(a, 1, sizeof(int64_t));
  if (!n.name || !n.in_names || !n.out_names || !axes) return oom(L);
  axes[0] = 2;
  n.in_names[0] = in, n.out_names[0] = out, n.n_in = 1;
  if (opset >= 13) {
    const char *an = keel_pass_fresh(L->m, L->g, value, "axis2");
    keel_tensor t = {.dtype = KEEL_INT64, .rank = 1, .shape = {1}, .data = axes};
    if (!an) return oom(L);
    KEEL_TRY(keel_ir_add_const(L->m, L->g, an, &t, NULL));
    n.in_names[1] = an, n.n_in = 2;
  } else {
    keel_attr *at = keel_arena_array(a, 1, sizeof(keel_attr));
    if (!at) return oom(L);
    *at = (keel_attr){.name = "axes", .type = KEEL_ATTR_INTS, .n = 1, .ints = axes};
    n.attrs = at, n.n_attr = 1;
  }
  return push(L, &n);
}

/* The lifted name of input `name` of node i: a lifted value, a value
 * entering the region (unsqueezed once, the Unsqueeze emitted now), or a
 * constant in rank-4 form. */
static keel_status input_form(lift *L, int32_t i, const char *name, bool data, const char **out) {
  const char *ln = lifted_name(L, name, i);
  if (ln) {
    *out = ln;
    return KEEL_OK;
  }
  if (keel_ir_const_of(L->m, L->g, name) >= 0 && !data) {
    if (!(*out = const_form(L, name))) return oom(L);
    return KEEL_OK;
  }
  for (int32_t e = 0; e < L->n_entry; e++)
    if (!strcmp(L->entry_from[e], name)) {
      *out = L->entry_to[e];
      return KEEL_OK;
    }
  const char *to = keel_pass_fresh(L->m, L->g, name, "h1");
  if (!to) return oom(L);
  if (L->n_entry == L->cap_entry) {
    int32_t cap = KEEL_MAX(2 * L->cap_entry, 8);
    const char **f = keel_arena_array(L->m->arena, (size_t)cap, sizeof(char *));
    const char **t = keel_arena_array(L->m->arena, (size_t)cap, sizeof(char *));
    if (!f || !t) return oom(L);
    if (L->n_entry) {
      memcpy(f, L->entry_from, sizeof(char *) * (size_t)L->n_entry);
      memcpy(t, L->entry_to, sizeof(char *) * (size_t)L->n_entry);
    }
    L->entry_from = f, L->entry_to = t, L->cap_entry = cap;
  }
  L->entry_from[L->n_entry] = name, L->entry_to[L->n_entry++] = to;
  KEEL_TRY(axis2_node(L, L->g->nodes[i].opset, "Unsqueeze", name, name, to));
  *out = to;
  return KEEL_OK;
}

/* W at rank 4, [M, C, 1, k]: reshaped in place when the Conv is its only
 * reader, else a copy. */
static keel_status weight_form(lift *L, const char *name, const char **out) {
  int32_t c = keel_ir_const_of(L->m, L->g, name);
  keel_tensor *w = &L->m->consts[c];
  if (keel_ir_uses(L->m->main, name) == 1) {
    w->rank = 4;
    w->shape[3] = w->shape[2], w->shape[2] = 1;
    *out = name;
    return KEEL_OK;
  }
  keel_tensor nt = *w;
  nt.rank = 4;
  nt.shape[3] = w->shape[2], nt.shape[2] = 1;
  size_t nb = keel_tensor_nbytes(w);
  uint8_t *dst = keel_arena_alloc(L->m->arena, nb ? nb : 1, KEEL_ALIGN);
  const char *nm = keel_pass_fresh(L->m, L->g, name, "h1");
  if (!dst || !nm) return oom(L);
  if (nb) memcpy(dst, w->data, nb);
  nt.data = dst, nt.buf = NULL;
  KEEL_TRY(keel_ir_add_const(L->m, L->g, nm, &nt, NULL));
  *out = nm;
  return KEEL_OK;
}

/* Node i at rank 4, then a Squeeze for each output read outside. */
static keel_status rewrite(lift *L, int32_t i) {
  keel_arena *a = L->m->arena;
  keel_node n = L->g->nodes[i];
  const char **ins = keel_arena_array(a, (size_t)n.n_in + 1, sizeof(char *));
  if (!ins) return oom(L);
  bool conv = is_op(&n, "Conv"), bn = is_op(&n, "BatchNormalization");
  bool concat = is_op(&n, "Concat"), nary = keel_pass_op_in(&n, keel_pass_nary_ops) || concat;
  for (int32_t k = 0; k < n.n_in; k++) {
    const char *in = n.in_names[k];
    if (in[0] && conv && k == 1) KEEL_TRY(weight_form(L, in, &ins[k]));
    else if (in[0] && (k == 0 || nary)) KEEL_TRY(input_form(L, i, in, !nary, &ins[k]));
    else ins[k] = in; /* bias, per-channel parameters, Clip's bounds */
  }
  keel_attr *at = keel_arena_array(a, (size_t)n.n_attr + 1, sizeof(keel_attr));
  if (!at) return oom(L);
  if (n.n_attr) memcpy(at, n.attrs, sizeof(keel_attr) * (size_t)n.n_attr);
  for (int32_t k = 0; k < n.n_attr; k++) {
    if (concat && !strcmp(at[k].name, "axis")) {
      int64_t ax = at[k].i < 0 ? at[k].i + 3 : at[k].i;
      at[k].i = ax == 2 ? 3 : ax;
    } else if (!nary && !bn) {
      KEEL_TRY(widen(L, &at[k]));
    }
  }
  n.in_names = ins, n.attrs = at;
  const char **outs = keel_arena_array(a, (size_t)n.n_out + 1, sizeof(char *));
  if (!outs) return oom(L);
  outs[0] = L->to4[i];
  n.out_names = outs;
  KEEL_TRY(push(L, &n));
  const char *orig = L->g->nodes[i].out_names[0];
  /* read outside the region: squeezed back under its own name */
  int32_t inside = 0;
  for (int32_t j = i + 1; j < L->g->n_nodes; j++) {
    if (!L->lifted[j]) continue;
    const keel_node *r = &L->g->nodes[j];
    for (int32_t k = 0; k < r->n_in; k++) inside += !strcmp(r->in_names[k], orig);
  }
  if (keel_ir_uses(L->g, orig) > inside)
    KEEL_TRY(axis2_node(L, n.opset, "Squeeze", orig, outs[0], orig));
  L->count++;
  return KEEL_OK;
}

static keel_status lift_graph(keel_model *m, keel_graph *g) {
  bool any = false;
  lift L = {.m = m, .g = g, .out = {.pass = "lift-conv1d", .g = g}};
  for (int32_t i = 0; i < g->n_nodes && !any; i++) any = conv1d(&L, &g->nodes[i]);
  if (!any) return KEEL_OK;
  int32_t nn = g->n_nodes;
  L.lifted = keel_sys_calloc((size_t)nn, sizeof(bool));
  L.to4 = keel_sys_calloc((size_t)nn, sizeof(char *));
  keel_status st = (!L.lifted || !L.to4) ? oom(&L) : KEEL_OK;
  for (int32_t i = 0; i < nn && !st; i++) {
    if (!joins(&L, i)) continue;
    L.lifted[i] = true;
    if (!(L.to4[i] = keel_pass_fresh(m, g, g->nodes[i].out_names[0], "h1"))) st = oom(&L);
  }
  for (int32_t i = 0; i < nn && !st; i++)
    st = L.lifted[i] ? rewrite(&L, i) : push(&L, &g->nodes[i]);
  if (!st) st = keel_graph_set_nodes(m->arena, g, L.out.v, L.out.n);
  keel_node_list_free(&L.out);
  keel_sys_free(L.lifted, (size_t)nn * sizeof(bool));
  keel_sys_free(L.to4, (size_t)nn * sizeof(char *));
  return st;
}

keel_status keel_pass_lift_conv1d(keel_model *m) {
  if (m->gpu || !keel_conv_lift_1d(m->no_library)) return KEEL_OK;
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) st = lift_graph(m, m->graphs[i]);
  return st;
}
