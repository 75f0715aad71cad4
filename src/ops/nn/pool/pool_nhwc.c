/* pool_nhwc.c: pooling on channels-last tensors, internal ops (domain
 * ai.keel.internal, opset 1) for a layout pass to emit:
 *
 *   NhwcMaxPool, NhwcAveragePool      X [N, H, W, C] -> Y [N, OH, OW, C]
 *   NhwcGlobalMaxPool,
 *   NhwcGlobalAveragePool             X [N, H, W, C] -> Y [N, 1, 1, C]
 *
 * Each computes exactly what ONNX's MaxPool / AveragePool / Global* compute
 * on the NCHW transpose of X (pool.c's results, bit for bit: the same
 * window geometry from conv_util.h, the same tap order, the same NaN and
 * tie rule, the same divisors, the same arithmetic; the global mean adds
 * its double sums by runs of positions, so it may differ from pool.c's in
 * the last bit), float32 only, two spatial dims. MaxPool's Indices output does not exist here.
 *
 * Channels are contiguous, so every window tap is one run of C floats and
 * the inner loops are plain loops over c, which the compiler vectorizes.
 * Per output position the valid kernel rows and columns are worked out
 * once (the columns once per call, in a table), so no tap is
 * bounds-checked; then blocks of 64, 32, 16, 8 and 4 channels run the whole
 * window in vector registers (nh_block64 .. nh_block4, GCC vector types:
 * max as a compare and blend per tap; a row where some lane never rose
 * above -inf is done again with the exact NaN rule), and the last C % 4
 * channels go tap by tap. Rows (image, output row) are spread over
 * the session's pool; the global pools split (image, run of positions),
 * each run's partials combined after (nh_global_body). The bodies are compiled for AVX-512, AVX2 and baseline
 * x86-64 and picked at run time, as conv_fast.c does.
 *
 * ResNet-50's stem max pool (3x3/s2/p1, [1,112,112,64]) on one thread:
 * about 0.075 ms here against 6 ms for pool.c's MaxPool on NCHW.
 */
#include <stdatomic.h>

#include "base/pool.h"
#include "ops/common/conv_util.h"

enum { NH_MAX, NH_AVG };

#define NH_GPOS_BYTES 65536     /* a global-pool task: positions of about
                                   this many bytes of X                   */

/* ========================================================= geometry */

