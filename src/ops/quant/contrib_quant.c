/* contrib_quant.c: the quantized com.microsoft ops that ONNX Runtime's
 * quantizer writes: MatMulNBits (blockwise 4/8-bit weights, how quantized
 * LLMs ship), DynamicQuantizeMatMul, MatMulIntegerToFloat, QLinearAdd,
 * QLinearMul, QLinearSigmoid, QLinearConcat and QLinearGlobalAveragePool.
 * Semantics follow ONNX Runtime's contrib schemas; its outputs are the
 * reference (tests/contrib, tools/gen_contrib_tests.py).
 *
 * MatMulNBits multiplies up to 32 rows of A directly with the packed
 * weights (per block: scale * (a . q - zp * sum a), four rows sharing each
 * widened weight; an AVX2 + FMA kernel on x86-64 CPUs that have it, a
 * portable loop elsewhere or with -DKEEL_NBITS_PORTABLE). More rows
 * dequantize a tile of weight columns at a time into float scratch and
 * multiply it with OpenBLAS, so the float weights never exist whole.
 * accuracy_level 4 quantizes A to int8 per block, as ONNX Runtime does.
 * The two integer-to-float matmuls shift their operands by the zero points
 * into float and run MatMul's GEMM (exact differences and products; other
 * zero-point layouts use MatMulInteger's int32 product), then scale each
 * column. The QLinear elementwise ops compute in float the way ONNX
 * Runtime's MLAS does (scale ratios, round half to even, saturate), and
 * the unary ones go through a 256-entry table built per call.
 */
#include <cblas.h>
#include <math.h>

#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"

#define MS "com.microsoft"

/* ============================================================ helpers */

static const char *dtn(int dt) { return keel_dtype_name((keel_dtype)dt); }

static inline int32_t sat(float v, int32_t lo, int32_t hi) {
  if (!(v >= (float)lo)) return lo; /* also NaN */
  if (v > (float)hi) return hi;
  return (int32_t)v;
}

/* round half to even, plus zp, saturated to the 8-bit type dt */
static inline int32_t q8(float v, int32_t zp, int dt) {
  return sat(rintf(v) + (float)zp, dt == KEEL_UINT8 ? 0 : -128, dt == KEEL_UINT8 ? 255 : 127);
}

static inline int32_t get8(int dt, const void *p, int64_t i) {
  return dt == KEEL_UINT8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}
static inline void put8(int dt, void *p, int64_t i, int32_t v) {
  if (dt == KEEL_UINT8) ((uint8_t *)p)[i] = (uint8_t)v;
  else ((int8_t *)p)[i] = (int8_t)v;
}

/* A scalar scale (input is) and an optional scalar zero point (input iz)
 * of the 8-bit type dt; what names them in messages. */
static keel_status q_scalar(keel_kctx *k, int is, int iz, int dt, const char *what, float *scale,
                            int32_t *zp) {
  const keel_tensor *s, *z;
  KEEL_TRY(keel_k_in(k, is, &s));
  KEEL_TRY(keel_k_in_opt(k, iz, &z));
  if (keel_tensor_numel(s) != 1 || !keel_dtype_is_float(s->dtype))
    return keel_err(KEEL_ERR_SHAPE, "%s scale must be one float value", what);
  *scale = (float)keel_elem_get_f64(s->dtype, s->data, 0);
  *zp = 0;
  if (!z) return KEEL_OK;
  if (keel_tensor_numel(z) != 1)
    return keel_err(KEEL_ERR_SHAPE, "%s zero point must be one value, got %lld", what,
                    (long long)keel_tensor_numel(z));
  if (z->dtype != dt)
    return keel_err(KEEL_ERR_SHAPE, "%s zero point is %s but its tensor is %s", what,
                    dtn(z->dtype), dtn(dt));
  *zp = get8(dt, z->data, 0);
  return KEEL_OK;
}

static keel_status need_q8(const keel_tensor *t, const char *op, const char *what) {
  if (keel_is_q8(t->dtype)) return KEEL_OK;
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s (domain %s, opset 1): %s is %s; uint8 and int8 are "
                  "supported", op, MS, what, dtn(t->dtype));
}

/* ========================================================= MatMulNBits */

/* Weight columns dequantized per tile: about this many floats of scratch. */
#define NBITS_TILE_FLOATS ((int64_t)1 << 18)

typedef struct nbits {
  int64_t K, N, bits, bs, nb, blob;  /* blob: bytes per block of one column */
  const uint8_t *b;                  /* (N, nb, blob)                        */
  const float *scales;               /* (N, nb)                              */
  const uint8_t *zp8;                /* packed (N, ceil(nb * bits / 8)), or  */
  const float *zpf;                  /* float (N, nb), or neither            */
  const int32_t *g_idx;              /* (K) block of each k, or NULL         */
  const float *bias;                 /* (N) or NULL                          */
} nbits;

static keel_status nbits_attrs(keel_kctx *k, nbits *q) {
  q->K = keel_k_attr_i(k, "K", -1);
  q->N = keel_k_attr_i(k, "N", -1);
  q->bits = keel_k_attr_i(k, "bits", 4);
  q->bs = keel_k_attr_i(k, "block_size", -1);
  if (q->K <= 0 || q->N <= 0 || q->K > INT32_MAX || q->N > INT32_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL, "MatMulNBits needs attributes K and N in [1, 2^31), "
                    "got K %lld, N %lld", (long long)q->K, (long long)q->N);
  if (q->bits != 4 && q->bits != 8)
    return keel_err(KEEL_ERR_UNSUPPORTED, "MatMulNBits (domain %s, opset 1): bits %lld; 4 and 8 "
                    "are supported", MS, (long long)q->bits);
  if (q->bs < 16 || (q->bs & (q->bs - 1)) || q->bs > 4096)
    return keel_err(KEEL_ERR_INVALID_MODEL, "block_size %lld is not a power of 2 "
                    ">= 16", (long long)q->bs);
  q->nb = (q->K + q->bs - 1) / q->bs;
  q->blob = q->bs * q->bits / 8;
  return KEEL_OK;
}

