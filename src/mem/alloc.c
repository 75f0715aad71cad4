/* alloc.c: the caching allocator (see alloc.h for the policy).
 *
 * Layout: a heap has three pools (small, large, kept). A pool has segments and 464
 * size bins with a bitmap of the non-empty ones. A segment is one system
 * mapping cut into blocks chained by address (prev/next); a free block sits
 * in the bin of its size, a live block in the heap's live list (for leak
 * reports). Block descriptors live outside the segment's bytes, so freed
 * memory can be poisoned whole and ASan can watch it.
 */
#include "mem/alloc.h"

#include "base/prim.h"
#include "base/status.h"
#include "base/sysmem.h"

#if defined(__SANITIZE_ADDRESS__)
#define KEEL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEL_ASAN 1
#endif
#endif
#ifdef KEEL_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* ------------------------------------------------------------ constants */

#define SMALL_REQUEST (64u << 10)         /* <= 64 KiB: small pool         */
#define SMALL_SEGMENT (2u << 20)          /* small pool segments: 2 MiB    */
#define SEG_SHARED (1u << 20)             /* <= 1 MiB: 2 MiB segments      */
#define MID_REQUEST (10u << 20)           /* <= 10 MiB: one 20 MiB segment */
#define MID_SEGMENT (20u << 20)
#define LARGE_ROUND (2u << 20)            /* larger: rounded to 2 MiB      */
#define KEPT_ROUND (64u << 10)            /*   larger: one each, to 64 KiB */
#define OPEN_RATIO 2                      /* an empty segment at most 2x   */
#define SMALL_MIN_SPLIT 512               /* split only when the rest is   */
#define LARGE_MIN_SPLIT (64u << 10)       /*   worth a block of its own    */
#define NBINS 464                         /* (63 - 6 + 1) * 8              */
#define BITMAP_WORDS ((NBINS + 63) / 64)
#define DESC_CHUNK 256                    /* block descriptors per chunk   */
#define OBJ_CHUNK 64                      /* small objects per chunk       */

enum { POOL_SMALL = 0, POOL_LARGE = 1, POOL_KEPT = 2, NPOOLS = 3 };

struct keel_segment {
  uint8_t *base;
  size_t size;
  keel_block *first;
  keel_segment *prev, *next;
  int pool;
  uint64_t used_epoch;           /* the run (heap epoch) that last took a
                                    block from it                          */
};

typedef struct pool {
  keel_block *bins[NBINS];
  uint64_t bitmap[BITMAP_WORDS];
  keel_segment *segments;
} pool;

typedef struct chunk {
  struct chunk *next;
  size_t bytes;
} chunk;

struct keel_heap {
  keel_mutex lock;
  _Atomic int refs;
  keel_mem_provider prov;        /* where segments come from               */
  pool pools[NPOOLS];
  keel_block *live;              /* live blocks, newest first              */
  keel_block *spare_desc;        /* free block descriptors                 */
  chunk *desc_chunks;
  void *spare_obj;               /* free small objects                     */
  chunk *obj_chunks;
  uint64_t limit;
  _Atomic uint64_t allocated;    /* read without the lock by hooks         */
  uint64_t allocated_peak, reserved, reserved_peak;
  uint64_t n_alloc, n_free, n_cache_hit, n_seg_alloc, n_seg_free, n_segments;
  uint64_t n_oom, meta_bytes, bytes_total;
  uint64_t n_retries;            /* cap reached: cached segments given back */
  _Atomic uint64_t seq;          /* this heap's allocation sequence, or ... */
  _Atomic uint64_t *seq_src;     /* ... another heap's (keel_heap_share_seq) */
  keel_heap *seq_heap;           /* that heap, retained                    */
  keel_oom_info last_oom;
  keel_heap_hook hook;
  void *hook_ud;
  /* automatic trim (keel_heap_run_end) */
  keel_trim_policy trim;
  uint64_t epoch;                /* run ends seen                          */
  uint64_t run_peak;             /* allocated high-water since the last end */
  uint64_t window_peaks[KEEL_TRIM_MAX_WINDOW]; /* per run end, a ring    */
  unsigned window;               /* runs a free segment may sit unused:
                                    trim.window, doubled on every regret   */
  uint64_t last_release_epoch;   /* when the policy last released          */
  bool regret_armed;             /* released, and no grow since            */
  uint64_t floor;                /* the last figure it kept                */
  uint64_t n_auto_release, bytes_auto_release, n_regret;
};

