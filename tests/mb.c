/* mb.c: ModelProto writer for tests (see mb.h). */
#include "mb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
  uint8_t *p;
  size_t len, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n) cap *= 2;
    b->p = realloc(b->p, cap);
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void varint(buf *b, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  do {
    t[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(b, t, n);
}

static void tag(buf *b, unsigned f, unsigned wt) { varint(b, ((uint64_t)f << 3) | wt); }
static void field_int(buf *b, unsigned f, int64_t v) {
  tag(b, f, 0);
  varint(b, (uint64_t)v);
}
static void field_bytes(buf *b, unsigned f, const void *p, size_t n) {
  tag(b, f, 2);
  varint(b, n);
  put(b, p, n);
}
static void field_str(buf *b, unsigned f, const char *s) { field_bytes(b, f, s, strlen(s)); }
static void field_msg(buf *b, unsigned f, buf *m) {
  field_bytes(b, f, m->p, m->len);
  free(m->p);
  memset(m, 0, sizeof *m);
}

struct mb_node {
  buf body;
};

struct mb_graph {
  char *name;
  buf body;      /* inputs, outputs, initializers, value_info */
  mb_node **nodes;
  size_t n_nodes;
};

mb_graph *mb_graph_new(const char *name) {
  mb_graph *g = calloc(1, sizeof *g);
  g->name = strdup(name);
  return g;
}

void mb_graph_free(mb_graph *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_nodes; i++) free(g->nodes[i]->body.p), free(g->nodes[i]);
  free(g->nodes);
  free(g->body.p);
  free(g->name);
  free(g);
}

/* TypeProto.Tensor */
static void tensor_type(buf *t, int dtype, int rank, const int64_t *dims) {
  buf tt = {0}, shape = {0};
  field_int(&tt, 1, dtype);
  if (rank >= 0) {
    for (int i = 0; i < rank; i++) {
      buf d = {0};
      if (dims[i] >= 0) field_int(&d, 1, dims[i]);
      else {
        char sym[16];
        snprintf(sym, sizeof sym, "d%d", i);
        field_str(&d, 2, sym);
      }
      field_msg(&shape, 1, &d);
    }
    field_msg(&tt, 2, &shape);
  }
  field_msg(t, 1, &tt);
}

static void value_info(buf *out, unsigned field, const char *name, int dtype, int rank,
                       const int64_t *dims, int seq) {
  buf vi = {0}, type = {0};
  field_str(&vi, 1, name);
  if (seq) {
    buf st = {0}, inner = {0};
    tensor_type(&inner, dtype, -1, NULL);
    field_msg(&st, 1, &inner);
    field_msg(&type, 4, &st);
  } else {
    tensor_type(&type, dtype, rank, dims);
  }
  field_msg(&vi, 2, &type);
  field_msg(out, field, &vi);
}

void mb_input(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims) {
  value_info(&g->body, 11, name, dtype, rank, dims, 0);
}
void mb_output(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims) {
  value_info(&g->body, 12, name, dtype, rank, dims, 0);
}
void mb_input_seq(mb_graph *g, const char *name, int elem_dtype) {
  value_info(&g->body, 11, name, elem_dtype, -1, NULL, 1);
}
void mb_output_seq(mb_graph *g, const char *name, int elem_dtype) {
  value_info(&g->body, 12, name, elem_dtype, -1, NULL, 1);
}
/* map(key, tensor(value)) as a graph input: TypeProto.map_type (field 5). */
void mb_input_map(mb_graph *g, const char *name, int key_dtype, int value_dtype) {
  buf vi = {0}, type = {0}, mt = {0}, inner = {0};
  field_str(&vi, 1, name);
  field_int(&mt, 1, key_dtype);
  tensor_type(&inner, value_dtype, -1, NULL);
  field_msg(&mt, 2, &inner);
  field_msg(&type, 5, &mt);
  field_msg(&vi, 2, &type);
  field_msg(&g->body, 11, &vi);
}
void mb_value_info(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims) {
  value_info(&g->body, 13, name, dtype, rank, dims, 0);
}

static void tensor_proto(buf *t, const char *name, int dtype, int rank, const int64_t *dims,
                         const void *data) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    field_int(t, 1, dims[i]);
    n *= dims[i];
  }
  field_int(t, 2, dtype);
  if (name) field_str(t, 8, name);
  if (dtype == KEEL_STRING) {
    const char *const *s = data;
    for (int64_t i = 0; i < n; i++) field_str(t, 6, s[i]);
  } else {
    field_bytes(t, 9, data, keel_dtype_nbytes((keel_dtype)dtype, n));
  }
}

void mb_init(mb_graph *g, const char *name, int dtype, int rank, const int64_t *dims,
             const void *data) {
  buf t = {0};
  tensor_proto(&t, name, dtype, rank, dims, data);
  field_msg(&g->body, 5, &t);
}

static void ext_entry(buf *t, const char *key, const char *val) {
  buf e = {0};
  field_str(&e, 1, key);
  field_str(&e, 2, val);
  field_msg(t, 13, &e);
}

