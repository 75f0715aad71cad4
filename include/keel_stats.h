/* keel_stats.h: memory statistics of a session's caching allocator.
 *
 * Every tensor byte keel uses comes from one allocator per session. It takes
 * segments from the system, carves blocks out of them (best fit in size bins,
 * split and merged), and keeps the figures below. `allocated` counts bytes in
 * live blocks (what tensors hold); `reserved` counts bytes in segments (what
 * the process holds). Both are zero once the session is destroyed and every
 * value it produced is released.
 */
#ifndef KEEL_STATS_H
#define KEEL_STATS_H

#include "keel.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_STATS_VERSION 5

typedef struct keel_stats {
  size_t size;              /* set to sizeof(keel_stats) before the call   */
  uint32_t version;         /* written: KEEL_STATS_VERSION                 */
  uint64_t allocated;       /* bytes in live blocks                        */
  uint64_t allocated_peak;
  uint64_t reserved;        /* bytes in segments held from the system      */
  uint64_t reserved_peak;
  uint64_t active_split;    /* live bytes in segments that are split       */
  uint64_t inactive_split;  /* free bytes in segments that are split       */
  uint64_t n_alloc;         /* block allocations served                    */
  uint64_t n_free;          /* block frees                                 */
  uint64_t n_cache_hit;     /* allocations served without a new segment    */
  uint64_t n_segment_alloc; /* segments taken from the system              */
  uint64_t n_segment_free;  /* segments returned to the system             */
  uint64_t n_segments;      /* segments held now                           */
  uint64_t n_oom;           /* allocations refused (cap or system)         */
  uint64_t mem_limit;       /* cap on reserved; 0 = none                   */
  double fragmentation;     /* 1 - largest free block / free bytes; 0 if none free */
  uint64_t meta_bytes;      /* bytes of keel's own bookkeeping (not tensors) */
  uint64_t bytes_allocated_total; /* sum of every block ever allocated     */
  uint64_t n_alloc_retries; /* requests that reached the cap and were retried
                               after giving back cached segments          */
  uint64_t prepared_bytes;  /* of `allocated`: kernels' prepared state, one
                               block per node at most (regrouped weights,
                               tree ensembles, lookup tables)             */
  /* version 2: the automatic trim (keel_options.trim_*) */
  uint64_t n_auto_release;  /* segments the trim policy returned           */
  uint64_t bytes_auto_release;
  uint64_t trim_floor;      /* reserved bytes it keeps at least, as of its
                               last look at idle segments: the recent
                               allocated high-water mark plus the margin   */
  uint64_t trim_window;     /* runs a free segment may sit unused before it
                               goes (starts at keel_options.trim_window,
                               doubles on each regret); 0 = policy off     */
  uint64_t n_trim_regret;   /* segments taken again soon after a release   */
  /* version 2: the session's pool of run contexts (frames of every graph;
   * one per run in flight), bounded by keel_options.run_pool_cap; counted
   * in meta_bytes as well */
  uint64_t run_ctx_pooled;  /* idle contexts kept for the next runs        */
  uint64_t run_ctx_in_use;  /* contexts of runs in flight                  */
  uint64_t run_ctx_bytes;   /* bytes of all of them                        */
  uint64_t run_ctx_created; /* contexts made (pool misses)                 */
  uint64_t run_ctx_reused;  /* runs served from the pool (hits)            */
  uint64_t run_ctx_evicted; /* contexts freed because the pool was full    */
  uint64_t run_pool_cap;
  /* version 3: what a kernel library (oneDNN) holds outside keel's
   * allocator: its primitive objects and their JIT code, measured with
   * malloc's own counters when each primitive is made (so an estimate:
   * another thread's malloc at that moment is counted too). Tensors,
   * packed weights and scratch are keel's (prepared_bytes, allocated). */
  uint64_t library_bytes;
  uint64_t library_objects; /* live primitives                             */
  /* the per-node caches of primitives for input shapes (at most 8 shapes
   * a node; the least recently used idle one goes first) */
  uint64_t shape_cache_hits;
  uint64_t shape_cache_misses;
  uint64_t shape_cache_evictions;
  /* version 4: convolution nodes whose first run chose keel's streamed
   * kernel (a large W and few output pixels: W prefetched as it is read) */
  uint64_t streamed_convs;
  /* ... and those whose first run chose keel's Winograd F(2x2, 3x3) kernel
   * (3x3 stride-1 convs of 64+ channels on 14x14 maps and larger) */
  uint64_t winograd_convs;
  /* version 5: ... and those whose first run chose oneDNN's Winograd
   * kernels (3x3 stride-1 convs of 64+ channels, by 16s, on 14x14 maps and
   * larger that keel's kernel leaves; AVX-512 CPUs) */
  uint64_t onednn_winograd_convs;
} keel_stats;

/* Fill `st` (st->size must be set). */
KEEL_API keel_status keel_stats_get(const keel_session_t *s, keel_stats *st);
/* The allocator figures of the session's device memory (keel_options.device
 * "cuda[:N]" or "emu"): the same fields as keel_stats_get's allocator
 * figures, for the device's heap (its cap is the session's mem_limit). *name,
 * when name is not NULL, is the device ("cuda:0"). KEEL_ERR_INVALID_ARG when
 * the session runs on the CPU alone. */
KEEL_API keel_status keel_stats_get_device(const keel_session_t *s, keel_stats *st,
                                           const char **name);
