/* test_ops_linalg.c: Einsum and Det through real sessions against naive
 * references written here. Einsum: named equations (matmul, batched
 * matmul, trace, diagonal, transpose, outer product, sums, ellipsis with
 * broadcasting, implicit output, three operands) and random equations,
 * each against a nested loop over every label combination, in float,
 * double, int32 and int64 (named ones also in float16 and wrapping uint8);
 * then malformed equations and mismatched shapes,
 * which must fail and leave the session usable. Det: random batches
 * against cofactor expansion, singular and permuted matrices, errors. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int n) { return (int)(next() % (uint64_t)n); }

#define MAXE 4096 /* elements per operand or output */
#define MAXOPS 3

/* ============================================ reference einsum */

/* An equation as the reference reads it: per term, one label per dim
 * (letters, and '0'+i for ellipsis dim i of the E right-aligned ones). */
typedef struct ref_eq {
  int n_ops, n_ell;
  int rank[MAXOPS + 1]; /* [n_ops] is the output */
  char lab[MAXOPS + 1][16];
} ref_eq;

/* Expands one written term for an operand of rank r ('...' -> labels). */
static bool ref_term(const char *t, size_t len, int r, int n_ell, char *lab, int *rank) {
  int letters = 0;
  bool ell = false;
  for (size_t i = 0; i < len; i++) letters += t[i] != '.' && t[i] != ' ';
  int e = r < 0 ? n_ell : r - letters;
  *rank = 0;
  for (size_t i = 0; i < len; i++) {
    if (t[i] == ' ') continue;
    if (t[i] == '.') {
      for (int j = 0; j < e; j++) lab[(*rank)++] = (char)('0' + n_ell - e + j);
      i += 2, ell = true;
    } else {
      lab[(*rank)++] = t[i];
    }
  }
  return ell || e == 0;
}

/* Parses eq for operands of the given ranks (well-formed input only). */
static void ref_parse(const char *eq, int n_ops, const int *ranks, ref_eq *q) {
  const char *arrow = strstr(eq, "->"), *end = arrow ? arrow : eq + strlen(eq);
  const char *p = eq;
  q->n_ops = n_ops, q->n_ell = 0;
  for (int i = 0; i < n_ops; i++) { /* ellipsis width first */
    const char *c = memchr(p, ',', (size_t)(end - p));
    size_t len = c ? (size_t)(c - p) : (size_t)(end - p);
    int letters = 0;
    for (size_t j = 0; j < len; j++) letters += p[j] != '.' && p[j] != ' ';
    if (ranks[i] - letters > q->n_ell) q->n_ell = ranks[i] - letters;
    p += len + 1;
  }
  p = eq;
  for (int i = 0; i < n_ops; i++) {
    const char *c = memchr(p, ',', (size_t)(end - p));
    size_t len = c ? (size_t)(c - p) : (size_t)(end - p);
    ref_term(p, len, ranks[i], q->n_ell, q->lab[i], &q->rank[i]);
    p += len + 1;
  }
  if (arrow) {
    ref_term(arrow + 2, strlen(arrow + 2), -1, q->n_ell, q->lab[n_ops], &q->rank[n_ops]);
    return;
  }
  int count[128] = {0}, r = 0; /* implicit: ellipsis, then letters used once */
  for (int i = 0; i < n_ops; i++)
    for (int d = 0; d < q->rank[i]; d++) count[(int)q->lab[i][d]]++;
  for (int e = 0; e < q->n_ell; e++) q->lab[n_ops][r++] = (char)('0' + e);
  for (int ch = 'A'; ch <= 'z'; ch++)
    if (ch > '9' && count[ch] == 1) q->lab[n_ops][r++] = (char)ch;
  q->rank[n_ops] = r;
}

/* out = the einsum, by looping over every combination of label values;
 * a size-1 operand dim reads index 0 (broadcast). */
