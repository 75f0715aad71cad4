/* tensor.h: run-time values: reference-counted buffers, tensors (a view of a
 * buffer with a dtype and shape), sequences of tensors or of maps, maps
 * (ai.onnx.ml: int64 or string keys to scalar values), and empty optionals.
 *
 * Ownership (DESIGN rule 2): a buffer counts its references. A tensor holds
 * exactly one reference to its buffer; a sequence holds one per element; a
 * frame slot holds one value. Moving a value (keel_val_move) transfers the
 * reference and clears the source, so nothing is shared "by pointer".
 *
 * Buffers come in three kinds: HEAP (a block of the session's caching
 * allocator), STATIC (initializers: bytes in the model mapping or in the
 * session's constant memory; never counted, never freed by a release) and
 * EXTERNAL (caller memory wrapped without a copy).
 */
#ifndef KEEL_TENSOR_H
#define KEEL_TENSOR_H

#include <stdatomic.h>

#include "mem/alloc.h"
#include "tensor/dtype.h"
#include "tensor/dtype_small.h"

typedef enum {
  KEEL_BUF_HEAP = 0,
  KEEL_BUF_STATIC = 1,
  KEEL_BUF_EXTERNAL = 2
} keel_buf_kind;

typedef struct keel_buffer {
  _Atomic int32_t refs;
  uint8_t kind;            /* keel_buf_kind                              */
  uint8_t strings;         /* holds keel_string entries to free          */
  size_t nbytes;
  void *data;
  keel_heap *heap;         /* the header's (and HEAP data's) allocator   */
  keel_block *block;       /* HEAP: the data block                       */
  void (*on_release)(void *ud); /* EXTERNAL */
  void *ud;                /* EXTERNAL: on_release's; STATIC copied for
                              alignment: the source bytes in the mapping */
} keel_buffer;

typedef struct keel_tensor {
  keel_buffer *buf;        /* NULL when the tensor has no elements       */
  void *data;              /* buf->data (+ offset for views)             */
  int32_t dtype;
  int32_t rank;
  int64_t shape[KEEL_MAX_RANK];
} keel_tensor;

/* A map as ONNX defines it for ai.onnx.ml (map(int64|string, T)): n keys
 * and n values, each a 1-D tensor of the session heap whose blocks carry
 * the owner tag of the value that made them; the header is heap
 * bookkeeping. Keys are unique; their order is the order they were made
 * in. Reference counted like sequences. */
typedef struct keel_map {
  _Atomic int32_t refs;
  keel_tensor keys;        /* [n], INT64 or STRING                        */
  keel_tensor values;      /* [n], the value type                         */
  keel_heap *heap;
} keel_map;

typedef struct keel_seq {
  _Atomic int32_t refs;
  int32_t elem_dtype;      /* KEEL_UNDEFINED until the first element;
                              sequences of maps: the maps' value type     */
  size_t n, cap;
  keel_tensor *items;      /* each item holds one buffer reference       */
  keel_heap *heap;
  keel_map **maps;         /* of_maps: n maps, one reference each         */
  int32_t map_key;         /* of_maps: the maps' key type                 */
  uint8_t of_maps;         /* a sequence of maps (items unused)           */
} keel_seq;

typedef enum {
  KEEL_V_EMPTY = 0,        /* slot holds nothing                          */
  KEEL_V_TENSOR = 1,
  KEEL_V_SEQUENCE = 2,
  KEEL_V_NONE = 3,         /* an empty optional                           */
  KEEL_V_MAP = 4
} keel_val_kind;

typedef struct keel_val {
  int32_t kind;
  union {
    keel_tensor t;
    keel_seq *seq;
    keel_map *map;
  };
} keel_val;

/* ----------------------------------------------------------- shapes */

KEEL_INTERNAL int64_t keel_shape_numel(int rank, const int64_t *shape);
static inline int64_t keel_tensor_numel(const keel_tensor *t) {
  return keel_shape_numel(t->rank, t->shape);
}
static inline size_t keel_tensor_nbytes(const keel_tensor *t) {
  return keel_dtype_nbytes((keel_dtype)t->dtype, keel_tensor_numel(t));
}
/* Checks rank, non-negative dims and the byte size against overflow;
 * writes the element count. KEEL_ERR_SHAPE with the reason otherwise. */
KEEL_INTERNAL keel_status keel_shape_check(int dtype, int rank,
                                           const int64_t *shape,
                                           int64_t *numel);
/* "[2,3,4]" into buf (always NUL-terminated). */
KEEL_INTERNAL const char *keel_shape_str(int rank, const int64_t *shape,
                                         char *buf, size_t cap);

