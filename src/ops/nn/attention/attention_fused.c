/* attention_fused.c: FusedAttention (domain ai.keel.internal), the node the
 * fuse-attention pass (passes/pass_attention.c) makes of an exported
 * MatMul -> scale -> mask -> Softmax -> MatMul chain:
 *
 *     Y = softmax(mask(scale * Q @ Kt)) @ V
 *
 *   Q  [Bq, Hq, Sq, D]    Kt [Bk, Hk, D, Skv] (K already transposed, read
 *   V  [Bv, Hv, Skv, Dv]   as it is)           Y [B, H, Sq, Dv]
 *
 * with B and H the broadcast of the operands' (and the mask's) first two
 * dims, as the MatMuls and the Add/Where of the chain broadcast them.
 * Attributes: scale (float), mask_kind ("none"; "add": + mask, a float
 * tensor; "where": cond ? fill : s; "where_not": cond ? s : fill, cond a
 * bool tensor) and fill. The mask broadcasts right-aligned over
 * [B, H, Sq, Skv]; its last two dims must be 1 or S's (a mask that would
 * broadcast S up there is refused: UNSUPPORTED). Attribute layout (bits
 * 1, 2, 4, 8 for Q, K, V, Y) marks an operand the pass took from before
 * its Transpose: Q or V given as [B, S, H, D], K as [B, S, H, D] rows
 * (not Kt), Y written as [B, S, H, D]; they are read by strides.
 *
 * The work is split per (batch, head, block of QB query rows) on the
 * session's pool; a task's scores are one sgemm into a QB x Skv block of
 * per-worker scratch, masked and soft-maxed row by row, then one sgemm
 * with V into Y. Nothing larger than that block is materialized. On
 * AVX-512 CPUs with heads for every split (select.c) a task is a whole
 * head instead, its K and V packed once into keel's panel layout and each
 * block's products run by keel_panel_gemm (below). When the
 * Where fill is -inf, a block's keys are cut to the union of its rows'
 * unmasked range (a causal mask then skips the keys above the diagonal).
 *
 * Rows whose every score is -inf come out NaN, as the unfused Softmax
 * gives them. The reference for this kernel is the unfused chain
 * (KEEL_OPT_NO_GRAPH_PASSES): tests/test_pass_attention.c compares them.
 */
#include <math.h>

#include "base/pool.h"
#include "ops/common/conv_util.h"
#include "ops/common/panel_gemm.h"
#include "ops/common/vmath.h"
#include "ops/nn/attention/select.h"

#define QB 32 /* query rows per task (panels; blocks: select.c may take more) */
#define QB_MAX KEEL_ATTN_QB_MAX

enum { MK_NONE, MK_ADD, MK_WHERE, MK_WHERE_NOT };
/* layout bits (passes/pass_attention.c): operand read, Y written, as
 * [B, S, H, D] instead of [B, H, S, D] (K: [B, S, H, D] instead of Kt) */
enum { FA_L_Q = 1, FA_L_K = 2, FA_L_V = 4, FA_L_Y = 8 };

typedef struct fa_job {
  int64_t B, H, Sq, Skv, D, Dv, nblk;
  int64_t qb;                   /* query rows per block task               */
  const float *q, *kt, *v;
  int64_t qsb, qsh, qss, ksb, ksh, kss, vsb, vsh, vss, ysb, ysh, yss;
  bool k_rows;                  /* K as [.., Skv, D] rows (else Kt [.., D, Skv]) */
  const void *mask;             /* float (add) or bool (where), or NULL     */
  int64_t msb, msh, mss, msc;   /* element strides over [B, H, Sq, Skv]     */
  int kind;
  float scale, fill;
  bool cut;                     /* narrow keys to the unmasked range       */
  bool panels;                  /* per-head tasks on packed K and V        */
  /* with a cut and a mask shared by every batch and head (a causal one):
   * each query row's kept keys [rk[2i], rk[2i+1]), and whether they are
   * all its kept keys (then the row is soft-maxed over them alone, no
   * per-key masking) */
  const int64_t *rk;
  const uint8_t *rk_whole;
  float *y, *scratch;           /* scratch per worker: QB * Skv floats
                                   (then, with panels, K's and V's panels) */
  size_t per_worker;            /* floats of scratch per worker            */
} fa_job;

