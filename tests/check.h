/* check.h: a tiny test harness (mimalloc's testhelper.h in spirit).
 * CHECK(cond) records a failure with file:line and keeps going; a test
 * program ends with `return check_report();`, which also asserts that keel
 * holds zero bytes from the system when the test is done. */
#ifndef KEEL_CHECK_H
#define KEEL_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "keel.h"
#include "keel_stats.h"

/* KEEL_TEST_SANITIZED: 1 in AddressSanitizer and ThreadSanitizer builds
 * (gcc and clang spell it differently). Their allocators keep freed memory
 * (ASan's quarantine) and shadow memory resident in amounts that depend on
 * the machine, so a test asserts on process RSS only when this is 0; what
 * keel itself holds (keel_stats, keel_process_bytes) is asserted always. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KEEL_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KEEL_TEST_SANITIZED 1
#endif
#endif
#ifndef KEEL_TEST_SANITIZED
#define KEEL_TEST_SANITIZED 0
#endif

static int check_failures, check_total;

#define CHECK(cond)                                                        \
  do {                                                                     \
    check_total++;                                                         \
    if (!(cond)) {                                                         \
      check_failures++;                                                    \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                      \
  } while (0)

#define CHECK_OK(expr)                                                      \
  do {                                                                      \
    keel_status check_s_ = (expr);                                          \
    check_total++;                                                          \
    if (check_s_ != KEEL_OK) {                                              \
      check_failures++;                                                     \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #expr, \
              keel_status_str(check_s_), keel_last_error());                \
    }                                                                       \
  } while (0)

#define CHECK_STATUS(expr, want)                                                \
  do {                                                                          \
    keel_status check_s_ = (expr);                                              \
    check_total++;                                                              \
    if (check_s_ != (want)) {                                                   \
      check_failures++;                                                         \
      fprintf(stderr, "%s:%d: %s gave %s, expected %s (%s)\n", __FILE__, __LINE__, \
              #expr, keel_status_str(check_s_), keel_status_str(want),          \
              keel_last_error());                                               \
    }                                                                           \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                     \
  do {                                                                            \
    double check_a_ = (a), check_b_ = (b);                                        \
    check_total++;                                                                \
    if (!(fabs(check_a_ - check_b_) <= (tol))) {                                  \
      check_failures++;                                                           \
      fprintf(stderr, "%s:%d: %s = %.9g, expected %.9g\n", __FILE__, __LINE__, #a, \
              check_a_, check_b_);                                                \
    }                                                                             \
  } while (0)

/* A figure of /proc/self/status in KB ("RssFile:", "RssAnon:"), -1 where
 * there is none. */
static inline long check_status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  size_t kl = 0;
  while (key[kl]) kl++;
  while (f && fgets(line, sizeof line, f)) {
    size_t i = 0;
    while (i < kl && line[i] == key[i]) i++;
    if (i == kl) kb = atol(line + kl);
  }
  if (f) fclose(f);
  return kb;
}

static inline int check_report(void) {
  uint64_t left = keel_process_bytes();
  if (left) {
    fprintf(stderr, "keel still holds %llu bytes at the end of the test\n",
            (unsigned long long)left);
    check_failures++;
  }
  uint64_t dev = keel_process_device_bytes();
  if (dev) {
    fprintf(stderr, "keel still holds %llu bytes of GPU memory at the end of the test\n",
            (unsigned long long)dev);
    check_failures++;
  }
  fprintf(stderr, "%d of %d checks passed\n", check_total - check_failures, check_total);
  return check_failures ? 1 : 0;
}

#endif
