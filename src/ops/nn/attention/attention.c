/* attention.c: the scaled-dot-product attention core (attention.h).
 *
 * Its stages, each written once: the score product and the value product
 * (OpenBLAS, float or double; on packed panels, float), a row's keys (the
 * intervals, cut by a -inf bool mask), a row's softcap, mask and softmax
 * (keel_vm_softmax_row; a double row for FlexAttention), the blocks that
 * chain them, and the tasks that run the blocks on the pool: blocks of
 * query rows, or whole heads on K and V packed once. The stages over
 * whole heads (keel_sdpa_scores, _softmax, _values) are the same products
 * and softmax for FlexAttention.
 *
 * Compiled with -fno-trapping-math (CMakeLists.txt): the mask loops are
 * selects that the compilers vectorize only without trapping math.
 */
#include <math.h>

#include "ops/nn/attention/attention.h"
#include "base/pool.h"
#include "ops/common/conv_util.h"
#include "ops/common/panel_gemm.h"
#include "ops/common/vmath.h"
#include "ops/nn/attention/select.h"

#define QB_MAX KEEL_ATTN_QB_MAX /* query rows per block, at most */
#define NP KEEL_PANEL_NP

/* ===================================================== the products */

/* S (m x n, lds) = alpha * Q (m x dk, ldq) K^T, K as n rows of dk (ldk),
 * or with k_t given transposed, dk rows of n keys; in ct (float or
 * double). */
static void qk_product(int ct, int64_t m, int64_t n, int64_t dk, double alpha, const void *q,
                       int64_t ldq, const void *k, int64_t ldk, bool k_t, void *s, int64_t lds) {
  if (ct == KEEL_FLOAT)
    keel_gemm_f32(NULL, false, !k_t, m, n, dk, (float)alpha, q, ldq, k, ldk, 0, s, lds);
  else
    keel_gemm_f64(NULL, false, !k_t, m, n, dk, alpha, q, ldq, k, ldk, 0, s, lds);
}

/* Y (m x dv, ldy) = P (m x n, ldp) V (n rows of dv, ldv). */
static void pv_product(int ct, int64_t m, int64_t dv, int64_t n, const void *p, int64_t ldp,
                       const void *v, int64_t ldv, void *y, int64_t ldy) {
  if (ct == KEEL_FLOAT)
    keel_gemm_f32(NULL, false, false, m, dv, n, 1.0f, p, ldp, v, ldv, 0, y, ldy);
  else
    keel_gemm_f64(NULL, false, false, m, dv, n, 1.0, p, ldp, v, ldv, 0, y, ldy);
}

/* ====================================================== softmax rows */

/* keel_vm_softmax_row in double: false, s untouched, when every score is
 * -inf; a NaN score makes the row NaN. */
