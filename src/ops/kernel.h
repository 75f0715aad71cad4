/* kernel.h: the contract between the executor and operator kernels.
 *
 * A kernel is a pure function of its inputs and attributes:
 *
 *     keel_status op_relu(keel_kctx *k);
 *
 * It reads inputs through keel_k_in*() (borrowed: never freed, never kept),
 * allocates each output with keel_k_out() (or shares an input's buffer with
 * keel_k_view() / keel_k_reuse()), and returns KEEL_OK or an error made with
 * keel_err() ("input 'B' has 3 columns, expected 4"); the executor puts the
 * node's name and op in front. On error the executor releases whatever the
 * kernel allocated. Kernels keep no state between calls and are called
 * concurrently from many threads on different contexts.
 *
 * Scratch memory (keel_k_scratch) comes from the session allocator, tagged
 * with the node, and is freed by the executor when the kernel returns.
 *
 * Registration: each family file ends with a table
 *     const keel_opdef keel_ops_<family>[] = { {"", "Relu", 6, KEEL_OPSET_MAX, op_relu}, ... };
 * listed in registry.c. One op may have several rows for opset ranges; the
 * kernel may also read keel_k_opset() and branch.
 */
#ifndef KEEL_KERNEL_H
#define KEEL_KERNEL_H

#include <stdatomic.h>

#include "base/status.h"
#include "ir/ir.h"

#define KEEL_OPSET_MAX 1000
#define KEEL_K_MAX_SCRATCH 24
/* Every kernel call gets at least this many output targets: outputs a node
 * does not list (fewer than the op defines) are written and dropped, so a
 * kernel may always produce all of its outputs. */
#define KEEL_K_MIN_OUTS 8

struct keel_runctx;
struct keel_frame;
struct keel_kctx;
struct keel_device;

/* What the executor lends a kernel, so that ops/ never includes exec/
 * (exec/run.c fills it): running a graph attribute of the node on one
 * value (FlexAttention's score_mod; If/Loop/Scan live in exec/control.c,
 * beside the executor, and use run/frame directly), and the session's MPI
 * communicator (the collectives, dist/collective.c). svc is NULL where a
 * kernel runs outside a session's run (kernel.c's prepared probes). */
typedef struct keel_kservices {
  /* runs g (one input, one output) on *in, moved in, into *out */
  keel_status (*subgraph)(struct keel_kctx *k, const keel_graph *g, keel_val *in, keel_val *out);
  /* keel_options.comm of the session (a const MPI_Comm *), or NULL */
  const void *(*comm)(const struct keel_kctx *k);
} keel_kservices;

typedef struct keel_kctx {
  const keel_node *node;
  const keel_val *const *in;   /* n_in entries; NULL for omitted inputs    */
  keel_val *const *out;        /* max(n_out, KEEL_K_MIN_OUTS) entries, EMPTY
                                  on entry; omitted or unlisted outputs point
                                  at scratch the executor drops */
  int32_t n_in, n_out;
  keel_heap *heap;             /* where outputs go: the device's heap for a
                                  node placed on the device                */
  keel_owner owner;            /* site of output 0, current iteration      */
  struct keel_device *dev;     /* the session's device (device/device.h),
                                  or NULL: a CPU-only session, or a placed
                                  one run on the host (KEEL_OPT_PLAN_ONLY) */
  keel_heap *dev_heap;         /* the device's heap, or NULL              */
  struct keel_pool *pool;      /* the session's threads (base/pool.h)     */
  const void *prep;            /* the node's prepared state (keel_impl), or
                                  NULL; read-only while runs use it        */
  const keel_kservices *svc;   /* the executor's services, or NULL         */
  struct keel_runctx *run;        /* executor state (exec/control.c only)    */
  struct keel_frame *frame;
  int32_t n_scratch;
  keel_block *scratch[KEEL_K_MAX_SCRATCH];
} keel_kctx;

/* The owner of a block made for output i of the running node: the node's
 * site plus i, in the current iteration; with owner tags off (site 0, the
 * session) it stays 0. The one place output tags are made: kernels and
 * control flow (scan outputs, stacked states) both go through it. */
static inline keel_owner keel_k_owner(const keel_kctx *k, int i) {
  keel_owner o = k->owner;
  if (o.site) o.site += (uint32_t)i;
  return o;
}

typedef keel_status (*keel_kernel_fn)(keel_kctx *k);

enum {
  KEEL_OPF_RANDOM = 1          /* draws random numbers                    */
};

