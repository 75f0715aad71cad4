/* linear_attention.c: the recurrent-state ops of linear-attention and
 * state-space models (Gated DeltaNet, Mamba), opset 27: LinearAttention
 * and CausalConvWithState.
 *
 * LinearAttention keeps one d_k x d_v state per kv head and runs the
 * recurrence token by token (the chunk_size attribute is a tuning hint
 * with no effect on results): optionally decay the state by exp(g_t),
 * optionally replace v_t by beta_t (v_t - S^T k_t) (the delta rule), add
 * k_t v_t^T, and read o_t = scale q_t^T S for each query head of the
 * group. Everything runs in float, as the spec's reference does, and
 * rounds once into the outputs.
 *
 * CausalConvWithState is a depthwise 1-D convolution over the past state
 * followed by the input (k - 1 positions of carry), with an optional
 * fused SiLU; the present state is the last k - 1 positions. The
 * convolution result is rounded to the input type before the activation,
 * as the reference does.
 */
#include <math.h>

#include "ops/common/bcast.h"

/* t as float: its data, or a staged copy. */
static keel_status f32_of(keel_kctx *k, const keel_tensor *t, const float **p) {
  if (t->dtype == KEEL_FLOAT) {
    *p = t->data;
    return KEEL_OK;
  }
  keel_tensor f;
  KEEL_TRY(keel_k_to_f32(k, t, &f));
  *p = f.data;
  return KEEL_OK;
}

/* t (float or a half) as float: its data, or converted at *cur. */
static const float *stage(const keel_tensor *t, float **cur) {
  if (t->dtype == KEEL_FLOAT) return t->data;
  float *d = *cur;
  int64_t n = keel_tensor_numel(t);
  const uint16_t *h = t->data;
  if (t->dtype == KEEL_FLOAT16)
    for (int64_t i = 0; i < n; i++) d[i] = keel_f16_to_f32(h[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = keel_bf16_to_f32(h[i]);
  *cur += n;
  return d;
}

/* A float result into output tensor o (float: already there). */
static void f32_put(const float *src, keel_tensor *o) {
  if (o->dtype != KEEL_FLOAT) keel_f32_store(src, o);
}

static keel_status float_only(const keel_tensor *t, const char *op, const char *what) {
  if (t->dtype == KEEL_FLOAT || keel_is_half(t->dtype)) return KEEL_OK;
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s of type %s (float, float16, bfloat16 only)", op,
                  what, keel_dtype_name((keel_dtype)t->dtype));
}

/* =================================================== LinearAttention */

typedef struct lin {
  int64_t B, T, Hq, Hkv, Dk, Dv;
  bool gated, delta;
  int64_t g_last, b_last;          /* decay's / beta's last dim            */
  float scale;
} lin;

static keel_status lin_rule(keel_kctx *k, lin *l) {
  const char *r = keel_k_attr_s(k, "update_rule", "gated_delta");
  if (!strcmp(r, "linear")) l->gated = false, l->delta = false;
  else if (!strcmp(r, "gated")) l->gated = true, l->delta = false;
  else if (!strcmp(r, "delta")) l->gated = false, l->delta = true;
  else if (!strcmp(r, "gated_delta")) l->gated = true, l->delta = true;
  else
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "update_rule '%s' is not linear, gated, delta or gated_delta", r);
  if (l->gated != keel_k_has_in(k, 4) || l->delta != keel_k_has_in(k, 5))
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "update_rule '%s' %s decay and %s beta", r, l->gated ? "needs" : "forbids",
                    l->delta ? "needs" : "forbids");
  return KEEL_OK;
}

