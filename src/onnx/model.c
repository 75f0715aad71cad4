/* model.c: ONNX ModelProto -> keel IR.
 *
 * The file is mapped, never read into a buffer; names and attributes are
 * copied into the model's arena, initializer bytes stay in the mapping when
 * they are aligned for their element type (else they are copied once, and
 * counted in weight_bytes_copied). External data files are mapped the same
 * way. Every length, count and offset is checked; a bad file gives
 * KEEL_ERR_INVALID_MODEL with the path of what was being read
 * ("graph 'main': node 4 'Conv_3' (Conv): attribute 'pads': truncated varint
 * at byte 1234").
 *
 * This pass keeps value names; ir/scope.c then turns them into slots and
 * refs. Constant nodes are folded into model constants here: their value is
 * data in the file, like an initializer.
 */
#include "onnx/onnx.h"

#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "onnx/tensorproto.h"

typedef struct keel_ext_file {
  const char *location;
  keel_mapping map;
} keel_ext_file;

typedef struct named_const {
  keel_tensor t;
  const char *name;
} named_const;

/* A model-local function (ModelProto.functions), parsed once and
 * instantiated at every node that calls it. */
typedef struct fn_def {
  const char *domain, *name;
  int32_t n_in, n_out, n_body, n_defaults, n_opsets;
  const char **in, **out;
  keel_node *body;
  keel_attr *defaults;         /* attribute_proto: defaults by name       */
  keel_opset *opsets;
} fn_def;

typedef struct loader {
  keel_model *m;
  keel_arena *a;
  /* model-local functions: their messages, then their definitions */
  keel_pb *fn_msg;
  int32_t n_fn, cap_fn;
  fn_def *fns;
  const fn_def *parsing_fn;    /* set while a function body is parsed     */
  int32_t counter;             /* unique prefixes for inlined values      */
  /* constants and graphs grow here, then move to the arena */
  named_const *consts;
  int32_t n_consts, cap_consts;
  keel_graph **graphs;
  int32_t n_graphs, cap_graphs;
  int32_t n_ext, cap_ext;
  keel_ext_file *ext;
} loader;

static keel_status graph_parse(loader *L, keel_pb msg, keel_node *owner,
                               const char *owner_attr, keel_graph **out);

static keel_status oom(const char *what) {
  return keel_err(KEEL_ERR_OUT_OF_MEMORY, "out of memory while loading %s", what);
}

static const char *dup_bytes(loader *L, keel_pb s) {
  return keel_arena_strndup(L->a, (const char *)s.p, (size_t)(s.end - s.p));
}

/* Grows a load-time array (sys memory) to hold at least n+1 items. */
static bool grow(void **p, int32_t *cap, int32_t n, size_t item) {
  if (n < *cap) return true;
  int32_t nc = *cap ? *cap * 2 : 16;
  if (nc < *cap) return false;
  void *q = keel_sys_realloc(*p, (size_t)*cap * item, (size_t)nc * item);
  if (!q) return false;
  *p = q;
  *cap = nc;
  return true;
}

/* ============================================================ tensors */

static char *strdup_arena(void *ud, const uint8_t *s, size_t n) {
  return keel_arena_strndup(ud, (const char *)s, n);
}

static keel_status map_external(loader *L, const keel_tp *tp,
                                const uint8_t **data) {
  if (!tp->ext_location)
    return keel_err(KEEL_ERR_INVALID_MODEL, "external data without a location");
  char loc[1024];
  if (tp->ext_location_len == 0 || tp->ext_location_len >= sizeof loc)
    return keel_err(KEEL_ERR_INVALID_MODEL, "external data location is empty or too long");
  memcpy(loc, tp->ext_location, tp->ext_location_len);
  loc[tp->ext_location_len] = 0;
  if (memchr(loc, 0, tp->ext_location_len) || loc[0] == '/' || strstr(loc, ".."))
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "external data location '%s' must be a relative path inside "
                    "the model's folder",
                    loc);
  if (!L->m->base_dir)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "external data '%s' needs the model's folder (none given)", loc);
  keel_ext_file *f = NULL;
  for (int32_t i = 0; i < L->n_ext; i++)
    if (!strcmp(L->ext[i].location, loc)) f = &L->ext[i];
  if (!f) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", L->m->base_dir, loc);
    if (!grow((void **)&L->ext, &L->cap_ext, L->n_ext, sizeof *L->ext))
      return oom("external data");
    keel_mapping map;
    KEEL_TRY(keel_prim_map_file(path, &map));
    f = &L->ext[L->n_ext++];
    f->map = map;
    f->location = keel_arena_strdup(L->a, loc);
    if (!f->location) return oom("external data");
  }
  int64_t off = tp->ext_offset < 0 ? 0 : tp->ext_offset;
  int64_t len = tp->ext_length < 0 ? (int64_t)tp->nbytes : tp->ext_length;
  if ((uint64_t)len != tp->nbytes)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "external data '%s': length %lld, the tensor needs %zu bytes",
                    loc, (long long)len, tp->nbytes);
  if ((uint64_t)off > f->map.size || (uint64_t)len > f->map.size - (uint64_t)off)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "external data '%s': bytes %lld..%lld lie past its end (%zu bytes)",
                    loc, (long long)off, (long long)(off + len), f->map.size);
  *data = f->map.addr + off;
  return KEEL_OK;
}

static keel_buffer *static_buffer(loader *L, void *data, size_t nbytes) {
  return keel_ir_static_buffer(L->a, data, nbytes);
}

/* A STATIC tensor for an initializer or attribute: zero-copy when the bytes
 * are raw and aligned, decoded into the arena otherwise. */
static bool in_mapping(const loader *L, const void *p);

static keel_status static_tensor(loader *L, keel_pb msg, keel_tensor *out,
                                 const char **name) {
  keel_tp tp;
  KEEL_TRY(keel_tp_parse(msg, &tp));
  if (name) {
    *name = keel_arena_strndup(L->a, (const char *)tp.name, tp.name_len);
    if (!*name) return oom("a tensor name");
  }
  size_t esize = keel_dtype_size((keel_dtype)tp.dtype);
  if (esize == 0) esize = 1; /* packed sub-byte types: any byte address */
  const uint8_t *src = NULL;
  if (tp.external) {
    if (tp.dtype == KEEL_STRING)
      return keel_err(KEEL_ERR_UNSUPPORTED, "external STRING tensors");
    KEEL_TRY(map_external(L, &tp, &src));
  } else if (tp.has_raw && tp.dtype != KEEL_STRING) {
    src = tp.raw;
  }
  void *data = NULL;
  if (tp.numel > 0) {
    if (src && (uintptr_t)src % esize == 0) {
      data = (void *)(uintptr_t)src; /* stays in the mapping: no copy */
    } else {
      data = keel_arena_alloc(L->a, tp.nbytes, KEEL_ALIGN);
      if (!data) return oom("tensor data");
      if (src) memcpy(data, src, tp.nbytes);
      else KEEL_TRY(keel_tp_decode(&tp, data, strdup_arena, L->a));
      /* the copy is what keel reads from now on: the file's pages under
       * it go back (a later read would fault them in again from the file) */
      if (src && in_mapping(L, src)) keel_prim_drop_pages(src, tp.nbytes);
    }
  }
  keel_buffer *b = static_buffer(L, data, tp.nbytes);
  if (!b) return oom("tensor header");
  /* raw bytes copied for alignment: where they lie in the file, so that a
   * trainer that copies the tensor again can give both back */
  if (src && data != src) b->ud = (void *)(uintptr_t)src;
  keel_tensor t = {.buf = data ? b : NULL, .data = data, .dtype = tp.dtype,
                   .rank = tp.rank};
  memcpy(t.shape, tp.dims, sizeof(int64_t) * (size_t)tp.rank);
  *out = t;
  return KEEL_OK;
}

