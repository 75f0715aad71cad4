/* profile.c: where memory goes, in graph terms.
 *
 * Owner sites name every block: site -> (graph path, node, output value),
 * plus the iteration stored in the block. On top of that:
 *   - live reports: the allocator's live blocks grouped by owner;
 *   - the profiler: an allocator hook that adds every block to the record of
 *     the node whose output (or scratch) it is, a stack of the nodes running
 *     now (control-flow nodes hold their bodies' nodes) whose peaks follow
 *     the allocated figure, per-node time and executions, and an optional
 *     event list for the Chrome trace.
 * Everything here is off the run path unless profiling was started: the
 * executor tests one pointer per node.
 */
#include "exec/profile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "dist/comm.h"
#include "base/sysmem.h"
#include "keel_dist.h"
#include "exec/session.h"

/* MAX_DEPTH: nodes running at once, one inside another's sub-graph (the
 * nesting of control flow, far below this in real models). MAX_EVENTS:
 * the trace's cap, so a long profiled loop cannot grow it without bound. */
#define MAX_DEPTH 64
#define MAX_EVENTS (4u << 20)

/* One node's figures, kept at its base site: bytes and allocs of every
 * block made for any of its outputs, its scratch and its prepared state;
 * peak: the highest allocated figure seen while it ran (its sub-graphs'
 * nodes included); executions and ns: how often and how long it ran. */
typedef struct prof_rec {
  uint64_t bytes, allocs, peak, executions, ns;
  uint64_t dev_bytes, dev_allocs; /* the same on the session's device        */
} prof_rec;

/* Shapes of a node's last execution (keel_node_mem.in_rank...). */
typedef struct prof_shapes {
  bool recorded;
  int32_t in_rank[3], out_rank;
  int64_t in_dims[3][KEEL_MAX_RANK], out_dims[KEEL_MAX_RANK];
} prof_shapes;

/* One node execution for the Chrome trace, with the heap's figures as it
 * ended (drawn as a memory counter beside the node). */
typedef struct prof_event {
  const keel_node *node;
  uint32_t iter;
  uint64_t t0, t1, allocated, reserved;
  uint64_t dev_allocated, dev_reserved; /* the device's heap, when there is one */
} prof_event;

/* One profiler per session. The tables, the stack and the events are
 * written under `lock`: the allocator hook runs on whichever thread
 * allocates, the enter/leave calls on the run's thread. The stack of
 * running nodes is one for the session, which is why profiling covers one
 * run at a time (keel_stats.h). */
struct keel_profile {
  unsigned what;
  keel_session_t *s;
  keel_mutex lock;
  uint32_t n_sites;
  uint32_t *base;                 /* site -> the site of its node's output 0 */
  prof_rec *rec;                  /* indexed by base site                  */
  prof_shapes *shapes;            /* indexed by base site (untouched pages
                                     for sites that are not a node's)       */
  uint32_t stack[MAX_DEPTH];
  int depth;
  prof_event *ev;
  size_t n_ev, cap_ev;
  uint64_t t_origin;
};

/* =============================================================== sites */

/* Every site number has a text: one the table does not know, or 0 (all
 * blocks with owner tags off), reads "the session", never an error, so a
 * report cannot fail on what it describes. */
const char *keel_site_text(const keel_session_t *s, uint32_t site, char *buf, size_t cap) {
  if (site == KEEL_SITE_USER) snprintf(buf, cap, "values made through the API (run inputs)");
  else if (site < s->n_sites && s->sites[site].label) snprintf(buf, cap, "%s", s->sites[site].label);
  else if (site < KEEL_SITE_FIRST_NODE || site >= s->n_sites || !s->sites[site].node)
    snprintf(buf, cap, "the session");
  else {
    const keel_site *t = &s->sites[site];
    char lb[256];
    keel_node_label(t->node, lb, sizeof lb);
    if (t->out == KEEL_SITE_OUT_PREPARED)
      snprintf(buf, cap, "%s: prepared state of node %s (%s)", t->g->path, lb,
               t->node->impl ? t->node->impl->name : "reference");
    else if (t->out >= 0 && t->out < t->node->n_out && t->node->out_names[t->out][0])
      snprintf(buf, cap, "%s: node %s value '%s'", t->g->path, lb, t->node->out_names[t->out]);
    else snprintf(buf, cap, "%s: node %s (scratch)", t->g->path, lb);
  }
  return buf;
}

