/* panel_gemm.c: keel's small-M matrix product on panel-packed B
 * (panel_gemm.h): plain C, AVX2+FMA and AVX-512 intrinsics, one picked at
 * run time.
 */
#include "ops/common/panel_gemm.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PG_X86 1
#endif

/* B is stored as panels of KEEL_PANEL_NP columns: panel q holds columns
 * q*NP .. q*NP+NP-1 as K rows of NP floats (the last one zero-padded), so
 * a tile walks its panel sequentially and only C needs masks. */
#define NP KEEL_PANEL_NP
/* Rows of B a one-row product asks for ahead of its loads (4 KB): a
 * recurrence's step streams its weights from L2, and the hardware
 * prefetcher alone left half of L2's bandwidth unused (the lstm bench
 * model 0.045 -> 0.035 ms a run). */
#define PF_ROWS 8

typedef void (*mm_fn)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, bool acc, float *C, int64_t ldc);

/* Plain C, for CPUs without AVX2. */
static void mm_base(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, bool acc, float *C, int64_t ldc) {
  for (int64_t j0 = 0; j0 < N; j0 += NP) {
    const float *panel = B + (j0 / NP) * K * NP;
    int64_t nc = KEEL_MIN(NP, N - j0);
    for (int64_t i = 0; i < M; i++) {
      float t[NP];
      float *c = C + i * ldc + j0;
      for (int64_t l = 0; l < nc; l++) t[l] = acc ? c[l] : 0.0f;
      for (int64_t l = nc; l < NP; l++) t[l] = 0.0f;
      for (int64_t k = 0; k < K; k++) {
        float a = A[i * lda + k];
        for (int l = 0; l < NP; l++) t[l] += a * panel[k * NP + l];
      }
      memcpy(c, t, (size_t)nc * sizeof(float));
    }
  }
}

#ifdef PG_X86
#define MM256 __attribute__((target("avx2,fma")))
#define MM512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

/* AVX2: mr rows by nv vectors of 8 columns at B (row stride NP); the
 * columns past `left` are neither read nor written in C. */
MM256 INLINE void mm256_tile(int mr, int nv, int64_t left, int64_t K, const float *A,
                             int64_t lda, const float *B, bool acc, float *C, int64_t ldc) {
  __m256i m[8];
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int v = 0; v < nv; v++)
    m[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)KEEL_MIN(left, 64) - 8 * v), idx);
  __m256 c[4][8];
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++)
      c[r][v] = acc ? _mm256_maskload_ps(C + r * ldc + 8 * v, m[v]) : _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    __m256 b[8];
    for (int v = 0; v < nv; v++) b[v] = _mm256_loadu_ps(B + k * NP + 8 * v);
    for (int r = 0; r < mr; r++) {
      __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      for (int v = 0; v < nv; v++) c[r][v] = _mm256_fmadd_ps(a, b[v], c[r][v]);
    }
  }
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++) _mm256_maskstore_ps(C + r * ldc + 8 * v, m[v], c[r][v]);
}

/* One row: 64 columns (eight chains) at a time; several: 4 x 16. */
MM256 static void mm_avx2(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                          const float *B, bool acc, float *C, int64_t ldc) {
  int64_t w = M == 1 ? 64 : 16;
  for (int64_t j = 0; j < N; j += w) {
    const float *b = B + (j / NP) * K * NP + j % NP;
    if (M == 1) {
      mm256_tile(1, 8, N - j, K, A, lda, b, acc, C + j, ldc);
      continue;
    }
    int64_t i = 0;
    for (; i + 4 <= M; i += 4)
      mm256_tile(4, 2, N - j, K, A + i * lda, lda, b, acc, C + i * ldc + j, ldc);
    const float *a = A + i * lda;
    float *c = C + i * ldc + j;
    switch (M - i) {
      case 3: mm256_tile(3, 2, N - j, K, a, lda, b, acc, c, ldc); break;
      case 2: mm256_tile(2, 2, N - j, K, a, lda, b, acc, c, ldc); break;
      case 1: mm256_tile(1, 2, N - j, K, a, lda, b, acc, c, ldc); break;
      default: break;
    }
  }
}

/* AVX-512: mr rows (1..4) by nv vectors of 16 columns (1..8) at B (row
 * stride NP); mr, nv and full are constants at every call, so the
 * accumulators live in registers. B is always read whole (the padding);
 * C through the masks m[v] of the columns that exist unless full. */
