/* cuda_move.c: the `move` group (dev_move.h) on an NVIDIA GPU: launches
 * of kernels/move.cu, with the checks emu_move.c makes. */
#include "base/status.h"
#include "device/cuda.h"
#include "device/dev_move.h"

static keel_cuda_dev *dev_of(keel_device *d) { return (keel_cuda_dev *)d->impl; }

/* kernels/move.cu's struct move_geom */
typedef struct move_geom {
  int64_t dims[KEEL_DEV_MAX_RANK];
  int64_t xs[KEEL_DEV_MAX_RANK], ys[KEEL_DEV_MAX_RANK];
  int32_t rank;
} move_geom;

static keel_status cu_copy(keel_device *d, size_t es, int rank, const int64_t *dims, const void *x,
                           const int64_t *xs, void *y, const int64_t *ys) {
  if (rank < 0 || rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: a copy of rank %d (at most %d)", rank, KEEL_DEV_MAX_RANK);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: a copy of %zu-byte elements", es);
  move_geom g = {.rank = rank};
  int64_t n = 1;
  for (int i = 0; i < rank; i++) g.dims[i] = dims[i], g.xs[i] = xs[i], g.ys[i] = ys[i], n *= dims[i];
  if (n <= 0) return KEEL_OK;
  int32_t e = (int32_t)es;
  void *args[] = {&e, &n, &g, &x, &y};
  return keel_cuda_launch(dev_of(d), "keel_move_copy", keel_cuda_grid_for(dev_of(d), n), 1, 256, 0, args);
}

static keel_status cu_gather(keel_device *d, size_t es, int64_t outer, int64_t axis_n, int64_t inner,
                             const void *x, const void *idx, int idx64, int64_t n_idx, void *y) {
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: Gather of %zu-byte elements", es);
  int64_t n = outer * n_idx * inner;
  if (n <= 0) return KEEL_OK;
  int32_t e = (int32_t)es, i64 = idx64 != 0;
  void *args[] = {&e, &n, &axis_n, &inner, &x, &idx, &i64, &n_idx, &y};
  return keel_cuda_launch(dev_of(d), "keel_move_gather", keel_cuda_grid_for(dev_of(d), n), 1, 256, 0, args);
}

/* kernels/move.cu's struct where_geom */
typedef struct where_geom {
  int64_t dims[KEEL_DEV_MAX_RANK];
  int64_t cs[KEEL_DEV_MAX_RANK], as[KEEL_DEV_MAX_RANK], bs[KEEL_DEV_MAX_RANK];
  int32_t rank;
} where_geom;

static keel_status cu_where(keel_device *d, int rank, const int64_t *dims, const uint8_t *c,
                            const int64_t *cs, const float *a, const int64_t *as, const float *b,
                            const int64_t *bs, float *y) {
  if (rank < 0 || rank > KEEL_DEV_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: Where of rank %d (at most %d)", rank, KEEL_DEV_MAX_RANK);
  where_geom g = {.rank = rank};
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    g.dims[i] = dims[i], g.cs[i] = cs[i], g.as[i] = as[i], g.bs[i] = bs[i], n *= dims[i];
  if (n <= 0) return KEEL_OK;
  void *args[] = {&n, &g, &c, &a, &b, &y};
  return keel_cuda_launch(dev_of(d), "keel_move_where", keel_cuda_grid_for(dev_of(d), n), 1, 256, 0, args);
}

static keel_status cu_cast(keel_device *d, int from, int to, int64_t n, const void *x, void *y) {
  if (from != KEEL_FLOAT && to != KEEL_FLOAT)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU: Cast from %d to %d (one side must be float32)", from, to);
  if (n <= 0) return KEEL_OK;
  int32_t f = from, t = to;
  void *args[] = {&f, &t, &n, &x, &y};
  return keel_cuda_launch(dev_of(d), "keel_move_cast", keel_cuda_grid_for(dev_of(d), n), 1, 256, 0, args);
}

const keel_dev_move keel_cuda_move = {cu_copy, cu_gather, cu_where, cu_cast};
