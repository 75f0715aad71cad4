/* tile512.c: the multiply-add tile of keel's own channels-last conv
 * kernels (tile512.h). */
#include "ops/common/cpu/tile512.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define T512 __attribute__((target("avx512f")))

/* acc += x * *w with *w a memory operand: 28 accumulators, 3 vectors of W
 * and the broadcast fill the 32 registers (gcc, left to itself, kept the
 * fourth vector in a register and an accumulator on the stack). */
#define T512_FMA_MEM(acc, x, w) __asm__("vfmadd231ps %1, %2, %0" : "+v"(acc) : "m"(*(w)), "v"(x))

/* The PT pixels' sums (rows of 64 at t->acc) plus the chunk's products.
 * One prefetch per channel step while lines are left, the rest of this
 * tile's share after. */
#define DEF_T512(PT)                                                                        \
  T512 static void t512_##PT(const keel_tile512 *t) {                                           \
    __m512 acc[PT][4];                                                                         \
    const float *x[PT];                                                                        \
    _Pragma("GCC unroll 8") for (int p = 0; p < (PT); p++) {                                   \
      x[p] = t->x[p];                                                                          \
      _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) acc[p][v] =                         \
          _mm512_loadu_ps(t->acc + p * t->rs + 16 * v);                                           \
    }                                                                                          \
    const float *w = t->w;                                                                     \
    int64_t cc = t->cc, npf = t->npf < cc ? t->npf : cc, c = 0;                                \
    for (; c < cc; c++) {                                                                      \
      __m512 w0 = _mm512_loadu_ps(w + c * 64), w1 = _mm512_loadu_ps(w + c * 64 + 16);          \
      __m512 w2 = _mm512_loadu_ps(w + c * 64 + 32);                                            \
      const __m512 *w3 = (const __m512 *)(const void *)(w + c * 64 + 48);                      \
      if (c < npf) _mm_prefetch(t->pf + c * 64, _MM_HINT_T1);                                  \
      _Pragma("GCC unroll 8") for (int p = 0; p < (PT); p++) {                                 \
        __m512 xv = _mm512_set1_ps(x[p][c]);                                                   \
        acc[p][0] = _mm512_fmadd_ps(xv, w0, acc[p][0]);                                        \
        acc[p][1] = _mm512_fmadd_ps(xv, w1, acc[p][1]);                                        \
        acc[p][2] = _mm512_fmadd_ps(xv, w2, acc[p][2]);                                        \
        T512_FMA_MEM(acc[p][3], xv, w3);                                                         \
      }                                                                                        \
    }                                                                                          \
    for (int64_t l = npf; l < t->npf; l++) _mm_prefetch(t->pf + l * 64, _MM_HINT_T1);          \
    _Pragma("GCC unroll 8") for (int p = 0; p < (PT); p++)                                     \
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                                    \
            _mm512_storeu_ps(t->acc + p * t->rs + 16 * v, acc[p][v]);                             \
  }
DEF_T512(1)
DEF_T512(2)
DEF_T512(3)
DEF_T512(4)
DEF_T512(5)
DEF_T512(6)
DEF_T512(7)
#undef DEF_T512

typedef void (*t512_fn)(const keel_tile512 *);
static const t512_fn g_tiles[KEEL_TILE512_PX + 1] = {NULL,   t512_1, t512_2, t512_3,
                                                     t512_4, t512_5, t512_6, t512_7};

void keel_tile512_run(const keel_tile512 *t, int n) { g_tiles[n](t); }

#else

void keel_tile512_run(const keel_tile512 *t, int n) { (void)t, (void)n; }

#endif
