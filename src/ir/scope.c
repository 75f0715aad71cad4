/* scope.c: turns value names into slots and refs (DESIGN rule 1).
 *
 * Each graph gets a slot for every graph input and every node output.
 * Initializers and folded Constants become CONST refs. A name a sub-graph
 * does not define is looked up in the enclosing graphs, innermost first,
 * and becomes OUTER(levels, slot): a capture resolved once, here, so the
 * run path never looks up a name. Every node on the way from the capturing
 * graph up to the defining graph records the capture as an implicit input,
 * so the planner keeps the outer value alive until that node is done.
 *
 * Names live in hash maps only while this pass runs.
 */
#include "ir/scope.h"

#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"

/* ========================================================= name maps */

typedef struct entry {
  const char *name;
  keel_ref ref;
} entry;

typedef struct scope {
  entry *tab;
  size_t cap;                  /* power of two                           */
  const keel_graph *g;
  const struct scope *up;
} scope;

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static keel_status scope_init(scope *sc, const keel_graph *g, size_t n,
                              const scope *up) {
  size_t cap = 16;
  while (cap < 2 * n + 1) cap *= 2;
  sc->tab = keel_sys_calloc(cap, sizeof(entry));
  if (!sc->tab) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "resolving names");
  sc->cap = cap;
  sc->g = g;
  sc->up = up;
  return KEEL_OK;
}

static void scope_free(scope *sc) {
  keel_sys_free(sc->tab, sc->cap * sizeof(entry));
}

static entry *scope_slot(const scope *sc, const char *name) {
  size_t m = sc->cap - 1;
  for (size_t i = hash(name) & m;; i = (i + 1) & m)
    if (!sc->tab[i].name || !strcmp(sc->tab[i].name, name)) return &sc->tab[i];
}

/* Defines `name`; a second definition in one graph is an error unless
 * `replace` (graph inputs that also have an initializer). */
static keel_status scope_put(scope *sc, const char *name, keel_ref ref,
                             bool replace) {
  entry *e = scope_slot(sc, name);
  if (e->name && !replace)
    return keel_err(KEEL_ERR_INVALID_MODEL, "value '%s' is defined twice", name);
  e->name = name;
  e->ref = ref;
  return KEEL_OK;
}

static const entry *scope_get(const scope *sc, const char *name) {
  const entry *e = scope_slot(sc, name);
  return e->name ? e : NULL;
}

/* ========================================================== captures */

/* A capture to add to a node's implicit inputs, gathered while resolving
 * and copied into the arena at the end. */
typedef struct capture {
  keel_node *node;
  keel_ref ref;
} capture;

typedef struct resolver {
  keel_model *m;
  capture *caps;
  size_t n_caps, cap_caps;
} resolver;

static keel_status note_capture(resolver *R, keel_node *n, keel_ref ref) {
  for (size_t i = 0; i < R->n_caps; i++)
    if (R->caps[i].node == n && R->caps[i].ref == ref) return KEEL_OK;
  if (R->n_caps == R->cap_caps) {
    size_t nc = R->cap_caps ? R->cap_caps * 2 : 64;
    capture *q = keel_sys_realloc(R->caps, R->cap_caps * sizeof *q, nc * sizeof *q);
    if (!q) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "resolving captures");
    R->caps = q;
    R->cap_caps = nc;
  }
  R->caps[R->n_caps++] = (capture){n, ref};
  return KEEL_OK;
}

/* Finds `name` for a use in graph sc->g. Writes KEEL_REF_NONE when it is
 * not defined anywhere up the chain. */
static keel_status lookup(resolver *R, const scope *sc, const char *name,
                          keel_ref *out) {
  const entry *e = scope_get(sc, name);
  if (e) {
    *out = e->ref;
    return KEEL_OK;
  }
  uint32_t levels = 0;
  const scope *s = sc;
  while (s->up && !e) {
    s = s->up;
    levels++;
    e = scope_get(s, name);
  }
  if (!e) {
    *out = KEEL_REF_NONE;
    return KEEL_OK;
  }
  if (keel_ref_kind(e->ref) == KEEL_REF_CONST) {
    *out = e->ref;
    return KEEL_OK;
  }
  uint32_t slot = keel_ref_slot(e->ref);
  *out = keel_ref_outer(levels, slot);
  /* every owner node between here and the defining graph keeps it alive */
  const keel_graph *g = sc->g;
  for (uint32_t l = levels; l > 0; l--) {
    keel_ref r = l == 1 ? keel_ref_local(slot) : keel_ref_outer(l - 1, slot);
    KEEL_TRY(note_capture(R, g->owner, r));
    g = g->parent;
  }
  return KEEL_OK;
}

/* ============================================================ graphs */

static keel_status alloc_slots(keel_arena *a, keel_graph *g, int32_t n_defs) {
  g->slot_names = keel_arena_array(a, (size_t)n_defs, sizeof(char *));
  g->slot_types = keel_arena_array(a, (size_t)n_defs, sizeof(keel_type *));
  g->in = keel_arena_array(a, (size_t)g->n_in, sizeof(int32_t));
  g->in_default = keel_arena_array(a, (size_t)g->n_in, sizeof(int32_t));
  g->out = keel_arena_array(a, (size_t)g->n_out, sizeof(keel_ref));
  if (!g->slot_names || !g->slot_types || !g->in || !g->in_default || !g->out)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "resolving names");
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    n->in = keel_arena_array(a, (size_t)n->n_in, sizeof(keel_ref));
    n->out = keel_arena_array(a, (size_t)n->n_out, sizeof(int32_t));
    if (!n->in || !n->out) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "resolving names");
  }
  return KEEL_OK;
}

