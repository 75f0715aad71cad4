/* attention_ms.c: ONNX Runtime's com.microsoft attention ops on the shared
 * scaled-dot-product core (attention.h): Attention, MultiHeadAttention
 * and GroupQueryAttention, with ONNX Runtime's schemas and CPU semantics.
 *
 * Attention: input [B, S, Din] times the packed weights [Din, Dq+Dk+Dv]
 * (plus bias) gives Q, K and V, read in place by strides; past
 * [2, B, N, P, H] and present [2, B, N, P+S, H]; mask_index as
 * MultiHeadAttention's key masks below (plus [2B]: end then start
 * positions); unidirectional is causal after the past.
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
 * (bottom-right), local_window_size keeping the last local_window_size
 * keys (the query's own included), attention_bias added, and
 * softcap as in ONNX Attention.
 *
 * float16/bfloat16 run in float on staged copies; every operand is staged
 * into one scratch block (a kernel has few scratch buffers).
 */
#include <math.h>

#include "ops/nn/attention/attention.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

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

static keel_status bias_check(const keel_tensor *a, int64_t B, int64_t N, int64_t S, int64_t T) {
  char s1[96];
  if (!a) return KEEL_OK;
  bool ok = a->rank == 4 && (a->shape[0] == 1 || a->shape[0] == B) &&
            (a->shape[1] == 1 || a->shape[1] == N) && a->shape[2] == S && a->shape[3] == T &&
            keel_dtype_is_float(a->dtype);
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "attention_bias %s must be [B|1, N|1, %lld, %lld]",
                    keel_shape_str(a->rank, a->shape, s1, sizeof s1), (long long)S, (long long)T);
  return KEEL_OK;
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
  return bias_check(m->ab, m->B, m->N, m->S, m->T);
}

/* The additive mask [B, Nb, S, T] from a key mask mk and an
 * attention_bias ab (each may be NULL; Nb is ab's head count or 1). mk:
 * int32 key lengths [B], end then start positions [2B], or 1 = keep
 * [B, T] / [B, S, T]; masked keys get mask_filter_value. */
