/* test_ops_shape.c: the shape family through real sessions. Transpose,
 * Slice, CenterCropPad, Pad, Tile, DepthToSpace and SpaceToDepth run on random shapes and
 * are compared with per-element index loops written here; the view ops must
 * share their input's buffer; every dtype class (1/2/4/8 bytes, strings)
 * goes through the copy engine; bad shapes and out-of-range axes are
 * errors after which the same session still runs. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static const int64_t SCALAR[1] = {0}; /* dims of a rank-0 tensor */

static int64_t rnd(int64_t lo, int64_t hi) { /* inclusive */
  return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}

/* ====================================================== harness */

#define MAXN 8

/* Splits "A,B,C" into names (empty entries kept). */
static int names_of(const char *list, char buf[MAXN][16], const char **names) {
  int n = 0;
  const char *p = list;
  while (*p && n < MAXN) {
    size_t len = strcspn(p, ",");
    memcpy(buf[n], p, len < 15 ? len : 15);
    buf[n][len < 15 ? len : 15] = 0;
    names[n] = buf[n];
    n++;
    p += len;
    if (*p == ',') p++;
  }
  return n;
}

/* A one-node graph: every input (dtypes in order) has an unknown shape, so
 * only the kernel checks what it gets. */
static mb_graph *graph(const char *ins, const int *dts, const char *outs) {
  char buf[MAXN][16];
  const char *names[MAXN];
  mb_graph *g = mb_graph_new("main");
  int n = names_of(ins, buf, names);
  for (int i = 0; i < n; i++)
    if (names[i][0]) mb_input(g, names[i], dts[i], -1, NULL);
  n = names_of(outs, buf, names);
  for (int i = 0; i < n; i++) mb_output(g, names[i], KEEL_UNDEFINED, -1, NULL);
  return g;
}

/* Runs s on the named inputs; outputs land in out[]. */
static keel_status run(keel_session_t *s, const char *ins, keel_value_t **in,
                       keel_value_t **out) {
  char buf[MAXN][16];
  const char *names[MAXN];
  int n = names_of(ins, buf, names);
  return keel_run(s, names, in, (size_t)n, out);
}

static keel_value_t *ints(keel_session_t *s, int n, const int64_t *v) {
  int64_t d = n;
  return mb_tensor(s, KEEL_INT64, 1, &d, v);
}

static keel_value_t *scalar_i64(keel_session_t *s, int64_t v) {
  return mb_tensor(s, KEEL_INT64, 0, SCALAR, &v);
}

static void release_all(keel_value_t **v, int n) {
  for (int i = 0; i < n; i++) {
    keel_value_release(v[i]);
    v[i] = NULL;
  }
}

static bool shape_is(const keel_value_t *v, int r, const int64_t *want) {
  if (!v || keel_value_rank(v) != r) return false;
  const int64_t *s = keel_value_shape(v);
  for (int i = 0; i < r; i++)
    if (s[i] != want[i]) return false;
  return true;
}

static void strides(int r, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int i = r - 1; i >= 0; i--) st[i] = s, s *= shape[i];
}

static int64_t numel(int r, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < r; i++) n *= shape[i];
  return n;
}

/* Output index o -> its coordinates in `shape`. */
static void unravel(int64_t o, int r, const int64_t *shape, int64_t *c) {
  for (int d = r - 1; d >= 0; d--) {
    c[d] = o % shape[d];
    o /= shape[d];
  }
}

/* ==================================================== Transpose */

/* One random shape, perm and element size against the index loop. */
static void transpose_case(void) {
  static const int dts[] = {KEEL_UINT8, KEEL_FLOAT16, KEEL_FLOAT, KEEL_DOUBLE, KEEL_BOOL};
  int dt = dts[next() % 5], r = (int)rnd(1, 5);
  size_t es = keel_dtype_size((keel_dtype)dt);
  int64_t shape[6], perm[6], oshape[6], xs[6], c[6];
  for (int i = 0; i < r; i++) shape[i] = rnd(1, 4), perm[i] = i;
  for (int i = r - 1; i > 0; i--) { /* Fisher-Yates */
    int j = (int)rnd(0, i);
    int64_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  uint8_t x[1024 * 8], want[1024 * 8];
  int64_t n = numel(r, shape);
  for (size_t i = 0; i < (size_t)n * es; i++) x[i] = (uint8_t)(dt == KEEL_BOOL ? next() & 1 : next());
  strides(r, shape, xs);
  for (int i = 0; i < r; i++) oshape[i] = shape[perm[i]];
  for (int64_t o = 0; o < n; o++) {
    int64_t off = 0;
    unravel(o, r, oshape, c);
    for (int d = 0; d < r; d++) off += c[d] * xs[perm[d]];
    memcpy(want + o * (int64_t)es, x + off * (int64_t)es, es);
  }
  mb_graph *g = graph("X", &dt, "Y");
  mb_attr_ints(mb_add(g, "Transpose", "X", "Y"), "perm", r, perm);
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, dt, r, shape, x), *out = NULL;
  CHECK_OK(run(s, "X", &in, &out));
  CHECK(shape_is(out, r, oshape));
  CHECK(out && memcmp(keel_value_data(out), want, (size_t)n * es) == 0);
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);
}

static void check_transpose_default_and_errors(void) {
  int dt = KEEL_FLOAT;
  mb_graph *g = graph("X", &dt, "Y");
  mb_attr_ints(mb_add(g, "Transpose", "X", "Y"), "perm", 3, (int64_t[]){2, 0, 1});
  keel_session_t *s = mb_session(g, 13);
  float x[6] = {0, 1, 2, 3, 4, 5};
  keel_value_t *in = mb_tensor(s, dt, 2, (int64_t[]){2, 3}, x), *out = NULL;
  CHECK_STATUS(run(s, "X", &in, &out), KEEL_ERR_SHAPE); /* rank 2 vs perm of 3 */
  CHECK(strstr(keel_last_error(), "Transpose") != NULL);
  release_all(&in, 1);
  in = mb_tensor(s, dt, 3, (int64_t[]){1, 2, 3}, x);
  CHECK_OK(run(s, "X", &in, &out)); /* the session lives on */
  CHECK(shape_is(out, 3, (int64_t[]){3, 1, 2}));
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);
  /* strings: strided reads copy each element's bytes */
  int st = KEEL_STRING;
  g = graph("X", &st, "Y");
  mb_attr_ints(mb_add(g, "Transpose", "X", "Y"), "perm", 2, (int64_t[]){1, 0});
  s = mb_session(g, 13);
  keel_string xs[6] = {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}, {"f", 1}};
  in = mb_tensor(s, st, 2, (int64_t[]){2, 3}, xs);
  CHECK_OK(run(s, "X", &in, &out));
  const keel_string *y = out ? keel_value_data(out) : NULL;
  for (int i = 0; y && i < 6; i++) CHECK(y[i].len == 1 && y[i].data[0] == "adbecf"[i]);
  CHECK(y && y[0].data != xs[0].data);
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);
  /* no perm: reverse */
  g = graph("X", &dt, "Y");
  mb_add(g, "Transpose", "X", "Y");
  s = mb_session(g, 1);
  in = mb_tensor(s, dt, 2, (int64_t[]){2, 3}, x);
  CHECK_OK(run(s, "X", &in, &out));
  CHECK(shape_is(out, 2, (int64_t[]){3, 2}));
  for (int i = 0; out && i < 6; i++) CHECK(keel_value_at(out, i) == x[(i % 2) * 3 + i / 2]);
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);
}