static void ref_eval(const ref_eq *q, int64_t dims[][16], const double *const *x, double *out,
                     int64_t *odims) {
  int64_t size[128] = {0};
  char labs[64];
  int nl = 0;
  for (int i = 0; i < q->n_ops; i++)
    for (int d = 0; d < q->rank[i]; d++) {
      int c = q->lab[i][d];
      if (!size[c]) labs[nl++] = (char)c, size[c] = 1;
      if (dims[i][d] != 1) size[c] = dims[i][d];
    }
  int64_t total = 1, on = 1, idx[128] = {0};
  for (int l = 0; l < nl; l++) total *= size[(int)labs[l]];
  for (int d = 0; d < q->rank[q->n_ops]; d++) on *= (odims[d] = size[(int)q->lab[q->n_ops][d]]);
  for (int64_t o = 0; o < on; o++) out[o] = 0;
  for (int64_t t = 0; t < total; t++) {
    int64_t rem = t;
    for (int l = nl - 1; l >= 0; l--) idx[(int)labs[l]] = rem % size[(int)labs[l]], rem /= size[(int)labs[l]];
    double prod = 1;
    for (int i = 0; i < q->n_ops; i++) {
      int64_t off = 0;
      for (int d = 0; d < q->rank[i]; d++)
        off = off * dims[i][d] + (dims[i][d] == 1 ? 0 : idx[(int)q->lab[i][d]]);
      prod *= x[i][off];
    }
    int64_t off = 0;
    for (int d = 0; d < q->rank[q->n_ops]; d++) off = off * odims[d] + idx[(int)q->lab[q->n_ops][d]];
    out[off] += prod;
  }
}

/* ============================================== einsum harness */

static keel_session_t *einsum_session(const char *eq, int n_ops, int dt) {
  mb_graph *g = mb_graph_new("main");
  char names[64] = "";
  for (int i = 0; i < n_ops; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "X%d", i);
    mb_input(g, nm, dt, -1, NULL);
    strcat(names, i ? "," : "");
    strcat(names, nm);
  }
  mb_output(g, "Y", dt, -1, NULL);
  mb_attr_s(mb_add(g, "Einsum", names, "Y"), "equation", eq);
  return mb_session(g, 12);
}

/* v as dtype dt holds it: the references start from the same values as
 * the kernels. */
static double as_dtype(int dt, double v) {
  uint8_t b[8];
  keel_elem_set_f64(dt, b, 0, v);
  return keel_elem_get_f64(dt, b, 0);
}

static double gen(int dt) {
  double v = dt == KEEL_FLOAT || dt == KEEL_DOUBLE ? (double)rnd(2001) / 1000.0 - 1.0
                                                   : (double)(rnd(7) - 3);
  return as_dtype(dt, v);
}

/* Runs eq on random operands of the given shapes; status of the run. */
static keel_status run_einsum(keel_session_t *s, int n_ops, int dt, const int *ranks,
                              int64_t dims[][16], const double *const *x, keel_value_t **y) {
  static uint8_t buf[MAXOPS][MAXE * 8];
  keel_value_t *in[MAXOPS] = {0};
  const char *names[MAXOPS] = {"X0", "X1", "X2"};
  for (int i = 0; i < n_ops; i++) {
    int64_t n = 1;
    for (int d = 0; d < ranks[i]; d++) n *= dims[i][d];
    for (int64_t e = 0; e < n; e++) keel_elem_set_f64(dt, buf[i], (size_t)e, x[i][e]);
    CHECK_OK(keel_tensor_create(s, (keel_dtype)dt, ranks[i], dims[i], buf[i], &in[i]));
  }
  *y = NULL;
  keel_status st = keel_run(s, names, in, (size_t)n_ops, y);
  for (int i = 0; i < n_ops; i++) keel_value_release(in[i]);
  return st;
}