static bool softmax_row_f64(double *s, int64_t n) {
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  if (mx == -INFINITY) return false;
  for (int64_t j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
  for (int64_t j = 0; j < n; j++) s[j] /= sum;
  return true;
}

static void fill(float *p, int64_t n, float v) {
  for (int64_t j = 0; j < n; j++) p[j] = v;
}

/* ===================================================== a row's keys */

/* A run of the core: the call, how its tasks are cut, and a shared bool
 * mask's kept keys read once. */
typedef struct job {
  const keel_sdpa *a;
  int64_t reps;                 /* query heads per kv head                 */
  bool by_head;                 /* a block is a GQA group's heads at one query */
  bool panels;                  /* tasks of whole heads on packed K and V  */
  bool cut;                     /* a bool mask with a -inf fill: rows keep
                                   their first to last kept key            */
  bool same;                    /* every row of a block keeps the same keys */
  int64_t qb, run, nblk;        /* rows per block; rows of a (b, head or
                                   group) and its blocks                   */
  int64_t qparts;               /* panels: tasks per head (its query blocks
                                   in that many runs, each packing K and V)
                                   when the heads alone split unevenly     */
  /* with a cut and a mask shared by every batch and head (a causal one):
   * each query row's kept keys [rk[2i], rk[2i+1]), and whether they are
   * all kept (then the row needs no per-key masking) */
  const int64_t *rk;
  const uint8_t *rk_whole;
  float *scratch;               /* per worker: qb * Skv scores (then, with
                                   panels, K's and V's panels)             */
  size_t per_worker;
} job;

/* The element offset of (b, h, i)'s row in the mask. */
static int64_t mask_off(const keel_sdpa *a, int64_t b, int64_t h, int64_t i) {
  return b * a->mask.sb + h * a->mask.sh + i * a->mask.ss;
}

static bool kept(const keel_sdpa *a, const uint8_t *c, int64_t j) {
  return (c[a->mask_bcast_keys ? 0 : j] != 0) == a->keep;
}

/* Narrows [*lo, *hi) to its first and last key that cond row c keeps
 * (empty: 0, 0). */
static void kept_keys(const keel_sdpa *a, const uint8_t *c, int64_t *lo, int64_t *hi) {
  int64_t l = *lo, h = *hi;
  while (l < h && !kept(a, c, l)) l++;
  while (h > l && !kept(a, c, h - 1)) h--;
  if (h <= l) l = h = 0;
  *lo = l, *hi = h;
}

/* The keys [*lo, *hi) of query row i of head h, batch b (empty: 0, 0):
 * the intervals of attention.h, cut to the kept keys of a -inf mask.
 * Returns true when no key in them needs masking. */
static bool row_keys(const job *j, int64_t b, int64_t h, int64_t i, int64_t *lo, int64_t *hi) {
  const keel_sdpa *a = j->a;
  int64_t p = i + (a->offset ? a->offset[b] : 0);
  int64_t l = 0, e = a->Skv;
  bool whole = !a->mask.p && !a->cond;
  if (a->causal && p + 1 < e) e = p + 1;
  if (a->right >= 0 && p + a->right + 1 < e) e = p + a->right + 1;
  if (a->left >= 0 && p - a->left > l) l = p - a->left;
  if (a->kv_len && a->kv_len[b] < e) e = a->kv_len[b];
  if (!whole && a->mask_len < e) e = a->mask_len;
  if (j->cut && e > l) {
    if (j->rk) {
      l = j->rk[2 * i] > l ? j->rk[2 * i] : l;
      e = j->rk[2 * i + 1] < e ? j->rk[2 * i + 1] : e;
      whole = j->rk_whole[i];
    } else {
      kept_keys(a, a->cond + mask_off(a, b, h, i), &l, &e);
    }
  }
  if (e <= l) l = e = 0;
  *lo = l, *hi = e;
  return whole;
}

/* A -inf bool mask shared by every batch and head: each query row's kept
 * keys and whether every key between them is kept, read once per call
 * instead of once per head. */
static keel_status shared_keys(keel_kctx *k, job *j) {
  const keel_sdpa *a = j->a;
  void *rk, *whole;
  KEEL_TRY(keel_k_scratch_n(k, 2 * a->Sq, sizeof(int64_t), &rk));
  KEEL_TRY(keel_k_scratch_n(k, a->Sq, 1, &whole));
  for (int64_t i = 0; i < a->Sq; i++) {
    int64_t *r = (int64_t *)rk + 2 * i, x;
    const uint8_t *c = a->cond + mask_off(a, 0, 0, i);
    r[0] = 0, r[1] = a->Skv < a->mask_len ? a->Skv : a->mask_len;
    kept_keys(a, c, &r[0], &r[1]);
    for (x = r[0]; x < r[1] && kept(a, c, x);) x++;
    ((uint8_t *)whole)[i] = x == r[1];
  }
  j->rk = rk, j->rk_whole = whole;
  return KEEL_OK;
}

/* ===================================================== a row's softmax */

/* The mask on keys [c0 + l, c0 + e) of the row at element off of the
 * mask; s holds the row's scores from key c0. */
static void row_mask(const keel_sdpa *a, int64_t off, float *s, int64_t c0, int64_t l,
                     int64_t e) {
  if (a->mask.p) {
    const float *m = a->mask.p + off;
    if (a->mask_bcast_keys) {
      float v = m[0];
      for (int64_t x = l; x < e; x++) s[x] += v;
    } else {
      m += c0;
      for (int64_t x = l; x < e; x++) s[x] += m[x];
    }
    return;
  }
  if (!a->cond) return;
  const uint8_t *c = a->cond + off;
  float f = a->fill;
  if (a->mask_bcast_keys) {
    if (!kept(a, c, 0)) fill(s + l, e - l, f);
    return;
  }
  c += c0;
  if (a->keep)
    for (int64_t x = l; x < e; x++) s[x] = c[x] ? s[x] : f;
  else
    for (int64_t x = l; x < e; x++) s[x] = c[x] ? f : s[x];
}

/* Query row i of head h, batch b: s holds its scores of keys [c0, c0 + n),
 * which hold its keys [lo, hi) (or these are empty). Softcap, the score
 * output, the mask and the softmax in place; the other columns become 0.
 * Returns false when the row is fully masked (then it is all zeros). */
static bool sdpa_row(const job *j, int64_t b, int64_t h, int64_t i, float *s, int64_t c0,
                     int64_t n, int64_t lo, int64_t hi, bool whole) {
  const keel_sdpa *a = j->a;
  float *qk = a->qk ? a->qk + ((b * a->Hq + h) * a->Sq + i) * a->Skv : NULL;
  if (a->softcap > 0) {
    float c = a->softcap, ic = 1.0f / a->softcap;
    for (int64_t x = 0; x < n; x++) s[x] = c * tanhf(s[x] * ic);
  }
  if (qk && a->qk_mode <= KEEL_SDPA_QK_SOFTCAP && n) /* all keys: c0 = 0, n = Skv */
    memcpy(qk, s, (size_t)n * sizeof(float));
  int64_t l = hi > lo ? lo - c0 : 0, e = hi > lo ? hi - c0 : 0;
  if (!whole) row_mask(a, mask_off(a, b, h, i), s, c0, l, e);
  if (qk && a->qk_mode == KEEL_SDPA_QK_BIAS) {
    fill(qk, lo, -INFINITY);
    if (e > l) memcpy(qk + lo, s + l, (size_t)(e - l) * sizeof(float));
    fill(qk + hi, a->Skv - hi, -INFINITY);
  }
  bool ok = e > l && keel_vm_softmax_row(s + l, e - l);
  fill(s, l, 0);
  if (!ok) fill(s + l, e - l, 0);
  fill(s + e, n - e, 0);
  if (qk && a->qk_mode == KEEL_SDPA_QK_PROBS) {
    fill(qk, c0, 0);
    if (n) memcpy(qk + c0, s, (size_t)n * sizeof(float));
    fill(qk + c0 + n, a->Skv - c0 - n, 0);
  }
  return ok;
}

/* ========================================================== a block */

/* A block of m query rows of batch b sharing one kv head: row r is query
 * i0 + r*di of head h0 + r*dh. (dh, di) = (0, 1) walks the queries of one
 * head; (1, 0) walks a GQA group's heads at one query (decoding, where a
 * block per head would be a one-row product). */
typedef struct blk {
  int64_t b, h0, i0, m, dh, di;
} blk;

/* Leading dimension of a block's rows in an operand with strides sh, ss. */
static int64_t blk_ld(const blk *k, int64_t sh, int64_t ss) { return k->dh ? sh : ss; }

/* Scores, softmax and output of one block, over the union of its rows'
 * keys (all of them when raw scores are wanted). S is the worker's
 * scratch; pk, pv the head's packed panels, or NULL for OpenBLAS
 * products. */
static void sdpa_block(const job *j, const blk *k, float *S, const float *pk, const float *pv) {
  const keel_sdpa *a = j->a;
  keel_assert_internal(k->m <= QB_MAX);
  int64_t g = k->h0 / j->reps, b = k->b, c0 = a->Skv, c1 = 0;
  int64_t lo[QB_MAX], hi[QB_MAX];
  bool whole[QB_MAX], ok[QB_MAX];
  for (int64_t r = 0; r < k->m; r++) {
    if (j->same && r > 0)
      whole[r] = whole[0], lo[r] = lo[0], hi[r] = hi[0];
    else
      whole[r] = row_keys(j, b, k->h0 + r * k->dh, k->i0 + r * k->di, &lo[r], &hi[r]);
    if (hi[r] > lo[r]) {
      c0 = lo[r] < c0 ? lo[r] : c0;
      c1 = hi[r] > c1 ? hi[r] : c1;
    }
  }
  if (a->qk && a->qk_mode <= KEEL_SDPA_QK_SOFTCAP) c0 = 0, c1 = a->Skv;
  if (c1 <= c0) c0 = c1 = 0;
  int64_t n = c1 - c0, ldy = blk_ld(k, a->y_sh, a->y_ss);
  float *y = a->y + b * a->y_sb + k->h0 * a->y_sh + k->i0 * a->y_ss;
  if (n == 0) { /* no row keeps a key */
    for (int64_t r = 0; r < k->m; r++) {
      if (a->qk) sdpa_row(j, b, k->h0 + r * k->dh, k->i0 + r * k->di, S, 0, 0, 0, 0, true);
      fill(y + r * ldy, a->Dv, a->nan_rows ? NAN : 0.0f);
    }
    return;
  }
  const float *q = a->q.p + b * a->q.sb + k->h0 * a->q.sh + k->i0 * a->q.ss;
  int64_t ldq = blk_ld(k, a->q.sh, a->q.ss);
  /* panels: S holds the scores of keys [0, c1) (a cut's first c0 for
   * nothing: the panels start at key 0), the rows from column c0 */
  int64_t lds = pk ? c1 : n;
  if (pk) {
    keel_panel_gemm(k->m, c1, a->Dk, q, ldq, pk, false, S, c1);
  } else {
    const float *kp = a->k.p + b * a->k.sb + g * a->k.sh + (a->k_t ? c0 : c0 * a->k.ss);
    qk_product(KEEL_FLOAT, k->m, n, a->Dk, a->scale, q, ldq, kp, a->k.ss, a->k_t, S, lds);
  }
  float *S0 = pk ? S + c0 : S;
  for (int64_t r = 0; r < k->m; r++)
    ok[r] = sdpa_row(j, b, k->h0 + r * k->dh, k->i0 + r * k->di, S0 + r * lds, c0, n, lo[r],
                     hi[r], whole[r]);
  if (pk) {
    keel_panel_gemm(k->m, a->Dv, n, S0, lds, pv + c0 * NP, false, y, ldy);
  } else {
    const float *vp = a->v.p + b * a->v.sb + g * a->v.sh + c0 * a->v.ss;
    pv_product(KEEL_FLOAT, k->m, a->Dv, n, S0, lds, vp, a->v.ss, y, ldy);
  }
  if (a->nan_rows)
    for (int64_t r = 0; r < k->m; r++)
      if (!ok[r]) fill(y + r * ldy, a->Dv, NAN);
}

/* ====================================================== packed panels */

/* Panels (where keel's panel product has AVX-512, or as the caller asks):
 * a task is one (b, h), all its query blocks. K is packed once per task
 * as the panels of keel_panel_gemm (Dk rows of 128 keys, scale folded
 * in), V as one panel (Skv rows of 128 value columns, zero-padded), so
 * each block's two products run on keel's register-tiled kernel without
 * the per-call packing of a general sgemm (which had them at 140 GFLOP/s
 * on 32 x 128 x 64 blocks). The panel product reads up to NP floats past
 * a panel's end: one more NP allocated. */
static size_t panel_floats(const keel_sdpa *a) {
  return (size_t)((a->Skv + NP - 1) / NP * a->Dk * NP) + (size_t)(a->Skv * NP) + NP;
}

static void pack_head(const keel_sdpa *a, int64_t b, int64_t g, float *pk, float *pv) {
  const float *kp = a->k.p + b * a->k.sb + g * a->k.sh, *v = a->v.p + b * a->v.sb + g * a->v.sh;
  int64_t D = a->Dk, Skv = a->Skv;
  for (int64_t p = 0; p * NP < Skv; p++) {
    int64_t w = KEEL_MIN(NP, Skv - p * NP);
    float *pan = pk + p * D * NP;
    if (!a->k_t) /* key by key: its D values read in a row, written down a column */
      for (int64_t c = 0; c < w; c++) {
        const float *kr = kp + (p * NP + c) * a->k.ss;
        for (int64_t d = 0; d < D; d++) pan[d * NP + c] = kr[d] * a->scale;
      }
    else
      for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < w; c++) pan[d * NP + c] = kp[d * a->k.ss + p * NP + c] * a->scale;
    if (w < NP)
      for (int64_t d = 0; d < D; d++) memset(pan + d * NP + w, 0, (size_t)(NP - w) * sizeof(float));
  }
  for (int64_t c = 0; c < Skv; c++) {
    memcpy(pv + c * NP, v + c * a->v.ss, (size_t)a->Dv * sizeof(float));
    memset(pv + c * NP + a->Dv, 0, (size_t)(NP - a->Dv) * sizeof(float));
  }
}

