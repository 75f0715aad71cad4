/* linalg.c: Einsum (a general tensor contraction) and Det (batched
 * determinants).
 *
 * Einsum follows numpy: '->' is optional (the implicit output is the
 * ellipsis dims, then the letters used exactly once, in ASCII order),
 * letters are A-Z and a-z, '...' broadcasts right-aligned, a letter
 * repeated in one operand takes the diagonal, and any size-1 dim broadcasts
 * against the same letter elsewhere. Each letter becomes a "label"; the
 * ellipsis dims get labels of their own after the 52 letters.
 *
 * Evaluation contracts the operands left to right. Every operand is a
 * strided view (a diagonal is one label whose stride is the sum of its
 * dims' strides; a broadcast dim has stride 0). One step takes the running
 * result A and the next operand B and sorts their labels into batch (in
 * both, still needed), m (A only), k (in both, not needed any more) and n
 * (B only); labels of one side that nothing needs are summed away while
 * that side is copied into [batch, m, k] or [batch, k, n] order (no copy
 * when it already is dense in that order). Then one GEMM per batch (OpenBLAS
 * for float and double, a wrapping loop for integers) gives [batch, m, n].
 * The groups are ordered as the output orders them, so the common
 * equations (matmul, batched matmul) write the output without a copy.
 *
 * Types: double runs in double, float/float16/bfloat16 in float (halves
 * staged), every integer type in wrapping int64 (exact modulo 2^64, which
 * is what the narrower types keep). All scratch for one call comes from a
 * single block: a dry run of the same pipeline sizes it first.
 *
 * Det is LU with partial pivoting in double per matrix.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>

#include "ops/kernel.h"

/* ========================================================= labels */

#define EIN_LETTERS 52 /* 'A'-'Z' then 'a'-'z', so label order is ASCII */
#define EIN_MAX_LABELS (EIN_LETTERS + KEEL_MAX_RANK)
#define EIN_MAX_OPS 64

/* One term of the equation as written: letters, and where "..." sits. */
typedef struct ein_raw {
  int n;   /* letters                                  */
  int ell; /* letters before the ellipsis; -1: none    */
  uint8_t lab[KEEL_MAX_RANK];
} ein_raw;

/* A term bound to its operand: one label per dim. */
typedef struct ein_term {
  int n;
  uint8_t lab[EIN_MAX_LABELS];
} ein_term;

typedef struct ein_spec {
  int n_ops, n_ell;               /* operands; dims under "..."            */
  ein_term in[EIN_MAX_OPS], out;
  int64_t size[EIN_MAX_LABELS];   /* broadcast size per label; -1 unused   */
} ein_spec;

static int letter_code(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

/* "'j'" for a letter, "'...' dim 2" for an ellipsis label. */
static const char *lab_name(int l, char *buf, size_t cap) {
  if (l < EIN_LETTERS) snprintf(buf, cap, "'%c'", l < 26 ? 'A' + l : 'a' + (l - 26));
  else snprintf(buf, cap, "'...' dim %d", l - EIN_LETTERS);
  return buf;
}

static const char *term_name(int which, char *buf, size_t cap) {
  if (which < 0) snprintf(buf, cap, "the output");
  else snprintf(buf, cap, "operand %d", which);
  return buf;
}

/* ======================================================== parsing */

/* Reads one term from *pp up to ',', '-' or the end (spaces skipped). */
static keel_status parse_term(const char **pp, int which, ein_raw *t) {
  const char *p = *pp;
  char nb[32];
  t->n = 0, t->ell = -1;
  for (;; p++) {
    char c = *p;
    if (c == ' ') continue;
    if (c == ',' || c == '-' || c == '\0') break;
    if (c == '.') {
      if (p[1] != '.' || p[2] != '.')
        return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: %s has a '.' outside a '...'",
                        term_name(which, nb, sizeof nb));
      if (t->ell >= 0)
        return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: %s has more than one '...'",
                        term_name(which, nb, sizeof nb));
      t->ell = t->n;
      p += 2;
      continue;
    }
    int code = letter_code(c);
    if (code < 0)
      return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: %s has '%c', indices must be letters",
                      term_name(which, nb, sizeof nb), c);
    if (t->n == KEEL_MAX_RANK)
      return keel_err(KEEL_ERR_SHAPE, "Einsum: %s has more than %d indices",
                      term_name(which, nb, sizeof nb), KEEL_MAX_RANK);
    t->lab[t->n++] = (uint8_t)code;
  }
  *pp = p;
  return KEEL_OK;
}

