/* attention.c: the scaled-dot-product attention core (attention.h).
 *
 * The core walks (batch, query head, block of query rows); when decoding
 * (one query row) a block is instead the heads of one GQA group, which
 * share their K and V. A block's scores are one sgemm over the union of its rows' allowed keys (causal
 * rows near the top of a block skip the keys no row of it may see), the
 * softmax is a pass over each row, and the output rows are a second sgemm
 * of the probabilities with the same keys of V. Scratch is one block of
 * QB x Skv floats, whatever the sequence lengths.
 */
#include <math.h>

#include "ops/nn/attention/attention.h"
#include "ops/common/conv_util.h"

/* ========================================================= softmax */

/* ===================================================== the core */

#define QB 64 /* query rows per block */

/* The allowed keys [*lo, *hi) of query row i of batch b; empty as 0, 0. */
static void row_range(const keel_sdpa *a, int64_t b, int64_t i, int64_t *lo, int64_t *hi) {
  int64_t p = i + (a->offset ? a->offset[b] : 0);
  int64_t l = 0, h = a->Skv;
  if (a->causal && p + 1 < h) h = p + 1;
  if (a->right >= 0 && p + a->right + 1 < h) h = p + a->right + 1;
  if (a->left >= 0 && p - a->left > l) l = p - a->left;
  if (a->kv_len && a->kv_len[b] < h) h = a->kv_len[b];
  if (a->mask.p && a->mask_len < h) h = a->mask_len;
  if (h <= l) l = h = 0;
  *lo = l, *hi = h;
}

static void fill(float *p, int64_t n, float v) {
  for (int64_t j = 0; j < n; j++) p[j] = v;
}

/* Max and sum of x[0, n) in 8 lanes (the compilers vectorize explicit
 * lanes; a single accumulator would serialize on its latency). The max
 * skips NaN, which then reaches the row through exp(NaN) anyway. */
#define LANES 8
static float lanes_max(const float *x, int64_t n) {
  float m[LANES];
  for (int u = 0; u < LANES; u++) m[u] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int u = 0; u < LANES; u++) m[u] = x[j + u] > m[u] ? x[j + u] : m[u];
  for (; j < n; j++) m[0] = x[j] > m[0] ? x[j] : m[0];
  for (int u = 1; u < LANES; u++) m[0] = m[u] > m[0] ? m[u] : m[0];
  return m[0];
}

