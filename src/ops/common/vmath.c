/* vmath.c: vectorized float32 math (vmath.h). */
#include "ops/common/vmath.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define VM_X86 1
#include "ops/common/cpu/act512.h"
#endif

/* ================================================================ erf */

/* Eigen's and XLA's fast erf: an odd polynomial over an even one in the
 * clamped argument. */
static const float ERF_A[7] = {-2.72614225801306e-10f, 2.77068142495902e-08f,
                               -2.10102402082508e-06f, -5.69250639462346e-05f,
                               -7.34990630326855e-04f, -2.95459980854025e-03f,
                               -1.60960333262415e-02f};
static const float ERF_B[5] = {-1.45660718464996e-05f, -2.13374055278905e-04f,
                               -1.68282697438203e-03f, -7.37332916720468e-03f,
                               -1.42647390514189e-02f};

float keel_vm_erf1(float x) {
  if (x != x) return x;
  float c = x < -4.0f ? -4.0f : x > 4.0f ? 4.0f : x, z = c * c;
  float p = ERF_A[0], q = ERF_B[0];
  for (int i = 1; i < 7; i++) p = p * z + ERF_A[i];
  for (int i = 1; i < 5; i++) q = q * z + ERF_B[i];
  float r = c * p / q;
  return r > 1.0f ? 1.0f : r < -1.0f ? -1.0f : r;
}

#ifdef VM_X86
__attribute__((target("avx2"))) static void erf_avx2(const float *x, float *y, int64_t n) {
  const __m256 lo = _mm256_set1_ps(-4.0f), hi = _mm256_set1_ps(4.0f);
  const __m256 one = _mm256_set1_ps(1.0f), mone = _mm256_set1_ps(-1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    /* max/min return their second operand when one is NaN: v first keeps
     * the clamp NaN-free, the blend below puts the NaN back */
    __m256 c = _mm256_min_ps(_mm256_max_ps(v, lo), hi), z = _mm256_mul_ps(c, c);
    __m256 p = _mm256_set1_ps(ERF_A[0]), q = _mm256_set1_ps(ERF_B[0]);
    for (int k = 1; k < 7; k++) p = _mm256_add_ps(_mm256_mul_ps(p, z), _mm256_set1_ps(ERF_A[k]));
    for (int k = 1; k < 5; k++) q = _mm256_add_ps(_mm256_mul_ps(q, z), _mm256_set1_ps(ERF_B[k]));
    __m256 r = _mm256_div_ps(_mm256_mul_ps(c, p), q);
    r = _mm256_max_ps(_mm256_min_ps(r, one), mone);
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(r, v, nan));
  }
  for (; i < n; i++) y[i] = keel_vm_erf1(x[i]);
}
#endif

static int vm_level(void) {
#ifdef VM_X86
  static int level = -1;
  int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
  if (l < 0) {
    __builtin_cpu_init();
    l = __builtin_cpu_supports("avx2") ? 1 : 0;
    __atomic_store_n(&level, l, __ATOMIC_RELAXED);
  }
  return l;
#else
  return 0;
#endif
}

