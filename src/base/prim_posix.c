/* prim_posix.c: prim.h for POSIX systems (Linux, macOS). */
#define _GNU_SOURCE
#include "base/prim.h"

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

#include "base/status.h"

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

/* Drops the pages of a loaded object's code and read-only data; a
 * writable segment (relocated data, the RELRO part made read-only after
 * relocation) keeps its pages. */
static size_t drop_read_only(const struct dl_phdr_info *info) {
  size_t bytes = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W)) continue;
    bytes += keel_prim_drop_pages((const void *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz);
  }
  return bytes;
}

static int drop_code(struct dl_phdr_info *info, size_t size, void *ud) {
  code_walk *w = ud;
  (void)size;
  if (!info->dlpi_name || !strstr(info->dlpi_name, w->name)) return 0;
  w->bytes += drop_read_only(info);
  return 1;
}

size_t keel_prim_drop_library_code(const char *name) {
  code_walk w = {name, 0};
  dl_iterate_phdr(drop_code, &w);
  return w.bytes;
}

/* ------------------------------------------- the libraries keel brought */

#define MAX_OBJECTS 256

typedef struct loaded {
  ElfW(Addr) base;
  const char *name, *soname;
  const ElfW(Dyn) *dyn;
  const char *strtab;
  bool textrel, runtime, marked;
} loaded;

typedef struct loaded_set {
  loaded o[MAX_OBJECTS];
  int n;
  const void *root_addr;
  int root;
} loaded_set;

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The C runtime: the host's as much as keel's, left as it is. */
static bool is_runtime(const char *file) {
  static const char *const rt[] = {"libc.so", "libm.so", "ld-linux", "libpthread.so",
                                   "libdl.so", "librt.so", "linux-vdso", "ld64.so"};
  for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++)
    if (!strncmp(file, rt[i], strlen(rt[i]))) return true;
  return false;
}

static int collect(struct dl_phdr_info *info, size_t size, void *ud) {
  loaded_set *L = ud;
  (void)size;
  if (L->n == MAX_OBJECTS) return 1;
  loaded *o = &L->o[L->n];
  *o = (loaded){.base = info->dlpi_addr, .name = info->dlpi_name ? info->dlpi_name : ""};
  uintptr_t ra = (uintptr_t)L->root_addr;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_DYNAMIC) o->dyn = (const ElfW(Dyn) *)lo;
    if (ph->p_type == PT_LOAD && ra >= lo && ra < lo + ph->p_memsz) L->root = L->n;
  }
  ElfW(Addr) strtab = 0, soname = 0;
  for (const ElfW(Dyn) *d = o->dyn; d && d->d_tag != DT_NULL; d++) {
    if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
    if (d->d_tag == DT_SONAME) soname = d->d_un.d_val;
    if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
      o->textrel = true;
  }
  /* the loader relocates the dynamic section's addresses in place on most
   * systems, not on all */
  if (strtab && strtab < info->dlpi_addr) strtab += info->dlpi_addr;
  o->strtab = (const char *)strtab;
  o->soname = strtab && soname ? o->strtab + soname : "";
  /* nameless past the first (the program): the kernel's vDSO */
  o->runtime = is_runtime(base_name(o->name)) || is_runtime(o->soname) || (!o->name[0] && L->n);
  L->n++;
  return 0;
}

static int find_object(const loaded_set *L, const char *file) {
  for (int i = 0; i < L->n; i++)
    if (!strcmp(base_name(L->o[i].name), file) || !strcmp(L->o[i].soname, file)) return i;
  return -1;
}

/* Marks o and, transitively, the libraries it names as needed. */
static void mark(loaded_set *L, int i) {
  loaded *o = &L->o[i];
  if (o->marked || o->runtime) return;
  o->marked = true;
  if (!o->strtab) return;
  for (const ElfW(Dyn) *d = o->dyn; d && d->d_tag != DT_NULL; d++) {
    if (d->d_tag != DT_NEEDED) continue;
    int k = find_object(L, o->strtab + d->d_un.d_val);
    if (k >= 0) mark(L, k);
  }
}

typedef struct drop_walk {
  const loaded_set *L;
  size_t bytes;
} drop_walk;

static int drop_marked(struct dl_phdr_info *info, size_t size, void *ud) {
  drop_walk *w = ud;
  const loaded_set *L = w->L;
  (void)size;
  for (int i = 0; i < L->n; i++) {
    const loaded *o = &L->o[i];
    if (!o->marked || o->textrel || o->base != info->dlpi_addr ||
        strcmp(o->name, info->dlpi_name ? info->dlpi_name : ""))
      continue;
    w->bytes += drop_read_only(info);
  }
  return 0;
}

/* A debugger is attached: its breakpoints live in private copies of code
 * pages, which dropping would throw away. */
static bool traced(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long pid = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "TracerPid: %ld", &pid) == 1) break;
  if (f) fclose(f);
  return pid != 0;
}

size_t keel_prim_drop_linked_code(void) {
  static loaded_set L; /* 256 entries: not on the stack; under the lock */
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  if (traced()) return 0;
  pthread_mutex_lock(&lock);
  memset(&L, 0, sizeof L);
  L.root = -1;
  L.root_addr = (const void *)(uintptr_t)&keel_prim_drop_linked_code;
  dl_iterate_phdr(collect, &L);
  size_t bytes = 0;
  if (L.root >= 0 && L.n < MAX_OBJECTS) {
    L.o[L.root].runtime = false; /* keel itself, even inside a host program */
    mark(&L, L.root);
    drop_walk w = {&L, 0};
    dl_iterate_phdr(drop_marked, &w);
    bytes = w.bytes;
  }
  pthread_mutex_unlock(&lock);
  return bytes;
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

void keel_cond_signal(keel_cond *c) { pthread_cond_signal((pthread_cond_t *)(void *)c->opaque); }

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
