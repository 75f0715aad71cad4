/* write.c: the ONNX writer (write.h): keel IR -> ModelProto bytes.
 *
 * Field numbers are those of onnx.proto (the reader in model.c uses the
 * same). Nested messages are written in place (keel_pbw_begin/_end), so a
 * weight's bytes are copied once into the output, plus one move per level
 * of nesting around it.
 */
#include "onnx/write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "onnx/tensorproto.h"

typedef struct writer {
  const keel_model *m;
  const keel_tensor *const *replace;
  keel_bytes *b;
  /* external data: initializers of >= ext_min bytes go to ext */
  FILE *ext;
  const char *ext_location;
  size_t ext_min;
  uint64_t ext_off;
  bool ext_failed;
} writer;

static void write_graph(writer *W, uint32_t field, const keel_graph *g);

/* ============================================================== types */

static void write_type(keel_bytes *b, uint32_t field, const keel_type *t);

static void write_shape(keel_bytes *b, const keel_type *t) {
  size_t shape = keel_pbw_begin(b, 2);
  for (int32_t i = 0; i < t->rank; i++) {
    size_t dim = keel_pbw_begin(b, 1);
    if (t->dim_params && t->dim_params[i]) keel_pbw_str(b, 2, t->dim_params[i]);
    else if (t->dims && t->dims[i] >= 0) keel_pbw_int(b, 1, t->dims[i]);
    keel_pbw_end(b, dim);
  }
  keel_pbw_end(b, shape);
}

/* TypeProto.tensor_type / sparse_tensor_type body. */
static void write_tensor_type(keel_bytes *b, const keel_type *t) {
  if (t->dtype) keel_pbw_int(b, 1, t->dtype);
  if (t->rank >= 0) write_shape(b, t);
}

static void write_type_body(keel_bytes *b, const keel_type *t) {
  size_t at;
  switch (t->kind) {
    case KEEL_TYPE_TENSOR:
    case KEEL_TYPE_SPARSE:
      at = keel_pbw_begin(b, t->kind == KEEL_TYPE_TENSOR ? 1 : 8);
      write_tensor_type(b, t);
      break;
    case KEEL_TYPE_SEQUENCE:
    case KEEL_TYPE_OPTIONAL:
      at = keel_pbw_begin(b, t->kind == KEEL_TYPE_SEQUENCE ? 4 : 9);
      if (t->elem) write_type(b, 1, t->elem);
      break;
    case KEEL_TYPE_MAP:
      at = keel_pbw_begin(b, 5);
      if (t->key_dtype) keel_pbw_int(b, 1, t->key_dtype);
      if (t->elem) write_type(b, 2, t->elem);
      break;
    default: return; /* unknown: an empty TypeProto */
  }
  keel_pbw_end(b, at);
}

static void write_type(keel_bytes *b, uint32_t field, const keel_type *t) {
  size_t at = keel_pbw_begin(b, field);
  write_type_body(b, t);
  keel_pbw_end(b, at);
}

/* ValueInfoProto: name 1, type 2 (left out when unknown). */
static void write_value_info(keel_bytes *b, uint32_t field, const char *name, const keel_type *t) {
  size_t at = keel_pbw_begin(b, field);
  keel_pbw_str(b, 1, name);
  if (t && t->kind != KEEL_TYPE_UNKNOWN) write_type(b, 2, t);
  keel_pbw_end(b, at);
}

/* ============================================================ tensors */

static void write_tensor(keel_bytes *b, uint32_t field, const keel_tensor *t, const char *name) {
  size_t at = keel_pbw_begin(b, field);
  keel_pb_put_tensor(b, t, name);
  keel_pbw_end(b, at);
}

/* A densified sparse tensor as SparseTensorProto: every element a value,
 * linear indices 0..numel-1 (what the loader reads back to the same). */
static void write_sparse(keel_bytes *b, uint32_t field, const keel_tensor *t) {
  int64_t n = keel_tensor_numel(t);
  size_t at = keel_pbw_begin(b, field);
  keel_tensor vals = *t;
  vals.rank = 1;
  vals.shape[0] = n;
  write_tensor(b, 1, &vals, NULL);
  size_t ix = keel_pbw_begin(b, 2); /* indices: INT64 [n] in raw_data */
  keel_pbw_int(b, 1, n);
  keel_pbw_int(b, 2, KEEL_INT64);
  keel_pbw_tag(b, 9, PB_LEN);
  keel_pbw_varint(b, (uint64_t)n * 8);
  for (int64_t i = 0; i < n; i++) keel_bytes_put(b, &i, 8);
  keel_pbw_end(b, ix);
  for (int i = 0; i < t->rank; i++) keel_pbw_int(b, 3, t->shape[i]);
  keel_pbw_end(b, at);
}