void keel_vm_erf(const float *x, float *y, int64_t n) {
#ifdef VM_X86
  if (vm_level() >= 1) {
    erf_avx2(x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = keel_vm_erf1(x[i]);
}

/* ================================================================ exp */

/* Cephes expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
 * polynomial, 2^n put in the exponent bits. The magic constant rounds to
 * nearest without a libm call, so the loop vectorizes. A macro, so that an
 * AVX2 copy can be compiled beside the baseline one. */
#define EXP_NEG_LOOP(x, y, n)                                                        \
  for (int64_t i = 0; i < (n); i++) {                                                \
    const float magic = 12582912.0f; /* 1.5 * 2^23 */                                \
    float v = (x)[i];                                                                \
    float c = v > -87.0f ? v : -87.0f; /* -inf and NaN: see below */                 \
    float t = c * 1.44269504088896341f + magic;                                      \
    float m = t - magic;                                                             \
    float r = c - m * 0.693359375f - m * -2.12194440e-4f;                            \
    float p = 1.9875691500e-4f;                                                      \
    p = p * r + 1.3981999507e-3f;                                                    \
    p = p * r + 8.3334519073e-3f;                                                    \
    p = p * r + 4.1665795894e-2f;                                                    \
    p = p * r + 1.6666665459e-1f;                                                    \
    p = p * r + 5.0000001201e-1f;                                                    \
    p = p * r * r + r + 1.0f;                                                        \
    int32_t e = ((int32_t)m + 127) << 23;                                            \
    float s;                                                                         \
    memcpy(&s, &e, sizeof s);                                                        \
    (y)[i] = v >= -87.0f ? p * s : v != v ? v : 0.0f; /* underflow: 0; NaN stays */  \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#define KEEL_EXP_AVX2 1
__attribute__((target("avx2,fma"))) static void exp_neg_avx2(const float *x, float *y,
                                                             int64_t n) {
  EXP_NEG_LOOP(x, y, n)
}
#endif

void keel_exp_neg_f32(const float *x, float *y, int64_t n) {
#ifdef KEEL_EXP_AVX2
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    exp_neg_avx2(x, y, n);
    return;
  }
#endif
  EXP_NEG_LOOP(x, y, n)
}


/* ============================================================ sigmoid */

/* y = x >= 0 ? 1 / (1 + e) : x is NaN ? x : e / (1 + e), a vector at a
 * time with masks (the compiler leaves the ternaries scalar: it will not
 * compute a division the branch skips); the same divisions, so the same
 * bits. Sets j to how many it did. */
#define SIGMOID_TAIL(VF, VI, x, t, y, m, j)                                             \
  {                                                                                     \
    const VF one = (VF){0} + 1.0f, zero = (VF){0};                                     \
    for (j = 0; j + (int64_t)(sizeof(VF) / 4) <= m; j += (int64_t)(sizeof(VF) / 4)) {  \
      VF v, e;                                                                          \
      memcpy(&v, x + j, sizeof v);                                                      \
      memcpy(&e, t + j, sizeof e);                                                      \
      VF d = one + e, pos = one / d, neg = e / d;                                       \
      VI ge = v >= zero, nan = v != v;                                                  \
      VI r = ((VI)pos & ge) | ((VI)neg & ~ge);                                          \
      r = ((VI)v & nan) | (r & ~nan);                                                   \
      memcpy(y + j, &r, sizeof r);                                                      \
    }                                                                                   \
  }

typedef float vm_v4 __attribute__((vector_size(16)));
typedef int32_t vm_i4 __attribute__((vector_size(16)));
typedef float vm_v8 __attribute__((vector_size(32)));
typedef int32_t vm_i8 __attribute__((vector_size(32)));

static int64_t sigmoid_tail4(const float *x, const float *t, float *y, int64_t m) {
  int64_t j;
  SIGMOID_TAIL(vm_v4, vm_i4, x, t, y, m, j)
  return j;
}
#ifdef VM_X86
__attribute__((target("avx2"))) static int64_t sigmoid_tail8(const float *x, const float *t,
                                                             float *y, int64_t m) {
  int64_t j;
  SIGMOID_TAIL(vm_v8, vm_i8, x, t, y, m, j)
  return j;
}
#endif

static int64_t sigmoid_tail(const float *x, const float *t, float *y, int64_t m) {
#ifdef VM_X86
  if (vm_level() >= 1) return sigmoid_tail8(x, t, y, m);
#endif
  return sigmoid_tail4(x, t, y, m);
}

/* -|x| staged in t, its exp, then the quotient on the side of x's sign
 * (the tail above, vectors with masks, then the rest one by one); a macro,
 * so that AVX2 and AVX-512 copies (exp included) sit beside the baseline
 * one: the same operations, so the same results. */
#define SIGMOID_LOOP(x, y, n, EXP)                                                   \
  float sb[256];                                                                     \
  for (int64_t si = 0; si < (n); si += 256) {                                        \
    int64_t sn = KEEL_MIN(256, (n) - si);                                            \
    for (int64_t sj = 0; sj < sn; sj++) sb[sj] = -fabsf((x)[si + sj]);               \
    EXP;                                                                             \
    for (int64_t sj = sigmoid_tail((x) + si, sb, (y) + si, sn); sj < sn; sj++) {      \
      float sv = (x)[si + sj], se = sb[sj];                                          \
      (y)[si + sj] = sv >= 0 ? 1.0f / (1.0f + se) : sv != sv ? sv : se / (1.0f + se); \
    }                                                                                \
  }

#ifdef KEEL_EXP_AVX2
__attribute__((target("avx2,fma"))) static void sigmoid_avx2(const float *x, float *y,
                                                             int64_t n) {
  SIGMOID_LOOP(x, y, n, EXP_NEG_LOOP(sb, sb, sn))
}
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void sigmoid_avx512(const float *x,
                                                                                float *y,
                                                                                int64_t n) {
  SIGMOID_LOOP(x, y, n, EXP_NEG_LOOP(sb, sb, sn))
}
#endif

void keel_vm_sigmoid(const float *x, float *y, int64_t n) {
#ifdef KEEL_EXP_AVX2
  if (__builtin_cpu_supports("avx512f")) {
    sigmoid_avx512(x, y, n);
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    sigmoid_avx2(x, y, n);
    return;
  }
#endif
  SIGMOID_LOOP(x, y, n, keel_exp_neg_f32(sb, sb, sn))
}

/* ============================================================ fast SiLU */

/* exp(-v) for the fast SiLU: -v clamped to [-87, 88] (NaN kept by the
 * operand order of min/max), n = round(-v log2 e), the Cephes polynomial
 * of r = -v - n ln2, then 2^n scaled in. */
#define SILU_SCALAR(v)                                                      \
  ({                                                                        \
    float c_ = -(v);                                                        \
    c_ = c_ < -87.0f ? -87.0f : c_ > 88.0f ? 88.0f : c_;                    \
    float m_ = nearbyintf(c_ * 1.44269504088896341f);                       \
    float r_ = c_ - m_ * 0.693359375f - m_ * -2.12194440e-4f;               \
    float p_ = 1.9875691500e-4f;                                            \
    p_ = p_ * r_ + 1.3981999507e-3f;                                        \
    p_ = p_ * r_ + 8.3334519073e-3f;                                        \
    p_ = p_ * r_ + 4.1665795894e-2f;                                        \
    p_ = p_ * r_ + 1.6666665459e-1f;                                        \
    p_ = p_ * r_ + 5.0000001201e-1f;                                        \
    p_ = p_ * r_ * r_ + r_ + 1.0f;                                          \
    (v) / (1.0f + ldexpf(p_, (int)m_));                                     \
  })

#ifdef VM_X86
__attribute__((target("avx512f"))) static void silu_avx512(float *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, k, keel_silu512(_mm512_maskz_loadu_ps(k, y + i)));
  }
}

