/* shape_rules.h: what shapes.c (the walk, the algebra) and shape_rules.c
 * (the per-op rules) share. Not for other rooms: they use shapes.h. */
#ifndef KEEL_SHAPE_RULES_H
#define KEEL_SHAPE_RULES_H

#include "ir/shapes.h"

/* ------------------------------------------------------ dim algebra */

static inline keel_sdim keel_sd_known(int64_t v) { return (keel_sdim){KEEL_SYM_KNOWN, 1, 1, v}; }
static inline keel_sdim keel_sd_unknown(void) { return (keel_sdim){KEEL_SYM_UNKNOWN, 1, 1, 0}; }
static inline keel_sdim keel_sd_sym(int32_t s) { return (keel_sdim){s, 1, 1, 0}; }
static inline bool keel_sd_isk(keel_sdim d) { return d.sym == KEEL_SYM_KNOWN; }
static inline bool keel_sd_is(keel_sdim d, int64_t v) { return d.sym == KEEL_SYM_KNOWN && d.add == v; }
static inline bool keel_sd_unk(keel_sdim d) { return d.sym == KEEL_SYM_UNKNOWN; }
/* Equal for every binding of the symbols (unknown equals nothing). */
KEEL_INTERNAL bool keel_sd_eq(keel_sdim a, keel_sdim b);
KEEL_INTERNAL keel_sdim keel_sd_add(keel_sdim a, keel_sdim b);
KEEL_INTERNAL keel_sdim keel_sd_sub(keel_sdim a, keel_sdim b);
KEEL_INTERNAL keel_sdim keel_sd_mul(keel_sdim a, keel_sdim b);
/* a / b for dims (b a known positive integer; a symbol's division is taken
 * as exact, an integer's is floor); unknown otherwise. */
KEEL_INTERNAL keel_sdim keel_sd_div(keel_sdim a, keel_sdim b);
/* The broadcast of two dims (ONNX multidirectional): 1 gives the other;
 * equal dims themselves; a known dim other than 1 against an unknown one
 * that dim; else unknown. */
KEEL_INTERNAL keel_sdim keel_sd_bcast(keel_sdim a, keel_sdim b);

/* ------------------------------------------------------- rule context */

typedef struct keel_shape_ctx {
  keel_shapes *S;
  const keel_model *m;
  const keel_graph *g;
  const keel_node *n;
  int64_t opset;
  const keel_sshape *const *in; /* n->n_in entries; NULL: omitted or unknown */
  keel_sshape *out;             /* n->n_out entries, unknown on entry        */
} keel_shape_ctx;

/* A fresh symbol owned by graph g (named after what made it). */
KEEL_INTERNAL keel_sdim keel_shapes_fresh(keel_shapes *S, const keel_graph *g, const char *what);

/* The constant tensor input i is, or NULL. */
KEEL_INTERNAL const keel_tensor *keel_shape_const_in(const keel_shape_ctx *c, int32_t i);

/* Infers node c->n's outputs. false: no rule for the op (outputs stay
 * unknown). Control flow (If, Loop, Scan) is shapes.c's. */
KEEL_INTERNAL bool keel_shape_rule(keel_shape_ctx *c);

/* Sets node c->n's output element types that its shape rule left unknown
 * (dtype_rules.c). */
KEEL_INTERNAL void keel_dtype_rule(keel_shape_ctx *c);

/* A value of rank r with every dim unknown; one with the given dims. */
KEEL_INTERNAL void keel_ss_rank(keel_sshape *v, int32_t r);
KEEL_INTERNAL void keel_ss_unknown(keel_sshape *v);
/* A constant's shape, and its element values when it is a small integer
 * list (at most KEEL_SHAPE_MAXV elements, rank 0 or 1). */
KEEL_INTERNAL void keel_ss_from_tensor(keel_sshape *v, const keel_tensor *t);

#endif
