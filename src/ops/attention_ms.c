/* attention_ms.c: ONNX Runtime's com.microsoft attention ops on the shared
 * scaled-dot-product core (attention.h): MultiHeadAttention and
 * GroupQueryAttention, with ONNX Runtime's schemas and CPU semantics.
 *
 * MultiHeadAttention: query [B, S, N*H]; key/value [B, L, N*H] (or
 * [B, N, L, H] precomputed); optional input-projection bias added to Q, K
 * and V; past_key/past_value [B, N, P, H] concatenated into the present
 * outputs; key_padding_mask ([B] key lengths, [B, T] or [B, S, T] of
 * 1 = keep) adds mask_filter_value (default -10000, finite, as ONNX
 * Runtime does) where a key is masked; attention_bias [B|1, N|1, S, T] is
 * added; unidirectional is causal aligned after the past.
 *
 * GroupQueryAttention: query [B, S, N*H] (or packed Q|K|V), key/value
 * [B, S, Nkv*H], past_key/past_value [B, Nkv, P, H], seqlens_k[b] = the
 * batch's total length - 1, total_sequence_length the batch maximum. The
 * present buffers hold max(P, total) positions: the batch's past_b =
 * total_b - S rows of the past, then the new keys (rotated when
 * do_rotary), zeros after. Queries are causal from position past_b
 * (bottom-right), with local_window_size keeping the window's keys, and
 * softcap as in ONNX Attention.
 *
 * float16/bfloat16 run in float on staged copies; every operand is staged
 * into one scratch block (a kernel has few scratch buffers).
 */
#include <math.h>

#include "attention.h"
#include "bcast.h"

/* ============================================================ staging */

/* One scratch block carved in order: floats (and the int64 arrays first,
 * for alignment). */
typedef struct carve {
  float *p;
} carve;

static float *take(carve *c, int64_t n) {
  float *p = c->p;
  c->p += n;
  return p;
}

/* t as floats at dst (n elements, any float type). */
static void to_f32(const keel_tensor *t, float *dst) {
  int64_t n = keel_tensor_numel(t);
  if (t->dtype == KEEL_FLOAT) {
    if (n) memcpy(dst, t->data, (size_t)n * sizeof(float));
    return;
  }
  const uint16_t *h = t->data;
  if (t->dtype == KEEL_FLOAT16)
    for (int64_t i = 0; i < n; i++) dst[i] = keel_f16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = keel_bf16_to_f32(h[i]);
}

static void from_f32(const float *src, keel_tensor *t) {
  if (t->dtype == KEEL_FLOAT) {
    int64_t n = keel_tensor_numel(t);
    if (n && t->data != src) memcpy(t->data, src, (size_t)n * sizeof(float));
    return;
  }
  keel_f32_store(src, t);
}

static keel_status need_float(const keel_tensor *t, const char *op, const char *what) {
  if (t->dtype == KEEL_FLOAT || keel_is_half(t->dtype)) return KEEL_OK;
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s (com.microsoft): %s of type %s", op, what,
                  keel_dtype_name((keel_dtype)t->dtype));
}

/* Rows of (B, H, S, D) [4-D] or (B, S, H*D) [3-D] src into dst (B, H, T, D)
 * at row t0, for batch b only (S rows from src row s0). */
static void rows_to_bnsh(float *dst, const float *src, bool src4, int64_t b, int64_t H,
                         int64_t S, int64_t s0, int64_t n, int64_t D, int64_t T, int64_t t0) {
  for (int64_t h = 0; h < H; h++)
    for (int64_t s = 0; s < n; s++) {
      const float *r = src4 ? src + ((b * H + h) * S + s0 + s) * D
                            : src + ((b * S + s0 + s) * H + h) * D;
      memcpy(dst + ((b * H + h) * T + t0 + s) * D, r, (size_t)D * sizeof(float));
    }
}

static keel_sdpa_t bnsh(const float *p, int64_t H, int64_t T, int64_t D) {
  keel_sdpa_t o = {p, H * T * D, T * D, D};
  return o;
}

static keel_sdpa_t bshd(const float *p, int64_t H, int64_t S, int64_t D) {
  keel_sdpa_t o = {p, S * H * D, D, H * D};
  return o;
}

/* ================================================= MultiHeadAttention */

