/* ml_misc.c: the element-wise, lookup and map operators of ai.onnx.ml:
 * Binarizer, Scaler, Normalizer, Imputer, ArrayFeatureExtractor,
 * FeatureVectorizer, OneHotEncoder, CategoryMapper, LabelEncoder
 * (opsets 1, 2 and 4: lists, or the tensor attributes of opset 4), and on
 * maps ZipMap (a [N, C] score tensor to a sequence of N maps from the C
 * class labels to the scores, as classifiers' probabilities are handed to
 * scikit-learn users) and DictVectorizer (a map to a dense [1, V] row over
 * a vocabulary: the spec says a 1-D tensor, ONNX Runtime writes [1, V],
 * which is what converted pipelines feed to the next 2-D op). Maps are
 * run-time values of their own (tensor.h: keys and values are tensors of
 * the session heap, tagged with the node output that made them), released
 * like any other value at their last use.
 *
 * Lookups (LabelEncoder, CategoryMapper, OneHotEncoder) sort their keys
 * once, at session creation (the ops' prepare step keeps the sorted key
 * sets and the string value lists in one block), and binary-search each
 * element; unprepared, they sort into scratch per call. Float keys compare
 * as numbers with NaN equal to NaN (LabelEncoder-4); strings compare as
 * bytes. */
#include <math.h>
#include <stdlib.h>

#include "base/sysmem.h"
#include "ops/ml/ml_common.h"

/* ========================================================= Binarizer */

static keel_status op_binarizer(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (!keel_dtype_is_float(x->dtype) && !keel_dtype_is_int(x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "X must be numeric, got %s", keel_dtype_name((keel_dtype)x->dtype));
  double th = keel_k_attr_f(k, "threshold", 0.0f);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &y));
  int64_t n = keel_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    double v = keel_elem_get_f64(x->dtype, x->data, (size_t)i);
    keel_elem_set_f64(y->dtype, y->data, (size_t)i, isnan(v) ? v : (v > th ? 1.0 : 0.0));
  }
  return KEEL_OK;
}

/* ====================================================== Scaler, Imputer */

/* A per-column parameter list of 1 or C values. */
static keel_status per_col(const char *name, int64_t n, int64_t c) {
  if (n != 1 && n != c)
    return keel_err(KEEL_ERR_SHAPE, "attribute '%s' has %lld values; expected 1 or %lld (the columns of X)",
                    name, (long long)n, (long long)c);
  return KEEL_OK;
}

static keel_status op_scaler(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t rows, c, no, ns;
  KEEL_TRY(ml_rows(x, "Scaler", &rows, &c));
  double *off, *sc;
  KEEL_TRY(ml_attr_reals(k, "offset", &off, &no));
  KEEL_TRY(ml_attr_reals(k, "scale", &sc, &ns));
  if (no > 0) KEEL_TRY(per_col("offset", no, c));
  if (ns > 0) KEEL_TRY(per_col("scale", ns, c));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  float *out = y->data;
  for (int64_t i = 0; i < rows * c; i++) {
    int64_t j = c ? i % c : 0;
    double v = keel_elem_get_f64(x->dtype, x->data, (size_t)i);
    if (no > 0) v -= off[no == 1 ? 0 : j];
    if (ns > 0) v *= sc[ns == 1 ? 0 : j];
    out[i] = (float)v;
  }
  return KEEL_OK;
}

static bool imp_match(double v, double rep) { return isnan(rep) ? isnan(v) : v == rep; }