/* Row-major strides of a rank-4 shape, 0 where a dim of 1 broadcasts. */
static void bstrides(const int64_t d[4], int64_t st[4]) {
  int64_t acc = 1;
  for (int i = 3; i >= 0; i--) st[i] = d[i] == 1 ? 0 : acc, acc *= d[i];
}

/* *into = the broadcast of *into and d; false when they do not agree. */
static bool bjoin(int64_t *into, int64_t d) {
  if (d == *into || d == 1) return true;
  if (*into != 1) return false;
  *into = d;
  return true;
}

static void row_nan(float *y, int64_t n) {
  for (int64_t j = 0; j < n; j++) y[j] = NAN;
}

/* Unmasked means: cond false for "where", true for "where_not". */
static bool kept(const fa_job *j, const uint8_t *c, int64_t col) {
  return (c[col * j->msc] != 0) == (j->kind == MK_WHERE_NOT);
}

/* The keys [*lo, *hi) a row keeps (empty: lo = hi = 0). */
static void row_keys(const fa_job *j, const uint8_t *c, int64_t *lo, int64_t *hi) {
  int64_t l = 0, h = j->Skv;
  while (l < h && !kept(j, c, l)) l++;
  while (h > l && !kept(j, c, h - 1)) h--;
  if (h <= l) l = h = 0;
  *lo = l, *hi = h;
}

/* The mask row of (b, h, i), as bytes of its element type. */
static const uint8_t *mask_row(const fa_job *j, int64_t b, int64_t h, int64_t i) {
  size_t es = j->kind == MK_ADD ? sizeof(float) : 1;
  int64_t off = b * j->msb + h * j->msh + i * j->mss;
  return (const uint8_t *)j->mask + (size_t)off * es;
}

/* Masks one row of scores s (keys c0.. of n) in place. */
static void row_mask(const fa_job *j, const uint8_t *mr, int64_t c0, int64_t n, float *s) {
  if (j->kind == MK_ADD) {
    const float *m = (const float *)mr + c0 * j->msc;
    if (j->msc) for (int64_t x = 0; x < n; x++) s[x] += m[x];
    else for (int64_t x = 0; x < n; x++) s[x] += m[0];
    return;
  }
  const uint8_t *c = mr + c0 * j->msc;
  bool hit = j->kind == MK_WHERE;
  for (int64_t x = 0; x < n; x++) s[x] = (c[x * j->msc] != 0) == hit ? j->fill : s[x];
}

/* The keys [*c0, *c1) rows [i0, i0 + m) of (b, h) need: all, or with a
 * -inf fill the union of their unmasked ranges (empty: 0, 0). */
static void block_keys(const fa_job *j, int64_t b, int64_t h, int64_t i0, int64_t m, int64_t *c0,
                       int64_t *c1) {
  *c0 = 0, *c1 = j->Skv;
  if (!j->cut) return;
  *c0 = j->Skv, *c1 = 0;
  for (int64_t r = 0; r < m; r++) {
    int64_t lo, hi;
    if (j->rk) lo = j->rk[2 * (i0 + r)], hi = j->rk[2 * (i0 + r) + 1];
    else row_keys(j, mask_row(j, b, h, i0 + r), &lo, &hi);
    if (hi > lo) *c0 = lo < *c0 ? lo : *c0, *c1 = hi > *c1 ? hi : *c1;
  }
  if (*c1 <= *c0) *c0 = *c1 = 0;
}

