/* prim_posix.c: prim.h for POSIX systems (Linux, macOS). */
#define _GNU_SOURCE
#include "prim.h"

#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"

_Static_assert(sizeof(pthread_mutex_t) <= sizeof(((keel_mutex *)0)->opaque),
               "keel_mutex too small for pthread_mutex_t");

keel_status keel_prim_map_file(const char *path, keel_mapping *m) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return keel_err(KEEL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return keel_err(KEEL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return keel_err(KEEL_ERR_IO, "%s: not a regular file", path);
  }
  m->addr = NULL;
  m->size = (size_t)st.st_size;
  if (m->size > 0) {
    void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return keel_err(KEEL_ERR_IO, "%s: cannot map: %s", path, strerror(e));
    }
    m->addr = p;
  }
  close(fd);
  return KEEL_OK;
}

keel_status keel_prim_write_file(const char *path, const void *bytes, size_t len) {
  char tmp[4200];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= sizeof tmp)
    return keel_err(KEEL_ERR_IO, "%s: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return keel_err(KEEL_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  const uint8_t *p = bytes;
  for (size_t done = 0; done < len;) {
    ssize_t k = write(fd, p + done, len - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      int e = errno;
      close(fd);
      unlink(tmp);
      return keel_err(KEEL_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    done += (size_t)k;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return keel_err(KEEL_ERR_IO, "%s: cannot write: %s", path, strerror(e));
  }
  return KEEL_OK;
}

keel_status keel_prim_mkdir(const char *path) {
  if (mkdir(path, 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return KEEL_OK;
    return keel_err(KEEL_ERR_IO, "%s: exists and is not a folder", path);
  }
  return keel_err(KEEL_ERR_IO, "%s: cannot create the folder: %s", path, strerror(errno));
}

size_t keel_prim_drop_pages(const void *p, size_t n) {
  long ps = sysconf(_SC_PAGESIZE);
  uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096u, a = (uintptr_t)p, e = a + n;
  uintptr_t lo = (a + page - 1) / page * page, hi = e / page * page;
  if (!p || hi <= lo) return 0;
  if (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) return 0;
  return hi - lo;
}

typedef struct code_walk {
  const char *name;
  size_t bytes;
} code_walk;

static int drop_code(struct dl_phdr_info *info, size_t size, void *ud) {
  code_walk *w = ud;
  (void)size;
  if (!info->dlpi_name || !strstr(info->dlpi_name, w->name)) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    /* code and read-only data; a writable segment (relocated data, the
     * RELRO part made read-only after relocation) keeps its pages */
    if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W)) continue;
    w->bytes += keel_prim_drop_pages((const void *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz);
  }
  return 1;
}

size_t keel_prim_drop_library_code(const char *name) {
  code_walk w = {name, 0};
  dl_iterate_phdr(drop_code, &w);
  return w.bytes;
}

void keel_prim_unmap(keel_mapping *m) {
  if (m->addr) munmap((void *)m->addr, m->size);
  m->addr = NULL;
  m->size = 0;
}

void *keel_prim_pages_alloc(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void keel_prim_pages_free(void *p, size_t size) {
  if (p) munmap(p, size);
}

uint64_t keel_prim_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void keel_mutex_init(keel_mutex *m) {
  pthread_mutex_init((pthread_mutex_t *)(void *)m->opaque, NULL);
}
void keel_mutex_destroy(keel_mutex *m) {
  pthread_mutex_destroy((pthread_mutex_t *)(void *)m->opaque);
}
void keel_mutex_lock(keel_mutex *m) {
  pthread_mutex_lock((pthread_mutex_t *)(void *)m->opaque);
}
void keel_mutex_unlock(keel_mutex *m) {
  pthread_mutex_unlock((pthread_mutex_t *)(void *)m->opaque);
}

/* ------------------------------------------------- condition variables */

_Static_assert(sizeof(pthread_cond_t) <= sizeof(((keel_cond *)0)->opaque),
               "keel_cond too small for pthread_cond_t");

void keel_cond_init(keel_cond *c) { pthread_cond_init((pthread_cond_t *)(void *)c->opaque, NULL); }
void keel_cond_destroy(keel_cond *c) { pthread_cond_destroy((pthread_cond_t *)(void *)c->opaque); }
void keel_cond_wait(keel_cond *c, keel_mutex *m) {
  pthread_cond_wait((pthread_cond_t *)(void *)c->opaque, (pthread_mutex_t *)(void *)m->opaque);
}
void keel_cond_broadcast(keel_cond *c) {
  pthread_cond_broadcast((pthread_cond_t *)(void *)c->opaque);
}

/* ------------------------------------------------------------- threads */

_Static_assert(sizeof(pthread_t) <= sizeof(uint64_t), "pthread_t does not fit keel_thread");

static void *thread_main(void *p) {
  keel_thread *t = p;
  t->fn(t->arg);
  return NULL;
}

keel_status keel_thread_start(keel_thread *t, void (*fn)(void *), void *arg) {
  t->fn = fn, t->arg = arg;
  pthread_t th;
  int e = pthread_create(&th, NULL, thread_main, t);
  if (e) return keel_err(KEEL_ERR_RUNTIME, "cannot start a thread: %s", strerror(e));
  memcpy(&t->opaque, &th, sizeof th);
  return KEEL_OK;
}

void keel_thread_join(keel_thread *t) {
  pthread_t th;
  memcpy(&th, &t->opaque, sizeof th);
  pthread_join(th, NULL);
}

int keel_prim_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
