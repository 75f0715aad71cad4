/* dnnl_glue.c: the engine, one-thread execution, measured primitives and
 * errors (dnnl_glue.h). */
#include "ops/dnnl/dnnl_glue.h"
#include "ops/common/vmath.h"

#include "ops/common/activation.h"
#include "ops/math/matmul/select.h"
#include "base/sysmem.h"

#include <stdlib.h>
#include <string.h>
#if KEEL_HAVE_DNNL && defined(__GLIBC__)
#include <malloc.h> /* malloc_trim */
#endif

/* ------------------------------------------------- per-shape caches */

void keel_dnnl_cache_init(keel_dnnl_cache *c, keel_dnnl_make_fn make, keel_dnnl_drop_fn drop,
                          void *ctx, keel_dnnl_figures *fig) {
  memset(c, 0, sizeof *c);
  keel_mutex_init(&c->lock);
  c->make = make, c->drop = drop, c->ctx = ctx, c->fig = fig;
}

void keel_dnnl_cache_free(keel_dnnl_cache *c) {
  for (int i = 0; i < c->n; i++) c->drop(c->ctx, c->e[i]);
  c->n = 0;
  keel_mutex_destroy(&c->lock);
}

/* oneDNN's code that chose and generated a kernel ran once: its pages go
 * back (the JIT'ed kernel itself is in memory of its own). Some MB on
 * every model, of a library whose text is 33 MB. */
static void drop_setup_code(void) {
#if KEEL_HAVE_DNNL
  keel_prim_drop_library_code("libdnnl");
#endif
}

/* Drops the idle entries, other than `keep`, that no run used in the
 * heap's trim window (under the cache's lock); true when one went. */
static bool cache_age(keel_dnnl_cache *c, uint64_t now, unsigned window,
                      const keel_dnnl_entry *keep) {
  bool any = false;
  for (int i = 0; window && i < c->n;) {
    keel_dnnl_entry *e = c->e[i];
    if (e != keep && !e->refs && e->run + window < now) {
      c->drop(c->ctx, e);
      c->e[i] = c->e[--c->n];
      atomic_fetch_add(&c->fig->shape_evictions, 1);
      any = true;
    } else {
      i++;
    }
  }
  return any;
}

/* What the dropped primitives held in malloc's arenas goes back to the
 * system (glibc keeps freed pages otherwise). */
static void give_back_malloc(void) {
#if KEEL_HAVE_DNNL && defined(__GLIBC__)
  malloc_trim(0);
#endif
}

keel_status keel_dnnl_cache_get(keel_dnnl_cache *c, const int64_t *key, const void *arg,
                                keel_dnnl_entry **out, bool *tmp) {
  *tmp = false;
  unsigned window = 0;
  uint64_t now = c->fig->heap ? keel_heap_clock(c->fig->heap, &window) : 0;
  keel_mutex_lock(&c->lock);
  for (int i = 0; i < c->n; i++) {
    keel_dnnl_entry *e = c->e[i];
    if (!memcmp(e->key, key, sizeof e->key)) {
      e->refs++, e->used = ++c->tick, e->run = now;
      bool aged = cache_age(c, now, window, e);
      keel_mutex_unlock(&c->lock);
      if (aged) give_back_malloc();
      atomic_fetch_add(&c->fig->shape_hits, 1);
      *out = e;
      return KEEL_OK;
    }
  }
  atomic_fetch_add(&c->fig->shape_misses, 1);
  bool aged = cache_age(c, now, window, NULL);
  /* made under the lock: other runs of the node wait for it rather than
   * make it twice */
  keel_dnnl_entry *e;
  keel_status st = c->make(c->ctx, key, arg, &e);
  drop_setup_code();
  if (st) {
    keel_mutex_unlock(&c->lock);
    if (aged) give_back_malloc();
    return st;
  }
  memcpy(e->key, key, sizeof e->key);
  int slot = c->n < KEEL_DNNL_SHAPES ? c->n : -1;
  for (int i = 0; slot < 0 && i < KEEL_DNNL_SHAPES; i++) /* the least recent idle one */
    if (!c->e[i]->refs && (slot < 0 || c->e[i]->used < c->e[slot]->used)) slot = i;
  if (slot < 0) {
    *tmp = true;
  } else {
    if (slot < c->n) {
      c->drop(c->ctx, c->e[slot]);
      atomic_fetch_add(&c->fig->shape_evictions, 1);
    } else {
      c->n++;
    }
    c->e[slot] = e;
  }
  e->refs = 1, e->used = ++c->tick, e->run = now;
  keel_mutex_unlock(&c->lock);
  if (aged) give_back_malloc();
  *out = e;
  return KEEL_OK;
}

