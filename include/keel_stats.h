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

#define KEEL_STATS_VERSION 1

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
} keel_stats;

/* Fill `st` (st->size must be set). */
keel_status keel_stats_get(const keel_session_t *s, keel_stats *st);
/* Reset the peaks to the current values. */
void keel_stats_reset_peaks(keel_session_t *s);
/* Return every free segment to the system; returns the bytes released. */
size_t keel_mem_trim(keel_session_t *s);
/* Change the cap on reserved bytes (0 = none). */
void keel_mem_set_limit(keel_session_t *s, size_t limit);
/* Print a human-readable summary through `out` (one call per line). */
void keel_stats_print(const keel_session_t *s,
                      void (*out)(void *arg, const char *line), void *arg);

/* Test-only: when on, control flow keeps an extra reference to every
 * result of every sub-graph it runs (the If-branch leak of the detector
 * report), so tests can prove the steady-state checks catch such a leak. */
void keel_debug_leak_subgraph_results(keel_session_t *s, int on);

/* Bytes keel currently holds from the system in this process, over all
 * sessions: segments, bookkeeping, model mappings excluded. Zero when nothing
 * keel made is alive; tests assert that at exit. */
uint64_t keel_process_bytes(void);

#ifdef __cplusplus
}
#endif
#endif /* KEEL_STATS_H */
