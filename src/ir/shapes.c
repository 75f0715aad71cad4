/* shapes.c: symbolic shape inference (shapes.h): the dim algebra, the
 * per-graph tables, the walk over every graph and the control-flow rules
 * (If, Loop, Scan). The rules of the other ops are in shape_rules.c. */
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shape_rules.h"

typedef struct gtab {
  int32_t n, cap, cap_v;        /* entries; room in names, in v (grown one
                                   after the other: an allocation that fails
                                   between them leaves them apart)         */
  const char **names;
  keel_sshape *v;
  int32_t *hash;               /* open addressing: index + 1, 0 empty      */
  int32_t hcap;
} gtab;

struct keel_shapes {
  const keel_model *m;
  int32_t n_tabs;
  gtab *tabs;                  /* per graph id                             */
  int32_t n_syms, cap_syms, cap_graph; /* room in sym_names, in sym_graph */
  char **sym_names;
  int32_t *sym_graph;
  bool oom;
  bool general;                /* keel_shapes_infer_general               */
};

/* ======================================================= dim algebra */

static int64_t gcd64(int64_t a, int64_t b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a ? a : 1;
}

/* sym * mul / div + add, normalized; unknown when the figures overflow. */
static keel_sdim make_sym(int32_t sym, int64_t mul, int64_t div, int64_t add) {
  if (mul == 0) return keel_sd_known(add);
  int64_t g = gcd64(mul, div);
  mul /= g, div /= g;
  if (div < 0) mul = -mul, div = -div;
  if (mul > INT32_MAX || mul < -INT32_MAX || div > INT32_MAX) return keel_sd_unknown();
  return (keel_sdim){sym, (int32_t)mul, (int32_t)div, add};
}

bool keel_sd_eq(keel_sdim a, keel_sdim b) {
  if (keel_sd_unk(a) || keel_sd_unk(b) || a.sym != b.sym || a.add != b.add) return false;
  return keel_sd_isk(a) || (a.mul == b.mul && a.div == b.div);
}

keel_sdim keel_sd_add(keel_sdim a, keel_sdim b) {
  if (keel_sd_unk(a) || keel_sd_unk(b)) return keel_sd_unknown();
  if (keel_sd_isk(a) && keel_sd_isk(b)) return keel_sd_known(a.add + b.add);
  if (keel_sd_isk(b)) return make_sym(a.sym, a.mul, a.div, a.add + b.add);
  if (keel_sd_isk(a)) return make_sym(b.sym, b.mul, b.div, a.add + b.add);
  if (a.sym != b.sym) return keel_sd_unknown();
  return make_sym(a.sym, (int64_t)a.mul * b.div + (int64_t)b.mul * a.div, (int64_t)a.div * b.div,
                  a.add + b.add);
}

keel_sdim keel_sd_sub(keel_sdim a, keel_sdim b) {
  if (keel_sd_unk(b)) return keel_sd_unknown();
  keel_sdim nb = keel_sd_isk(b) ? keel_sd_known(-b.add) : (keel_sdim){b.sym, -b.mul, b.div, -b.add};
  return keel_sd_add(a, nb);
}

keel_sdim keel_sd_mul(keel_sdim a, keel_sdim b) {
  if (keel_sd_is(a, 0) || keel_sd_is(b, 0)) return keel_sd_known(0);
  if (keel_sd_unk(a) || keel_sd_unk(b)) return keel_sd_unknown();
  if (keel_sd_isk(a) && keel_sd_isk(b)) return keel_sd_known(a.add * b.add);
  if (keel_sd_isk(a)) {
    keel_sdim t = a;
    a = b, b = t;
  }
  if (!keel_sd_isk(b)) return keel_sd_unknown(); /* a product of symbols */
  return make_sym(a.sym, (int64_t)a.mul * b.add, a.div, a.add * b.add);
}