/* SparseTensorProto -> dense STATIC tensor in the arena. */
static keel_status sparse_tensor(loader *L, keel_pb msg, keel_tensor *out,
                                 const char **name) {
  keel_pb values = {0}, indices = {0};
  int64_t dims[KEEL_MAX_RANK];
  int rank = 0;
  bool have_v = false, have_i = false;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    int64_t v;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "values", &values));
      have_v = true;
    } else if (f == 2) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "indices", &indices));
      have_i = true;
    } else if (f == 3) {
      KEEL_TRY(keel_pb_get_int(&r, wt, "dims", &v));
      if (rank == KEEL_MAX_RANK) return keel_err(KEEL_ERR_UNSUPPORTED, "sparse rank");
      dims[rank++] = v;
    } else KEEL_TRY(keel_pb_skip(&r, wt));
  }
  if (!have_v || !have_i)
    return keel_err(KEEL_ERR_INVALID_MODEL, "sparse tensor without values or indices");
  keel_tensor vals, idx;
  KEEL_TRY(static_tensor(L, values, &vals, name));
  KEEL_TRY(static_tensor(L, indices, &idx, NULL));
  int64_t numel;
  KEEL_TRY(keel_shape_check(vals.dtype, rank, dims, &numel));
  if (keel_dtype_is_packed(vals.dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "sparse tensors of %s (a packed sub-byte type)",
                    keel_dtype_name((keel_dtype)vals.dtype));
  size_t es = keel_dtype_size((keel_dtype)vals.dtype);
  int64_t nnz = keel_tensor_numel(&vals);
  bool coo = idx.rank == 2;
  if (idx.dtype != KEEL_INT64 || vals.rank != 1 ||
      (coo ? (idx.shape[0] != nnz || idx.shape[1] != rank)
           : (idx.rank != 1 || idx.shape[0] != nnz)))
    return keel_err(KEEL_ERR_INVALID_MODEL, "sparse tensor indices do not fit its values");
  uint8_t *data = keel_arena_alloc(L->a, (size_t)numel * es + 1, KEEL_ALIGN);
  if (!data) return oom("sparse tensor");
  const int64_t *ix = idx.data;
  for (int64_t k = 0; k < nnz; k++) {
    int64_t lin = 0;
    if (coo) {
      for (int d = 0; d < rank; d++) {
        int64_t c = ix[k * rank + d];
        if (c < 0 || c >= dims[d]) goto bad_index;
        lin = lin * dims[d] + c;
      }
    } else {
      lin = ix[k];
      if (lin < 0 || lin >= numel) goto bad_index;
    }
    memcpy(data + (size_t)lin * es, (const uint8_t *)vals.data + (size_t)k * es, es);
  }
  keel_buffer *b = static_buffer(L, data, (size_t)numel * es);
  if (!b) return oom("tensor header");
  keel_tensor t = {.buf = numel ? b : NULL, .data = numel ? data : NULL,
                   .dtype = vals.dtype, .rank = rank};
  memcpy(t.shape, dims, sizeof(int64_t) * (size_t)rank);
  *out = t;
  return KEEL_OK;
bad_index:
  return keel_err(KEEL_ERR_INVALID_MODEL, "sparse tensor index out of range");
}

static keel_status add_const(loader *L, const keel_tensor *t, const char *name,
                             int32_t *index) {
  if (L->n_consts >= (int32_t)KEEL_REF_MAX_CONST)
    return keel_err(KEEL_ERR_UNSUPPORTED, "too many constants");
  if (!grow((void **)&L->consts, &L->cap_consts, L->n_consts, sizeof *L->consts))
    return oom("constants");
  L->consts[L->n_consts] = (named_const){*t, name};
  *index = L->n_consts++;
  return KEEL_OK;
}

/* ============================================================== types */

static keel_status type_parse(loader *L, keel_pb msg, keel_type *t);

static keel_status shape_parse(loader *L, keel_pb msg, keel_type *t) {
  int32_t n = 0;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) n++;
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  t->rank = n;
  t->dims = keel_arena_array(L->a, (size_t)n, sizeof(int64_t));
  t->dim_params = keel_arena_array(L->a, (size_t)n, sizeof(char *));
  if (!t->dims || !t->dim_params) return oom("a shape");
  r = msg;
  keel_pb d;
  int got;
  for (int32_t i = 0; (got = keel_pb_next(&r, 1, "dim", &d)) > 0;) {
    t->dims[i] = -1;
    while (keel_pb_more(&d)) {
      uint32_t df, dwt;
      keel_pb s;
      KEEL_TRY(keel_pb_tag(&d, &df, &dwt));
      if (df == 1) KEEL_TRY(keel_pb_get_int(&d, dwt, "dim_value", &t->dims[i]));
      else if (df == 2) {
        KEEL_TRY(keel_pb_get_bytes(&d, dwt, "dim_param", &s));
        if (!(t->dim_params[i] = dup_bytes(L, s))) return oom("a shape");
      } else KEEL_TRY(keel_pb_skip(&d, dwt));
    }
    i++;
  }
  return got < 0 ? (keel_status)got : KEEL_OK;
}

static keel_status tensor_type_parse(loader *L, keel_pb msg, keel_type *t) {
  keel_pb r = msg;
  t->rank = -1;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    int64_t v;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      KEEL_TRY(keel_pb_get_int(&r, wt, "elem_type", &v));
      t->dtype = (int32_t)v;
    } else if (f == 2) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "shape", &s));
      KEEL_TRY(shape_parse(L, s, t));
    } else KEEL_TRY(keel_pb_skip(&r, wt));
  }
  return KEEL_OK;
}

/* sequence_type / optional_type: one nested TypeProto in field 1. */
static keel_status elem_type_parse(loader *L, keel_pb msg, keel_type *t) {
  keel_pb r = msg, s;
  int got;
  while ((got = keel_pb_next(&r, 1, "elem_type", &s)) > 0) {
    t->elem = keel_arena_alloc(L->a, sizeof *t->elem, 8);
    if (!t->elem) return oom("a type");
    KEEL_TRY(type_parse(L, s, t->elem));
    t->dtype = t->elem->dtype;
    t->rank = t->elem->rank;
  }
  return got < 0 ? (keel_status)got : KEEL_OK;
}

/* map_type: key_type (field 1) and value_type (field 2, a TypeProto). */
static keel_status map_type_parse(loader *L, keel_pb msg, keel_type *t) {
  keel_pb r = msg, s;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      int64_t kt;
      KEEL_TRY(keel_pb_get_int(&r, wt, "key_type", &kt));
      t->key_dtype = (int32_t)kt;
    } else if (f == 2) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "value_type", &s));
      t->elem = keel_arena_alloc(L->a, sizeof *t->elem, 8);
      if (!t->elem) return oom("a type");
      KEEL_TRY(type_parse(L, s, t->elem));
      t->dtype = t->elem->dtype;
    } else KEEL_TRY(keel_pb_skip(&r, wt));
  }
  return KEEL_OK;
}

