/* shapes.h: symbolic shape inference over a whole model (shapes.c, the
 * walk and the dim algebra; shape_rules.c, one rule per op family).
 *
 * Every tensor value gets its element type where the op's definition fixes
 * it (dtype_rules.c) and a rank where it can be known and, per axis, a dim
 * that is an integer, a symbol with simple arithmetic (T, T+1, 2*T, T/8
 * where the division is exact), or unknown. Symbols come from the graph
 * inputs' dim_params (or a fresh symbol per unnamed dim), from
 * data-dependent outputs (NonZero, a Loop's trip count, an If whose
 * branches disagree) and from Loop-carried values whose dims change from
 * one iteration to the next (a symbol of the body). Small integer tensors
 * (shapes, axes, pads: at most KEEL_SHAPE_MAXV elements) carry their
 * element values the same way, so Shape -> Gather -> Concat -> Reshape
 * chains keep their symbols.
 *
 * It works on names, so it runs between any two passes (the sharding pass
 * uses it) as well as after them (keel info --shapes, the session's shape
 * check, KEEL_CHECK_SHAPES). A value it cannot infer is unknown, never
 * guessed: where a result depends on runtime data (a clamp that may or may
 * not apply, a broadcast of two different symbols) the dim is unknown.
 * Declared graph-input shapes are taken as facts; a run whose inputs
 * disagree with them is outside what the inference describes.
 */
#ifndef KEEL_SHAPES_H
#define KEEL_SHAPES_H

#include "ir/ir.h"

#define KEEL_SHAPE_MAXV (2 * KEEL_MAX_RANK) /* element values kept (Pad's pads) */
#define KEEL_SYM_KNOWN (-1)
#define KEEL_SYM_UNKNOWN (-2)

/* sym == KEEL_SYM_KNOWN: the integer `add`; sym >= 0: sym * mul / div + add
 * (mul, div > 0, coprime; an exact division); KEEL_SYM_UNKNOWN: unknown. */
typedef struct keel_sdim {
  int32_t sym;
  int32_t mul, div;
  int64_t add;
} keel_sdim;

typedef struct keel_sshape {
  int32_t dtype;               /* element type (keel_dtype); 0: unknown    */
  int32_t rank;                /* -1: unknown (or not a tensor)            */
  int32_t nv;                  /* element values known: numel, else -1    */
  keel_sdim d[KEEL_MAX_RANK];
  keel_sdim v[KEEL_SHAPE_MAXV];
} keel_sshape;

typedef struct keel_shapes keel_shapes;

/* Infers every value of every graph of m (sys memory; keel_shapes_free). */
KEEL_INTERNAL keel_status keel_shapes_infer(const keel_model *m, keel_shapes **out);
/* The same with every dim of every graph input a symbol of its own
 * ("input.i"), whatever its declared type says (integers and dim_params
 * shared by several inputs ignored): what it infers holds for every run
 * whose nodes succeed, whatever shapes the inputs have. For rewrites that
 * must stay exact when the inputs disagree with their declarations. */
KEEL_INTERNAL keel_status keel_shapes_infer_general(const keel_model *m, keel_shapes **out);
KEEL_INTERNAL void keel_shapes_free(keel_shapes *s);

/* The shape of `name` as seen from graph g (outer graphs searched as the
 * scope rules do), or NULL when no value of that name was inferred. */
KEEL_INTERNAL const keel_sshape *keel_shapes_find(const keel_shapes *s, const keel_graph *g,
                                                  const char *name);

/* Symbols: how many, each one's name and the graph that owns it (its value
 * is fixed for one run of that graph: the main graph's for a whole run). */
KEEL_INTERNAL int32_t keel_shapes_n_syms(const keel_shapes *s);
KEEL_INTERNAL const char *keel_shapes_sym_name(const keel_shapes *s, int32_t sym);
KEEL_INTERNAL int32_t keel_shapes_sym_graph(const keel_shapes *s, int32_t sym);

/* "[B, T+1, 768]", "[?, 4]", "rank ?" into buf; returns buf. */
KEEL_INTERNAL const char *keel_sshape_text(const keel_shapes *s, const keel_sshape *v, char *buf,
                                           size_t cap);

/* Two dims known to be equal: the same integer, or the same expression of
 * one symbol (an unknown dim equals nothing). */
static inline bool keel_sdim_eq(keel_sdim a, keel_sdim b) {
  if (a.sym == KEEL_SYM_UNKNOWN || b.sym == KEEL_SYM_UNKNOWN || a.sym != b.sym) return false;
  return a.add == b.add && (a.sym == KEEL_SYM_KNOWN || (a.mul == b.mul && a.div == b.div));
}

/* 0: every dim an integer; 1: rank known, some dim symbolic (none
 * unknown); 2: rank or some dim unknown. */
KEEL_INTERNAL int keel_sshape_class(const keel_sshape *v);

/* Whether a tensor of `rank` and `dims` is what v says, under `bind` (per
 * symbol its value in this run, or -1 while unbound; what it can bind, it
 * binds). A symbol of the main graph is one value for a whole run; one of a
 * sub-graph (a Loop body's carried length) stands for any value. An
 * unknown rank or dim agrees with anything. */
KEEL_INTERNAL bool keel_sshape_agrees(const keel_shapes *s, const keel_sshape *v, int32_t rank,
                                      const int64_t *dims, int64_t *bind);

#endif