/* One task: rows [i0, i0 + m) of (b, h). */
static void fa_block(const fa_job *j, int64_t b, int64_t h, int64_t i0, int64_t m, float *S) {
  keel_assert_internal(m <= QB_MAX);
  int64_t c0, c1;
  block_keys(j, b, h, i0, m, &c0, &c1);
  int64_t n = c1 - c0;
  float *y = j->y + b * j->ysb + h * j->ysh + i0 * j->yss;
  if (n == 0 && j->Skv > 0) { /* every key masked: the Softmax gives NaN */
    for (int64_t r = 0; r < m; r++) row_nan(y + r * j->yss, j->Dv);
    return;
  }
  const float *q = j->q + b * j->qsb + h * j->qsh + i0 * j->qss;
  const float *kt = j->kt + b * j->ksb + h * j->ksh + (j->k_rows ? c0 * j->kss : c0);
  const float *v = j->v + b * j->vsb + h * j->vsh + c0 * j->vss;
  keel_gemm_f32(NULL, false, j->k_rows, m, n, j->D, j->scale, q, j->qss, kt, j->kss, 0, S, n);
  uint64_t bad[QB_MAX / 64 + 1] = {0};
  for (int64_t r = 0; r < m; r++) {
    float *s = S + r * n;
    if (j->mask) row_mask(j, mask_row(j, b, h, i0 + r), c0, n, s);
    if (n && !keel_vm_softmax_row(s, n)) bad[r / 64] |= 1ull << (r % 64);
  }
  keel_gemm_f32(NULL, false, false, m, j->Dv, n, 1.0f, S, n > 0 ? n : 1, v, j->vss, 0, y, j->yss);
  for (int64_t r = 0; r < m; r++)
    if (bad[r / 64] >> (r % 64) & 1) row_nan(y + r * j->yss, j->Dv);
}

/* ------------------------------------------------------ packed panels */

/* The panel path (on CPUs where keel's panel product has AVX-512): a task
 * is one (b, h), all its query blocks. K is packed once per task as the
 * panels of keel_panel_gemm (D rows of 128 keys, scale folded in),
 * V as one panel (Skv rows of 128 value columns, zero-padded), so each
 * block's two products run on keel's register-tiled kernel without the
 * per-call packing of a general sgemm (which had them at 140 GFLOP/s on
 * 32 x 128 x 64 blocks). */
#define NP KEEL_PANEL_NP

static size_t panel_floats(const fa_job *j) {
  return (size_t)((j->Skv + NP - 1) / NP * j->D * NP) + (size_t)(j->Skv * NP) + NP;
}

static void pack_head(const fa_job *j, int64_t b, int64_t h, float *pk, float *pv) {
  const float *kt = j->kt + b * j->ksb + h * j->ksh, *v = j->v + b * j->vsb + h * j->vsh;
  int64_t D = j->D, Skv = j->Skv;
  for (int64_t p = 0; p * NP < Skv; p++) {
    int64_t w = KEEL_MIN(NP, Skv - p * NP);
    float *pan = pk + p * D * NP;
    if (j->k_rows) /* key by key: its D values read in a row, written down a column */
      for (int64_t c = 0; c < w; c++) {
        const float *kr = kt + (p * NP + c) * j->kss;
        for (int64_t d = 0; d < D; d++) pan[d * NP + c] = kr[d] * j->scale;
      }
    else
      for (int64_t d = 0; d < D; d++)
        for (int64_t c = 0; c < w; c++) pan[d * NP + c] = kt[d * j->kss + p * NP + c] * j->scale;
    if (w < NP)
      for (int64_t d = 0; d < D; d++) memset(pan + d * NP + w, 0, (size_t)(NP - w) * sizeof(float));
  }
  for (int64_t c = 0; c < Skv; c++) {
    memcpy(pv + c * NP, v + c * j->vss, (size_t)j->Dv * sizeof(float));
    memset(pv + c * NP + j->Dv, 0, (size_t)(NP - j->Dv) * sizeof(float));
  }
}

/* Every block of (b, h) on the packed panels. S holds the scores of keys
 * [0, c1) (a cut's c0 > 0 computes the first c0 for nothing). */
