/* grad_math.c: derivative rules for elementwise math (Pow, Sqrt, the
 * activations, Clip), Max/Min/Mean/Where/Cast, every Reduce*, Softmax and
 * LogSoftmax, the two losses, MatMul, Gemm and Einsum.
 *
 * Rules emit ONNX ops at opset >= 13 (axes as inputs: Unsqueeze, ReduceSum;
 * ReduceProd at 18) whatever the model's opset, plus three helper kernels:
 * UnaryGrad (ops/math/math_backward.c; one pass for f'(x) of an activation),
 * MatMulGrad (ops/math/matmul/matmul_backward.c; any rank: the rank is
 * unknown at load, so the transposes and the batch reduction happen in the
 * kernel, on GEMMs) and NegativeLogLikelihoodLossGrad
 * (ops/nn/norm/norm_backward.c; the scatter of the loss into [N, C, ...]).
 *
 * Ties: Max/Min (variadic) send the gradient to the first input that
 * equals the result; ReduceMax/ReduceMin split it evenly among the tied
 * elements (PyTorch's amax/amin do the same).
 */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "autodiff/autodiff.h"

/* ============================================================ helpers */

/* The node an ad_op made, raised to at least opset `v` (the forms used
 * here: axes as inputs, optional Gemm C, CastLike). */
static keel_status opv(ad_builder *b, const char *op, const char *a, const char *bb,
                       const char **out, keel_node **made, int64_t v) {
  const char *ins[2] = {a, bb};
  return ad_op_at(b, op, bb ? 2 : 1, ins, v, out, made);
}
static keel_status op2(ad_builder *b, const char *op, const char *a, const char *bb,
                       const char **out) {
  return opv(b, op, a, bb, out, NULL, 13);
}

static keel_status emitv(ad_builder *b, const char *op, int nin, const char *const *ins,
                         const char **out, keel_node **made, int64_t v) {
  return ad_op_at(b, op, nin, ins, v, out, made);
}




static keel_status where(ad_builder *b, const char *c, const char *x, const char *y,
                         const char **out) {
  return emitv(b, "Where", 3, (const char *[]){c, x, y}, out, NULL, 16);
}

static int64_t attr_i(const keel_node *n, const char *name, int64_t def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_INT ? a->i : def;
}

static float attr_f(const keel_node *n, const char *name, float def) {
  const keel_attr *a = keel_node_attr(n, name);
  return a && a->type == KEEL_ATTR_FLOAT ? a->f : def;
}

static bool has_in(const keel_node *n, int i) { return i < n->n_in && n->in_names[i][0]; }

/* Whether `name` is the output of a Constant node (never a variable: no
 * gradient worth computing; the graph keeps no dead nodes out). */
static bool from_constant(ad_builder *b, const char *name) {
  const keel_graph *g = ad_graph(b);
  for (int32_t i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op_type, "Constant") && g->nodes[i].n_out == 1 &&
        !strcmp(g->nodes[i].out_names[0], name))
      return true;
  return false;
}

/* Whether input i wants a gradient: given, and not a Constant's output. */
static bool need(ad_builder *b, const keel_node *n, int i) {
  return has_in(n, i) && !from_constant(b, n->in_names[i]);
}

static keel_status unsupported(const keel_node *n, const char *what) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "gradient of %s (ai.onnx, opset %lld): %s", n->op_type,
                  (long long)n->opset, what);
}

/* ================================================= elementwise unary */

/* dx = UnaryGrad(gy, x [, min, max]) with the forward's attributes. */
static keel_status r_unary(ad_builder *b, const keel_node *n, const char *const *gy,
                           const char **gx) {
  const char *op = n->op_type;
  if (!strcmp(op, "Gelu")) {
    const keel_attr *ap = keel_node_attr(n, "approximate");
    if (ap && ap->s && !strcmp(ap->s, "tanh")) op = "GeluTanh";
    else if (ap && ap->s && strcmp(ap->s, "none")) return unsupported(n, "approximate is not none or tanh");
  }
  bool clip = !strcmp(op, "Clip");
  const char *ins[4] = {gy[0], n->in_names[0], clip && has_in(n, 1) ? n->in_names[1] : "",
                        clip && has_in(n, 2) ? n->in_names[2] : ""};
  const char *o = ad_fresh(b, "dx");
  keel_node *m;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "UnaryGrad", AD_INTERNAL, clip ? 4 : 2, ins, 1, &o, &m));
  KEEL_TRY(ad_attr_s(b, m, "op", op));
  const char *copy[] = {"alpha", "beta", "gamma", "min", "max"};
  for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++) KEEL_TRY(ad_attr_copy(b, m, n, copy[i]));
  gx[0] = o;
  return KEEL_OK;
}

