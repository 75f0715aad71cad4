/* session.c: creating a session (load -> resolve -> plan -> bind), the
 * public run entry point, input checks, and the memory-statistics API.
 *
 * Binding gives each node its kernel, looked up once by (domain, op_type,
 * opset); a node keel cannot run makes creation fail with
 * KEEL_ERR_UNSUPPORTED naming the op, domain and opset, before any run.
 * It also numbers the owner-tag sites: one per node output, so every block
 * a node allocates can be traced to the value it became.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/pool.h"
#include "dist/comm.h"
#include "exec/shapecheck.h"
#include "passes/pass.h"
#include "passes/place.h"
#include "base/prim.h"
#include "ir/scope.h"
#include "ops/common/conv_util.h"
#include "base/sysmem.h"
#include "onnx/onnx.h"
#include "exec/exec.h"
#include "exec/profile.h"
#include "exec/session.h"
#include "device/dev_blas.h"
#include "device/device.h"
#include "keel_stats.h"

/* ============================================================ binding */

/* The constant tensor behind each input of n (NULL where computed): what
 * an implementation's supports/prepare may look at, so that weights known
 * at load (a Conv's filter, a MatMul's B) can be repacked once instead of
 * on every run. */
static void node_consts(const keel_session_t *s, const keel_node *n, const keel_tensor **c) {
  for (int32_t i = 0; i < n->n_in; i++) {
    keel_ref r = n->in[i];
    c[i] = r != KEEL_REF_NONE && keel_ref_kind(r) == KEEL_REF_CONST
               ? &s->m->consts[keel_ref_const_index(r)]
               : NULL;
  }
}

/* Numbers the node's sites (one per output, or one for a node without
 * outputs, then its prepared state) and, once the table exists, fills
 * them. */
static void number_sites(keel_session_t *s, const keel_graph *g, keel_node *n, uint32_t *site) {
  n->site = *site;
  for (int32_t k = 0; k < n->n_out; k++) {
    if (s->sites) s->sites[*site] = (keel_site){g, n, k};
    (*site)++;
  }
  if (n->n_out == 0) {
    if (s->sites) s->sites[*site] = (keel_site){g, n, -1};
    (*site)++;
  }
  n->prep_site = *site;
  if (s->sites) s->sites[*site] = (keel_site){g, n, KEEL_SITE_OUT_PREPARED};
  (*site)++;
}

/* A node whose (domain, op_type, opset) has no kernel fails here, at
 * creation, with the op named: never at the first run that reaches it. */
static keel_status bind_graph(keel_session_t *s, const keel_graph *g, uint32_t *site) {
  for (int32_t i = 0; i < g->n_nodes; i++) {
    keel_node *n = &g->nodes[i];
    n->op = keel_ops_find(n->domain, n->op_type, n->opset);
    if (!n->op) return keel_err_prefix(keel_ops_unsupported(n), "graph '%s'", g->path);
    number_sites(s, g, n, site);
  }
  return KEEL_OK;
}

/* Two walks: the first only counts the sites (s->sites is still NULL, so
 * number_sites writes nothing), the second fills the table now that its
 * size is known. Both walks number in the same order, so a node's
 * n->site is the same after each. Sites 0 and 1 are the session and the
 * API's values (session.h). */
static keel_status bind(keel_session_t *s) {
  const keel_model *m = s->m;
  uint32_t n = KEEL_SITE_FIRST_NODE;
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(bind_graph(s, m->graphs[i], &n));
  s->sites = keel_sys_calloc(n, sizeof(keel_site));
  if (!s->sites) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "site table");
  s->n_sites = n;
  n = KEEL_SITE_FIRST_NODE;
  for (int32_t i = 0; i < m->n_graphs; i++) KEEL_TRY(bind_graph(s, m->graphs[i], &n));
  return KEEL_OK;
}

/* ======================================================= prepare */

/* Picks each node's implementation (the first listed one that supports
 * it, else the reference kernel) and builds its prepared state. Needs the
 * heap and the pool. */
static keel_status prepare_node(keel_session_t *s, keel_node *n) {
  /* KEEL_OPT_REFERENCE_KERNELS: every node on its op's reference kernel,
   * the baseline the faster implementations are tested against */
  const keel_impl *const *im = n->op->impls;
  /* a node placed on the device runs the GPU implementation, the only one
   * that reads device memory; placed but run on the host (PLAN_ONLY), it
   * runs as a CPU node */
  uint8_t dev = s->dev ? n->device : KEEL_NODE_CPU;
  if (!dev && (!im || (s->opts.flags & KEEL_OPT_REFERENCE_KERNELS))) return KEEL_OK;
  const keel_tensor *consts[KEEL_IMPL_MAX_IN];
  if (!dev && n->n_in > KEEL_IMPL_MAX_IN) return KEEL_OK; /* such nodes keep the reference */
  if (n->n_in > KEEL_IMPL_MAX_IN) return keel_err(KEEL_ERR_INTERNAL, "node '%s': too many inputs for %s", n->name, s->dev->name);
  node_consts(s, n, consts);
  keel_prep_ctx p = {n,
                     consts,
                     s->heap,
                     {n->prep_site & s->owner_mask, 0},
                     keel_pool_splits(s->threads),
                     &s->prepared_bytes,
                     s->m,
                     &s->lib,
                     (s->opts.flags & KEEL_OPT_NO_ONEDNN) != 0};
  /* the list's order is the preference (each family's select.c): the
   * first that takes the node wins. A prepare that fails is an error of
   * the session, not a reason to fall back to the next implementation. */
  for (; im && *im; im++) {
    if ((*im)->device != dev || !(*im)->supports(&p)) continue;
    void *state = NULL;
    if ((*im)->prepare) {
      keel_status st = (*im)->prepare(&p, &state);
      if (st) {
        char lb[256];
        return keel_err_prefix(st, "graph '%s': preparing node %s for %s", n->graph->path,
                               keel_node_label(n, lb, sizeof lb), (*im)->name);
      }
    }
    n->impl = *im;
    n->prep = state;
    return KEEL_OK;
  }
  if (dev) {
    char lb[256];
    return keel_err(KEEL_ERR_INTERNAL, "graph '%s': node %s is placed on %s, but no GPU implementation takes it",
                    n->graph->path, keel_node_label(n, lb, sizeof lb), s->dev->name);
  }
  return KEEL_OK;
}