/* One equation on operands of the given shapes, against the reference. */
static void check_einsum(const char *eq, int n_ops, const int *ranks, int64_t dims[][16],
                         int dt) {
  static double xs[MAXOPS][MAXE], want[MAXE];
  const double *x[MAXOPS];
  for (int i = 0; i < n_ops; i++) {
    int64_t n = 1;
    for (int d = 0; d < ranks[i]; d++) n *= dims[i][d];
    for (int64_t e = 0; e < n; e++) xs[i][e] = gen(dt);
    x[i] = xs[i];
  }
  ref_eq q;
  int64_t od[16];
  ref_parse(eq, n_ops, ranks, &q);
  ref_eval(&q, dims, x, want, od);
  keel_session_t *s = einsum_session(eq, n_ops, dt);
  CHECK(s != NULL);
  if (!s) return;
  keel_value_t *y;
  CHECK_OK(run_einsum(s, n_ops, dt, ranks, dims, x, &y));
  int ro = q.rank[n_ops];
  bool ok = y && keel_value_rank(y) == ro && (int)keel_value_dtype(y) == dt;
  for (int d = 0; ok && d < ro; d++) ok = keel_value_shape(y)[d] == od[d];
  double tol = dt == KEEL_FLOAT ? 1e-4 : dt == KEEL_DOUBLE ? 1e-11 : dt == KEEL_FLOAT16 ? 2e-3 : 0;
  for (int64_t i = 0; ok && i < keel_value_numel(y); i++) {
    if (dt == KEEL_UINT8) want[i] = (double)(uint8_t)(int64_t)want[i]; /* wraps */
    if (fabs(keel_value_at(y, i) - want[i]) > tol * (1 + fabs(want[i]))) {
      fprintf(stderr, "  element %lld: got %.9g, expected %.9g\n", (long long)i,
              keel_value_at(y, i), want[i]);
      ok = false;
    }
  }
  if (!ok) fprintf(stderr, "  einsum \"%s\" (%s) failed\n", eq, keel_dtype_name((keel_dtype)dt));
  CHECK(ok);
  keel_value_release(y);
  keel_session_destroy(s);
}

/* ============================================== named equations */

typedef struct named_case {
  const char *eq;
  int n_ops;
  int ranks[MAXOPS];
  int64_t dims[MAXOPS][16];
} named_case;

static const named_case NAMED[] = {
    {"ij,jk->ik", 2, {2, 2}, {{3, 4}, {4, 5}}},                    /* matmul             */
    {"ij,jk", 2, {2, 2}, {{3, 4}, {4, 5}}},                        /* implicit           */
    {"bij, bjk -> bik", 2, {3, 3}, {{5, 2, 3}, {5, 3, 4}}},        /* batch matmul       */
    {"bij,bkj->bik", 2, {3, 3}, {{2, 3, 4}, {2, 5, 4}}},           /* B transposed       */
    {"ii", 1, {2}, {{4, 4}}},                                      /* trace              */
    {"ii->i", 1, {2}, {{4, 4}}},                                   /* diagonal           */
    {"...ii ->...i", 1, {3}, {{3, 5, 5}}},                         /* batch diagonal     */
    {"bii->b", 1, {3}, {{3, 4, 4}}},                               /* batch trace        */
    {"iij->ji", 1, {3}, {{3, 3, 2}}},
    {"ij->ji", 1, {2}, {{3, 4}}},                                  /* transpose          */
    {"ijk->kij", 1, {3}, {{2, 3, 4}}},
    {"ij->i", 1, {2}, {{3, 4}}},                                   /* sums               */
    {"ij->", 1, {2}, {{3, 4}}},
    {"i,i", 2, {1, 1}, {{5}, {5}}},                                /* inner product      */
    {"i,j->ij", 2, {1, 1}, {{3}, {4}}},                            /* outer product      */
    {"i,j", 2, {1, 1}, {{3}, {4}}},
    {"ij,ij->ij", 2, {2, 2}, {{3, 4}, {3, 4}}},                    /* elementwise        */
    {"ij,ij->ij", 2, {2, 2}, {{1, 4}, {3, 4}}},                    /* size-1 broadcast   */
    {"...ij,...jk->...ik", 2, {3, 4}, {{2, 3, 4}, {5, 1, 4, 2}}},  /* ellipsis broadcast */
    {"...i,...i", 2, {2, 3}, {{2, 3}, {5, 1, 3}}},
    {"a...,...a", 2, {2, 2}, {{2, 3}, {3, 2}}},
    {"...", 1, {2}, {{2, 3}}},
    {"ij->...ij", 1, {2}, {{2, 3}}},
    {"Ba,a", 2, {2, 1}, {{2, 3}, {3}}},                            /* upper case         */
    {"ij,jk,kl->il", 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 5}}},      /* three operands     */
    {"ab,bc,ca", 3, {2, 2, 2}, {{2, 3}, {3, 4}, {4, 2}}},
    {"i,i,i->", 3, {1, 1, 1}, {{6}, {6}, {6}}},
    {"bn,anm,bm->ba", 3, {2, 3, 2}, {{2, 3}, {4, 3, 5}, {2, 5}}},  /* bilinear           */
    {"", 1, {0}, {{0}}},                                           /* scalar             */
    {"i->", 1, {1}, {{0}}},                                        /* empty sum          */
    {"ij,jk->ik", 2, {2, 2}, {{3, 0}, {0, 2}}},                    /* K = 0              */
    {"ij,jk->ik", 2, {2, 2}, {{0, 3}, {3, 2}}},                    /* M = 0              */
};

