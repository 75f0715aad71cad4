/* pass_concat.c: sink-concat. A pool of a channel Concat pools each part
 * and concatenates the pooled parts:
 *
 *   MaxPool(Concat(a, b, axis 1))  =>  Concat(MaxPool(a), MaxPool(b), axis 1)
 *
 * A pool works on each channel alone, so the two are equal element for
 * element; the Concat then copies the pooled tensors, a quarter of the
 * bytes for a 2x2 or 3x3/2 pool, instead of the full ones. SqueezeNet's
 * fire modules end so (expand1x1 and expand3x3 concatenated, then
 * MaxPool): x_squeezenet_o9 two of its eight Concats.
 *
 * Only when: the pool is MaxPool (one output: no Indices) or AveragePool
 * of ai.onnx, the Concat's axis attribute is 1 (the channels; exporters
 * write it so), it has 2 to 8 inputs, and the pool is the only reader of
 * its output. The pooled parts keep the pool's name, the new Concat the
 * Concat's; the parts' values are named "<pool output>.partK".
 */
#include <stdio.h>

#include "base/status.h"
#include "passes/pass.h"

#define MAX_PARTS 8

static bool is_pool(const keel_node *n) {
  if (n->domain[0] || n->n_subs || n->n_in != 1 || n->n_out != 1 || !n->out_names[0][0])
    return false;
  return !strcmp(n->op_type, "MaxPool") || !strcmp(n->op_type, "AveragePool");
}

/* The channel Concat feeding pool node i, or -1. */
static int32_t channel_concat(const keel_graph *g, int32_t i) {
  const keel_node *p = &g->nodes[i];
  int32_t c = p->in_names[0][0] ? keel_ir_producer(g, p->in_names[0]) : -1;
  if (c < 0 || c >= i) return -1;
  const keel_node *n = &g->nodes[c];
  if (n->domain[0] || strcmp(n->op_type, "Concat") || n->n_subs || n->n_out != 1 || n->n_in < 2 ||
      n->n_in > MAX_PARTS)
    return -1;
  const keel_attr *ax = keel_node_attr(n, "axis");
  if (!ax || ax->type != KEEL_ATTR_INT || ax->i != 1) return -1;
  for (int32_t k = 0; k < n->n_in; k++)
    if (!n->in_names[k][0]) return -1;
  return keel_ir_only_reader(g, n->out_names[0]) == i ? c : -1;
}

static keel_status oom(const keel_graph *g) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "sink-concat in graph '%s'", g->path);
}

/* Pool i over Concat c: the pooled parts, then the Concat, in i's place;
 * c goes. *next: the index to go on from. */
static keel_status rewrite(keel_model *m, keel_graph *g, int32_t i, int32_t c, int32_t *next) {
  keel_arena *a = m->arena;
  const keel_node pool = g->nodes[i], cat = g->nodes[c];
  int32_t n = cat.n_in;
  keel_node with[MAX_PARTS + 1];
  const char **parts = keel_arena_array(a, (size_t)n + 1, sizeof(char *));
  const char **cat_out = keel_arena_array(a, 2, sizeof(char *));
  if (!parts || !cat_out) return oom(g);
  for (int32_t k = 0; k < n; k++) {
    char tag[16];
    snprintf(tag, sizeof tag, "part%d", (int)k);
    const char **ins = keel_arena_array(a, 2, sizeof(char *));
    const char **outs = keel_arena_array(a, 2, sizeof(char *));
    parts[k] = keel_pass_fresh(m, g, pool.out_names[0], tag);
    if (!ins || !outs || !parts[k]) return oom(g);
    ins[0] = cat.in_names[k], outs[0] = parts[k];
    with[k] = pool;
    with[k].in_names = ins, with[k].out_names = outs;
  }
  cat_out[0] = pool.out_names[0];
  with[n] = cat;
  with[n].in_names = parts, with[n].out_names = cat_out;
  KEEL_TRY(keel_graph_replace_node(a, g, i, with, n + 1));
  KEEL_TRY(keel_graph_replace_node(a, g, c, NULL, 0));
  *next = i - 1 + n + 1; /* past the new Concat (c < i moved everything up one) */
  return KEEL_OK;
}

keel_status keel_pass_sink_concat(keel_model *m) {
  for (int32_t gi = 0; gi < m->n_graphs; gi++) {
    keel_graph *g = m->graphs[gi];
    for (int32_t i = 0; i < g->n_nodes;) {
      int32_t c = is_pool(&g->nodes[i]) ? channel_concat(g, i) : -1;
      if (c < 0) {
        i++;
        continue;
      }
      KEEL_TRY(rewrite(m, g, i, c, &i));
    }
  }
  return KEEL_OK;
}