/* Splits the equation into input terms and, when '->' is present, the
 * output term. */
static keel_status ein_parse(const char *eq, int n_in, ein_raw *in, ein_raw *out,
                             bool *explicit_out) {
  const char *p = eq;
  int n = 0;
  for (;;) {
    if (n == EIN_MAX_OPS)
      return keel_err(KEEL_ERR_UNSUPPORTED, "Einsum: more than %d operands", EIN_MAX_OPS);
    KEEL_TRY(parse_term(&p, n, &in[n]));
    n++;
    if (*p != ',') break;
    p++;
  }
  *explicit_out = *p == '-';
  if (*p == '-') {
    if (p[1] != '>')
      return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: '-' must start '->' in \"%s\"", eq);
    p += 2;
    KEEL_TRY(parse_term(&p, -1, out));
    if (*p != '\0')
      return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: unexpected '%c' after the output in \"%s\"",
                      *p, eq);
  }
  if (n != n_in)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: the equation \"%s\" has %d operand%s, the "
                    "node has %d input%s", eq, n, n == 1 ? "" : "s", n_in, n_in == 1 ? "" : "s");
  return KEEL_OK;
}

/* ======================================================== binding */

/* Labels for a term: its letters with the ellipsis expanded to `e` labels
 * right-aligned among the n_ell ellipsis labels. */
static void expand_term(const ein_raw *r, int e, int n_ell, ein_term *t) {
  t->n = 0;
  for (int i = 0; i <= r->n; i++) {
    if (i == r->ell)
      for (int j = 0; j < e; j++) t->lab[t->n++] = (uint8_t)(EIN_LETTERS + n_ell - e + j);
    if (i < r->n) t->lab[t->n++] = r->lab[i];
  }
}

/* Records operand `which`'s dim sizes: equal within the operand for a
 * repeated label, equal or 1 across operands. */
static keel_status bind_sizes(ein_spec *s, int which, const keel_tensor *t) {
  const ein_term *tm = &s->in[which];
  char nb[32];
  for (int d = 0; d < tm->n; d++) {
    int l = tm->lab[d];
    int64_t sz = t->shape[d];
    for (int e = 0; e < d; e++)
      if (tm->lab[e] == l && t->shape[e] != sz)
        return keel_err(KEEL_ERR_SHAPE, "Einsum: operand %d repeats index %s with sizes %lld "
                        "and %lld", which, lab_name(l, nb, sizeof nb), (long long)t->shape[e],
                        (long long)sz);
    if (s->size[l] < 0 || s->size[l] == 1) s->size[l] = sz;
    else if (sz != 1 && sz != s->size[l])
      return keel_err(KEEL_ERR_SHAPE, "Einsum: index %s is %lld in operand %d but %lld in an "
                      "earlier operand", lab_name(l, nb, sizeof nb), (long long)sz, which,
                      (long long)s->size[l]);
  }
  return KEEL_OK;
}

static keel_status bind_inputs(ein_spec *s, const ein_raw *raw, const keel_tensor *const *ops) {
  s->n_ell = 0;
  for (int i = 0; i < s->n_ops; i++) {
    int e = ops[i]->rank - raw[i].n;
    if (e < 0 || (raw[i].ell < 0 && e != 0))
      return keel_err(KEEL_ERR_SHAPE, "Einsum: operand %d has rank %d, the equation gives it "
                      "%d ind%s%s", i, ops[i]->rank, raw[i].n, raw[i].n == 1 ? "ex" : "ices",
                      raw[i].ell >= 0 ? " and '...'" : "");
    s->n_ell = KEEL_MAX(s->n_ell, e);
  }
  for (int l = 0; l < EIN_MAX_LABELS; l++) s->size[l] = -1;
  for (int i = 0; i < s->n_ops; i++) {
    expand_term(&raw[i], ops[i]->rank - raw[i].n, s->n_ell, &s->in[i]);
    KEEL_TRY(bind_sizes(s, i, ops[i]));
  }
  return KEEL_OK;
}

