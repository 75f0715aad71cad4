/* value.c: public value handles (keel_value_t): tensors, sequences (of
 * tensors or maps), maps and empty optionals the caller creates or receives
 * from keel_run.
 *
 * A handle holds one reference to its internal value and one to the
 * session's heap, so a value stays valid after keel_session_destroy; the
 * heap goes when the last handle does.
 */
#include <math.h>
#include <stdlib.h>

#include "base/sysmem.h"
#include "onnx/tensorproto.h"
#include "exec/session.h"

/* The handle behind keel_value_t. refs counts the caller's references
 * (keel_value_retain/release), atomically because handles may be shared
 * across threads; the internal value has its own counts underneath. The
 * handle itself is meta memory of the heap it references. */
struct keel_value_s {
  _Atomic int32_t refs;
  keel_heap *heap;
  keel_val v;
  keel_value_t **items;       /* handles for sequence elements, made lazily */
  size_t n_items;
};

/* A new handle that takes *v over (moved: *v is EMPTY afterwards, also on
 * error, when the value is released) and holds a reference to h, so the
 * heap outlives the session while this handle lives. */
static keel_status wrap(keel_heap *h, keel_val *v, keel_value_t **out) {
  keel_value_t *p = keel_heap_meta_realloc(h, NULL, 0, sizeof *p);
  if (!p) {
    keel_val_clear(v);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "value handle");
  }
  memset(p, 0, sizeof *p);
  atomic_init(&p->refs, 1);
  p->heap = h;
  keel_heap_retain(h);
  keel_val_move(&p->v, v);
  *out = p;
  return KEEL_OK;
}

/* Borrowed: the caller takes its own reference if it keeps the value
 * (bind_inputs does, session.c). */
const keel_val *keel_value_val(const keel_value_t *v) { return &v->v; }

/* A new reference to v that may outlive the session: tensors whose bytes
 * live in the model (initializers, and views or Identities of them) are
 * copied into the heap, which outlives the session while handles hold it.
 * A sequence is rebuilt item by item for the same reason: one of its
 * tensors may be a constant. A sequence of maps is not: maps are always
 * made on the heap. The copy is tagged KEEL_SITE_USER, as values made
 * through the API are. */
static keel_status detach(keel_heap *h, const keel_val *v, keel_val *out) {
  if (v->kind == KEEL_V_TENSOR && v->t.buf && v->t.buf->kind == KEEL_BUF_STATIC) {
    out->kind = KEEL_V_TENSOR;
    return keel_tensor_clone(h, &v->t, (keel_owner){KEEL_SITE_USER, 0}, &out->t);
  }
  if (v->kind != KEEL_V_SEQUENCE || v->seq->of_maps) { /* maps live in the heap */
    keel_val_ref(out, v);
    return KEEL_OK;
  }
  keel_seq *s;
  KEEL_TRY(keel_seq_new(h, v->seq->elem_dtype, v->seq->n, &s));
  for (size_t i = 0; i < v->seq->n; i++) {
    keel_val e = {.kind = KEEL_V_TENSOR, .t = v->seq->items[i]}, d;
    keel_status st = detach(h, &e, &d);
    if (st) {
      keel_seq_release(s);
      return st;
    }
    keel_seq_insert(s, s->n, &d.t); /* capacity reserved: cannot fail */
  }
  out->kind = KEEL_V_SEQUENCE;
  out->seq = s;
  return KEEL_OK;
}

/* The run's outputs as public handles (keel_run_tagged). v keeps its own
 * references; the caller clears it afterwards either way. */
keel_status keel_values_wrap(keel_session_t *s, const keel_val *v, size_t n,
                             keel_value_t **out) {
  for (size_t i = 0; i < n; i++) {
    keel_val r = {0};
    keel_status st = detach(s->heap, &v[i], &r);
    if (!st) st = wrap(s->heap, &r, &out[i]);
    if (st) { /* all or nothing: out-params only on success */
      for (size_t k = 0; k < i; k++) keel_value_release(out[k]), out[k] = NULL;
      return st;
    }
  }
  return KEEL_OK;
}

/* ============================================================ create */