static void fa_head(const fa_job *j, int64_t b, int64_t h, float *S, float *pk, float *pv) {
  pack_head(j, b, h, pk, pv);
  for (int64_t i0 = 0; i0 < j->Sq; i0 += QB) {
    int64_t m = KEEL_MIN(QB, j->Sq - i0), c0, c1;
    block_keys(j, b, h, i0, m, &c0, &c1);
    float *y = j->y + b * j->ysb + h * j->ysh + i0 * j->yss;
    if (c1 == c0) {
      for (int64_t r = 0; r < m; r++) row_nan(y + r * j->yss, j->Dv);
      continue;
    }
    const float *q = j->q + b * j->qsb + h * j->qsh + i0 * j->qss;
    keel_panel_gemm(m, c1, j->D, q, j->qss, pk, false, S, c1);
    uint64_t bad[QB / 64 + 1] = {0};
    for (int64_t r = 0; r < m; r++) {
      float *s = S + r * c1 + c0;
      if (j->rk && j->rk_whole[i0 + r]) { /* kept keys in one run: no masking */
        int64_t lo = j->rk[2 * (i0 + r)], hi = j->rk[2 * (i0 + r) + 1];
        if (hi == lo || !keel_vm_softmax_row(S + r * c1 + lo, hi - lo)) {
          bad[r / 64] |= 1ull << (r % 64);
          continue;
        }
        memset(s, 0, (size_t)(lo - c0) * sizeof(float));
        memset(S + r * c1 + hi, 0, (size_t)(c1 - hi) * sizeof(float));
        continue;
      }
      if (j->mask) row_mask(j, mask_row(j, b, h, i0 + r), c0, c1 - c0, s);
      if (!keel_vm_softmax_row(s, c1 - c0)) bad[r / 64] |= 1ull << (r % 64);
    }
    keel_panel_gemm(m, j->Dv, c1 - c0, S + c0, c1, pv + c0 * NP, false, y, j->yss);
    for (int64_t r = 0; r < m; r++)
      if (bad[r / 64] >> (r % 64) & 1) row_nan(y + r * j->yss, j->Dv);
  }
}

static keel_status fa_tasks(void *ctx, int64_t begin, int64_t end, int worker) {
  const fa_job *j = ctx;
  float *S = j->scratch + (size_t)worker * j->per_worker;
  if (j->panels) {
    float *pk = S + QB * j->Skv, *pv = pk + (j->Skv + NP - 1) / NP * j->D * NP;
    for (int64_t t = begin; t < end; t++) fa_head(j, t / j->H, t % j->H, S, pk, pv);
    return KEEL_OK;
  }
  for (int64_t t = begin; t < end; t++) {
    int64_t blk = t % j->nblk, bh = t / j->nblk;
    int64_t i0 = blk * j->qb, m = j->Sq - i0 < j->qb ? j->Sq - i0 : j->qb;
    fa_block(j, bh / j->H, bh % j->H, i0, m, S);
  }
  return KEEL_OK;
}

static int mask_kind(const char *s) {
  if (!strcmp(s, "none")) return MK_NONE;
  if (!strcmp(s, "add")) return MK_ADD;
  if (!strcmp(s, "where")) return MK_WHERE;
  if (!strcmp(s, "where_not")) return MK_WHERE_NOT;
  return -1;
}

/* An operand's logical [B, H, S, D] dims and its strides: layout
 * [B, H, S, D] as the Transposes wrote it, or (bshd) [B, S, H, D] as it
 * came before them. Batch and head strides are 0 where the dim is 1. */
typedef struct fa_dims {
  int64_t b, h, s, d, sb, sh, ss;
} fa_dims;

static fa_dims dims_of(const int64_t *x, bool bshd) {
  fa_dims o = {x[0], bshd ? x[2] : x[1], bshd ? x[1] : x[2], x[3], 0, 0, 0};
  o.sb = o.b == 1 ? 0 : x[1] * x[2] * x[3];
  o.ss = bshd ? x[2] * x[3] : x[3];
  o.sh = o.h == 1 ? 0 : bshd ? x[3] : x[2] * x[3];
  return o;
}

/* Q, K (Kt, or K rows when folded), V: rank-4 float32 (rank 3 lifted by
 * the caller) with agreeing inner dims; B and H joined. */