/* ======================================================== string output */

/* A growing report, malloc'ed because the caller frees it with keel_free
 * (plain free). A failure is sticky, so builders never check a put;
 * finish() turns it into KEEL_ERR_OUT_OF_MEMORY. */
typedef struct text {
  char *p;
  size_t len, cap;
  bool failed;
} text;

static void put(text *t, const char *fmt, ...) KEEL_PRINTF(2, 3);
/* Two tries are enough: the first measures what did not fit, the buffer
 * then grows by at least that much (and 4 KB more, so small puts do not
 * realloc every time). */
static void put(text *t, const char *fmt, ...) {
  for (int tries = 0; tries < 2 && !t->failed; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) break;
    if (t->p && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = KEEL_MAX(t->cap * 2, t->len + (size_t)n + 4096);
    char *q = realloc(t->p, cap);
    if (!q) break;
    t->p = q;
    t->cap = cap;
  }
  t->failed = true;
}

static void put_json_str(text *t, const char *s) {
  put(t, "\"");
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') put(t, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) put(t, "\\u%04x", *s);
    else put(t, "%c", *s);
  }
  put(t, "\"");
}

static keel_status finish(text *t, char **out) {
  if (t->failed || !t->p) {
    free(t->p);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "building a report");
  }
  *out = t->p;
  return KEEL_OK;
}