static keel_status op_imputer(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t rows, c, nf, ni;
  KEEL_TRY(ml_rows(x, "Imputer", &rows, &c));
  int nfl = 0;
  const float *fv = keel_k_attr_floats(k, "imputed_value_floats", &nfl);
  const int64_t *iv = ml_attr_ints(k, "imputed_value_int64s", &ni);
  nf = nfl;
  bool isf = keel_dtype_is_float(x->dtype);
  if (isf ? nf < 1 : ni < 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s input needs attribute '%s'", keel_dtype_name((keel_dtype)x->dtype),
                    isf ? "imputed_value_floats" : "imputed_value_int64s");
  KEEL_TRY(per_col(isf ? "imputed_value_floats" : "imputed_value_int64s", isf ? nf : ni, c));
  int64_t nv = isf ? nf : ni;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &y));
  double rf = keel_k_attr_f(k, "replaced_value_float", 0.0f);
  int64_t ri = keel_k_attr_i(k, "replaced_value_int64", 0);
  for (int64_t i = 0; i < rows * c; i++) {
    int64_t j = nv == 1 ? 0 : i % c;
    if (isf) {
      double v = keel_elem_get_f64(x->dtype, x->data, (size_t)i);
      keel_elem_set_f64(y->dtype, y->data, (size_t)i, imp_match(v, rf) ? fv[j] : v);
    } else {
      int64_t v = keel_elem_get_i64(x->dtype, x->data, (size_t)i);
      keel_elem_set_i64(y->dtype, y->data, (size_t)i, v == ri ? iv[j] : v);
    }
  }
  return KEEL_OK;
}

/* ======================================================== Normalizer */

static keel_status op_normalizer(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t rows, c;
  KEEL_TRY(ml_rows(x, "Normalizer", &rows, &c));
  const char *norm = keel_k_attr_s(k, "norm", "MAX");
  int kind = !strcmp(norm, "MAX") ? 0 : !strcmp(norm, "L1") ? 1 : !strcmp(norm, "L2") ? 2 : -1;
  if (kind < 0) return keel_err(KEEL_ERR_INVALID_MODEL, "unknown norm '%s' (MAX, L1 or L2)", norm);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  double *row;
  KEEL_TRY(keel_k_scratch_n(k, c + 1, sizeof(double), (void **)&row));
  float *out = y->data;
  for (int64_t i = 0; i < rows; i++) {
    ml_row(x, i, c, row);
    double d = kind == 0 ? -INFINITY : 0;
    for (int64_t j = 0; j < c; j++)
      d = kind == 0 ? fmax(d, row[j]) : kind == 1 ? d + fabs(row[j]) : d + row[j] * row[j];
    if (kind == 2) d = sqrt(d);
    for (int64_t j = 0; j < c; j++) out[i * c + j] = (float)(d != 0 ? row[j] / d : row[j]);
  }
  return KEEL_OK;
}

/* ============================================ ArrayFeatureExtractor */

static keel_status op_array_feature_extractor(keel_kctx *k) {
  const keel_tensor *x, *ix;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ix));
  if (ix->dtype != KEEL_INT64) return keel_err(KEEL_ERR_SHAPE, "Y (indices) must be int64");
  if (x->rank < 1) return keel_err(KEEL_ERR_SHAPE, "X must have rank 1 or more");
  int64_t c = x->shape[x->rank - 1], m = keel_tensor_numel(ix);
  const int64_t *idx = ix->data;
  for (int64_t j = 0; j < m; j++)
    if (idx[j] < 0 || idx[j] >= c)
      return keel_err(KEEL_ERR_RUNTIME, "index %lld (Y[%lld]) is out of range [0, %lld)", (long long)idx[j],
                      (long long)j, (long long)c);
  if (m < 1) return keel_err(KEEL_ERR_SHAPE, "Y (indices) is empty");
  int64_t shape[KEEL_MAX_RANK];
  int rank = x->rank == 1 ? 2 : x->rank;
  if (x->rank == 1) shape[0] = 1;
  else memcpy(shape, x->shape, sizeof(int64_t) * (size_t)(x->rank - 1));
  shape[rank - 1] = m;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, rank, shape, &y));
  int64_t rows = c ? keel_tensor_numel(x) / c : 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < m; j++) KEEL_TRY(keel_tensor_copy_elems(y, r * m + j, x, r * c + idx[j], 1));
  return KEEL_OK;
}

/* ================================================ FeatureVectorizer */

