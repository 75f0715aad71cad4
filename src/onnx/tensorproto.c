/* tensorproto.c: reading and writing ONNX TensorProto, SequenceProto and
 * OptionalProto messages (see tensorproto.h). */
#include "onnx/tensorproto.h"

#include <stdlib.h>

#include "base/status.h"

/* TensorProto field numbers */
enum {
  TP_DIMS = 1, TP_DATA_TYPE = 2, TP_SEGMENT = 3, TP_FLOAT = 4, TP_INT32 = 5,
  TP_STRING = 6, TP_INT64 = 7, TP_NAME = 8, TP_RAW = 9, TP_DOUBLE = 10,
  TP_UINT64 = 11, TP_EXTERNAL = 13, TP_LOCATION = 14
};

/* ============================================================ parsing */

static keel_status parse_external_entry(keel_pb e, keel_tp *tp) {
  const uint8_t *key = NULL, *val = NULL;
  size_t klen = 0, vlen = 0;
  while (keel_pb_more(&e)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&e, &f, &wt));
    if (f == 1 || f == 2) {
      KEEL_TRY(keel_pb_get_bytes(&e, wt, "external_data entry", &s));
      if (f == 1) key = s.p, klen = (size_t)(s.end - s.p);
      else val = s.p, vlen = (size_t)(s.end - s.p);
    } else {
      KEEL_TRY(keel_pb_skip(&e, wt));
    }
  }
  if (!key) return KEEL_OK;
  if (klen == 8 && !memcmp(key, "location", 8)) {
    tp->ext_location = val;
    tp->ext_location_len = vlen;
  } else if ((klen == 6 && !memcmp(key, "offset", 6)) ||
             (klen == 6 && !memcmp(key, "length", 6))) {
    char num[32];
    if (vlen == 0 || vlen >= sizeof num)
      return keel_err(KEEL_ERR_INVALID_MODEL, "external_data %.*s: bad number",
                      (int)klen, (const char *)key);
    memcpy(num, val, vlen);
    num[vlen] = 0;
    char *end;
    long long v = strtoll(num, &end, 10);
    if (*end || v < 0)
      return keel_err(KEEL_ERR_INVALID_MODEL, "external_data %.*s: bad number '%s'",
                      (int)klen, (const char *)key, num);
    if (key[0] == 'o') tp->ext_offset = v;
    else tp->ext_length = v;
  }
  return KEEL_OK;
}

static keel_status parse_field(keel_pb *r, uint32_t f, uint32_t wt,
                               keel_tp *tp) {
  keel_pb s;
  int64_t v;
  switch (f) {
    case TP_DIMS:
      if (wt == PB_LEN) { /* packed dims */
        KEEL_TRY(keel_pb_len(r, &s));
        while (keel_pb_more(&s)) {
          uint64_t d;
          KEEL_TRY(keel_pb_varint(&s, &d));
          if (tp->rank == KEEL_MAX_RANK)
            return keel_err(KEEL_ERR_UNSUPPORTED, "tensor rank above %d",
                            KEEL_MAX_RANK);
          tp->dims[tp->rank++] = (int64_t)d;
        }
        return KEEL_OK;
      }
      KEEL_TRY(keel_pb_get_int(r, wt, "dims", &v));
      if (tp->rank == KEEL_MAX_RANK)
        return keel_err(KEEL_ERR_UNSUPPORTED, "tensor rank above %d",
                        KEEL_MAX_RANK);
      tp->dims[tp->rank++] = v;
      return KEEL_OK;
    case TP_DATA_TYPE:
      KEEL_TRY(keel_pb_get_int(r, wt, "data_type", &v));
      tp->dtype = (int32_t)v;
      return KEEL_OK;
    case TP_SEGMENT:
      return keel_err(KEEL_ERR_UNSUPPORTED, "segmented tensors are not supported");
    case TP_NAME:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "name", &s));
      tp->name = s.p;
      tp->name_len = (size_t)(s.end - s.p);
      return KEEL_OK;
    case TP_RAW:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "raw_data", &s));
      tp->raw = s.p;
      tp->raw_len = (size_t)(s.end - s.p);
      tp->has_raw = true;
      return KEEL_OK;
    case TP_EXTERNAL:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "external_data", &s));
      return parse_external_entry(s, tp);
    case TP_LOCATION:
      KEEL_TRY(keel_pb_get_int(r, wt, "data_location", &v));
      tp->external = v == 1;
      return KEEL_OK;
    default:
      return keel_pb_skip(r, wt);
  }
}