/* z = x^y: dx = gy y x^(y-1); dy = gy z log(x) where x > 0, else 0. */
static keel_status r_pow(ad_builder *b, const keel_node *n, const char *const *gy,
                         const char **gx) {
  const char *x = n->in_names[0], *y, *one, *ym1, *p, *t, *zero, *pos, *lx, *u;
  KEEL_TRY(opv(b, "CastLike", n->in_names[1], x, &y, NULL, 15));
  KEEL_TRY(ad_scalar_like(b, x, 1.0, &one));
  KEEL_TRY(op2(b, "Sub", y, one, &ym1));
  KEEL_TRY(op2(b, "Pow", x, ym1, &p));
  KEEL_TRY(op2(b, "Mul", p, y, &t));
  KEEL_TRY(op2(b, "Mul", gy[0], t, &t));
  KEEL_TRY(ad_sum_to(b, t, x, &gx[0]));
  if (!need(b, n, 1)) return KEEL_OK; /* x ** 2 and the like */
  KEEL_TRY(ad_scalar_like(b, x, 0.0, &zero));
  KEEL_TRY(op2(b, "Greater", x, zero, &pos));
  KEEL_TRY(op2(b, "Log", x, NULL, &lx));
  KEEL_TRY(op2(b, "Mul", n->out_names[0], lx, &u));
  KEEL_TRY(where(b, pos, u, zero, &u));
  KEEL_TRY(op2(b, "Mul", gy[0], u, &u));
  KEEL_TRY(ad_sum_to(b, u, n->in_names[1], &t));
  return opv(b, "CastLike", t, n->in_names[1], &gx[1], NULL, 15);
}

/* ================================================= Max, Min, Mean, Where, Cast */

/* Input i gets gy where it equals the result and no input before it did. */
static keel_status r_maxmin(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  const char *y = n->out_names[0], *taken = NULL, *zero;
  KEEL_TRY(ad_scalar_like(b, gy[0], 0.0, &zero));
  for (int32_t i = 0; i < n->n_in; i++) {
    if (!n->in_names[i][0]) continue;
    const char *eq, *mask = NULL, *nt, *g;
    KEEL_TRY(op2(b, "Equal", n->in_names[i], y, &eq));
    if (taken) {
      KEEL_TRY(op2(b, "Not", taken, NULL, &nt));
      KEEL_TRY(op2(b, "And", eq, nt, &mask));
      KEEL_TRY(op2(b, "Or", taken, eq, &taken));
    } else {
      mask = taken = eq;
    }
    if (!need(b, n, i)) continue; /* Max(x, 0) and the like */
    KEEL_TRY(where(b, mask, gy[0], zero, &g));
    KEEL_TRY(ad_sum_to(b, g, n->in_names[i], &gx[i]));
  }
  return KEEL_OK;
}

static keel_status r_mean(ad_builder *b, const keel_node *n, const char *const *gy,
                          const char **gx) {
  int32_t cnt = 0;
  for (int32_t i = 0; i < n->n_in; i++) cnt += n->in_names[i][0] != 0;
  const char *s, *g;
  KEEL_TRY(ad_scalar_like(b, gy[0], cnt ? cnt : 1, &s)); /* exact, unlike 1/cnt in float */
  KEEL_TRY(op2(b, "Div", gy[0], s, &g));
  for (int32_t i = 0; i < n->n_in; i++)
    if (need(b, n, i)) KEEL_TRY(ad_sum_to(b, g, n->in_names[i], &gx[i]));
  return KEEL_OK;
}