static keel_status op_feature_vectorizer(keel_kctx *k) {
  int64_t nd;
  const int64_t *dims = ml_attr_ints(k, "inputdimensions", &nd);
  if (nd != k->n_in)
    return keel_err(KEEL_ERR_INVALID_MODEL, "inputdimensions has %lld entries for %d inputs", (long long)nd, k->n_in);
  int64_t total = 0, rows = -1;
  for (int i = 0; i < k->n_in; i++) {
    const keel_tensor *x;
    KEEL_TRY(keel_k_in(k, i, &x));
    if (dims[i] < 0 || dims[i] > INT64_MAX - total)
      return keel_err(KEEL_ERR_INVALID_MODEL, "inputdimensions[%d] = %lld is out of range", i, (long long)dims[i]);
    int64_t r = x->rank >= 2 ? x->shape[0] : 1;
    if (rows >= 0 && r != rows)
      return keel_err(KEEL_ERR_SHAPE, "input %d has %lld rows, input 0 has %lld", i, (long long)r, (long long)rows);
    rows = r;
    total += dims[i];
  }
  int64_t shape[2] = {rows < 0 ? 0 : rows, total};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 2, shape, &y));
  float *out = y->data;
  int64_t col = 0;
  for (int i = 0; i < k->n_in; i++) {
    const keel_tensor *x = &k->in[i]->t;
    int64_t per = rows > 0 ? keel_tensor_numel(x) / rows : 0;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < dims[i]; j++)
        out[r * total + col + j] = j < per ? (float)keel_elem_get_f64(x->dtype, x->data, (size_t)(r * per + j)) : 0.0f;
    col += dims[i];
  }
  return KEEL_OK;
}

/* ============================================================ key sets */

/* Keys of a lookup: strings, int64s or doubles, sorted through `order`. */
typedef struct keyset {
  int kind;                /* KEEL_STRING, KEEL_INT64 or KEEL_DOUBLE */
  int64_t n;
  keel_string *s;
  int64_t *i;
  double *f;
  int64_t *order;
} keyset;

static int key_cmp3(const keyset *ks, int64_t a, const keel_string *bs, int64_t bi, double bf) {
  if (ks->kind == KEEL_STRING) {
    const keel_string *x = &ks->s[a];
    size_t m = x->len < bs->len ? x->len : bs->len;
    int c = m ? memcmp(x->data, bs->data, m) : 0;
    return c ? c : (x->len < bs->len ? -1 : x->len > bs->len);
  }
  if (ks->kind == KEEL_INT64) return ks->i[a] < bi ? -1 : ks->i[a] > bi;
  double x = ks->f[a];
  if (isnan(x) || isnan(bf)) return isnan(x) - isnan(bf); /* NaN sorts last, equal to NaN */
  return x < bf ? -1 : x > bf;
}

static _Thread_local const keyset *sort_ks;
static int order_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  const keyset *ks = sort_ks;
  int c = key_cmp3(ks, x, ks->kind == KEEL_STRING ? &ks->s[y] : NULL, ks->kind == KEEL_INT64 ? ks->i[y] : 0,
                   ks->kind == KEEL_DOUBLE ? ks->f[y] : 0);
  return c ? c : (x < y ? -1 : x > y); /* stable: the first of equal keys wins */
}

static keel_status keys_sort(keel_kctx *k, keyset *ks) {
  KEEL_TRY(keel_k_scratch_n(k, ks->n + 1, sizeof(int64_t), (void **)&ks->order));
  for (int64_t j = 0; j < ks->n; j++) ks->order[j] = j;
  sort_ks = ks;
  qsort(ks->order, (size_t)ks->n, sizeof(int64_t), order_cmp);
  sort_ks = NULL;
  return KEEL_OK;
}

/* Index of the key equal to element e of x, or -1. */
static int64_t keys_find(const keyset *ks, const keel_tensor *x, int64_t e) {
  keel_string bs = {0};
  int64_t bi = 0;
  double bf = 0;
  if (ks->kind == KEEL_STRING) bs = ((const keel_string *)x->data)[e];
  else if (ks->kind == KEEL_INT64) bi = keel_elem_get_i64(x->dtype, x->data, (size_t)e);
  else bf = keel_elem_get_f64(x->dtype, x->data, (size_t)e);
  int64_t lo = 0, hi = ks->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (key_cmp3(ks, ks->order[mid], &bs, bi, bf) < 0) lo = mid + 1;
    else hi = mid;
  }
  if (lo < ks->n && !key_cmp3(ks, ks->order[lo], &bs, bi, bf)) return ks->order[lo];
  return -1;
}