__attribute__((target("avx2,fma"))) static void silu_avx2(float *y, int64_t n) {
  const __m256 lo = _mm256_set1_ps(-87.0f), hi = _mm256_set1_ps(88.0f);
  const __m256 l2e = _mm256_set1_ps(1.44269504088896341f), c1 = _mm256_set1_ps(0.693359375f);
  const __m256 c2 = _mm256_set1_ps(-2.12194440e-4f), one = _mm256_set1_ps(1.0f);
  const __m256 two = _mm256_set1_ps(2.0f);
  static const float P[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                             4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(y + i);
    __m256 c = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_sub_ps(_mm256_setzero_ps(), v)));
    __m256 m = _mm256_round_ps(_mm256_mul_ps(c, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(m, c2, _mm256_fnmadd_ps(m, c1, c));
    __m256 p = _mm256_set1_ps(P[0]);
    for (int q = 1; q < 6; q++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P[q]));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, one));
    /* 2^m into the exponent: m in [-126, 127] after the clamp */
    __m256i e2 = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(m), _mm256_set1_epi32(127)), 23);
    __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(e2));
    __m256 d = _mm256_add_ps(one, e), rc = _mm256_rcp_ps(d);
    rc = _mm256_mul_ps(rc, _mm256_fnmadd_ps(d, rc, two));
    rc = _mm256_mul_ps(rc, _mm256_fnmadd_ps(d, rc, two)); /* rcp_ps has 12 bits: two steps */
    /* rcp of +inf-free d: d <= 1 + 2^127 */
    __m256 out = _mm256_mul_ps(v, rc);
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    _mm256_storeu_ps(y + i, _mm256_blendv_ps(out, v, nan));
  }
  for (; i < n; i++) y[i] = SILU_SCALAR(y[i]);
}
#endif