static keel_status key_mask(keel_kctx *k, const keel_tensor *mk, const keel_tensor *ab,
                            int64_t B, int64_t S, int64_t T, float *dst) {
  int64_t nb = ab ? ab->shape[1] : 1;
  float fv = keel_k_attr_f(k, "mask_filter_value", -10000.0f);
  int form = 0; /* 1: [B], 2: [2B], 3: [B, T], 4: [B, S, T] */
  if (mk) {
    if (mk->rank == 1 && mk->shape[0] == B) form = 1;
    else if (mk->rank == 1 && mk->shape[0] == 2 * B) form = 2;
    else if (mk->rank == 2 && mk->shape[0] == B && mk->shape[1] == T) form = 3;
    else if (mk->rank == 3 && mk->shape[0] == B && mk->shape[1] == S && mk->shape[2] == T) form = 4;
    if (mk->dtype != KEEL_INT32 || !form)
      return keel_err(KEEL_ERR_UNSUPPORTED,
                      "%s (com.microsoft, opset 1): the mask must be int32 [B], [2B], [B, T] "
                      "or [B, S, T]", k->node->op_type);
  }
  const int32_t *mv = mk ? mk->data : NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < nb; h++)
      for (int64_t i = 0; i < S; i++) {
        float *row = dst + ((b * nb + h) * S + i) * T;
        for (int64_t j = 0; j < T; j++) {
          bool keep = form == 0   ? true
                      : form == 1 ? j < mv[b]
                      : form == 2 ? j < mv[b] && j >= mv[B + b]
                      : form == 3 ? mv[b * T + j] > 0
                                  : mv[(b * S + i) * T + j] > 0;
          row[j] = keep ? 0.0f : fv;
        }
        if (!ab) continue;
        int64_t ab0 = ab->shape[0] == 1 ? 0 : b;
        size_t off = (size_t)(((ab0 * ab->shape[1] + h) * S + i) * T);
        for (int64_t j = 0; j < T; j++)
          row[j] += (float)keel_elem_get_f64(ab->dtype, ab->data, off + (size_t)j);
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

/* present_key/value [B, N, T, H(v)] in float: the past rows, then the
 * new keys and values (3-D or 4-D, bias added). */
static void mha_present(const mha *m, const float *kf, const float *vf, float *kp, float *vp) {
  for (int64_t b = 0; b < m->B; b++) {
    for (int64_t h = 0; h < m->N && m->pk; h++)
      for (int64_t t = 0; t < m->P; t++) {
        size_t src = (size_t)((b * m->N + h) * m->P + t);
        float *kr = kp + ((b * m->N + h) * m->T + t) * m->H;
        float *vr = vp + ((b * m->N + h) * m->T + t) * m->Hv;
        for (int64_t d = 0; d < m->H; d++)
          kr[d] = (float)keel_elem_get_f64(m->pk->dtype, m->pk->data, src * (size_t)m->H + (size_t)d);
        for (int64_t d = 0; d < m->Hv; d++)
          vr[d] = (float)keel_elem_get_f64(m->pv->dtype, m->pv->data, src * (size_t)m->Hv + (size_t)d);
      }
    rows_to_bnsh(kp, kf, m->kv4, b, m->N, m->L, 0, m->L, m->H, m->T, m->P);
    rows_to_bnsh(vp, vf, m->kv4, b, m->N, m->L, 0, m->L, m->Hv, m->T, m->P);
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
    mha_present(&m, kf, vf, kp, vp);
    s.k = bnsh(kp, m.N, m.T, m.H);
    s.v = bnsh(vp, m.N, m.T, m.Hv);
    from_f32(kp, pko);
    from_f32(vp, pvo);
  }
  s.y = yf, s.y_sb = m.S * m.N * m.Hv, s.y_sh = m.Hv, s.y_ss = m.N * m.Hv;
  if (nmask) {
    KEEL_TRY(key_mask(k, m.kpm, m.ab, m.B, m.S, m.T, mask));
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


/* ================================================ GroupQueryAttention */

typedef struct gqa {
  const keel_tensor *q, *k, *v, *pk, *pv, *seqlens, *total, *cos, *sin, *ab;
  int64_t B, S, N, Nkv, H, P, Tp, total_len, rd;
  bool packed;
} gqa;

static keel_status gqa_unsupported(keel_kctx *k) {
  static const char *const attrs[] = {"smooth_softmax", "qk_output", "sliding_window_cache",
                                      "kv_cache_bit_width"};
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
    if (keel_k_attr_i(k, attrs[i], 0))
      return keel_err(KEEL_ERR_UNSUPPORTED, "GroupQueryAttention (com.microsoft, opset 1): %s",
                      attrs[i]);
  for (int i = 11; i < 16; i++)
    if (keel_k_has_in(k, i))
      return keel_err(KEEL_ERR_UNSUPPORTED,
                      "GroupQueryAttention (com.microsoft, opset 1): input %d (head_sink, KV "
                      "quantization scales, QK norm weights)", i);
  if (!keel_k_attr_i(k, "causal", 1))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GroupQueryAttention (com.microsoft, opset 1): causal=0");
  return KEEL_OK;
}

static keel_status gqa_read(keel_kctx *k, gqa *g) {
  memset(g, 0, sizeof *g);
  const keel_tensor **t[11] = {&g->q, &g->k, &g->v, &g->pk, &g->pv, &g->seqlens, &g->total,
                               &g->cos, &g->sin, NULL, &g->ab};
  for (int i = 0; i < 11; i++)
    if (t[i]) KEEL_TRY(keel_k_in_opt(k, i, t[i]));
  KEEL_TRY(gqa_unsupported(k));
  if (!g->q || !g->seqlens || !g->total)
    return keel_err(KEEL_ERR_INVALID_MODEL, "query, seqlens_k and total_sequence_length are required");
  g->N = keel_k_attr_i(k, "num_heads", 0), g->Nkv = keel_k_attr_i(k, "kv_num_heads", 0);
  if (g->N <= 0 || g->Nkv <= 0 || g->N % g->Nkv)
    return keel_err(KEEL_ERR_INVALID_MODEL, "num_heads %lld must be a multiple of kv_num_heads %lld",
                    (long long)g->N, (long long)g->Nkv);
  KEEL_TRY(need_float(g->q, "GroupQueryAttention", "query"));
  char s1[96];
  const keel_tensor *q = g->q;
  g->packed = !g->k;
  if (q->rank != 3 || (g->packed != !g->v))
    return keel_err(KEEL_ERR_SHAPE, "query %s must be [B, S, hidden] with key and value both "
                    "given or both omitted", keel_shape_str(q->rank, q->shape, s1, sizeof s1));
  g->B = q->shape[0], g->S = q->shape[1];
  int64_t heads = g->packed ? g->N + 2 * g->Nkv : g->N;
  if (q->shape[2] % heads) goto bad;
  g->H = q->shape[2] / heads;
  if (!g->packed) {
    const keel_tensor *kv[2] = {g->k, g->v};
    for (int i = 0; i < 2; i++)
      if (kv[i]->rank != 3 || kv[i]->shape[0] != g->B || kv[i]->shape[1] != g->S ||
          kv[i]->shape[2] != g->Nkv * g->H || kv[i]->dtype != q->dtype)
        goto bad;
  }
  return KEEL_OK;
bad:
  return keel_err(KEEL_ERR_SHAPE, "query %s does not split into %lld + 2 x %lld heads",
                  keel_shape_str(q->rank, q->shape, s1, sizeof s1), (long long)g->N,
                  (long long)g->Nkv);
}

/* The cache lengths: past rows P, present rows Tp = max(P, total), and the
 * per-batch totals and pasts (into tot[], past[]). */
static keel_status gqa_lengths(gqa *g, int64_t *tot, int64_t *past) {
  char s1[96];
  if ((g->pk != NULL) != (g->pv != NULL))
    return keel_err(KEEL_ERR_INVALID_MODEL, "past_key and past_value go together");
  if (g->pk) {
    const keel_tensor *a = g->pk, *b = g->pv;
    bool ok = a->rank == 4 && b->rank == 4 && a->shape[0] == g->B && a->shape[1] == g->Nkv &&
              a->shape[3] == g->H && !memcmp(a->shape, b->shape, sizeof(int64_t) * 4) &&
              a->dtype == g->q->dtype && b->dtype == g->q->dtype;
    if (!ok)
      return keel_err(KEEL_ERR_SHAPE, "past_key %s must be [%lld, %lld, P, %lld] like past_value",
                      keel_shape_str(a->rank, a->shape, s1, sizeof s1), (long long)g->B,
                      (long long)g->Nkv, (long long)g->H);
    g->P = a->shape[2];
  }
  if (g->seqlens->dtype != KEEL_INT32 || keel_tensor_numel(g->seqlens) != g->B ||
      g->total->dtype != KEEL_INT32 || keel_tensor_numel(g->total) != 1)
    return keel_err(KEEL_ERR_SHAPE, "seqlens_k must be int32 [%lld], total_sequence_length an "
                    "int32 scalar", (long long)g->B);
  g->total_len = ((const int32_t *)g->total->data)[0];
  g->Tp = g->P > g->total_len ? g->P : g->total_len;
  const int32_t *sl = g->seqlens->data;
  for (int64_t b = 0; b < g->B; b++) {
    tot[b] = (int64_t)sl[b] + 1;
    past[b] = tot[b] > g->S ? tot[b] - g->S : 0;
    if (tot[b] < 1 || tot[b] > g->total_len || past[b] > g->P || past[b] + g->S > g->Tp)
      return keel_err(KEEL_ERR_SHAPE,
                      "seqlens_k[%lld] = %d does not fit %lld new tokens, %lld past rows and "
                      "total_sequence_length %lld", (long long)b, sl[b], (long long)g->S,
                      (long long)g->P, (long long)g->total_len);
  }
  return KEEL_OK;
}

/* v as the half type dt holds it (dt float: v). */
static float round_half(int dt, float v) {
  if (dt == KEEL_FLOAT16) return keel_f16_to_f32(keel_f32_to_f16(v));
  if (dt == KEEL_BFLOAT16) return keel_bf16_to_f32(keel_f32_to_bf16(v));
  return v;
}

/* Rotates the first rd values of each head of rows (b, s) of x (row
 * stride rs, heads at h*H) by the cache row of position past[b] + s. The
 * rotated values are rounded to the input type, as ONNX Runtime keeps
 * them in it. */
static void gqa_rotate(const gqa *g, float *x, int64_t heads, int64_t rs, const float *cs,
                       const float *sn, const int64_t *past, bool inter) {
  int dt = g->q->dtype;
  int64_t half = g->rd / 2;
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t s = 0; s < g->S; s++) {
      const float *c = cs + (past[b] + s) * half, *n = sn + (past[b] + s) * half;
      for (int64_t h = 0; h < heads; h++) {
        float *r = x + (b * g->S + s) * rs + h * g->H;
        for (int64_t i = 0; i < half; i++) {
          int64_t i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + half;
          float x1 = r[i1], x2 = r[i2];
          r[i1] = round_half(dt, c[i] * x1 - n[i] * x2);
          r[i2] = round_half(dt, n[i] * x1 + c[i] * x2);
        }
      }
    }
}

static keel_status gqa_rotary_check(gqa *g, const int64_t *past) {
  char s1[96];
  const keel_tensor *c = g->cos, *s = g->sin;
  if (!c || !s) return keel_err(KEEL_ERR_INVALID_MODEL, "do_rotary needs cos_cache and sin_cache");
  bool ok = c->rank == 2 && s->rank == 2 && !memcmp(c->shape, s->shape, sizeof(int64_t) * 2) &&
            2 * c->shape[1] <= g->H && c->shape[1] > 0 && c->dtype == g->q->dtype &&
            s->dtype == g->q->dtype;
  for (int64_t b = 0; ok && b < g->B; b++) ok = past[b] + g->S <= c->shape[0];
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "cos_cache %s must be [positions, <= %lld] covering every "
                    "position", keel_shape_str(c->rank, c->shape, s1, sizeof s1),
                    (long long)(g->H / 2));
  g->rd = 2 * c->shape[1];
  return KEEL_OK;
}

/* The present buffers [B, Nkv, Tp, H] as float: past rows, new rows,
 * zeros after. kx/vx are the new keys/values (row stride rs). */
static void gqa_present(const gqa *g, float *kp, float *vp, const float *pkf, const float *pvf,
                        const float *kx, const float *vx, int64_t rs, const int64_t *past) {
  int64_t H = g->H;
  memset(kp, 0, sizeof(float) * (size_t)(g->B * g->Nkv * g->Tp * H));
  memset(vp, 0, sizeof(float) * (size_t)(g->B * g->Nkv * g->Tp * H));
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t h = 0; h < g->Nkv; h++) {
      size_t d = (size_t)((b * g->Nkv + h) * g->Tp) * (size_t)H;
      size_t sp = (size_t)((b * g->Nkv + h) * g->P) * (size_t)H;
      if (past[b]) {
        memcpy(kp + d, pkf + sp, sizeof(float) * (size_t)(past[b] * H));
        memcpy(vp + d, pvf + sp, sizeof(float) * (size_t)(past[b] * H));
      }
      for (int64_t s = 0; s < g->S; s++) {
        size_t row = d + (size_t)((past[b] + s) * H);
        memcpy(kp + row, kx + (b * g->S + s) * rs + h * H, sizeof(float) * (size_t)H);
        memcpy(vp + row, vx + (b * g->S + s) * rs + h * H, sizeof(float) * (size_t)H);
      }
    }
}

