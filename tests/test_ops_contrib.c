/* test_ops_contrib.c: the com.microsoft ops (contrib.c, contrib_quant.c)
 * through real one-node sessions, against naive references written here:
 * MatMulNBits over bit widths, block sizes, zero-point forms, ragged K,
 * bias, g_idx and the column tiling; FusedMatMul's transposes; the GELU
 * family; the skip norms; the integer-to-float matmuls; the QLinear ops.
 * Then bad input: wrong shapes, zero points of the wrong type, block
 * sizes that are not powers of 2, unknown activations; each must fail with
 * a clear error and leave the session usable. ONNX Runtime's own outputs
 * for the same ops are checked by the contrib_ort ctest (tests/contrib). */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0xD1B54A32D192ED03ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int n) { return (int)(next() % (uint64_t)n); }
static float frand(float lo, float hi) {
  return lo + (hi - lo) * (float)(next() % 1000003) / 1000003.0f;
}

#define MS "com.microsoft"

/* ============================================================ harness */

/* One node input: name, type, shape, data (NULL data: omitted). */
typedef struct tin {
  const char *name;
  int dt, rank;
  int64_t dims[4];
  const void *data;
} tin;

static tin T(const char *name, int dt, int rank, const int64_t *dims, const void *data) {
  tin t = {name, dt, rank, {0}, data};
  if (rank > 0) memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  return t;
}

/* A graph with one node `op` over ins (every given one a graph input) and
 * outputs "Y0".."Y<n_out-1>"; *node receives the node for attributes. */
static mb_graph *node_graph(const char *op, const char *domain, const tin *ins, int n_in,
                            int n_out, mb_node **node) {
  mb_graph *g = mb_graph_new("main");
  char names[512] = "", outs[64] = "";
  for (int i = 0; i < n_in; i++) {
    if (i) strcat(names, ",");
    if (!ins[i].data) continue;
    strcat(names, ins[i].name);
    mb_input(g, ins[i].name, ins[i].dt, -1, NULL);
  }
  for (int i = 0; i < n_out; i++) {
    char o[8];
    snprintf(o, sizeof o, "Y%d", i);
    if (i) strcat(outs, ",");
    strcat(outs, o);
    mb_output(g, o, KEEL_UNDEFINED, -1, NULL);
  }
  *node = mb_add(g, op, names, outs);
  if (domain) mb_domain(*node, domain);
  return g;
}

static keel_session_t *ms_session(mb_graph *g, int opset) {
  size_t len;
  uint8_t *bytes = mb_model_domains(g, opset, MS, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  if (st) fprintf(stderr, "ms_session: %s\n", keel_last_error());
  return s;
}

/* Runs s on ins; outputs into out[0..n_out). Returns the status. */
static keel_status run_node(keel_session_t *s, const tin *ins, int n_in, keel_value_t **out,
                            int n_out) {
  const char *names[16];
  keel_value_t *vals[16];
  int n = 0;
  for (int i = 0; i < n_in; i++) {
    if (!ins[i].data) continue;
    names[n] = ins[i].name;
    vals[n++] = mb_tensor(s, ins[i].dt, ins[i].rank, ins[i].dims, ins[i].data);
  }
  for (int i = 0; i < n_out; i++) out[i] = NULL;
  keel_status st = keel_run(s, names, vals, (size_t)n, out);
  for (int i = 0; i < n; i++) keel_value_release(vals[i]);
  return st;
}

/* Builds, runs and destroys a one-output session: Y0's values into y
 * (cap elements; its count into *ny); the run's status. */
typedef void (*attr_fn)(mb_node *n, const void *arg);
static keel_status run1(const char *op, const char *domain, const tin *ins, int n_in,
                        attr_fn attrs, const void *arg, double *y, int64_t cap, int64_t *ny) {
  mb_node *node;
  mb_graph *g = node_graph(op, domain, ins, n_in, 1, &node);
  if (attrs) attrs(node, arg);
  keel_session_t *s = ms_session(g, 17);
  if (!s) return KEEL_ERR_INVALID_MODEL;
  keel_value_t *out[1];
  keel_status st = run_node(s, ins, n_in, out, 1);
  if (!st) {
    int64_t n = keel_value_numel(out[0]);
    *ny = n;
    for (int64_t i = 0; i < n && i < cap; i++) y[i] = keel_value_at(out[0], i);
    /* a session that failed once still runs: run it again for the same answer */
    keel_value_t *again[1];
    CHECK_OK(run_node(s, ins, n_in, again, 1));
    keel_value_release(again[0]);
  } else { /* an error leaves the session usable: the same error again */
    keel_value_t *again[1];
    CHECK(run_node(s, ins, n_in, again, 1) == st);
  }
  keel_value_release(out[0]);
  keel_session_destroy(s);
  return st;
}

/* Max |a - b| / (1 + |b|) over n. */
static double max_rel(const double *a, const double *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]) / (1 + fabs(b[i]));
    if (!(d <= m)) m = d;
  }
  return m;
}

/* ========================================================= MatMulNBits */

typedef struct nb_case {
  int M, K, N, bits, bs, zp; /* zp: 0 none, 1 packed uint8, 2 float */
  bool bias, gidx;
  int acc;
  int64_t bsz_attr;          /* block_size attribute (0: bs)            */
} nb_case;

static void nb_attrs(mb_node *n, const void *arg) {
  const nb_case *c = arg;
  mb_attr_i(n, "K", c->K);
  mb_attr_i(n, "N", c->N);
  mb_attr_i(n, "bits", c->bits);
  mb_attr_i(n, "block_size", c->bsz_attr ? c->bsz_attr : c->bs);
  if (c->acc) mb_attr_i(n, "accuracy_level", c->acc);
}