keel_sdim keel_sd_div(keel_sdim a, keel_sdim b) {
  if (!keel_sd_isk(b) || b.add <= 0 || keel_sd_unk(a)) {
    if (keel_sd_eq(a, b)) return keel_sd_known(1);
    return keel_sd_unknown();
  }
  if (keel_sd_isk(a)) {
    int64_t q = a.add / b.add;
    if ((a.add % b.add) && a.add < 0) q--;
    return keel_sd_known(q);
  }
  if (a.add % b.add) return keel_sd_unknown();
  return make_sym(a.sym, a.mul, (int64_t)a.div * b.add, a.add / b.add);
}

keel_sdim keel_sd_bcast(keel_sdim a, keel_sdim b) {
  if (keel_sd_is(a, 1)) return b;
  if (keel_sd_is(b, 1)) return a;
  if (keel_sd_eq(a, b)) return a;
  if (keel_sd_isk(a) && keel_sd_unk(b)) return a;
  if (keel_sd_isk(b) && keel_sd_unk(a)) return b;
  if (keel_sd_isk(a) && !keel_sd_isk(b)) return a; /* b is a or 1: a either way */
  if (keel_sd_isk(b) && !keel_sd_isk(a)) return b;
  return keel_sd_unknown();
}

void keel_ss_unknown(keel_sshape *v) {
  v->dtype = 0;
  v->rank = -1;
  v->nv = -1;
}

void keel_ss_rank(keel_sshape *v, int32_t r) {
  v->rank = r;
  v->nv = -1;
  for (int32_t i = 0; i < r && i < KEEL_MAX_RANK; i++) v->d[i] = keel_sd_unknown();
}

/* =========================================================== symbols */

static int32_t add_sym(keel_shapes *S, int32_t graph, const char *name) {
  if (S->n_syms == S->cap_syms) {
    int32_t nc = S->cap_syms ? 2 * S->cap_syms : 32;
    char **nn = keel_sys_realloc(S->sym_names, sizeof(char *) * (size_t)S->cap_syms,
                                 sizeof(char *) * (size_t)nc);
    if (!nn) return -1;
    S->sym_names = nn, S->cap_syms = nc;
  }
  if (S->n_syms == S->cap_graph) {
    int32_t nc = S->cap_syms;
    int32_t *ng = keel_sys_realloc(S->sym_graph, sizeof(int32_t) * (size_t)S->cap_graph,
                                   sizeof(int32_t) * (size_t)nc);
    if (!ng) return -1;
    S->sym_graph = ng, S->cap_graph = nc;
  }
  size_t len = strlen(name) + 1;
  char *copy = keel_sys_alloc(len);
  if (!copy) return -1;
  memcpy(copy, name, len);
  S->sym_names[S->n_syms] = copy;
  S->sym_graph[S->n_syms] = graph;
  return S->n_syms++;
}

/* The symbol of a dim_param of the main graph's inputs (one per name). */
static keel_sdim named_sym(keel_shapes *S, const char *name) {
  for (int32_t i = 0; i < S->n_syms; i++)
    if (S->sym_graph[i] == 0 && !strcmp(S->sym_names[i], name)) return keel_sd_sym(i);
  int32_t s = add_sym(S, 0, name);
  if (s < 0) S->oom = true;
  return s < 0 ? keel_sd_unknown() : keel_sd_sym(s);
}

keel_sdim keel_shapes_fresh(keel_shapes *S, const keel_graph *g, const char *what) {
  char buf[80];
  snprintf(buf, sizeof buf, "s%d", S->n_syms); /* short in shapes; `what` for a debugger */
  (void)what;
  int32_t s = add_sym(S, g->id, buf);
  if (s < 0) S->oom = true;
  return s < 0 ? keel_sd_unknown() : keel_sd_sym(s);
}

int32_t keel_shapes_n_syms(const keel_shapes *s) { return s->n_syms; }
const char *keel_shapes_sym_name(const keel_shapes *s, int32_t sym) { return s->sym_names[sym]; }
int32_t keel_shapes_sym_graph(const keel_shapes *s, int32_t sym) { return s->sym_graph[sym]; }

