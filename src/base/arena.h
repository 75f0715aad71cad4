/* arena.h: a bump allocator for things that die together (the model IR:
 * graphs, nodes, attributes, names, decoded constants). Memory comes from
 * the system hook in chunks; keel_arena_destroy frees them all at once. */
#ifndef KEEL_ARENA_H
#define KEEL_ARENA_H

#include "base/common.h"

typedef struct keel_arena keel_arena;

KEEL_INTERNAL keel_arena *keel_arena_create(void);
KEEL_INTERNAL void keel_arena_destroy(keel_arena *a);
/* Zeroed memory aligned to `align` (a power of two <= 4096); NULL on
 * overflow or OOM. */
KEEL_INTERNAL void *keel_arena_alloc(keel_arena *a, size_t size, size_t align);
/* n items of `size` bytes, zeroed, checked for overflow. */
KEEL_INTERNAL void *keel_arena_array(keel_arena *a, size_t n, size_t size);
/* NUL-terminated copy of (s, n). */
KEEL_INTERNAL char *keel_arena_strndup(keel_arena *a, const char *s, size_t n);
KEEL_INTERNAL char *keel_arena_strdup(keel_arena *a, const char *s);

#endif
