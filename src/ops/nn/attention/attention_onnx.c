/* attention_onnx.c: the ONNX Attention op (opsets 23, 24 and 25) on the
 * scaled-dot-product core (attention.h).
 *
 * It maps ONNX's inputs onto the core: 3-D inputs [B, S, H*D] are read
 * in place through strides; past_key/past_value are concatenated into the
 * present outputs, which the core then reads as K and V; masks (bool,
 * read in place as the core's bool mask: true keeps, -inf fill; or
 * additive float of any float type) broadcast over [B, Hq, Sq, kv] by
 * strides, and a mask shorter than the keys counts as -inf beyond its end
 * (ONNX pads it). is_causal and the windows are aligned bottom-right: the
 * query offset is past_key's length, or nonpad_kv_seqlen[b] - Sq for an
 * external cache. float16/bfloat16/double inputs run in float on staged
 * copies and round once into the outputs; softmax_precision is met by
 * computing in float for every input type (for double inputs that is less
 * than double precision: a known limit).
 */
#include <math.h>

#include "ops/nn/attention/attention.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

/* ===================================================== ONNX Attention */

/* The op's operands, shapes and sizes. Q, K and V are 3-D [B, S, H*D] or
 * 4-D [B, H, S, D]; past/present are always 4-D. */
typedef struct att {
  const keel_tensor *q, *k, *v, *mask, *pk, *pv, *nonpad;
  int rank;
  int64_t B, Hq, Hkv, Sq, S, P, T, Dk, Dv; /* S new keys, P past, T = P + S */
} att;

static keel_status att_dims(keel_kctx *k, att *a) {
  const keel_tensor *q = a->q, *kk = a->k, *v = a->v;
  char s1[96], s2[96], s3[96];
  if ((q->rank != 3 && q->rank != 4) || kk->rank != q->rank || v->rank != q->rank)
    return keel_err(KEEL_ERR_SHAPE, "Q, K and V must all be 3-D or all 4-D, got %s, %s and %s",
                    keel_shape_str(q->rank, q->shape, s1, sizeof s1),
                    keel_shape_str(kk->rank, kk->shape, s2, sizeof s2),
                    keel_shape_str(v->rank, v->shape, s3, sizeof s3));
  a->rank = q->rank;
  a->B = q->shape[0];
  int64_t hq = keel_k_attr_i(k, "q_num_heads", 0), hkv = keel_k_attr_i(k, "kv_num_heads", 0);
  if (a->rank == 4) {
    a->Hq = q->shape[1], a->Sq = q->shape[2], a->Dk = q->shape[3];
    a->Hkv = kk->shape[1], a->S = kk->shape[2], a->Dv = v->shape[3];
    if ((hq && hq != a->Hq) || (hkv && hkv != a->Hkv))
      return keel_err(KEEL_ERR_INVALID_MODEL,
                      "q_num_heads %lld / kv_num_heads %lld disagree with 4-D inputs of %lld "
                      "and %lld heads", (long long)hq, (long long)hkv, (long long)a->Hq,
                      (long long)a->Hkv);
    if (kk->shape[3] != a->Dk || v->shape[1] != a->Hkv || v->shape[2] != a->S)
      goto bad;
  } else {
    if (hq <= 0 || hkv <= 0)
      return keel_err(KEEL_ERR_INVALID_MODEL,
                      "3-D inputs need q_num_heads and kv_num_heads (> 0), got %lld and %lld",
                      (long long)hq, (long long)hkv);
    a->Hq = hq, a->Hkv = hkv, a->Sq = q->shape[1], a->S = kk->shape[1];
    if (q->shape[2] % hq || kk->shape[2] % hkv || v->shape[2] % hkv) goto bad;
    a->Dk = q->shape[2] / hq, a->Dv = v->shape[2] / hkv;
    if (kk->shape[2] / hkv != a->Dk || v->shape[1] != a->S) goto bad;
  }
  if (kk->shape[0] != a->B || v->shape[0] != a->B) goto bad;
  if (a->Hq % a->Hkv)
    return keel_err(KEEL_ERR_SHAPE, "%lld query heads are not a multiple of %lld kv heads",
                    (long long)a->Hq, (long long)a->Hkv);
  return KEEL_OK;
bad:
  return keel_err(KEEL_ERR_SHAPE, "Q %s, K %s and V %s do not agree (heads %lld / %lld)",
                  keel_shape_str(q->rank, q->shape, s1, sizeof s1),
                  keel_shape_str(kk->rank, kk->shape, s2, sizeof s2),
                  keel_shape_str(v->rank, v->shape, s3, sizeof s3), (long long)a->Hq,
                  (long long)a->Hkv);
}

