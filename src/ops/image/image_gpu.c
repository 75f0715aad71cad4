/* image_gpu.c: Resize and Upsample on a device (device/dev_conv.h's
 * resample), for the nodes the place pass put there (passes/pass_place.c,
 * gpu_takes_image: float32 X; scales, sizes and roi read on the host).
 *
 * The plan is the CPU kernel's (resize.h: the same attributes, output
 * dims, errors and per-axis tables of taps and weights, built on the
 * host). Every axis whose table is not the identity is one pass of the
 * device's resample kernel, the last axis first as on the CPU (image.c's
 * rs_filter): linear and cubic weigh their taps in float in the same
 * order, so the device gives the CPU's results up to the rounding of a
 * fused multiply-add; nearest copies (each axis picks its input index on
 * its own, so axis by axis is the CPU's one gather). An output whose
 * coordinate leaves tf_crop_and_resize's crop on any axis takes
 * extrapolation_value, as on the CPU. The tables go to device scratch
 * once per run (an int64 index and a float weight per tap), the
 * intermediate results between passes too. */
#include "ops/image/image_gpu.h"

#include "base/status.h"
#include "base/sysmem.h"
#include "device/dev_conv.h"
#include "device/dev_move.h"
#include "ops/image/resize.h"

/* Axis d's table on the host (tab's arrays in one block of `hold`), then
 * on the device: *idx, *w (NULL for nearest), *oob (NULL when no output
 * leaves the crop). */
static keel_status put_table(keel_kctx *k, const keel_rs_plan *p, int d, keel_rs_tab *t,
                             const int64_t **idx, const float **w, const uint8_t **oob) {
  size_t cells = (size_t)p->out[d] * (size_t)t->n, bytes;
  bool lin = p->mode != RS_NEAREST;
  if (keel_mul_ovf(cells, sizeof(int64_t) + (lin ? sizeof(double) + sizeof(float) : 0), &bytes) ||
      keel_add_ovf(bytes, (size_t)p->out[d], &bytes))
    return keel_err(KEEL_ERR_SHAPE, "%s: the tables for axis %d overflow", p->op, d);
  uint8_t *hold = keel_sys_alloc(bytes ? bytes : 1);
  if (!hold) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "%s: %zu bytes of host tables", p->op, bytes);
  t->idx = (int64_t *)(void *)hold;
  t->w = lin ? (double *)(void *)(hold + cells * sizeof(int64_t)) : NULL;
  float *wf = lin ? (float *)(void *)(hold + cells * (sizeof(int64_t) + sizeof(double))) : NULL;
  t->oob = hold + bytes - (size_t)p->out[d];
  keel_resize_fill(p, d, t);
  for (size_t i = 0; lin && i < cells; i++) wf[i] = (float)t->w[i]; /* as image.c's (T)w[q] */
  keel_status st = KEEL_OK;
  void *di = NULL, *dw = NULL, *dm = NULL;
  if (!t->identity) {
    st = keel_k_scratch_n(k, (int64_t)cells, sizeof(int64_t), &di);
    if (!st) st = keel_device_to_device(k->dev, di, t->idx, cells * sizeof(int64_t));
    if (!st && lin) st = keel_k_scratch_n(k, (int64_t)cells, sizeof(float), &dw);
    if (!st && lin) st = keel_device_to_device(k->dev, dw, wf, cells * sizeof(float));
    if (!st && t->any_oob) st = keel_k_scratch(k, (size_t)p->out[d], &dm);
    if (!st && t->any_oob) st = keel_device_to_device(k->dev, dm, t->oob, (size_t)p->out[d]);
  }
  keel_sys_free(hold, bytes ? bytes : 1); /* the copies are queued: the host may reuse it */
  t->idx = NULL, t->w = NULL, t->oob = NULL;
  *idx = di, *w = dw, *oob = dm;
  return st;
}