typedef struct mha {
  const keel_tensor *q, *k, *v, *bias, *kpm, *ab, *pk, *pv;
  int64_t B, S, L, N, H, Hv, P, T;
  bool kv4;
} mha;

static keel_status mha_read(keel_kctx *k, mha *m) {
  memset(m, 0, sizeof *m);
  const keel_tensor **t[8] = {&m->q, &m->k, &m->v, &m->bias, &m->kpm, &m->ab, &m->pk, &m->pv};
  for (int i = 0; i < 8; i++) KEEL_TRY(keel_k_in_opt(k, i, t[i]));
  if (!m->q || !m->k || !m->v)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "MultiHeadAttention (com.microsoft, opset 1): packed QKV or KV inputs");
  if (keel_k_has_in(k, 8) || keel_k_has_in(k, 9))
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "MultiHeadAttention (com.microsoft, opset 1): past_sequence_length / "
                    "cache_indirection");
  m->N = keel_k_attr_i(k, "num_heads", 0);
  const keel_tensor *q = m->q, *kk = m->k, *v = m->v;
  char s1[96], s2[96], s3[96];
  m->kv4 = kk->rank == 4;
  bool ok = m->N > 0 && q->rank == 3 && q->shape[2] % m->N == 0 && v->rank == kk->rank &&
            (kk->rank == 3 || kk->rank == 4) && kk->dtype == q->dtype && v->dtype == q->dtype;
  if (ok) {
    m->B = q->shape[0], m->S = q->shape[1], m->H = q->shape[2] / m->N;
    if (m->kv4) {
      m->L = kk->shape[2], m->Hv = v->shape[3];
      ok = kk->shape[1] == m->N && kk->shape[3] == m->H && v->shape[1] == m->N &&
           v->shape[2] == m->L;
    } else {
      m->L = kk->shape[1];
      ok = kk->shape[2] == m->N * m->H && v->shape[1] == m->L && v->shape[2] % m->N == 0;
      m->Hv = v->shape[2] / m->N;
    }
    ok = ok && kk->shape[0] == m->B && v->shape[0] == m->B;
  }
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE,
                    "query %s, key %s, value %s do not fit num_heads %lld (one float type)",
                    keel_shape_str(q->rank, q->shape, s1, sizeof s1),
                    keel_shape_str(kk->rank, kk->shape, s2, sizeof s2),
                    keel_shape_str(v->rank, v->shape, s3, sizeof s3), (long long)m->N);
  return need_float(q, "MultiHeadAttention", "query");
}

static keel_status mha_check_extras(const mha *m) {
  char s1[96];
  if (m->bias && (m->bias->rank != 1 || m->bias->shape[0] != m->N * (2 * m->H + m->Hv) ||
                  m->bias->dtype != m->q->dtype))
    return keel_err(KEEL_ERR_SHAPE, "bias %s must be [%lld]",
                    keel_shape_str(m->bias->rank, m->bias->shape, s1, sizeof s1),
                    (long long)(m->N * (2 * m->H + m->Hv)));
  if ((m->pk != NULL) != (m->pv != NULL))
    return keel_err(KEEL_ERR_INVALID_MODEL, "past_key and past_value go together");
  if (m->pk) {
    const keel_tensor *a = m->pk, *b = m->pv;
    bool ok = a->rank == 4 && b->rank == 4 && a->shape[0] == m->B && a->shape[1] == m->N &&
              a->shape[3] == m->H && b->shape[0] == m->B && b->shape[1] == m->N &&
              b->shape[2] == a->shape[2] && b->shape[3] == m->Hv && a->dtype == m->q->dtype &&
              b->dtype == m->q->dtype && !m->kv4;
    if (!ok)
      return keel_err(KEEL_ERR_SHAPE, "past_key %s must be [%lld, %lld, P, %lld] with 3-D keys",
                      keel_shape_str(a->rank, a->shape, s1, sizeof s1), (long long)m->B,
                      (long long)m->N, (long long)m->H);
  }
  if (m->ab) {
    const keel_tensor *a = m->ab;
    bool ok = a->rank == 4 && (a->shape[0] == 1 || a->shape[0] == m->B) &&
              (a->shape[1] == 1 || a->shape[1] == m->N) && a->shape[2] == m->S &&
              a->shape[3] == m->T && keel_dtype_is_float(a->dtype);
    if (!ok)
      return keel_err(KEEL_ERR_SHAPE, "attention_bias %s must be [B|1, N|1, %lld, %lld]",
                      keel_shape_str(a->rank, a->shape, s1, sizeof s1), (long long)m->S,
                      (long long)m->T);
  }
  return KEEL_OK;
}