static bool check_locked(keel_heap *h);

/* ------------------------------------------------------------- size bins */

static unsigned bin_of(size_t s) {
  unsigned fl = 63u - (unsigned)__builtin_clzll((unsigned long long)s);
  unsigned sl = (unsigned)(s >> (fl - 3)) & 7u;
  return (fl - 6u) * 8u + sl;
}

static void bin_insert(pool *p, keel_block *b) {
  unsigned i = bin_of(b->size);
  b->bin = (uint16_t)i;
  b->lprev = NULL;
  b->lnext = p->bins[i];
  if (b->lnext) b->lnext->lprev = b;
  p->bins[i] = b;
  p->bitmap[i / 64] |= 1ull << (i % 64);
}

static void bin_remove(pool *p, keel_block *b) {
  unsigned i = b->bin;
  if (b->lprev) b->lprev->lnext = b->lnext;
  else p->bins[i] = b->lnext;
  if (b->lnext) b->lnext->lprev = b->lprev;
  if (!p->bins[i]) p->bitmap[i / 64] &= ~(1ull << (i % 64));
  b->lprev = b->lnext = NULL;
}

/* First non-empty bin at or after `i`, or NBINS. */
static unsigned next_bin(const pool *p, unsigned i) {
  unsigned w = i / 64;
  uint64_t m = p->bitmap[w] & (~0ull << (i % 64));
  while (!m) {
    if (++w == BITMAP_WORDS) return NBINS;
    m = p->bitmap[w];
  }
  return w * 64 + (unsigned)__builtin_ctzll(m);
}

/* A free block of at least `n` bytes, or NULL: the smallest (small pool),
 * or the lowest in memory (large pool). Large blocks are activations of
 * 64 KiB and more that come and go in the same order every run; taking the lowest
 * one that fits keeps the live ones packed at the bottom of their
 * segments, so the pages a run ever touches stay near its peak (best fit
 * spread the detector's over its whole 20 MiB segment: 3 MB more
 * resident). Free neighbours merge, so the large pool holds few free
 * blocks: the scan is short. */
static bool lower(const keel_block *a, const keel_block *b) {
  if (a->seg->size != b->seg->size) return a->seg->size < b->seg->size;
  return a->ptr < b->ptr;
}

/* `open_max` > 0: a wholly free segment larger than that is no fit (see
 * heap_alloc). */
static keel_block *find_fit(pool *p, size_t n, bool lowest, size_t open_max) {
  keel_block *best = NULL;
  for (unsigned i = next_bin(p, bin_of(n)); i < NBINS; i = next_bin(p, i + 1)) {
    for (keel_block *b = p->bins[i]; b; b = b->lnext)
      if (b->size >= n && (!best || (lowest ? lower(b, best) : b->size < best->size)) &&
          !(open_max && b->size == b->seg->size && b->size > open_max))
        best = b;
    if (best && !lowest) return best; /* bins past it hold only larger blocks */
  }
  return best;
}

/* ---------------------------------------------------- block descriptors */

static keel_block *desc_get(keel_heap *h) {
  if (!h->spare_desc) {
    size_t bytes = sizeof(chunk) + DESC_CHUNK * sizeof(keel_block);
    chunk *c = keel_sys_alloc(bytes);
    if (!c) return NULL;
    c->bytes = bytes;
    c->next = h->desc_chunks;
    h->desc_chunks = c;
    h->meta_bytes += bytes;
    keel_block *d = (keel_block *)(c + 1);
    for (int i = 0; i < DESC_CHUNK; i++) {
      d[i].lnext = h->spare_desc;
      h->spare_desc = &d[i];
    }
  }
  keel_block *b = h->spare_desc;
  h->spare_desc = b->lnext;
  memset(b, 0, sizeof *b);
  return b;
}

