/* save.c: the trained model as a file: the original ModelProto bytes with
 * the trained initializers re-encoded and everything else copied as it
 * is (opsets, metadata, nodes, value_info, the untrained initializers,
 * field order).
 *
 * It works on the protobuf wire format (onnx/wire.h reads, a small writer
 * here): ModelProto.graph (field 7) is rewritten, and in it each
 * GraphProto.initializer (field 5) whose name (TensorProto field 8) is a
 * trained parameter becomes {dims (1), data_type = FLOAT (2), name (8),
 * raw_data (9)}. Initializers of sub-graphs are not trained (the trainer
 * trains the main graph's), so sub-graph bytes are copied unchanged.
 */
#include <stdlib.h>

#include "../base/prim.h"
#include "../base/status.h"
#include "../onnx/wire.h"
#include "train.h"

typedef struct obuf {
  uint8_t *p;
  size_t n, cap;
  bool failed;
} obuf;

static void put(obuf *b, const void *src, size_t n) {
  if (b->failed || !n) return;
  if (b->n + n > b->cap) {
    size_t cap = KEEL_MAX(b->cap * 2, b->n + n + 4096);
    uint8_t *q = realloc(b->p, cap);
    if (!q) {
      b->failed = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void put_varint(obuf *b, uint64_t v) {
  uint8_t tmp[10];
  size_t n = 0;
  do {
    tmp[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) tmp[n] |= 0x80;
    n++;
  } while (v);
  put(b, tmp, n);
}

static void put_tag(obuf *b, uint32_t field, uint32_t wt) { put_varint(b, ((uint64_t)field << 3) | wt); }

static void put_len(obuf *b, uint32_t field, const void *p, size_t n) {
  put_tag(b, field, PB_LEN);
  put_varint(b, n);
  put(b, p, n);
}

/* The name of a TensorProto (field 8), or NULL + its length. */
static keel_status tensor_name(keel_pb msg, keel_pb *name) {
  int r = keel_pb_next(&msg, 8, "initializer name", name);
  if (r < 0) return (keel_status)r;
  if (r == 0) *name = keel_pb_open(NULL, 0);
  return KEEL_OK;
}

static const train_tensor *trained(const train_tensor *t, size_t n, keel_pb name) {
  size_t len = (size_t)(name.end - name.p);
  for (size_t i = 0; i < n; i++)
    if (strlen(t[i].name) == len && !memcmp(t[i].name, name.p, len)) return &t[i];
  return NULL;
}

static void put_tensor(obuf *b, const train_tensor *t) {
  obuf m = {0};
  for (int d = 0; d < t->rank; d++) {
    put_tag(&m, 1, PB_VARINT);
    put_varint(&m, (uint64_t)t->shape[d]);
  }
  put_tag(&m, 2, PB_VARINT);
  put_varint(&m, 1); /* FLOAT */
  put_len(&m, 8, t->name, strlen(t->name));
  put_len(&m, 9, t->data, sizeof(float) * (size_t)t->numel); /* little-endian hosts */
  b->failed |= m.failed;
  put_len(b, 5, m.p, m.n);
  free(m.p);
}

/* Copies a GraphProto, replacing the trained initializers; found[i] counts
 * the ones seen. */
static keel_status rewrite_graph(keel_pb g, const train_tensor *t, size_t n, uint8_t *found,
                                 obuf *out) {
  while (keel_pb_more(&g)) {
    const uint8_t *start = g.p;
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&g, &f, &wt));
    if (f == 5 && wt == PB_LEN) {
      keel_pb sub, name;
      KEEL_TRY(keel_pb_len(&g, &sub));
      KEEL_TRY(tensor_name(sub, &name));
      const train_tensor *hit = trained(t, n, name);
      if (hit) {
        found[hit - t] = 1;
        put_tensor(out, hit);
        continue;
      }
    } else {
      KEEL_TRY(keel_pb_skip(&g, wt));
    }
    put(out, start, (size_t)(g.p - start));
  }
  return KEEL_OK;
}

static keel_status rewrite_model(keel_pb m, const train_tensor *t, size_t n, uint8_t *found,
                                 obuf *out) {
  while (keel_pb_more(&m)) {
    const uint8_t *start = m.p;
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&m, &f, &wt));
    if (f == 7 && wt == PB_LEN) {
      keel_pb g;
      KEEL_TRY(keel_pb_len(&m, &g));
      obuf gb = {0};
      keel_status st = rewrite_graph(g, t, n, found, &gb);
      if (!st) {
        out->failed |= gb.failed;
        put_len(out, 7, gb.p, gb.n);
      }
      free(gb.p);
      KEEL_TRY(st);
      continue;
    }
    KEEL_TRY(keel_pb_skip(&m, wt));
    put(out, start, (size_t)(m.p - start));
  }
  return KEEL_OK;
}

keel_status keel_train_write_model(const uint8_t *bytes, size_t len, const train_tensor *t,
                                   size_t n, const char *path) {
  uint8_t *found = calloc(n + 1, 1);
  obuf out = {0};
  keel_status st = found ? rewrite_model(keel_pb_open(bytes, len), t, n, found, &out)
                         : keel_err(KEEL_ERR_OUT_OF_MEMORY, "saving the model");
  if (!st && out.failed) st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "saving the model");
  for (size_t i = 0; !st && i < n; i++)
    if (!found[i])
      st = keel_err(KEEL_ERR_INTERNAL, "saving the model: initializer '%s' not found in the file", t[i].name);
  if (!st) st = keel_prim_write_file(path, out.p, out.n);
  free(out.p);
  free(found);
  return st ? keel_err_prefix(st, "saving the trained model") : KEEL_OK;
}