static uint32_t typed_field(int dtype);

/* Entries of the typed field: one per element, except for the packed
 * sub-byte types, whose int32_data holds one packed byte per entry (two
 * 4-bit or four 2-bit elements, low bits first). */
static size_t typed_count(const keel_tp *tp) {
  return keel_dtype_is_packed(tp->dtype) ? tp->nbytes : (size_t)tp->numel;
}

/* How many values the typed repeated field of tp's type holds (packed runs
 * and single fields alike), without decoding them. */
static keel_status count_typed(const keel_tp *tp, size_t *n) {
  uint32_t want = typed_field(tp->dtype);
  keel_pb r = tp->msg;
  size_t c = 0;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == want && wt == PB_LEN && f != TP_STRING) {
      keel_pb s;
      size_t k;
      KEEL_TRY(keel_pb_len(&r, &s));
      if (f == TP_FLOAT) k = (size_t)(s.end - s.p) / 4;
      else if (f == TP_DOUBLE) k = (size_t)(s.end - s.p) / 8;
      else KEEL_TRY(keel_pb_count_varints(&s, &k));
      c += k;
      continue;
    }
    if (f == want) c++;
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  *n = c;
  return KEEL_OK;
}

keel_status keel_tp_parse(keel_pb msg, keel_tp *tp) {
  memset(tp, 0, sizeof *tp);
  tp->msg = msg;
  tp->ext_offset = tp->ext_length = -1;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    KEEL_TRY(parse_field(&r, f, wt, tp));
  }
  if (tp->dtype == KEEL_COMPLEX64 || tp->dtype == KEEL_COMPLEX128)
    return keel_err(KEEL_ERR_UNSUPPORTED, "complex tensors are not supported");
  if (!keel_dtype_valid(tp->dtype))
    return keel_err(KEEL_ERR_INVALID_MODEL, "tensor '%.*s' has data_type %d",
                    (int)tp->name_len, (const char *)tp->name, tp->dtype);
  KEEL_TRY(keel_shape_check(tp->dtype, tp->rank, tp->dims, &tp->numel));
  tp->nbytes = keel_dtype_nbytes((keel_dtype)tp->dtype, tp->numel);
  if (tp->has_raw && tp->dtype != KEEL_STRING && tp->raw_len != tp->nbytes)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "tensor '%.*s': raw_data has %zu bytes, its shape needs %zu",
                    (int)tp->name_len, (const char *)tp->name, tp->raw_len,
                    tp->nbytes);
  if (!tp->external && !(tp->has_raw && tp->dtype != KEEL_STRING)) {
    /* typed values: count them before anyone allocates for the shape */
    size_t n;
    KEEL_TRY(count_typed(tp, &n));
    if (n != typed_count(tp))
      return keel_err(KEEL_ERR_INVALID_MODEL, "tensor '%.*s' holds %zu values, its shape needs %zu",
                      (int)tp->name_len, (const char *)tp->name, n, typed_count(tp));
  }
  return KEEL_OK;
}

/* =========================================================== decoding */

/* The typed field that holds `dtype`'s values. */
static uint32_t typed_field(int dtype) {
  switch (dtype) {
    case KEEL_FLOAT: return TP_FLOAT;
    case KEEL_DOUBLE: return TP_DOUBLE;
    case KEEL_INT64: return TP_INT64;
    case KEEL_UINT32: case KEEL_UINT64: return TP_UINT64;
    case KEEL_STRING: return TP_STRING;
    default: return TP_INT32;
  }
}