static void desc_put(keel_heap *h, keel_block *b) {
  b->lnext = h->spare_desc;
  h->spare_desc = b;
}

static void free_chunks(chunk *c) {
  while (c) {
    chunk *n = c->next;
    keel_sys_free(c, c->bytes);
    c = n;
  }
}

/* -------------------------------------------------------------- segments */

static size_t segment_size_for(int pi, size_t n) {
  if (pi == POOL_KEPT) return n <= SEG_SHARED ? SMALL_SEGMENT : keel_align_up(n, KEPT_ROUND);
  if (n <= SEG_SHARED) return SMALL_SEGMENT;
  if (n <= MID_REQUEST) return MID_SEGMENT;
  return keel_align_up(n, LARGE_ROUND);
}

static bool segment_is_free(const keel_segment *s) {
  return s->first->is_free && s->first->size == s->size;
}

static void segment_release(keel_heap *h, keel_segment *s) {
  keel_assert(segment_is_free(s) && h->reserved >= s->size && h->n_segments > 0);
  pool *p = &h->pools[s->pool];
  keel_block *b = s->first;
  bin_remove(p, b);
  desc_put(h, b);
  if (s->prev) s->prev->next = s->next;
  else p->segments = s->next;
  if (s->next) s->next->prev = s->prev;
  if (h->prov.host_visible) UNPOISON(s->base, s->size);
  h->prov.pages_free(h->prov.ctx, s->base, s->size);
  h->reserved -= s->size;
  h->n_seg_free++;
  h->n_segments--;
  keel_sys_free(s, sizeof *s);
  h->meta_bytes -= sizeof *s;
}

/* Releases every wholly free segment; returns the bytes released. */
static size_t release_free_segments(keel_heap *h) {
  size_t released = 0;
  for (int pi = 0; pi < NPOOLS; pi++) {
    keel_segment *s = h->pools[pi].segments;
    while (s) {
      keel_segment *n = s->next;
      if (segment_is_free(s)) {
        released += s->size;
        segment_release(h, s);
      }
      s = n;
    }
  }
  return released;
}

/* A segment grows soon after the policy released one: the window was too
 * short for this workload (a large shape that comes back every few dozen
 * runs), so it doubles. That is the hysteresis: a periodic workload makes
 * a few releases while it warms up, then none. */
static void note_regret(keel_heap *h) {
  if (!h->regret_armed || h->epoch - h->last_release_epoch > 4ull * h->window) return;
  h->regret_armed = false;
  h->window = KEEL_MIN(2 * h->window, KEEL_TRIM_MAX_WINDOW);
  h->n_regret++;
}

/* Takes a new segment that can hold `n` bytes and puts its one free block
 * in the pool's bins. Respects the cap: first by giving back free segments,
 * then by trying the smallest segment that fits. */
static keel_block *segment_grow(keel_heap *h, int pi, size_t n) {
  size_t size = segment_size_for(pi, n);
  if (h->limit && h->reserved + size > h->limit) {
    h->n_retries++;
    release_free_segments(h);
    if (h->reserved + size > h->limit) size = keel_align_up(n, 4096);
    if (h->reserved + size > h->limit) {
      h->last_oom.by_cap = true;
      return NULL;
    }
  }
  keel_segment *s = keel_sys_alloc(sizeof *s);
  keel_block *b = s ? desc_get(h) : NULL;
  uint8_t *base = b ? h->prov.pages(h->prov.ctx, size) : NULL;
  if (!base) {
    if (b) desc_put(h, b);
    keel_sys_free(s, sizeof *s);
    h->last_oom.by_cap = false;
    return NULL;
  }
  if (h->prov.host_visible) POISON(base, size);
  h->meta_bytes += sizeof *s;
  *s = (keel_segment){.base = base, .size = size, .first = b, .pool = pi};
  s->next = h->pools[pi].segments;
  if (s->next) s->next->prev = s;
  h->pools[pi].segments = s;
  *b = (keel_block){.ptr = base, .size = size, .seg = s, .is_free = 1,
                    .pool = (uint8_t)pi};
  bin_insert(&h->pools[pi], b);
  h->reserved += size;
  if (h->reserved > h->reserved_peak) h->reserved_peak = h->reserved;
  h->n_seg_alloc++;
  h->n_segments++;
  note_regret(h);
  return b;
}

