/* dtype_rules.c: the element type of each output, the other half of a
 * value's inferred description (shapes.h), after its shape rule.
 *
 * Only what the op's definition fixes is said: an output whose type the
 * rules below do not know stays unknown (0), never guessed. Most ops give
 * every output their first input's type; the rest are listed by what they
 * give. The shape check (exec/shapecheck.c, `keel test --check-shapes`)
 * compares every inferred type with the value a run makes, over the whole
 * ONNX node suite (ctest shapes_*).
 */
#include "ir/shape_rules.h"

/* Every output has input 0's type (ai.onnx and the ops keel's passes
 * make, whose outputs are their first input's type). */
static const char *const SAME[] = {
    /* element-wise */
    "Abs", "Neg", "Reciprocal", "Sqrt", "Exp", "Log", "Ceil", "Floor", "Round", "Sign", "Sin", "Cos",
    "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Relu",
    "Sigmoid", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus",
    "Softsign", "ThresholdedRelu", "Shrink", "Mish", "Clip", "Gelu", "PRelu", "BitwiseNot", "Add",
    "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "BitShift", "BitwiseAnd",
    "BitwiseOr", "BitwiseXor", "Swish",
    /* reductions */
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "CumSum", "CumProd",
    /* moving data */
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Concat", "Split",
    "Identity", "MemcpyFromHost", "MemcpyToHost", "Pad", "Slice", "Gather", "GatherElements",
    "GatherND", "ScatterND",
    "ScatterElements", "Scatter", "Compress", "Trilu", "DepthToSpace", "SpaceToDepth",
    "ReverseSequence", "Resize", "Upsample", "CenterCropPad", "Col2Im",
    /* networks */
    "Conv", "ConvTranspose", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
    "GlobalLpPool", "InstanceNormalization", "GroupNormalization", "RMSNormalization",
    "LpNormalization",
    "MeanVarianceNormalization", "Softmax", "LogSoftmax", "Hardmax", "LRN", "Gemm", "MatMul",
    "Einsum", "RNN", "GRU", "LSTM", "Det", "Range", "RoiAlign", "MaxRoiPool", "DeformConv",
    /* keel's (ai.keel.internal) */
    "NhwcConv", "NhwcMaxPool", "NhwcAveragePool", "NhwcGlobalMaxPool", "NhwcGlobalAveragePool",
    "FusedMatMul", "FusedAttention",
};

/* Output 0 has input 0's type, output 1 is int64 (indices). */
static const char *const SAME_THEN_INDEX[] = {"MaxPool", "TopK"};
/* Every output is bool. */
static const char *const BOOLS[] = {"Equal",         "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                    "And",           "Or",   "Xor",     "Not",         "IsNaN",
                                    "IsInf"};
/* Every output is int64. */
static const char *const INT64S[] = {"Shape", "Size", "NonZero", "ArgMax", "ArgMin"};

static bool in_list(const char *op, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(op, list[i])) return true;
  return false;
}
#define IN(op, list) in_list(op, list, sizeof list / sizeof *list)

static int32_t in_type(const keel_shape_ctx *c, int32_t i) {
  return i < c->n->n_in && c->n->in_names[i][0] && c->in[i] ? c->in[i]->dtype : 0;
}

/* An int attribute, or dflt when absent. */
static int64_t attr_i(const keel_node *n, const char *name, int64_t dflt) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : dflt;
}

/* The element type of a tensor attribute (ConstantOfShape's value,
 * Constant's value), or dflt. */
static int32_t attr_tensor_type(const keel_node *n, const char *name, int32_t dflt) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_TENSOR && a->t ? a->t->dtype : dflt;
}

static void set_all(keel_shape_ctx *c, int32_t t) {
  for (int32_t k = 0; k < c->n->n_out; k++)
    if (!c->out[k].dtype) c->out[k].dtype = t;
}

void keel_dtype_rule(keel_shape_ctx *c) {
  const keel_node *n = c->n;
  const char *d = n->domain, *op = n->op_type;
  bool onnx = !d[0] || !strcmp(d, "ai.onnx");
  if (!onnx && strcmp(d, "ai.keel.internal")) return;
  if (!onnx && !IN(op, SAME)) return;
  int32_t t0 = in_type(c, 0);
  if (IN(op, SAME)) {
    /* Range's first input is its start; Where's and the rest are X */
    set_all(c, t0);
  } else if (IN(op, SAME_THEN_INDEX)) {
    if (n->n_out > 0 && !c->out[0].dtype) c->out[0].dtype = t0;
    if (n->n_out > 1 && !c->out[1].dtype) c->out[1].dtype = KEEL_INT64;
  } else if (!strcmp(op, "Dropout")) { /* output, mask */
    if (n->n_out > 0 && !c->out[0].dtype) c->out[0].dtype = t0;
    if (n->n_out > 1 && !c->out[1].dtype) c->out[1].dtype = KEEL_BOOL;
  } else if (!strcmp(op, "Unique")) { /* Y, then indices, inverse, counts */
    if (n->n_out > 0 && !c->out[0].dtype) c->out[0].dtype = t0;
    for (int32_t k = 1; k < n->n_out; k++)
      if (!c->out[k].dtype) c->out[k].dtype = KEEL_INT64;
  } else if (!strcmp(op, "LayerNormalization") || !strcmp(op, "BatchNormalization")) {
    /* Y has X's type; the saved statistics follow stash_type (float by
     * default) or the running stats' type: only Y is said */
    if (n->n_out > 0 && !c->out[0].dtype) c->out[0].dtype = t0;
  } else if (IN(op, BOOLS)) {
    set_all(c, KEEL_BOOL);
  } else if (IN(op, INT64S)) {
    set_all(c, KEEL_INT64);
  } else if (!strcmp(op, "Where")) {
    set_all(c, in_type(c, 1));
  } else if (!strcmp(op, "Cast")) {
    const keel_attr *a = keel_node_attr(n, "to");
    if (a && a->type == KEEL_ATTR_INT) set_all(c, (int32_t)a->i);
  } else if (!strcmp(op, "CastLike")) {
    set_all(c, in_type(c, 1));
  } else if (!strcmp(op, "MatMulInteger") || !strcmp(op, "ConvInteger")) {
    set_all(c, KEEL_INT32);
  } else if (!strcmp(op, "DequantizeLinear")) {
    int64_t od = attr_i(n, "output_dtype", 0);
    set_all(c, od ? (int32_t)od : in_type(c, 1)); /* the scale's type */
  } else if (!strcmp(op, "QuantizeLinear")) {
    int64_t od = attr_i(n, "output_dtype", 0);
    int32_t zp = in_type(c, 2);
    set_all(c, zp ? zp : od ? (int32_t)od : KEEL_UINT8);
  } else if (!strcmp(op, "ConstantOfShape")) {
    set_all(c, attr_tensor_type(n, "value", KEEL_FLOAT));
  } else if (!strcmp(op, "EyeLike") || !strcmp(op, "RandomNormalLike") ||
             !strcmp(op, "RandomUniformLike") || !strcmp(op, "Bernoulli")) {
    int64_t dt = attr_i(n, "dtype", 0);
    set_all(c, dt ? (int32_t)dt : t0);
  } else if (!strcmp(op, "RandomNormal") || !strcmp(op, "RandomUniform")) {
    set_all(c, (int32_t)attr_i(n, "dtype", KEEL_FLOAT));
  }
}
