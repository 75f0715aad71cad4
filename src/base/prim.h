/* prim.h: the contract between keel and the operating system. One .c per OS
 * implements it (prim_posix.c). Nothing else in keel calls the OS directly. */
#ifndef KEEL_PRIM_H
#define KEEL_PRIM_H

#include "base/common.h"

/* A read-only mapping of a whole file. An empty file maps to addr == NULL,
 * size == 0. Returns KEEL_ERR_IO with the path and the OS reason. */
typedef struct keel_mapping {
  const uint8_t *addr;
  size_t size;
} keel_mapping;
KEEL_INTERNAL keel_status keel_prim_map_file(const char *path, keel_mapping *m);
KEEL_INTERNAL void keel_prim_unmap(keel_mapping *m);
/* Gives back the resident pages of a file mapping that lie wholly inside
 * [p, p + n) (madvise DONTNEED: a later read faults them in again from
 * the file). Returns the bytes dropped. */
KEEL_INTERNAL size_t keel_prim_drop_pages(const void *p, size_t n);

/* Gives back the resident pages of the code and read-only data (the
 * segments never written) of the loaded shared library whose file name
 * contains `name`: code that ran
 * once (a library's setup, its search for a kernel) need not stay
 * resident; a later call faults its pages in again from the file. Returns
 * the bytes of code the call covered (0 when no such library). */
KEEL_INTERNAL size_t keel_prim_drop_library_code(const char *name);
/* The same for keel's own code and every library it needs, transitively
 * (DT_NEEDED), but the C runtime's (libc, libm, the loader: the host
 * program's as much as keel's): loading, binding and the libraries'
 * start-up ran once, and most of the libraries' code (MPI, the image
 * decoders, OpenBLAS, oneDNN's kernel search) runs only for some models.
 * What a run needs faults back in from the page cache. A library with
 * text relocations keeps its pages, and nothing is dropped while a
 * debugger is attached (a breakpoint is a private copy of its page).
 * Returns the bytes covered. */
KEEL_INTERNAL size_t keel_prim_drop_linked_code(void);

/* Writes len bytes to a new file `path` (through a temporary file renamed
 * over it, so a reader never sees half a file). KEEL_ERR_IO with the path
 * and the OS reason. */
KEEL_INTERNAL keel_status keel_prim_write_file(const char *path, const void *bytes, size_t len);
/* Creates folder `path` (an existing folder is fine). */
KEEL_INTERNAL keel_status keel_prim_mkdir(const char *path);

/* Pages for allocator segments (zeroed). NULL on failure. Sizes are exact:
 * keel_prim_pages_free gets the size passed to keel_prim_pages_alloc. */
KEEL_INTERNAL void *keel_prim_pages_alloc(size_t size);
KEEL_INTERNAL void keel_prim_pages_free(void *p, size_t size);

/* Monotonic clock in nanoseconds. */
KEEL_INTERNAL uint64_t keel_prim_now_ns(void);

/* A plain mutex. The struct is opaque storage sized for pthread_mutex_t. */
typedef struct keel_mutex {
  _Alignas(16) unsigned char opaque[64];
} keel_mutex;
KEEL_INTERNAL void keel_mutex_init(keel_mutex *m);
KEEL_INTERNAL void keel_mutex_destroy(keel_mutex *m);
KEEL_INTERNAL void keel_mutex_lock(keel_mutex *m);
KEEL_INTERNAL void keel_mutex_unlock(keel_mutex *m);

/* A condition variable used with keel_mutex. */
typedef struct keel_cond {
  _Alignas(16) unsigned char opaque[64];
} keel_cond;
KEEL_INTERNAL void keel_cond_init(keel_cond *c);
KEEL_INTERNAL void keel_cond_destroy(keel_cond *c);
KEEL_INTERNAL void keel_cond_wait(keel_cond *c, keel_mutex *m);
KEEL_INTERNAL void keel_cond_broadcast(keel_cond *c);
/* Wakes one waiter, if any. */
KEEL_INTERNAL void keel_cond_signal(keel_cond *c);

/* A joinable thread running fn(arg). The struct must stay in place until
 * keel_thread_join. KEEL_ERR_RUNTIME with the OS reason when it cannot
 * start. */
typedef struct keel_thread {
  uint64_t opaque;
  void (*fn)(void *);
  void *arg;
} keel_thread;
KEEL_INTERNAL keel_status keel_thread_start(keel_thread *t, void (*fn)(void *), void *arg);
KEEL_INTERNAL void keel_thread_join(keel_thread *t);

/* CPUs this process may run on (its affinity mask), at least 1. */
KEEL_INTERNAL int keel_prim_cpu_count(void);

#endif /* KEEL_PRIM_H */
