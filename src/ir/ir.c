/* ir.c: small queries and edits on the IR shared by the loader and the
 * passes: opset lookup, attribute lookup, node labels for messages, and
 * replacing a node with others (function inlining, Gradient). */
#include <stdio.h>

#include "../base/status.h"
#include "ir.h"

int64_t keel_model_opset(const keel_model *m, const char *domain) {
  for (int32_t i = 0; i < m->n_opsets; i++)
    if (!strcmp(m->opsets[i].domain, domain)) return m->opsets[i].version;
  return 0;
}

const char *keel_node_label(const keel_node *n, char *buf, size_t cap) {
  if (n->name && n->name[0]) snprintf(buf, cap, "'%s' (%s)", n->name, n->op_type);
  else snprintf(buf, cap, "#%d (%s)", n->index, n->op_type ? n->op_type : "?");
  return buf;
}

const keel_attr *keel_node_attr(const keel_node *n, const char *name) {
  for (int32_t i = 0; i < n->n_attr; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

keel_status keel_graph_replace_node(keel_arena *a, keel_graph *g, int32_t at,
                                    const keel_node *with, int32_t n_with) {
  int32_t n = g->n_nodes - 1 + n_with, k = 0;
  keel_node *nodes = keel_arena_array(a, (size_t)n + 1, sizeof(keel_node));
  if (!nodes) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "replacing a node of graph '%s'", g->path);
  for (int32_t i = 0; i < g->n_nodes; i++) {
    if (i != at) nodes[k++] = g->nodes[i];
    else
      for (int32_t j = 0; j < n_with; j++) nodes[k++] = with[j];
  }
  for (int32_t i = 0; i < n; i++) { /* sub-graphs point at their owner node */
    nodes[i].index = i;
    nodes[i].graph = g;
    for (int32_t s = 0; s < nodes[i].n_subs; s++) nodes[i].subs[s]->owner = &nodes[i];
  }
  g->nodes = nodes;
  g->n_nodes = n;
  return KEEL_OK;
}