enum { NB_MAX_K = 512, NB_MAX_N = 320, NB_MAX_M = 40 };

typedef struct nb_data {
  float a[NB_MAX_M * NB_MAX_K], scales[NB_MAX_N * 32], zpf[NB_MAX_N * 32], bias[NB_MAX_N];
  uint8_t q[NB_MAX_N * NB_MAX_K + 128], b[NB_MAX_N * 32 * 128], zp8[NB_MAX_N * 32];
  int32_t g[NB_MAX_K];
  double ref[NB_MAX_M * NB_MAX_N], y[NB_MAX_M * NB_MAX_N];
} nb_data;

/* Random weights for c, packed as MatMulNBits stores them; q holds the
 * unpacked values (N, nb * bs). */
static void nb_fill(const nb_case *c, nb_data *d) {
  int nb = (c->K + c->bs - 1) / c->bs, per = 8 / c->bits, blob = c->bs / per;
  memset(d->b, 0, sizeof d->b);
  memset(d->zp8, 0, sizeof d->zp8);
  for (int i = 0; i < c->M * c->K; i++) d->a[i] = frand(-1, 1);
  for (int n = 0; n < c->N; n++)
    for (int j = 0; j < nb; j++) {
      d->scales[n * nb + j] = frand(0.01f, 0.1f);
      int z = rnd(1 << c->bits);
      d->zpf[n * nb + j] = frand(0, (float)((1 << c->bits) - 1));
      if (c->bits == 8) d->zp8[n * nb + j] = (uint8_t)z;
      else d->zp8[n * ((nb + 1) / 2) + j / 2] |= (uint8_t)(z << (4 * (j & 1)));
      for (int e = 0; e < c->bs; e++) {
        uint8_t v = (uint8_t)rnd(1 << c->bits);
        d->q[(n * nb + j) * c->bs + e] = v;
        d->b[(n * nb + j) * blob + e / per] |= (uint8_t)(v << (c->bits * (e % per)));
      }
    }
  for (int n = 0; n < c->N; n++) d->bias[n] = frand(-1, 1);
  for (int kk = 0; kk < c->K; kk++) d->g[kk] = kk / c->bs;
  for (int kk = c->K - 1; kk > 0 && c->gidx; kk--) { /* shuffle */
    int o = rnd(kk + 1), t = d->g[kk];
    d->g[kk] = d->g[o], d->g[o] = t;
  }
}

/* The naive reference: w[n][k] = (q - zp) * scale of k's block, then a
 * plain triple loop in double. */
static void nb_ref(const nb_case *c, const nb_data *d, double *y) {
  int nb = (c->K + c->bs - 1) / c->bs;
  for (int m = 0; m < c->M; m++)
    for (int n = 0; n < c->N; n++) {
      double acc = c->bias ? d->bias[n] : 0;
      for (int kk = 0; kk < c->K; kk++) {
        int j = d->g[kk];
        int blk = kk / c->bs, e = kk % c->bs;
        double q = d->q[(n * nb + blk) * c->bs + e], z;
        if (c->zp == 0) z = 1 << (c->bits - 1);
        else if (c->zp == 2) z = d->zpf[n * nb + j];
        else if (c->bits == 8) z = d->zp8[n * nb + j];
        else z = (d->zp8[n * ((nb + 1) / 2) + j / 2] >> (4 * (j & 1))) & 15;
        acc += d->a[m * c->K + kk] * (q - z) * d->scales[n * nb + j];
      }
      y[m * c->N + n] = acc;
    }
}

static keel_status nb_run(const nb_case *c, nb_data *d, int64_t *ny) {
  int nb = (c->K + c->bs - 1) / c->bs, blob = c->bs * c->bits / 8;
  int zpn = c->zp == 2 ? c->N * nb : c->N * ((nb * c->bits + 7) / 8);
  tin ins[6] = {
      T("A", KEEL_FLOAT, 2, (int64_t[]){c->M, c->K}, d->a),
      T("B", KEEL_UINT8, 3, (int64_t[]){c->N, nb, blob}, d->b),
      T("scales", KEEL_FLOAT, 1, (int64_t[]){c->N * nb}, d->scales),
      T("zero_points", c->zp == 2 ? KEEL_FLOAT : KEEL_UINT8, 1, (int64_t[]){zpn},
        c->zp == 0 ? NULL : c->zp == 2 ? (const void *)d->zpf : d->zp8),
      T("g_idx", KEEL_INT32, 1, (int64_t[]){c->K}, c->gidx ? d->g : NULL),
      T("bias", KEEL_FLOAT, 1, (int64_t[]){c->N}, c->bias ? d->bias : NULL),
  };
  return run1("MatMulNBits", MS, ins, 6, nb_attrs, c, d->y, NB_MAX_M * NB_MAX_N, ny);
}