/* The output labels: as written (explicit), or the ellipsis labels then the
 * letters used once, in ASCII order (implicit). */
static keel_status bind_output(ein_spec *s, const ein_raw *r, bool explicit_out) {
  int count[EIN_MAX_LABELS] = {0};
  char nb[32];
  for (int i = 0; i < s->n_ops; i++)
    for (int d = 0; d < s->in[i].n; d++) count[s->in[i].lab[d]]++;
  ein_raw implicit = {.n = 0, .ell = 0};
  if (explicit_out) {
    for (int i = 0; i < r->n; i++) {
      if (!count[r->lab[i]])
        return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: output index %s is in no input",
                        lab_name(r->lab[i], nb, sizeof nb));
      for (int j = 0; j < i; j++)
        if (r->lab[j] == r->lab[i])
          return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: output index %s appears twice",
                          lab_name(r->lab[i], nb, sizeof nb));
    }
    if (r->ell < 0 && s->n_ell > 0)
      return keel_err(KEEL_ERR_SHAPE, "Einsum: the inputs have %d dims under '...' but the "
                      "output has no '...'", s->n_ell);
  } else {
    for (int l = 0; l < EIN_LETTERS; l++)
      if (count[l] == 1) implicit.lab[implicit.n++] = (uint8_t)l;
    r = &implicit; /* at most one per dim of the inputs: fits if they do */
  }
  if (r->n + (r->ell >= 0 ? s->n_ell : 0) > KEEL_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Einsum: the output would have rank above %d",
                    KEEL_MAX_RANK);
  expand_term(r, r->ell >= 0 ? s->n_ell : 0, s->n_ell, &s->out);
  return KEEL_OK;
}

/* ================================================== working types */

/* The type the contraction runs in: W_F32 also serves float16/bfloat16,
 * W_I64 every integer type. */
enum { W_F32, W_F64, W_I64 };

static int work_type(int dt) {
  if (dt == KEEL_DOUBLE) return W_F64;
  if (dt == KEEL_FLOAT || dt == KEEL_FLOAT16 || dt == KEEL_BFLOAT16) return W_F32;
  return W_I64;
}
static const int work_dtype[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT64};
static const size_t work_size[] = {sizeof(float), sizeof(double), sizeof(int64_t)};

/* Converts operand t into working-type elements at dst (a cold path: only
 * types other than float, double and int64 get here). */
static void to_work(int w, const keel_tensor *t, void *dst) {
  size_t n = (size_t)keel_tensor_numel(t);
  for (size_t i = 0; i < n; i++) {
    if (w == W_I64) ((int64_t *)dst)[i] = keel_elem_get_i64(t->dtype, t->data, i);
    else if (w == W_F64) ((double *)dst)[i] = keel_elem_get_f64(t->dtype, t->data, i);
    else ((float *)dst)[i] = (float)keel_elem_get_f64(t->dtype, t->data, i);
  }
}

/* Stores working-type results into t: integers wrap to t's width, floats
 * round to float16/bfloat16. */
static void from_work(int w, const void *src, keel_tensor *t) {
  size_t n = (size_t)keel_tensor_numel(t);
  for (size_t i = 0; i < n; i++) {
    if (w == W_I64) keel_elem_set_i64(t->dtype, t->data, i, ((const int64_t *)src)[i]);
    else if (w == W_F64) keel_elem_set_f64(t->dtype, t->data, i, ((const double *)src)[i]);
    else keel_elem_set_f64(t->dtype, t->data, i, ((const float *)src)[i]);
  }
}

/* ================================================ strided kernels */

/* dst (dense over d dims) = src summed over s dims; strides in elements. */
typedef struct ein_loop {
  int nd, ns;
  int64_t dsize[EIN_MAX_LABELS], dstride[EIN_MAX_LABELS];
  int64_t ssize[EIN_MAX_LABELS], sstride[EIN_MAX_LABELS];
} ein_loop;