static const char *bytes_text(uint64_t b, char *buf, size_t cap) {
  if (b >= (1ull << 30)) snprintf(buf, cap, "%.1f GB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20)) snprintf(buf, cap, "%.1f MB", (double)b / (double)(1ull << 20));
  else if (b >= 1024) snprintf(buf, cap, "%.1f KB", (double)b / 1024.0);
  else snprintf(buf, cap, "%llu B", (unsigned long long)b);
  return buf;
}

/* ========================================================= live reports */

/* One line of a live report: the blocks of one (site, iteration) pair.
 * Iterations are kept apart because "what did iteration 5 leave behind"
 * is the question a loop leak raises. */
typedef struct owner_sum {
  keel_owner owner;
  uint64_t bytes, blocks;
} owner_sum;

typedef struct live_walk {
  const keel_session_t *s;
  keel_live_filter f;
  const keel_block **held;     /* referenced by running frames (sorted)  */
  size_t n_held;
  owner_sum *sums;
  size_t n, cap;
  uint64_t total;
  bool failed;
} live_walk;

/* The filter's graph conditions. Only a node's site has a graph: with a
 * path or node filter set, the session's and the API's blocks are never
 * shown, as they belong to no graph. Called under the heap's lock, like
 * everything live_one calls. */
static bool path_matches(const live_walk *w, uint32_t site) {
  if (!w->f.path_prefix && !w->f.inside_node) return true;
  if (site < KEEL_SITE_FIRST_NODE || site >= w->s->n_sites) return false;
  const keel_graph *g = w->s->sites[site].g;
  if (!g) return false; /* a labelled site belongs to no graph */
  if (w->f.path_prefix && strncmp(g->path, w->f.path_prefix, strlen(w->f.path_prefix)))
    return false;
  if (!w->f.inside_node) return true;
  for (; g->owner; g = g->parent) /* a sub-graph, at any depth, of that node */
    if (!strcmp(g->owner->name, w->f.inside_node)) return true;
  return false;
}

/* Called under the heap's lock: only plain memory here (no keel calls).
 * A binary search of the sorted array keel_exec_referenced made. */
static bool held(const live_walk *w, const keel_block *b) {
  size_t lo = 0, hi = w->n_held;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (w->held[mid] == b) return true;
    if ((uintptr_t)w->held[mid] < (uintptr_t)b) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

/* keel_heap_foreach_live's callback, under the heap's lock: it must not
 * call into the heap, so the sums grow with plain realloc and a failure
 * is only recorded (the report then fails as out of memory). */
static void live_one(void *ud, const keel_block *b) {
  live_walk *w = ud;
  keel_owner ow = keel_block_owner(b);
  if (b->seq < w->f.since || !path_matches(w, ow.site) || (w->held && held(w, b))) return;
  if (w->f.before_iteration > 0 && (int64_t)ow.iter >= w->f.before_iteration) return;
  /* a node's prepared state (and its per-shape caches) is the session's,
   * not what a loop's iterations left behind */
  if (w->f.unreferenced && ow.site < w->s->n_sites && w->s->sites[ow.site].node &&
      w->s->sites[ow.site].out == KEEL_SITE_OUT_PREPARED)
    return;
  w->total += b->size;
  for (size_t i = 0; i < w->n; i++)
    if (w->sums[i].owner.site == ow.site && w->sums[i].owner.iter == ow.iter) {
      w->sums[i].bytes += b->size;
      w->sums[i].blocks++;
      return;
    }
  if (w->n == w->cap) {
    size_t nc = w->cap ? w->cap * 2 : 64;
    owner_sum *q = realloc(w->sums, nc * sizeof *q);
    if (!q) {
      w->failed = true;
      return;
    }
    w->sums = q;
    w->cap = nc;
  }
  w->sums[w->n++] = (owner_sum){ow, b->size, 1};
}

/* Largest first; ties by site, then iteration, so equal reports print
 * the same lines in the same order. */
static int by_bytes(const void *a, const void *b) {
  const owner_sum *x = a, *y = b;
  return x->bytes != y->bytes ? (y->bytes > x->bytes ? 1 : -1)
                              : (x->owner.site != y->owner.site ? (x->owner.site > y->owner.site ? 1 : -1)
                                                                : (x->owner.iter > y->owner.iter) - (x->owner.iter < y->owner.iter));
}

/* The lines of one heap's walk; `dev` names a device heap's ("cuda:0"),
 * NULL for the host's. `first` is the number of entries already written
 * (the JSON separator). */
static void live_lines(const live_walk *w, const char *dev, size_t first, int json, text *t) {
  char who[700], b[32];
  for (size_t i = 0; i < w->n; i++) {
    const owner_sum *o = &w->sums[i];
    keel_site_text(w->s, o->owner.site, who, sizeof who);
    if (json) {
      put(t, "%s{\"bytes\": %llu, \"blocks\": %llu, \"iteration\": %u, \"device\": \"%s\", \"owner\": ",
          i + first ? ", " : "", (unsigned long long)o->bytes, (unsigned long long)o->blocks, o->owner.iter,
          dev ? dev : "cpu");
      put_json_str(t, who);
      put(t, "}");
    } else {
      put(t, "%10s in %llu block(s): %s iteration %u%s%s\n", bytes_text(o->bytes, b, sizeof b),
          (unsigned long long)o->blocks, who, o->owner.iter, dev ? " on " : "", dev ? dev : "");
    }
  }
}

/* Host blocks, then the device's (w[1], when the session has a device). */
static void live_format(const live_walk *w, const char *dev, int json, text *t) {
  if (json) put(t, "[");
  live_lines(&w[0], NULL, 0, json, t);
  if (dev) live_lines(&w[1], dev, w[0].n, json, t);
  if (json) put(t, "]\n");
  else if (!w[0].n && !(dev && w[1].n)) put(t, "no live blocks\n");
}

uint64_t keel_mem_mark(const keel_session_t *s) { return s ? keel_heap_mark(s->heap) : 0; }

/* The `unreferenced` filter walks frames only inside an on_iteration hook
 * of a run of this session (keel_exec_hook_run): that run is paused in
 * the hook on this thread, so its frames hold still. The blocks they
 * refer to are collected and sorted once, before the heap walk, so the
 * per-block test under the heap's lock is a binary search. Outside a hook
 * only the filter's exclusion of prepared state applies. */
keel_status keel_mem_live_report(const keel_session_t *s, const keel_live_filter *f, int json,
                                 char **out, uint64_t *bytes) {
  if (!s || !out) return keel_err(KEEL_ERR_INVALID_ARG, "keel_mem_live_report: NULL argument");
  /* w[0]: the host's heap; w[1]: the device's (the same filter: the two
   * heaps share one sequence, so a mark holds for both) */
  live_walk w[2] = {{.s = s}, {.s = s}};
  if (f) memcpy(&w[0].f, f, KEEL_MIN(f->size ? f->size : sizeof w[0].f, sizeof w[0].f));
  keel_runctx *R = w[0].f.unreferenced ? keel_exec_hook_run() : NULL;
  if (R && R->s == s) KEEL_TRY(keel_exec_referenced(R, &w[0].held, &w[0].n_held));
  w[1].f = w[0].f, w[1].held = w[0].held, w[1].n_held = w[0].n_held;
  keel_heap_foreach_live(s->heap, live_one, &w[0]);
  if (s->dev_heap) keel_heap_foreach_live(s->dev_heap, live_one, &w[1]);
  keel_sys_free((void *)w[0].held, w[0].n_held * sizeof *w[0].held);
  for (int i = 0; i < 2; i++)
    if (w[i].n) qsort(w[i].sums, w[i].n, sizeof *w[i].sums, by_bytes);
  text t = {0};
  if (w[0].failed || w[1].failed) t.failed = true;
  else live_format(w, s->dev_heap ? keel_heap_device(s->dev_heap) : NULL, json, &t);
  free(w[0].sums), free(w[1].sums);
  if (bytes) *bytes = w[0].total + w[1].total;
  return finish(&t, out);
}

/* ============================================================ profiler */

/* The allocator hook, called under the heap's lock for every allocation
 * and free (frees are not counted: bytes and allocs are what a node made).
 * The block's site is folded into its node's base site; a site the
 * profiler does not know (labelled after it started) counts as the
 * session's. The new allocated figure raises the peak of every node on
 * the stack: a Loop's peak includes what its body's nodes hold. Lock
 * order: the heap's, then p->lock; nothing here calls back into the heap. */
static void on_block(void *ud, const keel_block *b, bool is_alloc, uint64_t allocated) {
  keel_profile *p = ud;
  if (!is_alloc) return;
  keel_mutex_lock(&p->lock);
  uint32_t os = keel_block_owner(b).site;
  uint32_t site = os < p->n_sites ? p->base[os] : KEEL_SITE_SESSION;
  p->rec[site].bytes += b->size;
  p->rec[site].allocs++;
  for (int d = 0; d < KEEL_MIN(p->depth, MAX_DEPTH); d++) /* deeper nodes are not on the stack */
    if (allocated > p->rec[p->stack[d]].peak) p->rec[p->stack[d]].peak = allocated;
  keel_mutex_unlock(&p->lock);
}

/* The device heap's hook: a node's blocks on the device, counted apart
 * (the peaks follow the host's figure, which is what peak_live means). */
static void on_dev_block(void *ud, const keel_block *b, bool is_alloc, uint64_t allocated) {
  keel_profile *p = ud;
  (void)allocated;
  if (!is_alloc) return;
  keel_mutex_lock(&p->lock);
  uint32_t os = keel_block_owner(b).site;
  uint32_t site = os < p->n_sites ? p->base[os] : KEEL_SITE_SESSION;
  p->rec[site].dev_bytes += b->size;
  p->rec[site].dev_allocs++;
  keel_mutex_unlock(&p->lock);
}

/* The node goes on the stack before it runs, with what is allocated now
 * as a first peak. Past MAX_DEPTH the
 * node is not recorded but depth still counts, so enter and leave stay
 * paired. The clock is read last, so the lock is not in the timing. */
void keel_prof_enter(keel_profile *p, const keel_node *n, uint32_t iter, uint64_t *t0) {
  (void)iter;
  uint64_t a = keel_heap_allocated(p->s->heap);
  keel_mutex_lock(&p->lock);
  if (p->depth < MAX_DEPTH) p->stack[p->depth] = n->site;
  p->depth++;
  if (a > p->rec[n->site].peak) p->rec[n->site].peak = a;
  keel_mutex_unlock(&p->lock);
  *t0 = keel_prim_now_ns();
}

/* Called under p->lock. A full or failed buffer drops the event rather
 * than fail the node: the trace is an observer, never a cause of error. */
static void add_event(keel_profile *p, const keel_node *n, uint32_t iter, uint64_t t0,
                      uint64_t t1, uint64_t allocated, uint64_t reserved, uint64_t dev_allocated,
                      uint64_t dev_reserved) {
  if (p->n_ev == p->cap_ev) {
    if (p->cap_ev >= MAX_EVENTS) return; /* the timeline keeps its first 4M events */
    size_t nc = p->cap_ev ? p->cap_ev * 2 : 4096;
    prof_event *q = keel_sys_realloc(p->ev, p->cap_ev * sizeof *q, nc * sizeof *q);
    if (!q) return;
    p->ev = q;
    p->cap_ev = nc;
  }
  p->ev[p->n_ev++] = (prof_event){n, iter, t0, t1, allocated, reserved, dev_allocated, dev_reserved};
}

static int32_t shape_of(const keel_val *v, int64_t *dims) {
  if (!v || v->kind != KEEL_V_TENSOR) return -1;
  memcpy(dims, v->t.shape, (size_t)v->t.rank * sizeof *dims);
  return v->t.rank;
}

/* The shapes of the first three inputs and of output 0, what
 * keel_node_mem reports. Each execution overwrites the last, so a report
 * shows the last shapes a node ran on; non-tensors and omitted inputs
 * have rank -1. */
static void record_shapes(prof_shapes *sh, const keel_node *n, const keel_val *const *in,
                          keel_val *const *out) {
  for (int i = 0; i < 3; i++)
    sh->in_rank[i] = i < n->n_in && in ? shape_of(in[i], sh->in_dims[i]) : -1;
  sh->out_rank = n->n_out > 0 && out ? shape_of(out[0], sh->out_dims) : -1;
  sh->recorded = true;
}

/* The clock first, so the lock and the figures are not in the timing.
 * The figures are read before p->lock is taken: keel_heap_reserved takes
 * the heap's lock, and taking it under p->lock would invert on_block's
 * order (heap, then profiler) and could deadlock. in is NULL when the node
 * failed: its time counts, its shapes are not recorded. */
void keel_prof_leave(keel_profile *p, const keel_node *n, uint32_t iter, uint64_t t0,
                     const keel_val *const *in, keel_val *const *out) {
  uint64_t t1 = keel_prim_now_ns();
  uint64_t a = keel_heap_allocated(p->s->heap);
  bool tr = (p->what & KEEL_PROFILE_TRACE) != 0;
  uint64_t r = tr ? keel_heap_reserved(p->s->heap) : 0;
  keel_heap *dh = p->s->dev_heap;
  uint64_t da = tr && dh ? keel_heap_allocated(dh) : 0, dr = tr && dh ? keel_heap_reserved(dh) : 0;
  keel_mutex_lock(&p->lock);
  p->depth--;
  prof_rec *rec = &p->rec[n->site];
  rec->executions++;
  rec->ns += t1 - t0;
  if (in) record_shapes(&p->shapes[n->site], n, in, out);
  if (tr) add_event(p, n, iter, t0, t1, a, r, da, dr);
  keel_mutex_unlock(&p->lock);
}

void keel_profile_free(keel_profile *p) {
  if (!p) return;
  keel_sys_free(p->base, (size_t)p->n_sites * sizeof *p->base);
  keel_sys_free(p->rec, (size_t)p->n_sites * sizeof *p->rec);
  keel_sys_free(p->shapes, (size_t)p->n_sites * sizeof *p->shapes);
  keel_sys_free(p->ev, p->cap_ev * sizeof *p->ev);
  keel_mutex_destroy(&p->lock);
  keel_sys_free(p, sizeof *p);
}

/* Tables indexed by site, for the sites that exist now. base[] maps
 * every site to the site of its node's output 0 (its other outputs, its
 * scratch and its prepared state all count for the node); the API's
 * site stays itself, and every site of no node (labels, the session)
 * becomes the session's. */
static keel_status profile_new(keel_session_t *s, unsigned what, keel_profile **out) {
  keel_profile *p = keel_sys_calloc(1, sizeof *p);
  if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "profiler");
  keel_mutex_init(&p->lock);
  p->what = what;
  p->s = s;
  p->n_sites = s->n_sites;
  p->base = keel_sys_calloc(s->n_sites, sizeof *p->base);
  p->rec = keel_sys_calloc(s->n_sites, sizeof *p->rec);
  p->shapes = keel_sys_calloc(s->n_sites, sizeof *p->shapes);
  if (!p->base || !p->rec || !p->shapes) {
    keel_profile_free(p);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "profiler");
  }
  for (uint32_t i = 0; i < s->n_sites; i++)
    p->base[i] = s->sites[i].node ? s->sites[i].node->site : (i == KEEL_SITE_USER ? i : KEEL_SITE_SESSION);
  p->t_origin = keel_prim_now_ns();
  *out = p;
  return KEEL_OK;
}

