/* test_onnx.c: the ONNX reader on good, truncated, corrupt and external
 * data. Bad bytes must give an error with a message, never a crash, and
 * leave nothing allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mb.h"

/* A model with an initializer, attributes of several kinds and an If with
 * two sub-graphs, so truncation hits every kind of message. */
static uint8_t *sample(size_t *len) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){2, 3});
  mb_input(g, "C", KEEL_BOOL, 0, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  float w[6] = {1, 2, 3, 4, 5, 6};
  mb_init(g, "W", KEEL_FLOAT, 2, (int64_t[]){2, 3}, w);
  mb_add(g, "Add", "X,W", "S");
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "T", KEEL_FLOAT, -1, NULL);
  mb_add(t, "Mul", "S,S", "T");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "E", KEEL_FLOAT, -1, NULL);
  mb_add(e, "Sub", "S,W", "E");
  mb_node *n = mb_add(g, "If", "C", "Y");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  mb_attr_ints(n, "unused_ints", 3, (int64_t[]){1, -2, 3});
  mb_attr_f(n, "unused_f", 0.5f);
  return mb_model(g, 13, len);
}

static keel_status load(const uint8_t *p, size_t n, keel_session_t **s) {
  return keel_session_create_from_memory(p, n, "/tmp", NULL, s);
}

static void good_model_runs(void) {
  size_t len;
  uint8_t *bytes = sample(&len);
  keel_session_t *s = NULL;
  CHECK_OK(load(bytes, len, &s));
  float x[6] = {1, 1, 1, 1, 1, 1};
  uint8_t c = 1;
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, x),
                         mb_tensor(s, KEEL_BOOL, 0, NULL, &c)};
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X", "C"}, in, 2, out));
  CHECK(out[0] && keel_value_at(out[0], 5) == 49.0); /* (1+6)^2 */
  keel_value_release(out[0]);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
  free(bytes);
}

/* Every prefix of the file: an error (or, rarely, a valid smaller model),
 * never a crash, nothing left allocated. */
static void truncations(void) {
  size_t len;
  uint8_t *bytes = sample(&len);
  int failed = 0;
  for (size_t n = 0; n < len; n++) {
    uint8_t *copy = malloc(n + 1); /* exact size: ASan sees overreads */
    memcpy(copy, bytes, n);
    keel_session_t *s = NULL;
    keel_status st = load(copy, n, &s);
    if (st) {
      failed++;
      CHECK(keel_last_error()[0] != 0);
    }
    keel_session_destroy(s);
    free(copy);
    CHECK(keel_process_bytes() == 0);
  }
  CHECK(failed > (int)len * 9 / 10);
  free(bytes);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* Random byte changes: no crash, no leak (ASan and UBSan watch in CI). */
static void corruptions(void) {
  size_t len;
  uint8_t *bytes = sample(&len);
  for (int i = 0; i < 3000; i++) {
    uint8_t *copy = malloc(len);
    memcpy(copy, bytes, len);
    int flips = 1 + (int)(next() % 4);
    for (int f = 0; f < flips; f++) copy[next() % len] = (uint8_t)next();
    keel_session_t *s = NULL;
    if (load(copy, len, &s) == KEEL_OK) keel_session_destroy(s);
    free(copy);
  }
  CHECK(keel_process_bytes() == 0);
  free(bytes);
}

static void specific_errors(void) {
  keel_session_t *s = NULL;
  CHECK_STATUS(load((const uint8_t *)"\x3a\xff\xff\xff\x0f", 5, &s), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "runs past the end") != NULL);
  CHECK_STATUS(load((const uint8_t *)"", 0, &s), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "no graph") != NULL);
  CHECK_STATUS(keel_session_create("/nonexistent/model.onnx", NULL, &s), KEEL_ERR_IO);
  CHECK(strstr(keel_last_error(), "/nonexistent/model.onnx") != NULL);
  /* an initializer whose raw_data is shorter than its shape */
  mb_graph *g = mb_graph_new("main");
  mb_output(g, "W", KEEL_FLOAT, -1, NULL);
  float w[2] = {1, 2};
  mb_init(g, "W", KEEL_FLOAT, 1, (int64_t[]){2}, w);
  size_t len;
  uint8_t *bytes = mb_model(g, 13, &len);
  /* patch dims 2 -> 3: the payload no longer fits */
  for (size_t i = 0; i + 1 < len; i++)
    if (bytes[i] == 0x08 && bytes[i + 1] == 0x02) { bytes[i + 1] = 0x03; break; }
  CHECK_STATUS(load(bytes, len, &s), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "raw_data") != NULL);
  free(bytes);
  /* an undefined input names the value and the node */
  g = mb_graph_new("main");
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_name(mb_add(g, "Relu", "nowhere", "Y"), "relu_1");
  bytes = mb_model(g, 13, &len);
  CHECK_STATUS(load(bytes, len, &s), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "'nowhere'") && strstr(keel_last_error(), "relu_1"));
  free(bytes);
  /* an op keel does not know: UNSUPPORTED naming op, domain and opset */
  g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){1});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_add(g, "NoSuchOp", "X", "Y");
  bytes = mb_model(g, 13, &len);
  CHECK_STATUS(load(bytes, len, &s), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "NoSuchOp") && strstr(keel_last_error(), "ai.onnx") &&
        strstr(keel_last_error(), "13"));
  free(bytes);
}

