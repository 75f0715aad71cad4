/* cuda_blas.c: the blas group (dev_blas.h) on an NVIDIA GPU, by cuBLAS.
 *
 * Like the driver (cuda.c), cuBLAS is no build-time dependency: the
 * library is opened with dlopen at the first CUDA device's opening
 * (libcublas.so.13, then .so.12, then plain libcublas.so) and the few
 * entry points keel calls are declared here by their documented
 * signatures and looked up by their exported names (the _v2 ones where
 * cublas_v2.h maps a name onto one). Without it the device still opens,
 * with d->blas NULL and the reason in its description: the session then
 * keeps MatMul and Gemm on the CPU (keel_model.gpu_no_blas).
 *
 * One handle per device (d->blas_state), made when the device opens, on
 * the device's primary context (the one the CUDA runtime under cuBLAS
 * uses) and bound to the device's stream, so that the products are
 * ordered with keel's own kernels and copies; destroyed before the
 * device's context is released (device.c). Math mode CUBLAS_DEFAULT_MATH:
 * no TF32, float32 products as the CPU's. No workspace is set: cuBLAS
 * keeps its default one per handle (allocated by the CUDA runtime, not
 * counted in keel's device bytes).
 *
 * keel's tensors are row-major and cuBLAS is column-major: a row-major
 * M x N matrix is the column-major N x M matrix of its transpose, so
 * C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, B and A swapped
 * with their transpose flags unchanged and leading dimensions as stored.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "device/cuda.h"
#include "device/dev_blas.h"
#include "keel.h"

typedef int cublasStatus_t;    /* CUBLAS_STATUS_SUCCESS = 0                */
typedef void *cublasHandle_t;
typedef int cublasOperation_t; /* CUBLAS_OP_N = 0, CUBLAS_OP_T = 1         */
typedef int cublasMath_t;
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1
#define CUBLAS_DEFAULT_MATH 0

/* The cuBLAS entry points keel uses. */
typedef struct cublas_api {
  cublasStatus_t (*create)(cublasHandle_t *);                      /* cublasCreate_v2     */
  cublasStatus_t (*destroy)(cublasHandle_t);                       /* cublasDestroy_v2    */
  cublasStatus_t (*set_stream)(cublasHandle_t, void *);            /* cublasSetStream_v2  */
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);   /* cublasSetMathMode   */
  cublasStatus_t (*sgemm_strided)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const float *, const float *, int, long long,
                                  const float *, int, long long, const float *, float *, int,
                                  long long, int);                 /* cublasSgemmStridedBatched */
  const char *(*status_string)(cublasStatus_t);                    /* cublasGetStatusString,
                                                                      optional (11.4.2 on) */
  cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t); /* cublasSetWorkspace_v2,
                                                                      optional (11.2 on) */
} cublas_api;

static cublas_api g_api;
static void *g_lib;
static const char *g_soname;
static char g_why[400];       /* why there is no cuBLAS, once known      */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load_api(void) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  char first[256] = "";
  for (size_t i = 0; i < sizeof names / sizeof *names && !g_lib; i++) {
    g_lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (g_lib) g_soname = names[i];
    else if (!first[0]) snprintf(first, sizeof first, "%s", dlerror());
  }
  if (!g_lib) {
    snprintf(g_why, sizeof g_why, "cuBLAS (libcublas.so.13) was not found: %s", first);
    return;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&g_api.create, "cublasCreate_v2"},
      {(void **)&g_api.destroy, "cublasDestroy_v2"},
      {(void **)&g_api.set_stream, "cublasSetStream_v2"},
      {(void **)&g_api.set_math_mode, "cublasSetMathMode"},
      {(void **)&g_api.sgemm_strided, "cublasSgemmStridedBatched"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(g_lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(g_why, sizeof g_why, "%s lacks %s: cuBLAS is too old", g_soname, syms[i].name);
      dlclose(g_lib);
      g_lib = NULL;
      return;
    }
  }
  g_api.status_string = (const char *(*)(cublasStatus_t))dlsym(g_lib, "cublasGetStatusString");
  g_api.set_workspace = (cublasStatus_t(*)(cublasHandle_t, void *, size_t))dlsym(g_lib, "cublasSetWorkspace_v2");
}

static const char *status_text(cublasStatus_t r) {
  return g_api.status_string ? g_api.status_string(r) : "";
}
static keel_status blas_err(cublasStatus_t r, const char *what) {
  /* CUBLAS_STATUS_ALLOC_FAILED is 3 */
  return keel_err(r == 3 ? KEEL_ERR_OUT_OF_MEMORY : KEEL_ERR_RUNTIME, "GPU: cuBLAS %s: %s (%d)", what,
                  status_text(r), r);
}

typedef struct cuda_blas {
  cublasHandle_t h;
  keel_cuda_dev *c;
} cuda_blas;

static keel_status dims_fit(const keel_dev_gemm *g) {
  int64_t big = g->M;
  const int64_t all[] = {g->N, g->K, g->lda, g->ldb, g->ldc, g->batch};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) big = all[i] > big ? all[i] : big;
  if (big > INT_MAX)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: a product's dimension of %lld exceeds what cuBLAS indexes (%d)",
                    (long long)big, INT_MAX);
  return KEEL_OK;
}

