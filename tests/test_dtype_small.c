/* test_dtype_small.c: the narrow element types (tensor/dtype_small.c).
 *
 * Every float8 / float4 / e8m0 code's decode and a sweep of 3279 float32
 * values' encodes into every narrow type (saturating or not, every e8m0
 * round_mode) against tests/data/dtype_small.txt, which
 * tools/gen_dtype_small.py writes from ONNX's reference implementation.
 * Then packing, sizes, TensorProto int32_data, and the kernels that take
 * the types (Cast, QuantizeLinear / DequantizeLinear against a naive
 * blocked reference, BitCast) plus the refusal of kernels that do not. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype_small.h"

#define COUNTOF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct col {
  int t;
  bool sat;
  int rm;
} col;

static const col COLS[] = {
    {KEEL_FLOAT8E4M3FN, 1, 0},   {KEEL_FLOAT8E4M3FN, 0, 0},   {KEEL_FLOAT8E4M3FNUZ, 1, 0},
    {KEEL_FLOAT8E4M3FNUZ, 0, 0}, {KEEL_FLOAT8E5M2, 1, 0},     {KEEL_FLOAT8E5M2, 0, 0},
    {KEEL_FLOAT8E5M2FNUZ, 1, 0}, {KEEL_FLOAT8E5M2FNUZ, 0, 0}, {KEEL_FLOAT4E2M1, 1, 0},
    {KEEL_FLOAT8E8M0, 1, KEEL_ROUND_UP},      {KEEL_FLOAT8E8M0, 0, KEEL_ROUND_UP},
    {KEEL_FLOAT8E8M0, 1, KEEL_ROUND_DOWN},    {KEEL_FLOAT8E8M0, 0, KEEL_ROUND_DOWN},
    {KEEL_FLOAT8E8M0, 1, KEEL_ROUND_NEAREST}, {KEEL_FLOAT8E8M0, 0, KEEL_ROUND_NEAREST},
    {KEEL_INT4, 1, 0},           {KEEL_UINT4, 1, 0},          {KEEL_INT2, 1, 0},
    {KEEL_UINT2, 1, 0}};

static int type_by_name(const char *s) {
  static const struct { const char *n; int t; } m[] = {
      {"FLOAT8E4M3FN", KEEL_FLOAT8E4M3FN}, {"FLOAT8E4M3FNUZ", KEEL_FLOAT8E4M3FNUZ},
      {"FLOAT8E5M2", KEEL_FLOAT8E5M2},     {"FLOAT8E5M2FNUZ", KEEL_FLOAT8E5M2FNUZ},
      {"FLOAT8E8M0", KEEL_FLOAT8E8M0},     {"FLOAT4E2M1", KEEL_FLOAT4E2M1}};
  for (size_t i = 0; i < COUNTOF(m); i++)
    if (!strcmp(s, m[i].n)) return m[i].t;
  return 0;
}

static float f32_of(unsigned u) {
  float f;
  uint32_t v = u;
  memcpy(&f, &v, 4);
  return f;
}

/* Decode lines: value bits equal (NaN: both NaN). Encode lines: codes equal. */
static void check_tables(void) {
  FILE *f = fopen("tests/data/dtype_small.txt", "r");
  CHECK(f != NULL);
  if (!f) return;
  char line[512];
  int n_dec = 0, n_enc = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == 'D') {
      char name[32];
      unsigned code, want;
      if (sscanf(line, "D %31s %x %x", name, &code, &want) != 3) continue;
      float got = (float)keel_small_decode(type_by_name(name), code), w = f32_of(want);
      bool ok = (isnan(got) && isnan(w)) || memcmp(&got, &w, 4) == 0;
      if (!ok && bad++ < 10) fprintf(stderr, "decode %s %02x: %g, expected %g\n", name, code, got, w);
      n_dec++;
    } else if (line[0] == 'E') {
      char *p = line + 2;
      float x = f32_of((unsigned)strtoul(p, &p, 16));
      for (size_t c = 0; c < COUNTOF(COLS); c++) {
        unsigned want = (unsigned)strtoul(p, &p, 16);
        unsigned got = keel_small_encode(COLS[c].t, x, COLS[c].sat, COLS[c].rm);
        if (got != want && bad++ < 10)
          fprintf(stderr, "encode %.9g as %s (column %zu): %02x, expected %02x\n", x,
                  keel_dtype_name((keel_dtype)COLS[c].t), c, got, want);
      }
      n_enc++;
    }
  }
  fclose(f);
  CHECK(n_dec == 5 * 256 + 16);
  CHECK(n_enc > 3000);
  CHECK(bad == 0);
}