/* ======================================================== Slice */

static int64_t pick_index(void) {
  switch (next() % 10) {
    case 0: return INT64_MAX;
    case 1: return INT64_MIN;
    case 2: return -INT64_MAX;
    default: return rnd(-7, 7);
  }
}

/* The indices slice(start, stop, step) picks from range(len), by walking
 * (a different route from the kernel's count formula). Python's rules,
 * except one corner where the ONNX spec (and onnxruntime) differ from
 * numpy: with a negative step, a start below -len clamps to 0 (element 0
 * is taken), where Python clamps it to -1 (nothing is taken). */
static int ref_slice(int64_t len, int64_t start, int64_t stop, int64_t step, int64_t *out) {
  if (len == 0) return 0;
  int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1;
  if (start < 0) start += len;
  start = start < 0 ? 0 : start > hi ? hi : start;
  if (stop < 0) stop += len;
  stop = stop < lo ? lo : stop > hi ? hi : stop;
  int n = 0;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out[n++] = i;
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return n;
}

static void slice_case(keel_session_t *s) {
  int r = (int)rnd(1, 4), na = (int)rnd(1, r);
  int64_t shape[4], starts[4], ends[4], axes[4], steps[4], oshape[4], idx[4][8];
  int cnt[4];
  bool used[4] = {0};
  for (int i = 0; i < r; i++) shape[i] = rnd(0, 5);
  for (int i = 0; i < r; i++) { /* untouched axes: all of it */
    cnt[i] = (int)shape[i];
    for (int j = 0; j < shape[i]; j++) idx[i][j] = j;
  }
  for (int j = 0; j < na; j++) {
    int a;
    do a = (int)rnd(0, r - 1);
    while (used[a]);
    used[a] = true;
    axes[j] = next() % 2 ? a : a - r; /* negative axes too */
    starts[j] = pick_index(), ends[j] = pick_index();
    steps[j] = next() % 8 ? (next() % 2 ? 1 : -1) * rnd(1, 3) : (next() % 2 ? INT64_MAX : -INT64_MAX);
    cnt[a] = ref_slice(shape[a], starts[j], ends[j], steps[j], idx[a]);
  }
  int32_t x[1024];
  int64_t n = numel(r, shape), xs[4], c[4];
  for (int64_t i = 0; i < n; i++) x[i] = (int32_t)i * 7 + 1;
  for (int i = 0; i < r; i++) oshape[i] = cnt[i];
  strides(r, shape, xs);
  keel_value_t *in[5] = {mb_tensor(s, KEEL_INT32, r, shape, x), ints(s, na, starts),
                         ints(s, na, ends), ints(s, na, axes), ints(s, na, steps)};
  keel_value_t *out = NULL;
  CHECK_OK(run(s, "X,S,E,A,T", in, &out));
  CHECK(shape_is(out, r, oshape));
  if (!shape_is(out, r, oshape))
    for (int j = 0; j < na; j++)
      fprintf(stderr, "dim %lld axis %lld start %lld end %lld step %lld got %lld\n",
              (long long)shape[axes[j] < 0 ? axes[j] + r : axes[j]], (long long)axes[j],
              (long long)starts[j], (long long)ends[j], (long long)steps[j],
              out ? (long long)keel_value_shape(out)[axes[j] < 0 ? axes[j] + r : axes[j]] : -1);
  const int32_t *y = out ? keel_value_data(out) : NULL;
  for (int64_t o = 0; y && o < numel(r, oshape); o++) {
    int64_t off = 0;
    unravel(o, r, oshape, c);
    for (int d = 0; d < r; d++) off += idx[d][c[d]] * xs[d];
    CHECK(y[o] == x[off]);
  }
  release_all(&out, 1);
  release_all(in, 5);
}

static void check_slice(void) {
  int dts[5] = {KEEL_INT32, KEEL_INT64, KEEL_INT64, KEEL_INT64, KEEL_INT64};
  mb_graph *g = graph("X,S,E,A,T", dts, "Y");
  mb_add(g, "Slice", "X,S,E,A,T", "Y");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  if (!s) return;
  for (int i = 0; i < 300; i++) slice_case(s);
  /* errors: axis out of range, step 0; then the session still works */
  int32_t x[6] = {1, 2, 3, 4, 5, 6};
  keel_value_t *in[5] = {mb_tensor(s, KEEL_INT32, 2, (int64_t[]){2, 3}, x),
                         ints(s, 1, (int64_t[]){0}), ints(s, 1, (int64_t[]){2}),
                         ints(s, 1, (int64_t[]){2}), ints(s, 1, (int64_t[]){1})};
  keel_value_t *out = NULL;
  CHECK_STATUS(run(s, "X,S,E,A,T", in, &out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "out of range") != NULL);
  keel_value_release(in[3]);
  in[3] = ints(s, 1, (int64_t[]){-1});
  keel_value_release(in[4]);
  in[4] = ints(s, 1, (int64_t[]){0});
  CHECK_STATUS(run(s, "X,S,E,A,T", in, &out), KEEL_ERR_RUNTIME);
  keel_value_release(in[4]);
  in[4] = ints(s, 1, (int64_t[]){-1});
  keel_value_release(in[1]);
  in[1] = ints(s, 1, (int64_t[]){-1});
  keel_value_release(in[2]);
  in[2] = ints(s, 1, (int64_t[]){INT64_MIN});
  CHECK_OK(run(s, "X,S,E,A,T", in, &out)); /* x[:, ::-1] */
  CHECK(shape_is(out, 2, (int64_t[]){2, 3}));
  for (int i = 0; out && i < 6; i++) CHECK(keel_value_at(out, i) == x[(i / 3) * 3 + 2 - i % 3]);
  release_all(&out, 1);
  release_all(in, 5);
  keel_session_destroy(s);
}

/* ================================================ CenterCropPad */

/* Random shapes, targets and axes (some negative, some omitted) against
 * an index loop: output coordinate c reads input c - pad + crop on each
 * listed axis, or is zero. Strings pad with "". */