static void store_int(int dtype, void *dst, size_t i, uint64_t v) {
  switch (dtype) {
    case KEEL_INT8: ((int8_t *)dst)[i] = (int8_t)v; break;
    case KEEL_UINT8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    case KEEL_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
    case KEEL_INT16: ((int16_t *)dst)[i] = (int16_t)v; break;
    case KEEL_UINT16: case KEEL_FLOAT16: case KEEL_BFLOAT16:
      ((uint16_t *)dst)[i] = (uint16_t)v; break;
    case KEEL_INT32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case KEEL_UINT32: ((uint32_t *)dst)[i] = (uint32_t)v; break;
    case KEEL_INT64: case KEEL_UINT64: ((uint64_t *)dst)[i] = v; break;
    default: ((uint8_t *)dst)[i] = (uint8_t)v; break; /* float8 codes; packed bytes */
  }
}

/* Reads one element of `f` (wire type `wt`) into dst[i]. */
static keel_status decode_one(keel_pb *r, uint32_t f, uint32_t wt,
                              const keel_tp *tp, void *dst, size_t i,
                              keel_strdup_fn sd, void *sd_ud) {
  if (f == TP_STRING) {
    keel_pb s;
    KEEL_TRY(keel_pb_get_bytes(r, wt, "string_data", &s));
    keel_string *e = (keel_string *)dst + i;
    e->len = (size_t)(s.end - s.p);
    e->data = sd(sd_ud, s.p, e->len);
    if (!e->data) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "string of %zu bytes", e->len);
    return KEEL_OK;
  }
  if (f == TP_FLOAT) {
    float v;
    KEEL_TRY(keel_pb_get_float(r, wt, "float_data", &v));
    ((float *)dst)[i] = v;
    return KEEL_OK;
  }
  if (f == TP_DOUBLE) {
    if (wt != PB_FIXED64)
      return keel_err(KEEL_ERR_INVALID_MODEL, "double_data has wire type %u", wt);
    uint64_t u;
    KEEL_TRY(keel_pb_fixed64(r, &u));
    memcpy((double *)dst + i, &u, 8);
    return KEEL_OK;
  }
  uint64_t u;
  if (wt != PB_VARINT)
    return keel_err(KEEL_ERR_INVALID_MODEL, "integer data has wire type %u", wt);
  KEEL_TRY(keel_pb_varint(r, &u));
  store_int(tp->dtype, dst, i, u);
  return KEEL_OK;
}

static keel_status decode_typed(const keel_tp *tp, void *dst, keel_strdup_fn sd,
                                void *sd_ud) {
  uint32_t want = typed_field(tp->dtype);
  size_t n = 0, total = typed_count(tp);
  keel_pb r = tp->msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f != want) {
      KEEL_TRY(keel_pb_skip(&r, wt));
      continue;
    }
    if (wt == PB_LEN && f != TP_STRING) { /* packed run */
      keel_pb s;
      KEEL_TRY(keel_pb_len(&r, &s));
      uint32_t ewt = f == TP_FLOAT ? PB_FIXED32 : f == TP_DOUBLE ? PB_FIXED64 : PB_VARINT;
      while (keel_pb_more(&s)) {
        if (n == total) goto too_many;
        KEEL_TRY(decode_one(&s, f, ewt, tp, dst, n++, sd, sd_ud));
      }
      continue;
    }
    if (n == total) goto too_many;
    KEEL_TRY(decode_one(&r, f, wt, tp, dst, n++, sd, sd_ud));
  }
  if (n != total)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "tensor '%.*s' holds %zu values, its shape needs %zu",
                    (int)tp->name_len, (const char *)tp->name, n, total);
  return KEEL_OK;
too_many:
  return keel_err(KEEL_ERR_INVALID_MODEL,
                  "tensor '%.*s' holds more values than its shape (%zu)",
                  (int)tp->name_len, (const char *)tp->name, total);
}

keel_status keel_tp_decode(const keel_tp *tp, void *dst, keel_strdup_fn sd,
                           void *sd_ud) {
  if (tp->external)
    return keel_err(KEEL_ERR_INTERNAL, "external tensor decoded as inline");
  if (tp->has_raw && tp->dtype != KEEL_STRING) {
    if (tp->nbytes) memcpy(dst, tp->raw, tp->nbytes);
    return KEEL_OK;
  }
  return decode_typed(tp, dst, sd, sd_ud);
}

/* ----------------------------------------------------- heap tensors */

