/* transpose.c: the block kernels of 2-D transposes (transpose.h). Square
 * tiles (8x8 of 4-byte elements with AVX2, 4x4 with SSE2, 8x8 plain loops
 * else), scalar loops for the edges, and thin sides (2 to 4) in loops of
 * their own that stream whole lines. The Transpose op (ops/shape/shape.c)
 * cuts matrices into blocks over the pool; the channels-last convolutions
 * (ops/nn/conv/conv_nhwc.c) turn NCHW row bands into NHWC with them. */
#include "ops/common/transpose.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SH_X86 1
#endif

/* One block of one batch: rows [r0, r1) x columns [c0, c1) of src (row
 * stride C) into dst (row stride R). */

/* The edges: rows [r0, r1) x columns [c0, c1), column by column so that
 * each destination row is written in order. */
#define SH_TR_EDGE_FN(T)                                                                 \
  static inline void sh_tr_edge_##T(const T *s, T *d, int64_t R, int64_t C, int64_t r0, \
                                    int64_t r1, int64_t c0, int64_t c1) {                \
    for (int64_t c = c0; c < c1; c++) {                                                  \
      T *dr = d + c * R;                                                                 \
      const T *sc = s + c;                                                               \
      for (int64_t r = r0; r < r1; r++) dr[r] = sc[r * C];                               \
    }                                                                                    \
  }
SH_TR_EDGE_FN(uint8_t)
SH_TR_EDGE_FN(uint16_t)
SH_TR_EDGE_FN(uint32_t)
SH_TR_EDGE_FN(uint64_t)

/* The body of a block kernel: N x N tiles by TILE(src, C, dst, R), along
 * the destination rows when they are the longer (R >= C), else along the
 * source rows; then the edges. */
#define SH_TR_BLOCK(T, N, TILE)                                                  \
  const T *s = sv;                                                               \
  T *d = dv;                                                                     \
  if (R >= C) {                                                                  \
    int64_t c = c0;                                                              \
    for (; c + N <= c1; c += N) {                                                \
      int64_t r = r0;                                                            \
      for (; r + N <= r1; r += N) TILE(s + r * C + c, C, d + c * R + r, R);      \
      sh_tr_edge_##T(s, d, R, C, r, r1, c, c + N);                               \
    }                                                                            \
    sh_tr_edge_##T(s, d, R, C, r0, r1, c, c1);                                   \
  } else {                                                                       \
    int64_t r = r0;                                                              \
    for (; r + N <= r1; r += N) {                                                \
      int64_t c = c0;                                                            \
      for (; c + N <= c1; c += N) TILE(s + r * C + c, C, d + c * R + r, R);      \
      sh_tr_edge_##T(s, d, R, C, r, r + N, c, c1);                               \
    }                                                                            \
    sh_tr_edge_##T(s, d, R, C, r, r1, c0, c1);                                   \
  }