/* The first binding in the process gives back the pages of code that ran
 * once: the libraries' start-up (OpenBLAS, MPI, oneDNN's CPU detection),
 * the loader and the passes (keel_prim_drop_linked_code; 1.9 MB on the
 * detector). Once: each later session would pay the page faults of
 * bringing its loader's code back in (0.3 ms on a model of one node).
 * KEEL_KEEP_CODE=1 keeps it (a uprobe placed before would be lost). */
static void drop_startup_code(void) {
  static atomic_flag done = ATOMIC_FLAG_INIT;
  const char *keep = getenv("KEEL_KEEP_CODE"); /* probes placed before binding */
  if (!atomic_flag_test_and_set(&done) && !(keep && keep[0] && strcmp(keep, "0")))
    keel_prim_drop_linked_code();
}

static keel_status prepare(keel_session_t *s) {
  for (int32_t i = 0; i < s->m->n_graphs; i++)
    for (int32_t k = 0; k < s->m->graphs[i]->n_nodes; k++)
      KEEL_TRY(prepare_node(s, &s->m->graphs[i]->nodes[k]));
  drop_startup_code();
  return KEEL_OK;
}

/* At destroy, while the heap that holds the prepared state still exists.
 * Clears impl and prep too, so nothing can reach the released state. */
static void unprepare(keel_session_t *s) {
  for (int32_t i = 0; i < s->m->n_graphs; i++)
    for (int32_t k = 0; k < s->m->graphs[i]->n_nodes; k++) {
      keel_node *n = &s->m->graphs[i]->nodes[k];
      if (n->impl && n->impl->release && n->prep) n->impl->release(n->prep, s->heap);
      n->impl = NULL, n->prep = NULL;
    }
  atomic_store(&s->prepared_bytes, 0);
}

/* ========================================================= io info */

/* A declared type as the public keel_io_info: for an optional or a
 * sequence, dtype, rank and dims describe the element tensor (keel.h).
 * The pointers (name, dims, dim_params) are borrowed from the model, so
 * they stay valid as long as the session. */
static void type_to_info(const keel_type *t, const char *name, bool has_default,
                         keel_io_info *io) {
  memset(io, 0, sizeof *io);
  io->name = name;
  io->has_default = has_default;
  const keel_type *e = t;
  if (t->kind == KEEL_TYPE_OPTIONAL) {
    io->optional = 1;
    e = t->elem ? t->elem : t;
  }
  io->kind = e->kind == KEEL_TYPE_SEQUENCE ? KEEL_KIND_SEQUENCE
             : e->kind == KEEL_TYPE_MAP    ? KEEL_KIND_MAP
                                           : KEEL_KIND_TENSOR;
  if (e->kind == KEEL_TYPE_SEQUENCE && e->elem) e = e->elem;
  io->dtype = (keel_dtype)e->dtype;
  io->rank = e->rank;
  io->dims = e->dims;
  io->dim_params = e->dim_params;
}

/* Built once, so keel_session_input/output are a copy and never fail.
 * The +1 keeps each request non-zero for a graph without inputs or
 * outputs: keel_sys_calloc counts a zero-size request as one byte, and
 * keel_session_destroy frees with the same n + 1. */
static keel_status build_io(keel_session_t *s) {
  const keel_graph *g = s->m->main;
  s->in_info = keel_sys_calloc((size_t)g->n_in + 1, sizeof(keel_io_info));
  s->out_info = keel_sys_calloc((size_t)g->n_out + 1, sizeof(keel_io_info));
  if (!s->in_info || !s->out_info) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "io info");
  for (int32_t i = 0; i < g->n_in; i++)
    type_to_info(&g->in_types[i], g->in_names[i], g->in_default[i] >= 0, &s->in_info[i]);
  for (int32_t i = 0; i < g->n_out; i++)
    type_to_info(&g->out_types[i], g->out_names[i], false, &s->out_info[i]);
  return KEEL_OK;
}

/* ========================================================== create */

/* The model's constants as values the executor can hand out by
 * reference (KEEL_REF_CONST). Each is a struct copy of the model's tensor,
 * sharing its bytes: the model owns them and outlives every run, so
 * nothing is copied or counted here. n + 1 for the reason build_io gives. */
static keel_status make_consts(keel_session_t *s) {
  const keel_model *m = s->m;
  s->consts = keel_sys_calloc((size_t)m->n_consts + 1, sizeof(keel_val));
  if (!s->consts) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "constants");
  for (int32_t i = 0; i < m->n_consts; i++) {
    s->consts[i].kind = KEEL_V_TENSOR;
    s->consts[i].t = m->consts[i];
  }
  return KEEL_OK;
}

