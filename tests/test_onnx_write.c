/* test_onnx_write.c: the ONNX writer (src/onnx/write.c).
 *
 *  - A model with every attribute type, a Loop whose body holds an If,
 *    folded Constant nodes (main graph and body), initializers inside
 *    sub-graphs, value_info and symbolic dims: load -> write -> load gives
 *    the same IR (compared field by field: graphs, nodes, attributes,
 *    types, constants' bytes), writing again gives the same bytes, and the
 *    written model's outputs equal the original's bit for bit.
 *  - External data: the written model holds the weights inline and loads
 *    without the external file.
 *  - Replacement: one initializer replaced, everything else identical;
 *    the run sees the new values.
 *  - Errors: an unwritable path is KEEL_ERR_IO naming it.
 * (`keel test --roundtrip` runs every conformance folder the same way:
 * ctest roundtrip_*.)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mb.h"
#include "onnx/onnx.h"
#include "onnx/write.h"

/* ======================================================== comparing IR */

static bool str_eq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return !strcmp(a, b);
}

static bool tensor_eq(const keel_tensor *a, const keel_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i]) return false;
  if (a->dtype == KEEL_STRING) {
    const keel_string *x = a->data, *y = b->data;
    for (int64_t i = 0; i < keel_tensor_numel(a); i++)
      if (x[i].len != y[i].len || memcmp(x[i].data, y[i].data, x[i].len)) return false;
    return true;
  }
  size_t n = keel_tensor_nbytes(a);
  return n == keel_tensor_nbytes(b) && (!n || !memcmp(a->data, b->data, n));
}

static bool type_eq(const keel_type *a, const keel_type *b) {
  if (!a || !b) return (!a || a->kind == KEEL_TYPE_UNKNOWN) && (!b || b->kind == KEEL_TYPE_UNKNOWN);
  if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank || a->key_dtype != b->key_dtype)
    return false;
  for (int32_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i] || !str_eq(a->dim_params[i], b->dim_params[i])) return false;
  return (!a->elem && !b->elem) || (a->elem && b->elem && type_eq(a->elem, b->elem));
}

static bool attr_eq(const keel_attr *a, const keel_attr *b) {
  if (!str_eq(a->name, b->name) || a->type != b->type || a->n != b->n) return false;
  switch (a->type) {
    case KEEL_ATTR_FLOAT: return memcmp(&a->f, &b->f, 4) == 0;
    case KEEL_ATTR_INT: return a->i == b->i;
    case KEEL_ATTR_STRING: return a->slen == b->slen && !memcmp(a->s, b->s, a->slen);
    case KEEL_ATTR_TENSOR: case KEEL_ATTR_SPARSE_TENSOR: return tensor_eq(a->t, b->t);
    case KEEL_ATTR_GRAPH: return str_eq(a->g->path, b->g->path);
    case KEEL_ATTR_FLOATS: return !a->n || !memcmp(a->floats, b->floats, 4 * (size_t)a->n);
    case KEEL_ATTR_INTS: return !a->n || !memcmp(a->ints, b->ints, 8 * (size_t)a->n);
    case KEEL_ATTR_STRINGS:
      for (int32_t i = 0; i < a->n; i++)
        if (!str_eq(a->strings[i], b->strings[i])) return false;
      return true;
    case KEEL_ATTR_TENSORS:
      for (int32_t i = 0; i < a->n; i++)
        if (!tensor_eq(&a->tensors[i], &b->tensors[i])) return false;
      return true;
    case KEEL_ATTR_TYPE_PROTO: return type_eq(a->tp, b->tp);
    default: return true;
  }
}

static bool node_eq(const keel_node *a, const keel_node *b) {
  if (!str_eq(a->name, b->name) || !str_eq(a->op_type, b->op_type) || !str_eq(a->domain, b->domain) ||
      a->opset != b->opset || a->n_in != b->n_in || a->n_out != b->n_out || a->n_attr != b->n_attr)
    return false;
  for (int32_t i = 0; i < a->n_in; i++)
    if (!str_eq(a->in_names[i], b->in_names[i])) return false;
  for (int32_t i = 0; i < a->n_out; i++)
    if (!str_eq(a->out_names[i], b->out_names[i])) return false;
  for (int32_t i = 0; i < a->n_attr; i++)
    if (!attr_eq(&a->attrs[i], &b->attrs[i])) return false;
  return true;
}