static keel_status keys_strings(keel_kctx *k, const keel_attr *a, keyset *ks) {
  ks->kind = KEEL_STRING;
  ks->n = a->n;
  KEEL_TRY(keel_k_scratch_n(k, ks->n + 1, sizeof(keel_string), (void **)&ks->s));
  for (int64_t j = 0; j < ks->n; j++)
    ks->s[j] = (keel_string){(char *)a->strings[j], a->string_lens ? a->string_lens[j] : strlen(a->strings[j])};
  return KEEL_OK;
}

static keel_status keys_tensor(keel_kctx *k, const keel_tensor *t, keyset *ks) {
  ks->n = keel_tensor_numel(t);
  if (t->dtype == KEEL_STRING) {
    ks->kind = KEEL_STRING;
    ks->s = t->data;
    return KEEL_OK;
  }
  bool isf = keel_dtype_is_float(t->dtype);
  ks->kind = isf ? KEEL_DOUBLE : KEEL_INT64;
  if (isf) KEEL_TRY(keel_k_scratch_n(k, ks->n + 1, sizeof(double), (void **)&ks->f));
  else KEEL_TRY(keel_k_scratch_n(k, ks->n + 1, sizeof(int64_t), (void **)&ks->i));
  for (int64_t j = 0; j < ks->n; j++) {
    if (isf) ks->f[j] = keel_elem_get_f64(t->dtype, t->data, (size_t)j);
    else ks->i[j] = keel_elem_get_i64(t->dtype, t->data, (size_t)j);
  }
  return KEEL_OK;
}

/* A key set from attribute `name` (STRINGS, INTS, FLOATS or TENSOR). */
static keel_status keys_attr(keel_kctx *k, const keel_attr *a, keyset *ks) {
  memset(ks, 0, sizeof *ks);
  if (a->type == KEEL_ATTR_STRINGS) KEEL_TRY(keys_strings(k, a, ks));
  else if (a->type == KEEL_ATTR_INTS) ks->kind = KEEL_INT64, ks->n = a->n, ks->i = a->ints;
  else if (a->type == KEEL_ATTR_FLOATS) {
    ks->kind = KEEL_DOUBLE, ks->n = a->n;
    KEEL_TRY(keel_k_scratch_n(k, ks->n + 1, sizeof(double), (void **)&ks->f));
    for (int64_t j = 0; j < ks->n; j++) ks->f[j] = a->floats[j];
  } else if (a->type == KEEL_ATTR_TENSOR && a->t) KEEL_TRY(keys_tensor(k, a->t, ks));
  else return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' has an unusable type", a->name);
  return KEEL_OK;
}

/* ==================================================== prepared sets */

/* Key sets built once per node: each the set of one attribute, sorted
 * (keys) or as listed (string values). Arrays live in the same block. */
typedef struct lk_entry {
  const keel_attr *a;
  bool sorted;
  keyset ks;
} lk_entry;

typedef struct lk_prep {
  int n;
  lk_entry e[3];
} lk_prep;

static const keyset *prep_find(const keel_kctx *k, const keel_attr *a, bool sorted) {
  const lk_prep *p = k->prep;
  for (int i = 0; p && a && i < p->n; i++)
    if (p->e[i].a == a && p->e[i].sorted == sorted) return &p->e[i].ks;
  return NULL;
}

/* The sorted key set of attribute a. */
static keel_status keys_sorted(keel_kctx *k, const keel_attr *a, keyset *ks) {
  const keyset *p = prep_find(k, a, true);
  if (p) {
    *ks = *p;
    return KEEL_OK;
  }
  KEEL_TRY(keys_attr(k, a, ks));
  return keys_sort(k, ks);
}

/* A STRINGS attribute as keel_string entries. */
static keel_status strs_of(keel_kctx *k, const keel_attr *a, keyset *ks) {
  const keyset *p = prep_find(k, a, false);
  if (p) {
    *ks = *p;
    return KEEL_OK;
  }
  return keys_strings(k, a, ks);
}