static float lanes_sum(const float *x, int64_t n) {
  float t[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int u = 0; u < LANES; u++) t[u] += x[j + u];
  for (; j < n; j++) t[0] += x[j];
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

/* One row's softmax in place over s[l, h) (s holds columns c0.., n of
 * them); mrow is the mask row at column c0 or NULL. Columns outside
 * [l, h) become 0. Returns false when the row is fully masked (then the
 * row is all zeros). x holds the biased scores for KEEL_SDPA_QK_BIAS. */
static bool row_softmax(float *s, int64_t n, int64_t l, int64_t h, const float *mrow) {
  float xmax = -INFINITY, bmax = mrow ? -INFINITY : 0.0f;
  if (mrow) {
    for (int64_t j = l; j < h; j++) {
      s[j] += mrow[j];
      bmax = mrow[j] > bmax ? mrow[j] : bmax;
    }
  }
  xmax = lanes_max(s + l, h - l);
  fill(s, l, 0);
  fill(s + h, n - h, 0);
  if (h <= l || bmax == -INFINITY || xmax == -INFINITY) {
    fill(s + l, h - l, 0);
    return false;
  }
  for (int64_t j = l; j < h; j++) s[j] -= xmax;
  keel_exp_neg_f32(s + l, s + l, h - l);
  float inv = 1.0f / lanes_sum(s + l, h - l);
  for (int64_t j = l; j < h; j++) s[j] *= inv;
  return true;
}

/* Copies the biased scores of one row into the qk output: -inf outside
 * [lo, hi), s + mask inside (computed here: row_softmax has not run). */
static void qk_bias_row(float *dst, int64_t Skv, int64_t c0, const float *s, int64_t lo,
                        int64_t hi, const float *mrow) {
  fill(dst, lo, -INFINITY);
  fill(dst + hi, Skv - hi, -INFINITY);
  for (int64_t j = lo; j < hi; j++) dst[j] = s[j - c0] + (mrow ? mrow[j] : 0.0f);
}

/* A block of m query rows of batch b sharing one kv head: row r is query
 * i0 + r*di of head h0 + r*dh. (dh, di) = (0, 1) walks the queries of one
 * head; (1, 0) walks a GQA group's heads at one query (decoding, where a
 * block per head would be a one-row product). */
typedef struct blk {
  int64_t b, h0, i0, m, dh, di;
} blk;

/* Leading dimension of a block's rows in an operand with strides sh, ss. */
static int64_t blk_ld(const blk *k, int64_t sh, int64_t ss) { return k->dh ? sh : ss; }

static void sdpa_rows(const keel_sdpa *a, const blk *k, const int64_t *lo, const int64_t *hi,
                      int64_t c0, int64_t c1, bool raw, float *S) {
  int64_t n = c1 - c0;
  for (int64_t r = 0; r < k->m; r++) {
    float *s = S + r * n;
    int64_t h = k->h0 + r * k->dh, i = k->i0 + r * k->di;
    float *qk = a->qk ? a->qk + ((k->b * a->Hq + h) * a->Sq + i) * a->Skv : NULL;
    const float *mrow =
        a->mask.p ? a->mask.p + k->b * a->mask.sb + h * a->mask.sh + i * a->mask.ss : NULL;
    if (a->softcap > 0) {
      float c = a->softcap, ic = 1.0f / a->softcap;
      for (int64_t j = 0; j < n; j++) s[j] = c * tanhf(s[j] * ic);
    }
    if (raw && n) memcpy(qk, s, (size_t)n * sizeof(float));
    if (qk && a->qk_mode == KEEL_SDPA_QK_BIAS) qk_bias_row(qk, a->Skv, c0, s, lo[r], hi[r], mrow);
    int64_t l = hi[r] > lo[r] ? lo[r] - c0 : 0, e = hi[r] > lo[r] ? hi[r] - c0 : 0;
    row_softmax(s, n, l, e, mrow ? mrow + c0 : NULL);
    if (qk && a->qk_mode == KEEL_SDPA_QK_PROBS) {
      fill(qk, c0, 0);
      if (n) memcpy(qk + c0, s, (size_t)n * sizeof(float));
      fill(qk + c1, a->Skv - c1, 0);
    }
  }
}

/* Scores, softmax and output of one block: the keys are the union of its
 * rows' allowed ranges (all of them when raw scores are wanted). */
static void sdpa_block(const keel_sdpa *a, const blk *k, float *S) {
  int64_t g = k->h0 / (a->Hq / a->Hkv), b = k->b;
  int64_t lo[QB], hi[QB], c0 = a->Skv, c1 = 0;
  for (int64_t r = 0; r < k->m; r++) {
    row_range(a, b, k->i0 + r * k->di, &lo[r], &hi[r]);
    if (hi[r] > lo[r]) {
      c0 = lo[r] < c0 ? lo[r] : c0;
      c1 = hi[r] > c1 ? hi[r] : c1;
    }
  }
  bool raw = a->qk && a->qk_mode <= KEEL_SDPA_QK_SOFTCAP;
  if (raw) c0 = 0, c1 = a->Skv;
  if (c1 < c0) c0 = c1 = 0;
  int64_t n = c1 - c0;
  const float *q = a->q.p + b * a->q.sb + k->h0 * a->q.sh + k->i0 * a->q.ss;
  const float *kp = a->k.p + b * a->k.sb + g * a->k.sh + c0 * a->k.ss;
  const float *vp = a->v.p + b * a->v.sb + g * a->v.sh + c0 * a->v.ss;
  float *y = a->y + b * a->y_sb + k->h0 * a->y_sh + k->i0 * a->y_ss;
  keel_gemm_f32(NULL, false, true, k->m, n, a->Dk, a->scale, q, blk_ld(k, a->q.sh, a->q.ss), kp,
                a->k.ss, 0, S, n);
  sdpa_rows(a, k, lo, hi, c0, c1, raw, S);
  keel_gemm_f32(NULL, false, false, k->m, a->Dv, n, 1.0f, S, n > 0 ? n : 1, vp, a->v.ss, 0, y,
                blk_ld(k, a->y_sh, a->y_ss));
}

keel_status keel_sdpa_f32(keel_kctx *k, const keel_sdpa *a) {
  if (a->Hkv <= 0 || a->Hq % a->Hkv != 0)
    return keel_err(KEEL_ERR_SHAPE, "%lld query heads are not a multiple of %lld kv heads",
                    (long long)a->Hq, (long long)a->Hkv);
  int64_t big = a->Skv;
  const int64_t ld[] = {a->q.ss, a->q.sh, a->k.ss, a->v.ss, a->y_ss, a->y_sh, a->Dk, a->Dv};
  for (size_t i = 0; i < sizeof ld / sizeof ld[0]; i++) big = ld[i] > big ? ld[i] : big;
  KEEL_TRY(keel_blas_fits(big));
  if (a->B == 0 || a->Hq == 0 || a->Sq == 0 || a->Dv == 0) return KEEL_OK;
  if (a->Skv == 0 || a->Dk == 0) /* empty operands have NULL data */
    return keel_err(KEEL_ERR_UNSUPPORTED, "attention over %lld keys of head size %lld",
                    (long long)a->Skv, (long long)a->Dk);
  int64_t reps = a->Hq / a->Hkv;
  /* one query row and a group of heads: the group's rows form a block */
  bool by_head = a->Sq == 1 && reps > 1;
  int64_t run = by_head ? reps : a->Sq, rows = run < QB ? run : QB;
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, rows * (a->Skv > 0 ? a->Skv : 1), sizeof(float), &p));
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->Hq; h += by_head ? reps : 1)
      for (int64_t r0 = 0; r0 < run; r0 += QB) {
        int64_t m = run - r0 < QB ? run - r0 : QB;
        blk bk = by_head ? (blk){b, h + r0, 0, m, 1, 0} : (blk){b, h, r0, m, 0, 1};
        sdpa_block(a, &bk, p);
      }
  return KEEL_OK;
}
