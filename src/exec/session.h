/* session.h: what the public-API files of exec/ share: value wrappers
 * (value.c) and site numbering. */
#ifndef KEEL_SESSION_H
#define KEEL_SESSION_H

#include "exec/exec.h"

/* Owner-tag sites: 0 = the session itself, 1 = values made through the
 * public API (run inputs), then one per node output. */
enum { KEEL_SITE_SESSION = 0, KEEL_SITE_USER = 1, KEEL_SITE_FIRST_NODE = 2 };
/* keel_site.out of a node's prepared-state site. */
#define KEEL_SITE_OUT_PREPARED (-2)

/* The internal value behind a public handle (borrowed). */
KEEL_INTERNAL const keel_val *keel_value_val(const keel_value_t *v);
/* Public handles for n values (new references) into out[0..n); on error
 * nothing is written. */
KEEL_INTERNAL keel_status keel_values_wrap(keel_session_t *s, const keel_val *v,
                                           size_t n, keel_value_t **out);

/* A session over a model already loaded (the trainer sets m->train
 * first); takes m over, also on error. */
KEEL_INTERNAL keel_status keel_session_create_model(keel_model *m, const keel_options *opts,
                                                    keel_session_t **out);
/* keel_run_ex whose main-graph blocks carry `iter` as their owner tag's
 * iteration (the trainer passes the step number, so that a report names
 * the step a surviving block was made in), and, when `watch` is not NULL,
 * that is told after each main-graph node (exec.h, keel_main_watch). */
KEEL_INTERNAL keel_status keel_run_tagged(keel_session_t *s, const char *const *names,
                                          keel_value_t *const *inputs, size_t n_inputs,
                                          keel_value_t **outputs, const keel_run_opts *opts,
                                          uint32_t iter, const keel_main_watch *watch);
/* A new owner-tag site that reports as `label` (copied), for blocks that
 * belong to no node: parameters and optimizer state. Before any run (the
 * site table is not locked). */
KEEL_INTERNAL keel_status keel_session_label_site(keel_session_t *s, const char *label,
                                                  uint32_t *site);

#endif
