/* run.c: executing a graph in a frame: the per-node loop, input
 * resolution, release at last use, outputs moved out, and the pool of runs.
 *
 * The per-node loop is the hot path. Per node it resolves the input refs to
 * value pointers (a slot index, a constant index, or a walk of `levels`
 * parent frames), points the outputs at their slots, calls the kernel,
 * frees the kernel's scratch and drops the node's release list. No names,
 * no hashing, no allocation of its own.
 */
#include "exec/exec.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/prim.h"
#include "base/sysmem.h"
#include "exec/profile.h"
#include "exec/shapecheck.h"

/* ============================================================== pool */

/* Control-flow scratch a node needs: room for its sub-graphs' inputs and
 * outputs twice over (Loop keeps carried state beside the body's I/O). */
static int32_t ctl_need(const keel_node *n) {
  int32_t c = 0;
  for (int32_t k = 0; k < n->n_subs; k++) c += 2 * (n->subs[k]->n_in + n->subs[k]->n_out);
  return c ? c + 2 * n->n_in + 2 * n->n_out + 4 : 0;
}

/* Bytes of one frame's arrays, sized for the graph's widest node so the
 * per-node loop never allocates: the slots, then as many keel_vals again
 * for dropped outputs and control-flow scratch, then the input and output
 * pointer arrays. run_new carves them in this order; the two must agree.
 * max_out is at least KEEL_K_MIN_OUTS because run_kernel hands every
 * kernel that many output targets, whatever the node lists. */
static size_t frame_bytes(const keel_graph *g, int32_t *max_in, int32_t *max_out,
                          int32_t *n_ctl) {
  int32_t mi = 1, mo = KEEL_K_MIN_OUTS, mc = 0;
  for (int32_t i = 0; i < g->n_nodes; i++) {
    mi = KEEL_MAX(mi, g->nodes[i].n_in);
    mo = KEEL_MAX(mo, g->nodes[i].n_out);
    mc = KEEL_MAX(mc, ctl_need(&g->nodes[i]));
  }
  *max_in = mi;
  *max_out = mo;
  *n_ctl = mc;
  return (size_t)(g->n_slots + mc) * sizeof(keel_val) + (size_t)mi * sizeof(keel_val *) +
         (size_t)mo * (sizeof(keel_val *) + sizeof(keel_val));
}

/* Without the shape check's bindings, which run_new appends after this
 * many bytes (keel_shapecheck_bind_bytes). keel info reports this figure
 * as the cost of one run in flight. */
size_t keel_run_ctx_bytes(const keel_model *m) {
  size_t bytes = sizeof(keel_runctx) + (size_t)m->n_graphs * sizeof(keel_frame);
  for (int32_t i = 0; i < m->n_graphs; i++) {
    int32_t a, b, c;
    bytes += frame_bytes(m->graphs[i], &a, &b, &c);
  }
  return bytes;
}

/* One allocation holds the run, its frames and every frame's arrays: one
 * meta allocation per context instead of one per graph, and a context is
 * freed with one call of the same size (R->bytes). The memset makes every
 * slot EMPTY (KEEL_V_EMPTY is 0) and every frame inactive, the state
 * DESIGN rule 4 requires between runs. */