/* ----------------------------------------------------------------- heap */

/* The system's pages (sysmem.c: counted in keel_process_bytes). */
static void *host_pages(void *ctx, size_t size) {
  (void)ctx;
  return keel_sys_pages(size);
}
static void host_pages_free(void *ctx, void *p, size_t size) {
  (void)ctx;
  keel_sys_pages_free(p, size);
}

keel_heap *keel_heap_create(size_t mem_limit) { return keel_heap_create_on(mem_limit, NULL); }

const char *keel_heap_device(const keel_heap *h) { return h->prov.name; }

keel_heap *keel_heap_create_on(size_t mem_limit, const keel_mem_provider *prov) {
  keel_heap *h = keel_sys_calloc(1, sizeof *h);
  if (!h) return NULL;
  h->prov = prov ? *prov
                 : (keel_mem_provider){.name = "cpu", .pages = host_pages,
                                       .pages_free = host_pages_free, .host_visible = true};
  keel_mutex_init(&h->lock);
  atomic_init(&h->refs, 1);
  atomic_init(&h->allocated, 0);
  atomic_init(&h->seq, 0);
  h->seq_src = &h->seq;
  h->limit = mem_limit;
  return h;
}

void keel_heap_retain(keel_heap *h) { atomic_fetch_add(&h->refs, 1); }

void keel_heap_share_seq(keel_heap *h, keel_heap *from) {
  keel_heap_retain(from);
  keel_heap_release(h->seq_heap);
  h->seq_heap = from;
  h->seq_src = from->seq_src;
}

void keel_heap_release(keel_heap *h) {
  if (!h || atomic_fetch_sub(&h->refs, 1) != 1) return;
  /* Live blocks here are a keel bug: every owner holds a heap reference. */
  keel_assert(h->live == NULL && atomic_load(&h->allocated) == 0);
  keel_assert_expensive(check_locked(h));
  for (int pi = 0; pi < NPOOLS; pi++) {
    keel_segment *s = h->pools[pi].segments;
    while (s) {
      keel_segment *n = s->next;
      if (h->prov.host_visible) UNPOISON(s->base, s->size);
      h->prov.pages_free(h->prov.ctx, s->base, s->size);
      keel_sys_free(s, sizeof *s);
      s = n;
    }
  }
  free_chunks(h->desc_chunks);
  free_chunks(h->obj_chunks);
  keel_mutex_destroy(&h->lock);
  keel_heap *seq_heap = h->seq_heap;
  keel_sys_free(h, sizeof *h);
  keel_heap_release(seq_heap);
}

/* Cuts `b` (free, already out of its bin) to `n` bytes when the rest is
 * worth keeping; the rest goes back to the bins. */
static void split(keel_heap *h, pool *p, keel_block *b, size_t n) {
  keel_assert_internal(b->is_free && n <= b->size && n % KEEL_ALIGN == 0);
  size_t rest = b->size - n;
  size_t min = b->pool != POOL_LARGE ? SMALL_MIN_SPLIT : LARGE_MIN_SPLIT;
  if (rest < min) return;
  keel_block *r = desc_get(h);
  if (!r) return; /* no descriptor: hand out the whole block */
  *r = (keel_block){.ptr = b->ptr + n, .size = rest, .seg = b->seg,
                    .prev = b, .next = b->next, .is_free = 1, .pool = b->pool};
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = n;
  bin_insert(p, r);
}

