/* grad_nn.c: derivative rules for the neural-network ops: Conv and
 * ConvTranspose (dX, dW through ops/nn/conv/conv_backward.c's GEMM kernels, dB as a
 * ReduceSum), MaxPool / AveragePool and their Global forms,
 * BatchNormalization (inference and training mode), LayerNormalization,
 * InstanceNormalization, GroupNormalization,
 * Dropout and Resize (nearest and linear, 4-D).
 *
 * The heavy parts are internal kernels (ai.keel.internal) because their
 * geometry (pads, output sizes) is only known at run time; the rules copy
 * the forward node's attributes onto them. Cases a rule does not handle
 * are refused at load with KEEL_ERR_UNSUPPORTED naming the case.
 */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "autodiff/autodiff.h"

/* ------------------------------------------------------------ helpers */

static const char *in_or_empty(const keel_node *n, int32_t i) {
  return i < n->n_in ? n->in_names[i] : "";
}

static keel_status copy_attrs(ad_builder *b, keel_node *to, const keel_node *from) {
  for (int32_t i = 0; i < from->n_attr; i++) KEEL_TRY(ad_attr_copy(b, to, from, from->attrs[i].name));
  return KEEL_OK;
}

static int64_t attr_i(const keel_node *n, const char *name, int64_t def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : def;
}

static const char *attr_s(const keel_node *n, const char *name, const char *def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_STRING && a->s ? a->s : def;
}

static keel_status unsupported(const keel_node *n, const char *what, const char *value) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "no gradient for %s (ai.onnx, opset %lld) with %s%s%s",
                  n->op_type, (long long)n->opset, what, value ? " " : "", value ? value : "");
}

/* *out = op(ins...) on AD_INTERNAL with the forward node's attributes. */
static keel_status internal(ad_builder *b, const keel_node *n, const char *op, int nin,
                            const char *const *ins, const char **out) {
  const char *o = ad_fresh(b, op);
  keel_node *m;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, op, AD_INTERNAL, nin, ins, 1, &o, &m));
  KEEL_TRY(copy_attrs(b, m, n));
  *out = o;
  return KEEL_OK;
}


/* The sum of gY over every axis but 1: Reshape to (N, C, -1), then
 * ReduceSum over axes 0 and 2 (the opset-13 form, axes as an input). */
static keel_status sum_but_channels(ad_builder *b, const char *gy, const char **out) {
  const char *shape, *axes, *r, *o = ad_fresh(b, "dB");
  keel_node *m;
  KEEL_TRY(ad_const_ints(b, 3, (const int64_t[]){0, 0, -1}, &shape));
  KEEL_TRY(ad_const_ints(b, 2, (const int64_t[]){0, 2}, &axes));
  KEEL_TRY(ad_op(b, "Reshape", "", gy, shape, &r, &m));
  if (m->opset < 13) m->opset = 13;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "ReduceSum", "", 2, (const char *[]){r, axes}, 1, &o, &m));
  if (m->opset < 13) m->opset = 13;
  KEEL_TRY(ad_attr_i(b, m, "keepdims", 0));
  *out = o;
  return KEEL_OK;
}

/* --------------------------------------------------------------- conv */

/* Conv (X, W, B?) and ConvTranspose: the kernels take (gY, X, W). */
static keel_status conv_rule(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx, const char *opx, const char *opw) {
  const char *ins[3] = {gy[0], n->in_names[0], n->in_names[1]};
  KEEL_TRY(internal(b, n, opx, 3, ins, &gx[0]));
  KEEL_TRY(internal(b, n, opw, 3, ins, &gx[1]));
  if (n->n_in > 2 && n->in_names[2][0]) KEEL_TRY(sum_but_channels(b, gy[0], &gx[2]));
  return KEEL_OK;
}

static keel_status r_conv(ad_builder *b, const keel_node *n, const char *const *gy,
                          const char **gx) {
  return conv_rule(b, n, gy, gx, "ConvGradX", "ConvGradW");
}

