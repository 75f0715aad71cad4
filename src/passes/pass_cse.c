/* pass_cse.c: cse. Nodes that compute the same thing are computed once.
 *
 * Exporters repeat work per layer: PyTorch writes each attention block's
 * causal mask again from the block's own input, Shape -> Gather ->
 * Unsqueeze -> Concat -> ConstantOfShape -> Trilu, four times for four
 * blocks. A node is the same as an earlier node of its graph when
 *   - both are the same op (domain, type, opset), with the same
 *     attributes (ints, floats, strings and tensors compared by value;
 *     a node with a sub-graph is never merged), and
 *   - they read the same values (small constants, up to CSE_SMALL
 *     elements, by value: exporters write the same index once per block
 *     under a new name), where a Shape reads the same value as
 *     another Shape when symbolic shape inference, in its general form
 *     (ir/shapes.h, keel_shapes_infer_general: nothing rests on declared
 *     input shapes), gives their inputs the same rank and dims, none of
 *     them unknown: the shapes are equal on every run, so are the Shapes.
 * The later node's outputs are then read from the earlier node's, and the
 * later node goes; the ones after it may now match in turn (one pass in
 * node order follows the whole chain). Never merged: random ops (each
 * draws its own numbers), ops of sequences and optionals, and a node
 * whose outputs a sub-graph or a graph output reads by name.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "ir/shapes.h"
#include "passes/pass.h"

static bool never(const keel_node *n) {
  static const char *const ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                    "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout",
                                    NULL};
  if (n->n_subs || n->n_out < 1) return true;
  if (strstr(n->op_type, "Sequence") || strncmp(n->op_type, "Optional", 8) == 0) return true;
  for (int i = 0; ops[i]; i++)
    if (!strcmp(n->op_type, ops[i])) return true;
  /* only the standard domains: another domain's op may keep state */
  return n->domain[0] && strcmp(n->domain, "ai.onnx") && strcmp(n->domain, "com.microsoft");
}

static bool same_tensor(const keel_tensor *a, const keel_tensor *b) {
  if (!a || !b) return a == b;
  if (a->dtype != b->dtype || a->rank != b->rank || a->dtype == KEEL_STRING) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i]) return false;
  size_t nb = keel_tensor_nbytes(a);
  return !nb || (a->data && b->data && !memcmp(a->data, b->data, nb));
}

static bool same_attr(const keel_attr *a, const keel_attr *b) {
  if (strcmp(a->name, b->name) || a->type != b->type || a->n != b->n || a->ref || b->ref)
    return false;
  switch (a->type) {
    case KEEL_ATTR_INT: return a->i == b->i;
    case KEEL_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case KEEL_ATTR_STRING: return a->slen == b->slen && !memcmp(a->s, b->s, a->slen);
    case KEEL_ATTR_INTS: return !a->n || !memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n);
    case KEEL_ATTR_FLOATS: return !a->n || !memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->n);
    case KEEL_ATTR_STRINGS:
      for (int32_t k = 0; k < a->n; k++)
        if (a->string_lens[k] != b->string_lens[k] ||
            memcmp(a->strings[k], b->strings[k], a->string_lens[k]))
          return false;
      return true;
    case KEEL_ATTR_TENSOR: return same_tensor(a->t, b->t);
    default: return false; /* graphs, sparse tensors, type protos: not merged */
  }
}

static bool same_attrs(const keel_node *a, const keel_node *b) {
  if (a->n_attr != b->n_attr) return false;
  for (int32_t i = 0; i < a->n_attr; i++) { /* the same order: exporters write it so */
    if (!same_attr(&a->attrs[i], &b->attrs[i])) return false;
  }
  return true;
}

typedef struct cse {
  keel_model *m;
  keel_graph *g;
  const keel_shapes *S;
  uint32_t *hash;              /* per node: its key's hash                */
  int32_t *bucket, *next;      /* chains of nodes by hash                 */
  int32_t nb;                  /* buckets (a power of two)                */
  bool *drop;
  int32_t merged;
} cse;

/* A Shape's input as its inferred shape when every dim is known or
 * symbolic; NULL otherwise (then the input's name counts). */
static const keel_sshape *shape_key(const cse *C, const keel_node *n) {
  if (strcmp(n->op_type, "Shape") || n->domain[0] || n->n_in != 1 || !C->S) return NULL;
  const keel_sshape *v = keel_shapes_find(C->S, C->g, n->in_names[0]);
  return v && keel_sshape_class(v) < 2 ? v : NULL;
}

static uint32_t mix(uint32_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
  return h;
}

/* A small constant input (indices, axes: exporters write one per block,
 * each under its own name), compared by value; NULL for anything else. */
#define CSE_SMALL 64 /* elements */
static const keel_tensor *small_const(const cse *C, const char *name) {
  if (!name[0]) return NULL;
  int32_t c = keel_ir_const_of(C->m, C->g, name);
  const keel_tensor *t = c >= 0 ? &C->m->consts[c] : NULL;
  return t && t->dtype != KEEL_STRING && keel_tensor_numel(t) <= CSE_SMALL ? t : NULL;
}

static uint32_t key_hash(const cse *C, const keel_node *n) {
  uint32_t h = mix(2166136261u, n->op_type, strlen(n->op_type));
  const keel_sshape *v = shape_key(C, n);
  if (v) return mix(h, &v->rank, sizeof v->rank); /* equal shapes hash alike */
  for (int32_t k = 0; k < n->n_in; k++) {
    const keel_tensor *t = small_const(C, n->in_names[k]);
    if (t) h = mix(mix(h, &t->dtype, sizeof t->dtype), t->data, keel_tensor_nbytes(t));
    else h = mix(h, n->in_names[k], strlen(n->in_names[k]));
    h = mix(h, ",", 1);
  }
  return h;
}