/* Input i must hold exactly n elements of type dt. */
static keel_status nbits_input(keel_kctx *k, int i, const char *what, int dt, int64_t n,
                               const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if ((*t)->dtype != dt || keel_tensor_numel(*t) != n) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "%s is %s %s, expected %s with %lld elements",
                    what, dtn((*t)->dtype), keel_shape_str((*t)->rank, (*t)->shape, s, sizeof s),
                    dtn(dt), (long long)n);
  }
  return KEEL_OK;
}

/* Input i of A's type ft (float or float16) with n elements, as floats
 * (float16 staged into scratch). */
static keel_status nbits_floats(keel_kctx *k, int i, const char *what, int ft, int64_t n,
                                const float **out) {
  const keel_tensor *t;
  KEEL_TRY(nbits_input(k, i, what, ft, n, &t));
  if (ft == KEEL_FLOAT) {
    *out = t->data;
    return KEEL_OK;
  }
  keel_tensor f;
  KEEL_TRY(keel_k_to_f32(k, t, &f));
  *out = f.data;
  return KEEL_OK;
}

static keel_status nbits_zero_points(keel_kctx *k, int ft, nbits *q) {
  const keel_tensor *z;
  KEEL_TRY(keel_k_in_opt(k, 3, &z));
  q->zp8 = NULL, q->zpf = NULL;
  if (!z) return KEEL_OK;
  int64_t per = (q->nb * q->bits + 7) / 8;
  if (z->dtype == KEEL_UINT8) {
    KEEL_TRY(nbits_input(k, 3, "zero_points (packed)", KEEL_UINT8, q->N * per, &z));
    q->zp8 = z->data;
    return KEEL_OK;
  }
  if (z->dtype == ft) return nbits_floats(k, 3, "zero_points", ft, q->N * q->nb, &q->zpf);
  return keel_err(KEEL_ERR_SHAPE, "zero_points is %s; expected uint8 (packed) or %s, A's type",
                  dtn(z->dtype), dtn(ft));
}

static keel_status nbits_inputs(keel_kctx *k, int ft, nbits *q) {
  const keel_tensor *b, *g, *bias;
  KEEL_TRY(nbits_input(k, 1, "B", KEEL_UINT8, q->N * q->nb * q->blob, &b));
  KEEL_TRY(nbits_floats(k, 2, "scales", ft, q->N * q->nb, &q->scales));
  q->b = b->data;
  KEEL_TRY(nbits_zero_points(k, ft, q));
  q->g_idx = NULL, q->bias = NULL;
  KEEL_TRY(keel_k_in_opt(k, 4, &g));
  if (g) {
    KEEL_TRY(nbits_input(k, 4, "g_idx", KEEL_INT32, q->K, &g));
    q->g_idx = g->data;
    for (int64_t i = 0; i < q->K; i++)
      if (q->g_idx[i] < 0 || q->g_idx[i] >= q->nb)
        return keel_err(KEEL_ERR_SHAPE, "g_idx[%lld] = %d is outside [0, %lld)",
                        (long long)i, q->g_idx[i], (long long)q->nb);
  }
  KEEL_TRY(keel_k_in_opt(k, 5, &bias));
  if (bias) KEEL_TRY(nbits_floats(k, 5, "bias", ft, q->N, &q->bias));
  return KEEL_OK;
}

/* Zero point of block j of column n, as a float. */
static inline float nbits_zp(const nbits *q, int64_t n, int64_t j) {
  if (q->zpf) return q->zpf[n * q->nb + j];
  if (!q->zp8) return (float)(1 << (q->bits - 1));
  if (q->bits == 8) return (float)q->zp8[n * q->nb + j];
  uint8_t v = q->zp8[n * ((q->nb + 1) / 2) + j / 2];
  return (float)((j & 1) ? v >> 4 : v & 15);
}

/* w (K floats) = column n of the weights: (q - zp) * scale per block.
 * 4-bit blocks go through a 16-entry table of the block's values: one
 * load per weight instead of a conversion, a subtraction and a product. */
static void nbits_column(const nbits *q, int64_t n, float *w) {
  const uint8_t *col = q->b + n * q->nb * q->blob;
  const float *sc = q->scales + n * q->nb;
  if (q->g_idx) { /* each k names its block's scale and zero point */
    for (int64_t kk = 0; kk < q->K; kk++) {
      int64_t j = q->g_idx[kk], blk = kk / q->bs, e = kk % q->bs;
      const uint8_t *p = col + blk * q->blob;
      int v = q->bits == 8 ? p[e] : (e & 1) ? p[e / 2] >> 4 : p[e / 2] & 15;
      w[kk] = ((float)v - nbits_zp(q, n, j)) * sc[j];
    }
    return;
  }
  for (int64_t j = 0; j < q->nb; j++) {
    const uint8_t *p = col + j * q->blob;
    float s = sc[j], z = nbits_zp(q, n, j);
    int64_t k0 = j * q->bs, len = KEEL_MIN(q->bs, q->K - k0);
    float *o = w + k0;
    if (q->bits == 8) {
      for (int64_t e = 0; e < len; e++) o[e] = ((float)p[e] - z) * s;
      continue;
    }
    float lut[16];
    for (int v = 0; v < 16; v++) lut[v] = ((float)v - z) * s;
    int64_t half = len / 2;
    for (int64_t i = 0; i < half; i++) {
      o[2 * i] = lut[p[i] & 15];
      o[2 * i + 1] = lut[p[i] >> 4];
    }
    if (len & 1) o[len - 1] = lut[p[half] & 15];
  }
}