static keel_status run_new(struct keel_session_s *s, keel_runctx **out) {
  const keel_model *m = s->m;
  size_t base = keel_run_ctx_bytes(m), bytes = base + keel_shapecheck_bind_bytes(s);
  uint8_t *p = keel_heap_meta_realloc(s->heap, NULL, 0, bytes); /* counted as meta */
  if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "cannot allocate frames for a run");
  memset(p, 0, bytes);
  keel_runctx *R = (keel_runctx *)(void *)p;
  R->s = s;
  R->bytes = bytes;
  R->frames = (keel_frame *)(void *)(p + sizeof(keel_runctx));
  uint8_t *at = p + sizeof(keel_runctx) + (size_t)m->n_graphs * sizeof(keel_frame);
  for (int32_t i = 0; i < m->n_graphs; i++) {
    keel_frame *f = &R->frames[i];
    const keel_graph *g = m->graphs[i];
    f->g = g;
    size_t fb = frame_bytes(g, &f->max_in, &f->max_out, &f->n_ctl);
    f->slots = (keel_val *)(void *)at;
    f->dropped = f->slots + g->n_slots;
    f->ctl = f->dropped + f->max_out;
    f->in = (const keel_val **)(void *)(f->ctl + f->n_ctl);
    f->out = (keel_val **)(void *)(f->in + f->max_in);
    at += fb;
  }
  if (bytes > base) R->bind = (int64_t *)(void *)(p + base);
  *out = R;
  return KEEL_OK;
}

/* Pool: a stack of idle contexts, at most s->pool_cap of them; a run that
 * ends when the pool is full frees its context (all are the same size, so
 * which one goes does not matter to memory). */
keel_status keel_run_acquire(struct keel_session_s *s, keel_runctx **R) {
  keel_mutex_lock(&s->pool_lock);
  keel_runctx *r = s->pool;
  if (r) {
    s->pool = r->next;
    s->n_pooled--;
    s->n_ctx_reused++;
    s->n_in_use++;
  }
  keel_mutex_unlock(&s->pool_lock);
  /* a miss allocates outside the lock, so that concurrent runs do not
   * wait on one another's allocation; only the figures are updated under it */
  if (!r) {
    KEEL_TRY(run_new(s, &r));
    keel_mutex_lock(&s->pool_lock);
    s->n_ctx_created++;
    s->n_in_use++;
    s->ctx_bytes += r->bytes;
    keel_mutex_unlock(&s->pool_lock);
  }
  r->next = NULL;
  *R = r;
  return KEEL_OK;
}

/* Between runs no frame is active and every slot is empty (DESIGN rule 4). */
#if KEEL_DEBUG >= 3
static bool run_is_idle(const keel_runctx *R) {
  for (int32_t i = 0; i < R->s->m->n_graphs; i++)
    if (R->frames[i].active || !keel_frame_is_empty(&R->frames[i])) return false;
  return true;
}
#endif

/* The context goes back to the pool, or is freed when the pool already
 * holds pool_cap idle ones. The free happens after the unlock: the lock
 * only guards the list and its figures. */
void keel_run_release(keel_runctx *R) {
  struct keel_session_s *s = R->s;
  keel_assert_expensive(run_is_idle(R));
  keel_mutex_lock(&s->pool_lock);
  keel_assert(s->n_in_use > 0);
  s->n_in_use--;
  bool keep = s->n_pooled < s->pool_cap;
  if (keep) {
    R->next = s->pool;
    s->pool = R;
    s->n_pooled++;
  } else {
    s->n_ctx_evicted++;
    s->ctx_bytes -= R->bytes;
  }
  keel_mutex_unlock(&s->pool_lock);
  if (!keep) keel_heap_meta_realloc(s->heap, R, R->bytes, 0);
}

/* At session destroy only: no run may hold a context then (the assert),
 * so the list is walked without the lock. */
void keel_run_pool_free(struct keel_session_s *s) {
  keel_runctx *r = s->pool;
  while (r) {
    keel_runctx *n = r->next;
    s->ctx_bytes -= r->bytes;
    keel_heap_meta_realloc(s->heap, r, r->bytes, 0);
    r = n;
  }
  s->pool = NULL;
  s->n_pooled = 0;
  keel_assert(s->n_in_use == 0 && s->ctx_bytes == 0);
}

/* ===================================================== value lookup */

/* The value a ref names, from frame f. NULL (with an error) when a parent
 * frame has moved on since f entered, or the slot is empty. */