static void check_named(void) {
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT32, KEEL_INT64, KEEL_FLOAT16,
                            KEEL_UINT8};
  for (size_t c = 0; c < sizeof NAMED / sizeof NAMED[0]; c++)
    for (int t = 0; t < 6; t++) {
      named_case nc = NAMED[c];
      check_einsum(nc.eq, nc.n_ops, nc.ranks, nc.dims, dts[t]);
    }
}

/* A larger float matmul and batched matmul: the BLAS path, no copies. */
static void check_large(void) {
  int64_t d1[2][16] = {{64, 48}, {48, 40}}, d2[2][16] = {{4, 20, 16}, {4, 16, 24}};
  check_einsum("ij,jk->ik", 2, (int[]){2, 2}, d1, KEEL_FLOAT);
  check_einsum("bij,bjk->bik", 2, (int[]){3, 3}, d2, KEEL_DOUBLE);
  check_einsum("bij,bjk->bki", 2, (int[]){3, 3}, d2, KEEL_FLOAT);
}

/* ============================================= random equations */

/* Writes a random well-formed equation and operand shapes. */
static void random_equation(char *eq, int *n_ops, int *ranks, int64_t dims[][16]) {
  static const char pool[] = "abXcY";
  int nl = 2 + rnd(4), ne = rnd(3);
  int64_t lsize[8], esize[3];
  for (int i = 0; i < nl; i++) lsize[i] = 1 + rnd(4);
  for (int i = 0; i < ne; i++) esize[i] = 1 + rnd(3);
  int used[8] = {0};
  bool any_ell = false;
  *n_ops = 1 + rnd(MAXOPS);
  char *p = eq;
  for (int o = 0; o < *n_ops; o++) {
    int k = rnd(4), e = ne ? rnd(ne + 1) : 0, at = rnd(k + 1), r = 0;
    bool ell = ne && rnd(2);
    if (o) *p++ = ',';
    if (!ell) e = 0;
    for (int j = 0; j <= k; j++) {
      if (ell && j == at) {
        p += sprintf(p, rnd(4) ? "..." : " ... ");
        for (int t = 0; t < e; t++) dims[o][r++] = rnd(4) ? esize[ne - e + t] : 1;
        any_ell |= e > 0;
      }
      if (j == k) break;
      int l = rnd(nl);
      *p++ = pool[l];
      used[l]++;
      dims[o][r++] = rnd(5) ? lsize[l] : 1;
    }
    ranks[o] = r;
  }
  *p = '\0';
  if (rnd(3)) { /* explicit output: some used letters, the ellipsis if any */
    p += sprintf(p, "->");
    bool put = false;
    for (int l = 0; l < nl; l++) {
      if (any_ell && !put && rnd(2)) p += sprintf(p, "..."), put = true;
      if (used[l] && rnd(2)) *p++ = pool[l];
    }
    if (any_ell && !put) p += sprintf(p, "...");
    *p = '\0';
  }
}

/* Gives every repeat of a letter within one operand the same size (numpy
 * requires it), reading the letters back from the equation. */