/* Sizes, names and the packed layout (low bits first). */
static void check_layout(void) {
  CHECK(keel_dtype_size(KEEL_INT4) == 0 && keel_dtype_bits(KEEL_INT4) == 4);
  CHECK(keel_dtype_size(KEEL_FLOAT8E5M2) == 1 && keel_dtype_bits(KEEL_INT2) == 2);
  CHECK(keel_dtype_nbytes(KEEL_UINT4, 5) == 3 && keel_dtype_nbytes(KEEL_INT2, 5) == 2);
  CHECK(keel_dtype_nbytes(KEEL_FLOAT, 5) == 20 && keel_dtype_nbytes(KEEL_INT2, 0) == 0);
  CHECK(!strcmp(keel_dtype_name(KEEL_FLOAT8E4M3FNUZ), "float8e4m3fnuz"));
  CHECK(!strcmp(keel_dtype_name(KEEL_FLOAT4E2M1), "float4e2m1"));
  uint8_t b[2] = {0, 0};
  keel_small_put(KEEL_INT4, b, 0, 0x3);
  keel_small_put(KEEL_INT4, b, 1, 0xA);
  keel_small_put(KEEL_INT4, b, 2, 0xF);
  CHECK(b[0] == 0xA3 && b[1] == 0x0F);
  CHECK(keel_small_decode_int(KEEL_INT4, keel_small_get(KEEL_INT4, b, 1)) == -6);
  uint8_t c = 0;
  for (unsigned i = 0; i < 4; i++) keel_small_put(KEEL_UINT2, &c, i, i);
  CHECK(c == 0xE4); /* 3,2,1,0 from the top */
  CHECK(keel_small_decode_int(KEEL_INT2, 2) == -2 && keel_small_decode_int(KEEL_UINT2, 2) == 2);
  /* a double goes through float32 first (ml_dtypes): just above a tie in
   * double is the tie itself in float32, which rounds to even */
  double above = 1.0625 + ldexp(1.0, -40);
  CHECK(keel_small_encode(KEEL_FLOAT8E4M3FN, above, true, 0) == 0x38);      /* 1.0 */
  CHECK(keel_small_encode(KEEL_FLOAT8E4M3FN, 1.0625f * 1.0000001f, true, 0) == 0x39); /* 1.125 */
  CHECK(keel_small_encode(KEEL_FLOAT8E5M2, 1e300, false, 0) == 0x7C);     /* inf */
  CHECK(keel_small_encode(KEEL_FLOAT8E5M2, -1e300, true, 0) == 0xFB);     /* -max */
}

/* ---------------------------------------------------------- kernels */