/* ------------------------------------------------ few rows: direct dot */

/* Rows up to this many multiply the packed weights directly: per block,
 * y += scale * (sum a[e] * q[e] - zp * sum a[e]), so no float weight is
 * ever written. A is staged once per call as (M, nb * bs) with 4-bit pairs
 * split into even and odd halves per block (the two nibbles of a byte),
 * zero-padded past K, plus its per-block sums. */
#define NBITS_DOT_MAX_M 32

/* out[r] = sum over blocks j of sc[j] * (a_r . q) for NBITS_ROWS staged
 * rows a_r (a + r * kp) and one column of nb blocks of bs weights (bits 4:
 * bs / 2 bytes per block, low nibbles first; bits 8: bs bytes). The weights
 * are widened once and used for every row. The portable loop keeps eight
 * partial sums per row; x86-64 adds an AVX2 + FMA version picked at run
 * time by the CPU. */
#define NBITS_ROWS 4

static void col_dot(const float *a, int64_t kp, const uint8_t *p, const float *sc, int64_t nb,
                    int64_t bs, int bits, float *out) {
  int64_t bytes = bits == 8 ? bs : bs / 2, half = bs / 2;
  for (int r = 0; r < NBITS_ROWS; r++) out[r] = 0;
  for (int64_t j = 0; j < nb; j++, a += bs, p += bytes) {
    float acc[NBITS_ROWS][8] = {{0}};
    for (int64_t i = 0; i < bytes; i += 8)
      for (int l = 0; l < 8; l++) {
        float lo = (float)(bits == 8 ? p[i + l] : p[i + l] & 15), hi = (float)(p[i + l] >> 4);
        for (int r = 0; r < NBITS_ROWS; r++)
          acc[r][l] += bits == 8 ? a[r * kp + i + l] * lo
                                 : a[r * kp + i + l] * lo + a[r * kp + half + i + l] * hi;
      }
    for (int r = 0; r < NBITS_ROWS; r++) {
      const float *c = acc[r];
      out[r] += sc[j] * (((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7])));
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(KEEL_NBITS_PORTABLE)
#include <immintrin.h>
#define NBITS_AVX2 1

__attribute__((target("avx2,fma"))) static float hsum_avx2(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) static void col_dot_avx2(const float *a, int64_t kp,
                                                             const uint8_t *p, const float *sc,
                                                             int64_t nb, int64_t bs, int bits,
                                                             float *out) {
  int64_t bytes = bits == 8 ? bs : bs / 2, half = bs / 2;
  const __m256i m15 = _mm256_set1_epi32(15);
  __m256 t0 = _mm256_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
  const float *a0 = a, *a1 = a + kp, *a2 = a + 2 * kp, *a3 = a + 3 * kp;
  for (int64_t j = 0; j < nb; j++, p += bytes) {
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    int64_t o = j * bs;
    for (int64_t i = 0; i < bytes; i += 8) {
      __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + i)));
      __m256 lo = _mm256_cvtepi32_ps(bits == 8 ? b : _mm256_and_si256(b, m15));
      c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + o + i), lo, c0);
      c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + o + i), lo, c1);
      c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + o + i), lo, c2);
      c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + o + i), lo, c3);
      if (bits == 8) continue;
      __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
      int64_t h = o + half + i;
      c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + h), hi, c0);
      c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + h), hi, c1);
      c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + h), hi, c2);
      c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + h), hi, c3);
    }
    __m256 s = _mm256_set1_ps(sc[j]);
    t0 = _mm256_fmadd_ps(s, c0, t0);
    t1 = _mm256_fmadd_ps(s, c1, t1);
    t2 = _mm256_fmadd_ps(s, c2, t2);
    t3 = _mm256_fmadd_ps(s, c3, t3);
  }
  out[0] = hsum_avx2(t0), out[1] = hsum_avx2(t1), out[2] = hsum_avx2(t2), out[3] = hsum_avx2(t3);
}

/* The same for one row (M below NBITS_ROWS leaves no rows to share). */
__attribute__((target("avx2,fma"))) static float col_dot1_avx2(const float *a, const uint8_t *p,
                                                               const float *sc, int64_t nb,
                                                               int64_t bs, int bits) {
  int64_t bytes = bits == 8 ? bs : bs / 2, half = bs / 2;
  const __m256i m15 = _mm256_set1_epi32(15);
  __m256 t = _mm256_setzero_ps();
  for (int64_t j = 0; j < nb; j++, a += bs, p += bytes) {
    __m256 c = _mm256_setzero_ps();
    for (int64_t i = 0; i < bytes; i += 8) {
      __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + i)));
      __m256 lo = _mm256_cvtepi32_ps(bits == 8 ? b : _mm256_and_si256(b, m15));
      c = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), lo, c);
      if (bits == 8) continue;
      c = _mm256_fmadd_ps(_mm256_loadu_ps(a + half + i),
                          _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), c);
    }
    t = _mm256_fmadd_ps(_mm256_set1_ps(sc[j]), c, t);
  }
  return hsum_avx2(t);
}
#endif

/* The staged rows of A (see above) and their block sums, (nb, M). */
static void nbits_stage_a(const nbits *q, const float *a, int64_t M, float *st, float *sums) {
  int64_t kp = q->nb * q->bs, half = q->bs / 2;
  for (int64_t m = 0; m < M; m++)
    for (int64_t j = 0; j < q->nb; j++) {
      const float *x = a + m * q->K + j * q->bs;
      float *o = st + m * kp + j * q->bs, sum = 0;
      int64_t len = KEEL_MIN(q->bs, q->K - j * q->bs);
      for (int64_t e = 0; e < q->bs; e++) {
        float v = e < len ? x[e] : 0.0f;
        sum += v;
        if (q->bits == 8) o[e] = v;
        else o[(e & 1) * half + e / 2] = v;
      }
      sums[j * M + m] = sum;
    }
}