static void check_nbits(void) {
  static nb_data d;
  const nb_case cases[] = {
      {2, 32, 8, 4, 16, 0, false, false, 0, 0},    {3, 64, 12, 4, 32, 1, true, false, 0, 0},
      {1, 200, 5, 4, 128, 1, false, false, 0, 0},  {4, 96, 7, 4, 32, 2, false, false, 0, 0},
      {2, 64, 9, 8, 64, 1, true, false, 0, 0},     {1, 48, 6, 8, 16, 0, false, false, 0, 0},
      {3, 64, 8, 4, 16, 1, false, true, 0, 0},     {2, 80, 10, 4, 16, 2, true, true, 0, 0},
      {1, 512, 300, 4, 32, 1, false, false, 0, 0}, /* two column tiles, M == 1 */
      {4, 512, 130, 4, 64, 0, true, false, 0, 0},  /* two column tiles, sgemm */
      {2, 100, 11, 4, 32, 1, false, false, 4, 0},  /* int8 A: close, not exact */
      {3, 64, 5, 8, 32, 1, true, false, 4, 0},
      {7, 64, 9, 4, 16, 2, false, false, 0, 0},    /* 4-row groups, then single rows */
      {6, 128, 5, 8, 32, 1, true, false, 0, 0},
      {40, 96, 20, 4, 32, 1, true, false, 0, 0},   /* past 32 rows: tiles and sgemm */
      {40, 64, 12, 4, 16, 0, false, true, 0, 0},   /* g_idx with many rows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const nb_case *c = &cases[i];
    nb_fill(c, &d);
    nb_ref(c, &d, d.ref);
    int64_t ny = 0;
    CHECK_OK(nb_run(c, &d, &ny));
    CHECK(ny == c->M * c->N);
    double err = max_rel(d.y, d.ref, c->M * c->N);
    if (!(err < (c->acc ? 2e-2 : 1e-5)))
      fprintf(stderr, "MatMulNBits case %zu: max error %g\n", i, err);
    CHECK(err < (c->acc ? 2e-2 : 1e-5));
  }
}

/* float16 A, scales and bias: the float reference within float16's
 * precision (the product runs in float and rounds once). */
static void check_nbits_half(void) {
  static nb_data d;
  nb_case c = {3, 64, 8, 4, 32, 1, true, false, 0, 0};
  nb_fill(&c, &d);
  uint16_t ah[3 * 64], sh[8 * 2], bh[8];
  for (int i = 0; i < 3 * 64; i++) ah[i] = keel_f32_to_f16(d.a[i]), d.a[i] = keel_f16_to_f32(ah[i]);
  for (int i = 0; i < 16; i++)
    sh[i] = keel_f32_to_f16(d.scales[i]), d.scales[i] = keel_f16_to_f32(sh[i]);
  for (int i = 0; i < 8; i++) bh[i] = keel_f32_to_f16(d.bias[i]), d.bias[i] = keel_f16_to_f32(bh[i]);
  nb_ref(&c, &d, d.ref);
  tin ins[6] = {T("A", KEEL_FLOAT16, 2, (int64_t[]){3, 64}, ah),
                T("B", KEEL_UINT8, 3, (int64_t[]){8, 2, 16}, d.b),
                T("scales", KEEL_FLOAT16, 1, (int64_t[]){16}, sh),
                T("zero_points", KEEL_UINT8, 1, (int64_t[]){8}, d.zp8),
                T("g_idx", KEEL_INT32, 1, (int64_t[]){64}, NULL),
                T("bias", KEEL_FLOAT16, 1, (int64_t[]){8}, bh)};
  int64_t ny;
  CHECK_OK(run1("MatMulNBits", MS, ins, 6, nb_attrs, &c, d.y, 64, &ny));
  CHECK(ny == 24 && max_rel(d.y, d.ref, 24) < 2e-3);
  ins[2] = T("scales", KEEL_FLOAT, 1, (int64_t[]){16}, d.scales); /* not A's type */
  CHECK_STATUS(run1("MatMulNBits", MS, ins, 6, nb_attrs, &c, d.y, 64, &ny), KEEL_ERR_SHAPE);
}

/* Bad MatMulNBits input: every one a clear error, never a crash. */
static void check_nbits_errors(void) {
  static nb_data d;
  nb_case c = {2, 64, 8, 4, 32, 1, false, false, 0, 0};
  nb_fill(&c, &d);
  int64_t ny;
  c.bsz_attr = 24; /* not a power of 2 */
  CHECK_STATUS(nb_run(&c, &d, &ny), KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), "block_size 24") != NULL);
  c.bsz_attr = 8; /* below 16 */
  CHECK_STATUS(nb_run(&c, &d, &ny), KEEL_ERR_INVALID_MODEL);
  c.bsz_attr = 16; /* B holds 32-blocks: its size no longer fits */
  CHECK_STATUS(nb_run(&c, &d, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "scales is float32 [16], expected float32 with 32") != NULL);
  c.bsz_attr = 0;
  c.bits = 3;
  CHECK_STATUS(nb_run(&c, &d, &ny), KEEL_ERR_UNSUPPORTED);
  c.bits = 4;
  /* zero points of the wrong type (int8) */
  int nb = 2;
  tin ins[4] = {
      T("A", KEEL_FLOAT, 2, (int64_t[]){2, 64}, d.a),
      T("B", KEEL_UINT8, 3, (int64_t[]){8, nb, 16}, d.b),
      T("scales", KEEL_FLOAT, 1, (int64_t[]){8 * nb}, d.scales),
      T("zero_points", KEEL_INT8, 1, (int64_t[]){8}, d.zp8),
  };
  CHECK_STATUS(run1("MatMulNBits", MS, ins, 4, nb_attrs, &c, d.y, 64, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "zero_points is int8") != NULL);
  /* A whose last dim is not K */
  ins[0] = T("A", KEEL_FLOAT, 2, (int64_t[]){4, 32}, d.a);
  CHECK_STATUS(run1("MatMulNBits", MS, ins, 3, nb_attrs, &c, d.y, 64, &ny), KEEL_ERR_SHAPE);
  /* g_idx naming a block that does not exist */
  int32_t g[64];
  for (int i = 0; i < 64; i++) g[i] = i == 5 ? 7 : i / 32;
  tin gi[5] = {T("A", KEEL_FLOAT, 2, (int64_t[]){2, 64}, d.a), ins[1], ins[2],
               T("zero_points", KEEL_UINT8, 1, (int64_t[]){8}, NULL),
               T("g_idx", KEEL_INT32, 1, (int64_t[]){64}, g)};
  CHECK_STATUS(run1("MatMulNBits", MS, gi, 5, nb_attrs, &c, d.y, 64, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "g_idx[5]") != NULL);
}

