/* arena.c: chunked bump allocation (see arena.h). Requests larger than a
 * quarter chunk get a chunk of their own so big constants waste nothing. */
#include "base/arena.h"

#include "base/sysmem.h"

#define CHUNK_SIZE (64u * 1024u)

typedef struct chunk {
  struct chunk *next;
  size_t size, used;
  unsigned char data[];
} chunk;

struct keel_arena {
  chunk *head;
  size_t bytes;
};

keel_arena *keel_arena_create(void) {
  return keel_sys_calloc(1, sizeof(keel_arena));
}

void keel_arena_destroy(keel_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    keel_sys_free(c, sizeof(chunk) + c->size);
  }
  keel_sys_free(a, sizeof *a);
}

static chunk *chunk_new(keel_arena *a, size_t size) {
  chunk *c = keel_sys_alloc(sizeof(chunk) + size);
  if (!c) return NULL;
  c->size = size;
  c->used = 0;
  a->bytes += sizeof(chunk) + size;
  return c;
}

/* The first offset >= `from` in c->data whose address is aligned. */
static size_t offset_aligned(const chunk *c, size_t from, size_t align) {
  uintptr_t base = (uintptr_t)c->data;
  return (size_t)(keel_align_up(base + from, align) - base);
}

void *keel_arena_alloc(keel_arena *a, size_t size, size_t align) {
  if (size == 0) size = 1;
  if (size > SIZE_MAX / 2) return NULL;
  chunk *c = a->head;
  if (c) {
    size_t at = offset_aligned(c, c->used, align);
    if (at <= c->size && size <= c->size - at) {
      c->used = at + size;
      memset(c->data + at, 0, size);
      return c->data + at;
    }
  }
  size_t need = size + align;
  if (need > CHUNK_SIZE / 4) { /* a chunk of its own, behind the head */
    chunk *big = chunk_new(a, need);
    if (!big) return NULL;
    if (c) {
      big->next = c->next;
      c->next = big;
    } else {
      big->next = NULL;
      a->head = big;
    }
    size_t at = offset_aligned(big, 0, align);
    big->used = big->size;
    memset(big->data + at, 0, size);
    return big->data + at;
  }
  chunk *n = chunk_new(a, CHUNK_SIZE);
  if (!n) return NULL;
  n->next = a->head;
  a->head = n;
  size_t at = offset_aligned(n, 0, align);
  n->used = at + size;
  memset(n->data + at, 0, size);
  return n->data + at;
}

void *keel_arena_array(keel_arena *a, size_t n, size_t size) {
  size_t total;
  if (keel_mul_ovf(n, size, &total)) return NULL;
  return keel_arena_alloc(a, total, size >= 8 ? 8 : (size >= 4 ? 4 : 1));
}

char *keel_arena_strndup(keel_arena *a, const char *s, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *p = keel_arena_alloc(a, n + 1, 1);
  if (p && n) memcpy(p, s, n);
  return p;
}

char *keel_arena_strdup(keel_arena *a, const char *s) {
  return keel_arena_strndup(a, s, strlen(s));
}