/* How nbits_direct multiplies a group of rows of one column. */
typedef enum { DOT_PORTABLE, DOT_AVX2_ROWS, DOT_AVX2_ONE } dot_kind;

/* Column n for rows [m0, m0 + cnt): the weight part from a kernel, minus
 * the zero points' part sum_j zs[j] * (block sum j of a), plus the bias.
 * sums is (nb, M): block sums, row index fastest. */
static void nbits_direct_rows(const nbits *q, const float *st, const float *sums, int64_t M,
                              int64_t m0, int64_t cnt, int64_t n, const float *zs, dot_kind kind,
                              float *y) {
  int64_t kp = q->nb * q->bs;
  const uint8_t *col = q->b + n * q->nb * q->blob;
  const float *sc = q->scales + n * q->nb;
  float v[NBITS_ROWS], zsum[NBITS_ROWS] = {0};
#ifdef NBITS_AVX2
  if (kind == DOT_AVX2_ONE) v[0] = col_dot1_avx2(st + m0 * kp, col, sc, q->nb, q->bs, (int)q->bits);
  else if (kind == DOT_AVX2_ROWS) col_dot_avx2(st + m0 * kp, kp, col, sc, q->nb, q->bs, (int)q->bits, v);
  else
#endif
    col_dot(st + m0 * kp, kp, col, sc, q->nb, q->bs, (int)q->bits, v);
  for (int64_t j = 0; j < q->nb; j++)
    for (int64_t r = 0; r < cnt; r++) zsum[r] += zs[j] * sums[j * M + m0 + r];
  for (int64_t r = 0; r < cnt; r++)
    y[(m0 + r) * q->N + n] = v[r] - zsum[r] + (q->bias ? q->bias[n] : 0.0f);
}

static keel_status nbits_direct(keel_kctx *k, const nbits *q, const float *a, int64_t M,
                                float *y) {
  /* the portable kernel reads NBITS_ROWS rows at a time: pad with zeros */
  int64_t kp = q->nb * q->bs, Mp = (M + NBITS_ROWS - 1) / NBITS_ROWS * NBITS_ROWS;
  void *ps, *pm, *pz;
  KEEL_TRY(keel_k_scratch_n(k, Mp * kp, sizeof(float), &ps));
  KEEL_TRY(keel_k_scratch_n(k, M * q->nb, sizeof(float), &pm));
  KEEL_TRY(keel_k_scratch_n(k, q->nb, sizeof(float), &pz));
  float *st = ps, *sums = pm, *zs = pz;
  nbits_stage_a(q, a, M, st, sums);
  memset(st + M * kp, 0, (size_t)((Mp - M) * kp) * sizeof(float));
  bool avx2 = false;
#ifdef NBITS_AVX2
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  for (int64_t n = 0; n < q->N; n++) {
    for (int64_t j = 0; j < q->nb; j++) zs[j] = q->scales[n * q->nb + j] * nbits_zp(q, n, j);
    int64_t m0 = 0;
    if (!avx2)
      for (; m0 < M; m0 += NBITS_ROWS)
        nbits_direct_rows(q, st, sums, M, m0, KEEL_MIN(NBITS_ROWS, M - m0), n, zs, DOT_PORTABLE, y);
    for (; m0 + NBITS_ROWS <= M; m0 += NBITS_ROWS)
      nbits_direct_rows(q, st, sums, M, m0, NBITS_ROWS, n, zs, DOT_AVX2_ROWS, y);
    for (; m0 < M; m0++) nbits_direct_rows(q, st, sums, M, m0, 1, n, zs, DOT_AVX2_ONE, y);
  }
  return KEEL_OK;
}

/* ----------------------------------------------- many rows: tiles + sgemm */

/* Y (M, N) = A (M, K) x W^T, one tile of dequantized columns at a time. */
static keel_status nbits_gemm(keel_kctx *k, const nbits *q, const float *a, int64_t M, float *y) {
  int64_t tile = KEEL_MAX(1, KEEL_MIN(q->N, NBITS_TILE_FLOATS / q->K));
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, tile * q->K, sizeof(float), &p));
  float *w = p; /* (tile, K): W^T rows */
  KEEL_TRY(keel_blas_fits(KEEL_MAX(M, KEEL_MAX(q->N, q->K))));
  for (int64_t n0 = 0; n0 < q->N; n0 += tile) {
    int64_t nt = KEEL_MIN(tile, q->N - n0);
    for (int64_t c = 0; c < nt; c++) nbits_column(q, n0 + c, w + c * q->K);
    keel_gemm_f32(k->pool, false, true, M, nt, q->K, 1.0f, a, q->K, w, q->K, 0.0f, y + n0, q->N);
  }
  if (q->bias)
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < q->N; n++) y[m * q->N + n] += q->bias[n];
  return KEEL_OK;
}

/* ------------------------------------------ accuracy_level 4: int8 A */

/* Quantized column n: (q - zp) per element (in [-255, 255]), K padded to
 * nb * bs with zeros. */
static void nbits_column_int(const nbits *q, int64_t n, int16_t *w) {
  const uint8_t *col = q->b + n * q->nb * q->blob;
  for (int64_t j = 0; j < q->nb; j++) {
    const uint8_t *p = col + j * q->blob;
    int z = (int)nbits_zp(q, n, j);
    int64_t k0 = j * q->bs, len = KEEL_MIN(q->bs, q->K - k0);
    int16_t *o = w + k0;
    for (int64_t e = 0; e < q->bs; e++) {
      int v = q->bits == 8 ? p[e] : (e & 1) ? p[e / 2] >> 4 : p[e / 2] & 15;
      o[e] = (int16_t)(e < len ? v - z : 0);
    }
  }
}

