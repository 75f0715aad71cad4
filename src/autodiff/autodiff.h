/* autodiff.h: what a derivative rule sees. The driver (autodiff/autodiff.c) walks
 * the region between the variables and y in reverse and, for every node a
 * gradient reaches, calls the node's rule; rules live in tables, one per
 * family file (grad_*.c), listed in autodiff/grad_rules.c.
 *
 * A rule emits ordinary nodes (by value name, before ir/scope.c resolves
 * names) through the builder below and says which gradient value belongs
 * to which input of the forward node. The driver sums contributions to a
 * value used more than once. Rules reduce broadcast operands themselves
 * (ad_sum_to). Helper kernels that ONNX lacks live in the domain
 * "ai.keel.internal" (AD_INTERNAL): each op's beside its forward kernel
 * (ops/<family>/..._backward.c), those of no one op in ops/training/.
 */
#ifndef KEEL_AUTODIFF_H
#define KEEL_AUTODIFF_H

#include "ir/ir.h"

#define AD_INTERNAL "ai.keel.internal"
#define AD_TRAINING "ai.onnx.preview.training"

typedef struct ad_builder ad_builder;

/* gy[k]: the gradient reaching output k of n (NULL: none reaches it; at
 * least one is set). gx[i] starts NULL; the rule sets it to the name of
 * the gradient of input i, shaped as input i, or leaves it NULL (no
 * gradient: a non-differentiable input). Values are named as in n. */
typedef keel_status (*ad_rule_fn)(ad_builder *b, const keel_node *n, const char *const *gy,
                                  const char **gx);

#define AD_ALL UINT64_MAX
typedef struct ad_rule {
  const char *op;              /* op_type                                  */
  const char *domain;          /* "" for ai.onnx                           */
  uint64_t diff;               /* bit i: a gradient can flow to input i    */
  ad_rule_fn fn;               /* NULL: no gradient flows (Shape, argmax)  */
  int32_t min_in;              /* inputs the rule reads (checked first)    */
} ad_rule;

/* The rule for (op, domain), or NULL when there is none. */
KEEL_INTERNAL const ad_rule *ad_rule_find(const char *op, const char *domain);

/* ---------------------------------------------------------- builder */

/* A fresh value name, unique in the model ("<hint>" for reading). */
KEEL_INTERNAL const char *ad_fresh(ad_builder *b, const char *hint);
/* Appends a node; `ins`/`outs` are name arrays ("" = omitted). The node
 * gets the model's ai.onnx opset (1 for other domains); set made->opset
 * to use a newer version of an op. */
KEEL_INTERNAL keel_status ad_emit(ad_builder *b, const char *op, const char *domain, int nin,
                                  const char *const *ins, int nout, const char *const *outs,
                                  keel_node **made);
/* *out = op(a) or op(a, bb) (bb NULL: one input), a one-output node with a
 * fresh output name; `made` (may be NULL) gets the node for attributes. */
KEEL_INTERNAL keel_status ad_op(ad_builder *b, const char *op, const char *domain, const char *a,
                                const char *bb, const char **out, keel_node **made);
/* *out = op(ins[0..nin)), an ai.onnx node with one fresh output at opset
 * min_opset or the model's, whichever is newer (for an op whose inputs or
 * attributes moved at min_opset); `made` may be NULL. */
KEEL_INTERNAL keel_status ad_op_at(ad_builder *b, const char *op, int nin, const char *const *ins,
                                   int64_t min_opset, const char **out, keel_node **made);
/* Attributes on a node made by ad_emit/ad_op. */
KEEL_INTERNAL keel_status ad_attr_i(ad_builder *b, keel_node *n, const char *name, int64_t v);
KEEL_INTERNAL keel_status ad_attr_f(ad_builder *b, keel_node *n, const char *name, float v);
KEEL_INTERNAL keel_status ad_attr_s(ad_builder *b, keel_node *n, const char *name, const char *v);
KEEL_INTERNAL keel_status ad_attr_ints(ad_builder *b, keel_node *n, const char *name, int32_t count,
                                       const int64_t *v);
KEEL_INTERNAL keel_status ad_attr_floats(ad_builder *b, keel_node *n, const char *name,
                                         int32_t count, const float *v);
/* Copies attribute `name` of `from` to n when `from` has it. */
KEEL_INTERNAL keel_status ad_attr_copy(ad_builder *b, keel_node *n, const keel_node *from,
                                       const char *name);
/* A 1-D int64 constant (a Constant node). */
KEEL_INTERNAL keel_status ad_const_ints(ad_builder *b, int32_t count, const int64_t *v,
                                        const char **out);
/* A scalar of value v with the element type of value `like`. */
KEEL_INTERNAL keel_status ad_scalar_like(ad_builder *b, const char *like, double v,
                                         const char **out);
/* g summed down to the shape of x (undoes broadcasting). */
KEEL_INTERNAL keel_status ad_sum_to(ad_builder *b, const char *g, const char *x, const char **out);

KEEL_INTERNAL keel_arena *ad_arena(ad_builder *b);
KEEL_INTERNAL keel_model *ad_model(ad_builder *b);
KEEL_INTERNAL keel_graph *ad_graph(ad_builder *b);   /* where nodes are emitted */
KEEL_INTERNAL keel_status ad_oom(void);

/* Rule tables (a {0}-terminated array per family file). */
extern const ad_rule ad_rules_basic[];
extern const ad_rule ad_rules_shape[];
extern const ad_rule ad_rules_math[];
extern const ad_rule ad_rules_nn[];

#endif /* KEEL_AUTODIFF_H */