/* past_key [B, Hkv, P, Dk] and past_value [B, Hkv, P, Dv], both or none. */
static keel_status att_past(att *a) {
  a->P = 0;
  if (!a->pk && !a->pv) return KEEL_OK;
  if (!a->pk || !a->pv)
    return keel_err(KEEL_ERR_INVALID_MODEL, "past_key and past_value must be given together");
  if (a->nonpad)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "nonpad_kv_seqlen cannot be combined with past_key/past_value");
  const int64_t ek[4] = {a->B, a->Hkv, a->pk->rank == 4 ? a->pk->shape[2] : -1, a->Dk};
  const int64_t ev[4] = {a->B, a->Hkv, ek[2], a->Dv};
  bool ok = a->pk->rank == 4 && a->pv->rank == 4 && a->pk->dtype == a->k->dtype &&
            a->pv->dtype == a->v->dtype;
  for (int i = 0; ok && i < 4; i++) ok = a->pk->shape[i] == ek[i] && a->pv->shape[i] == ev[i];
  if (!ok) {
    char s1[96], s2[96];
    return keel_err(KEEL_ERR_SHAPE,
                    "past_key %s / past_value %s must be [%lld, %lld, P, %lld] / [.., %lld] "
                    "of K's / V's type",
                    keel_shape_str(a->pk->rank, a->pk->shape, s1, sizeof s1),
                    keel_shape_str(a->pv->rank, a->pv->shape, s2, sizeof s2), (long long)a->B,
                    (long long)a->Hkv, (long long)a->Dk, (long long)a->Dv);
  }
  a->P = ek[2];
  return KEEL_OK;
}

/* Copies the S rows of each (b, h) of src (3-D [B, S, H*D] or 4-D) into
 * dst [B, H, T, D] from row t0 on; es bytes an element. */
static void kv_copy(uint8_t *dst, const uint8_t *src, int rank, int64_t B, int64_t H,
                    int64_t S, int64_t D, int64_t T, int64_t t0, size_t es) {
  size_t row = (size_t)D * es;
  if (row == 0 || S == 0) return; /* empty: data may be NULL */
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      uint8_t *d = dst + ((size_t)((b * H + h) * T + t0)) * row;
      if (rank == 4) {
        memcpy(d, src + (size_t)((b * H + h) * S) * row, (size_t)S * row);
        continue;
      }
      for (int64_t s = 0; s < S; s++)
        memcpy(d + (size_t)s * row, src + (size_t)((b * S + s) * H + h) * row, row);
    }
}

/* t (of a float type) as float: its own data, or a converted copy at
 * *dst (advanced). */
static const float *as_f32(const keel_tensor *t, float **dst) {
  if (t->dtype == KEEL_FLOAT) return t->data;
  float *f = *dst;
  int64_t n = keel_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) f[i] = (float)keel_elem_get_f64(t->dtype, t->data, (size_t)i);
  *dst += n;
  return f;
}

/* Floats a staged copy of t takes (a bool mask is read as it is). */
static int64_t f32_need(const keel_tensor *t) {
  return t && t->dtype != KEEL_FLOAT && t->dtype != KEEL_BOOL ? keel_tensor_numel(t) : 0;
}

