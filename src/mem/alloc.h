/* alloc.h: the caching allocator behind every tensor byte of a session.
 *
 * A heap takes segments from the system (keel_sys_pages) and serves blocks
 * from them: requests are rounded to 64 bytes and looked up in size bins
 * (8 bins per power of two, a bitmap of non-empty bins); for small
 * requests the smallest block that fits wins (best fit), for large ones
 * the lowest in memory (address-ordered first fit: the pages a run
 * touches stay near its peak). A larger block is split; a freed
 * block merges with free neighbours. Three pools keep blocks of unlike
 * lives apart: small requests (<= 64 KiB), larger ones (the activations of
 * a run, which come and go in the same order every run), and kept blocks
 * (keel_heap_alloc_kept: prepared state, which lives as long as the
 * session). One pool for every activation of 64 KiB or more lets them reuse
 * each other's pages, so a run touches about its peak and no more; kept
 * blocks made during the first run never sit between them. (With 1 MiB
 * and prepared state mixed in, the detector's activations touched 5 MB
 * more than they ever held at once.)
 *
 * Free segments stay cached until the trim policy sees no run needed them
 * for a while (below), keel_heap_trim(), or the cap on reserved bytes
 * needs them back. A request the cap cannot fit returns NULL
 * and counts an OOM; the heap stays consistent and usable.
 *
 * Every live block carries an owner tag (site id + loop iteration): two
 * integers written at allocation, so tags stay on in release builds. The
 * session resolves sites to graph paths, nodes and values.
 *
 * Thread-safe: one mutex per heap. The heap is reference counted so values
 * handed to the user may outlive their session.
 */
#ifndef KEEL_ALLOC_H
#define KEEL_ALLOC_H

#include <stdatomic.h>

#include "base/common.h"
#include "keel_stats.h"

#define KEEL_ALIGN 64 /* every block starts on a cache line */

/* Who owns a block: `site` indexes the session's site table (0 = the
 * session itself / unknown); `iter` is the innermost loop iteration. */
typedef struct keel_owner {
  uint32_t site;
  uint32_t iter;
} keel_owner;

typedef struct keel_heap keel_heap;
typedef struct keel_segment keel_segment;

typedef struct keel_block {
  uint8_t *ptr;               /* start of the block's bytes, KEEL_ALIGN-aligned */
  size_t size;                /* bytes the block spans in its segment        */
  size_t req;                 /* bytes the caller asked for                  */
  keel_segment *seg;
  struct keel_block *prev, *next;   /* neighbours in the segment, by address */
  struct keel_block *lprev, *lnext; /* free: its bin's list; live: live list */
  _Atomic uint64_t tag;       /* the owner, packed (keel_block_owner): written
                                 without the lock when a value takes over
                                 the bytes, so atomic                        */
  uint64_t seq;               /* allocation sequence number (for reports)    */
  uint16_t bin;
  uint8_t is_free;
  uint8_t pool;
} keel_block;

static inline uint64_t keel_owner_pack(keel_owner o) {
  return ((uint64_t)o.site << 32) | o.iter;
}
static inline keel_owner keel_block_owner(const keel_block *b) {
  uint64_t t = atomic_load_explicit(&((keel_block *)b)->tag, memory_order_relaxed);
  return (keel_owner){(uint32_t)(t >> 32), (uint32_t)t};
}

/* Automatic trim: at the end of every run (keel_heap_run_end) free segments
 * that no run took a block from in the last `window` runs go back to the
 * system, as long as reserved bytes stay at or above the floor: the
 * highest allocated figure of those runs plus `margin_pct` percent. A
 * segment that has to be taken again soon after such a release (within
 * four windows) doubles the window, up to KEEL_TRIM_MAX_WINDOW: a
 * workload that cycles through large shapes stops paying for releases
 * after a few cycles, while one burst is gone `window` runs after it. */
#define KEEL_TRIM_MAX_WINDOW 1024
#define KEEL_TRIM_DEFAULT_WINDOW 8
#define KEEL_TRIM_DEFAULT_MARGIN 25
typedef struct keel_trim_policy {
  bool enabled;
  unsigned window;            /* runs, 1..KEEL_TRIM_MAX_WINDOW             */
  unsigned margin_pct;
} keel_trim_policy;

/* Where a heap's segments come from: the system's pages (the default), or
 * a device's memory (src/device/: cuMemAlloc). The allocator's policy
 * (bins, pools, trim, cap, owner tags) is the same for every provider; it
 * only never touches the bytes of a provider that is not host-visible (no
 * debug fill, no ASan poisoning). `pages` returns NULL when the provider
 * refuses (out of device memory): the heap then counts an OOM as for the
 * system's pages. The provider outlives every heap made on it. */
typedef struct keel_mem_provider {
  const char *name;                 /* "cpu", "cuda:0": for messages      */
  void *(*pages)(void *ctx, size_t size);
  void (*pages_free)(void *ctx, void *p, size_t size);
  void *ctx;
  bool host_visible;
} keel_mem_provider;

