/* test_trim.c: reserved memory returns by itself, with hysteresis (the
 * automatic trim of keel_options.trim_*), on the width-varying conv model
 * of svc_model.h.
 *
 *  - Burst: 20 runs at width 3200, then small runs at width 100. Within 10
 *    small runs reserved is at most 1.5x what the small workload alone
 *    keeps, and RSS drops by at least half of what was released. With
 *    KEEL_OPT_NO_AUTO_TRIM (the behaviour before) the burst's segments stay.
 *  - Steady: 10,000 runs at one width make zero segment releases and no
 *    segment grows after the first run.
 *  - A large shape that comes back every 32 runs (31 small widths, then
 *    3200): after a short warm-up, zero releases and zero grows (the window
 *    doubled on each regret), reserved within 1.25x of the largest single
 *    shape's working set and RSS within 10% of its peak.
 *  - The knobs: a window of 2 runs releases after 2 unused runs; keel_mem_trim still
 *    returns everything free at once.
 *  - Code that ran once (keel_prim_drop_linked_code) leaves RSS.
 */
#include <stddef.h>

#include "base/prim.h"
#include "check.h"
#include "svc_model.h"

static keel_stats steady_small(int64_t w, int runs) {
  keel_session_t *s = svc_session(NULL);
  for (int r = 0; r < runs; r++) CHECK_OK(svc_run(s, w, NULL));
  keel_stats st = svc_stats(s);
  keel_session_destroy(s);
  return st;
}

static void burst(void) {
  keel_stats small = steady_small(100, 30);
  fprintf(stderr, "small workload alone: reserved %llu\n", (unsigned long long)small.reserved);
  for (int off = 0; off < 2; off++) {
    keel_options o = {.size = sizeof o, .flags = off ? KEEL_OPT_NO_AUTO_TRIM : 0};
    keel_session_t *s = svc_session(&o);
    CHECK(s != NULL);
    if (!s) return;
    for (int r = 0; r < 20; r++) CHECK_OK(svc_run(s, 3200, NULL));
    keel_stats big = svc_stats(s);
    keel_stats_reset_peaks(s);
    unsigned long long rss_big = svc_rss();
    int within = -1;
    for (int r = 0; r < 40; r++) {
      CHECK_OK(svc_run(s, 100, NULL));
      if (within < 0 && svc_stats(s).reserved * 2 <= small.reserved * 3) within = r + 1;
    }
    keel_stats after = svc_stats(s);
    unsigned long long rss_after = svc_rss();
    fprintf(stderr,
            "%s: burst reserved %llu, rss %llu; after 40 small runs reserved %llu (within 1.5x "
            "after %d runs), rss %llu, %llu auto releases\n",
            off ? "auto trim off" : "auto trim on", (unsigned long long)big.reserved, rss_big,
            (unsigned long long)after.reserved, within, rss_after,
            (unsigned long long)after.n_auto_release);
    CHECK(big.reserved > 4 * small.reserved); /* the burst really took more */
    CHECK(after.allocated == 0);
    if (!off) {
      CHECK(within >= 1 && within <= 10);
      CHECK(after.reserved * 2 <= small.reserved * 3);
      uint64_t released = big.reserved - after.reserved;
      CHECK(after.bytes_auto_release >= released);
      /* the pages left the process: at least half of what the burst touched
       * beyond the small workload (a segment is touched only as far as it
       * was used) */
      if (!KEEL_TEST_SANITIZED)
        CHECK(rss_big > rss_after &&
              rss_big - rss_after >= (big.allocated_peak - small.allocated_peak) / 2);
    } else {
      CHECK(within == -1 && after.reserved == big.reserved && after.n_auto_release == 0);
      CHECK(after.trim_window == 0);
    }
    keel_session_destroy(s);
  }
}

static void steady_never_releases(void) {
  keel_session_t *s = svc_session(NULL);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_OK(svc_run(s, 24, NULL));
  keel_stats first = svc_stats(s);
  int errors = 0;
  for (int r = 0; r < 10000; r++) errors += svc_run(s, 24, NULL) != KEEL_OK;
  keel_stats st = svc_stats(s);
  CHECK(errors == 0);
  CHECK(st.n_segment_free == 0 && st.n_auto_release == 0);
  CHECK(st.n_segment_alloc == first.n_segment_alloc);
  CHECK(st.reserved == first.reserved);
  CHECK(st.trim_window == KEEL_DEFAULT_TRIM_WINDOW && st.n_trim_regret == 0);
  keel_session_destroy(s);
}

/* 31 small widths, then one large: the large shape returns every 32 runs. */
static int64_t periodic_width(int r) { return r % 32 == 31 ? 3200 : 50 + 5 * (r % 32); }