static void center_crop_pad_case(void) {
  int r = (int)rnd(1, 3), na = 0, strs = rnd(0, 4) == 0;
  int64_t shape[3], axes[3], want[3], oshape[3], xs[3], c[3], off[3] = {0};
  bool listed = rnd(0, 1);
  for (int i = 0; i < r; i++) shape[i] = rnd(0, 5), oshape[i] = shape[i];
  for (int i = 0; i < r; i++) {
    if (listed && rnd(0, 2) == 0) continue;
    axes[na] = rnd(0, 1) ? i - r : i;
    want[na] = rnd(0, 6);
    oshape[i] = want[na];
    /* input index = output index + off: crop start, or minus the pad */
    off[i] = shape[i] > want[na] ? (shape[i] - want[na]) / 2 : -((want[na] - shape[i]) / 2);
    na++;
  }
  if (!listed) na = r;
  mb_graph *g = graph("X,S", (int[]){strs ? KEEL_STRING : KEEL_FLOAT, KEEL_INT64}, "Y");
  mb_node *n = mb_add(g, "CenterCropPad", "X,S", "Y");
  if (listed) mb_attr_ints(n, "axes", na, axes);
  keel_session_t *s = mb_session(g, 18);
  float x[125];
  keel_string xstr[125];
  char text[125][4];
  int64_t nx = numel(r, shape);
  for (int64_t i = 0; i < nx; i++) {
    x[i] = (float)(i + 1);
    snprintf(text[i], sizeof text[i], "%d", (int)i + 1);
    xstr[i] = (keel_string){text[i], strlen(text[i])};
  }
  strides(r, shape, xs);
  keel_value_t *in[2] = {mb_tensor(s, strs ? KEEL_STRING : KEEL_FLOAT, r, shape, strs ? (void *)xstr : (void *)x),
                         ints(s, na, want)};
  keel_value_t *out = NULL;
  CHECK_OK(run(s, "X,S", in, &out));
  CHECK(shape_is(out, r, oshape));
  for (int64_t o = 0; out && o < numel(r, oshape); o++) {
    int64_t src = 0;
    unravel(o, r, oshape, c);
    for (int d = 0; d < r && src >= 0; d++) {
      int64_t m = c[d] + off[d];
      src = m < 0 || m >= shape[d] ? -1 : src + m * xs[d];
    }
    if (!strs) {
      CHECK(keel_value_at(out, o) == (src < 0 ? 0 : x[src]));
    } else {
      const keel_string *e = (const keel_string *)keel_value_data(out) + o;
      const char *w = src < 0 ? "" : text[src];
      CHECK(e->len == strlen(w) && (!e->len || !memcmp(e->data, w, e->len)));
    }
  }
  release_all(&out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* A shape list that does not match the axes, a repeated axis and a
 * negative target are errors. */
static void check_center_crop_pad(void) {
  for (int i = 0; i < 150; i++) center_crop_pad_case();
  static const int64_t bad_axes[3][2] = {{0, 1}, {1, -1}, {0, 1}};
  static const int64_t bad_want[3][2] = {{2, 2}, {2, 2}, {2, -1}};
  static const int nax[3] = {1, 2, 2}, nwant[3] = {2, 2, 2};
  for (int c = 0; c < 3; c++) {
    mb_graph *g = graph("X,S", (int[]){KEEL_FLOAT, KEEL_INT64}, "Y");
    mb_attr_ints(mb_add(g, "CenterCropPad", "X,S", "Y"), "axes", nax[c], bad_axes[c]);
    keel_session_t *s = mb_session(g, 18);
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4}),
                           ints(s, nwant[c], bad_want[c])};
    keel_value_t *out = NULL;
    keel_status st = run(s, "X,S", in, &out);
    CHECK(st == KEEL_ERR_SHAPE || st == KEEL_ERR_INVALID_MODEL);
    CHECK(out == NULL);
    release_all(in, 2);
    keel_session_destroy(s);
  }
}

/* Slice-1 takes starts/ends/axes as attributes and has no steps. */
static void check_slice_v1(void) {
  int dt = KEEL_FLOAT;
  mb_graph *g = graph("X", &dt, "Y");
  mb_node *n = mb_add(g, "Slice", "X", "Y");
  mb_attr_ints(n, "starts", 2, (int64_t[]){1, -2});
  mb_attr_ints(n, "ends", 2, (int64_t[]){1000, INT64_MAX});
  keel_session_t *s = mb_session(g, 9);
  float x[12];
  for (int i = 0; i < 12; i++) x[i] = (float)i;
  keel_value_t *in = mb_tensor(s, dt, 2, (int64_t[]){3, 4}, x), *out = NULL;
  CHECK_OK(run(s, "X", &in, &out));
  CHECK(shape_is(out, 2, (int64_t[]){2, 2}));
  float want[4] = {6, 7, 10, 11};
  for (int i = 0; out && i < 4; i++) CHECK(keel_value_at(out, i) == want[i]);
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);
}

/* ========================================================== Pad */

/* numpy.pad's index for coordinate i of an axis of length n, computed by
 * folding step by step. */
static int64_t ref_pad_index(const char *mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (!strcmp(mode, "constant")) return -1;
  if (!strcmp(mode, "edge")) return i < 0 ? 0 : n - 1;
  if (!strcmp(mode, "wrap")) {
    while (i < 0) i += n;
    while (i >= n) i -= n;
    return i;
  }
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i; /* reflect */
  return i;
}

static void pad_case(keel_session_t *s, const char *mode) {
  bool constant = !strcmp(mode, "constant");
  int r = (int)rnd(1, 3);
  int64_t shape[3], pads[6], oshape[3], xs[3], c[3];
  for (int i = 0; i < r; i++) {
    shape[i] = rnd(constant ? 0 : 1, 4);
    pads[i] = rnd(constant ? -2 : 0, 4);
    pads[r + i] = rnd(constant ? -2 : 0, 4);
    while (shape[i] + pads[i] + pads[r + i] < 0) pads[i]++; /* keep dims >= 0 */
    oshape[i] = shape[i] + pads[i] + pads[r + i];
  }
  float x[64], cv = -9.5f;
  int64_t n = numel(r, shape);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(i + 1);
  strides(r, shape, xs);
  keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, r, shape, x), ints(s, 2 * r, pads),
                         mb_tensor(s, KEEL_FLOAT, 0, SCALAR, &cv)};
  keel_value_t *out = NULL;
  CHECK_OK(run(s, "X,P,C", in, &out));
  CHECK(shape_is(out, r, oshape));
  for (int64_t o = 0; out && o < numel(r, oshape); o++) {
    int64_t off = 0;
    unravel(o, r, oshape, c);
    for (int d = 0; d < r && off >= 0; d++) {
      int64_t m = ref_pad_index(mode, c[d] - pads[d], shape[d]);
      off = m < 0 ? -1 : off + m * xs[d];
    }
    CHECK(keel_value_at(out, o) == (off < 0 ? cv : x[off]));
  }
  release_all(&out, 1);
  release_all(in, 3);
}

