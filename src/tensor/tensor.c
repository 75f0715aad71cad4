/* tensor.c: buffers, tensors, sequences and values (see tensor.h for the
 * ownership rules). */
#include "tensor/tensor.h"

#include <stdio.h>

#include "base/status.h"

/* ============================================================== shapes */

int64_t keel_shape_numel(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

keel_status keel_shape_check(int dtype, int rank, const int64_t *shape,
                             int64_t *numel) {
  if (rank < 0 || rank > KEEL_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "rank %d is above keel's limit of %d",
                    rank, KEEL_MAX_RANK);
  if (!keel_dtype_valid(dtype) || dtype == KEEL_COMPLEX64 ||
      dtype == KEEL_COMPLEX128)
    return keel_err(KEEL_ERR_UNSUPPORTED, "element type %d (%s) unsupported",
                    dtype, keel_dtype_name((keel_dtype)dtype));
  /* nz, the product of the nonzero dims, must fit as well: kernels multiply
   * subsets of the dims (strides, inner sizes) of empty tensors too, so
   * [0, 2^40, 2^40] is refused like [2^40, 2^40, 0] */
  int64_t n = 1, nz = 1;
  for (int i = 0; i < rank; i++) {
    if (shape[i] < 0)
      return keel_err(KEEL_ERR_SHAPE, "dimension %d is negative (%lld)", i,
                      (long long)shape[i]);
    if (keel_mul64_ovf(n, shape[i], &n) ||
        (shape[i] && keel_mul64_ovf(nz, shape[i], &nz)))
      return keel_err(KEEL_ERR_SHAPE, "element count overflows");
  }
  size_t bytes; /* bits, for the sub-byte types */
  int bits = keel_dtype_bits((keel_dtype)dtype);
  if ((uint64_t)n > SIZE_MAX / 8 ||
      keel_mul_ovf((size_t)n, (size_t)(bits < 8 ? bits : bits / 8), &bytes) ||
      bytes > SIZE_MAX / 4)
    return keel_err(KEEL_ERR_SHAPE, "tensor of %lld elements is too large",
                    (long long)n);
  *numel = n;
  return KEEL_OK;
}

const char *keel_shape_str(int rank, const int64_t *shape, char *buf,
                           size_t cap) {
  size_t at = 0;
  int w = snprintf(buf, cap, "[");
  at = w > 0 ? (size_t)w : 0;
  for (int i = 0; i < rank && at < cap; i++) {
    w = snprintf(buf + at, cap - at, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (w > 0) at += (size_t)w;
  }
  if (at < cap) snprintf(buf + at, cap - at, "]");
  buf[cap - 1] = 0;
  return buf;
}

/* ============================================================= buffers */

static void free_strings(keel_buffer *b) {
  keel_string *s = b->data;
  size_t n = b->nbytes / sizeof(keel_string);
  for (size_t i = 0; i < n; i++)
    if (s[i].data) keel_heap_meta_realloc(b->heap, s[i].data, s[i].len + 1, 0);
}

void keel_buffer_release(keel_buffer *b) {
  if (!b || b->kind == KEEL_BUF_STATIC) return;
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  if (b->strings) free_strings(b);
  if (b->kind == KEEL_BUF_HEAP) keel_heap_free(b->heap, b->block);
  else if (b->on_release) b->on_release(b->ud);
  keel_heap_obj_free(b->heap, b);
}

static keel_status oom(keel_heap *h, size_t nbytes) {
  keel_oom_info i = keel_heap_oom_info(h);
  /* a device's heap says which device */
  const char *dev = keel_heap_device(h);
  bool on = strcmp(dev, "cpu") != 0;
  if (i.by_cap)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY,
                    "cannot allocate %zu bytes%s%s: the cap of %llu reserved bytes "
                    "is reached (allocated %llu, reserved %llu)",
                    nbytes, on ? " on " : "", on ? dev : "", (unsigned long long)i.limit,
                    (unsigned long long)i.allocated,
                    (unsigned long long)i.reserved);
  return keel_err(KEEL_ERR_OUT_OF_MEMORY,
                  "cannot allocate %zu bytes%s%s: the %s refused (allocated "
                  "%llu, reserved %llu)",
                  nbytes, on ? " on " : "", on ? dev : "", on ? "device" : "system",
                  (unsigned long long)i.allocated, (unsigned long long)i.reserved);
}

/* ============================================================= tensors */

_Static_assert(sizeof(keel_buffer) <= KEEL_HEAP_OBJ_SIZE, "buffer header");
_Static_assert(sizeof(keel_seq) <= KEEL_HEAP_OBJ_SIZE, "sequence header");

keel_status keel_tensor_alloc(keel_heap *h, int dtype, int rank,
                              const int64_t *shape, keel_owner owner,
                              keel_tensor *out) {
  int64_t numel;
  KEEL_TRY(keel_shape_check(dtype, rank, shape, &numel));
  keel_tensor t = {.dtype = dtype, .rank = rank};
  if (rank > 0) memcpy(t.shape, shape, sizeof(int64_t) * (size_t)rank);
  if (numel > 0) {
    size_t nbytes = keel_dtype_nbytes((keel_dtype)dtype, numel);
    keel_buffer *b = keel_heap_obj_alloc(h);
    keel_block *blk = b ? keel_heap_alloc(h, nbytes, owner) : NULL;
    if (!blk) {
      keel_heap_obj_free(h, b);
      return oom(h, nbytes);
    }
    atomic_init(&b->refs, 1);
    b->kind = KEEL_BUF_HEAP;
    b->nbytes = nbytes;
    b->data = blk->ptr;
    b->heap = h;
    b->block = blk;
    if (dtype == KEEL_STRING) {
      memset(b->data, 0, nbytes);
      b->strings = 1;
    } else if (keel_dtype_is_packed(dtype)) {
      ((uint8_t *)b->data)[nbytes - 1] = 0; /* the padding bits stay zero */
    }
    t.buf = b;
    t.data = b->data;
  }
  *out = t;
  return KEEL_OK;
}

void keel_tensor_view(const keel_tensor *src, int rank, const int64_t *shape,
                      keel_tensor *out) {
  keel_tensor t = {.buf = src->buf, .data = src->data, .dtype = src->dtype,
                   .rank = rank};
  if (rank > 0) memcpy(t.shape, shape, sizeof(int64_t) * (size_t)rank);
  if (keel_shape_numel(rank, shape) == 0) {
    t.buf = NULL;
    t.data = NULL;
  }
  keel_buffer_retain(t.buf);
  *out = t;
}

void keel_tensor_ref(const keel_tensor *src, keel_tensor *out) {
  *out = *src;
  keel_buffer_retain(out->buf);
}

keel_status keel_tensor_clone(keel_heap *h, const keel_tensor *src,
                              keel_owner owner, keel_tensor *out) {
  keel_tensor t;
  KEEL_TRY(keel_tensor_alloc(h, src->dtype, src->rank, src->shape, owner, &t));
  if (src->dtype == KEEL_STRING) {
    const keel_string *s = src->data;
    size_t n = (size_t)keel_tensor_numel(src);
    for (size_t i = 0; i < n; i++) {
      keel_status st = keel_tensor_set_string(&t, i, s[i].data, s[i].len);
      if (st) {
        keel_tensor_release(&t);
        return st;
      }
    }
  } else if (t.data) {
    memcpy(t.data, src->data, keel_tensor_nbytes(src));
  }
  *out = t;
  return KEEL_OK;
}

void keel_tensor_release(keel_tensor *t) {
  keel_buffer_release(t->buf);
  t->buf = NULL;
  t->data = NULL;
}

keel_status keel_tensor_set_string(keel_tensor *t, size_t i, const char *s,
                                   size_t n) {
  keel_buffer *b = t->buf;
  keel_string *e = (keel_string *)t->data + i;
  if (n == SIZE_MAX) return keel_err(KEEL_ERR_SHAPE, "string too long");
  char *p = keel_heap_meta_realloc(b->heap, NULL, 0, n + 1);
  if (!p) return oom(b->heap, n + 1);
  if (n) memcpy(p, s, n);
  p[n] = 0;
  if (e->data) keel_heap_meta_realloc(b->heap, e->data, e->len + 1, 0);
  e->data = p;
  e->len = n;
  return KEEL_OK;
}

keel_status keel_tensor_copy_elems(keel_tensor *dst, int64_t di, const keel_tensor *src,
                                   int64_t si, int64_t n) {
  if (n <= 0) return KEEL_OK;
  if (src->dtype == KEEL_STRING) {
    const keel_string *s = (const keel_string *)src->data + si;
    for (int64_t i = 0; i < n; i++)
      KEEL_TRY(keel_tensor_set_string(dst, (size_t)(di + i), s[i].data, s[i].len));
    return KEEL_OK;
  }
  if (keel_dtype_is_packed(src->dtype)) { /* element by element; may overlap */
    bool down = dst->data != src->data || di <= si;
    for (int64_t k = 0; k < n; k++) {
      int64_t j = down ? k : n - 1 - k;
      keel_small_put(src->dtype, dst->data, (size_t)(di + j),
                     keel_small_get(src->dtype, src->data, (size_t)(si + j)));
    }
    return KEEL_OK;
  }
  size_t es = keel_dtype_size((keel_dtype)src->dtype);
  memmove((uint8_t *)dst->data + (size_t)di * es, (const uint8_t *)src->data + (size_t)si * es,
          (size_t)n * es);
  return KEEL_OK;
}

/* =========================================================== sequences */

keel_status keel_seq_new(keel_heap *h, int elem_dtype, size_t cap,
                         keel_seq **out) {
  keel_seq *s = keel_heap_obj_alloc(h);
  if (!s) return oom(h, sizeof *s);
  atomic_init(&s->refs, 1);
  s->elem_dtype = elem_dtype;
  s->heap = h;
  if (cap) {
    size_t bytes;
    if (keel_mul_ovf(cap, sizeof(keel_tensor), &bytes) ||
        !(s->items = keel_heap_meta_realloc(h, NULL, 0, bytes))) {
      keel_heap_obj_free(h, s);
      return oom(h, cap * sizeof(keel_tensor));
    }
    s->cap = cap;
  }
  *out = s;
  return KEEL_OK;
}

void keel_seq_release(keel_seq *s) {
  if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (s->of_maps) {
    for (size_t i = 0; i < s->n; i++) keel_map_release(s->maps[i]);
    keel_heap_meta_realloc(s->heap, s->maps, s->cap * sizeof(keel_map *), 0);
    keel_heap_obj_free(s->heap, s);
    return;
  }
  for (size_t i = 0; i < s->n; i++) keel_tensor_release(&s->items[i]);
  keel_heap_meta_realloc(s->heap, s->items, s->cap * sizeof(keel_tensor), 0);
  keel_heap_obj_free(s->heap, s);
}

keel_status keel_seq_insert(keel_seq *s, size_t pos, keel_tensor *t) {
  keel_assert(pos <= s->n);
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4;
    keel_tensor *items = keel_heap_meta_realloc(
        s->heap, s->items, s->cap * sizeof(keel_tensor),
        cap * sizeof(keel_tensor));
    if (!items) return oom(s->heap, cap * sizeof(keel_tensor));
    s->items = items;
    s->cap = cap;
  }
  memmove(s->items + pos + 1, s->items + pos,
          (s->n - pos) * sizeof(keel_tensor));
  s->items[pos] = *t;
  s->n++;
  if (s->elem_dtype == KEEL_UNDEFINED) s->elem_dtype = t->dtype;
  t->buf = NULL;
  t->data = NULL;
  return KEEL_OK;
}