/* ========================================================= attributes */

static void write_attr_value(writer *W, const keel_attr *a) {
  keel_bytes *b = W->b;
  switch (a->type) {
    case KEEL_ATTR_FLOAT: keel_pbw_float(b, 2, a->f); break;
    case KEEL_ATTR_INT: keel_pbw_int(b, 3, a->i); break;
    case KEEL_ATTR_STRING: keel_pbw_len(b, 4, a->s, a->slen); break;
    case KEEL_ATTR_TENSOR: write_tensor(b, 5, a->t, NULL); break;
    case KEEL_ATTR_SPARSE_TENSOR: write_sparse(b, 22, a->t); break;
    case KEEL_ATTR_GRAPH: write_graph(W, 6, a->g); break;
    case KEEL_ATTR_FLOATS:
      for (int32_t i = 0; i < a->n; i++) keel_pbw_float(b, 7, a->floats[i]);
      break;
    case KEEL_ATTR_INTS:
      for (int32_t i = 0; i < a->n; i++) keel_pbw_int(b, 8, a->ints[i]);
      break;
    case KEEL_ATTR_STRINGS:
      for (int32_t i = 0; i < a->n; i++) keel_pbw_len(b, 9, a->strings[i], a->string_lens[i]);
      break;
    case KEEL_ATTR_TENSORS:
      for (int32_t i = 0; i < a->n; i++) write_tensor(b, 10, &a->tensors[i], NULL);
      break;
    case KEEL_ATTR_SPARSE_TENSORS:
      for (int32_t i = 0; i < a->n; i++) write_sparse(b, 23, &a->tensors[i]);
      break;
    case KEEL_ATTR_GRAPHS:
      for (int32_t i = 0; i < a->n; i++) write_graph(W, 11, a->graphs[i]);
      break;
    case KEEL_ATTR_TYPE_PROTO:
      if (a->tp) write_type(b, 14, a->tp);
      break;
    default: break; /* TYPE_PROTOS: the loader keeps none */
  }
}

/* AttributeProto: name 1, the value, type 20. */
static void write_attr(writer *W, const keel_attr *a) {
  size_t at = keel_pbw_begin(W->b, 5);
  keel_pbw_str(W->b, 1, a->name);
  write_attr_value(W, a);
  keel_pbw_int(W->b, 20, a->type);
  keel_pbw_end(W->b, at);
}

/* ============================================================== nodes */

/* NodeProto: input 1, output 2, name 3, op_type 4, attribute 5, domain 7. */
static void write_node(writer *W, const keel_node *n) {
  keel_bytes *b = W->b;
  size_t at = keel_pbw_begin(b, 1);
  for (int32_t i = 0; i < n->n_in; i++) keel_pbw_str(b, 1, n->in_names[i]);
  for (int32_t i = 0; i < n->n_out; i++) keel_pbw_str(b, 2, n->out_names[i]);
  if (n->name[0]) keel_pbw_str(b, 3, n->name);
  keel_pbw_str(b, 4, n->op_type);
  for (int32_t i = 0; i < n->n_attr; i++) write_attr(W, &n->attrs[i]);
  if (n->domain[0]) keel_pbw_str(b, 7, n->domain);
  keel_pbw_end(b, at);
}

static const keel_tensor *const_of(const writer *W, int32_t c) {
  return W->replace && W->replace[c] ? W->replace[c] : &W->m->consts[c];
}

/* A folded Constant node, written back as one: output `name`, attribute
 * `value` (whatever value_* form the file used holds the same tensor). */
static void write_const_node(writer *W, const char *name, int32_t c) {
  keel_bytes *b = W->b;
  size_t at = keel_pbw_begin(b, 1);
  keel_pbw_str(b, 2, name);
  keel_pbw_str(b, 4, "Constant");
  size_t attr = keel_pbw_begin(b, 5);
  keel_pbw_str(b, 1, "value");
  write_tensor(b, 5, const_of(W, c), NULL);
  keel_pbw_int(b, 20, KEEL_ATTR_TENSOR);
  keel_pbw_end(b, attr);
  keel_pbw_end(b, at);
}