/* ============================================================ tables */

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static int32_t tab_index(const gtab *t, const char *name) {
  if (!t->hcap) return -1;
  for (uint32_t h = hash_name(name) & (uint32_t)(t->hcap - 1);; h = (h + 1) & (uint32_t)(t->hcap - 1)) {
    int32_t e = t->hash[h];
    if (!e) return -1;
    if (!strcmp(t->names[e - 1], name)) return e - 1;
  }
}

static bool tab_rehash(gtab *t, int32_t hcap) {
  int32_t *h = keel_sys_calloc((size_t)hcap, sizeof(int32_t));
  if (!h) return false;
  keel_sys_free(t->hash, sizeof(int32_t) * (size_t)t->hcap);
  t->hash = h, t->hcap = hcap;
  for (int32_t i = 0; i < t->n; i++) {
    uint32_t k = hash_name(t->names[i]) & (uint32_t)(hcap - 1);
    while (h[k]) k = (k + 1) & (uint32_t)(hcap - 1);
    h[k] = i + 1;
  }
  return true;
}

static void tab_put(keel_shapes *S, gtab *t, const char *name, const keel_sshape *v) {
  if (!name || !name[0]) return;
  int32_t i = tab_index(t, name);
  if (i >= 0) {
    t->v[i] = *v;
    return;
  }
  if (t->n == t->cap) {
    int32_t nc = t->cap ? 2 * t->cap : 16;
    const char **nn = keel_sys_realloc(t->names, sizeof(char *) * (size_t)t->cap, sizeof(char *) * (size_t)nc);
    if (!nn) goto oom;
    t->names = nn, t->cap = nc;
  }
  if (t->n == t->cap_v) {
    keel_sshape *nv = keel_sys_realloc(t->v, sizeof(keel_sshape) * (size_t)t->cap_v,
                                       sizeof(keel_sshape) * (size_t)t->cap);
    if (!nv) goto oom;
    t->v = nv, t->cap_v = t->cap;
  }
  t->names[t->n] = name;
  t->v[t->n++] = *v;
  if (2 * t->n > t->hcap) {
    if (!tab_rehash(t, t->hcap ? 2 * t->hcap : 64)) goto oom;
  } else {
    uint32_t k = hash_name(name) & (uint32_t)(t->hcap - 1);
    while (t->hash[k]) k = (k + 1) & (uint32_t)(t->hcap - 1);
    t->hash[k] = t->n;
  }
  return;
oom:
  S->oom = true;
}

static void tab_clear(gtab *t) {
  t->n = 0;
  if (t->hash) memset(t->hash, 0, sizeof(int32_t) * (size_t)t->hcap);
}

const keel_sshape *keel_shapes_find(const keel_shapes *s, const keel_graph *g, const char *name) {
  if (!name || !name[0]) return NULL;
  for (; g; g = g->parent) {
    if (g->id < 0 || g->id >= s->n_tabs) return NULL;
    const gtab *t = &s->tabs[g->id];
    int32_t i = tab_index(t, name);
    if (i >= 0) return &t->v[i];
  }
  return NULL;
}

/* ===================================================== from tensors */

void keel_ss_from_tensor(keel_sshape *v, const keel_tensor *t) {
  v->dtype = t->dtype;
  v->rank = t->rank;
  for (int32_t i = 0; i < t->rank; i++) v->d[i] = keel_sd_known(t->shape[i]);
  int64_t n = keel_tensor_numel(t);
  v->nv = -1;
  if ((t->dtype == KEEL_INT64 || t->dtype == KEEL_INT32) && t->rank <= 1 && n <= KEEL_SHAPE_MAXV) {
    v->nv = (int32_t)n;
    for (int64_t i = 0; i < n; i++) v->v[i] = keel_sd_known(keel_elem_get_i64(t->dtype, t->data, (size_t)i));
  }
}