static const keel_val *resolve(keel_runctx *R, keel_frame *f, keel_ref r,
                               keel_status *st) {
  switch (keel_ref_kind(r)) {
    case KEEL_REF_LOCAL: {
      const keel_val *v = &f->slots[keel_ref_slot(r)];
      if (KEEL_LIKELY(v->kind != KEEL_V_EMPTY)) return v;
      *st = keel_err(KEEL_ERR_INTERNAL, "value '%s' is empty when read",
                     f->g->slot_names[keel_ref_slot(r)]);
      return NULL;
    }
    /* constants are the session's and never empty */
    case KEEL_REF_CONST: return &R->s->consts[keel_ref_const_index(r)];
    default: break;
  }
  /* an outer value: climb `levels` frames, and at each step check that the
   * parent is still active and still in the generation this frame saw when
   * it entered. A frame is reused across iterations and runs, so a pointer
   * to it alone does not prove it still holds the values the ref means. */
  keel_frame *p = f;
  for (uint32_t l = keel_ref_levels(r); l > 0; l--) {
    if (!p->parent || !p->parent->active || p->parent->gen != p->parent_gen) {
      *st = keel_err(KEEL_ERR_STALE,
                     "graph '%s' reads an outer value through a frame that is "
                     "no longer the one it entered from",
                     f->g->path);
      return NULL;
    }
    p = p->parent;
  }
  const keel_val *v = &p->slots[keel_ref_slot(r)];
  if (v->kind != KEEL_V_EMPTY) return v;
  *st = keel_err(KEEL_ERR_INTERNAL, "outer value '%s' is empty when read",
                 p->g->slot_names[keel_ref_slot(r)]);
  return NULL;
}

/* ========================================================= one node */

/* Scratch blocks a kernel took through the kctx (at most
 * KEEL_K_MAX_SCRATCH) live until the kernel returns; the executor frees
 * them, on success and on failure, so a kernel's error paths need not. */
static void drop_scratch(keel_kctx *k) {
  for (int32_t i = 0; i < k->n_scratch; i++) keel_heap_free(k->heap, k->scratch[i]);
  k->n_scratch = 0;
}

/* A failed node leaves nothing behind: every output target is cleared
 * (a kernel may have written some outputs before it failed), so the slots
 * hold only what earlier nodes made, and keel_exec_graph's clean-up of the
 * frame sees a consistent state. The message gets the node's label. */
static keel_status node_failed(const keel_node *n, keel_kctx *k, keel_status st) {
  for (int32_t i = 0; i < KEEL_MAX(n->n_out, KEEL_K_MIN_OUTS); i++) keel_val_clear(k->out[i]);
  drop_scratch(k);
  char lb[256];
  return keel_err_prefix(st, "node %s", keel_node_label(n, lb, sizeof lb));
}

static keel_status run_kernel(keel_runctx *R, keel_frame *f, const keel_node *n);

/* Drops the slots whose last use this node was (the plan's release list,
 * ir/plan.c): memory goes back as soon as nothing later reads it, which is
 * what keeps a run's peak near the live set of values. */
static void release(keel_frame *f, const keel_node *n) {
  for (int32_t i = 0; i < n->n_release; i++) keel_val_clear(&f->slots[n->release[i]]);
}

/* Test-only: keeps a reference to the planted value (keel_debug_plant_leak). */
static void plant(keel_runctx *R, keel_frame *f, const keel_node *n) {
  uint32_t site = R->s->debug_plant_site;
  if (site < n->site || site >= n->site + (uint32_t)n->n_out) return;
  int32_t slot = n->out[site - n->site];
  if (slot >= 0 && f->slots[slot].kind != KEEL_V_EMPTY) keel_exec_debug_leak(R, &f->slots[slot]);
}

/* The per-node step: kernel, then releases. */
static keel_status run_node(keel_runctx *R, keel_frame *f, const keel_node *n) {
  KEEL_TRY(run_kernel(R, f, n));
  release(f, n);
  return KEEL_OK;
}

