/* resize.h: the plan of a Resize or Upsample node (image.c): its output
 * geometry, and for each axis a table of the input taps and weights of
 * every output index. The CPU kernels (image.c) and the device's
 * (image_gpu.c) run the same plan, so both compute the same shapes, take
 * the same taps and fail with the same errors. */
#ifndef KEEL_OPS_IMAGE_RESIZE_H
#define KEEL_OPS_IMAGE_RESIZE_H

#include "ops/kernel.h"

enum { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum { CT_HALF_PIXEL, CT_PYTORCH, CT_ALIGN, CT_ASYM, CT_TF_NN, CT_CROP, CT_SYMMETRIC };
/* NM_SIMPLE is opset 10's and Upsample's rule (as onnxruntime): floor when
 * the axis grows, ceil when it shrinks. */
enum { NM_FLOOR_PREF, NM_CEIL_PREF, NM_FLOOR, NM_CEIL, NM_SIMPLE };

/* Output dims beyond this are refused before any int64 conversion. */
#define RS_DIM_MAX 4611686018427387904.0 /* 2^62 */

typedef struct keel_rs_plan {
  const char *op;              /* "Resize" or "Upsample", for messages    */
  int rank, mode, ctm, nmode;
  bool exclude, antialias;
  double cubic_a, extrap;
  int64_t in[KEEL_MAX_RANK], out[KEEL_MAX_RANK];
  double scale[KEEL_MAX_RANK]; /* output / input as the coordinates see it */
  double roi0[KEEL_MAX_RANK], roi1[KEEL_MAX_RANK]; /* tf_crop_and_resize   */
} keel_rs_plan;

/* One axis's taps: n inputs per output index, at offsets start .. start +
 * n - 1 from the tap left of the coordinate. Antialiasing stretches the
 * filter by 1 / scale when the axis shrinks (opset 18). */
typedef struct keel_rs_tab {
  int64_t n, start;
  double seff;                 /* the filter's scale: 1, or the shrink     */
  int64_t *idx;                /* out * n input indices, clamped           */
  double *w;                   /* out * n weights; NULL for nearest        */
  uint8_t *oob;                /* out flags: take extrapolation_value      */
  bool any_oob;                /* some flag is set (tf_crop_and_resize)    */
  bool identity;               /* output j is input j: no work             */
} keel_rs_tab;

/* The plan of node k (Resize, or Upsample when `upsample`) for input X:
 * its attributes, and the output dims and scales from its inputs (scales,
 * sizes, roi: read on the host). */
KEEL_INTERNAL keel_status keel_resize_plan(keel_kctx *k, const keel_tensor *x, bool upsample,
                                           keel_rs_plan *p);
/* Axis d's taps per output (t->n, t->start, t->seff). */
KEEL_INTERNAL keel_status keel_resize_taps(const keel_rs_plan *p, int d, keel_rs_tab *t);
/* Axis d's table into t->idx (out * n), t->w (out * n; not written for
 * nearest, where it may be NULL) and t->oob (out), host memory the caller
 * gives; sets any_oob and identity. */
KEEL_INTERNAL void keel_resize_fill(const keel_rs_plan *p, int d, keel_rs_tab *t);

#endif /* KEEL_OPS_IMAGE_RESIZE_H */
