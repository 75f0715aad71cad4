/* dnnl_glue.h: keel's one door to oneDNN (Debian's libdnnl, C API).
 *
 * Kernels in this folder build oneDNN primitives at binding or on the
 * first run of a shape and run them on keel's own threads:
 *
 * - Threads. Debian's oneDNN threads with OpenMP. keel never lets it start
 *   an OpenMP team: every primitive is created and executed with the
 *   calling thread's OpenMP thread count set to 1 (keel_dnnl_exec and
 *   keel_dnnl_primitive_create do it and restore the caller's value), so a
 *   primitive is a single-threaded function. A kernel splits its work into
 *   parts (bands of output rows, images, row panels), one primitive per
 *   distinct part shape, and runs the parts with keel_pool_for: the pool's
 *   threads are the only ones computing, whatever library runs.
 * - Memory. Tensors, packed weights and scratch (oneDNN's user scratchpad
 *   mode) are keel's: the session's allocator. What oneDNN still takes
 *   with malloc (primitive objects, their JIT code) is measured when a
 *   primitive is made (malloc's own counters before and after, under one
 *   process-wide lock) and shown as its own figure in keel_stats
 *   (library_bytes, library_objects). Its primitive cache is turned off;
 *   identical primitives of one session are shared (keel_dnnl_prim_make).
 * - Errors. A failing call becomes a keel error naming the call and
 *   oneDNN's status.
 *
 * Built only with oneDNN (KEEL_HAVE_DNNL); without it keel_dnnl_available
 * is false and the layout pass leaves convolutions alone.
 */
#ifndef KEEL_DNNL_GLUE_H
#define KEEL_DNNL_GLUE_H

#include <stdatomic.h>

#include "base/prim.h"
#include "base/status.h"
#include "ops/kernel.h"

/* True when keel was built with oneDNN and the CPU has at least AVX2 (the
 * oneDNN kernels keel relies on; below that, keel's own kernels run). The
 * environment variable KEEL_NO_ONEDNN=1 makes it false (to compare). */
KEEL_INTERNAL bool keel_dnnl_available(void);

/* C = alpha op(A) op(B) + beta C, row-major, float32, on the calling
 * thread with oneDNN's JIT sgemm (AVX-512 where the CPU has it, which
 * Debian's OpenBLAS 0.3.21 does not use on every CPU that has it); false
 * when oneDNN is not there (the caller uses OpenBLAS). beta == 0 never
 * reads C. */
KEEL_INTERNAL bool keel_dnnl_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                   const float *A, int64_t lda, const float *B, int64_t ldb,
                                   float beta, float *C, int64_t ldc);

/* The session's figures for what oneDNN holds outside keel's allocator,
 * and its primitives that more than one part may use. */
struct keel_dnnl_shared;
typedef struct keel_dnnl_figures {
  _Atomic uint64_t bytes;      /* measured malloc bytes of live primitives */
  _Atomic uint64_t objects;    /* live primitives                         */
  _Atomic uint64_t shape_hits, shape_misses, shape_evictions; /* per-shape caches */
  _Atomic uint64_t streamed;   /* live conv nodes on keel's streamed kernel */
  _Atomic uint64_t winograd;   /* ... on keel's Winograd kernel            */
  _Atomic uint64_t dnnl_wino;  /* ... on oneDNN's Winograd kernel          */
  struct keel_dnnl_shared *shared; /* under the glue's lock                */
  struct keel_heap *heap;      /* the session's: its run clock and trim
                                  window age the per-shape caches (NULL:
                                  they only evict)                        */
} keel_dnnl_figures;


/* ------------------------------------------------- per-shape caches
 *
 * A node's primitives for the input shapes it meets: at most
 * KEEL_DNNL_SHAPES entries, each made on the first run of its key, shared
 * by concurrent runs (a reference count), the least recently used idle one
 * evicted for a new key; when every entry is in use, the run gets a
 * private one freed after it. Hits, misses and evictions go to the
 * session's figures.
 *
 * An entry follows the allocator's trim policy: one that no run used in
 * the heap's trim window (8 runs, longer after regrets; never with the
 * automatic trim off) is dropped on the node's next lookup, and malloc's
 * free pages go back to the system. A burst of wide inputs leaves
 * primitives of its shape behind (oneDNN's brgconv held 0.6-1.4 MB of
 * malloc each at W = 3200 on a text recogniser: 10 MB), which would stay
 * until eight other shapes came. */
#define KEEL_DNNL_SHAPES 8
#define KEEL_DNNL_KEY 4

typedef struct keel_dnnl_entry {
  int64_t key[KEEL_DNNL_KEY];
  int refs;
  uint64_t used;
  uint64_t run;                /* the heap's clock when last used         */
} keel_dnnl_entry;