static size_t up8(size_t n) { return (n + 7) & ~(size_t)7; }

static size_t elem_bytes(const keyset *ks) {
  return ks->kind == KEEL_STRING ? sizeof(keel_string) : ks->kind == KEEL_INT64 ? sizeof(int64_t) : sizeof(double);
}

static void *put(uint8_t *b, size_t *at, const void *src, size_t n) {
  void *dst = b + *at;
  if (n) memcpy(dst, src, n);
  *at += up8(n);
  return dst;
}

/* The built entries as one block (keys and orders copied; string bytes
 * stay in the model's attributes, which live as long as the session). */
static keel_status lk_pack(keel_kctx *k, const lk_prep *p, void **state, size_t *bytes) {
  size_t total = up8(sizeof(lk_prep));
  for (int i = 0; i < p->n; i++)
    total += up8((size_t)p->e[i].ks.n * elem_bytes(&p->e[i].ks)) + (p->e[i].sorted ? up8((size_t)p->e[i].ks.n * 8) : 0);
  uint8_t *b;
  KEEL_TRY(keel_k_prep_block(k, total, (void **)&b));
  lk_prep *out = (lk_prep *)(void *)b;
  *out = *p;
  size_t at = up8(sizeof(lk_prep));
  for (int i = 0; i < p->n; i++) {
    keyset *ks = &out->e[i].ks;
    size_t nb = (size_t)ks->n * elem_bytes(ks);
    if (ks->kind == KEEL_STRING) ks->s = put(b, &at, p->e[i].ks.s, nb);
    else if (ks->kind == KEEL_INT64) ks->i = put(b, &at, p->e[i].ks.i, nb);
    else ks->f = put(b, &at, p->e[i].ks.f, nb);
    ks->order = p->e[i].sorted ? put(b, &at, p->e[i].ks.order, (size_t)ks->n * 8) : NULL;
  }
  *state = b;
  *bytes = total;
  return KEEL_OK;
}

/* Adds attribute a's set when it is usable (else the kernel reports it). */
static void lk_add(keel_kctx *k, lk_prep *p, const keel_attr *a, bool sorted) {
  if (!a || p->n == 3 || (!sorted && a->type != KEEL_ATTR_STRINGS)) return;
  lk_entry *e = &p->e[p->n];
  e->a = a, e->sorted = sorted;
  keel_status st = sorted ? keys_attr(k, a, &e->ks) : keys_strings(k, a, &e->ks);
  if (!st && sorted) st = keys_sort(k, &e->ks);
  if (!st) p->n++;
}

static const keel_attr *first_attr(const keel_kctx *k, const char *const *names, int n);
static const char *const LE_KEYS[] = {"keys_tensor", "keys_strings", "keys_int64s", "keys_floats"};
static const char *const LE_VALUES[] = {"values_tensor", "values_strings", "values_int64s", "values_floats"};

static keel_status prep_lookup(keel_kctx *k, void **state, size_t *bytes) {
  lk_prep p = {0};
  const char *op = k->node->op_type;
  const keel_attr *cs = keel_k_attr(k, "cats_strings"), *ci = keel_k_attr(k, "cats_int64s");
  if (!strcmp(op, "LabelEncoder") && keel_k_opset(k) < 2) {
    const keel_attr *cl = keel_k_attr(k, "classes_strings");
    lk_add(k, &p, cl, true);
    lk_add(k, &p, cl, false);
  } else if (!strcmp(op, "LabelEncoder")) {
    lk_add(k, &p, first_attr(k, LE_KEYS, 4), true);
    lk_add(k, &p, first_attr(k, LE_VALUES, 4), false);
  } else {
    lk_add(k, &p, cs, true);
    lk_add(k, &p, ci, true);
    if (!strcmp(op, "CategoryMapper")) lk_add(k, &p, cs, false);
  }
  if (!p.n) return KEEL_OK; /* nothing usable: the kernel will say why */
  return lk_pack(k, &p, state, bytes);
}

/* The lookup ops' one implementation: the reference kernel over tables
 * built once at load. */