void keel_seq_erase(keel_seq *s, size_t pos) {
  keel_assert(pos < s->n);
  keel_tensor_release(&s->items[pos]);
  memmove(s->items + pos, s->items + pos + 1,
          (s->n - pos - 1) * sizeof(keel_tensor));
  s->n--;
}

keel_status keel_seq_copy(const keel_seq *src, keel_seq **out) {
  keel_seq *s;
  if (src->of_maps) {
    KEEL_TRY(keel_seq_new_maps(src->heap, src->map_key, src->elem_dtype, src->n, &s));
    for (size_t i = 0; i < src->n; i++) keel_map_retain(src->maps[i]), s->maps[i] = src->maps[i];
    s->n = src->n;
    *out = s;
    return KEEL_OK;
  }
  KEEL_TRY(keel_seq_new(src->heap, src->elem_dtype, src->n, &s));
  for (size_t i = 0; i < src->n; i++) keel_tensor_ref(&src->items[i], &s->items[i]);
  s->n = src->n;
  *out = s;
  return KEEL_OK;
}

/* ================================================================ maps */

keel_status keel_map_new(keel_heap *h, int key_dtype, int value_dtype, int64_t n,
                         keel_owner owner, keel_map **out) {
  if (key_dtype != KEEL_INT64 && key_dtype != KEEL_STRING)
    return keel_err(KEEL_ERR_INVALID_ARG, "map keys must be int64 or string, not %s",
                    keel_dtype_name((keel_dtype)key_dtype));
  if (!keel_dtype_valid(value_dtype) || value_dtype == KEEL_UNDEFINED)
    return keel_err(KEEL_ERR_INVALID_ARG, "map values of type %d", value_dtype);
  keel_map *m = keel_heap_meta_realloc(h, NULL, 0, sizeof *m);
  if (!m) return oom(h, sizeof *m);
  memset(m, 0, sizeof *m);
  atomic_init(&m->refs, 1);
  m->heap = h;
  keel_status st = keel_tensor_alloc(h, key_dtype, 1, &n, owner, &m->keys);
  if (!st) st = keel_tensor_alloc(h, value_dtype, 1, &n, owner, &m->values);
  if (st) {
    keel_tensor_release(&m->keys);
    keel_heap_meta_realloc(h, m, sizeof *m, 0);
    return st;
  }
  *out = m;
  return KEEL_OK;
}

