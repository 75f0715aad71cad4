/* test_ops_matmul.c: MatMul, Gemm, MatMulInteger and QLinearMatMul through
 * real sessions, against a naive triple loop with numpy broadcasting
 * written here: random ranks (1-D promotion included), broadcast batch
 * dims, empty dims, every supported type; Gemm's transposes, alpha, beta
 * and C broadcasting (and opset 6's broadcast=0); zero points and scales
 * per tensor, row and column; and shape errors that must leave the session
 * usable. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

typedef struct shp {
  int r;
  int64_t d[6];
} shp;

static int64_t numel(const shp *s) {
  int64_t n = 1;
  for (int i = 0; i < s->r; i++) n *= s->d[i];
  return n;
}

/* Random values of a type, as doubles holding exactly what the tensor
 * holds, and the tensor bytes (malloc'ed). */
static void *rand_data(int dtype, double *v, int64_t n) {
  size_t es = keel_dtype_size((keel_dtype)dtype);
  char *p = malloc((size_t)n * es + 1);
  for (int64_t i = 0; i < n; i++) {
    bool u = dtype == KEEL_UINT32 || dtype == KEEL_UINT64 || dtype == KEEL_UINT8;
    double x = keel_dtype_is_float(dtype) ? (double)rnd(-1000, 1000) / 997.0
                                          : (double)(u ? rnd(0, 9) : rnd(-5, 5));
    if (dtype == KEEL_FLOAT16) x = keel_f16_to_f32(keel_f32_to_f16((float)x));
    if (dtype == KEEL_FLOAT) x = (float)x;
    if (dtype == KEEL_FLOAT16) ((uint16_t *)p)[i] = keel_f32_to_f16((float)x);
    else keel_elem_set_f64(dtype, p, (size_t)i, x);
    v[i] = x;
  }
  return p;
}

static bool close_to(const keel_value_t *v, const shp *want, const double *ref, double tol,
                     const char *what) {
  if (!v || keel_value_rank(v) != want->r ||
      memcmp(keel_value_shape(v), want->d, sizeof(int64_t) * (size_t)want->r)) {
    fprintf(stderr, "%s: wrong shape (rank %d, expected %d)\n", what, v ? keel_value_rank(v) : -1,
            want->r);
    return false;
  }
  for (int64_t i = 0; i < numel(want); i++) {
    double a = keel_value_at(v, i);
    if (!(fabs(a - ref[i]) <= tol * (1 + fabs(ref[i])))) {
      fprintf(stderr, "%s: element %lld = %.7g, expected %.7g\n", what, (long long)i, a, ref[i]);
      return false;
    }
  }
  return true;
}

/* ====================================================== reference */

/* numpy.matmul written out: promote 1-D operands, broadcast the batch
 * dims, triple loop per batch. False when the shapes do not fit. */
static bool ref_matmul(const shp *a, const double *A, const shp *b, const double *B, shp *y,
                       double *Y) {
  shp pa = *a, pb = *b;
  if (a->r == 1) pa.r = 2, pa.d[0] = 1, pa.d[1] = a->d[0];
  if (b->r == 1) pb.r = 2, pb.d[1] = 1;
  int64_t M = pa.d[pa.r - 2], K = pa.d[pa.r - 1], N = pb.d[pb.r - 1];
  if (pb.d[pb.r - 2] != K) return false;
  int nb = (pa.r > pb.r ? pa.r : pb.r) - 2;
  int64_t batch[6], nbatch = 1;
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - (pa.r - 2)), ib = i - (nb - (pb.r - 2));
    int64_t da = ia >= 0 ? pa.d[ia] : 1, db = ib >= 0 ? pb.d[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    batch[i] = da == 1 ? db : da, nbatch *= batch[i];
  }
  y->r = 0;
  for (int i = 0; i < nb; i++) y->d[y->r++] = batch[i];
  if (a->r > 1) y->d[y->r++] = M;
  if (b->r > 1) y->d[y->r++] = N;
  for (int64_t bi = 0; bi < nbatch; bi++) {
    int64_t oa = 0, ob = 0, sa = 1, sb = 1, rem = bi;
    for (int i = nb - 1; i >= 0; i--) { /* batch coordinate -> operand matrix */
      int64_t c = rem % batch[i];
      rem /= batch[i];
      int ia = i - (nb - (pa.r - 2)), ib = i - (nb - (pb.r - 2));
      if (ia >= 0) oa += (pa.d[ia] == 1 ? 0 : c) * sa, sa *= pa.d[ia];
      if (ib >= 0) ob += (pb.d[ib] == 1 ? 0 : c) * sb, sb *= pb.d[ib];
    }
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += A[(oa * M + m) * K + k] * B[(ob * K + k) * N + n];
        Y[(bi * M + m) * N + n] = acc;
      }
  }
  return true;
}

