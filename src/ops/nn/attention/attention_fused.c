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
 * broadcast S up there is refused: UNSUPPORTED). Attribute causal (int,
 * default 0): key j is kept for query row i only when j <= i, as the
 * causal-mask pass (passes/pass_causal.c) writes it in place of a -inf
 * Trilu mask; with a mask too, both apply. Attribute layout (bits
 * 1, 2, 4, 8 for Q, K, V, Y) marks an operand the pass took from before
 * its Transpose: Q or V given as [B, S, H, D], K as [B, S, H, D] rows
 * (not Kt), Y written as [B, S, H, D]; they are read by strides.
 * Attribute packed (11 ints, the attention-qkv pass's: fa_packed below):
 * q, k and v are column ranges of one projection output given in all
 * three slots; with y_rank = 3 (the rank-3 form's, one batch) Y is of
 * rank 3.
 *
 * The op reads its operands and attributes into the attention core
 * (attention.h), which runs it: broadcast dims as 0 strides, Kt as K
 * given transposed, the Where masks as a bool mask with its fill and
 * polarity (a -inf fill cuts each row's keys to its kept ones), and rows
 * whose every score is -inf NaN, as the unfused Softmax gives them. The
 * reference for this op is the unfused chain (KEEL_OPT_NO_GRAPH_PASSES):
 * tests/test_pass_attention.c compares them. On a device it runs as
 * attention_gpu.c composes it, from the same reading (keel_fa_plan).
 */
#include <math.h>

#include "ops/nn/attention/attention_fused.h"

enum { MK_NONE = KEEL_FA_MASK_NONE, MK_ADD = KEEL_FA_MASK_ADD, MK_WHERE = KEEL_FA_MASK_WHERE,
       MK_WHERE_NOT = KEEL_FA_MASK_WHERE_NOT };
/* layout bits (passes/pass_attention.c): operand read, Y written, as
 * [B, S, H, D] instead of [B, H, S, D] (K: [B, S, H, D] instead of Kt) */
enum { FA_L_Q = 1, FA_L_K = 2, FA_L_V = 4, FA_L_Y = 8 };

/* *into = the broadcast of *into and d; false when they do not agree. */
static bool bjoin(int64_t *into, int64_t d) {
  if (d == *into || d == 1) return true;
  if (*into != 1) return false;
  *into = d;
  return true;
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
 * the caller) with agreeing inner dims; B and H joined (Hq = Hkv = H, a
 * broadcast head or batch a 0 stride). */
static keel_status fa_operands(const keel_tensor *t[3], int64_t layout, keel_sdpa *s) {
  char s1[96], s2[96], s3[96];
  for (int i = 0; i < 3; i++)
    if (t[i]->dtype != KEEL_FLOAT || t[i]->rank != 4)
      return keel_err(t[i]->dtype != KEEL_FLOAT ? KEEL_ERR_UNSUPPORTED : KEEL_ERR_SHAPE,
                      "FusedAttention (ai.keel.internal, opset 1): input %d is %s of rank %d; "
                      "float32 of rank 4 (or all three of rank 3) wanted", i, keel_dtype_name((keel_dtype)t[i]->dtype),
                      t[i]->rank);
  fa_dims q = dims_of(t[0]->shape, layout & FA_L_Q), v = dims_of(t[2]->shape, layout & FA_L_V);
  fa_dims k = dims_of(t[1]->shape, true); /* K rows: [B, Skv, H, D] */
  s->k_t = (layout & FA_L_K) == 0;
  if (s->k_t) { /* Kt [B, H, D, Skv]: "rows" are the D dim */
    const int64_t *x = t[1]->shape;
    k = (fa_dims){x[0], x[1], x[3], x[2], x[0] == 1 ? 0 : x[1] * x[2] * x[3],
                  x[1] == 1 ? 0 : x[2] * x[3], x[3]};
  }
  s->Sq = q.s, s->Dk = q.d, s->Skv = k.s, s->Dv = v.d, s->B = q.b, s->Hq = q.h;
  bool ok = k.d == s->Dk && v.s == s->Skv && bjoin(&s->B, k.b) && bjoin(&s->Hq, k.h) &&
            bjoin(&s->B, v.b) && bjoin(&s->Hq, v.h);
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "attention operands Q %s, K %s and V %s (layout %lld) do "
                    "not agree", keel_shape_str(4, t[0]->shape, s1, sizeof s1),
                    keel_shape_str(4, t[1]->shape, s2, sizeof s2),
                    keel_shape_str(4, t[2]->shape, s3, sizeof s3), (long long)layout);
  s->Hkv = s->Hq;
  s->q = (keel_sdpa_t){t[0]->data, q.sb, q.sh, q.ss};
  s->k = (keel_sdpa_t){t[1]->data, k.sb, k.sh, k.ss};
  s->v = (keel_sdpa_t){t[2]->data, v.sb, v.sh, v.ss};
  return KEEL_OK;
}

/* Attribute packed (the attention-qkv pass's, passes/pass_qkv.c): Q, K
 * and V are column ranges of one [B, S, W] tensor X (a fused projection's
 * output, every input slot X): packed = {oq, hq, dq, ok, hk, dk, ov, hv,
 * dv, b, s}, operand i read as [b, s, h, d] from column o on, its rows W
 * floats apart, K as rows; b, s < 0: X's B and S, else X's B * S rows
 * taken as b * s (as a Reshape to [b, s, h, d] of the columns would). */
static keel_status fa_packed(const keel_tensor *t[3], const int64_t *pk, keel_sdpa *s) {
  const keel_tensor *x = t[0];
  char s1[96];
  if (t[1] != x || t[2] != x || x->dtype != KEEL_FLOAT || x->rank != 3)
    return keel_err(KEEL_ERR_INVALID_MODEL, "FusedAttention (ai.keel.internal, opset 1): packed "
                    "q, k, v must be one float32 tensor of rank 3, not %s",
                    keel_shape_str(x->rank, x->shape, s1, sizeof s1));
  int64_t B = pk[9] < 0 ? x->shape[0] : pk[9], S = pk[10] < 0 ? x->shape[1] : pk[10];
  int64_t W = x->shape[2];
  if (B * S != x->shape[0] * x->shape[1])
    return keel_err(KEEL_ERR_SHAPE, "FusedAttention (ai.keel.internal, opset 1): packed X %s "
                    "does not have the %lld x %lld rows its q, k, v were reshaped to",
                    keel_shape_str(3, x->shape, s1, sizeof s1), (long long)B, (long long)S);
  keel_sdpa_t *op[3] = {&s->q, &s->k, &s->v};
  for (int i = 0; i < 3; i++) {
    int64_t o = pk[3 * i], h = pk[3 * i + 1], d = pk[3 * i + 2];
    if (o < 0 || h < 1 || d < 1 || h > (W - o) / d)
      return keel_err(KEEL_ERR_SHAPE, "FusedAttention (ai.keel.internal, opset 1): packed "
                      "operand %d (columns %lld on, %lld heads of %lld) outside X %s", i,
                      (long long)o, (long long)h, (long long)d,
                      keel_shape_str(3, x->shape, s1, sizeof s1));
    *op[i] = (keel_sdpa_t){(const float *)x->data + o, B == 1 ? 0 : S * W, h == 1 ? 0 : d, W};
  }
  if (pk[1] != pk[4] || pk[4] != pk[7] || pk[2] != pk[5])
    return keel_err(KEEL_ERR_SHAPE, "FusedAttention (ai.keel.internal, opset 1): packed heads "
                    "%lld, %lld, %lld of sizes %lld, %lld do not agree", (long long)pk[1],
                    (long long)pk[4], (long long)pk[7], (long long)pk[2], (long long)pk[5]);
  s->B = B, s->Sq = s->Skv = S, s->Hq = s->Hkv = pk[1], s->Dk = pk[2], s->Dv = pk[8];
  s->k_t = false;
  return KEEL_OK;
}

/* The mask: type, broadcast over [B, H, Sq, Skv] (B and H may grow), as
 * the core's additive mask or bool mask of fill and polarity. */
static keel_status fa_mask(const keel_tensor *m, int kind, keel_sdpa *s) {
  char s1[96];
  int want = kind == MK_ADD ? KEEL_FLOAT : KEEL_BOOL;
  if (m->dtype != want || m->rank > 4)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "FusedAttention (ai.keel.internal, opset 1): mask %s of %s; %s of rank <= 4 "
                    "wanted", keel_shape_str(m->rank, m->shape, s1, sizeof s1),
                    keel_dtype_name((keel_dtype)m->dtype), want == KEEL_FLOAT ? "float32" : "bool");
  int64_t d[4] = {1, 1, 1, 1}, st[4], acc = 1;
  for (int i = 0; i < m->rank; i++) d[4 - m->rank + i] = m->shape[i];
  if (!bjoin(&s->B, d[0]) || !bjoin(&s->Hq, d[1]) || (d[2] != 1 && d[2] != s->Sq) ||
      (d[3] != 1 && d[3] != s->Skv))
    return keel_err(s->Sq == 1 || s->Skv == 1 ? KEEL_ERR_UNSUPPORTED : KEEL_ERR_SHAPE,
                    "attention mask %s does not broadcast to the scores [%lld, %lld, %lld, %lld]",
                    keel_shape_str(m->rank, m->shape, s1, sizeof s1), (long long)s->B,
                    (long long)s->Hq, (long long)s->Sq, (long long)s->Skv);
  s->Hkv = s->Hq;
  for (int i = 3; i >= 0; i--) st[i] = d[i] == 1 ? 0 : acc, acc *= d[i];
  s->mask = (keel_sdpa_t){kind == MK_ADD ? m->data : NULL, st[0], st[1], st[2]};
  s->mask_bcast_keys = st[3] == 0;
  s->mask_len = s->Skv;
  if (kind != MK_ADD) s->cond = m->data, s->keep = kind == MK_WHERE_NOT;
  return KEEL_OK;
}

keel_status keel_fa_plan(keel_kctx *k, keel_sdpa *sp, keel_tensor **yp, int *kind_out) {
  const keel_tensor *t[3], *mask = NULL;
  for (int i = 0; i < 3; i++) KEEL_TRY(keel_k_in(k, i, &t[i]));
  KEEL_TRY(keel_k_in_opt(k, 3, &mask));
  int kind = mask_kind(keel_k_attr_s(k, "mask_kind", "none"));
  if (kind < 0 || (kind != MK_NONE) != (mask != NULL))
    return keel_err(KEEL_ERR_INVALID_MODEL, "mask_kind '%s' with %s mask input",
                    keel_k_attr_s(k, "mask_kind", "none"), mask ? "a" : "no");
  keel_sdpa s;
  memset(&s, 0, sizeof s);
  s.scale = keel_k_attr_f(k, "scale", 1.0f);
  s.fill = keel_k_attr_f(k, "fill", 0.0f);
  s.causal = keel_k_attr_i(k, "causal", 0) != 0;
  s.left = s.right = -1;
  s.nan_rows = true; /* as the unfused Softmax */
  int64_t layout = keel_k_attr_i(k, "layout", 0);
  int npk = 0;
  const int64_t *pk = keel_k_attr_ints(k, "packed", &npk);
  if (pk && npk != 11)
    return keel_err(KEEL_ERR_INVALID_MODEL, "FusedAttention (ai.keel.internal, opset 1): "
                    "attribute packed has %d values, 11 wanted", npk);
  /* all three of rank 3 ([N, S, D], nn.MultiheadAttention's heads joined
   * with the batch): read as [1, N, S, D], Y of rank 3 too */
  keel_tensor t4[3];
  bool r3 = !pk && t[0]->rank == 3 && t[1]->rank == 3 && t[2]->rank == 3;
  for (int i = 0; r3 && i < 3; i++) {
    t4[i] = *t[i];
    t4[i].rank = 4, t4[i].shape[0] = 1;
    for (int d = 0; d < 3; d++) t4[i].shape[d + 1] = t[i]->shape[d];
    t[i] = &t4[i];
  }
  KEEL_TRY(pk ? fa_packed(t, pk, &s) : fa_operands(t, layout, &s));
  if (mask) KEEL_TRY(fa_mask(mask, kind, &s));
  if (r3 && s.B != 1)
    return keel_err(KEEL_ERR_SHAPE, "attention of rank-3 operands with a mask of %lld batches",
                    (long long)s.B);
  keel_tensor *y;
  bool ybshd = (layout & FA_L_Y) != 0;
  int64_t ys[4] = {s.B, ybshd ? s.Sq : s.Hq, ybshd ? s.Hq : s.Sq, s.Dv};
  bool y3 = r3 || (pk && keel_k_attr_i(k, "y_rank", 4) == 3 && s.B == 1);
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, y3 ? 3 : 4, y3 ? ys + 1 : ys, &y));
  s.y = y->data;
  s.y_sb = s.Sq * s.Hq * s.Dv, s.y_sh = ybshd ? s.Dv : s.Sq * s.Dv, s.y_ss = dims_of(ys, ybshd).ss;
  *sp = s, *yp = y, *kind_out = kind;
  return KEEL_OK;
}

static keel_status op_fused_attention(keel_kctx *k) {
  keel_sdpa s;
  keel_tensor *y;
  int kind;
  KEEL_TRY(keel_fa_plan(k, &s, &y, &kind));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  if (s.Skv == 0) { /* MatMul over no keys: zeros */
    memset(y->data, 0, (size_t)keel_tensor_numel(y) * sizeof(float));
    return KEEL_OK;
  }
  if (s.Dk == 0)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "FusedAttention (ai.keel.internal, opset 1): head size 0");
  return keel_sdpa_f32(k, &s);
}

const keel_opdef keel_ops_attention_fused[] = {
    {"ai.keel.internal", "FusedAttention", 1, KEEL_OPSET_MAX, op_fused_attention, 0,
     KEEL_T(KEEL_FLOAT), keel_gpu_fused_attention_impls},
    {0},
};