/* Cast float -> int4 -> float of 5 values (odd: a half-used last byte). */
static void check_cast_int4(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){5});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_output(g, "P", KEEL_INT4, -1, NULL);
  mb_attr_i(mb_add(g, "Cast", "X", "P"), "to", KEEL_INT4);
  mb_attr_i(mb_add(g, "Cast", "P", "Y"), "to", KEEL_FLOAT);
  keel_session_t *s = mb_session(g, 25);
  keel_value_t *out[2] = {0};
  if (!s) return;
  float x[5] = {-9.5f, 7.9f, -8, 3, 16};
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){5}, x);
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  if (out[0] && out[1]) {
    float want[5] = {7, 7, -8, 3, 0}; /* truncated, then the low 4 bits */
    for (int i = 0; i < 5; i++) CHECK(keel_value_at(out[0], i) == want[i]);
    const uint8_t *p = keel_value_data(out[1]);
    CHECK(p[0] == 0x77 && p[1] == 0x38 && p[2] == 0x00);
    CHECK(keel_value_dtype(out[1]) == KEEL_INT4 && keel_value_numel(out[1]) == 5);
    /* TensorProto round trip keeps the packing */
    void *pb;
    size_t len;
    CHECK_OK(keel_value_to_pb(out[1], "P", &pb, &len));
    keel_value_t *back = NULL;
    CHECK_OK(keel_value_from_pb(s, pb, len, KEEL_KIND_TENSOR, &back));
    CHECK(back && keel_value_dtype(back) == KEEL_INT4 && keel_value_at(back, 4) == 0 &&
          keel_value_at(back, 1) == 7);
    keel_value_release(back);
    keel_free(pb);
  }
  for (int i = 0; i < 2; i++) keel_value_release(out[i]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* A packed TensorProto in int32_data form: one entry per byte. */
static void check_int32_data(void) {
  /* dims [3], data_type 22 (int4), int32_data [0x9F, 0x02] packed */
  const uint8_t pb[] = {0x08, 0x03, 0x10, 0x16, 0x2A, 0x03, 0x9F, 0x01, 0x02};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 0, NULL);
  mb_output(g, "X", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session(g, 13);
  if (!s) return;
  keel_value_t *v = NULL;
  CHECK_OK(keel_value_from_pb(s, pb, sizeof pb, KEEL_KIND_TENSOR, &v));
  CHECK(v && keel_value_numel(v) == 3 && keel_value_at(v, 0) == -1 && keel_value_at(v, 1) == -7 &&
        keel_value_at(v, 2) == 2);
  keel_value_release(v);
  const uint8_t bad[] = {0x08, 0x03, 0x10, 0x16, 0x2A, 0x01, 0x9F}; /* one byte for 3 */
  CHECK_STATUS(keel_value_from_pb(s, bad, sizeof bad, KEEL_KIND_TENSOR, &v), KEEL_ERR_INVALID_MODEL);
  keel_session_destroy(s);
}

/* Naive blocked quantization: scale entry of element (r, c) is (r, c / B). */
static void check_blocked_quant(void) {
  enum { R = 3, C = 5, B = 2, S = 3 };
  float x[R * C], sc[R * S];
  int8_t zp[R * S];
  for (int i = 0; i < R * C; i++) x[i] = (float)(i * 7 % 23) - 11.25f;
  for (int i = 0; i < R * S; i++) sc[i] = 0.5f + 0.25f * (float)i, zp[i] = (int8_t)(i - 4);
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){R, C});
  mb_init(g, "s", KEEL_FLOAT, 2, (int64_t[]){R, S}, sc);
  mb_init(g, "z", KEEL_INT4, 2, (int64_t[]){R, S}, (uint8_t[]){0xDC, 0xFE, 0x10, 0x32, 0x04});
  mb_output(g, "Q", KEEL_INT4, -1, NULL);
  mb_output(g, "D", KEEL_FLOAT, -1, NULL);
  mb_node *q = mb_add(g, "QuantizeLinear", "X,s,z", "Q");
  mb_attr_i(q, "axis", 1);
  mb_attr_i(q, "block_size", B);
  mb_node *d = mb_add(g, "DequantizeLinear", "Q,s,z", "D");
  mb_attr_i(d, "axis", 1);
  mb_attr_i(d, "block_size", B);
  keel_session_t *s = mb_session(g, 21);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){R, C}, x), *out[2] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
  for (int r = 0; out[0] && out[1] && r < R; r++)
    for (int c = 0; c < C; c++) {
      int e = r * S + c / B;
      double v = rint((double)(x[r * C + c] / sc[e])) + zp[e];
      v = v < -8 ? -8 : v > 7 ? 7 : v;
      CHECK(keel_value_at(out[0], r * C + c) == v);
      CHECK(keel_value_at(out[1], r * C + c) == (float)(v - zp[e]) * sc[e]);
    }
  for (int i = 0; i < 2; i++) keel_value_release(out[i]);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* Per-axis (axis 0) quantization into every integer type but the 8-bit
 * ones (those have their own loops, tested in test_ops_quant.c), with zero
 * points, against the naive formula; dequantization back. */