static keel_block *heap_alloc(keel_heap *h, size_t n, keel_owner owner, bool kept);
keel_block *keel_heap_alloc(keel_heap *h, size_t n, keel_owner owner) {
  return heap_alloc(h, n, owner, false);
}
keel_block *keel_heap_alloc_kept(keel_heap *h, size_t n, keel_owner owner) {
  return heap_alloc(h, n, owner, true);
}
static keel_block *heap_alloc(keel_heap *h, size_t n, keel_owner owner, bool kept) {
  keel_assert(n > 0);
  keel_mutex_lock(&h->lock);
  h->last_oom = (keel_oom_info){0};
  keel_block *b = NULL;
  if (n <= SIZE_MAX / 2) {
    size_t sz = keel_align_up(n, KEEL_ALIGN);
    int pi = kept ? POOL_KEPT : sz <= SMALL_REQUEST ? POOL_SMALL : POOL_LARGE;
    pool *p = &h->pools[pi];
    /* A request does not open an empty segment more than OPEN_RATIO times
     * the one it would grow: after a burst of wide inputs, the small
     * workload's activations would otherwise settle in a 20 MiB segment of
     * the burst (the only one of the pool, the lowest fit), take a block
     * from it every run, and the trim could never return it (a
     * text recogniser: 24 MiB reserved and 44 MB RSS 10 runs after the
     * burst, against 6 MiB and 18 MB for the small workload alone). It
     * grows a segment of its own size instead, and the burst's goes idle. */
    size_t open_max = pi == POOL_LARGE ? OPEN_RATIO * segment_size_for(pi, sz) : 0;
    b = find_fit(p, sz, pi == POOL_LARGE, open_max);
    if (b) h->n_cache_hit++;
    else b = segment_grow(h, pi, sz);
    if (!b && open_max) { /* neither the cap nor the system gave one: any fit */
      b = find_fit(p, sz, true, 0);
      if (b) h->n_cache_hit++;
    }
    if (b) {
      keel_assert_internal(b->is_free && b->size >= sz && b->pool == pi);
      bin_remove(p, b);
      split(h, p, b, sz);
    }
  }
  if (!b) {
    h->n_oom++;
    h->last_oom.request = n;
    h->last_oom.allocated = atomic_load(&h->allocated);
    h->last_oom.reserved = h->reserved;
    h->last_oom.limit = h->limit;
    keel_mutex_unlock(&h->lock);
    return NULL;
  }
  b->is_free = 0;
  b->req = n;
  atomic_store_explicit(&b->tag, keel_owner_pack(owner), memory_order_relaxed);
  b->seq = atomic_fetch_add_explicit(h->seq_src, 1, memory_order_relaxed) + 1;
  b->lprev = NULL;
  b->lnext = h->live;
  if (h->live) h->live->lprev = b;
  h->live = b;
  uint64_t a = atomic_load(&h->allocated) + b->size;
  atomic_store(&h->allocated, a);
  if (a > h->allocated_peak) h->allocated_peak = a;
  if (a > h->run_peak) h->run_peak = a;
  b->seg->used_epoch = h->epoch;
  h->n_alloc++;
  h->bytes_total += b->size;
  if (h->hook) h->hook(h->hook_ud, b, true, a);
  keel_mutex_unlock(&h->lock);
  if (!h->prov.host_visible) return b;
  UNPOISON(b->ptr, n); /* the tail past `n` stays poisoned: overflow guard */
#if KEEL_DEBUG >= 2
  memset(b->ptr, 0xCD, n); /* uninitialized reads show as 0xCDCD... */
#endif
  return b;
}

/* Merges free `b` with its free neighbour `nb` (nb directly after b). */
static void merge_next(keel_heap *h, pool *p, keel_block *b, keel_block *nb) {
  bin_remove(p, nb);
  b->size += nb->size;
  b->next = nb->next;
  if (nb->next) nb->next->prev = b;
  desc_put(h, nb);
}