/* make: builds the entry for `key` (its first member a keel_dnnl_entry);
 * drop: frees one. ctx is the kernel's state. */
typedef keel_status (*keel_dnnl_make_fn)(void *ctx, const int64_t *key, const void *arg,
                                         keel_dnnl_entry **out);
typedef void (*keel_dnnl_drop_fn)(void *ctx, keel_dnnl_entry *e);

typedef struct keel_dnnl_cache {
  keel_mutex lock;
  uint64_t tick;
  int n;
  keel_dnnl_entry *e[KEEL_DNNL_SHAPES];
  keel_dnnl_make_fn make;
  keel_dnnl_drop_fn drop;
  void *ctx;
  keel_dnnl_figures *fig;
} keel_dnnl_cache;

KEEL_INTERNAL void keel_dnnl_cache_init(keel_dnnl_cache *c, keel_dnnl_make_fn make,
                                        keel_dnnl_drop_fn drop, void *ctx, keel_dnnl_figures *fig);
/* Frees every entry (no run may hold one). */
KEEL_INTERNAL void keel_dnnl_cache_free(keel_dnnl_cache *c);
/* The entry of `key` (unused members 0), referenced; `arg` goes to make.
 * Release it with keel_dnnl_cache_put(c, e, *tmp). */
KEEL_INTERNAL keel_status keel_dnnl_cache_get(keel_dnnl_cache *c, const int64_t *key,
                                              const void *arg, keel_dnnl_entry **out, bool *tmp);
KEEL_INTERNAL void keel_dnnl_cache_put(keel_dnnl_cache *c, keel_dnnl_entry *e, bool tmp);

#if KEEL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

/* The process's CPU engine (made once, on first use). */
KEEL_INTERNAL keel_status keel_dnnl_engine(dnnl_engine_t *e);

/* KEEL_OK, or KEEL_ERR_RUNTIME "oneDNN: <what>: <status>". */
KEEL_INTERNAL keel_status keel_dnnl_check(dnnl_status_t st, const char *what);

/* A primitive and what making it cost outside keel. */
typedef struct keel_dnnl_prim {
  dnnl_primitive_t p;
  uint64_t outside;            /* malloc bytes measured at creation       */
  struct keel_dnnl_shared *sh; /* its entry in fig->shared, or NULL       */
} keel_dnnl_prim;

/* Makes the primitive of `pd` on one thread, measuring what it took from
 * malloc; adds it to `fig`. A convolution or matmul whose descriptor,
 * memory layouts, attributes and implementation are those of a live
 * primitive of the same session gets that one instead (reference
 * counted): a primitive is a function of those, keeps no state between
 * executions (user scratchpad) and may run on several threads at once, so
 * the detector's 44 convs at 2 threads need 43 primitives, not 62. */
KEEL_INTERNAL keel_status keel_dnnl_prim_make(const_dnnl_primitive_desc_t pd, keel_dnnl_figures *fig,
                                              keel_dnnl_prim *out);
/* Destroys it (or drops its reference) and takes it out of `fig` (a
 * zeroed one is fine). */
KEEL_INTERNAL void keel_dnnl_prim_free(keel_dnnl_prim *p, keel_dnnl_figures *fig);

/* A primitive descriptor made on one thread (its choices depend on the
 * thread count it sees). */
KEEL_INTERNAL keel_status keel_dnnl_pd_make(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op,
                                            const_dnnl_primitive_attr_t attr, const char *what);

/* A matrix product's B in a plain (unblocked) layout whose row stride
 * keel_matmul_ld (ops/math/matmul/select.c) would pad: true, and `padded`
 * the same layout with that stride. Blocked layouts (AVX-512's brgemm
 * packs B in blocks) are left as they are: false. */
KEEL_INTERNAL bool keel_dnnl_plain_padded(const dnnl_memory_desc_t *w, dnnl_memory_desc_t *padded);

/* `pd` (made with the weights in any layout) or, when its weights layout
 * is not `w` but a descriptor of `op` (weights in `w`) gets the same
 * kernel, that one instead (so that shapes share one packed copy); a
 * kernel that takes `w` only by being slower (a reference one) is not
 * worth it. Never fails: the worst is `pd` itself. */
KEEL_INTERNAL dnnl_primitive_desc_t keel_dnnl_pd_prefer(dnnl_primitive_desc_t pd,
                                                        const_dnnl_op_desc_t op,
                                                        const_dnnl_primitive_attr_t attr,
                                                        const dnnl_memory_desc_t *w);

/* A descriptor of `op` (its layouts all fixed) when a kernel other than a
 * reference one takes it; NULL (no error left) otherwise. */
KEEL_INTERNAL dnnl_primitive_desc_t keel_dnnl_pd_fast(const_dnnl_op_desc_t op,
                                                      const_dnnl_primitive_attr_t attr);