static void check_pad_modes(void) {
  static const char *modes[] = {"constant", "edge", "reflect", "wrap"};
  int dts[3] = {KEEL_FLOAT, KEEL_INT64, KEEL_FLOAT};
  for (int m = 0; m < 4; m++) {
    mb_graph *g = graph("X,P,C", dts, "Y");
    mb_attr_s(mb_add(g, "Pad", "X,P,C", "Y"), "mode", modes[m]);
    keel_session_t *s = mb_session(g, 13);
    CHECK(s != NULL);
    if (!s) continue;
    for (int i = 0; i < 60; i++) pad_case(s, modes[m]);
    if (m > 0) { /* an empty axis cannot be reflected: error, then fine */
      keel_value_t *in[3] = {mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){0, 2}, NULL),
                             ints(s, 4, (int64_t[]){1, 0, 1, 0}),
                             mb_tensor(s, KEEL_FLOAT, 0, NULL, (float[]){0})};
      keel_value_t *out = NULL;
      CHECK_STATUS(run(s, "X,P,C", in, &out), KEEL_ERR_SHAPE);
      release_all(in, 3);
      pad_case(s, modes[m]);
    }
    keel_session_destroy(s);
  }
}

/* Pad-2 (attributes), Pad-18 (axes input) and a STRING pad. */
static void check_pad_versions(void) {
  int dt = KEEL_INT32;
  mb_graph *g = graph("X", &dt, "Y");
  mb_node *n = mb_add(g, "Pad", "X", "Y");
  mb_attr_ints(n, "pads", 2, (int64_t[]){1, 2});
  mb_attr_f(n, "value", 7.0f);
  keel_session_t *s = mb_session(g, 2);
  keel_value_t *in = mb_tensor(s, dt, 1, (int64_t[]){2}, (int32_t[]){3, 4}), *out = NULL;
  CHECK_OK(run(s, "X", &in, &out));
  double want[5] = {7, 3, 4, 7, 7};
  CHECK(shape_is(out, 1, (int64_t[]){5}));
  for (int i = 0; out && i < 5; i++) CHECK(keel_value_at(out, i) == want[i]);
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);

  /* Pad-18+ with the axes input omitted: the pads cover every axis */
  int dt2[2] = {KEEL_INT32, KEEL_INT64};
  g = graph("X,P", dt2, "Y");
  mb_attr_s(mb_add(g, "Pad", "X,P", "Y"), "mode", "edge");
  s = mb_session(g, 25);
  keel_value_t *in2[2] = {mb_tensor(s, dt, 2, (int64_t[]){1, 2}, (int32_t[]){3, 4}),
                          ints(s, 4, (int64_t[]){0, 1, 1, 0})};
  CHECK_OK(run(s, "X,P", in2, &out));
  CHECK(shape_is(out, 2, (int64_t[]){2, 3}));
  double want2[6] = {3, 3, 4, 3, 3, 4};
  for (int i = 0; out && i < 6; i++) CHECK(keel_value_at(out, i) == want2[i]);
  release_all(&out, 1);
  release_all(in2, 2);
  keel_session_destroy(s);

  int dts[4] = {KEEL_STRING, KEEL_INT64, KEEL_STRING, KEEL_INT64};
  g = graph("X,P,C,A", dts, "Y");
  mb_add(g, "Pad", "X,P,C,A", "Y");
  s = mb_session(g, 18);
  CHECK(s != NULL);
  if (!s) return;
  keel_string xs[4] = {{"a", 1}, {"bb", 2}, {"ccc", 3}, {"", 0}}, fill = {"pad", 3};
  keel_value_t *ins[4] = {mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 2}, xs),
                          ints(s, 2, (int64_t[]){1, 0}), /* axis -1: one before */
                          mb_tensor(s, KEEL_STRING, 0, SCALAR, &fill),
                          ints(s, 1, (int64_t[]){-1})};
  CHECK_OK(run(s, "X,P,C,A", ins, &out));
  CHECK(shape_is(out, 2, (int64_t[]){2, 3}));
  const char *wants[6] = {"pad", "a", "bb", "pad", "ccc", ""};
  const keel_string *y = out ? keel_value_data(out) : NULL;
  for (int i = 0; y && i < 6; i++) CHECK(strcmp(y[i].data, wants[i]) == 0);
  release_all(&out, 1);
  release_all(ins, 4);
  keel_session_destroy(s);
}

/* ===================================================== views */

/* A view op: output shape as expected and the very same bytes. */
static void view_case(keel_session_t *s, const char *ins, keel_value_t **in, int r,
                      const int64_t *want) {
  keel_value_t *out = NULL;
  CHECK_OK(run(s, ins, in, &out));
  CHECK(shape_is(out, r, want));
  CHECK(out && keel_value_data(out) == keel_value_data(in[0]));
  release_all(&out, 1);
}

static void check_reshape(void) {
  int dts[2] = {KEEL_FLOAT, KEEL_INT64};
  mb_graph *g = graph("X,S", dts, "Y");
  mb_add(g, "Reshape", "X,S", "Y");
  keel_session_t *s = mb_session(g, 13);
  float x[24] = {0};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){2, 3, 4}, x),
                         ints(s, 2, (int64_t[]){4, -1})};
  view_case(s, "X,S", in, 2, (int64_t[]){4, 6});
  keel_value_release(in[1]);
  in[1] = ints(s, 3, (int64_t[]){0, -1, 2}); /* 0 copies dim 0 */
  view_case(s, "X,S", in, 3, (int64_t[]){2, 6, 2});
  keel_value_t *out = NULL;
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){5, -1});
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "cannot reshape 24 elements") != NULL);
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){-1, -1});
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 4, (int64_t[]){0, 0, 0, 0}); /* copies a dim the input lacks */
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 0, NULL); /* 24 elements into a scalar */
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 3, (int64_t[]){INT64_C(1) << 62, 4, -1});
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "overflows") != NULL);
  keel_value_release(in[1]);
  in[1] = ints(s, 1, (int64_t[]){-1});
  view_case(s, "X,S", in, 1, (int64_t[]){24});
  release_all(in, 2);
  keel_session_destroy(s);

  /* allowzero (14): 0 is a real 0; Reshape-1 reads the attribute */
  g = graph("X,S", dts, "Y");
  mb_attr_i(mb_add(g, "Reshape", "X,S", "Y"), "allowzero", 1);
  s = mb_session(g, 14);
  in[0] = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){0, 3}, NULL);
  in[1] = ints(s, 3, (int64_t[]){3, 0, 5});
  out = NULL;
  CHECK_OK(run(s, "X,S", in, &out));
  CHECK(shape_is(out, 3, (int64_t[]){3, 0, 5}));
  release_all(&out, 1);
  /* an empty view whose other dims multiply past int64 is refused, as an
   * allocation of that shape is: later kernels multiply those dims */
  keel_value_release(in[1]);
  in[1] = ints(s, 3, (int64_t[]){0, 1ll << 40, 1ll << 40});
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  release_all(in, 2);
  keel_session_destroy(s);
  g = graph("X", dts, "Y");
  mb_attr_ints(mb_add(g, "Reshape", "X", "Y"), "shape", 2, (int64_t[]){-1, 2});
  s = mb_session(g, 4);
  in[0] = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 4}, x);
  view_case(s, "X", in, 2, (int64_t[]){6, 2});
  release_all(in, 1);
  keel_session_destroy(s);
}

