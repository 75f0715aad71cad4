/* pool.c: the thread pool behind every parallel kernel (pool.h).
 *
 * Workers spin briefly, then sleep on a condition variable, between jobs.
 * A job is published under the lock with a new generation number. Its
 * chunks are cut into one home range per participant, in order (the
 * caller's first): each participant takes the chunks of its own range,
 * then what is left of the others, until none is left or a chunk has
 * failed. Two nodes in a row that cut a tensor alike (a conv's bands of
 * rows, then an elementwise op over the same bytes) thus run each part on
 * the core whose cache holds it, while a late worker's chunks still go to
 * whoever is free. A worker joins a job through its door
 * (one atomic word: the job's generation, a closed bit, the number of
 * workers inside); when the caller has run out of chunks it closes the
 * door and waits (spinning briefly, then sleeping) only for the workers
 * inside. A worker that wakes late (descheduled on a busy machine, or
 * asleep) finds the door closed or another job's, and never touches this
 * one: the caller does not wait for workers that had nothing to do. The
 * pool is claimed with one atomic flag: a caller that cannot claim it runs
 * the range itself, so the pool never queues and never deadlocks on a
 * nested call.
 *
 * A job has seats for as many workers as it has chunks beyond the
 * caller's first (a node split in 3 chunks on a pool of 16 seats 2): the
 * door turns the others away, and only that many sleeping workers are
 * woken, so workers with nothing to do for a node stay asleep. Waiting
 * spins for a bounded time (SPIN_NS, read from the clock: a pause
 * instruction lasts 20 ns on one CPU and 140 cycles on another), then
 * sleeps.
 */
#include "base/pool.h"

#include <stdatomic.h>
#include <stdio.h>

#include "base/sysmem.h"
#include "base/prim.h"
#include "base/status.h"

/* A home range's next chunk, on a cache line of its own. */
typedef struct keel_cursor {
  _Alignas(64) _Atomic uint64_t v; /* tag and count: see claim()            */
} keel_cursor;

typedef struct worker {
  keel_thread th;
  struct keel_pool *pool;
  int id;
} worker;

struct keel_pool {
  int threads;                 /* participants: caller + workers          */
  int splits;                  /* parts jobs are cut for (pool.h)         */
  int cap;                     /* threads the allocation was sized for    */
  worker *workers;             /* threads - 1                             */
  keel_mutex lock;
  keel_cond wake, done;
  _Atomic int claimed;         /* a job owns the pool                     */
  /* the job, written under `lock` before `gen` moves */
  keel_pool_fn fn;
  void *ctx;
  int64_t n, chunk;
  _Atomic int seats;           /* workers this job lets in (a late worker
                                  may read it while the next job sets it;
                                  the door then turns it away)            */
  int asleep;                  /* workers waiting on `wake` (under lock)  */
  int ranges;                  /* the job's chunks in this many home ranges,
                                  one per participant                     */
  keel_cursor *cursors;        /* range r's chunks taken (claim())         */
  _Atomic uint64_t door;       /* (generation << DOOR_SHIFT) | DOOR_CLOSED
                                  | workers inside the job                 */
  _Atomic uint64_t gen;        /* moves when a job is published           */
  _Atomic bool stop;
  /* first failure */
  _Atomic int failed;
  keel_status err;
  char msg[KEEL_ERRMSG_MAX];
};

#define DOOR_SHIFT 20
#define DOOR_CLOSED (1ull << 19)
#define DOOR_INSIDE (DOOR_CLOSED - 1)
#define DOOR_GEN(g) ((g) & ((1ull << (64 - DOOR_SHIFT)) - 1))

/* ============================================================ chunks */

/* Range r's cursor: the job's tag (its generation's low TAG_BITS bits)
 * over the count of its chunks taken. A cursor still holding another
 * job's tag has none taken: publishing a job writes no cursor (a store to
 * a worker's cursor line would wait on that worker's core while the
 * caller could be running its first chunk). Reusing a stale count needs
 * the same range untouched for 2^48 jobs, years of back-to-back jobs (the
 * door's generation wraps first). */
