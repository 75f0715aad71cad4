/* ml_tree.c: the tree ensembles of ai.onnx.ml: TreeEnsembleRegressor and
 * TreeEnsembleClassifier (opsets 1-3: nodes named by (tree id, node id),
 * modes as strings, leaf weights listed per (tree, node, target)) and
 * TreeEnsemble (opset 5: nodes by index, leaves in their own arrays, modes
 * as a uint8 tensor, BRANCH_MEMBER sets).
 *
 * Both attribute forms become one flat ensemble: nodes with their children
 * as indices (a negative child -1-j is leaf j), leaves as ranges of
 * (target, weight) pairs, and one root per tree. It is built once per node
 * at session creation (the ops' prepare step: one block of system memory
 * the session frees) and read-only afterwards, so a forest of 100k nodes
 * costs its walk per row, not its parsing. Every id is checked while
 * building, so a malformed model is a load error naming the node, never an
 * out-of-range read; a walk longer than the node count (a cycle) and a
 * feature past X's columns are run-time errors.
 *
 * Aggregation and the final scores follow ONNX Runtime: SUM, AVERAGE (sum
 * over trees / tree count), MIN and MAX (targets no leaf reached score 0),
 * base values added after aggregation, post transforms on every score for
 * two or more targets, probit only for one. The classifier's two-class
 * forms (one score column for the positive class) follow its rules too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sysmem.h"
#include "ops/ml/ml_common.h"

enum { M_LEQ = 0, M_LT, M_GTE, M_GT, M_EQ, M_NEQ, M_MEMBER, M_LEAF };
enum { AGG_AVERAGE = 0, AGG_SUM, AGG_MIN, AGG_MAX };

typedef struct tnode {
  double value;
  int32_t feature;
  int32_t kid[2];          /* [true, false]; -1-j: leaf j */
  uint8_t mode, miss_true;
  int32_t set_beg, set_n;  /* BRANCH_MEMBER: values in ens.sets */
} tnode;

typedef struct tweight {
  int32_t target;
  double w;
} tweight;

typedef struct ens {
  int32_t n_nodes, n_leaves, n_trees, n_targets;
  int64_t n_w, n_sets;
  bool binary, all_pos;    /* classifier: two labels, one class id used; weights >= 0 */
  tnode *nodes;
  int32_t *leaf_beg, *leaf_n; /* weights of leaf j: w[leaf_beg[j] ..] */
  tweight *w;
  int32_t *roots;          /* node index or -1-leaf */
  double *sets;
  int agg, post;
  double *base;
  int64_t n_base;
} ens;

/* ===================================================== checks */

static keel_status same_len(const char *a, int64_t na, const char *b, int64_t nb) {
  if (na != nb)
    return keel_err(KEEL_ERR_INVALID_MODEL, "attributes '%s' (%lld) and '%s' (%lld) must have the same length",
                    a, (long long)na, b, (long long)nb);
  return KEEL_OK;
}

static keel_status agg_parse(keel_kctx *k, int *agg) {
  static const char *const names[] = {"AVERAGE", "SUM", "MIN", "MAX"};
  const char *s = keel_k_attr_s(k, "aggregate_function", "SUM");
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i])) {
      *agg = i;
      return KEEL_OK;
    }
  return keel_err(KEEL_ERR_INVALID_MODEL, "unknown aggregate_function '%s'", s);
}

static keel_status mode_parse(const char *s, uint8_t *m) {
  static const char *const names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT",
                                      "BRANCH_EQ",  "BRANCH_NEQ", "BRANCH_MEMBER", "LEAF"};
  for (int i = 0; i < 8; i++)
    if (!strcmp(s, names[i])) {
      *m = (uint8_t)i;
      return KEEL_OK;
    }
  return keel_err(KEEL_ERR_INVALID_MODEL, "unknown node mode '%s'", s);
}

/* ============================================ opsets 1-3: (tree, node) ids */

typedef struct idkey {
  int64_t tree, node;
  int32_t index;
} idkey;

static int idkey_cmp(const void *a, const void *b) {
  const idkey *x = a, *y = b;
  if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
  if (x->node != y->node) return x->node < y->node ? -1 : 1;
  return 0;
}

static int32_t id_find(const idkey *keys, int32_t n, int64_t tree, int64_t node) {
  idkey key = {tree, node, 0};
  const idkey *hit = bsearch(&key, keys, (size_t)n, sizeof *keys, idkey_cmp);
  return hit ? hit->index : -1;
}

/* The old attribute set's node arrays. */
typedef struct old_nodes {
  const int64_t *tree, *id, *feat, *tid, *fid, *miss;
  int64_t n, n_miss;
  const keel_attr *modes;
  double *values;
} old_nodes;

