/* act512.h: the fused activations (activation.h) that keel's AVX-512
 * conv kernels apply to a vector as they store it (conv_stem.c,
 * conv_pw.c, conv_dw.c, conv_wg.c, conv_stream.c), computed as
 * activation.c's scalar forms compute them (max(0, x) and min(b, x) keep a
 * NaN x), SiLU as keel_vm_silu_fast computes it (vmath.c uses
 * keel_silu512 for its AVX-512 loop). Include only where immintrin.h
 * and a target("avx512f") function are available (x86-64, gcc or clang).
 */
#ifndef KEEL_ACT512_H
#define KEEL_ACT512_H

#include <immintrin.h>

#include "ops/common/activation.h"

/* The Cephes polynomial of exp(r) for |r| <= ln2 / 2, 1 + r + r^2 P(r)
 * (vmath.c's SILU_SCALAR and EXP_NEG_LOOP use it too), 16 lanes. */
__attribute__((target("avx512f"))) static inline __m512 keel_exp_poly512(__m512 r) {
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  return _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

/* x * sigmoid(x) = x / (1 + exp(-x)): exp by range reduction to ln2 / 2
 * and the polynomial, the quotient by a reciprocal estimate and one Newton
 * step (keel_vm_silu_fast's form; a NaN x stays NaN). */
__attribute__((target("avx512f"))) static inline __m512 keel_silu512(__m512 v) {
  const __m512 lo = _mm512_set1_ps(-87.0f), hi = _mm512_set1_ps(88.0f);
  const __m512 l2e = _mm512_set1_ps(1.44269504088896341f), c1 = _mm512_set1_ps(0.693359375f);
  const __m512 c2 = _mm512_set1_ps(-2.12194440e-4f), one = _mm512_set1_ps(1.0f);
  __m512 c = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_sub_ps(_mm512_setzero_ps(), v)));
  __m512 m = _mm512_roundscale_ps(_mm512_mul_ps(c, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(m, c2, _mm512_fnmadd_ps(m, c1, c));
  __m512 e = _mm512_scalef_ps(keel_exp_poly512(r), m);
  __m512 d = _mm512_add_ps(one, e), rc = _mm512_rcp14_ps(d);
  rc = _mm512_mul_ps(rc, _mm512_fnmadd_ps(d, rc, _mm512_set1_ps(2.0f)));
  return _mm512_mul_ps(v, rc);
}

/* True for the kinds keel_act512 computes; the others go through
 * keel_act_apply_fast_f32 on the stored rows. */
static inline bool keel_act512_inline(keel_act_kind k) {
  return k == KEEL_ACT_NONE || k == KEEL_ACT_RELU || k == KEEL_ACT_CLIP || k == KEEL_ACT_HSWISH ||
         k == KEEL_ACT_HSIGMOID_MUL || k == KEEL_ACT_SILU;
}

__attribute__((target("avx512f"))) static inline __m512 keel_act512(const keel_act *a, __m512 v) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  __m512 t;
  switch (a->kind) {
    case KEEL_ACT_RELU: return _mm512_max_ps(zero, v);
    case KEEL_ACT_CLIP:
      t = _mm512_max_ps(_mm512_set1_ps(a->a), v);
      return _mm512_min_ps(_mm512_set1_ps(a->b), t);
    case KEEL_ACT_HSWISH: /* x * clamp(x / 6 + 0.5, 0, 1) */
      t = _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
      return _mm512_mul_ps(v, _mm512_max_ps(zero, _mm512_min_ps(one, t)));
    case KEEL_ACT_HSIGMOID_MUL: /* x * clamp(a x + b, 0, 1) */
      t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(a->a), v), _mm512_set1_ps(a->b));
      return _mm512_mul_ps(v, _mm512_max_ps(zero, _mm512_min_ps(one, t)));
    case KEEL_ACT_SILU: return keel_silu512(v);
    default: return v;
  }
}

#endif /* KEEL_ACT512_H */