/* A declared type of a main-graph input. */
static void from_type(keel_shapes *S, keel_sshape *v, const keel_type *ty, const char *input) {
  keel_ss_unknown(v);
  if (ty && ty->kind == KEEL_TYPE_TENSOR) v->dtype = ty->dtype;
  if (!ty || ty->kind != KEEL_TYPE_TENSOR || ty->rank < 0 || ty->rank > KEEL_MAX_RANK) return;
  v->rank = ty->rank;
  for (int32_t i = 0; i < ty->rank; i++) {
    if (S->general) { /* every dim its own symbol, whatever was declared */
      char buf[300];
      snprintf(buf, sizeof buf, "%s.%d", input, i);
      v->d[i] = named_sym(S, buf);
    } else if (ty->dims && ty->dims[i] >= 0) v->d[i] = keel_sd_known(ty->dims[i]);
    else if (ty->dim_params && ty->dim_params[i] && ty->dim_params[i][0])
      v->d[i] = named_sym(S, ty->dim_params[i]);
    else {
      char buf[300];
      snprintf(buf, sizeof buf, "%s.%d", input, i);
      v->d[i] = named_sym(S, buf);
    }
  }
}

/* ============================================================== walk */

static void infer_graph(keel_shapes *S, const keel_graph *g);

static const keel_sshape *in_shape(const keel_shapes *S, const keel_graph *g, const char *name) {
  return keel_shapes_find(S, g, name);
}

/* The sub-graph of node n held in attribute `name`, or NULL. */
static const keel_graph *sub_of(const keel_node *n, const char *name) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_GRAPH ? a->g : NULL;
}

/* A dim of a sub-graph lifted to graph g: symbols of deeper graphs are
 * unknown there (or a fresh symbol of g where `fresh`). */
static keel_sdim lift(keel_shapes *S, const keel_graph *g, keel_sdim d, bool fresh) {
  if (d.sym < 0) return d;
  const keel_graph *owner = S->m->graphs[S->sym_graph[d.sym]];
  if (owner->depth <= g->depth) return d;
  return fresh ? keel_shapes_fresh(S, g, "lifted") : keel_sd_unknown();
}

static const keel_sshape *sub_out(const keel_shapes *S, const keel_graph *b, int32_t k) {
  return k < b->n_out ? keel_shapes_find(S, b, b->out_names[k]) : NULL;
}

static void rule_if(keel_shape_ctx *c) {
  const keel_graph *t = sub_of(c->n, "then_branch"), *e = sub_of(c->n, "else_branch");
  if (!t || !e) return;
  infer_graph(c->S, t);
  infer_graph(c->S, e);
  for (int32_t k = 0; k < c->n->n_out; k++) {
    const keel_sshape *a = sub_out(c->S, t, k), *b = sub_out(c->S, e, k);
    if (a && b && a->dtype == b->dtype) c->out[k].dtype = a->dtype;
    if (!a || !b || a->rank < 0 || a->rank != b->rank) continue;
    keel_sshape *o = &c->out[k];
    o->rank = a->rank;
    for (int32_t i = 0; i < a->rank; i++)
      o->d[i] = keel_sd_eq(a->d[i], b->d[i]) ? lift(c->S, c->g, a->d[i], true)
                                             : keel_shapes_fresh(c->S, c->g, "If");
    if (a->nv >= 0 && a->nv == b->nv) {
      o->nv = a->nv;
      for (int32_t i = 0; i < a->nv; i++)
        o->v[i] = keel_sd_eq(a->v[i], b->v[i]) ? lift(c->S, c->g, a->v[i], false) : keel_sd_unknown();
    }
  }
}

/* Sets the carried inputs of body b ([first, first + n) of its inputs)
 * from init, with the dims that varied (var[k][i]) made symbols of b, and
 * the n_extra inputs after them (Scan's slices) from extra; infers b;
 * returns whether some carried output (from out_first) differs from its
 * input (and marks those dims in var). */