MM512 INLINE void mm512_tile(int mr, int nv, bool full, int64_t K, const float *A,
                             int64_t lda, const float *B, bool acc, float *C, int64_t ldc,
                             const __mmask16 *m) {
  __m512 c[4][8];
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++)
      c[r][v] = !acc   ? _mm512_setzero_ps()
                : full ? _mm512_loadu_ps(C + r * ldc + 16 * v)
                       : _mm512_maskz_loadu_ps(m[v], C + r * ldc + 16 * v);
  for (int64_t k = 0; k < K; k++) {
    __m512 b[8];
    /* one row streams B from L2: ask ahead, into the next panel (which
     * follows this one) near the end; past the last one a prefetch of
     * nothing in particular, harmless (the address is an integer sum: no
     * pointer leaves B) */
    if (mr == 1)
      for (int v = 0; v < nv; v++)
        _mm_prefetch((const char *)((uintptr_t)B + sizeof(float) * (uintptr_t)((k + PF_ROWS) * NP +
                                                                                16 * v)),
                     _MM_HINT_T0);
    for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_ps(B + k * NP + 16 * v);
    for (int r = 0; r < mr; r++) {
      __m512 a = _mm512_set1_ps(A[r * lda + k]);
      for (int v = 0; v < nv; v++) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
    }
  }
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++) {
      if (full) _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
      else _mm512_mask_storeu_ps(C + r * ldc + 16 * v, m[v], c[r][v]);
    }
}

/* Masks of nv vectors over the `left` columns from here on. */
static void mm512_masks(int64_t left, int nv, __mmask16 *m) {
  for (int v = 0; v < nv; v++) {
    int64_t bits = KEEL_MIN(KEEL_MAX(left - 16 * v, 0), 16);
    m[v] = (__mmask16)(bits == 16 ? 0xFFFF : (1u << bits) - 1);
  }
}

/* Every row of one block of nv vectors (64 columns or the last ones): 4
 * rows at a time, then the 1-3 left. */
MM512 INLINE void mm512_rows(int nv, int64_t M, bool full, int64_t K, const float *A,
                             int64_t lda, const float *B, bool acc, float *C, int64_t ldc,
                             const __mmask16 *m) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4)
    mm512_tile(4, nv, full, K, A + i * lda, lda, B, acc, C + i * ldc, ldc, m);
  const float *a = A + i * lda;
  float *c = C + i * ldc;
  switch (M - i) {
    case 3: mm512_tile(3, nv, full, K, a, lda, B, acc, c, ldc, m); break;
    case 2: mm512_tile(2, nv, full, K, a, lda, B, acc, c, ldc, m); break;
    case 1: mm512_tile(1, nv, full, K, a, lda, B, acc, c, ldc, m); break;
    default: break;
  }
}

/* One row (a batch of one: every step of the lstm bench model): a whole
 * panel, eight chains, read front to back. Several rows: 4 x 64. */
MM512 static void mm_avx512(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                            const float *B, bool acc, float *C, int64_t ldc) {
  __mmask16 m[8];
  for (int64_t j = 0; j < N; j += NP) {
    const float *panel = B + (j / NP) * K * NP;
    if (M == 1 && N - j >= NP) {
      mm512_tile(1, 8, true, K, A, lda, panel, acc, C + j, ldc, m);
      continue;
    }
    if (M == 1) { /* the vectors the columns need, no more */
      int64_t left = N - j;
      mm512_masks(left, 8, m);
      switch ((left + 15) / 16) {
        case 1: mm512_tile(1, 1, left == 16, K, A, lda, panel, acc, C + j, ldc, m); break;
        case 2: mm512_tile(1, 2, left == 32, K, A, lda, panel, acc, C + j, ldc, m); break;
        case 3: mm512_tile(1, 3, left == 48, K, A, lda, panel, acc, C + j, ldc, m); break;
        case 4: mm512_tile(1, 4, left == 64, K, A, lda, panel, acc, C + j, ldc, m); break;
        case 5: mm512_tile(1, 5, left == 80, K, A, lda, panel, acc, C + j, ldc, m); break;
        case 6: mm512_tile(1, 6, left == 96, K, A, lda, panel, acc, C + j, ldc, m); break;
        case 7: mm512_tile(1, 7, left == 112, K, A, lda, panel, acc, C + j, ldc, m); break;
        default: mm512_tile(1, 8, false, K, A, lda, panel, acc, C + j, ldc, m); break;
      }
      continue;
    }
    for (int64_t h = 0; h < NP && j + h < N; h += 64) {
      int64_t left = N - j - h;
      const float *b = panel + h;
      float *c = C + j + h;
      mm512_masks(left, 4, m);
      /* a last block of fewer columns multiplies only the vectors they
       * need (an attention row of 197 keys: 13 of the last panel's 16) */
      switch (left >= 64 ? 0 : (left + 15) / 16) {
        case 0: mm512_rows(4, M, true, K, A, lda, b, acc, c, ldc, m); break;
        case 1: mm512_rows(1, M, false, K, A, lda, b, acc, c, ldc, m); break;
        case 2: mm512_rows(2, M, false, K, A, lda, b, acc, c, ldc, m); break;
        case 3: mm512_rows(3, M, false, K, A, lda, b, acc, c, ldc, m); break;
        default: mm512_rows(4, M, false, K, A, lda, b, acc, c, ldc, m); break;
      }
    }
  }
}
#endif