/* The new profiler is built first, so a failed start leaves the running
 * one (if any) recording. The hook is installed before the pointer is
 * published: a run that sees the profiler (keel_exec_graph loads it with
 * acquire) also has its blocks attributed. Earlier records are discarded. */
keel_status keel_profile_start(keel_session_t *s, unsigned what) {
  if (!s || !what) return keel_err(KEEL_ERR_INVALID_ARG, "keel_profile_start: nothing to record");
  keel_profile *p;
  KEEL_TRY(profile_new(s, what, &p));
  keel_profile_stop(s);
  keel_profile_free(s->profile_done);
  s->profile_done = NULL;
  keel_heap_set_hook(s->heap, on_block, p);
  if (s->dev_heap) keel_heap_set_hook(s->dev_heap, on_dev_block, p);
  atomic_store(&s->profile, p);
  return KEEL_OK;
}

/* The exchange makes one caller the owner of the stopped profiler. It is
 * kept, not freed, as profile_done: the reports read it after the stop,
 * until the next start or the session's destroy. */
void keel_profile_stop(keel_session_t *s) {
  if (!s) return;
  keel_profile *p = atomic_exchange(&s->profile, NULL);
  if (!p) return;
  keel_heap_set_hook(s->heap, NULL, NULL);
  if (s->dev_heap) keel_heap_set_hook(s->dev_heap, NULL, NULL);
  keel_profile_free(s->profile_done);
  s->profile_done = p;
}

