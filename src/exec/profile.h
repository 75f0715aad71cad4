/* profile.h: what the executor tells the profiler (profile.c), and the
 * names of owner sites (for reports). Profiling is off unless
 * keel_profile_start() was called; then the per-node loop calls
 * keel_prof_enter / keel_prof_leave around each node, and an allocator hook
 * attributes every block to the node output that owns it. */
#ifndef KEEL_PROFILE_H
#define KEEL_PROFILE_H

#include "exec/exec.h"

typedef struct keel_profile keel_profile;

/* Called by run.c when s->profile is set. */
KEEL_INTERNAL void keel_prof_enter(keel_profile *p, const keel_node *n, uint32_t iter,
                                   uint64_t *t0);
/* `in` and `out` (the node's resolved inputs and its outputs, before the
 * releases) give the shapes it ran on; NULL when the node failed. */
KEEL_INTERNAL void keel_prof_leave(keel_profile *p, const keel_node *n, uint32_t iter,
                                   uint64_t t0, const keel_val *const *in,
                                   keel_val *const *out);
KEEL_INTERNAL void keel_profile_free(keel_profile *p);

/* "main/loop/body: node 'add' (Add) value 'y'" for a site (into buf). */
KEEL_INTERNAL const char *keel_site_text(const struct keel_session_s *s, uint32_t site,
                                         char *buf, size_t cap);

#endif