static bool same_input(const cse *C, const char *a, const char *b) {
  if (!strcmp(a, b)) return true;
  const keel_tensor *ta = small_const(C, a), *tb = small_const(C, b);
  return ta && tb && same_tensor(ta, tb);
}

static bool same_inputs(const cse *C, const keel_node *a, const keel_node *b) {
  const keel_sshape *va = shape_key(C, a), *vb = shape_key(C, b);
  if (va && vb) {
    if (va->rank != vb->rank) return false;
    for (int32_t i = 0; i < va->rank; i++)
      if (!keel_sdim_eq(va->d[i], vb->d[i])) return false;
    return true;
  }
  if (a->n_in != b->n_in) return false;
  for (int32_t k = 0; k < a->n_in; k++)
    if (!same_input(C, a->in_names[k], b->in_names[k])) return false;
  return true;
}

static bool same_node(const cse *C, const keel_node *a, const keel_node *b) {
  return a->n_out == b->n_out && !strcmp(a->op_type, b->op_type) && !strcmp(a->domain, b->domain) &&
         a->opset == b->opset && same_inputs(C, a, b) && same_attrs(a, b);
}

/* Node j's outputs become node i's: every direct read renamed. *done
 * false when some output is read other than directly (a sub-graph, a
 * graph output): j then stays. */
static keel_status merge(cse *C, int32_t i, int32_t j, bool *done) {
  keel_graph *g = C->g;
  const keel_node *a = &g->nodes[i], *b = &g->nodes[j];
  *done = false;
  for (int32_t k = 0; k < b->n_out; k++) {
    const char *o = b->out_names[k];
    if (o[0] && (!a->out_names[k][0] || keel_ir_uses(g, o) != keel_pass_direct_reads(g, o))) return KEEL_OK;
  }
  for (int32_t k = 0; k < b->n_out; k++) {
    const char *o = b->out_names[k], *to = a->out_names[k];
    if (!o[0]) continue;
    for (int32_t r = j + 1; r < g->n_nodes; r++) {
      keel_node *n = &g->nodes[r];
      bool hit = false;
      for (int32_t q = 0; q < n->n_in && !hit; q++) hit = !strcmp(n->in_names[q], o);
      if (!hit) continue;
      const char **ins = keel_arena_array(C->m->arena, (size_t)n->n_in + 1, sizeof(char *));
      if (!ins) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "cse in graph '%s'", g->path);
      for (int32_t q = 0; q < n->n_in; q++) ins[q] = strcmp(n->in_names[q], o) ? n->in_names[q] : to;
      n->in_names = ins;
    }
  }
  KEEL_TRY(keel_ir_fuse_label(C->m->arena, &g->nodes[i], b));
  *done = true;
  return KEEL_OK;
}

static keel_status graph_pass(cse *C) {
  keel_graph *g = C->g;
  int32_t n = g->n_nodes;
  C->nb = 64;
  while (C->nb < 2 * n) C->nb *= 2;
  C->drop = keel_sys_calloc((size_t)n, sizeof(bool));
  C->bucket = keel_sys_alloc(sizeof(int32_t) * (size_t)C->nb);
  C->next = keel_sys_alloc(sizeof(int32_t) * (size_t)n);
  C->hash = keel_sys_alloc(sizeof(uint32_t) * (size_t)n);
  keel_status st = KEEL_OK;
  if (!C->drop || !C->bucket || !C->next || !C->hash)
    st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "cse in graph '%s'", g->path);
  if (!st) memset(C->bucket, 0xff, sizeof(int32_t) * (size_t)C->nb);
  int32_t before = C->merged;
  for (int32_t j = 0; j < n && !st; j++) {
    const keel_node *b = &g->nodes[j];
    if (never(b)) continue;
    uint32_t h = key_hash(C, b);
    int32_t *slot = &C->bucket[h & (uint32_t)(C->nb - 1)];
    bool done = false;
    for (int32_t i = *slot; i >= 0 && !done && !st; i = C->next[i])
      if (C->hash[i] == h && same_node(C, &g->nodes[i], b)) {
        st = merge(C, i, j, &done);
        if (done) C->drop[j] = true, C->merged++;
      }
    if (!done) C->hash[j] = h, C->next[j] = *slot, *slot = j;
  }
  if (!st && C->merged > before) st = keel_graph_remove_nodes(C->m->arena, g, C->drop);
  keel_sys_free(C->drop, sizeof(bool) * (size_t)n);
  keel_sys_free(C->bucket, sizeof(int32_t) * (size_t)C->nb);
  keel_sys_free(C->next, sizeof(int32_t) * (size_t)n);
  keel_sys_free(C->hash, sizeof(uint32_t) * (size_t)n);
  return st;
}

/* Two Shape nodes in one graph: only then do the inferred shapes matter. */
static bool shapes_matter(const keel_model *m) {
  for (int32_t gi = 0; gi < m->n_graphs; gi++) {
    const keel_graph *g = m->graphs[gi];
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_nodes && n < 2; i++)
      n += !g->nodes[i].domain[0] && !strcmp(g->nodes[i].op_type, "Shape");
    if (n >= 2) return true;
  }
  return false;
}

keel_status keel_pass_cse(keel_model *m) {
  keel_shapes *S = NULL;
  if (shapes_matter(m)) KEEL_TRY(keel_shapes_infer_general(m, &S));
  cse C = {.m = m, .S = S};
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < m->n_graphs && !st; i++) {
    C.g = m->graphs[i];
    if (C.g->n_nodes > 1) st = graph_pass(&C);
  }
  keel_shapes_free(S);
  m->fold.merged += C.merged;
  return st;
}