/* keel_options.device: the model's placement target (m->gpu, read by the
 * place pass) and, for a session made to run, the device itself: opened
 * before the passes, so that a missing GPU fails first, with the reason
 * (no driver, no such GPU). KEEL_OPT_PLAN_ONLY places without a device
 * and runs the placed graph on the host. */
static keel_status open_device(keel_session_t *s) {
  keel_device_kind kind;
  int ordinal;
  KEEL_TRY(keel_device_parse(s->opts.device, &kind, &ordinal));
  if (!kind) return KEEL_OK;
  s->m->gpu = ordinal + 1;
  snprintf(s->m->gpu_name, sizeof s->m->gpu_name, "%s:%d", kind == KEEL_DEVICE_EMU ? "emu" : "cuda",
           ordinal);
  if (s->opts.flags & KEEL_OPT_PLAN_ONLY) return KEEL_OK;
  KEEL_TRY(keel_device_open(kind, ordinal, &s->dev));
  /* a GPU whose BLAS did not load (d->desc says why) runs the rest */
  s->m->gpu_no_blas = s->dev->blas == NULL;
  /* the same cap as the host's, per device (keel_options.mem_limit) */
  if (!(s->dev_heap = keel_heap_create_on(s->opts.mem_limit, keel_device_provider(s->dev))))
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "allocator of %s", s->dev->name);
  return KEEL_OK;
}

/* The constants that nodes placed on the device read, copied there once,
 * tagged as the session's. */
static keel_status device_consts(keel_session_t *s) {
  if (!s->dev) return KEEL_OK;
  keel_model *m = s->m;
  s->dev_consts = keel_sys_calloc((size_t)m->n_consts + 1, sizeof(keel_val));
  if (!s->dev_consts) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "constants on %s", s->dev->name);
  for (int32_t gi = 0; gi < m->n_graphs; gi++)
    for (int32_t ni = 0; ni < m->graphs[gi]->n_nodes; ni++) {
      keel_node *n = &m->graphs[gi]->nodes[ni];
      if (n->device != KEEL_NODE_GPU) continue;
      for (int32_t i = 0; i < n->n_in; i++) {
        if (n->in[i] == KEEL_REF_NONE || keel_ref_kind(n->in[i]) != KEEL_REF_CONST) continue;
        if (keel_place_host_input(n, i)) continue; /* a shape, axes: read on the host (passes/place.h) */
        if (i >= 32)
          return keel_err(KEEL_ERR_UNSUPPORTED, "node '%s' on %s: constant input %d (at most 32 inputs)",
                          n->name, s->dev->name, i);
        n->dev_consts |= 1u << i; /* the executor reads the device copy (run.c) */
        int32_t c = (int32_t)keel_ref_const_index(n->in[i]);
        keel_val *v = &s->dev_consts[c];
        if (v->kind != KEEL_V_EMPTY) continue;
        const keel_tensor *h = &s->consts[c].t;
        keel_status st = keel_tensor_alloc(s->dev_heap, h->dtype, h->rank, h->shape,
                                           (keel_owner){KEEL_SITE_SESSION, 0}, &v->t);
        if (!st) {
          v->kind = KEEL_V_TENSOR;
          if (h->data) st = keel_device_to_device(s->dev, v->t.data, h->data, keel_tensor_nbytes(h));
        }
        if (st) return keel_err_prefix(st, "copying constant input %d of node '%s' to %s", i, n->name, s->dev->name);
      }
    }
  return keel_device_sync(s->dev);
}

/* The device BLAS's workspace (cuBLAS would otherwise allocate its own,
 * outside keel's figures): a block of the device's heap that lives as
 * long as the session, tagged "BLAS workspace on cuda:0", when a node
 * the place pass put on the device uses the BLAS. Before any run, after
 * the heap exists. */
static keel_status device_workspace(keel_session_t *s) {
  const keel_dev_blas *b = s->dev ? s->dev->blas : NULL;
  if (!b || !b->set_workspace || !b->workspace_bytes || !s->m->gpu_uses_blas) return KEEL_OK;
  char label[96];
  uint32_t site;
  snprintf(label, sizeof label, "BLAS workspace on %s", s->dev->name);
  KEEL_TRY(keel_session_label_site(s, label, &site));
  s->dev_workspace = keel_heap_alloc_kept(s->dev_heap, b->workspace_bytes, (keel_owner){site & s->owner_mask, 0});
  if (!s->dev_workspace)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "%s: %zu bytes on %s (the cap or the device refused)", label,
                    b->workspace_bytes, s->dev->name);
  return b->set_workspace(s->dev, s->dev_workspace->ptr, b->workspace_bytes);
}

/* At destroy: the device copies of the constants, the device's heap (no
 * value outlives the session on a device: graph outputs are copied to
 * the host), then the device. A heap still holding blocks would free
 * them later through the device's provider: then the device is left open
 * rather than freed under it (a leak the report at destroy names). */
static void close_device(keel_session_t *s) {
  if (s->dev_consts)
    for (int32_t i = 0; i < s->m->n_consts; i++) keel_val_clear(&s->dev_consts[i]);
  keel_sys_free(s->dev_consts, ((size_t)s->m->n_consts + 1) * sizeof(keel_val));
  s->dev_consts = NULL;
  if (s->dev_workspace) keel_heap_free(s->dev_heap, s->dev_workspace);
  s->dev_workspace = NULL;
  bool empty = !s->dev_heap || !keel_heap_allocated(s->dev_heap);
  keel_heap_release(s->dev_heap);
  s->dev_heap = NULL;
  if (empty) keel_device_close(s->dev);
  s->dev = NULL;
}

