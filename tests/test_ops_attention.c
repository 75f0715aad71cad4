/* test_ops_attention.c: ONNX Attention (opsets 23-25) through real
 * sessions against a naive reference written here: one query row at a
 * time, full index arithmetic, in double. Random cases cover 3-D and 4-D
 * inputs, GQA, heads that are not powers of two, a single query row, kv
 * length != q length, past key/value, causal (with past), sliding
 * windows, bool and float masks of every rank (broadcast, shorter than
 * the keys), nonpad_kv_seqlen, softcap, scale, the four
 * qk_matmul_output modes and float16 inputs; a long case crosses the
 * kernel's blocks of query rows. FlexAttention (ai.onnx.preview) with
 * score_mod/prob_mod sub-graphs against the same reference loop. Bad
 * shapes give errors. */
#include "opcase.h"
#include "ops/common/vmath.h"

/* ================================================ the reference */

typedef struct acase {
  int opset, rank, dt, mask_dt, mask_rank, qk_mode;
  int64_t B, Hq, Hkv, Sq, S, P, Dk, Dv, mask_len;
  int64_t mdims[4];
  bool causal, has_scale, nonpad, want_qk;
  double scale, softcap;
  int64_t left, right;
  tv q, k, v, mask, pk, pv, np;
} acase;

/* Element (b, h, s, d) of a 3-D [B, S, H*D] or 4-D [B, H, S, D] tensor. */
static double at(const tv *t, int rank, int64_t H, int64_t S, int64_t D, int64_t b, int64_t h,
                 int64_t s, int64_t d) {
  if (rank == 4) return t->v[((b * H + h) * S + s) * D + d];
  return t->v[(b * S + s) * H * D + h * D + d];
}

/* Key or value j (of P + S) of kv head g: past first, then new. */
static double kv_at(const acase *c, const tv *past, const tv *nw, int64_t D, int64_t b,
                    int64_t g, int64_t j, int64_t d) {
  if (j < c->P) return past->v[((b * c->Hkv + g) * c->P + j) * D + d];
  return at(nw, c->rank, c->Hkv, c->S, D, b, g, j - c->P, d);
}

/* The additive bias of (b, h, i, j): mask, causal, window, padding. */
static double bias(const acase *c, int64_t b, int64_t h, int64_t i, int64_t j) {
  double x = 0;
  if (c->mask.v) {
    if (j >= c->mask_len) return -INFINITY;
    int64_t idx[4] = {b, h, i, j}, off = 0;
    for (int d = 4 - c->mask_rank; d < 4; d++)
      off = off * c->mdims[d] + (c->mdims[d] == 1 ? 0 : idx[d]);
    double m = c->mask.v[off];
    x = c->mask_dt == KEEL_BOOL ? (m != 0 ? 0 : -INFINITY) : m;
  }
  int64_t T = c->P + c->S;
  int64_t off = c->P ? c->P : c->nonpad ? (int64_t)c->np.v[b] - c->Sq : 0, p = i + off;
  (void)T;
  if (c->causal && j > p) return -INFINITY;
  if (c->left >= 0 && j < p - c->left) return -INFINITY;
  if (c->right >= 0 && j > p + c->right) return -INFINITY;
  if (c->nonpad && j >= (int64_t)c->np.v[b]) return -INFINITY;
  return x;
}