void mb_init_external(mb_graph *g, const char *name, int dtype, int rank,
                      const int64_t *dims, const char *location, int64_t offset,
                      int64_t length) {
  buf t = {0};
  for (int i = 0; i < rank; i++) field_int(&t, 1, dims[i]);
  field_int(&t, 2, dtype);
  field_str(&t, 8, name);
  ext_entry(&t, "location", location);
  char num[32];
  snprintf(num, sizeof num, "%lld", (long long)offset);
  ext_entry(&t, "offset", num);
  snprintf(num, sizeof num, "%lld", (long long)length);
  ext_entry(&t, "length", num);
  field_int(&t, 14, 1);
  field_msg(&g->body, 5, &t);
}

mb_node *mb_add(mb_graph *g, const char *op, const char *inputs, const char *outputs) {
  mb_node *n = calloc(1, sizeof *n);
  for (int f = 1; f <= 2; f++) {
    const char *s = f == 1 ? inputs : outputs;
    while (s && *s) {
      const char *c = strchr(s, ',');
      size_t len = c ? (size_t)(c - s) : strlen(s);
      field_bytes(&n->body, (unsigned)f, s, len);
      s = c ? c + 1 : NULL;
      if (c && !*s) field_bytes(&n->body, (unsigned)f, "", 0); /* trailing empty */
    }
  }
  field_str(&n->body, 4, op);
  g->nodes = realloc(g->nodes, (g->n_nodes + 1) * sizeof *g->nodes);
  g->nodes[g->n_nodes++] = n;
  return n;
}

void mb_name(mb_node *n, const char *name) { field_str(&n->body, 3, name); }
void mb_domain(mb_node *n, const char *domain) { field_str(&n->body, 7, domain); }

static void attr_done(mb_node *n, buf *a, const char *name, int type) {
  field_str(a, 1, name);
  field_int(a, 20, type);
  field_msg(&n->body, 5, a);
}

void mb_attr_i(mb_node *n, const char *name, int64_t v) {
  buf a = {0};
  field_int(&a, 3, v);
  attr_done(n, &a, name, 2);
}
void mb_attr_f(mb_node *n, const char *name, float v) {
  buf a = {0};
  tag(&a, 2, 5);
  put(&a, &v, 4);
  attr_done(n, &a, name, 1);
}
void mb_attr_s(mb_node *n, const char *name, const char *v) {
  buf a = {0};
  field_str(&a, 4, v);
  attr_done(n, &a, name, 3);
}
void mb_attr_ints(mb_node *n, const char *name, int count, const int64_t *v) {
  buf a = {0};
  for (int i = 0; i < count; i++) field_int(&a, 8, v[i]);
  attr_done(n, &a, name, 7);
}
void mb_attr_floats(mb_node *n, const char *name, int count, const float *v) {
  buf a = {0};
  for (int i = 0; i < count; i++) {
    tag(&a, 7, 5);
    put(&a, &v[i], 4);
  }
  attr_done(n, &a, name, 6);
}
void mb_attr_strs(mb_node *n, const char *name, int count, const char *const *v) {
  buf a = {0};
  for (int i = 0; i < count; i++) field_str(&a, 9, v[i]);
  attr_done(n, &a, name, 8);
}

void mb_attr_t(mb_node *n, const char *name, int dtype, int rank, const int64_t *dims,
               const void *data) {
  buf a = {0}, t = {0};
  tensor_proto(&t, NULL, dtype, rank, dims, data);
  field_msg(&a, 5, &t);
  attr_done(n, &a, name, 4);
}

static void graph_proto(buf *out, mb_graph *g) {
  for (size_t i = 0; i < g->n_nodes; i++) field_msg(out, 1, &g->nodes[i]->body);
  field_str(out, 2, g->name);
  put(out, g->body.p, g->body.len);
  mb_graph_free(g);
}

void mb_attr_g(mb_node *n, const char *name, mb_graph *sub) {
  buf a = {0}, gp = {0};
  graph_proto(&gp, sub);
  field_msg(&a, 6, &gp);
  attr_done(n, &a, name, 5);
}

uint8_t *mb_model(mb_graph *main, int opset, size_t *len) {
  return mb_model_domains(main, opset, NULL, 0, len);
}

uint8_t *mb_model_domains(mb_graph *main, int opset, const char *domain, int domain_opset,
                          size_t *len) {
  buf m = {0}, op = {0}, gp = {0};
  field_int(&m, 1, 8);
  field_str(&m, 2, "keel-tests");
  field_int(&op, 2, opset);
  field_msg(&m, 8, &op);
  if (domain) {
    field_str(&op, 1, domain);
    field_int(&op, 2, domain_opset);
    field_msg(&m, 8, &op);
  }
  graph_proto(&gp, main);
  field_msg(&m, 7, &gp);
  *len = m.len;
  return m.p;
}

keel_session_t *mb_session_opts(mb_graph *main, int opset, const keel_options *opts) {
  size_t len;
  uint8_t *bytes = mb_model(main, opset, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, opts, &s);
  free(bytes);
  if (st) fprintf(stderr, "mb_session: %s: %s\n", keel_status_str(st), keel_last_error());
  return s;
}

keel_session_t *mb_session(mb_graph *main, int opset) { return mb_session_opts(main, opset, NULL); }

keel_value_t *mb_tensor(keel_session_t *s, int dtype, int rank, const int64_t *dims,
                        const void *data) {
  keel_value_t *v = NULL;
  if (keel_tensor_create(s, (keel_dtype)dtype, rank, dims, data, &v))
    fprintf(stderr, "mb_tensor: %s\n", keel_last_error());
  return v;
}