/* ========================================================= MatMul */

static keel_session_t *one_node(const char *op, int n_in, const char *ins, const int *types,
                                int out_type, int opset) {
  mb_graph *g = mb_graph_new("main");
  char names[16][8];
  for (int i = 0; i < n_in; i++) {
    snprintf(names[i], sizeof names[i], "%c", 'A' + i);
    mb_input(g, names[i], types[i], -1, NULL);
  }
  mb_output(g, "Y", out_type, -1, NULL);
  mb_add(g, op, ins, "Y");
  return mb_session(g, opset);
}

static void random_shapes(shp *a, shp *b) {
  int64_t M = rnd(1, 5), K = rnd(1, 6), N = rnd(1, 5);
  if (next() % 16 == 0) K = 0;
  if (next() % 16 == 0) M = 0;
  int nb = (int)rnd(0, 2);
  int64_t batch[2] = {rnd(1, 3), rnd(1, 3)};
  a->r = (int)rnd(0, nb) + 2, b->r = (int)rnd(0, nb) + 2;
  for (int i = 0; i < a->r - 2; i++) a->d[i] = next() % 3 ? batch[nb - (a->r - 2) + i] : 1;
  for (int i = 0; i < b->r - 2; i++) b->d[i] = next() % 3 ? batch[nb - (b->r - 2) + i] : 1;
  a->d[a->r - 2] = M, a->d[a->r - 1] = K, b->d[b->r - 2] = K, b->d[b->r - 1] = N;
  if (next() % 6 == 0) a->r = 1, a->d[0] = K; /* vector operands */
  if (next() % 6 == 0) b->r = 1, b->d[0] = K;
}

static const int MM_TYPES[] = {KEEL_FLOAT, KEEL_FLOAT, KEEL_DOUBLE, KEEL_INT32,
                               KEEL_INT64, KEEL_UINT32, KEEL_UINT64, KEEL_FLOAT16};

static void check_matmul_case(const shp *a, const shp *b, int dt) {
  double *A = malloc(sizeof(double) * (size_t)(numel(a) + 1));
  double *B = malloc(sizeof(double) * (size_t)(numel(b) + 1)), Y[2048];
  void *pa = rand_data(dt, A, numel(a)), *pb = rand_data(dt, B, numel(b));
  shp y;
  bool ok = ref_matmul(a, A, b, B, &y, Y);
  keel_session_t *s = one_node("MatMul", 2, "A,B", (int[]){dt, dt}, dt, 13);
  CHECK(s != NULL);
  keel_value_t *in[2] = {mb_tensor(s, dt, a->r, a->d, pa), mb_tensor(s, dt, b->r, b->d, pb)};
  keel_value_t *out[1] = {0};
  keel_status st = keel_run(s, (const char *[]){"A", "B"}, in, 2, out);
  CHECK_STATUS(st, ok ? KEEL_OK : KEEL_ERR_SHAPE);
  char what[64];
  snprintf(what, sizeof what, "MatMul r%d x r%d %s", a->r, b->r, keel_dtype_name((keel_dtype)dt));
  if (ok && st == KEEL_OK)
    CHECK(close_to(out[0], &y, Y, dt == KEEL_FLOAT16 ? 1e-2 : keel_dtype_is_float(dt) ? 1e-5 : 0, what));
  keel_value_release(out[0]), keel_value_release(in[0]), keel_value_release(in[1]);
  keel_session_destroy(s);
  free(A), free(B), free(pa), free(pb);
}

