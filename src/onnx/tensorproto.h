/* tensorproto.h: ONNX TensorProto, SequenceProto (of tensors or maps),
 * MapProto and OptionalProto.
 *
 * keel_tp_parse reads a TensorProto's header (type, dims, name, where the
 * data is) without touching the data. The data is then either used in place
 * (raw_data in a mapping, when aligned) or decoded from the typed repeated
 * fields into memory the caller provides. Every count is checked against
 * the dims: a short or long payload is KEEL_ERR_INVALID_MODEL.
 */
#ifndef KEEL_TENSORPROTO_H
#define KEEL_TENSORPROTO_H

#include "tensor/tensor.h"
#include "onnx/wire.h"

typedef struct keel_tp {
  int32_t dtype;
  int32_t rank;
  int64_t dims[KEEL_MAX_RANK];
  int64_t numel;
  size_t nbytes;                /* numel * element size                   */
  const uint8_t *name;
  size_t name_len;
  keel_pb msg;                  /* the whole message, to rescan typed data */
  const uint8_t *raw;           /* raw_data, when present                  */
  size_t raw_len;
  bool has_raw;
  bool external;                /* data_location == EXTERNAL               */
  const uint8_t *ext_location;  /* external_data "location"                */
  size_t ext_location_len;
  int64_t ext_offset, ext_length; /* -1 when not given                   */
} keel_tp;

KEEL_INTERNAL keel_status keel_tp_parse(keel_pb msg, keel_tp *tp);

/* Copies a string's bytes somewhere that lives long enough (arena or heap);
 * returns NULL on OOM. */
typedef char *(*keel_strdup_fn)(void *ud, const uint8_t *s, size_t n);

/* Decodes the data of a non-external tensor into `dst` (tp->nbytes bytes;
 * for STRING, numel keel_string entries whose bytes come from `sd`). */
KEEL_INTERNAL keel_status keel_tp_decode(const keel_tp *tp, void *dst,
                                         keel_strdup_fn sd, void *sd_ud);

/* A heap tensor holding the TensorProto's data (not for external data). */
KEEL_INTERNAL keel_status keel_tp_to_heap(keel_heap *h, const keel_tp *tp,
                                          keel_tensor *out);

/* Reads a TensorProto / SequenceProto / OptionalProto / MapProto
 * (kind_hint KEEL_KIND_MAP) into a value. */
KEEL_INTERNAL keel_status keel_pb_read_value(keel_heap *h, const void *bytes,
                                             size_t len, int kind_hint,
                                             keel_val *out);

/* The fields of a TensorProto for t (dims, type, name when not NULL, the
 * data as raw_data, or string_data for STRING). */
KEEL_INTERNAL void keel_pb_put_tensor(keel_bytes *b, const keel_tensor *t, const char *name);

/* Encodes a value as TensorProto (tensor), SequenceProto or OptionalProto
 * (empty optional). */
KEEL_INTERNAL keel_status keel_pb_write_value(const keel_val *v,
                                              const char *name, keel_bytes *b);

#endif /* KEEL_TENSORPROTO_H */