/* The additive mask [B, Nb, S, T] from key_padding_mask and
 * attention_bias (NULL when neither); returns its head count in *nb. */
static keel_status mha_mask(keel_kctx *k, const mha *m, float *dst, int64_t *nb) {
  int64_t B = m->B, S = m->S, T = m->T;
  *nb = m->ab ? m->ab->shape[1] : 1;
  float fv = keel_k_attr_f(k, "mask_filter_value", -10000.0f);
  const keel_tensor *mk = m->kpm;
  if (mk) {
    bool len1 = mk->rank == 1 && mk->shape[0] == B;
    bool two = mk->rank == 2 && mk->shape[0] == B && mk->shape[1] == T;
    bool three = mk->rank == 3 && mk->shape[0] == B && mk->shape[1] == S && mk->shape[2] == T;
    if (mk->dtype != KEEL_INT32 || !(len1 || two || three))
      return keel_err(KEEL_ERR_UNSUPPORTED,
                      "MultiHeadAttention (com.microsoft, opset 1): key_padding_mask must be "
                      "int32 [B], [B, T] or [B, S, T]");
  }
  const int32_t *mv = mk ? mk->data : NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < *nb; h++)
      for (int64_t i = 0; i < S; i++) {
        float *row = dst + ((b * *nb + h) * S + i) * T;
        for (int64_t j = 0; j < T; j++) {
          bool keep = !mk                       ? true
                      : mk->rank == 1           ? j < mv[b]
                      : mk->rank == 2           ? mv[b * T + j] > 0
                                                : mv[(b * S + i) * T + j] > 0;
          row[j] = keep ? 0.0f : fv;
        }
        if (!m->ab) continue;
        int64_t ab0 = m->ab->shape[0] == 1 ? 0 : b;
        size_t off = (size_t)(((ab0 * m->ab->shape[1] + h) * S + i) * T);
        for (int64_t j = 0; j < T; j++)
          row[j] += (float)keel_elem_get_f64(m->ab->dtype, m->ab->data, off + (size_t)j);
      }
  return KEEL_OK;
}

/* Q, K, V staged as float with the bias (staged into b) added. */
static void mha_stage(const mha *m, float *q, float *kk, float *v, float *b) {
  to_f32(m->q, q);
  to_f32(m->k, kk);
  to_f32(m->v, v);
  if (!m->bias) return;
  to_f32(m->bias, b);
  int64_t D = m->N * m->H, Dv = m->N * m->Hv;
  for (int64_t r = 0; r < m->B * m->S; r++)
    for (int64_t j = 0; j < D; j++) q[r * D + j] += b[j];
  if (m->kv4) return;
  for (int64_t r = 0; r < m->B * m->L; r++) {
    for (int64_t j = 0; j < D; j++) kk[r * D + j] += b[D + j];
    for (int64_t j = 0; j < Dv; j++) v[r * Dv + j] += b[2 * D + j];
  }
}