/* The records: of the running profiler, else of the last stopped one. */
static keel_profile *records(const keel_session_t *s) {
  keel_profile *p = atomic_load(&((keel_session_t *)s)->profile);
  return p ? p : s->profile_done;
}

/* ============================================================= reports */

/* What each node's outputs still hold now ("live now" in the report),
 * summed by base site in one heap walk. */
typedef struct live_by_node {
  const keel_profile *p;
  uint64_t *live;
} live_by_node;

static void live_node(void *ud, const keel_block *b) {
  live_by_node *w = ud;
  uint32_t os = keel_block_owner(b).site;
  uint32_t site = os < w->p->n_sites ? w->p->base[os] : KEEL_SITE_SESSION;
  w->live[site] += b->size;
}

static void copy_shapes(keel_node_mem *m, const prof_shapes *sh) {
  bool ran = sh->recorded;
  for (int i = 0; i < 3; i++) {
    m->in_rank[i] = ran ? sh->in_rank[i] : -1;
    memcpy(m->in_dims[i], sh->in_dims[i], sizeof m->in_dims[i]);
  }
  m->out_rank = ran ? sh->out_rank : -1;
  memcpy(m->out_dims, sh->out_dims, sizeof m->out_dims);
}

/* One row per node that ran or allocated, at its base site (a node's
 * other sites were folded into it). Returns how many there are and fills
 * at most cap: called with cap 0 to size the array, then to fill it. If
 * the live table cannot be allocated, "live now" reads 0 rather than the
 * report failing. */