/* Y, present key/value and qk (modes 0-3) for the case. */
static void ref_attention(const acase *c, tv *y, tv *pk, tv *pv, tv *qk) {
  int64_t T = c->P + c->S, reps = c->Hq / c->Hkv;
  double sc = c->has_scale ? c->scale : 1.0 / sqrt((double)c->Dk);
  double *s = malloc(sizeof(double) * (size_t)(T + 1));
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->Hq; h++)
      for (int64_t i = 0; i < c->Sq; i++) {
        int64_t g = h / reps;
        double mx = -INFINITY, bmx = -INFINITY, sum = 0;
        double *qrow = qk->v + ((b * c->Hq + h) * c->Sq + i) * T;
        for (int64_t j = 0; j < T; j++) {
          double dot = 0;
          for (int64_t d = 0; d < c->Dk; d++)
            dot += at(&c->q, c->rank, c->Hq, c->Sq, c->Dk, b, h, i, d) *
                   kv_at(c, &c->pk, &c->k, c->Dk, b, g, j, d);
          dot *= sc;
          if (c->softcap > 0) dot = c->softcap * tanh(dot / c->softcap);
          double bj = bias(c, b, h, i, j);
          if (c->qk_mode <= 1) qrow[j] = dot;
          s[j] = dot + bj;
          if (c->qk_mode == 2) qrow[j] = s[j];
          bmx = fmax(bmx, bj);
          mx = fmax(mx, s[j]);
        }
        bool dead = bmx == -INFINITY || mx == -INFINITY;
        for (int64_t j = 0; j < T; j++) sum += s[j] = dead ? 0 : exp(s[j] - mx);
        for (int64_t j = 0; j < T; j++) {
          s[j] = dead ? 0 : s[j] / sum;
          if (c->qk_mode == 3) qrow[j] = s[j];
        }
        for (int64_t d = 0; d < c->Dv; d++) {
          double o = 0;
          for (int64_t j = 0; j < T; j++) o += s[j] * kv_at(c, &c->pv, &c->v, c->Dv, b, g, j, d);
          int64_t idx = c->rank == 4 ? ((b * c->Hq + h) * c->Sq + i) * c->Dv + d
                                     : (b * c->Sq + i) * c->Hq * c->Dv + h * c->Dv + d;
          y->v[idx] = o;
        }
      }
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t g = 0; g < c->Hkv; g++)
      for (int64_t j = 0; j < T; j++) {
        for (int64_t d = 0; d < c->Dk; d++)
          pk->v[((b * c->Hkv + g) * T + j) * c->Dk + d] = kv_at(c, &c->pk, &c->k, c->Dk, b, g, j, d);
        for (int64_t d = 0; d < c->Dv; d++)
          pv->v[((b * c->Hkv + g) * T + j) * c->Dv + d] = kv_at(c, &c->pv, &c->v, c->Dv, b, g, j, d);
      }
  free(s);
}

/* ================================================ random cases */

static tv qkv(const char *name, int dt, int rank, int64_t B, int64_t H, int64_t S, int64_t D) {
  int64_t d4[4] = {B, H, S, D}, d3[3] = {B, S, H * D};
  tv t = tv_new(name, dt, rank, rank == 4 ? d4 : d3);
  tv_rand(&t, 1.5);
  return t;
}

static void make_mask(acase *c) {
  int64_t T = c->P + c->S;
  c->mask_rank = 1 + rnd(4);
  c->mask_dt = rnd(3) == 0 ? KEEL_BOOL : rnd(3) == 0 ? KEEL_FLOAT16 : KEEL_FLOAT;
  if (c->mask_dt == KEEL_FLOAT16 && c->dt == KEEL_FLOAT) c->mask_dt = KEEL_FLOAT;
  c->mask_len = rnd(3) == 0 ? 1 + rnd((int)T) : T;
  const int64_t full[4] = {c->B, c->Hq, c->Sq, c->mask_len};
  for (int d = 0; d < 4; d++) c->mdims[d] = d < 3 && rnd(2) ? 1 : full[d];
  c->mask = tv_new("mask", c->mask_dt, c->mask_rank, c->mdims + 4 - c->mask_rank);
  for (int64_t i = 0; i < numel(c->mask_rank, c->mdims + 4 - c->mask_rank); i++)
    c->mask.v[i] = c->mask_dt == KEEL_BOOL ? (rnd(4) != 0)
                   : rnd(6) == 0            ? -INFINITY
                                            : as_dtype(c->mask_dt, frand());
}