/* The trim policy and the pool cap from the options (0 = defaults). */
static void configure_memory(keel_session_t *s) {
  const keel_options *o = &s->opts;
  keel_trim_policy p = {
      .enabled = !(o->flags & KEEL_OPT_NO_AUTO_TRIM),
      .window = o->trim_window ? o->trim_window : KEEL_DEFAULT_TRIM_WINDOW,
      .margin_pct = o->trim_margin_pct > 0    ? (unsigned)o->trim_margin_pct
                    : o->trim_margin_pct == 0 ? KEEL_DEFAULT_TRIM_MARGIN_PCT
                                              : 0};
  keel_heap_set_trim(s->heap, p);
  if (s->dev_heap) {
    keel_heap_set_trim(s->dev_heap, p);
    keel_heap_share_seq(s->dev_heap, s->heap); /* one mark for both (keel_mem_mark) */
  }
  s->lib.heap = s->heap; /* the per-shape caches follow the trim policy */
  s->pool_cap = o->run_pool_cap ? o->run_pool_cap : KEEL_DEFAULT_RUN_POOL_CAP;
}

/* Every creation path ends here; it takes m over, also on error (freed by
 * keel_session_destroy, or directly when not even the session could be
 * allocated). The order matters:
 *   - options first: no_library must be set before the passes (the layout
 *     pass asks whether oneDNN may run), the flags decide which passes run;
 *   - passes, resolve, plan: the graph the executor will run;
 *   - the shape check infers that graph, after the passes;
 *   - bind numbers the sites and finds every kernel, so an unsupported op
 *     fails before the heap, the threads and the prepared state exist;
 *   - the heap and the thread pool before prepare, which allocates
 *     prepared state on the heap and cuts work for the pool's splits.
 * On any error the half-built session is destroyed; keel_session_destroy
 * copes with every step not reached. */
static keel_status finish(keel_model *m, const keel_options *opts, keel_session_t **out) {
  keel_session_t *s = keel_sys_calloc(1, sizeof *s);
  if (!s) {
    keel_onnx_free(m);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "session");
  }
  s->m = m;
  keel_mutex_init(&s->pool_lock);
  /* opts->size lets a caller built against an older (smaller) or newer
   * (larger) keel_options pass it: copy what both know, zero the rest;
   * size 0 is taken as this version's size */
  if (opts) memcpy(&s->opts, opts, KEEL_MIN(opts->size ? opts->size : sizeof *opts, sizeof s->opts));
  s->opts.size = sizeof s->opts;
  s->owner_mask = (s->opts.flags & KEEL_OPT_NO_OWNER_TAGS) ? 0 : ~0u;
  m->no_library = (s->opts.flags & KEEL_OPT_NO_ONEDNN) != 0;
  keel_status st = open_device(s);
  if (!st) st = keel_ir_passes(m, !(s->opts.flags & KEEL_OPT_NO_GRAPH_PASSES));
  if (!st) st = keel_ir_resolve(m);
  if (!st) st = keel_ir_plan(m);
  const char *chk = getenv("KEEL_CHECK_SHAPES");
  if (!st && ((s->opts.flags & KEEL_OPT_CHECK_SHAPES) || (chk && chk[0] == '1')))
    st = keel_shapecheck_create(s);
  if (!st) st = bind(s);
  if (!st) st = keel_dist_bind(s->m, s->opts.comm);
  if (!st) st = make_consts(s);
  if (!st) st = build_io(s);
  if (!st && !(s->heap = keel_heap_create(s->opts.mem_limit)))
    st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "allocator");
  if (!st) configure_memory(s);
  if (!st) st = keel_pool_create(
                    s->opts.threads,
                    (s->opts.flags & KEEL_OPT_DETERMINISTIC) ? KEEL_DETERMINISTIC_SPLITS : 0, &s->threads);
  if (!st) keel_blas_init();
  if (!st) st = device_workspace(s);
  if (!st) st = device_consts(s);
  if (!st) st = prepare(s);
  if (st) {
    keel_err_prefix(st, "%s", m->path);
    keel_session_destroy(s);
    return st;
  }
  *out = s;
  return KEEL_OK;
}

keel_status keel_session_create_model(keel_model *m, const keel_options *opts,
                                      keel_session_t **out) {
  if (!m || !out) {
    keel_onnx_free(m);
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_create_model: NULL argument");
  }
  return finish(m, opts, out);
}

/* The label is copied into the model's arena, so it lives as long as the
 * session. The realloc may move the table, hence "before any run" in
 * session.h: a run's profiler or live report reads s->sites without a
 * lock. A profiler started before this call does not know the new site and
 * counts its blocks as the session's (profile.c, on_block). */
keel_status keel_session_label_site(keel_session_t *s, const char *label, uint32_t *site) {
  const char *l = keel_arena_strdup(s->m->arena, label);
  keel_site *t = l ? keel_sys_realloc(s->sites, (size_t)s->n_sites * sizeof *t,
                                      ((size_t)s->n_sites + 1) * sizeof *t)
                   : NULL;
  if (!t) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "owner-tag site for %s", label);
  t[s->n_sites] = (keel_site){NULL, NULL, -1, l};
  s->sites = t;
  *site = s->n_sites++;
  return KEEL_OK;
}