KEEL_INTERNAL keel_heap *keel_heap_create(size_t mem_limit);
/* A heap whose segments come from `prov` (copied; NULL: the system's). */
KEEL_INTERNAL keel_heap *keel_heap_create_on(size_t mem_limit, const keel_mem_provider *prov);
/* The provider's name ("cpu" for the system's pages). */
KEEL_INTERNAL const char *keel_heap_device(const keel_heap *h);
KEEL_INTERNAL void keel_heap_set_trim(keel_heap *h, keel_trim_policy p);
/* A run ended: records its high-water mark and applies the trim policy. */
KEEL_INTERNAL void keel_heap_run_end(keel_heap *h);
/* The run ends seen so far and the trim window now (0 when there is no
 * automatic trim): for caches outside the heap that follow its policy
 * (the per-shape caches of oneDNN kernels). */
KEEL_INTERNAL uint64_t keel_heap_clock(keel_heap *h, unsigned *window);
KEEL_INTERNAL void keel_heap_retain(keel_heap *h);
/* h numbers its blocks from `from`'s sequence (retained until h is freed),
 * so that one mark (keel_heap_mark) tells "allocated since" for both: a
 * session's device heap shares its host heap's. Before any allocation. */
KEEL_INTERNAL void keel_heap_share_seq(keel_heap *h, keel_heap *from);
/* Drops a reference; the last one frees every segment. */
KEEL_INTERNAL void keel_heap_release(keel_heap *h);

/* A block of at least `n` bytes (n > 0). NULL when the cap or the system
 * refuses; keel_heap_oom_info() then says why. */
KEEL_INTERNAL keel_block *keel_heap_alloc(keel_heap *h, size_t n,
                                          keel_owner owner);
/* The same for a block that lives as long as the session (prepared
 * state): from a pool of its own, so that such blocks never sit between
 * the activations that come and go in every run. */
KEEL_INTERNAL keel_block *keel_heap_alloc_kept(keel_heap *h, size_t n,
                                               keel_owner owner);
KEEL_INTERNAL void keel_heap_free(keel_heap *h, keel_block *b);
/* A new owner for a live block (its bytes now hold another value: an
 * in-place kernel reused them). One relaxed store: no lock. */
static inline void keel_heap_retag(keel_block *b, keel_owner owner) {
  atomic_store_explicit(&b->tag, keel_owner_pack(owner), memory_order_relaxed);
}

/* Small fixed-size bookkeeping objects (<= KEEL_HEAP_OBJ_SIZE bytes: buffer
 * headers, sequence headers), from a free list; counted as meta bytes. */
#define KEEL_HEAP_OBJ_SIZE 128
KEEL_INTERNAL void *keel_heap_obj_alloc(keel_heap *h);
KEEL_INTERNAL void keel_heap_obj_free(keel_heap *h, void *p);
/* Variable-size bookkeeping (arrays of sequence items), counted as meta. */
KEEL_INTERNAL void *keel_heap_meta_realloc(keel_heap *h, void *p, size_t old,
                                           size_t n);

KEEL_INTERNAL void keel_heap_stats(keel_heap *h, keel_stats *st);
KEEL_INTERNAL uint64_t keel_heap_allocated(keel_heap *h);
KEEL_INTERNAL uint64_t keel_heap_reserved(keel_heap *h);
KEEL_INTERNAL void keel_heap_reset_peaks(keel_heap *h);
KEEL_INTERNAL size_t keel_heap_trim(keel_heap *h);
KEEL_INTERNAL void keel_heap_set_limit(keel_heap *h, size_t limit);

/* Why the last failed keel_heap_alloc failed, for the error message. */
typedef struct keel_oom_info {
  size_t request;
  uint64_t allocated, reserved, limit;
  bool by_cap;                /* the cap refused (else the system did)     */
} keel_oom_info;
KEEL_INTERNAL keel_oom_info keel_heap_oom_info(keel_heap *h);

/* Calls fn for each live block, under the heap's lock (fn must not call
 * back into the heap). */
KEEL_INTERNAL void keel_heap_foreach_live(keel_heap *h,
                                          void (*fn)(void *ud, const keel_block *b),
                                          void *ud);

/* An observer of every allocation and free (profiling): called under the
 * heap's lock, so it sees events one at a time and must not call back into
 * the heap. `allocated` is the heap's figure after the event. NULL turns it
 * off. */
typedef void (*keel_heap_hook)(void *ud, const keel_block *b, bool is_alloc,
                               uint64_t allocated);
KEEL_INTERNAL void keel_heap_set_hook(keel_heap *h, keel_heap_hook fn, void *ud);
/* The sequence number the next allocation will get (a mark for "blocks
 * allocated since"). */
KEEL_INTERNAL uint64_t keel_heap_mark(keel_heap *h);

/* Walks every segment and checks the block chains, bins and counters;
 * returns false (and why, in keel_last_error) on the first inconsistency. */
KEEL_INTERNAL bool keel_heap_check(keel_heap *h);

#endif /* KEEL_ALLOC_H */
