/* test_alloc.c: the caching allocator: invariants after random
 * alloc/free sequences (checked by walking every segment), statistics,
 * best fit, split and merge, the cap, trim, and fault injection. */
#include <string.h>

#include "check.h"
#include "mem/alloc.h"
#include "mem/sysmem.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static keel_stats stats(keel_heap *h) {
  keel_stats st = {.size = sizeof st};
  keel_heap_stats(h, &st);
  return st;
}

/* Random sizes from 1 byte to 3 MiB, freed in random order: the heap stays
 * consistent and its counters match the blocks. */
static void random_workload(void) {
  keel_heap *h = keel_heap_create(0);
  keel_block *live[512] = {0};
  uint64_t want_alloc = 0, n_alloc = 0, n_free = 0;
  for (int step = 0; step < 20000; step++) {
    int i = (int)(next() % 512);
    if (live[i]) {
      want_alloc -= live[i]->size;
      keel_heap_free(h, live[i]);
      live[i] = NULL;
      n_free++;
    } else {
      size_t n = next() % 8 ? 1 + next() % 4096 : 1 + next() % (3u << 20);
      live[i] = keel_heap_alloc(h, n, (keel_owner){7, (uint32_t)step});
      CHECK(live[i] != NULL);
      if (!live[i]) continue;
      CHECK(live[i]->size >= n && (uintptr_t)live[i]->ptr % KEEL_ALIGN == 0);
      memset(live[i]->ptr, 0xAB, n); /* ASan: the whole request is ours */
      want_alloc += live[i]->size;
      n_alloc++;
    }
    if (step % 1000 == 0) CHECK(keel_heap_check(h));
  }
  keel_stats st = stats(h);
  CHECK(st.allocated == want_alloc);
  CHECK(st.n_alloc == n_alloc && st.n_free == n_free);
  CHECK(st.allocated_peak >= st.allocated && st.reserved_peak >= st.reserved);
  CHECK(st.reserved >= st.allocated);
  CHECK(st.fragmentation >= 0 && st.fragmentation <= 1);
  for (int i = 0; i < 512; i++) keel_heap_free(h, live[i]);
  CHECK(keel_heap_check(h));
  st = stats(h);
  CHECK(st.allocated == 0);
  CHECK(st.active_split == 0);
  CHECK(keel_heap_trim(h) == st.reserved);
  CHECK(stats(h).reserved == 0 && stats(h).n_segments == 0);
  keel_heap_release(h);
}

/* Freed neighbours merge back into one block; the next request of the
 * same size is a cache hit in the same place. */
static void split_and_merge(void) {
  keel_heap *h = keel_heap_create(0);
  keel_block *a = keel_heap_alloc(h, 1000, (keel_owner){0});
  keel_block *b = keel_heap_alloc(h, 1000, (keel_owner){0});
  keel_block *c = keel_heap_alloc(h, 1000, (keel_owner){0});
  CHECK(a && b && c && a->seg == b->seg && b->seg == c->seg);
  CHECK(stats(h).n_segments == 1 && stats(h).n_cache_hit == 2);
  uint8_t *bp = b->ptr;
  keel_heap_free(h, b);
  CHECK(stats(h).inactive_split >= 1024);
  keel_block *b2 = keel_heap_alloc(h, 900, (keel_owner){0});
  CHECK(b2 && b2->ptr == bp); /* best fit: the hole, not the big tail */
  keel_heap_free(h, a);
  keel_heap_free(h, b2);
  keel_heap_free(h, c);
  CHECK(keel_heap_check(h));
  keel_stats st = stats(h);
  CHECK(st.inactive_split == 0 && st.fragmentation == 0.0); /* one free block */
  keel_heap_release(h);
}

/* Small and large requests come from different pools. */
static void pools(void) {
  keel_heap *h = keel_heap_create(0);
  keel_block *s = keel_heap_alloc(h, 64, (keel_owner){0});
  keel_block *l = keel_heap_alloc(h, 5u << 20, (keel_owner){0});
  CHECK(s && l && s->seg != l->seg && s->pool != l->pool);
  keel_heap_free(h, s);
  keel_heap_free(h, l);
  keel_heap_release(h);
}

/* The cap: free segments are given back first; beyond that, NULL, the
 * reason, and the heap still works. */
static void cap(void) {
  keel_heap *h = keel_heap_create(4u << 20);
  keel_block *a = keel_heap_alloc(h, 1u << 20, (keel_owner){0});
  CHECK(a != NULL);
  keel_block *big = keel_heap_alloc(h, 8u << 20, (keel_owner){0});
  CHECK(big == NULL);
  keel_oom_info oi = keel_heap_oom_info(h);
  CHECK(oi.by_cap && oi.request == (8u << 20) && oi.limit == (4u << 20));
  CHECK(stats(h).n_oom == 1);
  keel_heap_free(h, a);
  /* a cached 2 MiB segment is free now; a 3 MiB request needs it back */
  keel_block *c = keel_heap_alloc(h, 3u << 20, (keel_owner){0});
  CHECK(c != NULL);
  CHECK(stats(h).reserved <= (4u << 20));
  keel_heap_free(h, c);
  CHECK(keel_heap_check(h));
  keel_heap_release(h);
}

/* Every failure point of the system hook gives NULL, never a crash or a
 * leak. */
static void fault_injection(void) {
  for (int n = 1; n < 6; n++) {
    keel_heap *h = keel_heap_create(0);
    if (!h) continue;
    keel_sys_fail_after(n);
    keel_block *b[4];
    for (int i = 0; i < 4; i++) b[i] = keel_heap_alloc(h, (size_t)(i + 1) << 19, (keel_owner){0});
    keel_sys_fail_after(0);
    for (int i = 0; i < 4; i++) keel_heap_free(h, b[i]);
    CHECK(keel_heap_check(h));
    keel_heap_release(h);
  }
}

/* Owner tags are stored on live blocks and visible to the live walk. */
static void count_owner(void *ud, const keel_block *b) {
  keel_owner o = keel_block_owner(b);
  if (o.site == 42 && o.iter == 3) (*(int *)ud)++;
}

static void owners(void) {
  keel_heap *h = keel_heap_create(0);
  keel_block *a = keel_heap_alloc(h, 100, (keel_owner){42, 3});
  keel_block *b = keel_heap_alloc(h, 100, (keel_owner){42, 4});
  int n = 0;
  keel_heap_foreach_live(h, count_owner, &n);
  CHECK(n == 1);
  keel_heap_free(h, a);
  keel_heap_free(h, b);
  keel_heap_release(h);
}

int main(void) {
  random_workload();
  split_and_merge();
  pools();
  cap();
  fault_injection();
  owners();
  return check_report();
}