static keel_status op_mha(keel_kctx *k) {
  mha m;
  KEEL_TRY(mha_read(k, &m));
  m.P = m.pk ? m.pk->shape[2] : 0;
  m.T = m.P + m.L;
  KEEL_TRY(mha_check_extras(&m));
  int64_t nq = keel_tensor_numel(m.q), nk = keel_tensor_numel(m.k), nv = keel_tensor_numel(m.v);
  int64_t nb = m.ab ? m.ab->shape[1] : 1, nmask = (m.kpm || m.ab) ? m.B * nb * m.S * m.T : 0;
  int64_t npk = m.B * m.N * m.T * m.H, npv = m.B * m.N * m.T * m.Hv, ny = m.B * m.S * m.N * m.Hv;
  keel_tensor *y, *pko = NULL, *pvo = NULL;
  KEEL_TRY(keel_k_out(k, 0, m.q->dtype, 3, (int64_t[]){m.B, m.S, m.N * m.Hv}, &y));
  bool pres = m.pk || keel_k_has_out(k, 1) || keel_k_has_out(k, 2);
  if (pres) {
    KEEL_TRY(keel_k_out(k, 1, m.q->dtype, 4, (int64_t[]){m.B, m.N, m.T, m.H}, &pko));
    KEEL_TRY(keel_k_out(k, 2, m.q->dtype, 4, (int64_t[]){m.B, m.N, m.T, m.Hv}, &pvo));
  }
  if (keel_k_has_out(k, 3))
    return keel_err(KEEL_ERR_UNSUPPORTED, "MultiHeadAttention (com.microsoft, opset 1): qk output");
  void *p;
  int64_t need = nq + (m.bias ? keel_tensor_numel(m.bias) : 0) + nk + nv + nmask + ny +
                 (pres ? npk + npv : 0);
  KEEL_TRY(keel_k_scratch_n(k, need, sizeof(float), &p));
  carve c = {p};
  float *qf = take(&c, nq), *bf = take(&c, m.bias ? keel_tensor_numel(m.bias) : 0),
        *kf = take(&c, nk), *vf = take(&c, nv), *mask = take(&c, nmask), *yf = take(&c, ny);
  mha_stage(&m, qf, kf, vf, bf);
  keel_sdpa s;
  memset(&s, 0, sizeof s);
  s.B = m.B, s.Hq = m.N, s.Hkv = m.N, s.Sq = m.S, s.Skv = m.T, s.Dk = m.H, s.Dv = m.Hv;
  s.q = bshd(qf, m.N, m.S, m.H);
  s.k = m.kv4 ? bnsh(kf, m.N, m.L, m.H) : bshd(kf, m.N, m.L, m.H);
  s.v = m.kv4 ? bnsh(vf, m.N, m.L, m.Hv) : bshd(vf, m.N, m.L, m.Hv);
  if (pres) {
    float *kp = take(&c, npk), *vp = take(&c, npv);
    for (int64_t b = 0; b < m.B; b++) {
      if (m.pk) {
        /* the past rows, staged through the present buffers' own rows */
        for (int64_t h = 0; h < m.N; h++)
          for (int64_t t = 0; t < m.P; t++) {
            size_t src = (size_t)(((b * m.N + h) * m.P + t));
            for (int64_t d = 0; d < m.H; d++)
              kp[((b * m.N + h) * m.T + t) * m.H + d] =
                  (float)keel_elem_get_f64(m.pk->dtype, m.pk->data, src * (size_t)m.H + (size_t)d);
            for (int64_t d = 0; d < m.Hv; d++)
              vp[((b * m.N + h) * m.T + t) * m.Hv + d] =
                  (float)keel_elem_get_f64(m.pv->dtype, m.pv->data, src * (size_t)m.Hv + (size_t)d);
          }
      }
      rows_to_bnsh(kp, kf, m.kv4, b, m.N, m.L, 0, m.L, m.H, m.T, m.P);
      rows_to_bnsh(vp, vf, m.kv4, b, m.N, m.L, 0, m.L, m.Hv, m.T, m.P);
    }
    s.k = bnsh(kp, m.N, m.T, m.H);
    s.v = bnsh(vp, m.N, m.T, m.Hv);
    from_f32(kp, pko);
    from_f32(vp, pvo);
  }
  s.y = yf, s.y_sb = m.S * m.N * m.Hv, s.y_sh = m.Hv, s.y_ss = m.N * m.Hv;
  if (nmask) {
    KEEL_TRY(mha_mask(k, &m, mask, &nb));
    s.mask = (keel_sdpa_t){mask, nb * m.S * m.T, nb == 1 ? 0 : m.S * m.T, m.T};
    s.mask_len = m.T;
  }
  const keel_attr *sc = keel_k_attr(k, "scale");
  s.scale = sc ? keel_k_attr_f(k, "scale", 1) : 1.0f / sqrtf((float)m.H);
  s.causal = keel_k_attr_i(k, "unidirectional", 0) != 0;
  s.left = s.right = -1;
  if (m.P) {
    void *op;
    KEEL_TRY(keel_k_scratch_n(k, m.B, sizeof(int64_t), &op));
    int64_t *o = op;
    for (int64_t b = 0; b < m.B; b++) o[b] = m.P;
    s.offset = o;
  }
  KEEL_TRY(keel_sdpa_f32(k, &s));
  from_f32(yf, y);
  return KEEL_OK;
}

const keel_opdef keel_ops_attention_ms[] = {
    {"com.microsoft", "MultiHeadAttention", 1, KEEL_OPSET_MAX, op_mha, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {0},
};