/* ========================================================= FusedMatMul */

typedef struct fmm_case {
  int ta, tb, tba, tbb;
  float alpha;
} fmm_case;

static void fmm_attrs(mb_node *n, const void *arg) {
  const fmm_case *c = arg;
  mb_attr_i(n, "transA", c->ta);
  mb_attr_i(n, "transB", c->tb);
  mb_attr_i(n, "transBatchA", c->tba);
  mb_attr_i(n, "transBatchB", c->tbb);
  mb_attr_f(n, "alpha", c->alpha);
}

/* Element (b, i, j) of a 3-D operand stored (d0, d1, d2) after
 * FusedMatMul's view: batch b, row i, column j. */
static float fmm_at(const float *x, const int64_t *d, int tbatch, int trans, int b, int i,
                    int j) {
  int r = trans ? j : i, c = trans ? i : j; /* in the (batch, r, c) order */
  /* tbatch: stored (r, batch, c) */
  return tbatch ? x[(r * d[1] + b) * d[2] + c] : x[(b * d[1] + r) * d[2] + c];
}

static void check_fused_matmul(void) {
  enum { B = 2, M = 3, K = 4, N = 5 };
  float a[B * M * K], b[B * K * N];
  double y[B * M * N], ref[B * M * N];
  for (int i = 0; i < B * M * K; i++) a[i] = frand(-1, 1);
  for (int i = 0; i < B * K * N; i++) b[i] = frand(-1, 1);
  for (int mask = 0; mask < 16; mask++) {
    fmm_case c = {mask & 1, (mask >> 1) & 1, (mask >> 2) & 1, (mask >> 3) & 1, 0.5f + mask};
    /* stored shapes: view (B, M, K) -> tbatch puts B second, trans swaps M, K */
    int64_t da[3], db[3];
    int64_t ra = c.ta ? K : M, ca = c.ta ? M : K, rb = c.tb ? N : K, cb = c.tb ? K : N;
    if (c.tba) da[0] = ra, da[1] = B, da[2] = ca;
    else da[0] = B, da[1] = ra, da[2] = ca;
    if (c.tbb) db[0] = rb, db[1] = B, db[2] = cb;
    else db[0] = B, db[1] = rb, db[2] = cb;
    for (int bb = 0; bb < B; bb++)
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double s = 0;
          for (int kk = 0; kk < K; kk++)
            s += (double)fmm_at(a, da, c.tba, c.ta, bb, i, kk) * fmm_at(b, db, c.tbb, c.tb, bb, kk, j);
          ref[(bb * M + i) * N + j] = c.alpha * s;
        }
    tin ins[2] = {T("A", KEEL_FLOAT, 3, da, a), T("B", KEEL_FLOAT, 3, db, b)};
    int64_t ny = 0;
    CHECK_OK(run1("FusedMatMul", MS, ins, 2, fmm_attrs, &c, y, B * M * N, &ny));
    CHECK(ny == B * M * N);
    CHECK(max_rel(y, ref, B * M * N) < 1e-5);
  }
  /* mismatched inner dims: a clear shape error */
  fmm_case c = {0, 0, 0, 0, 1};
  tin bad[2] = {T("A", KEEL_FLOAT, 2, (int64_t[]){3, 4}, a),
                T("B", KEEL_FLOAT, 2, (int64_t[]){5, 4}, b)};
  int64_t ny;
  CHECK_STATUS(run1("FusedMatMul", MS, bad, 2, fmm_attrs, &c, y, 64, &ny), KEEL_ERR_SHAPE);
}

/* ============================================= GELU family and BiasAdd */

static void alpha_attr(mb_node *n, const void *arg) { mb_attr_f(n, "alpha", *(const float *)arg); }