static void check_matmul(void) {
  for (int i = 0; i < 150; i++) {
    shp a, b;
    random_shapes(&a, &b);
    check_matmul_case(&a, &b, MM_TYPES[i % 8]);
  }
  /* folded batches (B shared), and a bigger product through BLAS */
  check_matmul_case(&(shp){3, {4, 7, 33}}, &(shp){2, {33, 20}}, KEEL_FLOAT);
  check_matmul_case(&(shp){2, {7, 33}}, &(shp){3, {4, 33, 20}}, KEEL_DOUBLE);
  check_matmul_case(&(shp){4, {2, 1, 5, 3}}, &(shp){3, {4, 3, 6}}, KEEL_FLOAT);
  /* mismatches: K, batch */
  check_matmul_case(&(shp){2, {2, 3}}, &(shp){2, {4, 2}}, KEEL_FLOAT);
  check_matmul_case(&(shp){3, {2, 2, 3}}, &(shp){3, {3, 3, 2}}, KEEL_FLOAT);
}

/* ============================================================ Gemm */

typedef struct gemm_case {
  int64_t M, N, K;
  bool ta, tb, has_c;
  float alpha, beta;
  shp c;
} gemm_case;

/* Y = alpha * op(A) op(B) + beta * C, C broadcast by hand. */
static void ref_gemm(const gemm_case *q, const double *A, const double *B, const double *C,
                     double *Y) {
  int64_t M = q->M, N = q->N, K = q->K;
  const shp *c = &q->c;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < K; k++)
        acc += A[q->ta ? k * M + m : m * K + k] * B[q->tb ? n * K + k : k * N + n];
      int64_t ci = c->r == 2 ? (c->d[0] == 1 ? 0 : m) * c->d[1] + (c->d[1] == 1 ? 0 : n)
                   : c->r == 1 ? (c->d[0] == 1 ? 0 : n)
                               : 0;
      Y[m * N + n] = q->alpha * acc + (q->has_c ? q->beta * C[ci] : 0);
    }
}

static keel_session_t *gemm_session(const gemm_case *q, int dt, int opset, bool bcast_attr) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "A", dt, -1, NULL), mb_input(g, "B", dt, -1, NULL);
  if (q->has_c) mb_input(g, "C", dt, -1, NULL);
  mb_output(g, "Y", dt, -1, NULL);
  mb_node *nd = mb_add(g, "Gemm", q->has_c ? "A,B,C" : "A,B", "Y");
  mb_attr_i(nd, "transA", q->ta), mb_attr_i(nd, "transB", q->tb);
  mb_attr_f(nd, "alpha", q->alpha), mb_attr_f(nd, "beta", q->beta);
  if (opset < 7) mb_attr_i(nd, "broadcast", bcast_attr);
  return mb_session(g, opset);
}

static void random_gemm(gemm_case *q, int dt) {
  static const int64_t cshapes[6][3] = {{0}, {1, 1}, {1, -2}, {2, -1, 1}, {2, 1, -2}, {2, -1, -2}};
  int64_t lo = keel_dtype_is_signed(dt) ? -2 : 0; /* unsigned results must stay >= 0 */
  q->M = rnd(1, 6), q->N = rnd(1, 6), q->K = rnd(1, 6);
  q->ta = next() % 2, q->tb = next() % 2, q->has_c = next() % 5 != 0;
  q->alpha = keel_dtype_is_float(dt) ? (float)rnd(-8, 8) / 4 : (float)rnd(lo, 3);
  q->beta = keel_dtype_is_float(dt) ? (float)rnd(-8, 8) / 4 : (float)rnd(lo, 3);
  const int64_t *cs = cshapes[rnd(0, 5)];
  q->c.r = (int)cs[0];
  for (int i = 0; i < q->c.r; i++) q->c.d[i] = cs[i + 1] == -1 ? q->M : cs[i + 1] == -2 ? q->N : cs[i + 1];
}