void keel_vm_silu_fast(float *y, int64_t n) {
#ifdef VM_X86
  if (__builtin_cpu_supports("avx512f")) {
    silu_avx512(y, n);
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    silu_avx2(y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) y[i] = SILU_SCALAR(y[i]);
}

/* =============================================================== gelu */

/* y = 0.5 y (1 + erf(y / sqrt 2)) in place: erf by ERF_A / ERF_B's
 * rational form in the clamped argument, with fused multiply-adds and a
 * reciprocal estimate refined by one Newton step for the quotient. */
__attribute__((target("avx512f"))) static void gelu_avx512(float *y, int64_t n) {
  const __m512 lo = _mm512_set1_ps(-4.0f), hi = _mm512_set1_ps(4.0f), one = _mm512_set1_ps(1.0f);
  const __m512 mone = _mm512_set1_ps(-1.0f), two = _mm512_set1_ps(2.0f), half = _mm512_set1_ps(0.5f);
  const __m512 s2 = _mm512_set1_ps(0.70710678118654752440f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(k, y + i);
    /* v first: max/min return their second operand on NaN, so c is never
     * NaN and the product below puts a NaN v back */
    __m512 c = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, s2), lo), hi), z = _mm512_mul_ps(c, c);
    __m512 p = _mm512_set1_ps(ERF_A[0]), q = _mm512_set1_ps(ERF_B[0]);
    for (int j = 1; j < 7; j++) p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(ERF_A[j]));
    for (int j = 1; j < 5; j++) q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(ERF_B[j]));
    __m512 rq = _mm512_rcp14_ps(q);
    rq = _mm512_mul_ps(rq, _mm512_fnmadd_ps(q, rq, two));
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(c, p), rq);
    e = _mm512_max_ps(_mm512_min_ps(e, one), mone);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(v, _mm512_fmadd_ps(e, half, half)));
  }
}

bool keel_vm_gelu_fast(float *y, int64_t n) {
#ifdef VM_X86
  if (__builtin_cpu_supports("avx512f")) {
    gelu_avx512(y, n);
    return true;
  }
#endif
  (void)y, (void)n;
  return false;
}