static void check_quant_int_types(void) {
  static const struct { int t; double lo, hi; } T[] = {
      {KEEL_UINT16, 0, 65535}, {KEEL_INT16, -32768, 32767}, {KEEL_UINT4, 0, 15},
      {KEEL_INT4, -8, 7},      {KEEL_UINT2, 0, 3},          {KEEL_INT2, -2, 1}};
  enum { R = 3, C = 5 };
  for (size_t k = 0; k < COUNTOF(T); k++) {
    float x[R * C], sc[R] = {0.5f, 3.0f, 0.001f}, zf[R];
    for (int i = 0; i < R * C; i++) x[i] = (float)((i * 37) % 41) - 20.5f;
    for (int r = 0; r < R; r++) zf[r] = (float)(T[k].lo + (double)r * (T[k].hi - T[k].lo) / 2);
    zf[1] = (float)rint(zf[1]);
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 2, (int64_t[]){R, C});
    mb_init(g, "s", KEEL_FLOAT, 1, (int64_t[]){R}, sc);
    mb_init(g, "zf", KEEL_FLOAT, 1, (int64_t[]){R}, zf);
    mb_output(g, "Q", T[k].t, -1, NULL);
    mb_output(g, "D", KEEL_FLOAT, -1, NULL);
    mb_attr_i(mb_add(g, "Cast", "zf", "z"), "to", T[k].t);
    mb_attr_i(mb_add(g, "QuantizeLinear", "X,s,z", "Q"), "axis", 0);
    mb_attr_i(mb_add(g, "DequantizeLinear", "Q,s,z", "D"), "axis", 0);
    keel_session_t *s = mb_session(g, 21);
    if (!s) continue;
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){R, C}, x), *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
    int bad = 0;
    for (int i = 0; out[0] && out[1] && i < R * C; i++) {
      int r = i / C;
      double v = rint((double)(x[i] / sc[r])) + zf[r];
      v = v < T[k].lo ? T[k].lo : v > T[k].hi ? T[k].hi : v;
      bad += keel_value_at(out[0], i) != v;
      bad += keel_value_at(out[1], i) != (float)(v - zf[r]) * sc[r];
    }
    if (bad) fprintf(stderr, "quantize to %s: %d mismatches\n", keel_dtype_name((keel_dtype)T[k].t), bad);
    CHECK(out[0] && bad == 0);
    for (int i = 0; i < 2; i++) keel_value_release(out[i]);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

/* float8 quantization saturates unless saturate=0; DequantizeLinear reads
 * the codes back. */
static void check_float8_quant(void) {
  for (int sat = 0; sat < 2; sat++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){4});
    mb_init(g, "s", KEEL_FLOAT, 0, NULL, (float[]){2});
    mb_init(g, "z", KEEL_FLOAT8E4M3FN, 0, NULL, (uint8_t[]){0});
    mb_output(g, "D", KEEL_FLOAT, -1, NULL);
    mb_attr_i(mb_add(g, "QuantizeLinear", "X,s,z", "Q"), "saturate", sat);
    mb_add(g, "DequantizeLinear", "Q,s,z", "D");
    keel_session_t *s = mb_session(g, 19);
    if (!s) return;
    float x[4] = {1, -3.3f, 2000, -INFINITY};
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4}, x), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
    if (out) {
      CHECK(keel_value_at(out, 0) == 1 && keel_value_at(out, 1) == -3.25);
      CHECK(sat ? keel_value_at(out, 2) == 896 : isnan(keel_value_at(out, 2)));
      CHECK(sat ? keel_value_at(out, 3) == -896 : isnan(keel_value_at(out, 3)));
    }
    keel_value_release(out);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