/* ============================================================ tasks */

static keel_status sdpa_tasks(void *ctx, int64_t begin, int64_t end, int worker) {
  const job *j = ctx;
  const keel_sdpa *a = j->a;
  float *S = j->scratch + (size_t)worker * j->per_worker;
  if (j->panels) { /* task t: run t % qparts of head u % Hq of batch u / Hq, u = t / qparts */
    float *pk = S + j->qb * a->Skv, *pv = pk + (a->Skv + NP - 1) / NP * a->Dk * NP;
    int64_t nb = (a->Sq + j->qb - 1) / j->qb;
    for (int64_t t = begin; t < end; t++) {
      int64_t u = t / j->qparts, q = t % j->qparts, b = u / a->Hq, h = u % a->Hq;
      int64_t k0 = nb * q / j->qparts, k1 = nb * (q + 1) / j->qparts;
      if (k1 <= k0) continue;
      pack_head(a, b, h / j->reps, pk, pv);
      for (int64_t i0 = k0 * j->qb; i0 < KEEL_MIN(a->Sq, k1 * j->qb); i0 += j->qb) {
        blk bk = {b, h, i0, KEEL_MIN(j->qb, a->Sq - i0), 0, 1};
        sdpa_block(j, &bk, S, pk, pv);
      }
    }
    return KEEL_OK;
  }
  /* task t: block t % nblk of unit t / nblk, a unit a (b, head) or, by
   * head, a (b, GQA group) */
  int64_t units = j->by_head ? a->Hkv : a->Hq;
  for (int64_t t = begin; t < end; t++) {
    int64_t u = t / j->nblk, r0 = t % j->nblk * j->qb, b = u / units, x = u % units;
    int64_t m = KEEL_MIN(j->qb, j->run - r0);
    blk bk = j->by_head ? (blk){b, x * j->reps + r0, 0, m, 1, 0} : (blk){b, x, r0, m, 0, 1};
    sdpa_block(j, &bk, S, NULL, NULL);
  }
  return KEEL_OK;
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
  job j = {.a = a, .reps = a->Hq / a->Hkv};
  j.cut = a->cond && !a->mask.p && a->fill == -INFINITY;
  /* one query row and a group of heads: the group's rows form a block */
  j.by_head = a->Sq == 1 && j.reps > 1;
  int splits = keel_pool_splits(k->pool);
  j.same = !j.cut && !a->causal && a->left < 0 && a->right < 0;
  keel_attn_facts f = {a->B, a->Hq, a->Dk, a->Dv, a->Skv, !j.same};
  j.panels = !j.by_head && a->Dv <= NP &&
             (a->path == KEEL_SDPA_PANELS ||
              (a->path == KEEL_SDPA_AUTO && keel_attention_panels(&f, splits))); /* select.c */
  j.run = j.by_head ? j.reps : a->Sq;
  j.qb = a->block_rows > 0 ? a->block_rows
         : j.by_head       ? j.reps
         : j.panels        ? 32
                           : keel_attention_block_rows(&f, splits, a->Sq);
  j.qb = KEEL_MIN(j.qb, QB_MAX);
  j.nblk = (j.run + j.qb - 1) / j.qb;
  /* whole heads as tasks, unless they split unevenly over the pool (ViT's
   * 3 heads on 2 threads: one thread did two): then each head's query
   * blocks in runs, each run packing the head's K and V again (a few
   * percent of a run's work) */
  int64_t units = a->B * a->Hq;
  j.qparts = j.panels && splits > 1 && units % splits ? KEEL_MIN(j.nblk, (int64_t)splits) : 1;
  if (j.cut && !a->mask.sb && !a->mask.sh) KEEL_TRY(shared_keys(k, &j));
  j.per_worker = (size_t)(j.qb * a->Skv) + (j.panels ? panel_floats(a) : 0);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)keel_pool_threads(k->pool) * (int64_t)j.per_worker,
                            sizeof(float), &p));
  j.scratch = p;
  /* a task's work for the pool's grain: its products and softmax */
  int64_t rows = j.panels ? (a->Sq + j.qparts - 1) / j.qparts : j.qb;
  int64_t tasks = j.panels ? units * j.qparts : a->B * (j.by_head ? a->Hkv : a->Hq) * j.nblk;
  double flops = (double)rows * (double)a->Skv * (2.0 * (double)(a->Dk + a->Dv) + 20.0);
  double bytes = 4.0 * (double)(rows + a->Skv) * (double)(a->Dk + a->Dv);
  return keel_pool_for(k->pool, tasks, keel_pool_grain(bytes, flops), sdpa_tasks, &j);
}

