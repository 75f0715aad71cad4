/* devcase.h: what the device tests (test_device*.c) share: the device
 * under test, the comparison of a device session's outputs with a CPU
 * session's, the steady-bytes rule, and the end of a case. Header-only,
 * like check.h. */
#ifndef KEEL_TEST_DEVCASE_H
#define KEEL_TEST_DEVCASE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "keel.h"
#include "keel_stats.h"

/* The device under test: KEEL_TEST_DEVICE (tools/gpu_check.sh sets
 * cuda:0 on a lent GPU), else the emulated device. */
static inline const char *devcase_device(void) {
  const char *d = getenv("KEEL_TEST_DEVICE");
  return d && d[0] ? d : "emu:0";
}

/* Output a (the device's) against b (the CPU's): *same says both exist
 * with one type and shape and, for anything but float32, the same bytes.
 * For float32 the result is the worst |p - q| / (1 + |q|) over the
 * elements: equal values (infinities too) and NaN on both sides count 0,
 * NaN on one side only counts infinity. */
static inline double devcase_diff(const keel_value_t *a, const keel_value_t *b, bool *same) {
  *same = a && b && keel_value_dtype(a) == keel_value_dtype(b) && keel_value_rank(a) == keel_value_rank(b) &&
          keel_value_numel(a) == keel_value_numel(b);
  if (*same && keel_value_rank(a) > 0)
    *same = !memcmp(keel_value_shape(a), keel_value_shape(b), sizeof(int64_t) * (size_t)keel_value_rank(a));
  double worst = 0;
  if (!*same || !keel_value_numel(a)) return worst;
  if (keel_value_dtype(a) != KEEL_FLOAT) {
    *same = !memcmp(keel_value_data(a), keel_value_data(b),
                    (size_t)keel_value_numel(a) * keel_dtype_size(keel_value_dtype(a)));
    return worst;
  }
  for (int64_t j = 0; j < keel_value_numel(a); j++) {
    double p = ((const float *)keel_value_data(a))[j], q = ((const float *)keel_value_data(b))[j];
    if (isnan(p) || isnan(q)) {
      if (isnan(p) != isnan(q)) worst = INFINITY;
      continue;
    }
    if (p != q) worst = fmax(worst, fabs(p - q) / (1.0 + fabs(q)));
  }
  return worst;
}

/* The same, bit for bit (float32 included): for kernels that only move
 * bytes. */
static inline bool devcase_identical(const keel_value_t *a, const keel_value_t *b) {
  bool same;
  devcase_diff(a, b, &same);
  return same && (!keel_value_numel(a) ||
                  !memcmp(keel_value_data(a), keel_value_data(b),
                          (size_t)keel_value_numel(a) * keel_dtype_size(keel_value_dtype(a))));
}

/* Output i of case `what` agrees within tol (devcase_diff); says why
 * when not. */
static inline void devcase_check(const char *what, int i, const keel_value_t *a, const keel_value_t *b,
                                 double tol) {
  bool same;
  double worst = devcase_diff(a, b, &same);
  if (!same || !(worst <= tol))
    fprintf(stderr, "  case %s: output %d differs from the CPU's (%s, worst %g)\n", what, i,
            same ? "values" : "type, shape or bytes", worst);
  CHECK(same && worst <= tol);
}

/* The device session's allocated device bytes after run `run` are those
 * after run 0 (*first keeps them). */
static inline void devcase_steady(keel_session_t *s, int run, uint64_t *first) {
  keel_stats st = {.size = sizeof st};
  CHECK_OK(keel_stats_get_device(s, &st, NULL));
  if (run == 0) *first = st.allocated;
  else CHECK(st.allocated == *first);
}

/* Destroys both sessions; nothing is left on any device. */
static inline void devcase_end(keel_session_t *s, keel_session_t *cpu) {
  keel_session_destroy(s);
  keel_session_destroy(cpu);
  CHECK(keel_process_device_bytes() == 0);
}

#endif