static keel_status type_parse(loader *L, keel_pb msg, keel_type *t) {
  memset(t, 0, sizeof *t);
  t->rank = -1;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    switch (f) {
      case 1: t->kind = KEEL_TYPE_TENSOR; break;
      case 4: t->kind = KEEL_TYPE_SEQUENCE; break;
      case 5: t->kind = KEEL_TYPE_MAP; break;
      case 8: t->kind = KEEL_TYPE_SPARSE; break;
      case 9: t->kind = KEEL_TYPE_OPTIONAL; break;
      default: KEEL_TRY(keel_pb_skip(&r, wt)); continue;
    }
    KEEL_TRY(keel_pb_get_bytes(&r, wt, "type", &s));
    if (f == 1 || f == 8) KEEL_TRY(tensor_type_parse(L, s, t));
    else if (f == 4 || f == 9) KEEL_TRY(elem_type_parse(L, s, t));
    else if (f == 5) KEEL_TRY(map_type_parse(L, s, t));
  }
  return KEEL_OK;
}

/* ValueInfoProto: name and type. */
static keel_status value_info_parse(loader *L, keel_pb msg, const char **name,
                                    keel_type *t) {
  keel_pb r = msg;
  memset(t, 0, sizeof *t);
  t->rank = -1;
  *name = "";
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "name", &s));
      if (!(*name = dup_bytes(L, s))) return oom("a name");
    } else if (f == 2) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "type", &s));
      KEEL_TRY(type_parse(L, s, t));
    } else KEEL_TRY(keel_pb_skip(&r, wt));
  }
  return KEEL_OK;
}

/* ========================================================= attributes */

/* Counts the elements of repeated field `field` (packed or not). */
static keel_status count_repeated(keel_pb msg, uint32_t field, int32_t *n) {
  size_t c = 0;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == field && wt == PB_LEN && (field == 7 || field == 8)) {
      keel_pb s;
      size_t k;
      KEEL_TRY(keel_pb_len(&r, &s));
      if (field == 7) k = (size_t)(s.end - s.p) / 4;
      else KEEL_TRY(keel_pb_count_varints(&s, &k));
      c += k;
      continue;
    }
    if (f == field) c++;
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  if (c > INT32_MAX) return keel_err(KEEL_ERR_INVALID_MODEL, "list too long");
  *n = (int32_t)c;
  return KEEL_OK;
}

static keel_status attr_alloc_lists(loader *L, keel_pb msg, keel_attr *at) {
  int32_t nf, ni, ns, nt, ng, nsp;
  KEEL_TRY(count_repeated(msg, 7, &nf));
  KEEL_TRY(count_repeated(msg, 8, &ni));
  KEEL_TRY(count_repeated(msg, 9, &ns));
  KEEL_TRY(count_repeated(msg, 10, &nt));
  KEEL_TRY(count_repeated(msg, 11, &ng));
  KEEL_TRY(count_repeated(msg, 23, &nsp));
  at->floats = keel_arena_array(L->a, (size_t)nf, sizeof(float));
  at->ints = keel_arena_array(L->a, (size_t)ni, sizeof(int64_t));
  at->strings = keel_arena_array(L->a, (size_t)ns, sizeof(char *));
  at->string_lens = keel_arena_array(L->a, (size_t)ns, sizeof(size_t));
  at->tensors = keel_arena_array(L->a, (size_t)(nt + nsp), sizeof(keel_tensor));
  at->graphs = keel_arena_array(L->a, (size_t)ng, sizeof(keel_graph *));
  if (!at->floats || !at->ints || !at->strings || !at->string_lens ||
      !at->tensors || !at->graphs)
    return oom("an attribute");
  return KEEL_OK;
}

/* Counters of list items filled so far. */
typedef struct attr_fill {
  int32_t nf, ni, ns, nt, ng;
} attr_fill;

static keel_status attr_field(loader *L, keel_pb *r, uint32_t f, uint32_t wt,
                              keel_attr *at, attr_fill *c, keel_node *node) {
  keel_pb s;
  int64_t v;
  switch (f) {
    case 1:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "name", &s));
      return (at->name = dup_bytes(L, s)) ? KEEL_OK : oom("a name");
    case 2: return keel_pb_get_float(r, wt, "f", &at->f);
    case 3: return keel_pb_get_int(r, wt, "i", &at->i);
    case 4:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "s", &s));
      at->slen = (size_t)(s.end - s.p);
      return (at->s = dup_bytes(L, s)) ? KEEL_OK : oom("a string");
    case 5:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "t", &s));
      if (!(at->t = keel_arena_alloc(L->a, sizeof *at->t, 8))) return oom("a tensor");
      return static_tensor(L, s, at->t, NULL);
    case 22:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "sparse_tensor", &s));
      if (!(at->t = keel_arena_alloc(L->a, sizeof *at->t, 8))) return oom("a tensor");
      return sparse_tensor(L, s, at->t, NULL);
    case 6:
      if (L->parsing_fn || !node)
        return keel_err(KEEL_ERR_UNSUPPORTED, "sub-graphs inside model-local functions");
      KEEL_TRY(keel_pb_get_bytes(r, wt, "g", &s));
      return graph_parse(L, s, node, at->name, &at->g);
    case 7:
      if (wt == PB_LEN) {
        KEEL_TRY(keel_pb_len(r, &s));
        for (; s.end - s.p >= 4; s.p += 4) memcpy(&at->floats[c->nf++], s.p, 4);
        return KEEL_OK;
      }
      return keel_pb_get_float(r, wt, "floats", &at->floats[c->nf++]);
    case 8:
      if (wt == PB_LEN) {
        KEEL_TRY(keel_pb_len(r, &s));
        while (keel_pb_more(&s)) {
          uint64_t u;
          KEEL_TRY(keel_pb_varint(&s, &u));
          at->ints[c->ni++] = (int64_t)u;
        }
        return KEEL_OK;
      }
      return keel_pb_get_int(r, wt, "ints", &at->ints[c->ni++]);
    case 9:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "strings", &s));
      at->string_lens[c->ns] = (size_t)(s.end - s.p);
      return (at->strings[c->ns++] = dup_bytes(L, s)) ? KEEL_OK : oom("a string");
    case 10:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "tensors", &s));
      return static_tensor(L, s, &at->tensors[c->nt++], NULL);
    case 23:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "sparse_tensors", &s));
      return sparse_tensor(L, s, &at->tensors[c->nt++], NULL);
    case 11:
      if (L->parsing_fn || !node)
        return keel_err(KEEL_ERR_UNSUPPORTED, "sub-graphs inside model-local functions");
      KEEL_TRY(keel_pb_get_bytes(r, wt, "graphs", &s));
      return graph_parse(L, s, node, at->name, &at->graphs[c->ng++]);
    case 14:
      KEEL_TRY(keel_pb_get_bytes(r, wt, "tp", &s));
      if (!(at->tp = keel_arena_alloc(L->a, sizeof *at->tp, 8))) return oom("a type");
      return type_parse(L, s, at->tp);
    case 20:
      KEEL_TRY(keel_pb_get_int(r, wt, "type", &v));
      at->type = (int32_t)v;
      return KEEL_OK;
    case 21:
      if (!L->parsing_fn)
        return keel_err(KEEL_ERR_INVALID_MODEL, "attribute reference (ref_attr_name) outside a function");
      KEEL_TRY(keel_pb_get_bytes(r, wt, "ref_attr_name", &s));
      return (at->ref = dup_bytes(L, s)) ? KEEL_OK : oom("a name");
    default: return keel_pb_skip(r, wt);
  }
}