/* A's rows quantized per block of bs: scale amax / 127, values
 * round(a / scale) (ONNX Runtime's CompInt8 path). qa (M, nb * bs), sa (M, nb). */
static void nbits_quant_a(const nbits *q, const float *a, int64_t M, int8_t *qa, float *sa) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t j = 0; j < q->nb; j++) {
      const float *x = a + m * q->K + j * q->bs;
      int64_t len = KEEL_MIN(q->bs, q->K - j * q->bs);
      float amax = 0;
      for (int64_t e = 0; e < len; e++) amax = fmaxf(amax, fabsf(x[e]));
      float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
      int8_t *o = qa + (m * q->nb + j) * q->bs;
      for (int64_t e = 0; e < q->bs; e++)
        o[e] = (int8_t)(e < len ? sat(rintf(x[e] * inv), -127, 127) : 0);
      sa[m * q->nb + j] = s;
    }
}

static int32_t dot_i8(const int8_t *a, const int16_t *b, int64_t n) {
  int32_t s = 0;
  for (int64_t i = 0; i < n; i++) s += (int32_t)a[i] * (int32_t)b[i];
  return s;
}

/* Y = sum over blocks of sa * scale * (qa . (q - zp)): A in int8. */
static keel_status nbits_int8(keel_kctx *k, const nbits *q, const float *a, int64_t M, float *y) {
  int64_t kp = q->nb * q->bs;
  void *pa, *ps, *pw;
  KEEL_TRY(keel_k_scratch_n(k, M * kp, 1, &pa));
  KEEL_TRY(keel_k_scratch_n(k, M * q->nb, sizeof(float), &ps));
  KEEL_TRY(keel_k_scratch_n(k, kp, sizeof(int16_t), &pw));
  int8_t *qa = pa;
  int16_t *w = pw;
  float *sa = ps;
  nbits_quant_a(q, a, M, qa, sa);
  for (int64_t n = 0; n < q->N; n++) {
    nbits_column_int(q, n, w);
    const float *sc = q->scales + n * q->nb;
    for (int64_t m = 0; m < M; m++) {
      float acc = 0;
      for (int64_t j = 0; j < q->nb; j++)
        acc += sa[m * q->nb + j] * sc[j] *
               (float)dot_i8(qa + m * kp + j * q->bs, w + j * q->bs, q->bs);
      y[m * q->N + n] = acc + (q->bias ? q->bias[n] : 0.0f);
    }
  }
  return KEEL_OK;
}

/* Y (..., N) = A (..., K) x dequantized B^T (+ bias). accuracy_level 4
 * allows A in int8: with packed (or no) zero points and no g_idx, keel then
 * quantizes A per block as ONNX Runtime does; otherwise it computes in
 * float. */
/* The product into y (M, N floats) by the path that fits. */
static keel_status nbits_run(keel_kctx *k, const nbits *q, const float *a, int64_t M, float *y) {
  if (keel_k_attr_i(k, "accuracy_level", 0) == 4 && !q->g_idx && !q->zpf)
    return nbits_int8(k, q, a, M, y);
  if (M <= NBITS_DOT_MAX_M && !q->g_idx) return nbits_direct(k, q, a, M, y);
  return nbits_gemm(k, q, a, M, y);
}

static keel_status op_matmul_nbits(keel_kctx *k) {
  const keel_tensor *a;
  KEEL_TRY(keel_k_in(k, 0, &a));
  if (a->dtype != KEEL_FLOAT && a->dtype != KEEL_FLOAT16)
    return keel_err(KEEL_ERR_UNSUPPORTED, "MatMulNBits (domain %s, opset 1): A is %s; float and "
                    "float16 are supported", MS, dtn(a->dtype));
  nbits q;
  KEEL_TRY(nbits_attrs(k, &q));
  if (a->rank < 1 || a->shape[a->rank - 1] != q.K) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "A %s must end in K = %lld",
                    keel_shape_str(a->rank, a->shape, s, sizeof s), (long long)q.K);
  }
  KEEL_TRY(nbits_inputs(k, a->dtype, &q));
  int64_t shape[KEEL_MAX_RANK];
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->rank);
  shape[a->rank - 1] = q.N;
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, a->dtype, a->rank, shape, &y));
  int64_t M = keel_shape_numel(a->rank - 1, a->shape);
  if (M == 0) return KEEL_OK;
  if (a->dtype == KEEL_FLOAT) return nbits_run(k, &q, a->data, M, y->data);
  keel_tensor af; /* float16: in float, rounded once at the end */
  void *yf;
  KEEL_TRY(keel_k_to_f32(k, a, &af));
  KEEL_TRY(keel_k_scratch_n(k, M * q.N, sizeof(float), &yf));
  KEEL_TRY(nbits_run(k, &q, af.data, M, yf));
  keel_f32_store(yf, y);
  return KEEL_OK;
}

/* =========================================== integer matmuls to float */

/* t - zp as a float tensor in scratch; zp: NULL, one value, or one per
 * column of the last dim (cols). float holds every such difference and
 * every product exactly; the sums round like any float matmul. */
static keel_status shifted_f32(keel_kctx *k, const keel_tensor *t, const keel_tensor *zp,
                               int64_t cols, keel_tensor *out) {
  int64_t n = keel_tensor_numel(t), nz = zp ? keel_tensor_numel(zp) : 0;
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, n, sizeof(float), &p));
  float *f = p;
  for (int64_t i = 0; i < n; i++) {
    int32_t z = nz == 0 ? 0 : get8(zp->dtype, zp->data, nz == 1 ? 0 : i % cols);
    f[i] = (float)(get8(t->dtype, t->data, i) - z);
  }
  *out = *t;
  out->dtype = KEEL_FLOAT, out->data = f, out->buf = NULL;
  return KEEL_OK;
}