/* The mask's strides over [B, Hq, Sq] (right-aligned, 0 where broadcast)
 * and its row length. */
static keel_status att_mask_shape(const att *a, keel_sdpa *s) {
  const keel_tensor *m = a->mask;
  int64_t d[4] = {1, 1, 1, 1}, st[4], acc = 1;
  bool ok = m->rank >= 1 && m->rank <= 4 &&
            (m->dtype == KEEL_BOOL || keel_dtype_is_float(m->dtype));
  for (int i = 0; ok && i < m->rank; i++) d[4 - m->rank + i] = m->shape[i];
  for (int i = 3; i >= 0; i--) st[i] = d[i] == 1 ? 0 : acc, acc *= d[i];
  const int64_t want[3] = {a->B, a->Hq, a->Sq};
  for (int i = 0; ok && i < 3; i++) ok = d[i] == 1 || d[i] == want[i];
  if (!ok || d[3] > a->T || d[3] < 1) {
    char s1[96];
    return keel_err(KEEL_ERR_SHAPE,
                    "attn_mask %s (%s) does not broadcast to [%lld, %lld, %lld, <= %lld]",
                    keel_shape_str(m->rank, m->shape, s1, sizeof s1),
                    keel_dtype_name((keel_dtype)m->dtype), (long long)a->B, (long long)a->Hq,
                    (long long)a->Sq, (long long)a->T);
  }
  s->mask.sb = st[0], s->mask.sh = st[1], s->mask.ss = st[2];
  s->mask_len = d[3];
  return KEEL_OK;
}

/* Operand strides of a Q/K/V-like tensor read in place. */
static keel_sdpa_t operand(const float *p, int rank, int64_t H, int64_t S, int64_t D) {
  keel_sdpa_t o = {p, H * S * D, 0, 0};
  if (rank == 4) o.sh = S * D, o.ss = D;
  else o.sh = D, o.ss = H * D;
  return o;
}

static keel_status att_read(keel_kctx *k, att *a) {
  memset(a, 0, sizeof *a);
  KEEL_TRY(keel_k_in(k, 0, &a->q));
  KEEL_TRY(keel_k_in(k, 1, &a->k));
  KEEL_TRY(keel_k_in(k, 2, &a->v));
  KEEL_TRY(keel_k_in_opt(k, 3, &a->mask));
  KEEL_TRY(keel_k_in_opt(k, 4, &a->pk));
  KEEL_TRY(keel_k_in_opt(k, 5, &a->pv));
  if (keel_k_opset(k) >= 24) KEEL_TRY(keel_k_in_opt(k, 6, &a->nonpad));
  const keel_tensor *t[3] = {a->q, a->k, a->v};
  for (int i = 0; i < 3; i++)
    if (!keel_dtype_is_float(t[i]->dtype))
      return keel_err(KEEL_ERR_UNSUPPORTED, "Attention does not support %s inputs",
                      keel_dtype_name((keel_dtype)t[i]->dtype));
  if (a->k->dtype != a->q->dtype)
    return keel_err(KEEL_ERR_SHAPE, "Q is %s but K is %s",
                    keel_dtype_name((keel_dtype)a->q->dtype),
                    keel_dtype_name((keel_dtype)a->k->dtype));
  KEEL_TRY(att_dims(k, a));
  KEEL_TRY(att_past(a));
  a->T = a->P + a->S;
  if (a->nonpad && (a->nonpad->dtype != KEEL_INT64 || keel_tensor_numel(a->nonpad) != a->B ||
                    a->nonpad->rank != 1))
    return keel_err(KEEL_ERR_SHAPE, "nonpad_kv_seqlen must be int64 [%lld]", (long long)a->B);
  return KEEL_OK;
}