/* The attribute type when the file does not say (very old models). */
static int32_t infer_attr_type(const keel_attr *at, const attr_fill *c) {
  if (c->nf) return KEEL_ATTR_FLOATS;
  if (c->ni) return KEEL_ATTR_INTS;
  if (c->ns) return KEEL_ATTR_STRINGS;
  if (c->nt) return KEEL_ATTR_TENSORS;
  if (c->ng) return KEEL_ATTR_GRAPHS;
  if (at->g) return KEEL_ATTR_GRAPH;
  if (at->t) return KEEL_ATTR_TENSOR;
  if (at->s) return KEEL_ATTR_STRING;
  return KEEL_ATTR_INT; /* f or i: ambiguous; ints are far more common */
}

static keel_status attr_parse(loader *L, keel_pb msg, keel_attr *at,
                              keel_node *node) {
  /* the name first, so sub-graphs know which attribute holds them */
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "name", &s));
      if (!(at->name = dup_bytes(L, s))) return oom("a name");
    } else KEEL_TRY(keel_pb_skip(&r, wt));
  }
  if (!at->name || !at->name[0])
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute without a name");
  KEEL_TRY(attr_alloc_lists(L, msg, at));
  attr_fill c = {0};
  r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      KEEL_TRY(keel_pb_skip(&r, wt));
      continue;
    }
    keel_status st = attr_field(L, &r, f, wt, at, &c, node);
    if (st) return keel_err_prefix(st, "attribute '%s'", at->name);
  }
  if (at->type == KEEL_ATTR_UNDEFINED) at->type = infer_attr_type(at, &c);
  switch (at->type) {
    case KEEL_ATTR_FLOATS: at->n = c.nf; break;
    case KEEL_ATTR_INTS: at->n = c.ni; break;
    case KEEL_ATTR_STRINGS: at->n = c.ns; break;
    case KEEL_ATTR_TENSORS: case KEEL_ATTR_SPARSE_TENSORS: at->n = c.nt; break;
    case KEEL_ATTR_GRAPHS: at->n = c.ng; break;
    default: break;
  }
  /* a graph the type does not declare would be parsed but never resolved */
  if ((at->g && at->type != KEEL_ATTR_GRAPH) || (c.ng && at->type != KEEL_ATTR_GRAPHS))
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' holds a graph but has type %d",
                    at->name, at->type);
  if (at->ref) return KEEL_OK; /* a reference: the value comes at the call */
  if ((at->type == KEEL_ATTR_GRAPH && !at->g) ||
      ((at->type == KEEL_ATTR_TENSOR || at->type == KEEL_ATTR_SPARSE_TENSOR) && !at->t))
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' has no value", at->name);
  return KEEL_OK;
}

/* ============================================================== nodes */

typedef struct node_counts {
  int32_t in, out, attr;
} node_counts;

static keel_status node_count(keel_pb msg, node_counts *c) {
  keel_pb r = msg;
  memset(c, 0, sizeof *c);
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) c->in++;
    else if (f == 2) c->out++;
    else if (f == 5) c->attr++;
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  return KEEL_OK;
}

static keel_status node_header(loader *L, keel_pb msg, keel_node *n) {
  keel_pb r = msg;
  int32_t ni = 0, no = 0;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    const char **dst = NULL;
    switch (f) {
      case 1: dst = &n->in_names[ni++]; break;
      case 2: dst = &n->out_names[no++]; break;
      case 3: dst = &n->name; break;
      case 4: dst = &n->op_type; break;
      case 7: dst = &n->domain; break;
      default: KEEL_TRY(keel_pb_skip(&r, wt)); continue;
    }
    KEEL_TRY(keel_pb_get_bytes(&r, wt, "node field", &s));
    if (!(*dst = dup_bytes(L, s))) return oom("a node");
  }
  if (!n->op_type || !n->op_type[0])
    return keel_err(KEEL_ERR_INVALID_MODEL, "node without an op_type");
  if (!n->name) n->name = "";
  if (!n->domain || !strcmp(n->domain, "ai.onnx")) n->domain = "";
  n->opset = keel_model_opset(L->m, n->domain);
  if (L->parsing_fn) { /* a function body uses the function's own imports */
    n->opset = 0;
    for (int32_t i = 0; i < L->parsing_fn->n_opsets; i++)
      if (!strcmp(L->parsing_fn->opsets[i].domain, n->domain)) n->opset = L->parsing_fn->opsets[i].version;
  }
  return KEEL_OK;
}

static keel_status node_parse(loader *L, keel_pb msg, keel_node *n) {
  node_counts c;
  KEEL_TRY(node_count(msg, &c));
  n->n_in = c.in;
  n->n_out = c.out;
  n->n_attr = c.attr;
  n->in_names = keel_arena_array(L->a, (size_t)c.in, sizeof(char *));
  n->out_names = keel_arena_array(L->a, (size_t)c.out, sizeof(char *));
  n->attrs = keel_arena_array(L->a, (size_t)c.attr, sizeof(keel_attr));
  if (!n->in_names || !n->out_names || !n->attrs) return oom("a node");
  KEEL_TRY(node_header(L, msg, n));
  keel_pb r = msg, s;
  int32_t na = 0;
  int got;
  while ((got = keel_pb_next(&r, 5, "attribute", &s)) > 0) KEEL_TRY(attr_parse(L, s, &n->attrs[na++], n));
  if (got < 0) return (keel_status)got;
  /* collect the sub-graphs for the planner */
  int32_t ns = 0;
  for (int32_t i = 0; i < n->n_attr; i++)
    ns += n->attrs[i].type == KEEL_ATTR_GRAPH ? 1
          : n->attrs[i].type == KEEL_ATTR_GRAPHS ? n->attrs[i].n : 0;
  n->subs = keel_arena_array(L->a, (size_t)ns, sizeof(keel_graph *));
  if (!n->subs) return oom("a node");
  for (int32_t i = 0; i < n->n_attr; i++) {
    if (n->attrs[i].type == KEEL_ATTR_GRAPH) n->subs[n->n_subs++] = n->attrs[i].g;
    if (n->attrs[i].type == KEEL_ATTR_GRAPHS)
      for (int32_t k = 0; k < n->attrs[i].n; k++) n->subs[n->n_subs++] = n->attrs[i].graphs[k];
  }
  return KEEL_OK;
}

static bool in_mapping(const loader *L, const void *p);

/* Weight bytes: initializers and folded Constant nodes alike (exporters
 * such as paddle2onnx write every weight as a Constant). */
