/* exec.h: the session (immutable after load), runs, frames.
 *
 * A session holds the model IR, its plans, the kernels bound to each node,
 * the constants, the owner-tag site table and the allocator. It does not
 * change after creation, so any number of threads may run it at once.
 *
 * A run borrows a keel_runctx from the session's pool: one frame per graph of
 * the model (each graph is active at most once at a time within a run, as
 * ONNX has no recursion). Frames are reused across loop iterations and
 * across runs, but a run is used by one thread at a time. Between uses
 * every slot is empty (DESIGN rule 4). A frame's generation counter moves on
 * every entry and exit; a child that reads an outer value checks the
 * generation it saw when it entered, so a stale parent is an error, never a
 * dangling read.
 */
#ifndef KEEL_EXEC_H
#define KEEL_EXEC_H

#include "ops/dnnl/dnnl_glue.h"

#include <stdatomic.h>

#include "ops/kernel.h"
#include "ops/registry.h"
#include "keel_stats.h"

struct keel_profile;

typedef struct keel_frame {
  keel_val *slots;              /* g->n_slots                              */
  const keel_graph *g;
  struct keel_frame *parent;    /* set while the frame is active           */
  uint32_t gen;                 /* bumped on every entry and exit          */
  uint32_t parent_gen;          /* parent->gen seen at entry               */
  uint32_t iter;                /* iteration of the loop that runs it      */
  bool active;
  /* per-node scratch, sized for the widest node of the graph */
  const keel_val **in;
  keel_val **out;
  keel_val *dropped;            /* targets for omitted outputs             */
  int32_t max_in, max_out;
  /* values a control-flow node of this graph moves in and out of its
   * sub-graphs (loop-carried state, branch results): sized at run creation
   * for the widest such node, so control flow allocates no bookkeeping */
  keel_val *ctl;
  int32_t n_ctl;
} keel_frame;

/* Told after each node of the main graph has run, on the run's thread:
 * the graph outputs that node produced are final then (read them with
 * keel_exec_main_output). The data-parallel trainer starts a gradient
 * bucket's all-reduce as soon as the backward has produced its last
 * gradient. */
typedef struct keel_main_watch {
  void (*node_done)(void *ctx, struct keel_runctx *R, int32_t node);
  void *ctx;
} keel_main_watch;

typedef struct keel_runctx {
  struct keel_session_s *s;
  const keel_main_watch *watch; /* set by keel_run_tagged, or NULL        */
  keel_frame *frames;           /* indexed by graph id                     */
  struct keel_runctx *next;        /* pool link                               */
  size_t bytes;                 /* bookkeeping bytes, for freeing           */
  /* what may stop the current run (keel_run_opts), set by keel_run_ex */
  bool stoppable;               /* a deadline or a cancel flag is set      */
  uint64_t deadline_ns;         /* keel_prim_now_ns() limit; 0 = none      */
  uint64_t deadline_ms;         /* as given, for the message               */
  keel_cancel_flag *cancel;
  int64_t iter_limit;           /* the iteration guard; INT64_MAX = none   */
  int64_t iters;                /* loop iterations begun in this run       */
  int64_t *bind;                /* shape check (shapecheck.c): each symbol's
                                   value in this run, -1 unbound; NULL off */
  bool shapes_off;              /* this run's inputs are not the declared
                                   shapes: the check says nothing of it   */
} keel_runctx;

/* Who owns blocks allocated for one site: the value a node output writes. */
typedef struct keel_site {
  const keel_graph *g;
  const keel_node *node;        /* NULL for run inputs / session           */
  int32_t out;                  /* output index                            */
  const char *label;            /* a site that is no node's (the trainer's
                                   "param 'fc.weight'"); node is NULL then */
} keel_site;