static inline void odo_step(int n, int64_t *idx, const int64_t *size, const int64_t *stride,
                            int64_t *off) {
  for (int d = n - 1; d >= 0; d--) {
    *off += stride[d];
    if (++idx[d] < size[d]) return;
    *off -= stride[d] * size[d];
    idx[d] = 0;
  }
}

static int64_t loop_count(int n, const int64_t *size) {
  int64_t c = 1;
  for (int i = 0; i < n; i++) c *= size[i];
  return c;
}

/* ACC is the accumulator: double for float (the sums can be long),
 * uint64 for integers (wraps instead of overflowing). */
#define DEF_SUM_COPY(name, T, ACC)                                              \
  static void name(const T *src, const ein_loop *L, T *dst) {                   \
    int64_t total = loop_count(L->nd, L->dsize), inner = loop_count(L->ns, L->ssize); \
    int64_t di[EIN_MAX_LABELS] = {0}, off = 0;                                  \
    for (int64_t i = 0; i < total; i++) {                                       \
      ACC acc = 0;                                                              \
      int64_t si[EIN_MAX_LABELS] = {0}, soff = 0;                               \
      for (int64_t j = 0; j < inner; j++) {                                     \
        acc += (ACC)src[off + soff];                                            \
        odo_step(L->ns, si, L->ssize, L->sstride, &soff);                       \
      }                                                                         \
      dst[i] = (T)acc;                                                          \
      odo_step(L->nd, di, L->dsize, L->dstride, &off);                          \
    }                                                                           \
  }
DEF_SUM_COPY(sum_copy_f32, float, double)
DEF_SUM_COPY(sum_copy_f64, double, double)
DEF_SUM_COPY(sum_copy_i64, int64_t, uint64_t)

static void sum_copy(int w, const void *src, const ein_loop *L, void *dst) {
  if (w == W_F32) sum_copy_f32(src, L, dst);
  else if (w == W_F64) sum_copy_f64(src, L, dst);
  else sum_copy_i64(src, L, dst);
}

/* C = A (M x K) * B (K x N), dense row-major; U is the arithmetic type. */
#define DEF_GEMM_LOOP(name, T, U)                                                   \
  static void name(const T *A, const T *B, T *C, int64_t M, int64_t N, int64_t K) {  \
    for (int64_t i = 0; i < M * N; i++) C[i] = 0;                                   \
    for (int64_t i = 0; i < M; i++)                                                 \
      for (int64_t p = 0; p < K; p++) {                                             \
        U a = (U)A[i * K + p];                                                      \
        T *c = C + i * N;                                                           \
        for (int64_t j = 0; j < N; j++) c[j] = (T)((U)c[j] + a * (U)B[p * N + j]);  \
      }                                                                             \
  }
DEF_GEMM_LOOP(gemm_loop_f32, float, float)
DEF_GEMM_LOOP(gemm_loop_f64, double, double)
DEF_GEMM_LOOP(gemm_loop_i64, int64_t, uint64_t)

/* Products below this many multiply-adds skip BLAS: its call overhead
 * dominates them (an elementwise 'ij,ij->ij' is one 1x1x1 product per
 * element). */
#define EIN_BLAS_MIN 512

/* One product per batch: BLAS for floats whose dims fit its int, the loop
 * otherwise (BLAS also rejects K == 0, where the loop writes zeros). */
static void batched_gemm(int w, const void *A, const void *B, void *C, int64_t nb, int64_t M,
                         int64_t N, int64_t K) {
  size_t es = work_size[w];
  if (K == 0) { /* C = 0; A and B are empty, their data may be NULL (NULL + 0 is UB) */
    if (nb > 0 && M * N > 0) memset(C, 0, (size_t)(nb * M * N) * es);
    return;
  }
  bool blas = w != W_I64 && K > 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX &&
              (double)M * (double)N * (double)K >= EIN_BLAS_MIN;
  for (int64_t b = 0; b < nb && M * N > 0; b++) {
    const uint8_t *a = (const uint8_t *)A + (size_t)(b * M * K) * es;
    const uint8_t *bb = (const uint8_t *)B + (size_t)(b * K * N) * es;
    uint8_t *c = (uint8_t *)C + (size_t)(b * M * N) * es;
    if (blas && w == W_F32)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)N, (blasint)K,
                  1.0f, (const float *)a, (blasint)K, (const float *)bb, (blasint)N, 0.0f,
                  (float *)c, (blasint)N);
    else if (blas)
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)N, (blasint)K,
                  1.0, (const double *)a, (blasint)K, (const double *)bb, (blasint)N, 0.0,
                  (double *)c, (blasint)N);
    else if (w == W_F32) gemm_loop_f32((const float *)a, (const float *)bb, (float *)c, M, N, K);
    else if (w == W_F64) gemm_loop_f64((const double *)a, (const double *)bb, (double *)c, M, N, K);
    else gemm_loop_i64((const int64_t *)a, (const int64_t *)bb, (int64_t *)c, M, N, K);
  }
}

