/* plan.c: execution order and lifetimes, per graph (DESIGN rule 3).
 *
 * The executor drops each node's `release` slots right after the node runs,
 * so an intermediate lives from its producer to its last reader and no
 * longer. Implicit inputs (captures by sub-graphs) count as reads by the
 * node that holds the sub-graph, so a Loop keeps an outer value alive for
 * all its iterations and releases it after. Graph outputs are never
 * released by a node: they move out of the frame when the graph returns.
 * An output nobody reads is dropped right after its producer.
 */
#include "ir/scope.h"

#include "base/status.h"
#include "base/sysmem.h"

typedef struct planner {
  keel_arena *a;
  keel_graph *g;
  int32_t *producer;   /* slot -> node index, -1 for graph inputs        */
  int32_t *last;       /* slot -> position (in order) of its last reader  */
  uint8_t *is_out;     /* slot is a graph output                          */
  int32_t *pos;        /* node index -> position in order                 */
} planner;

/* Calls fn(p, node, slot, input_index) for each LOCAL slot node n reads;
 * input_index is -1 for implicit reads. */
#define FOR_EACH_LOCAL_READ(n, slot, k, body)                                  \
  for (int32_t k = -(n)->n_implicit; k < (n)->n_in; k++) {                     \
    keel_ref r_ = k < 0 ? (n)->implicit[-k - 1] : (n)->in[k];                  \
    if (r_ == KEEL_REF_NONE || keel_ref_kind(r_) != KEEL_REF_LOCAL) continue; \
    int32_t slot = (int32_t)keel_ref_slot(r_);                                 \
    body                                                                       \
  }

/* ------------------------------------------------------------- order */

static bool file_order_ok(const planner *P) {
  const keel_graph *g = P->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    FOR_EACH_LOCAL_READ(n, s, k, { if (P->producer[s] >= i) return false; })
  }
  return true;
}

/* Kahn's algorithm, taking ready nodes in file order. */
static keel_status kahn(planner *P) {
  keel_graph *g = P->g;
  size_t nn = (size_t)g->n_nodes;
  int32_t *indeg = keel_sys_calloc(nn + 1, sizeof(int32_t));
  int32_t *queue = keel_sys_calloc(nn + 1, sizeof(int32_t));
  keel_status st = KEEL_OK;
  if (!indeg || !queue) {
    st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "planning graph '%s'", g->path);
    goto done;
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    FOR_EACH_LOCAL_READ(n, s, k, { if (P->producer[s] >= 0) indeg[i]++; })
  }
  int32_t head = 0, tail = 0;
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (!indeg[i]) queue[tail++] = i;
  while (head < tail) {
    int32_t i = queue[head++];
    g->order[head - 1] = i;
    /* consumers of i's outputs: scan (graphs are small; this path is rare) */
    for (int32_t j = 0; j < g->n_nodes; j++) {
      const keel_node *n = &g->nodes[j];
      FOR_EACH_LOCAL_READ(n, s, k, {
        if (P->producer[s] == i && --indeg[j] == 0) queue[tail++] = j;
      })
    }
  }
  if (tail != g->n_nodes) {
    int32_t stuck = 0;
    while (stuck < g->n_nodes && !indeg[stuck]) stuck++;
    char lb[256];
    st = keel_err(KEEL_ERR_INVALID_MODEL, "graph '%s' has a cycle through node %s", g->path,
                  keel_node_label(&g->nodes[stuck], lb, sizeof lb));
  }
done:
  keel_sys_free(indeg, (nn + 1) * sizeof(int32_t));
  keel_sys_free(queue, (nn + 1) * sizeof(int32_t));
  return st;
}

static keel_status order(planner *P) {
  keel_graph *g = P->g;
  g->order = keel_arena_array(P->a, (size_t)g->n_nodes, sizeof(int32_t));
  if (!g->order) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "planning");
  if (file_order_ok(P)) {
    for (int32_t i = 0; i < g->n_nodes; i++) g->order[i] = i;
    return KEEL_OK;
  }
  return kahn(P);
}

/* ---------------------------------------------------------- lifetimes */

static void find_last_uses(planner *P) {
  keel_graph *g = P->g;
  for (int32_t s = 0; s < g->n_slots; s++) P->last[s] = -1;
  for (int32_t p = 0; p < g->n_nodes; p++) {
    const keel_node *n = &g->nodes[g->order[p]];
    P->pos[g->order[p]] = p;
    FOR_EACH_LOCAL_READ(n, s, k, { P->last[s] = p; })
  }
  for (int32_t i = 0; i < g->n_out; i++)
    if (keel_ref_kind(g->out[i]) == KEEL_REF_LOCAL)
      P->is_out[keel_ref_slot(g->out[i])] = 1;
}

/* Fills release lists: a slot dies after its last reader, or right after
 * its producer when nobody reads it. */