keel_status keel_session_create(const char *path, const keel_options *opts,
                                keel_session_t **out) {
  if (!path || !out) return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_create: NULL argument");
  keel_err_clear();
  keel_model *m;
  KEEL_TRY(keel_onnx_load_file(path, &m));
  return finish(m, opts, out);
}

keel_status keel_session_create_from_memory(const void *bytes, size_t len,
                                            const char *base_dir,
                                            const keel_options *opts,
                                            keel_session_t **out) {
  if ((!bytes && len) || !out)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_create_from_memory: NULL argument");
  keel_err_clear();
  keel_model *m;
  KEEL_TRY(keel_onnx_load_memory(bytes, len, base_dir, &m));
  return finish(m, opts, out);
}

/* Debug builds: at destroy, whatever the session's allocator still holds
 * (values the caller has not released) is listed by owner through the log
 * callback. */
static void report_live_at_destroy(keel_session_t *s) {
#if KEEL_DEBUG >= 1
  if (!s->opts.log || !s->heap || !keel_heap_allocated(s->heap)) return;
  char *rep = NULL;
  uint64_t bytes = 0;
  if (keel_mem_live_report(s, NULL, 0, &rep, &bytes)) return;
  char head[128];
  snprintf(head, sizeof head, "session destroyed with %llu bytes still live (values not released):",
           (unsigned long long)bytes);
  s->opts.log(s->opts.log_ud, KEEL_LOG_WARN, head);
  s->opts.log(s->opts.log_ud, KEEL_LOG_WARN, rep);
  keel_free(rep);
#else
  (void)s;
#endif
}

/* Also the clean-up of a failed creation, so every step checks whether it
 * was reached (s->heap NULL: nothing was allocated on it). The live report
 * comes first, while the sites and the model it names are still there.
 * The heap goes last and only by reference: values the caller still holds
 * keep it, and it is freed when the last of them is released (value.c). */
void keel_session_destroy(keel_session_t *s) {
  if (!s) return;
  report_live_at_destroy(s);
  if (s->heap) keel_profile_stop(s);
  keel_profile_free(s->profile_done);
  keel_run_pool_free(s);
  if (s->heap) unprepare(s);
  keel_pool_destroy(s->threads);
  for (size_t i = 0; i < s->n_leaked; i++) keel_val_clear(&s->leaked[i]);
  keel_sys_free(s->leaked, s->cap_leaked * sizeof(keel_val));
  const keel_graph *g = s->m->main;
  keel_sys_free(s->in_info, ((size_t)g->n_in + 1) * sizeof(keel_io_info));
  keel_sys_free(s->out_info, ((size_t)g->n_out + 1) * sizeof(keel_io_info));
  close_device(s);
  keel_sys_free(s->consts, ((size_t)s->m->n_consts + 1) * sizeof(keel_val));
  keel_sys_free(s->sites, (size_t)s->n_sites * sizeof(keel_site));
  keel_shapecheck_free(s->shapecheck);
  keel_onnx_free(s->m);
  keel_heap_release(s->heap); /* lives on while user values hold it */
  keel_mutex_destroy(&s->pool_lock);
  keel_sys_free(s, sizeof *s);
}

/* ============================================================ io API */

size_t keel_session_input_count(const keel_session_t *s) {
  return s ? (size_t)s->m->main->n_in : 0;
}
size_t keel_session_output_count(const keel_session_t *s) {
  return s ? (size_t)s->m->main->n_out : 0;
}

keel_status keel_session_input(const keel_session_t *s, size_t i, keel_io_info *info) {
  if (!s || !info || i >= (size_t)s->m->main->n_in)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_input: no input %zu", i);
  *info = s->in_info[i];
  return KEEL_OK;
}

keel_status keel_session_output(const keel_session_t *s, size_t i, keel_io_info *info) {
  if (!s || !info || i >= (size_t)s->m->main->n_out)
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_session_output: no output %zu", i);
  *info = s->out_info[i];
  return KEEL_OK;
}

int keel_session_is_random(const keel_session_t *s) {
  if (!s) return 0;
  for (int32_t i = 0; i < s->m->n_graphs; i++)
    for (int32_t k = 0; k < s->m->graphs[i]->n_nodes; k++)
      if (s->m->graphs[i]->nodes[k].op->flags & KEEL_OPF_RANDOM) return 1;
  return 0;
}

/* ============================================================== run */

/* The value against the declared type of a graph input. Kind and element
 * type are a contract: a mismatch is an error. Shapes are hints (exporters
 * and even the ONNX test suite declare wrong ones); kernels check what they
 * need, so a shape mismatch is only reported through the log callback. */