/* The same step with the observers around it: the profiler, the shape
 * check and the test-only planted leak. Chosen per graph entry, so the
 * plain step above carries none of them. The releases come last: the
 * profiler records the shapes of f->in and the shape check reads them,
 * and an input whose last use this node was would already be gone. The
 * planted leak takes its reference before the releases for the same
 * reason. On failure the profiler is told with NULL shapes and nothing
 * is released here (keel_exec_graph clears the whole frame). */
static keel_status run_node_observed(keel_runctx *R, keel_frame *f, const keel_node *n,
                                     struct keel_profile *p) {
  uint64_t t0 = 0;
  if (p) keel_prof_enter(p, n, f->iter, &t0);
  keel_status st = run_kernel(R, f, n);
  if (!st && R->s->debug_plant_site) plant(R, f, n);
  if (p) keel_prof_leave(p, n, f->iter, t0, st ? NULL : f->in, st ? NULL : f->out);
  if (!st && R->bind) st = keel_shapecheck_node(R, f, n);
  if (!st) release(f, n);
  return st;
}

/* ----- what the executor lends kernels (ops/kernel.h, keel_kservices) */

/* Runs graph g of the running node on *in (moved in) into *out, on the
 * frame's control slots as If/Loop/Scan do. ctl[0] and ctl[1] are free
 * here: a node that holds a graph attribute makes the frame's control
 * slots exist (ctl_need), and a frame's nodes run one at a time. */
static keel_status svc_subgraph(keel_kctx *k, const keel_graph *g, keel_val *in, keel_val *out) {
  keel_frame *f = k->frame;
  if (f->n_ctl < 2) return keel_err(KEEL_ERR_INTERNAL, "no control-flow slots to run a graph");
  keel_val *io = f->ctl;
  keel_val_move(&io[0], in);
  KEEL_TRY(keel_exec_graph(k->run, g, f, &io[0], 1, &io[1], f->iter));
  keel_val_move(out, &io[1]);
  return KEEL_OK;
}

/* The communicator lives in the session's options, which ops/ cannot
 * see; the collectives reach it through this service. */
static const void *svc_comm(const keel_kctx *k) { return k->run->s->opts.comm; }

static const keel_kservices g_services = {svc_subgraph, svc_comm};

/* Resolves inputs, calls the kernel, checks its outputs; releases are the
 * caller's. Guarantees on return: KEEL_OK means every output the node
 * lists holds a value and every unlisted target is EMPTY again; an error
 * means no target holds anything (node_failed). */