/* Initializers and folded Constants are compared by name: the writer puts
 * the Constant nodes first, so their order among initializers may move.
 * `skip` names one constant left out (the replaced one). */
static bool inits_eq(const keel_model *ma, const keel_graph *a, const keel_model *mb,
                     const keel_graph *b, const char *skip) {
  if (a->ld.n_init != b->ld.n_init || a->ld.n_folded != b->ld.n_folded) return false;
  for (int32_t i = 0; i < a->ld.n_init; i++) {
    int32_t j = 0;
    while (j < b->ld.n_init && strcmp(a->ld.init_names[i], b->ld.init_names[j])) j++;
    if (j == b->ld.n_init || a->ld.init_is_node[i] != b->ld.init_is_node[j]) return false;
    if (skip && !strcmp(skip, a->ld.init_names[i])) continue;
    if (!tensor_eq(&ma->consts[a->ld.init_consts[i]], &mb->consts[b->ld.init_consts[j]])) return false;
  }
  return true;
}

static bool graph_eq(const keel_model *ma, const keel_graph *a, const keel_model *mb,
                     const keel_graph *b, const char *skip) {
  if (!str_eq(a->name, b->name) || !str_eq(a->path, b->path) || !str_eq(a->doc, b->doc) ||
      a->n_nodes != b->n_nodes || a->n_in != b->n_in || a->n_out != b->n_out ||
      a->ld.n_vinfo != b->ld.n_vinfo || !inits_eq(ma, a, mb, b, skip))
    return false;
  for (int32_t i = 0; i < a->n_nodes; i++)
    if (!node_eq(&a->nodes[i], &b->nodes[i])) return false;
  for (int32_t i = 0; i < a->n_in; i++)
    if (!str_eq(a->in_names[i], b->in_names[i]) || !type_eq(&a->in_types[i], &b->in_types[i])) return false;
  for (int32_t i = 0; i < a->n_out; i++)
    if (!str_eq(a->out_names[i], b->out_names[i]) || !type_eq(&a->out_types[i], &b->out_types[i]))
      return false;
  for (int32_t i = 0; i < a->ld.n_vinfo; i++)
    if (!str_eq(a->ld.vinfo_names[i], b->ld.vinfo_names[i]) ||
        !type_eq(&a->ld.vinfo_types[i], &b->ld.vinfo_types[i]))
      return false;
  return true;
}

static bool model_eq(const keel_model *a, const keel_model *b, const char *skip) {
  if (a->ir_version != b->ir_version || !str_eq(a->producer_name, b->producer_name) ||
      a->n_opsets != b->n_opsets || a->n_graphs != b->n_graphs || a->n_props != b->n_props ||
      a->n_consts != b->n_consts)
    return false;
  for (int32_t i = 0; i < a->n_opsets; i++)
    if (!str_eq(a->opsets[i].domain, b->opsets[i].domain) || a->opsets[i].version != b->opsets[i].version)
      return false;
  for (int32_t i = 0; i < a->n_graphs; i++)
    if (!graph_eq(a, a->graphs[i], b, b->graphs[i], skip)) return false;
  return true;
}

/* =========================================================== the model */

static const int64_t ONE[1] = {1};

/* If(c) then: y = Transpose(x, perm [1,0]) * k ; else: y = LeakyRelu(x^T)
 * (each branch its own initializer / Constant). */