void keel_dnnl_cache_put(keel_dnnl_cache *c, keel_dnnl_entry *e, bool tmp) {
  if (tmp) {
    c->drop(c->ctx, e);
    return;
  }
  keel_mutex_lock(&c->lock);
  e->refs--;
  keel_mutex_unlock(&c->lock);
}

#if !KEEL_HAVE_DNNL

bool keel_dnnl_available(void) { return false; }

bool keel_dnnl_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
  (void)ldb, (void)beta, (void)C, (void)ldc;
  return false;
}

#else

#include <malloc.h>
#include <oneapi/dnnl/dnnl_debug.h>

/* OpenMP's per-thread team size (libgomp, which Debian's oneDNN uses);
 * declared here so that no OpenMP header or flag is needed. */
extern int omp_get_max_threads(void);
extern void omp_set_num_threads(int n);

/* One process-wide lock: engine creation and the measured sections (a
 * spin lock on an atomic flag: taken rarely, at binding or on a new
 * shape, and needing no initialisation). */
static atomic_flag g_lock = ATOMIC_FLAG_INIT;
static void glue_lock(void) {
  while (atomic_flag_test_and_set_explicit(&g_lock, memory_order_acquire)) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
static void glue_unlock(void) { atomic_flag_clear_explicit(&g_lock, memory_order_release); }

static dnnl_engine_t g_engine;
static _Atomic int g_avail = -1;

bool keel_dnnl_available(void) {
  int a = atomic_load(&g_avail);
  if (a >= 0) return a;
  const char *off = getenv("KEEL_NO_ONEDNN");
  bool ok = !(off && off[0] && strcmp(off, "0"));
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  ok = ok && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  atomic_store(&g_avail, ok);
  return ok;
}

keel_status keel_dnnl_check(dnnl_status_t st, const char *what) {
  if (st == dnnl_success) return KEEL_OK;
  return keel_err(st == dnnl_out_of_memory ? KEEL_ERR_OUT_OF_MEMORY : KEEL_ERR_RUNTIME,
                  "oneDNN: %s: %s", what, dnnl_status2str(st));
}

/* The calling thread's OpenMP team size goes to 1 for a oneDNN call. */
static int one_thread(void) {
  int prev = omp_get_max_threads();
  if (prev != 1) omp_set_num_threads(1);
  return prev;
}
static void restore_threads(int prev) {
  if (prev != 1) omp_set_num_threads(prev);
}

keel_status keel_dnnl_engine(dnnl_engine_t *e) {
  glue_lock();
  dnnl_status_t st = dnnl_success;
  if (!g_engine) {
    /* no primitive cache: every primitive belongs to a node and dies
     * with its session */
    dnnl_set_primitive_cache_capacity(0);
    int prev = one_thread();
    st = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    restore_threads(prev);
    if (st != dnnl_success) g_engine = NULL;
  }
  *e = g_engine;
  glue_unlock();
  return keel_dnnl_check(st, "creating the CPU engine");
}

bool keel_dnnl_act_post_ops(const keel_act *a, dnnl_post_ops_t po) {
  dnnl_alg_kind_t alg;
  float alpha = 0, beta = 0;
  switch (a->kind) {
    case KEEL_ACT_RELU: alg = dnnl_eltwise_relu; break;
    case KEEL_ACT_LEAKY: alg = dnnl_eltwise_relu, alpha = a->a; break;
    case KEEL_ACT_CLIP: alg = dnnl_eltwise_clip_v2, alpha = a->a, beta = a->b; break;
    case KEEL_ACT_HSWISH: alg = dnnl_eltwise_hardswish; break;
    case KEEL_ACT_SIGMOID: alg = dnnl_eltwise_logistic; break;
    case KEEL_ACT_TANH: alg = dnnl_eltwise_tanh; break;
    case KEEL_ACT_GELU: /* keel's fast form on the hot band is faster than 2.6's post-op */
      if (keel_vm_gelu_fast_available()) return false;
      alg = dnnl_eltwise_gelu_erf;
      break;
    case KEEL_ACT_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
    case KEEL_ACT_HSIGMOID_MUL: /* x * HardSigmoid(x) is hardswish at 1/6, 1/2 */
      if (a->a != 1.0f / 6.0f || a->b != 0.5f) return false;
      alg = dnnl_eltwise_hardswish;
      break;
    case KEEL_ACT_HSIGMOID: /* max(0, min(1, a*x + b)) */
      return dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_linear, a->a, a->b) ==
                 dnnl_success &&
             dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_clip_v2, 0.0f, 1.0f) ==
                 dnnl_success;
    default: return false; /* SiLU: keel's is faster than 2.6's swish post-op */
  }
  return dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, beta) == dnnl_success;
}