static keel_status old_nodes_read(keel_kctx *k, old_nodes *o) {
  int64_t nt, nf, nti, nfi, nv;
  o->id = ml_attr_ints(k, "nodes_nodeids", &o->n);
  o->tree = ml_attr_ints(k, "nodes_treeids", &nt);
  o->feat = ml_attr_ints(k, "nodes_featureids", &nf);
  o->tid = ml_attr_ints(k, "nodes_truenodeids", &nti);
  o->fid = ml_attr_ints(k, "nodes_falsenodeids", &nfi);
  o->miss = ml_attr_ints(k, "nodes_missing_value_tracks_true", &o->n_miss);
  o->modes = keel_k_attr(k, "nodes_modes");
  KEEL_TRY(ml_attr_reals(k, "nodes_values", &o->values, &nv));
  if (o->n < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "attribute 'nodes_nodeids' is missing or empty");
  if (!o->modes || o->modes->type != KEEL_ATTR_STRINGS)
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute 'nodes_modes' (strings) is missing");
  KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_treeids", nt));
  KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_featureids", nf));
  KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_truenodeids", nti));
  KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_falsenodeids", nfi));
  KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_modes", o->modes->n));
  KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_values", nv));
  if (o->n_miss > 0) KEEL_TRY(same_len("nodes_nodeids", o->n, "nodes_missing_value_tracks_true", o->n_miss));
  if (o->n > INT32_MAX / 2) return keel_err(KEEL_ERR_INVALID_MODEL, "too many tree nodes");
  return KEEL_OK;
}

/* Child `which` (0 true, 1 false) of node i as an ensemble reference. */
static keel_status old_child(const old_nodes *o, const idkey *keys, const int32_t *leaf_of,
                             int64_t i, int which, int32_t *ref) {
  int64_t cid = which ? o->fid[i] : o->tid[i];
  int32_t j = id_find(keys, (int32_t)o->n, o->tree[i], cid);
  if (j < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld of tree %lld: %s child %lld is not a node of that tree",
                    (long long)o->id[i], (long long)o->tree[i], which ? "false" : "true", (long long)cid);
  *ref = leaf_of[j] >= 0 ? -1 - leaf_of[j] : j;
  return KEEL_OK;
}

static keel_status old_structure(keel_kctx *k, const old_nodes *o, ens *e, idkey **keys_out,
                                 int32_t **leaf_of_out) {
  idkey *keys;
  int32_t *leaf_of;
  KEEL_TRY(keel_k_scratch_n(k, o->n, sizeof *keys, (void **)&keys));
  KEEL_TRY(keel_k_scratch_n(k, o->n, sizeof *leaf_of, (void **)&leaf_of));
  KEEL_TRY(keel_k_scratch_n(k, o->n, sizeof *e->nodes, (void **)&e->nodes));
  KEEL_TRY(keel_k_scratch_n(k, o->n, sizeof *e->roots, (void **)&e->roots));
  e->n_nodes = (int32_t)o->n;
  for (int64_t i = 0; i < o->n; i++) {
    keys[i] = (idkey){o->tree[i], o->id[i], (int32_t)i};
    tnode *t = &e->nodes[i];
    memset(t, 0, sizeof *t);
    KEEL_TRY(mode_parse(o->modes->strings[i], &t->mode));
    if (t->mode == M_MEMBER)
      return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld of tree %lld: BRANCH_MEMBER needs TreeEnsemble (opset 5)",
                      (long long)o->id[i], (long long)o->tree[i]);
    leaf_of[i] = t->mode == M_LEAF ? e->n_leaves++ : -1;
    t->value = o->values[i];
    t->miss_true = o->n_miss > 0 && o->miss[i] != 0;
    if (o->feat[i] < 0 || o->feat[i] > INT32_MAX)
      return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld of tree %lld: feature id %lld is negative",
                      (long long)o->id[i], (long long)o->tree[i], (long long)o->feat[i]);
    t->feature = (int32_t)o->feat[i];
  }
  qsort(keys, (size_t)o->n, sizeof *keys, idkey_cmp);
  for (int64_t i = 1; i < o->n; i++)
    if (!idkey_cmp(&keys[i - 1], &keys[i]))
      return keel_err(KEEL_ERR_INVALID_MODEL, "node id %lld appears twice in tree %lld",
                      (long long)keys[i].node, (long long)keys[i].tree);
  /* a tree's root is its first listed node; trees in tree-id order */
  for (int64_t i = 0; i < o->n; i++) {
    if (i == 0 || keys[i].tree != keys[i - 1].tree) e->roots[e->n_trees++] = keys[i].index;
    else if (keys[i].index < e->roots[e->n_trees - 1]) e->roots[e->n_trees - 1] = keys[i].index;
  }
  for (int64_t i = 0; i < o->n; i++) {
    if (leaf_of[i] >= 0) continue;
    KEEL_TRY(old_child(o, keys, leaf_of, i, 0, &e->nodes[i].kid[0]));
    KEEL_TRY(old_child(o, keys, leaf_of, i, 1, &e->nodes[i].kid[1]));
  }
  *keys_out = keys;
  *leaf_of_out = leaf_of;
  return KEEL_OK;
}