bool keel_vm_gelu_fast_available(void) {
#ifdef VM_X86
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

/* =============================================================== tanh */

/* Eigen's fast tanh: an odd polynomial over an even one in x clamped to
 * +-7.9053 (where the quotient reaches 1 in float); within 3.5e-7
 * relative of tanh() everywhere, x itself below 0.0004 (so -0 stays),
 * +-1 from the clamp on (exactly, whether or not the compiler fuses the
 * polynomial's multiply-adds).
 * NaN fails both clamp tests and the threshold, and stays NaN. */
#define TANH_LOOP(x, y, n)                                                         \
  for (int64_t i = 0; i < (n); i++) {                                              \
    float v = (x)[i];                                                              \
    float c = v > 7.90531110763549805f ? 7.90531110763549805f : v;                 \
    c = c < -7.90531110763549805f ? -7.90531110763549805f : c;                     \
    float z = c * c;                                                               \
    float p = -2.76076847742355e-16f;                                              \
    p = p * z + 2.00018790482477e-13f;                                             \
    p = p * z + -8.60467152213735e-11f;                                            \
    p = p * z + 5.12229709037114e-08f;                                             \
    p = p * z + 1.48572235717979e-05f;                                             \
    p = p * z + 6.37261928875436e-04f;                                             \
    p = p * z + 4.89352455891786e-03f;                                             \
    float q = 1.19825839466702e-06f;                                               \
    q = q * z + 1.18534705686654e-04f;                                             \
    q = q * z + 2.26843463243900e-03f;                                             \
    q = q * z + 4.89352518554385e-03f;                                             \
    float r = c * p / q;                                                           \
    r = fabsf(v) >= 7.90531110763549805f ? copysignf(1.0f, v) : r;                 \
    (y)[i] = fabsf(v) < 0.0004f ? v : r;                                           \
  }

float keel_vm_tanh1(float x) {
  float y;
  TANH_LOOP(&x, &y, 1)
  return y;
}

#ifdef VM_X86
__attribute__((target("avx2,fma"))) static void tanh_avx2(const float *x, float *y, int64_t n) {
  TANH_LOOP(x, y, n)
}
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void tanh_avx512(const float *x,
                                                                             float *y,
                                                                             int64_t n) {
  TANH_LOOP(x, y, n)
}
#endif

void keel_vm_tanh(const float *x, float *y, int64_t n) {
#ifdef VM_X86
  if (__builtin_cpu_supports("avx512f")) {
    tanh_avx512(x, y, n);
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    tanh_avx2(x, y, n);
    return;
  }
#endif
  TANH_LOOP(x, y, n)
}

/* ============================================================ LayerNorm row */

/* The moments in double over 16 lanes (a partial sum per lane, added up at
 * the end), then the affine map in float: loops the compiler vectorizes at
 * whatever width the copy is built for. */
#define LN_ROW_BODY(x, y, D, s, b, eps)                                                     \
  {                                                                                         \
    double acc_[16] = {0}, sum_ = 0, sq_ = 0;                                               \
    int64_t j_ = 0, d16_ = (D) & ~(int64_t)15;                                              \
    for (; j_ < d16_; j_ += 16)                                                             \
      for (int l_ = 0; l_ < 16; l_++) acc_[l_] += (double)(x)[j_ + l_];                     \
    for (int w_ = 8; w_; w_ >>= 1) /* a tree: shuffles, not 16 dependent steps */       \
      for (int l_ = 0; l_ < w_; l_++) acc_[l_] += acc_[l_ + w_];                            \
    sum_ = acc_[0];                                                                         \
    for (; j_ < (D); j_++) sum_ += (x)[j_];                                                 \
    double mean_ = sum_ / (double)(D);                                                      \
    for (int l_ = 0; l_ < 16; l_++) acc_[l_] = 0;                                           \
    for (j_ = 0; j_ < d16_; j_ += 16)                                                       \
      for (int l_ = 0; l_ < 16; l_++) {                                                     \
        double d_ = (double)(x)[j_ + l_] - mean_;                                           \
        acc_[l_] += d_ * d_;                                                                \
      }                                                                                     \
    for (int w_ = 8; w_; w_ >>= 1)                                                          \
      for (int l_ = 0; l_ < w_; l_++) acc_[l_] += acc_[l_ + w_];                            \
    sq_ = acc_[0];                                                                          \
    for (; j_ < (D); j_++) sq_ += ((double)(x)[j_] - mean_) * ((double)(x)[j_] - mean_);    \
    float m_ = (float)mean_, inv_ = (float)(1.0 / sqrt(sq_ / (double)(D) + (eps)));         \
    if (b)                                                                                  \
      for (j_ = 0; j_ < (D); j_++) (y)[j_] = ((x)[j_] - m_) * inv_ * (s)[j_] + (b)[j_];     \
    else                                                                                    \
      for (j_ = 0; j_ < (D); j_++) (y)[j_] = ((x)[j_] - m_) * inv_ * (s)[j_];               \
  }

#ifdef VM_X86
__attribute__((target("avx2,fma"))) static void ln_row_avx2(const float *x, float *y, int64_t D,
                                                            const float *s, const float *b,
                                                            double eps) {
  LN_ROW_BODY(x, y, D, s, b, eps)
}
/* The low and high 8 floats of v as doubles. */
__attribute__((target("avx512f"))) static inline __m512d lo_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
__attribute__((target("avx512f"))) static inline __m512d hi_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* AVX-512 by hand, for the reductions (as in softmax_row_avx512 below):
 * the moments in two vectors of 8 doubles, the affine map in floats. */
__attribute__((target("avx512f,avx512vl,avx2,fma"))) static void ln_row_avx512(
    const float *x, float *y, int64_t D, const float *s, const float *b, double eps) {
  int64_t d16 = D & ~(int64_t)15, j;
  __mmask16 tail = (__mmask16)((1u << (D - d16)) - 1);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (j = 0; j < d16; j += 16) {
    __m512 v = _mm512_loadu_ps(x + j);
    s0 = _mm512_add_pd(s0, lo_pd(v)), s1 = _mm512_add_pd(s1, hi_pd(v));
  }
  if (tail) {
    __m512 v = _mm512_maskz_loadu_ps(tail, x + j);
    s0 = _mm512_add_pd(s0, lo_pd(v)), s1 = _mm512_add_pd(s1, hi_pd(v));
  }
  double mean = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / (double)D;
  __m512d vm = _mm512_set1_pd(mean);
  s0 = s1 = _mm512_setzero_pd();
  for (j = 0; j < D; j += 16) {
    __mmask16 m = j < d16 ? (__mmask16)0xFFFF : tail;
    __m512 v = _mm512_maskz_loadu_ps(m, x + j);
    __m512d a = _mm512_maskz_sub_pd((__mmask8)m, lo_pd(v), vm);
    __m512d c = _mm512_maskz_sub_pd((__mmask8)(m >> 8), hi_pd(v), vm);
    s0 = _mm512_fmadd_pd(a, a, s0);
    s1 = _mm512_fmadd_pd(c, c, s1);
  }
  double var = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / (double)D;
  __m512 m = _mm512_set1_ps((float)mean), inv = _mm512_set1_ps((float)(1.0 / sqrt(var + eps)));
  for (j = 0; j < D; j += 16) {
    __mmask16 k = j < d16 ? (__mmask16)0xFFFF : tail;
    __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m), inv),
                             _mm512_maskz_loadu_ps(k, s + j));
    if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, b + j));
    _mm512_mask_storeu_ps(y + j, k, v);
  }
}
#endif