keel_status keel_dnnl_attr_new(dnnl_primitive_attr_t *attr) {
  KEEL_TRY(keel_dnnl_check(dnnl_primitive_attr_create(attr), "primitive attributes"));
  dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
  if (st != dnnl_success) dnnl_primitive_attr_destroy(*attr);
  return keel_dnnl_check(st, "user scratchpad mode");
}

keel_status keel_dnnl_attr_post(dnnl_primitive_attr_t *attr, const keel_act *act, bool sum,
                                bool bare, bool *act_in_post) {
  KEEL_TRY(keel_dnnl_attr_new(attr));
  dnnl_post_ops_t po = NULL;
  dnnl_status_t ds = dnnl_post_ops_create(&po);
  *act_in_post = false;
  if (ds == dnnl_success && !bare) {
    if (sum) ds = dnnl_post_ops_append_sum(po, 1.0f);
    if (ds == dnnl_success && act->kind) {
      *act_in_post = keel_dnnl_act_post_ops(act, po);
      if (!*act_in_post) { /* start again without a half-made chain */
        dnnl_post_ops_destroy(po);
        ds = dnnl_post_ops_create(&po);
        if (ds == dnnl_success && sum) ds = dnnl_post_ops_append_sum(po, 1.0f);
      }
    }
  }
  if (ds == dnnl_success) ds = dnnl_primitive_attr_set_post_ops(*attr, po);
  if (po) dnnl_post_ops_destroy(po);
  if (ds != dnnl_success) dnnl_primitive_attr_destroy(*attr);
  return keel_dnnl_check(ds, "post-ops");
}

keel_status keel_dnnl_weights(const keel_dnnl_store *st, keel_dnnl_packed *pk,
                              const dnnl_memory_desc_t *plain, const void *from,
                              const dnnl_memory_desc_t *want, const void **use, void **own,
                              bool *packed_now) {
  *packed_now = false;
  if (pk->w && dnnl_memory_desc_equal(want, &pk->md)) {
    *use = pk->w;
    return KEEL_OK;
  }
  bool first = !pk->w;
  void *blk;
  KEEL_TRY(keel_prep_alloc_counted(st->heap, st->owner, st->bytes, dnnl_memory_desc_get_size(want),
                                   &blk));
  keel_status s = first ? keel_dnnl_reorder(plain, from, want, blk)
                        : keel_dnnl_reorder(&pk->md, pk->w, want, blk);
  if (s) {
    keel_prep_free_counted(blk, st->heap, st->bytes);
    return s;
  }
  if (first) pk->w = blk, pk->md = *want, *packed_now = true;
  else *own = blk;
  *use = blk;
  return KEEL_OK;
}

