/* test_transpose.c: Transpose's fast paths against an index-by-index
 * transpose written here. Every permutation of rank 1 to 5 runs on random
 * small shapes with size-1 dims (views, batched 2-D tiles with their
 * edges and thin sides, the copy engine), for 1-, 2-, 4- and 8-byte
 * elements, bool and strings; the NCHW <-> NHWC shapes a layout pass
 * makes run with 1 and 3 threads; a view must share its input's bytes
 * and stay right whether the input is a graph input, an initializer or a
 * value other nodes still read (and may overwrite in place). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

static const int TYPES[] = {KEEL_FLOAT, KEEL_UINT8,  KEEL_INT16, KEEL_FLOAT16,
                            KEEL_INT64, KEEL_DOUBLE, KEEL_BOOL,  KEEL_STRING};

static int64_t numel(int r, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < r; i++) n *= shape[i];
  return n;
}

/* The elements of a test input: bytes, or strings that all differ. */
typedef struct input {
  int dt;
  int64_t n;
  size_t es;
  uint8_t *bytes;     /* n * es bytes (STRING: n keel_string entries) */
  char *chars;        /* STRING: the characters they point into */
} input;

static void input_make(input *in, int dt, int64_t n) {
  in->dt = dt;
  in->n = n;
  in->es = dt == KEEL_STRING ? sizeof(keel_string) : keel_dtype_size((keel_dtype)dt);
  in->bytes = malloc((size_t)(n ? n : 1) * in->es);
  in->chars = NULL;
  if (dt == KEEL_STRING) {
    keel_string *s = (keel_string *)(void *)in->bytes;
    in->chars = malloc((size_t)(n ? n : 1) * 24);
    for (int64_t i = 0; i < n; i++) { /* "s<i>" plus 0 to 3 'x': lengths vary */
      char *p = in->chars + i * 24;
      int len = snprintf(p, 24, "s%lld", (long long)i);
      for (int k = 0; k < (int)(next() % 4); k++) p[len++] = 'x';
      s[i].data = p;
      s[i].len = (size_t)len;
    }
  } else {
    for (size_t i = 0; i < (size_t)n * in->es; i++)
      in->bytes[i] = (uint8_t)(dt == KEEL_BOOL ? next() & 1 : next());
  }
}

static void input_free(input *in) {
  free(in->bytes);
  free(in->chars);
}

/* Output element o of x transposed by perm (shape = x's shape). */
static int64_t source_index(int64_t o, int r, const int64_t *shape, const int64_t *perm) {
  int64_t xs[8], c[8], os[8], s = 1;
  for (int i = r - 1; i >= 0; i--) xs[i] = s, s *= shape[i];
  for (int i = 0; i < r; i++) os[i] = shape[perm[i]];
  for (int d = r - 1; d >= 0; d--) c[d] = o % os[d], o /= os[d];
  int64_t off = 0;
  for (int d = 0; d < r; d++) off += c[d] * xs[perm[d]];
  return off;
}

static bool elem_equal(const input *in, const void *y, int64_t o, int64_t i) {
  if (in->dt == KEEL_STRING) {
    const keel_string *a = (const keel_string *)y + o;
    const keel_string *b = (const keel_string *)(const void *)in->bytes + i;
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
  }
  return memcmp((const uint8_t *)y + o * (int64_t)in->es, in->bytes + i * (int64_t)in->es,
                in->es) == 0;
}

/* True when perm moves only size-1 dims (the output is a view). */
static bool is_view(int r, const int64_t *shape, const int64_t *perm) {
  int64_t last = -1;
  for (int i = 0; i < r; i++) {
    if (shape[perm[i]] == 1) continue;
    if (perm[i] < last) return false;
    last = perm[i];
  }
  return true;
}

