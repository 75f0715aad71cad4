/* shape_gpu.c: the shape family on a device (device/dev_move.h).
 *
 * Which nodes run here is the place pass's decision (passes/pass_place.c:
 * gpu_takes_move, place_views); binding gives a placed node the
 * implementation whose `device` is the GPU's, and these supports() only
 * confirm the placement.
 *
 * The views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) and the
 * copies (Transpose, Concat, Split, Slice, Expand) run the op's own
 * kernel (fn NULL): it computes the shapes, reads its shape and axes
 * inputs on the host (they are host tensors for a placed node:
 * passes/place.h) and either makes a view (no bytes touched) or moves the
 * bytes with the device's strided copy (shape.c, sh_copy_k). Gather has a
 * kernel of its own. */
#include "ops/shape/shape_gpu.h"

#include "base/status.h"
#include "device/dev_move.h"

static const keel_impl gpu_move_impl = {
    "gpu", keel_prep_on_gpu, NULL, NULL, NULL,
    "placed on the GPU (a view: no bytes move; else the device's strided copy)", KEEL_NODE_GPU};
const keel_impl *const keel_gpu_move_impls[] = {&gpu_move_impl, NULL};

/* Gather: data float32 on the device, indices int64 or int32 on the device
 * (a CPU value is copied there by the placement). The shape is the CPU
 * kernel's: data.shape[:axis] + indices.shape + data.shape[axis+1:]. An
 * index out of range gives zeros (dev_move.h), where the CPU fails: the
 * device cannot stop the run. */
static keel_status gpu_gather(keel_kctx *k) {
  const keel_tensor *x, *ind;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &ind));
  if (ind->dtype != KEEL_INT64 && ind->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "Gather: indices are %s, not int32 or int64",
                    keel_dtype_name((keel_dtype)ind->dtype));
  if (x->rank < 1) return keel_err(KEEL_ERR_SHAPE, "Gather: data must have rank >= 1");
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x->rank, "Gather axis", &axis));
  int r = x->rank - 1 + ind->rank;
  if (r > KEEL_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Gather: output rank %d is above keel's limit of %d", r,
                    KEEL_MAX_RANK);
  int64_t shape[KEEL_MAX_RANK], outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) shape[i] = x->shape[i], outer *= x->shape[i];
  for (int i = 0; i < ind->rank; i++) shape[axis + i] = ind->shape[i];
  for (int i = axis + 1; i < x->rank; i++) shape[ind->rank + i - 1] = x->shape[i], inner *= x->shape[i];
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, shape, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  if (!k->dev->move) return keel_err(KEEL_ERR_UNSUPPORTED, "Gather: %s has no move kernels", k->dev->name);
  return k->dev->move->gather(k->dev, keel_dtype_size((keel_dtype)x->dtype), outer, x->shape[axis],
                              inner, x->data, ind->data, ind->dtype == KEEL_INT64,
                              keel_tensor_numel(ind), y->data);
}

static const keel_impl gpu_gather_impl = {
    "gpu", keel_prep_on_gpu, NULL, NULL, gpu_gather,
    "placed on the GPU (float32 data, int32/int64 indices on the device)", KEEL_NODE_GPU};
const keel_impl *const keel_gpu_gather_impls[] = {&gpu_gather_impl, NULL};
