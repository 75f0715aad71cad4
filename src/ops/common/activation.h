/* activation.h: an elementwise activation a graph pass fused into the
 * node that produces its input (Conv today; Gemm and MatMul can take the
 * same), applied to the producer's output in place.
 *
 * The fusion pass (passes/pass_fuse.c) writes two attributes on the producer,
 * in keel's own namespace so no file can collide with them:
 *   keel.activation         STRING  Relu, LeakyRelu, Clip, HardSigmoid,
 *                                   HardSwish, Sigmoid, Tanh, SiLU,
 *                                   HardSigmoidMul, Gelu, GeluTanh
 *   keel.activation_params  FLOATS  alpha / beta, or Clip's min / max
 *                                   (+-inf where a bound is absent)
 * The formulas are those of the standalone kernels (ops/math/unary.c), NaN
 * propagation included, so a fused model computes what the unfused one
 * does, bit for bit in float32.
 *
 * GELU is written here once, for every op that computes it: the exact form
 * 0.5 x (1 + erf(x / sqrt 2)) (KEEL_ACT_GELU, float through vmath's
 * vectorized erf) and the tanh form (KEEL_ACT_GELU_TANH). The Gelu op
 * (ops/nn/attention/transformer.c), com.microsoft's Gelu, BiasGelu and
 * FastGelu (ops/contrib/contrib.c), and a Gelu fused after a matrix
 * product all call keel_act_apply_f32 / _f64 with them.
 */
#ifndef KEEL_ACTIVATION_H
#define KEEL_ACTIVATION_H

#include "ops/kernel.h"

#define KEEL_ACT_ATTR "keel.activation"
#define KEEL_ACT_PARAMS "keel.activation_params"

typedef enum keel_act_kind {
  KEEL_ACT_NONE = 0, KEEL_ACT_RELU, KEEL_ACT_LEAKY, KEEL_ACT_CLIP, KEEL_ACT_HSIGMOID,
  KEEL_ACT_HSWISH, KEEL_ACT_SIGMOID, KEEL_ACT_TANH,
  /* gated forms, x * f(x), as exporters write SiLU (Sigmoid, Mul) and
   * hardswish (HardSigmoid, Mul): names "SiLU" and "HardSigmoidMul" */
  KEEL_ACT_SILU, KEEL_ACT_HSIGMOID_MUL,
  /* after a matrix product (passes/pass_matmul.c): Gelu (opset 20, or the one
   * fuse-gelu makes) exact and tanh-approximated: "Gelu", "GeluTanh" */
  KEEL_ACT_GELU, KEEL_ACT_GELU_TANH
} keel_act_kind;

typedef struct keel_act {
  keel_act_kind kind;
  float a, b;                  /* alpha, beta; Clip: min, max            */
} keel_act;

/* The activation a name stands for (the op types the fusion pass folds,
 * and the two gated names), or KEEL_ACT_NONE. */
KEEL_INTERNAL keel_act_kind keel_act_from_op(const char *op_type);
/* The node's fused activation (KEEL_ACT_NONE when it has none); an
 * unknown name or a wrong parameter count is KEEL_ERR_INVALID_MODEL. */
KEEL_INTERNAL keel_status keel_act_of(const keel_node *n, keel_act *act);
/* y[i] = act(y[i]) for every element of a float, double, float16 or
 * bfloat16 tensor. */
KEEL_INTERNAL keel_status keel_act_apply(const keel_act *act, keel_tensor *y);
/* The same over n floats. */
KEEL_INTERNAL void keel_act_apply_f32(const keel_act *act, float *y, int64_t n);
/* The same over n doubles. */
KEEL_INTERNAL void keel_act_apply_f64(const keel_act *act, double *y, int64_t n);
/* The same, SiLU by vmath's fast form (keel_vm_silu_fast): what the fused
 * kernels apply to their outputs. */
KEEL_INTERNAL void keel_act_apply_fast_f32(const keel_act *act, float *y, int64_t n);

#endif /* KEEL_ACTIVATION_H */