static size_t collect(const keel_session_t *s, const keel_profile *p, keel_node_mem *out,
                      uint64_t *dev_bytes, size_t cap) {
  uint64_t *live = keel_sys_calloc(p->n_sites, sizeof *live);
  if (live) {
    live_by_node w = {p, live};
    keel_heap_foreach_live(s->heap, live_node, &w);
  }
  size_t n = 0;
  for (uint32_t i = KEEL_SITE_FIRST_NODE; i < p->n_sites; i++) {
    const prof_rec *r = &p->rec[i];
    const keel_site *t = &s->sites[i];
    if (!t->node || t->node->site != i || (!r->executions && !r->allocs && !r->dev_allocs)) continue;
    if (n < cap && dev_bytes) dev_bytes[n] = r->dev_bytes;
    if (n < cap) {
      out[n] = (keel_node_mem){t->g->path, t->node->name, t->node->op_type, r->bytes, r->allocs,
                               r->peak, live ? live[i] : 0, r->executions, r->ns};
      copy_shapes(&out[n], &p->shapes[i]);
    }
    n++;
  }
  keel_sys_free(live, (size_t)p->n_sites * sizeof *live);
  return n;
}

size_t keel_profile_nodes(const keel_session_t *s, keel_node_mem *out, size_t cap) {
  const keel_profile *p = s ? records(s) : NULL;
  return p ? collect(s, p, out, NULL, cap) : 0;
}

