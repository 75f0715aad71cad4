/* test_attention_core.c: the attention core (src/ops/nn/attention/attention.c)
 * that ONNX Attention, the com.microsoft attentions and FusedAttention
 * call. First the core itself, called as a kernel would (a kctx with a
 * heap and a pool of 1 or 3 threads), on random calls against a naive
 * reference in double written here from attention.h's formula: Q/K/V/Y
 * as 4-D or 3-D strides, K as rows or transposed (k_t), K and V shared by
 * the batches (0 strides), GQA (and one query row: the blocks of a
 * group's heads), additive and bool masks (keep or mask, -inf or finite
 * fill) broadcast over batch, head, row and keys, shorter than the keys,
 * causal, windows, offsets, kv_len, softcap, the qk outputs, fully masked
 * rows as zeros or NaN, and every way to run: select.c's, blocks forced
 * with 1 to 80 query rows, panels forced (their plain or AVX2 product
 * where the CPU lacks AVX-512). Then the same attention through two ops
 * that reach the core by different parameters: FusedAttention
 * (ai.keel.internal; K as rows or Kt, a Where mask with a -inf fill or an
 * additive one) and com.microsoft MultiHeadAttention (unidirectional, an
 * attention_bias) agree within 1e-5. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "base/pool.h"
#include "mem/alloc.h"
#include "ops/nn/attention/attention.h"

static uint32_t g_r = 12345;
static int rnd(int n) { return (int)((g_r = g_r * 1664525u + 1013904223u) >> 8) % n; }
static float frand(void) { return (float)rnd(1 << 20) / (float)(1 << 19) - 1.0f; }

/* ======================================================== the core */

/* One call: the logical operands (dense, batch dim kvB for K and V) and
 * how they are laid out for the core. */
typedef struct ccase {
  int64_t B, Hq, Hkv, Sq, Skv, Dk, Dv, kvB;
  float *q, *k, *v;                     /* logical [B|kvB, H, S, D]        */
  float *mq, *mk, *mv, *y, *qk, *mask;  /* as the core reads them          */
  uint8_t *cond;
  int64_t md[4];                        /* mask dims (1: broadcast); md[3]
                                           1 with mask_bcast_keys        */
  int64_t off[2], kvl[2];
  keel_sdpa a;
} ccase;

/* Strides of a [n0, H, S, D] logical operand laid out 4-D or as
 * [n0, S, H*D] (3-D), batch stride 0 when bcast. */
static keel_sdpa_t lay(float *dst, const float *src, int64_t n0, int64_t H, int64_t S, int64_t D,
                       bool three, bool bcast) {
  keel_sdpa_t o = {dst, bcast ? 0 : H * S * D, three ? D : S * D, three ? H * D : D};
  for (int64_t b = 0; b < n0; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < S; s++)
        for (int64_t d = 0; d < D; d++)
          dst[b * H * S * D + h * o.sh + s * o.ss + d] = src[((b * H + h) * S + s) * D + d];
  return o;
}