#define TAG_BITS 48
#define COUNT_BITS (64 - TAG_BITS)

/* Claims the next of the `len` chunks of cursor c for job `tag`: its
 * index in the range, or -1 when none is left. A look before the claim
 * leaves a range already taken shared, not pulled over in a write. */
static int64_t claim(keel_cursor *c, uint64_t tag, int64_t len) {
  uint64_t v = atomic_load_explicit(&c->v, memory_order_relaxed);
  for (;;) {
    int64_t k = (v >> COUNT_BITS) == tag ? (int64_t)(v & ((1ull << COUNT_BITS) - 1)) : 0;
    if (k >= len) return -1;
    if (atomic_compare_exchange_weak_explicit(&c->v, &v, (tag << COUNT_BITS) | (uint64_t)(k + 1),
                                              memory_order_relaxed, memory_order_relaxed))
      return k;
  }
}

/* Chunks of range r of job g until it has none left; false when a chunk
 * failed. */
static bool run_range(keel_pool *p, uint64_t g, int r, int id) {
  int64_t chunks = (p->n + p->chunk - 1) / p->chunk;
  int64_t c0 = chunks * r / p->ranges, len = chunks * (r + 1) / p->ranges - c0;
  uint64_t tag = g & ((1ull << TAG_BITS) - 1);
  for (;;) {
    if (atomic_load_explicit(&p->failed, memory_order_relaxed)) return false;
    int64_t k = claim(&p->cursors[r], tag, len);
    if (k < 0) return true;
    int64_t b = (c0 + k) * p->chunk, e = KEEL_MIN(b + p->chunk, p->n);
    keel_status st = p->fn(p->ctx, b, e, id);
    if (KEEL_UNLIKELY(st)) {
      int expect = 0;
      if (atomic_compare_exchange_strong(&p->failed, &expect, 1)) {
        p->err = st;
        snprintf(p->msg, sizeof p->msg, "%s", keel_last_error());
      }
      return false;
    }
  }
}

/* Participant `id` (0: the caller) of job g runs its home range (range
 * id: the same part of every job's items, which keeps a tensor's bytes on
 * the core that made them when two nodes in a row cut it alike), then
 * what is left of the others. */
static void run_chunks(keel_pool *p, uint64_t g, int id) {
  int home = id < p->ranges ? id : 0;
  for (int r = home; r < p->ranges; r++)
    if (!run_range(p, g, r, id)) return;
  for (int r = 0; r < home; r++)
    if (!run_range(p, g, r, id)) return;
}

/* A worker or the caller first spins about this long (pauses, the clock
 * read every SPIN_CHECK of them) before it sleeps: a model's nodes publish
 * jobs back to back, and a condition-variable wake-up costs more than a
 * small kernel. 60 us is the 4000 pauses this pool spun before on a CPU
 * whose pause takes 19 ns (AMD EPYC, Zen 5); a pause of 140 cycles spun
 * 3-4x as long. */
#define SPIN_NS 60000
#define SPIN_CHECK 64

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spins until done(p, arg) or the budget is spent; true when done. */
static bool spin_until(keel_pool *p, bool (*done)(keel_pool *, uint64_t), uint64_t arg) {
  uint64_t t0 = 0;
  for (int i = 0;; i++) {
    if (done(p, arg)) return true;
    if (i % SPIN_CHECK == 0) {
      uint64_t t = keel_prim_now_ns();
      if (!t0) t0 = t;
      else if (t - t0 >= SPIN_NS) return false;
    }
    cpu_relax();
  }
}

static bool moved(keel_pool *p, uint64_t seen) {
  return atomic_load_explicit(&p->gen, memory_order_acquire) != seen ||
         atomic_load_explicit(&p->stop, memory_order_relaxed);
}

