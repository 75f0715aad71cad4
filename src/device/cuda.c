/* cuda.c: the CUDA driver API from plain C (see cuda.h).
 *
 * The driver's types are opaque handles and integers, so the few entry
 * points keel calls are declared here by their documented signatures and
 * looked up with dlsym in libcuda.so.1 (the versioned names where the
 * driver has several: cuMemAlloc_v2 and so on). Errors carry the driver's
 * own name and text for the code (cuGetErrorName / cuGetErrorString).
 */
#include "device/cuda.h"
#include "device/dev_conv.h"
#include "device/dev_move.h"
#include "device/dev_norm.h"
#include "device/dev_attn.h"
#include "device/dev_rnn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "device/dev_blas.h"
#include "keel.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_STREAM_NON_BLOCKING 1
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

/* The driver's entry points keel uses. */
typedef struct cuda_api {
  CUresult (*init)(unsigned);
  CUresult (*driver_version)(int *);
  CUresult (*device_count)(int *);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*device_name)(char *, int, CUdevice);
  CUresult (*device_attr)(int *, int, CUdevice);
  CUresult (*ctx_retain)(CUcontext *, CUdevice);
  CUresult (*ctx_release)(CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*mem_info)(size_t *, size_t *);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*module_load)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*module_unload)(CUmodule);
  CUresult (*module_fn)(CUfunction *, CUmodule, const char *);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*stream_sync)(CUstream);
  CUresult (*error_name)(CUresult, const char **);
  CUresult (*error_string)(CUresult, const char **);
} cuda_api;

static cuda_api g_api;
static void *g_lib;
static char g_why[512];           /* why there is no API, once known       */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Embedded PTX (cmake/embed_ptx.cmake), when built with kernels. */
#ifdef KEEL_HAVE_PTX
extern const char *const keel_cuda_ptx[];
extern const int keel_cuda_ptx_count;
#endif

static void load_api(void) {
  g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    snprintf(g_why, sizeof g_why, "no NVIDIA GPU: libcuda.so.1 not found (%s)", dlerror());
    return;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&g_api.init, "cuInit"},
      {(void **)&g_api.driver_version, "cuDriverGetVersion"},
      {(void **)&g_api.device_count, "cuDeviceGetCount"},
      {(void **)&g_api.device_get, "cuDeviceGet"},
      {(void **)&g_api.device_name, "cuDeviceGetName"},
      {(void **)&g_api.device_attr, "cuDeviceGetAttribute"},
      {(void **)&g_api.ctx_retain, "cuDevicePrimaryCtxRetain"},
      {(void **)&g_api.ctx_release, "cuDevicePrimaryCtxRelease_v2"},
      {(void **)&g_api.ctx_set, "cuCtxSetCurrent"},
      {(void **)&g_api.mem_info, "cuMemGetInfo_v2"},
      {(void **)&g_api.mem_alloc, "cuMemAlloc_v2"},
      {(void **)&g_api.mem_free, "cuMemFree_v2"},
      {(void **)&g_api.htod, "cuMemcpyHtoDAsync_v2"},
      {(void **)&g_api.dtoh, "cuMemcpyDtoHAsync_v2"},
      {(void **)&g_api.module_load, "cuModuleLoadDataEx"},
      {(void **)&g_api.module_unload, "cuModuleUnload"},
      {(void **)&g_api.module_fn, "cuModuleGetFunction"},
      {(void **)&g_api.launch, "cuLaunchKernel"},
      {(void **)&g_api.stream_create, "cuStreamCreate"},
      {(void **)&g_api.stream_destroy, "cuStreamDestroy_v2"},
      {(void **)&g_api.stream_sync, "cuStreamSynchronize"},
      {(void **)&g_api.error_name, "cuGetErrorName"},
      {(void **)&g_api.error_string, "cuGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(g_lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(g_why, sizeof g_why, "libcuda.so.1 lacks %s: the NVIDIA driver is too old", syms[i].name);
      dlclose(g_lib);
      g_lib = NULL;
      return;
    }
  }
  CUresult r = g_api.init(0);
  if (r) {
    const char *n = "?";
    g_api.error_name(r, &n);
    snprintf(g_why, sizeof g_why, "no usable NVIDIA GPU: cuInit failed: %s (%d)", n, r);
    dlclose(g_lib);
    g_lib = NULL;
  }
}