static keel_status run_kernel(keel_runctx *R, keel_frame *f, const keel_node *n) {
  keel_status st = KEEL_OK;
  for (int32_t i = 0; i < n->n_in; i++) {
    keel_ref r = n->in[i];
    f->in[i] = r == KEEL_REF_NONE ? NULL : resolve(R, f, r, &st);
    if (KEEL_UNLIKELY(st)) {
      char lb[256];
      return keel_err_prefix(st, "node %s", keel_node_label(n, lb, sizeof lb));
    }
  }
  /* a node placed on the device reads the device copies of the constants
   * the session put there for it (n->dev_consts, decided once at binding:
   * the inputs it reads on the host keep the host's) */
  for (uint32_t b = n->dev_consts; KEEL_UNLIKELY(b); b &= b - 1) {
    int i = __builtin_ctz(b);
    f->in[i] = &R->s->dev_consts[keel_ref_const_index(n->in[i])];
  }
  /* narrow types (float8, int4, ...) only reach kernels that list them:
   * the cheap scan runs on every node, the table lookup only when it hits */
  if (KEEL_UNLIKELY(keel_k_has_narrow(f->in, n->n_in)) &&
      (st = keel_k_check_in_types(n, f->in, n->n_in))) {
    char lb[256];
    return keel_err_prefix(st, "node %s", keel_node_label(n, lb, sizeof lb));
  }
  /* outputs the node omits (-1) or does not list point at the frame's
   * `dropped` values: a kernel may always write all of its outputs, and
   * what nobody asked for is cleared right after it returns */
  int32_t n_targets = KEEL_MAX(n->n_out, KEEL_K_MIN_OUTS);
  for (int32_t i = 0; i < n_targets; i++)
    f->out[i] = i < n->n_out && n->out[i] >= 0 ? &f->slots[n->out[i]] : &f->dropped[i];
  /* field by field: the scratch array is only read below n_scratch, so it
   * is not cleared on every node */
  keel_kctx k;
  k.node = n, k.in = f->in, k.out = f->out, k.n_in = n->n_in, k.n_out = n->n_out;
  k.heap = R->s->heap, k.pool = R->s->threads, k.prep = n->prep;
  k.dev = R->s->dev, k.dev_heap = R->s->dev_heap;
  if (KEEL_UNLIKELY(n->device == KEEL_NODE_GPU) && k.dev_heap) k.heap = k.dev_heap;
  /* with KEEL_OPT_NO_OWNER_TAGS the mask is 0: every block is the
   * session's, iteration 0 */
  k.owner = (keel_owner){n->site & R->s->owner_mask, f->iter & R->s->owner_mask};
  k.svc = &g_services, k.run = R, k.frame = f, k.n_scratch = 0;
  /* the implementation chosen at session creation, else the op's
   * reference kernel */
  st = n->impl && n->impl->fn ? n->impl->fn(&k) : n->op->fn(&k);
  if (KEEL_UNLIKELY(st)) return node_failed(n, &k, st);
  drop_scratch(&k);
  for (int32_t i = 0; i < n_targets; i++) {
    if (i >= n->n_out || n->out[i] < 0) {
      keel_val_clear(&f->dropped[i]);
    } else if (KEEL_UNLIKELY(f->slots[n->out[i]].kind == KEEL_V_EMPTY)) {
      /* a kernel bug, caught here rather than as an "empty when read" at
       * some later node that would not name the culprit */
      st = keel_err(KEEL_ERR_INTERNAL, "kernel produced no value for output %d", i);
      return node_failed(n, &k, st);
    }
  }
  return KEEL_OK;
}

/* ===================================================== stopping */

/* "before node X" (n) or "before iteration I" (n NULL). Cancel is tested
 * before the deadline, so a run both cancelled and late reports the
 * cancel, the caller's own request. The flag is read relaxed: it is a
 * request only, and publishes no data the run would then read. */
static keel_status stop_now(keel_runctx *R, const keel_node *n, int64_t iteration) {
  char lb[256], where[300];
  if (n) snprintf(where, sizeof where, "node %s", keel_node_label(n, lb, sizeof lb));
  else snprintf(where, sizeof where, "iteration %lld", (long long)iteration);
  if (R->cancel && atomic_load_explicit(R->cancel, memory_order_relaxed))
    return keel_err(KEEL_ERR_CANCELLED, "run cancelled (keel_run_opts.cancel) before %s", where);
  if (R->deadline_ns && keel_prim_now_ns() >= R->deadline_ns)
    return keel_err(KEEL_ERR_TIMEOUT, "deadline of %llu ms passed before %s",
                    (unsigned long long)R->deadline_ms, where);
  return KEEL_OK;
}

keel_status keel_exec_stop(keel_runctx *R, const keel_node *n) { return stop_now(R, n, 0); }

/* The guard counts iterations of every loop at every depth together, so
 * nested loops cannot multiply past it. The count is taken before the
 * iteration begins: an iteration refused by the guard never runs. */