static keel_status gqa_bias(const gqa *g, keel_sdpa *s) {
  const keel_tensor *a = g->ab;
  char s1[96];
  if (!a) return KEEL_OK;
  bool ok = a->rank == 4 && (a->shape[0] == 1 || a->shape[0] == g->B) &&
            (a->shape[1] == 1 || a->shape[1] == g->N) && a->shape[2] == g->S &&
            a->shape[3] >= 1 && a->shape[3] <= g->Tp && a->dtype == KEEL_FLOAT;
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "attention_bias %s must be float [B|1, N|1, %lld, total]",
                    keel_shape_str(a->rank, a->shape, s1, sizeof s1), (long long)g->S);
  int64_t T = a->shape[3];
  s->mask = (keel_sdpa_t){a->data, a->shape[0] == 1 ? 0 : a->shape[1] * g->S * T,
                          a->shape[1] == 1 ? 0 : g->S * T, T};
  s->mask_len = T;
  return KEEL_OK;
}

static keel_status op_gqa(keel_kctx *k) {
  gqa g;
  KEEL_TRY(gqa_read(k, &g));
  void *ip;
  KEEL_TRY(keel_k_scratch_n(k, 2 * g.B + 1, sizeof(int64_t), &ip));
  int64_t *tot = ip, *past = tot + g.B;
  KEEL_TRY(gqa_lengths(&g, tot, past));
  bool rot = keel_k_attr_i(k, "do_rotary", 0) != 0;
  if (rot) KEEL_TRY(gqa_rotary_check(&g, past));
  int64_t nq = keel_tensor_numel(g.q), nk = g.packed ? 0 : keel_tensor_numel(g.k);
  int64_t npast = g.B * g.Nkv * g.P * g.H, npres = g.B * g.Nkv * g.Tp * g.H;
  int64_t ncache = rot ? 2 * keel_tensor_numel(g.cos) : 0, ny = g.B * g.S * g.N * g.H;
  keel_tensor *y, *pko, *pvo;
  KEEL_TRY(keel_k_out(k, 0, g.q->dtype, 3, (int64_t[]){g.B, g.S, g.N * g.H}, &y));
  KEEL_TRY(keel_k_out(k, 1, g.q->dtype, 4, (int64_t[]){g.B, g.Nkv, g.Tp, g.H}, &pko));
  KEEL_TRY(keel_k_out(k, 2, g.q->dtype, 4, (int64_t[]){g.B, g.Nkv, g.Tp, g.H}, &pvo));
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, nq + 2 * nk + 2 * npast + 2 * npres + ncache + ny, sizeof(float), &p));
  carve c = {p};
  float *qf = take(&c, nq), *kf = take(&c, nk), *vf = take(&c, nk);
  float *pkf = take(&c, npast), *pvf = take(&c, npast), *kp = take(&c, npres),
        *vp = take(&c, npres), *yf = take(&c, ny);
  to_f32(g.q, qf);
  if (!g.packed) to_f32(g.k, kf), to_f32(g.v, vf);
  if (g.pk) to_f32(g.pk, pkf), to_f32(g.pv, pvf);
  int64_t rq = g.packed ? (g.N + 2 * g.Nkv) * g.H : g.N * g.H, rk = g.packed ? rq : g.Nkv * g.H;
  float *kx = g.packed ? qf + g.N * g.H : kf, *vx = g.packed ? qf + (g.N + g.Nkv) * g.H : vf;
  if (rot) {
    float *cs = take(&c, ncache / 2), *sn = take(&c, ncache / 2);
    to_f32(g.cos, cs), to_f32(g.sin, sn);
    bool inter = keel_k_attr_i(k, "rotary_interleaved", 0) != 0;
    gqa_rotate(&g, qf, g.N, rq, cs, sn, past, inter);
    gqa_rotate(&g, kx, g.Nkv, rk, cs, sn, past, inter);
  }
  gqa_present(&g, kp, vp, pkf, pvf, kx, vx, rk, past);
  keel_sdpa s;
  memset(&s, 0, sizeof s);
  s.B = g.B, s.Hq = g.N, s.Hkv = g.Nkv, s.Sq = g.S, s.Skv = g.Tp, s.Dk = g.H, s.Dv = g.H;
  s.q = (keel_sdpa_t){qf, g.S * rq, g.H, rq};
  s.k = bnsh(kp, g.Nkv, g.Tp, g.H);
  s.v = bnsh(vp, g.Nkv, g.Tp, g.H);
  s.y = yf, s.y_sb = g.S * g.N * g.H, s.y_sh = g.H, s.y_ss = g.N * g.H;
  KEEL_TRY(gqa_bias(&g, &s));
  const keel_attr *sc = keel_k_attr(k, "scale");
  s.scale = sc && keel_k_attr_f(k, "scale", 0) != 0 ? keel_k_attr_f(k, "scale", 1)
                                                    : 1.0f / sqrtf((float)g.H);
  s.softcap = keel_k_attr_f(k, "softcap", 0);
  s.causal = true;
  int64_t w = keel_k_attr_i(k, "local_window_size", -1);
  s.left = w > 0 ? w - 1 : -1, s.right = -1; /* the window holds w keys */
  s.offset = past, s.kv_len = tot;
  KEEL_TRY(keel_sdpa_f32(k, &s));
  from_f32(yf, y);
  from_f32(kp, pko);
  from_f32(vp, pvo);
  return KEEL_OK;
}