static keel_status check_input(const keel_session_t *s, const keel_type *t, const keel_val *v,
                               const char *name) {
  if (t->kind == KEEL_TYPE_OPTIONAL || t->kind == KEEL_TYPE_UNKNOWN) return KEEL_OK;
  if (v->kind == KEEL_V_NONE)
    return keel_err(KEEL_ERR_INVALID_ARG, "input '%s' is not optional", name);
  if (t->kind == KEEL_TYPE_SEQUENCE) {
    if (v->kind != KEEL_V_SEQUENCE)
      return keel_err(KEEL_ERR_INVALID_ARG, "input '%s' must be a sequence", name);
    return KEEL_OK;
  }
  if (t->kind == KEEL_TYPE_MAP) {
    if (v->kind != KEEL_V_MAP)
      return keel_err(KEEL_ERR_INVALID_ARG, "input '%s' must be a map", name);
    if (t->key_dtype && t->key_dtype != v->map->keys.dtype)
      return keel_err(KEEL_ERR_SHAPE, "input '%s' must have %s keys, got %s", name,
                      keel_dtype_name((keel_dtype)t->key_dtype), keel_dtype_name((keel_dtype)v->map->keys.dtype));
    return KEEL_OK;
  }
  if (v->kind != KEEL_V_TENSOR)
    return keel_err(KEEL_ERR_INVALID_ARG, "input '%s' must be a tensor", name);
  if (t->dtype && t->dtype != v->t.dtype)
    return keel_err(KEEL_ERR_SHAPE, "input '%s' must be %s, got %s", name,
                    keel_dtype_name((keel_dtype)t->dtype), keel_dtype_name((keel_dtype)v->t.dtype));
  bool ok = t->rank < 0 || t->rank == v->t.rank;
  for (int32_t d = 0; ok && t->rank >= 0 && d < t->rank; d++)
    ok = t->dims[d] < 0 || t->dim_params[d] || t->dims[d] == v->t.shape[d];
  if (ok) return KEEL_OK;
  if (!s->opts.log) return KEEL_OK;
  char want[256] = "[", got[256], msg[700];
  for (int32_t d = 0; d < t->rank; d++) {
    char one[64];
    if (t->dim_params[d]) snprintf(one, sizeof one, "%s%s", d ? "," : "", t->dim_params[d]);
    else if (t->dims[d] < 0) snprintf(one, sizeof one, "%s?", d ? "," : "");
    else snprintf(one, sizeof one, "%s%lld", d ? "," : "", (long long)t->dims[d]);
    strncat(want, one, sizeof want - strlen(want) - 2);
  }
  strcat(want, "]");
  snprintf(msg, sizeof msg, "input '%s' is declared %s, got %s", name, want,
           keel_shape_str(v->t.rank, v->t.shape, got, sizeof got));
  s->opts.log(s->opts.log_ud, KEEL_LOG_WARN, msg);
  return KEEL_OK;
}

/* Matches the caller's inputs to the main graph's by name (in[k] is graph
 * input k) and takes a reference to each: the caller's handle stays the
 * caller's, and the executor may move the reference into the frame. An
 * input left out takes its initializer (keel_exec_graph's default) or, if
 * its type is optional, an empty optional; any other missing input is an
 * error before the run starts. */
static keel_status bind_inputs(keel_session_t *s, const char *const *names,
                               keel_value_t *const *inputs, size_t n, keel_val *in) {
  const keel_graph *g = s->m->main;
  for (size_t i = 0; i < n; i++) {
    if (!names || !names[i] || !inputs || !inputs[i])
      return keel_err(KEEL_ERR_INVALID_ARG, "keel_run: input %zu is NULL", i);
    int32_t k = 0;
    while (k < g->n_in && strcmp(g->in_names[k], names[i])) k++;
    if (k == g->n_in) return keel_err(KEEL_ERR_INVALID_ARG, "the model has no input '%s'", names[i]);
    if (in[k].kind != KEEL_V_EMPTY)
      return keel_err(KEEL_ERR_INVALID_ARG, "input '%s' is given twice", names[i]);
    const keel_val *v = keel_value_val(inputs[i]);
    KEEL_TRY(check_input(s, &g->in_types[k], v, names[i]));
    keel_val_ref(&in[k], v);
  }
  for (int32_t k = 0; k < g->n_in; k++)
    if (in[k].kind == KEEL_V_EMPTY && g->in_default[k] < 0) {
      if (g->in_types[k].kind == KEEL_TYPE_OPTIONAL) in[k].kind = KEEL_V_NONE;
      else return keel_err(KEEL_ERR_INVALID_ARG, "input '%s' is missing", g->in_names[k]);
    }
  return KEEL_OK;
}

/* The run's stop conditions from its options (all off for NULL). Every
 * stop field is set, none kept: the context comes from the pool and still
 * holds the last run's. The deadline becomes an absolute time on the
 * monotonic clock, saturated instead of wrapped for huge deadline_ms, so
 * the per-node test is one comparison. */
static void set_stops(keel_runctx *R, const keel_run_opts *opts) {
  keel_run_opts o = {0};
  if (opts) memcpy(&o, opts, KEEL_MIN(opts->size ? opts->size : sizeof o, sizeof o));
  R->deadline_ms = o.deadline_ms;
  R->deadline_ns = 0;
  if (o.deadline_ms) {
    uint64_t now = keel_prim_now_ns(), d = o.deadline_ms;
    R->deadline_ns = d > (UINT64_MAX - now) / 1000000u ? UINT64_MAX : now + d * 1000000u;
  }
  R->cancel = o.cancel;
  R->stoppable = R->deadline_ns || R->cancel;
  R->iter_limit = o.max_iterations > 0    ? o.max_iterations
                  : o.max_iterations == 0 ? KEEL_RUN_DEFAULT_MAX_ITERATIONS
                                          : INT64_MAX;
  R->iters = 0;
  keel_shapecheck_begin(R);
}

/* A run the iteration guard stopped is reported through the log as well:
 * a loop that never ends is a model bug the caller should hear of. The
 * message text tells it from a passed deadline, which has the same code. */
static void report_guard(const keel_session_t *s, keel_status st) {
  if (st != KEEL_ERR_TIMEOUT || !s->opts.log || !strstr(keel_last_error(), "iteration guard"))
    return;
  s->opts.log(s->opts.log_ud, KEEL_LOG_WARN, keel_last_error());
}