/* An initializer whose bytes go to the data file (64-byte aligned). */
static void write_external(writer *W, const keel_tensor *t, const char *name) {
  keel_bytes *b = W->b;
  static const uint8_t zeros[64];
  size_t n = keel_tensor_nbytes(t), pad = (size_t)((64 - W->ext_off % 64) % 64);
  if (fwrite(zeros, 1, pad, W->ext) != pad || fwrite(t->data, 1, n, W->ext) != n) W->ext_failed = true;
  W->ext_off += pad;
  char num[32];
  size_t at = keel_pbw_begin(b, 5);
  for (int i = 0; i < t->rank; i++) keel_pbw_int(b, 1, t->shape[i]);
  keel_pbw_int(b, 2, t->dtype);
  keel_pbw_str(b, 8, name);
  const char *keys[3] = {"location", "offset", "length"};
  for (int k = 0; k < 3; k++) {
    size_t e = keel_pbw_begin(b, 13);
    keel_pbw_str(b, 1, keys[k]);
    if (k == 0) keel_pbw_str(b, 2, W->ext_location);
    else {
      snprintf(num, sizeof num, "%llu", (unsigned long long)(k == 1 ? W->ext_off : n));
      keel_pbw_str(b, 2, num);
    }
    keel_pbw_end(b, e);
  }
  keel_pbw_int(b, 14, 1); /* data_location = EXTERNAL */
  keel_pbw_end(b, at);
  W->ext_off += n;
}

static void write_init(writer *W, const keel_tensor *t, const char *name) {
  if (W->ext && t->dtype != KEEL_STRING && keel_tensor_nbytes(t) >= W->ext_min && t->data)
    write_external(W, t, name);
  else write_tensor(W->b, 5, t, name);
}

/* ============================================================= graphs */

/* The first node of g that reads `name` (an input, or its sub-graphs),
 * or g->n_nodes. */
static int32_t first_reader(const keel_graph *g, const char *name) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const keel_node *n = &g->nodes[i];
    for (int32_t k = 0; k < n->n_in; k++)
      if (!strcmp(n->in_names[k], name)) return i;
    for (int32_t s = 0; s < n->n_subs; s++)
      if (keel_ir_uses(n->subs[s], name)) return i;
  }
  return g->n_nodes;
}

/* Where folded Constant entry i goes among the nodes: where it was in the
 * file (a freshly loaded model writes back in its own order), but never
 * after its first reader (passes may have removed nodes before it). */
static int32_t const_slot(const keel_graph *g, int32_t i) {
  int32_t at = g->ld.init_node_at ? g->ld.init_node_at[i] : 0;
  int32_t r = first_reader(g, g->ld.init_names[i]);
  return at < r ? at : r;
}

/* GraphProto: node 1, name 2, initializer 5, doc_string 10, input 11,
 * output 12, value_info 13. Folded Constants go back as nodes where the
 * file had them (they read nothing: any place before their readers is
 * valid). */
static void write_graph(writer *W, uint32_t field, const keel_graph *g) {
  keel_bytes *b = W->b;
  size_t at = keel_pbw_begin(b, field);
  /* slot of each folded Constant (-1: an initializer); without memory for
   * the table they all go first */
  int32_t *slot = malloc(sizeof(int32_t) * ((size_t)g->ld.n_init + 1));
  for (int32_t i = 0; i < g->ld.n_init; i++) {
    bool folded = g->ld.init_is_node && g->ld.init_is_node[i];
    if (slot) slot[i] = folded ? const_slot(g, i) : -1;
    else if (folded) write_const_node(W, g->ld.init_names[i], g->ld.init_consts[i]);
  }
  for (int32_t k = 0; k <= g->n_nodes; k++) {
    for (int32_t i = 0; slot && i < g->ld.n_init; i++)
      if (slot[i] == k) write_const_node(W, g->ld.init_names[i], g->ld.init_consts[i]);
    if (k < g->n_nodes) write_node(W, &g->nodes[k]);
  }
  free(slot);
  if (g->name) keel_pbw_str(b, 2, g->name);
  for (int32_t i = 0; i < g->ld.n_init; i++)
    if (!g->ld.init_is_node || !g->ld.init_is_node[i])
      write_init(W, const_of(W, g->ld.init_consts[i]), g->ld.init_names[i]);
  if (g->doc) keel_pbw_str(b, 10, g->doc);
  for (int32_t i = 0; i < g->n_in; i++) write_value_info(b, 11, g->in_names[i], &g->in_types[i]);
  for (int32_t i = 0; i < g->n_out; i++)
    write_value_info(b, 12, g->out_names[i], g->out_types ? &g->out_types[i] : NULL);
  for (int32_t i = 0; i < g->ld.n_vinfo; i++)
    write_value_info(b, 13, g->ld.vinfo_names[i], &g->ld.vinfo_types[i]);
  keel_pbw_end(b, at);
}

/* ============================================================== model */

static void write_opset(keel_bytes *b, const char *domain, int64_t version) {
  size_t at = keel_pbw_begin(b, 8);
  if (domain[0]) keel_pbw_str(b, 1, domain);
  keel_pbw_int(b, 2, version);
  keel_pbw_end(b, at);
}

static bool imported(const keel_model *m, const char *domain) {
  for (int32_t i = 0; i < m->n_opsets; i++)
    if (!strcmp(m->opsets[i].domain, domain)) return true;
  return false;
}