static void random_case(acase *c) {
  static const int64_t heads[] = {1, 2, 3, 5};
  memset(c, 0, sizeof *c);
  c->opset = 23 + rnd(3);
  c->rank = 3 + rnd(2);
  c->dt = rnd(4) == 0 ? KEEL_FLOAT16 : rnd(5) == 0 ? KEEL_DOUBLE : KEEL_FLOAT;
  c->B = 1 + rnd(2);
  c->Hkv = heads[rnd(4)];
  c->Hq = c->Hkv * (1 + rnd(3));
  c->Sq = rnd(3) == 0 ? 1 : 1 + rnd(6);
  c->S = 1 + rnd(7);
  c->P = rnd(2) ? 0 : 1 + rnd(5);
  c->Dk = 1 + rnd(9);
  c->Dv = rnd(2) ? c->Dk : 1 + rnd(9);
  c->causal = rnd(2);
  c->has_scale = rnd(3) == 0;
  c->scale = 0.05 + 0.5 * fabs(frand());
  c->softcap = rnd(3) == 0 ? 1.5 : 0;
  c->want_qk = rnd(2);
  c->qk_mode = c->want_qk ? rnd(4) : 0;
  c->left = c->right = -1;
  if (c->opset >= 25 && rnd(2)) c->left = rnd(4), c->right = rnd(2) ? -1 : rnd(3);
  c->q = qkv("Q", c->dt, c->rank, c->B, c->Hq, c->Sq, c->Dk);
  c->k = qkv("K", c->dt, c->rank, c->B, c->Hkv, c->S, c->Dk);
  c->v = qkv("V", c->dt, c->rank, c->B, c->Hkv, c->S, c->Dv);
  if (c->P) {
    c->pk = qkv("past_key", c->dt, 4, c->B, c->Hkv, c->P, c->Dk);
    c->pv = qkv("past_value", c->dt, 4, c->B, c->Hkv, c->P, c->Dv);
  } else if (c->opset >= 24 && rnd(3) == 0) {
    c->nonpad = true;
    c->np = tv_new("nonpad", KEEL_INT64, 1, (int64_t[]){c->B});
    for (int64_t b = 0; b < c->B; b++) c->np.v[b] = rnd((int)c->S + 1);
  }
  if (rnd(2)) make_mask(c);
}

static void free_case(acase *c) {
  tv *t[] = {&c->q, &c->k, &c->v, &c->mask, &c->pk, &c->pv, &c->np};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) tv_free(t[i]);
}

/* Runs a case through keel and checks all four outputs. */
static bool run_case(acase *c) {
  int64_t T = c->P + c->S;
  int64_t y4[4] = {c->B, c->Hq, c->Sq, c->Dv}, y3[3] = {c->B, c->Sq, c->Hq * c->Dv};
  tv want[4] = {
      tv_new("Y", c->dt, c->rank, c->rank == 4 ? y4 : y3),
      tv_new("present_key", c->dt, 4, (int64_t[]){c->B, c->Hkv, T, c->Dk}),
      tv_new("present_value", c->dt, 4, (int64_t[]){c->B, c->Hkv, T, c->Dv}),
      tv_new("qk", c->dt, 4, (int64_t[]){c->B, c->Hq, c->Sq, T}),
  };
  ref_attention(c, &want[0], &want[1], &want[2], &want[3]);
  tv in[7] = {c->q, c->k, c->v, c->mask, c->pk, c->pv, c->np};
  attr at[12];
  int na = 0;
  if (c->rank == 3) {
    at[na++] = (attr){"q_num_heads", 'i', c->Hq, 0, NULL};
    at[na++] = (attr){"kv_num_heads", 'i', c->Hkv, 0, NULL};
  }
  if (c->causal) at[na++] = (attr){"is_causal", 'i', 1, 0, NULL};
  if (c->has_scale) at[na++] = (attr){"scale", 'f', 0, (float)c->scale, NULL};
  if (c->softcap > 0) at[na++] = (attr){"softcap", 'f', 0, (float)c->softcap, NULL};
  if (c->qk_mode) at[na++] = (attr){"qk_matmul_output_mode", 'i', c->qk_mode, 0, NULL};
  if (c->left >= 0) at[na++] = (attr){"left_window_size", 'i', c->left, 0, NULL};
  if (c->right >= 0) at[na++] = (attr){"right_window_size", 'i', c->right, 0, NULL};
  at[na] = (attr){0};
  const char *outs = c->want_qk ? "Y,present_key,present_value,qk" : "Y,present_key,present_value";
  bool ok = oc_check("", "Attention", c->opset, in, c->nonpad ? 7 : 6, outs, at, want,
                     c->want_qk ? 4 : 3, 2e-4);
  if (!ok)
    fprintf(stderr,
            "  case: opset %d rank %d dt %d B %lld Hq %lld Hkv %lld Sq %lld S %lld P %lld Dk %lld "
            "Dv %lld causal %d mask %d(rank %d len %lld) nonpad %d softcap %g qk %d win %lld/%lld\n",
            c->opset, c->rank, c->dt, (long long)c->B, (long long)c->Hq, (long long)c->Hkv,
            (long long)c->Sq, (long long)c->S, (long long)c->P, (long long)c->Dk,
            (long long)c->Dv, c->causal, c->mask.v ? c->mask_dt : -1, c->mask_rank,
            (long long)c->mask_len, c->nonpad, c->softcap, c->qk_mode, (long long)c->left,
            (long long)c->right);
  for (int i = 0; i < 4; i++) tv_free(&want[i]);
  return ok;
}