static keel_status r_conv_transpose(ad_builder *b, const keel_node *n, const char *const *gy,
                                    const char **gx) {
  return conv_rule(b, n, gy, gx, "ConvTransposeGradX", "ConvTransposeGradW");
}

/* -------------------------------------------------------------- pools */

/* MaxPool's Indices output (1) gets no gradient. */
static keel_status pool_rule(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx, const char *op, bool global) {
  if (!gy[0]) return KEEL_OK;
  const char *ins[2] = {gy[0], n->in_names[0]}, *o = ad_fresh(b, op);
  keel_node *m;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, op, AD_INTERNAL, 2, ins, 1, &o, &m));
  if (global) KEEL_TRY(ad_attr_i(b, m, "global", 1));
  else KEEL_TRY(copy_attrs(b, m, n));
  gx[0] = o;
  return KEEL_OK;
}

static keel_status r_maxpool(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx) {
  return pool_rule(b, n, gy, gx, "MaxPoolGrad", false);
}
static keel_status r_avgpool(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx) {
  return pool_rule(b, n, gy, gx, "AveragePoolGrad", false);
}
static keel_status r_gmaxpool(ad_builder *b, const keel_node *n, const char *const *gy,
                              const char **gx) {
  return pool_rule(b, n, gy, gx, "MaxPoolGrad", true);
}
static keel_status r_gavgpool(ad_builder *b, const keel_node *n, const char *const *gy,
                              const char **gx) {
  return pool_rule(b, n, gy, gx, "AveragePoolGrad", true);
}

/* -------------------------------------------------------------- norms */

/* Training mode as ops/nn/norm/norm.c decides it: training_mode from opset 14,
 * before that a node that asks for the statistics outputs. */
static bool bn_training(const keel_node *n) {
  if (n->opset >= 14) return attr_i(n, "training_mode", 0) != 0;
  for (int32_t i = 1; i < n->n_out; i++)
    if (n->out_names[i][0]) return true;
  return false;
}

/* BatchNormalization (X, scale, B, mean, var): gradients for X, scale, B.
 * The running (and saved) statistics outputs get none. */
static keel_status r_batchnorm(ad_builder *b, const keel_node *n, const char *const *gy,
                               const char **gx) {
  if (n->opset < 9 && attr_i(n, "spatial", 1) == 0) return unsupported(n, "spatial = 0", NULL);
  for (int32_t i = 1; i < n->n_out; i++)
    if (gy[i]) return unsupported(n, "a gradient reaching its statistics outputs", NULL);
  bool train = bn_training(n);
  const char *ins[5] = {gy[0], n->in_names[0], n->in_names[1], n->in_names[3], n->in_names[4]};
  const char *outs[3] = {ad_fresh(b, "dX"), ad_fresh(b, "dScale"), ad_fresh(b, "dB")};
  keel_node *m;
  if (!outs[0] || !outs[1] || !outs[2]) return ad_oom();
  KEEL_TRY(ad_emit(b, "BatchNormGrad", AD_INTERNAL, 5, ins, 3, outs, &m));
  KEEL_TRY(ad_attr_copy(b, m, n, "epsilon"));
  KEEL_TRY(ad_attr_i(b, m, "training", train));
  for (int i = 0; i < 3; i++) gx[i] = outs[i];
  return KEEL_OK;
}

/* LayerNormalization (X, Scale, B?) with outputs Y, Mean?, InvStdDev?;
 * the kernel's dScale and dB have X's normalized shape and are summed to
 * Scale's and B's. */
