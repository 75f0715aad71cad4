/* ir.c: small queries and edits on the IR shared by the loader and the
 * passes: opset lookup, attribute lookup, node labels for messages, and
 * replacing a node with others (function inlining, Gradient). */
#include <stdio.h>

#include "base/status.h"
#include "ir/ir.h"

int64_t keel_model_opset(const keel_model *m, const char *domain) {
  for (int32_t i = 0; i < m->n_opsets; i++)
    if (!strcmp(m->opsets[i].domain, domain)) return m->opsets[i].version;
  return 0;
}

const char *keel_node_label(const keel_node *n, char *buf, size_t cap) {
  int k;
  if (n->name && n->name[0]) k = snprintf(buf, cap, "'%s' (%s)", n->name, n->op_type);
  else k = snprintf(buf, cap, "#%d (%s)", n->index, n->op_type ? n->op_type : "?");
  for (int32_t i = 0; i < n->n_fused && k >= 0 && (size_t)k < cap; i++)
    k += snprintf(buf + k, cap - (size_t)k, " + %s", n->fused[i]);
  return buf;
}

static int32_t uses_in(const keel_graph *g, const char *name) {
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *nd = &g->nodes[i];
    for (int32_t k = 0; k < nd->n_in; k++) n += !strcmp(nd->in_names[k], name);
    for (int32_t s = 0; s < nd->n_subs; s++) n += uses_in(nd->subs[s], name);
  }
  for (int32_t i = 0; i < g->n_out; i++) n += !strcmp(g->out_names[i], name);
  return n;
}

int32_t keel_ir_uses(const keel_graph *g, const char *name) { return uses_in(g, name); }

int32_t keel_ir_const_of(const keel_model *m, const keel_graph *g, const char *name) {
  for (; g; g = g->parent) {
    for (int32_t i = 0; i < g->n_in; i++) /* an input shadows outer names */
      if (!strcmp(g->in_names[i], name)) return -1;
    for (int32_t i = 0; i < g->ld.n_init; i++)
      if (!strcmp(g->ld.init_names[i], name)) return g->ld.init_consts[i];
    for (int32_t i = 0; i < g->n_nodes; i++)
      for (int32_t k = 0; k < g->nodes[i].n_out; k++)
        if (!strcmp(g->nodes[i].out_names[k], name)) return -1;
  }
  (void)m;
  return -1;
}

const keel_attr *keel_node_attr(const keel_node *n, const char *name) {
  for (int32_t i = 0; i < n->n_attr; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

/* Installs `nodes` (n of them) as g's node array: indexes, graph and
 * sub-graph owners re-pointed. */
static void set_nodes(keel_graph *g, keel_node *nodes, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    nodes[i].index = i;
    nodes[i].graph = g;
    for (int32_t s = 0; s < nodes[i].n_subs; s++) nodes[i].subs[s]->owner = &nodes[i];
  }
  g->nodes = nodes;
  g->n_nodes = n;
}

keel_status keel_graph_replace_node(keel_arena *a, keel_graph *g, int32_t at,
                                    const keel_node *with, int32_t n_with) {
  int32_t n = g->n_nodes - 1 + n_with, k = 0;
  if (n_with <= 1) {
    /* no growth: in place (a fresh array per fusion would leave the
     * graph's arena a copy of the node list per fused node) */
    keel_node *nodes = g->nodes;
    if (n_with == 1) memmove(&nodes[at], with, sizeof(keel_node));
    else memmove(&nodes[at], &nodes[at + 1], sizeof(keel_node) * (size_t)(g->n_nodes - at - 1));
    set_nodes(g, nodes, n);
    return KEEL_OK;
  }
  keel_node *nodes = keel_arena_array(a, (size_t)n + 1, sizeof(keel_node));
  if (!nodes) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "replacing a node of graph '%s'", g->path);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (i != at) nodes[k++] = g->nodes[i];
    else
      for (int32_t j = 0; j < n_with; j++) nodes[k++] = with[j];
  }
  set_nodes(g, nodes, n);
  return KEEL_OK;
}

keel_status keel_graph_set_nodes(keel_arena *a, keel_graph *g, const keel_node *src, int32_t n) {
  keel_node *nodes = keel_arena_array(a, (size_t)n + 1, sizeof(keel_node));
  if (!nodes) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "the nodes of graph '%s'", g->path);
  if (n) memcpy(nodes, src, sizeof(keel_node) * (size_t)n);
  set_nodes(g, nodes, n);
  return KEEL_OK;
}

keel_status keel_ir_fuse_label(keel_arena *a, keel_node *into, const keel_node *taken) {
  char lb[512];
  const char **fused = keel_arena_array(a, (size_t)into->n_fused + 2, sizeof(char *));
  const char *l = keel_arena_strdup(a, keel_node_label(taken, lb, sizeof lb));
  if (!fused || !l)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "fusing %s into graph '%s'", lb,
                    into->graph ? into->graph->path : "?");
  if (into->n_fused) memcpy(fused, into->fused, sizeof(char *) * (size_t)into->n_fused);
  fused[into->n_fused++] = l;
  into->fused = fused;
  return KEEL_OK;
}