static keel_status gpu_resample(keel_kctx *k, bool upsample) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  const char *op = upsample ? "Upsample" : "Resize";
  if (x->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: float32 X only, got %s", op,
                    keel_dtype_name((keel_dtype)x->dtype));
  keel_rs_plan p;
  KEEL_TRY(keel_resize_plan(k, x, upsample, &p));
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, p.rank, p.out, &y));
  if (keel_tensor_numel(y) == 0) return KEEL_OK;
  for (int d = 0; d < p.rank; d++)
    if (p.in[d] == 0)
      return keel_err(KEEL_ERR_SHAPE, "%s: axis %d is empty and cannot grow to %lld", op, d,
                      (long long)p.out[d]);
  if (!k->dev || !k->dev->conv || !k->dev->move)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s has no resampling kernels", op,
                    k->dev ? k->dev->name : "no device");
  keel_rs_tab tabs[KEEL_MAX_RANK];
  const int64_t *idx[KEEL_MAX_RANK];
  const float *w[KEEL_MAX_RANK];
  const uint8_t *oob[KEEL_MAX_RANK];
  int passes = 0, first = -1;
  for (int d = 0; d < p.rank; d++) {
    KEEL_TRY(keel_resize_taps(&p, d, &tabs[d]));
    KEEL_TRY(put_table(k, &p, d, &tabs[d], &idx[d], &w[d], &oob[d]));
    if (!tabs[d].identity) passes++, first = first < 0 ? d : first;
  }
  if (!passes) {
    return keel_dev_copy_run(k->dev, sizeof(float), keel_tensor_numel(y), x->data, y->data);
  }
  /* ping-pong between two scratch buffers of the largest intermediate */
  int64_t cur[KEEL_MAX_RANK], big = 0;
  memcpy(cur, p.in, sizeof cur);
  for (int d = p.rank - 1; d > first; d--) {
    if (tabs[d].identity) continue;
    cur[d] = p.out[d];
    int64_t n = 1;
    for (int i = 0; i < p.rank; i++)
      if (keel_mul64_ovf(n, cur[i], &n))
        return keel_err(KEEL_ERR_SHAPE, "%s: an intermediate result overflows", op);
    big = KEEL_MAX(big, n);
  }
  void *buf[2] = {NULL, NULL};
  if (passes >= 2) KEEL_TRY(keel_k_scratch_n(k, big, sizeof(float), &buf[0]));
  if (passes >= 3) KEEL_TRY(keel_k_scratch_n(k, big, sizeof(float), &buf[1]));
  memcpy(cur, p.in, sizeof cur);
  const float *src = x->data;
  for (int d = p.rank - 1, i = 0; d >= first; d--) {
    if (tabs[d].identity) continue;
    float *dst = d == first ? y->data : buf[i++ & 1];
    int64_t outer = 1, inner = 1;
    for (int a = 0; a < d; a++) outer *= cur[a];
    for (int a = d + 1; a < p.rank; a++) inner *= cur[a];
    KEEL_TRY(k->dev->conv->resample(k->dev, outer, cur[d], p.out[d], inner, tabs[d].n, idx[d],
                                    w[d], oob[d], (float)p.extrap, src, dst));
    cur[d] = p.out[d];
    src = dst;
  }
  return KEEL_OK;
}

static keel_status gpu_resize(keel_kctx *k) { return gpu_resample(k, false); }
static keel_status gpu_upsample(keel_kctx *k) { return gpu_resample(k, true); }

#define GPU_IMPL(fn, rule) {"gpu", keel_prep_on_gpu, NULL, NULL, fn, rule, KEEL_NODE_GPU}
static const keel_impl resize_impl =
    GPU_IMPL(gpu_resize, "placed on the GPU (float32; one resampling pass per resized axis)");
static const keel_impl upsample_impl =
    GPU_IMPL(gpu_upsample, "placed on the GPU (float32; one resampling pass per resized axis)");
const keel_impl *const keel_gpu_resize_impls[] = {&resize_impl, NULL};
const keel_impl *const keel_gpu_upsample_impls[] = {&upsample_impl, NULL};