static keel_status fa_operands(const keel_tensor *t[3], int64_t layout, fa_job *j) {
  char s1[96], s2[96], s3[96];
  for (int i = 0; i < 3; i++)
    if (t[i]->dtype != KEEL_FLOAT || t[i]->rank != 4)
      return keel_err(t[i]->dtype != KEEL_FLOAT ? KEEL_ERR_UNSUPPORTED : KEEL_ERR_SHAPE,
                      "FusedAttention (ai.keel.internal, opset 1): input %d is %s of rank %d; "
                      "float32 of rank 4 (or all three of rank 3) wanted", i, keel_dtype_name((keel_dtype)t[i]->dtype),
                      t[i]->rank);
  fa_dims q = dims_of(t[0]->shape, layout & FA_L_Q), v = dims_of(t[2]->shape, layout & FA_L_V);
  fa_dims k = dims_of(t[1]->shape, true); /* K rows: [B, Skv, H, D] */
  j->k_rows = (layout & FA_L_K) != 0;
  if (!j->k_rows) { /* Kt [B, H, D, Skv]: "rows" are the D dim */
    const int64_t *x = t[1]->shape;
    k = (fa_dims){x[0], x[1], x[3], x[2], x[0] == 1 ? 0 : x[1] * x[2] * x[3],
                  x[1] == 1 ? 0 : x[2] * x[3], x[3]};
  }
  j->Sq = q.s, j->D = q.d, j->Skv = k.s, j->Dv = v.d, j->B = q.b, j->H = q.h;
  bool ok = k.d == j->D && v.s == j->Skv && bjoin(&j->B, k.b) && bjoin(&j->H, k.h) &&
            bjoin(&j->B, v.b) && bjoin(&j->H, v.h);
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "attention operands Q %s, K %s and V %s (layout %lld) do "
                    "not agree", keel_shape_str(4, t[0]->shape, s1, sizeof s1),
                    keel_shape_str(4, t[1]->shape, s2, sizeof s2),
                    keel_shape_str(4, t[2]->shape, s3, sizeof s3), (long long)layout);
  j->qsb = q.sb, j->qsh = q.sh, j->qss = q.ss;
  j->ksb = k.sb, j->ksh = k.sh, j->kss = k.ss;
  j->vsb = v.sb, j->vsh = v.sh, j->vss = v.ss;
  return KEEL_OK;
}

/* The mask: type, broadcast over [B, H, Sq, Skv] (B and H may grow). */
static keel_status fa_mask(const keel_tensor *m, fa_job *j) {
  char s1[96];
  int want = j->kind == MK_ADD ? KEEL_FLOAT : KEEL_BOOL;
  if (m->dtype != want || m->rank > 4)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "FusedAttention (ai.keel.internal, opset 1): mask %s of %s; %s of rank <= 4 "
                    "wanted", keel_shape_str(m->rank, m->shape, s1, sizeof s1),
                    keel_dtype_name((keel_dtype)m->dtype), want == KEEL_FLOAT ? "float32" : "bool");
  int64_t d[4] = {1, 1, 1, 1}, st[4];
  for (int i = 0; i < m->rank; i++) d[4 - m->rank + i] = m->shape[i];
  if (!bjoin(&j->B, d[0]) || !bjoin(&j->H, d[1]) || (d[2] != 1 && d[2] != j->Sq) ||
      (d[3] != 1 && d[3] != j->Skv))
    return keel_err(j->Sq == 1 || j->Skv == 1 ? KEEL_ERR_UNSUPPORTED : KEEL_ERR_SHAPE,
                    "attention mask %s does not broadcast to the scores [%lld, %lld, %lld, %lld]",
                    keel_shape_str(m->rank, m->shape, s1, sizeof s1), (long long)j->B,
                    (long long)j->H, (long long)j->Sq, (long long)j->Skv);
  bstrides(d, st);
  j->mask = m->data;
  j->msb = st[0], j->msh = st[1], j->mss = st[2], j->msc = st[3];
  return KEEL_OK;
}

/* A -inf mask shared by every batch and head: each query row's kept keys
 * (j->rk) and whether every key between them is kept (j->rk_whole), read
 * once per run instead of once per head. */
static keel_status shared_row_keys(keel_kctx *k, fa_job *j) {
  void *rk, *whole;
  KEEL_TRY(keel_k_scratch_n(k, 2 * j->Sq, sizeof(int64_t), &rk));
  KEEL_TRY(keel_k_scratch_n(k, j->Sq, 1, &whole));
  for (int64_t i = 0; i < j->Sq; i++) {
    int64_t *r = (int64_t *)rk + 2 * i, x = 0;
    const uint8_t *row = mask_row(j, 0, 0, i);
    row_keys(j, row, &r[0], &r[1]);
    for (x = r[0]; x < r[1] && kept(j, row, x);) x++;
    ((uint8_t *)whole)[i] = x == r[1];
  }
  j->rk = rk, j->rk_whole = whole;
  return KEEL_OK;
}