static keel_status r_where(ad_builder *b, const keel_node *n, const char *const *gy,
                           const char **gx) {
  const char *zero, *gxv, *gyv;
  KEEL_TRY(ad_scalar_like(b, gy[0], 0.0, &zero));
  if (need(b, n, 1)) { /* Where(mask, x, -inf) and the like: one side only */
    KEEL_TRY(where(b, n->in_names[0], gy[0], zero, &gxv));
    KEEL_TRY(ad_sum_to(b, gxv, n->in_names[1], &gx[1]));
  }
  if (!need(b, n, 2)) return KEEL_OK;
  KEEL_TRY(where(b, n->in_names[0], zero, gy[0], &gyv));
  return ad_sum_to(b, gyv, n->in_names[2], &gx[2]);
}

/* The gradient cast back to the input's type; a cast to an integer or
 * bool type is piecewise constant: no gradient. */
static keel_status r_cast(ad_builder *b, const keel_node *n, const char *const *gy,
                          const char **gx) {
  if (!strcmp(n->op_type, "Cast")) {
    int64_t to = attr_i(n, "to", 0);
    if (to != KEEL_FLOAT && to != KEEL_DOUBLE && to != KEEL_FLOAT16 && to != KEEL_BFLOAT16)
      return KEEL_OK;
  }
  return opv(b, "CastLike", gy[0], n->in_names[0], &gx[0], NULL, 15);
}

/* ============================================================ reductions */

/* Where a Reduce* node takes its axes: an input (ReduceSum 13+, the others
 * 18+), an attribute, or nowhere (all axes; or none with
 * noop_with_empty_axes, where y = f(x) elementwise as the ONNX reference
 * has it: the formulas below hold with it, the ReduceSums they emit
 * copying the attribute). */
typedef struct red_axes {
  const char *input;            /* the axes as a value name, or NULL      */
  bool all;                     /* no axes at all: every axis reduced     */
  bool keep;
} red_axes;

static keel_status red_axes_of(ad_builder *b, const keel_node *n, red_axes *r) {
  bool sum = !strcmp(n->op_type, "ReduceSum");
  bool as_input = n->opset >= (sum ? 13 : 18);
  memset(r, 0, sizeof *r);
  r->keep = attr_i(n, "keepdims", 1) != 0;
  if (as_input) {
    if (has_in(n, 1)) r->input = n->in_names[1];
  } else {
    const keel_attr *a = keel_node_attr(n, "axes");
    if (a && a->type == KEEL_ATTR_INTS && a->n > 0) KEEL_TRY(ad_const_ints(b, a->n, a->ints, &r->input));
  }
  r->all = !r->input;
  return KEEL_OK;
}

/* v (gy or y) with the reduced axes put back as 1s, so it broadcasts
 * against x. Unsqueeze's axes count in x's rank, negative ones too. */
static keel_status red_unsqueeze(ad_builder *b, const red_axes *r, const char *v, const char **out) {
  if (r->keep || r->all) {
    *out = v;
    return KEEL_OK;
  }
  return op2(b, "Unsqueeze", v, r->input, out);
}

/* ReduceSum(v, same axes, keepdims = 1). */
static keel_status red_sum_keep(ad_builder *b, const keel_node *n, const red_axes *r, const char *v,
                                const char *op, int64_t opset, const char **out) {
  keel_node *m;
  KEEL_TRY(emitv(b, op, r->input ? 2 : 1, (const char *[]){v, r->input}, out, &m, opset));
  KEEL_TRY(ad_attr_i(b, m, "keepdims", 1));
  return ad_attr_copy(b, m, n, "noop_with_empty_axes");
}

static keel_status expand_like(ad_builder *b, const char *v, const char *x, const char **out) {
  const char *s;
  KEEL_TRY(op2(b, "Shape", x, NULL, &s));
  return op2(b, "Expand", v, s, out);
}