static bool carry_pass(keel_shapes *S, const keel_graph *b, int32_t first, int32_t n,
                       const keel_sshape *const *init, bool (*var)[KEEL_MAX_RANK + 1],
                       int32_t out_first, const keel_sshape *extra, int32_t n_extra) {
  gtab *t = &S->tabs[b->id];
  tab_clear(t);
  for (int32_t k = 0; k < first && k < b->n_in; k++) { /* Loop: iteration number, condition */
    keel_sshape sc;
    keel_ss_unknown(&sc);
    keel_ss_rank(&sc, 0);
    sc.dtype = k == 0 ? KEEL_INT64 : KEEL_BOOL;
    tab_put(S, t, b->in_names[k], &sc);
  }
  for (int32_t k = 0; k < n && first + k < b->n_in; k++) {
    keel_sshape v;
    keel_ss_unknown(&v);
    if (init[k] && !var[k][KEEL_MAX_RANK]) {
      v = *init[k];
      v.nv = -1;
      for (int32_t i = 0; i < v.rank; i++)
        if (var[k][i]) v.d[i] = keel_shapes_fresh(S, b, "carried");
    }
    tab_put(S, t, b->in_names[first + k], &v);
  }
  for (int32_t j = 0; j < n_extra && first + n + j < b->n_in; j++)
    tab_put(S, t, b->in_names[first + n + j], &extra[j]);
  infer_graph(S, b);
  bool changed = false;
  for (int32_t k = 0; k < n && first + k < b->n_in; k++) {
    const keel_sshape *in = keel_shapes_find(S, b, b->in_names[first + k]);
    const keel_sshape *out = sub_out(S, b, out_first + k);
    if (!in || in->rank < 0) continue;
    if (!out || out->rank != in->rank) {
      changed |= !var[k][KEEL_MAX_RANK];
      var[k][KEEL_MAX_RANK] = true;
      continue;
    }
    for (int32_t i = 0; i < in->rank; i++)
      if (!var[k][i] && !keel_sd_eq(in->d[i], out->d[i])) var[k][i] = changed = true;
  }
  return changed;
}

/* The final carried values of a Loop / Scan in graph g. */
static void carried_outs(keel_shape_ctx *c, const keel_sshape *const *init, int32_t n,
                         bool (*var)[KEEL_MAX_RANK + 1]) {
  for (int32_t k = 0; k < n && k < c->n->n_out; k++) {
    if (init[k]) c->out[k].dtype = init[k]->dtype; /* a carried value keeps its type */
    if (!init[k] || init[k]->rank < 0 || var[k][KEEL_MAX_RANK]) continue;
    keel_sshape *o = &c->out[k];
    *o = *init[k];
    o->nv = -1;
    for (int32_t i = 0; i < o->rank; i++)
      if (var[k][i]) o->d[i] = keel_shapes_fresh(c->S, c->g, "Loop carried");
  }
}

static void rule_loop(keel_shape_ctx *c) {
  const keel_graph *b = sub_of(c->n, "body");
  if (!b) return;
  int32_t n = c->n->n_in - 2;
  if (n < 0) return;
  bool(*var)[KEEL_MAX_RANK + 1] = keel_sys_calloc((size_t)n + 1, sizeof *var);
  if (!var) {
    c->S->oom = true;
    return;
  }
  const keel_sshape *const *init = c->in + 2;
  if (carry_pass(c->S, b, 2, n, init, var, 1, NULL, 0)) carry_pass(c->S, b, 2, n, init, var, 1, NULL, 0);
  carried_outs(c, init, n, var);
  keel_sdim trip = keel_sd_unknown();
  const keel_sshape *M = c->in[0];
  if (c->n->in_names[1][0] == 0 && M && M->nv == 1) trip = lift(c->S, c->g, M->v[0], false);
  for (int32_t j = n; j < c->n->n_out; j++) {
    const keel_sshape *p = sub_out(c->S, b, 1 + j);
    if (p) c->out[j].dtype = p->dtype;
    if (!p || p->rank < 0 || p->rank + 1 > KEEL_MAX_RANK) continue;
    if (keel_sd_unk(trip)) trip = keel_shapes_fresh(c->S, c->g, "Loop trip count");
    keel_sshape *o = &c->out[j];
    keel_ss_rank(o, p->rank + 1);
    o->d[0] = trip;
    for (int32_t i = 0; i < p->rank; i++) o->d[i + 1] = lift(c->S, c->g, p->d[i], false);
  }
  keel_sys_free(var, ((size_t)n + 1) * sizeof *var);
}

