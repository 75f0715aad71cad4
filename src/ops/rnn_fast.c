/* rnn_fast.c: the prepared implementation of RNN, GRU and LSTM (kernel.h's
 * keel_impl) for float nodes whose W and R are constants (initializers),
 * which is every exported model.
 *
 * At bind each direction's W (G*hid, in) and R (G*hid, hid) are stored
 * transposed, (in, G*hid) and (hid, G*hid), so that a step's product of the
 * batch's hidden state with Rᵀ, and the projection of all time steps with
 * Wᵀ, read weight rows contiguously: one broadcast of an input element and
 * a run of vector multiply-adds over the gate columns. The products are
 * computed here (rnn_gemm_packed: AVX-512 intrinsics, else the same loops
 * in plain C compiled for AVX2+FMA and for baseline x86-64, chosen at run
 * time): on the tiny M of a recurrence (the batch) a general GEMM's
 * packing and dispatch cost more than the arithmetic.
 *
 * rnn.c's driver runs the node either way; with this state it takes the
 * packed products and the vectorized tanh of vmath.c. Without it
 * (KEEL_OPT_REFERENCE_KERNELS, other types, computed weights) it runs its
 * reference path: keel_gemm_f32 on the weights as given and libm's tanh.
 */
#include "rnn_fast.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RF_X86 1
#endif

/* ======================================================== the product */

/* Generic C: blocks of 64 columns accumulate in a local row (which the
 * compiler keeps in vector registers), the tail column by column. */
#define MM_BODY                                                                          \
  for (int64_t i = 0; i < M; i++) {                                                      \
    const float *a = A + i * lda;                                                        \
    float *c = C + i * ldc;                                                              \
    int64_t j0 = 0;                                                                      \
    for (; j0 + 64 <= N; j0 += 64) {                                                     \
      float t[64];                                                                       \
      for (int l = 0; l < 64; l++) t[l] = acc ? c[j0 + l] : 0.0f;                        \
      for (int64_t k = 0; k < K; k++) {                                                  \
        const float *b = B + k * ldb + j0;                                               \
        float av = a[k];                                                                 \
        for (int l = 0; l < 64; l++) t[l] += av * b[l];                                  \
      }                                                                                  \
      memcpy(c + j0, t, sizeof t);                                                       \
    }                                                                                    \
    for (int64_t j = j0; j < N; j++) {                                                   \
      float s = acc ? c[j] : 0.0f;                                                       \
      for (int64_t k = 0; k < K; k++) s += a[k] * B[k * ldb + j];                        \
      c[j] = s;                                                                          \
    }                                                                                    \
  }

typedef void (*mm_fn)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, bool acc, float *C, int64_t ldc);

static void mm_base(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, bool acc, float *C, int64_t ldc) {
  MM_BODY
}

#ifdef RF_X86
__attribute__((target("avx2,fma"))) static void mm_avx2(int64_t M, int64_t N, int64_t K,
                                                        const float *A, int64_t lda,
                                                        const float *B, int64_t ldb, bool acc,
                                                        float *C, int64_t ldc) {
  MM_BODY
}

#define MM512 __attribute__((target("avx512f,avx512vl,avx2,fma")))

/* mr rows (1..4) by nv vectors of 16 columns (1..8); mr, nv and full are
 * constants at every call, so the accumulators live in registers. A full
 * tile loads plainly (the loads fold into the multiply-adds); a tail tile
 * through the masks m[v] of the columns that exist. */
MM512 static inline __attribute__((always_inline)) void mm512_tile(
    int mr, int nv, bool full, int64_t K, const float *A, int64_t lda, const float *B,
    int64_t ldb, bool acc, float *C, int64_t ldc, const __mmask16 *m) {
  __m512 c[4][8];
  for (int r = 0; r < mr; r++)
    for (int v = 0; v < nv; v++)
      c[r][v] = !acc   ? _mm512_setzero_ps()
                : full ? _mm512_loadu_ps(C + r * ldc + 16 * v)
                       : _mm512_maskz_loadu_ps(m[v], C + r * ldc + 16 * v);
  for (int64_t k = 0; k < K; k++) {
    __m512 b[8];
    for (int v = 0; v < nv; v++)
      b[v] = full ? _mm512_loadu_ps(B + k * ldb + 16 * v)
                  : _mm512_maskz_loadu_ps(m[v], B + k * ldb + 16 * v);
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

/* Every row of one column block: 4 at a time, then the 1-3 left. */
MM512 static inline __attribute__((always_inline)) void mm512_rows(
    int64_t M, bool full, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
    bool acc, float *C, int64_t ldc, const __mmask16 *m) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4)
    mm512_tile(4, 4, full, K, A + i * lda, lda, B, ldb, acc, C + i * ldc, ldc, m);
  const float *a = A + i * lda;
  float *c = C + i * ldc;
  switch (M - i) {
    case 3: mm512_tile(3, 4, full, K, a, lda, B, ldb, acc, c, ldc, m); break;
    case 2: mm512_tile(2, 4, full, K, a, lda, B, ldb, acc, c, ldc, m); break;
    case 1: mm512_tile(1, 4, full, K, a, lda, B, ldb, acc, c, ldc, m); break;
    default: break;
  }
}