/* Leaf weights: prefix-name "target" or "class" (ids, treeids, nodeids,
 * weights). Roots that are leaves become leaf references. */
static keel_status old_weights(keel_kctx *k, const old_nodes *o, const char *pre, ens *e,
                               const idkey *keys, const int32_t *leaf_of, int64_t n_targets) {
  char nm[4][48];
  snprintf(nm[0], 48, "%s_ids", pre);
  snprintf(nm[1], 48, "%s_treeids", pre);
  snprintf(nm[2], 48, "%s_nodeids", pre);
  snprintf(nm[3], 48, "%s_weights", pre);
  int64_t ni, nt, nn, nw;
  const int64_t *ids = ml_attr_ints(k, nm[0], &ni), *tr = ml_attr_ints(k, nm[1], &nt),
                *nd = ml_attr_ints(k, nm[2], &nn);
  double *w;
  KEEL_TRY(ml_attr_reals(k, nm[3], &w, &nw));
  if (ni < 0) ni = 0;
  KEEL_TRY(same_len(nm[0], ni, nm[1], nt < 0 ? 0 : nt));
  KEEL_TRY(same_len(nm[0], ni, nm[2], nn < 0 ? 0 : nn));
  KEEL_TRY(same_len(nm[0], ni, nm[3], nw < 0 ? 0 : nw));
  KEEL_TRY(keel_k_scratch_n(k, e->n_leaves + 1, sizeof(int32_t), (void **)&e->leaf_beg));
  KEEL_TRY(keel_k_scratch_n(k, e->n_leaves + 1, sizeof(int32_t), (void **)&e->leaf_n));
  KEEL_TRY(keel_k_scratch_n(k, ni + 1, sizeof *e->w, (void **)&e->w));
  e->n_w = ni;
  memset(e->leaf_n, 0, sizeof(int32_t) * (size_t)(e->n_leaves + 1));
  int32_t *at;
  KEEL_TRY(keel_k_scratch_n(k, ni + 1, sizeof *at, (void **)&at));
  for (int64_t i = 0; i < ni; i++) {
    int32_t j = id_find(keys, (int32_t)o->n, tr[i], nd[i]);
    if (j < 0 || leaf_of[j] < 0)
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s %lld: (tree %lld, node %lld) is not a leaf", nm[3],
                      (long long)i, (long long)tr[i], (long long)nd[i]);
    if (ids[i] < 0 || ids[i] >= n_targets)
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s[%lld] = %lld is out of range [0, %lld)", nm[0],
                      (long long)i, (long long)ids[i], (long long)n_targets);
    at[i] = leaf_of[j];
    e->leaf_n[at[i]]++;
  }
  int32_t sum = 0;
  for (int32_t j = 0; j < e->n_leaves; j++) e->leaf_beg[j] = sum, sum += e->leaf_n[j], e->leaf_n[j] = 0;
  for (int64_t i = 0; i < ni; i++) {
    int32_t j = at[i];
    e->w[e->leaf_beg[j] + e->leaf_n[j]++] = (tweight){(int32_t)ids[i], w[i]};
  }
  for (int32_t r = 0; r < e->n_trees; r++)
    if (leaf_of[e->roots[r]] >= 0) e->roots[r] = -1 - leaf_of[e->roots[r]];
  return KEEL_OK;
}

static keel_status old_build(keel_kctx *k, const char *pre, int64_t n_targets, ens *e) {
  memset(e, 0, sizeof *e);
  old_nodes o;
  KEEL_TRY(old_nodes_read(k, &o));
  idkey *keys;
  int32_t *leaf_of;
  KEEL_TRY(old_structure(k, &o, e, &keys, &leaf_of));
  e->n_targets = (int32_t)n_targets;
  KEEL_TRY(old_weights(k, &o, pre, e, keys, leaf_of, n_targets));
  KEEL_TRY(agg_parse(k, &e->agg));
  KEEL_TRY(ml_post_transform(k, &e->post));
  KEEL_TRY(ml_attr_reals(k, "base_values", &e->base, &e->n_base));
  if (e->n_base < 0) e->n_base = 0;
  return KEEL_OK;
}

/* ======================================================== opset 5 */

