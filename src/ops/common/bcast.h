/* bcast.h: the numpy-broadcasting driver shared by binary, ternary and
 * variadic elementwise kernels, and the float16/bfloat16 staging helpers.
 *
 * keel_bcast_binary() walks the output in row-major order and hands the
 * inner function contiguous runs: the output run is dense, each input run
 * is either dense (stride 1) or one repeated element (stride 0). Adjacent
 * dimensions that are contiguous in all operands are merged first, so
 * same-shape and scalar cases are a single run.
 */
#ifndef KEEL_BCAST_H
#define KEEL_BCAST_H

#include "ops/kernel.h"

/* o[i] = f(a[i*sa], b[i*sb]) for i < n; sa, sb are 0 or 1. */
typedef void (*keel_bin_fn)(const void *a, int64_t sa, const void *b, int64_t sb,
                            void *o, int64_t n);

/* Broadcasts a and b to `out` (already allocated with the broadcast shape)
 * and applies fn run by run. */
KEEL_INTERNAL void keel_bcast_binary(const keel_tensor *a, const keel_tensor *b,
                                     keel_tensor *out, keel_bin_fn fn);

/* keel_bcast_binary over the pool: the output's elements in chunks sized
 * by the cost model (base/pool.h: fn does `flops` operations an element).
 * Elements are independent, so any cut gives the same bits; out may be a
 * (same-shape) input's buffer, as for keel_bcast_binary. */
KEEL_INTERNAL keel_status keel_bcast_binary_pool(struct keel_pool *pool, const keel_tensor *a,
                                                 const keel_tensor *b, keel_tensor *out,
                                                 keel_bin_fn fn, double flops);

/* Reference path: the same, one element at a time through full index
 * arithmetic (tests compare the two). */
KEEL_INTERNAL void keel_bcast_binary_naive(const keel_tensor *a, const keel_tensor *b,
                                           keel_tensor *out, keel_bin_fn fn);

/* y = a + z, numpy broadcasting, float32: a is `rank` dims of `shape`
 * (y's own buffer when the shapes are equal), z any broadcastable tensor,
 * y allocated with the broadcast shape. The residual Z of the fused
 * products (NhwcConv, FusedMatMul) goes through it. */
KEEL_INTERNAL void keel_bcast_add_f32(const float *a, int rank, const int64_t *shape,
                                      const keel_tensor *z, keel_tensor *y);

/* Generic strided copy of src broadcast into dst's shape (any dtype,
 * strings copied). Used by Expand and by variadic ops for their first
 * operand. */
KEEL_INTERNAL keel_status keel_bcast_copy(const keel_tensor *src, keel_tensor *dst);

/* float16 / bfloat16 staging: a float copy of t in scratch memory. */
KEEL_INTERNAL keel_status keel_k_to_f32(keel_kctx *k, const keel_tensor *t,
                                        keel_tensor *f32);
/* Writes float data into a float16 / bfloat16 tensor (rounding to nearest even). */
KEEL_INTERNAL void keel_f32_store(const float *src, keel_tensor *dst);
static inline bool keel_is_half(int dtype) {
  return dtype == KEEL_FLOAT16 || dtype == KEEL_BFLOAT16;
}

#endif /* KEEL_BCAST_H */