/* Y = ((A - a_zp) x (B - b_zp)) * (a_scale * b_scale[n]) + bias[n] over
 * columns n of N. b_scale: one value or one per column; bias (N) optional.
 * Zero points of one value (or one per column of B) run the product as a
 * float GEMM; other layouts run MatMulInteger's int32 product. */
static keel_status int_mm_to_float(keel_kctx *k, const keel_tensor *a, const keel_tensor *b,
                                   const keel_tensor *az, const keel_tensor *bz, float a_scale,
                                   const keel_tensor *bs, const keel_tensor *bias) {
  int64_t N = b->rank >= 2 ? b->shape[b->rank - 1] : 1, nbs = keel_tensor_numel(bs);
  if (!keel_dtype_is_float(bs->dtype) || (nbs != 1 && nbs != N))
    return keel_err(KEEL_ERR_SHAPE, "b_scale must be float with 1 or N = %lld values, got %s "
                    "with %lld", (long long)N, dtn(bs->dtype), (long long)nbs);
  if (bias && (bias->dtype != KEEL_FLOAT || keel_tensor_numel(bias) != N))
    return keel_err(KEEL_ERR_SHAPE, "bias must be float with N = %lld values", (long long)N);
  keel_tensor *y;
  int64_t nbz = bz ? keel_tensor_numel(bz) : 1;
  if ((!az || keel_tensor_numel(az) == 1) && (nbz == 1 || (bz->rank == 1 && nbz == N))) {
    keel_tensor fa, fb;
    KEEL_TRY(shifted_f32(k, a, az, 1, &fa));
    KEEL_TRY(shifted_f32(k, b, bz, N, &fb));
    KEEL_TRY(keel_matmul(k, &fa, &fb, &y));
  } else {
    keel_mm_int r;
    KEEL_TRY(keel_matmul_int32(k, a, b, az, bz, &r));
    KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, r.rank, r.shape, &y));
    for (int64_t i = 0; i < r.numel; i++) ((float *)y->data)[i] = (float)r.acc[i];
  }
  int64_t ny = keel_tensor_numel(y);
  if (ny == 0) return KEEL_OK;
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, N, sizeof(float), &p));
  float *sc = p, *yd = y->data;
  for (int64_t n = 0; n < N; n++)
    sc[n] = a_scale * (float)keel_elem_get_f64(bs->dtype, bs->data, nbs == 1 ? 0 : (size_t)n);
  const float *bd = bias ? bias->data : NULL;
  for (int64_t i = 0; i < ny; i++) yd[i] = yd[i] * sc[i % N] + (bd ? bd[i % N] : 0.0f);
  return KEEL_OK;
}

/* The zero point of B must be one value or one per column, of B's type. */
static keel_status check_bzp(const keel_tensor *b, const keel_tensor *bz) {
  if (!bz) return KEEL_OK;
  if (bz->dtype != b->dtype)
    return keel_err(KEEL_ERR_SHAPE, "b_zero_point is %s but B is %s", dtn(bz->dtype),
                    dtn(b->dtype));
  return KEEL_OK;
}

/* Y = (A - a_zp) x (B - b_zp) * a_scale * b_scale + bias. */
static keel_status op_matmul_integer_to_float(keel_kctx *k) {
  const keel_tensor *a, *b, *as, *bs, *az, *bz, *bias;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(keel_k_in(k, 2, &as));
  KEEL_TRY(keel_k_in(k, 3, &bs));
  KEEL_TRY(keel_k_in_opt(k, 4, &az));
  KEEL_TRY(keel_k_in_opt(k, 5, &bz));
  KEEL_TRY(keel_k_in_opt(k, 6, &bias));
  KEEL_TRY(need_q8(a, "MatMulIntegerToFloat", "A"));
  KEEL_TRY(need_q8(b, "MatMulIntegerToFloat", "B"));
  if (keel_tensor_numel(as) != 1 || !keel_dtype_is_float(as->dtype))
    return keel_err(KEEL_ERR_SHAPE, "a_scale must be one float value");
  if (az && (az->dtype != a->dtype || keel_tensor_numel(az) != 1))
    return keel_err(KEEL_ERR_SHAPE, "a_zero_point must be one %s value, got %s with %lld",
                    dtn(a->dtype), dtn(az->dtype), (long long)keel_tensor_numel(az));
  KEEL_TRY(check_bzp(b, bz));
  return int_mm_to_float(k, a, b, az, bz, (float)keel_elem_get_f64(as->dtype, as->data, 0), bs,
                         bias);
}

/* A (float) is quantized to uint8 per tensor as DynamicQuantizeLinear
 * does, then MatMulIntegerToFloat with B. */
static keel_status op_dynamic_quantize_matmul(keel_kctx *k) {
  const keel_tensor *a, *b, *bs, *bz, *bias;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(keel_k_in(k, 2, &bs));
  KEEL_TRY(keel_k_in_opt(k, 3, &bz));
  KEEL_TRY(keel_k_in_opt(k, 4, &bias));
  if (a->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_UNSUPPORTED, "DynamicQuantizeMatMul (domain %s, opset 1): A is %s; "
                    "float is supported", MS, dtn(a->dtype));
  KEEL_TRY(need_q8(b, "DynamicQuantizeMatMul", "B"));
  KEEL_TRY(check_bzp(b, bz));
  int64_t n = keel_tensor_numel(a);
  void *p;
  KEEL_TRY(keel_k_scratch_n(k, n, 1, &p));
  float scale;
  uint8_t zp;
  keel_dynq_u8(a->data, n, p, &scale, &zp);
  keel_tensor qa = *a, qz = {0};
  qa.dtype = KEEL_UINT8, qa.data = p, qa.buf = NULL;
  qz.dtype = KEEL_UINT8, qz.rank = 0, qz.data = &zp;
  return int_mm_to_float(k, &qa, b, &qz, bz, scale, bs, bias);
}

/* ============================================= QLinear binary ops */