typedef struct heap_strdup {
  keel_heap *h;
} heap_strdup;

static char *strdup_heap(void *ud, const uint8_t *s, size_t n) {
  keel_heap *h = ud;
  char *p = keel_heap_meta_realloc(h, NULL, 0, n + 1);
  if (p) {
    if (n) memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

keel_status keel_tp_to_heap(keel_heap *h, const keel_tp *tp, keel_tensor *out) {
  if (tp->external)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "tensor '%.*s' has external data; load it through a model",
                    (int)tp->name_len, (const char *)tp->name);
  keel_tensor t;
  KEEL_TRY(keel_tensor_alloc(h, tp->dtype, tp->rank, tp->dims, (keel_owner){0}, &t));
  keel_status st = t.data ? keel_tp_decode(tp, t.data, strdup_heap, h) : KEEL_OK;
  if (st) {
    keel_tensor_release(&t);
    return st;
  }
  *out = t;
  return KEEL_OK;
}

/* ========================================== sequences and optionals */

enum { ELEM_UNDEFINED = 0, ELEM_TENSOR = 1, ELEM_SPARSE = 2, ELEM_SEQUENCE = 3,
       ELEM_MAP = 4, ELEM_OPTIONAL = 5 };

static keel_status read_tensor_msg(keel_heap *h, keel_pb msg, keel_tensor *t) {
  keel_tp tp;
  KEEL_TRY(keel_tp_parse(msg, &tp));
  return keel_tp_to_heap(h, &tp, t);
}

/* ---------------------------------------------------------------- maps */

/* A MapProto's fields: key type, the key runs (int64, packed or not, or
 * strings) and the values (a SequenceProto of tensors, one element each
 * as ONNX writes them, or longer tensors whose elements are concatenated). */
typedef struct map_msg {
  int64_t key_type;
  size_t n_keys;
  keel_pb values;
  bool has_values;
} map_msg;

static keel_status map_scan(keel_pb r, map_msg *mm) {
  memset(mm, 0, sizeof *mm);
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb sub;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 2) {
      KEEL_TRY(keel_pb_get_int(&r, wt, "key_type", &mm->key_type));
    } else if (f == 3 && wt == PB_LEN) {
      size_t n;
      KEEL_TRY(keel_pb_len(&r, &sub));
      KEEL_TRY(keel_pb_count_varints(&sub, &n));
      mm->n_keys += n;
    } else if (f == 3 || f == 4) {
      KEEL_TRY(f == 3 ? keel_pb_skip(&r, wt) : keel_pb_get_bytes(&r, wt, "string_keys", &sub));
      mm->n_keys++;
    } else if (f == 5) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "values", &mm->values));
      mm->has_values = true;
    } else {
      KEEL_TRY(keel_pb_skip(&r, wt));
    }
  }
  if (mm->key_type != KEEL_INT64 && mm->key_type != KEEL_STRING)
    return keel_err(KEEL_ERR_UNSUPPORTED, "map keys of type %lld (keel reads int64 and string keys)",
                    (long long)mm->key_type);
  return KEEL_OK;
}

/* The value type and count of the values sequence. */
static keel_status map_values_scan(keel_pb r, int32_t *dtype, int64_t *n) {
  keel_pb sub;
  int got;
  *dtype = KEEL_UNDEFINED;
  *n = 0;
  while ((got = keel_pb_next(&r, 3, "tensor_values", &sub)) > 0) {
    keel_tp tp;
    KEEL_TRY(keel_tp_parse(sub, &tp));
    if (*dtype != KEEL_UNDEFINED && tp.dtype != *dtype)
      return keel_err(KEEL_ERR_INVALID_MODEL, "map values mix %s and %s", keel_dtype_name((keel_dtype)*dtype),
                      keel_dtype_name((keel_dtype)tp.dtype));
    *dtype = tp.dtype;
    *n += tp.numel;
  }
  return got < 0 ? (keel_status)got : KEEL_OK;
}