static void fix_repeats(const char *eq, int n_ops, const int *ranks, int64_t dims[][16]) {
  ref_eq q;
  ref_parse(eq, n_ops, ranks, &q);
  for (int o = 0; o < n_ops; o++)
    for (int d = 0; d < q.rank[o]; d++)
      for (int e = 0; e < d; e++)
        if (q.lab[o][e] == q.lab[o][d]) dims[o][d] = dims[o][e];
}

static void check_random(void) {
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT32, KEEL_INT64};
  for (int t = 0; t < 150; t++) {
    char eq[128];
    int n_ops, ranks[MAXOPS];
    int64_t dims[MAXOPS][16];
    random_equation(eq, &n_ops, ranks, dims);
    fix_repeats(eq, n_ops, ranks, dims);
    check_einsum(eq, n_ops, ranks, dims, dts[rnd(4)]);
  }
}

/* ================================================ einsum errors */

/* eq on operands of the given shapes must fail with want; then a good
 * input runs on the same session. */
static void check_einsum_error(const char *eq, int n_ops, const int *ranks, int64_t dims[][16],
                               keel_status want, const char *needle) {
  keel_session_t *s = einsum_session(eq, n_ops, KEEL_FLOAT);
  CHECK(s != NULL);
  if (!s) return;
  static const double zeros[MAXE];
  const double *x[MAXOPS] = {zeros, zeros, zeros};
  keel_value_t *y;
  keel_status st = run_einsum(s, n_ops, KEEL_FLOAT, ranks, dims, x, &y);
  if (st != want || !strstr(keel_last_error(), needle))
    fprintf(stderr, "  \"%s\": %s: %s\n", eq, keel_status_str(st), keel_last_error());
  CHECK(st == want);
  CHECK(strstr(keel_last_error(), needle) != NULL);
  keel_session_destroy(s);
}

static void check_errors(void) {
  int64_t d23[2][16] = {{2, 3}, {3, 4}}, bad[2][16] = {{2, 3}, {4, 5}}, r3[2][16] = {{2, 3}, {3, 4, 1}};
  int r22[2] = {2, 2}, r23[2] = {2, 3};
  check_einsum_error("ij,jk->ik", 2, r22, bad, KEEL_ERR_SHAPE, "'j'");
  check_einsum_error("ij,jk->ik", 2, r23, r3, KEEL_ERR_SHAPE, "operand 1 has rank 3");
  check_einsum_error("ij,j$->i", 2, r22, d23, KEEL_ERR_INVALID_MODEL, "'$'");
  check_einsum_error("ij,jk->ij,k", 2, r22, d23, KEEL_ERR_INVALID_MODEL, "unexpected");
  check_einsum_error("ij,jk->iz", 2, r22, d23, KEEL_ERR_INVALID_MODEL, "'z'");
  check_einsum_error("ij,jk->ii", 2, r22, d23, KEEL_ERR_INVALID_MODEL, "twice");
  check_einsum_error("i..j,jk", 2, r22, d23, KEEL_ERR_INVALID_MODEL, "'...'");
  check_einsum_error("ij,jk,k", 2, r22, d23, KEEL_ERR_INVALID_MODEL, "3 operands");
  check_einsum_error("ij-ik", 1, r22, d23, KEEL_ERR_INVALID_MODEL, "->");
  check_einsum_error("ii->i", 1, r22, d23, KEEL_ERR_SHAPE, "repeats");
  int64_t e3[1][16] = {{2, 3, 4}};
  check_einsum_error("...ij->ij", 1, (int[]){3}, e3, KEEL_ERR_SHAPE, "'...'");

  /* the same session survives a bad input and then runs a good one */
  keel_session_t *s = einsum_session("ij,jk->ik", 2, KEEL_DOUBLE);
  if (!s) return;
  static const double ones[MAXE] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const double *x[2] = {ones, ones};
  keel_value_t *y;
  CHECK(run_einsum(s, 2, KEEL_DOUBLE, r22, bad, x, &y) == KEEL_ERR_SHAPE);
  CHECK_OK(run_einsum(s, 2, KEEL_DOUBLE, r22, d23, x, &y));
  CHECK(y && keel_value_numel(y) == 8 && keel_value_at(y, 7) == 3);
  keel_value_release(y);
  keel_session_destroy(s);
}

