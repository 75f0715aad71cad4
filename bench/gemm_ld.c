/* gemm_ld.c: oneDNN's matmul primitive on a constant B in the plain layout
 * it asks for, with B's rows N floats apart (as the file has them) and with
 * keel_matmul_ld's stride (ops/math/matmul/select.c: a cache line more
 * where N floats are a multiple of 512 bytes), and OpenBLAS's sgemm as a
 * peer, alternating in rounds on one thread. Prints GFLOP/s (2 per
 * multiply-add), medians over the rounds, and oneDNN's kernel name.
 *
 *   build/gemm_ld [--rounds N] [M K N ...]
 *
 * Defaults: the products of the benchmark set's transformers (128 rows by
 * 256 x 256 ... 256 x 2048, the ViT's 197 rows) and a few conv-sized ones.
 * Not run by ctest: it times.
 */
#include <cblas.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* oneDNN's OpenMP runtime (libgomp, linked with it): one thread, as keel
 * runs each primitive on one of its pool's workers */
extern void omp_set_num_threads(int n);

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CK(x)                                                                                   \
  do {                                                                                          \
    if ((x) != dnnl_success) {                                                                  \
      fprintf(stderr, "gemm_ld: %s failed\n", #x);                                              \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

/* the same rule as keel_matmul_ld (select.c), restated: this program links
 * no keel code */
static long ld_of(long n) { return n % 128 == 0 ? n + 16 : n; }

typedef struct prim {
  dnnl_primitive_t p;
  dnnl_memory_t a, b, c;
  const char *impl;
} prim;

static void make(dnnl_engine_t eng, dnnl_stream_t st, long M, long K, long N, long ldb,
                 float *A, const float *B, float *C, prim *out) {
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N}, bs = {ldb, 1}, plain_s = {N, 1};
  dnnl_memory_desc_t amd, bmd, wmd, cmd;
  CK(dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_f32, dnnl_ab));
  CK(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_f32, plain_s));
  CK(dnnl_memory_desc_init_by_strides(&wmd, 2, bd, dnnl_f32, bs));
  CK(dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab));
  dnnl_matmul_desc_t md;
  CK(dnnl_matmul_desc_init(&md, &amd, &wmd, NULL, &cmd));
  dnnl_primitive_desc_t pd;
  CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
  CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &out->impl));
  dnnl_memory_t from;
  CK(dnnl_memory_create(&from, &bmd, eng, (void *)B));
  CK(dnnl_memory_create(&out->b, &wmd, eng, DNNL_MEMORY_ALLOCATE));
  dnnl_primitive_desc_t rpd;
  dnnl_primitive_t r;
  CK(dnnl_reorder_primitive_desc_create(&rpd, &bmd, eng, &wmd, eng, NULL));
  CK(dnnl_primitive_create(&r, rpd));
  dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, out->b}};
  CK(dnnl_primitive_execute(r, st, 2, ra));
  CK(dnnl_stream_wait(st));
  dnnl_primitive_destroy(r);
  dnnl_primitive_desc_destroy(rpd);
  dnnl_memory_destroy(from);
  CK(dnnl_memory_create(&out->a, &amd, eng, A));
  CK(dnnl_memory_create(&out->c, &cmd, eng, C));
  CK(dnnl_primitive_create(&out->p, pd));
  dnnl_primitive_desc_destroy(pd);
}

static double time_prim(dnnl_stream_t st, prim *p, int reps) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p->a}, {DNNL_ARG_WEIGHTS, p->b}, {DNNL_ARG_DST, p->c}};
  double t0 = now_ms();
  for (int i = 0; i < reps; i++) CK(dnnl_primitive_execute(p->p, st, 3, args));
  CK(dnnl_stream_wait(st));
  return (now_ms() - t0) / reps;
}

static void drop(prim *p) {
  dnnl_primitive_destroy(p->p);
  dnnl_memory_destroy(p->a);
  dnnl_memory_destroy(p->b);
  dnnl_memory_destroy(p->c);
}

int main(int argc, char **argv) {
  static const long defaults[][3] = {{128, 256, 256},  {128, 256, 512},  {128, 256, 768},
                                     {128, 256, 1024}, {128, 1024, 256}, {128, 256, 2048},
                                     {197, 192, 576},  {197, 192, 768},  {197, 768, 192},
                                     {784, 128, 512},  {196, 256, 1024}, {128, 256, 1000}};
  int rounds = 9, nshape = (int)(sizeof defaults / sizeof *defaults);
  long (*shapes)[3] = malloc(sizeof(long[3]) * (size_t)(argc + nshape));
  int n = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = atoi(argv[++i]);
    } else if (i + 2 < argc) {
      shapes[n][0] = atol(argv[i]), shapes[n][1] = atol(argv[i + 1]), shapes[n][2] = atol(argv[i + 2]);
      n++, i += 2;
    } else {
      fprintf(stderr, "usage: gemm_ld [--rounds N] [M K N ...]\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 99) rounds = 9;
  if (!n)
    for (; n < nshape; n++) memcpy(shapes[n], defaults[n], sizeof defaults[n]);
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  printf("one thread; GFLOP/s, median of %d alternating rounds\n", rounds);
  printf("%5s %5s %5s  %9s %9s %9s  %s\n", "M", "K", "N", "B as is", "B padded", "OpenBLAS",
         "oneDNN kernel (B as is / padded)");
  for (int s = 0; s < n; s++) {
    long M = shapes[s][0], K = shapes[s][1], N = shapes[s][2], ld = ld_of(N);
    if (M < 1 || K < 1 || N < 1 || M * K > (1L << 26) || K * ld > (1L << 26)) {
      fprintf(stderr, "gemm_ld: shape %ld x %ld x %ld out of range\n", M, K, N);
      return 2;
    }
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    for (long i = 0; i < M * K; i++) A[i] = (float)(i % 7) * 0.1f;
    for (long i = 0; i < K * N; i++) B[i] = (float)(i % 5) * 0.1f;
    prim as_is, padded;
    make(eng, st, M, K, N, N, A, B, C, &as_is);
    make(eng, st, M, K, N, ld, A, B, C, &padded);
    double flop = 2.0 * (double)(M * N * K), t[3][99];
    int reps = (int)(2e8 / flop) + 1;
    for (int r = 0; r < rounds; r++) {
      t[0][r] = time_prim(st, &as_is, reps);
      t[1][r] = time_prim(st, &padded, reps);
      double t0 = now_ms();
      for (int i = 0; i < reps; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A,
                    (int)K, B, (int)N, 0.0f, C, (int)N);
      t[2][r] = (now_ms() - t0) / reps;
    }
    for (int k = 0; k < 3; k++) qsort(t[k], (size_t)rounds, sizeof(double), cmp_d);
    printf("%5ld %5ld %5ld  %9.1f %9.1f %9.1f  %s / %s (ld %ld)\n", M, K, N,
           flop / 1e6 / t[0][rounds / 2], flop / 1e6 / t[1][rounds / 2],
           flop / 1e6 / t[2][rounds / 2], as_is.impl, padded.impl, ld);
    drop(&as_is);
    drop(&padded);
    free(A), free(B), free(C);
  }
  dnnl_stream_destroy(st);
  dnnl_engine_destroy(eng);
  free(shapes);
  return 0;
}