keel_status keel_tensor_create(keel_session_t *s, keel_dtype dtype, int rank,
                               const int64_t *shape, const void *data,
                               keel_value_t **out) {
  if (!s || !out || (rank > 0 && !shape))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_tensor_create: NULL argument");
  keel_val v = {.kind = KEEL_V_TENSOR};
  KEEL_TRY(keel_tensor_alloc(s->heap, (int)dtype, rank, shape,
                             (keel_owner){KEEL_SITE_USER, 0}, &v.t));
  /* strings are copied one by one into the heap (a NULL entry becomes
   * ""); numeric data is one memcpy, and NULL data means zeros, so a
   * caller can make a tensor and fill it through keel_value_data */
  size_t n = (size_t)keel_tensor_numel(&v.t);
  if (dtype == KEEL_STRING && data) {
    const keel_string *src = data;
    for (size_t i = 0; i < n; i++) {
      keel_status st = keel_tensor_set_string(&v.t, i, src[i].data ? src[i].data : "",
                                              src[i].data ? src[i].len : 0);
      if (st) {
        keel_val_clear(&v);
        return st;
      }
    }
  } else if (dtype != KEEL_STRING && v.t.data) {
    if (data) memcpy(v.t.data, data, keel_tensor_nbytes(&v.t));
    else memset(v.t.data, 0, keel_tensor_nbytes(&v.t));
  }
  return wrap(s->heap, &v, out);
}

/* No copy: the buffer is EXTERNAL, so its release calls on_release(ud)
 * instead of freeing a heap block, and only the small header comes from
 * the heap. STRING is refused because keel_string entries point at memory
 * keel would have to own and free. The shape is validated here (overflow,
 * negative dims), since no allocation will catch a bad one. */
keel_status keel_tensor_wrap(keel_session_t *s, keel_dtype dtype, int rank,
                             const int64_t *shape, void *data,
                             void (*on_release)(void *ud), void *ud,
                             keel_value_t **out) {
  if (!s || !out || (rank > 0 && !shape))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_tensor_wrap: NULL argument");
  if (dtype == KEEL_STRING)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_tensor_wrap: STRING tensors must be copied");
  int64_t numel;
  KEEL_TRY(keel_shape_check((int)dtype, rank, shape, &numel));
  if (numel > 0 && !data) return keel_err(KEEL_ERR_INVALID_ARG, "keel_tensor_wrap: NULL data");
  keel_val v = {.kind = KEEL_V_TENSOR};
  v.t.dtype = (int32_t)dtype;
  v.t.rank = rank;
  if (rank > 0) memcpy(v.t.shape, shape, sizeof(int64_t) * (size_t)rank);
  keel_buffer *b = keel_heap_obj_alloc(s->heap);
  if (!b) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "tensor header");
  atomic_init(&b->refs, 1);
  b->kind = KEEL_BUF_EXTERNAL;
  b->nbytes = keel_dtype_nbytes(dtype, numel);
  b->data = data;
  b->heap = s->heap;
  b->on_release = on_release;
  b->ud = ud;
  v.t.buf = b;
  v.t.data = data;
  return wrap(s->heap, &v, out);
}

/* keel_sequence_create's case for maps (item 0 is a map): every item must
 * be a map with the same key and value types, since an ONNX sequence has
 * one element type. The maps are shared, not copied: each gets a new
 * reference. Everything is checked before anything is built, so an error
 * leaves nothing to undo. */
static keel_status sequence_of_maps(keel_session_t *s, keel_value_t *const *items, size_t n,
                                   keel_value_t **out) {
  const keel_map *m0 = items[0]->v.map;
  for (size_t i = 0; i < n; i++) {
    if (!items[i] || items[i]->v.kind != KEEL_V_MAP)
      return keel_err(KEEL_ERR_INVALID_ARG, "sequence item %zu is not a map (item 0 is)", i);
    const keel_map *m = items[i]->v.map;
    if (m->keys.dtype != m0->keys.dtype || m->values.dtype != m0->values.dtype)
      return keel_err(KEEL_ERR_INVALID_ARG, "sequence item %zu is a map of other types than item 0", i);
  }
  keel_val v = {.kind = KEEL_V_SEQUENCE};
  KEEL_TRY(keel_seq_new_maps(s->heap, m0->keys.dtype, m0->values.dtype, n, &v.seq));
  for (size_t i = 0; i < n; i++) {
    keel_map_retain(items[i]->v.map);
    keel_seq_push_map(v.seq, items[i]->v.map); /* capacity reserved: cannot fail */
  }
  return wrap(s->heap, &v, out);
}

/* Copies the caller's keys and values into m: int64 keys one by one
 * (the key array is int64_t[n]), string keys and values into the heap,
 * numeric values in one memcpy. On a failed string copy the caller
 * releases m with whatever was copied. */