/* A session of one Transpose (input of unknown shape) with `threads`. */
static keel_session_t *session(int dt, int r, const int64_t *perm, int threads) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, -1, NULL);
  mb_output(g, "Y", dt, -1, NULL);
  mb_attr_ints(mb_add(g, "Transpose", "X", "Y"), "perm", r, perm);
  keel_options o = {.size = sizeof o, .threads = threads};
  return mb_session_opts(g, 13, &o);
}

/* Runs x of `shape` through s and checks the output against the loop. */
static void run_case(keel_session_t *s, int dt, int r, const int64_t *shape,
                     const int64_t *perm) {
  int64_t n = numel(r, shape), oshape[8];
  for (int i = 0; i < r; i++) oshape[i] = shape[perm[i]];
  input in;
  input_make(&in, dt, n);
  keel_value_t *x = mb_tensor(s, dt, r, shape, in.bytes), *y = NULL;
  CHECK(x != NULL);
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, &y));
  bool ok = y && keel_value_rank(y) == r && keel_value_dtype(y) == dt;
  for (int i = 0; ok && i < r; i++) ok = keel_value_shape(y)[i] == oshape[i];
  const void *yd = ok ? keel_value_data(y) : NULL;
  for (int64_t o = 0; ok && o < n; o++)
    ok = elem_equal(&in, yd, o, source_index(o, r, shape, perm));
  if (ok && n > 0 && is_view(r, shape, perm)) /* no bytes moved */
    ok = keel_value_data(y) == keel_value_data(x);
  if (!ok) {
    fprintf(stderr, "Transpose of %s, rank %d, shape", keel_dtype_name((keel_dtype)dt), r);
    for (int i = 0; i < r; i++) fprintf(stderr, " %lld", (long long)shape[i]);
    fprintf(stderr, ", perm");
    for (int i = 0; i < r; i++) fprintf(stderr, " %lld", (long long)perm[i]);
    fprintf(stderr, ": wrong output\n");
  }
  CHECK(ok);
  keel_value_release(y);
  keel_value_release(x);
  input_free(&in);
}

/* A random shape of rank r: dims around the 8x8 tile (1s included), at
 * most `cap` elements. */
static void random_shape(int r, int64_t *shape, int64_t cap) {
  static const int64_t dims[] = {1, 1, 1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 23, 33};
  for (;;) {
    for (int i = 0; i < r; i++) shape[i] = dims[next() % COUNTOF(dims)];
    if (numel(r, shape) <= cap) return;
  }
}

/* A random shape of rank r (2 to 4) of 0.5 to 1 MB of es-byte elements:
 * the pool splits it. Dims are doubled (and taken from 1..5 first) until
 * it is big enough. */
static void big_shape(int r, int64_t *shape, int64_t es) {
  for (;;) {
    for (int i = 0; i < r; i++) shape[i] = 1 + (int64_t)(next() % 5);
    while (numel(r, shape) * es < (1 << 19)) {
      int i = (int)(next() % (uint64_t)r);
      shape[i] += shape[i] + (int64_t)(next() % 2); /* 2x or 2x + 1 */
    }
    if (numel(r, shape) * es <= (1 << 20)) return;
  }
}

/* Calls fn on every permutation of 0..r-1 (Heap's algorithm). */
static void each_perm(int r, void (*fn)(int r, const int64_t *perm)) {
  int64_t p[8];
  int c[8] = {0};
  for (int i = 0; i < r; i++) p[i] = i;
  fn(r, p);
  for (int i = 1; i < r;) {
    if (c[i] < i) {
      int j = i % 2 ? c[i] : 0;
      int64_t t = p[j];
      p[j] = p[i], p[i] = t;
      fn(r, p);
      c[i]++;
      i = 1;
    } else {
      c[i++] = 0;
    }
  }
}

static int perms_seen;

/* One permutation: every type on a few random shapes, with 1 or 3
 * threads; 4- and 1-byte types also on one shape of 0.5 to 1 MB (the
 * pool splits those). */
