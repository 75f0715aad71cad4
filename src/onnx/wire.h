/* wire.h: the protobuf wire format over bytes in memory: a reader, and the
 * symmetric encoder into a growable buffer (keel_bytes, keel_pbw_*).
 *
 * It allocates nothing and copies nothing: a length-delimited field becomes
 * a sub-reader over the same bytes. Every read is bounds-checked; a
 * truncated or malformed input gives KEEL_ERR_INVALID_MODEL naming the byte
 * offset (from `base`, the start of the file) and what was being read.
 */
#ifndef KEEL_WIRE_H
#define KEEL_WIRE_H

#include "base/common.h"

enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

typedef struct keel_pb {
  const uint8_t *p, *end;
  const uint8_t *base; /* for offsets in messages */
} keel_pb;

static inline keel_pb keel_pb_open(const void *data, size_t len) {
  const uint8_t *p = data;
  return (keel_pb){p, p ? p + len : p, p}; /* NULL + 0 is undefined in C */
}
static inline bool keel_pb_more(const keel_pb *r) { return r->p < r->end; }
static inline size_t keel_pb_offset(const keel_pb *r) {
  return (size_t)(r->p - r->base);
}

/* Reads the next tag. */
KEEL_INTERNAL keel_status keel_pb_tag(keel_pb *r, uint32_t *field, uint32_t *wt);
KEEL_INTERNAL keel_status keel_pb_varint(keel_pb *r, uint64_t *v);
KEEL_INTERNAL keel_status keel_pb_fixed32(keel_pb *r, uint32_t *v);
KEEL_INTERNAL keel_status keel_pb_fixed64(keel_pb *r, uint64_t *v);
/* A length-delimited field: `sub` reads its bytes; `r` moves past them. */
KEEL_INTERNAL keel_status keel_pb_len(keel_pb *r, keel_pb *sub);
/* Skips a field of wire type `wt` whose tag was just read. */
KEEL_INTERNAL keel_status keel_pb_skip(keel_pb *r, uint32_t wt);

/* Field readers that check the wire type too; `what` names the field in the
 * error message. */
KEEL_INTERNAL keel_status keel_pb_get_int(keel_pb *r, uint32_t wt,
                                          const char *what, int64_t *v);
KEEL_INTERNAL keel_status keel_pb_get_float(keel_pb *r, uint32_t wt,
                                            const char *what, float *v);
KEEL_INTERNAL keel_status keel_pb_get_bytes(keel_pb *r, uint32_t wt,
                                            const char *what, keel_pb *sub);

/* The next length-delimited field numbered `field` (others are skipped):
 * 1 with its bytes in *sub, 0 at the end of r, or a negative keel_status. */
KEEL_INTERNAL int keel_pb_next(keel_pb *r, uint32_t field, const char *what, keel_pb *sub);

/* Repeated scalar fields come packed (one LEN field) or one by one. These
 * count the elements in a packed run, for sizing arrays before filling. */
KEEL_INTERNAL keel_status keel_pb_count_varints(const keel_pb *packed,
                                                size_t *n);

/* ---------------------------------------------------------- encoder */

/* A growable byte buffer (plain malloc: it may be handed to the user). A
 * failed allocation sets `failed`; later writes do nothing, so callers
 * check once at the end. */
typedef struct keel_bytes {
  uint8_t *p;
  size_t len, cap;
  bool failed;
} keel_bytes;
KEEL_INTERNAL void keel_bytes_put(keel_bytes *b, const void *p, size_t n);

KEEL_INTERNAL void keel_pbw_varint(keel_bytes *b, uint64_t v);
KEEL_INTERNAL void keel_pbw_tag(keel_bytes *b, uint32_t field, uint32_t wt);
/* field = v as a varint (negative int64s take 10 bytes, as protobuf does) */
KEEL_INTERNAL void keel_pbw_int(keel_bytes *b, uint32_t field, int64_t v);
KEEL_INTERNAL void keel_pbw_float(keel_bytes *b, uint32_t field, float v);
/* A length-delimited field: bytes, or a NUL-terminated string. */
KEEL_INTERNAL void keel_pbw_len(keel_bytes *b, uint32_t field, const void *p, size_t n);
KEEL_INTERNAL void keel_pbw_str(keel_bytes *b, uint32_t field, const char *s);
/* A nested message written in place: begin returns a mark; end inserts
 * the length in front of what was written since. */
KEEL_INTERNAL size_t keel_pbw_begin(keel_bytes *b, uint32_t field);
KEEL_INTERNAL void keel_pbw_end(keel_bytes *b, size_t mark);

#endif /* KEEL_WIRE_H */