KEEL_IMPL_FROM_ATTRS(impls_lookup, "tables", prep_lookup, NULL)

static bool kind_fits(int kind, int dtype) {
  if (kind == KEEL_STRING) return dtype == KEEL_STRING;
  if (kind == KEEL_INT64) return keel_dtype_is_int(dtype);
  return keel_dtype_is_float(dtype);
}

/* ====================================================== OneHotEncoder */

static keel_status op_one_hot_encoder(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  const keel_attr *a = keel_k_attr(k, x->dtype == KEEL_STRING ? "cats_strings" : "cats_int64s");
  if (!a || a->n < 1 || a->type != (x->dtype == KEEL_STRING ? KEEL_ATTR_STRINGS : KEEL_ATTR_INTS))
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s input needs attribute '%s'", keel_dtype_name((keel_dtype)x->dtype),
                    x->dtype == KEEL_STRING ? "cats_strings" : "cats_int64s");
  keyset ks;
  KEEL_TRY(keys_sorted(k, a, &ks));
  if (x->rank >= KEEL_MAX_RANK) return keel_err(KEEL_ERR_SHAPE, "X has too high a rank");
  int64_t shape[KEEL_MAX_RANK], n = keel_tensor_numel(x);
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[x->rank] = ks.n;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank + 1, shape, &y));
  float *out = y->data;
  bool zeros = keel_k_attr_i(k, "zeros", 1) != 0;
  if (n > 0 && ks.n > 0) memset(out, 0, sizeof(float) * (size_t)(n * ks.n));
  bool isf = keel_dtype_is_float(x->dtype);
  for (int64_t e = 0; e < n; e++) {
    int64_t j;
    if (isf) { /* floats are looked up as the integers they hold */
      double v = keel_elem_get_f64(x->dtype, x->data, (size_t)e);
      j = -1;
      if (v == floor(v) && fabs(v) < 9.2e18) /* an integer that int64 holds */
        for (int64_t t = 0, iv = (int64_t)v; t < ks.n; t++)
          if (ks.i[t] == iv) j = t, t = ks.n;
    } else j = keys_find(&ks, x, e);
    if (j < 0 && !zeros) return keel_err(KEEL_ERR_RUNTIME, "element %lld of X is not one of the categories (zeros = 0)", (long long)e);
    if (j >= 0) out[e * ks.n + j] = 1.0f;
  }
  return KEEL_OK;
}

/* ================================================ lookup outputs */

/* Values of a lookup: a typed list, with the default. */
typedef struct valset {
  int dtype;
  int64_t n;
  const keel_string *s;    /* STRING */
  const int64_t *i;        /* ints (INT64 attr) */
  const float *f;          /* FLOATS attr */
  const keel_tensor *t;    /* tensor attr (any type) */
  keel_string def_s;
  double def_f;
  int64_t def_i;
} valset;

static keel_status val_put(keel_tensor *y, const valset *v, int64_t e, int64_t j) {
  if (v->dtype == KEEL_STRING) {
    keel_string s = j < 0 ? v->def_s : v->t ? ((const keel_string *)v->t->data)[j] : v->s[j];
    return keel_tensor_set_string(y, (size_t)e, s.data ? s.data : "", s.len);
  }
  if (j >= 0 && v->t) return keel_tensor_copy_elems(y, e, v->t, j, 1);
  if (keel_dtype_is_float(v->dtype)) keel_elem_set_f64(y->dtype, y->data, (size_t)e, j < 0 ? v->def_f : v->f[j]);
  else keel_elem_set_i64(y->dtype, y->data, (size_t)e, j < 0 ? v->def_i : v->i[j]);
  return KEEL_OK;
}

