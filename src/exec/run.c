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

size_t keel_run_ctx_bytes(const keel_model *m) {
  size_t bytes = sizeof(keel_runctx) + (size_t)m->n_graphs * sizeof(keel_frame);
  for (int32_t i = 0; i < m->n_graphs; i++) {
    int32_t a, b, c;
    bytes += frame_bytes(m->graphs[i], &a, &b, &c);
  }
  return bytes;
}

/* One allocation holds the run, its frames and every frame's arrays. */
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
    case KEEL_REF_CONST: return &R->s->consts[keel_ref_const_index(r)];
    default: break;
  }
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

static void drop_scratch(keel_kctx *k) {
  for (int32_t i = 0; i < k->n_scratch; i++) keel_heap_free(k->heap, k->scratch[i]);
  k->n_scratch = 0;
}

static keel_status node_failed(const keel_node *n, keel_kctx *k, keel_status st) {
  for (int32_t i = 0; i < KEEL_MAX(n->n_out, KEEL_K_MIN_OUTS); i++) keel_val_clear(k->out[i]);
  drop_scratch(k);
  char lb[256];
  return keel_err_prefix(st, "node %s", keel_node_label(n, lb, sizeof lb));
}

static keel_status run_kernel(keel_runctx *R, keel_frame *f, const keel_node *n);

/* Drops the slots whose last use this node was. */
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
 * check and the test-only planted leak. Chosen per graph entry, so the plain step above
 * carries neither. */
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
 * frame's control slots as If/Loop/Scan do. */
static keel_status svc_subgraph(keel_kctx *k, const keel_graph *g, keel_val *in, keel_val *out) {
  keel_frame *f = k->frame;
  if (f->n_ctl < 2) return keel_err(KEEL_ERR_INTERNAL, "no control-flow slots to run a graph");
  keel_val *io = f->ctl;
  keel_val_move(&io[0], in);
  KEEL_TRY(keel_exec_graph(k->run, g, f, &io[0], 1, &io[1], f->iter));
  keel_val_move(out, &io[1]);
  return KEEL_OK;
}

static const void *svc_comm(const keel_kctx *k) { return k->run->s->opts.comm; }

static const keel_kservices g_services = {svc_subgraph, svc_comm};

/* Resolves inputs, calls the kernel, checks its outputs; releases are the
 * caller's. */
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
  if (KEEL_UNLIKELY(keel_k_has_narrow(f->in, n->n_in)) &&
      (st = keel_k_check_in_types(n, f->in, n->n_in))) {
    char lb[256];
    return keel_err_prefix(st, "node %s", keel_node_label(n, lb, sizeof lb));
  }
  int32_t n_targets = KEEL_MAX(n->n_out, KEEL_K_MIN_OUTS);
  for (int32_t i = 0; i < n_targets; i++)
    f->out[i] = i < n->n_out && n->out[i] >= 0 ? &f->slots[n->out[i]] : &f->dropped[i];
  /* field by field: the scratch array is only read below n_scratch, so it
   * is not cleared on every node */
  keel_kctx k;
  k.node = n, k.in = f->in, k.out = f->out, k.n_in = n->n_in, k.n_out = n->n_out;
  k.heap = R->s->heap, k.pool = R->s->threads, k.prep = n->prep;
  k.owner = (keel_owner){n->site & R->s->owner_mask, f->iter & R->s->owner_mask};
  k.svc = &g_services, k.run = R, k.frame = f, k.n_scratch = 0;
  st = n->impl && n->impl->fn ? n->impl->fn(&k) : n->op->fn(&k);
  if (KEEL_UNLIKELY(st)) return node_failed(n, &k, st);
  drop_scratch(&k);
  for (int32_t i = 0; i < n_targets; i++) {
    if (i >= n->n_out || n->out[i] < 0) {
      keel_val_clear(&f->dropped[i]);
    } else if (KEEL_UNLIKELY(f->slots[n->out[i]].kind == KEEL_V_EMPTY)) {
      st = keel_err(KEEL_ERR_INTERNAL, "kernel produced no value for output %d", i);
      return node_failed(n, &k, st);
    }
  }
  return KEEL_OK;
}

/* ===================================================== stopping */

/* "before node X" (n) or "before iteration I" (n NULL). */
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

static void frame_clear(keel_frame *f) {
  for (int32_t i = 0; i < f->g->n_slots; i++) keel_val_clear(&f->slots[i]);
}

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
  if (st) {
    for (int32_t i = 0; i < g->n_out; i++) keel_val_clear(&outputs[i]);
    frame_clear(f);
  }
  /* by the plan every slot is empty now; a leftover is a keel bug */
  keel_assert(keel_frame_is_empty(f));
  if (!st && !keel_frame_is_empty(f)) frame_clear(f);
  frame_exit(f);
  return st;
}

const keel_val *keel_exec_main_output(keel_runctx *R, int32_t out) {
  const keel_graph *g = R->s->m->main;
  keel_frame *f = &R->frames[g->id];
  if (!f->active || out < 0 || out >= g->n_out) return NULL;
  keel_status st = KEEL_OK;
  const keel_val *v = resolve(R, f, g->out[out], &st);
  return v && v->kind != KEEL_V_EMPTY ? v : NULL;
}

/* ====================================================== hooks */

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

typedef struct block_set {
  const keel_block **b;
  size_t n, cap;
  bool failed;
} block_set;

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
