/* sysmem.h: the one hook through which keel takes memory from the system.
 *
 * Every byte keel holds (allocator segments, bookkeeping, IR arenas) passes
 * through keel_sys_realloc, which sees the old and the new size (Lua's
 * lua_Alloc), so the process-wide total needs no block headers. Tests assert
 * the total is zero at exit. A test-only countdown makes the Nth request
 * fail, to prove every path returns KEEL_ERR_OUT_OF_MEMORY and leaks nothing.
 */
#ifndef KEEL_SYSMEM_H
#define KEEL_SYSMEM_H

#include "base/common.h"

/* new_size == 0 frees `p` (returns NULL). Returns NULL on failure, leaving
 * `p` untouched. */
KEEL_INTERNAL void *keel_sys_realloc(void *p, size_t old_size, size_t new_size);

static inline void *keel_sys_alloc(size_t n) {
  return keel_sys_realloc(NULL, 0, n);
}
static inline void keel_sys_free(void *p, size_t n) {
  if (p) keel_sys_realloc(p, n, 0);
}
/* Zeroed array of n items of `size` bytes; NULL on overflow or failure. */
KEEL_INTERNAL void *keel_sys_calloc(size_t n, size_t size);

/* Segment pages (large, page-aligned); counted in the same total. */
KEEL_INTERNAL void *keel_sys_pages(size_t size);
KEEL_INTERNAL void keel_sys_pages_free(void *p, size_t size);

/* Test hook: the `n`th request from now (1 = the next) fails; n <= 0 turns
 * it off. Returns how many requests were made since the last call. */
KEEL_INTERNAL int64_t keel_sys_fail_after(int64_t n);

#endif /* KEEL_SYSMEM_H */