static keel_status lin_shapes(keel_kctx *k, lin *l, const keel_tensor *const *t) {
  char s1[96];
  l->Hq = keel_k_attr_i(k, "q_num_heads", 0);
  l->Hkv = keel_k_attr_i(k, "kv_num_heads", 0);
  if (l->Hq <= 0 || l->Hkv <= 0 || l->Hq % l->Hkv)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "q_num_heads (%lld) must be a positive multiple of kv_num_heads (%lld)",
                    (long long)l->Hq, (long long)l->Hkv);
  for (int i = 0; i < 3; i++)
    if (t[i]->rank != 3 || t[i]->shape[0] != t[0]->shape[0] || t[i]->shape[1] != t[0]->shape[1] ||
        t[i]->shape[2] % (i ? l->Hkv : l->Hq) || t[i]->dtype != t[0]->dtype)
      return keel_err(KEEL_ERR_SHAPE, "input %d %s must be [B, T, heads*D] like query", i,
                      keel_shape_str(t[i]->rank, t[i]->shape, s1, sizeof s1));
  l->B = t[0]->shape[0], l->T = t[0]->shape[1];
  l->Dk = t[0]->shape[2] / l->Hq, l->Dv = t[2]->shape[2] / l->Hkv;
  if (t[1]->shape[2] / l->Hkv != l->Dk)
    return keel_err(KEEL_ERR_SHAPE, "key's head size %lld differs from query's %lld",
                    (long long)(t[1]->shape[2] / l->Hkv), (long long)l->Dk);
  const keel_tensor *ps = t[3], *g = t[4], *b = t[5];
  if (ps && (ps->rank != 4 || ps->shape[0] != l->B || ps->shape[1] != l->Hkv ||
             ps->shape[2] != l->Dk || ps->shape[3] != l->Dv))
    return keel_err(KEEL_ERR_SHAPE, "past_state %s must be [%lld, %lld, %lld, %lld]",
                    keel_shape_str(ps->rank, ps->shape, s1, sizeof s1), (long long)l->B,
                    (long long)l->Hkv, (long long)l->Dk, (long long)l->Dv);
  const keel_tensor *gb[2] = {g, b};
  for (int i = 0; i < 2; i++) {
    if (!gb[i]) continue;
    int64_t last = gb[i]->rank == 3 ? gb[i]->shape[2] : -1;
    bool ok = gb[i]->rank == 3 && gb[i]->shape[0] == l->B && gb[i]->shape[1] == l->T &&
              (i == 0 ? (last == l->Hkv || last == l->Hkv * l->Dk) : (last == l->Hkv || last == 1));
    if (!ok)
      return keel_err(KEEL_ERR_SHAPE, "%s %s must be [%lld, %lld, %s]", i ? "beta" : "decay",
                      keel_shape_str(gb[i]->rank, gb[i]->shape, s1, sizeof s1), (long long)l->B,
                      (long long)l->T, i ? "kv_num_heads or 1" : "kv_num_heads (* d_k)");
    if (i == 0) l->g_last = last;
    else l->b_last = last;
  }
  float sc = keel_k_attr_f(k, "scale", 0);
  l->scale = sc != 0 ? sc : 1.0f / sqrtf((float)l->Dk);
  return KEEL_OK;
}

/* One token t of batch b, kv head h: update S (Dk x Dv) and write the
 * outputs of the group's query heads. */
static void lin_step(const lin *l, float *S, int64_t b, int64_t t, int64_t h, const float *q,
                     const float *kk, const float *v, const float *g, const float *beta, float *o,
                     float *vt) {
  int64_t Dk = l->Dk, Dv = l->Dv, bt = b * l->T + t;
  const float *kr = kk + (bt * l->Hkv + h) * Dk, *vr = v + (bt * l->Hkv + h) * Dv;
  if (l->gated) {
    const float *gr = g + bt * l->g_last;
    for (int64_t d = 0; d < Dk; d++) {
      float e = expf(l->g_last == l->Hkv ? gr[h] : gr[h * Dk + d]);
      for (int64_t m = 0; m < Dv; m++) S[d * Dv + m] *= e;
    }
  }
  memcpy(vt, vr, (size_t)Dv * sizeof(float));
  if (l->delta) {
    float be = beta[bt * l->b_last + (l->b_last == 1 ? 0 : h)];
    for (int64_t m = 0; m < Dv; m++) vt[Dv + m] = 0;
    for (int64_t d = 0; d < Dk; d++)
      for (int64_t m = 0; m < Dv; m++) vt[Dv + m] += S[d * Dv + m] * kr[d];
    for (int64_t m = 0; m < Dv; m++) vt[m] = be * (vt[m] - vt[Dv + m]);
  }
  for (int64_t d = 0; d < Dk; d++)
    for (int64_t m = 0; m < Dv; m++) S[d * Dv + m] += kr[d] * vt[m];
  int64_t grp = l->Hq / l->Hkv;
  for (int64_t j = 0; j < grp; j++) {
    int64_t hq = h * grp + j;
    const float *qr = q + (bt * l->Hq + hq) * Dk;
    float *orow = o + (bt * l->Hq + hq) * Dv;
    for (int64_t m = 0; m < Dv; m++) orow[m] = 0;
    for (int64_t d = 0; d < Dk; d++)
      for (int64_t m = 0; m < Dv; m++) orow[m] += qr[d] * S[d * Dv + m];
    for (int64_t m = 0; m < Dv; m++) orow[m] *= l->scale;
  }
}