static void count_weight(loader *L, const keel_tensor *t) {
  L->m->weight_bytes += keel_tensor_nbytes(t);
  if (t->data && !in_mapping(L, t->data)) L->m->weight_bytes_copied += keel_tensor_nbytes(t);
}

/* Constant (value, value_float, value_ints, ...) -> a model constant. */
static keel_status fold_constant(loader *L, keel_graph *g, const keel_node *n,
                                 int32_t *ci) {
  if (n->n_attr != 1 || n->n_out != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Constant needs exactly one value attribute and one output");
  const keel_attr *a = &n->attrs[0];
  keel_tensor t = {0};
  int64_t one = 1, count = a->n;
  if (a->type == KEEL_ATTR_TENSOR || a->type == KEEL_ATTR_SPARSE_TENSOR) {
    t = *a->t;
  } else {
    int dt = 0;
    const void *src = NULL;
    size_t esz;
    if (!strcmp(a->name, "value_float")) dt = KEEL_FLOAT, src = &a->f, count = 1;
    else if (!strcmp(a->name, "value_int")) dt = KEEL_INT64, src = &a->i, count = 1;
    else if (!strcmp(a->name, "value_floats")) dt = KEEL_FLOAT, src = a->floats;
    else if (!strcmp(a->name, "value_ints")) dt = KEEL_INT64, src = a->ints;
    else if (!strcmp(a->name, "value_string")) dt = KEEL_STRING, count = 1;
    else if (!strcmp(a->name, "value_strings")) dt = KEEL_STRING;
    else return keel_err(KEEL_ERR_INVALID_MODEL, "Constant with attribute '%s'", a->name);
    esz = keel_dtype_size((keel_dtype)dt);
    void *data = keel_arena_alloc(L->a, esz * (size_t)count + 1, KEEL_ALIGN);
    keel_buffer *b = data ? static_buffer(L, data, esz * (size_t)count) : NULL;
    if (!b) return oom("a constant");
    if (dt == KEEL_STRING) {
      keel_string *s = data;
      if (count == 1 && a->type == KEEL_ATTR_STRING) s[0] = (keel_string){(char *)a->s, a->slen};
      else for (int64_t i = 0; i < count; i++) s[i] = (keel_string){(char *)a->strings[i], a->string_lens[i]};
    } else if (count) {
      memcpy(data, src, esz * (size_t)count);
    }
    bool scalar = strcmp(a->name, "value_floats") && strcmp(a->name, "value_ints") &&
                  strcmp(a->name, "value_strings");
    t = (keel_tensor){.buf = count ? b : NULL, .data = count ? data : NULL,
                      .dtype = dt, .rank = scalar ? 0 : 1};
    if (!scalar) t.shape[0] = count;
    (void)one;
  }
  (void)g;
  count_weight(L, &t);
  return add_const(L, &t, n->out_names[0], ci);
}

/* ============================================================= graphs */

typedef struct graph_counts {
  int32_t node, init, sparse, in, out, vinfo;
} graph_counts;

static keel_status graph_count(keel_pb msg, graph_counts *c) {
  memset(c, 0, sizeof *c);
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    switch (f) {
      case 1: c->node++; break;
      case 5: c->init++; break;
      case 15: c->sparse++; break;
      case 11: c->in++; break;
      case 12: c->out++; break;
      case 13: c->vinfo++; break;
      default: break;
    }
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  return KEEL_OK;
}

static keel_status graph_alloc(loader *L, keel_graph *g, const graph_counts *c) {
  size_t nconst = (size_t)c->init + (size_t)c->sparse + (size_t)c->node;
  g->nodes = keel_arena_array(L->a, (size_t)c->node, sizeof(keel_node));
  g->in_names = keel_arena_array(L->a, (size_t)c->in, sizeof(char *));
  g->in_types = keel_arena_array(L->a, (size_t)c->in, sizeof(keel_type));
  g->out_names = keel_arena_array(L->a, (size_t)c->out, sizeof(char *));
  g->out_types = keel_arena_array(L->a, (size_t)c->out, sizeof(keel_type));
  g->ld.init_names = keel_arena_array(L->a, nconst, sizeof(char *));
  g->ld.init_consts = keel_arena_array(L->a, nconst, sizeof(int32_t));
  g->ld.init_is_node = keel_arena_array(L->a, nconst + 1, 1);
  g->ld.init_node_at = keel_arena_array(L->a, nconst + 1, sizeof(int32_t));
  g->ld.vinfo_names = keel_arena_array(L->a, (size_t)c->vinfo, sizeof(char *));
  g->ld.vinfo_types = keel_arena_array(L->a, (size_t)c->vinfo, sizeof(keel_type));
  if (!g->nodes || !g->in_names || !g->in_types || !g->out_names ||
      !g->out_types || !g->ld.init_names || !g->ld.init_consts || !g->ld.init_is_node || !g->ld.init_node_at ||
      !g->ld.vinfo_names || !g->ld.vinfo_types)
    return oom("a graph");
  return KEEL_OK;
}

/* True when p points into the model file or an external-data file. */
static bool in_mapping(const loader *L, const void *p) {
  const uint8_t *q = p;
  if (q >= L->m->map.addr && q < L->m->map.addr + L->m->map.size) return !L->m->map_is_copy;
  for (int32_t i = 0; i < L->n_ext; i++)
    if (q >= L->ext[i].map.addr && q < L->ext[i].map.addr + L->ext[i].map.size) return true;
  return false;
}

static keel_status graph_init(loader *L, keel_graph *g, keel_pb s, bool sparse) {
  keel_tensor t;
  const char *name;
  int32_t ci;
  KEEL_TRY(sparse ? sparse_tensor(L, s, &t, &name) : static_tensor(L, s, &t, &name));
  if (!name[0]) return keel_err(KEEL_ERR_INVALID_MODEL, "initializer without a name");
  KEEL_TRY(add_const(L, &t, name, &ci));
  count_weight(L, &t);
  g->ld.init_names[g->ld.n_init] = name;
  g->ld.init_consts[g->ld.n_init++] = ci;
  return KEEL_OK;
}

static keel_status graph_node(loader *L, keel_graph *g, keel_pb s) {
  keel_node *n = &g->nodes[g->n_nodes];
  n->index = g->n_nodes;
  keel_status st = node_parse(L, s, n);
  if (st)
    return keel_err_prefix(st, "node %d '%s' (%s)", n->index, n->name ? n->name : "",
                           n->op_type ? n->op_type : "?");
  if (!strcmp(n->op_type, "Constant") && n->domain[0] == 0) {
    int32_t ci;
    st = fold_constant(L, g, n, &ci);
    if (st) return keel_err_prefix(st, "node %d '%s' (Constant)", n->index, n->name);
    g->ld.init_names[g->ld.n_init] = n->out_names[0];
    g->ld.init_is_node[g->ld.n_init] = 1;
    g->ld.init_node_at[g->ld.n_init] = g->n_nodes;
    g->ld.init_consts[g->ld.n_init++] = ci;
    g->ld.n_folded++;
    memset(n, 0, sizeof *n);
    n->graph = g;
    return KEEL_OK;
  }
  g->n_nodes++;
  return KEEL_OK;
}

static keel_status graph_field(loader *L, keel_graph *g, keel_pb *r, uint32_t f,
                               uint32_t wt) {
  keel_pb s;
  if (f != 1 && f != 2 && f != 5 && f != 10 && f != 11 && f != 12 && f != 13 && f != 15)
    return keel_pb_skip(r, wt);
  KEEL_TRY(keel_pb_get_bytes(r, wt, "graph field", &s));
  switch (f) {
    case 1: return graph_node(L, g, s);
    case 2: return (g->name = dup_bytes(L, s)) ? KEEL_OK : oom("a name");
    case 10: return (g->doc = dup_bytes(L, s)) ? KEEL_OK : oom("a doc string");
    case 5: return graph_init(L, g, s, false);
    case 15: return graph_init(L, g, s, true);
    case 11: {
      int32_t i = g->n_in++;
      return value_info_parse(L, s, &g->in_names[i], &g->in_types[i]);
    }
    case 12: {
      int32_t i = g->n_out++;
      return value_info_parse(L, s, &g->out_names[i], &g->out_types[i]);
    }
    default: { /* 13: value_info */
      int32_t i = g->ld.n_vinfo++;
      return value_info_parse(L, s, &g->ld.vinfo_names[i], &g->ld.vinfo_types[i]);
    }
  }
}

static keel_status graph_register(loader *L, keel_graph *g) {
  if (!grow((void **)&L->graphs, &L->cap_graphs, L->n_graphs, sizeof *L->graphs))
    return oom("graphs");
  g->id = L->n_graphs;
  L->graphs[L->n_graphs++] = g;
  return KEEL_OK;
}

static keel_status graph_path(loader *L, keel_graph *g) {
  char buf[4096];
  if (!g->parent) {
    g->path = "main";
    return KEEL_OK;
  }
  const char *who = g->owner->name[0] ? g->owner->name : g->owner->op_type;
  const char *attr = g->owner_attr ? g->owner_attr : "graph";
  /* then_branch -> then, else_branch -> else */
  int alen = (int)strlen(attr);
  if (alen > 7 && !strcmp(attr + alen - 7, "_branch")) alen -= 7;
  /* exporters (PyTorch) start names with '/': no doubled separator */
  snprintf(buf, sizeof buf, "%s/%s/%.*s", g->parent->path, who + (who[0] == '/'), alen, attr);
  return (g->path = keel_arena_strdup(L->a, buf)) ? KEEL_OK : oom("a name");
}

static keel_status graph_parse(loader *L, keel_pb msg, keel_node *owner,
                               const char *owner_attr, keel_graph **out) {
  keel_graph *g = keel_arena_alloc(L->a, sizeof *g, 8);
  if (!g) return oom("a graph");
  g->owner = owner;
  g->owner_attr = owner_attr;
  g->parent = owner ? owner->graph : NULL;
  g->depth = g->parent ? g->parent->depth + 1 : 0;
  if (g->depth > (int32_t)KEEL_REF_MAX_LEVELS)
    return keel_err(KEEL_ERR_UNSUPPORTED, "sub-graphs nested deeper than %u",
                    KEEL_REF_MAX_LEVELS);
  KEEL_TRY(graph_register(L, g));
  KEEL_TRY(graph_path(L, g));
  graph_counts c;
  KEEL_TRY(graph_count(msg, &c));
  KEEL_TRY(graph_alloc(L, g, &c));
  for (int32_t i = 0; i < c.node; i++) g->nodes[i].graph = g;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    keel_status st = graph_field(L, g, &r, f, wt);
    if (st) return keel_err_prefix(st, "graph '%s'", g->path);
  }
  if (!g->name) g->name = "";
  *out = g;
  return KEEL_OK;
}