typedef struct new_attrs {
  const int64_t *feat, *tid, *fid, *tleaf, *fleaf, *miss, *roots, *ltarget;
  int64_t n, ntid, nfid, ntl, nfl, nmiss, nroots, nlt;
  double *splits, *modes, *lw, *sets;
  int64_t nsplit, nmode, nlw, nsets;
} new_attrs;

static keel_status new_read(keel_kctx *k, new_attrs *a) {
  a->feat = ml_attr_ints(k, "nodes_featureids", &a->n);
  a->tid = ml_attr_ints(k, "nodes_truenodeids", &a->ntid);
  a->fid = ml_attr_ints(k, "nodes_falsenodeids", &a->nfid);
  a->tleaf = ml_attr_ints(k, "nodes_trueleafs", &a->ntl);
  a->fleaf = ml_attr_ints(k, "nodes_falseleafs", &a->nfl);
  a->miss = ml_attr_ints(k, "nodes_missing_value_tracks_true", &a->nmiss);
  a->roots = ml_attr_ints(k, "tree_roots", &a->nroots);
  a->ltarget = ml_attr_ints(k, "leaf_targetids", &a->nlt);
  KEEL_TRY(ml_attr_tensor_reals(k, "nodes_splits", &a->splits, &a->nsplit));
  KEEL_TRY(ml_attr_tensor_reals(k, "nodes_modes", &a->modes, &a->nmode));
  KEEL_TRY(ml_attr_tensor_reals(k, "leaf_weights", &a->lw, &a->nlw));
  KEEL_TRY(ml_attr_tensor_reals(k, "membership_values", &a->sets, &a->nsets));
  if (a->n < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "attribute 'nodes_featureids' is missing or empty");
  if (a->nroots < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "attribute 'tree_roots' is missing or empty");
  if (a->nlt < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "attribute 'leaf_targetids' is missing or empty");
  KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_truenodeids", a->ntid));
  KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_falsenodeids", a->nfid));
  KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_trueleafs", a->ntl));
  KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_falseleafs", a->nfl));
  KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_splits", a->nsplit));
  KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_modes", a->nmode));
  if (a->nmiss > 0) KEEL_TRY(same_len("nodes_featureids", a->n, "nodes_missing_value_tracks_true", a->nmiss));
  KEEL_TRY(same_len("leaf_targetids", a->nlt, "leaf_weights", a->nlw));
  if (a->n > INT32_MAX / 2 || a->nlt > INT32_MAX / 2)
    return keel_err(KEEL_ERR_INVALID_MODEL, "too many tree nodes");
  return KEEL_OK;
}

static keel_status new_ref(const new_attrs *a, int64_t i, int which, int32_t *ref) {
  int64_t id = which ? a->fid[i] : a->tid[i];
  bool leaf = (which ? a->fleaf[i] : a->tleaf[i]) != 0;
  int64_t lim = leaf ? a->nlt : a->n;
  if (id < 0 || id >= lim)
    return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld: %s %s id %lld is out of range [0, %lld)",
                    (long long)i, which ? "false" : "true", leaf ? "leaf" : "node", (long long)id,
                    (long long)lim);
  *ref = leaf ? (int32_t)(-1 - id) : (int32_t)id;
  return KEEL_OK;
}

/* Node i's fields; BRANCH_MEMBER takes the next NaN-terminated set. */
static keel_status new_node(const new_attrs *a, int64_t i, tnode *t, int64_t *set_at) {
  double m = a->modes[i];
  if (!(m >= 0 && m <= M_MEMBER) || m != floor(m))
    return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld: mode %g is not one of 0..6", (long long)i, m);
  t->mode = (uint8_t)m;
  t->value = a->splits[i];
  t->miss_true = a->nmiss > 0 && a->miss[i] != 0;
  if (a->feat[i] < 0 || a->feat[i] > INT32_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld: feature id %lld is negative", (long long)i,
                    (long long)a->feat[i]);
  t->feature = (int32_t)a->feat[i];
  if (t->mode == M_MEMBER) {
    if (*set_at >= a->nsets)
      return keel_err(KEEL_ERR_INVALID_MODEL, "node %lld: membership_values has no set left for it", (long long)i);
    t->set_beg = (int32_t)*set_at;
    while (*set_at < a->nsets && !isnan(a->sets[*set_at])) (*set_at)++;
    t->set_n = (int32_t)(*set_at - t->set_beg);
    (*set_at)++;
  }
  KEEL_TRY(new_ref(a, i, 0, &t->kid[0]));
  return new_ref(a, i, 1, &t->kid[1]);
}