struct keel_session_s {
  keel_model *m;
  keel_heap *heap;
  struct keel_pool *threads;    /* the threads of every run (base/pool.h)   */
  _Atomic uint64_t prepared_bytes; /* kernels' prepared state (keel_impl)   */
  keel_dnnl_figures lib;        /* what oneDNN holds outside keel          */
  keel_val *consts;             /* m->n_consts, kind TENSOR (STATIC)       */
  /* the device the place pass put nodes on (keel_options.device), or
   * NULL: CPU only, or a placed graph run on the host (PLAN_ONLY) */
  struct keel_device *dev;
  keel_heap *dev_heap;          /* the device's memory: keel's allocator on
                                   its provider; cap, trim, owner tags as
                                   the host heap's                        */
  keel_block *dev_workspace;    /* the device BLAS's workspace (its
                                   workspace_bytes of dev_heap), or NULL  */
  keel_val *dev_consts;         /* m->n_consts entries: the constants GPU
                                   nodes read, copied to the device once
                                   (TENSOR); EMPTY for the others          */
  keel_options opts;
  uint32_t owner_mask;          /* ~0u, or 0 with KEEL_OPT_NO_OWNER_TAGS   */
  keel_mutex pool_lock;
  keel_runctx *pool;               /* idle runs                               */
  /* the pool's figures, under pool_lock: a cap on idle contexts, how many
   * sit there and how many runs hold one, bytes of both, hits/misses and
   * the contexts freed because the pool was full */
  size_t pool_cap, n_pooled, n_in_use, ctx_bytes;
  uint64_t n_ctx_created, n_ctx_reused, n_ctx_evicted;
  uint32_t n_sites;
  keel_site *sites;
  /* cached descriptions of the main graph's inputs and outputs */
  keel_io_info *in_info, *out_info;
  /* test-only: when set, control flow keeps a reference to the results of
   * every sub-graph it runs (the If-leak of the detector report); used to
   * prove the steady-state tests catch it */
  bool debug_leak_branch_results;
  uint32_t debug_plant_site;    /* test-only planted leak; 0 = none        */
  keel_val *leaked;
  size_t n_leaked, cap_leaked;
  /* profiling (profile.c): the recording profiler, NULL when off (the
   * executor tests this once per node), and the last stopped one */
  struct keel_profile *_Atomic profile;
  struct keel_profile *profile_done;
  /* the shape check (KEEL_OPT_CHECK_SHAPES, shapecheck.c): NULL when off */
  struct keel_shapecheck *shapecheck;
};

/* Runs graph g in run R with `parent` as the enclosing frame. Inputs are
 * moved into the frame (each entry is EMPTY afterwards, also on error);
 * EMPTY entries take the input's default constant, if any. Outputs are
 * written to `outputs` (g->n_out entries, EMPTY on entry). On error every
 * slot of the frame is released and `outputs` are left EMPTY. */
KEEL_INTERNAL keel_status keel_exec_graph(keel_runctx *R, const keel_graph *g,
                                          keel_frame *parent, keel_val *inputs,
                                          int32_t n_inputs, keel_val *outputs,
                                          uint32_t iter);
/* Main-graph output `out` as it stands in the running main frame (for a
 * keel_main_watch, once the output's producer has run); NULL when it is
 * not there (yet). */
KEEL_INTERNAL const keel_val *keel_exec_main_output(keel_runctx *R, int32_t out);

/* True when every slot of f is EMPTY. */
KEEL_INTERNAL bool keel_frame_is_empty(const keel_frame *f);

/* Reports a loop iteration to the session's hook (no-op without one). */
KEEL_INTERNAL void keel_exec_iteration_hook(keel_runctx *R, const keel_node *loop,
                                            int64_t iteration);

/* The run whose on_iteration hook is being called on this thread (NULL
 * outside hooks), and the heap blocks its active frames refer to: a sorted
 * array from keel_sys_alloc (free with keel_sys_free(*blocks, *n * size)). */
KEEL_INTERNAL keel_runctx *keel_exec_hook_run(void);
KEEL_INTERNAL keel_status keel_exec_referenced(keel_runctx *R, const keel_block ***blocks,
                                              size_t *n);

/* Test hook: keep a reference to `v` in the session (debug leak switch). */
KEEL_INTERNAL void keel_exec_debug_leak(keel_runctx *R, const keel_val *v);

/* The run's stop conditions (deadline, cancel flag): KEEL_OK to go on,
 * else KEEL_ERR_CANCELLED / KEEL_ERR_TIMEOUT with "... before node X".
 * keel_exec_check is the cheap test the per-node loop makes first. */
KEEL_INTERNAL keel_status keel_exec_stop(keel_runctx *R, const keel_node *n);
static inline keel_status keel_exec_check(keel_runctx *R, const keel_node *n) {
  return KEEL_UNLIKELY(R->stoppable) ? keel_exec_stop(R, n) : KEEL_OK;
}
/* Counts one iteration of `loop` against the guard and checks the stop
 * conditions before it begins. */
KEEL_INTERNAL keel_status keel_exec_iteration(keel_runctx *R, const keel_node *loop,
                                              int64_t iteration);
/* Iterations the guard still allows this run. */
static inline int64_t keel_exec_iterations_left(const keel_runctx *R) {
  return R->iter_limit == INT64_MAX ? INT64_MAX : R->iter_limit - R->iters;
}

/* Run pool. keel_run_ctx_bytes: what one context of the model takes. */
KEEL_INTERNAL size_t keel_run_ctx_bytes(const keel_model *m);
KEEL_INTERNAL keel_status keel_run_acquire(struct keel_session_s *s, keel_runctx **R);
KEEL_INTERNAL void keel_run_release(keel_runctx *R);
KEEL_INTERNAL void keel_run_pool_free(struct keel_session_s *s);


#endif /* KEEL_EXEC_H */