keel_status keel_exec_iteration(keel_runctx *R, const keel_node *loop, int64_t iteration) {
  (void)loop; /* the loop's kernel names it: node_failed prefixes its label */
  keel_assert_internal(R->iters >= 0 && R->iters <= R->iter_limit);
  if (KEEL_UNLIKELY(R->iters == R->iter_limit))
    return keel_err(KEEL_ERR_TIMEOUT,
                    "iteration guard: the run reached %lld loop iterations "
                    "(keel_run_opts.max_iterations) before iteration %lld; does the loop's "
                    "condition ever turn false?",
                    (long long)R->iter_limit, (long long)iteration);
  R->iters++;
  return KEEL_UNLIKELY(R->stoppable) ? stop_now(R, NULL, iteration) : KEEL_OK;
}

/* ======================================================= one graph */

/* The error path: drops whatever the frame still holds. */
static void frame_clear(keel_frame *f) {
  for (int32_t i = 0; i < f->g->n_slots; i++) keel_val_clear(&f->slots[i]);
}

/* The generation moves on exit as well as on entry, so a child frame
 * that entered from this frame's previous activation (parent_gen) fails
 * resolve's check instead of reading slots that now mean other values. */
static void frame_exit(keel_frame *f) {
  f->gen++;
  f->active = false;
  f->parent = NULL;
}

/* Outputs leave the frame: the last listing of a local slot moves it, any
 * other listing (and constants, outer values) takes a new reference. */
static keel_status collect_outputs(keel_runctx *R, keel_frame *f, keel_val *outputs) {
  const keel_graph *g = f->g;
  for (int32_t i = 0; i < g->n_out; i++) {
    keel_ref r = g->out[i];
    if (keel_ref_kind(r) == KEEL_REF_LOCAL && g->out_move[i]) {
      keel_val *v = &f->slots[keel_ref_slot(r)];
      if (v->kind == KEEL_V_EMPTY)
        return keel_err(KEEL_ERR_INTERNAL, "graph '%s': output '%s' was never produced",
                        g->path, g->out_names[i]);
      keel_val_move(&outputs[i], v);
      continue;
    }
    keel_status st = KEEL_OK;
    const keel_val *v = resolve(R, f, r, &st);
    if (!v) return st;
    keel_val_ref(&outputs[i], v);
  }
  return KEEL_OK;
}

/* Activates g's frame. ONNX has no recursion, so a frame already active
 * means keel entered a graph twice: an internal error, with the inputs
 * cleared all the same (keel_exec_graph's promise that inputs are EMPTY
 * afterwards holds on every path). An input the caller left EMPTY takes
 * its default constant by reference; extra inputs beyond g->n_in are
 * dropped; inputs the plan found nobody reads (drop_in) are dropped at
 * once rather than held for the whole graph. */
static keel_status enter(keel_runctx *R, const keel_graph *g, keel_frame *parent,
                         keel_val *inputs, int32_t n_inputs, uint32_t iter,
                         keel_frame **out) {
  keel_frame *f = &R->frames[g->id];
  if (f->active) {
    for (int32_t i = 0; i < n_inputs; i++) keel_val_clear(&inputs[i]);
    return keel_err(KEEL_ERR_INTERNAL, "graph '%s' entered twice in one run", g->path);
  }
  keel_assert_internal(f->g == g);
  f->active = true;
  f->gen++;
  f->parent = parent;
  f->parent_gen = parent ? parent->gen : 0;
  f->iter = iter;
  keel_assert_internal(keel_frame_is_empty(f));
  for (int32_t i = 0; i < g->n_in; i++) {
    keel_val *slot = &f->slots[g->in[i]];
    if (i < n_inputs && inputs[i].kind != KEEL_V_EMPTY) keel_val_move(slot, &inputs[i]);
    else if (g->in_default[i] >= 0) keel_val_ref(slot, &R->s->consts[g->in_default[i]]);
  }
  for (int32_t i = g->n_in; i < n_inputs; i++) keel_val_clear(&inputs[i]);
  for (int32_t i = 0; i < g->n_drop_in; i++) keel_val_clear(&f->slots[g->drop_in[i]]);
  *out = f;
  return KEEL_OK;
}

