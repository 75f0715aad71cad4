/* wire.c: protobuf wire-format primitives (see wire.h). */
#include "onnx/wire.h"

#include <stdlib.h>

#include "base/status.h"

static keel_status truncated(const keel_pb *r, const char *what) {
  return keel_err(KEEL_ERR_INVALID_MODEL, "truncated %s at byte %zu", what,
                  keel_pb_offset(r));
}

keel_status keel_pb_varint(keel_pb *r, uint64_t *v) {
  uint64_t x = 0;
  for (unsigned shift = 0; shift < 70; shift += 7) {
    if (r->p >= r->end) return truncated(r, "varint");
    uint8_t b = *r->p++;
    if (shift == 63 && b > 1)
      return keel_err(KEEL_ERR_INVALID_MODEL, "varint overflows 64 bits at byte %zu",
                      keel_pb_offset(r));
    x |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return KEEL_OK;
    }
  }
  return keel_err(KEEL_ERR_INVALID_MODEL, "varint longer than 10 bytes at byte %zu",
                  keel_pb_offset(r));
}

keel_status keel_pb_tag(keel_pb *r, uint32_t *field, uint32_t *wt) {
  uint64_t t;
  KEEL_TRY(keel_pb_varint(r, &t));
  uint64_t f = t >> 3;
  if (f == 0 || f > 536870911u)
    return keel_err(KEEL_ERR_INVALID_MODEL, "bad field number %llu at byte %zu",
                    (unsigned long long)f, keel_pb_offset(r));
  *field = (uint32_t)f;
  *wt = (uint32_t)(t & 7);
  return KEEL_OK;
}

keel_status keel_pb_fixed32(keel_pb *r, uint32_t *v) {
  if (r->end - r->p < 4) return truncated(r, "fixed32");
  memcpy(v, r->p, 4);
  r->p += 4;
  return KEEL_OK;
}

keel_status keel_pb_fixed64(keel_pb *r, uint64_t *v) {
  if (r->end - r->p < 8) return truncated(r, "fixed64");
  memcpy(v, r->p, 8);
  r->p += 8;
  return KEEL_OK;
}

keel_status keel_pb_len(keel_pb *r, keel_pb *sub) {
  uint64_t n;
  KEEL_TRY(keel_pb_varint(r, &n));
  if (n > (uint64_t)(r->end - r->p))
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "field of %llu bytes at byte %zu runs past the end (%zu "
                    "bytes left)",
                    (unsigned long long)n, keel_pb_offset(r),
                    (size_t)(r->end - r->p));
  sub->p = r->p;
  sub->end = r->p + n;
  sub->base = r->base;
  r->p += n;
  return KEEL_OK;
}

keel_status keel_pb_skip(keel_pb *r, uint32_t wt) {
  uint64_t v;
  keel_pb sub;
  switch (wt) {
    case PB_VARINT: return keel_pb_varint(r, &v);
    case PB_FIXED64: return keel_pb_fixed64(r, &v);
    case PB_LEN: return keel_pb_len(r, &sub);
    case PB_FIXED32: {
      uint32_t w;
      return keel_pb_fixed32(r, &w);
    }
    default:
      return keel_err(KEEL_ERR_INVALID_MODEL,
                      "unsupported wire type %u at byte %zu", wt,
                      keel_pb_offset(r));
  }
}

static keel_status bad_type(const keel_pb *r, const char *what, uint32_t wt) {
  return keel_err(KEEL_ERR_INVALID_MODEL, "field '%s' has wire type %u at byte %zu",
                  what, wt, keel_pb_offset(r));
}

keel_status keel_pb_get_int(keel_pb *r, uint32_t wt, const char *what,
                            int64_t *v) {
  if (wt != PB_VARINT) return bad_type(r, what, wt);
  uint64_t u;
  KEEL_TRY(keel_pb_varint(r, &u));
  *v = (int64_t)u;
  return KEEL_OK;
}

keel_status keel_pb_get_float(keel_pb *r, uint32_t wt, const char *what,
                              float *v) {
  if (wt != PB_FIXED32) return bad_type(r, what, wt);
  uint32_t u;
  KEEL_TRY(keel_pb_fixed32(r, &u));
  memcpy(v, &u, 4);
  return KEEL_OK;
}

keel_status keel_pb_get_bytes(keel_pb *r, uint32_t wt, const char *what,
                              keel_pb *sub) {
  if (wt != PB_LEN) return bad_type(r, what, wt);
  return keel_pb_len(r, sub);
}

int keel_pb_next(keel_pb *r, uint32_t field, const char *what, keel_pb *sub) {
  while (keel_pb_more(r)) {
    uint32_t f, wt;
    keel_status st = keel_pb_tag(r, &f, &wt);
    if (!st && f == field) st = keel_pb_get_bytes(r, wt, what, sub);
    else if (!st) {
      st = keel_pb_skip(r, wt);
      if (!st) continue;
    }
    return st ? (int)st : 1;
  }
  return 0;
}

keel_status keel_pb_count_varints(const keel_pb *packed, size_t *n) {
  size_t c = 0;
  for (const uint8_t *p = packed->p; p < packed->end; p++)
    if (!(*p & 0x80)) c++;
  if (packed->p < packed->end && (packed->end[-1] & 0x80))
    return keel_err(KEEL_ERR_INVALID_MODEL, "truncated packed varints at byte %zu",
                    (size_t)(packed->end - packed->base));
  *n = c;
  return KEEL_OK;
}

/* ============================================================ encoder */

void keel_bytes_put(keel_bytes *b, const void *p, size_t n) {
  if (b->failed) return;
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
      if (cap > SIZE_MAX / 2) {
        b->failed = true;
        return;
      }
      cap *= 2;
    }
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      b->failed = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
}

static size_t varint_bytes(uint8_t buf[10], uint64_t v) {
  size_t n = 0;
  do {
    buf[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

void keel_pbw_varint(keel_bytes *b, uint64_t v) {
  uint8_t buf[10];
  keel_bytes_put(b, buf, varint_bytes(buf, v));
}

void keel_pbw_tag(keel_bytes *b, uint32_t f, uint32_t wt) {
  keel_pbw_varint(b, ((uint64_t)f << 3) | wt);
}

void keel_pbw_int(keel_bytes *b, uint32_t f, int64_t v) {
  keel_pbw_tag(b, f, PB_VARINT);
  keel_pbw_varint(b, (uint64_t)v);
}

void keel_pbw_float(keel_bytes *b, uint32_t f, float v) {
  uint8_t le[4];
  memcpy(le, &v, 4); /* keel runs on little-endian hosts only (common.h) */
  keel_pbw_tag(b, f, PB_FIXED32);
  keel_bytes_put(b, le, 4);
}

void keel_pbw_len(keel_bytes *b, uint32_t f, const void *p, size_t n) {
  keel_pbw_tag(b, f, PB_LEN);
  keel_pbw_varint(b, n);
  keel_bytes_put(b, p, n);
}

void keel_pbw_str(keel_bytes *b, uint32_t f, const char *s) {
  keel_pbw_len(b, f, s, strlen(s));
}

size_t keel_pbw_begin(keel_bytes *b, uint32_t f) {
  keel_pbw_tag(b, f, PB_LEN);
  return b->len;
}

void keel_pbw_end(keel_bytes *b, size_t mark) {
  if (b->failed) return;
  uint8_t buf[10];
  size_t body = b->len - mark, k = varint_bytes(buf, body);
  keel_bytes_put(b, buf, k); /* room for the length */
  if (b->failed) return;
  memmove(b->p + mark + k, b->p + mark, body);
  memcpy(b->p + mark, buf, k);
}
