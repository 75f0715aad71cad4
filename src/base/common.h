/* common.h: what every keel source file includes: the public header, the
 * visibility marker for cross-file internals, assert levels, and checked
 * size arithmetic. Untrusted sizes (from model files and user tensors) go
 * through the keel_*_ovf helpers before any allocation. */
#ifndef KEEL_COMMON_H
#define KEEL_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "keel.h"

#if defined(__GNUC__)
#define KEEL_INTERNAL __attribute__((visibility("hidden")))
#define KEEL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define KEEL_LIKELY(x) __builtin_expect(!!(x), 1)
#define KEEL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define KEEL_UNUSED __attribute__((unused))
#else
#define KEEL_INTERNAL
#define KEEL_PRINTF(a, b)
#define KEEL_LIKELY(x) (x)
#define KEEL_UNLIKELY(x) (x)
#define KEEL_UNUSED
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "keel reads ONNX's little-endian raw data in place: little-endian hosts only"
#endif

/* ---------------------------------------------------------------- asserts
 * KEEL_DEBUG 0: none; 1: cheap checks; 2: internal invariants; 3: expensive
 * (whole-structure walks). Asserts guard invariants only: untrusted input
 * never reaches one. */
#ifndef KEEL_DEBUG
#define KEEL_DEBUG 0
#endif

KEEL_INTERNAL void keel_assert_fail(const char *expr, const char *file,
                                    int line, const char *func);

#define KEEL_ASSERT_(e) \
  ((e) ? (void)0 : keel_assert_fail(#e, __FILE__, __LINE__, __func__))
#if KEEL_DEBUG >= 1
#define keel_assert(e) KEEL_ASSERT_(e)
#else
#define keel_assert(e) ((void)0)
#endif
#if KEEL_DEBUG >= 2
#define keel_assert_internal(e) KEEL_ASSERT_(e)
#else
#define keel_assert_internal(e) ((void)0)
#endif
#if KEEL_DEBUG >= 3
#define keel_assert_expensive(e) KEEL_ASSERT_(e)
#else
#define keel_assert_expensive(e) ((void)0)
#endif

#define KEEL_COUNTOF(a) (sizeof(a) / sizeof((a)[0]))
#define KEEL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KEEL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ----------------------------------------------------- checked arithmetic
 * Return true on overflow (like the builtins they wrap). */
static inline bool keel_mul_ovf(size_t a, size_t b, size_t *r) {
  return __builtin_mul_overflow(a, b, r);
}
static inline bool keel_add_ovf(size_t a, size_t b, size_t *r) {
  return __builtin_add_overflow(a, b, r);
}
static inline bool keel_mul64_ovf(int64_t a, int64_t b, int64_t *r) {
  return __builtin_mul_overflow(a, b, r);
}

/* Round up to a power-of-two alignment (no overflow check: callers bound n). */
static inline size_t keel_align_up(size_t n, size_t align) {
  return (n + align - 1) & ~(align - 1);
}

#endif /* KEEL_COMMON_H */