/* One row (a batch of one: every step of the lstm bench model): 128
 * columns at a time, eight independent chains. Several rows: 4 x 64. */
MM512 static void mm_avx512(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                            const float *B, int64_t ldb, bool acc, float *C, int64_t ldc) {
  __mmask16 m[8];
  if (M == 1) {
    int64_t j = 0;
    for (; j + 128 <= N; j += 128) mm512_tile(1, 8, true, K, A, lda, B + j, ldb, acc, C + j, ldc, m);
    if (j < N) {
      mm512_masks(N - j, 8, m);
      mm512_tile(1, 8, false, K, A, lda, B + j, ldb, acc, C + j, ldc, m);
    }
    return;
  }
  for (int64_t j = 0; j < N; j += 64) {
    mm512_masks(N - j, 4, m);
    if (N - j >= 64) mm512_rows(M, true, K, A, lda, B + j, ldb, acc, C + j, ldc, m);
    else mm512_rows(M, false, K, A, lda, B + j, ldb, acc, C + j, ldc, m);
  }
}
#endif

static mm_fn mm_pick(void) {
#ifdef RF_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return mm_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return mm_avx2;
#endif
  return mm_base;
}

static _Atomic(mm_fn) g_mm; /* picked once, at the first bind */

void keel_rnn_gemm_packed(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                          const float *B, int64_t ldb, bool acc, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  mm_fn f = atomic_load(&g_mm);
  if (!f) {
    f = mm_pick();
    atomic_store(&g_mm, f);
  }
  f(M, N, K, A, lda, B, ldb, acc, C, ldc);
}

/* ==================================================== prepared state */

static const keel_tensor *const_float3(const keel_prep_ctx *p, int i) {
  const keel_tensor *t = p->node->n_in > i ? p->consts[i] : NULL;
  return t && t->dtype == KEEL_FLOAT && t->rank == 3 ? t : NULL;
}

/* float W and R, constants of rank 3 with the same directions and rows
 * (the run still checks them against X and the attributes). */
static bool rf_supports(const keel_prep_ctx *p) {
  const keel_tensor *w = const_float3(p, 1), *r = const_float3(p, 2);
  if (!w || !r || w->shape[0] != r->shape[0] || w->shape[1] != r->shape[1]) return false;
  if (w->shape[0] < 1 || w->shape[0] > 2 || w->shape[1] < 1 || r->shape[2] < 1) return false;
  if (w->shape[1] > (int64_t)1 << 26 || w->shape[2] > (int64_t)1 << 26 ||
      r->shape[2] > (int64_t)1 << 26)
    return false;
  /* the transposed copies: at most 1 GiB */
  double bytes = 4.0 * (double)w->shape[0] * (double)w->shape[1] *
                 ((double)w->shape[2] + (double)r->shape[2]);
  if (bytes > (double)(1u << 30)) return false;
  if (!atomic_load(&g_mm)) atomic_store(&g_mm, mm_pick()); /* same on every thread */
  return true;
}

/* dst (cols, rows) = src (rows, cols)ᵀ */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) dst[j * rows + i] = src[i * cols + j];
}

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

static keel_status rf_prepare(const keel_prep_ctx *p, void **state) {
  const keel_tensor *w = p->consts[1], *r = p->consts[2];
  int64_t dirs = w->shape[0], gh = w->shape[1], in = w->shape[2], hid = r->shape[2];
  size_t nw = (size_t)(dirs * gh * in), nr = (size_t)(dirs * gh * hid);
  size_t head = up64(sizeof(keel_rnn_prep));
  void *blk;
  KEEL_TRY(keel_prep_alloc(p, head + up64(nw * sizeof(float)) + nr * sizeof(float) + 64, &blk));
  keel_rnn_prep *s = blk;
  float *wt = (float *)(void *)((char *)blk + head);
  float *rt = (float *)(void *)((char *)wt + up64(nw * sizeof(float)));
  *s = (keel_rnn_prep){dirs, gh, in, hid, wt, rt};
  for (int64_t d = 0; d < dirs; d++) {
    transpose((const float *)w->data + d * gh * in, gh, in, wt + d * gh * in);
    transpose((const float *)r->data + d * gh * hid, gh, hid, rt + d * gh * hid);
  }
  *state = s;
  return KEEL_OK;
}

static const keel_impl g_rf = {"packed", rf_supports, rf_prepare, keel_prep_block_release, NULL};
const keel_impl *const keel_rnn_impls[] = {&g_rf, NULL};
