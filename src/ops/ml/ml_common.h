/* ml_common.h: pieces the ai.onnx.ml kernels share (ml_tree.c,
 * ml_linear.c, ml_misc.c): attribute readers that accept both the list
 * form and the tensor form of an attribute (`nodes_values` /
 * `nodes_values_as_tensor`), the post transforms (logistic, softmax,
 * softmax-zero, probit) as ONNX Runtime computes them, and reading rows of
 * a numeric input as doubles. */
#ifndef KEEL_ML_COMMON_H
#define KEEL_ML_COMMON_H

#include "ops/kernel.h"

#define KEEL_ML "ai.onnx.ml"

enum { ML_POST_NONE = 0, ML_POST_SOFTMAX, ML_POST_LOGISTIC, ML_POST_SOFTMAX_ZERO,
       ML_POST_PROBIT };

/* A list attribute of numbers as doubles in scratch: `name` (FLOATS or
 * INTS) or, when that is absent, `name`_as_tensor (a tensor of any numeric
 * type). *n = -1 when neither is given (*v = NULL). */
KEEL_INTERNAL keel_status ml_attr_reals(keel_kctx *k, const char *name, double **v,
                                        int64_t *n);
/* The same for an attribute that is only ever a tensor (TreeEnsemble-5). */
KEEL_INTERNAL keel_status ml_attr_tensor_reals(keel_kctx *k, const char *name,
                                               double **v, int64_t *n);
/* INTS attribute with its count; count -1 when absent. */
KEEL_INTERNAL const int64_t *ml_attr_ints(const keel_kctx *k, const char *name,
                                          int64_t *n);
/* post_transform as a string attribute ("NONE", "SOFTMAX", ...). */
KEEL_INTERNAL keel_status ml_post_transform(keel_kctx *k, int *post);

KEEL_INTERNAL double ml_logistic(double x);
KEEL_INTERNAL double ml_probit(double x);
/* Applies `post` to n scores in place (n >= 2 semantics: every score). */
KEEL_INTERNAL void ml_post_apply(int post, double *s, int64_t n);

/* X as [N, C] (rank 1: one row; rank 0: one value), any numeric type: the
 * row count and column count. Error when rank > 2 or not numeric. */
KEEL_INTERNAL keel_status ml_rows(const keel_tensor *x, const char *op, int64_t *n,
                                  int64_t *c);
/* Row i of X (C values) into `row` as doubles. */
KEEL_INTERNAL void ml_row(const keel_tensor *x, int64_t i, int64_t c, double *row);

/* True when a * b == want (no overflow; a, b >= 0). */
static inline bool ml_prod_is(int64_t a, int64_t b, int64_t want) {
  int64_t p;
  return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &p) && p == want;
}

/* Writes v into element i of a float/double/float16 output. */
KEEL_INTERNAL void ml_store(keel_tensor *y, int64_t i, double v);

#endif
