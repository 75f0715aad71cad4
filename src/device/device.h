/* device.h: the devices keel runs nodes on besides the host, behind one
 * interface (issue 25).
 *
 * A device has memory that the host does not address (segments reach
 * keel's caching allocator through a provider, mem/alloc.h), copies
 * between it and the host, and kernels. Two backends implement it:
 *   - "cuda": an NVIDIA GPU through the driver API (cuda.c; PTX kernels
 *     compiled by clang at build time, the .cu files of kernels/);
 *   - "emu": a device emulated on the host (emu.c), for machines without
 *     a GPU. Its memory is the host's, but the pointers it hands out are
 *     disguised (non-canonical addresses) so that any host code that reads
 *     device memory directly faults at once, as it would on a GPU; its
 *     kernels are plain C loops, the naive reference the CUDA kernels are
 *     tested against. It lets CI run placement, the copies, device memory
 *     accounting and the leak report end to end.
 *
 * Work on a device is ordered (one stream per device): a block freed on
 * the host side may be handed to the next kernel at once, since that
 * kernel runs after every earlier one. keel_device_to_host waits for the
 * copy (and so for every earlier kernel).
 */
#ifndef KEEL_DEVICE_H
#define KEEL_DEVICE_H

#include "base/common.h"
#include "mem/alloc.h"

typedef enum keel_device_kind { KEEL_DEVICE_CUDA = 1, KEEL_DEVICE_EMU = 2 } keel_device_kind;

/* Element-wise float32 ops; the codes are the kernels' (kernels/ew.cu). */
typedef enum keel_dev_binop {
  KEEL_DEV_ADD, KEEL_DEV_SUB, KEEL_DEV_MUL, KEEL_DEV_DIV, KEEL_DEV_MAX, KEEL_DEV_MIN, KEEL_DEV_POW
} keel_dev_binop;
/* Unary ops: y = f(x; a, b), two float parameters for those that take
 * some (LeakyRelu, Elu: alpha in a; HardSigmoid and HardSigmoidMul: alpha,
 * beta; Clip: min, max, +-inf for an absent bound); the others ignore
 * them. The formulas are ops/math/unary.c's and ops/common/activation.c's
 * (NaN propagation included). */
typedef enum keel_dev_unop {
  KEEL_DEV_RELU, KEEL_DEV_NEG, KEEL_DEV_ABS, KEEL_DEV_SQRT, KEEL_DEV_EXP, KEEL_DEV_SIGMOID,
  KEEL_DEV_TANH, KEEL_DEV_LOG,
  KEEL_DEV_ERF, KEEL_DEV_GELU, KEEL_DEV_GELU_TANH, KEEL_DEV_RECIP, KEEL_DEV_FLOOR, KEEL_DEV_CEIL,
  KEEL_DEV_SOFTPLUS, KEEL_DEV_LEAKY, KEEL_DEV_ELU, KEEL_DEV_HSIGMOID, KEEL_DEV_HSWISH,
  KEEL_DEV_CLIP, KEEL_DEV_COS, KEEL_DEV_SIN, KEEL_DEV_SILU, KEEL_DEV_HSIGMOID_MUL,
  KEEL_DEV_UNOP_COUNT
} keel_dev_unop;

#define KEEL_DEV_MAX_RANK 8

/* What a backend implements; `impl` is its own state. */
typedef struct keel_device_ops {
  void (*close)(void *impl);
  const keel_mem_provider *(*provider)(void *impl);
  keel_status (*to_device)(void *impl, void *dst, const void *src, size_t n);
  keel_status (*to_host)(void *impl, void *dst, const void *src, size_t n);
  keel_status (*sync)(void *impl);
  keel_status (*binary)(void *impl, keel_dev_binop op, int rank, const int64_t *dims,
                        const int64_t *a_dims, const float *a, const int64_t *b_dims,
                        const float *b, float *y);
  keel_status (*unary)(void *impl, keel_dev_unop op, float a, float b, int64_t n, const float *x,
                       float *y);
  keel_status (*softmax)(void *impl, int64_t rows, int64_t cols, const float *x, float *y);
} keel_device_ops;

/* Kernel groups beyond the element-wise ones above: each a table of its
 * own in device/dev_<group>.h, filled by both backends (emu_<group>.c and
 * cuda_<group>.c), set by the backend when it opens the device; a group's
 * per-device state (a library handle) sits in the device beside it. */