int32_t keel_ir_producer(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_out; k++)
      if (!strcmp(g->nodes[i].out_names[k], name)) return i;
  return -1;
}

int32_t keel_ir_only_reader(const keel_graph *g, const char *name) {
  if (!name[0] || keel_ir_uses(g, name) != 1) return -1;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_in; k++)
      if (!strcmp(g->nodes[i].in_names[k], name)) return g->nodes[i].n_subs ? -1 : i;
  return -1; /* read by a graph output or a sub-graph */
}

bool keel_ir_const_f32(const keel_model *m, const keel_graph *g, const char *name, float *v) {
  int32_t c = name[0] ? keel_ir_const_of(m, g, name) : -1;
  if (c < 0) return false;
  const keel_tensor *t = &m->consts[c];
  if (t->dtype != KEEL_FLOAT || keel_tensor_numel(t) != 1) return false;
  *v = *(const float *)t->data;
  return true;
}

keel_status keel_graph_remove_nodes(keel_arena *a, keel_graph *g, const bool *drop) {
  int32_t n = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) n += !drop[i];
  keel_node *nodes = keel_arena_array(a, (size_t)n + 1, sizeof(keel_node));
  if (!nodes) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "removing nodes of graph '%s'", g->path);
  for (int32_t i = 0, k = 0; i < g->n_nodes; i++)
    if (!drop[i]) nodes[k++] = g->nodes[i];
  set_nodes(g, nodes, n);
  return KEEL_OK;
}

keel_buffer *keel_ir_static_buffer(keel_arena *a, void *data, size_t nbytes) {
  keel_buffer *b = keel_arena_alloc(a, sizeof *b, 8);
  if (!b) return NULL;
  atomic_init(&b->refs, 1);
  b->kind = KEEL_BUF_STATIC;
  b->nbytes = nbytes;
  b->data = data;
  return b;
}

keel_status keel_ir_add_consts(keel_model *m, keel_graph *g, int32_t n, const char *const *names,
                               const keel_tensor *ts, int32_t *first) {
  keel_arena *a = m->arena;
  int32_t nc = m->n_consts, ni = g->ld.n_init;
  keel_tensor *c = keel_arena_array(a, (size_t)(nc + n) + 1, sizeof *c);
  const char **cn = keel_arena_array(a, (size_t)(nc + n) + 1, sizeof *cn);
  const char **in = keel_arena_array(a, (size_t)(ni + n) + 1, sizeof *in);
  int32_t *ic = keel_arena_array(a, (size_t)(ni + n) + 1, sizeof *ic);
  uint8_t *node = keel_arena_array(a, (size_t)(ni + n) + 1, 1);
  if (!c || !cn || !in || !ic || !node)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "adding %d constant(s) to graph '%s'", n, g->path);
  if (nc) {
    memcpy(c, m->consts, (size_t)nc * sizeof *c);
    memcpy(cn, m->const_names, (size_t)nc * sizeof *cn);
  }
  if (ni) {
    memcpy(in, g->ld.init_names, (size_t)ni * sizeof *in);
    memcpy(ic, g->ld.init_consts, (size_t)ni * sizeof *ic);
    if (g->ld.init_is_node) memcpy(node, g->ld.init_is_node, (size_t)ni);
  }
  for (int32_t k = 0; k < n; k++) {
    const char *nm = keel_arena_strdup(a, names[k]);
    if (!nm) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "adding constant '%s' to graph '%s'", names[k], g->path);
    c[nc + k] = ts[k];
    /* bytes a pass made: a STATIC buffer like the loader's, so that a
     * value leaving the session copies them (exec/value.c) */
    if (!ts[k].buf && ts[k].data &&
        !(c[nc + k].buf = keel_ir_static_buffer(a, ts[k].data, keel_tensor_nbytes(&ts[k]))))
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "adding constant '%s' to graph '%s'", names[k], g->path);
    cn[nc + k] = nm;
    in[ni + k] = nm;
    ic[ni + k] = nc + k;
    m->weight_bytes += keel_tensor_nbytes(&ts[k]);
  }
  if (first) *first = nc;
  m->consts = c;
  m->const_names = cn;
  m->n_consts = nc + n;
  g->ld.init_names = in;
  g->ld.init_consts = ic;
  g->ld.init_is_node = node;
  g->ld.n_init = ni + n;
  return KEEL_OK;
}

keel_status keel_ir_add_const(keel_model *m, keel_graph *g, const char *name, const keel_tensor *t,
                              int32_t *index) {
  return keel_ir_add_consts(m, g, 1, &name, t, index);
}

void keel_ir_drop_init(keel_graph *g, const char *name) {
  int32_t k = 0;
  for (int32_t i = 0; i < g->ld.n_init; i++) {
    if (!strcmp(g->ld.init_names[i], name)) {
      if (g->ld.init_is_node && g->ld.init_is_node[i]) g->ld.n_folded--;
      continue;
    }
    g->ld.init_names[k] = g->ld.init_names[i];
    g->ld.init_consts[k] = g->ld.init_consts[i];
    if (g->ld.init_is_node) g->ld.init_is_node[k] = g->ld.init_is_node[i];
    k++;
  }
  g->ld.n_init = k;
}