typedef struct qbin {
  int dt;
  float sa, sb, sc;
  int32_t za, zb, zc;
} qbin;

/* The ops' inputs: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp. */
static keel_status qbin_read(keel_kctx *k, const char *op, const keel_tensor **a,
                             const keel_tensor **b, qbin *q) {
  KEEL_TRY(keel_k_in(k, 0, a));
  KEEL_TRY(keel_k_in(k, 3, b));
  KEEL_TRY(need_q8(*a, op, "A"));
  if ((*b)->dtype != (*a)->dtype)
    return keel_err(KEEL_ERR_SHAPE, "A is %s but B is %s", dtn((*a)->dtype), dtn((*b)->dtype));
  q->dt = (*a)->dtype;
  KEEL_TRY(q_scalar(k, 1, 2, q->dt, "A", &q->sa, &q->za));
  KEEL_TRY(q_scalar(k, 4, 5, q->dt, "B", &q->sb, &q->zb));
  return q_scalar(k, 6, 7, q->dt, "C", &q->sc, &q->zc);
}

/* C = f(A, B) over numpy broadcasting, element by element. */
static keel_status qbin_run(keel_kctx *k, const char *op, bool mul) {
  const keel_tensor *a, *b;
  qbin q;
  KEEL_TRY(qbin_read(k, op, &a, &b, &q));
  int r;
  int64_t shape[KEEL_MAX_RANK], sa[KEEL_MAX_RANK], sb[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0};
  KEEL_TRY(keel_broadcast_shape(a->rank, a->shape, b->rank, b->shape, &r, shape));
  keel_broadcast_strides(a->rank, a->shape, r, shape, sa);
  keel_broadcast_strides(b->rank, b->shape, r, shape, sb);
  keel_tensor *c;
  KEEL_TRY(keel_k_out(k, 0, q.dt, r, shape, &c));
  int64_t n = keel_tensor_numel(c), oa = 0, ob = 0;
  /* Add as MLAS computes it: a * (sa/sc) + (b * (sb/sc) + zs) in two fused
   * multiply-adds, zs = zc - za * (sa/sc) - zb * (sb/sc); ties then round
   * the way ONNX Runtime's do. */
  float ra = q.sa / q.sc, rb = q.sb / q.sc, rm = q.sa * q.sb / q.sc;
  float zs = (float)q.zc - ra * (float)q.za - rb * (float)q.zb;
  for (int64_t i = 0; i < n; i++) {
    int32_t va = get8(q.dt, a->data, oa), vb = get8(q.dt, b->data, ob);
    int32_t o;
    if (mul) o = q8((float)(va - q.za) * (float)(vb - q.zb) * rm, q.zc, q.dt);
    else o = q8(fmaf(ra, (float)va, fmaf(rb, (float)vb, zs)), 0, q.dt);
    put8(q.dt, c->data, i, o);
    for (int d = r - 1; d >= 0; d--) {
      oa += sa[d], ob += sb[d];
      if (++idx[d] < shape[d]) break;
      oa -= sa[d] * shape[d], ob -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
  return KEEL_OK;
}

static keel_status op_qlinear_add(keel_kctx *k) { return qbin_run(k, "QLinearAdd", false); }
static keel_status op_qlinear_mul(keel_kctx *k) { return qbin_run(k, "QLinearMul", true); }

/* ============================================= table-driven unary ops */

/* table[v + 128 or v] = quantize(f(dequantize(v))) for every 8-bit v;
 * f NULL: identity (requantization). */
static void q_table(int dt, float xs, int32_t xz, float ys, int32_t yz, float (*f)(float),
                    uint8_t *table) {
  for (int i = 0; i < 256; i++) {
    int32_t v = dt == KEEL_UINT8 ? i : i - 128;
    float x = (float)(v - xz) * xs;
    float y = f ? f(x) : x;
    int32_t o = q8(y / ys, yz, dt);
    table[i] = (uint8_t)o; /* int8 stored by its bit pattern */
  }
}

/* dst[i] = table[src[i]] (int8 indexes from -128). */
static void q_lookup(int dt, const uint8_t *table, const void *src, void *dst, int64_t n) {
  const uint8_t *s = src;
  uint8_t *o = dst;
  int off = dt == KEEL_UINT8 ? 0 : 128;
  for (int64_t i = 0; i < n; i++) o[i] = table[(uint8_t)(s[i] + off)];
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static keel_status op_qlinear_sigmoid(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(need_q8(x, "QLinearSigmoid", "X"));
  float xs, ys;
  int32_t xz, yz;
  KEEL_TRY(q_scalar(k, 1, 2, x->dtype, "X", &xs, &xz));
  KEEL_TRY(q_scalar(k, 3, 4, x->dtype, "Y", &ys, &yz));
  uint8_t table[256];
  q_table(x->dtype, xs, xz, ys, yz, sigmoidf, table);
  keel_tensor *y;
  KEEL_TRY(keel_k_reuse(k, 0, 0, x->dtype, x->rank, x->shape, &y));
  q_lookup(x->dtype, table, x->data, y->data, keel_tensor_numel(x));
  return KEEL_OK;
}

/* ======================================================= QLinearConcat */

/* Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per
 * tensor; each X is requantized to Y's parameters (copied when they
 * match) and the results are concatenated along axis. */
static keel_status qconcat_check(keel_kctx *k, const keel_tensor *x0, int axis, int i,
                                 const keel_tensor *x) {
  bool ok = x->rank == x0->rank && x->dtype == x0->dtype;
  for (int d = 0; ok && d < x->rank; d++) ok = d == axis || x->shape[d] == x0->shape[d];
  (void)k;
  if (ok) return KEEL_OK;
  char s1[128], s2[128];
  return keel_err(KEEL_ERR_SHAPE, "input %d %s (%s) does not concatenate with "
                  "%s (%s) along axis %d", i, keel_shape_str(x->rank, x->shape, s1, sizeof s1),
                  dtn(x->dtype), keel_shape_str(x0->rank, x0->shape, s2, sizeof s2),
                  dtn(x0->dtype), axis);
}

static keel_status op_qlinear_concat(keel_kctx *k) {
  if (k->n_in < 5 || (k->n_in - 2) % 3)
    return keel_err(KEEL_ERR_SHAPE, "QLinearConcat takes Y_scale, Y_zero_point and triples "
                    "(X, X_scale, X_zero_point); got %d inputs", k->n_in);
  int nt = (k->n_in - 2) / 3, axis;
  const keel_tensor *x0;
  KEEL_TRY(keel_k_in(k, 2, &x0));
  KEEL_TRY(need_q8(x0, "QLinearConcat", "X"));
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x0->rank, "axis", &axis));
  float ys;
  int32_t yz;
  KEEL_TRY(q_scalar(k, 0, 1, x0->dtype, "Y", &ys, &yz));
  int64_t shape[KEEL_MAX_RANK];
  memcpy(shape, x0->shape, sizeof(int64_t) * (size_t)x0->rank);
  shape[axis] = 0;
  for (int i = 0; i < nt; i++) {
    const keel_tensor *x;
    KEEL_TRY(keel_k_in(k, 2 + 3 * i, &x));
    KEEL_TRY(qconcat_check(k, x0, axis, i, x));
    shape[axis] += x->shape[axis];
  }
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x0->dtype, x0->rank, shape, &y));
  int64_t outer = keel_shape_numel(axis, shape), inner = keel_shape_numel(x0->rank - axis - 1,
                                                                          shape + axis + 1);
  int64_t row = shape[axis] * inner, at = 0;
  for (int i = 0; i < nt; i++) {
    const keel_tensor *x;
    float xs;
    int32_t xz;
    KEEL_TRY(keel_k_in(k, 2 + 3 * i, &x));
    KEEL_TRY(q_scalar(k, 3 + 3 * i, 4 + 3 * i, x0->dtype, "X", &xs, &xz));
    uint8_t table[256];
    bool same = xs == ys && xz == yz;
    if (!same) q_table(x0->dtype, xs, xz, ys, yz, NULL, table);
    int64_t len = x->shape[axis] * inner;
    for (int64_t o = 0; o < outer && len; o++) {
      const uint8_t *src = (const uint8_t *)x->data + o * len;
      uint8_t *dst = (uint8_t *)y->data + o * row + at;
      if (same) memcpy(dst, src, (size_t)len);
      else q_lookup(x0->dtype, table, src, dst, len);
    }
    at += len;
  }
  return KEEL_OK;
}