static int64_t attr_int(const keel_node *n, const char *name, int64_t dflt) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : dflt;
}

static int64_t attr_list(const keel_node *n, const char *name, int32_t i, int64_t dflt) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INTS && i < a->n ? a->ints[i] : dflt;
}

static void rule_scan(keel_shape_ctx *c) {
  const keel_graph *b = sub_of(c->n, "body");
  int64_t N = attr_int(c->n, "num_scan_inputs", -1);
  if (!b || c->opset < 9 || N < 1 || N > c->n->n_in) return;
  int32_t n = c->n->n_in - (int32_t)N;
  bool(*var)[KEEL_MAX_RANK + 1] = keel_sys_calloc((size_t)n + 1, sizeof *var);
  if (!var) {
    c->S->oom = true;
    return;
  }
  keel_sdim len = keel_sd_unknown();
  keel_sshape *sl = keel_sys_calloc((size_t)N, sizeof *sl);
  if (!sl) {
    keel_sys_free(var, ((size_t)n + 1) * sizeof *var);
    c->S->oom = true;
    return;
  }
  for (int32_t j = 0; j < N; j++) { /* the slices the body sees */
    keel_ss_unknown(&sl[j]);
    const keel_sshape *x = c->in[n + j];
    int64_t ax = attr_list(c->n, "scan_input_axes", j, 0);
    if (x) sl[j].dtype = x->dtype;
    if (!x || x->rank <= 0) continue;
    if (ax < 0) ax += x->rank;
    if (ax < 0 || ax >= x->rank) continue;
    if (j == 0) len = x->d[ax];
    keel_ss_rank(&sl[j], x->rank - 1);
    for (int32_t i = 0, k = 0; i < x->rank; i++)
      if (i != ax) sl[j].d[k++] = x->d[i];
  }
  if (carry_pass(c->S, b, 0, n, c->in, var, 0, sl, (int32_t)N))
    carry_pass(c->S, b, 0, n, c->in, var, 0, sl, (int32_t)N);
  keel_sys_free(sl, (size_t)N * sizeof *sl);
  carried_outs(c, c->in, n, var);
  for (int32_t j = n; j < c->n->n_out; j++) {
    const keel_sshape *p = sub_out(c->S, b, j);
    if (p) c->out[j].dtype = p->dtype;
    if (!p || p->rank < 0 || p->rank + 1 > KEEL_MAX_RANK) continue;
    int64_t ax = attr_list(c->n, "scan_output_axes", j - n, 0);
    if (ax < 0) ax += p->rank + 1;
    if (ax < 0 || ax > p->rank) continue;
    keel_sshape *o = &c->out[j];
    keel_ss_rank(o, p->rank + 1);
    for (int32_t i = 0, k = 0; i <= p->rank; i++)
      o->d[i] = i == ax ? len : lift(c->S, c->g, p->d[k++], false);
  }
  keel_sys_free(var, ((size_t)n + 1) * sizeof *var);
}