static int64_t nh_cdiv(int64_t a, int64_t b) { /* ceil(a / b), b > 0 */
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/* The taps of output position o along spatial dim d: kernel taps
 * [k0, k1) land inside the input, tap t at input coordinate i0 + t * dil;
 * `inside` counts the taps inside the padded extent [-pb, in + pe)
 * (count_include_pad's divisor; pool.c's win_taps per dim). */
typedef struct nh_span {
  int64_t k0, k1, i0, inside;
} nh_span;

static nh_span nh_span_of(const keel_win *w, int d, int64_t o) {
  int64_t s0 = o * w->s[d] - w->pb[d], dl = w->d[d];
  nh_span r;
  r.i0 = s0;
  r.k0 = KEEL_MAX(0, nh_cdiv(-s0, dl));
  r.k1 = KEEL_MIN(w->k[d], nh_cdiv(w->in[d] - s0, dl));
  if (r.k1 < r.k0) r.k1 = r.k0;
  int64_t plo = KEEL_MAX(0, nh_cdiv(-w->pb[d] - s0, dl));
  int64_t phi = KEEL_MIN(w->k[d], nh_cdiv(w->in[d] + w->pe[d] - s0, dl));
  r.inside = KEEL_MAX(0, phi - plo);
  return r;
}

typedef struct nh_job {
  keel_win w;                   /* 2 spatial dims: in = {H, W}            */
  int kind;                     /* NH_*                                   */
  bool include_pad;             /* AveragePool count_include_pad          */
  int64_t C;
  const float *x;               /* [N, H, W, C]                           */
  float *y;                     /* [N, OH, OW, C], or [N, C] (global)     */
  const nh_span *cols;          /* OW spans along W                       */
  int64_t hw, pos, chunks;      /* global: H * W, positions per task, tasks
                                   per image                              */
  void *part;                   /* global: per task C partials (double sums,
                                   or float maxima)                       */
} nh_job;

/* ============================================================ bodies */

#define NH_INLINE static inline __attribute__((always_inline))

NH_INLINE void nh_fill(float *restrict y, float v, int64_t C) {
  for (int64_t c = 0; c < C; c++) y[c] = v;
}
NH_INLINE void nh_copy(float *restrict y, const float *restrict x, int64_t C) {
  for (int64_t c = 0; c < C; c++) y[c] = x[c];
}
/* pool.c's rule: a later tap wins when it is larger or when the best so
 * far is NaN; so ties keep the first tap and NaN only wins when every tap
 * is NaN (then the last one). */
NH_INLINE void nh_max(float *restrict y, const float *restrict x, int64_t C) {
  for (int64_t c = 0; c < C; c++) {
    float v = x[c], m = y[c];
    y[c] = (v > m || m != m) ? v : m;
  }
}
/* 0 + x, not x: the sum starts at 0 as pool.c's does (-0 becomes +0). */
NH_INLINE void nh_first(float *restrict y, const float *restrict x, int64_t C) {
  for (int64_t c = 0; c < C; c++) y[c] = 0.0f + x[c];
}
NH_INLINE void nh_add(float *restrict y, const float *restrict x, int64_t C) {
  for (int64_t c = 0; c < C; c++) y[c] += x[c];
}
NH_INLINE void nh_div(float *restrict y, float d, int64_t C) {
  for (int64_t c = 0; c < C; c++) y[c] = y[c] / d;
}

/* The window of one output position over a block of channels held in
 * vector registers (GCC vector types, so each build below gets zmm, ymm
 * or xmm code from the same source; plain float arrays of 16 were
 * compiled to scalar code): the same taps in the same order as the exact
 * loops, each read once, y written once. Blocks are 64, 32 or 16 channels
 * (one to four 16-lane vectors), then 8 and 4.
 *
 * Max keeps acc = v > acc ? v : acc from -inf (a compare and a blend, or
 * one vmaxps): pool.c's answer, the first of the largest non-NaN taps,
 * wherever some tap is above -inf. A lane left at -inf had only NaNs and
 * -infs; the row's low mask says so and the row is done again with the
 * exact rule (NaN only when every tap is NaN, then the last one), which
 * real data never asks for. */
typedef float nh_f16 __attribute__((vector_size(64), aligned(4), may_alias));
typedef int32_t nh_m16 __attribute__((vector_size(64)));
typedef float nh_f8 __attribute__((vector_size(32), aligned(4), may_alias));
typedef int32_t nh_m8 __attribute__((vector_size(32)));
typedef float nh_f4 __attribute__((vector_size(16), aligned(4), may_alias));
typedef int32_t nh_m4 __attribute__((vector_size(16)));

/* The least of the row's maxima, by vector width: a lane at -inf means a
 * window of NaNs and -infs (kept as a minimum, the same compare and blend
 * as the max: a compare for -inf itself was compiled to scalar code). */
typedef struct nh_low {
  nh_f16 w16;
  nh_f8 w8;
  nh_f4 w4;
} nh_low;

#define NH_VBLOCK(NAME, VF, VM, LOW, NV, L)                                                   \
  NH_INLINE void NAME(int kind, float *restrict y, const float *restrict x0, int64_t nrow,    \
                      int64_t ncol, int64_t rstep, int64_t cstep, float div, nh_low *low) {   \
    VF acc[NV];                                                                               \
    if (kind == NH_MAX) {                                                                     \
      for (int v = 0; v < NV; v++) acc[v] = (VF){0} - INFINITY;                               \
      for (int64_t a = 0; a < nrow; a++)                                                      \
        for (int64_t b = 0; b < ncol; b++) {                                                  \
          const float *x = x0 + a * rstep + b * cstep;                                        \
          for (int v = 0; v < NV; v++) {                                                      \
            VF t = *(const VF *)(x + v * L);                                                  \
            VM m = t > acc[v];                                                                \
            acc[v] = (VF)(((VM)t & m) | ((VM)acc[v] & ~m));                                   \
          }                                                                                   \
        }                                                                                     \
      for (int v = 0; v < NV; v++) {                                                          \
        VM m = acc[v] < low->LOW;                                                             \
        low->LOW = (VF)(((VM)acc[v] & m) | ((VM)low->LOW & ~m));                              \
        *(VF *)(y + v * L) = acc[v];                                                          \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    for (int v = 0; v < NV; v++) acc[v] = 0.0f + *(const VF *)(x0 + v * L);                  \
    for (int64_t a = 0; a < nrow; a++)                                                        \
      for (int64_t b = a == 0; b < ncol; b++) {                                               \
        const float *x = x0 + a * rstep + b * cstep;                                          \
        for (int v = 0; v < NV; v++) acc[v] += *(const VF *)(x + v * L);                      \
      }                                                                                       \
    for (int v = 0; v < NV; v++) *(VF *)(y + v * L) = acc[v] / div;                           \
  }

NH_VBLOCK(nh_block64, nh_f16, nh_m16, w16, 4, 16)
NH_VBLOCK(nh_block32, nh_f16, nh_m16, w16, 2, 16)
NH_VBLOCK(nh_block16, nh_f16, nh_m16, w16, 1, 16)
NH_VBLOCK(nh_block8, nh_f8, nh_m8, w8, 1, 8)
NH_VBLOCK(nh_block4, nh_f4, nh_m4, w4, 1, 4)

NH_INLINE bool nh_any_low(const nh_low *l) {
  bool any = false;
  for (int i = 0; i < 16; i++) any |= l->w16[i] == -INFINITY;
  for (int i = 0; i < 8; i++) any |= l->w8[i] == -INFINITY;
  for (int i = 0; i < 4; i++) any |= l->w4[i] == -INFINITY;
  return any;
}

/* Channels [c0, C) of one window, tap by tap with the exact rules: the
 * last C % 4 channels, and whole rows the vector blocks left low. */
NH_INLINE void nh_taps(int kind, float *restrict yt, const float *xt, int64_t ct, int64_t nrow,
                       int64_t ncol, int64_t rstep, int64_t cstep, float div) {
  if (kind == NH_MAX) {
    nh_copy(yt, xt, ct);
    for (int64_t b = 1; b < ncol; b++) nh_max(yt, xt + b * cstep, ct);
    for (int64_t a = 1; a < nrow; a++)
      for (int64_t b = 0; b < ncol; b++) nh_max(yt, xt + a * rstep + b * cstep, ct);
    return;
  }
  nh_first(yt, xt, ct);
  for (int64_t b = 1; b < ncol; b++) nh_add(yt, xt + b * cstep, ct);
  for (int64_t a = 1; a < nrow; a++)
    for (int64_t b = 0; b < ncol; b++) nh_add(yt, xt + a * rstep + b * cstep, ct);
  nh_div(yt, div, ct);
}

/* Output row oy of image n: every position reduces its window's taps in
 * pool.c's order (kernel rows, then columns). exact: tap by tap for all
 * channels (the max row again when a vector lane stayed at -inf). */
NH_INLINE void nh_row_pass(const nh_job *j, int64_t n, int64_t oy, bool exact, nh_low *low) {
  const keel_win *w = &j->w;
  int64_t H = w->in[0], W = w->in[1], OW = w->out[1], C = j->C;
  int64_t rstep = w->d[0] * W * C, cstep = w->d[1] * C;
  nh_span r = nh_span_of(w, 0, oy);
  int64_t nrow = r.k1 - r.k0;
  const float *xn = j->x + n * H * W * C;
  float *yr = j->y + (n * w->out[0] + oy) * OW * C;
  int kind = j->kind;
  for (int64_t ox = 0; ox < OW; ox++) {
    const nh_span *cs = &j->cols[ox];
    float *restrict yo = yr + ox * C;
    int64_t ncol = cs->k1 - cs->k0;
    if (nrow == 0 || ncol == 0) { /* a window of padding only */
      nh_fill(yo, kind == NH_MAX ? -INFINITY : 0.0f, C);
      continue;
    }
    const float *x0 = xn + ((r.i0 + r.k0 * w->d[0]) * W + cs->i0 + cs->k0 * w->d[1]) * C;
    float div = (float)(j->include_pad ? r.inside * cs->inside : nrow * ncol);
    int64_t c0 = 0;
    if (!exact) {
      for (; c0 + 64 <= C; c0 += 64)
        nh_block64(kind, yo + c0, x0 + c0, nrow, ncol, rstep, cstep, div, low);
      if (c0 + 32 <= C) {
        nh_block32(kind, yo + c0, x0 + c0, nrow, ncol, rstep, cstep, div, low);
        c0 += 32;
      }
      if (c0 + 16 <= C) {
        nh_block16(kind, yo + c0, x0 + c0, nrow, ncol, rstep, cstep, div, low);
        c0 += 16;
      }
      if (c0 + 8 <= C) { /* 24, 40, 56, 88, 120 channels... */
        nh_block8(kind, yo + c0, x0 + c0, nrow, ncol, rstep, cstep, div, low);
        c0 += 8;
      }
      if (c0 + 4 <= C) { /* 116, 232, 464 (ShuffleNet) */
        nh_block4(kind, yo + c0, x0 + c0, nrow, ncol, rstep, cstep, div, low);
        c0 += 4;
      }
    }
    if (c0 < C) nh_taps(kind, yo + c0, x0 + c0, C - c0, nrow, ncol, rstep, cstep, div);
  }
}

NH_INLINE void nh_row_body(const nh_job *j, int64_t n, int64_t oy) {
  nh_low low = {(nh_f16){0} + INFINITY, (nh_f8){0} + INFINITY, (nh_f4){0} + INFINITY};
  nh_row_pass(j, n, oy, false, &low);
  if (j->kind == NH_MAX && nh_any_low(&low)) nh_row_pass(j, n, oy, true, &low);
}

/* Rows [b, e) of N * OH. */
#define NH_ROWS_BODY                                                    \
  for (int64_t i = b; i < e; i++) nh_row_body(j, i / j->w.out[0], i % j->w.out[0]);

/* Global pools, tasks [b, e) of N * chunks: positions [q * pos, ...) of
 * image n, all C channels, into the task's partials (max: pool.c's rule
 * tap by tap; mean: double sums in position order). nh_global combines
 * them in task order: the max by the same rule (which picks the same
 * element whatever the cut), the sums added in order, then / hw. The mean
 * adds four positions in double before each pass over the partials. A cut by
 * positions keeps each task on the rows one core made (the pool's home
 * ranges; base/pool.c); it depends on X's shape alone, so the sums are the
 * same at any thread count. */
NH_INLINE void nh_global_body(const nh_job *j, int64_t t) {
  int64_t n = t / j->chunks, p0 = t % j->chunks * j->pos, C = j->C;
  int64_t p1 = KEEL_MIN(j->hw, p0 + j->pos);
  const float *x = j->x + (n * j->hw + p0) * C;
  if (j->kind == NH_MAX) {
    float *restrict y = (float *)j->part + t * C;
    nh_copy(y, x, C);
    for (int64_t i = 1; i < p1 - p0; i++) nh_max(y, x + i * C, C);
    return;
  }
  double *restrict acc = (double *)j->part + t * C;
  for (int64_t c = 0; c < C; c++) acc[c] = 0;
  int64_t i = 0, np = p1 - p0;
  for (; i + 4 <= np; i += 4) { /* four positions per pass over acc */
    const float *restrict x0 = x + i * C, *restrict x1 = x0 + C, *restrict x2 = x1 + C,
                          *restrict x3 = x2 + C;
    for (int64_t c = 0; c < C; c++)
      acc[c] += ((double)x0[c] + (double)x1[c]) + ((double)x2[c] + (double)x3[c]);
  }
  for (; i < np; i++) {
    const float *restrict xi = x + i * C;
    for (int64_t c = 0; c < C; c++) acc[c] += (double)xi[c];
  }
}

#define NH_GLOBAL_BODY \
  for (int64_t t = b; t < e; t++) nh_global_body(j, t);

typedef void (*nh_range_fn)(const nh_job *j, int64_t b, int64_t e);
typedef struct nh_isa {
  nh_range_fn rows, global;
} nh_isa;

static void nh_rows_base(const nh_job *j, int64_t b, int64_t e) { NH_ROWS_BODY }
static void nh_global_base(const nh_job *j, int64_t b, int64_t e) { NH_GLOBAL_BODY }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NH_AVX2 __attribute__((target("avx2,fma")))
#define NH_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
NH_AVX2 static void nh_rows_avx2(const nh_job *j, int64_t b, int64_t e) { NH_ROWS_BODY }
NH_AVX2 static void nh_global_avx2(const nh_job *j, int64_t b, int64_t e) { NH_GLOBAL_BODY }
NH_AVX512 static void nh_rows_avx512(const nh_job *j, int64_t b, int64_t e) { NH_ROWS_BODY }
NH_AVX512 static void nh_global_avx512(const nh_job *j, int64_t b, int64_t e) {
  NH_GLOBAL_BODY
}
#endif

static const nh_isa *nh_pick(void) {
  static const nh_isa base = {nh_rows_base, nh_global_base};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const nh_isa avx2 = {nh_rows_avx2, nh_global_avx2};
  static const nh_isa avx512 = {nh_rows_avx512, nh_global_avx512};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return &avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2;
#endif
  return &base;
}

static _Atomic(const nh_isa *) g_nh_isa; /* picked once, at the first call */

static const nh_isa *nh_isa_get(void) {
  const nh_isa *f = atomic_load_explicit(&g_nh_isa, memory_order_relaxed);
  if (!f) atomic_store_explicit(&g_nh_isa, f = nh_pick(), memory_order_relaxed);
  return f;
}

static keel_status nh_rows_task(void *ctx, int64_t b, int64_t e, int worker) {
  (void)worker;
  nh_isa_get()->rows(ctx, b, e);
  return KEEL_OK;
}

static keel_status nh_global_task(void *ctx, int64_t b, int64_t e, int worker) {
  (void)worker;
  nh_isa_get()->global(ctx, b, e);
  return KEEL_OK;
}

/* ============================================================== ops */

static const char *nh_op(const keel_kctx *k) { return k->node->op_type; }

/* X: float32 of rank 4 (N, H, W, C). */
static keel_status nh_input(keel_kctx *k, const keel_tensor **x) {
  KEEL_TRY(keel_k_in(k, 0, x));
  if ((*x)->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s (ai.keel.internal, opset 1): X is %s; only "
                    "float32 is supported", nh_op(k), keel_dtype_name((keel_dtype)(*x)->dtype));
  if ((*x)->rank != 4)
    return keel_err(KEEL_ERR_SHAPE, "X must be (N, H, W, C), got rank %d", (*x)->rank);
  return KEEL_OK;
}

static keel_status nh_pool(keel_kctx *k, int kind) {
  if (k->n_out > 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s (ai.keel.internal, opset 1) has one output (Y; "
                    "no Indices), the node lists %d", nh_op(k), k->n_out);
  const keel_tensor *x;
  KEEL_TRY(nh_input(k, &x));
  nh_job j = {.kind = kind, .C = x->shape[3], .x = x->data};
  KEEL_TRY(keel_pool_setup(k, x, 1, &j.w)); /* pool.c's geometry on H, W */
  j.include_pad = keel_k_attr_i(k, "count_include_pad", 0) != 0;
  int64_t shape[4] = {x->shape[0], j.w.out[0], j.w.out[1], x->shape[3]};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, shape, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  j.y = y->data;
  void *cols;
  KEEL_TRY(keel_k_scratch_n(k, j.w.out[1], sizeof(nh_span), &cols));
  for (int64_t ox = 0; ox < j.w.out[1]; ox++) ((nh_span *)cols)[ox] = nh_span_of(&j.w, 1, ox);
  j.cols = cols;
  /* a row costs about OW * C * taps; a task gets at least ~16K of those */
  int64_t row = KEEL_MAX(1, j.w.out[1] * j.C * j.w.k_size);
  return keel_pool_for(k->pool, shape[0] * j.w.out[0], KEEL_MAX(1, 16384 / row), nh_rows_task,
                       &j);
}

static keel_status nh_global(keel_kctx *k, int kind) {
  const keel_tensor *x;
  KEEL_TRY(nh_input(k, &x));
  int64_t N = x->shape[0], C = x->shape[3];
  int64_t shape[4] = {N, 1, 1, C};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, 4, shape, &y));
  if (N == 0 || C == 0) return KEEL_OK;
  nh_job j = {.kind = kind, .C = C, .x = x->data, .y = y->data};
  j.hw = x->shape[1] * x->shape[2];
  if (j.hw == 0) { /* no positions: pool.c's -inf and 0 / 0 */
    nh_fill(j.y, kind == NH_MAX ? -INFINITY : NAN, N * C);
    return KEEL_OK;
  }
  j.pos = KEEL_MAX(1, NH_GPOS_BYTES / (C * (int64_t)sizeof(float)));
  j.chunks = (j.hw + j.pos - 1) / j.pos;
  size_t es = kind == NH_MAX ? sizeof(float) : sizeof(double);
  KEEL_TRY(keel_k_scratch_n(k, N * j.chunks * C, es, &j.part));
  KEEL_TRY(keel_pool_for(k->pool, N * j.chunks, 1, nh_global_task, &j));
  for (int64_t n = 0; n < N; n++) {
    float *yn = j.y + n * C;
    if (kind == NH_MAX) {
      const float *pm = (const float *)j.part + n * j.chunks * C;
      nh_copy(yn, pm, C);
      for (int64_t q = 1; q < j.chunks; q++) nh_max(yn, pm + q * C, C);
      continue;
    }
    const double *ps = (const double *)j.part + n * j.chunks * C;
    for (int64_t c = 0; c < C; c++) {
      double acc = 0;
      for (int64_t q = 0; q < j.chunks; q++) acc += ps[q * C + c];
      yn[c] = (float)(acc / (double)j.hw);
    }
  }
  return KEEL_OK;
}

static keel_status op_nhwc_max_pool(keel_kctx *k) { return nh_pool(k, NH_MAX); }
static keel_status op_nhwc_average_pool(keel_kctx *k) { return nh_pool(k, NH_AVG); }
static keel_status op_nhwc_global_max_pool(keel_kctx *k) { return nh_global(k, NH_MAX); }
static keel_status op_nhwc_global_average_pool(keel_kctx *k) { return nh_global(k, NH_AVG); }

/* ============================================================ table */

#define D "ai.keel.internal"
const keel_opdef keel_ops_pool_nhwc[] = {
    {D, "NhwcMaxPool", 1, KEEL_OPSET_MAX, op_nhwc_max_pool, 0, KEEL_T(KEEL_FLOAT)},
    {D, "NhwcAveragePool", 1, KEEL_OPSET_MAX, op_nhwc_average_pool, 0, KEEL_T(KEEL_FLOAT)},
    {D, "NhwcGlobalMaxPool", 1, KEEL_OPSET_MAX, op_nhwc_global_max_pool, 0, KEEL_T(KEEL_FLOAT)},
    {D, "NhwcGlobalAveragePool", 1, KEEL_OPSET_MAX, op_nhwc_global_average_pool, 0,
     KEEL_T(KEEL_FLOAT)},
    {0},
};
#undef D