/* 8x8 tiles in fixed-size loops (the compilers unroll them). */
#define SH_TR_PLAIN_TILE(T)                                                          \
  static inline void sh_tr_tile_##T(const T *st, int64_t C, T *dt, int64_t R) {      \
    T t[8][8];                                                                       \
    for (int i = 0; i < 8; i++)                                                      \
      for (int j = 0; j < 8; j++) t[j][i] = st[i * C + j];                           \
    for (int j = 0; j < 8; j++)                                                      \
      for (int i = 0; i < 8; i++) dt[j * R + i] = t[j][i];                           \
  }                                                                                  \
  static void sh_tr_plain_##T(const void *sv, void *dv, int64_t R, int64_t C, int64_t r0, \
                              int64_t r1, int64_t c0, int64_t c1) {                  \
    if (sh_tr_thin_##T(sv, dv, R, C, r0, r1, c0, c1)) return;                        \
    SH_TR_BLOCK(T, 8, sh_tr_tile_##T)                                                \
  }

/* Thin sides, R or C of 2 to 4 (the block then spans that whole side):
 * per column (row) one destination (source) line of N elements, a
 * constant count the compilers turn into interleaving (de-interleaving)
 * shuffles. True when they took the block. */
#define SH_TR_THIN_ROWS(N)                                                \
  for (int64_t c = c0; c < c1; c++)                                       \
    for (int r = 0; r < N; r++) d[c * N + r] = s[r * C + c];
#define SH_TR_THIN_COLS(N)                                                \
  for (int64_t r = r0; r < r1; r++)                                       \
    for (int c = 0; c < N; c++) d[c * R + r] = s[r * N + c];
#define SH_TR_THIN_FN(T)                                                                   \
  static inline bool sh_tr_thin_##T(const void *sv, void *dv, int64_t R, int64_t C,       \
                                    int64_t r0, int64_t r1, int64_t c0, int64_t c1) {      \
    const T *s = sv;                                                                       \
    T *d = dv;                                                                             \
    switch (R <= 4 && r0 == 0 && r1 == R ? R : 0) {                                        \
      case 2: SH_TR_THIN_ROWS(2) return true;                                              \
      case 3: SH_TR_THIN_ROWS(3) return true;                                              \
      case 4: SH_TR_THIN_ROWS(4) return true;                                              \
      default: break;                                                                      \
    }                                                                                      \
    switch (C <= 4 && c0 == 0 && c1 == C ? C : 0) {                                        \
      case 2: SH_TR_THIN_COLS(2) return true;                                              \
      case 3: SH_TR_THIN_COLS(3) return true;                                              \
      case 4: SH_TR_THIN_COLS(4) return true;                                              \
      default: return false;                                                               \
    }                                                                                      \
  }
SH_TR_THIN_FN(uint8_t)
SH_TR_THIN_FN(uint16_t)
SH_TR_THIN_FN(uint32_t)
SH_TR_THIN_FN(uint64_t)

#ifndef SH_X86
SH_TR_PLAIN_TILE(uint8_t)
SH_TR_PLAIN_TILE(uint16_t)
SH_TR_PLAIN_TILE(uint32_t)
#endif
SH_TR_PLAIN_TILE(uint64_t)

#ifdef SH_X86
/* SSE2 (every x86-64): 8x8 tiles of bytes and of 2-byte elements, 4x4 of
 * 4-byte ones; unpack stages of doubling width. */
static inline void sh_tr1_tile_sse(const uint8_t *s, int64_t C, uint8_t *d, int64_t R) {
  __m128i a[8], b[4], c[4], e[4];
  for (int i = 0; i < 8; i++) a[i] = _mm_loadl_epi64((const __m128i *)(const void *)(s + i * C));
  for (int i = 0; i < 4; i++) b[i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
  c[0] = _mm_unpacklo_epi16(b[0], b[1]), c[1] = _mm_unpackhi_epi16(b[0], b[1]);
  c[2] = _mm_unpacklo_epi16(b[2], b[3]), c[3] = _mm_unpackhi_epi16(b[2], b[3]);
  e[0] = _mm_unpacklo_epi32(c[0], c[2]), e[1] = _mm_unpackhi_epi32(c[0], c[2]);
  e[2] = _mm_unpacklo_epi32(c[1], c[3]), e[3] = _mm_unpackhi_epi32(c[1], c[3]);
  for (int j = 0; j < 4; j++) { /* e[j] holds destination rows 2j and 2j + 1 */
    _mm_storel_epi64((__m128i *)(void *)(d + 2 * j * R), e[j]);
    _mm_storel_epi64((__m128i *)(void *)(d + (2 * j + 1) * R), _mm_unpackhi_epi64(e[j], e[j]));
  }
}
static inline void sh_tr2_tile_sse(const uint16_t *s, int64_t C, uint16_t *d, int64_t R) {
  __m128i a[8], b[8], c[8];
  for (int i = 0; i < 8; i++) a[i] = _mm_loadu_si128((const __m128i *)(const void *)(s + i * C));
  for (int i = 0; i < 4; i++) {
    b[2 * i] = _mm_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
    b[2 * i + 1] = _mm_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
  }
  for (int h = 0; h < 2; h++) /* rows 4h..4h+3: columns 0-1, 2-3, 4-5, 6-7 */
    for (int i = 0; i < 2; i++) {
      c[4 * h + 2 * i] = _mm_unpacklo_epi32(b[4 * h + i], b[4 * h + i + 2]);
      c[4 * h + 2 * i + 1] = _mm_unpackhi_epi32(b[4 * h + i], b[4 * h + i + 2]);
    }
  for (int j = 0; j < 4; j++) {
    _mm_storeu_si128((__m128i *)(void *)(d + 2 * j * R), _mm_unpacklo_epi64(c[j], c[j + 4]));
    _mm_storeu_si128((__m128i *)(void *)(d + (2 * j + 1) * R), _mm_unpackhi_epi64(c[j], c[j + 4]));
  }
}
static inline void sh_tr4_tile_sse(const uint32_t *s, int64_t C, uint32_t *d, int64_t R) {
  const float *st = (const float *)(const void *)s;
  float *dt = (float *)(void *)d;
  __m128 a = _mm_loadu_ps(st), b = _mm_loadu_ps(st + C);
  __m128 e = _mm_loadu_ps(st + 2 * C), f = _mm_loadu_ps(st + 3 * C);
  _MM_TRANSPOSE4_PS(a, b, e, f);
  _mm_storeu_ps(dt, a);
  _mm_storeu_ps(dt + R, b);
  _mm_storeu_ps(dt + 2 * R, e);
  _mm_storeu_ps(dt + 3 * R, f);
}
#define SH_TR_KERNEL(NAME, T, N, TILE, ATTR)                                                 \
  ATTR static void NAME(const void *sv, void *dv, int64_t R, int64_t C, int64_t r0,         \
                        int64_t r1, int64_t c0, int64_t c1) {                                \
    if (sh_tr_thin_##T(sv, dv, R, C, r0, r1, c0, c1)) return;                                \
    SH_TR_BLOCK(T, N, TILE)                                                                  \
  }
SH_TR_KERNEL(sh_tr1_sse, uint8_t, 8, sh_tr1_tile_sse, )
SH_TR_KERNEL(sh_tr2_sse, uint16_t, 8, sh_tr2_tile_sse, )
SH_TR_KERNEL(sh_tr4_sse, uint32_t, 4, sh_tr4_tile_sse, )

/* AVX2: 8x8 tiles of 4-byte elements in three shuffle stages, 4x4 of
 * 8-byte ones in two. */
__attribute__((target("avx2"))) static inline void sh_tr4_tile_avx2(const uint32_t *s,
                                                                    int64_t C, uint32_t *d,
                                                                    int64_t R) {
  const float *st = (const float *)(const void *)s;
  float *dt = (float *)(void *)d;
  __m256 x0 = _mm256_loadu_ps(st), x1 = _mm256_loadu_ps(st + C);
  __m256 x2 = _mm256_loadu_ps(st + 2 * C), x3 = _mm256_loadu_ps(st + 3 * C);
  __m256 x4 = _mm256_loadu_ps(st + 4 * C), x5 = _mm256_loadu_ps(st + 5 * C);
  __m256 x6 = _mm256_loadu_ps(st + 6 * C), x7 = _mm256_loadu_ps(st + 7 * C);
  __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1);
  __m256 t2 = _mm256_unpacklo_ps(x2, x3), t3 = _mm256_unpackhi_ps(x2, x3);
  __m256 t4 = _mm256_unpacklo_ps(x4, x5), t5 = _mm256_unpackhi_ps(x4, x5);
  __m256 t6 = _mm256_unpacklo_ps(x6, x7), t7 = _mm256_unpackhi_ps(x6, x7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dt, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dt + R, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dt + 2 * R, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dt + 3 * R, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dt + 4 * R, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dt + 5 * R, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dt + 6 * R, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dt + 7 * R, _mm256_permute2f128_ps(u3, u7, 0x31));
}
__attribute__((target("avx2"))) static inline void sh_tr8_tile_avx2(const uint64_t *s,
                                                                    int64_t C, uint64_t *d,
                                                                    int64_t R) {
  const double *st = (const double *)(const void *)s;
  double *dt = (double *)(void *)d;
  __m256d x0 = _mm256_loadu_pd(st), x1 = _mm256_loadu_pd(st + C);
  __m256d x2 = _mm256_loadu_pd(st + 2 * C), x3 = _mm256_loadu_pd(st + 3 * C);
  __m256d t0 = _mm256_unpacklo_pd(x0, x1), t1 = _mm256_unpackhi_pd(x0, x1);
  __m256d t2 = _mm256_unpacklo_pd(x2, x3), t3 = _mm256_unpackhi_pd(x2, x3);
  _mm256_storeu_pd(dt, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(dt + R, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(dt + 2 * R, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dt + 3 * R, _mm256_permute2f128_pd(t1, t3, 0x31));
}
SH_TR_KERNEL(sh_tr4_avx2, uint32_t, 8, sh_tr4_tile_avx2, __attribute__((target("avx2"))))
SH_TR_KERNEL(sh_tr8_avx2, uint64_t, 4, sh_tr8_tile_avx2, __attribute__((target("avx2"))))
#endif

/* The kernel for es-byte elements on this CPU (AVX2 looked up once). */
keel_tr_fn keel_tr_pick(size_t es) {
#ifdef SH_X86
  static int level = -1;
  int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
  if (l < 0) {
    __builtin_cpu_init();
    l = __builtin_cpu_supports("avx2") ? 1 : 0;
    __atomic_store_n(&level, l, __ATOMIC_RELAXED);
  }
  if (es == 1) return sh_tr1_sse;
  if (es == 2) return sh_tr2_sse;
  if (es == 4) return l ? sh_tr4_avx2 : sh_tr4_sse;
  return l ? sh_tr8_avx2 : sh_tr_plain_uint64_t;
#else
  return es == 1   ? sh_tr_plain_uint8_t
         : es == 2 ? sh_tr_plain_uint16_t
         : es == 4 ? sh_tr_plain_uint32_t
                   : sh_tr_plain_uint64_t;
#endif
}