/* ================================================ views and arena */

/* Operand data seen through its labels (each label once). */
typedef struct ein_view {
  const void *data;
  int n;
  uint8_t lab[EIN_MAX_LABELS];
  int64_t stride[EIN_MAX_LABELS]; /* elements; 0 along broadcast dims */
} ein_view;

/* Scratch carved from one block. A dry arena only counts: the pipeline
 * runs twice, first dry to size the block, then for real. */
typedef struct ein_arena {
  uint8_t *base;
  size_t used;
  bool dry;
} ein_arena;

static keel_status arena_take(ein_arena *a, int64_t count, size_t es, void **p) {
  if ((uint64_t)count > (SIZE_MAX - a->used - 64) / es)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "Einsum: intermediates of %lld elements do not fit "
                    "in memory", (long long)count);
  *p = a->dry ? NULL : a->base + a->used;
  a->used += ((size_t)count * es + 63) & ~(size_t)63;
  return KEEL_OK;
}

/* Product of the sizes of labels lab[0..n), with an overflow check. */
static keel_status label_product(const ein_spec *s, const uint8_t *lab, int n, int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < n; i++) {
    int64_t sz = s->size[lab[i]];
    if (sz && p > INT64_MAX / sz)
      return keel_err(KEEL_ERR_SHAPE, "Einsum: an intermediate result's element count overflows");
    p *= sz;
  }
  *out = p;
  return KEEL_OK;
}

static void view_of_term(const ein_spec *s, const ein_term *t, const int64_t *shape,
                         const void *data, ein_view *v) {
  int64_t st = 1, strides[EIN_MAX_LABELS];
  for (int d = t->n - 1; d >= 0; d--) strides[d] = st, st *= shape[d];
  v->data = data, v->n = 0;
  for (int d = 0; d < t->n; d++) {
    int l = t->lab[d], at = 0;
    int64_t sd = shape[d] == 1 && s->size[l] != 1 ? 0 : strides[d]; /* broadcast */
    while (at < v->n && v->lab[at] != l) at++;
    if (at == v->n) v->lab[v->n++] = (uint8_t)l, v->stride[at] = 0;
    v->stride[at] += sd; /* a repeated label walks the diagonal */
  }
}

static int64_t view_stride(const ein_view *v, int l) {
  for (int i = 0; i < v->n; i++)
    if (v->lab[i] == l) return v->stride[i];
  return 0; /* absent: broadcast */
}

/* The loop that copies v into dense `order`, summing its other labels;
 * true when that copy would be the identity (dense already, nothing
 * summed). */
static bool make_loop(const ein_spec *s, const ein_view *v, const uint8_t *order, int n,
                      ein_loop *L) {
  bool in_order[EIN_MAX_LABELS] = {0};
  bool dense = true;
  int64_t st = 1;
  L->nd = n, L->ns = 0;
  for (int i = n - 1; i >= 0; i--) {
    L->dsize[i] = s->size[order[i]];
    L->dstride[i] = view_stride(v, order[i]);
    in_order[order[i]] = true;
    if (L->dsize[i] != 1 && L->dstride[i] != st) dense = false;
    st *= L->dsize[i];
  }
  for (int i = 0; i < v->n; i++)
    if (!in_order[v->lab[i]]) {
      L->ssize[L->ns] = s->size[v->lab[i]];
      L->sstride[L->ns++] = v->stride[i];
      dense = false;
    }
  return dense;
}