static void check_squeeze_unsqueeze_flatten(void) {
  int dts[2] = {KEEL_INT64, KEEL_INT64};
  int64_t x[6] = {0};
  /* Squeeze-13: axes input; none given squeezes every 1 */
  mb_graph *g = graph("X,A", dts, "Y");
  mb_add(g, "Squeeze", "X,A", "Y");
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_INT64, 4, (int64_t[]){1, 2, 1, 3}, x),
                         ints(s, 1, (int64_t[]){-2})};
  view_case(s, "X,A", in, 3, (int64_t[]){1, 2, 3});
  keel_value_t *out = NULL;
  keel_value_release(in[1]);
  in[1] = ints(s, 1, (int64_t[]){1}); /* dim 1 is 2 */
  CHECK_STATUS(run(s, "X,A", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 1, (int64_t[]){4}); /* out of range */
  CHECK_STATUS(run(s, "X,A", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){0, 2});
  view_case(s, "X,A", in, 2, (int64_t[]){2, 3});
  release_all(in, 2);
  keel_session_destroy(s);
  g = graph("X", dts, "Y"); /* axes omitted: every 1 goes */
  mb_add(g, "Squeeze", "X", "Y");
  s = mb_session(g, 13);
  in[0] = mb_tensor(s, KEEL_INT64, 4, (int64_t[]){1, 2, 1, 3}, x);
  view_case(s, "X", in, 2, (int64_t[]){2, 3});
  release_all(in, 1);
  keel_session_destroy(s);

  /* Unsqueeze-13 with unsorted and negative axes; Unsqueeze-11 attribute */
  g = graph("X,A", dts, "Y");
  mb_add(g, "Unsqueeze", "X,A", "Y");
  s = mb_session(g, 13);
  in[0] = mb_tensor(s, KEEL_INT64, 2, (int64_t[]){2, 3}, x);
  in[1] = ints(s, 2, (int64_t[]){-1, 0});
  view_case(s, "X,A", in, 4, (int64_t[]){1, 2, 3, 1});
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){1, 1});
  CHECK_STATUS(run(s, "X,A", in, &out), KEEL_ERR_INVALID_MODEL);
  keel_value_release(in[1]);
  in[1] = ints(s, 1, (int64_t[]){3});
  CHECK_STATUS(run(s, "X,A", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 1, (int64_t[]){2});
  view_case(s, "X,A", in, 3, (int64_t[]){2, 3, 1});
  release_all(in, 2);
  keel_session_destroy(s);
  g = graph("X", dts, "Y");
  mb_attr_ints(mb_add(g, "Unsqueeze", "X", "Y"), "axes", 1, (int64_t[]){1});
  s = mb_session(g, 11);
  in[0] = mb_tensor(s, KEEL_INT64, 2, (int64_t[]){2, 3}, x);
  view_case(s, "X", in, 3, (int64_t[]){2, 1, 3});
  release_all(in, 1);
  keel_session_destroy(s);

  /* Flatten with a negative axis, and axis 0 */
  for (int a = 0; a < 2; a++) {
    g = graph("X", dts, "Y");
    mb_attr_i(mb_add(g, "Flatten", "X", "Y"), "axis", a ? -1 : 0);
    s = mb_session(g, 13);
    in[0] = mb_tensor(s, KEEL_INT64, 3, (int64_t[]){1, 2, 3}, x);
    view_case(s, "X", in, 2, a ? (int64_t[]){2, 3} : (int64_t[]){1, 6});
    release_all(in, 1);
    keel_session_destroy(s);
  }
}

/* ============================================== Concat and Split */

static void check_concat(void) {
  int dts[3] = {KEEL_STRING, KEEL_STRING, KEEL_STRING};
  mb_graph *g = graph("A,B,C", dts, "Y");
  mb_attr_i(mb_add(g, "Concat", "A,B,C", "Y"), "axis", -1);
  keel_session_t *s = mb_session(g, 13);
  keel_string a[2] = {{"a0", 2}, {"a1", 2}}, b[4] = {{"b0", 2}, {"b1", 2}, {"b2", 2}, {"b3", 2}};
  keel_value_t *in[3] = {mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 1}, a),
                         mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 2}, b),
                         mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 0}, NULL)};
  keel_value_t *out = NULL;
  CHECK_OK(run(s, "A,B,C", in, &out));
  CHECK(shape_is(out, 2, (int64_t[]){2, 3}));
  const char *want[6] = {"a0", "b0", "b1", "a1", "b2", "b3"};
  const keel_string *y = out ? keel_value_data(out) : NULL;
  for (int i = 0; y && i < 6; i++) CHECK(strcmp(y[i].data, want[i]) == 0);
  release_all(&out, 1);
  keel_value_release(in[2]);
  in[2] = mb_tensor(s, KEEL_STRING, 2, (int64_t[]){3, 1}, NULL); /* rows differ */
  CHECK_STATUS(run(s, "A,B,C", in, &out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "Concat") != NULL);
  keel_value_release(in[2]);
  in[2] = mb_tensor(s, KEEL_STRING, 1, (int64_t[]){2}, NULL); /* rank differs */
  CHECK_STATUS(run(s, "A,B,C", in, &out), KEEL_ERR_SHAPE);
  release_all(in, 3);
  keel_session_destroy(s);
  /* opset 4+: axis is required */
  int ft[2] = {KEEL_FLOAT, KEEL_FLOAT};
  g = graph("A,B", ft, "Y");
  mb_add(g, "Concat", "A,B", "Y");
  s = mb_session(g, 11);
  in[0] = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, (float[]){1});
  in[1] = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){1}, (float[]){2});
  CHECK_STATUS(run(s, "A,B", in, &out), KEEL_ERR_INVALID_MODEL);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* Concat's row-copy path (64 KB and more, runs of 16 bytes and more, on
 * the pool): every axis of a rank-4 float, uint8 and int64 concat of
 * three inputs (one empty along the axis), 1 and 3 threads, against
 * index arithmetic; a smaller one takes the general copy the same way. */