void keel_heap_free(keel_heap *h, keel_block *b) {
  if (!b) return;
  if (h->prov.host_visible) {
#if KEEL_DEBUG >= 2
    memset(b->ptr, 0xDD, b->req); /* use-after-free reads show as 0xDDDD... */
#endif
    POISON(b->ptr, b->size);
  }
  keel_mutex_lock(&h->lock);
  keel_assert(!b->is_free);
  keel_assert(b->ptr >= b->seg->base && b->ptr + b->size <= b->seg->base + b->seg->size);
  keel_assert(atomic_load(&h->allocated) >= b->size);
  pool *p = &h->pools[b->pool];
  if (b->lprev) b->lprev->lnext = b->lnext;
  else h->live = b->lnext;
  if (b->lnext) b->lnext->lprev = b->lprev;
  atomic_store(&h->allocated, atomic_load(&h->allocated) - b->size);
  h->n_free++;
  if (h->hook) h->hook(h->hook_ud, b, false, atomic_load(&h->allocated));
  b->is_free = 1;
  atomic_store_explicit(&b->tag, 0, memory_order_relaxed);
  if (b->next && b->next->is_free) merge_next(h, p, b, b->next);
  if (b->prev && b->prev->is_free) {
    keel_block *pb = b->prev;
    bin_remove(p, pb);
    b->lprev = b->lnext = NULL;
    pb->size += b->size;
    pb->next = b->next;
    if (b->next) b->next->prev = pb;
    desc_put(h, b);
    b = pb;
  }
  bin_insert(p, b);
  keel_mutex_unlock(&h->lock);
}

/* --------------------------------------------------------- auto trim */

void keel_heap_set_trim(keel_heap *h, keel_trim_policy p) {
  keel_mutex_lock(&h->lock);
  p.window = KEEL_MAX(1u, KEEL_MIN(p.window, (unsigned)KEEL_TRIM_MAX_WINDOW));
  h->trim = p;
  h->window = p.window;
  keel_mutex_unlock(&h->lock);
}

uint64_t keel_heap_clock(keel_heap *h, unsigned *window) {
  keel_mutex_lock(&h->lock);
  uint64_t e = h->epoch;
  *window = h->trim.enabled ? h->window : 0;
  keel_mutex_unlock(&h->lock);
  return e;
}

/* The highest run peak of the last `window` run ends. */
static uint64_t window_high(const keel_heap *h) {
  uint64_t n = KEEL_MIN((uint64_t)h->window, h->epoch), hw = 0;
  for (uint64_t i = 1; i <= n; i++)
    hw = KEEL_MAX(hw, h->window_peaks[(h->epoch - i) % KEEL_TRIM_MAX_WINDOW]);
  return hw;
}

static bool segment_idle(const keel_heap *h, const keel_segment *s) {
  return segment_is_free(s) && s->used_epoch + h->window < h->epoch;
}

/* Releases the free segments no run used in the last `window` runs, the
 * large pool first, while reserved stays at or above the floor. The floor
 * (a walk over the window) is computed only when some segment is idle, so
 * a steady workload pays one walk over its few segments per run. */
static bool auto_release(keel_heap *h) {
  bool idle = false;
  for (int pi = 0; pi < NPOOLS && !idle; pi++)
    for (keel_segment *s = h->pools[pi].segments; s && !idle; s = s->next) idle = segment_idle(h, s);
  if (!idle) return false;
  uint64_t hw = window_high(h);
  h->floor = hw + hw * h->trim.margin_pct / 100;
  bool any = false;
  for (int pi = NPOOLS - 1; pi >= 0; pi--) {
    keel_segment *s = h->pools[pi].segments;
    while (s) {
      keel_segment *n = s->next;
      if (segment_idle(h, s) && h->reserved - s->size >= h->floor) {
        h->n_auto_release++;
        h->bytes_auto_release += s->size;
        segment_release(h, s);
        any = true;
      }
      s = n;
    }
  }
  return any;
}

void keel_heap_run_end(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  uint64_t a = atomic_load(&h->allocated);
  h->window_peaks[h->epoch % KEEL_TRIM_MAX_WINDOW] = KEEL_MAX(h->run_peak, a);
  h->epoch++;
  h->run_peak = a;
  if (h->trim.enabled) {
    if (auto_release(h)) {
      h->last_release_epoch = h->epoch;
      h->regret_armed = true;
    }
  }
  keel_assert_internal(h->reserved >= a);
  keel_assert_expensive(check_locked(h));
  keel_mutex_unlock(&h->lock);
}