/* v's data in dense `order` (v's other labels summed): v itself when that
 * is already its layout, else a copy from the arena. */
static keel_status materialize(const ein_spec *s, int w, ein_arena *a, const ein_view *v,
                               const uint8_t *order, int n, const void **out) {
  ein_loop L;
  if (make_loop(s, v, order, n, &L)) {
    *out = v->data;
    return KEEL_OK;
  }
  int64_t count;
  void *p;
  KEEL_TRY(label_product(s, order, n, &count));
  KEEL_TRY(arena_take(a, count, work_size[w], &p));
  if (!a->dry) sum_copy(w, v->data, &L, p);
  *out = p;
  return KEEL_OK;
}

/* =================================================== contraction */

enum { G_BATCH, G_M, G_K, G_N, G_COUNT };

typedef struct ein_step {
  int cnt[G_COUNT];
  uint8_t lab[G_COUNT][EIN_MAX_LABELS];
  int64_t prod[G_COUNT];
} ein_step;

static bool view_has(const ein_view *v, int l) {
  for (int i = 0; i < v->n; i++)
    if (v->lab[i] == l) return true;
  return false;
}

/* Orders a group by the labels' output positions (labels not in the
 * output after those, in label order), so results land in output order. */
static void sort_group(uint8_t *lab, int n, const int *key) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && key[lab[j - 1]] > key[lab[j]]; j--) {
      uint8_t t = lab[j];
      lab[j] = lab[j - 1], lab[j - 1] = t;
    }
}

static keel_status plan_step(const ein_spec *s, const ein_view *A, const ein_view *B,
                             const bool *keep, const int *key, ein_step *st) {
  memset(st->cnt, 0, sizeof st->cnt);
  for (int i = 0; i < A->n; i++) {
    int l = A->lab[i];
    int g = view_has(B, l) ? (keep[l] ? G_BATCH : G_K) : (keep[l] ? G_M : -1);
    if (g >= 0) st->lab[g][st->cnt[g]++] = (uint8_t)l;
  }
  for (int i = 0; i < B->n; i++)
    if (!view_has(A, B->lab[i]) && keep[B->lab[i]])
      st->lab[G_N][st->cnt[G_N]++] = B->lab[i];
  for (int g = 0; g < G_COUNT; g++) {
    if (g != G_K) sort_group(st->lab[g], st->cnt[g], key);
    KEEL_TRY(label_product(s, st->lab[g], st->cnt[g], &st->prod[g]));
  }
  return KEEL_OK;
}

/* Labels of groups g0, g1, g2 of a step, concatenated. */
static int concat3(const ein_step *st, int g0, int g1, int g2, uint8_t *out) {
  int n = 0, gs[3] = {g0, g1, g2};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < st->cnt[gs[i]]; j++) out[n++] = st->lab[gs[i]][j];
  return n;
}

typedef struct ein_ctx {
  const ein_spec *s;
  const keel_tensor *const *ops;
  int w;
  ein_arena arena;
  keel_tensor *y;   /* the output tensor                              */
  void *target;     /* where the result goes in the working type      */
  bool done;        /* the last GEMM wrote target in output order     */
} ein_ctx;

static bool same_labels(const uint8_t *a, int na, const ein_term *t) {
  if (na != t->n) return false;
  for (int i = 0; i < na; i++)
    if (a[i] != t->lab[i]) return false;
  return true;
}