/* ReduceMax/Min: gy split evenly among the elements equal to the result. */
static keel_status red_maxmin(ad_builder *b, const keel_node *n, const red_axes *r, const char *g,
                              const char *yu, const char **dx) {
  const char *x = n->in_names[0], *eq, *mask, *cnt, *t;
  KEEL_TRY(op2(b, "Equal", x, yu, &eq));
  KEEL_TRY(opv(b, "CastLike", eq, x, &mask, NULL, 15));
  KEEL_TRY(red_sum_keep(b, n, r, mask, "ReduceSum", 13, &cnt));
  KEEL_TRY(op2(b, "Div", g, cnt, &t));
  return op2(b, "Mul", mask, t, dx);
}

/* ReduceProd: the product of the other elements, zeros included: with no
 * zero in the slice P/x; with one zero, P' (the product of the non-zeros)
 * at the zero and 0 elsewhere; with more, 0. */
static keel_status red_prod(ad_builder *b, const keel_node *n, const red_axes *r, const char *g,
                            const char **dx) {
  const char *x = n->in_names[0], *zero, *one, *z, *zf, *nz, *xnz, *p, *t0, *t1, *c0, *c1, *t;
  KEEL_TRY(ad_scalar_like(b, x, 0.0, &zero));
  KEEL_TRY(ad_scalar_like(b, x, 1.0, &one));
  KEEL_TRY(op2(b, "Equal", x, zero, &z));
  KEEL_TRY(opv(b, "CastLike", z, x, &zf, NULL, 15));
  KEEL_TRY(red_sum_keep(b, n, r, zf, "ReduceSum", 13, &nz));
  KEEL_TRY(where(b, z, one, x, &xnz));
  KEEL_TRY(red_sum_keep(b, n, r, xnz, "ReduceProd", 18, &p));
  KEEL_TRY(op2(b, "Equal", nz, zero, &c0));
  KEEL_TRY(op2(b, "Div", p, xnz, &t0));
  KEEL_TRY(where(b, c0, t0, zero, &t0));
  KEEL_TRY(op2(b, "Equal", nz, one, &c1));
  KEEL_TRY(where(b, c1, p, zero, &t1));
  KEEL_TRY(where(b, z, t1, t0, &t));
  return op2(b, "Mul", g, t, dx);
}

/* dx for one Reduce* given g = gy and yu = y, both shaped to broadcast. */
static keel_status red_local(ad_builder *b, const keel_node *n, const red_axes *r, const char *g,
                             const char *yu, const char **dx) {
  const char *op = n->op_type + 6, *x = n->in_names[0], *t, *u;
  if (!strcmp(op, "Sum")) return expand_like(b, g, x, dx);
  if (!strcmp(op, "Mean")) {
    KEEL_TRY(op2(b, "Size", n->out_names[0], NULL, &t));
    KEEL_TRY(opv(b, "CastLike", t, x, &t, NULL, 15));
    KEEL_TRY(op2(b, "Size", x, NULL, &u));
    KEEL_TRY(opv(b, "CastLike", u, x, &u, NULL, 15));
    KEEL_TRY(op2(b, "Div", t, u, &t));
    KEEL_TRY(op2(b, "Mul", g, t, &t));
    return expand_like(b, t, x, dx);
  }
  if (!strcmp(op, "Max") || !strcmp(op, "Min")) return red_maxmin(b, n, r, g, yu, dx);
  if (!strcmp(op, "Prod")) return red_prod(b, n, r, g, dx);
  if (!strcmp(op, "L1")) {
    KEEL_TRY(op2(b, "Sign", x, NULL, &t));
    return op2(b, "Mul", g, t, dx);
  }
  if (!strcmp(op, "L2")) {
    const char *zero, *c;
    KEEL_TRY(ad_scalar_like(b, x, 0.0, &zero));
    KEEL_TRY(op2(b, "Equal", yu, zero, &c));
    KEEL_TRY(op2(b, "Div", x, yu, &t));
    KEEL_TRY(where(b, c, zero, t, &t));
    return op2(b, "Mul", g, t, dx);
  }
  if (!strcmp(op, "LogSumExp")) {
    KEEL_TRY(op2(b, "Sub", x, yu, &t));
    KEEL_TRY(op2(b, "Exp", t, NULL, &t));
    return op2(b, "Mul", g, t, dx);
  }
  if (!strcmp(op, "LogSum")) {
    KEEL_TRY(op2(b, "Exp", yu, NULL, &t));
    KEEL_TRY(op2(b, "Div", g, t, &t));
    return expand_like(b, t, x, dx);
  }
  /* SumSquare */
  KEEL_TRY(ad_scalar_like(b, x, 2.0, &t));
  KEEL_TRY(op2(b, "Mul", x, t, &t));
  return op2(b, "Mul", g, t, dx);
}