static void perm_cases(int r, const int64_t *perm) {
  perms_seen++;
  for (size_t t = 0; t < COUNTOF(TYPES); t++) {
    int dt = TYPES[t], threads = (perms_seen + (int)t) % 2 ? 3 : 1;
    keel_session_t *s = session(dt, r, perm, threads);
    CHECK(s != NULL);
    if (!s) continue;
    int64_t shape[8];
    for (int k = 0; k < 3; k++) {
      random_shape(r, shape, 4096);
      run_case(s, dt, r, shape, perm);
    }
    for (int i = 0; i < r; i++) shape[i] = 1; /* one element */
    run_case(s, dt, r, shape, perm);
    if ((dt == KEEL_FLOAT || dt == KEEL_UINT8) && r >= 2 && r <= 4) {
      big_shape(r, shape, dt == KEEL_FLOAT ? 4 : 1);
      run_case(s, dt, r, shape, perm);
    }
    keel_session_destroy(s);
  }
}

static void check_all_perms(void) {
  for (int r = 1; r <= 5; r++) each_perm(r, perm_cases);
  CHECK(perms_seen == 1 + 2 + 6 + 24 + 120);
}

/* The layout pass's transposes, one and three threads. */
static void check_layout_shapes(void) {
  static const struct {
    int64_t shape[4], perm[4];
  } cases[] = {
      {{1, 3, 640, 640}, {0, 2, 3, 1}}, {{1, 640, 640, 3}, {0, 3, 1, 2}},
      {{1, 64, 56, 56}, {0, 2, 3, 1}},  {{1, 56, 56, 64}, {0, 3, 1, 2}},
      {{2, 17, 13, 9}, {0, 2, 3, 1}},   {{2, 13, 9, 17}, {0, 3, 1, 2}},
      {{1, 80, 80, 255}, {0, 3, 1, 2}}, {{1, 255, 80, 80}, {0, 2, 3, 1}},
      {{1, 1, 1, 512}, {0, 3, 1, 2}},   {{1, 512, 1, 1}, {0, 2, 3, 1}},
      {{4, 1, 1, 512}, {0, 3, 1, 2}},   {{4, 512, 1, 1}, {0, 2, 3, 1}},
  };
  static const int types[] = {KEEL_FLOAT, KEEL_UINT8, KEEL_FLOAT16, KEEL_DOUBLE};
  for (int threads = 1; threads <= 3; threads += 2)
    for (size_t c = 0; c < COUNTOF(cases); c++)
      for (size_t t = 0; t < COUNTOF(types); t++) {
        /* the 640 x 640 images in float and uint8 only: the rest is slow under ASan */
        if (cases[c].shape[2] == 640 && types[t] != KEEL_FLOAT && types[t] != KEEL_UINT8)
          continue;
        keel_session_t *s = session(types[t], 4, cases[c].perm, threads);
        CHECK(s != NULL);
        if (!s) continue;
        run_case(s, types[t], 4, cases[c].shape, cases[c].perm);
        keel_session_destroy(s);
      }
}

/* y is a float tensor of `shape` holding want. */
static void check_float_out(const keel_value_t *y, int r, const int64_t *shape,
                            const float *want) {
  bool ok = y && keel_value_rank(y) == r && keel_value_dtype(y) == KEEL_FLOAT;
  for (int i = 0; ok && i < r; i++) ok = keel_value_shape(y)[i] == shape[i];
  for (int64_t i = 0; ok && i < numel(r, shape); i++)
    ok = ((const float *)keel_value_data(y))[i] == want[i];
  CHECK(ok);
}

/* Views of every kind of input: an initializer (whose bytes live in the
 * model: the output must outlive the session), a graph input, and a
 * value that other nodes read after the view was made, one of which
 * could work in place. */