/* =========================================== Attention (com.microsoft) */

typedef struct cm {
  const keel_tensor *x, *w, *bias, *mask, *past, *ab;
  int64_t B, S, Din, N, Dq, Dv, H, Hv, P, T;
} cm;

static keel_status cm_read(keel_kctx *k, cm *a) {
  memset(a, 0, sizeof *a);
  const keel_tensor **t[6] = {&a->x, &a->w, &a->bias, &a->mask, &a->past, &a->ab};
  for (int i = 0; i < 6; i++) KEEL_TRY(keel_k_in_opt(k, i, t[i]));
  if (keel_k_has_in(k, 6) || keel_k_attr_i(k, "do_rotary", 0) ||
      keel_k_attr_i(k, "past_present_share_buffer", 0))
    return keel_err(KEEL_ERR_UNSUPPORTED, "Attention (com.microsoft, opset 1): do_rotary, "
                    "past_present_share_buffer or past_sequence_length");
  if (!a->x || !a->w) return keel_err(KEEL_ERR_INVALID_MODEL, "input and weights are required");
  KEEL_TRY(need_float(a->x, "Attention", "input"));
  char s1[96], s2[96];
  a->N = keel_k_attr_i(k, "num_heads", 0);
  int n;
  const int64_t *hs = keel_k_attr_ints(k, "qkv_hidden_sizes", &n);
  bool ok = a->N > 0 && a->x->rank == 3 && a->w->rank == 2 && a->w->shape[0] == a->x->shape[2] &&
            a->w->dtype == a->x->dtype && (!hs || n == 3);
  if (ok) {
    a->B = a->x->shape[0], a->S = a->x->shape[1], a->Din = a->x->shape[2];
    int64_t wc = a->w->shape[1];
    a->Dq = hs ? hs[0] : wc / 3, a->Dv = hs ? hs[2] : wc / 3;
    ok = (hs ? hs[1] == hs[0] && hs[0] + hs[1] + hs[2] == wc : wc % 3 == 0) && a->Dq > 0 &&
         a->Dv > 0 && a->Dq % a->N == 0 && a->Dv % a->N == 0;
  }
  if (!ok)
    return keel_err(KEEL_ERR_SHAPE, "input %s and weights %s do not fit num_heads %lld "
                    "(and qkv_hidden_sizes)", keel_shape_str(a->x->rank, a->x->shape, s1, sizeof s1),
                    keel_shape_str(a->w->rank, a->w->shape, s2, sizeof s2), (long long)a->N);
  a->H = a->Dq / a->N, a->Hv = a->Dv / a->N;
  int64_t wc = a->w->shape[1];
  if (a->bias && (a->bias->rank != 1 || a->bias->shape[0] != wc || a->bias->dtype != a->x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "bias must be [%lld]", (long long)wc);
  if (a->past) {
    const keel_tensor *p = a->past;
    ok = p->rank == 5 && p->shape[0] == 2 && p->shape[1] == a->B && p->shape[2] == a->N &&
         p->shape[4] == a->H && a->H == a->Hv && p->dtype == a->x->dtype;
    if (!ok)
      return keel_err(KEEL_ERR_SHAPE, "past %s must be [2, %lld, %lld, P, %lld] (and V's head "
                      "size Q's)", keel_shape_str(p->rank, p->shape, s1, sizeof s1),
                      (long long)a->B, (long long)a->N, (long long)a->H);
    a->P = p->shape[3];
  }
  a->T = a->P + a->S;
  return bias_check(a->ab, a->B, a->N, a->S, a->T);
}

/* qkv [B*S, Wc] = x W + bias, in float. */
static void cm_project(const cm *a, float *xf, float *wf, float *bf, float *qkv) {
  int64_t wc = a->w->shape[1], rows = a->B * a->S;
  to_f32(a->x, xf);
  to_f32(a->w, wf);
  keel_gemm_f32(NULL, false, false, rows, wc, a->Din, 1.0f, xf, a->Din, wf, wc, 0, qkv, wc);
  if (!a->bias) return;
  to_f32(a->bias, bf);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < wc; j++) qkv[r * wc + j] += bf[j];
}