static keel_status new_build(keel_kctx *k, ens *e) {
  memset(e, 0, sizeof *e);
  new_attrs a;
  KEEL_TRY(new_read(k, &a));
  int64_t nt = keel_k_attr_i(k, "n_targets", -1);
  if (nt < 1 || nt > INT32_MAX) return keel_err(KEEL_ERR_INVALID_MODEL, "n_targets must be positive, got %lld", (long long)nt);
  e->n_targets = (int32_t)nt;
  e->n_nodes = (int32_t)a.n;
  e->n_leaves = (int32_t)a.nlt;
  e->n_trees = (int32_t)a.nroots;
  e->sets = a.sets;
  e->n_sets = a.nsets > 0 ? a.nsets : 0;
  e->n_w = a.nlt;
  KEEL_TRY(keel_k_scratch_n(k, a.n, sizeof *e->nodes, (void **)&e->nodes));
  KEEL_TRY(keel_k_scratch_n(k, a.nroots, sizeof *e->roots, (void **)&e->roots));
  KEEL_TRY(keel_k_scratch_n(k, a.nlt, sizeof(int32_t), (void **)&e->leaf_beg));
  KEEL_TRY(keel_k_scratch_n(k, a.nlt, sizeof(int32_t), (void **)&e->leaf_n));
  KEEL_TRY(keel_k_scratch_n(k, a.nlt, sizeof *e->w, (void **)&e->w));
  int64_t set_at = 0;
  for (int64_t i = 0; i < a.n; i++) {
    memset(&e->nodes[i], 0, sizeof(tnode));
    KEEL_TRY(new_node(&a, i, &e->nodes[i], &set_at));
  }
  for (int64_t j = 0; j < a.nlt; j++) {
    if (a.ltarget[j] < 0 || a.ltarget[j] >= nt)
      return keel_err(KEEL_ERR_INVALID_MODEL, "leaf_targetids[%lld] = %lld is out of range [0, %lld)",
                      (long long)j, (long long)a.ltarget[j], (long long)nt);
    e->leaf_beg[j] = (int32_t)j, e->leaf_n[j] = 1;
    e->w[j] = (tweight){(int32_t)a.ltarget[j], a.lw[j]};
  }
  for (int64_t r = 0; r < a.nroots; r++) {
    int64_t ri = a.roots[r];
    if (ri < 0 || ri >= a.n)
      return keel_err(KEEL_ERR_INVALID_MODEL, "tree_roots[%lld] = %lld is out of range [0, %lld)",
                      (long long)r, (long long)ri, (long long)a.n);
    /* a tree that is one leaf: both children the same leaf */
    bool leaf = a.tleaf[ri] && a.fleaf[ri] && a.tid[ri] == a.fid[ri];
    e->roots[r] = leaf ? e->nodes[ri].kid[0] : (int32_t)ri;
  }
  int64_t agg = keel_k_attr_i(k, "aggregate_function", AGG_SUM);
  int64_t post = keel_k_attr_i(k, "post_transform", ML_POST_NONE);
  if (agg < 0 || agg > 3) return keel_err(KEEL_ERR_INVALID_MODEL, "aggregate_function %lld is not one of 0..3", (long long)agg);
  if (post < 0 || post > 4) return keel_err(KEEL_ERR_INVALID_MODEL, "post_transform %lld is not one of 0..4", (long long)post);
  e->agg = (int)agg, e->post = (int)post;
  return KEEL_OK;
}

/* ================================================ the prepared block */

static size_t up8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Copies `n` bytes of src to *at inside block b, returning the new place. */
static void *put(uint8_t *b, size_t *at, const void *src, size_t n) {
  void *dst = b + *at;
  if (n) memcpy(dst, src, n);
  *at += up8(n);
  return dst;
}

/* The ensemble as one block: header, then its arrays. */
static keel_status ens_pack(keel_kctx *k, const ens *e, void **state, size_t *bytes) {
  size_t sz[7] = {sizeof(tnode) * (size_t)e->n_nodes, sizeof(int32_t) * (size_t)e->n_leaves,
                  sizeof(int32_t) * (size_t)e->n_leaves, sizeof(tweight) * (size_t)e->n_w,
                  sizeof(int32_t) * (size_t)e->n_trees, sizeof(double) * (size_t)e->n_sets,
                  sizeof(double) * (size_t)e->n_base};
  size_t total = up8(sizeof(ens));
  for (int i = 0; i < 7; i++) total += up8(sz[i]);
  uint8_t *b;
  KEEL_TRY(keel_k_prep_block(k, total, (void **)&b));
  ens *out = (ens *)(void *)b;
  *out = *e;
  size_t at = up8(sizeof(ens));
  out->nodes = put(b, &at, e->nodes, sz[0]);
  out->leaf_beg = put(b, &at, e->leaf_beg, sz[1]);
  out->leaf_n = put(b, &at, e->leaf_n, sz[2]);
  out->w = put(b, &at, e->w, sz[3]);
  out->roots = put(b, &at, e->roots, sz[4]);
  out->sets = put(b, &at, e->sets, sz[5]);
  out->base = put(b, &at, e->base, sz[6]);
  *state = b;
  *bytes = total;
  return KEEL_OK;
}