/* Attributes into the core's description. */
static keel_status att_attrs(keel_kctx *k, const att *a, keel_sdpa *s) {
  const keel_attr *sc = keel_k_attr(k, "scale");
  s->scale = sc ? keel_k_attr_f(k, "scale", 1) : (float)(1.0 / sqrt((double)a->Dk));
  s->softcap = keel_k_attr_f(k, "softcap", 0);
  s->causal = keel_k_attr_i(k, "is_causal", 0) != 0;
  s->qk_mode = (int)keel_k_attr_i(k, "qk_matmul_output_mode", 0);
  s->left = s->right = -1;
  if (keel_k_opset(k) >= 25) {
    s->left = keel_k_attr_i(k, "left_window_size", -1);
    s->right = keel_k_attr_i(k, "right_window_size", -1);
  }
  if (s->qk_mode < 0 || s->qk_mode > 3 || s->left < -1 || s->right < -1)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "qk_matmul_output_mode %d (0..3), left_window_size %lld, "
                    "right_window_size %lld (>= -1): out of range",
                    s->qk_mode, (long long)s->left, (long long)s->right);
  return KEEL_OK;
}

/* n floats carved from *cur. */
static float *take(float **cur, int64_t n) {
  float *p = *cur;
  *cur += n;
  return p;
}

/* Float results into a float16/bfloat16/double output. */
static void store_f32(const float *src, keel_tensor *dst) {
  if (keel_is_half(dst->dtype)) {
    keel_f32_store(src, dst);
    return;
  }
  int64_t n = keel_tensor_numel(dst);
  for (int64_t i = 0; i < n; i++) keel_elem_set_f64(dst->dtype, dst->data, (size_t)i, src[i]);
}

/* The outputs: Y, present_key/value (always made when a past is given:
 * the core reads K and V from them) and qk_matmul_output when listed. */
typedef struct att_out {
  keel_tensor *y, *pk, *pv, *qk;
} att_out;

static keel_status att_outputs(keel_kctx *k, const att *a, att_out *o) {
  int64_t ys[4] = {a->B, a->Hq, a->Sq, a->Dv};
  if (a->rank == 3) ys[1] = a->Sq, ys[2] = a->Hq * a->Dv;
  memset(o, 0, sizeof *o);
  KEEL_TRY(keel_k_out(k, 0, a->q->dtype, a->rank, ys, &o->y));
  if (a->pk || keel_k_has_out(k, 1))
    KEEL_TRY(keel_k_out(k, 1, a->k->dtype, 4, (int64_t[]){a->B, a->Hkv, a->T, a->Dk}, &o->pk));
  if (a->pv || keel_k_has_out(k, 2))
    KEEL_TRY(keel_k_out(k, 2, a->v->dtype, 4, (int64_t[]){a->B, a->Hkv, a->T, a->Dv}, &o->pv));
  if (keel_k_has_out(k, 3))
    KEEL_TRY(keel_k_out(k, 3, a->q->dtype, 4, (int64_t[]){a->B, a->Hq, a->Sq, a->T}, &o->qk));
  return KEEL_OK;
}

/* Floats of scratch the op needs besides the core's. */
static int64_t att_scratch(const att *a, const att_out *o) {
  int64_t n = 2 * a->B + f32_need(a->q) + f32_need(a->k) + f32_need(a->v) + f32_need(a->mask) +
              f32_need(a->pk) + f32_need(a->pv) + f32_need(o->y) + f32_need(o->qk);
  if (a->pk && a->k->dtype != KEEL_FLOAT) n += keel_tensor_numel(o->pk);
  if (a->pv && a->v->dtype != KEEL_FLOAT) n += keel_tensor_numel(o->pv);
  return n;
}

/* present = concat(past, new) in the input type; returns the float
 * [B, H, T, D] operand the core reads (the present itself for float). */
