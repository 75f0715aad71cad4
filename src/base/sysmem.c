/* sysmem.c: the system memory hook, its process-wide byte count, and the
 * fault-injection countdown used by tests. */
#include "base/sysmem.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "base/prim.h"
#include "keel_stats.h"

static _Atomic uint64_t g_bytes;
static _Atomic int64_t g_fail_countdown;  /* 0 = off */
static _Atomic int64_t g_requests;

/* True when this request must fail (fault injection). */
static bool inject_failure(void) {
  atomic_fetch_add_explicit(&g_requests, 1, memory_order_relaxed);
  int64_t c = atomic_load_explicit(&g_fail_countdown, memory_order_relaxed);
  if (c <= 0) return false;
  c = atomic_fetch_sub(&g_fail_countdown, 1);
  return c == 1;
}

void *keel_sys_realloc(void *p, size_t old_size, size_t new_size) {
  if (new_size == 0) {
    free(p);
    atomic_fetch_sub(&g_bytes, old_size);
    return NULL;
  }
  if (inject_failure()) return NULL;
  void *q = realloc(p, new_size);
  if (!q) return NULL;
  atomic_fetch_add(&g_bytes, new_size);
  atomic_fetch_sub(&g_bytes, old_size);
  return q;
}

void *keel_sys_calloc(size_t n, size_t size) {
  size_t total;
  if (keel_mul_ovf(n, size, &total)) return NULL;
  if (total == 0) total = 1;
  void *p = keel_sys_alloc(total);
  if (p) memset(p, 0, total);
  return p;
}

void *keel_sys_pages(size_t size) {
  if (inject_failure()) return NULL;
  void *p = keel_prim_pages_alloc(size);
  if (p) atomic_fetch_add(&g_bytes, size);
  return p;
}

void keel_sys_pages_free(void *p, size_t size) {
  if (!p) return;
  keel_prim_pages_free(p, size);
  atomic_fetch_sub(&g_bytes, size);
}

int64_t keel_sys_fail_after(int64_t n) {
  atomic_store(&g_fail_countdown, n > 0 ? n : 0);
  return atomic_exchange(&g_requests, 0);
}

uint64_t keel_process_bytes(void) { return atomic_load(&g_bytes); }