static void infer_node(keel_shapes *S, const keel_graph *g, const keel_node *n) {
  const keel_sshape *ins[64];
  keel_sshape outs_small[4];
  int32_t n_in = n->n_in < 64 ? n->n_in : 64;
  for (int32_t i = 0; i < n_in; i++) ins[i] = in_shape(S, g, n->in_names[i]);
  keel_sshape *outs = n->n_out <= 4 ? outs_small : keel_sys_calloc((size_t)n->n_out, sizeof *outs);
  if (!outs) {
    S->oom = true;
    return;
  }
  for (int32_t k = 0; k < n->n_out; k++) keel_ss_unknown(&outs[k]);
  keel_shape_ctx c = {S, S->m, g, n, n->opset, ins, outs};
  if (n->n_in <= 64) {
    bool onnx = !n->domain[0] || !strcmp(n->domain, "ai.onnx");
    if (onnx && !strcmp(n->op_type, "If")) rule_if(&c);
    else if (onnx && !strcmp(n->op_type, "Loop")) rule_loop(&c);
    else if (onnx && !strcmp(n->op_type, "Scan")) rule_scan(&c);
    else if (!n->n_subs) {
      keel_shape_rule(&c);
      /* the shape rules leave dtype as it falls: the types are the
       * dtype rule's alone */
      for (int32_t k = 0; k < n->n_out; k++) outs[k].dtype = 0;
      keel_dtype_rule(&c);
    }
  }
  gtab *t = &S->tabs[g->id];
  for (int32_t k = 0; k < n->n_out; k++) tab_put(S, t, n->out_names[k], &outs[k]);
  if (outs != outs_small) keel_sys_free(outs, sizeof *outs * (size_t)n->n_out);
}

/* Every node of g, in an order where each input is inferred before its
 * readers (file order when that is one); nodes left when no order is found
 * run with what is known. */
static void infer_graph(keel_shapes *S, const keel_graph *g) {
  gtab *t = &S->tabs[g->id];
  for (int32_t i = 0; i < g->ld.n_init; i++) {
    keel_sshape v;
    keel_ss_from_tensor(&v, &S->m->consts[g->ld.init_consts[i]]);
    tab_put(S, t, g->ld.init_names[i], &v);
  }
  uint8_t *done = keel_sys_calloc((size_t)g->n_nodes + 1, 1);
  if (!done) {
    S->oom = true;
    return;
  }
  int32_t left = g->n_nodes;
  bool force = false;
  while (left > 0) {
    bool progress = false;
    for (int32_t i = 0; i < g->n_nodes; i++) {
      if (done[i]) continue;
      const keel_node *n = &g->nodes[i];
      bool ready = true;
      for (int32_t k = 0; k < n->n_in && ready && !force; k++)
        ready = !n->in_names[k][0] || keel_shapes_find(S, g, n->in_names[k]);
      if (!ready) continue;
      infer_node(S, g, n);
      done[i] = 1, left--, progress = true;
      if (force) break;
    }
    force = !progress;
  }
  keel_sys_free(done, (size_t)g->n_nodes + 1);
}

static keel_status infer(const keel_model *m, bool general, keel_shapes **out) {
  *out = NULL;
  keel_shapes *S = keel_sys_calloc(1, sizeof *S);
  if (!S) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shape inference");
  S->m = m;
  S->general = general;
  S->tabs = keel_sys_calloc((size_t)m->n_graphs + 1, sizeof(gtab));
  if (!S->tabs) {
    keel_sys_free(S, sizeof *S);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shape inference");
  }
  S->n_tabs = m->n_graphs;
  const keel_graph *g = m->main;
  for (int32_t i = 0; i < g->n_in; i++) {
    keel_sshape v;
    from_type(S, &v, &g->in_types[i], g->in_names[i]);
    tab_put(S, &S->tabs[g->id], g->in_names[i], &v);
  }
  infer_graph(S, g);
  if (S->oom) {
    keel_shapes_free(S);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shape inference");
  }
  *out = S;
  return KEEL_OK;
}

keel_status keel_shapes_infer(const keel_model *m, keel_shapes **out) { return infer(m, false, out); }

keel_status keel_shapes_infer_general(const keel_model *m, keel_shapes **out) {
  return infer(m, true, out);
}