/* The generation after `seen`, spinning first, then sleeping. */
static uint64_t next_job(keel_pool *p, uint64_t seen) {
  if (spin_until(p, moved, seen)) return atomic_load_explicit(&p->gen, memory_order_acquire);
  uint64_t g;
  keel_mutex_lock(&p->lock);
  while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) {
    p->asleep++;
    keel_cond_wait(&p->wake, &p->lock);
    p->asleep--;
  }
  keel_mutex_unlock(&p->lock);
  return g;
}

/* Joins job `g` if its door is still open: true, and the worker is counted
 * inside until it leaves. */
static bool enter_job(keel_pool *p, uint64_t g) {
  uint64_t d = atomic_load_explicit(&p->door, memory_order_acquire);
  for (;;) {
    if ((d >> DOOR_SHIFT) != DOOR_GEN(g) || (d & DOOR_CLOSED)) return false;
    /* the job's seats: read after the door shows its generation (the
     * caller wrote them before opening it) */
    if ((int)(d & DOOR_INSIDE) >= atomic_load_explicit(&p->seats, memory_order_relaxed)) return false;
    if (atomic_compare_exchange_weak_explicit(&p->door, &d, d + 1, memory_order_acq_rel, memory_order_acquire))
      return true;
  }
}

static void worker_main(void *arg) {
  worker *w = arg;
  keel_pool *p = w->pool;
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = next_job(p, seen);
    if (atomic_load(&p->stop)) break;
    seen = g;
    if (!enter_job(p, g)) continue; /* closed, or already another job's */
    run_chunks(p, g, w->id);
    /* the last one out of a closed door wakes the caller if it sleeps;
     * under the lock, so the caller cannot miss it between its check and
     * its wait */
    uint64_t d = atomic_fetch_sub_explicit(&p->door, 1, memory_order_acq_rel) - 1;
    if ((d & DOOR_CLOSED) && !(d & DOOR_INSIDE)) {
      keel_mutex_lock(&p->lock);
      keel_cond_broadcast(&p->done);
      keel_mutex_unlock(&p->lock);
    }
  }
}

/* ========================================================= lifecycle */

static size_t pool_bytes(int threads) {
  /* the pool, its workers, then a cursor per participant on cache lines
   * of their own (one line more, to align the first) */
  return sizeof(keel_pool) + (size_t)(threads - 1) * sizeof(worker) +
         (size_t)(threads + 1) * sizeof(keel_cursor);
}

keel_status keel_pool_create(int threads, int splits, keel_pool **out) {
  if (threads <= 0) threads = keel_prim_cpu_count();
  threads = KEEL_MIN(threads, KEEL_POOL_MAX);
  splits = splits <= 0 ? threads : KEEL_MIN(splits, KEEL_POOL_MAX);
  keel_pool *p = keel_sys_calloc(1, pool_bytes(threads));
  if (!p) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "thread pool of %d threads", threads);
  p->workers = (worker *)(void *)(p + 1);
  uintptr_t c = (uintptr_t)(p->workers + (threads - 1));
  p->cursors = (keel_cursor *)((c + sizeof(keel_cursor) - 1) & ~(uintptr_t)(sizeof(keel_cursor) - 1));
  p->cap = threads;
  p->splits = splits;
  keel_mutex_init(&p->lock);
  keel_cond_init(&p->wake);
  keel_cond_init(&p->done);
  p->threads = 1;
  for (int i = 1; i < threads; i++) {
    worker *w = &p->workers[i - 1];
    w->pool = p, w->id = i;
    keel_status st = keel_thread_start(&w->th, worker_main, w);
    if (st) {
      p->threads = i; /* the ones that started are joined */
      keel_pool_destroy(p);
      return keel_err_prefix(st, "thread pool of %d threads", threads);
    }
    p->threads = i + 1;
  }
  keel_assert(p->threads == threads);
  *out = p;
  return KEEL_OK;
}