/* What no node made: values made through the API (run inputs) and the
 * session's own blocks. */
void keel_profile_other(const keel_session_t *s, uint64_t *bytes, uint64_t *allocs) {
  const keel_profile *p = s ? records(s) : NULL;
  *bytes = p ? p->rec[KEEL_SITE_USER].bytes + p->rec[KEEL_SITE_SESSION].bytes : 0;
  *allocs = p ? p->rec[KEEL_SITE_USER].allocs + p->rec[KEEL_SITE_SESSION].allocs : 0;
}

/* A report row: the public record and what the node made on the device. */
typedef struct report_row {
  keel_node_mem m;
  uint64_t dev;
} report_row;

/* Most bytes first (host and device together); ties by node name. */
static int by_allocated(const void *a, const void *b) {
  const report_row *x = a, *y = b;
  uint64_t bx = x->m.bytes_allocated + x->dev, by = y->m.bytes_allocated + y->dev;
  return bx != by ? (by > bx ? 1 : -1) : strcmp(x->m.node, y->m.node);
}

/* `dev` names the session's device ("cuda:0"), or NULL: then no device
 * column. */
static void report_rows(text *t, const report_row *r, size_t n, int top, const char *dev) {
  char a[32], pk[32], l[32], d[32], who[320], head[48];
  put(t, "%-48s %-14s %10s %10s %10s %8s %6s", "node (graph)", "op", "allocated", "peak live",
      "live now", "allocs", "runs");
  if (dev) snprintf(head, sizeof head, "on %s", dev), put(t, " %10s", head);
  put(t, "\n");
  for (size_t i = 0; i < n && (int)i < top; i++) {
    const keel_node_mem *m = &r[i].m;
    snprintf(who, sizeof who, "%s (%s)", m->node[0] ? m->node : "?", m->path);
    put(t, "%-48.48s %-14.14s %10s %10s %10s %8llu %6llu", who, m->op,
        bytes_text(m->bytes_allocated, a, sizeof a), bytes_text(m->peak_live, pk, sizeof pk),
        bytes_text(m->live_now, l, sizeof l), (unsigned long long)m->n_allocs,
        (unsigned long long)m->executions);
    if (dev) put(t, " %10s", bytes_text(r[i].dev, d, sizeof d));
    put(t, "\n");
  }
}

/* Time in the collectives (one line; nothing for a model without them). */
static void collective_line(const keel_session_t *s, const keel_profile *p, text *t) {
  uint64_t calls = 0, ns = 0, all_ns = 0;
  for (uint32_t i = KEEL_SITE_FIRST_NODE; i < p->n_sites; i++) {
    const keel_node *nd = s->sites[i].node;
    if (!nd || nd->site != i) continue;
    if (!nd->n_subs) all_ns += p->rec[i].ns; /* leaf nodes: no double count */
    if (!keel_dist_is_collective(nd)) continue;
    calls += p->rec[i].executions;
    ns += p->rec[i].ns;
  }
  if (!calls) return;
  put(t, "collectives on rank %d of %d: %llu calls, %.3f ms (%.1f %% of the time in nodes)\n",
      keel_dist_rank(), keel_dist_size(), (unsigned long long)calls, (double)ns / 1e6,
      all_ns ? 100.0 * (double)ns / (double)all_ns : 0.0);
}