/* BitCast keeps bits; widths must match. A kernel without the narrow
 * types in its row refuses them by name. */
static void check_bitcast_and_refusal(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(g, "Y", KEEL_INT32, -1, NULL);
  mb_attr_i(mb_add(g, "BitCast", "X", "Y"), "to", KEEL_INT32);
  keel_session_t *s = mb_session(g, 26);
  if (s) {
    float x[2] = {1.0f, -2.0f};
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){2}, x), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
    CHECK(out && ((const int32_t *)keel_value_data(out))[0] == 0x3F800000 &&
          ((const uint32_t *)keel_value_data(out))[1] == 0xC0000000u);
    keel_value_release(out);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){2});
  mb_output(g, "Y", KEEL_INT64, -1, NULL);
  mb_attr_i(mb_add(g, "BitCast", "X", "Y"), "to", KEEL_INT64);
  s = mb_session(g, 26);
  if (s) {
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){1, 2}), *out = NULL;
    CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_SHAPE);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  g = mb_graph_new("main"); /* views keep the packed bytes: Reshape an int4 [2,3] to [3,2] */
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){6});
  mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){3, 2});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_i(mb_add(g, "Cast", "X", "P"), "to", KEEL_INT4);
  mb_add(g, "Reshape", "P,shp", "R");
  mb_attr_i(mb_add(g, "Cast", "R", "Y"), "to", KEEL_FLOAT);
  s = mb_session(g, 21);
  if (s) {
    float x[6] = {-8, -1, 0, 1, 6, 7};
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){6}, x), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
    CHECK(out && keel_value_rank(out) == 2 && keel_value_shape(out)[0] == 3);
    for (int i = 0; out && i < 6; i++) CHECK(keel_value_at(out, i) == x[i]);
    keel_value_release(out);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  g = mb_graph_new("main"); /* Relu has no int4 row */
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){3});
  mb_output(g, "Y", KEEL_INT4, -1, NULL);
  mb_attr_i(mb_add(g, "Cast", "X", "P"), "to", KEEL_INT4);
  mb_add(g, "Relu", "P", "Y");
  s = mb_session(g, 21);
  if (s) {
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){3}, (float[]){1, 2, 3}), *out = NULL;
    CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_UNSUPPORTED);
    CHECK(strstr(keel_last_error(), "Relu") && strstr(keel_last_error(), "int4"));
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

/* X (float) -> Cast to t -> op -> Cast to float: the data-movement ops
 * that take the narrow types move codes, packed or not. */
static void check_moved(int t, const char *op, const char *ins, mb_graph *g, int opset,
                        const float *x, int64_t nx, const float *want, int64_t nwant) {
  mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){nx});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_i(mb_add(g, "Cast", "X", "P"), "to", t);
  mb_node *n = mb_add(g, op, ins, "R");
  if (!strcmp(op, "Transpose")) mb_attr_ints(n, "perm", 2, (int64_t[]){1, 0});
  mb_attr_i(mb_add(g, "Cast", "R", "Y"), "to", KEEL_FLOAT);
  keel_session_t *s = mb_session(g, opset);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, &nx, x), *out = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  CHECK(out && keel_value_numel(out) == nwant);
  for (int64_t i = 0; out && i < nwant && i < keel_value_numel(out); i++)
    if (keel_value_at(out, i) != want[i]) {
      fprintf(stderr, "%s of %s: element %lld is %g, expected %g\n", op,
              keel_dtype_name((keel_dtype)t), (long long)i, keel_value_at(out, i), want[i]);
      CHECK(0);
    }
  keel_value_release(out);
  keel_value_release(in);
  keel_session_destroy(s);
}