static keel_status map_fill_keys(keel_pb r, keel_map *m) {
  int64_t at = 0;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb sub;
    uint64_t v;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 3 && m->keys.dtype == KEEL_INT64 && wt == PB_LEN) {
      KEEL_TRY(keel_pb_len(&r, &sub));
      while (keel_pb_more(&sub)) {
        KEEL_TRY(keel_pb_varint(&sub, &v));
        ((int64_t *)m->keys.data)[at++] = (int64_t)v;
      }
    } else if (f == 3 && m->keys.dtype == KEEL_INT64) {
      KEEL_TRY(keel_pb_varint(&r, &v));
      ((int64_t *)m->keys.data)[at++] = (int64_t)v;
    } else if (f == 4 && m->keys.dtype == KEEL_STRING) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "string_keys", &sub));
      KEEL_TRY(keel_tensor_set_string(&m->keys, (size_t)at++, (const char *)sub.p, (size_t)(sub.end - sub.p)));
    } else if (f == 3 || f == 4) {
      return keel_err(KEEL_ERR_INVALID_MODEL, "map keys do not match key_type %s",
                      keel_dtype_name((keel_dtype)m->keys.dtype));
    } else {
      KEEL_TRY(keel_pb_skip(&r, wt));
    }
  }
  return KEEL_OK;
}

static keel_status map_fill_values(keel_heap *h, keel_pb r, keel_map *m) {
  keel_pb sub;
  int got;
  int64_t at = 0;
  while ((got = keel_pb_next(&r, 3, "tensor_values", &sub)) > 0) {
    keel_tensor t;
    KEEL_TRY(read_tensor_msg(h, sub, &t));
    int64_t n = keel_tensor_numel(&t);
    keel_status st = n ? keel_tensor_copy_elems(&m->values, at, &t, 0, n) : KEEL_OK;
    keel_tensor_release(&t);
    KEEL_TRY(st);
    at += n;
  }
  return got < 0 ? (keel_status)got : KEEL_OK;
}

static keel_status read_map(keel_heap *h, keel_pb r, keel_map **out) {
  map_msg mm;
  KEEL_TRY(map_scan(r, &mm));
  int32_t vt = KEEL_FLOAT;
  int64_t nv = 0;
  if (mm.has_values) KEEL_TRY(map_values_scan(mm.values, &vt, &nv));
  if (vt == KEEL_UNDEFINED) vt = KEEL_FLOAT;
  if ((int64_t)mm.n_keys != nv)
    return keel_err(KEEL_ERR_INVALID_MODEL, "map has %zu keys but %lld values", mm.n_keys, (long long)nv);
  keel_map *m;
  KEEL_TRY(keel_map_new(h, (int)mm.key_type, vt, nv, (keel_owner){0}, &m));
  keel_status st = map_fill_keys(r, m);
  if (!st && mm.has_values) st = map_fill_values(h, mm.values, m);
  if (st) {
    keel_map_release(m);
    return st;
  }
  *out = m;
  return KEEL_OK;
}

/* SequenceProto whose elements are MapProtos (elem_type MAP). */
static keel_status read_map_sequence(keel_heap *h, keel_pb r, keel_val *out) {
  keel_seq *s;
  KEEL_TRY(keel_seq_new_maps(h, KEEL_UNDEFINED, KEEL_UNDEFINED, 0, &s));
  keel_pb sub;
  int got;
  keel_status st = KEEL_OK;
  while (!st && (got = keel_pb_next(&r, 6, "map_values", &sub)) > 0) {
    keel_map *m;
    if ((st = read_map(h, sub, &m))) break;
    if (s->n && (m->keys.dtype != s->map_key || m->values.dtype != s->elem_dtype))
      st = keel_err(KEEL_ERR_INVALID_MODEL, "sequence element %zu is a map of other types", s->n);
    s->map_key = m->keys.dtype, s->elem_dtype = m->values.dtype;
    if (!st) st = keel_seq_push_map(s, m);
    if (st) keel_map_release(m);
  }
  if (!st && got < 0) st = (keel_status)got;
  if (st) {
    keel_seq_release(s);
    return st;
  }
  out->kind = KEEL_V_SEQUENCE;
  out->seq = s;
  return KEEL_OK;
}