static void check_gemm_case(int dt, int opset, bool bcast_attr) {
  gemm_case q;
  random_gemm(&q, dt);
  int64_t M = q.M, N = q.N, K = q.K;
  shp a = {2, {q.ta ? K : M, q.ta ? M : K}}, b = {2, {q.tb ? N : K, q.tb ? K : N}}, c = q.c;
  double A[64], B[64], C[64], Y[64];
  void *pa = rand_data(dt, A, numel(&a)), *pb = rand_data(dt, B, numel(&b));
  void *pc = rand_data(dt, C, numel(&c));
  ref_gemm(&q, A, B, C, Y);
  keel_session_t *s = gemm_session(&q, dt, opset, bcast_attr);
  CHECK(s != NULL);
  keel_value_t *in[3] = {mb_tensor(s, dt, 2, a.d, pa), mb_tensor(s, dt, 2, b.d, pb),
                         mb_tensor(s, dt, c.r, c.d, pc)};
  keel_value_t *out[1] = {0};
  keel_status st = keel_run(s, (const char *[]){"A", "B", "C"}, in, q.has_c ? 3 : 2, out);
  bool strict_bad = opset < 7 && !bcast_attr && q.has_c && (c.r != 2 || c.d[0] != M || c.d[1] != N);
  CHECK_STATUS(st, strict_bad ? KEEL_ERR_SHAPE : KEEL_OK);
  if (st == KEEL_OK) {
    shp y = {2, {M, N}};
    char what[64];
    snprintf(what, sizeof what, "Gemm ta=%d tb=%d C rank %d %s", q.ta, q.tb, c.r,
             keel_dtype_name((keel_dtype)dt));
    CHECK(close_to(out[0], &y, Y, dt == KEEL_FLOAT16 ? 1e-2 : keel_dtype_is_float(dt) ? 1e-5 : 0, what));
  }
  keel_value_release(out[0]);
  for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  keel_session_destroy(s);
  free(pa), free(pb), free(pc);
}

static void check_gemm(void) {
  static const int types[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16, KEEL_INT32, KEEL_INT64,
                              KEEL_UINT64};
  for (int i = 0; i < 60; i++) check_gemm_case(types[i % 6], 13, false);
  for (int i = 0; i < 16; i++) check_gemm_case(KEEL_FLOAT, 6, i % 2);
}

/* ================================================ quantized matmul */

/* MatMulInteger (or QLinearMatMul) on (2, M, K) x (K, N) with zero points
 * per tensor, per row of A and per column of B. */