static void check_concat_rows(void) {
  static const int dts[3] = {KEEL_FLOAT, KEEL_UINT8, KEEL_INT64};
  for (int di = 0; di < 3; di++)
    for (int axis = 0; axis < 4; axis++)
      for (int threads = 1; threads <= 3; threads += 2) {
        int64_t base[4] = {3, 20, 24, 40}, sh[3][4];
        int64_t len[3] = {base[axis], 0, base[axis] / 2 + 1};
        int in_dt[3] = {dts[di], dts[di], dts[di]};
        mb_graph *g = graph("A,B,C", in_dt, "Y");
        mb_attr_i(mb_add(g, "Concat", "A,B,C", "Y"), "axis", axis);
        keel_options o = {.size = sizeof o, .threads = threads};
        keel_session_t *s = mb_session_opts(g, 13, &o);
        keel_value_t *in[3];
        int64_t tot = 0;
        for (int i = 0; i < 3; i++) {
          memcpy(sh[i], base, sizeof base);
          sh[i][axis] = len[i];
          int64_t n = sh[i][0] * sh[i][1] * sh[i][2] * sh[i][3];
          uint8_t *v = malloc(8 * (size_t)(n ? n : 1));
          for (int64_t e = 0; e < n; e++) {
            int64_t x = (e * 7 + i * 31) % 200;
            if (dts[di] == KEEL_FLOAT) ((float *)(void *)v)[e] = (float)x;
            else if (dts[di] == KEEL_UINT8) v[e] = (uint8_t)x;
            else ((int64_t *)(void *)v)[e] = x;
          }
          in[i] = mb_tensor(s, dts[di], 4, sh[i], v);
          free(v);
          tot += len[i];
        }
        keel_value_t *out = NULL;
        CHECK_OK(run(s, "A,B,C", in, &out));
        int64_t osh[4] = {base[0], base[1], base[2], base[3]};
        osh[axis] = tot;
        CHECK(shape_is(out, 4, osh));
        int bad = 0;
        for (int64_t e = 0; out && e < osh[0] * osh[1] * osh[2] * osh[3]; e++) {
          int64_t idx[4], r = e;
          for (int d = 3; d >= 0; d--) idx[d] = r % osh[d], r /= osh[d];
          int i = 0;
          while (idx[axis] >= len[i]) idx[axis] -= len[i++];
          int64_t f = ((idx[0] * sh[i][1] + idx[1]) * sh[i][2] + idx[2]) * sh[i][3] + idx[3];
          if (keel_value_at(out, e) != (double)((f * 7 + i * 31) % 200)) bad++;
        }
        if (bad) fprintf(stderr, "concat rows: dtype %d axis %d threads %d: %d wrong\n", dts[di],
                         axis, threads, bad);
        CHECK(bad == 0);
        release_all(&out, 1);
        release_all(in, 3);
        keel_session_destroy(s);
      }
}

/* Runs a 3-output Split and checks the parts' lengths along axis 1 of a
 * [2, 7] input holding 0..13. */
static void split_run(keel_session_t *s, const char *ins, keel_value_t **in, const int64_t *want) {
  keel_value_t *out[3] = {0};
  CHECK_OK(run(s, ins, in, out));
  int64_t off = 0;
  for (int i = 0; i < 3; i++) {
    CHECK(shape_is(out[i], 2, (int64_t[]){2, want[i]}));
    for (int64_t j = 0; out[i] && j < 2 * want[i]; j++)
      CHECK(keel_value_at(out[i], j) == (double)((j / want[i]) * 7 + off + j % want[i]));
    off += want[i];
  }
  release_all(out, 3);
}

static void check_split(void) {
  int dts[2] = {KEEL_FLOAT16, KEEL_INT64};
  uint16_t x[14];
  for (int i = 0; i < 14; i++) x[i] = keel_f32_to_f16((float)i); /* exact */
  /* opset 13: split as input; none: equal parts (7 is not divisible by 3) */
  mb_graph *g = graph("X,S", dts, "A,B,C");
  mb_attr_i(mb_add(g, "Split", "X,S", "A,B,C"), "axis", 1);
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT16, 2, (int64_t[]){2, 7}, x),
                         ints(s, 3, (int64_t[]){2, 0, 5})};
  split_run(s, "X,S", in, (int64_t[]){2, 0, 5});
  keel_value_t *out[3] = {0};
  keel_value_release(in[1]);
  in[1] = ints(s, 3, (int64_t[]){2, 2, 2}); /* sums to 6, not 7 */
  CHECK_STATUS(run(s, "X,S", in, out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 3, (int64_t[]){1, 1, 5});
  split_run(s, "X,S", in, (int64_t[]){1, 1, 5});
  release_all(in, 2);
  keel_session_destroy(s);
  g = graph("X", dts, "A,B,C"); /* no split: equal parts, 7 is not 3 of them */
  mb_add(g, "Split", "X", "A,B,C");
  s = mb_session(g, 13);
  in[0] = mb_tensor(s, KEEL_FLOAT16, 2, (int64_t[]){7, 2}, x);
  CHECK_STATUS(run(s, "X", in, out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "Split") != NULL);
  release_all(in, 1);
  in[0] = mb_tensor(s, KEEL_FLOAT16, 2, (int64_t[]){6, 1}, x);
  CHECK_OK(run(s, "X", in, out));
  for (int i = 0; i < 3; i++) CHECK(shape_is(out[i], 2, (int64_t[]){2, 1}));
  release_all(out, 3);
  release_all(in, 1);
  keel_session_destroy(s);
  /* opset 18: num_outputs, ceil-sized with a smaller last part */
  g = graph("X", dts, "A,B,C");
  mb_node *n = mb_add(g, "Split", "X", "A,B,C");
  mb_attr_i(n, "axis", -1);
  mb_attr_i(n, "num_outputs", 3);
  s = mb_session(g, 18);
  CHECK(s != NULL);
  if (s) {
    in[0] = mb_tensor(s, KEEL_FLOAT16, 2, (int64_t[]){2, 7}, x);
    split_run(s, "X", in, (int64_t[]){3, 3, 1});
    release_all(in, 1);
    keel_session_destroy(s);
  }
  /* opset 2: split attribute */
  g = graph("X", dts, "A,B,C");
  n = mb_add(g, "Split", "X", "A,B,C");
  mb_attr_i(n, "axis", 1);
  mb_attr_ints(n, "split", 3, (int64_t[]){4, 2, 1});
  s = mb_session(g, 2);
  in[0] = mb_tensor(s, KEEL_FLOAT16, 2, (int64_t[]){2, 7}, x);
  split_run(s, "X", in, (int64_t[]){4, 2, 1});
  release_all(in, 1);
  keel_session_destroy(s);
}

/* ================================ Tile, Expand, DepthToSpace ... */