bool keel_dnnl_plain_padded(const dnnl_memory_desc_t *w, dnnl_memory_desc_t *padded) {
  if (!w || w->ndims != 2 || w->format_kind != dnnl_blocked ||
      w->format_desc.blocking.inner_nblks)
    return false;
  const dnnl_dim_t *st = w->format_desc.blocking.strides;
  int lead = st[0] == 1 ? 1 : st[1] == 1 ? 0 : -1; /* the dim that steps rows */
  if (lead < 0 || keel_matmul_ld(st[lead]) == st[lead]) return false;
  dnnl_dims_t ps = {st[0], st[1]};
  ps[lead] = keel_matmul_ld(st[lead]);
  return dnnl_memory_desc_init_by_strides(padded, 2, w->dims, dnnl_f32, ps) == dnnl_success;
}

/* A descriptor of op on keel's engine (*st: oneDNN's verdict; *pd NULL
 * unless it succeeded), made with the calling thread's OpenMP team at 1
 * (dnnl_glue.h). Fails only when the engine cannot be made. */
static keel_status pd_create(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op,
                             const_dnnl_primitive_attr_t attr, dnnl_status_t *st) {
  *pd = NULL;
  dnnl_engine_t e;
  KEEL_TRY(keel_dnnl_engine(&e));
  int prev = one_thread();
  *st = dnnl_primitive_desc_create(pd, op, attr, e, NULL);
  restore_threads(prev);
  if (*st != dnnl_success) *pd = NULL;
  return KEEL_OK;
}

/* The same for a try that may fail quietly: the descriptor or NULL. */
static dnnl_primitive_desc_t pd_try(const_dnnl_op_desc_t op, const_dnnl_primitive_attr_t attr) {
  dnnl_primitive_desc_t pd;
  dnnl_status_t st;
  if (pd_create(&pd, op, attr, &st)) keel_err_clear();
  return pd;
}

keel_status keel_dnnl_pd_make(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op,
                              const_dnnl_primitive_attr_t attr, const char *what) {
  dnnl_status_t st;
  KEEL_TRY(pd_create(pd, op, attr, &st));
  return keel_dnnl_check(st, what);
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
  const char *s = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success) return "";
  return s ? s : "";
}

dnnl_primitive_desc_t keel_dnnl_pd_prefer(dnnl_primitive_desc_t pd, const_dnnl_op_desc_t op,
                                          const_dnnl_primitive_attr_t attr,
                                          const dnnl_memory_desc_t *w) {
  const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  if (!wq || dnnl_memory_desc_equal(wq, w)) return pd;
  dnnl_primitive_desc_t alt = pd_try(op, attr);
  if (!alt) return pd;
  if (strcmp(impl_of(alt), impl_of(pd))) {
    dnnl_primitive_desc_destroy(alt);
    return pd;
  }
  dnnl_primitive_desc_destroy(pd);
  return alt;
}

