/* dev_move.h: the `move` kernel group (device.h): kernels that move
 * elements without arithmetic, for Transpose, Concat, Split, Slice,
 * Expand (one strided copy), Gather, Where and Cast. Both backends fill
 * the table: emu_move.c (the naive C reference) and cuda_move.c
 * (kernels/move.cu). Pointers are device pointers; dims and strides are
 * the host's. */
#ifndef KEEL_DEVICE_DEV_MOVE_H
#define KEEL_DEVICE_DEV_MOVE_H

#include "device/device.h"

typedef struct keel_dev_move {
  /* For every index c of dims (rank <= KEEL_DEV_MAX_RANK):
   * y[sum c[i] * ys[i]] = x[sum c[i] * xs[i]], elements of es bytes (1, 2,
   * 4 or 8); strides in elements, 0 repeats (a broadcast). x and y do not
   * overlap. */
  keel_status (*copy)(keel_device *d, size_t es, int rank, const int64_t *dims, const void *x,
                      const int64_t *xs, void *y, const int64_t *ys);
  /* y[o][j][i] = x[o][idx[j]][i] for o < outer, j < n_idx, i < inner, es
   * bytes per element; idx int64 (idx64) or int32, a negative one counting
   * from the end of the axis (axis_n); one out of [-axis_n, axis_n) gives
   * zero bytes (a GPU kernel cannot fail: the placement only lets through
   * indices that are computed at run time or checked at binding). */
  keel_status (*gather)(keel_device *d, size_t es, int64_t outer, int64_t axis_n, int64_t inner,
                        const void *x, const void *idx, int idx64, int64_t n_idx, void *y);
  /* y = c ? a : b, float32, with ONNX broadcasting: y has rank `rank` and
   * dims `dims`; each operand's element strides over them (0 on a
   * broadcast axis); c is bool (one byte). */
  keel_status (*where)(keel_device *d, int rank, const int64_t *dims, const uint8_t *c,
                       const int64_t *cs, const float *a, const int64_t *as, const float *b,
                       const int64_t *bs, float *y);
  /* n elements from dtype `from` to dtype `to` (keel_dtype codes: float32,
   * int64, int32, bool; one side float32), as C converts them (float to
   * int truncates toward zero; to bool: x != 0). */
  keel_status (*cast)(keel_device *d, int from, int to, int64_t n, const void *x, void *y);
} keel_dev_move;

/* n contiguous elements of es bytes from x to y (device pointers), by the
 * group's strided copy. */
static inline keel_status keel_dev_copy_run(keel_device *d, size_t es, int64_t n, const void *x,
                                            void *y) {
  int64_t one = 1;
  return d->move->copy(d, es, 1, &n, x, &one, y, &one);
}

/* The backends' tables. */
KEEL_INTERNAL extern const keel_dev_move keel_emu_move;
KEEL_INTERNAL extern const keel_dev_move keel_cuda_move;

#endif /* KEEL_DEVICE_DEV_MOVE_H */
