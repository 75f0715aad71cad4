/* registry.h: finding an op's kernel table row by (domain, op_type,
 * opset), the "unsupported" error when none matches, and the list of every
 * row (registry.c). Binding (exec/session.c) and the passes that ask
 * whether an op exists use it; kernels do not. */
#ifndef KEEL_OPS_REGISTRY_H
#define KEEL_OPS_REGISTRY_H

#include "ops/kernel.h"

/* The row serving (domain, name) at opset; NULL when nothing matches, and
 * then keel_ops_unsupported() formats the error. */
KEEL_INTERNAL const keel_opdef *keel_ops_find(const char *domain, const char *name,
                                              int64_t opset);
/* KEEL_ERR_UNSUPPORTED naming the node's op, domain and opset (and whether
 * keel has other versions of it). */
KEEL_INTERNAL keel_status keel_ops_unsupported(const keel_node *n);
/* Every registered row (for docs/operators.md); returns the total. */
KEEL_INTERNAL size_t keel_ops_list(const keel_opdef **out, size_t cap);

#endif /* KEEL_OPS_REGISTRY_H */