/* cur = cur x operand i: the step's GEMM into a new dense view. */
static keel_status contract(ein_ctx *c, ein_view *cur, const ein_view *B, int i) {
  const ein_spec *s = c->s;
  bool keep[EIN_MAX_LABELS] = {0};
  int key[EIN_MAX_LABELS];
  for (int l = 0; l < EIN_MAX_LABELS; l++) key[l] = EIN_MAX_LABELS + l;
  for (int d = 0; d < s->out.n; d++) keep[s->out.lab[d]] = true, key[s->out.lab[d]] = d;
  for (int j = i + 1; j < s->n_ops; j++)
    for (int d = 0; d < s->in[j].n; d++) keep[s->in[j].lab[d]] = true;
  ein_step st;
  KEEL_TRY(plan_step(s, cur, B, keep, key, &st));
  uint8_t oa[EIN_MAX_LABELS], ob[EIN_MAX_LABELS], oc[EIN_MAX_LABELS];
  int na = concat3(&st, G_BATCH, G_M, G_K, oa), nb = concat3(&st, G_BATCH, G_K, G_N, ob);
  int nc = concat3(&st, G_BATCH, G_M, G_N, oc);
  const void *pa, *pb;
  void *pc;
  int64_t count;
  KEEL_TRY(label_product(s, oc, nc, &count));
  KEEL_TRY(materialize(s, c->w, &c->arena, cur, oa, na, &pa));
  KEEL_TRY(materialize(s, c->w, &c->arena, B, ob, nb, &pb));
  c->done = i == s->n_ops - 1 && same_labels(oc, nc, &s->out);
  if (c->done) pc = c->target;
  else KEEL_TRY(arena_take(&c->arena, count, work_size[c->w], &pc));
  if (!c->arena.dry)
    batched_gemm(c->w, pa, pb, pc, st.prod[G_BATCH], st.prod[G_M], st.prod[G_N], st.prod[G_K]);
  int64_t stride = 1;
  cur->data = pc, cur->n = nc;
  for (int d = nc - 1; d >= 0; d--) {
    cur->lab[d] = oc[d], cur->stride[d] = stride;
    stride *= s->size[oc[d]];
  }
  return KEEL_OK;
}

/* An operand's data in the working type: borrowed when it already is. */
static keel_status operand_data(ein_ctx *c, int i, const void **out) {
  const keel_tensor *t = c->ops[i];
  if (t->dtype == work_dtype[c->w]) {
    *out = t->data;
    return KEEL_OK;
  }
  void *p;
  KEEL_TRY(arena_take(&c->arena, keel_tensor_numel(t), work_size[c->w], &p));
  if (!c->arena.dry) to_work(c->w, t, p);
  *out = p;
  return KEEL_OK;
}

/* The whole contraction (sizes only when the arena is dry). */
static keel_status ein_run(ein_ctx *c) {
  const ein_spec *s = c->s;
  const void *data;
  ein_view cur, next;
  c->done = false;
  c->target = c->y->data;
  if (c->y->dtype != work_dtype[c->w])
    KEEL_TRY(arena_take(&c->arena, keel_tensor_numel(c->y), work_size[c->w], &c->target));
  KEEL_TRY(operand_data(c, 0, &data));
  view_of_term(s, &s->in[0], c->ops[0]->shape, data, &cur);
  for (int i = 1; i < s->n_ops; i++) {
    KEEL_TRY(operand_data(c, i, &data));
    view_of_term(s, &s->in[i], c->ops[i]->shape, data, &next);
    KEEL_TRY(contract(c, &cur, &next, i));
  }
  if (c->done || c->arena.dry) return KEEL_OK;
  ein_loop L;
  make_loop(s, &cur, s->out.lab, s->out.n, &L);
  sum_copy(c->w, cur.data, &L, c->target);
  return KEEL_OK;
}

/* ========================================================= Einsum */

static keel_status einsum_inputs(keel_kctx *k, const keel_tensor **ops) {
  if (k->n_in < 1 || k->n_in > EIN_MAX_OPS)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: needs 1 to %d inputs, got %d", EIN_MAX_OPS,
                    k->n_in);
  for (int i = 0; i < k->n_in; i++) {
    KEEL_TRY(keel_k_in(k, i, &ops[i]));
    int dt = ops[i]->dtype;
    if (!keel_dtype_is_float(dt) && !keel_dtype_is_int(dt))
      return keel_err(KEEL_ERR_UNSUPPORTED, "Einsum: %s operands are not supported",
                      keel_dtype_name((keel_dtype)dt));
    if (dt != ops[0]->dtype)
      return keel_err(KEEL_ERR_SHAPE, "Einsum: operand %d is %s, operand 0 is %s", i,
                      keel_dtype_name((keel_dtype)dt), keel_dtype_name((keel_dtype)ops[0]->dtype));
  }
  return KEEL_OK;
}