static mb_node *branch(mb_graph *b) {
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "yt", KEEL_FLOAT, 2, (int64_t[]){3, -1});
  float k[3] = {1.5f, -2, 0.25f};
  mb_init(t, "k", KEEL_FLOAT, 2, (int64_t[]){3, 1}, k);
  mb_attr_ints(mb_add(t, "Transpose", "xin", "xt"), "perm", 2, (int64_t[]){1, 0});
  mb_add(t, "Mul", "xt,k", "yt");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "ye", KEEL_FLOAT, -1, NULL);
  mb_node *tr = mb_add(e, "Transpose", "xin", "xe");
  mb_attr_ints(tr, "perm", 2, (int64_t[]){1, 0});
  mb_node *lr = mb_add(e, "LeakyRelu", "xe", "ye");
  mb_name(lr, "leaky");
  mb_attr_f(lr, "alpha", 0.125f);
  mb_node *n = mb_add(b, "If", "odd", "y");
  mb_name(n, "branch");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  return n;
}

/* body(i, cond, acc [3,N]): acc' = acc + If(i odd)(...) + Reshape(cf, cshape),
 * cf and cshape Constant nodes of the body (value_floats, value_ints). */
static mb_graph *loop_body(void) {
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "i", KEEL_INT64, 0, NULL);
  mb_input(b, "c", KEEL_BOOL, 0, NULL);
  mb_input(b, "acc", KEEL_FLOAT, -1, NULL);
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "acc_out", KEEL_FLOAT, -1, NULL);
  int64_t two = 2;
  mb_init(b, "two", KEEL_INT64, 0, NULL, &two);
  mb_attr_floats(mb_add(b, "Constant", "", "cf"), "value_floats", 3, (float[]){0.5f, 1, -1});
  mb_attr_ints(mb_add(b, "Constant", "", "cshape"), "value_ints", 2, (int64_t[]){3, 1});
  mb_add(b, "Mod", "i,two", "r");
  mb_attr_i(mb_add(b, "Cast", "r", "odd"), "to", KEEL_BOOL);
  branch(b);
  mb_add(b, "Reshape", "cf,cshape", "cr");
  mb_add(b, "Add", "acc,y", "s");
  mb_add(b, "Add", "s,cr", "acc_out");
  mb_add(b, "Identity", "c", "c_out");
  mb_value_info(b, "s", KEEL_FLOAT, 2, (int64_t[]){3, -1});
  return b;
}

/* main(x [N,3] with N symbolic, M): the loop over acc0 = zeros(3,N) from
 * ConstantOfShape (a TENSOR attribute), then Pad (a STRING attribute) and
 * a Split into a string-typed tail: Concat of Constant strings. */
static uint8_t *model_bytes(size_t *len, const float *w) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){-1, 3});
  mb_input(g, "M", KEEL_INT64, 0, NULL);
  mb_output(g, "acc", KEEL_FLOAT, -1, NULL);
  mb_output(g, "padded", KEEL_FLOAT, -1, NULL);
  mb_output(g, "words", KEEL_STRING, 1, (int64_t[]){3});
  uint8_t t = 1;
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){1, 3}, w);
  mb_add(g, "Mul", "x,w", "xin");
  mb_add(g, "Shape", "xin", "sh");
  mb_attr_ints(mb_add(g, "Constant", "", "perm_idx"), "value_ints", 2, (int64_t[]){1, 0});
  mb_add(g, "Gather", "sh,perm_idx", "sh_t");
  float zero = 0;
  mb_attr_t(mb_add(g, "ConstantOfShape", "sh_t", "acc0"), "value", KEEL_FLOAT, 1, ONE, &zero);
  mb_node *n = mb_add(g, "Loop", "M,true,acc0", "acc");
  mb_name(n, "loop");
  mb_attr_g(n, "body", loop_body());
  int64_t pads[4] = {0, 1, 0, 2};
  mb_init(g, "pads", KEEL_INT64, 1, (int64_t[]){4}, pads);
  mb_attr_s(mb_add(g, "Pad", "x,pads", "padded"), "mode", "reflect");
  mb_attr_strs(mb_add(g, "Constant", "", "w1"), "value_strings", 2, (const char *[]){"keel", ""});
  mb_attr_s(mb_add(g, "Constant", "", "w2"), "value_string", "onnx");
  mb_init(g, "one", KEEL_INT64, 1, ONE, ONE);
  mb_add(g, "Reshape", "w2,one", "w2r");
  mb_attr_i(mb_add(g, "Concat", "w1,w2r", "words"), "axis", 0);
  return mb_model(g, 13, len);
}