static void check_gelus(void) {
  enum { R = 3, H = 8, NN = R * H };
  float x[NN], bias[H], skip[NN];
  double y[NN], ref[NN];
  for (int i = 0; i < NN; i++) x[i] = frand(-5, 5), skip[i] = frand(-1, 1);
  for (int i = 0; i < H; i++) bias[i] = frand(-1, 1);
  int64_t dx[2] = {R, H}, db[1] = {H}, ny;
  tin xb[2] = {T("X", KEEL_FLOAT, 2, dx, x), T("bias", KEEL_FLOAT, 1, db, bias)};
  /* Gelu: x * Phi(x) */
  for (int i = 0; i < NN; i++) ref[i] = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
  CHECK_OK(run1("Gelu", MS, xb, 1, NULL, NULL, y, NN, &ny));
  CHECK(max_rel(y, ref, NN) < 1e-5);
  /* BiasGelu: Gelu(x + bias) */
  for (int i = 0; i < NN; i++) {
    double v = x[i] + bias[i % H];
    ref[i] = 0.5 * v * (1 + erf(v / sqrt(2.0)));
  }
  CHECK_OK(run1("BiasGelu", MS, xb, 2, NULL, NULL, y, NN, &ny));
  CHECK(max_rel(y, ref, NN) < 1e-5);
  /* FastGelu with bias: the tanh form */
  for (int i = 0; i < NN; i++) {
    double v = x[i] + bias[i % H];
    ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  CHECK_OK(run1("FastGelu", MS, xb, 2, NULL, NULL, y, NN, &ny));
  CHECK(max_rel(y, ref, NN) < 1e-5);
  /* QuickGelu: x * sigmoid(alpha x) */
  float alpha = 1.25f;
  for (int i = 0; i < NN; i++) ref[i] = x[i] / (1 + exp(-alpha * x[i]));
  CHECK_OK(run1("QuickGelu", MS, xb, 1, alpha_attr, &alpha, y, NN, &ny));
  CHECK(max_rel(y, ref, NN) < 1e-5);
  /* BiasAdd on (1, R, H) */
  int64_t d3[3] = {1, R, H};
  tin ba[3] = {T("X", KEEL_FLOAT, 3, d3, x), T("bias", KEEL_FLOAT, 1, db, bias),
               T("skip", KEEL_FLOAT, 3, d3, skip)};
  for (int i = 0; i < NN; i++) ref[i] = (double)x[i] + bias[i % H] + skip[i];
  CHECK_OK(run1("BiasAdd", MS, ba, 3, NULL, NULL, y, NN, &ny));
  CHECK(max_rel(y, ref, NN) < 1e-6);
  /* float16: the same formulas on the rounded inputs, within float16's precision */
  uint16_t xh[NN], bh[H];
  for (int i = 0; i < NN; i++) xh[i] = keel_f32_to_f16(x[i]);
  for (int i = 0; i < H; i++) bh[i] = keel_f32_to_f16(bias[i]);
  for (int i = 0; i < NN; i++) {
    double v = (double)keel_f16_to_f32(xh[i]) + keel_f16_to_f32(bh[i % H]);
    ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  tin xh2[2] = {T("X", KEEL_FLOAT16, 2, dx, xh), T("bias", KEEL_FLOAT16, 1, db, bh)};
  CHECK_OK(run1("FastGelu", MS, xh2, 2, NULL, NULL, y, NN, &ny));
  CHECK(max_rel(y, ref, NN) < 2e-3);
  xh2[1] = T("bias", KEEL_FLOAT, 1, db, bias); /* a bias of another type */
  CHECK_STATUS(run1("FastGelu", MS, xh2, 2, NULL, NULL, y, NN, &ny), KEEL_ERR_SHAPE);
  /* a bias that is not X's last dimension */
  int64_t bad_b[1] = {H - 1};
  tin bb[2] = {xb[0], T("bias", KEEL_FLOAT, 1, bad_b, bias)};
  CHECK_STATUS(run1("FastGelu", MS, bb, 2, NULL, NULL, y, NN, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "last dimension") != NULL);
}

/* ===================================================== skip norms */

static void eps_attr(mb_node *n, const void *arg) { mb_attr_f(n, "epsilon", *(const float *)arg); }

static void skip_ref(const float *x, const float *skip, int64_t ns, const float *g,
                     const float *be, const float *bias, int rows, int H, bool rms, double eps,
                     double *y, double *sum) {
  for (int r = 0; r < rows; r++) {
    double m = 0, v = 0;
    for (int j = 0; j < H; j++) {
      int i = r * H + j;
      sum[i] = (double)x[i] + skip[i % ns] + (bias ? bias[j] : 0);
      m += sum[i];
    }
    m = rms ? 0 : m / H;
    for (int j = 0; j < H; j++) v += (sum[r * H + j] - m) * (sum[r * H + j] - m);
    double inv = 1 / sqrt(v / H + eps);
    for (int j = 0; j < H; j++)
      y[r * H + j] = (sum[r * H + j] - m) * inv * g[j] + (be && !rms ? be[j] : 0);
  }
}

static void check_skip_norms(void) {
  enum { B = 2, S = 3, H = 16, NN = B * S * H };
  float x[NN], skip[NN], g[H], be[H], bias[H], eps = 1e-5f;
  double y[NN], ref[NN], sum[NN];
  for (int i = 0; i < NN; i++) x[i] = frand(-2, 2), skip[i] = frand(-1, 1);
  for (int i = 0; i < H; i++) g[i] = frand(0.5f, 1.5f), be[i] = frand(-1, 1), bias[i] = frand(-1, 1);
  int64_t d3[3] = {B, S, H}, d2[2] = {S, H}, dh[1] = {H}, ny;
  for (int rms = 0; rms < 2; rms++)
    for (int sk2 = 0; sk2 < 2; sk2++) {
      const char *op = rms ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization";
      tin ins[5] = {T("X", KEEL_FLOAT, 3, d3, x),
                    sk2 ? T("skip", KEEL_FLOAT, 2, d2, skip) : T("skip", KEEL_FLOAT, 3, d3, skip),
                    T("gamma", KEEL_FLOAT, 1, dh, g), T("beta", KEEL_FLOAT, 1, dh, be),
                    T("bias", KEEL_FLOAT, 1, dh, bias)};
      if (rms) ins[3] = ins[4]; /* input, skip, gamma, bias */
      skip_ref(x, skip, sk2 ? S * H : NN, g, be, bias, B * S, H, rms, eps, ref, sum);
      CHECK_OK(run1(op, MS, ins, rms ? 4 : 5, eps_attr, &eps, y, NN, &ny));
      CHECK(ny == NN && max_rel(y, ref, NN) < 1e-5);
    }
  /* float16 input, skip and gamma: the float reference on the rounded values */
  static uint16_t xh[NN], sh[NN], gh[H];
  static float xr[NN], sr[NN], gr[H];
  for (int i = 0; i < NN; i++) {
    xh[i] = keel_f32_to_f16(x[i]), xr[i] = keel_f16_to_f32(xh[i]);
    sh[i] = keel_f32_to_f16(skip[i]), sr[i] = keel_f16_to_f32(sh[i]);
  }
  for (int i = 0; i < H; i++) gh[i] = keel_f32_to_f16(g[i]), gr[i] = keel_f16_to_f32(gh[i]);
  skip_ref(xr, sr, NN, gr, NULL, NULL, B * S, H, false, eps, ref, sum);
  tin hin[3] = {T("X", KEEL_FLOAT16, 3, d3, xh), T("skip", KEEL_FLOAT16, 3, d3, sh),
                T("gamma", KEEL_FLOAT16, 1, dh, gh)};
  CHECK_OK(run1("SkipLayerNormalization", MS, hin, 3, eps_attr, &eps, y, NN, &ny));
  CHECK(ny == NN && max_rel(y, ref, NN) < 2e-3);
  hin[1] = T("skip", KEEL_FLOAT, 3, d3, skip); /* skip of another type */
  CHECK_STATUS(run1("SkipLayerNormalization", MS, hin, 3, eps_attr, &eps, y, NN, &ny),
               KEEL_ERR_SHAPE);
  /* a skip that fits neither the input nor its trailing part */
  int64_t bad[2] = {2, H};
  tin ins[3] = {T("X", KEEL_FLOAT, 3, d3, x), T("skip", KEEL_FLOAT, 2, bad, skip),
                T("gamma", KEEL_FLOAT, 1, dh, g)};
  CHECK_STATUS(run1("SkipLayerNormalization", MS, ins, 3, NULL, NULL, y, NN, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "skip [2,16]") != NULL || strstr(keel_last_error(), "skip") != NULL);
  /* gamma of the wrong length */
  int64_t dg[1] = {H - 2};
  tin ig[3] = {ins[0], T("skip", KEEL_FLOAT, 3, d3, skip), T("gamma", KEEL_FLOAT, 1, dg, g)};
  CHECK_STATUS(run1("SkipLayerNormalization", MS, ig, 3, NULL, NULL, y, NN, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "gamma") != NULL);
}

/* ============================================================= FusedConv */

static void conv_attrs(mb_node *n, const void *arg) {
  mb_attr_s(n, "activation", (const char *)arg);
  mb_attr_floats(n, "activation_params", 2, (const float[]){0.1f, 0.6f});
}

/* 1x1 conv of (1, 2, 2, 2) with 3 filters: y = act(W x + b + z). */
static void check_fused_conv(void) {
  float x[8], w[6], b[3], z[12];
  double y[12], ref[12];
  for (int i = 0; i < 8; i++) x[i] = frand(-1, 1);
  for (int i = 0; i < 6; i++) w[i] = frand(-1, 1);
  for (int i = 0; i < 3; i++) b[i] = frand(-1, 1);
  for (int i = 0; i < 12; i++) z[i] = frand(-1, 1);
  const char *acts[] = {"Relu", "LeakyRelu", "Clip", "HardSigmoid", "Sigmoid", "Tanh"};
  tin ins[4] = {T("X", KEEL_FLOAT, 4, (int64_t[]){1, 2, 2, 2}, x),
                T("W", KEEL_FLOAT, 4, (int64_t[]){3, 2, 1, 1}, w),
                T("B", KEEL_FLOAT, 1, (int64_t[]){3}, b),
                T("Z", KEEL_FLOAT, 4, (int64_t[]){1, 3, 2, 2}, z)};
  for (int a = 0; a < 6; a++) {
    for (int m = 0; m < 3; m++)
      for (int p = 0; p < 4; p++) {
        double v = b[m] + z[m * 4 + p];
        for (int c = 0; c < 2; c++) v += (double)w[m * 2 + c] * x[c * 4 + p];
        switch (a) {
          case 0: v = v > 0 ? v : 0; break;
          case 1: v = v >= 0 ? v : 0.1 * v; break;
          case 2: v = v < 0.1 ? 0.1 : v > 0.6 ? 0.6 : v; break;
          case 3: v = fmax(0, fmin(1, 0.1 * v + 0.6)); break;
          case 4: v = 1 / (1 + exp(-v)); break;
          default: v = tanh(v);
        }
        ref[m * 4 + p] = v;
      }
    int64_t ny;
    CHECK_OK(run1("FusedConv", MS, ins, 4, conv_attrs, acts[a], y, 12, &ny));
    CHECK(ny == 12 && max_rel(y, ref, 12) < 1e-5);
  }
  int64_t ny;
  CHECK_STATUS(run1("FusedConv", MS, ins, 4, conv_attrs, "Swish", y, 12, &ny),
               KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "activation 'Swish'") != NULL);
  ins[3] = T("Z", KEEL_FLOAT, 4, (int64_t[]){1, 3, 1, 4}, z); /* Z not of Y's shape */
  CHECK_STATUS(run1("FusedConv", MS, ins, 4, conv_attrs, "Relu", y, 12, &ny), KEEL_ERR_SHAPE);
}

/* ======================================== integer matmuls to float */

static void check_int_to_float(void) {
  enum { M = 3, K = 7, N = 4 };
  uint8_t a[M * K], azp = 120, bzp[N];
  int8_t b[K * N];
  float as = 0.02f, bs[N], bias[N], af[M * K];
  double y[M * N], ref[M * N];
  for (int i = 0; i < M * K; i++) a[i] = (uint8_t)rnd(256), af[i] = frand(-2, 3);
  for (int i = 0; i < K * N; i++) b[i] = (int8_t)(rnd(256) - 128);
  for (int i = 0; i < N; i++) bs[i] = frand(0.01f, 0.05f), bias[i] = frand(-1, 1), bzp[i] = 3;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int kk = 0; kk < K; kk++) s += (double)(a[m * K + kk] - azp) * b[kk * N + n];
      ref[m * N + n] = s * as * bs[n] + bias[n];
    }
  tin ins[7] = {T("A", KEEL_UINT8, 2, (int64_t[]){M, K}, a),
                T("B", KEEL_INT8, 2, (int64_t[]){K, N}, b),
                T("a_scale", KEEL_FLOAT, 0, NULL, &as),
                T("b_scale", KEEL_FLOAT, 1, (int64_t[]){N}, bs),
                T("a_zero_point", KEEL_UINT8, 0, NULL, &azp),
                T("b_zero_point", KEEL_INT8, 1, (int64_t[]){N}, NULL),
                T("bias", KEEL_FLOAT, 1, (int64_t[]){N}, bias)};
  int64_t ny;
  CHECK_OK(run1("MatMulIntegerToFloat", MS, ins, 7, NULL, NULL, y, M * N, &ny));
  CHECK(ny == M * N && max_rel(y, ref, M * N) < 1e-5);
  /* B's zero point as (1, N): the int32 product path */
  int8_t bzr[N] = {5, -7, 0, 100};
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double sum = 0;
      for (int kk = 0; kk < K; kk++) sum += (double)(a[m * K + kk] - azp) * (b[kk * N + n] - bzr[n]);
      ref[m * N + n] = sum * as * bs[n] + bias[n];
    }
  ins[5] = T("b_zero_point", KEEL_INT8, 2, (int64_t[]){1, N}, bzr);
  CHECK_OK(run1("MatMulIntegerToFloat", MS, ins, 7, NULL, NULL, y, M * N, &ny));
  CHECK(ny == M * N && max_rel(y, ref, M * N) < 1e-5);
  ins[5] = T("b_zero_point", KEEL_INT8, 1, (int64_t[]){N}, bzr); /* (N): the float path */
  CHECK_OK(run1("MatMulIntegerToFloat", MS, ins, 7, NULL, NULL, y, M * N, &ny));
  CHECK(ny == M * N && max_rel(y, ref, M * N) < 1e-5);
  /* a b_zero_point of A's type, not B's */
  ins[5] = T("b_zero_point", KEEL_UINT8, 1, (int64_t[]){N}, bzp);
  CHECK_STATUS(run1("MatMulIntegerToFloat", MS, ins, 7, NULL, NULL, y, M * N, &ny), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "b_zero_point is uint8 but B is int8") != NULL);
  /* DynamicQuantizeMatMul: A quantized per tensor to uint8 first */
  float lo = 0, hi = 0;
  for (int i = 0; i < M * K; i++) lo = fminf(lo, af[i]), hi = fmaxf(hi, af[i]);
  float sc = (hi - lo) / 255.0f, zp = rintf(-lo / sc);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int kk = 0; kk < K; kk++) {
        double qv = fmin(255, fmax(0, rintf(af[m * K + kk] / sc) + zp));
        s += (qv - zp) * b[kk * N + n];
      }
      ref[m * N + n] = s * sc * bs[n] + bias[n];
    }
  tin dq[5] = {T("A", KEEL_FLOAT, 2, (int64_t[]){M, K}, af), ins[1], ins[3],
               T("b_zero_point", KEEL_INT8, 1, (int64_t[]){N}, NULL), ins[6]};
  CHECK_OK(run1("DynamicQuantizeMatMul", MS, dq, 5, NULL, NULL, y, M * N, &ny));
  CHECK(ny == M * N && max_rel(y, ref, M * N) < 1e-5);
  /* b_scale of the wrong length */
  dq[2] = T("b_scale", KEEL_FLOAT, 1, (int64_t[]){N - 1}, bs);
  CHECK_STATUS(run1("DynamicQuantizeMatMul", MS, dq, 5, NULL, NULL, y, M * N, &ny), KEEL_ERR_SHAPE);
}