void keel_pool_destroy(keel_pool *p) {
  if (!p) return;
  keel_assert(!atomic_load(&p->claimed));
  keel_mutex_lock(&p->lock);
  atomic_store(&p->stop, true);
  keel_cond_broadcast(&p->wake);
  keel_mutex_unlock(&p->lock);
  for (int i = 1; i < p->threads; i++) keel_thread_join(&p->workers[i - 1].th);
  keel_cond_destroy(&p->wake);
  keel_cond_destroy(&p->done);
  keel_mutex_destroy(&p->lock);
  keel_sys_free(p, pool_bytes(p->cap));
}

int keel_pool_threads(const keel_pool *p) { return p ? p->threads : 1; }

int keel_pool_splits(const keel_pool *p) { return p ? p->splits : 1; }

int64_t keel_pool_grain(double bytes, double flops) {
  double ns = bytes * KEEL_NS_PER_BYTE + flops * KEEL_NS_PER_FLOP;
  if (!(ns > 0)) return INT64_MAX / 4; /* free items: one chunk */
  double g = KEEL_CHUNK_NS / ns;
  return g < 1 ? 1 : g > (double)(INT64_MAX / 4) ? INT64_MAX / 4 : (int64_t)g;
}

/* ============================================================== jobs */

static bool nobody_inside(keel_pool *p, uint64_t unused) {
  (void)unused;
  return !(atomic_load_explicit(&p->door, memory_order_acquire) & DOOR_INSIDE);
}

/* The chunks of [0, n) on the caller alone, in order. */
static keel_status run_alone(int64_t n, int64_t chunk, keel_pool_fn fn, void *ctx) {
  for (int64_t b = 0; b < n; b += chunk) KEEL_TRY(fn(ctx, b, KEEL_MIN(b + chunk, n), 0));
  return KEEL_OK;
}

keel_status keel_pool_for(keel_pool *p, int64_t n, int64_t grain, keel_pool_fn fn, void *ctx) {
  if (n <= 0) return KEEL_OK;
  if (grain < 1) grain = 1;
  if (!p || p->splits == 1 || n <= grain) return fn(ctx, 0, n, 0);
  /* about four chunks per split balances uneven chunks without much
   * cursor traffic; the same chunks whoever runs them */
  int64_t chunk = KEEL_MAX((n + 4 * p->splits - 1) / (4 * p->splits), grain);
  int64_t chunks = (n + chunk - 1) / chunk;
  int expect = 0;
  if (p->threads == 1 || chunks == 1 || !atomic_compare_exchange_strong(&p->claimed, &expect, 1))
    return run_alone(n, chunk, fn, ctx);
  int seats = (int)KEEL_MIN(chunks - 1, (int64_t)p->threads - 1);
  keel_mutex_lock(&p->lock);
  p->fn = fn, p->ctx = ctx, p->n = n, p->chunk = chunk;
  atomic_store_explicit(&p->seats, seats, memory_order_relaxed);
  p->ranges = seats + 1;
  atomic_store_explicit(&p->failed, 0, memory_order_relaxed);
  uint64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
  atomic_store_explicit(&p->door, DOOR_GEN(g) << DOOR_SHIFT, memory_order_release); /* open, empty */
  atomic_store_explicit(&p->gen, g, memory_order_release); /* publishes the job */
  /* wake as many sleepers as there are seats (spinning workers take some
   * of them first; a sleeper woken for a full job goes back to sleep) */
  if (seats >= p->asleep) keel_cond_broadcast(&p->wake);
  else
    for (int i = 0; i < seats; i++) keel_cond_signal(&p->wake);
  keel_mutex_unlock(&p->lock);
  run_chunks(p, g, 0);
  /* no chunk is left to take: close the door, wait for those inside */
  atomic_fetch_or_explicit(&p->door, DOOR_CLOSED, memory_order_acq_rel);
  if (!spin_until(p, nobody_inside, 0)) {
    keel_mutex_lock(&p->lock);
    while (atomic_load(&p->door) & DOOR_INSIDE) keel_cond_wait(&p->done, &p->lock);
    keel_mutex_unlock(&p->lock);
  }
  keel_status st = atomic_load(&p->failed) ? keel_err(p->err, "%s", p->msg) : KEEL_OK;
  atomic_store(&p->claimed, 0);
  return st;
}