struct keel_dev_blas; /* dev_blas.h: MatMul, Gemm                         */
struct keel_dev_move; /* dev_move.h: views, Transpose, Concat, Gather, ... */
struct keel_dev_norm; /* dev_norm.h: LayerNorm, reductions, ...           */
struct keel_dev_conv; /* dev_conv.h: Conv, MaxPool, AveragePool, ...      */
struct keel_dev_rnn;  /* dev_rnn.h: LSTM's and GRU's cells               */
struct keel_dev_attn; /* dev_attn.h: attention's masked softmax           */

typedef struct keel_device {
  const keel_device_ops *ops;
  void *impl;
  const struct keel_dev_blas *blas;
  void *blas_state;
  const struct keel_dev_move *move;
  void *move_state;
  const struct keel_dev_norm *norm;
  void *norm_state;
  const struct keel_dev_conv *conv;
  const struct keel_dev_rnn *rnn;
  const struct keel_dev_attn *attn;
  keel_device_kind kind;
  int ordinal;
  char name[32];               /* "cuda:0", "emu:0"                       */
  char desc[160];              /* "NVIDIA H200, sm_90, 139 GiB", ...       */
} keel_device;

/* "cuda", "cuda:N", "emu", "emu:N" -> kind and ordinal; "", "cpu" or NULL
 * -> *kind 0. KEEL_ERR_INVALID_ARG for anything else. */
KEEL_INTERNAL keel_status keel_device_parse(const char *s, keel_device_kind *kind, int *ordinal);
/* Opens the device: KEEL_ERR_UNSUPPORTED saying why when there is none
 * (no driver, no such GPU, built without kernels). */
KEEL_INTERNAL keel_status keel_device_open(keel_device_kind kind, int ordinal, keel_device **out);
/* Waits for its work and frees it; every heap made on its provider must
 * be gone. NULL is a no-op. */
KEEL_INTERNAL void keel_device_close(keel_device *d);

static inline const keel_mem_provider *keel_device_provider(keel_device *d) {
  return d->ops->provider(d->impl);
}
/* n bytes from host src to device dst (queued; src may be reused when it
 * returns). */
static inline keel_status keel_device_to_device(keel_device *d, void *dst, const void *src, size_t n) {
  return d->ops->to_device(d->impl, dst, src, n);
}
/* n bytes from device src to host dst; returns when dst holds them. */
static inline keel_status keel_device_to_host(keel_device *d, void *dst, const void *src, size_t n) {
  return d->ops->to_host(d->impl, dst, src, n);
}
static inline keel_status keel_device_sync(keel_device *d) { return d->ops->sync(d->impl); }

/* y = a op b with ONNX broadcasting: y has rank `rank` and dims `dims`;
 * a and b have the same rank (leading 1s added by the caller) and dims
 * that are 1 or y's. Device pointers. */
static inline keel_status keel_device_binary(keel_device *d, keel_dev_binop op, int rank,
                                             const int64_t *dims, const int64_t *a_dims,
                                             const float *a, const int64_t *b_dims, const float *b,
                                             float *y) {
  return d->ops->binary(d->impl, op, rank, dims, a_dims, a, b_dims, b, y);
}
/* y = op(x) over n floats (an op without parameters). */
static inline keel_status keel_device_unary(keel_device *d, keel_dev_unop op, int64_t n,
                                            const float *x, float *y) {
  return d->ops->unary(d->impl, op, 0.0f, 0.0f, n, x, y);
}
/* y = op(x; a, b) over n floats (keel_dev_unop's parameters). */
static inline keel_status keel_device_unary_p(keel_device *d, keel_dev_unop op, float a, float b,
                                              int64_t n, const float *x, float *y) {
  return d->ops->unary(d->impl, op, a, b, n, x, y);
}
/* Softmax over the last axis: rows of `cols` floats. */
static inline keel_status keel_device_softmax(keel_device *d, int64_t rows, int64_t cols,
                                              const float *x, float *y) {
  return d->ops->softmax(d->impl, rows, cols, x, y);
}

/* Device bytes keel holds, all devices of the process (segments taken from
 * a driver or, for "emu", from the host): keel_process_device_bytes. */
KEEL_INTERNAL void keel_device_bytes_add(int64_t delta);

/* The backends (device.c picks one). */
KEEL_INTERNAL keel_status keel_emu_open(int ordinal, keel_device *d);
KEEL_INTERNAL keel_status keel_cuda_device_open(int ordinal, keel_device *d);

#endif /* KEEL_DEVICE_H */
