/* shapecheck.h: the session's shape check (KEEL_OPT_CHECK_SHAPES, or the
 * environment variable KEEL_CHECK_SHAPES=1): every value a node reads or
 * writes is compared with what symbolic shape inference (ir/shapes.h) said
 * of it, on the model after the passes. The main graph's symbols are bound
 * by the first value that shows them in a run and must hold for the rest
 * of it; a symbol of a sub-graph (a Loop body's carried length) stands for
 * any value. A disagreement fails the run (KEEL_ERR_INTERNAL, naming the
 * value, the inferred and the actual shape): the inference said something
 * false. A run whose graph input has other dims than the model declares
 * is not checked from there on (counted): the inference describes the
 * declared shapes, and keel runs such inputs (a warning at most). */
#ifndef KEEL_SHAPECHECK_H
#define KEEL_SHAPECHECK_H

#include "exec/exec.h"

struct keel_shapecheck;

/* Infers the shapes of s->m (after the passes) and sets s->shapecheck. */
KEEL_INTERNAL keel_status keel_shapecheck_create(struct keel_session_s *s);
KEEL_INTERNAL void keel_shapecheck_free(struct keel_shapecheck *c);
/* Bytes a run context needs for its bindings (0 when the check is off). */
KEEL_INTERNAL size_t keel_shapecheck_bind_bytes(const struct keel_session_s *s);
/* A run begins: every symbol unbound. */
KEEL_INTERNAL void keel_shapecheck_begin(keel_runctx *R);
/* After node n ran in frame f: its inputs (f->in) and outputs (f->out). */
KEEL_INTERNAL keel_status keel_shapecheck_node(keel_runctx *R, const keel_frame *f, const keel_node *n);

/* Values compared so far, and of them how many were inferred fully known,
 * symbolic and unknown (keel_sshape_class). */
typedef struct keel_shapecheck_counts {
  uint64_t checked, known, symbolic, unknown;
  uint64_t typed;              /* of the checked, those whose element type
                                  was inferred (and agreed)               */
  uint64_t runs_off;           /* runs not checked: inputs not as declared */
} keel_shapecheck_counts;
KEEL_INTERNAL keel_shapecheck_counts keel_shapecheck_get(const struct keel_session_s *s);

#endif
