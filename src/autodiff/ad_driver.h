/* ad_driver.h: what the autodiff driver (autodiff/autodiff.c) offers the rules
 * for control flow (autodiff/grad_control.c), which differentiate sub-graphs by
 * calling the driver again on them.
 *
 * A region is differentiated into the graph a builder emits into. For the
 * Gradient node's own graph that is the graph itself; for a sub-graph it is
 * a new graph (the backward branch or body), registered in m->graphs like
 * those the loader reads, whose nodes read the forward sub-graph's values
 * by name: the control rule makes those values reach it (extra outputs of
 * the forward If or Loop) and defines them in the new graph.
 */
#ifndef KEEL_AD_DRIVER_H
#define KEEL_AD_DRIVER_H

#include "autodiff/autodiff.h"

/* A set of value names (insertion order, no duplicates). */
typedef struct ad_names {
  const char **v;
  int32_t n, cap;
} ad_names;

KEEL_INTERNAL keel_status ad_names_add(ad_names *s, const char *name);
KEEL_INTERNAL bool ad_names_has(const ad_names *s, const char *name);
KEEL_INTERNAL void ad_names_free(ad_names *s);

/* Names graph g reads (at any depth below it) that it does not define
 * itself: its captures. Appended to *out. */
KEEL_INTERNAL keel_status ad_graph_free(const keel_graph *g, ad_names *out);
/* The captures of n's sub-graphs. */
KEEL_INTERNAL keel_status ad_node_free(const keel_node *n, ad_names *out);
/* Whether g defines `name` as an input or a node output (not a constant). */
KEEL_INTERNAL bool ad_graph_defines(const keel_graph *g, const char *name);

/* In the region a rule is called from: whether `name` depends on one of
 * its variables, and adding a gradient contribution to any value. */
KEEL_INTERNAL bool ad_active(ad_builder *b, const char *name);
KEEL_INTERNAL keel_status ad_grad_add(ad_builder *b, const char *name, const char *g);
/* The same for a contribution that exists only when the bool value `reach`
 * is true (NULL: always), on top of when the rule's own node is reached
 * (autodiff.c, gmap). */
KEEL_INTERNAL keel_status ad_grad_add_reach(ad_builder *b, const char *name, const char *g,
                                            const char *reach);
/* Whether `name` of graph x depends on one of vars (through inputs that
 * take gradients and sub-graph captures). */
KEEL_INTERNAL keel_status ad_depends(ad_builder *b, keel_graph *x, const char *const *vars,
                                     int32_t n_vars, const char *name, bool *out);

/* Names that hold a Loop's tape (a sequence of saved values), so that an
 * enclosing Loop saving one saves it as a tape (grad_control.c). */
KEEL_INTERNAL keel_status ad_tape_mark(ad_builder *b, const char *name);
KEEL_INTERNAL bool ad_tape_is(ad_builder *b, const char *name);

/* A new empty graph, child of the graph b emits into, held by a node b will
 * emit (label names it in the path: "<b's graph>/<label>/<attr>"). */
KEEL_INTERNAL keel_status ad_new_graph(ad_builder *b, const char *label, const char *attr,
                                       keel_graph **out);
/* Graph inputs and outputs (names copied; types unknown, or `in_types`). */
KEEL_INTERNAL keel_status ad_graph_set_io(ad_builder *b, keel_graph *g, int32_t n_in,
                                          const char *const *ins, int32_t n_out,
                                          const char *const *outs);
/* One more output of g (type copied when given). */
KEEL_INTERNAL keel_status ad_graph_add_output(ad_builder *b, keel_graph *g, const char *name,
                                              const keel_type *t);
/* One more output of node n. */
KEEL_INTERNAL keel_status ad_node_add_output(ad_builder *b, keel_node *n, const char *name);
/* dst sees src's initializers and folded Constants as its own (a
 * backward graph reads the forward graph's constants by name). */
KEEL_INTERNAL void ad_graph_share_inits(keel_graph *dst, const keel_graph *src);
/* Attribute holding graph g; g becomes one of n's sub-graphs. */
KEEL_INTERNAL keel_status ad_attr_graph(ad_builder *b, keel_node *n, const char *name,
                                        keel_graph *g);

/* A builder emitting into graph g (a new graph or an existing one). */
KEEL_INTERNAL keel_status ad_sub_open(ad_builder *parent, keel_graph *g, ad_builder **sub);
/* Adds the nodes emitted (after g's nodes; `front`: before them) to g. */
KEEL_INTERNAL keel_status ad_sub_install(ad_builder *sub, bool front);
KEEL_INTERNAL void ad_sub_close(ad_builder *sub);
/* Emits into sub the backward of forward graph x: the gradients of vars
 * (x's inputs or its captures) given gradients sgrads (names of sub's
 * graph, NULL: none) reaching x's values seeds. grads[i]: the gradient of
 * vars[i], or NULL when none reaches it; reaches (may be NULL): reaches[i]
 * NULL when grads[i] exists whenever the seeds' gradients do, else the
 * name of a bool value of sub's graph that says whether it does. */
KEEL_INTERNAL keel_status ad_sub_backward(ad_builder *sub, keel_graph *x, const char *const *vars,
                                          int32_t n_vars, const char *const *seeds,
                                          const char *const *sgrads, int32_t n_seeds,
                                          const char **grads, const char **reaches);

/* grad_control.c: If, Loop and Scan. Which explicit inputs take gradients,
 * and the rule itself (n is the forward node, which the rule may extend). */
KEEL_INTERNAL bool ad_control_diff(const keel_node *n, int32_t i);
KEEL_INTERNAL keel_status ad_control_vjp(ad_builder *b, keel_node *n, const char *const *gy);
/* The tape ops (ops/training/tape.c): no gradient flows through them. */
extern const ad_rule ad_rules_control[];

#endif /* KEEL_AD_DRIVER_H */