static mm_fn mm_pick(void) {
#ifdef PG_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return mm_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return mm_avx2;
#endif
  return mm_base;
}

static _Atomic(mm_fn) g_mm; /* picked once, at the first bind */

bool keel_panel_gemm_variant(int v, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           const float *B, bool acc, float *C, int64_t ldc) {
  mm_fn f = v == 0 ? mm_base : NULL;
#ifdef PG_X86
  __builtin_cpu_init();
  if (v == 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f = mm_avx2;
  if (v == 2 && __builtin_cpu_supports("avx512f")) f = mm_avx512;
#endif
  if (f && M > 0 && N > 0) f(M, N, K, A, lda, B, acc, C, ldc);
  return f != NULL;
}

void keel_panel_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                          const float *B, bool acc, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  mm_fn f = atomic_load(&g_mm);
  if (!f) {
    f = mm_pick();
    atomic_store(&g_mm, f);
  }
  f(M, N, K, A, lda, B, acc, C, ldc);
}

bool keel_panel_gemm_avx512(void) {
  mm_fn f = atomic_load(&g_mm);
  if (!f) {
    f = mm_pick();
    atomic_store(&g_mm, f);
  }
#ifdef PG_X86
  return f == mm_avx512;
#else
  return false;
#endif
}

/* Columns [j0, j0 + n) of A·B into the same columns of C (acc false), one
 * panel's part at a time: a part starting 16 * i floats into its panel is
 * a panel of its own whose rows are NP apart, so the product functions run
 * on it as they are (the AVX-512 one reads whole vectors past the part's
 * columns, up to NP floats past the panel: rf_prepare leaves that slack
 * after the packed weights). j0 must be a multiple of 16. */
void keel_panel_gemm_cols(int64_t M, int64_t j0, int64_t n, int64_t K, const float *A, int64_t lda,
                        const float *B, float *C, int64_t ldc) {
  mm_fn f = atomic_load(&g_mm);
  if (!f) {
    f = mm_pick();
    atomic_store(&g_mm, f);
  }
  keel_assert_internal(j0 % 16 == 0);
  for (int64_t a = j0, e; M > 0 && a < j0 + n; a = e) {
    int64_t q = a / NP;
    e = KEEL_MIN(j0 + n, (q + 1) * NP);
    f(M, e - a, K, A, lda, B + q * K * NP + (a - q * NP), false, C + a, ldc);
  }
}

void keel_panel_gemm_init(void) {
  if (!atomic_load(&g_mm)) atomic_store(&g_mm, mm_pick()); /* same on every thread */
}

/* Panels (K rows of NP) of the columns [j0, j0 + n) of Bᵀ, B = src (rows
 * = gate columns, K contiguous); the padding is zero. */
void keel_panel_pack(const float *src, int64_t K, int64_t j0, int64_t n, float *dst) {
  int64_t np = (n + NP - 1) / NP;
  memset(dst, 0, (size_t)(np * K * NP) * sizeof(float));
  for (int64_t j = 0; j < n; j++) {
    const float *row = src + (j0 + j) * K;
    float *pan = dst + (j / NP) * K * NP + j % NP;
    for (int64_t k = 0; k < K; k++) pan[k * NP] = row[k];
  }
}

int64_t keel_panel_floats(int64_t n, int64_t K) { return (n + NP - 1) / NP * K * NP; }