static float *rand_buf(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

static void make_case(ccase *c) {
  memset(c, 0, sizeof *c);
  keel_sdpa *a = &c->a;
  c->B = 1 + rnd(2), c->Hkv = 1 + rnd(3), c->Hq = c->Hkv * (1 + rnd(3));
  c->Sq = rnd(4) == 0 ? 1 : 1 + rnd(rnd(2) ? 80 : 12);
  c->Skv = 1 + rnd(rnd(3) ? 40 : 160), c->Dk = 1 + rnd(24), c->Dv = 1 + rnd(24);
  c->kvB = c->B > 1 && rnd(3) == 0 ? 1 : c->B;
  c->q = rand_buf(c->B * c->Hq * c->Sq * c->Dk);
  c->k = rand_buf(c->kvB * c->Hkv * c->Skv * c->Dk);
  c->v = rand_buf(c->kvB * c->Hkv * c->Skv * c->Dv);
  c->mq = rand_buf(c->B * c->Hq * c->Sq * c->Dk);
  c->mk = rand_buf(c->kvB * c->Hkv * c->Skv * c->Dk);
  c->mv = rand_buf(c->kvB * c->Hkv * c->Skv * c->Dv);
  c->y = rand_buf(c->B * c->Hq * c->Sq * c->Dv);
  a->B = c->B, a->Hq = c->Hq, a->Hkv = c->Hkv, a->Sq = c->Sq, a->Skv = c->Skv;
  a->Dk = c->Dk, a->Dv = c->Dv;
  a->q = lay(c->mq, c->q, c->B, c->Hq, c->Sq, c->Dk, rnd(2), false);
  bool kb = c->kvB != c->B;
  a->k_t = rnd(2);
  if (a->k_t) { /* [kvB, Hkv, Dk, Skv] */
    a->k = (keel_sdpa_t){c->mk, kb ? 0 : c->Hkv * c->Dk * c->Skv, c->Dk * c->Skv, c->Skv};
    for (int64_t b = 0; b < c->kvB; b++)
      for (int64_t g = 0; g < c->Hkv; g++)
        for (int64_t j = 0; j < c->Skv; j++)
          for (int64_t d = 0; d < c->Dk; d++)
            c->mk[((b * c->Hkv + g) * c->Dk + d) * c->Skv + j] =
                c->k[((b * c->Hkv + g) * c->Skv + j) * c->Dk + d];
  } else {
    a->k = lay(c->mk, c->k, c->kvB, c->Hkv, c->Skv, c->Dk, rnd(2), kb);
  }
  a->v = lay(c->mv, c->v, c->kvB, c->Hkv, c->Skv, c->Dv, rnd(2), kb);
  bool y3 = rnd(2);
  a->y = c->y, a->y_sb = c->Hq * c->Sq * c->Dv;
  a->y_sh = y3 ? c->Dv : c->Sq * c->Dv, a->y_ss = y3 ? c->Hq * c->Dv : c->Dv;
  /* the mask: none, additive, bool */
  int mk = rnd(3);
  if (mk) {
    a->mask_len = rnd(4) ? c->Skv : 1 + rnd((int)c->Skv);
    a->mask_bcast_keys = rnd(5) == 0;
    int64_t want[4] = {c->B, c->Hq, c->Sq, a->mask_bcast_keys ? 1 : a->mask_len}, st[4], acc = 1;
    for (int d = 0; d < 4; d++) c->md[d] = d < 3 && rnd(2) ? 1 : want[d];
    for (int d = 3; d >= 0; d--) st[d] = c->md[d] == 1 ? 0 : acc, acc *= c->md[d];
    a->mask.sb = st[0], a->mask.sh = st[1], a->mask.ss = st[2];
    if (mk == 1) {
      c->mask = rand_buf(acc);
      for (int64_t i = 0; i < acc; i++) c->mask[i] = rnd(6) ? 3 * c->mask[i] : -INFINITY;
      a->mask.p = c->mask;
    } else {
      c->cond = malloc((size_t)acc);
      int dens = 2 + rnd(6);
      for (int64_t i = 0; i < acc; i++) c->cond[i] = rnd(dens) != 0;
      if (c->md[2] > 1 && c->md[3] > 1 && rnd(2)) /* causal as a tensor: true above */
        for (int64_t i = 0; i < acc; i++) c->cond[i] = i % c->md[3] > i / c->md[3] % c->md[2];
      a->cond = c->cond, a->keep = rnd(2);
      static const float fills[] = {-INFINITY, -INFINITY, -1e9f, 0.5f};
      a->fill = fills[rnd(4)];
    }
  }
  a->scale = rnd(2) ? 0.7f : 1.0f / sqrtf((float)c->Dk);
  a->softcap = rnd(4) ? 0.0f : 2.5f;
  a->causal = rnd(3) == 0;
  a->left = rnd(4) ? -1 : rnd(6), a->right = rnd(4) ? -1 : rnd(6);
  if (rnd(3) == 0) {
    for (int b = 0; b < 2; b++) c->off[b] = rnd((int)c->Skv + 1);
    a->offset = c->off;
  }
  if (rnd(3) == 0) {
    for (int b = 0; b < 2; b++) c->kvl[b] = rnd((int)c->Skv + 1);
    a->kv_len = c->kvl;
  }
  a->nan_rows = rnd(2);
  if (rnd(3) == 0) {
    a->qk_mode = rnd(4);
    c->qk = rand_buf(c->B * c->Hq * c->Sq * c->Skv);
    a->qk = c->qk;
  }
  a->path = rnd(3);
  a->block_rows = rnd(2) ? 0 : 1 + rnd(80);
}

static void free_case(ccase *c) {
  free(c->q), free(c->k), free(c->v), free(c->mq), free(c->mk), free(c->mv), free(c->y);
  free(c->qk), free(c->mask), free(c->cond);
}

static bool near(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol * (1 + fabs(want));
}

/* The reference, straight from attention.h, checked against what the
 * core wrote. Returns the number of mismatches. */
static int check_case(const ccase *c) {
  const keel_sdpa *a = &c->a;
  int bad = 0;
  double *s = malloc(sizeof(double) * (size_t)c->Skv), *x = malloc(sizeof(double) * (size_t)c->Skv);
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->Hq; h++)
      for (int64_t i = 0; i < c->Sq; i++) {
        int64_t g = h / (c->Hq / c->Hkv), kb = c->kvB == 1 ? 0 : b;
        int64_t p = i + (a->offset ? a->offset[b] : 0), lo = 0, hi = c->Skv;
        if (a->causal) hi = fmin(hi, p + 1);
        if (a->right >= 0) hi = fmin(hi, p + a->right + 1);
        if (a->left >= 0) lo = fmax(lo, p - a->left);
        if (a->kv_len) hi = fmin(hi, a->kv_len[b]);
        if (c->mask || c->cond) hi = fmin(hi, a->mask_len);
        double mx = -INFINITY;
        for (int64_t j = 0; j < c->Skv; j++) {
          double d = 0;
          for (int64_t e = 0; e < c->Dk; e++)
            d += (double)c->q[((b * c->Hq + h) * c->Sq + i) * c->Dk + e] *
                 c->k[((kb * c->Hkv + g) * c->Skv + j) * c->Dk + e];
          s[j] = d * a->scale;
          if (a->softcap > 0) s[j] = a->softcap * tanh(s[j] / a->softcap);
          x[j] = -INFINITY;
          if (j >= lo && j < hi) {
            int64_t idx[4] = {b, h, i, j}, o = 0;
            for (int t = 0; t < 4; t++) o = o * c->md[t] + (c->md[t] == 1 ? 0 : idx[t]);
            x[j] = s[j];
            if (c->mask) x[j] += c->mask[o];
            if (c->cond) x[j] = (c->cond[o] != 0) == a->keep ? s[j] : a->fill;
          }
          mx = fmax(mx, x[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < c->Skv; j++) sum += mx == -INFINITY ? 0 : exp(x[j] - mx);
        const float *qk = c->qk ? c->qk + ((b * c->Hq + h) * c->Sq + i) * c->Skv : NULL;
        for (int64_t j = 0; qk && j < c->Skv; j++) {
          double want = a->qk_mode == KEEL_SDPA_QK_BIAS    ? x[j]
                        : a->qk_mode == KEEL_SDPA_QK_PROBS ? (mx == -INFINITY ? 0 : exp(x[j] - mx) / sum)
                                                           : s[j];
          if (!near(qk[j], want, 1e-4)) bad++;
        }
        for (int64_t d = 0; d < c->Dv; d++) {
          double o = 0;
          for (int64_t j = 0; j < c->Skv && mx > -INFINITY; j++)
            o += exp(x[j] - mx) / sum * c->v[((kb * c->Hkv + g) * c->Skv + j) * c->Dv + d];
          if (mx == -INFINITY) o = a->nan_rows ? NAN : 0;
          double got = c->y[b * a->y_sb + h * a->y_sh + i * a->y_ss + d];
          if (!near(got, o, 1e-4)) bad++;
        }
      }
  free(s), free(x);
  return bad;
}

static void core_cases(int threads, int n) {
  keel_heap *heap = keel_heap_create(0);
  keel_pool *pool = NULL;
  CHECK_OK(keel_pool_create(threads, 0, &pool));
  for (int t = 0; t < n; t++) {
    ccase c;
    make_case(&c);
    keel_kctx k;
    memset(&k, 0, sizeof k);
    k.heap = heap, k.pool = pool;
    CHECK_OK(keel_sdpa_f32(&k, &c.a));
    for (int i = 0; i < k.n_scratch; i++) keel_heap_free(heap, k.scratch[i]);
    int bad = check_case(&c);
    if (bad)
      fprintf(stderr,
              "case %d (%d threads): %d wrong: B %lld Hq %lld Hkv %lld Sq %lld Skv %lld Dk %lld "
              "Dv %lld kvB %lld k_t %d mask %d cond %d keep %d fill %g bcast_keys %d len %lld "
              "causal %d win %lld/%lld off %d kvl %d softcap %g nan %d qk %d/%d path %d rows %lld\n",
              t, threads, bad, (long long)c.B, (long long)c.Hq, (long long)c.Hkv, (long long)c.Sq,
              (long long)c.Skv, (long long)c.Dk, (long long)c.Dv, (long long)c.kvB, c.a.k_t,
              c.mask != NULL, c.cond != NULL, c.a.keep, c.a.fill, c.a.mask_bcast_keys,
              (long long)c.a.mask_len, c.a.causal, (long long)c.a.left, (long long)c.a.right,
              c.a.offset != NULL, c.a.kv_len != NULL, c.a.softcap, c.a.nan_rows, c.qk != NULL,
              c.a.qk_mode, c.a.path, (long long)c.a.block_rows);
    CHECK(bad == 0);
    free_case(&c);
  }
  keel_pool_destroy(pool);
  keel_heap_release(heap);
}

/* ============================ FusedAttention against MultiHeadAttention */

#define B 2
#define N 3
#define S 70
#define L 150
#define HD 8

static float g_q[B * S * N * HD], g_k[B * L * N * HD], g_v[B * L * N * HD], g_kt[B * N * HD * L];
static float g_bias[B * N * S * L];
static uint8_t g_upper[S * L];

static keel_value_t *run_one(uint8_t *bytes, size_t len, const char *const *names,
                             const int64_t dims[][4], const int *ranks, const int *dts,
                             const void *const *data, int nin, int threads) {
  keel_options o = {.size = sizeof o, .threads = threads};
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, &o, &s));
  free(bytes);
  if (!s) return NULL;
  keel_value_t *in[4] = {0}, *out[1] = {0};
  for (int i = 0; i < nin; i++) in[i] = mb_tensor(s, dts[i], ranks[i], dims[i], data[i]);
  CHECK_OK(keel_run(s, names, in, (size_t)nin, out));
  for (int i = 0; i < nin; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
  return out[0];
}

/* form 0: causal (MHA unidirectional; FusedAttention Where(upper, -inf)),
 * K as rows; form 1: an attention bias (Add), K as Kt. */
static void fused_vs_mha(int form, int threads) {
  float scale = 0.3f;
  /* MultiHeadAttention: query [B, S, N*HD], key/value [B, L, N*HD] */
  mb_graph *g = mb_graph_new("mha");
  mb_input(g, "q", KEEL_FLOAT, 3, (int64_t[]){B, S, N * HD});
  mb_input(g, "k", KEEL_FLOAT, 3, (int64_t[]){B, L, N * HD});
  mb_input(g, "v", KEEL_FLOAT, 3, (int64_t[]){B, L, N * HD});
  if (form == 1) mb_input(g, "bias", KEEL_FLOAT, 4, (int64_t[]){B, N, S, L});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  mb_node *n = mb_add(g, "MultiHeadAttention", form == 1 ? "q,k,v,,,bias" : "q,k,v", "y");
  mb_domain(n, "com.microsoft");
  mb_attr_i(n, "num_heads", N);
  mb_attr_f(n, "scale", scale);
  if (form == 0) mb_attr_i(n, "unidirectional", 1);
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 17, "com.microsoft", 1, &len);
  const char *names[4] = {"q", "k", "v", "bias"};
  const int64_t dims[4][4] = {{B, S, N * HD}, {B, L, N * HD}, {B, L, N * HD}, {B, N, S, L}};
  const int ranks[4] = {3, 3, 3, 4}, dts[4] = {KEEL_FLOAT, KEEL_FLOAT, KEEL_FLOAT, KEEL_FLOAT};
  const void *data[4] = {g_q, g_k, g_v, g_bias};
  keel_value_t *y0 = run_one(bytes, len, names, dims, ranks, dts, data, form == 1 ? 4 : 3, threads);

  /* FusedAttention: Q, V as [B, S, N, HD] (layout bits 1, 4), Y written
   * so too (8); K as rows [B, L, N, HD] (2) or Kt [B, N, HD, L] */
  g = mb_graph_new("fused");
  int64_t qd[4] = {B, S, N, HD}, kd[4] = {B, L, N, HD}, ktd[4] = {B, N, HD, L};
  mb_input(g, "q", KEEL_FLOAT, 4, qd);
  mb_input(g, "k", KEEL_FLOAT, 4, form == 1 ? ktd : kd);
  mb_input(g, "v", KEEL_FLOAT, 4, kd);
  if (form == 1) mb_input(g, "bias", KEEL_FLOAT, 4, (int64_t[]){B, N, S, L});
  else mb_init(g, "upper", KEEL_BOOL, 2, (int64_t[]){S, L}, g_upper);
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  n = mb_add(g, "FusedAttention", form == 1 ? "q,k,v,bias" : "q,k,v,upper", "y");
  mb_domain(n, "ai.keel.internal");
  mb_attr_f(n, "scale", scale);
  mb_attr_s(n, "mask_kind", form == 1 ? "add" : "where");
  if (form == 0) mb_attr_f(n, "fill", -INFINITY);
  mb_attr_i(n, "layout", form == 1 ? 1 | 4 | 8 : 1 | 2 | 4 | 8);
  bytes = mb_model_domains(g, 17, "ai.keel.internal", 1, &len);
  const int64_t fdims[4][4] = {{B, S, N, HD}, {B, L, N, HD}, {B, L, N, HD}, {B, N, S, L}};
  int64_t fd[4][4];
  memcpy(fd, fdims, sizeof fd);
  if (form == 1) memcpy(fd[1], ktd, sizeof ktd);
  const int fr[4] = {4, 4, 4, 4};
  const void *fdata[4] = {g_q, form == 1 ? g_kt : g_k, g_v, g_bias};
  keel_value_t *y1 = run_one(bytes, len, names, (const int64_t(*)[4])fd, fr, dts, fdata,
                             form == 1 ? 4 : 3, threads);
  CHECK(y0 && y1 && keel_value_numel(y0) == B * S * N * HD && keel_value_numel(y1) == B * S * N * HD);
  if (y0 && y1) {
    const float *a = keel_value_data(y0), *b = keel_value_data(y1);
    double worst = 0;
    for (int i = 0; i < B * S * N * HD; i++)
      worst = fmax(worst, fabs((double)a[i] - b[i]) / (1 + fabs((double)a[i])));
    if (!(worst <= 1e-5)) fprintf(stderr, "form %d, %d threads: worst %g\n", form, threads, worst);
    CHECK(worst <= 1e-5);
  }
  keel_value_release(y0);
  keel_value_release(y1);
}

int main(void) {
  core_cases(1, 400);
  core_cases(3, 200);
  for (int i = 0; i < B * S * N * HD; i++) g_q[i] = frand();
  for (int i = 0; i < B * L * N * HD; i++) g_k[i] = frand(), g_v[i] = frand();
  for (int b = 0; b < B; b++) /* Kt [B, N, HD, L] of K [B, L, N, HD] */
    for (int j = 0; j < L; j++)
      for (int h = 0; h < N; h++)
        for (int d = 0; d < HD; d++)
          g_kt[((b * N + h) * HD + d) * L + j] = g_k[((b * L + j) * N + h) * HD + d];
  for (int i = 0; i < B * N * S * L; i++) g_bias[i] = rnd(5) ? frand() : -10000.0f;
  for (int i = 0; i < S; i++) /* MHA's causal rule without a past: key j > i masked */
    for (int j = 0; j < L; j++) g_upper[i * L + j] = j > i;
  for (int threads = 1; threads <= 4; threads *= 4) {
    fused_vs_mha(0, threads);
    fused_vs_mha(1, threads);
  }
  return check_report();
}