/* ======================================================== evaluation */

static bool in_set(const ens *e, const tnode *t, double x) {
  for (int32_t i = 0; i < t->set_n; i++)
    if (e->sets[t->set_beg + i] == x) return true;
  return false;
}

static bool goes_true(const ens *e, const tnode *t, double x) {
  if (t->miss_true && isnan(x)) return true;
  switch (t->mode) {
    case M_LEQ: return x <= t->value;
    case M_LT: return x < t->value;
    case M_GTE: return x >= t->value;
    case M_GT: return x > t->value;
    case M_EQ: return x == t->value;
    case M_NEQ: return x != t->value;
    default: return in_set(e, t, x);
  }
}

/* The leaf tree r reaches for this row (-1-leaf encoding undone). */
static keel_status walk(const ens *e, int32_t r, const double *row, int64_t ncol, int32_t *leaf) {
  int32_t at = e->roots[r];
  for (int32_t steps = 0; at >= 0; steps++) {
    const tnode *t = &e->nodes[at];
    if (steps > e->n_nodes)
      return keel_err(KEEL_ERR_INVALID_MODEL, "tree %d has a cycle through node %d", r, at);
    if (t->feature >= ncol)
      return keel_err(KEEL_ERR_SHAPE, "node %d reads feature %d, but X has %lld columns", at,
                      t->feature, (long long)ncol);
    at = t->kid[goes_true(e, t, row[t->feature]) ? 0 : 1];
  }
  *leaf = -1 - at;
  return KEEL_OK;
}

static void accumulate(const ens *e, int32_t leaf, double *s, uint8_t *has) {
  for (int32_t i = 0; i < e->leaf_n[leaf]; i++) {
    const tweight *w = &e->w[e->leaf_beg[leaf] + i];
    double *d = &s[w->target];
    if (e->agg == AGG_MIN) *d = has[w->target] && *d < w->w ? *d : w->w;
    else if (e->agg == AGG_MAX) *d = has[w->target] && *d > w->w ? *d : w->w;
    else *d += w->w;
    has[w->target] = 1;
  }
}

/* Raw aggregated scores of one row (no base values yet). */
static keel_status row_scores(const ens *e, const double *row, int64_t ncol, double *s, uint8_t *has) {
  memset(s, 0, sizeof(double) * (size_t)e->n_targets);
  memset(has, 0, (size_t)e->n_targets);
  for (int32_t r = 0; r < e->n_trees; r++) {
    int32_t leaf;
    KEEL_TRY(walk(e, r, row, ncol, &leaf));
    accumulate(e, leaf, s, has);
  }
  if (e->agg == AGG_AVERAGE && e->n_trees > 0)
    for (int32_t t = 0; t < e->n_targets; t++) s[t] /= e->n_trees;
  return KEEL_OK;
}

/* Regression: base values (one per target, or one for a single target),
 * then the post transform. With two or more targets, a target no leaf
 * gave a weight scores 0, base value or not (as in ONNX Runtime, whose
 * scores without a leaf read as 0). */
static void reg_finalize(const ens *e, double *s, const uint8_t *has) {
  if (e->n_base == e->n_targets)
    for (int32_t t = 0; t < e->n_targets; t++) s[t] += e->base[t];
  else if (e->n_base == 1 && e->n_targets == 1)
    s[0] += e->base[0];
  if (e->n_targets >= 2) {
    for (int32_t t = 0; t < e->n_targets; t++)
      if (!has[t]) s[t] = 0;
    ml_post_apply(e->post, s, e->n_targets);
  } else if (e->post == ML_POST_PROBIT) s[0] = ml_probit(s[0]);
}

typedef struct scratch_rows {
  double *row, *s;
  uint8_t *has;
} scratch_rows;

static keel_status rows_alloc(keel_kctx *k, int64_t ncol, int64_t nt, scratch_rows *r) {
  KEEL_TRY(keel_k_scratch_n(k, ncol + 1, sizeof(double), (void **)&r->row));
  KEEL_TRY(keel_k_scratch_n(k, nt + 2, sizeof(double), (void **)&r->s));
  return keel_k_scratch_n(k, nt + 2, 1, (void **)&r->has);
}

