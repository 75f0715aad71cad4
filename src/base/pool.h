/* pool.h: the one thread pool of a session, and its parallel-for.
 *
 * A pool has `threads` participants: the calling thread and threads - 1
 * workers started at creation. keel_pool_for(p, n, grain, fn, ctx) splits
 * [0, n) into chunks of at least `grain` items and calls fn(ctx, begin, end,
 * worker) for each, on the caller and the workers; `worker` is in
 * [0, keel_pool_threads(p)) and is distinct among the calls running at the
 * same moment, so a kernel may index per-worker scratch with it (scratch it
 * allocated before the call: workers never allocate).
 *
 * One job runs at a time. A caller that finds the pool busy (another run on
 * the same session, or a call from inside a job) runs the job's chunks on
 * its own thread as worker 0: concurrent runs never oversubscribe the
 * cores and never wait for each other.
 *
 * Splits. A pool is made for `splits` parts: the chunks of a job, and the
 * partitions kernels cut their work into (keel_pool_splits), are sized as
 * if the pool had that many threads, whatever number actually runs them.
 * By default splits = threads. A pool made with fixed splits (keel's
 * KEEL_OPT_DETERMINISTIC) cuts every job the same way at 1 thread, at 16
 * and when a concurrent run finds it busy: a kernel whose result depends
 * only on its chunk (not on which worker runs it, nor when) then gives the
 * same bits at any thread count. The chunks of a job are always the same
 * for one pool: a caller that runs alone runs them one after another.
 *
 * Errors: the first fn that fails stops the job (chunks not yet started are
 * skipped); keel_pool_for returns its status with its message, whichever
 * thread it ran on.
 *
 * Libraries with their own threads (OpenBLAS) are called from inside
 * pool jobs with their threading off, so the pool's threads are the only
 * ones computing.
 */
#ifndef KEEL_POOL_H
#define KEEL_POOL_H

#include "base/common.h"

typedef struct keel_pool keel_pool;

typedef keel_status (*keel_pool_fn)(void *ctx, int64_t begin, int64_t end, int worker);

/* threads <= 0: the CPUs this process may run on. Capped at KEEL_POOL_MAX.
 * splits <= 0: the pool's threads (see "Splits" above). */
#define KEEL_POOL_MAX 256
KEEL_INTERNAL keel_status keel_pool_create(int threads, int splits, keel_pool **out);
/* Joins the workers. NULL is fine. No job may be running. */
KEEL_INTERNAL void keel_pool_destroy(keel_pool *p);
/* Participants of a job (1 for a NULL pool). */
KEEL_INTERNAL int keel_pool_threads(const keel_pool *p);
/* The parts a kernel cuts its work into (1 for a NULL pool): decide
 * partitions with this, size per-worker scratch with keel_pool_threads. */
KEEL_INTERNAL int keel_pool_splits(const keel_pool *p);
/* Runs fn over [0, n) as described above. A NULL pool, n <= grain or a
 * pool of one split call fn(ctx, 0, n, 0) directly. */
KEEL_INTERNAL keel_status keel_pool_for(keel_pool *p, int64_t n, int64_t grain,
                                        keel_pool_fn fn, void *ctx);

/* The cost model splits use: an item that moves `bytes` bytes (read and
 * written) and does `flops` arithmetic operations costs about
 * bytes * KEEL_NS_PER_BYTE + flops * KEEL_NS_PER_FLOP nanoseconds on one
 * core, and a chunk should hold at least KEEL_CHUNK_NS of work: more than
 * waking a sleeping worker costs, so that a small node stays on the caller
 * and a large one wakes only the workers its work pays for, whatever the
 * pool's size. Returns that grain in items (>= 1), for keel_pool_for.
 * Count a libm call (sin, tanh) as about KEEL_FLOPS_LIBM flops. */
#define KEEL_NS_PER_BYTE 0.1    /* 10 GB/s streamed per core            */
#define KEEL_NS_PER_FLOP 0.05   /* 20 GFLOP/s of vector arithmetic       */
#define KEEL_CHUNK_NS 20000.0   /* 20 us                                 */
#define KEEL_FLOPS_LIBM 200.0   /* about 10 ns a call                    */
KEEL_INTERNAL int64_t keel_pool_grain(double bytes, double flops);

#endif /* KEEL_POOL_H */
