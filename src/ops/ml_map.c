/* ml_map.c: the ai.onnx.ml operators on maps: ZipMap (a [N, C] score
 * tensor to a sequence of N maps from the C class labels to the scores, as
 * classifiers' probabilities are handed to scikit-learn users) and
 * DictVectorizer (a map to a dense [1, V] row over a vocabulary: the
 * spec says a 1-D tensor, ONNX Runtime writes [1, V], which is what
 * converted pipelines feed to the next 2-D op).
 *
 * Maps are run-time values of their own (tensor.h: keys and values are
 * tensors of the session heap, tagged with the node output that made
 * them), so a ZipMap output is released like any other value at its last
 * use and leaves nothing behind. */
#include "ml_common.h"

/* ============================================================ ZipMap */

typedef struct zip_labels {
  int dtype;               /* INT64 or STRING */
  int64_t n;
  const int64_t *ints;
  const keel_attr *strs;
} zip_labels;

static keel_status zip_labels_read(keel_kctx *k, zip_labels *z) {
  z->ints = ml_attr_ints(k, "classlabels_int64s", &z->n);
  z->strs = keel_k_attr(k, "classlabels_strings");
  if (z->strs && z->strs->type != KEEL_ATTR_STRINGS) z->strs = NULL;
  if ((z->n > 0) == (z->strs != NULL && z->strs->n > 0))
    return keel_err(KEEL_ERR_INVALID_MODEL, "exactly one of classlabels_int64s and classlabels_strings must be given");
  z->dtype = z->n > 0 ? KEEL_INT64 : KEEL_STRING;
  if (z->dtype == KEEL_STRING) z->n = z->strs->n;
  return KEEL_OK;
}

/* One map: the labels to row r of x. */
static keel_status zip_row(keel_kctx *k, const zip_labels *z, const float *x, keel_map **out) {
  keel_map *m;
  KEEL_TRY(keel_map_new(k->heap, z->dtype, KEEL_FLOAT, z->n, k->owner, &m));
  keel_status st = KEEL_OK;
  for (int64_t j = 0; j < z->n && !st; j++) {
    if (z->dtype == KEEL_INT64) ((int64_t *)m->keys.data)[j] = z->ints[j];
    else
      st = keel_tensor_set_string(&m->keys, (size_t)j, z->strs->strings[j],
                                  z->strs->string_lens ? z->strs->string_lens[j] : strlen(z->strs->strings[j]));
  }
  if (st) {
    keel_map_release(m);
    return st;
  }
  if (z->n) memcpy(m->values.data, x, sizeof(float) * (size_t)z->n);
  *out = m;
  return KEEL_OK;
}

static keel_status op_zipmap(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  zip_labels z;
  KEEL_TRY(zip_labels_read(k, &z));
  if (x->dtype != KEEL_FLOAT) return keel_err(KEEL_ERR_SHAPE, "X must be float, got %s", keel_dtype_name((keel_dtype)x->dtype));
  if (x->rank != 1 && x->rank != 2) return keel_err(KEEL_ERR_SHAPE, "X must be [N, C] or [C], got rank %d", x->rank);
  int64_t n = x->rank == 2 ? x->shape[0] : 1, c = x->shape[x->rank - 1];
  if (c != z.n)
    return keel_err(KEEL_ERR_SHAPE, "X has %lld columns but there are %lld class labels", (long long)c, (long long)z.n);
  keel_seq *s;
  KEEL_TRY(keel_seq_new_maps(k->heap, z.dtype, KEEL_FLOAT, (size_t)n, &s));
  keel_val *out = k->out[0];
  out->kind = KEEL_V_SEQUENCE; /* the executor releases it if we fail below */
  out->seq = s;
  for (int64_t r = 0; r < n; r++) {
    keel_map *m;
    KEEL_TRY(zip_row(k, &z, (const float *)x->data + r * c, &m));
    keel_status st = keel_seq_push_map(s, m);
    if (st) {
      keel_map_release(m);
      return st;
    }
  }
  return KEEL_OK;
}

/* ==================================================== DictVectorizer */

/* Entry of the map whose key is vocabulary word j, or -1 (a linear scan:
 * one map is one sample, with few keys). Every vocabulary slot is looked
 * up, so a word listed twice gets the value twice. */
static int64_t map_find(const keel_map *m, const keel_attr *sv, const int64_t *iv, int64_t j) {
  int64_t n = keel_map_len(m);
  if (m->keys.dtype == KEEL_INT64) {
    for (int64_t i = 0; i < n; i++)
      if (((const int64_t *)m->keys.data)[i] == iv[j]) return i;
    return -1;
  }
  size_t len = sv->string_lens ? sv->string_lens[j] : strlen(sv->strings[j]);
  for (int64_t i = 0; i < n; i++) {
    const keel_string *k = (const keel_string *)m->keys.data + i;
    if (k->len == len && (!len || !memcmp(k->data, sv->strings[j], len))) return i;
  }
  return -1;
}

static keel_status op_dict_vectorizer(keel_kctx *k) {
  if (!keel_k_has_in(k, 0) || k->in[0]->kind != KEEL_V_MAP)
    return keel_err(KEEL_ERR_SHAPE, "DictVectorizer input 0 must be a map");
  const keel_map *m = k->in[0]->map;
  const keel_attr *sv = keel_k_attr(k, "string_vocabulary");
  int64_t ni;
  const int64_t *iv = ml_attr_ints(k, "int64_vocabulary", &ni);
  bool strs = m->keys.dtype == KEEL_STRING;
  if (strs ? !sv || sv->type != KEEL_ATTR_STRINGS : ni < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "a map with %s keys needs attribute '%s'",
                    strs ? "string" : "int64", strs ? "string_vocabulary" : "int64_vocabulary");
  int64_t v = strs ? sv->n : ni, shape[2] = {1, v};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, m->values.dtype, 2, shape, &y));
  if (y->dtype != KEEL_STRING && v > 0) memset(y->data, 0, keel_tensor_nbytes(y));
  for (int64_t j = 0; j < v; j++) {
    int64_t i = map_find(m, sv, iv, j);
    if (i >= 0) KEEL_TRY(keel_tensor_copy_elems(y, j, &m->values, i, 1));
  }
  return KEEL_OK;
}

/* ============================================================ table */

const keel_opdef keel_ops_ml_map[] = {
    {KEEL_ML, "ZipMap", 1, KEEL_OPSET_MAX, op_zipmap, 0, KEEL_T(KEEL_FLOAT)},
    {KEEL_ML, "DictVectorizer", 1, KEEL_OPSET_MAX, op_dict_vectorizer, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_STRING)},
    {0},
};