/* ------------------------------------------------------- small objects */

void *keel_heap_obj_alloc(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  if (!h->spare_obj) {
    size_t bytes = sizeof(chunk) + OBJ_CHUNK * (size_t)KEEL_HEAP_OBJ_SIZE;
    chunk *c = keel_sys_alloc(bytes);
    if (!c) {
      keel_mutex_unlock(&h->lock);
      return NULL;
    }
    c->bytes = bytes;
    c->next = h->obj_chunks;
    h->obj_chunks = c;
    h->meta_bytes += bytes;
    uint8_t *o = (uint8_t *)(c + 1);
    for (int i = 0; i < OBJ_CHUNK; i++) {
      void **slot = (void **)(void *)(o + (size_t)i * KEEL_HEAP_OBJ_SIZE);
      *slot = h->spare_obj;
      h->spare_obj = slot;
    }
  }
  void **o = h->spare_obj;
  h->spare_obj = *o;
  keel_mutex_unlock(&h->lock);
  memset(o, 0, KEEL_HEAP_OBJ_SIZE);
  return o;
}

void keel_heap_obj_free(keel_heap *h, void *p) {
  if (!p) return;
  keel_mutex_lock(&h->lock);
  *(void **)p = h->spare_obj;
  h->spare_obj = p;
  keel_mutex_unlock(&h->lock);
}

void *keel_heap_meta_realloc(keel_heap *h, void *p, size_t old, size_t n) {
  void *q = keel_sys_realloc(p, old, n);
  if (q || n == 0) {
    keel_mutex_lock(&h->lock);
    h->meta_bytes = h->meta_bytes - old + n;
    keel_mutex_unlock(&h->lock);
  }
  return q;
}

/* ------------------------------------------------------------ figures */

uint64_t keel_heap_allocated(keel_heap *h) {
  return atomic_load_explicit(&h->allocated, memory_order_relaxed);
}

uint64_t keel_heap_reserved(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  uint64_t r = h->reserved;
  keel_mutex_unlock(&h->lock);
  return r;
}

void keel_heap_stats(keel_heap *h, keel_stats *st) {
  keel_mutex_lock(&h->lock);
  uint64_t active_split = 0, inactive_split = 0, free_bytes = 0, largest = 0;
  for (int pi = 0; pi < NPOOLS; pi++) {
    for (keel_segment *s = h->pools[pi].segments; s; s = s->next) {
      bool is_split = s->first->next != NULL;
      for (keel_block *b = s->first; b; b = b->next) {
        if (b->is_free) {
          free_bytes += b->size;
          if (b->size > largest) largest = b->size;
          if (is_split) inactive_split += b->size;
        } else if (is_split) {
          active_split += b->size;
        }
      }
    }
  }
  st->version = KEEL_STATS_VERSION;
  st->allocated = atomic_load(&h->allocated);
  st->allocated_peak = h->allocated_peak;
  st->reserved = h->reserved;
  st->reserved_peak = h->reserved_peak;
  st->active_split = active_split;
  st->inactive_split = inactive_split;
  st->n_alloc = h->n_alloc;
  st->n_free = h->n_free;
  st->n_cache_hit = h->n_cache_hit;
  st->n_segment_alloc = h->n_seg_alloc;
  st->n_segment_free = h->n_seg_free;
  st->n_segments = h->n_segments;
  st->n_oom = h->n_oom;
  st->bytes_allocated_total = h->bytes_total;
  st->n_alloc_retries = h->n_retries;
  st->mem_limit = h->limit;
  st->fragmentation =
      free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0;
  st->meta_bytes = h->meta_bytes;
  st->n_auto_release = h->n_auto_release;
  st->bytes_auto_release = h->bytes_auto_release;
  st->trim_floor = h->trim.enabled ? h->floor : 0;
  st->trim_window = h->trim.enabled ? h->window : 0;
  st->n_trim_regret = h->n_regret;
  keel_mutex_unlock(&h->lock);
}

