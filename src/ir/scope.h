/* scope.h: name resolution (scope.c) and planning (plan.c), the two passes
 * that turn a loaded model into something the executor can run. */
#ifndef KEEL_SCOPE_H
#define KEEL_SCOPE_H

#include "ir/ir.h"

/* Replaces every Gradient node (ai.onnx.preview.training) with the nodes
 * of its reverse-mode derivative (autodiff.c). Runs on names, before
 * keel_ir_resolve. */
KEEL_INTERNAL keel_status keel_ir_autodiff(keel_model *m);

/* Gives every value a slot or a const index and every use a keel_ref;
 * resolves sub-graph captures to OUTER refs and records them as implicit
 * inputs of the nodes that hold the sub-graphs. */
KEEL_INTERNAL keel_status keel_ir_resolve(keel_model *m);

/* For every graph: a topological order (file order when it is one), each
 * node's release list (the slots whose last use it is), its in-place mask,
 * and which outputs move out of the frame. */
KEEL_INTERNAL keel_status keel_ir_plan(keel_model *m);

#endif
