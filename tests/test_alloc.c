/* test_alloc.c: the caching allocator: invariants after random
 * alloc/free sequences (checked by walking every segment), statistics,
 * best fit, split and merge, the cap, trim, and fault injection. */
#include <string.h>

#include "check.h"
#include "mem/alloc.h"
#include "base/sysmem.h"

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
      live[i] = next() % 10 ? keel_heap_alloc(h, n, (keel_owner){7, (uint32_t)step})
                            : keel_heap_alloc_kept(h, n, (keel_owner){8, (uint32_t)step});
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

/* Small (<= 64 KiB) and larger requests come from different pools, kept
 * blocks from a third. */
static void pools(void) {
  keel_heap *h = keel_heap_create(0);
  keel_block *s = keel_heap_alloc(h, 64u << 10, (keel_owner){0});
  keel_block *m = keel_heap_alloc(h, (64u << 10) + 1, (keel_owner){0});
  keel_block *l = keel_heap_alloc(h, 5u << 20, (keel_owner){0});
  keel_block *k = keel_heap_alloc_kept(h, 64, (keel_owner){0});
  uint64_t r0 = stats(h).reserved;
  keel_block *kl = keel_heap_alloc_kept(h, 5u << 20, (keel_owner){0});
  CHECK(s && m && l && k && kl);
  if (!s || !m || !l || !k || !kl) return;
  CHECK(s->seg != m->seg && s->pool != m->pool && m->pool == l->pool);
  CHECK(k->pool != s->pool && k->pool != l->pool && kl->pool == k->pool);
  CHECK(stats(h).reserved - r0 == (5u << 20)); /* a large kept block: a segment of its own */
  keel_heap_free(h, s);
  keel_heap_free(h, m);
  keel_heap_free(h, l);
  keel_heap_free(h, k);
  keel_heap_free(h, kl);
  CHECK(keel_heap_check(h));
  keel_heap_release(h);
}

/* A run's activations reuse the lowest pages that fit, of the smallest
 * segments first, and a block kept in the middle of a run (prepared state
 * made by a kernel's first run) sits elsewhere: the second run of the same
 * sequence lands where the first did and takes no new segment. A workload
 * that stayed in small segments returns there after a burst that needed a
 * large one, which then is wholly free (and can go back). */
static void activations(void) {
  keel_heap *h = keel_heap_create(0);
  uint8_t *first[6] = {0};
  size_t sizes[6] = {3u << 20, 200u << 10, 1u << 20, 100u << 10, 2u << 20, 300u << 10};
  keel_block *kept = NULL;
  for (int run = 0; run < 2; run++) {
    keel_block *b[6] = {0};
    for (int i = 0; i < 6; i++) {
      b[i] = keel_heap_alloc(h, sizes[i], (keel_owner){1, (uint32_t)i});
      CHECK(b[i] != NULL);
      if (!b[i]) break;
      if (run == 0) first[i] = b[i]->ptr;
      else CHECK(b[i]->ptr == first[i]);
      if (i == 2 && run == 0) kept = keel_heap_alloc_kept(h, 500u << 10, (keel_owner){2, 0});
      if (i >= 2) keel_heap_free(h, b[i - 2]), b[i - 2] = NULL;
    }
    CHECK(kept && b[5] && kept->seg != b[5]->seg);
    for (int i = 0; i < 6; i++) keel_heap_free(h, b[i]);
    CHECK(stats(h).n_segments == 2); /* one for the runs, one for the kept block */
  }
  CHECK(stats(h).n_segment_alloc == 2);
  keel_heap_free(h, kept);
  keel_heap_release(h);

  h = keel_heap_create(0);
  keel_block *s = keel_heap_alloc(h, 100u << 10, (keel_owner){0});
  CHECK(stats(h).reserved == (2u << 20));
  keel_block *big = keel_heap_alloc(h, 5u << 20, (keel_owner){0});
  CHECK(stats(h).reserved == (22u << 20));
  keel_block *s2 = keel_heap_alloc(h, 100u << 10, (keel_owner){0});
  CHECK(s && big && s2 && s2->seg == s->seg);
  keel_heap_free(h, big);
  keel_heap_free(h, s2);
  s2 = keel_heap_alloc(h, 100u << 10, (keel_owner){0});
  CHECK(s2 && s2->seg == s->seg); /* not the (now free) large segment */
  CHECK(keel_heap_trim(h) == (20u << 20)); /* the burst's segment goes back */
  keel_heap_free(h, s);
  keel_heap_free(h, s2);
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
  activations();
  cap();
  fault_injection();
  owners();
  return check_report();
}