dnnl_primitive_desc_t keel_dnnl_pd_pick(const_dnnl_op_desc_t op, const_dnnl_primitive_attr_t attr,
                                        bool (*ok)(const dnnl_memory_desc_t *w, void *ctx),
                                        void *ctx) {
  dnnl_engine_t e;
  if (keel_dnnl_engine(&e)) {
    keel_err_clear();
    return NULL;
  }
  dnnl_primitive_desc_iterator_t it;
  dnnl_primitive_desc_t pick = NULL;
  int prev = one_thread();
  if (dnnl_primitive_desc_iterator_create(&it, op, attr, e, NULL) == dnnl_success) {
    do {
      dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
      if (!pd) break;
      const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
      if (w && ok(w, ctx)) pick = pd;
      else dnnl_primitive_desc_destroy(pd);
    } while (!pick && dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
  }
  restore_threads(prev);
  return pick;
}

dnnl_primitive_desc_t keel_dnnl_pd_fast(const_dnnl_op_desc_t op,
                                        const_dnnl_primitive_attr_t attr) {
  dnnl_primitive_desc_t pd = pd_try(op, attr);
  if (!pd) return NULL;
  if (strstr(impl_of(pd), "ref")) {
    dnnl_primitive_desc_destroy(pd);
    return NULL;
  }
  return pd;
}

/* Bytes malloc holds for the program (every arena, and mmap'ed chunks). */
static uint64_t malloc_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

/* ------------------------------------------------- shared primitives */

/* A live primitive that identical parts share: its key is every byte that
 * decides what oneDNN makes of a descriptor (the op descriptor, the memory
 * layouts the primitive descriptor settled on, the post-ops, the
 * implementation's name). Byte equality implies field equality, so a
 * mismatch in padding bytes can only cost a share, never give a wrong one. */
struct keel_dnnl_shared {
  struct keel_dnnl_shared *next;
  dnnl_primitive_t p;
  uint64_t outside;
  int refs;
  size_t key_len;
  unsigned char key[];
};

#define KEY_MAX 16384 /* a conv descriptor is 5976 bytes, a memory one 696 */

typedef struct key_buf {
  unsigned char b[KEY_MAX], z[2 * KEY_MAX]; /* the bytes; their zero runs packed
                                               (at most 2 bytes per byte) */
  size_t n, zn;
  bool ok;
} key_buf;

/* The key with each run of zeros (most of a descriptor: unused dims and
 * slots) as a zero and its length: 0.42-0.49 KB kept per primitive instead of
 * 10.9 (the detector's). The same packing of equal keys gives equal bytes. */
static void key_pack(key_buf *k) {
  size_t o = 0;
  for (size_t i = 0; i < k->n;) {
    if (k->b[i]) {
      k->z[o++] = k->b[i++];
      continue;
    }
    size_t r = 0;
    while (i < k->n && !k->b[i] && r < 255) i++, r++;
    k->z[o++] = 0, k->z[o++] = (unsigned char)r;
  }
  k->zn = o;
}

static void key_put(key_buf *k, const void *p, size_t n) {
  if (!p || k->n + n > KEY_MAX) {
    k->ok = false;
    return;
  }
  memcpy(k->b + k->n, p, n);
  k->n += n;
}

/* The key of `pd`, or false: only convolutions and matmuls whose
 * attributes keel sets (user scratchpad, eltwise and sum post-ops) are
 * shared. */
static bool share_key(const_dnnl_primitive_desc_t pd, key_buf *k) {
  k->n = 0, k->ok = true;
  dnnl_primitive_kind_t kind;
  if (dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind) != dnnl_success) return false;
  key_put(k, &kind, sizeof kind);
  const void *op = NULL;
  if (kind == dnnl_convolution) {
    const dnnl_convolution_desc_t *cd = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_convolution_d, 0, &cd) != dnnl_success) return false;
    key_put(k, cd, sizeof *cd), op = cd;
  } else if (kind == dnnl_matmul) {
    const dnnl_matmul_desc_t *md = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_matmul_d, 0, &md) != dnnl_success) return false;
    key_put(k, md, sizeof *md), op = md;
  }
  if (!op) return false;
  static const dnnl_query_t mds[] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md,
                                     dnnl_query_scratchpad_md};
  for (size_t i = 0; i < sizeof mds / sizeof mds[0]; i++)
    for (int j = 0; j < 2; j++) { /* weights 1: the bias */
      const dnnl_memory_desc_t *m = dnnl_primitive_desc_query_md(pd, mds[i], j);
      if (m) key_put(k, m, sizeof *m);
      else key_put(k, "-", 1);
    }
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return false;
  key_put(k, impl, strlen(impl) + 1);
  const_dnnl_primitive_attr_t attr = NULL;
  const_dnnl_post_ops_t po = NULL;
  dnnl_scratchpad_mode_t sm;
  if (dnnl_primitive_desc_get_attr(pd, &attr) != dnnl_success ||
      dnnl_primitive_attr_get_scratchpad_mode(attr, &sm) != dnnl_success ||
      sm != dnnl_scratchpad_mode_user || dnnl_primitive_attr_get_post_ops(attr, &po) != dnnl_success)
    return false;
  dnnl_dim_t count;
  int mask;
  const float *scales;
  if (dnnl_primitive_attr_get_output_scales(attr, &count, &mask, &scales) != dnnl_success ||
      count != 1 || mask != 0 || scales[0] != 1.0f)
    return false;
  int len = dnnl_post_ops_len(po);
  key_put(k, &len, sizeof len);
  for (int i = 0; i < len; i++) {
    dnnl_primitive_kind_t pk = dnnl_post_ops_get_kind(po, i);
    key_put(k, &pk, sizeof pk);
    if (pk == dnnl_eltwise) {
      float v[3];
      dnnl_alg_kind_t alg;
      if (dnnl_post_ops_get_params_eltwise(po, i, &v[0], &alg, &v[1], &v[2]) != dnnl_success)
        return false;
      key_put(k, &alg, sizeof alg), key_put(k, v, sizeof v);
    } else if (pk == dnnl_sum) {
      float scale;
      int32_t zp;
      dnnl_data_type_t dt;
      if (dnnl_post_ops_get_params_sum_v3(po, i, &scale, &zp, &dt) != dnnl_success) return false;
      key_put(k, &scale, sizeof scale), key_put(k, &zp, sizeof zp), key_put(k, &dt, sizeof dt);
    } else {
      return false;
    }
  }
  return k->ok;
}