static void check_tile(void) {
  int dts[2] = {KEEL_INT16, KEEL_INT64};
  mb_graph *g = graph("X,R", dts, "Y");
  mb_add(g, "Tile", "X,R", "Y");
  keel_session_t *s = mb_session(g, 13);
  for (int t = 0; t < 40; t++) {
    int r = (int)rnd(1, 3);
    int64_t shape[3], rep[3], oshape[3], xs[3], c[3];
    for (int i = 0; i < r; i++) {
      shape[i] = rnd(0, 3), rep[i] = rnd(0, 3);
      oshape[i] = shape[i] * rep[i];
    }
    int16_t x[27];
    for (int i = 0; i < 27; i++) x[i] = (int16_t)(i * 3 - 20);
    strides(r, shape, xs);
    keel_value_t *in[2] = {mb_tensor(s, KEEL_INT16, r, shape, x), ints(s, r, rep)}, *out = NULL;
    CHECK_OK(run(s, "X,R", in, &out));
    CHECK(shape_is(out, r, oshape));
    for (int64_t o = 0; out && o < numel(r, oshape); o++) {
      int64_t off = 0;
      unravel(o, r, oshape, c);
      for (int d = 0; d < r; d++) off += (c[d] % shape[d]) * xs[d];
      CHECK(keel_value_at(out, o) == x[off]);
    }
    release_all(&out, 1);
    release_all(in, 2);
  }
  keel_value_t *in[2] = {mb_tensor(s, KEEL_INT16, 1, (int64_t[]){2}, (int16_t[]){1, 2}),
                         ints(s, 1, (int64_t[]){-1})}, *out = NULL;
  CHECK_STATUS(run(s, "X,R", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){1, 1}); /* one per axis */
  CHECK_STATUS(run(s, "X,R", in, &out), KEEL_ERR_SHAPE);
  release_all(in, 2);
  /* fuzzer: repeats whose product overflows though each axis fits: the
   * strides were computed (signed overflow) before the size was checked */
  in[0] = mb_tensor(s, KEEL_INT16, 3, (int64_t[]){1, 1, 2}, (int16_t[]){1, 2});
  in[1] = ints(s, 3, (int64_t[]){1ll << 40, 1ll << 40, 1});
  CHECK_STATUS(run(s, "X,R", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  /* ... and an empty result whose other axes multiply past int64: refused
   * too (keel_shape_check), as kernels multiply those axes */
  in[1] = ints(s, 3, (int64_t[]){0, 1ll << 40, 1ll << 40});
  CHECK_STATUS(run(s, "X,R", in, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[1]);
  in[1] = ints(s, 3, (int64_t[]){0, 2, 3});
  CHECK_OK(run(s, "X,R", in, &out));
  CHECK(shape_is(out, 3, (int64_t[]){0, 2, 6}));
  release_all(&out, 1);
  release_all(in, 2);
  keel_session_destroy(s);
}

static void check_expand(void) {
  int dts[2] = {KEEL_UINT8, KEEL_INT64};
  mb_graph *g = graph("X,S", dts, "Y");
  mb_add(g, "Expand", "X,S", "Y");
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in[2] = {mb_tensor(s, KEEL_UINT8, 2, (int64_t[]){3, 1}, (uint8_t[]){1, 2, 3}),
                         ints(s, 3, (int64_t[]){2, 1, 4})}, *out = NULL;
  CHECK_OK(run(s, "X,S", in, &out));
  CHECK(shape_is(out, 3, (int64_t[]){2, 3, 4}));
  for (int i = 0; out && i < 24; i++) CHECK(keel_value_at(out, i) == 1 + (i / 4) % 3);
  release_all(&out, 1);
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){2, 4}); /* 3 vs 2 */
  CHECK_STATUS(run(s, "X,S", in, &out), KEEL_ERR_SHAPE);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* DepthToSpace (both modes) and SpaceToDepth against their index formulas. */
static void check_depth_space(void) {
  int dt = KEEL_INT32;
  const int64_t N = 2, C = 8, H = 2, W = 3, b = 2, Co = C / (b * b);
  int32_t x[96];
  for (int i = 0; i < 96; i++) x[i] = i;
  for (int mode = 0; mode < 2; mode++) {
    mb_graph *g = graph("X", &dt, "Y");
    mb_node *n = mb_add(g, "DepthToSpace", "X", "Y");
    mb_attr_i(n, "blocksize", b);
    mb_attr_s(n, "mode", mode ? "CRD" : "DCR");
    keel_session_t *s = mb_session(g, 13);
    keel_value_t *in = mb_tensor(s, dt, 4, (int64_t[]){N, C, H, W}, x), *out = NULL;
    CHECK_OK(run(s, "X", &in, &out));
    int64_t os[4] = {N, Co, H * b, W * b}, c[4];
    CHECK(shape_is(out, 4, os));
    for (int64_t o = 0; out && o < 96; o++) {
      unravel(o, 4, os, c);
      int64_t bh = c[2] % b, bw = c[3] % b;
      int64_t ch = mode ? c[1] * b * b + bh * b + bw : (bh * b + bw) * Co + c[1];
      CHECK(keel_value_at(out, o) == x[((c[0] * C + ch) * H + c[2] / b) * W + c[3] / b]);
    }
    release_all(&out, 1);
    release_all(&in, 1);
    keel_session_destroy(s);
  }
  mb_graph *g = graph("X", &dt, "Y");
  mb_attr_i(mb_add(g, "SpaceToDepth", "X", "Y"), "blocksize", b);
  keel_session_t *s = mb_session(g, 13);
  const int64_t h = 4, w = 6, c0 = 2; /* input (2, 2, 4, 6) */
  keel_value_t *in = mb_tensor(s, dt, 4, (int64_t[]){N, c0, h, w}, x), *out = NULL;
  CHECK_OK(run(s, "X", &in, &out));
  int64_t os[4] = {N, c0 * b * b, h / b, w / b}, c[4];
  CHECK(shape_is(out, 4, os));
  for (int64_t o = 0; out && o < 96; o++) {
    unravel(o, 4, os, c);
    int64_t blk = c[1] / c0, ch = c[1] % c0;
    CHECK(keel_value_at(out, o) ==
          x[((c[0] * c0 + ch) * h + c[2] * b + blk / b) * w + c[3] * b + blk % b]);
  }
  release_all(&out, 1);
  release_all(&in, 1);
  in = mb_tensor(s, dt, 4, (int64_t[]){1, 1, 3, 2}, x); /* 3 is not divisible by 2 */
  CHECK_STATUS(run(s, "X", &in, &out), KEEL_ERR_SHAPE);
  release_all(&in, 1);
  keel_session_destroy(s);
}

/* ============================================= small generators */

static void check_shape_size(void) {
  int dt = KEEL_BOOL;
  mb_graph *g = graph("X", &dt, "A,B,C");
  mb_add(g, "Shape", "X", "A");
  mb_node *n = mb_add(g, "Shape", "X", "B");
  mb_attr_i(n, "start", -3);
  mb_attr_i(n, "end", -1);
  mb_add(g, "Size", "X", "C");
  keel_session_t *s = mb_session(g, 15);
  keel_value_t *in = mb_tensor(s, dt, 4, (int64_t[]){2, 3, 0, 5}, NULL), *out[3] = {0};
  CHECK_OK(run(s, "X", &in, out));
  CHECK(shape_is(out[0], 1, (int64_t[]){4}) && keel_value_at(out[0], 3) == 5);
  CHECK(shape_is(out[1], 1, (int64_t[]){2}) && keel_value_at(out[1], 0) == 3 &&
        keel_value_at(out[1], 1) == 0);
  CHECK(shape_is(out[2], 0, NULL) && keel_value_at(out[2], 0) == 0);
  release_all(out, 3);
  release_all(&in, 1);
  keel_session_destroy(s);
}

static void check_constant_of_shape_range(void) {
  int dt = KEEL_INT64;
  mb_graph *g = graph("S", &dt, "A,B");
  mb_attr_t(mb_add(g, "ConstantOfShape", "S", "A"), "value", KEEL_INT64, 1, (int64_t[]){1},
            (int64_t[]){INT64_MIN + 3});
  mb_add(g, "ConstantOfShape", "S", "B");
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in = ints(s, 2, (int64_t[]){2, 3}), *out[2] = {0};
  CHECK_OK(run(s, "S", &in, out));
  CHECK(shape_is(out[0], 2, (int64_t[]){2, 3}) && keel_value_dtype(out[0]) == KEEL_INT64);
  CHECK(out[0] && ((const int64_t *)keel_value_data(out[0]))[5] == INT64_MIN + 3);
  CHECK(shape_is(out[1], 2, (int64_t[]){2, 3}) && keel_value_dtype(out[1]) == KEEL_FLOAT &&
        keel_value_at(out[1], 4) == 0);
  release_all(out, 2);
  release_all(&in, 1);
  in = ints(s, 1, (int64_t[]){-1});
  CHECK_STATUS(run(s, "S", &in, out), KEEL_ERR_SHAPE);
  release_all(&in, 1);
  keel_session_destroy(s);

  int dts[3] = {KEEL_INT32, KEEL_INT32, KEEL_INT32};
  g = graph("A,B,C", dts, "Y");
  mb_add(g, "Range", "A,B,C", "Y");
  s = mb_session(g, 11);
  static const int32_t cases[][4] = {{10, 4, -3, 2}, {0, 5, 1, 5}, {1, 1, 1, 0}, {3, 9, 2, 3},
                                     {5, 0, 2, 0}, {-5, 6, 4, 3}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    keel_value_t *r[3];
    for (int i = 0; i < 3; i++) r[i] = mb_tensor(s, KEEL_INT32, 0, SCALAR, &cases[t][i]);
    keel_value_t *o = NULL;
    CHECK_OK(run(s, "A,B,C", r, &o));
    CHECK(shape_is(o, 1, (int64_t[]){cases[t][3]}));
    for (int i = 0; o && i < cases[t][3]; i++)
      CHECK(keel_value_at(o, i) == cases[t][0] + i * cases[t][2]);
    release_all(&o, 1);
    if (t == 0) { /* delta 0: an error, then the next case runs */
      keel_value_release(r[2]);
      r[2] = mb_tensor(s, KEEL_INT32, 0, NULL, (int32_t[]){0});
      CHECK_STATUS(run(s, "A,B,C", r, &o), KEEL_ERR_RUNTIME);
    }
    release_all(r, 3);
  }
  keel_session_destroy(s);
}

static void check_eye_trilu(void) {
  int dt = KEEL_FLOAT;
  mb_graph *g = graph("X", &dt, "Y");
  mb_node *n = mb_add(g, "EyeLike", "X", "Y");
  mb_attr_i(n, "k", -1);
  mb_attr_i(n, "dtype", KEEL_INT32);
  keel_session_t *s = mb_session(g, 13);
  keel_value_t *in = mb_tensor(s, dt, 2, (int64_t[]){3, 4}, NULL), *out = NULL;
  CHECK_OK(run(s, "X", &in, &out));
  CHECK(keel_value_dtype(out) == KEEL_INT32);
  for (int i = 0; out && i < 12; i++) CHECK(keel_value_at(out, i) == (i % 4 == i / 4 - 1));
  release_all(&out, 1);
  release_all(&in, 1);
  keel_session_destroy(s);

  int dts[2] = {KEEL_DOUBLE, KEEL_INT64};
  for (int upper = 0; upper < 2; upper++) {
    g = graph("X,K", dts, "Y");
    mb_attr_i(mb_add(g, "Trilu", "X,K", "Y"), "upper", upper);
    s = mb_session(g, 14);
    double x[30];
    for (int i = 0; i < 30; i++) x[i] = i + 1;
    for (int64_t kk = -4; kk <= 6; kk++) {
      keel_value_t *ins[2] = {mb_tensor(s, KEEL_DOUBLE, 3, (int64_t[]){2, 3, 5}, x),
                              scalar_i64(s, kk)};
      CHECK_OK(run(s, "X,K", ins, &out));
      for (int i = 0; out && i < 30; i++) {
        int64_t row = (i / 5) % 3, col = i % 5;
        bool keep = upper ? col - row >= kk : col - row <= kk;
        CHECK(keel_value_at(out, i) == (keep ? x[i] : 0));
      }
      release_all(&out, 1);
      release_all(ins, 2);
    }
    keel_session_destroy(s);
  }
}

static void check_reverse_sequence(void) {
  int dts[2] = {KEEL_STRING, KEEL_INT64};
  mb_graph *g = graph("X,L", dts, "Y");
  mb_node *n = mb_add(g, "ReverseSequence", "X,L", "Y");
  mb_attr_i(n, "batch_axis", 0);
  mb_attr_i(n, "time_axis", 1);
  keel_session_t *s = mb_session(g, 10);
  keel_string x[6] = {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}, {"e", 1}, {"f", 1}};
  keel_value_t *in[2] = {mb_tensor(s, KEEL_STRING, 2, (int64_t[]){2, 3}, x),
                         ints(s, 2, (int64_t[]){3, 2})}, *out = NULL;
  CHECK_OK(run(s, "X,L", in, &out));
  const char *want = "cbaedf";
  const keel_string *y = out ? keel_value_data(out) : NULL;
  for (int i = 0; y && i < 6; i++) CHECK(y[i].len == 1 && y[i].data[0] == want[i]);
  release_all(&out, 1);
  keel_value_release(in[1]);
  in[1] = ints(s, 2, (int64_t[]){4, 1});
  CHECK_STATUS(run(s, "X,L", in, &out), KEEL_ERR_RUNTIME);
  release_all(in, 2);
  keel_session_destroy(s);
}

/* Identity-16 passes a sequence through by reference. */
static void check_identity_sequence(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input_seq(g, "X", KEEL_FLOAT);
  mb_output_seq(g, "Y", KEEL_FLOAT);
  mb_add(g, "Identity", "X", "Y");
  keel_session_t *s = mb_session(g, 16);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *items[2] = {mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){1, 2}),
                            mb_tensor(s, KEEL_FLOAT, 0, NULL, (float[]){3})};
  keel_value_t *seq = NULL, *out = NULL;
  CHECK_OK(keel_sequence_create(s, KEEL_FLOAT, items, 2, &seq));
  CHECK_OK(run(s, "X", &seq, &out));
  CHECK(out && keel_value_kind_of(out) == KEEL_KIND_SEQUENCE && keel_sequence_length(out) == 2);
  const keel_value_t *e = out ? keel_sequence_at(out, 0) : NULL;
  CHECK(e && keel_value_data(e) == keel_value_data(items[0])); /* no copy */
  release_all(&out, 1);
  release_all(&seq, 1);
  release_all(items, 2);
  keel_session_destroy(s);
}

int main(void) {
  for (int i = 0; i < 150; i++) transpose_case();
  check_transpose_default_and_errors();
  check_slice();
  check_slice_v1();
  check_center_crop_pad();
  check_pad_modes();
  check_pad_versions();
  check_reshape();
  check_squeeze_unsqueeze_flatten();
  check_concat();
  check_concat_rows();
  check_split();
  check_tile();
  check_expand();
  check_depth_space();
  check_shape_size();
  check_constant_of_shape_range();
  check_eye_trilu();
  check_reverse_sequence();
  check_identity_sequence();
  return check_report();
}