static keel_status r_reduce(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  red_axes r;
  KEEL_TRY(red_axes_of(b, n, &r));
  const char *g, *yu;
  KEEL_TRY(red_unsqueeze(b, &r, gy[0], &g));
  KEEL_TRY(red_unsqueeze(b, &r, n->out_names[0], &yu));
  return red_local(b, n, &r, g, yu, &gx[0]);
}

/* ========================================================= softmax */

/* ReduceSum(v, [axis], keepdims = 1). */
static keel_status sum_axis(ad_builder *b, const char *v, int64_t axis, const char **out) {
  const char *ax;
  keel_node *m;
  KEEL_TRY(ad_const_ints(b, 1, &axis, &ax));
  KEEL_TRY(emitv(b, "ReduceSum", 2, (const char *[]){v, ax}, out, &m, 13));
  return ad_attr_i(b, m, "keepdims", 1);
}

static keel_status flatten(ad_builder *b, const char *v, int64_t axis, const char **out) {
  keel_node *m;
  KEEL_TRY(opv(b, "Flatten", v, NULL, out, &m, 13));
  return ad_attr_i(b, m, "axis", axis);
}

/* Softmax: y (g - sum(g y)); LogSoftmax: g - exp(y) sum(g). Before opset
 * 13 both work on x flattened to 2-D around axis (default 1). */
static keel_status r_softmax(ad_builder *b, const keel_node *n, const char *const *gy,
                             const char **gx) {
  bool logsm = !strcmp(n->op_type, "LogSoftmax"), old = n->opset < 13;
  int64_t axis = attr_i(n, "axis", old ? 1 : -1);
  const char *y = n->out_names[0], *g = gy[0], *t, *s;
  if (old) {
    KEEL_TRY(flatten(b, y, axis, &y));
    KEEL_TRY(flatten(b, g, axis, &g));
  }
  if (logsm) {
    KEEL_TRY(sum_axis(b, g, old ? 1 : axis, &s));
    KEEL_TRY(op2(b, "Exp", y, NULL, &t));
    KEEL_TRY(op2(b, "Mul", t, s, &t));
    KEEL_TRY(op2(b, "Sub", g, t, &t));
  } else {
    KEEL_TRY(op2(b, "Mul", g, y, &t));
    KEEL_TRY(sum_axis(b, t, old ? 1 : axis, &s));
    KEEL_TRY(op2(b, "Sub", g, s, &t));
    KEEL_TRY(op2(b, "Mul", y, t, &t));
  }
  if (!old) {
    gx[0] = t;
    return KEEL_OK;
  }
  KEEL_TRY(op2(b, "Shape", n->in_names[0], NULL, &s));
  return op2(b, "Reshape", t, s, &gx[0]);
}

/* ============================================================ losses */

/* NegativeLogLikelihoodLossGrad(g, x, target [, weight]) with the
 * forward's reduction and ignore_index: d loss / d x. */
static keel_status nll_grad(ad_builder *b, const keel_node *n, const char *g, const char *x,
                            const char **out) {
  const char *ins[4] = {g, x, n->in_names[1], has_in(n, 2) ? n->in_names[2] : ""};
  const char *o = ad_fresh(b, "dx");
  keel_node *m;
  if (!o) return ad_oom();
  KEEL_TRY(ad_emit(b, "NegativeLogLikelihoodLossGrad", AD_INTERNAL, has_in(n, 2) ? 4 : 3, ins, 1,
                   &o, &m));
  KEEL_TRY(ad_attr_copy(b, m, n, "reduction"));
  KEEL_TRY(ad_attr_copy(b, m, n, "ignore_index"));
  *out = o;
  return KEEL_OK;
}