void keel_vm_layernorm_row(const float *x, float *y, int64_t D, const float *s, const float *b,
                           double eps) {
#ifdef VM_X86
  if (__builtin_cpu_supports("avx512f")) {
    ln_row_avx512(x, y, D, s, b, eps);
    return;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    ln_row_avx2(x, y, D, s, b, eps);
    return;
  }
#endif
  LN_ROW_BODY(x, y, D, s, b, eps)
}

/* ============================================================ softmax row */

/* The max over 16 lanes (a NaN score is skipped by the max and then makes
 * the sum, so the row, NaN), the shift, the exponentials of
 * EXP_NEG_LOOP, their sum over 16 lanes, and the scale. */
#define SOFTMAX_ROW_BODY(row, n, ok)                                                          \
  {                                                                                         \
    float l16_[16], mx_ = -INFINITY, sum_ = 0;                                              \
    int64_t j_ = 0, n16_ = (n) & ~(int64_t)15;                                              \
    for (int l_ = 0; l_ < 16; l_++) l16_[l_] = -INFINITY;                                   \
    for (; j_ < n16_; j_ += 16)                                                             \
      for (int l_ = 0; l_ < 16; l_++)                                                       \
        l16_[l_] = (row)[j_ + l_] > l16_[l_] ? (row)[j_ + l_] : l16_[l_];                       \
    for (int w_ = 8; w_; w_ >>= 1) /* a tree: shuffles, not 16 dependent steps */       \
      for (int l_ = 0; l_ < w_; l_++)                                                       \
        l16_[l_] = l16_[l_ + w_] > l16_[l_] ? l16_[l_ + w_] : l16_[l_];                     \
    mx_ = l16_[0];                                                                          \
    for (; j_ < (n); j_++) mx_ = (row)[j_] > mx_ ? (row)[j_] : mx_;                             \
    ok = mx_ != -INFINITY;                                                                  \
    if (ok) {                                                                               \
      for (j_ = 0; j_ < (n); j_++) (row)[j_] -= mx_;                                          \
      EXP_NEG_LOOP(row, row, n)                                                                 \
      for (int l_ = 0; l_ < 16; l_++) l16_[l_] = 0;                                         \
      for (j_ = 0; j_ < n16_; j_ += 16)                                                     \
        for (int l_ = 0; l_ < 16; l_++) l16_[l_] += (row)[j_ + l_];                           \
      for (int w_ = 8; w_; w_ >>= 1)                                                        \
        for (int l_ = 0; l_ < w_; l_++) l16_[l_] += l16_[l_ + w_];                          \
      sum_ = l16_[0];                                                                       \
      for (; j_ < (n); j_++) sum_ += (row)[j_];                                               \
      float inv_ = 1.0f / sum_;                                                             \
      for (j_ = 0; j_ < (n); j_++) (row)[j_] *= inv_;                                         \
    }                                                                                       \
  }