/* Element-type sets for keel_opdef.types: bit d for keel_dtype d. */
#define KEEL_T(d) (1ull << (d))
#define KEEL_TS_FLOAT (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16))
#define KEEL_TS_SINT (KEEL_T(KEEL_INT8) | KEEL_T(KEEL_INT16) | KEEL_T(KEEL_INT32) | KEEL_T(KEEL_INT64))
#define KEEL_TS_UINT (KEEL_T(KEEL_UINT8) | KEEL_T(KEEL_UINT16) | KEEL_T(KEEL_UINT32) | KEEL_T(KEEL_UINT64))
#define KEEL_TS_INT (KEEL_TS_SINT | KEEL_TS_UINT)
#define KEEL_TS_NUM (KEEL_TS_FLOAT | KEEL_TS_INT)
#define KEEL_TS_ALL (KEEL_TS_NUM | KEEL_T(KEEL_BOOL) | KEEL_T(KEEL_STRING))
/* The narrow types: float8 (four formats and E8M0), float4, 4- and 2-bit
 * integers. Only rows that list them get them (keel_k_check_in_types). */
#define KEEL_TS_FLOAT8 (KEEL_T(KEEL_FLOAT8E4M3FN) | KEEL_T(KEEL_FLOAT8E4M3FNUZ) | \
                        KEEL_T(KEEL_FLOAT8E5M2) | KEEL_T(KEEL_FLOAT8E5M2FNUZ))
#define KEEL_TS_INT_SMALL (KEEL_T(KEEL_UINT4) | KEEL_T(KEEL_INT4) | KEEL_T(KEEL_UINT2) | \
                           KEEL_T(KEEL_INT2))
#define KEEL_TS_SMALL (KEEL_TS_FLOAT8 | KEEL_TS_INT_SMALL | KEEL_T(KEEL_FLOAT4E2M1) | \
                       KEEL_T(KEEL_FLOAT8E8M0))

/* ---------------------------------------------------- implementations
 *
 * A row's `fn` is the op's reference kernel: it runs every node the op
 * allows. A row may also list faster implementations (a library primitive,
 * keel's own fast path); at session creation each node is bound, once, to
 * the first one whose supports() accepts it, else to the reference. The
 * choice is shown by `keel info`.
 *
 * An implementation may prepare state once per node at binding (packed or
 * reordered weights, a library primitive): memory from the session's
 * allocator through keel_prep_alloc, owner-tagged "prepared state of node
 * ...", counted in keel_stats.prepared_bytes, released with the session.
 * Runs read it through keel_kctx.prep and never write it (many threads run
 * one node at once). */
typedef struct keel_prep_ctx {
  const keel_node *node;
  /* per input: its tensor when the input is a constant (an initializer),
   * NULL when it is computed at run time or omitted */
  const keel_tensor *const *consts;
  keel_heap *heap;
  keel_owner owner;            /* the node's prepared-state site          */
  int splits;                  /* parts to cut work into: the pool's
                                  keel_pool_splits (never size per-worker
                                  scratch with it)                        */
  _Atomic uint64_t *bytes;     /* the session's prepared-bytes figure     */
  const struct keel_model *model; /* for keel_model_drop_const (onnx.h)   */
  struct keel_dnnl_figures *lib; /* the session's figures for what a library
                                  holds outside keel (ops/dnnl/)          */
  bool no_library;             /* KEEL_OPT_NO_ONEDNN: library implementations
                                  decline                                 */
} keel_prep_ctx;
/* Nodes with more inputs than this keep their reference kernel. */
#define KEEL_IMPL_MAX_IN 16

typedef struct keel_impl {
  const char *name;            /* "onednn", "direct", ... (keel info)     */
  /* true when this implementation computes the node exactly as the
   * reference would (attributes, which inputs are constant, types) */
  bool (*supports)(const keel_prep_ctx *p);
  /* optional: builds *state (may leave it NULL) */
  keel_status (*prepare)(const keel_prep_ctx *p, void **state);
  /* optional: frees what prepare built */
  void (*release)(void *state, keel_heap *heap);
  keel_kernel_fn fn;           /* NULL: the row's reference kernel, which
                                  then finds the state in k->prep          */
  const char *rule;            /* when it takes a node, in words (keel info
                                  --nodes); the family's select.c orders
                                  the list                                */
  uint8_t device;              /* the nodes it runs: KEEL_NODE_CPU (0), or
                                  KEEL_NODE_GPU: nodes the place pass put
                                  on the session's device, whose inputs
                                  and outputs are device memory           */
} keel_impl;

/* Prepared-state memory: `bytes` (KEEL_ALIGN-aligned) of the session's
 * heap tagged with the node's prepared-state site and counted in
 * prepared_bytes; KEEL_ERR_OUT_OF_MEMORY with the figures on OOM or the
 * cap. keel_prep_block_release (below) frees it from the pointer alone. */