static bool have_api(void) {
  pthread_once(&g_once, load_api);
  return g_lib != NULL;
}

/* KEEL_ERR_RUNTIME (or OOM) naming the call and the driver's reason. */
static keel_status cu_err(CUresult r, const char *what) {
  const char *n = "?", *s = "";
  if (g_api.error_name) g_api.error_name(r, &n);
  if (g_api.error_string) g_api.error_string(r, &s);
  return keel_err(r == 2 ? KEEL_ERR_OUT_OF_MEMORY : KEEL_ERR_RUNTIME, "GPU: %s: %s (%d): %s", what, n, r, s);
}
#define CU_TRY(call, what)                   \
  do {                                       \
    CUresult cu_r_ = (call);                 \
    if (cu_r_) return cu_err(cu_r_, (what)); \
  } while (0)

int keel_cuda_count(void) {
  if (!have_api()) {
    keel_err(KEEL_ERR_UNSUPPORTED, "%s", g_why);
    return 0;
  }
  int n = 0;
  CUresult r = g_api.device_count(&n);
  if (r) {
    cu_err(r, "cuDeviceGetCount");
    return 0;
  }
  if (!n) keel_err(KEEL_ERR_UNSUPPORTED, "no NVIDIA GPU: the driver sees none");
  return n;
}

int keel_gpu_count(char *why, size_t why_len) {
  int n = keel_cuda_count();
  if (!n && why && why_len) snprintf(why, why_len, "%s", keel_last_error());
  return n;
}

/* ============================================================= device */

enum { K_BIN_FLAT, K_BIN_BCAST, K_UNARY, K_SOFTMAX, K_COUNT };
static const char *const k_names[K_COUNT] = {"keel_ew_binary_flat", "keel_ew_binary_bcast",
                                             "keel_ew_unary", "keel_softmax_rows"};

/* Kernels launched by name (keel_cuda_launch), looked up once per device. */
#define NAMED_MAX 128
typedef struct named_fn {
  const char *name;
  CUfunction fn;
} named_fn;

struct keel_cuda_dev {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUmodule *modules;
  int n_modules;
  CUfunction fn[K_COUNT];
  int n_sm;
  keel_mem_provider prov;
  char prov_name[32];
  pthread_mutex_t named_lock;
  named_fn named[NAMED_MAX];
  int n_named;
  _Atomic uint64_t driver_allocs;
  keel_cuda_info info;
};

/* The calling thread works in the device's context. */
static keel_status use(keel_cuda_dev *d) {
  CU_TRY(g_api.ctx_set(d->ctx), "cuCtxSetCurrent");
  return KEEL_OK;
}

static void *dev_pages(void *ctx, size_t size) {
  keel_cuda_dev *d = ctx;
  CUdeviceptr p = 0;
  if (use(d) || g_api.mem_alloc(&p, size)) return NULL;
  keel_device_bytes_add((int64_t)size);
  atomic_fetch_add(&d->driver_allocs, 1);
  return (void *)(uintptr_t)p;
}

static void dev_pages_free(void *ctx, void *p, size_t size) {
  keel_cuda_dev *d = ctx;
  if (!p || use(d)) return;
  /* the block's last kernels must be done with it before the driver takes
   * it back (cuMemFree does not wait for other streams' work) */
  g_api.stream_sync(d->stream);
  g_api.mem_free((CUdeviceptr)(uintptr_t)p);
  keel_device_bytes_add(-(int64_t)size);
}

static keel_status load_module(keel_cuda_dev *d) {
#ifdef KEEL_HAVE_PTX
  d->modules = keel_sys_calloc((size_t)keel_cuda_ptx_count + 1, sizeof(CUmodule));
  if (!d->modules) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "GPU: module list");
  for (int i = 0; i < keel_cuda_ptx_count; i++) {
    char log[4096] = "";
    int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
    CUresult r = g_api.module_load(&d->modules[i], keel_cuda_ptx[i], 2, opts, vals);
    if (r) return keel_err_prefix(cu_err(r, "loading keel's kernels (PTX JIT)"), "%s", log[0] ? log : "");
    d->n_modules++;
  }
  for (int k = 0; k < K_COUNT; k++) {
    for (int i = 0; i < d->n_modules && !d->fn[k]; i++)
      if (g_api.module_fn(&d->fn[k], d->modules[i], k_names[k])) d->fn[k] = NULL;
    if (!d->fn[k]) return keel_err(KEEL_ERR_INTERNAL, "GPU: kernel %s is not in the embedded PTX", k_names[k]);
  }
  return KEEL_OK;