/* ============================================ the stages, whole heads */

static size_t ct_size(int ct) { return keel_dtype_size((keel_dtype)ct); }

void keel_sdpa_scores(const keel_sdpa_heads *h, const void *q, const void *k, void *s) {
  size_t es = ct_size(h->ct);
  int64_t reps = h->Hq / h->Hkv;
  for (int64_t b = 0; b < h->B; b++)
    for (int64_t x = 0; x < h->Hq; x++) {
      int64_t qi = b * h->Hq + x, ki = b * h->Hkv + x / reps;
      qk_product(h->ct, h->Sq, h->Skv, h->Dk, h->scale,
                 (const char *)q + (size_t)(qi * h->Sq * h->Dk) * es, h->Dk,
                 (const char *)k + (size_t)(ki * h->Skv * h->Dk) * es, h->Dk, false,
                 (char *)s + (size_t)(qi * h->Sq * h->Skv) * es, h->Skv);
    }
}

void keel_sdpa_softmax(const keel_sdpa_heads *h, const void *s, void *p) {
  int64_t rows = h->B * h->Hq * h->Sq, n = h->Skv;
  if (rows * n == 0) return;
  memcpy(p, s, (size_t)(rows * n) * ct_size(h->ct));
  for (int64_t r = 0; r < rows; r++) {
    if (h->ct == KEEL_FLOAT) {
      float *x = (float *)p + r * n;
      if (!keel_vm_softmax_row(x, n)) fill(x, n, NAN);
    } else {
      double *x = (double *)p + r * n;
      if (!softmax_row_f64(x, n))
        for (int64_t j = 0; j < n; j++) x[j] = NAN;
    }
  }
}

void keel_sdpa_values(const keel_sdpa_heads *h, const void *p, const void *v, void *y) {
  size_t es = ct_size(h->ct);
  int64_t reps = h->Hq / h->Hkv;
  for (int64_t b = 0; b < h->B; b++)
    for (int64_t x = 0; x < h->Hq; x++) {
      int64_t qi = b * h->Hq + x, vi = b * h->Hkv + x / reps;
      pv_product(h->ct, h->Sq, h->Dv, h->Skv, (const char *)p + (size_t)(qi * h->Sq * h->Skv) * es,
                 h->Skv, (const char *)v + (size_t)(vi * h->Skv * h->Dv) * es, h->Dv,
                 (char *)y + (size_t)(qi * h->Sq * h->Dv) * es, h->Dv);
    }
}