/* ============================================================ running */

/* Runs the model in `bytes` on x = 0.1*(i+1) [4,3], M = 3; outputs into out. */
static bool run_bytes(const uint8_t *bytes, size_t len, keel_value_t *out[3]) {
  keel_session_t *s;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  CHECK_OK(st);
  if (st) return false;
  float x[12];
  for (int i = 0; i < 12; i++) x[i] = 0.1f * (float)(i + 1);
  int64_t m = 3;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){4, 3}, x),
                         mb_tensor(s, KEEL_INT64, 0, NULL, &m)};
  st = keel_run(s, (const char *[]){"x", "M"}, in, 2, out);
  CHECK_OK(st);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
  return st == KEEL_OK;
}

static bool value_eq(const keel_value_t *a, const keel_value_t *b) {
  if (keel_value_dtype(a) != keel_value_dtype(b) || keel_value_rank(a) != keel_value_rank(b)) return false;
  size_t n = 1;
  for (int i = 0; i < keel_value_rank(a); i++) {
    if (keel_value_shape(a)[i] != keel_value_shape(b)[i]) return false;
    n *= (size_t)keel_value_shape(a)[i];
  }
  if (keel_value_dtype(a) == KEEL_STRING) {
    const keel_string *sa = keel_value_data(a), *sb = keel_value_data(b);
    for (size_t i = 0; i < n; i++)
      if (sa[i].len != sb[i].len || memcmp(sa[i].data, sb[i].data, sa[i].len)) return false;
    return true;
  }
  return !memcmp(keel_value_data(a), keel_value_data(b), n * keel_dtype_nbytes(keel_value_dtype(a), 1));
}

static const float W[3] = {1, -0.5f, 2};

static void round_trip(void) {
  size_t len;
  uint8_t *orig = model_bytes(&len, W);
  keel_model *m1 = NULL, *m2 = NULL, *m3 = NULL;
  keel_bytes b1 = {0}, b2 = {0};
  CHECK_OK(keel_onnx_load_memory(orig, len, NULL, &m1));
  CHECK_OK(keel_onnx_write(m1, NULL, &b1));
  CHECK_OK(keel_onnx_load_memory(b1.p, b1.len, NULL, &m2));
  CHECK(m1 && m2 && model_eq(m1, m2, NULL));
  CHECK(m2 && m2->n_graphs == 4 && m2->main->ld.n_folded == 3);
  CHECK_OK(keel_onnx_write(m2, NULL, &b2));
  CHECK(b1.len == b2.len && !memcmp(b1.p, b2.p, b1.len));
  CHECK_OK(keel_onnx_load_memory(b2.p, b2.len, NULL, &m3));
  CHECK(m3 && model_eq(m1, m3, NULL));
  keel_value_t *want[3] = {0}, *got[3] = {0};
  if (run_bytes(orig, len, want) && run_bytes(b1.p, b1.len, got))
    for (int i = 0; i < 3; i++) CHECK(value_eq(want[i], got[i]));
  const keel_string *words = got[2] ? keel_value_data(got[2]) : NULL;
  CHECK(words && words[2].len == 4 && !memcmp(words[2].data, "onnx", 4) && words[1].len == 0);
  for (int i = 0; i < 3; i++) keel_value_release(want[i]), keel_value_release(got[i]);
  keel_onnx_free(m1);
  keel_onnx_free(m2);
  keel_onnx_free(m3);
  free(orig);
  free(b1.p);
  free(b2.p);
}

/* ====================================================== external data */