static keel_status op_linear_attention(keel_kctx *k) {
  const keel_tensor *t[6];
  for (int i = 0; i < 3; i++) KEEL_TRY(keel_k_in(k, i, &t[i]));
  for (int i = 3; i < 6; i++) KEEL_TRY(keel_k_in_opt(k, i, &t[i]));
  for (int i = 0; i < 6; i++)
    if (t[i]) KEEL_TRY(float_only(t[i], "LinearAttention", "an input"));
  lin l;
  memset(&l, 0, sizeof l);
  KEEL_TRY(lin_rule(k, &l));
  KEEL_TRY(lin_shapes(k, &l, t));
  keel_tensor *out, *st;
  KEEL_TRY(keel_k_out(k, 0, t[0]->dtype, 3, (int64_t[]){l.B, l.T, l.Hq * l.Dv}, &out));
  KEEL_TRY(keel_k_out(k, 1, t[3] ? t[3]->dtype : t[0]->dtype, 4,
                      (int64_t[]){l.B, l.Hkv, l.Dk, l.Dv}, &st));
  /* one scratch block: staged inputs, float outputs, the v_t row */
  int64_t need = 2 * l.Dv + 1;
  for (int i = 0; i < 6; i++)
    if (t[i] && t[i]->dtype != KEEL_FLOAT) need += keel_tensor_numel(t[i]);
  if (out->dtype != KEEL_FLOAT) need += keel_tensor_numel(out);
  if (st->dtype != KEEL_FLOAT) need += keel_tensor_numel(st);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, need, sizeof(float), &p));
  float *cur = p, *vt = cur;
  cur += 2 * l.Dv + 1;
  const float *f[6] = {0};
  for (int i = 0; i < 6; i++)
    if (t[i]) f[i] = stage(t[i], &cur);
  float *o = out->data, *S = st->data;
  if (out->dtype != KEEL_FLOAT) o = cur, cur += keel_tensor_numel(out);
  if (st->dtype != KEEL_FLOAT) S = cur;
  int64_t ns = keel_tensor_numel(st), no = keel_tensor_numel(out);
  if (ns == 0 || no == 0) { /* no state (d_k or d_v is 0) or no output: all zeros */
    if (no) memset(o, 0, (size_t)no * sizeof(float));
    f32_put(o, out);
    return KEEL_OK;
  }
  if (f[3]) memcpy(S, f[3], (size_t)ns * sizeof(float));
  else memset(S, 0, (size_t)ns * sizeof(float));
  for (int64_t b = 0; b < l.B; b++)
    for (int64_t h = 0; h < l.Hkv; h++) {
      float *Sh = S + (b * l.Hkv + h) * l.Dk * l.Dv;
      for (int64_t tt = 0; tt < l.T; tt++)
        lin_step(&l, Sh, b, tt, h, f[0], f[1], f[2], f[4], f[5], o, vt);
    }
  f32_put(o, out);
  f32_put(S, st);
  return KEEL_OK;
}

/* =============================================== CausalConvWithState */

