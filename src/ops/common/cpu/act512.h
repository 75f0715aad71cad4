/* act512.h: the fused activations (activation.h) that keel's AVX-512
 * conv kernels apply to a vector as they store it (conv_stem.c,
 * conv_pw.c), computed as activation.c's scalar forms compute them
 * (max(0, x) and min(b, x) keep a NaN x). Include only where immintrin.h
 * and a target("avx512f") function are available (x86-64, gcc or clang).
 */
#ifndef KEEL_ACT512_H
#define KEEL_ACT512_H

#include <immintrin.h>

#include "ops/common/activation.h"

/* True for the kinds keel_act512 computes; the others go through
 * keel_act_apply_fast_f32 on the stored rows. */
static inline bool keel_act512_inline(keel_act_kind k) {
  return k == KEEL_ACT_NONE || k == KEEL_ACT_RELU || k == KEEL_ACT_CLIP || k == KEEL_ACT_HSWISH ||
         k == KEEL_ACT_HSIGMOID_MUL;
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
    default: return v;
  }
}

#endif /* KEEL_ACT512_H */