KEEL_INTERNAL keel_status keel_prep_alloc(const keel_prep_ctx *p, size_t bytes, void **state);
/* The same at any time (state made on a run's first use of a shape):
 * from `heap`, tagged `owner`, counted in *counter until
 * keel_prep_free_counted gives it back. */
KEEL_INTERNAL keel_status keel_prep_alloc_counted(keel_heap *heap, keel_owner owner,
                                                  _Atomic uint64_t *counter, size_t bytes,
                                                  void **state);
KEEL_INTERNAL void keel_prep_free_counted(void *state, keel_heap *heap, _Atomic uint64_t *counter);

/* State built from a node's attributes alone (a tree ensemble, a lookup
 * table), by a function written against a kernel context: `k` has the
 * node, the heap, the prepared-state owner and scratch (freed after the
 * call); no inputs. It allocates the state with keel_k_prep_block. The
 * kernel reads it as k->prep and must also work without it (the
 * reference binding, KEEL_OPT_REFERENCE_KERNELS). KEEL_IMPL_FROM_ATTRS
 * makes the implementation list of such an op. */
typedef keel_status (*keel_prepare_fn)(keel_kctx *k, void **state, size_t *bytes);
/* `bytes` of the heap for that state (the pointer is KEEL_ALIGN-aligned). */
KEEL_INTERNAL keel_status keel_k_prep_block(keel_kctx *k, size_t bytes, void **state);
KEEL_INTERNAL keel_status keel_prep_from_attrs(const keel_prep_ctx *p, keel_prepare_fn fn,
                                               void **state);
KEEL_INTERNAL void keel_prep_block_release(void *state, keel_heap *heap);
KEEL_INTERNAL bool keel_prep_always(const keel_prep_ctx *p);
/* supports() of an implementation this build or CPU never has. */
KEEL_INTERNAL bool keel_prep_never(const keel_prep_ctx *p);
/* supports() of a GPU implementation (keel_impl.device KEEL_NODE_GPU):
 * the node is placed on the device; which nodes go there is the place
 * pass's decision (passes/pass_place.c), made on the inferred types. */