bool keel_frame_is_empty(const keel_frame *f) {
  for (int32_t i = 0; i < f->g->n_slots; i++)
    if (f->slots[i].kind != KEEL_V_EMPTY) return false;
  return true;
}

keel_status keel_exec_graph(keel_runctx *R, const keel_graph *g, keel_frame *parent,
                            keel_val *inputs, int32_t n_inputs, keel_val *outputs,
                            uint32_t iter) {
  keel_frame *f;
  KEEL_TRY(enter(R, g, parent, inputs, n_inputs, iter, &f));
  keel_status st = KEEL_OK;
  /* the profiler is looked up once per graph entry, and the observed step
   * chosen once: without observers the per-node loop tests one bool. The
   * acquire pairs with the store in keel_profile_start, so a profiler seen
   * here is fully built. */
  struct keel_profile *prof = atomic_load_explicit(&R->s->profile, memory_order_acquire);
  bool observed = prof || R->s->debug_plant_site || R->bind;
  const keel_main_watch *watch = g == R->s->m->main ? R->watch : NULL; /* the main graph's only */
  for (int32_t p = 0; p < g->n_nodes && !st; p++) {
    const keel_node *n = &g->nodes[g->order[p]];
    st = keel_exec_check(R, n);
    if (KEEL_UNLIKELY(st)) break;
    st = KEEL_LIKELY(!observed) ? run_node(R, f, n) : run_node_observed(R, f, n, prof);
    if (KEEL_UNLIKELY(watch != NULL) && !st) watch->node_done(watch->ctx, R, g->order[p]);
  }
  if (!st) st = collect_outputs(R, f, outputs);
  /* on error: outputs may be partly collected and the frame holds values
   * of nodes that ran; both are dropped, as exec.h promises */
  if (st) {
    for (int32_t i = 0; i < g->n_out; i++) keel_val_clear(&outputs[i]);
    frame_clear(f);
  }
  /* by the plan every slot is empty now; a leftover is a keel bug */
  keel_assert(keel_frame_is_empty(f));
  /* release builds have no assert: clear anyway, so that a plan bug
   * costs memory for one run at most instead of leaking into the pool */
  if (!st && !keel_frame_is_empty(f)) frame_clear(f);
  frame_exit(f);
  return st;
}

/* Only meaningful while the main frame runs (the keel_main_watch
 * callback); a resolve error here just means "not there", so the status
 * it sets is dropped. */
const keel_val *keel_exec_main_output(keel_runctx *R, int32_t out) {
  const keel_graph *g = R->s->m->main;
  keel_frame *f = &R->frames[g->id];
  if (!f->active || out < 0 || out >= g->n_out) return NULL;
  keel_status st = KEEL_OK;
  const keel_val *v = resolve(R, f, g->out[out], &st);
  return v && v->kind != KEEL_V_EMPTY ? v : NULL;
}

/* ====================================================== hooks */

/* The run whose on_iteration hook is running on this thread. Thread-local
 * because several runs of one session may be in hooks at once, each on its
 * own thread; keel_mem_live_report, called from inside a hook, finds its
 * own run here and can tell the blocks that run still refers to from
 * those a loop left behind. */
static _Thread_local keel_runctx *tls_hook_run;

keel_runctx *keel_exec_hook_run(void) { return tls_hook_run; }

void keel_exec_iteration_hook(keel_runctx *R, const keel_node *loop, int64_t iteration) {
  const keel_options *o = &R->s->opts;
  if (!o->on_iteration) return;
  tls_hook_run = R;
  o->on_iteration(o->iteration_ud, loop->name, iteration, keel_heap_allocated(R->s->heap));
  tls_hook_run = NULL;
}

/* ============================================== referenced blocks */