static keel_status ccs_check(const keel_tensor *x, const keel_tensor *w, const keel_tensor *b,
                             const keel_tensor *ps) {
  char s1[96], s2[96];
  if (x->rank != 3 || w->rank != 3 || w->shape[0] != x->shape[1] || w->shape[1] != 1 ||
      w->shape[2] < 1 || w->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "input %s must be [B, C, L] and weight %s [C, 1, k]",
                    keel_shape_str(x->rank, x->shape, s1, sizeof s1),
                    keel_shape_str(w->rank, w->shape, s2, sizeof s2));
  if (b && (b->rank != 1 || b->shape[0] != x->shape[1] || b->dtype != x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "bias %s must be [%lld]",
                    keel_shape_str(b->rank, b->shape, s1, sizeof s1), (long long)x->shape[1]);
  if (ps && (ps->rank != 3 || ps->shape[0] != x->shape[0] || ps->shape[1] != x->shape[1] ||
             ps->shape[2] != w->shape[2] - 1 || ps->dtype != x->dtype))
    return keel_err(KEEL_ERR_SHAPE, "past_state %s must be [%lld, %lld, %lld]",
                    keel_shape_str(ps->rank, ps->shape, s1, sizeof s1), (long long)x->shape[0],
                    (long long)x->shape[1], (long long)(w->shape[2] - 1));
  return KEEL_OK;
}

/* p + off, or NULL for the NULL data of an empty tensor. */
static const float *at(const float *p, int64_t off) { return p ? p + off : NULL; }

/* Rounds v to what dtype holds (identity for float). */
static float round_to(int dtype, float v) {
  if (dtype == KEEL_FLOAT16) return keel_f16_to_f32(keel_f32_to_f16(v));
  if (dtype == KEEL_BFLOAT16) return keel_bf16_to_f32(keel_f32_to_bf16(v));
  return v;
}

/* One (b, c) row: pad = past (k-1) then x (L), y = conv, state = last
 * k-1 of pad. */
static void ccs_row(const float *past, const float *x, const float *w, float bias, int64_t K,
                    int64_t L, bool silu, int dtype, float *pad, float *y, float *state) {
  size_t carry = (size_t)(K - 1) * sizeof(float); /* 0 for k == 1: state may be NULL */
  if (carry && past) memcpy(pad, past, carry);
  else if (carry) memset(pad, 0, carry);
  if (L) memcpy(pad + K - 1, x, (size_t)L * sizeof(float));
  for (int64_t i = 0; i < L; i++) {
    float acc = bias;
    for (int64_t j = 0; j < K; j++) acc += w[j] * pad[i + j];
    y[i] = acc;
  }
  if (silu)
    for (int64_t i = 0; i < L; i++) {
      float c = round_to(dtype, y[i]);
      y[i] = c / (1.0f + expf(-c));
    }
  if (carry) memcpy(state, pad + L, carry);
}

static keel_status op_causal_conv_with_state(keel_kctx *k) {
  const keel_tensor *x, *w, *b, *ps;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &w));
  KEEL_TRY(keel_k_in_opt(k, 2, &b));
  KEEL_TRY(keel_k_in_opt(k, 3, &ps));
  KEEL_TRY(float_only(x, "CausalConvWithState", "input"));
  KEEL_TRY(ccs_check(x, w, b, ps));
  const char *act = keel_k_attr_s(k, "activation", "none");
  bool silu = !strcmp(act, "silu") || !strcmp(act, "swish");
  if (!silu && strcmp(act, "none"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "activation '%s' is not none, silu or swish", act);
  int64_t B = x->shape[0], C = x->shape[1], L = x->shape[2], K = w->shape[2];
  keel_tensor *y, *st;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, 3, x->shape, &y));
  KEEL_TRY(keel_k_out(k, 1, x->dtype, 3, (int64_t[]){B, C, K - 1}, &st));
  const float *xf, *wf, *bf = NULL, *pf = NULL;
  KEEL_TRY(f32_of(k, x, &xf));
  KEEL_TRY(f32_of(k, w, &wf));
  if (b) KEEL_TRY(f32_of(k, b, &bf));
  if (ps) KEEL_TRY(f32_of(k, ps, &pf));
  float *yf = y->data, *sf = st->data, *pad;
  void *p;
  if (x->dtype != KEEL_FLOAT) {
    KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(y) + keel_tensor_numel(st), 4, &p));
    yf = p, sf = yf + keel_tensor_numel(y);
  }
  KEEL_TRY(keel_k_scratch_n(k, K + L, sizeof(float), &p));
  pad = p;
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t c = 0; c < C; c++) {
      int64_t r = bb * C + c;
      ccs_row(at(pf, r * (K - 1)), at(xf, r * L), wf + c * K, bf ? bf[c] : 0.0f, K, L, silu,
              x->dtype, pad, (float *)at(yf, r * L), (float *)at(sf, r * (K - 1)));
    }
  f32_put(yf, y);
  f32_put(sf, st);
  return KEEL_OK;
}

const keel_opdef keel_ops_linear_attention[] = {
    {"", "LinearAttention", 27, KEEL_OPSET_MAX, op_linear_attention, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {"", "CausalConvWithState", 27, KEEL_OPSET_MAX, op_causal_conv_with_state, 0,
     KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16)},
    {0},
};