/* External data: the tensor's bytes come from a file beside the model. */
static void external_data(void) {
  char dir[] = "/tmp/keel_ext_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/weights.bin", dir);
  FILE *f = fopen(path, "wb");
  float w[8] = {0, 0, 10, 20, 30, 40, 0, 0};
  fwrite(w, sizeof w, 1, f);
  fclose(f);
  for (int bad = 0; bad < 2; bad++) {
    mb_graph *g = mb_graph_new("main");
    mb_output(g, "W", KEEL_FLOAT, -1, NULL);
    mb_init_external(g, "W", KEEL_FLOAT, 1, (int64_t[]){4}, "weights.bin", bad ? 24 : 8, 16);
    size_t len;
    uint8_t *bytes = mb_model(g, 13, &len);
    char model[256];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    f = fopen(model, "wb");
    fwrite(bytes, len, 1, f);
    fclose(f);
    free(bytes);
    keel_session_t *s = NULL;
    keel_status st = keel_session_create(model, NULL, &s);
    if (bad) {
      CHECK(st == KEEL_ERR_INVALID_MODEL && strstr(keel_last_error(), "past its end"));
    } else {
      CHECK_OK(st);
      keel_value_t *out[1] = {0};
      CHECK_OK(keel_run(s, NULL, NULL, 0, out));
      CHECK(out[0] && keel_value_at(out[0], 0) == 10 && keel_value_at(out[0], 3) == 40);
      keel_value_release(out[0]);
    }
    keel_session_destroy(s);
    unlink(model);
  }
  unlink(path);
  rmdir(dir);
}

/* Outputs stay valid after the session is gone, even when they are the
 * model's own initializer bytes (directly, or through a view). */
static void outputs_outlive_session(void) {
  mb_graph *g = mb_graph_new("main");
  mb_output(g, "W", KEEL_FLOAT, -1, NULL);
  mb_output(g, "V", KEEL_FLOAT, -1, NULL);
  float w[4] = {1.5f, 2.5f, 3.5f, 4.5f};
  int64_t shape[2] = {2, 2};
  mb_init(g, "W", KEEL_FLOAT, 1, (int64_t[]){4}, w);
  mb_init(g, "shape", KEEL_INT64, 1, (int64_t[]){2}, shape);
  mb_add(g, "Reshape", "W,shape", "V");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *out[2] = {0};
  CHECK_OK(keel_run(s, NULL, NULL, 0, out));
  keel_session_destroy(s);
  CHECK(out[0] && keel_value_at(out[0], 3) == 4.5);
  CHECK(out[1] && keel_value_rank(out[1]) == 2 && keel_value_at(out[1], 1) == 2.5);
  keel_value_release(out[0]);
  keel_value_release(out[1]);
}

/* keel_session_meta reads what the file says about itself
 * (tests/python/models/stateful.onnx, written by tests/python/gen_models.py);
 * keel_value_exclusive tells fresh outputs from ones over memory others see. */
static void metadata_and_exclusive(void) {
  keel_session_t *s;
  CHECK_OK(keel_session_create("tests/python/models/stateful.onnx", NULL, &s));
  if (!s) return;
  keel_model_meta m = {.size = sizeof m};
  CHECK_OK(keel_session_meta(s, &m));
  CHECK(!strcmp(m.producer_name, "keel-tests") && !strcmp(m.producer_version, "1.0"));
  CHECK(!strcmp(m.domain, "ai.keel.test") && m.model_version == 3 && m.ir_version == 8);
  CHECK(!strcmp(m.graph_name, "rnn_cell") && !strcmp(m.graph_description, "one step of an RNN cell"));
  CHECK(!strcmp(m.description, "stateful model for the parity script"));
  CHECK(m.n_props == 2 && !strcmp(m.prop_keys[0], "author") && !strcmp(m.prop_values[0], "keel") &&
        !strcmp(m.prop_keys[1], "purpose") && !strcmp(m.prop_values[1], "state fed back"));
  keel_model_meta small = {.size = 8};
  CHECK(keel_session_meta(s, &small) == KEEL_ERR_INVALID_ARG);
  keel_session_destroy(s);

  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 1, (int64_t[]){4});
  mb_output(g, "W", KEEL_FLOAT, -1, NULL);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "same", KEEL_FLOAT, -1, NULL);
  mb_init(g, "W", KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
  mb_add(g, "Add", "x,W", "y");
  mb_add(g, "Identity", "x", "same");
  s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *x, *out[3] = {0};
  float xd[4] = {1, 1, 1, 1};
  CHECK_OK(keel_tensor_wrap(s, KEEL_FLOAT, 1, (int64_t[]){4}, xd, NULL, NULL, &x));
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &x, 1, out));
  CHECK(keel_value_exclusive(out[1]));    /* a fresh block */
  CHECK(!keel_value_exclusive(out[2]));   /* the caller's memory */
  CHECK(!keel_value_exclusive(x) && !keel_value_exclusive(NULL));
  if (keel_value_exclusive(out[0])) ((float *)keel_value_data(out[0]))[0] = 99; /* a copy of W */
  for (int i = 0; i < 3; i++) keel_value_release(out[i]);
  CHECK_OK(keel_run(s, (const char *[]){"x"}, &x, 1, out));
  CHECK(out[0] && keel_value_at(out[0], 0) == 1 && keel_value_at(out[1], 0) == 2);
  for (int i = 0; i < 3; i++) keel_value_release(out[i]);
  keel_value_release(x);
  keel_session_destroy(s);
}

int main(void) {
  metadata_and_exclusive();
  outputs_outlive_session();
  good_model_runs();
  truncations();
  corruptions();
  specific_errors();
  external_data();
  return check_report();
}