/* ---------------------------------------------------------- buffers */

static inline void keel_buffer_retain(keel_buffer *b) {
  if (b && b->kind != KEEL_BUF_STATIC)
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}
KEEL_INTERNAL void keel_buffer_release(keel_buffer *b);
/* True when no other reference can see the bytes (in-place is safe). */
static inline bool keel_buffer_exclusive(const keel_buffer *b) {
  return b && b->kind == KEEL_BUF_HEAP &&
         atomic_load_explicit(&b->refs, memory_order_acquire) == 1;
}

/* ---------------------------------------------------------- tensors */

/* Allocates a tensor's buffer from `h` (uninitialized; zero elements -> no
 * buffer). Shape is checked. STRING tensors get empty strings. On OOM the
 * message gives the request and the heap's figures. */
KEEL_INTERNAL keel_status keel_tensor_alloc(keel_heap *h, int dtype, int rank,
                                            const int64_t *shape,
                                            keel_owner owner, keel_tensor *out);
/* A tensor that shares src's buffer with another shape (same numel). */
KEEL_INTERNAL void keel_tensor_view(const keel_tensor *src, int rank,
                                    const int64_t *shape, keel_tensor *out);
/* A new reference to the same bytes and shape. */
KEEL_INTERNAL void keel_tensor_ref(const keel_tensor *src, keel_tensor *out);
/* A deep copy into a new HEAP buffer (strings copied). */
KEEL_INTERNAL keel_status keel_tensor_clone(keel_heap *h, const keel_tensor *src,
                                            keel_owner owner, keel_tensor *out);
KEEL_INTERNAL void keel_tensor_release(keel_tensor *t);
/* Sets string element i of a STRING tensor to a copy of (s, n). */
KEEL_INTERNAL keel_status keel_tensor_set_string(keel_tensor *t, size_t i,
                                                 const char *s, size_t n);

/* Copies n elements from src[si..] to dst[di..] (same dtype): bytes for
 * numeric types, new string copies for STRING. */
KEEL_INTERNAL keel_status keel_tensor_copy_elems(keel_tensor *dst, int64_t di,
                                                 const keel_tensor *src, int64_t si,
                                                 int64_t n);

/* -------------------------------------------------------- sequences */

KEEL_INTERNAL keel_status keel_seq_new(keel_heap *h, int elem_dtype,
                                       size_t cap, keel_seq **out);
static inline void keel_seq_retain(keel_seq *s) {
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}
KEEL_INTERNAL void keel_seq_release(keel_seq *s);
/* Inserts at `pos` (0..n), taking over t's reference (t is cleared). */
KEEL_INTERNAL keel_status keel_seq_insert(keel_seq *s, size_t pos,
                                          keel_tensor *t);
KEEL_INTERNAL void keel_seq_erase(keel_seq *s, size_t pos);
/* A new sequence holding new references to every element of src. */
KEEL_INTERNAL keel_status keel_seq_copy(const keel_seq *src, keel_seq **out);

/* ------------------------------------------------------------- maps */

/* A map of n entries with uninitialized keys and values (STRING entries
 * empty), blocks tagged with `owner`. */
KEEL_INTERNAL keel_status keel_map_new(keel_heap *h, int key_dtype, int value_dtype,
                                       int64_t n, keel_owner owner, keel_map **out);
static inline void keel_map_retain(keel_map *m) {
  atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}
KEEL_INTERNAL void keel_map_release(keel_map *m);
static inline int64_t keel_map_len(const keel_map *m) { return keel_tensor_numel(&m->keys); }
/* An empty sequence of maps with room for cap of them. */
KEEL_INTERNAL keel_status keel_seq_new_maps(keel_heap *h, int key_dtype, int value_dtype,
                                            size_t cap, keel_seq **out);
/* Appends m, taking over the caller's reference. */
KEEL_INTERNAL keel_status keel_seq_push_map(keel_seq *s, keel_map *m);

/* ----------------------------------------------------------- values */

/* Drops whatever the value holds and leaves it EMPTY. */
KEEL_INTERNAL void keel_val_clear(keel_val *v);
/* *dst = *src and src becomes EMPTY (dst must be EMPTY). */
static inline void keel_val_move(keel_val *dst, keel_val *src) {
  *dst = *src;
  src->kind = KEEL_V_EMPTY;
}
/* *dst = a new reference to src's contents (dst must be EMPTY). */
KEEL_INTERNAL void keel_val_ref(keel_val *dst, const keel_val *src);

#endif /* KEEL_TENSOR_H */