void keel_heap_reset_peaks(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  h->allocated_peak = atomic_load(&h->allocated);
  h->reserved_peak = h->reserved;
  keel_mutex_unlock(&h->lock);
}

size_t keel_heap_trim(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  size_t r = release_free_segments(h);
  keel_mutex_unlock(&h->lock);
  return r;
}

void keel_heap_set_limit(keel_heap *h, size_t limit) {
  keel_mutex_lock(&h->lock);
  h->limit = limit;
  keel_mutex_unlock(&h->lock);
}

void keel_heap_set_hook(keel_heap *h, keel_heap_hook fn, void *ud) {
  keel_mutex_lock(&h->lock);
  h->hook = fn;
  h->hook_ud = ud;
  keel_mutex_unlock(&h->lock);
}

uint64_t keel_heap_mark(keel_heap *h) {
  return atomic_load_explicit(h->seq_src, memory_order_relaxed) + 1;
}

keel_oom_info keel_heap_oom_info(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  keel_oom_info i = h->last_oom;
  keel_mutex_unlock(&h->lock);
  return i;
}

void keel_heap_foreach_live(keel_heap *h,
                            void (*fn)(void *ud, const keel_block *b),
                            void *ud) {
  keel_mutex_lock(&h->lock);
  for (keel_block *b = h->live; b; b = b->lnext) fn(ud, b);
  keel_mutex_unlock(&h->lock);
}

/* ------------------------------------------------------- consistency */

static bool check_segment(const pool *p, const keel_segment *s,
                          uint64_t *live_bytes) {
  uint8_t *at = s->base;
  const keel_block *prev = NULL;
  for (const keel_block *b = s->first; b; prev = b, b = b->next) {
    if (b->ptr != at || b->prev != prev || b->seg != s)
      return keel_err(KEEL_ERR_INTERNAL, "heap: broken block chain"), false;
    if (b->is_free && prev && prev->is_free)
      return keel_err(KEEL_ERR_INTERNAL, "heap: adjacent free blocks"), false;
    if (b->is_free) {
      const keel_block *x = p->bins[b->bin];
      while (x && x != b) x = x->lnext;
      if (!x || b->bin != bin_of(b->size))
        return keel_err(KEEL_ERR_INTERNAL, "heap: free block not binned"), false;
    } else {
      *live_bytes += b->size;
    }
    at += b->size;
  }
  if (at != s->base + s->size)
    return keel_err(KEEL_ERR_INTERNAL, "heap: blocks do not cover segment"),
           false;
  return true;
}

bool keel_heap_check(keel_heap *h) {
  keel_mutex_lock(&h->lock);
  bool ok = check_locked(h);
  keel_mutex_unlock(&h->lock);
  return ok;
}

static bool check_locked(keel_heap *h) {
  uint64_t live = 0, reserved = 0, nseg = 0;
  bool ok = true;
  for (int pi = 0; pi < NPOOLS && ok; pi++) {
    for (keel_segment *s = h->pools[pi].segments; s && ok; s = s->next) {
      ok = check_segment(&h->pools[pi], s, &live);
      reserved += s->size;
      nseg++;
    }
    for (unsigned i = 0; i < NBINS && ok; i++) {
      bool bit = (h->pools[pi].bitmap[i / 64] >> (i % 64)) & 1;
      if (bit != (h->pools[pi].bins[i] != NULL))
        ok = keel_err(KEEL_ERR_INTERNAL, "heap: bitmap disagrees with bin %u",
                      i) == KEEL_OK;
    }
  }
  if (ok && (live != atomic_load(&h->allocated) || reserved != h->reserved ||
             nseg != h->n_segments))
    ok = keel_err(KEEL_ERR_INTERNAL,
                  "heap: counters disagree (live %llu vs %llu, reserved %llu "
                  "vs %llu)",
                  (unsigned long long)live,
                  (unsigned long long)atomic_load(&h->allocated),
                  (unsigned long long)reserved,
                  (unsigned long long)h->reserved) == KEEL_OK;
  return ok;
}