static keel_status r_layernorm(ad_builder *b, const keel_node *n, const char *const *gy,
                               const char **gx) {
  const char *g0 = gy[0];
  if (!g0) KEEL_TRY(ad_op(b, "ZerosLike", AD_INTERNAL, n->out_names[0], NULL, &g0, NULL));
  const char *ins[5] = {g0, n->in_names[0], n->in_names[1], n->n_out > 1 && gy[1] ? gy[1] : "",
                        n->n_out > 2 && gy[2] ? gy[2] : ""};
  const char *outs[3] = {ad_fresh(b, "dX"), ad_fresh(b, "dScale"), ad_fresh(b, "dB")};
  keel_node *m;
  if (!outs[0] || !outs[1] || !outs[2]) return ad_oom();
  KEEL_TRY(ad_emit(b, "LayerNormGrad", AD_INTERNAL, 5, ins, 3, outs, &m));
  KEEL_TRY(ad_attr_copy(b, m, n, "axis"));
  KEEL_TRY(ad_attr_copy(b, m, n, "epsilon"));
  gx[0] = outs[0];
  KEEL_TRY(ad_sum_to(b, outs[1], n->in_names[1], &gx[1]));
  if (n->n_in > 2 && n->in_names[2][0]) KEEL_TRY(ad_sum_to(b, outs[2], n->in_names[2], &gx[2]));
  return KEEL_OK;
}

/* InstanceNormalization (X, scale, B) and GroupNormalization (X, scale,
 * bias; per group before opset 21, per channel from 21): one kernel,
 * num_groups 0 meaning a group per channel. */
static keel_status group_norm(ad_builder *b, const keel_node *n, const char *const *gy,
                              const char **gx, bool instance) {
  const char *ins[3] = {gy[0], n->in_names[0], n->in_names[1]};
  const char *outs[3] = {ad_fresh(b, "dX"), ad_fresh(b, "dScale"), ad_fresh(b, "dB")};
  keel_node *m;
  if (!outs[0] || !outs[1] || !outs[2]) return ad_oom();
  KEEL_TRY(ad_emit(b, "GroupNormGrad", AD_INTERNAL, 3, ins, 3, outs, &m));
  KEEL_TRY(ad_attr_copy(b, m, n, "epsilon"));
  if (instance) KEEL_TRY(ad_attr_i(b, m, "num_groups", 0));
  else KEEL_TRY(ad_attr_copy(b, m, n, "num_groups"));
  if (!instance && n->opset < 21) KEEL_TRY(ad_attr_i(b, m, "per_group", 1));
  for (int i = 0; i < 3; i++) gx[i] = outs[i];
  return KEEL_OK;
}

static keel_status r_instancenorm(ad_builder *b, const keel_node *n, const char *const *gy,
                                  const char **gx) {
  return group_norm(b, n, gy, gx, true);
}
static keel_status r_groupnorm(ad_builder *b, const keel_node *n, const char *const *gy,
                               const char **gx) {
  if (!keel_node_attr(n, "num_groups")) return unsupported(n, "no num_groups", NULL);
  return group_norm(b, n, gy, gx, false);
}

/* ------------------------------------------------------------ Dropout */

/* The mask: the node's own output 1, or a twin Dropout (same inputs and
 * seed: keel's Dropout draws the same mask for the same seed and shape). */
static keel_status dropout_mask(ad_builder *b, const keel_node *n, const char **mask) {
  if (n->n_out > 1 && n->out_names[1][0]) {
    *mask = n->out_names[1];
    return KEEL_OK;
  }
  const char *outs[2] = {ad_fresh(b, "y"), ad_fresh(b, "mask")};
  keel_node *m;
  if (!outs[0] || !outs[1]) return ad_oom();
  KEEL_TRY(ad_emit(b, "Dropout", "", n->n_in, (const char *const *)n->in_names, 2, outs, &m));
  m->opset = n->opset;
  KEEL_TRY(copy_attrs(b, m, n));
  *mask = outs[1];
  return KEEL_OK;
}

/* Inference: the identity. Training (opset 12+: a training_mode input;
 * before 7: is_test = 0): gY * mask / (1 - ratio). */
static keel_status r_dropout(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx) {
  if (!gy[0]) return KEEL_OK;
  bool v12 = n->opset >= 12;
  bool maybe = v12 ? in_or_empty(n, 2)[0] != 0 : n->opset < 7 && attr_i(n, "is_test", 0) == 0;
  if (!maybe) {
    gx[0] = gy[0];
    return KEEL_OK;
  }
  const char *mask, *o = ad_fresh(b, "dX");
  KEEL_TRY(dropout_mask(b, n, &mask));
  const char *ins[4] = {gy[0], mask, v12 ? in_or_empty(n, 1) : "", v12 ? in_or_empty(n, 2) : ""};
  keel_node *m;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "DropoutGrad", AD_INTERNAL, 4, ins, 1, &o, &m));
  if (!v12) {
    KEEL_TRY(ad_attr_copy(b, m, n, "ratio"));
    KEEL_TRY(ad_attr_i(b, m, "training", 1));
  }
  gx[0] = o;
  return KEEL_OK;
}