/* The first of oneDNN's implementations of `op` (in its order of
 * preference) whose weights layout ok(w, ctx) accepts; NULL (no error
 * left) when none does. For a kernel family whose members want different
 * weights (oneDNN's Winograd kernels: F(2,3) and F(4,3) transforms of
 * 1.8x and 4x W, chosen by the problem's size), so that every shape of a
 * node reads the one copy made on its first run. */
KEEL_INTERNAL dnnl_primitive_desc_t keel_dnnl_pd_pick(const_dnnl_op_desc_t op,
                                                     const_dnnl_primitive_attr_t attr,
                                                     bool (*ok)(const dnnl_memory_desc_t *w,
                                                                void *ctx),
                                                     void *ctx);

/* One argument of an execution: a memory descriptor and the bytes. */
typedef struct keel_dnnl_arg {
  int arg;                     /* DNNL_ARG_*                              */
  const dnnl_memory_desc_t *md;
  void *data;
} keel_dnnl_arg;

/* A product's execution (convolution, matmul): SRC, WEIGHTS and DST, a
 * user scratchpad of `scratch` bytes at ws when scratch > 0, a BIAS when
 * b is not NULL; their layouts are the primitive's own (queried from it,
 * so kernels keep no copies of them: a descriptor is 696 bytes). */
typedef struct keel_dnnl_op_args {
  const void *src, *w, *b;
  void *dst, *ws;
  size_t scratch;
} keel_dnnl_op_args;
KEEL_INTERNAL keel_status keel_dnnl_exec_op(dnnl_primitive_t p, const keel_dnnl_op_args *o);

/* Executes p with those arguments on the calling thread (a stream and the
 * memory objects are made for the call and freed after it). */
KEEL_INTERNAL keel_status keel_dnnl_exec(dnnl_primitive_t p, int n, const keel_dnnl_arg *args);

/* Copies a tensor between two layouts (a reorder primitive, made and
 * freed for the call; for preparing weights). */
KEEL_INTERNAL keel_status keel_dnnl_reorder(const dnnl_memory_desc_t *from, const void *src,
                                            const dnnl_memory_desc_t *to, void *dst);

/* A reorder primitive between two layouts, kept (made like any primitive:
 * measured, counted in fig). */
KEEL_INTERNAL keel_status keel_dnnl_reorder_prim(const dnnl_memory_desc_t *from,
                                                 const dnnl_memory_desc_t *to,
                                                 keel_dnnl_figures *fig, keel_dnnl_prim *out);

/* Scratchpad bytes a primitive descriptor asks for (user mode). */
KEEL_INTERNAL size_t keel_dnnl_scratch_bytes(const_dnnl_primitive_desc_t pd);

/* Appends the fused activation (ops/common/activation.h) as eltwise post-ops;
 * false when oneDNN has no equivalent as exact (the kernel applies it
 * itself with keel_act_apply_fast_f32, on each part while it is in cache). */
struct keel_act;
KEEL_INTERNAL bool keel_dnnl_act_post_ops(const struct keel_act *a, dnnl_post_ops_t po);

/* An attribute for a kernel's primitive: user scratchpad, and unless
 * `bare` the post-ops: a sum (when `sum`: the destination starts as the
 * residual) then the activation where oneDNN has it (*act_in_post says so;
 * else the kernel applies it with keel_act_apply_fast_f32). */
KEEL_INTERNAL keel_status keel_dnnl_attr_post(dnnl_primitive_attr_t *attr, const struct keel_act *act,
                                              bool sum, bool bare, bool *act_in_post);

/* A node's packed weights: the layout its first primitive wants, made
 * from the plain copy then. */
typedef struct keel_dnnl_packed {
  void *w;                      /* a prepared block, or NULL until made    */
  dnnl_memory_desc_t md;
} keel_dnnl_packed;

/* Where a prepared block comes from and is counted. */
typedef struct keel_dnnl_store {
  keel_heap *heap;
  keel_owner owner;
  _Atomic uint64_t *bytes;
} keel_dnnl_store;

/* The weights a primitive wanting layout `want` reads (*use): the packed
 * ones, made now from (plain, from) when there are none yet (*packed_now
 * then: the caller may give the original's pages back), or, when the
 * packed layout is another, a copy of its own in *own (freed with it). */
KEEL_INTERNAL keel_status keel_dnnl_weights(const keel_dnnl_store *st, keel_dnnl_packed *pk,
                                            const dnnl_memory_desc_t *plain, const void *from,
                                            const dnnl_memory_desc_t *want, const void **use,
                                            void **own, bool *packed_now);

/* A primitive attribute with the user scratchpad mode set. */
KEEL_INTERNAL keel_status keel_dnnl_attr_new(dnnl_primitive_attr_t *attr);
#endif

#endif /* KEEL_DNNL_GLUE_H */