static keel_status regress(keel_kctx *k, const ens *e, int out_dtype) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n, c;
  KEEL_TRY(ml_rows(x, k->node->op_type, &n, &c));
  int64_t shape[2] = {n, e->n_targets};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, out_dtype, 2, shape, &y));
  scratch_rows r;
  KEEL_TRY(rows_alloc(k, c, e->n_targets, &r));
  for (int64_t i = 0; i < n; i++) {
    ml_row(x, i, c, r.row);
    KEEL_TRY(row_scores(e, r.row, c, r.s, r.has));
    reg_finalize(e, r.s, r.has);
    for (int32_t t = 0; t < e->n_targets; t++) ml_store(y, i * e->n_targets + t, r.s[t]);
  }
  return KEEL_OK;
}

static keel_status build_regressor(keel_kctx *k, ens *e) {
  int64_t nt = keel_k_attr_i(k, "n_targets", 1);
  if (nt < 1 || nt > INT32_MAX) return keel_err(KEEL_ERR_INVALID_MODEL, "n_targets must be positive, got %lld", (long long)nt);
  KEEL_TRY(old_build(k, "target", nt, e));
  if (e->n_base > 0 && e->n_base != nt && !(e->n_base == 1 && nt == 1))
    return keel_err(KEEL_ERR_INVALID_MODEL, "base_values has %lld entries for %lld targets",
                    (long long)e->n_base, (long long)nt);
  return KEEL_OK;
}

static keel_status prep_regressor(keel_kctx *k, void **state, size_t *bytes) {
  ens e;
  KEEL_TRY(build_regressor(k, &e));
  return ens_pack(k, &e, state, bytes);
}
KEEL_IMPL_FROM_ATTRS(impls_regressor, "ensemble", prep_regressor, NULL)

static keel_status op_tree_regressor(keel_kctx *k) {
  ens local;
  const ens *e = k->prep;
  if (!e) {
    KEEL_TRY(build_regressor(k, &local));
    e = &local;
  }
  return regress(k, e, KEEL_FLOAT);
}

static keel_status prep_tree_ensemble(keel_kctx *k, void **state, size_t *bytes) {
  ens e;
  KEEL_TRY(new_build(k, &e));
  return ens_pack(k, &e, state, bytes);
}
KEEL_IMPL_FROM_ATTRS(impls_tree_ensemble, "ensemble", prep_tree_ensemble, NULL)

static keel_status op_tree_ensemble(keel_kctx *k) {
  ens local;
  const ens *e = k->prep;
  if (!e) {
    KEEL_TRY(new_build(k, &local));
    e = &local;
  }
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (!keel_dtype_is_float(x->dtype) || x->dtype == KEEL_BFLOAT16)
    return keel_err(KEEL_ERR_SHAPE, "TreeEnsemble: X must be float, double or float16, got %s",
                    keel_dtype_name((keel_dtype)x->dtype));
  return regress(k, e, x->dtype);
}

/* ======================================================== classifier */

typedef struct cls {
  int64_t n;               /* class count */
  const int64_t *ilabels;
  const keel_attr *slabels;
} cls;

static keel_status cls_read(keel_kctx *k, cls *c) {
  int64_t ni;
  c->ilabels = ml_attr_ints(k, "classlabels_int64s", &ni);
  c->slabels = keel_k_attr(k, "classlabels_strings");
  if (c->slabels && c->slabels->type != KEEL_ATTR_STRINGS) c->slabels = NULL;
  if ((ni > 0) == (c->slabels != NULL && c->slabels->n > 0))
    return keel_err(KEEL_ERR_INVALID_MODEL, "exactly one of classlabels_int64s and classlabels_strings must be given");
  c->n = ni > 0 ? ni : c->slabels->n;
  return KEEL_OK;
}

/* Class ids used and the sign of the weights (ONNX Runtime's binary case). */
static void cls_kind(ens *e, const cls *c) {
  int32_t first = -1;
  bool one = true;
  e->all_pos = true;
  for (int32_t j = 0; j < e->n_leaves; j++)
    for (int32_t i = 0; i < e->leaf_n[j]; i++) {
      const tweight *w = &e->w[e->leaf_beg[j] + i];
      if (first < 0) first = w->target;
      else if (w->target != first) one = false;
      if (w->w < 0) e->all_pos = false;
    }
  e->binary = c->n == 2 && one && first >= 0;
}

static int64_t argmax_has(const double *s, const uint8_t *has, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (has[i] && (best < 0 || s[i] > s[best])) best = i;
  return best < 0 ? 0 : best;
}