static keel_status lookup_run(keel_kctx *k, const keel_tensor *x, keyset *ks, const valset *v) {
  if (!kind_fits(ks->kind, x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "X is %s, but the keys are %s", keel_dtype_name((keel_dtype)x->dtype),
                    ks->kind == KEEL_STRING ? "strings" : ks->kind == KEEL_INT64 ? "integers" : "floats");
  if (v->n != ks->n)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%lld keys but %lld values", (long long)ks->n, (long long)v->n);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, v->dtype, x->rank, x->shape, &y));
  int64_t n = keel_tensor_numel(x);
  for (int64_t e = 0; e < n; e++) KEEL_TRY(val_put(y, v, e, keys_find(ks, x, e)));
  return KEEL_OK;
}

static keel_string str_of(const char *s) { return (keel_string){(char *)s, strlen(s)}; }

/* ===================================================== CategoryMapper */

static keel_status op_category_mapper(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  const keel_attr *cs = keel_k_attr(k, "cats_strings"), *ci = keel_k_attr(k, "cats_int64s");
  if (!cs || !ci || cs->type != KEEL_ATTR_STRINGS || ci->type != KEEL_ATTR_INTS)
    return keel_err(KEEL_ERR_INVALID_MODEL, "CategoryMapper needs cats_strings and cats_int64s");
  keyset ks;
  valset v = {0};
  v.def_s = str_of(keel_k_attr_s(k, "default_string", "_Unused"));
  v.def_i = keel_k_attr_i(k, "default_int64", -1);
  if (x->dtype == KEEL_STRING) {
    KEEL_TRY(keys_sorted(k, cs, &ks));
    v.dtype = KEEL_INT64, v.n = ci->n, v.i = ci->ints;
  } else {
    KEEL_TRY(keys_sorted(k, ci, &ks));
    keyset vs;
    KEEL_TRY(strs_of(k, cs, &vs));
    v.dtype = KEEL_STRING, v.n = cs->n, v.s = vs.s;
  }
  return lookup_run(k, x, &ks, &v);
}

/* ======================================================= LabelEncoder */

/* Opset 1: classes_strings; strings -> their index, ints -> the string. */
static keel_status label_encoder_1(keel_kctx *k, const keel_tensor *x) {
  const keel_attr *cs = keel_k_attr(k, "classes_strings");
  if (!cs || cs->type != KEEL_ATTR_STRINGS) return keel_err(KEEL_ERR_INVALID_MODEL, "classes_strings is missing");
  keyset ks, vs;
  valset v = {0};
  int64_t *idx;
  KEEL_TRY(keel_k_scratch_n(k, cs->n + 1, sizeof(int64_t), (void **)&idx));
  for (int64_t j = 0; j < cs->n; j++) idx[j] = j;
  v.def_s = str_of(keel_k_attr_s(k, "default_string", "_Unused"));
  v.def_i = keel_k_attr_i(k, "default_int64", -1);
  v.n = cs->n;
  if (x->dtype == KEEL_STRING) {
    KEEL_TRY(keys_sorted(k, cs, &ks));
    v.dtype = KEEL_INT64, v.i = idx;
  } else { /* keys 0..n-1: already in order */
    ks = (keyset){.kind = KEEL_INT64, .n = cs->n, .i = idx, .order = idx};
    KEEL_TRY(strs_of(k, cs, &vs));
    v.dtype = KEEL_STRING, v.s = vs.s;
  }
  return lookup_run(k, x, &ks, &v);
}

/* The first attribute of `names` that is present. */
static const keel_attr *first_attr(const keel_kctx *k, const char *const *names, int n) {
  for (int i = 0; i < n; i++) {
    const keel_attr *a = keel_k_attr(k, names[i]);
    if (a) return a;
  }
  return NULL;
}

static keel_status le_values(keel_kctx *k, const keel_attr *va, valset *v) {
  if (va->type == KEEL_ATTR_STRINGS) {
    keyset vs;
    KEEL_TRY(strs_of(k, va, &vs));
    v->dtype = KEEL_STRING, v->n = va->n, v->s = vs.s;
  } else if (va->type == KEEL_ATTR_INTS) v->dtype = KEEL_INT64, v->n = va->n, v->i = va->ints;
  else if (va->type == KEEL_ATTR_FLOATS) v->dtype = KEEL_FLOAT, v->n = va->n, v->f = va->floats;
  else if (va->type == KEEL_ATTR_TENSOR && va->t) v->dtype = va->t->dtype, v->n = keel_tensor_numel(va->t), v->t = va->t;
  else return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' has an unusable type", va->name);
  return KEEL_OK;
}

/* Defaults: default_tensor (opset 4) or default_string/int64/float. */
static keel_status le_defaults(keel_kctx *k, valset *v) {
  v->def_s = str_of(keel_k_attr_s(k, "default_string", "_Unused"));
  v->def_i = keel_k_attr_i(k, "default_int64", -1);
  v->def_f = keel_k_attr_f(k, "default_float", -0.0f);
  const keel_attr *d = keel_k_attr(k, "default_tensor");
  if (!d || !d->t) return KEEL_OK;
  const keel_tensor *t = d->t;
  if (keel_tensor_numel(t) != 1 || t->dtype != v->dtype)
    return keel_err(KEEL_ERR_INVALID_MODEL, "default_tensor must hold one %s value", keel_dtype_name((keel_dtype)v->dtype));
  if (t->dtype == KEEL_STRING) v->def_s = *(const keel_string *)t->data;
  else if (keel_dtype_is_float(t->dtype)) v->def_f = keel_elem_get_f64(t->dtype, t->data, 0);
  else v->def_i = keel_elem_get_i64(t->dtype, t->data, 0);
  return KEEL_OK;
}

static keel_status op_label_encoder(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (keel_k_opset(k) < 2) return label_encoder_1(k, x);
  const keel_attr *ka = first_attr(k, LE_KEYS, 4), *va = first_attr(k, LE_VALUES, 4);
  if (!ka || !va) return keel_err(KEEL_ERR_INVALID_MODEL, "LabelEncoder needs one keys_* and one values_* attribute");
  keyset ks;
  valset v = {0};
  KEEL_TRY(keys_sorted(k, ka, &ks));
  KEEL_TRY(le_values(k, va, &v));
  KEEL_TRY(le_defaults(k, &v));
  return lookup_run(k, x, &ks, &v);
}

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

#define ML_NUM_IN (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_INT32))
#define LE_TYPES (KEEL_T(KEEL_STRING) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_INT32) | \
                  KEEL_T(KEEL_INT16) | KEEL_T(KEEL_DOUBLE))