static keel_status r_nll(ad_builder *b, const keel_node *n, const char *const *gy,
                         const char **gx) {
  return nll_grad(b, n, gy[0], n->in_names[0], &gx[0]);
}

/* SoftmaxCrossEntropyLoss = NLL(LogSoftmax(scores, axis 1)): the loss's
 * gradient (and log_prob's, when it has one) goes through LogSoftmax. */
static keel_status r_sce(ad_builder *b, const keel_node *n, const char *const *gy,
                         const char **gx) {
  const char *lp = n->n_out > 1 && n->out_names[1][0] ? n->out_names[1] : NULL, *d = NULL, *t, *s;
  if (!lp) {
    keel_node *m;
    KEEL_TRY(opv(b, "LogSoftmax", n->in_names[0], NULL, &lp, &m, 13));
    KEEL_TRY(ad_attr_i(b, m, "axis", 1));
  }
  if (gy[0]) KEEL_TRY(nll_grad(b, n, gy[0], lp, &d));
  if (n->n_out > 1 && gy[1]) {
    if (d) KEEL_TRY(op2(b, "Add", d, gy[1], &d));
    else d = gy[1];
  }
  KEEL_TRY(sum_axis(b, d, 1, &s));
  KEEL_TRY(op2(b, "Exp", lp, NULL, &t));
  KEEL_TRY(op2(b, "Mul", t, s, &t));
  return op2(b, "Sub", d, t, &gx[0]);
}

/* ============================================================ products */

/* MatMul of any rank: MatMulGrad does op(A)/op(B) and the batch sums. */
static keel_status r_matmul(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  const char *outs[2] = {need(b, n, 0) ? ad_fresh(b, "dA") : "", need(b, n, 1) ? ad_fresh(b, "dB") : ""};
  const char *ins[3] = {gy[0], n->in_names[0], n->in_names[1]};
  if (!outs[0] || !outs[1]) return ad_oom();
  KEEL_TRY(ad_emit(b, "MatMulGrad", AD_INTERNAL, 3, ins, 2, outs, NULL));
  gx[0] = outs[0][0] ? outs[0] : NULL; /* an omitted output is not computed */
  gx[1] = outs[1][0] ? outs[1] : NULL;
  return KEEL_OK;
}

static keel_status gemm(ad_builder *b, const char *a, const char *bb, bool ta, bool tb,
                        float alpha, const char **out) {
  keel_node *m;
  KEEL_TRY(opv(b, "Gemm", a, bb, out, &m, 13));
  if (ta) KEEL_TRY(ad_attr_i(b, m, "transA", 1));
  if (tb) KEEL_TRY(ad_attr_i(b, m, "transB", 1));
  return alpha != 1.0f ? ad_attr_f(b, m, "alpha", alpha) : KEEL_OK;
}

/* Y = alpha op(A) op(B) + beta C: d op(A) = alpha gy op(B)^T and
 * d op(B) = alpha op(A)^T gy, each one Gemm with the transposes folded in;
 * dC = beta gy summed to C's shape. */
static keel_status r_gemm(ad_builder *b, const keel_node *n, const char *const *gy,
                          const char **gx) {
  bool ta = attr_i(n, "transA", 0) != 0, tb = attr_i(n, "transB", 0) != 0;
  float alpha = attr_f(n, "alpha", 1.0f), beta = attr_f(n, "beta", 1.0f);
  const char *A = n->in_names[0], *B = n->in_names[1], *g = gy[0];
  if (need(b, n, 0) && !ta) KEEL_TRY(gemm(b, g, B, false, !tb, alpha, &gx[0]));
  else if (need(b, n, 0)) KEEL_TRY(gemm(b, B, g, tb, true, alpha, &gx[0]));
  if (need(b, n, 1) && !tb) KEEL_TRY(gemm(b, A, g, !ta, false, alpha, &gx[1]));
  else if (need(b, n, 1)) KEEL_TRY(gemm(b, g, A, true, ta, alpha, &gx[1]));
  if (!need(b, n, 2)) return KEEL_OK;
  const char *t = g;
  if (beta != 1.0f) {
    const char *s;
    KEEL_TRY(ad_scalar_like(b, g, beta, &s));
    KEEL_TRY(op2(b, "Mul", g, s, &t));
  }
  return ad_sum_to(b, t, n->in_names[2], &gx[2]);
}