keel_status keel_run_ex(keel_session_t *s, const char *const *names,
                        keel_value_t *const *inputs, size_t n_inputs,
                        keel_value_t **outputs, const keel_run_opts *opts) {
  return keel_run_tagged(s, names, inputs, n_inputs, outputs, opts, 0, NULL);
}

keel_status keel_run_tagged(keel_session_t *s, const char *const *names,
                            keel_value_t *const *inputs, size_t n_inputs,
                            keel_value_t **outputs, const keel_run_opts *opts, uint32_t iter,
                            const keel_main_watch *watch) {
  if (!s || !outputs) return keel_err(KEEL_ERR_INVALID_ARG, "keel_run: NULL argument");
  /* a size that does not even cover the size field is a caller bug */
  if (opts && opts->size && opts->size < sizeof(size_t))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_run_ex: keel_run_opts.size too small");
  keel_err_clear();
  const keel_graph *g = s->m->main;
  size_t nin = (size_t)g->n_in, nout = (size_t)g->n_out;
  /* graph inputs and outputs in one array; +1 as in build_io */
  keel_val *in = keel_sys_calloc(nin + nout + 1, sizeof(keel_val));
  if (!in) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "keel_run");
  keel_val *out = in + nin;
  keel_runctx *R = NULL;
  keel_status st = bind_inputs(s, names, inputs, n_inputs, in);
  if (!st) st = keel_run_acquire(s, &R);
  if (!st) set_stops(R, opts);
  /* the watch is set for this run only: the context goes back to the pool
   * and the next run that takes it may have none */
  if (R) R->watch = watch;
  if (!st) st = keel_exec_graph(R, g, NULL, in, g->n_in, out, iter);
  if (R) R->watch = NULL;
  report_guard(s, st);
  if (R) keel_run_release(R);
  /* the run moved the inputs into its frame; what is left here are the
   * references bind_inputs took before it failed or the run began */
  for (size_t i = 0; i < nin; i++) keel_val_clear(&in[i]);
  if (!st) st = keel_values_wrap(s, out, nout, outputs);
  for (size_t i = 0; i < nout; i++) keel_val_clear(&out[i]);
  keel_sys_free(in, (nin + nout + 1) * sizeof(keel_val));
  keel_heap_run_end(s->heap); /* the trim policy: after the run's temporaries are gone */
  if (s->dev_heap) keel_heap_run_end(s->dev_heap);
  return st;
}

keel_status keel_run(keel_session_t *s, const char *const *names,
                     keel_value_t *const *inputs, size_t n_inputs,
                     keel_value_t **outputs) {
  return keel_run_ex(s, names, inputs, n_inputs, outputs, NULL);
}

/* =========================================================== stats */

/* Gathered into a full-size struct, then copied up to the caller's size,
 * so a caller built against an older, smaller keel_stats gets the fields
 * it knows. The copy skips the size field: the caller's stays as it set
 * it. The run-pool figures are read under pool_lock so they agree with one
 * another (idle + in use, bytes). */
keel_status keel_stats_get(const keel_session_t *s, keel_stats *st) {
  if (!s || !st || st->size < sizeof(size_t) + sizeof(uint32_t))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_stats_get: NULL or unsized struct");
  keel_stats full = {.size = sizeof full};
  keel_heap_stats(s->heap, &full);
  full.prepared_bytes = s->prepared_bytes;
  full.library_bytes = atomic_load(&s->lib.bytes);
  full.library_objects = atomic_load(&s->lib.objects);
  full.shape_cache_hits = atomic_load(&s->lib.shape_hits);
  full.shape_cache_misses = atomic_load(&s->lib.shape_misses);
  full.shape_cache_evictions = atomic_load(&s->lib.shape_evictions);
  full.streamed_convs = atomic_load(&s->lib.streamed);
  full.winograd_convs = atomic_load(&s->lib.winograd);
  full.onednn_winograd_convs = atomic_load(&s->lib.dnnl_wino);
  keel_mutex_lock((keel_mutex *)&s->pool_lock);
  full.run_ctx_pooled = s->n_pooled;
  full.run_ctx_in_use = s->n_in_use;
  full.run_ctx_bytes = s->ctx_bytes;
  full.run_ctx_created = s->n_ctx_created;
  full.run_ctx_reused = s->n_ctx_reused;
  full.run_ctx_evicted = s->n_ctx_evicted;
  full.run_pool_cap = s->pool_cap;
  keel_mutex_unlock((keel_mutex *)&s->pool_lock);
  size_t n = KEEL_MIN(st->size, sizeof full);
  memcpy((uint8_t *)st + sizeof(size_t), (uint8_t *)&full + sizeof(size_t), n - sizeof(size_t));
  return KEEL_OK;
}

void keel_debug_leak_subgraph_results(keel_session_t *s, int on) {
  if (s) s->debug_leak_branch_results = on != 0;
}

/* Test-only: finds the site of the node output named `value`; the
 * observed per-node step then keeps a reference to that value each time it
 * is made (run.c, plant), so a test can check the leak reports name it. */
keel_status keel_debug_plant_leak(keel_session_t *s, const char *value) {
  if (!s) return keel_err(KEEL_ERR_INVALID_ARG, "keel_debug_plant_leak: NULL session");
  s->debug_plant_site = 0;
  if (!value) return KEEL_OK;
  for (uint32_t i = KEEL_SITE_FIRST_NODE; i < s->n_sites; i++) {
    const keel_site *t = &s->sites[i];
    if (t->node && t->out >= 0 && !strcmp(t->node->out_names[t->out], value)) {
      s->debug_plant_site = i;
      return KEEL_OK;
    }
  }
  return keel_err(KEEL_ERR_INVALID_ARG, "no node produces a value named '%s'", value);
}