/* ============================================================== model */

static keel_status opset_parse(loader *L, keel_pb msg, keel_opset *o) {
  keel_pb r = msg;
  o->domain = "";
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 1) {
      KEEL_TRY(keel_pb_get_bytes(&r, wt, "opset domain", &s));
      if (!(o->domain = dup_bytes(L, s))) return oom("an opset");
      if (!strcmp(o->domain, "ai.onnx")) o->domain = "";
    } else if (f == 2) {
      KEEL_TRY(keel_pb_get_int(&r, wt, "opset version", &o->version));
    } else KEEL_TRY(keel_pb_skip(&r, wt));
  }
  return KEEL_OK;
}

/* One StringStringEntryProto of ModelProto.metadata_props (key 1, value 2). */
static keel_status metadata_prop(loader *L, keel_pb msg) {
  keel_model *m = L->m;
  const char *kv[2] = {"", ""};
  while (keel_pb_more(&msg)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&msg, &f, &wt));
    if (f != 1 && f != 2) {
      KEEL_TRY(keel_pb_skip(&msg, wt));
      continue;
    }
    KEEL_TRY(keel_pb_get_bytes(&msg, wt, "metadata_props entry", &s));
    if (!(kv[f - 1] = dup_bytes(L, s))) return oom("metadata_props");
  }
  m->prop_keys[m->n_props] = kv[0];
  m->prop_values[m->n_props++] = kv[1];
  return KEEL_OK;
}

/* First pass over ModelProto: everything but the graph (opsets must be
 * known before nodes are read, and files may put them after the graph). */
static keel_status model_header(loader *L, keel_pb msg, keel_pb *graph,
                                bool *has_graph) {
  keel_model *m = L->m;
  int32_t nops = 0, nprops = 0;
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    if (f == 8) nops++;
    if (f == 14) nprops++;
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  m->opsets = keel_arena_array(L->a, (size_t)nops, sizeof(keel_opset));
  m->prop_keys = keel_arena_array(L->a, (size_t)nprops + 1, sizeof(char *));
  m->prop_values = keel_arena_array(L->a, (size_t)nprops + 1, sizeof(char *));
  if (!m->opsets || !m->prop_keys || !m->prop_values) return oom("opsets");
  r = msg;
  while (keel_pb_more(&r)) {
    uint32_t f, wt;
    keel_pb s;
    KEEL_TRY(keel_pb_tag(&r, &f, &wt));
    const char **str = NULL;
    switch (f) {
      case 1: KEEL_TRY(keel_pb_get_int(&r, wt, "ir_version", &m->ir_version)); continue;
      case 5: KEEL_TRY(keel_pb_get_int(&r, wt, "model_version", &m->model_version)); continue;
      case 2: str = &m->producer_name; break;
      case 3: str = &m->producer_version; break;
      case 4: str = &m->domain; break;
      case 6: str = &m->doc; break;
      case 7: KEEL_TRY(keel_pb_get_bytes(&r, wt, "graph", graph)); *has_graph = true; continue;
      case 8:
        KEEL_TRY(keel_pb_get_bytes(&r, wt, "opset_import", &s));
        KEEL_TRY(opset_parse(L, s, &m->opsets[m->n_opsets++]));
        continue;
      case 14:
        KEEL_TRY(keel_pb_get_bytes(&r, wt, "metadata_props", &s));
        KEEL_TRY(metadata_prop(L, s));
        continue;
      case 25:
        if (!grow((void **)&L->fn_msg, &L->cap_fn, L->n_fn, sizeof *L->fn_msg)) return oom("functions");
        KEEL_TRY(keel_pb_get_bytes(&r, wt, "functions", &L->fn_msg[L->n_fn++]));
        continue;
      default: KEEL_TRY(keel_pb_skip(&r, wt)); continue;
    }
    KEEL_TRY(keel_pb_get_bytes(&r, wt, "model field", &s));
    if (!(*str = dup_bytes(L, s))) return oom("a name");
  }
  if (m->n_opsets == 0) { /* IR version 1 models: opset 1 implied */
    m->opsets = keel_arena_array(L->a, 1, sizeof(keel_opset));
    if (!m->opsets) return oom("opsets");
    m->opsets[0] = (keel_opset){"", 1};
    m->n_opsets = 1;
  }
  return KEEL_OK;
}

