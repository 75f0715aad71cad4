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

/* Copies n items of `size` into a new arena array of n + 1 (NULL on OOM). */
static void *grow_copy(keel_arena *a, const void *old, int32_t n, size_t size) {
  void *p = keel_arena_array(a, (size_t)n + 1, size);
  if (p && n) memcpy(p, old, (size_t)n * size);
  return p;
}

keel_status keel_ir_add_const(keel_model *m, keel_graph *g, const char *name, const keel_tensor *t,
                              int32_t *index) {
  keel_arena *a = m->arena;
  keel_tensor *c = grow_copy(a, m->consts, m->n_consts, sizeof *c);
  const char **cn = grow_copy(a, m->const_names, m->n_consts, sizeof *cn);
  const char **in = grow_copy(a, g->ld.init_names, g->ld.n_init, sizeof *in);
  int32_t *ic = grow_copy(a, g->ld.init_consts, g->ld.n_init, sizeof *ic);
  uint8_t *node = grow_copy(a, g->ld.init_is_node, g->ld.n_init, 1);
  const char *nm = keel_arena_strdup(a, name);
  if (!c || !cn || !in || !ic || !node || !nm)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "adding constant '%s' to graph '%s'", name, g->path);
  c[m->n_consts] = *t;
  cn[m->n_consts] = nm;
  in[g->ld.n_init] = nm;
  ic[g->ld.n_init] = m->n_consts;
  if (index) *index = m->n_consts;
  m->consts = c;
  m->const_names = cn;
  m->n_consts++;
  m->weight_bytes += keel_tensor_nbytes(t);
  g->ld.init_names = in;
  g->ld.init_consts = ic;
  g->ld.init_is_node = node;
  g->ld.n_init++;
  return KEEL_OK;
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