static keel_status map_copy_in(keel_map *m, size_t n, const void *keys, const void *values) {
  const keel_string *ks = keys, *vs = values;
  for (size_t i = 0; i < n; i++) {
    if (m->keys.dtype == KEEL_STRING)
      KEEL_TRY(keel_tensor_set_string(&m->keys, i, ks[i].data ? ks[i].data : "", ks[i].data ? ks[i].len : 0));
    else ((int64_t *)m->keys.data)[i] = ((const int64_t *)keys)[i];
    if (m->values.dtype == KEEL_STRING)
      KEEL_TRY(keel_tensor_set_string(&m->values, i, vs[i].data ? vs[i].data : "", vs[i].data ? vs[i].len : 0));
  }
  if (m->values.dtype != KEEL_STRING && n) memcpy(m->values.data, values, keel_tensor_nbytes(&m->values));
  return KEEL_OK;
}

keel_status keel_map_create(keel_session_t *s, keel_dtype key_dtype, keel_dtype value_dtype, size_t n,
                            const void *keys, const void *values, keel_value_t **out) {
  if (!s || !out || (n && (!keys || !values)))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_map_create: NULL argument");
  /* n becomes an int64 dim below; bounding it well under INT64_MAX also
   * keeps n times an element's bytes from overflowing */
  if (n > (size_t)INT64_MAX / 64) return keel_err(KEEL_ERR_INVALID_ARG, "keel_map_create: %zu entries", n);
  keel_val v = {.kind = KEEL_V_MAP};
  KEEL_TRY(keel_map_new(s->heap, (int)key_dtype, (int)value_dtype, (int64_t)n, (keel_owner){KEEL_SITE_USER, 0}, &v.map));
  keel_status st = map_copy_in(v.map, n, keys, values);
  if (st) {
    keel_val_clear(&v);
    return st;
  }
  return wrap(s->heap, &v, out);
}

size_t keel_map_size(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_MAP ? (size_t)keel_map_len(v->v.map) : 0;
}

keel_dtype keel_map_key_dtype(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_MAP ? (keel_dtype)v->v.map->keys.dtype : KEEL_UNDEFINED;
}

const void *keel_map_keys(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_MAP ? v->v.map->keys.data : NULL;
}

const void *keel_map_values(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_MAP ? v->v.map->values.data : NULL;
}

/* Items are borrowed (keel.h): the sequence takes its own reference to
 * each tensor, so the caller may release the item handles at once. All
 * items are checked before the sequence is made. elem_dtype UNDEFINED
 * accepts any tensor type (meant for an empty sequence). */
keel_status keel_sequence_create(keel_session_t *s, keel_dtype elem_dtype,
                                 keel_value_t *const *items, size_t n,
                                 keel_value_t **out) {
  if (!s || !out || (n && !items))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_sequence_create: NULL argument");
  if (n && items[0] && items[0]->v.kind == KEEL_V_MAP) return sequence_of_maps(s, items, n, out);
  for (size_t i = 0; i < n; i++) {
    if (!items[i] || items[i]->v.kind != KEEL_V_TENSOR)
      return keel_err(KEEL_ERR_INVALID_ARG, "sequence item %zu is not a tensor", i);
    if (elem_dtype && items[i]->v.t.dtype != (int32_t)elem_dtype)
      return keel_err(KEEL_ERR_INVALID_ARG, "sequence item %zu is %s, not %s", i,
                      keel_dtype_name((keel_dtype)items[i]->v.t.dtype),
                      keel_dtype_name(elem_dtype));
  }
  keel_val v = {.kind = KEEL_V_SEQUENCE};
  KEEL_TRY(keel_seq_new(s->heap, (int)elem_dtype, n, &v.seq));
  for (size_t i = 0; i < n; i++) {
    keel_tensor t;
    keel_tensor_ref(&items[i]->v.t, &t);
    keel_seq_insert(v.seq, i, &t); /* capacity reserved: cannot fail */
  }
  return wrap(s->heap, &v, out);
}

keel_status keel_none_create(keel_session_t *s, keel_value_t **out) {
  if (!s || !out) return keel_err(KEEL_ERR_INVALID_ARG, "keel_none_create: NULL argument");
  keel_val v = {.kind = KEEL_V_NONE};
  return wrap(s->heap, &v, out);
}

keel_status keel_value_from_pb(keel_session_t *s, const void *bytes, size_t len,
                               keel_value_kind kind_hint, keel_value_t **out) {
  if (!s || !out || (!bytes && len))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_value_from_pb: NULL argument");
  keel_val v = {0};
  KEEL_TRY(keel_pb_read_value(s->heap, bytes, len, (int)kind_hint, &v));
  return wrap(s->heap, &v, out);
}

/* The buffer is malloc'ed (keel_bytes grows with realloc) and belongs to
 * no session, like every text keel returns (describe, reports): keel_free
 * below is plain free() for all of them. */