/* ========================================================= QLinear ops */

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Add and Mul of (2, 3, 4) by (4,), uint8 and int8; the reference rounds
 * in double, so a tie may land one step apart. */
static void check_qlinear_binary(void) {
  enum { NN = 24 };
  for (int dt8 = 0; dt8 < 2; dt8++)
    for (int mul = 0; mul < 2; mul++) {
      int dt = dt8 ? KEEL_INT8 : KEEL_UINT8, lo = dt8 ? -128 : 0, hi = dt8 ? 127 : 255;
      uint8_t a[NN], b[4];
      for (int i = 0; i < NN; i++) a[i] = (uint8_t)rnd(256);
      for (int i = 0; i < 4; i++) b[i] = (uint8_t)rnd(256);
      float sa = 0.05f, sb = 0.03f, sc = mul ? 0.9f : 0.07f;
      uint8_t za = (uint8_t)(dt8 ? 253 : 128), zb = 100, zc = (uint8_t)(dt8 ? 1 : 120);
      tin ins[8] = {T("A", dt, 3, (int64_t[]){2, 3, 4}, a), T("As", KEEL_FLOAT, 0, NULL, &sa),
                    T("Az", dt, 0, NULL, &za), T("B", dt, 1, (int64_t[]){4}, b),
                    T("Bs", KEEL_FLOAT, 0, NULL, &sb), T("Bz", dt, 0, NULL, &zb),
                    T("Cs", KEEL_FLOAT, 0, NULL, &sc), T("Cz", dt, 0, NULL, &zc)};
      double y[NN];
      int64_t ny;
      CHECK_OK(run1(mul ? "QLinearMul" : "QLinearAdd", MS, ins, 8, NULL, NULL, y, NN, &ny));
      int far = 0;
      for (int i = 0; i < NN; i++) {
        double va = dt8 ? (int8_t)a[i] - (int8_t)za : a[i] - za;
        double vb = dt8 ? (int8_t)b[i % 4] - (int8_t)zb : b[i % 4] - zb;
        double zcv = dt8 ? (int8_t)zc : zc;
        double r = mul ? va * sa * vb * sb / sc : (va * sa + vb * sb) / sc;
        double want = clampd(nearbyint(r) + zcv, lo, hi);
        if (fabs(y[i] - want) > 1) far++;
      }
      CHECK(ny == NN && far == 0);
      /* a zero point of the other 8-bit type */
      ins[5] = T("Bz", dt8 ? KEEL_UINT8 : KEEL_INT8, 0, NULL, &zb);
      CHECK_STATUS(run1("QLinearAdd", MS, ins, 8, NULL, NULL, y, NN, &ny), KEEL_ERR_SHAPE);
      CHECK(strstr(keel_last_error(), "B zero point is") != NULL);
    }
}