static keel_status finish(loader *L) {
  keel_model *m = L->m;
  m->consts = keel_arena_array(L->a, (size_t)L->n_consts, sizeof(keel_tensor));
  m->const_names = keel_arena_array(L->a, (size_t)L->n_consts, sizeof(char *));
  m->graphs = keel_arena_array(L->a, (size_t)L->n_graphs, sizeof(keel_graph *));
  m->ext = keel_arena_array(L->a, (size_t)L->n_ext, sizeof(keel_ext_file));
  if (!m->consts || !m->const_names || !m->graphs || !m->ext) return oom("the model");
  for (int32_t i = 0; i < L->n_consts; i++) {
    m->consts[i] = L->consts[i].t;
    m->const_names[i] = L->consts[i].name;
  }
  memcpy(m->graphs, L->graphs, sizeof(keel_graph *) * (size_t)L->n_graphs);
  if (L->n_ext) memcpy(m->ext, L->ext, sizeof(keel_ext_file) * (size_t)L->n_ext);
  m->n_consts = L->n_consts;
  m->n_graphs = L->n_graphs;
  m->n_ext = L->n_ext;
  L->n_ext = 0; /* the model owns the mappings now */
  return KEEL_OK;
}

static void loader_free(loader *L) {
  for (int32_t i = 0; i < L->n_ext; i++) keel_prim_unmap(&L->ext[i].map);
  keel_sys_free(L->consts, (size_t)L->cap_consts * sizeof *L->consts);
  keel_sys_free(L->fn_msg, (size_t)L->cap_fn * sizeof *L->fn_msg);
  keel_sys_free(L->graphs, (size_t)L->cap_graphs * sizeof *L->graphs);
  keel_sys_free(L->ext, (size_t)L->cap_ext * sizeof *L->ext);
}

/* ========================================================= functions */

/* Field counts of a FunctionProto: input 4, output 5, node 7, opset 9,
 * attribute_proto 11. */
static keel_status fn_alloc(loader *L, keel_pb msg, fn_def *f) {
  int32_t c[12] = {0};
  keel_pb r = msg;
  while (keel_pb_more(&r)) {
    uint32_t fld, wt;
    KEEL_TRY(keel_pb_tag(&r, &fld, &wt));
    if (fld < 12) c[fld]++;
    KEEL_TRY(keel_pb_skip(&r, wt));
  }
  f->in = keel_arena_array(L->a, (size_t)c[4], sizeof(char *));
  f->out = keel_arena_array(L->a, (size_t)c[5], sizeof(char *));
  f->body = keel_arena_array(L->a, (size_t)c[7], sizeof(keel_node));
  f->opsets = keel_arena_array(L->a, (size_t)c[9], sizeof(keel_opset));
  f->defaults = keel_arena_array(L->a, (size_t)c[11], sizeof(keel_attr));
  if (!f->in || !f->out || !f->body || !f->opsets || !f->defaults) return oom("a function");
  return KEEL_OK;
}

/* Everything but the body: names, signature, imports, default attributes. */
static keel_status fn_header(loader *L, keel_pb msg, fn_def *f) {
  keel_pb r = msg, s;
  f->domain = "";
  while (keel_pb_more(&r)) {
    uint32_t fld, wt;
    KEEL_TRY(keel_pb_tag(&r, &fld, &wt));
    if (fld != 1 && fld != 4 && fld != 5 && fld != 9 && fld != 10 && fld != 11) {
      KEEL_TRY(keel_pb_skip(&r, wt));
      continue;
    }
    KEEL_TRY(keel_pb_get_bytes(&r, wt, "function field", &s));
    const char **dst = fld == 1 ? &f->name : fld == 10 ? &f->domain : fld == 4 ? &f->in[f->n_in++]
                     : fld == 5 ? &f->out[f->n_out++] : NULL;
    if (dst && !(*dst = dup_bytes(L, s))) return oom("a function");
    if (fld == 9) KEEL_TRY(opset_parse(L, s, &f->opsets[f->n_opsets++]));
    if (fld == 11) KEEL_TRY(attr_parse(L, s, &f->defaults[f->n_defaults++], NULL));
  }
  if (!f->name || !f->name[0]) return keel_err(KEEL_ERR_INVALID_MODEL, "a function without a name");
  if (!strcmp(f->domain, "ai.onnx")) f->domain = "";
  return KEEL_OK;
}

static keel_status fn_parse(loader *L, keel_pb msg, fn_def *f) {
  KEEL_TRY(fn_alloc(L, msg, f));
  KEEL_TRY(fn_header(L, msg, f));
  L->parsing_fn = f;
  keel_pb r = msg, s;
  int got;
  keel_status st = KEEL_OK;
  while (!st && (got = keel_pb_next(&r, 7, "function node", &s)) > 0) {
    keel_node *n = &f->body[f->n_body];
    n->index = f->n_body++;
    st = node_parse(L, s, n);
  }
  if (!st && got < 0) st = (keel_status)got;
  L->parsing_fn = NULL;
  return st ? keel_err_prefix(st, "function '%s' (domain '%s')", f->name, f->domain) : KEEL_OK;
}

static keel_status parse_functions(loader *L) {
  if (!L->n_fn) return KEEL_OK;
  L->fns = keel_arena_array(L->a, (size_t)L->n_fn, sizeof(fn_def));
  if (!L->fns) return oom("functions");
  for (int32_t i = 0; i < L->n_fn; i++) KEEL_TRY(fn_parse(L, L->fn_msg[i], &L->fns[i]));
  return KEEL_OK;
}

static const fn_def *fn_find(const loader *L, const keel_node *n) {
  for (int32_t i = 0; i < L->n_fn; i++)
    if (!strcmp(L->fns[i].name, n->op_type) && !strcmp(L->fns[i].domain, n->domain)) return &L->fns[i];
  return NULL;
}

/* A name of the body as seen from the call: formal inputs and outputs are
 * the call's values, everything else gets the call's unique prefix. */
static const char *fn_rename(loader *L, const fn_def *f, const keel_node *call, const char *prefix,
                             const char *name) {
  if (!name[0]) return "";
  for (int32_t i = 0; i < f->n_in; i++)
    if (!strcmp(f->in[i], name)) return i < call->n_in ? call->in_names[i] : "";
  for (int32_t i = 0; i < f->n_out; i++)
    if (!strcmp(f->out[i], name) && i < call->n_out && call->out_names[i][0]) return call->out_names[i];
  char buf[1024];
  snprintf(buf, sizeof buf, "%s/%s", prefix, name);
  return keel_arena_strdup(L->a, buf);
}

/* The body node's attributes, references replaced by the call's values
 * (or the function's defaults; an attribute with neither is left out). */