static void external_data(void) {
  char dir[] = "/tmp/keel_write_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char wpath[256], model[256];
  snprintf(wpath, sizeof wpath, "%s/weights.bin", dir);
  snprintf(model, sizeof model, "%s/model.onnx", dir);
  float w[6] = {-1, -1, 10, 20, 30, 40};
  FILE *f = fopen(wpath, "wb");
  fwrite(w, sizeof w, 1, f);
  fclose(f);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_init_external(g, "W", KEEL_FLOAT, 1, (int64_t[]){4}, "weights.bin", 8, 16);
  mb_add(g, "Add", "x,W", "y");
  size_t len;
  uint8_t *bytes = mb_model(g, 13, &len);
  f = fopen(model, "wb");
  fwrite(bytes, len, 1, f);
  fclose(f);
  free(bytes);
  keel_model *m = NULL, *m2 = NULL;
  keel_bytes b = {0};
  CHECK_OK(keel_onnx_load_file(model, &m));
  if (m) CHECK_OK(keel_onnx_write(m, NULL, &b));
  unlink(wpath); /* the written model must not need it */
  CHECK_OK(keel_onnx_load_memory(b.p, b.len, NULL, &m2));
  CHECK(m && m2 && model_eq(m, m2, NULL));
  const float *w2 = m2 ? m2->consts[0].data : NULL;
  CHECK(w2 && w2[0] == 10 && w2[3] == 40);
  keel_onnx_free(m);
  keel_onnx_free(m2);
  free(b.p);
  unlink(model);
  rmdir(dir);
}

/* ======================================================== replacement */

static void replacement(void) {
  size_t len;
  uint8_t *orig = model_bytes(&len, W);
  keel_model *m = NULL, *m2 = NULL;
  CHECK_OK(keel_onnx_load_memory(orig, len, NULL, &m));
  if (!m) return;
  int32_t c = -1;
  for (int32_t i = 0; i < m->n_consts; i++)
    if (!strcmp(m->const_names[i], "w")) c = i;
  CHECK(c >= 0);
  float nw[3] = {3, 0, -1};
  keel_tensor t = m->consts[c];
  t.data = nw;
  const keel_tensor **rep = calloc((size_t)m->n_consts, sizeof *rep);
  rep[c] = &t;
  char path[] = "/tmp/keel_write_rep_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK_OK(keel_onnx_write_file(m, rep, path));
  CHECK_OK(keel_onnx_load_file(path, &m2));
  CHECK(m2 && model_eq(m, m2, "w"));
  CHECK(m2 && !memcmp(m2->consts[c].data, nw, sizeof nw));
  /* the run sees the new weights: the same model built with them agrees */
  size_t len2;
  uint8_t *want_model = model_bytes(&len2, nw);
  keel_bytes b = {0};
  if (m2) CHECK_OK(keel_onnx_write(m2, NULL, &b));
  keel_value_t *want[3] = {0}, *got[3] = {0};
  if (run_bytes(want_model, len2, want) && run_bytes(b.p, b.len, got))
    for (int i = 0; i < 3; i++) CHECK(value_eq(want[i], got[i]));
  for (int i = 0; i < 3; i++) keel_value_release(want[i]), keel_value_release(got[i]);
  unlink(path);
  free(rep);
  free(b.p);
  free(want_model);
  free(orig);
  keel_onnx_free(m);
  keel_onnx_free(m2);
}

static void write_errors(void) {
  size_t len;
  uint8_t *orig = model_bytes(&len, W);
  keel_model *m = NULL;
  CHECK_OK(keel_onnx_load_memory(orig, len, NULL, &m));
  if (m) CHECK_STATUS(keel_onnx_write_file(m, NULL, "/nonexistent-dir/model.onnx"), KEEL_ERR_IO);
  CHECK(strstr(keel_last_error(), "/nonexistent-dir/model.onnx") != NULL);
  CHECK_STATUS(keel_onnx_write(NULL, NULL, NULL), KEEL_ERR_INVALID_ARG);
  keel_onnx_free(m);
  free(orig);
}

int main(void) {
  round_trip();
  external_data();
  replacement();
  write_errors();
  return check_report();
}