static keel_status op_einsum(keel_kctx *k) {
  const char *eq = keel_k_attr_s(k, "equation", NULL);
  if (!eq) return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: attribute 'equation' is missing");
  const keel_tensor *ops[EIN_MAX_OPS];
  KEEL_TRY(einsum_inputs(k, ops));
  ein_raw raw[EIN_MAX_OPS], out_raw;
  bool explicit_out;
  ein_spec s;
  s.n_ops = k->n_in;
  KEEL_TRY(ein_parse(eq, k->n_in, raw, &out_raw, &explicit_out));
  KEEL_TRY(bind_inputs(&s, raw, ops));
  KEEL_TRY(bind_output(&s, &out_raw, explicit_out));
  int64_t shape[KEEL_MAX_RANK];
  for (int d = 0; d < s.out.n; d++) shape[d] = s.size[s.out.lab[d]];
  ein_ctx c = {.s = &s, .ops = ops, .w = work_type(ops[0]->dtype), .arena = {.dry = true}};
  KEEL_TRY(keel_k_out(k, 0, ops[0]->dtype, s.out.n, shape, &c.y));
  KEEL_TRY(ein_run(&c)); /* dry: sizes the scratch */
  void *mem;
  KEEL_TRY(keel_k_scratch(k, c.arena.used, &mem));
  c.arena = (ein_arena){.base = mem};
  KEEL_TRY(ein_run(&c));
  if (c.target != c.y->data) from_work(c.w, c.target, c.y);
  return KEEL_OK;
}

/* ============================================================ Det */

/* det(a) of an m x m row-major matrix, destroying a. A zero pivot column
 * means a singular matrix: 0. */
static double lu_det(double *a, int64_t m) {
  double det = 1.0;
  for (int64_t c = 0; c < m; c++) {
    int64_t p = c;
    for (int64_t r = c + 1; r < m; r++)
      if (fabs(a[r * m + c]) > fabs(a[p * m + c])) p = r;
    if (a[p * m + c] == 0) return 0.0;
    if (p != c) {
      for (int64_t j = 0; j < m; j++) {
        double t = a[p * m + j];
        a[p * m + j] = a[c * m + j], a[c * m + j] = t;
      }
      det = -det;
    }
    double piv = a[c * m + c];
    det *= piv;
    for (int64_t r = c + 1; r < m; r++) {
      double f = a[r * m + c] / piv;
      for (int64_t j = c + 1; j < m; j++) a[r * m + j] -= f * a[c * m + j];
    }
  }
  return det;
}

static keel_status op_det(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (!keel_dtype_is_float(x->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "Det: %s is not supported, only float types",
                    keel_dtype_name((keel_dtype)x->dtype));
  int r = x->rank;
  if (r < 2 || x->shape[r - 1] != x->shape[r - 2])
    return keel_err(KEEL_ERR_SHAPE, "Det: input must be [..., M, M], got rank %d%s", r,
                    r >= 2 ? " with non-square matrices" : "");
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r - 2, x->shape, &y));
  int64_t m = x->shape[r - 1], count = keel_tensor_numel(y);
  if (count == 0) return KEEL_OK;
  if (m > 0 && (uint64_t)m > SIZE_MAX / sizeof(double) / (uint64_t)m)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "Det: a %lld x %lld matrix does not fit in memory",
                    (long long)m, (long long)m);
  void *mem;
  KEEL_TRY(keel_k_scratch(k, (size_t)(m * m) * sizeof(double), &mem));
  double *a = mem;
  for (int64_t b = 0; b < count; b++) {
    for (int64_t i = 0; i < m * m; i++)
      a[i] = keel_elem_get_f64(x->dtype, x->data, (size_t)(b * m * m + i));
    keel_elem_set_f64(y->dtype, y->data, (size_t)b, lu_det(a, m));
  }
  return KEEL_OK;
}

/* ========================================================== table */

const keel_opdef keel_ops_linalg[] = {
    {"", "Einsum", 12, KEEL_OPSET_MAX, op_einsum, 0, KEEL_TS_NUM},
    {"", "Det", 11, KEEL_OPSET_MAX, op_det, 0, KEEL_TS_FLOAT},
    {0},
};