/* present [2, B, N, T, H] in float (kp then vp): the past rows, then the
 * projected keys and values. */
static void cm_present(const cm *a, const float *qkv, float *kp, float *vp) {
  int64_t wc = a->w->shape[1], half = a->B * a->N * a->T * a->H;
  for (int64_t b = 0; b < a->B; b++)
    for (int64_t h = 0; h < a->N; h++) {
      for (int64_t t = 0; t < a->P; t++)
        for (int64_t d = 0; d < a->H; d++)
          for (int kv = 0; kv < 2; kv++) {
            size_t src = (size_t)((((kv * a->B + b) * a->N + h) * a->P + t) * a->H + d);
            kp[kv * half + ((b * a->N + h) * a->T + t) * a->H + d] =
                (float)keel_elem_get_f64(a->past->dtype, a->past->data, src);
          }
      for (int64_t t = 0; t < a->S; t++) {
        const float *r = qkv + (b * a->S + t) * wc + h * a->H;
        size_t row = (size_t)(((b * a->N + h) * a->T + a->P + t) * a->H);
        memcpy(kp + row, r + a->Dq, sizeof(float) * (size_t)a->H);
        memcpy(vp + row, r + 2 * a->Dq, sizeof(float) * (size_t)a->H);
      }
    }
}