static void check_qlinear_unary(void) {
  enum { C = 3, S = 6 };
  uint8_t x[2 * C * S];
  for (int i = 0; i < 2 * C * S; i++) x[i] = (uint8_t)rnd(256);
  float xs = 0.05f, ys = 1 / 256.0f, ps = 0.02f;
  uint8_t xz = 128, yz = 0, pz = 100;
  double y[64];
  int64_t ny;
  /* QLinearSigmoid: every possible value through the table */
  uint8_t all[256];
  for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
  tin sg[5] = {T("X", KEEL_UINT8, 1, (int64_t[]){256}, all), T("xs", KEEL_FLOAT, 0, NULL, &xs),
               T("xz", KEEL_UINT8, 0, NULL, &xz), T("ys", KEEL_FLOAT, 0, NULL, &ys),
               T("yz", KEEL_UINT8, 0, NULL, &yz)};
  static double ys_out[256];
  CHECK_OK(run1("QLinearSigmoid", MS, sg, 5, NULL, NULL, ys_out, 256, &ny));
  int far = 0;
  for (int i = 0; i < 256; i++) {
    double v = 1 / (1 + exp(-(i - 128) * 0.05));
    if (fabs(ys_out[i] - clampd(nearbyint(v / ys), 0, 255)) > 1) far++;
  }
  CHECK(ny == 256 && far == 0);
  /* QLinearGlobalAveragePool (2, C, 2, 3) */
  tin gp[5] = {T("X", KEEL_UINT8, 4, (int64_t[]){2, C, 2, 3}, x), sg[1], sg[2],
               T("ps", KEEL_FLOAT, 0, NULL, &ps), T("pz", KEEL_UINT8, 0, NULL, &pz)};
  CHECK_OK(run1("QLinearGlobalAveragePool", MS, gp, 5, NULL, NULL, y, 64, &ny));
  far = 0;
  for (int nc = 0; nc < 2 * C; nc++) {
    double s = 0;
    for (int p = 0; p < S; p++) s += (x[nc * S + p] - 128) * 0.05;
    if (fabs(y[nc] - clampd(nearbyint(s / S / ps) + pz, 0, 255)) > 1) far++;
  }
  CHECK(ny == 2 * C && far == 0);
  gp[0] = T("X", KEEL_UINT8, 2, (int64_t[]){2, C * S}, x); /* no spatial dims */
  CHECK_STATUS(run1("QLinearGlobalAveragePool", MS, gp, 5, NULL, NULL, y, 64, &ny), KEEL_ERR_SHAPE);
}

