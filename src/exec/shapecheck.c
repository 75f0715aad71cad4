/* shapecheck.c: the session's shape check (shapecheck.h).
 *
 * The inference runs once, at session creation, on the model after the
 * passes (the graph the executor runs, so its value names are the ones the
 * nodes carry). What a run learns lives in the run context, not here: the
 * symbol bindings (R->bind) and whether the run is still checked
 * (R->shapes_off). So any number of runs may be checked at once; the only
 * shared state is the counters, which are atomic and only ever added to.
 */
#include "exec/shapecheck.h"

#include <stdatomic.h>
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "exec/session.h"
#include "ir/shapes.h"

/* Read-only after keel_shapecheck_create but for the counters: cls[] is
 * indexed by keel_sshape_class (0 known, 1 symbolic, 2 unknown), the class
 * of what the inference said, not whether the value agreed. */
typedef struct keel_shapecheck {
  keel_shapes *shapes;
  int32_t n_syms;
  _Atomic uint64_t checked, cls[3], typed, runs_off;
} keel_shapecheck;

/* Called from the session's creation after the passes, resolve and plan
 * (session.c, finish): the inference must see the graph as it will run.
 * On failure s->shapecheck stays NULL and the session is not created. */

keel_status keel_shapecheck_create(struct keel_session_s *s) {
  keel_shapecheck *c = keel_sys_calloc(1, sizeof *c);
  if (!c) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "shape check");
  keel_status st = keel_shapes_infer(s->m, &c->shapes);
  if (st) {
    keel_sys_free(c, sizeof *c);
    return keel_err_prefix(st, "shape check");
  }
  c->n_syms = keel_shapes_n_syms(c->shapes);
  s->shapecheck = c;
  return KEEL_OK;
}

void keel_shapecheck_free(keel_shapecheck *c) {
  if (!c) return;
  keel_shapes_free(c->shapes);
  keel_sys_free(c, sizeof *c);
}

/* One int64 per symbol, plus one: a model without symbols still gets a
 * non-empty area, because run_new (run.c) sets R->bind only when the
 * context is larger than keel_run_ctx_bytes, and R->bind != NULL is how
 * the executor knows the check is on. */
size_t keel_shapecheck_bind_bytes(const struct keel_session_s *s) {
  return s->shapecheck ? sizeof(int64_t) * (size_t)(s->shapecheck->n_syms + 1) : 0;
}

/* Called by set_stops (session.c) at the start of every run: the context
 * comes from the session's pool, so the last run's bindings, and its
 * shapes_off verdict, must not carry over. */
void keel_shapecheck_begin(keel_runctx *R) {
  const keel_shapecheck *c = R->s->shapecheck;
  if (!c || !R->bind) return;
  R->shapes_off = false;
  for (int32_t i = 0; i < c->n_syms; i++) R->bind[i] = -1;
}

/* "[2, 3, 4]": the actual shape, for the error message. Stops writing at
 * cap (snprintf's return can run `at` past cap, hence the tests). */
static void dims_text(const keel_tensor *t, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int32_t i = 0; i < t->rank && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* One value against its inferred shape and element type (where known). Only tensors are compared (a
 * sequence or a map has no one shape to compare), and omitted inputs and
 * outputs ("" names) are skipped. The first value that shows a main-graph
 * symbol binds it (keel_sshape_agrees writes R->bind); every later value
 * must agree with that binding for the rest of the run.
 *
 * A disagreement on a main-graph input is not the inference's fault: the
 * caller fed other dims than the model declares (keel runs such inputs,
 * with a warning at most: session.c, check_input), and everything
 * inferred downstream assumed the declared ones. So the run is marked off
 * and counted instead of failed. Any other disagreement means the
 * inference said something false, which is what this check exists to
 * catch: KEEL_ERR_INTERNAL. */
static keel_status check_value(keel_runctx *R, const keel_frame *f, const keel_node *n, const char *name,
                               const keel_val *v, bool is_input) {
  keel_shapecheck *c = R->s->shapecheck;
  if (!v || v->kind != KEEL_V_TENSOR || !name[0] || R->shapes_off) return KEEL_OK;
  const keel_sshape *sh = keel_shapes_find(c->shapes, f->g, name);
  if (!sh) return KEEL_OK;
  atomic_fetch_add_explicit(&c->checked, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->cls[keel_sshape_class(sh)], 1, memory_order_relaxed);
  if (sh->dtype) atomic_fetch_add_explicit(&c->typed, 1, memory_order_relaxed);
  bool type_ok = !sh->dtype || sh->dtype == v->t.dtype;
  if (type_ok && keel_sshape_agrees(c->shapes, sh, v->t.rank, v->t.shape, R->bind)) return KEEL_OK;
  char lb[256], want[512], got[256];
  keel_sshape_text(c->shapes, sh, want, sizeof want);
  dims_text(&v->t, got, sizeof got);
  const keel_graph *g = f->g, *main = R->s->m->main;
  /* the same sshape object, not only the same name: a sub-graph value
   * that shadows a main-graph input's name is not that input */
  bool declared = false; /* a main-graph input, read here or in a sub-graph */
  for (int32_t i = 0; i < main->n_in && !declared; i++)
    declared = !strcmp(main->in_names[i], name) && sh == keel_shapes_find(c->shapes, main, name);
  if (declared) { /* not what the inference describes: the rest of the run is not checked */
    R->shapes_off = true;
    atomic_fetch_add_explicit(&c->runs_off, 1, memory_order_relaxed);
    return KEEL_OK;
  }
  return keel_err(KEEL_ERR_INTERNAL, "shape check: graph '%s': %s '%s' of node %s: inferred %s %s, ran with %s %s",
                  g->path, is_input ? "input" : "output", name, keel_node_label(n, lb, sizeof lb),
                  sh->dtype ? keel_dtype_name((keel_dtype)sh->dtype) : "(type unknown)", want,
                  keel_dtype_name((keel_dtype)v->t.dtype), got);
}

/* Called by run_node_observed (run.c) after the kernel and before the
 * node's releases, so f->in still points at live values. Inputs are
 * checked too, not only outputs: a graph input or an outer value read by a
 * sub-graph is produced by no node of the graph that reads it. */
keel_status keel_shapecheck_node(keel_runctx *R, const keel_frame *f, const keel_node *n) {
  if (!R->bind || R->shapes_off) return KEEL_OK;
  for (int32_t i = 0; i < n->n_in; i++)
    KEEL_TRY(check_value(R, f, n, n->in_names[i], f->in[i], true));
  for (int32_t k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0) KEEL_TRY(check_value(R, f, n, n->out_names[k], f->out[k], false));
  return KEEL_OK;
}

/* A snapshot for reports (keel test --check-shapes). Each counter is read
 * on its own, so with runs in flight the figures may be from slightly
 * different moments; they are exact between runs. */
keel_shapecheck_counts keel_shapecheck_get(const struct keel_session_s *s) {
  keel_shapecheck_counts r = {0};
  const keel_shapecheck *c = s->shapecheck;
  if (!c) return r;
  r.checked = atomic_load(&c->checked);
  r.known = atomic_load(&c->cls[0]);
  r.symbolic = atomic_load(&c->cls[1]);
  r.unknown = atomic_load(&c->cls[2]);
  r.typed = atomic_load(&c->typed);
  r.runs_off = atomic_load(&c->runs_off);
  return r;
}
