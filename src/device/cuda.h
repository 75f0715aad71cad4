/* cuda.h: NVIDIA GPUs through the CUDA driver API, from plain C.
 *
 * keel has no build-time dependency on CUDA: libcuda.so.1 (the driver's
 * library, present wherever an NVIDIA driver is installed) is opened with
 * dlopen at the first use and its entry points are looked up by name. On a
 * machine without it every call returns KEEL_ERR_UNSUPPORTED saying why
 * ("no NVIDIA GPU: libcuda.so.1 not found: ..."), and nothing else in keel
 * changes.
 *
 * The kernels are CUDA C in src/device/kernels/, compiled to PTX by clang
 * at build time (no CUDA SDK: cmake/ptx.cmake) and embedded in the library;
 * the driver compiles the PTX for the GPU at hand when a device is opened
 * (sm_80 and up).
 *
 * A device (keel_cuda_dev) holds the primary context of one GPU, the
 * module of keel's kernels and a stream. Its memory reaches keel's caching
 * allocator as a provider (mem/alloc.h): segments are cuMemAlloc'd, blocks
 * are carved from them by the same allocator as host memory (cuMemAlloc +
 * cuMemFree of 1 MB cost 95 us on an H200: never on a run's path). Device
 * bytes keel holds are counted process-wide (keel_process_device_bytes).
 */
#ifndef KEEL_DEVICE_CUDA_H
#define KEEL_DEVICE_CUDA_H

#include "base/common.h"
#include "device/device.h"
#include "mem/alloc.h"

typedef struct keel_cuda_dev keel_cuda_dev;

/* What a device is. */
typedef struct keel_cuda_info {
  char name[128];
  int ordinal;
  int cc_major, cc_minor;      /* compute capability                      */
  uint64_t total_bytes, free_bytes;
  int driver_version;          /* e.g. 13000                              */
} keel_cuda_info;

/* The number of GPUs, or 0 with the reason in keel_last_error (no driver
 * library, no device, an old driver). */
KEEL_INTERNAL int keel_cuda_count(void);

/* Opens GPU `ordinal`: its primary context, keel's kernels (JIT-compiled
 * from the embedded PTX), one stream. KEEL_ERR_UNSUPPORTED when there is
 * no such GPU or keel was built without kernels. */
KEEL_INTERNAL keel_status keel_cuda_open(int ordinal, keel_cuda_dev **out);
/* Waits for the device's work, frees its stream, module and context
 * reference. Every heap made on its provider must be gone. */
KEEL_INTERNAL void keel_cuda_close(keel_cuda_dev *d);
KEEL_INTERNAL keel_cuda_info keel_cuda_dev_info(const keel_cuda_dev *d);

/* The provider for keel_heap_create_on: segments from cuMemAlloc. */
KEEL_INTERNAL const keel_mem_provider *keel_cuda_provider(keel_cuda_dev *d);
/* Segments taken from the driver (cuMemAlloc calls) since the device was
 * opened: a run path that allocates shows here. */
KEEL_INTERNAL uint64_t keel_cuda_driver_allocs(const keel_cuda_dev *d);

/* Copies on the device's stream; *_sync waits for them. Device pointers
 * are the `ptr` of blocks from a heap on the device's provider. */
KEEL_INTERNAL keel_status keel_cuda_to_device(keel_cuda_dev *d, void *dst, const void *src, size_t n);
KEEL_INTERNAL keel_status keel_cuda_to_host(keel_cuda_dev *d, void *dst, const void *src, size_t n);
KEEL_INTERNAL keel_status keel_cuda_sync(keel_cuda_dev *d);

/* ------------------------------------------------------------ kernels */

/* The kernels' op codes are device.h's (keel_dev_binop, keel_dev_unop). */
typedef keel_dev_binop keel_cuda_binop;
typedef keel_dev_unop keel_cuda_unop;

#define KEEL_CUDA_MAX_RANK KEEL_DEV_MAX_RANK

/* y = a op b with ONNX broadcasting: y has rank `rank` and dims `dims`;
 * a and b have the same rank (leading 1s added by the caller) and dims
 * that are 1 or y's. Device pointers. */
KEEL_INTERNAL keel_status keel_cuda_binary(keel_cuda_dev *d, keel_cuda_binop op, int rank,
                                           const int64_t *dims, const int64_t *a_dims,
                                           const float *a, const int64_t *b_dims, const float *b,
                                           float *y);
/* y = op(x) over n floats. */
KEEL_INTERNAL keel_status keel_cuda_unary(keel_cuda_dev *d, keel_cuda_unop op, int64_t n,
                                          const float *x, float *y);
/* y = op(x; a, b) over n floats (device.h's keel_dev_unop parameters). */
KEEL_INTERNAL keel_status keel_cuda_unary_p(keel_cuda_dev *d, keel_cuda_unop op, float a, float b,
                                            int64_t n, const float *x, float *y);
/* Softmax over the last axis: rows of `cols` floats. */
KEEL_INTERNAL keel_status keel_cuda_softmax(keel_cuda_dev *d, int64_t rows, int64_t cols,
                                            const float *x, float *y);

/* ------------------------------------------------- for kernel groups
 * (cuda_<group>.c: the CUDA side of a device.h kernel group) */

/* The device's context current on the calling thread. */
KEEL_INTERNAL keel_status keel_cuda_use(keel_cuda_dev *d);
/* The device's stream (a CUstream), for libraries that take one (cuBLAS). */
KEEL_INTERNAL void *keel_cuda_stream_handle(keel_cuda_dev *d);
KEEL_INTERNAL int keel_cuda_sm_count(const keel_cuda_dev *d);
/* Blocks of 256 threads for a grid-stride loop over n items. */
KEEL_INTERNAL unsigned keel_cuda_grid_for(const keel_cuda_dev *d, int64_t n);
/* Launches the embedded PTX's kernel `kernel` (its extern "C" name) on the
 * device's stream: a grid of grid_x x grid_y blocks of block_x threads,
 * shared_bytes of dynamic shared memory, args as cuLaunchKernel takes
 * them (one pointer to each argument's value). */
KEEL_INTERNAL keel_status keel_cuda_launch(keel_cuda_dev *d, const char *kernel, unsigned grid_x,
                                           unsigned grid_y, unsigned block_x, unsigned shared_bytes,
                                           void **args);

#endif /* KEEL_DEVICE_CUDA_H */
