/* gemv.c: a few rows by a constant matrix (gemv.h): plain C and AVX-512
 * intrinsics, the one picked at run time; chunks of columns on the pool.
 */
#include "ops/common/gemv.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GV_X86 1
#endif

#define GV_R 4                  /* rows of A per pass over the weights     */
#define GV_CHUNK_FLOATS 8192    /* weights per pool task, about            */
#define GV_COLS 64              /* columns per tile (and a chunk's step)   */

/* Columns [n0, n0 + nc) (nc <= GV_COLS) of rows [0, R) (R <= GV_R) of the
 * bare product into t[r][0..nc). */
typedef void (*gv_tile_fn)(const keel_gemv_args *g, const float *a, int64_t R, int64_t n0,
                           int64_t nc, float t[GV_R][GV_COLS]);

static void tile_base(const keel_gemv_args *g, const float *a, int64_t R, int64_t n0, int64_t nc,
                      float t[GV_R][GV_COLS]) {
  int64_t K = g->K, N = g->N;
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < nc; j++) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; k++)
        s += a[r * g->lda + k] * (g->rows ? g->w[(n0 + j) * K + k] : g->w[k * N + n0 + j]);
      t[r][j] = s;
    }
}

#ifdef GV_X86
#define GV512 __attribute__((target("avx512f")))
#define INLINE static inline __attribute__((always_inline))

/* Rows form: mr (1..4) columns of B (rows of W) by R (1..4) rows of A:
 * mr x R chains of 16 lanes along K, summed across lanes at the end. */
GV512 INLINE void dot_block(int mr, int R, int64_t K, const float *a, int64_t lda,
                            const float *w, float t[GV_R][GV_COLS], int64_t j) {
  __m512 c[4][4];
  for (int i = 0; i < mr; i++)
    for (int r = 0; r < R; r++) c[i][r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 x[4];
    for (int r = 0; r < R; r++) x[r] = _mm512_loadu_ps(a + r * lda + k);
    for (int i = 0; i < mr; i++) {
      __m512 wv = _mm512_loadu_ps(w + i * K + k);
      for (int r = 0; r < R; r++) c[i][r] = _mm512_fmadd_ps(wv, x[r], c[i][r]);
    }
  }
  if (k < K) {
    __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
    __m512 x[4];
    for (int r = 0; r < R; r++) x[r] = _mm512_maskz_loadu_ps(m, a + r * lda + k);
    for (int i = 0; i < mr; i++) {
      __m512 wv = _mm512_maskz_loadu_ps(m, w + i * K + k);
      for (int r = 0; r < R; r++) c[i][r] = _mm512_fmadd_ps(wv, x[r], c[i][r]);
    }
  }
  for (int i = 0; i < mr; i++)
    for (int r = 0; r < R; r++) t[r][j + i] = _mm512_reduce_add_ps(c[i][r]);
}

GV512 INLINE void rows_tile(int R, const keel_gemv_args *g, const float *a, int64_t n0,
                            int64_t nc, float t[GV_R][GV_COLS]) {
  int64_t K = g->K, j = 0;
  const float *w = g->w + n0 * K;
  for (; j + 4 <= nc; j += 4) dot_block(4, R, K, a, g->lda, w + j * K, t, j);
  for (; j < nc; j++) dot_block(1, R, K, a, g->lda, w + j * K, t, j);
}

/* Columns form: R rows of A by up to 64 columns (4 vectors) of B, one
 * broadcast of A's element per row and step of K. */