/* ------------------------------------------------------------- Resize */

static bool one_of(const char *s, const char *const *names) {
  for (int i = 0; names[i]; i++)
    if (!strcmp(s, names[i])) return true;
  return false;
}

/* The modes the gradient kernel takes; the rest is refused by name. */
static keel_status resize_check(const keel_node *n) {
  static const char *const modes[] = {"nearest", "linear", NULL};
  static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                     "asymmetric", NULL};
  static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil",
                                    NULL};
  const char *mode = attr_s(n, "mode", "nearest");
  if (!one_of(mode, modes)) return unsupported(n, "mode", mode);
  if (n->opset < 11) return KEEL_OK;
  const char *ctm = attr_s(n, "coordinate_transformation_mode", "half_pixel");
  if (!one_of(ctm, ctms)) return unsupported(n, "coordinate_transformation_mode", ctm);
  const char *nm = attr_s(n, "nearest_mode", "round_prefer_floor");
  if (!one_of(nm, nms)) return unsupported(n, "nearest_mode", nm);
  if (n->opset >= 18 && attr_i(n, "antialias", 0)) return unsupported(n, "antialias = 1", NULL);
  const char *pol = attr_s(n, "keep_aspect_ratio_policy", "stretch");
  if (n->opset >= 18 && strcmp(pol, "stretch"))
    return unsupported(n, "keep_aspect_ratio_policy", pol);
  if (n->opset >= 18 && keel_node_attr(n, "axes")) return unsupported(n, "the axes attribute", NULL);
  return KEEL_OK;
}

/* Resize (X, scales) at opset 10, (X, roi, scales, sizes) from 11; the
 * kernel takes (gY, X, scales, sizes). */
static keel_status r_resize(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  KEEL_TRY(resize_check(n));
  bool v10 = n->opset < 11;
  const char *ins[4] = {gy[0], n->in_names[0], in_or_empty(n, v10 ? 1 : 2),
                        v10 ? "" : in_or_empty(n, 3)};
  const char *o = ad_fresh(b, "dX");
  keel_node *m;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "ResizeGrad", AD_INTERNAL, 4, ins, 1, &o, &m));
  KEEL_TRY(ad_attr_copy(b, m, n, "mode"));
  if (v10) {
    KEEL_TRY(ad_attr_s(b, m, "coordinate_transformation_mode", "asymmetric"));
    KEEL_TRY(ad_attr_s(b, m, "nearest_mode", "simple"));
  } else {
    KEEL_TRY(ad_attr_copy(b, m, n, "coordinate_transformation_mode"));
    KEEL_TRY(ad_attr_copy(b, m, n, "nearest_mode"));
    KEEL_TRY(ad_attr_copy(b, m, n, "exclude_outside"));
  }
  gx[0] = o;
  return KEEL_OK;
}

const ad_rule ad_rules_nn[] = {
    {"Conv", "", 7, r_conv, 2},
    {"ConvTranspose", "", 7, r_conv_transpose, 2},
    {"MaxPool", "", 1, r_maxpool, 1},
    {"AveragePool", "", 1, r_avgpool, 1},
    {"GlobalMaxPool", "", 1, r_gmaxpool, 1},
    {"GlobalAveragePool", "", 1, r_gavgpool, 1},
    {"BatchNormalization", "", 7, r_batchnorm, 5},
    {"LayerNormalization", "", 7, r_layernorm, 2},
    {"InstanceNormalization", "", 7, r_instancenorm, 3},
    {"GroupNormalization", "", 7, r_groupnorm, 3},
    {"Dropout", "", 1, r_dropout, 1},
    {"Resize", "", 1, r_resize, 2},
    {0},
};
