/* norm.h: the layer-normalization engine of norm.c, shared with the
 * com.microsoft variants in contrib.c (SkipLayerNormalization,
 * SkipSimplifiedLayerNormalization). */
#ifndef KEEL_NORM_H
#define KEEL_NORM_H

#include "ops/kernel.h"

typedef struct keel_ln_args {
  const char *op;              /* for messages                              */
  int axis;                    /* first normalized dim, in [0, rank]        */
  bool rms;                    /* RMS (no mean subtracted, no B)            */
  int i_scale, i_bias;         /* input indices of Scale and B; < 0: absent */
  const char *scale_name, *bias_name; /* their names in messages            */
  double eps;
  int out_dtype;               /* output 0's type; 0: x's (a float x may
                                  give a float16 / bfloat16 output)         */
} keel_ln_args;

/* Output 0 = LayerNormalization of x (float, double or half; x may be a
 * scratch tensor rather than an input) over dims [axis, rank): per row,
 * (x - mean) * inv_std * Scale + B, where Scale and B are read from the
 * inputs named in `a` and must broadcast to the normalized shape. *mean and
 * *inv_std (NULL: not wanted) receive per-row doubles in scratch memory. */
KEEL_INTERNAL keel_status keel_layernorm_run(keel_kctx *k, const keel_tensor *x,
                                             const keel_ln_args *a, double **mean,
                                             double **inv_std);

#endif /* KEEL_NORM_H */