void keel_shapes_free(keel_shapes *S) {
  if (!S) return;
  for (int32_t i = 0; i < S->n_tabs; i++) {
    gtab *t = &S->tabs[i];
    keel_sys_free(t->names, sizeof(char *) * (size_t)t->cap);
    keel_sys_free(t->v, sizeof(keel_sshape) * (size_t)t->cap_v);
    keel_sys_free(t->hash, sizeof(int32_t) * (size_t)t->hcap);
  }
  keel_sys_free(S->tabs, sizeof(gtab) * ((size_t)S->n_tabs + 1));
  for (int32_t i = 0; i < S->n_syms; i++) keel_sys_free(S->sym_names[i], strlen(S->sym_names[i]) + 1);
  keel_sys_free(S->sym_names, sizeof(char *) * (size_t)S->cap_syms);
  keel_sys_free(S->sym_graph, sizeof(int32_t) * (size_t)S->cap_graph);
  keel_sys_free(S, sizeof *S);
}

/* ======================================================= reading out */

static size_t dim_text(const keel_shapes *s, keel_sdim d, char *buf, size_t cap) {
  if (keel_sd_unk(d)) return (size_t)snprintf(buf, cap, "?");
  if (keel_sd_isk(d)) return (size_t)snprintf(buf, cap, "%lld", (long long)d.add);
  size_t at = 0;
  const char *nm = s->sym_names[d.sym];
  if (d.mul == -1) at += (size_t)snprintf(buf + at, cap - at, "-");
  else if (d.mul != 1) at += (size_t)snprintf(buf + at, cap - at, "%d*", d.mul);
  if (at < cap) at += (size_t)snprintf(buf + at, cap - at, "%s", nm);
  if (d.div != 1 && at < cap) at += (size_t)snprintf(buf + at, cap - at, "/%d", d.div);
  if (d.add && at < cap) at += (size_t)snprintf(buf + at, cap - at, "%+lld", (long long)d.add);
  return at;
}

const char *keel_sshape_text(const keel_shapes *s, const keel_sshape *v, char *buf, size_t cap) {
  if (!v || v->rank < 0) {
    snprintf(buf, cap, "rank ?");
    return buf;
  }
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int32_t i = 0; i < v->rank && at < cap; i++) {
    if (i) at += (size_t)snprintf(buf + at, cap - at, ", ");
    if (at < cap) at += dim_text(s, v->d[i], buf + at, cap - at);
  }
  if (at < cap) snprintf(buf + at, cap - at, "]");
  return buf;
}

int keel_sshape_class(const keel_sshape *v) {
  if (!v || v->rank < 0) return 2;
  int k = 0;
  for (int32_t i = 0; i < v->rank; i++) {
    if (keel_sd_unk(v->d[i])) return 2;
    if (!keel_sd_isk(v->d[i])) k = 1;
  }
  return k;
}

bool keel_sshape_agrees(const keel_shapes *s, const keel_sshape *v, int32_t rank, const int64_t *dims,
                        int64_t *bind) {
  if (!v || v->rank < 0) return true;
  if (rank != v->rank) return false;
  for (int32_t i = 0; i < rank; i++) {
    keel_sdim d = v->d[i];
    if (keel_sd_unk(d)) continue;
    if (keel_sd_isk(d)) {
      if (d.add != dims[i]) return false;
      continue;
    }
    if (s->sym_graph[d.sym] != 0) continue; /* a symbol of one run of a sub-graph */
    if (bind[d.sym] >= 0) {
      __int128 x = (__int128)bind[d.sym] * d.mul;
      if (x % d.div || x / d.div + d.add != dims[i]) return false;
      continue;
    }
    __int128 x = ((__int128)dims[i] - d.add) * d.div; /* sym * mul */
    if (x % d.mul || x / d.mul < 0) return false;
    bind[d.sym] = (int64_t)(x / d.mul);
  }
  return true;
}