/* More query rows than one kernel block, causal with a past, GQA. */
static void long_case(void) {
  acase c;
  memset(&c, 0, sizeof c);
  c.opset = 23, c.rank = 4, c.dt = KEEL_FLOAT, c.B = 1, c.Hq = 6, c.Hkv = 2;
  c.Sq = 150, c.S = 150, c.P = 37, c.Dk = 16, c.Dv = 12, c.causal = true;
  c.left = c.right = -1;
  c.want_qk = true, c.qk_mode = 3;
  c.q = qkv("Q", c.dt, 4, c.B, c.Hq, c.Sq, c.Dk);
  c.k = qkv("K", c.dt, 4, c.B, c.Hkv, c.S, c.Dk);
  c.v = qkv("V", c.dt, 4, c.B, c.Hkv, c.S, c.Dv);
  c.pk = qkv("past_key", c.dt, 4, c.B, c.Hkv, c.P, c.Dk);
  c.pv = qkv("past_value", c.dt, 4, c.B, c.Hkv, c.P, c.Dv);
  CHECK(run_case(&c));
  free_case(&c);
}


/* Decoding with more query heads per kv head than one kernel block (the
 * group's heads are the block's rows), 3-D, with a past and a mask. */
static void decode_case(void) {
  acase c;
  memset(&c, 0, sizeof c);
  c.opset = 23, c.rank = 3, c.dt = KEEL_FLOAT, c.B = 2, c.Hq = 70, c.Hkv = 1;
  c.Sq = 1, c.S = 1, c.P = 40, c.Dk = 8, c.Dv = 5, c.causal = true;
  c.left = c.right = -1;
  c.q = qkv("Q", c.dt, 3, c.B, c.Hq, c.Sq, c.Dk);
  c.k = qkv("K", c.dt, 3, c.B, c.Hkv, c.S, c.Dk);
  c.v = qkv("V", c.dt, 3, c.B, c.Hkv, c.S, c.Dv);
  c.pk = qkv("past_key", c.dt, 4, c.B, c.Hkv, c.P, c.Dk);
  c.pv = qkv("past_value", c.dt, 4, c.B, c.Hkv, c.P, c.Dv);
  c.mask_rank = 4, c.mask_dt = KEEL_FLOAT, c.mask_len = 41;
  int64_t md[4] = {c.B, c.Hq, 1, 41};
  memcpy(c.mdims, md, sizeof md);
  c.mask = tv_new("mask", KEEL_FLOAT, 4, md);
  tv_rand(&c.mask, 2);
  CHECK(run_case(&c));
  free_case(&c);
}

/* ================================================ FlexAttention */

/* A one-node modifier graph: y = op(x) (Tanh) or x * x (Mul). */
static mb_graph *mod_graph(const char *op, int dt) {
  mb_graph *g = mb_graph_new("mod");
  mb_input(g, "x", dt, -1, NULL);
  mb_output(g, "y", dt, -1, NULL);
  mb_add(g, op, strcmp(op, "Mul") ? "x" : "x,x", "y");
  return g;
}

/* FlexAttention with score_mod = tanh, prob_mod = p^2 (each optional),
 * GQA, float / double / float16, against the same computed here. */
