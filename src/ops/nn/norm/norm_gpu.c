/* norm_gpu.c: LayerNormalization on a device (device/dev_norm.h), for the
 * nodes the place pass put there (passes/pass_place.c, gpu_takes_norm:
 * float32, Scale and B of the normalized dims' rank, stash_type float32),
 * the file's and the one the passes fuse (pass_norm.c) alike.
 *
 * The shapes are the CPU kernel's (norm.c): Y like X; Mean and InvStdDev
 * X's dims before the axis, then 1s. Scale and B must hold exactly the
 * normalized dims' count of floats (no broadcast inside the normalized
 * shape on the device). */
#include "ops/nn/norm/norm_gpu.h"

#include "base/status.h"
#include "device/dev_norm.h"

static keel_status gpu_layernorm(keel_kctx *k) {
  const keel_tensor *x, *s, *b = NULL;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &s));
  KEEL_TRY(keel_k_in_opt(k, 2, &b));
  int64_t a = keel_k_attr_i(k, "axis", -1);
  if (a < -x->rank || a >= x->rank || x->rank < 1)
    return keel_err(KEEL_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)a, x->rank);
  int axis = (int)(a < 0 ? a + x->rank : a);
  int64_t D = 1, rows = 1;
  for (int i = 0; i < x->rank; i++) *(i < axis ? &rows : &D) *= x->shape[i];
  if (x->dtype != KEEL_FLOAT || s->dtype != KEEL_FLOAT || keel_tensor_numel(s) != D ||
      (b && (b->dtype != KEEL_FLOAT || keel_tensor_numel(b) != D)))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU LayerNormalization: float32 X with Scale and B of %lld "
                    "floats each (the normalized dims)", (long long)D);
  keel_tensor *y, *mean = NULL, *inv = NULL;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, x->shape, &y));
  int64_t st[KEEL_MAX_RANK];
  for (int i = 0; i < x->rank; i++) st[i] = i < axis ? x->shape[i] : 1;
  if (keel_k_has_out(k, 1)) KEEL_TRY(keel_k_out(k, 1, KEEL_FLOAT, x->rank, st, &mean));
  if (keel_k_has_out(k, 2)) KEEL_TRY(keel_k_out(k, 2, KEEL_FLOAT, x->rank, st, &inv));
  if (!rows || !D) return KEEL_OK;
  if (!k->dev->norm) return keel_err(KEEL_ERR_UNSUPPORTED, "LayerNormalization: %s has no norm kernels", k->dev->name);
  return k->dev->norm->layernorm(k->dev, rows, D, x->data, s->data, b ? b->data : NULL,
                                 keel_k_attr_f(k, "epsilon", 1e-5f), y->data,
                                 mean ? mean->data : NULL, inv ? inv->data : NULL);
}

static const keel_impl gpu_layernorm_impl = {
    "gpu", keel_prep_on_gpu, NULL, NULL, gpu_layernorm,
    "placed on the GPU (float32, Scale and B over the normalized dims)", KEEL_NODE_GPU};
const keel_impl *const keel_gpu_layernorm_impls[] = {&gpu_layernorm_impl, NULL};
