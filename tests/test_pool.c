/* test_pool.c: the thread pool (src/base/pool.c). Every index of a range is
 * visited exactly once, worker ids are in range and never shared by two
 * calls running at once, the first failure's status and message reach the
 * caller whatever thread it ran on, nested and concurrent calls run inline
 * instead of deadlocking, and everything is clean under ThreadSanitizer
 * (ctest label "thread"). */
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>

#include "base/pool.h"
#include "base/status.h"
#include "check.h"

#define N 100000

typedef struct visit {
  _Atomic int count[N];
  _Atomic int busy[KEEL_POOL_MAX]; /* calls running with each worker id */
  _Atomic int bad;
  int threads;
} visit;

static keel_status mark(void *ctx, int64_t b, int64_t e, int worker) {
  visit *v = ctx;
  if (worker < 0 || worker >= v->threads) atomic_store(&v->bad, 1);
  if (atomic_fetch_add(&v->busy[worker], 1) != 0) atomic_store(&v->bad, 1);
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&v->count[i], 1);
  atomic_fetch_sub(&v->busy[worker], 1);
  return KEEL_OK;
}

static void test_cover(int threads) {
  keel_pool *p;
  CHECK_OK(keel_pool_create(threads, 0, &p));
  CHECK(keel_pool_threads(p) == threads);
  static visit v;
  for (int grain = 1; grain <= 4096; grain *= 16) {
    memset(&v, 0, sizeof v);
    v.threads = threads;
    CHECK_OK(keel_pool_for(p, N, grain, mark, &v));
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += atomic_load(&v.count[i]) != 1;
    CHECK(wrong == 0);
    CHECK(!atomic_load(&v.bad));
  }
  keel_pool_destroy(p);
}

/* Fails on the chunk holding index 777 with a message naming it. */
static keel_status fail_at(void *ctx, int64_t b, int64_t e, int worker) {
  (void)ctx, (void)worker;
  if (b <= 777 && 777 < e) return keel_err(KEEL_ERR_RUNTIME, "index %d is bad", 777);
  return KEEL_OK;
}

static void test_error(void) {
  keel_pool *p;
  CHECK_OK(keel_pool_create(4, 0, &p));
  for (int r = 0; r < 50; r++) {
    keel_err_clear();
    keel_status st = keel_pool_for(p, 5000, 1, fail_at, NULL);
    CHECK(st == KEEL_ERR_RUNTIME);
    CHECK(strstr(keel_last_error(), "index 777 is bad") != NULL);
  }
  keel_pool_destroy(p);
}

/* A call from inside a job runs inline (the pool is claimed). */
typedef struct nest {
  keel_pool *p;
  _Atomic long sum;
} nest;

static keel_status inner(void *ctx, int64_t b, int64_t e, int worker) {
  nest *n = ctx;
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&n->sum, (long)i);
  return worker == 0 ? KEEL_OK : keel_err(KEEL_ERR_INTERNAL, "inline run as worker %d", worker);
}

static keel_status outer(void *ctx, int64_t b, int64_t e, int worker) {
  nest *n = ctx;
  (void)worker;
  for (int64_t i = b; i < e; i++) KEEL_TRY(keel_pool_for(n->p, 100, 1, inner, n));
  return KEEL_OK;
}

static void test_nested(void) {
  nest n = {0};
  CHECK_OK(keel_pool_create(3, 0, &n.p));
  CHECK_OK(keel_pool_for(n.p, 64, 1, outer, &n));
  CHECK(atomic_load(&n.sum) == 64L * 4950);
  keel_pool_destroy(n.p);
}

/* Eight threads share one pool: each call still covers its range once. */
typedef struct caller {
  keel_pool *p;
  int failures;
} caller;

static keel_status add_range(void *ctx, int64_t b, int64_t e, int worker) {
  (void)worker;
  _Atomic long *sum = ctx;
  atomic_fetch_add(sum, (long)(e - b));
  return KEEL_OK;
}

static void *call_many(void *arg) {
  caller *c = arg;
  for (int r = 0; r < 300; r++) {
    _Atomic long sum = 0;
    if (keel_pool_for(c->p, 10000 + r, 7, add_range, &sum) || atomic_load(&sum) != 10000 + r)
      c->failures++;
  }
  return NULL;
}

static void test_concurrent(void) {
  keel_pool *p;
  CHECK_OK(keel_pool_create(2, 0, &p));
  pthread_t th[8];
  caller c[8];
  for (int i = 0; i < 8; i++) {
    c[i] = (caller){p, 0};
    pthread_create(&th[i], NULL, call_many, &c[i]);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    CHECK(c[i].failures == 0);
  }
  keel_pool_destroy(p);
}

/* Small jobs on a large pool: a job of n items with grain 1 seats only
 * n - 1 workers (pool.c), the others stay asleep or are turned away at the
 * door. Back to back, and with pauses longer than the spin so that the
 * workers sleep and are woken one by one: every index once, worker ids in
 * range and never shared. */
static void test_small_jobs(void) {
  keel_pool *p;
  CHECK_OK(keel_pool_create(16, 0, &p));
  static visit v;
  static const int64_t sizes[4] = {2, 3, 5, 17};
  int wrong = 0;
  for (int r = 0; r < 2000; r++) {
    int64_t n = sizes[r % 4];
    memset(&v, 0, sizeof v);
    v.threads = 16;
    CHECK_OK(keel_pool_for(p, n, 1, mark, &v));
    for (int64_t i = 0; i < n; i++) wrong += atomic_load(&v.count[i]) != 1;
    wrong += atomic_load(&v.bad);
    if (r % 100 == 99) {
      struct timespec ts = {0, 300000}; /* 0.3 ms: past the spin */
      nanosleep(&ts, NULL);
    }
  }
  CHECK(wrong == 0);
  keel_pool_destroy(p);
}

int main(void) {
  test_small_jobs();
  test_cover(1);
  test_cover(2);
  test_cover(5);
  test_error();
  test_nested();
  test_concurrent();
  keel_pool_destroy(NULL);
  CHECK(keel_pool_threads(NULL) == 1);
  return check_report();
}