static void check_view_inputs(void) {
  float w[12], negw[12], wt[12], absw[12];
  for (int i = 0; i < 12; i++) w[i] = (float)(i * 7 % 12) - 5.5f;
  int64_t wshape[5] = {1, 4, 1, 3, 1}, vperm[5] = {2, 1, 4, 0, 3}, vshape[5] = {1, 4, 1, 1, 3};
  int64_t tperm[5] = {0, 3, 2, 1, 4}, tshape[5] = {1, 3, 1, 4, 1};
  for (int i = 0; i < 12; i++) { /* wt: w transposed by tperm ([4,3] -> [3,4]) */
    wt[i] = w[source_index(i, 5, wshape, tperm)];
    negw[i] = -w[i];
    absw[i] = w[i] < 0 ? -w[i] : w[i];
  }
  for (int threads = 1; threads <= 3; threads += 2) {
    keel_options opts = {.size = sizeof opts, .threads = threads};
    /* an initializer, viewed and transposed; outputs read after destroy */
    mb_graph *g = mb_graph_new("main");
    mb_init(g, "W", KEEL_FLOAT, 5, wshape, w);
    mb_input(g, "X", KEEL_FLOAT, -1, NULL);
    mb_output(g, "V", KEEL_FLOAT, -1, NULL);
    mb_output(g, "T", KEEL_FLOAT, -1, NULL);
    mb_output(g, "Z", KEEL_FLOAT, -1, NULL);
    mb_attr_ints(mb_add(g, "Transpose", "W", "V"), "perm", 5, vperm);
    mb_attr_ints(mb_add(g, "Transpose", "W", "T"), "perm", 5, tperm);
    mb_add(g, "Identity", "X", "Z");
    keel_session_t *s = mb_session_opts(g, 13, &opts);
    CHECK(s != NULL);
    if (!s) return;
    float one = 1;
    keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, &one), *out[3] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, out));
    keel_session_destroy(s);
    check_float_out(out[0], 5, vshape, w);
    check_float_out(out[1], 5, tshape, wt);
    for (int i = 0; i < 3; i++) keel_value_release(out[i]);
    keel_value_release(x);

    /* A = Neg(X); V = view of A; Z = Neg(V) (in place if it were the
     * only holder); B = Abs(A) after Z; C = Neg(A), A's last reader */
    g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, -1, NULL);
    mb_output(g, "V", KEEL_FLOAT, -1, NULL);
    mb_output(g, "Z", KEEL_FLOAT, -1, NULL);
    mb_output(g, "B", KEEL_FLOAT, -1, NULL);
    mb_output(g, "C", KEEL_FLOAT, -1, NULL);
    mb_add(g, "Neg", "X", "A");
    mb_attr_ints(mb_add(g, "Transpose", "A", "V0"), "perm", 5, vperm);
    mb_add(g, "Identity", "V0", "V");
    mb_attr_ints(mb_add(g, "Transpose", "A", "V1"), "perm", 5, vperm);
    mb_add(g, "Neg", "V1", "Z");
    mb_add(g, "Abs", "A", "B");
    mb_add(g, "Neg", "A", "C");
    s = mb_session_opts(g, 13, &opts);
    CHECK(s != NULL);
    if (!s) return;
    x = mb_tensor(s, KEEL_FLOAT, 5, wshape, w);
    keel_value_t *o4[4] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, o4));
    check_float_out(o4[0], 5, vshape, negw);
    check_float_out(o4[1], 5, vshape, w);
    check_float_out(o4[2], 5, wshape, absw);
    check_float_out(o4[3], 5, wshape, w);
    for (int i = 0; i < 4; i++) keel_value_release(o4[i]);
    keel_value_release(x);
    keel_session_destroy(s);

    /* the graph input itself, viewed twice: an output, and a value that
     * dies at a Neg that must not work in place */
    g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, -1, NULL);
    mb_output(g, "V", KEEL_FLOAT, -1, NULL);
    mb_output(g, "R", KEEL_FLOAT, -1, NULL);
    mb_attr_ints(mb_add(g, "Transpose", "X", "V"), "perm", 5, vperm);
    mb_attr_ints(mb_add(g, "Transpose", "X", "V2"), "perm", 5, vperm);
    mb_add(g, "Neg", "V2", "R");
    s = mb_session_opts(g, 13, &opts);
    CHECK(s != NULL);
    if (!s) return;
    x = mb_tensor(s, KEEL_FLOAT, 5, wshape, w);
    keel_value_t *o2[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, o2));
    check_float_out(o2[0], 5, vshape, w);
    check_float_out(o2[1], 5, vshape, negw);
    CHECK(o2[0] && keel_value_data(o2[0]) == keel_value_data(x)); /* zero-copy */
    CHECK(x && ((const float *)keel_value_data(x))[3] == w[3]);  /* input untouched */
    for (int i = 0; i < 2; i++) keel_value_release(o2[i]);
    keel_value_release(x);
    keel_session_destroy(s);
  }
}

