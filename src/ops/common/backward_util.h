/* backward_util.h: what the backward kernels (domain "ai.keel.internal",
 * the *_backward.c files beside each family's forward kernels) share: the
 * checks of their float inputs, float/double element access, and the
 * shape check of a gradient against the shape it must have.
 */
#ifndef KEEL_BACKWARD_UTIL_H
#define KEEL_BACKWARD_UTIL_H

#include "ops/kernel.h"

/* Input i, of any float type. */
static inline keel_status keel_bw_float_input(keel_kctx *k, int i, const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if (!keel_dtype_is_float((*t)->dtype))
    return keel_err(KEEL_ERR_SHAPE, "input %d must be a float tensor", i);
  return KEEL_OK;
}

/* Input i, float or double; of type dtype unless dtype < 0. */
static inline keel_status keel_bw_fd_input(keel_kctx *k, int i, int dtype, const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if ((*t)->dtype != KEEL_FLOAT && (*t)->dtype != KEEL_DOUBLE)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: input %d is %s; float and double are supported",
                    k->node->op_type, i, keel_dtype_name((keel_dtype)(*t)->dtype));
  if (dtype >= 0 && (*t)->dtype != dtype)
    return keel_err(KEEL_ERR_SHAPE, "%s: input %d is %s, expected %s", k->node->op_type, i,
                    keel_dtype_name((keel_dtype)(*t)->dtype), keel_dtype_name((keel_dtype)dtype));
  return KEEL_OK;
}

/* Element i of a float (dbl false) or double array, as double; and back. */
static inline double keel_bw_ld(const void *p, bool dbl, int64_t i) {
  return dbl ? ((const double *)p)[i] : (double)((const float *)p)[i];
}
static inline void keel_bw_st(void *p, bool dbl, int64_t i, double v) {
  if (dbl) ((double *)p)[i] = v;
  else ((float *)p)[i] = (float)v;
}

/* OK when a has this rank and shape; else an error naming `what`. */
static inline keel_status keel_bw_same_shape(const keel_kctx *k, const keel_tensor *a,
                                             const char *what, int rank, const int64_t *shape) {
  bool ok = a->rank == rank;
  for (int i = 0; ok && i < rank; i++) ok = a->shape[i] == shape[i];
  if (ok) return KEEL_OK;
  char s1[128], s2[128];
  return keel_err(KEEL_ERR_SHAPE, "%s: %s has shape %s, expected %s", k->node->op_type, what,
                  keel_shape_str(a->rank, a->shape, s1, sizeof s1),
                  keel_shape_str(rank, shape, s2, sizeof s2));
}

#endif