/* ============================================================ Einsum */

/* One operand's subscripts: letters, '*' for the ellipsis. */
#define EIN_MAX 64
typedef struct ein_eq {
  int n_ops;
  char sub[EIN_MAX + 1][KEEL_MAX_RANK + 2]; /* operands, then the output   */
} ein_eq;

static keel_status ein_operand(const keel_node *n, const char *s, size_t len, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == ' ') continue;
    if (s[i] == '.') {
      if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.' || strchr(out, '*'))
        return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: a bad '...' in the equation");
      i += 2;
      out[k++] = '*';
    } else if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')) {
      if (memchr(out, s[i], k)) return unsupported(n, "a letter repeated in one operand (a diagonal)");
      out[k++] = s[i];
    } else {
      return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: '%c' in the equation", s[i]);
    }
    if (k > KEEL_MAX_RANK) return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: an operand of too many indices");
    out[k] = 0;
  }
  out[k] = 0;
  return KEEL_OK;
}

/* The implicit output: '*' when any operand has one, then the letters used
 * exactly once, in ASCII order. */
static void ein_implicit(ein_eq *e) {
  char *o = e->sub[e->n_ops];
  int cnt[128] = {0}, k = 0;
  bool ell = false;
  for (int i = 0; i < e->n_ops; i++)
    for (const char *c = e->sub[i]; *c; c++) {
      if (*c == '*') ell = true;
      else cnt[(int)*c]++;
    }
  if (ell) o[k++] = '*';
  for (int c = 'A'; c <= 'z'; c++)
    if (cnt[c] == 1 && k <= KEEL_MAX_RANK) o[k++] = (char)c;
  o[k] = 0;
}

static keel_status ein_parse(const keel_node *n, ein_eq *e) {
  const keel_attr *a = keel_node_attr(n, "equation");
  if (!a || !a->s) return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum without an equation");
  const char *s = a->s, *arrow = strstr(s, "->"), *end = arrow ? arrow : s + strlen(s);
  memset(e, 0, sizeof *e);
  for (const char *p = s;; e->n_ops++) {
    const char *q = memchr(p, ',', (size_t)(end - p));
    if (e->n_ops >= EIN_MAX) return unsupported(n, "more than 64 operands");
    KEEL_TRY(ein_operand(n, p, (size_t)((q ? q : end) - p), e->sub[e->n_ops]));
    if (!q) break;
    p = q + 1;
  }
  e->n_ops++;
  if (e->n_ops != n->n_in)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Einsum: %d operands in the equation, %d inputs", e->n_ops, n->n_in);
  if (arrow) return ein_operand(n, arrow + 2, strlen(arrow + 2), e->sub[e->n_ops]);
  ein_implicit(e);
  return KEEL_OK;
}

static void ein_append(char *eq, size_t cap, const char *sub) {
  size_t k = strlen(eq);
  for (const char *c = sub; *c && k + 4 < cap; c++) {
    if (*c == '*') {
      memcpy(eq + k, "...", 3);
      k += 3;
    } else {
      eq[k++] = *c;
    }
  }
  eq[k] = 0;
}

/* Whether letter c occurs in the output or in an operand other than k. */
static bool ein_elsewhere(const ein_eq *e, int k, char c) {
  for (int i = 0; i <= e->n_ops; i++)
    if (i != k && strchr(e->sub[i], c)) return true;
  return false;
}

/* d operand k = Einsum(gy, the others -> k's indices found elsewhere),
 * the indices found nowhere else put back by Unsqueeze + Expand, and
 * broadcast ellipsis dims summed away. */