keel_status keel_dnnl_prim_make(const_dnnl_primitive_desc_t pd, keel_dnnl_figures *fig,
                                keel_dnnl_prim *out) {
  out->p = NULL, out->outside = 0, out->sh = NULL;
  static key_buf k; /* under the lock */
  glue_lock();
  bool shareable = share_key(pd, &k);
  if (shareable) key_pack(&k);
  if (shareable)
    for (struct keel_dnnl_shared *e = fig->shared; e; e = e->next)
      if (e->key_len == k.zn && !memcmp(e->key, k.z, k.zn)) {
        e->refs++;
        out->p = e->p, out->sh = e;
        glue_unlock();
        return KEEL_OK;
      }
  struct keel_dnnl_shared *e = shareable ? keel_sys_alloc(sizeof *e + k.zn) : NULL;
  uint64_t before = malloc_in_use();
  int prev = one_thread();
  dnnl_status_t st = dnnl_primitive_create(&out->p, pd);
  restore_threads(prev);
  uint64_t after = malloc_in_use();
  out->outside = after > before ? after - before : 0;
  if (st == dnnl_success && e) {
    *e = (struct keel_dnnl_shared){.next = fig->shared, .p = out->p, .outside = out->outside,
                                   .refs = 1, .key_len = k.zn};
    memcpy(e->key, k.z, k.zn);
    fig->shared = e, out->sh = e;
  } else if (e) {
    keel_sys_free(e, sizeof *e + k.zn);
  }
  glue_unlock();
  KEEL_TRY(keel_dnnl_check(st, "creating a primitive"));
  atomic_fetch_add(&fig->bytes, out->outside);
  atomic_fetch_add(&fig->objects, 1);
  return KEEL_OK;
}

void keel_dnnl_prim_free(keel_dnnl_prim *p, keel_dnnl_figures *fig) {
  if (!p->p) return;
  struct keel_dnnl_shared *e = p->sh;
  uint64_t outside = p->outside;
  bool last = true; /* the primitive goes: not shared, or its last user */
  if (e) {
    glue_lock();
    last = --e->refs == 0;
    outside = e->outside;
    for (struct keel_dnnl_shared **q = &fig->shared; last && *q; q = &(*q)->next)
      if (*q == e) {
        *q = e->next;
        break;
      }
    glue_unlock();
    if (last) keel_sys_free(e, sizeof *e + e->key_len);
  }
  if (last) {
    dnnl_primitive_destroy(p->p);
    atomic_fetch_sub(&fig->bytes, outside);
    atomic_fetch_sub(&fig->objects, 1);
  }
  p->p = NULL, p->outside = 0, p->sh = NULL;
}

size_t keel_dnnl_scratch_bytes(const_dnnl_primitive_desc_t pd) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  return md ? dnnl_memory_desc_get_size(md) : 0;
}

bool keel_dnnl_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                     int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (!keel_dnnl_available()) return false;
  int prev = one_thread();
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                beta, C, ldc);
  restore_threads(prev);
  return st == dnnl_success;
}

#define MAX_ARGS 8