/* The heap blocks the running frames refer to, collected for
 * keel_mem_live_report's `unreferenced` filter. The array is keel_sys_*
 * memory, outside the heap the report then walks. An allocation failure
 * is remembered and reported once at the end instead of at each add. */
typedef struct block_set {
  const keel_block **b;
  size_t n, cap;
  bool failed;
} block_set;

/* Only heap buffers: constants and caller memory are no block of the
 * heap, so the live walk never sees them. */
static void add_buffer(block_set *s, const keel_buffer *buf) {
  if (!buf || buf->kind != KEEL_BUF_HEAP) return;
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 256;
    const keel_block **q = keel_sys_realloc(s->b, s->cap * sizeof *q, nc * sizeof *q);
    if (!q) {
      s->failed = true;
      return;
    }
    s->b = q;
    s->cap = nc;
  }
  s->b[s->n++] = buf->block;
}

static void add_vals(block_set *s, const keel_val *v, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    if (v[i].kind == KEEL_V_TENSOR) add_buffer(s, v[i].t.buf);
    else if (v[i].kind == KEEL_V_MAP) add_buffer(s, v[i].map->keys.buf), add_buffer(s, v[i].map->values.buf);
    else if (v[i].kind == KEEL_V_SEQUENCE && v[i].seq->of_maps)
      for (size_t k = 0; k < v[i].seq->n; k++)
        add_buffer(s, v[i].seq->maps[k]->keys.buf), add_buffer(s, v[i].seq->maps[k]->values.buf);
    else if (v[i].kind == KEEL_V_SEQUENCE)
      for (size_t k = 0; k < v[i].seq->n; k++) add_buffer(s, v[i].seq->items[k].buf);
  }
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
  return (x > y) - (x < y);
}

/* Walks the slots and control scratch of every active frame: the
 * control scratch holds what a loop carries from one iteration to the
 * next, which a hook must not mistake for what the loop left behind. The
 * result is sorted so the report can binary-search it (profile.c, held). */
keel_status keel_exec_referenced(keel_runctx *R, const keel_block ***blocks, size_t *n) {
  block_set s = {0};
  for (int32_t i = 0; i < R->s->m->n_graphs; i++) {
    const keel_frame *f = &R->frames[i];
    if (!f->active) continue;
    add_vals(&s, f->slots, f->g->n_slots);
    add_vals(&s, f->ctl, f->n_ctl);
  }
  if (s.failed) {
    keel_sys_free(s.b, s.cap * sizeof *s.b);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "walking the running frames");
  }
  if (s.n) qsort(s.b, s.n, sizeof *s.b, cmp_ptr);
  /* shrink to n so the caller frees exactly what it was given */
  const keel_block **q = s.n ? keel_sys_realloc(s.b, s.cap * sizeof *s.b, s.n * sizeof *s.b) : NULL;
  if (s.n && !q) {
    keel_sys_free(s.b, s.cap * sizeof *s.b);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "walking the running frames");
  }
  if (!s.n) keel_sys_free(s.b, s.cap * sizeof *s.b);
  *blocks = q;
  *n = s.n;
  return KEEL_OK;
}

/* Test-only. Under the pool lock because runs on several threads may leak
 * into the same session array; out of memory just skips the leak. */
void keel_exec_debug_leak(keel_runctx *R, const keel_val *v) {
  struct keel_session_s *s = R->s;
  keel_mutex_lock(&s->pool_lock);
  if (s->n_leaked == s->cap_leaked) {
    size_t nc = s->cap_leaked ? s->cap_leaked * 2 : 16;
    keel_val *q = keel_sys_realloc(s->leaked, s->cap_leaked * sizeof *q, nc * sizeof *q);
    if (!q) {
      keel_mutex_unlock(&s->pool_lock);
      return;
    }
    s->leaked = q;
    s->cap_leaked = nc;
  }
  keel_val_ref(&s->leaked[s->n_leaked++], v);
  keel_mutex_unlock(&s->pool_lock);
}