keel_status keel_profile_mem_report(const keel_session_t *s, int top, char **out) {
  const keel_profile *p = s ? records(s) : NULL;
  if (!p || !out) return keel_err(KEEL_ERR_INVALID_ARG, "no profile recorded (keel_profile_start)");
  /* count, allocate (n + 1: never a zero-size request, whose counted size
   * would differ from the one freed), fill */
  size_t n = collect(s, p, NULL, NULL, 0);
  keel_node_mem *m = keel_sys_calloc(n + 1, sizeof *m);
  uint64_t *dv = keel_sys_calloc(n + 1, sizeof *dv);
  report_row *r = keel_sys_calloc(n + 1, sizeof *r);
  if (!m || !dv || !r) {
    keel_sys_free(m, (n + 1) * sizeof *m), keel_sys_free(dv, (n + 1) * sizeof *dv);
    keel_sys_free(r, (n + 1) * sizeof *r);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "memory report");
  }
  collect(s, p, m, dv, n);
  for (size_t i = 0; i < n; i++) r[i] = (report_row){m[i], dv[i]};
  qsort(r, n, sizeof *r, by_allocated);
  const char *dev = s->dev_heap ? keel_heap_device(s->dev_heap) : NULL;
  text t = {0};
  report_rows(&t, r, n, top > 0 ? top : 20, dev);
  uint64_t bytes = 0, allocs = 0, live = 0, dbytes = 0, ob, oa;
  for (size_t i = 0; i < n; i++)
    bytes += m[i].bytes_allocated, allocs += m[i].n_allocs, live += m[i].live_now, dbytes += dv[i];
  keel_profile_other(s, &ob, &oa);
  char a[32], b[32], c[32], d[32];
  put(&t, "%-63s %10s %10s %10s %8llu", "all nodes", bytes_text(bytes, a, sizeof a), "",
      bytes_text(live, c, sizeof c), (unsigned long long)allocs);
  if (dev) put(&t, " %6s %10s", "", bytes_text(dbytes, d, sizeof d));
  put(&t, "\n");
  put(&t, "%-63s %10s %21s %8llu\n", "values made through the API, the session", bytes_text(ob, b, sizeof b), "",
      (unsigned long long)oa);
  put(&t, "(%zu nodes ran; sizes are the allocator's 64-byte-rounded blocks%s%s%s)\n", n,
      dev ? "; the last column: what each node allocated on " : "", dev ? dev : "", dev ? ", summed" : "");
  collective_line(s, p, &t);
  keel_sys_free(m, (n + 1) * sizeof *m), keel_sys_free(dv, (n + 1) * sizeof *dv);
  keel_sys_free(r, (n + 1) * sizeof *r);
  return finish(&t, out);
}

/* The Chrome trace-event format (chrome://tracing, Perfetto): one
 * complete event ("X") per node execution and a counter ("C") with the
 * heap's figures at its end. Times are microseconds from the profiler's
 * start. Under MPI each rank is its own process id, so the traces of all
 * ranks can be loaded side by side. */
keel_status keel_profile_trace_json(const keel_session_t *s, char **out) {
  const keel_profile *p = s ? records(s) : NULL;
  if (!p || !out || !(p->what & KEEL_PROFILE_TRACE))
    return keel_err(KEEL_ERR_INVALID_ARG, "no trace recorded (keel_profile_start with KEEL_PROFILE_TRACE)");
  text t = {0};
  put(&t, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  int pid = keel_dist_rank() + 1; /* one process per rank under mpirun */
  if (keel_dist_size() > 1)
    put(&t, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"keel rank %d\"}}",
        pid, pid - 1);
  else
    put(&t, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": \"keel\"}}");
  for (size_t i = 0; i < p->n_ev; i++) {
    const prof_event *e = &p->ev[i];
    double ts = (double)(e->t0 - p->t_origin) / 1e3, dur = (double)(e->t1 - e->t0) / 1e3;
    char lb[256];
    put(&t, ",\n{\"name\": ");
    put_json_str(&t, keel_node_label(e->node, lb, sizeof lb));
    put(&t, ", \"cat\": ");
    put_json_str(&t, e->node->op_type);
    put(&t, ", \"ph\": \"X\", \"pid\": %d, \"tid\": 1, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"graph\": ",
        pid, ts, dur);
    put_json_str(&t, e->node->graph->path);
    put(&t, ", \"iteration\": %u}}", e->iter);
    put(&t, ",\n{\"name\": \"memory\", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, \"args\": "
            "{\"allocated\": %llu, \"reserved\": %llu}}",
        pid, (double)(e->t1 - p->t_origin) / 1e3, (unsigned long long)e->allocated,
        (unsigned long long)e->reserved);
    if (s->dev_heap) /* a counter of its own for the device's heap */
      put(&t, ",\n{\"name\": \"memory %s\", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, \"args\": "
              "{\"allocated\": %llu, \"reserved\": %llu}}",
          keel_heap_device(s->dev_heap), pid, (double)(e->t1 - p->t_origin) / 1e3,
          (unsigned long long)e->dev_allocated, (unsigned long long)e->dev_reserved);
  }
  put(&t, "\n]}\n");
  return finish(&t, out);
}