const keel_opdef keel_ops_ml_misc[] = {
    {KEEL_ML, "Binarizer", 1, KEEL_OPSET_MAX, op_binarizer, 0, ML_NUM_IN},
    {KEEL_ML, "Scaler", 1, KEEL_OPSET_MAX, op_scaler, 0, ML_NUM_IN},
    {KEEL_ML, "Imputer", 1, KEEL_OPSET_MAX, op_imputer, 0, ML_NUM_IN},
    {KEEL_ML, "Normalizer", 1, KEEL_OPSET_MAX, op_normalizer, 0, ML_NUM_IN},
    {KEEL_ML, "ArrayFeatureExtractor", 1, KEEL_OPSET_MAX, op_array_feature_extractor, 0,
     ML_NUM_IN | KEEL_T(KEEL_STRING)},
    {KEEL_ML, "FeatureVectorizer", 1, KEEL_OPSET_MAX, op_feature_vectorizer, 0, ML_NUM_IN},
    {KEEL_ML, "OneHotEncoder", 1, KEEL_OPSET_MAX, op_one_hot_encoder, 0, ML_NUM_IN | KEEL_T(KEEL_STRING),
     impls_lookup},
    {KEEL_ML, "CategoryMapper", 1, KEEL_OPSET_MAX, op_category_mapper, 0, KEEL_T(KEEL_STRING) | KEEL_T(KEEL_INT64),
     impls_lookup},
    {KEEL_ML, "LabelEncoder", 1, KEEL_OPSET_MAX, op_label_encoder, 0, LE_TYPES, impls_lookup},
    {KEEL_ML, "ZipMap", 1, KEEL_OPSET_MAX, op_zipmap, 0, KEEL_T(KEEL_FLOAT)},
    {KEEL_ML, "DictVectorizer", 1, KEEL_OPSET_MAX, op_dict_vectorizer, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_INT64) | KEEL_T(KEEL_STRING)},
    {0},
};
#undef ML_NUM_IN
#undef LE_TYPES