#else
  (void)d;
  return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: this keel was built without GPU kernels (no clang at build time)");
#endif
}

static keel_status open_dev(keel_cuda_dev *d, int ordinal) {
  d->ordinal = ordinal;
  CU_TRY(g_api.device_get(&d->dev, ordinal), "cuDeviceGet");
  CU_TRY(g_api.ctx_retain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain");
  KEEL_TRY(use(d));
  keel_cuda_info *in = &d->info;
  in->ordinal = ordinal;
  CU_TRY(g_api.device_name(in->name, (int)sizeof in->name, d->dev), "cuDeviceGetName");
  CU_TRY(g_api.device_attr(&in->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev), "cuDeviceGetAttribute");
  CU_TRY(g_api.device_attr(&in->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev), "cuDeviceGetAttribute");
  CU_TRY(g_api.device_attr(&d->n_sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev), "cuDeviceGetAttribute");
  CU_TRY(g_api.driver_version(&in->driver_version), "cuDriverGetVersion");
  size_t fr = 0, tot = 0;
  CU_TRY(g_api.mem_info(&fr, &tot), "cuMemGetInfo");
  in->free_bytes = fr, in->total_bytes = tot;
  if (in->cc_major < 8)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %d (%s) has compute capability %d.%d; keel's kernels need 8.0 or newer",
                    ordinal, in->name, in->cc_major, in->cc_minor);
  CU_TRY(g_api.stream_create(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  KEEL_TRY(load_module(d));
  snprintf(d->prov_name, sizeof d->prov_name, "cuda:%d", ordinal);
  d->prov = (keel_mem_provider){.name = d->prov_name, .pages = dev_pages, .pages_free = dev_pages_free,
                                .ctx = d, .host_visible = false};
  return KEEL_OK;
}

keel_status keel_cuda_open(int ordinal, keel_cuda_dev **out) {
  int n = keel_cuda_count();
  if (!n) return KEEL_ERR_UNSUPPORTED; /* keel_cuda_count said why */
  if (ordinal < 0 || ordinal >= n)
    return keel_err(KEEL_ERR_INVALID_ARG, "GPU: no device cuda:%d (%d found)", ordinal, n);
  keel_cuda_dev *d = keel_sys_calloc(1, sizeof *d);
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "GPU: device");
  pthread_mutex_init(&d->named_lock, NULL);
  keel_status st = open_dev(d, ordinal);
  if (st) {
    keel_cuda_close(d);
    return keel_err_prefix(st, "opening cuda:%d", ordinal);
  }
  *out = d;
  return KEEL_OK;
}

void keel_cuda_close(keel_cuda_dev *d) {
  if (!d) return;
  if (d->ctx && !use(d)) {
    if (d->stream) g_api.stream_sync(d->stream), g_api.stream_destroy(d->stream);
    for (int i = 0; i < d->n_modules; i++) g_api.module_unload(d->modules[i]);
    g_api.ctx_release(d->dev);
  }
#ifdef KEEL_HAVE_PTX
  keel_sys_free(d->modules, ((size_t)keel_cuda_ptx_count + 1) * sizeof(CUmodule));
#endif
  pthread_mutex_destroy(&d->named_lock);
  keel_sys_free(d, sizeof *d);
}

keel_cuda_info keel_cuda_dev_info(const keel_cuda_dev *d) { return d->info; }
const keel_mem_provider *keel_cuda_provider(keel_cuda_dev *d) { return &d->prov; }
uint64_t keel_cuda_driver_allocs(const keel_cuda_dev *d) { return atomic_load(&d->driver_allocs); }

keel_status keel_cuda_to_device(keel_cuda_dev *d, void *dst, const void *src, size_t n) {
  KEEL_TRY(use(d));
  if (n) CU_TRY(g_api.htod((CUdeviceptr)(uintptr_t)dst, src, n, d->stream), "copy to the device");
  return KEEL_OK;
}

keel_status keel_cuda_to_host(keel_cuda_dev *d, void *dst, const void *src, size_t n) {
  KEEL_TRY(use(d));
  if (n) CU_TRY(g_api.dtoh(dst, (CUdeviceptr)(uintptr_t)src, n, d->stream), "copy to the host");
  return KEEL_OK;
}

keel_status keel_cuda_sync(keel_cuda_dev *d) {
  KEEL_TRY(use(d));
  CU_TRY(g_api.stream_sync(d->stream), "waiting for the device");
  return KEEL_OK;
}

/* ============================================================ kernels */

/* Blocks of 256 threads for n elements: enough to fill every SM a few
 * times, the grid-stride loops do the rest. */
static unsigned grid_for(const keel_cuda_dev *d, int64_t n) {
  int64_t blocks = (n + 255) / 256, cap = (int64_t)(d->n_sm > 0 ? d->n_sm : 1) * 8;
  return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

static keel_status launch(keel_cuda_dev *d, int k, unsigned grid, unsigned block, void **args) {
  KEEL_TRY(use(d));
  CU_TRY(g_api.launch(d->fn[k], grid, 1, 1, block, 1, 1, 0, d->stream, args, NULL), k_names[k]);
  return KEEL_OK;
}

keel_status keel_cuda_use(keel_cuda_dev *d) { return use(d); }
void *keel_cuda_stream_handle(keel_cuda_dev *d) { return d->stream; }
int keel_cuda_sm_count(const keel_cuda_dev *d) { return d->n_sm; }
unsigned keel_cuda_grid_for(const keel_cuda_dev *d, int64_t n) { return grid_for(d, n); }

/* The kernel `name` of the embedded PTX: found in the modules once, then
 * from the device's table (a few dozen names; a linear scan under a lock
 * costs less than the launch). */
static keel_status named(keel_cuda_dev *d, const char *name, CUfunction *fn) {
  pthread_mutex_lock(&d->named_lock);
  for (int i = 0; i < d->n_named; i++)
    if (d->named[i].name == name || !strcmp(d->named[i].name, name)) {
      *fn = d->named[i].fn;
      pthread_mutex_unlock(&d->named_lock);
      return KEEL_OK;
    }
  CUfunction f = NULL;
  for (int i = 0; i < d->n_modules && !f; i++)
    if (g_api.module_fn(&f, d->modules[i], name)) f = NULL;
  keel_status st = KEEL_OK;
  if (!f) st = keel_err(KEEL_ERR_INTERNAL, "GPU: kernel %s is not in the embedded PTX", name);
  else if (d->n_named == NAMED_MAX) st = keel_err(KEEL_ERR_INTERNAL, "GPU: more than %d named kernels", NAMED_MAX);
  else d->named[d->n_named++] = (named_fn){name, f};
  pthread_mutex_unlock(&d->named_lock);
  *fn = f;
  return st;
}

keel_status keel_cuda_launch(keel_cuda_dev *d, const char *kernel, unsigned grid_x, unsigned grid_y,
                             unsigned block_x, unsigned shared_bytes, void **args) {
  CUfunction f;
  KEEL_TRY(use(d));
  KEEL_TRY(named(d, kernel, &f));
  CU_TRY(g_api.launch(f, grid_x, grid_y, 1, block_x, 1, 1, shared_bytes, d->stream, args, NULL), kernel);
  return KEEL_OK;
}

/* The kernel's broadcast geometry (kernels/ew.cu, struct bcast). */
typedef struct bcast {
  int64_t dims[KEEL_CUDA_MAX_RANK];
  int64_t sa[KEEL_CUDA_MAX_RANK], sb[KEEL_CUDA_MAX_RANK];
  int32_t rank;
} bcast;

keel_status keel_cuda_binary(keel_cuda_dev *d, keel_cuda_binop op, int rank, const int64_t *dims,
                             const int64_t *a_dims, const float *a, const int64_t *b_dims,
                             const float *b, float *y) {
  if (rank < 0 || rank > KEEL_CUDA_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: element-wise ops of rank %d (at most %d)", rank, KEEL_CUDA_MAX_RANK);
  int64_t n = 1, na = 1, nb = 1;
  bcast g = {.rank = rank};
  for (int i = rank - 1; i >= 0; i--) {
    if ((a_dims[i] != 1 && a_dims[i] != dims[i]) || (b_dims[i] != 1 && b_dims[i] != dims[i]))
      return keel_err(KEEL_ERR_SHAPE, "GPU: operand dims do not broadcast to the output's at axis %d", i);
    g.dims[i] = dims[i];
    g.sa[i] = a_dims[i] == 1 ? 0 : na;
    g.sb[i] = b_dims[i] == 1 ? 0 : nb;
    n *= dims[i], na *= a_dims[i], nb *= b_dims[i];
  }
  if (!n) return KEEL_OK;
  int32_t code = (int32_t)op;
  if ((na == n || na == 1) && (nb == n || nb == 1)) {
    int32_t as = na == 1 && n > 1, bs = nb == 1 && n > 1;
    void *args[] = {&code, &n, &a, &as, &b, &bs, &y};
    return launch(d, K_BIN_FLAT, grid_for(d, n), 256, args);
  }
  void *args[] = {&code, &n, &g, &a, &b, &y};
  return launch(d, K_BIN_BCAST, grid_for(d, n), 256, args);
}

keel_status keel_cuda_unary_p(keel_cuda_dev *d, keel_cuda_unop op, float a, float b, int64_t n,
                              const float *x, float *y) {
  if (n <= 0) return KEEL_OK;
  if ((unsigned)op >= KEEL_DEV_UNOP_COUNT)
    return keel_err(KEEL_ERR_INTERNAL, "GPU: unary op code %d", (int)op);
  int32_t code = (int32_t)op;
  void *args[] = {&code, &a, &b, &n, &x, &y};
  return launch(d, K_UNARY, grid_for(d, n), 256, args);
}
keel_status keel_cuda_unary(keel_cuda_dev *d, keel_cuda_unop op, int64_t n, const float *x, float *y) {
  return keel_cuda_unary_p(d, op, 0.0f, 0.0f, n, x, y);
}

keel_status keel_cuda_softmax(keel_cuda_dev *d, int64_t rows, int64_t cols, const float *x, float *y) {
  if (rows <= 0 || cols <= 0) return KEEL_OK;
  void *args[] = {&rows, &cols, &x, &y};
  unsigned grid = (unsigned)(rows < 65535 ? rows : 65535);
  return launch(d, K_SOFTMAX, grid, 256, args);
}

/* ============================================================ backend */

/* cuda.h's calls as device.h's interface (the device is the impl). */
static void be_close(void *d) { keel_cuda_close(d); }
static const keel_mem_provider *be_provider(void *d) { return keel_cuda_provider(d); }
static keel_status be_to_device(void *d, void *dst, const void *src, size_t n) {
  return keel_cuda_to_device(d, dst, src, n);
}
/* the copy is queued on the stream: the host's bytes are there once the
 * stream has reached it */
static keel_status be_to_host(void *d, void *dst, const void *src, size_t n) {
  KEEL_TRY(keel_cuda_to_host(d, dst, src, n));
  return keel_cuda_sync(d);
}
static keel_status be_sync(void *d) { return keel_cuda_sync(d); }
static keel_status be_binary(void *d, keel_dev_binop op, int rank, const int64_t *dims,
                             const int64_t *a_dims, const float *a, const int64_t *b_dims,
                             const float *b, float *y) {
  return keel_cuda_binary(d, op, rank, dims, a_dims, a, b_dims, b, y);
}
static keel_status be_unary(void *d, keel_dev_unop op, float a, float b, int64_t n, const float *x,
                            float *y) {
  return keel_cuda_unary_p(d, op, a, b, n, x, y);
}
static keel_status be_softmax(void *d, int64_t rows, int64_t cols, const float *x, float *y) {
  return keel_cuda_softmax(d, rows, cols, x, y);
}

static const keel_device_ops g_cuda_ops = {be_close,  be_provider, be_to_device, be_to_host,
                                           be_sync,   be_binary,   be_unary,     be_softmax};

keel_status keel_cuda_device_open(int ordinal, keel_device *d) {
  keel_cuda_dev *c;
  KEEL_TRY(keel_cuda_open(ordinal, &c));
  d->ops = &g_cuda_ops, d->impl = c;
  d->move = &keel_cuda_move; /* the kernel groups (dev_<group>.h) */
  d->norm = &keel_cuda_norm;
  d->conv = &keel_cuda_conv;
  d->attn = &keel_cuda_attn;
  d->rnn = &keel_cuda_rnn;
  snprintf(d->desc, sizeof d->desc, "%s, sm_%d%d, %.0f GiB, driver %d", c->info.name, c->info.cc_major,
           c->info.cc_minor, (double)c->info.total_bytes / (double)(1ull << 30), c->info.driver_version);
  keel_cuda_blas_open(d); /* d->blas, or NULL and why in d->desc */
  return KEEL_OK;
}