/* The device's heap: the allocator's figures only (prepared state, the
 * libraries' and the run pool's figures are the host's). */
keel_status keel_stats_get_device(const keel_session_t *s, keel_stats *st, const char **name) {
  if (!s || !st || st->size < sizeof(size_t) + sizeof(uint32_t))
    return keel_err(KEEL_ERR_INVALID_ARG, "keel_stats_get_device: NULL or unsized struct");
  if (!s->dev_heap) return keel_err(KEEL_ERR_INVALID_ARG, "keel_stats_get_device: the session has no device");
  keel_stats full = {.size = sizeof full};
  keel_heap_stats(s->dev_heap, &full);
  size_t n = KEEL_MIN(st->size, sizeof full);
  memcpy((uint8_t *)st + sizeof(size_t), (uint8_t *)&full + sizeof(size_t), n - sizeof(size_t));
  if (name) *name = s->dev->name;
  return KEEL_OK;
}

/* The cap, trim and peaks apply to each device's heap alike. */
void keel_stats_reset_peaks(keel_session_t *s) {
  if (!s) return;
  keel_heap_reset_peaks(s->heap);
  if (s->dev_heap) keel_heap_reset_peaks(s->dev_heap);
}
size_t keel_mem_trim(keel_session_t *s) {
  return s ? keel_heap_trim(s->heap) + (s->dev_heap ? keel_heap_trim(s->dev_heap) : 0) : 0;
}
void keel_mem_set_limit(keel_session_t *s, size_t limit) {
  if (!s) return;
  keel_heap_set_limit(s->heap, limit);
  if (s->dev_heap) keel_heap_set_limit(s->dev_heap, limit);
}

static void human(uint64_t b, char *buf, size_t cap) {
  if (b >= (1ull << 30)) snprintf(buf, cap, "%.1f GB", (double)b / (1 << 30));
  else if (b >= (1ull << 20)) snprintf(buf, cap, "%.1f MB", (double)b / (1 << 20));
  else if (b >= 1024) snprintf(buf, cap, "%.1f KB", (double)b / 1024);
  else snprintf(buf, cap, "%llu B", (unsigned long long)b);
}

void keel_stats_print(const keel_session_t *s, void (*out)(void *arg, const char *line),
                      void *arg) {
  if (!s || !out) return;
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  char line[256], a[32], b[32];
  human(st.allocated, a, sizeof a), human(st.allocated_peak, b, sizeof b);
  snprintf(line, sizeof line, "allocated  %s (peak %s)", a, b);
  out(arg, line);
  human(st.reserved, a, sizeof a), human(st.reserved_peak, b, sizeof b);
  snprintf(line, sizeof line, "reserved   %s (peak %s) in %llu segment(s)", a, b,
           (unsigned long long)st.n_segments);
  out(arg, line);
  snprintf(line, sizeof line,
           "blocks     %llu allocations, %llu frees, %llu cache hits; %llu segment grows, "
           "%llu releases",
           (unsigned long long)st.n_alloc, (unsigned long long)st.n_free,
           (unsigned long long)st.n_cache_hit, (unsigned long long)st.n_segment_alloc,
           (unsigned long long)st.n_segment_free);
  out(arg, line);
  human(st.active_split, a, sizeof a), human(st.inactive_split, b, sizeof b);
  snprintf(line, sizeof line, "splits     active %s, inactive %s; fragmentation %.3f", a, b,
           st.fragmentation);
  out(arg, line);
  if (st.trim_window) {
    human(st.bytes_auto_release, a, sizeof a), human(st.trim_floor, b, sizeof b);
    snprintf(line, sizeof line,
             "auto trim  %llu segment(s) returned (%s), floor %s, window %llu run(s), "
             "%llu regret(s)",
             (unsigned long long)st.n_auto_release, a, b, (unsigned long long)st.trim_window,
             (unsigned long long)st.n_trim_regret);
  } else {
    snprintf(line, sizeof line, "auto trim  off");
  }
  out(arg, line);
  human(st.run_ctx_bytes, a, sizeof a);
  snprintf(line, sizeof line,
           "run pool   %llu idle + %llu in use of cap %llu (%s); %llu made, %llu reused, "
           "%llu evicted",
           (unsigned long long)st.run_ctx_pooled, (unsigned long long)st.run_ctx_in_use,
           (unsigned long long)st.run_pool_cap, a, (unsigned long long)st.run_ctx_created,
           (unsigned long long)st.run_ctx_reused, (unsigned long long)st.run_ctx_evicted);
  out(arg, line);
  if (st.library_objects || st.shape_cache_misses) {
    human(st.library_bytes, a, sizeof a), human(st.prepared_bytes, b, sizeof b);
    snprintf(line, sizeof line,
             "oneDNN     %llu primitive(s), %s outside keel's allocator (measured); prepared "
             "state %s; shape caches %llu hit(s), %llu miss(es), %llu eviction(s); %llu conv(s) "
             "on keel's streamed kernel, %llu on its Winograd kernel, %llu on oneDNN's",
             (unsigned long long)st.library_objects, a, b,
             (unsigned long long)st.shape_cache_hits, (unsigned long long)st.shape_cache_misses,
             (unsigned long long)st.shape_cache_evictions, (unsigned long long)st.streamed_convs,
             (unsigned long long)st.winograd_convs, (unsigned long long)st.onednn_winograd_convs);
    out(arg, line);
  }
}