/* elem_type of a SequenceProto (MAP also when only map_values appear). */
static keel_status seq_elem_type(keel_pb r, int64_t *et) {
  *et = ELEM_UNDEFINED;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 2) KEEL_TRY(keel_pb_get_int(&r, wt, "elem_type", et));
    else {
      if (f == 6 && *et == ELEM_UNDEFINED) *et = ELEM_MAP;
      KEEL_TRY(keel_pb_skip(&r, wt));
    }
  }
  return KEEL_OK;
}

static keel_status read_sequence(keel_heap *h, keel_pb r, keel_val *out) {
  int64_t et;
  KEEL_TRY(seq_elem_type(r, &et));
  if (et == ELEM_MAP) return read_map_sequence(h, r, out);
  keel_seq *s;
  KEEL_TRY(keel_seq_new(h, KEEL_UNDEFINED, 0, &s));
  keel_status st = KEEL_OK;
  while (st == KEEL_OK && keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb sub;
    if ((st = keel_pb_tag(&r, &f, &wt))) break;
    if (f == 3) {
      keel_tensor t;
      if ((st = keel_pb_get_bytes(&r, wt, "tensor_values", &sub))) break;
      if ((st = read_tensor_msg(h, sub, &t))) break;
      if ((st = keel_seq_insert(s, s->n, &t))) keel_tensor_release(&t);
    } else if (f >= 4 && f <= 7) {
      st = keel_err(KEEL_ERR_UNSUPPORTED,
                    "sequences of non-tensors are not supported");
    } else {
      st = keel_pb_skip(&r, wt);
    }
  }
  if (st) {
    keel_seq_release(s);
    return st;
  }
  out->kind = KEEL_V_SEQUENCE;
  out->seq = s;
  return KEEL_OK;
}

static keel_status read_optional(keel_heap *h, keel_pb r, keel_val *out) {
  keel_val v = {.kind = KEEL_V_NONE};
  keel_status st = KEEL_OK;
  while (st == KEEL_OK && keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb sub;
    if ((st = keel_pb_tag(&r, &f, &wt))) break;
    if (f == 3 || f == 5) {
      if ((st = keel_pb_get_bytes(&r, wt, "optional value", &sub))) break;
      keel_val_clear(&v);
      if (f == 3) {
        st = read_tensor_msg(h, sub, &v.t);
        v.kind = st ? KEEL_V_NONE : KEEL_V_TENSOR;
      } else {
        st = read_sequence(h, sub, &v);
      }
    } else if (f == 4 || f == 6 || f == 7) {
      st = keel_err(KEEL_ERR_UNSUPPORTED, "optional of this element type");
    } else {
      st = keel_pb_skip(&r, wt);
    }
  }
  if (st) {
    keel_val_clear(&v);
    return st;
  }
  *out = v;
  return KEEL_OK;
}

keel_status keel_pb_read_value(keel_heap *h, const void *bytes, size_t len,
                               int kind_hint, keel_val *out) {
  keel_pb r = keel_pb_open(bytes, len);
  if (kind_hint == KEEL_KIND_SEQUENCE) return read_sequence(h, r, out);
  if (kind_hint == KEEL_KIND_NONE) return read_optional(h, r, out);
  if (kind_hint == KEEL_KIND_MAP) {
    KEEL_TRY(read_map(h, r, &out->map));
    out->kind = KEEL_V_MAP;
    return KEEL_OK;
  }
  KEEL_TRY(read_tensor_msg(h, r, &out->t));
  out->kind = KEEL_V_TENSOR;
  return KEEL_OK;
}

/* =========================================================== encoding */

void keel_pb_put_tensor(keel_bytes *b, const keel_tensor *t, const char *name) {
  for (int i = 0; i < t->rank; i++) {
    keel_pbw_tag(b, TP_DIMS, PB_VARINT);
    keel_pbw_varint(b, (uint64_t)t->shape[i]);
  }
  keel_pbw_tag(b, TP_DATA_TYPE, PB_VARINT);
  keel_pbw_varint(b, (uint64_t)t->dtype);
  if (name) keel_pbw_len(b, TP_NAME, name, strlen(name));
  if (t->dtype == KEEL_STRING) {
    const keel_string *s = t->data;
    for (int64_t i = 0; i < keel_tensor_numel(t); i++)
      keel_pbw_len(b, TP_STRING, s[i].data, s[i].len);
  } else {
    keel_pbw_len(b, TP_RAW, t->data, keel_tensor_nbytes(t));
  }
}