void keel_map_release(keel_map *m) {
  if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  keel_tensor_release(&m->keys);
  keel_tensor_release(&m->values);
  keel_heap_meta_realloc(m->heap, m, sizeof *m, 0);
}

keel_status keel_seq_new_maps(keel_heap *h, int key_dtype, int value_dtype, size_t cap,
                              keel_seq **out) {
  keel_seq *s = keel_heap_obj_alloc(h);
  if (!s) return oom(h, sizeof *s);
  atomic_init(&s->refs, 1);
  s->elem_dtype = value_dtype;
  s->map_key = key_dtype;
  s->of_maps = 1;
  s->heap = h;
  if (cap) {
    size_t bytes;
    if (keel_mul_ovf(cap, sizeof(keel_map *), &bytes) ||
        !(s->maps = keel_heap_meta_realloc(h, NULL, 0, bytes))) {
      keel_heap_obj_free(h, s);
      return oom(h, cap * sizeof(keel_map *));
    }
    s->cap = cap;
  }
  *out = s;
  return KEEL_OK;
}

keel_status keel_seq_push_map(keel_seq *s, keel_map *m) {
  keel_assert(s->of_maps);
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4;
    keel_map **maps = keel_heap_meta_realloc(s->heap, s->maps, s->cap * sizeof(keel_map *),
                                             cap * sizeof(keel_map *));
    if (!maps) return oom(s->heap, cap * sizeof(keel_map *));
    s->maps = maps;
    s->cap = cap;
  }
  s->maps[s->n++] = m;
  return KEEL_OK;
}

/* ============================================================== values */

void keel_val_clear(keel_val *v) {
  if (v->kind == KEEL_V_TENSOR) keel_tensor_release(&v->t);
  else if (v->kind == KEEL_V_SEQUENCE) keel_seq_release(v->seq);
  else if (v->kind == KEEL_V_MAP) keel_map_release(v->map);
  v->kind = KEEL_V_EMPTY;
}

void keel_val_ref(keel_val *dst, const keel_val *src) {
  *dst = *src;
  if (src->kind == KEEL_V_TENSOR) keel_buffer_retain(dst->t.buf);
  else if (src->kind == KEEL_V_SEQUENCE) keel_seq_retain(dst->seq);
  else if (src->kind == KEEL_V_MAP) keel_map_retain(dst->map);
}