static void flex_case(void) {
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16};
  int dt = dts[rnd(3)], ct = dt == KEEL_DOUBLE ? KEEL_DOUBLE : KEEL_FLOAT;
  int64_t B = 1 + rnd(2), Hkv = 1 + rnd(3), Hq = Hkv * (1 + rnd(2)), L = 1 + rnd(5),
          S = 1 + rnd(6), E = 1 + rnd(8), Dv = 1 + rnd(8);
  bool smod = rnd(2), pmod = rnd(2), has_scale = rnd(2);
  double scale = has_scale ? 0.4 : 1 / sqrt((double)E);
  tv q = qkv("Q", dt, 4, B, Hq, L, E), k = qkv("K", dt, 4, B, Hkv, S, E),
     v = qkv("V", dt, 4, B, Hkv, S, Dv), y = tv_new("Y", dt, 4, (int64_t[]){B, Hq, L, Dv});
  double *p = malloc(sizeof(double) * (size_t)S);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < Hq; h++)
      for (int64_t i = 0; i < L; i++) {
        int64_t g = h / (Hq / Hkv);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; j++) {
          double d = 0;
          for (int64_t e = 0; e < E; e++)
            d += q.v[((b * Hq + h) * L + i) * E + e] * k.v[((b * Hkv + g) * S + j) * E + e];
          p[j] = smod ? tanh(d * scale) : d * scale;
          mx = fmax(mx, p[j]);
        }
        for (int64_t j = 0; j < S; j++) sum += p[j] = exp(p[j] - mx);
        for (int64_t j = 0; j < S; j++) p[j] = pmod ? (p[j] / sum) * (p[j] / sum) : p[j] / sum;
        for (int64_t d = 0; d < Dv; d++) {
          double o = 0;
          for (int64_t j = 0; j < S; j++) o += p[j] * v.v[((b * Hkv + g) * S + j) * Dv + d];
          y.v[((b * Hq + h) * L + i) * Dv + d] = o;
        }
      }
  free(p);
  mb_graph *g = mb_graph_new("main");
  tv in[3] = {q, k, v};
  for (int i = 0; i < 3; i++) mb_input(g, in[i].name, dt, 4, in[i].dims);
  mb_output(g, "Y", dt, -1, NULL);
  mb_node *n = mb_add(g, "FlexAttention", "Q,K,V", "Y");
  mb_domain(n, "ai.onnx.preview");
  if (has_scale) mb_attr_f(n, "scale", (float)scale);
  if (smod) mb_attr_g(n, "score_mod", mod_graph("Tanh", ct));
  if (pmod) mb_attr_g(n, "prob_mod", mod_graph("Mul", ct));
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 21, "ai.onnx.preview", 1, &len);
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, NULL, &s));
  free(bytes);
  keel_value_t *out[1] = {0};
  if (s) {
    CHECK_OK(oc_run(s, in, 3, out));
    CHECK(same_output(out[0], &y, 2e-4));
  }
  keel_value_release(out[0]);
  keel_session_destroy(s);
  tv_free(&q), tv_free(&k), tv_free(&v), tv_free(&y);
}

/* ================================================ the exp */

/* keel_exp_neg_f32 against exp over [-100, 0], plus -inf and NaN. */
static void exp_check(void) {
  enum { N = 4003 };
  static float x[N], y[N];
  for (int i = 0; i < N - 3; i++) x[i] = -100.0f * (float)i / (float)(N - 4);
  x[N - 3] = -INFINITY, x[N - 2] = NAN, x[N - 1] = -0.0f;
  keel_exp_neg_f32(x, y, N);
  double worst = 0;
  for (int i = 0; i < N - 3; i++) {
    double want = exp((double)x[i]);
    if (want < 1e-37) CHECK(y[i] >= 0 && y[i] < 1e-37);
    else worst = fmax(worst, fabs(y[i] - want) / want);
  }
  CHECK(worst < 4e-7);
  CHECK(y[N - 3] == 0 && isnan(y[N - 2]) && y[N - 1] == 1);
}

/* ================================================ errors */