/* Strings through an initializer: views and copies of string tensors. */
static void check_string_initializer(void) {
  const char *words[6] = {"a", "bb", "ccc", "", "eeeee", "f"};
  mb_graph *g = mb_graph_new("main");
  mb_init(g, "W", KEEL_STRING, 3, (int64_t[]){2, 1, 3}, words);
  mb_input(g, "X", KEEL_FLOAT, -1, NULL);
  mb_output(g, "V", KEEL_STRING, -1, NULL);
  mb_output(g, "T", KEEL_STRING, -1, NULL);
  mb_output(g, "Z", KEEL_FLOAT, -1, NULL);
  mb_attr_ints(mb_add(g, "Transpose", "W", "V"), "perm", 3, (int64_t[]){1, 0, 2});
  mb_attr_ints(mb_add(g, "Transpose", "W", "T"), "perm", 3, (int64_t[]){2, 1, 0});
  mb_add(g, "Identity", "X", "Z");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  float one = 1;
  keel_value_t *x = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, &one), *out[3] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &x, 1, out));
  keel_session_destroy(s);
  const keel_string *v = out[0] ? keel_value_data(out[0]) : NULL;
  const keel_string *t = out[1] ? keel_value_data(out[1]) : NULL;
  static const int tsrc[6] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; v && i < 6; i++)
    CHECK(v[i].len == strlen(words[i]) && !memcmp(v[i].data, words[i], v[i].len));
  for (int i = 0; t && i < 6; i++)
    CHECK(t[i].len == strlen(words[tsrc[i]]) && !memcmp(t[i].data, words[tsrc[i]], t[i].len));
  CHECK(v && t && out[0] && keel_value_rank(out[0]) == 3 && keel_value_shape(out[0])[0] == 1);
  for (int i = 0; i < 3; i++) keel_value_release(out[i]);
  keel_value_release(x);
}

/* Packed 4-bit codes: a view keeps them, a real transpose moves them. */
static void check_int4(void) {
  static const int64_t perms[2][3] = {{1, 0, 2}, {2, 1, 0}};
  float x[6] = {1, -2, 3, -4, 5, 0};
  for (int p = 0; p < 2; p++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 3, (int64_t[]){2, 1, 3});
    mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
    mb_attr_i(mb_add(g, "Cast", "X", "P"), "to", KEEL_INT4);
    mb_attr_ints(mb_add(g, "Transpose", "P", "Q"), "perm", 3, perms[p]);
    mb_attr_i(mb_add(g, "Cast", "Q", "Y"), "to", KEEL_FLOAT);
    keel_session_t *s = mb_session(g, 21);
    CHECK(s != NULL);
    if (!s) return;
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){2, 1, 3}, x), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
    for (int64_t o = 0; out && o < 6; o++)
      CHECK(keel_value_at(out, o) == x[source_index(o, 3, (int64_t[]){2, 1, 3}, perms[p])]);
    keel_value_release(out);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

int main(void) {
  check_all_perms();
  check_layout_shapes();
  check_view_inputs();
  check_string_initializer();
  check_int4();
  return check_report();
}