/* The model's imports, plus any domain a node uses that they lack (nodes
 * a pass added, or an inlined function's body): at the node's opset, the
 * first time it is seen. */
static void write_opsets(const keel_model *m, keel_bytes *b) {
  for (int32_t i = 0; i < m->n_opsets; i++) write_opset(b, m->opsets[i].domain, m->opsets[i].version);
  const char *seen[64];
  int ns = 0;
  for (int32_t gi = 0; gi < m->n_graphs; gi++)
    for (int32_t k = 0; k < m->graphs[gi]->n_nodes; k++) {
      const keel_node *n = &m->graphs[gi]->nodes[k];
      bool dup = imported(m, n->domain);
      for (int j = 0; j < ns && !dup; j++) dup = !strcmp(seen[j], n->domain);
      if (dup || ns == (int)KEEL_COUNTOF(seen)) continue;
      seen[ns++] = n->domain;
      write_opset(b, n->domain, n->opset > 0 ? n->opset : 1);
    }
}

static void write_props(const keel_model *m, keel_bytes *b) {
  for (int32_t i = 0; i < m->n_props; i++) {
    size_t at = keel_pbw_begin(b, 14);
    keel_pbw_str(b, 1, m->prop_keys[i]);
    keel_pbw_str(b, 2, m->prop_values[i]);
    keel_pbw_end(b, at);
  }
}

static keel_status write_model(writer *W) {
  const keel_model *m = W->m;
  keel_bytes *out = W->b;
  keel_pbw_int(out, 1, m->ir_version);
  if (m->producer_name) keel_pbw_str(out, 2, m->producer_name);
  if (m->producer_version) keel_pbw_str(out, 3, m->producer_version);
  if (m->domain) keel_pbw_str(out, 4, m->domain);
  if (m->model_version) keel_pbw_int(out, 5, m->model_version);
  if (m->doc) keel_pbw_str(out, 6, m->doc);
  write_graph(W, 7, m->main);
  write_opsets(m, out);
  write_props(m, out);
  if (out->failed) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "%s: out of memory while writing the model", m->path);
  if (out->len > INT32_MAX)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: the written model is %zu bytes; protobuf limits a "
                    "model with inline weights to 2 GiB", m->path, out->len);
  return KEEL_OK;
}

keel_status keel_onnx_write(const keel_model *m, const keel_tensor *const *replace,
                            keel_bytes *out) {
  if (!m || !m->main || !out) return keel_err(KEEL_ERR_INVALID_ARG, "keel_onnx_write: NULL argument");
  writer W = {.m = m, .replace = replace, .b = out};
  return write_model(&W);
}

/* The data file beside `path` (its folder + location). */
static keel_status open_external(writer *W, const char *path, const char *location) {
  if (strchr(location, '/') || !location[0] || !strcmp(location, ".."))
    return keel_err(KEEL_ERR_INVALID_ARG, "external data file '%s': a plain file name is needed", location);
  char full[4200];
  const char *slash = strrchr(path, '/');
  if (slash) snprintf(full, sizeof full, "%.*s/%s", (int)(slash - path), path, location);
  else snprintf(full, sizeof full, "%s", location);
  W->ext = fopen(full, "wb");
  if (!W->ext) return keel_err(KEEL_ERR_IO, "%s: cannot create: %s", full, strerror(errno));
  W->ext_location = location;
  return KEEL_OK;
}

keel_status keel_onnx_write_file(const keel_model *m, const keel_tensor *const *replace,
                                 const char *path) {
  keel_onnx_write_opts o = {.replace = replace};
  return keel_onnx_write_file_ex(m, &o, path);
}

keel_status keel_onnx_write_file_ex(const keel_model *m, const keel_onnx_write_opts *o,
                                    const char *path) {
  if (!m || !m->main || !o || !path) return keel_err(KEEL_ERR_INVALID_ARG, "keel_onnx_write_file: NULL argument");
  keel_bytes b = {0};
  writer W = {.m = m, .replace = o->replace, .b = &b, .ext_min = o->external_min};
  keel_status st = o->external ? open_external(&W, path, o->external) : KEEL_OK;
  if (!st) st = write_model(&W);
  if (W.ext && fclose(W.ext) != 0) W.ext_failed = true;
  if (!st && W.ext_failed)
    st = keel_err(KEEL_ERR_IO, "%s: writing external data '%s' failed: %s", path,
                  W.ext_location ? W.ext_location : "", strerror(errno));
  if (!st) {
    FILE *f = fopen(path, "wb");
    if (!f) st = keel_err(KEEL_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    else {
      bool ok = fwrite(b.p, 1, b.len, f) == b.len;
      if (fclose(f) != 0) ok = false;
      if (!ok) st = keel_err(KEEL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
  }
  free(b.p);
  return st;
}
