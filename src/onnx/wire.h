/* wire.h: a reader for the protobuf wire format over bytes in memory.
 *
 * It allocates nothing and copies nothing: a length-delimited field becomes
 * a sub-reader over the same bytes. Every read is bounds-checked; a
 * truncated or malformed input gives KEEL_ERR_INVALID_MODEL naming the byte
 * offset (from `base`, the start of the file) and what was being read.
 */
#ifndef KEEL_WIRE_H
#define KEEL_WIRE_H

#include "../base/common.h"

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

#endif /* KEEL_WIRE_H */