static keel_status ein_grad(ad_builder *b, const keel_node *n, const ein_eq *e, int k,
                            const char *g, const char **out) {
  const char *sk = e->sub[k], *ins[EIN_MAX + 1], *r;
  char eq[1024] = "", kept[KEEL_MAX_RANK + 2] = "";
  int64_t axes[KEEL_MAX_RANK + 1];
  int n_ins = 0, n_miss = 0, len = (int)strlen(sk);
  const char *ell = strchr(sk, '*');
  ins[n_ins++] = g;
  ein_append(eq, sizeof eq, e->sub[e->n_ops]);
  for (int i = 0; i < e->n_ops; i++) {
    if (i == k) continue;
    ins[n_ins++] = n->in_names[i];
    strcat(eq, ",");
    ein_append(eq, sizeof eq, e->sub[i]);
  }
  int q = 0;
  if (!ell && ein_elsewhere(e, k, '*')) kept[q++] = '*'; /* summed by ad_sum_to */
  for (int p = 0; p < len; p++) {
    if (ein_elsewhere(e, k, sk[p])) {
      kept[q++] = sk[p], kept[q] = 0;
    } else if (sk[p] == '*') {
      if (p) return unsupported(n, "an ellipsis only one operand has, after its first index");
    } else {
      axes[n_miss++] = ell && sk + p > ell ? p - len : p;
    }
  }
  strcat(eq, "->");
  ein_append(eq, sizeof eq, kept);
  keel_node *m;
  KEEL_TRY(emitv(b, "Einsum", n_ins, ins, &r, &m, 12));
  KEEL_TRY(ad_attr_s(b, m, "equation", eq));
  bool dropped_ell = ell && !strchr(kept, '*');
  if (n_miss || dropped_ell) {
    const char *ax;
    if (n_miss) {
      KEEL_TRY(ad_const_ints(b, n_miss, axes, &ax));
      KEEL_TRY(op2(b, "Unsqueeze", r, ax, &r));
    }
    KEEL_TRY(expand_like(b, r, n->in_names[k], &r));
  }
  if (strchr(kept, '*')) return ad_sum_to(b, r, n->in_names[k], out);
  *out = r;
  return KEEL_OK;
}

static keel_status r_einsum(ad_builder *b, const keel_node *n, const char *const *gy,
                            const char **gx) {
  ein_eq e;
  KEEL_TRY(ein_parse(n, &e));
  for (int k = 0; k < e.n_ops; k++)
    if (need(b, n, k)) KEEL_TRY(ein_grad(b, n, &e, k, gy[0], &gx[k]));
  return KEEL_OK;
}

/* ============================================================== table */

#define UN(op) {op, "", 1, r_unary, 1}
#define RED(op) {op, "", 1, r_reduce, 1}
#define NONE(op) {op, "", 0, NULL}
const ad_rule ad_rules_math[] = {
    UN("Sqrt"), UN("Reciprocal"), UN("Abs"), UN("Erf"), UN("Sin"), UN("Cos"), UN("Softsign"),
    UN("Elu"), UN("Selu"), UN("LeakyRelu"), UN("Gelu"), UN("Clip"), UN("HardSigmoid"),
    UN("HardSwish"), UN("Softplus"), UN("Mish"),
    {"Pow", "", AD_ALL, r_pow, 2},
    {"Max", "", AD_ALL, r_maxmin, 1},
    {"Min", "", AD_ALL, r_maxmin, 1},
    {"Mean", "", AD_ALL, r_mean, 1},
    {"Where", "", 6, r_where, 3},
    {"Cast", "", 1, r_cast, 1},
    {"CastLike", "", 1, r_cast, 1},
    RED("ReduceSum"), RED("ReduceMean"), RED("ReduceMax"), RED("ReduceMin"), RED("ReduceProd"),
    RED("ReduceL1"), RED("ReduceL2"), RED("ReduceLogSumExp"), RED("ReduceLogSum"),
    RED("ReduceSumSquare"),
    {"Softmax", "", 1, r_softmax, 1},
    {"LogSoftmax", "", 1, r_softmax, 1},
    {"SoftmaxCrossEntropyLoss", "", 1, r_sce, 2},
    {"NegativeLogLikelihoodLoss", "", 1, r_nll, 2},
    {"MatMul", "", AD_ALL, r_matmul, 2},
    {"Gemm", "", AD_ALL, r_gemm, 2},
    {"Einsum", "", AD_ALL, r_einsum, 1},
    NONE("Floor"), NONE("Ceil"), NONE("Round"), NONE("Sign"),
    {0},
};