/* Writes a nested message: field f, then the bytes `fill` produced. */
static void put_tensor_field(keel_bytes *b, uint32_t f, const keel_tensor *t) {
  keel_bytes inner = {0};
  keel_pb_put_tensor(&inner, t, NULL);
  if (inner.failed) b->failed = true;
  else keel_pbw_len(b, f, inner.p, inner.len);
  free(inner.p);
}

/* MapProto: keys packed (int64) or one string_keys entry each; values a
 * SequenceProto of scalar tensors, as onnx.numpy_helper.from_dict writes. */
static void write_map(const keel_map *m, const char *name, keel_bytes *b) {
  if (name) keel_pbw_len(b, 1, name, strlen(name));
  keel_pbw_tag(b, 2, PB_VARINT);
  keel_pbw_varint(b, (uint64_t)m->keys.dtype);
  int64_t n = keel_map_len(m);
  if (m->keys.dtype == KEEL_INT64 && n > 0) {
    keel_bytes packed = {0};
    for (int64_t i = 0; i < n; i++) keel_pbw_varint(&packed, (uint64_t)((const int64_t *)m->keys.data)[i]);
    if (packed.failed) b->failed = true;
    else keel_pbw_len(b, 3, packed.p, packed.len);
    free(packed.p);
  } else {
    const keel_string *k = m->keys.data;
    for (int64_t i = 0; i < n; i++) keel_pbw_len(b, 4, k[i].data, k[i].len);
  }
  keel_bytes seq = {0};
  keel_pbw_tag(&seq, 2, PB_VARINT);
  keel_pbw_varint(&seq, ELEM_TENSOR);
  size_t es = keel_dtype_size((keel_dtype)m->values.dtype);
  for (int64_t i = 0; i < n; i++) {
    keel_tensor one = {NULL, (uint8_t *)m->values.data + (size_t)i * es, m->values.dtype, 0, {0}};
    put_tensor_field(&seq, 3, &one);
  }
  if (seq.failed) b->failed = true;
  else keel_pbw_len(b, 5, seq.p, seq.len);
  free(seq.p);
}

static void put_map_field(keel_bytes *b, uint32_t f, const keel_map *m) {
  keel_bytes inner = {0};
  write_map(m, NULL, &inner);
  if (inner.failed) b->failed = true;
  else keel_pbw_len(b, f, inner.p, inner.len);
  free(inner.p);
}

static void write_sequence(const keel_seq *s, const char *name, keel_bytes *b) {
  if (name) keel_pbw_len(b, 1, name, strlen(name));
  if (s->of_maps) {
    keel_pbw_tag(b, 2, PB_VARINT);
    keel_pbw_varint(b, ELEM_MAP);
    for (size_t i = 0; i < s->n; i++) put_map_field(b, 6, s->maps[i]);
    return;
  }
  keel_pbw_tag(b, 2, PB_VARINT);
  keel_pbw_varint(b, ELEM_TENSOR);
  for (size_t i = 0; i < s->n; i++) put_tensor_field(b, 3, &s->items[i]);
}

keel_status keel_pb_write_value(const keel_val *v, const char *name,
                                keel_bytes *b) {
  if (v->kind == KEEL_V_TENSOR) {
    keel_pb_put_tensor(b, &v->t, name);
  } else if (v->kind == KEEL_V_SEQUENCE) {
    write_sequence(v->seq, name, b);
  } else if (v->kind == KEEL_V_MAP) {
    write_map(v->map, name, b);
  } else if (v->kind == KEEL_V_NONE) {
    if (name) keel_pbw_len(b, 1, name, strlen(name));
    keel_pbw_tag(b, 2, PB_VARINT);
    keel_pbw_varint(b, ELEM_UNDEFINED);
  } else {
    return keel_err(KEEL_ERR_INVALID_ARG, "cannot serialize an empty value");
  }
  if (b->failed) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "serializing '%s'", name ? name : "");
  return KEEL_OK;
}