static keel_status op_attention_cm(keel_kctx *k) {
  cm a;
  KEEL_TRY(cm_read(k, &a));
  int64_t wc = a.w->shape[1];
  KEEL_TRY(keel_blas_fits(wc > a.Din ? wc : a.Din));
  keel_tensor *y, *pres = NULL;
  KEEL_TRY(keel_k_out(k, 0, a.x->dtype, 3, (int64_t[]){a.B, a.S, a.Dv}, &y));
  bool want = a.past || keel_k_has_out(k, 1);
  if (want && a.H != a.Hv)
    return keel_err(KEEL_ERR_SHAPE, "present needs V's head size (%lld) to be Q's (%lld)",
                    (long long)a.Hv, (long long)a.H);
  if (want)
    KEEL_TRY(keel_k_out(k, 1, a.x->dtype, 5, (int64_t[]){2, a.B, a.N, a.T, a.H}, &pres));
  int64_t nx = keel_tensor_numel(a.x), nw = keel_tensor_numel(a.w), rows = a.B * a.S;
  int64_t npres = want ? 2 * a.B * a.N * a.T * a.H : 0;
  int64_t nmask = (a.mask || a.ab) ? a.B * (a.ab ? a.ab->shape[1] : 1) * a.S * a.T : 0;
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, nx + nw + wc + rows * wc + npres + nmask + rows * a.Dv,
                            sizeof(float), &p));
  carve c = {p};
  float *xf = take(&c, nx), *wf = take(&c, nw), *bf = take(&c, wc), *qkv = take(&c, rows * wc);
  float *pf = take(&c, npres), *mask = take(&c, nmask), *yf = take(&c, rows * a.Dv);
  cm_project(&a, xf, wf, bf, qkv);
  keel_sdpa s;
  memset(&s, 0, sizeof s);
  s.B = a.B, s.Hq = a.N, s.Hkv = a.N, s.Sq = a.S, s.Skv = a.T, s.Dk = a.H, s.Dv = a.Hv;
  s.q = (keel_sdpa_t){qkv, a.S * wc, a.H, wc};
  s.k = (keel_sdpa_t){qkv + a.Dq, a.S * wc, a.H, wc};
  s.v = (keel_sdpa_t){qkv + 2 * a.Dq, a.S * wc, a.Hv, wc};
  if (want) {
    int64_t half = a.B * a.N * a.T * a.H;
    cm_present(&a, qkv, pf, pf + half);
    s.k = bnsh(pf, a.N, a.T, a.H);
    s.v = bnsh(pf + half, a.N, a.T, a.H);
    from_f32(pf, pres);
  }
  if (nmask) {
    KEEL_TRY(key_mask(k, a.mask, a.ab, a.B, a.S, a.T, mask));
    int64_t nb = a.ab ? a.ab->shape[1] : 1;
    s.mask = (keel_sdpa_t){mask, nb * a.S * a.T, nb == 1 ? 0 : a.S * a.T, a.T};
    s.mask_len = a.T;
  }
  s.y = yf, s.y_sb = a.S * a.Dv, s.y_sh = a.Hv, s.y_ss = a.Dv;
  const keel_attr *sc = keel_k_attr(k, "scale");
  s.scale = sc ? keel_k_attr_f(k, "scale", 1) : 1.0f / sqrtf((float)a.H);
  s.causal = keel_k_attr_i(k, "unidirectional", 0) != 0;
  s.left = s.right = -1;
  if (a.P) {
    void *op;
    KEEL_TRY(keel_k_scratch_n(k, a.B, sizeof(int64_t), &op));
    int64_t *o = op;
    for (int64_t b = 0; b < a.B; b++) o[b] = a.P;
    s.offset = o;
  }
  KEEL_TRY(keel_sdpa_f32(k, &s));
  from_f32(yf, y);
  return KEEL_OK;
}

const keel_opdef keel_ops_attention_ms[] = {
    {"com.microsoft", "MultiHeadAttention", 1, KEEL_OPSET_MAX, op_mha, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {"com.microsoft", "Attention", 1, KEEL_OPSET_MAX, op_attention_cm, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {"com.microsoft", "GroupQueryAttention", 1, KEEL_OPSET_MAX, op_gqa, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {0},
};