static keel_status op_fused_attention(keel_kctx *k) {
  const keel_tensor *t[3], *mask = NULL;
  for (int i = 0; i < 3; i++) KEEL_TRY(keel_k_in(k, i, &t[i]));
  KEEL_TRY(keel_k_in_opt(k, 3, &mask));
  fa_job j;
  memset(&j, 0, sizeof j);
  j.kind = mask_kind(keel_k_attr_s(k, "mask_kind", "none"));
  j.scale = keel_k_attr_f(k, "scale", 1.0f);
  j.fill = keel_k_attr_f(k, "fill", 0.0f);
  if (j.kind < 0 || (j.kind != MK_NONE) != (mask != NULL))
    return keel_err(KEEL_ERR_INVALID_MODEL, "mask_kind '%s' with %s mask input",
                    keel_k_attr_s(k, "mask_kind", "none"), mask ? "a" : "no");
  int64_t layout = keel_k_attr_i(k, "layout", 0);
  /* all three of rank 3 ([N, S, D], nn.MultiheadAttention's heads joined
   * with the batch): read as [1, N, S, D], Y of rank 3 too */
  keel_tensor t4[3];
  bool r3 = t[0]->rank == 3 && t[1]->rank == 3 && t[2]->rank == 3;
  for (int i = 0; r3 && i < 3; i++) {
    t4[i] = *t[i];
    t4[i].rank = 4, t4[i].shape[0] = 1;
    for (int d = 0; d < 3; d++) t4[i].shape[d + 1] = t[i]->shape[d];
    t[i] = &t4[i];
  }
  KEEL_TRY(fa_operands(t, layout, &j));
  if (mask) KEEL_TRY(fa_mask(mask, &j));
  if (r3 && j.B != 1)
    return keel_err(KEEL_ERR_SHAPE, "attention of rank-3 operands with a mask of %lld batches",
                    (long long)j.B);
  j.cut = j.kind >= MK_WHERE && j.fill == -INFINITY;
  if (j.cut && !j.msb && !j.msh && j.Sq > 0) KEEL_TRY(shared_row_keys(k, &j));
  int64_t big = j.Skv > j.D ? j.Skv : j.D;
  KEEL_TRY(keel_blas_fits(big > j.Dv ? big : j.Dv));
  keel_tensor *y;
  bool ybshd = (layout & FA_L_Y) != 0;
  int64_t ys[4] = {j.B, ybshd ? j.Sq : j.H, ybshd ? j.H : j.Sq, j.Dv};
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, r3 ? 3 : 4, r3 ? ys + 1 : ys, &y));
  fa_dims yd = dims_of(ys, ybshd);
  j.ysb = j.Sq * j.H * j.Dv, j.ysh = ybshd ? j.Dv : j.Sq * j.Dv, j.yss = yd.ss;
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  if (j.Skv == 0) { /* MatMul over no keys: zeros */
    memset(y->data, 0, (size_t)keel_tensor_numel(y) * sizeof(float));
    return KEEL_OK;
  }
  if (j.D == 0)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "FusedAttention (ai.keel.internal, opset 1): head size 0");
  j.q = t[0]->data, j.kt = t[1]->data, j.v = t[2]->data, j.y = y->data;
  j.qb = QB;
  int threads = keel_pool_threads(k->pool);
  keel_attn_facts f = {j.B, j.H, j.D, j.Dv, j.Skv};
  j.panels = keel_attention_panels(&f, keel_pool_splits(k->pool)); /* select.c */
  if (!j.panels && !j.cut) j.qb = keel_attention_block_rows(&f, keel_pool_splits(k->pool), j.Sq);
  j.nblk = (j.Sq + j.qb - 1) / j.qb;
  j.per_worker = (size_t)(j.qb * j.Skv) + (j.panels ? panel_floats(&j) : 0);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, (int64_t)threads * (int64_t)j.per_worker, sizeof(float), &p));
  j.scratch = p;
  if (j.panels) return keel_pool_for(k->pool, j.B * j.H, 1, fa_tasks, &j);
  return keel_pool_for(k->pool, j.B * j.H * j.nblk, 1, fa_tasks, &j);
}

const keel_opdef keel_ops_attention_fused[] = {
    {"ai.keel.internal", "FusedAttention", 1, KEEL_OPSET_MAX, op_fused_attention, 0,
     KEEL_T(KEEL_FLOAT)},
    {0},
};