/* =========================================================== Det */

static double cofactor_det(const double *a, int n, int stride) {
  if (n == 0) return 1;
  if (n == 1) return a[0];
  double sub[36], det = 0;
  for (int c = 0; c < n; c++) {
    int k = 0;
    for (int r = 1; r < n; r++)
      for (int j = 0; j < n; j++)
        if (j != c) sub[k++] = a[r * stride + j];
    det += (c % 2 ? -1 : 1) * a[c] * cofactor_det(sub, n - 1, n - 1);
  }
  return det;
}

static keel_session_t *det_session(int dt) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", dt, -1, NULL);
  mb_output(g, "Y", dt, -1, NULL);
  mb_add(g, "Det", "X", "Y");
  return mb_session(g, 11);
}

static void check_det_case(keel_session_t *s, int dt, int rank, const int64_t *dims,
                           const double *x) {
  int n = (int)dims[rank - 1];
  int64_t batch = 1;
  for (int d = 0; d < rank - 2; d++) batch *= dims[d];
  static uint8_t buf[MAXE * 8];
  for (int64_t i = 0; i < batch * n * n; i++) keel_elem_set_f64(dt, buf, (size_t)i, x[i]);
  keel_value_t *in = NULL, *y = NULL;
  CHECK_OK(keel_tensor_create(s, (keel_dtype)dt, rank, dims, buf, &in));
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &y));
  CHECK(y && keel_value_rank(y) == rank - 2 && keel_value_numel(y) == batch);
  for (int64_t b = 0; y && b < batch; b++) {
    double want = cofactor_det(x + b * n * n, n, n);
    double tol = dt == KEEL_DOUBLE ? 1e-12 : dt == KEEL_FLOAT ? 1e-5 : 5e-3;
    CHECK_NEAR(keel_value_at(y, b), want, tol * (1 + fabs(want)));
  }
  keel_value_release(y);
  keel_value_release(in);
}

static void check_det(void) {
  static const int dts[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16};
  static double x[MAXE];
  for (int t = 0; t < 3; t++) {
    keel_session_t *s = det_session(dts[t]);
    CHECK(s != NULL);
    if (!s) continue;
    for (int c = 0; c < 25; c++) {
      int rank = 2 + rnd(3);
      int64_t dims[4];
      for (int d = 0; d < rank - 2; d++) dims[d] = 1 + rnd(3);
      dims[rank - 1] = dims[rank - 2] = rnd(7);
      if (dts[t] == KEEL_FLOAT16) dims[rank - 1] = dims[rank - 2] = rnd(5); /* stays finite */
      int64_t n = 1;
      for (int d = 0; d < rank; d++) n *= dims[d];
      for (int64_t i = 0; i < n; i++)
        x[i] = as_dtype(dts[t], dts[t] == KEEL_FLOAT16 ? rnd(9) - 4 : rnd(2001) / 500.0 - 2);
      check_det_case(s, dts[t], rank, dims, x);
    }
    /* singular (two equal rows) and a permutation (sign -1) */
    double sing[9] = {1, 2, 3, 4, 5, 6, 1, 2, 3}, perm[9] = {0, 1, 0, 1, 0, 0, 0, 0, 1};
    check_det_case(s, dts[t], 2, (int64_t[]){3, 3}, sing);
    check_det_case(s, dts[t], 2, (int64_t[]){3, 3}, perm);
    keel_session_destroy(s);
  }
  keel_session_t *s = det_session(KEEL_FLOAT);
  if (!s) return;
  keel_value_t *in = NULL, *y = NULL;
  float v[6] = {0};
  CHECK_OK(keel_tensor_create(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, v, &in));
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &y), KEEL_ERR_SHAPE);
  keel_value_release(in);
  check_det_case(s, KEEL_FLOAT, 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4});
  keel_session_destroy(s);
}

int main(void) {
  check_named();
  check_large();
  check_random();
  check_errors();
  check_det();
  return check_report();
}