static keel_sdpa_t att_present(const att *a, const keel_tensor *past, const keel_tensor *nw,
                               const float *pastf, const float *nwf, keel_tensor *pres,
                               int64_t D, float **cur) {
  size_t es = keel_dtype_size((keel_dtype)nw->dtype);
  if (!pres) return operand(nwf, a->rank, a->Hkv, a->S, D);
  if (past) kv_copy(pres->data, past->data, 4, a->B, a->Hkv, a->P, D, a->T, 0, es);
  kv_copy(pres->data, nw->data, a->rank, a->B, a->Hkv, a->S, D, a->T, a->P, es);
  if (!past) return operand(nwf, a->rank, a->Hkv, a->S, D);
  float *f = pres->data;
  if (nw->dtype != KEEL_FLOAT) {
    f = take(cur, keel_tensor_numel(pres));
    kv_copy((uint8_t *)f, (const uint8_t *)pastf, 4, a->B, a->Hkv, a->P, D, a->T, 0, 4);
    kv_copy((uint8_t *)f, (const uint8_t *)nwf, a->rank, a->B, a->Hkv, a->S, D, a->T, a->P, 4);
  }
  return operand(f, 4, a->Hkv, a->T, D);
}

static keel_status op_attention(keel_kctx *k) {
  att a;
  att_out o;
  keel_sdpa s;
  memset(&s, 0, sizeof s);
  KEEL_TRY(att_read(k, &a));
  KEEL_TRY(att_attrs(k, &a, &s));
  if (a.mask) KEEL_TRY(att_mask_shape(&a, &s));
  KEEL_TRY(att_outputs(k, &a, &o));
  void *base;
  KEEL_TRY(keel_k_scratch_n(k, att_scratch(&a, &o), sizeof(float), &base));
  int64_t *off = base; /* first: 8-byte aligned */
  float *cur = (float *)(off + a.B);
  const float *qf = as_f32(a.q, &cur), *kf = as_f32(a.k, &cur), *vf = as_f32(a.v, &cur);
  const float *pkf = a.pk ? as_f32(a.pk, &cur) : NULL, *pvf = a.pv ? as_f32(a.pv, &cur) : NULL;
  if (a.mask && a.mask->dtype == KEEL_BOOL) /* true keeps a key: the core's bool mask */
    s.cond = a.mask->data, s.keep = true, s.fill = -INFINITY;
  else if (a.mask)
    s.mask.p = as_f32(a.mask, &cur);
  s.B = a.B, s.Hq = a.Hq, s.Hkv = a.Hkv, s.Sq = a.Sq, s.Skv = a.T, s.Dk = a.Dk, s.Dv = a.Dv;
  s.q = operand(qf, a.rank, a.Hq, a.Sq, a.Dk);
  s.k = att_present(&a, a.pk, a.k, pkf, kf, o.pk, a.Dk, &cur);
  s.v = att_present(&a, a.pv, a.v, pvf, vf, o.pv, a.Dv, &cur);
  keel_sdpa_t y = operand(NULL, a.rank, a.Hq, a.Sq, a.Dv);
  s.y = a.q->dtype == KEEL_FLOAT ? o.y->data : take(&cur, keel_tensor_numel(o.y));
  s.y_sb = y.sb, s.y_sh = y.sh, s.y_ss = y.ss;
  if (o.qk)
    s.qk = a.q->dtype == KEEL_FLOAT ? o.qk->data : take(&cur, keel_tensor_numel(o.qk));
  const int64_t *np = a.nonpad ? a.nonpad->data : NULL;
  for (int64_t b = 0; b < a.B; b++) off[b] = a.pk ? a.P : np ? np[b] - a.Sq : 0;
  s.offset = off;
  s.kv_len = np;
  KEEL_TRY(keel_sdpa_f32(k, &s));
  if (a.q->dtype != KEEL_FLOAT) {
    store_f32(s.y, o.y);
    if (o.qk) store_f32(s.qk, o.qk);
  }
  return KEEL_OK;
}

const keel_opdef keel_ops_attention[] = {
    {"", "Attention", 23, KEEL_OPSET_MAX, op_attention, 0, KEEL_TS_FLOAT},
    {0},
};