static keel_status cb_sgemm(keel_device *d, const keel_dev_gemm *g, const float *a, const float *b,
                            float *c) {
  cuda_blas *s = d->blas_state;
  if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 1 || (g->batch > 1 && !g->sc))
    return keel_err(KEEL_ERR_INTERNAL, "GPU sgemm: M %lld, N %lld, K %lld, batch %lld, C's stride %lld",
                    (long long)g->M, (long long)g->N, (long long)g->K, (long long)g->batch,
                    (long long)g->sc);
  if (!g->M || !g->N) return KEEL_OK;
  KEEL_TRY(keel_cuda_use(s->c));
  if (!g->K) { /* empty sums: C = beta * C */
    int64_t ldc = g->ldc, sc = g->sc, M = g->M, N = g->N, batch = g->batch;
    float beta = g->beta;
    void *args[] = {&batch, &M, &N, &ldc, &sc, &beta, &c};
    return keel_cuda_launch(s->c, "keel_blas_scale", keel_cuda_grid_for(s->c, batch * M * N), 1, 256, 0, args);
  }
  KEEL_TRY(dims_fit(g));
  cublasStatus_t r = g_api.sgemm_strided(
      s->h, g->tb ? CUBLAS_OP_T : CUBLAS_OP_N, g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->N, (int)g->M,
      (int)g->K, &g->alpha, b, (int)g->ldb, (long long)g->sb, a, (int)g->lda, (long long)g->sa, &g->beta,
      c, (int)g->ldc, (long long)g->sc, (int)g->batch);
  if (r) {
    char what[160];
    snprintf(what, sizeof what, "cublasSgemmStridedBatched (M %lld, N %lld, K %lld, batch %lld)",
             (long long)g->M, (long long)g->N, (long long)g->K, (long long)g->batch);
    return blas_err(r, what);
  }
  return KEEL_OK;
}

static keel_status cb_fill_2d(keel_device *d, int64_t M, int64_t N, const float *src, int64_t s0,
                              int64_t s1, float *y) {
  cuda_blas *s = d->blas_state;
  if (M <= 0 || N <= 0) return KEEL_OK;
  void *args[] = {&M, &N, &src, &s0, &s1, &y};
  return keel_cuda_launch(s->c, "keel_blas_fill2d", keel_cuda_grid_for(s->c, M * N), 1, 256, 0, args);
}

static void cb_close(keel_device *d) {
  cuda_blas *s = d->blas_state;
  if (!s) return;
  /* cublasDestroy waits for the handle's work; the context must be
   * current, and still alive (device.c closes the groups first) */
  if (!keel_cuda_use(s->c)) g_api.destroy(s->h);
  keel_sys_free(s, sizeof *s);
  d->blas_state = NULL;
}

/* The workspace comes from keel's device heap (the session's, tagged and
 * counted) instead of the one cuBLAS would allocate for the handle
 * itself: 32 MiB, what cuBLAS asks for on Hopper. */
static keel_status cb_set_workspace(keel_device *d, void *p, size_t bytes) {
  cuda_blas *s = d->blas_state;
  KEEL_TRY(keel_cuda_use(s->c));
  cublasStatus_t r = g_api.set_workspace(s->h, p, bytes);
  return r ? blas_err(r, "cublasSetWorkspace") : KEEL_OK;
}

static const keel_dev_blas g_cuda_blas = {"cuBLAS", cb_sgemm, cb_fill_2d, cb_close, (size_t)32 << 20,
                                          cb_set_workspace};
/* an old cuBLAS without cublasSetWorkspace keeps its own workspace */
static const keel_dev_blas g_cuda_blas_own_ws = {"cuBLAS", cb_sgemm, cb_fill_2d, cb_close, 0, NULL};

/* The device's description says why it has no BLAS. */
static void no_blas(keel_device *d, const char *why) {
  size_t n = strlen(d->desc);
  snprintf(d->desc + n, sizeof d->desc - n, "; no BLAS, MatMul/Gemm on the CPU: %s", why);
}

void keel_cuda_blas_open(keel_device *d) {
  d->blas = NULL, d->blas_state = NULL;
  pthread_once(&g_once, load_api);
  if (!g_lib) {
    no_blas(d, g_why);
    return;
  }
  cuda_blas *s = keel_sys_calloc(1, sizeof *s);
  if (!s) {
    no_blas(d, "out of memory");
    return;
  }
  s->c = d->impl;
  char why[200] = "";
  cublasStatus_t r = 0;
  if (keel_cuda_use(s->c)) snprintf(why, sizeof why, "%s", keel_last_error());
  else if ((r = g_api.create(&s->h))) snprintf(why, sizeof why, "cublasCreate: %s (%d)", status_text(r), r);
  else if ((r = g_api.set_stream(s->h, keel_cuda_stream_handle(s->c))) ||
           (r = g_api.set_math_mode(s->h, CUBLAS_DEFAULT_MATH)))
    snprintf(why, sizeof why, "setting up the cuBLAS handle: %s (%d)", status_text(r), r);
  if (why[0]) {
    if (s->h) g_api.destroy(s->h);
    keel_sys_free(s, sizeof *s);
    keel_err_clear();
    no_blas(d, why);
    return;
  }
  d->blas = g_api.set_workspace ? &g_cuda_blas : &g_cuda_blas_own_ws, d->blas_state = s;
}