static void periodic_large_shape(void) {
  keel_session_t *one = svc_session(NULL);
  for (int r = 0; r < 3; r++) CHECK_OK(svc_run(one, 3200, NULL));
  uint64_t largest = svc_stats(one).reserved;
  keel_session_destroy(one);
  keel_session_t *s = svc_session(NULL);
  CHECK(s != NULL);
  if (!s) return;
  for (int r = 0; r < 32 * 8; r++) CHECK_OK(svc_run(s, periodic_width(r), NULL));
  keel_stats warm = svc_stats(s);
  uint64_t max_reserved = 0;
  unsigned long long rss_lo = ~0ull, rss_hi = 0;
  for (int r = 32 * 8; r < 32 * 40; r++) {
    CHECK_OK(svc_run(s, periodic_width(r), NULL));
    keel_stats st = svc_stats(s);
    if (st.reserved > max_reserved) max_reserved = st.reserved;
    unsigned long long rss = svc_rss();
    rss_lo = rss < rss_lo ? rss : rss_lo;
    rss_hi = rss > rss_hi ? rss : rss_hi;
  }
  fprintf(stderr, "periodic: RSS after warm-up %llu..%llu\n", rss_lo, rss_hi);
  if (!KEEL_TEST_SANITIZED) CHECK(rss_lo * 10 >= rss_hi * 9); /* within 10% of its peak */
  keel_stats st = svc_stats(s);
  fprintf(stderr,
          "periodic: warm-up %llu releases, %llu regrets, window %llu; then %llu releases, %llu "
          "grows; max reserved %llu vs single shape %llu\n",
          (unsigned long long)warm.n_auto_release, (unsigned long long)warm.n_trim_regret,
          (unsigned long long)warm.trim_window,
          (unsigned long long)(st.n_auto_release - warm.n_auto_release),
          (unsigned long long)(st.n_segment_alloc - warm.n_segment_alloc),
          (unsigned long long)max_reserved, (unsigned long long)largest);
  CHECK(warm.n_trim_regret >= 1 && warm.trim_window > KEEL_DEFAULT_TRIM_WINDOW);
  CHECK(st.n_auto_release == warm.n_auto_release);
  CHECK(st.n_segment_alloc == warm.n_segment_alloc);
  CHECK(max_reserved * 4 <= largest * 5);
  keel_session_destroy(s);
}

static void knobs(void) {
  keel_options o = {.size = sizeof o, .trim_window = 2, .trim_margin_pct = -1};
  keel_session_t *s = svc_session(&o);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_OK(svc_run(s, 3200, NULL));
  uint64_t big = svc_stats(s).reserved;
  CHECK_OK(svc_run(s, 10, NULL));
  CHECK(svc_stats(s).reserved == big); /* unused for 1 run: not yet */
  CHECK_OK(svc_run(s, 10, NULL));
  keel_stats st = svc_stats(s);
  CHECK(st.reserved < big && st.n_auto_release >= 1 && st.trim_window == 2);
  keel_session_destroy(s);
  /* off: only keel_mem_trim gives memory back */
  o = (keel_options){.size = sizeof o, .flags = KEEL_OPT_NO_AUTO_TRIM};
  s = svc_session(&o);
  CHECK_OK(svc_run(s, 3200, NULL));
  for (int r = 0; r < 20; r++) CHECK_OK(svc_run(s, 10, NULL));
  CHECK(svc_stats(s).reserved == big);
  CHECK(keel_mem_trim(s) == big);
  CHECK(svc_stats(s).reserved == 0);
  keel_session_destroy(s);
  /* an options struct of the older layout (no trim fields): the defaults */
  o = (keel_options){.size = offsetof(keel_options, trim_window)};
  s = svc_session(&o);
  CHECK_OK(svc_run(s, 10, NULL));
  st = svc_stats(s);
  CHECK(st.trim_window == KEEL_DEFAULT_TRIM_WINDOW && st.run_pool_cap == KEEL_DEFAULT_RUN_POOL_CAP);
  keel_session_destroy(s);
}

/* Code that ran once goes back too: keel's own and its libraries' pages
 * leave the process, and what a run needs comes back by itself. */
static void startup_code(void) {
  keel_session_t *s = svc_session(NULL);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_OK(svc_run(s, 24, NULL));
  /* code pages are file-backed: RssFile is the figure they leave */
  long before = check_status_kb("RssFile:");
  size_t covered = keel_prim_drop_linked_code();
  long after = check_status_kb("RssFile:");
  fprintf(stderr, "startup code: %zu bytes of code covered, file-backed RSS %ld -> %ld KB\n", covered,
          before, after);
  CHECK(covered > 0 && after < before);
  for (int r = 0; r < 3; r++) CHECK_OK(svc_run(s, 24, NULL));
  keel_session_destroy(s);
}

int main(void) {
  startup_code();
  burst();
  steady_never_releases();
  periodic_large_shape();
  knobs();
  return check_report();
}