static void axis_attr(mb_node *n, const void *arg) { mb_attr_i(n, "axis", *(const int *)arg); }

/* QLinearConcat of (2, 1, 3) and (2, 2, 3) along 1: the first copied (same
 * parameters as Y), the second requantized. */
static void check_qlinear_concat(void) {
  uint8_t x0[6], x1[12];
  for (int i = 0; i < 6; i++) x0[i] = (uint8_t)rnd(256);
  for (int i = 0; i < 12; i++) x1[i] = (uint8_t)rnd(256);
  float ys = 0.05f, s1 = 0.02f;
  uint8_t yz = 128, z1 = 90;
  tin ins[8] = {T("ys", KEEL_FLOAT, 0, NULL, &ys), T("yz", KEEL_UINT8, 0, NULL, &yz),
                T("x0", KEEL_UINT8, 3, (int64_t[]){2, 1, 3}, x0), T("s0", KEEL_FLOAT, 0, NULL, &ys),
                T("z0", KEEL_UINT8, 0, NULL, &yz), T("x1", KEEL_UINT8, 3, (int64_t[]){2, 2, 3}, x1),
                T("s1", KEEL_FLOAT, 0, NULL, &s1), T("z1", KEEL_UINT8, 0, NULL, &z1)};
  double y[18];
  int64_t ny;
  int axis = 1;
  CHECK_OK(run1("QLinearConcat", MS, ins, 8, axis_attr, &axis, y, 18, &ny));
  int far = 0;
  for (int n = 0; n < 2; n++)
    for (int c = 0; c < 3; c++)
      for (int w = 0; w < 3; w++) {
        double want = c == 0 ? x0[n * 3 + w]
                             : clampd(nearbyint((x1[(n * 2 + c - 1) * 3 + w] - 90) * 0.02 / 0.05) + 128, 0, 255);
        if (fabs(y[(n * 3 + c) * 3 + w] - want) > (c == 0 ? 0 : 1)) far++;
      }
  CHECK(ny == 18 && far == 0);
  axis = 2; /* the inputs differ on dim 1 */
  CHECK_STATUS(run1("QLinearConcat", MS, ins, 8, axis_attr, &axis, y, 18, &ny), KEEL_ERR_SHAPE);
  axis = 1;
  CHECK_STATUS(run1("QLinearConcat", MS, ins, 7, axis_attr, &axis, y, 18, &ny), KEEL_ERR_SHAPE);
}

int main(void) {
  check_nbits();
  check_nbits_half();
  check_nbits_errors();
  check_fused_matmul();
  check_gelus();
  check_skip_norms();
  check_fused_conv();
  check_int_to_float();
  check_qlinear_binary();
  check_qlinear_unary();
  check_qlinear_concat();
  return check_report();
}