/* Reset the peaks to the current values (host and device). */
KEEL_API void keel_stats_reset_peaks(keel_session_t *s);
/* Return every free segment to the system; returns the bytes released. */
KEEL_API size_t keel_mem_trim(keel_session_t *s);
/* Change the cap on reserved bytes (0 = none). */
KEEL_API void keel_mem_set_limit(keel_session_t *s, size_t limit);
/* Print a human-readable summary through `out` (one call per line). */
KEEL_API void keel_stats_print(const keel_session_t *s,
                      void (*out)(void *arg, const char *line), void *arg);

/* ---------------------------------------------------------------------
 * Owner tags. Every block the allocator hands out records who owns it: the
 * node output (graph path, node name and op, value name) and the loop
 * iteration it was made in. Reports group live blocks by owner.
 * --------------------------------------------------------------------- */

/* Which blocks a live report covers. Zero fields mean "all". */
typedef struct keel_live_filter {
  size_t size;               /* sizeof(keel_live_filter)                   */
  uint64_t since;            /* only blocks allocated at or after this mark */
  const char *path_prefix;   /* only blocks owned by nodes of graphs whose
                                path starts with this ("main/loop/body")   */
  int64_t before_iteration;  /* > 0: only blocks made in an iteration below this */
  const char *inside_node;   /* only blocks owned by nodes inside the
                                sub-graphs of the node of this name        */
  int unreferenced;          /* in an on_iteration hook: only blocks that
                                no value of the running graphs refers to
                                (what a loop left behind, not what it
                                carries)                                   */
} keel_live_filter;

/* A mark for "blocks allocated from now on" (a sequence number). */
KEEL_API uint64_t keel_mem_mark(const keel_session_t *s);
/* Every live block matching `f` (may be NULL), grouped by owner, largest
 * first, one line per owner ("12.0 KB in 3 block(s): main/loop/body: node
 * 'add' (Add) value 'y' iteration 5"), as text or a JSON array. *bytes (may
 * be NULL) receives the matched total. Free *out with keel_free. */
KEEL_API keel_status keel_mem_live_report(const keel_session_t *s, const keel_live_filter *f,
                                 int json, char **out, uint64_t *bytes);

/* ---------------------------------------------------------------------
 * Profiling: per-node memory and a timeline, for the runs that follow
 * keel_profile_start. Start and stop between runs, not during one, and
 * profile one run at a time: the figures of concurrent runs would mix.
 * --------------------------------------------------------------------- */
enum { KEEL_PROFILE_MEMORY = 1, KEEL_PROFILE_TRACE = 2 };

/* Starts recording (clearing earlier records). */
KEEL_API keel_status keel_profile_start(keel_session_t *s, unsigned what);
/* Stops recording; the records stay until the next start or destroy. */
KEEL_API void keel_profile_stop(keel_session_t *s);

typedef struct keel_node_mem {
  const char *path, *node, *op; /* borrowed from the session               */
  uint64_t bytes_allocated;   /* blocks made for its outputs and scratch,
                                 summed over its executions                */
  uint64_t n_allocs;
  uint64_t peak_live;         /* the session's allocated bytes at their
                                 highest while the node ran                */
  uint64_t live_now;          /* bytes of its blocks live now              */
  uint64_t executions;        /* times it ran (iterations, inside loops)   */
  uint64_t ns;                /* time inside the node, summed              */
  /* Shapes at the node's last execution: inputs 0-2 and output 0 (what
   * FLOP counts need); rank -1 where absent or not a tensor. */
  int32_t in_rank[3], out_rank;
  int64_t in_dims[3][KEEL_MAX_RANK], out_dims[KEEL_MAX_RANK];
} keel_node_mem;

/* The records of every node that ran (up to cap); returns how many there
 * are. */
KEEL_API size_t keel_profile_nodes(const keel_session_t *s, keel_node_mem *out, size_t cap);
/* Bytes and blocks allocated while recording for values made through the
 * API (run inputs) and by the session itself: the rest of the total. */
KEEL_API void keel_profile_other(const keel_session_t *s, uint64_t *bytes, uint64_t *allocs);
/* A table of the `top` nodes by bytes allocated, with totals over all
 * nodes and the allocator's own figures for comparison. */
KEEL_API keel_status keel_profile_mem_report(const keel_session_t *s, int top, char **text);
/* The timeline in Chrome's trace-event format (opens in Perfetto and
 * chrome://tracing): a duration event per node execution and counter
 * events for allocated and reserved bytes. */
KEEL_API keel_status keel_profile_trace_json(const keel_session_t *s, char **json);

/* Test-only: when on, control flow keeps an extra reference to every
 * result of every sub-graph it runs (the If-branch leak of the detector
 * report), so tests can prove the steady-state checks catch such a leak. */
KEEL_API void keel_debug_leak_subgraph_results(keel_session_t *s, int on);

/* Test-only: keeps one extra reference to the value named `value` every
 * time a node produces it (a planted leak; NULL removes it). Returns
 * KEEL_ERR_INVALID_ARG when no node produces such a value. */
KEEL_API keel_status keel_debug_plant_leak(keel_session_t *s, const char *value);

/* Bytes keel currently holds from the system in this process, over all
 * sessions: segments, bookkeeping, model mappings excluded. Zero when nothing
 * keel made is alive; tests assert that at exit. */
KEEL_API uint64_t keel_process_bytes(void);
/* The same for GPU memory: bytes keel holds from cuMemAlloc, over all
 * devices (device heaps' segments). Zero when nothing keel made is alive. */
KEEL_API uint64_t keel_process_device_bytes(void);

/* NVIDIA GPUs keel can use (the driver's libcuda.so.1, opened at run time:
 * keel needs no CUDA at build time). 0 when there is none, with the reason
 * in `why` (may be NULL): no driver library, no device, an old driver. */
KEEL_API int keel_gpu_count(char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif /* KEEL_STATS_H */