static int32_t count_defs(const keel_graph *g) {
  int32_t n = g->n_in + g->ld.n_init;
  for (int32_t i = 0; i < g->n_nodes; i++) n += g->nodes[i].n_out;
  return n;
}

static keel_status new_slot(keel_graph *g, const char *name, int32_t *slot) {
  if ((uint32_t)g->n_slots >= KEEL_REF_MAX_SLOT)
    return keel_err(KEEL_ERR_UNSUPPORTED, "graph '%s' has too many values", g->path);
  *slot = g->n_slots;
  g->slot_names[g->n_slots++] = name;
  return KEEL_OK;
}

/* Defines the graph's own names: initializers, inputs, node outputs. */
static keel_status define_locals(scope *sc, keel_graph *g) {
  for (int32_t i = 0; i < g->ld.n_init; i++) {
    keel_status st = scope_put(sc, g->ld.init_names[i],
                               keel_ref_const((uint32_t)g->ld.init_consts[i]), false);
    if (st) return keel_err_prefix(st, "graph '%s'", g->path);
  }
  for (int32_t i = 0; i < g->n_in; i++) {
    const entry *e = scope_get(sc, g->in_names[i]);
    g->in_default[i] = e && keel_ref_kind(e->ref) == KEEL_REF_CONST
                           ? (int32_t)keel_ref_const_index(e->ref) : -1;
    KEEL_TRY(new_slot(g, g->in_names[i], &g->in[i]));
    keel_status st = scope_put(sc, g->in_names[i], keel_ref_local((uint32_t)g->in[i]),
                               g->in_default[i] >= 0);
    if (st) return keel_err_prefix(st, "graph '%s': input", g->path);
  }
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_out; k++) {
      n->out[k] = -1;
      if (!n->out_names[k][0]) continue;
      KEEL_TRY(new_slot(g, n->out_names[k], &n->out[k]));
      keel_status st = scope_put(sc, n->out_names[k],
                                 keel_ref_local((uint32_t)n->out[k]), false);
      char lb[256];
      if (st)
        return keel_err_prefix(st, "graph '%s': node %s", g->path,
                               keel_node_label(n, lb, sizeof lb));
    }
  }
  return KEEL_OK;
}

static keel_status undefined(const keel_graph *g, const keel_node *n,
                             const char *what, const char *name) {
  char lb[256];
  if (n)
    return keel_err(KEEL_ERR_INVALID_MODEL, "graph '%s': node %s: %s '%s' is not defined",
                    g->path, keel_node_label(n, lb, sizeof lb), what, name);
  return keel_err(KEEL_ERR_INVALID_MODEL, "graph '%s': %s '%s' is not defined",
                  g->path, what, name);
}

static void attach_types(keel_graph *g, const scope *sc) {
  for (int32_t i = 0; i < g->ld.n_vinfo; i++) {
    const entry *e = scope_get(sc, g->ld.vinfo_names[i]);
    if (e && keel_ref_kind(e->ref) == KEEL_REF_LOCAL)
      g->slot_types[keel_ref_slot(e->ref)] = &g->ld.vinfo_types[i];
  }
  for (int32_t i = 0; i < g->n_in; i++) g->slot_types[g->in[i]] = &g->in_types[i];
}

static keel_status resolve_graph(resolver *R, keel_graph *g, const scope *up);

static keel_status resolve_uses(resolver *R, keel_graph *g, scope *sc) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) {
      n->in[k] = KEEL_REF_NONE;
      if (!n->in_names[k][0]) continue;
      KEEL_TRY(lookup(R, sc, n->in_names[k], &n->in[k]));
      if (n->in[k] == KEEL_REF_NONE) return undefined(g, n, "input", n->in_names[k]);
    }
    for (int32_t k = 0; k < n->n_subs; k++) KEEL_TRY(resolve_graph(R, n->subs[k], sc));
  }
  for (int32_t i = 0; i < g->n_out; i++) {
    KEEL_TRY(lookup(R, sc, g->out_names[i], &g->out[i]));
    if (g->out[i] == KEEL_REF_NONE) return undefined(g, NULL, "output", g->out_names[i]);
  }
  return KEEL_OK;
}

static keel_status resolve_graph(resolver *R, keel_graph *g, const scope *up) {
  KEEL_TRY(alloc_slots(R->m->arena, g, count_defs(g)));
  scope sc;
  KEEL_TRY(scope_init(&sc, g, (size_t)count_defs(g), up));
  keel_status st = define_locals(&sc, g);
  if (!st) {
    attach_types(g, &sc);
    st = resolve_uses(R, g, &sc);
  }
  scope_free(&sc);
  return st;
}

/* Copies the gathered captures into each node's implicit list. */
static keel_status store_captures(resolver *R) {
  for (size_t i = 0; i < R->n_caps; i++) R->caps[i].node->n_implicit++;
  for (size_t i = 0; i < R->n_caps; i++) {
    keel_node *n = R->caps[i].node;
    if (!n->implicit) {
      n->implicit = keel_arena_array(R->m->arena, (size_t)n->n_implicit, sizeof(keel_ref));
      if (!n->implicit) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "resolving captures");
      n->n_implicit = 0;
    }
    n->implicit[n->n_implicit++] = R->caps[i].ref;
  }
  return KEEL_OK;
}

keel_status keel_ir_resolve(keel_model *m) {
  resolver R = {.m = m};
  keel_status st = resolve_graph(&R, m->main, NULL);
  if (!st) st = store_captures(&R);
  keel_sys_free(R.caps, R.cap_caps * sizeof(capture));
  return st;
}