/* ============================================ QLinearGlobalAveragePool */

/* Y (N, C, 1, ...) or, channels_last, (N, 1, ..., C) = the quantized mean
 * over the spatial dims: (sum - x_zp * size) * x_scale / (y_scale * size). */
static keel_status op_qlinear_gap(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(need_q8(x, "QLinearGlobalAveragePool", "X"));
  if (x->rank < 3) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "X %s must be (N, C, d1, ...)",
                    keel_shape_str(x->rank, x->shape, s, sizeof s));
  }
  float xs, ys;
  int32_t xz, yz;
  KEEL_TRY(q_scalar(k, 1, 2, x->dtype, "x", &xs, &xz));
  KEEL_TRY(q_scalar(k, 3, 4, x->dtype, "y", &ys, &yz));
  bool last = keel_k_attr_i(k, "channels_last", 0) != 0;
  int cd = last ? x->rank - 1 : 1;
  int64_t shape[KEEL_MAX_RANK], N = x->shape[0], C = x->shape[cd];
  for (int d = 0; d < x->rank; d++) shape[d] = d == 0 || d == cd ? x->shape[d] : 1;
  int64_t S = keel_tensor_numel(x) / (N * C > 0 ? N * C : 1);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, shape, &y));
  if (N * C == 0) return KEEL_OK;
  float scale = xs / (ys * (float)S);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      int64_t sum = 0;
      for (int64_t s = 0; s < S; s++)
        sum += get8(x->dtype, x->data, last ? (n * S + s) * C + c : (n * C + c) * S + s);
      float v = (float)(sum - (int64_t)xz * S) * scale;
      put8(x->dtype, y->data, n * C + c, q8(v, yz, x->dtype));
    }
  return KEEL_OK;
}

/* ============================================================ table */

#define Q8 (KEEL_T(KEEL_INT8) | KEEL_T(KEEL_UINT8))
#define F32 KEEL_T(KEEL_FLOAT)
const keel_opdef keel_ops_contrib_quant[] = {
    {MS, "MatMulNBits", 1, KEEL_OPSET_MAX, op_matmul_nbits, 0, F32 | KEEL_T(KEEL_FLOAT16)},
    {MS, "MatMulIntegerToFloat", 1, KEEL_OPSET_MAX, op_matmul_integer_to_float, 0, Q8},
    {MS, "DynamicQuantizeMatMul", 1, KEEL_OPSET_MAX, op_dynamic_quantize_matmul, 0, F32},
    {MS, "QLinearAdd", 1, KEEL_OPSET_MAX, op_qlinear_add, 0, Q8},
    {MS, "QLinearMul", 1, KEEL_OPSET_MAX, op_qlinear_mul, 0, Q8},
    {MS, "QLinearSigmoid", 1, KEEL_OPSET_MAX, op_qlinear_sigmoid, 0, Q8},
    {MS, "QLinearConcat", 1, KEEL_OPSET_MAX, op_qlinear_concat, 0, Q8},
    {MS, "QLinearGlobalAveragePool", 1, KEEL_OPSET_MAX, op_qlinear_gap, 0, Q8},
    {0},
};
#undef F32
#undef Q8