static keel_status release_lists(planner *P) {
  keel_graph *g = P->g;
  int32_t *count = keel_sys_calloc((size_t)g->n_nodes + 1, sizeof(int32_t));
  if (!count) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "planning");
  int32_t n_drop = 0;
  for (int32_t pass = 0; pass < 2; pass++) {
    for (int32_t s = 0; s < g->n_slots; s++) {
      if (P->is_out[s]) continue;
      int32_t at = P->last[s];
      if (at < 0) { /* never read */
        if (P->producer[s] < 0) {
          if (pass) g->drop_in[g->n_drop_in++] = s;
          else n_drop++;
          continue;
        }
        at = P->pos[P->producer[s]];
      }
      keel_node *n = &g->nodes[g->order[at]];
      if (pass) n->release[n->n_release++] = s;
      else count[g->order[at]]++;
    }
    if (pass) break;
    g->drop_in = keel_arena_array(P->a, (size_t)n_drop, sizeof(int32_t));
    bool ok = g->drop_in != NULL;
    for (int32_t i = 0; i < g->n_nodes && ok; i++) {
      g->nodes[i].release = keel_arena_array(P->a, (size_t)count[i], sizeof(int32_t));
      ok = g->nodes[i].release != NULL;
    }
    if (!ok) {
      keel_sys_free(count, ((size_t)g->n_nodes + 1) * sizeof(int32_t));
      return keel_err(KEEL_ERR_OUT_OF_MEMORY, "planning");
    }
  }
  keel_sys_free(count, ((size_t)g->n_nodes + 1) * sizeof(int32_t));
  return KEEL_OK;
}

/* Bit k of last_use: input k is a local value read for the last time here
 * and by no other input of this node, so a kernel may reuse its buffer when
 * the buffer has no other reference. */
static void last_use_masks(planner *P) {
  keel_graph *g = P->g;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    n->last_use = 0;
    for (int32_t k = 0; k < n->n_in && k < 64; k++) {
      keel_ref r = n->in[k];
      if (r == KEEL_REF_NONE || keel_ref_kind(r) != KEEL_REF_LOCAL) continue;
      int32_t s = (int32_t)keel_ref_slot(r);
      if (P->is_out[s] || P->last[s] != P->pos[i]) continue;
      bool dup = false;
      for (int32_t j = -n->n_implicit; j < n->n_in && !dup; j++) {
        keel_ref o = j < 0 ? n->implicit[-j - 1] : n->in[j];
        dup = j != k && o == r;
      }
      if (!dup) n->last_use |= 1ull << k;
    }
  }
}

static keel_status output_moves(planner *P) {
  keel_graph *g = P->g;
  g->out_move = keel_arena_array(P->a, (size_t)g->n_out, 1);
  if (!g->out_move) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "planning");
  for (int32_t i = 0; i < g->n_out; i++) {
    if (keel_ref_kind(g->out[i]) != KEEL_REF_LOCAL) continue;
    bool later = false;
    for (int32_t j = i + 1; j < g->n_out; j++) later |= g->out[j] == g->out[i];
    g->out_move[i] = !later; /* the last listing takes the slot's reference */
  }
  return KEEL_OK;
}

static keel_status plan_graph(keel_arena *a, keel_graph *g) {
  size_t ns = (size_t)g->n_slots + 1, nn = (size_t)g->n_nodes + 1;
  planner P = {.a = a, .g = g};
  P.producer = keel_sys_calloc(ns, sizeof(int32_t));
  P.last = keel_sys_calloc(ns, sizeof(int32_t));
  P.is_out = keel_sys_calloc(ns, 1);
  P.pos = keel_sys_calloc(nn, sizeof(int32_t));
  keel_status st = KEEL_OK;
  if (!P.producer || !P.last || !P.is_out || !P.pos) {
    st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "planning graph '%s'", g->path);
  } else {
    for (int32_t s = 0; s < g->n_slots; s++) P.producer[s] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
      for (int32_t k = 0; k < g->nodes[i].n_out; k++)
        if (g->nodes[i].out[k] >= 0) P.producer[g->nodes[i].out[k]] = i;
    st = order(&P);
    if (!st) {
      find_last_uses(&P);
      st = release_lists(&P);
    }
    if (!st) {
      last_use_masks(&P);
      st = output_moves(&P);
    }
  }
  keel_sys_free(P.producer, ns * sizeof(int32_t));
  keel_sys_free(P.last, ns * sizeof(int32_t));
  keel_sys_free(P.is_out, ns);
  keel_sys_free(P.pos, nn * sizeof(int32_t));
  return st;
}

keel_status keel_ir_plan(keel_model *m) {
  for (int32_t i = 0; i < m->n_graphs; i++) {
    if (!m->graphs[i]->slot_names)
      return keel_err(KEEL_ERR_INVALID_MODEL, "graph '%s' is not reachable from the main graph",
                      m->graphs[i]->path);
    KEEL_TRY(plan_graph(m->arena, m->graphs[i]));
  }
  return KEEL_OK;
}