static void check_data_movement(void) {
  static const int types[] = {KEEL_INT4, KEEL_UINT4, KEEL_FLOAT8E4M3FN, KEEL_FLOAT4E2M1};
  for (size_t i = 0; i < COUNTOF(types); i++) {
    int t = types[i];
    float x[6] = {1, 2, 3, 4, 6, 0}; /* representable in every type above */
    mb_graph *g = mb_graph_new("main"); /* [2,3] -> [3,2] */
    mb_init(g, "shp", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, 3});
    mb_add(g, "Reshape", "P,shp", "P2");
    check_moved(t, "Transpose", "P2", g, 21, x, 6, (float[]){1, 4, 2, 6, 3, 0}, 6);
    g = mb_graph_new("main"); /* pads [1, 2] with the constant 3 (an odd total) */
    mb_init(g, "pads", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 2});
    mb_init(g, "c3", KEEL_FLOAT, 0, NULL, (float[]){3});
    mb_attr_i(mb_add(g, "Cast", "c3", "cv"), "to", t);
    check_moved(t, "Pad", "P,pads,cv", g, 21, x, 6, (float[]){3, 1, 2, 3, 4, 6, 0, 3, 3}, 9);
  }
  mb_graph *g = mb_graph_new("main"); /* ConstantOfShape with an int4 value, 5 elements */
  mb_input(g, "X", KEEL_INT64, 1, (int64_t[]){1});
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_attr_t(mb_add(g, "ConstantOfShape", "X", "C"), "value", KEEL_INT4, 1, (int64_t[]){1},
            (uint8_t[]){0x0D});
  mb_attr_i(mb_add(g, "Cast", "C", "Y"), "to", KEEL_FLOAT);
  keel_session_t *s = mb_session(g, 21);
  if (!s) return;
  keel_value_t *in = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){5}), *out = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  for (int i = 0; out && i < 5; i++) CHECK(keel_value_at(out, i) == -3);
  keel_value_release(out);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* IsNaN / IsInf on float8: e5m2 has infinities, e4m3fn only NaN. */
static void check_classify(void) {
  static const struct { const char *op; int t; int pos, neg; double want[4]; } cases[] = {
      {"IsNaN", KEEL_FLOAT8E4M3FN, 1, 1, {0, 1, 1, 1}}, /* saturate=0: inf -> NaN */
      {"IsInf", KEEL_FLOAT8E5M2, 1, 1, {0, 0, 1, 1}},
      {"IsInf", KEEL_FLOAT8E5M2, 0, 1, {0, 0, 0, 1}},
      {"IsInf", KEEL_FLOAT8E4M3FN, 1, 1, {0, 0, 0, 0}}};
  for (size_t i = 0; i < COUNTOF(cases); i++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "X", KEEL_FLOAT, 1, (int64_t[]){4});
    mb_output(g, "Y", KEEL_BOOL, -1, NULL);
    mb_node *c = mb_add(g, "Cast", "X", "P");
    mb_attr_i(c, "to", cases[i].t);
    mb_attr_i(c, "saturate", 0);
    mb_node *n = mb_add(g, cases[i].op, "P", "Y");
    if (cases[i].op[2] == 'I') {
      mb_attr_i(n, "detect_positive", cases[i].pos);
      mb_attr_i(n, "detect_negative", cases[i].neg);
    }
    keel_session_t *s = mb_session(g, 21);
    if (!s) continue;
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 1, (int64_t[]){4},
                                 (float[]){1.5f, NAN, INFINITY, -INFINITY}), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
    for (int j = 0; out && j < 4; j++) CHECK(keel_value_at(out, j) == cases[i].want[j]);
    keel_value_release(out);
    keel_value_release(in);
    keel_session_destroy(s);
  }
}

int main(void) {
  check_tables();
  check_layout();
  check_cast_int4();
  check_int32_data();
  check_blocked_quant();
  check_float8_quant();
  check_quant_int_types();
  check_bitcast_and_refusal();
  check_data_movement();
  check_classify();
  return check_report();
}