/* Two classes: the label index and the two scores. */
static int64_t cls_two(const ens *e, const cls *c, double *s, uint8_t *has) {
  int wa = -1, nsc = 2;
  if (e->n_base == 2) {
    if (has[1]) s[1] = e->base[1] + s[0], s[0] = -s[1];
    else s[1] += e->base[1], s[0] += e->base[0];
  } else if (e->n_base == 1) {
    s[0] += e->base[0];
    if (!has[1]) nsc = 1;
  } else if (!has[1]) nsc = 1;
  double pos = nsc == 2 && has[1] ? s[1] : (has[0] ? s[0] : 0);
  int64_t label;
  if (e->binary && e->all_pos) label = pos > 0.5 ? 1 : 0, wa = pos > 0.5 ? 0 : 1;
  else if (e->binary) label = pos > 0 ? 1 : 0, wa = pos > 0 ? 2 : 3;
  else label = pos > 0 ? 1 : 0;
  if (nsc == 2) { /* a class without a score reads as 0 */
    if (!has[0]) s[0] = 0;
    if (!has[1]) s[1] = 0;
    ml_post_apply(e->post, s, 2);
    return label;
  }
  double v = s[0];
  if (e->post == ML_POST_PROBIT) s[0] = ml_probit(v), s[1] = 0;
  else if (wa == 0 || wa == 1) s[0] = 1.0 - v, s[1] = v;
  else if (e->post == ML_POST_LOGISTIC && wa >= 2) s[0] = ml_logistic(-v), s[1] = ml_logistic(v);
  else if (wa >= 2) s[0] = -v, s[1] = v;
  else s[1] = 0;
  return label;
}

static int64_t cls_many(const ens *e, const cls *c, double *s, uint8_t *has) {
  for (int64_t t = 0; t < e->n_base && t < c->n; t++) s[t] += e->base[t], has[t] = 1;
  int64_t label = argmax_has(s, has, c->n);
  ml_post_apply(e->post, s, c->n);
  return label;
}

static keel_status cls_label(keel_tensor *y, const cls *c, int64_t i, int64_t label) {
  if (c->ilabels) {
    ((int64_t *)y->data)[i] = c->ilabels[label];
    return KEEL_OK;
  }
  return keel_tensor_set_string(y, (size_t)i, c->slabels->strings[label],
                                c->slabels->string_lens ? c->slabels->string_lens[label]
                                                        : strlen(c->slabels->strings[label]));
}

static keel_status build_classifier(keel_kctx *k, const cls *c, ens *e) {
  if (c->n > INT32_MAX) return keel_err(KEEL_ERR_INVALID_MODEL, "too many classes");
  KEEL_TRY(old_build(k, "class", c->n, e));
  cls_kind(e, c);
  return KEEL_OK;
}

static keel_status prep_classifier(keel_kctx *k, void **state, size_t *bytes) {
  cls c;
  ens e;
  KEEL_TRY(cls_read(k, &c));
  KEEL_TRY(build_classifier(k, &c, &e));
  return ens_pack(k, &e, state, bytes);
}
KEEL_IMPL_FROM_ATTRS(impls_classifier, "ensemble", prep_classifier, NULL)

static keel_status op_tree_classifier(keel_kctx *k) {
  cls c;
  KEEL_TRY(cls_read(k, &c));
  ens local;
  const ens *ep = k->prep;
  if (!ep) {
    KEEL_TRY(build_classifier(k, &c, &local));
    ep = &local;
  }
  const ens e = *ep;
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t n, ncol;
  KEEL_TRY(ml_rows(x, "TreeEnsembleClassifier", &n, &ncol));
  keel_tensor *y, *z;
  int64_t zs[2] = {n, c.n};
  KEEL_TRY(keel_k_out(k, 0, c.ilabels ? KEEL_INT64 : KEEL_STRING, 1, &n, &y));
  KEEL_TRY(keel_k_out(k, 1, KEEL_FLOAT, 2, zs, &z));
  scratch_rows r;
  KEEL_TRY(rows_alloc(k, ncol, c.n, &r));
  for (int64_t i = 0; i < n; i++) {
    ml_row(x, i, ncol, r.row);
    KEEL_TRY(row_scores(&e, r.row, ncol, r.s, r.has));
    int64_t label = c.n == 2 ? cls_two(&e, &c, r.s, r.has) : cls_many(&e, &c, r.s, r.has);
    if (c.n == 1) label = 0;
    KEEL_TRY(cls_label(y, &c, i, label));
    for (int64_t t = 0; t < c.n; t++) ml_store(z, i * c.n + t, r.s[t]);
  }
  return KEEL_OK;
}

/* ============================================================ table */

#define TREE_IN (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_INT32))
const keel_opdef keel_ops_ml_tree[] = {
    {KEEL_ML, "TreeEnsembleRegressor", 1, 4, op_tree_regressor, 0, TREE_IN, impls_regressor},
    {KEEL_ML, "TreeEnsembleClassifier", 1, 4, op_tree_classifier, 0, TREE_IN, impls_classifier},
    {KEEL_ML, "TreeEnsemble", 5, KEEL_OPSET_MAX, op_tree_ensemble, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_FLOAT16), impls_tree_ensemble},
    {0},
};
#undef TREE_IN