GV512 INLINE void cols_tile(int R, const keel_gemv_args *g, const float *a, int64_t n0,
                            int64_t nc, float t[GV_R][GV_COLS]) {
  int64_t K = g->K, N = g->N;
  __mmask16 m[4];
  for (int v = 0; v < 4; v++) {
    int64_t left = nc - 16 * v;
    m[v] = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
  }
  __m512 c[4][4];
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 4; v++) c[r][v] = _mm512_setzero_ps();
  const float *b = g->w + n0;
  for (int64_t k = 0; k < K; k++) {
    __m512 bv[4];
    for (int v = 0; v < 4; v++) bv[v] = _mm512_maskz_loadu_ps(m[v], b + k * N + 16 * v);
    for (int r = 0; r < R; r++) {
      __m512 x = _mm512_set1_ps(a[r * g->lda + k]);
      for (int v = 0; v < 4; v++) c[r][v] = _mm512_fmadd_ps(x, bv[v], c[r][v]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int v = 0; v < 4; v++) _mm512_storeu_ps(&t[r][16 * v], c[r][v]);
}

GV512 static void tile_512(const keel_gemv_args *g, const float *a, int64_t R, int64_t n0,
                           int64_t nc, float t[GV_R][GV_COLS]) {
  switch (R * 2 + (g->rows ? 1 : 0)) {
    case 3: rows_tile(1, g, a, n0, nc, t); return;
    case 5: rows_tile(2, g, a, n0, nc, t); return;
    case 7: rows_tile(3, g, a, n0, nc, t); return;
    case 9: rows_tile(4, g, a, n0, nc, t); return;
    case 2: cols_tile(1, g, a, n0, nc, t); return;
    case 4: cols_tile(2, g, a, n0, nc, t); return;
    case 6: cols_tile(3, g, a, n0, nc, t); return;
    default: cols_tile(4, g, a, n0, nc, t); return;
  }
}
#endif

static bool has_512(void) {
#ifdef GV_X86
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

bool keel_gemv_fast(void) { return has_512(); }

/* Columns [c0, c1) of every row: tiles of 64 columns by 4 rows, each
 * finished (bias, Z, activation) while it is in cache. */
static void gv_cols(const keel_gemv_args *g, gv_tile_fn tile, int64_t c0, int64_t c1) {
  float t[GV_R][GV_COLS];
  for (int64_t n0 = c0; n0 < c1; n0 += GV_COLS) {
    int64_t nc = KEEL_MIN(GV_COLS, c1 - n0);
    for (int64_t r0 = 0; r0 < g->R; r0 += GV_R) {
      int64_t R = KEEL_MIN(GV_R, g->R - r0);
      tile(g, g->a + r0 * g->lda, R, n0, nc, t);
      for (int64_t r = 0; r < R; r++) {
        float *y = g->y + (r0 + r) * g->ldy + n0;
        const float *z = g->z ? g->z + (r0 + r) * g->ldy + n0 : NULL;
        for (int64_t j = 0; j < nc; j++)
          y[j] = t[r][j] + (g->bias ? g->bias[n0 + j] : 0.0f) + (z ? z[j] : 0.0f);
        if (g->act) keel_act_apply_fast_f32(g->act, y, nc);
      }
    }
  }
}

typedef struct gv_job {
  const keel_gemv_args *g;
  gv_tile_fn tile;
  int64_t cols;                 /* columns per task                        */
} gv_job;

static keel_status gv_task(void *ctx, int64_t t0, int64_t t1, int worker) {
  const gv_job *j = ctx;
  (void)worker;
  gv_cols(j->g, j->tile, t0 * j->cols, KEEL_MIN(t1 * j->cols, j->g->N));
  return KEEL_OK;
}

static gv_tile_fn pick(int v) {
#ifdef GV_X86
  if (v == 1) return has_512() ? tile_512 : NULL;
#endif
  return v == 0 ? tile_base : NULL;
}

keel_status keel_gemv(keel_pool *pool, const keel_gemv_args *g) {
  if (g->R <= 0 || g->N <= 0) return KEEL_OK;
  gv_job j = {g, pick(has_512() ? 1 : 0), 0};
  /* about GV_CHUNK_FLOATS weights a task, whole tiles */
  int64_t cols = KEEL_MAX(1, GV_CHUNK_FLOATS / KEEL_MAX(g->K, 1));
  j.cols = (cols + GV_COLS - 1) / GV_COLS * GV_COLS;
  return keel_pool_for(pool, (g->N + j.cols - 1) / j.cols, 1, gv_task, &j);
}

bool keel_gemv_variant(int v, const keel_gemv_args *g) {
  gv_tile_fn f = pick(v);
  if (!f) return false;
  if (g->R > 0) gv_cols(g, f, 0, g->N);
  return true;
}