static void error_cases(void) {
  tv q = qkv("Q", KEEL_FLOAT, 4, 1, 3, 2, 4), k = qkv("K", KEEL_FLOAT, 4, 1, 2, 3, 4),
     v = qkv("V", KEEL_FLOAT, 4, 1, 2, 3, 4);
  tv in[4] = {q, k, v, {0}};
  /* 3 query heads over 2 kv heads */
  oc_fails("", "Attention", 23, in, 3, "Y", NULL, KEEL_ERR_SHAPE);
  tv k2 = qkv("K", KEEL_FLOAT, 4, 1, 3, 3, 5), v2 = qkv("V", KEEL_FLOAT, 4, 1, 3, 3, 4);
  in[1] = k2, in[2] = v2; /* head sizes of Q and K differ */
  oc_fails("", "Attention", 23, in, 3, "Y", NULL, KEEL_ERR_SHAPE);
  tv k3 = qkv("K", KEEL_FLOAT, 4, 1, 3, 3, 4), v3 = qkv("V", KEEL_FLOAT, 4, 1, 3, 3, 4);
  tv m = tv_new("mask", KEEL_FLOAT, 2, (int64_t[]){3, 3}); /* 3 query rows, 2 wanted */
  in[1] = k3, in[2] = v3, in[3] = m;
  oc_fails("", "Attention", 23, in, 4, "Y", NULL, KEEL_ERR_SHAPE);
  tv q3 = qkv("Q", KEEL_FLOAT, 3, 1, 1, 2, 4), k4 = qkv("K", KEEL_FLOAT, 3, 1, 1, 3, 4),
     v4 = qkv("V", KEEL_FLOAT, 3, 1, 1, 3, 4);
  tv in3[3] = {q3, k4, v4}; /* 3-D without the head counts */
  oc_fails("", "Attention", 23, in3, 3, "Y", NULL, KEEL_ERR_INVALID_MODEL);
  tv *all[] = {&q, &k, &v, &k2, &v2, &k3, &v3, &m, &q3, &k4, &v4};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

/* com.microsoft attention ops: bad shapes and unsupported features give
 * errors (their results are checked against ONNX Runtime in
 * tests/contrib). */
static void ms_error_cases(void) {
  tv q = tv_new("q", KEEL_FLOAT, 3, (int64_t[]){1, 2, 8}), k = tv_new("k", KEEL_FLOAT, 3, (int64_t[]){1, 3, 6});
  tv v = tv_new("v", KEEL_FLOAT, 3, (int64_t[]){1, 3, 8});
  tv in[3] = {q, k, v};
  attr n2[] = {{"num_heads", 'i', 2, 0, NULL}, {0}};
  oc_fails("com.microsoft", "MultiHeadAttention", 1, in, 3, "y", n2, KEEL_ERR_SHAPE);
  tv k2 = tv_new("k", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4}), v2 = tv_new("v", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4});
  tv sl = tv_new("seqlens", KEEL_INT32, 1, (int64_t[]){1}), tot = tv_new("total", KEEL_INT32, 0, NULL);
  sl.v[0] = 5, tot.v[0] = 2; /* seqlens_k says 6 tokens, total 2 */
  tv gin[7] = {q, k2, v2, {0}, {0}, sl, tot};
  attr g[] = {{"num_heads", 'i', 2, 0, NULL}, {"kv_num_heads", 'i', 1, 0, NULL}, {0}};
  oc_fails("com.microsoft", "GroupQueryAttention", 1, gin, 7, "y,pk,pv", g, KEEL_ERR_SHAPE);
  attr sm[] = {{"num_heads", 'i', 2, 0, NULL}, {"kv_num_heads", 'i', 1, 0, NULL},
               {"smooth_softmax", 'i', 1, 0, NULL}, {0}};
  sl.v[0] = 1;
  tv gin2[7] = {q, k2, v2, {0}, {0}, sl, tot};
  oc_fails("com.microsoft", "GroupQueryAttention", 1, gin2, 7, "y,pk,pv", sm, KEEL_ERR_UNSUPPORTED);
  tv x = tv_new("x", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4}), w = tv_new("w", KEEL_FLOAT, 2, (int64_t[]){4, 10});
  tv ain[2] = {x, w}; /* 10 columns do not split into Q, K, V */
  oc_fails("com.microsoft", "Attention", 1, ain, 2, "y", n2, KEEL_ERR_SHAPE);
  tv *all[] = {&q, &k, &v, &k2, &v2, &sl, &tot, &x, &w};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

int main(void) {
  int failed = 0;
  for (int i = 0; i < 400; i++) {
    acase c;
    random_case(&c);
    if (!run_case(&c)) failed++;
    free_case(&c);
  }
  CHECK(failed == 0);
  exp_check();
  long_case();
  decode_case();
  for (int i = 0; i < 100; i++) flex_case();
  error_cases();
  ms_error_cases();
  return check_report();
}