keel_status keel_value_to_pb(const keel_value_t *v, const char *name, void **bytes,
                             size_t *len) {
  if (!v || !bytes || !len) return keel_err(KEEL_ERR_INVALID_ARG, "keel_value_to_pb: NULL argument");
  keel_bytes b = {0};
  keel_status st = keel_pb_write_value(&v->v, name, &b);
  if (st) {
    free(b.p);
    return st;
  }
  *bytes = b.p;
  *len = b.len;
  return KEEL_OK;
}

void keel_free(void *p) { free(p); }

/* =========================================================== access */

/* The last release frees the item handles made by keel_sequence_at, the
 * value, the handle, and then drops the handle's reference to the heap:
 * in that order, since the first three live on that heap and it may be
 * the last reference (the session already destroyed). */
void keel_value_release(keel_value_t *v) {
  if (!v || atomic_fetch_sub(&v->refs, 1) != 1) return;
  keel_heap *h = v->heap;
  for (size_t i = 0; i < v->n_items; i++) keel_value_release(v->items[i]);
  keel_heap_meta_realloc(h, v->items, v->n_items * sizeof *v->items, 0);
  keel_val_clear(&v->v);
  keel_heap_meta_realloc(h, v, sizeof *v, 0);
  keel_heap_release(h);
}

keel_value_t *keel_value_retain(keel_value_t *v) {
  if (v) atomic_fetch_add(&v->refs, 1);
  return v;
}

keel_value_kind keel_value_kind_of(const keel_value_t *v) {
  if (!v) return (keel_value_kind)0;
  if (v->v.kind == KEEL_V_SEQUENCE) return KEEL_KIND_SEQUENCE;
  if (v->v.kind == KEEL_V_NONE) return KEEL_KIND_NONE;
  if (v->v.kind == KEEL_V_MAP) return KEEL_KIND_MAP;
  return KEEL_KIND_TENSOR;
}

keel_dtype keel_value_dtype(const keel_value_t *v) {
  if (!v) return KEEL_UNDEFINED;
  if (v->v.kind == KEEL_V_TENSOR) return (keel_dtype)v->v.t.dtype;
  if (v->v.kind == KEEL_V_SEQUENCE) return (keel_dtype)v->v.seq->elem_dtype;
  if (v->v.kind == KEEL_V_MAP) return (keel_dtype)v->v.map->values.dtype;
  return KEEL_UNDEFINED;
}

int keel_value_rank(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_TENSOR ? v->v.t.rank : -1;
}

const int64_t *keel_value_shape(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_TENSOR ? v->v.t.shape : NULL;
}

int64_t keel_value_numel(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_TENSOR ? keel_tensor_numel(&v->v.t) : 0;
}

const void *keel_value_data(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_TENSOR ? v->v.t.data : NULL;
}

int keel_value_exclusive(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_TENSOR && keel_buffer_exclusive(v->v.t.buf);
}

double keel_value_at(const keel_value_t *v, int64_t i) {
  if (!v || v->v.kind != KEEL_V_TENSOR || i < 0 || i >= keel_tensor_numel(&v->v.t))
    return (double)NAN;
  return keel_elem_get_f64(v->v.t.dtype, v->v.t.data, (size_t)i);
}

size_t keel_sequence_length(const keel_value_t *v) {
  return v && v->v.kind == KEEL_V_SEQUENCE ? v->v.seq->n : 0;
}

/* Handles for the items are made on first use, all at once, and kept in
 * v until v goes: that is what lets the result be borrowed (keel.h)
 * rather than a new reference the caller would have to release. The
 * cache is filled without a lock, so the first call on a sequence must
 * not race with another on the same handle. On out of memory it returns
 * NULL and leaves no partial cache behind. */
const keel_value_t *keel_sequence_at(const keel_value_t *v, size_t i) {
  if (!v || v->v.kind != KEEL_V_SEQUENCE || i >= v->v.seq->n) return NULL;
  keel_value_t *m = (keel_value_t *)v; /* the item cache is not observable state */
  if (!m->items) {
    size_t n = v->v.seq->n;
    m->items = keel_heap_meta_realloc(m->heap, NULL, 0, n * sizeof *m->items);
    if (!m->items) return NULL;
    for (size_t k = 0; k < n; k++) {
      keel_val e = {.kind = KEEL_V_TENSOR};
      if (v->v.seq->of_maps) e.kind = KEEL_V_MAP, e.map = v->v.seq->maps[k], keel_map_retain(e.map);
      else keel_tensor_ref(&v->v.seq->items[k], &e.t);
      if (wrap(m->heap, &e, &m->items[k])) {
        for (size_t j = 0; j < k; j++) keel_value_release(m->items[j]);
        keel_heap_meta_realloc(m->heap, m->items, n * sizeof *m->items, 0);
        m->items = NULL;
        return NULL;
      }
    }
    m->n_items = n;
  }
  return m->items[i];
}
