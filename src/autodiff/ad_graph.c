/* ad_graph.c: graph edits for differentiating control flow (ad_driver.h):
 * sets of names, the captures of a graph (the outer names it reads, at any
 * depth, not shadowed by its own inputs, initializers and node outputs),
 * and new graphs registered in m->graphs the way the loader registers the
 * graphs it reads, so that resolution, planning and binding see them.
 * Everything lives in the model's arena, on names, before resolution. */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "autodiff/ad_driver.h"

static keel_status oom(void) { return ad_oom(); }

/* ================================================================ names */

bool ad_names_has(const ad_names *s, const char *name) {
  for (int32_t i = 0; i < s->n; i++)
    if (!strcmp(s->v[i], name)) return true;
  return false;
}

keel_status ad_names_add(ad_names *s, const char *name) {
  if (ad_names_has(s, name)) return KEEL_OK;
  if (s->n == s->cap) {
    int32_t nc = s->cap ? s->cap * 2 : 16;
    const char **v = keel_sys_realloc(s->v, (size_t)s->cap * sizeof(char *), (size_t)nc * sizeof(char *));
    if (!v) return oom();
    s->v = v;
    s->cap = nc;
  }
  s->v[s->n++] = name;
  return KEEL_OK;
}

void ad_names_free(ad_names *s) {
  keel_sys_free(s->v, (size_t)s->cap * sizeof(char *));
  *s = (ad_names){0};
}

/* ============================================================= captures */

bool ad_graph_defines(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_in; i++)
    if (!strcmp(g->in_names[i], name)) return true;
  for (int32_t i = 0; i < g->n_nodes; i++)
    for (int32_t k = 0; k < g->nodes[i].n_out; k++)
      if (!strcmp(g->nodes[i].out_names[k], name)) return true;
  return false;
}

static bool is_local(const keel_graph *g, const char *name) {
  if (ad_graph_defines(g, name)) return true;
  for (int32_t i = 0; i < g->ld.n_init; i++)
    if (!strcmp(g->ld.init_names[i], name)) return true;
  return false;
}

static keel_status read_name(const keel_graph *g, const char *name, ad_names *out) {
  if (!name[0] || is_local(g, name)) return KEEL_OK;
  return ad_names_add(out, name);
}

keel_status ad_graph_free(const keel_graph *g, ad_names *out) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++) KEEL_TRY(read_name(g, n->in_names[k], out));
    if (!n->n_subs) continue;
    ad_names inner = {0};
    keel_status st = ad_node_free(n, &inner);
    for (int32_t k = 0; !st && k < inner.n; k++) st = read_name(g, inner.v[k], out);
    ad_names_free(&inner);
    KEEL_TRY(st);
  }
  for (int32_t i = 0; i < g->n_out; i++) KEEL_TRY(read_name(g, g->out_names[i], out));
  return KEEL_OK;
}

keel_status ad_node_free(const keel_node *n, ad_names *out) {
  for (int32_t s = 0; s < n->n_subs; s++) KEEL_TRY(ad_graph_free(n->subs[s], out));
  return KEEL_OK;
}

/* =========================================================== new graphs */

/* m->graphs grows by one (an arena array: the old one is left behind). */
static keel_status register_graph(keel_model *m, keel_graph *g) {
  keel_graph **gs = keel_arena_array(m->arena, (size_t)m->n_graphs + 1, sizeof *gs);
  if (!gs) return oom();
  if (m->n_graphs) memcpy(gs, m->graphs, sizeof *gs * (size_t)m->n_graphs);
  g->id = m->n_graphs;
  gs[m->n_graphs++] = g;
  m->graphs = gs;
  return KEEL_OK;
}

keel_status ad_new_graph(ad_builder *b, const char *label, const char *attr, keel_graph **out) {
  keel_arena *a = ad_arena(b);
  keel_graph *parent = ad_graph(b);
  if (parent->depth + 1 > (int32_t)KEEL_REF_MAX_LEVELS)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gradient: backward sub-graphs nested deeper than %u",
                    KEEL_REF_MAX_LEVELS);
  keel_graph *g = keel_arena_alloc(a, sizeof *g, 8);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/%s", parent->path, label + (label[0] == '/'), attr);
  if (!g || !(g->path = keel_arena_strdup(a, path)) || !(g->name = keel_arena_strdup(a, attr)))
    return oom();
  g->parent = parent;
  g->depth = parent->depth + 1;
  g->owner_attr = g->name;
  g->nodes = keel_arena_array(a, 1, sizeof(keel_node));
  if (!g->nodes) return oom();
  KEEL_TRY(ad_graph_set_io(b, g, 0, NULL, 0, NULL));
  KEEL_TRY(register_graph(ad_model(b), g));
  *out = g;
  return KEEL_OK;
}

static keel_status name_array(keel_arena *a, int32_t n, const char *const *src, const char ***out) {
  *out = keel_arena_array(a, (size_t)n + 1, sizeof(char *));
  if (!*out) return oom();
  if (n) memcpy(*out, src, sizeof(char *) * (size_t)n);
  return KEEL_OK;
}

keel_status ad_graph_set_io(ad_builder *b, keel_graph *g, int32_t n_in, const char *const *ins,
                            int32_t n_out, const char *const *outs) {
  keel_arena *a = ad_arena(b);
  KEEL_TRY(name_array(a, n_in, ins, &g->in_names));
  KEEL_TRY(name_array(a, n_out, outs, &g->out_names));
  g->in_types = keel_arena_array(a, (size_t)n_in + 1, sizeof(keel_type));
  g->out_types = keel_arena_array(a, (size_t)n_out + 1, sizeof(keel_type));
  if (!g->in_types || !g->out_types) return oom();
  g->n_in = n_in;
  g->n_out = n_out;
  return KEEL_OK;
}

keel_status ad_graph_add_output(ad_builder *b, keel_graph *g, const char *name, const keel_type *t) {
  keel_arena *a = ad_arena(b);
  const char **names;
  KEEL_TRY(name_array(a, g->n_out, g->out_names, &names));
  keel_type *types = keel_arena_array(a, (size_t)g->n_out + 2, sizeof(keel_type));
  if (!types) return oom();
  if (g->n_out) memcpy(types, g->out_types, sizeof(keel_type) * (size_t)g->n_out);
  if (t) types[g->n_out] = *t;
  names[g->n_out] = name;
  g->out_names = names;
  g->out_types = types;
  g->n_out++;
  return KEEL_OK;
}

keel_status ad_node_add_output(ad_builder *b, keel_node *n, const char *name) {
  const char **names;
  KEEL_TRY(name_array(ad_arena(b), n->n_out, n->out_names, &names));
  names[n->n_out++] = name;
  n->out_names = names;
  return KEEL_OK;
}

void ad_graph_share_inits(keel_graph *dst, const keel_graph *src) {
  dst->ld.n_init = src->ld.n_init;
  dst->ld.init_names = src->ld.init_names;
  dst->ld.init_consts = src->ld.init_consts;
}