static keel_status fn_attrs(loader *L, const fn_def *f, const keel_node *call, keel_node *n) {
  keel_attr *at = keel_arena_array(L->a, (size_t)n->n_attr, sizeof(keel_attr));
  if (!at) return oom("a function call");
  int32_t k = 0;
  for (int32_t i = 0; i < n->n_attr; i++) {
    const keel_attr *a = &n->attrs[i], *src = a;
    if (a->ref) {
      src = keel_node_attr(call, a->ref);
      for (int32_t d = 0; !src && d < f->n_defaults; d++)
        if (!strcmp(f->defaults[d].name, a->ref)) src = &f->defaults[d];
      if (!src) continue;
    }
    at[k] = *src;
    at[k++].name = a->name;
  }
  n->attrs = at;
  n->n_attr = k;
  return KEEL_OK;
}

static keel_status fn_instance(loader *L, const fn_def *f, const keel_node *call, keel_node *out) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s#%d", call->name[0] ? call->name : f->name, L->counter++);
  for (int32_t b = 0; b < f->n_body; b++) {
    keel_node *n = &out[b];
    *n = f->body[b];
    n->graph = call->graph;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s/%s", prefix, n->name[0] ? n->name : n->op_type);
    n->name = keel_arena_strdup(L->a, buf);
    const char **in = keel_arena_array(L->a, (size_t)n->n_in, sizeof(char *));
    const char **o = keel_arena_array(L->a, (size_t)n->n_out, sizeof(char *));
    if (!n->name || !in || !o) return oom("a function call");
    for (int32_t i = 0; i < n->n_in; i++)
      if (!(in[i] = fn_rename(L, f, call, prefix, n->in_names[i]))) return oom("a function call");
    for (int32_t i = 0; i < n->n_out; i++)
      if (!(o[i] = fn_rename(L, f, call, prefix, n->out_names[i]))) return oom("a function call");
    n->in_names = in;
    n->out_names = o;
    KEEL_TRY(fn_attrs(L, f, call, n));
  }
  return KEEL_OK;
}

/* Replaces node `at` of g by an instance of the function's body. */
static keel_status fn_splice(loader *L, keel_graph *g, int32_t at, const fn_def *f) {
  keel_node *body = keel_arena_array(L->a, (size_t)f->n_body + 1, sizeof(keel_node));
  if (!body) return oom("a function call");
  KEEL_TRY(fn_instance(L, f, &g->nodes[at], body));
  return keel_graph_replace_node(L->a, g, at, body, f->n_body);
}

/* Inlines every call of a model-local function, functions calling
 * functions included (bounded: recursion is an error). */
static keel_status inline_calls(loader *L) {
  for (int round = 0; L->n_fn; round++) {
    bool any = false;
    for (int32_t gi = 0; gi < L->n_graphs; gi++) {
      keel_graph *g = L->graphs[gi];
      for (int32_t i = 0; i < g->n_nodes; i++) {
        const fn_def *f = fn_find(L, &g->nodes[i]);
        if (!f) continue;
        if (round >= 32)
          return keel_err(KEEL_ERR_INVALID_MODEL, "function '%s' calls itself (or nests deeper than 32)", f->name);
        KEEL_TRY(fn_splice(L, g, i, f));
        i += f->n_body - 1;
        any = true;
      }
    }
    if (!any) break;
  }
  return KEEL_OK;
}

static keel_status parse_model(keel_model *m) {
  loader L = {.m = m, .a = m->arena};
  keel_pb msg = keel_pb_open(m->map.addr, m->map.size), graph;
  bool has_graph = false;
  keel_status st = model_header(&L, msg, &graph, &has_graph);
  if (!st && !has_graph)
    st = keel_err(KEEL_ERR_INVALID_MODEL, "the file has no graph (is it an ONNX model?)");
  if (!st) st = parse_functions(&L);
  if (!st) st = graph_parse(&L, graph, NULL, NULL, &m->main);
  if (!st) st = inline_calls(&L);
  if (!st) st = finish(&L);
  loader_free(&L);
  return st;
}

/* ===================================================== public to exec */

static keel_status model_new(const char *path, const char *base_dir,
                             keel_model **out) {
  keel_arena *a = keel_arena_create();
  keel_model *m = a ? keel_arena_alloc(a, sizeof *m, 8) : NULL;
  if (!m) {
    keel_arena_destroy(a);
    return oom("the model");
  }
  m->arena = a;
  m->path = keel_arena_strdup(a, path ? path : "<memory>");
  m->base_dir = base_dir ? keel_arena_strdup(a, base_dir) : NULL;
  if (!m->path || (base_dir && !m->base_dir)) {
    keel_arena_destroy(a);
    return oom("the model");
  }
  *out = m;
  return KEEL_OK;
}

keel_status keel_onnx_load_file(const char *path, keel_model **out) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else snprintf(dir, sizeof dir, ".");
  if (slash == path) snprintf(dir, sizeof dir, "/");
  keel_model *m;
  KEEL_TRY(model_new(path, dir, &m));
  keel_status st = keel_prim_map_file(path, &m->map);
  if (!st) st = parse_model(m);
  if (st) {
    keel_onnx_free(m);
    return keel_err_prefix(st, "%s", path);
  }
  *out = m;
  return KEEL_OK;
}

keel_status keel_onnx_load_memory(const void *bytes, size_t len,
                                  const char *base_dir, keel_model **out) {
  keel_model *m;
  KEEL_TRY(model_new(NULL, base_dir, &m));
  uint8_t *copy = len ? keel_sys_alloc(len) : NULL;
  if (len && !copy) {
    keel_onnx_free(m);
    return oom("a copy of the model bytes");
  }
  if (len) memcpy(copy, bytes, len);
  m->map = (keel_mapping){copy, len};
  m->map_is_copy = true;
  keel_status st = parse_model(m);
  if (st) {
    keel_onnx_free(m);
    return keel_err_prefix(st, "<memory>");
  }
  *out = m;
  return KEEL_OK;
}

static bool in_file_map(const keel_model *m, const uint8_t *p, size_t nb) {
  const uint8_t *lo = m->map.addr;
  return !m->map_is_copy && p && lo && p >= lo && nb <= m->map.size &&
         p - lo <= (ptrdiff_t)(m->map.size - nb);
}

void keel_model_drop_const(const keel_model *m, const keel_tensor *c, uint64_t *mapped,
                           uint64_t *copied) {
  size_t nb = keel_tensor_nbytes(c), a = 0, b = 0;
  if (!c->buf || m->map_is_copy) return;
  const uint8_t *src = c->buf->ud ? c->buf->ud : c->data;
  if (in_file_map(m, src, nb)) a = keel_prim_drop_pages(src, nb);
  if (c->data != src) b = keel_prim_drop_pages(c->data, nb);
  if (mapped) *mapped += a;
  if (copied) *copied += b;
}

void keel_onnx_free(keel_model *m) {
  if (!m) return;
  for (int32_t i = 0; i < m->n_ext; i++) keel_prim_unmap(&m->ext[i].map);
  if (m->map_is_copy) keel_sys_free((void *)m->map.addr, m->map.size);
  else keel_prim_unmap(&m->map);
  keel_arena_destroy(m->arena);
}