keel_status keel_dnnl_exec(dnnl_primitive_t p, int n, const keel_dnnl_arg *args) {
  dnnl_engine_t e;
  KEEL_TRY(keel_dnnl_engine(&e));
  dnnl_stream_t s = NULL;
  dnnl_memory_t mem[MAX_ARGS] = {0};
  dnnl_exec_arg_t ea[MAX_ARGS];
  int made = 0;
  dnnl_status_t st = n <= MAX_ARGS ? dnnl_stream_create(&s, e, dnnl_stream_default_flags)
                                   : dnnl_invalid_arguments;
  for (; st == dnnl_success && made < n; made++) {
    st = dnnl_memory_create(&mem[made], args[made].md, e, args[made].data);
    ea[made] = (dnnl_exec_arg_t){args[made].arg, mem[made]};
  }
  if (st == dnnl_success) {
    int prev = one_thread();
    st = dnnl_primitive_execute(p, s, n, ea);
    restore_threads(prev);
  }
  for (int i = 0; i < made; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  if (s) dnnl_stream_destroy(s);
  return keel_dnnl_check(st, "executing a primitive");
}

keel_status keel_dnnl_exec_op(dnnl_primitive_t p, const keel_dnnl_op_args *o) {
  const_dnnl_primitive_desc_t pd;
  KEEL_TRY(keel_dnnl_check(dnnl_primitive_get_primitive_desc(p, &pd), "a primitive's descriptor"));
  keel_dnnl_arg a[5] = {
      {DNNL_ARG_SRC, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
       (void *)(uintptr_t)o->src},
      {DNNL_ARG_WEIGHTS, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
       (void *)(uintptr_t)o->w},
      {DNNL_ARG_DST, dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), o->dst}};
  int na = 3;
  dnnl_memory_desc_t sp;
  if (o->scratch) {
    dnnl_dims_t d = {(dnnl_dim_t)o->scratch};
    KEEL_TRY(keel_dnnl_check(dnnl_memory_desc_init_by_tag(&sp, 1, d, dnnl_u8, dnnl_a),
                             "scratchpad"));
    a[na++] = (keel_dnnl_arg){DNNL_ARG_SCRATCHPAD, &sp, o->ws};
  }
  if (o->b)
    a[na++] = (keel_dnnl_arg){DNNL_ARG_BIAS,
                              dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1),
                              (void *)(uintptr_t)o->b};
  return keel_dnnl_exec(p, na, a);
}

keel_status keel_dnnl_reorder_prim(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                   keel_dnnl_figures *fig, keel_dnnl_prim *out) {
  dnnl_engine_t e;
  KEEL_TRY(keel_dnnl_engine(&e));
  dnnl_primitive_desc_t pd = NULL;
  int prev = one_thread();
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, e, to, e, NULL);
  restore_threads(prev);
  KEEL_TRY(keel_dnnl_check(st, "a reorder"));
  keel_status ks = keel_dnnl_prim_make(pd, fig, out);
  dnnl_primitive_desc_destroy(pd);
  return ks;
}

keel_status keel_dnnl_reorder(const dnnl_memory_desc_t *from, const void *src,
                              const dnnl_memory_desc_t *to, void *dst) {
  dnnl_engine_t e;
  KEEL_TRY(keel_dnnl_engine(&e));
  dnnl_primitive_desc_t pd = NULL;
  int prev = one_thread();
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, e, to, e, NULL);
  restore_threads(prev);
  KEEL_TRY(keel_dnnl_check(st, "a reorder"));
  keel_dnnl_figures scratch_fig = {0};
  keel_dnnl_prim r;
  keel_status ks = keel_dnnl_prim_make(pd, &scratch_fig, &r);
  dnnl_primitive_desc_destroy(pd);
  KEEL_TRY(ks);
  keel_dnnl_arg a[2] = {{DNNL_ARG_FROM, from, (void *)(uintptr_t)src}, {DNNL_ARG_TO, to, dst}};
  ks = keel_dnnl_exec(r.p, 2, a);
  keel_dnnl_prim_free(&r, &scratch_fig);
  return ks;
}

#endif /* KEEL_HAVE_DNNL */
