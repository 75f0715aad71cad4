/* grad_basic.c: derivative rules for arithmetic, a few activations, the
 * view ops (Reshape and its kin), and the ops through which no
 * gradient flows (shapes, comparisons, index results). MatMul is in
 * grad_math.c. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "autodiff/autodiff.h"

static keel_status r_add(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  for (int32_t i = 0; i < n->n_in; i++)
    if (n->in_names[i][0]) KEEL_TRY(ad_sum_to(b, gy[0], n->in_names[i], &gx[i]));
  return KEEL_OK;
}

static keel_status r_sub(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  const char *t;
  KEEL_TRY(ad_sum_to(b, gy[0], n->in_names[0], &gx[0]));
  KEEL_TRY(ad_op(b, "Neg", "", gy[0], NULL, &t, NULL));
  return ad_sum_to(b, t, n->in_names[1], &gx[1]);
}

static keel_status r_mul(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  const char *t, *u;
  KEEL_TRY(ad_op(b, "Mul", "", gy[0], n->in_names[1], &t, NULL));
  KEEL_TRY(ad_sum_to(b, t, n->in_names[0], &gx[0]));
  KEEL_TRY(ad_op(b, "Mul", "", gy[0], n->in_names[0], &u, NULL));
  return ad_sum_to(b, u, n->in_names[1], &gx[1]);
}

/* d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b */
static keel_status r_div(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  const char *t, *u;
  KEEL_TRY(ad_op(b, "Div", "", gy[0], n->in_names[1], &t, NULL));
  KEEL_TRY(ad_sum_to(b, t, n->in_names[0], &gx[0]));
  KEEL_TRY(ad_op(b, "Mul", "", t, n->out_names[0], &u, NULL));
  KEEL_TRY(ad_op(b, "Neg", "", u, NULL, &u, NULL));
  return ad_sum_to(b, u, n->in_names[1], &gx[1]);
}

static keel_status r_neg(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  (void)n;
  return ad_op(b, "Neg", "", gy[0], NULL, &gx[0], NULL);
}

static keel_status r_identity(ad_builder *b, const keel_node *n, const char *const *gy,
                              const char **gx) {
  (void)b, (void)n;
  gx[0] = gy[0];
  return KEEL_OK;
}

static keel_status r_exp(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  return ad_op(b, "Mul", "", gy[0], n->out_names[0], &gx[0], NULL);
}

static keel_status r_log(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  return ad_op(b, "Div", "", gy[0], n->in_names[0], &gx[0], NULL);
}

/* Relu reads its input, Sigmoid and Tanh their output. */
static keel_status r_act(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  char name[32];
  snprintf(name, sizeof name, "%sGrad", n->op_type);
  const char *iname = keel_arena_strdup(ad_arena(b), name);
  if (!iname) return ad_oom();
  bool reads_out = strcmp(n->op_type, "Relu") != 0;
  return ad_op(b, iname, AD_INTERNAL, gy[0], reads_out ? n->out_names[0] : n->in_names[0], &gx[0],
               NULL);
}

/* Reshape, Flatten, Squeeze, Unsqueeze: the gradient takes x's shape back. */
static keel_status r_view(ad_builder *b, const keel_node *n, const char *const *gy, const char **gx) {
  const char *t;
  KEEL_TRY(ad_op(b, "Shape", "", n->in_names[0], NULL, &t, NULL));
  return ad_op(b, "Reshape", "", gy[0], t, &gx[0], NULL);
}

#define NONE(op) {op, "", 0, NULL}
const ad_rule ad_rules_basic[] = {
    {"Add", "", AD_ALL, r_add},
    {"Sum", "", AD_ALL, r_add},
    {"Sub", "", AD_ALL, r_sub, 2},
    {"Mul", "", AD_ALL, r_mul, 2},
    {"Div", "", AD_ALL, r_div, 2},
    {"Neg", "", AD_ALL, r_neg},
    {"Identity", "", AD_ALL, r_identity},
    {"Exp", "", AD_ALL, r_exp},
    {"Log", "", AD_ALL, r_log},
    {"Relu", "", AD_ALL, r_act},
    {"Sigmoid", "", AD_ALL, r_act},
    {"Tanh", "", AD_ALL, r_act},
    {"Reshape", "", 1, r_view},
    {"Flatten", "", 1, r_view},
    {"Squeeze", "", 1, r_view},
    {"Unsqueeze", "", 1, r_view},
    NONE("Shape"), NONE("Size"), NONE("ArgMax"), NONE("ArgMin"), NONE("Equal"), NONE("Less"),
    NONE("Greater"), NONE("LessOrEqual"), NONE("GreaterOrEqual"), NONE("Not"), NONE("And"),
    NONE("Or"), NONE("Xor"), NONE("NonZero"), NONE("ConstantOfShape"), NONE("Range"),
    NONE("EyeLike"), NONE("IsNaN"), NONE("IsInf"), NONE("RandomNormalLike"),
    NONE("RandomUniformLike"), NONE("Bernoulli"), NONE("Multinomial"),
    {0},
};