static void check_quant_case(bool qlinear, int ta, int tb, int zp_mode) {
  int64_t M = rnd(1, 5), K = rnd(1, 7), N = rnd(1, 5);
  shp a = {3, {2, M, K}}, b = {2, {K, N}}, y = {3, {2, M, N}};
  double A[128], B[64], Y[64], az[8], bz[8];
  void *pa = rand_data(ta, A, numel(&a)), *pb = rand_data(tb, B, numel(&b));
  int64_t naz = zp_mode & 1 ? M : 1, nbz = zp_mode & 2 ? N : 1;
  void *paz = rand_data(ta, az, naz), *pbz = rand_data(tb, bz, nbz);
  float fas[8], fbs[8], ys = 0.05f;
  for (int i = 0; i < 8; i++) fas[i] = 0.01f * (float)rnd(1, 9), fbs[i] = 0.01f * (float)rnd(1, 9);
  for (int64_t i = 0; i < 2 * M * K; i++) A[i] -= az[naz == 1 ? 0 : (i / K) % M];
  for (int64_t i = 0; i < K * N; i++) B[i] -= bz[nbz == 1 ? 0 : i % N];
  ref_matmul(&a, A, &b, B, &(shp){0}, Y);
  if (qlinear)
    for (int64_t i = 0; i < 2 * M * N; i++) {
      float sc = fas[naz == 1 ? 0 : (i / N) % M] * fbs[nbz == 1 ? 0 : i % N] / ys;
      float v = rintf((float)Y[i] * sc) + 10.0f;
      Y[i] = v < 0 ? 0 : v > 255 ? 255 : v;
    }
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", ta, -1, NULL), mb_input(g, "b", tb, -1, NULL);
  mb_init(g, "az", ta, 1, (int64_t[]){naz}, paz), mb_init(g, "bz", tb, 1, (int64_t[]){nbz}, pbz);
  mb_init(g, "as", KEEL_FLOAT, 1, (int64_t[]){naz}, fas);
  mb_init(g, "bs", KEEL_FLOAT, 1, (int64_t[]){nbz}, fbs);
  mb_init(g, "ys", KEEL_FLOAT, 0, NULL, &ys), mb_init(g, "yz", KEEL_UINT8, 0, NULL, (uint8_t[]){10});
  mb_output(g, "y", qlinear ? KEEL_UINT8 : KEEL_INT32, -1, NULL);
  mb_add(g, qlinear ? "QLinearMatMul" : "MatMulInteger",
         qlinear ? "a,as,az,b,bs,bz,ys,yz" : "a,b,az,bz", "y");
  keel_session_t *s = mb_session(g, 13);
  CHECK(s != NULL);
  keel_value_t *in[2] = {mb_tensor(s, ta, 3, a.d, pa), mb_tensor(s, tb, 2, b.d, pb)};
  keel_value_t *out[1] = {0};
  CHECK_OK(keel_run(s, (const char *[]){"a", "b"}, in, 2, out));
  CHECK(close_to(out[0], &y, Y, 0, qlinear ? "QLinearMatMul" : "MatMulInteger"));
  keel_value_release(out[0]), keel_value_release(in[0]), keel_value_release(in[1]);
  keel_session_destroy(s);
  free(pa), free(pb), free(paz), free(pbz);
}

static void check_quant(void) {
  for (int i = 0; i < 24; i++)
    check_quant_case(i % 2, i % 4 < 2 ? KEEL_UINT8 : KEEL_INT8, i % 3 ? KEEL_INT8 : KEEL_UINT8,
                     (i / 2) % 4);
}

/* ========================================================== errors */

static void check_errors(void) {
  keel_session_t *s = one_node("MatMul", 2, "A,B", (int[]){KEEL_FLOAT, KEEL_FLOAT}, KEEL_FLOAT, 13);
  CHECK(s != NULL);
  if (!s) return;
  float v[12] = {0};
  keel_value_t *a = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 4}, v);
  keel_value_t *bad = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 4}, v);
  keel_value_t *scalar = mb_tensor(s, KEEL_FLOAT, 0, NULL, v);
  keel_value_t *good = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){4, 3}, v);
  keel_value_t *dbl = mb_tensor(s, KEEL_DOUBLE, 2, (int64_t[]){4, 3}, NULL);
  keel_value_t *out[1] = {0};
  const char *names[] = {"A", "B"};
  CHECK_STATUS(keel_run(s, names, (keel_value_t *[]){a, bad}, 2, out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "columns") != NULL);
  CHECK_STATUS(keel_run(s, names, (keel_value_t *[]){a, scalar}, 2, out), KEEL_ERR_SHAPE);
  CHECK_STATUS(keel_run(s, names, (keel_value_t *[]){a, dbl}, 2, out), KEEL_ERR_SHAPE);
  CHECK_OK(keel_run(s, names, (keel_value_t *[]){a, good}, 2, out));
  CHECK(out[0] && keel_value_numel(out[0]) == 9);
  keel_value_release(out[0]);
  keel_value_release(a), keel_value_release(bad), keel_value_release(scalar);
  keel_value_release(good), keel_value_release(dbl);
  keel_session_destroy(s);
}

int main(void) {
  check_matmul();
  check_gemm();
  check_quant();
  check_errors();
  return check_report();
}