#ifdef VM_X86
__attribute__((target("avx2,fma"))) static bool softmax_row_avx2(float *row, int64_t n) {
  bool ok;
  SOFTMAX_ROW_BODY(row, n, ok)
  return ok;
}
/* AVX-512 by hand: the loops of the body above leave their 16-lane
 * reductions to scalar code that stalls on store forwarding (half of a
 * 128-score row's time); here they are shuffles, the tail a masked vector,
 * and the exponential EXP_NEG_LOOP's (with FMAs: within an ulp of it). */
#define V512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
V512 static inline __m512 exp_neg512(__m512 v) {
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  __m512 c = _mm512_max_ps(v, _mm512_set1_ps(-87.0f)); /* NaN -> -87: fixed below */
  __m512 tt = _mm512_fmadd_ps(c, _mm512_set1_ps(1.44269504088896341f), magic);
  __m512 m = _mm512_sub_ps(tt, magic);
  __m512 r = _mm512_fnmadd_ps(m, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(m, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = keel_exp_poly512(r);
  __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(m), _mm512_set1_epi32(127));
  e = _mm512_slli_epi32(e, 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  __mmask16 lo = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-87.0f), _CMP_NGE_UQ); /* v < -87 or NaN */
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  y = _mm512_mask_blend_ps(lo, y, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(nan, y, v);
}

V512 static bool softmax_row_avx512(float *row, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 mx = ninf;
  int64_t j = 0, n16 = n & ~(int64_t)15;
  __mmask16 tail = (__mmask16)((1u << (n - n16)) - 1);
  for (; j < n16; j += 16) mx = _mm512_max_ps(_mm512_loadu_ps(row + j), mx); /* skips NaN */
  if (tail) mx = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail, row + n16), mx);
  float m = _mm512_reduce_max_ps(mx);
  if (m == -INFINITY) return false;
  __m512 vm = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
  for (j = 0; j < n16; j += 16) {
    __m512 e = exp_neg512(_mm512_sub_ps(_mm512_loadu_ps(row + j), vm));
    _mm512_storeu_ps(row + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (tail) {
    __m512 e = exp_neg512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, tail, row + n16), vm));
    _mm512_mask_storeu_ps(row + n16, tail, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
  }
  __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (j = 0; j < n16; j += 16)
    _mm512_storeu_ps(row + j, _mm512_mul_ps(_mm512_loadu_ps(row + j), inv));
  if (tail)
    _mm512_mask_storeu_ps(row + n16, tail,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + n16), inv));
  return true;
}
#endif

bool keel_vm_softmax_row(float *row, int64_t n) {
#ifdef VM_X86
  if (__builtin_cpu_supports("avx512f")) return softmax_row_avx512(row, n);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return softmax_row_avx2(row, n);
#endif
  bool ok;
  SOFTMAX_ROW_BODY(row, n, ok)
  return ok;
}