KEEL_INTERNAL bool keel_prep_on_gpu(const keel_prep_ctx *p);
#define KEEL_IMPL_FROM_ATTRS(var, label, prep_fn, kernel)                                  \
  static keel_status var##_prepare(const keel_prep_ctx *p, void **state) {                \
    return keel_prep_from_attrs(p, prep_fn, state);                                       \
  }                                                                                       \
  static const keel_impl var##_impl = {label, keel_prep_always, var##_prepare,            \
                                       keel_prep_block_release, kernel};                  \
  static const keel_impl *const var[] = {&var##_impl, NULL};

typedef struct keel_opdef {
  const char *domain;          /* "" for ai.onnx                          */
  const char *name;
  int32_t since, until;        /* opset versions, inclusive               */
  keel_kernel_fn fn;
  uint32_t flags;              /* KEEL_OPF_*                              */
  uint64_t types;              /* element types of the main input(s), KEEL_T */
  const keel_impl *const *impls; /* faster implementations, NULL-ended; or NULL */
} keel_opdef;

/* ------------------------------------------------------------ inputs */

static inline int64_t keel_k_opset(const keel_kctx *k) { return k->node->opset; }
/* True when input i was given (not omitted, not past the end). */
static inline bool keel_k_has_in(const keel_kctx *k, int i) {
  return i < k->n_in && k->in[i] != NULL;
}
static inline bool keel_k_has_out(const keel_kctx *k, int i) {
  return i < k->n_out && k->node->out[i] >= 0;
}
/* Input i as a tensor, or NULL when omitted. Error when it is given but is
 * not a tensor. */
KEEL_INTERNAL keel_status keel_k_in_opt(keel_kctx *k, int i,
                                        const keel_tensor **t);
/* Input i as a tensor; error when omitted or not a tensor. */
KEEL_INTERNAL keel_status keel_k_in(keel_kctx *k, int i, const keel_tensor **t);
/* keel_k_in for the GPU implementations: input i must be float32, the
 * type the placement checked (an error naming the input otherwise). With
 * `optional`, an omitted input gives *t NULL. */
KEEL_INTERNAL keel_status keel_k_in_f32(keel_kctx *k, int i, bool optional, const keel_tensor **t);
/* Input i (an int32/int64 tensor of rank <= 1) as int64s: up to `cap`
 * values into buf, count in *n. */
KEEL_INTERNAL keel_status keel_k_in_ints(keel_kctx *k, int i, int64_t *buf,
                                         int cap, int *n);
/* The single element of input i as int64 / double (any numeric type). */
KEEL_INTERNAL keel_status keel_k_in_scalar_i64(keel_kctx *k, int i, int64_t *v);
KEEL_INTERNAL keel_status keel_k_in_scalar_f64(keel_kctx *k, int i, double *v);
/* Bit i: input i dies at this node and nobody else holds its buffer. */
KEEL_INTERNAL bool keel_k_can_reuse(const keel_kctx *k, int i);

/* UNSUPPORTED when an input tensor has a narrow type (float8, float4,
 * int4, int2) that n's row does not list in `types`; the executor calls it
 * before every kernel. keel_k_out applies the same rule to outputs. */
/* True when an input is a tensor of one of the narrow types (numbered
 * after bfloat16), which only some kernels take: the cheap test the
 * executor makes before keel_k_check_in_types. */
static inline bool keel_k_has_narrow(const keel_val *const *in, int n_in) {
  bool narrow = false;
  for (int i = 0; i < n_in; i++)
    narrow |= in[i] && in[i]->kind == KEEL_V_TENSOR && in[i]->t.dtype > KEEL_BFLOAT16;
  return narrow;
}
KEEL_INTERNAL keel_status keel_k_check_in_types(const keel_node *n, const keel_val *const *in,
                                                int n_in);

/* ----------------------------------------------------------- outputs */

/* Allocates output i (uninitialized data). */
KEEL_INTERNAL keel_status keel_k_out(keel_kctx *k, int i, int dtype, int rank,
                                     const int64_t *shape, keel_tensor **t);
/* Output i shares src's bytes with a new shape (same element count). */
KEEL_INTERNAL keel_status keel_k_view(keel_kctx *k, int i, const keel_tensor *src,
                                      int rank, const int64_t *shape);
/* Output i takes input in_i's buffer when that is safe (keel_k_can_reuse
 * and same byte size), else allocates. Either way *t is writable; read
 * input element j before writing output element j. */
KEEL_INTERNAL keel_status keel_k_reuse(keel_kctx *k, int i, int in_i, int dtype,
                                       int rank, const int64_t *shape,
                                       keel_tensor **t);
/* Output i = a new reference to value v (tensor, sequence or none). */
KEEL_INTERNAL keel_status keel_k_out_ref(keel_kctx *k, int i, const keel_val *v);
/* Output i = a fresh sequence (empty, elem_dtype may be UNDEFINED). */
KEEL_INTERNAL keel_status keel_k_out_seq(keel_kctx *k, int i, int elem_dtype,
                                         keel_seq **s);
/* Temporary bytes, 64-aligned, freed after the kernel returns. */
KEEL_INTERNAL keel_status keel_k_scratch(keel_kctx *k, size_t bytes, void **p);
/* n items of `es` bytes each, the count checked for overflow. */
static inline keel_status keel_k_scratch_n(keel_kctx *k, int64_t n, size_t es, void **p) {
  size_t bytes;
  if (n < 0 || keel_mul_ovf((size_t)n, es, &bytes))
    return keel_err(KEEL_ERR_SHAPE, "scratch of %lld elements overflows", (long long)n);
  return keel_k_scratch(k, bytes, p);
}

/* -------------------------------------------------------- attributes */

KEEL_INTERNAL const keel_attr *keel_k_attr(const keel_kctx *k, const char *name);
KEEL_INTERNAL int64_t keel_k_attr_i(const keel_kctx *k, const char *name,
                                    int64_t def);
KEEL_INTERNAL float keel_k_attr_f(const keel_kctx *k, const char *name, float def);
KEEL_INTERNAL const char *keel_k_attr_s(const keel_kctx *k, const char *name,
                                        const char *def);
/* INTS attribute: pointer and count (NULL, 0 when absent). */
KEEL_INTERNAL const int64_t *keel_k_attr_ints(const keel_kctx *k,
                                              const char *name, int *n);
KEEL_INTERNAL const float *keel_k_attr_floats(const keel_kctx *k,
                                              const char *name, int *n);

/* --------------------------------------------------------- utilities */

/* Normalizes axis (may be negative) for a tensor of `rank`; error names the
 * attribute or input it came from. */
KEEL_INTERNAL keel_status keel_k_axis(int64_t axis, int rank, const char *what,
                                      int *out);

/* numpy broadcasting of a and b into out (rank = max). */
KEEL_INTERNAL keel_status keel_broadcast_shape(int ra, const int64_t *a, int rb,
                                               const int64_t *b, int *rout,
                                               int64_t *out);
/* Row-major strides of `shape` broadcast to `out` (0 where broadcast). */
KEEL_INTERNAL void keel_broadcast_strides(int r, const int64_t *shape, int rout,
                                          const int64_t *out, int64_t *strides);

#endif /* KEEL_KERNEL_H */
