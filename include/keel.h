/* keel.h: the public C API of keel, a runtime that executes ONNX models,
 * control flow included, and keeps memory steady.
 *
 * Life cycle:   keel_session_create*  ->  keel_run (any number, any thread)
 *               ->  keel_value_release (outputs)  ->  keel_session_destroy
 *
 * Conventions
 *  - Every fallible function returns a keel_status: KEEL_OK (0) or a negative
 *    error code. The detailed message ("model.onnx: node 'Conv_12' (Conv):
 *    input X has rank 3, expected 4") is kept per thread and read with
 *    keel_last_error(). It is per thread, not per session, because one
 *    session may be run by many threads at once.
 *  - Out-parameters are written only on success.
 *  - Handles are opaque. `*_destroy` and `*_release` accept NULL.
 *  - Values (tensors, sequences, optionals) are reference counted. A value
 *    returned to you is owned by you and freed with keel_value_release.
 *    Values you pass to keel_run are borrowed: keel takes its own references
 *    for the duration of the run and never modifies them.
 *  - Memory for tensors comes from the session's caching allocator; its
 *    statistics are in keel_stats.h.
 */
#ifndef KEEL_H
#define KEEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every public function is declared KEEL_API: exported from libkeel.so
 * (which is built with hidden visibility, so nothing else is). */
#if defined(_WIN32)
#define KEEL_API __declspec(dllexport)
#elif defined(__GNUC__)
#define KEEL_API __attribute__((visibility("default")))
#else
#define KEEL_API
#endif

#define KEEL_VERSION_MAJOR 0
#define KEEL_VERSION_MINOR 1
#define KEEL_VERSION_PATCH 0

/* ---------------------------------------------------------------- status */

typedef enum keel_status {
  KEEL_OK = 0,
  KEEL_ERR_INVALID_ARG = -1,     /* a caller passed something unusable      */
  KEEL_ERR_INVALID_MODEL = -2,   /* malformed, truncated or inconsistent file */
  KEEL_ERR_UNSUPPORTED = -3,     /* op/domain/opset or type keel cannot run  */
  KEEL_ERR_OUT_OF_MEMORY = -4,   /* system OOM or the session's memory cap   */
  KEEL_ERR_SHAPE = -5,           /* shapes or types do not fit an operator   */
  KEEL_ERR_IO = -6,              /* a file could not be opened or read       */
  KEEL_ERR_STALE = -7,           /* a cached handle outlived its target      */
  KEEL_ERR_RUNTIME = -8,         /* a value is out of range at run time      */
  KEEL_ERR_INTERNAL = -9,        /* an invariant broke: a keel bug           */
  KEEL_ERR_CANCELLED = -10,      /* the caller's cancel flag stopped the run */
  KEEL_ERR_TIMEOUT = -11         /* the run's deadline (or its iteration
                                    guard) passed                           */
} keel_status;

/* Short fixed text for a status code ("invalid model"). Never NULL. */
KEEL_API const char *keel_status_str(keel_status s);

/* The detailed message of the last error raised on the calling thread.
 * Never NULL; "" when no error was raised yet. Valid until the next keel
 * call on this thread. */
KEEL_API const char *keel_last_error(void);

/* ------------------------------------------------------------ data types */

/* Element types, numbered as in ONNX's TensorProto.DataType. */
typedef enum keel_dtype {
  KEEL_UNDEFINED = 0,
  KEEL_FLOAT = 1,
  KEEL_UINT8 = 2,
  KEEL_INT8 = 3,
  KEEL_UINT16 = 4,
  KEEL_INT16 = 5,
  KEEL_INT32 = 6,
  KEEL_INT64 = 7,
  KEEL_STRING = 8,
  KEEL_BOOL = 9,
  KEEL_FLOAT16 = 10,
  KEEL_DOUBLE = 11,
  KEEL_UINT32 = 12,
  KEEL_UINT64 = 13,
  KEEL_COMPLEX64 = 14,
  KEEL_COMPLEX128 = 15,
  KEEL_BFLOAT16 = 16,
  KEEL_FLOAT8E4M3FN = 17,    /* 1-4-3, no infinity, one NaN pattern per sign  */
  KEEL_FLOAT8E4M3FNUZ = 18,  /* 1-4-3, no infinity, no -0, NaN is 0x80        */
  KEEL_FLOAT8E5M2 = 19,      /* 1-5-2, IEEE-like (infinities and NaNs)        */
  KEEL_FLOAT8E5M2FNUZ = 20,  /* 1-5-2, no infinity, no -0, NaN is 0x80        */
  KEEL_UINT4 = 21,           /* packed, see below                            */
  KEEL_INT4 = 22,
  KEEL_FLOAT4E2M1 = 23,      /* 1-2-1, finite values only                    */
  KEEL_FLOAT8E8M0 = 24,      /* exponent only: 2^(e-127), 0xFF is NaN         */
  KEEL_UINT2 = 25,
  KEEL_INT2 = 26
} keel_dtype;

/* "float32", "int64", ... ; "undefined" for unknown codes. */
KEEL_API const char *keel_dtype_name(keel_dtype t);
/* Bytes per element; 0 for UNDEFINED, sizeof(keel_string) for STRING, and 0
 * for the sub-byte types (UINT4, INT4, FLOAT4E2M1: 4 bits; UINT2, INT2: 2
 * bits), which have no whole size per element. Their tensors are packed as
 * ONNX stores them: element i sits in byte i*bits/8 at bit (i*bits)%8, low
 * bits first, and a tensor of n elements takes ceil(n*bits/8) bytes (keel
 * writes the unused high bits of the last byte as zero and ignores them on
 * reading). Size buffers with keel_dtype_nbytes, which is right for every
 * type. Kernels take the types after BFLOAT16 (float8, float4, int4,
 * int2) only where docs/operators.md lists them, the ops ONNX defines them
 * for: Cast, CastLike, BitCast, QuantizeLinear, DequantizeLinear, Constant,
 * ConstantOfShape, Reshape, Flatten, Squeeze, Unsqueeze, Identity, Shape,
 * Size, Transpose, Pad, If, Loop, Scan, and IsNaN / IsInf for float8; any
 * other op given one fails with KEEL_ERR_UNSUPPORTED naming op and type. */
KEEL_API size_t keel_dtype_size(keel_dtype t);
/* Bits per element: 8 * keel_dtype_size, or 4 / 2 for the sub-byte types. */
KEEL_API int keel_dtype_bits(keel_dtype t);
/* Bytes that n elements of t take: ceil(n * bits / 8). */
KEEL_API size_t keel_dtype_nbytes(keel_dtype t, int64_t n);

/* The highest tensor rank keel handles. */
#define KEEL_MAX_RANK 12

/* One element of a STRING tensor: bytes (not necessarily NUL-free) plus a
 * terminating NUL that is not counted in len. */
typedef struct keel_string {
  char *data;
  size_t len;
} keel_string;

/* ---------------------------------------------------------------- values */

typedef struct keel_session_s keel_session_t;
typedef struct keel_value_s keel_value_t;

typedef enum keel_value_kind {
  KEEL_KIND_TENSOR = 1,
  KEEL_KIND_SEQUENCE = 2,   /* an ordered list of tensors, or of maps      */
  KEEL_KIND_NONE = 3,       /* an empty optional                          */
  KEEL_KIND_MAP = 4         /* int64 or string keys to scalar values (ai.onnx.ml) */
} keel_value_kind;

/* Create a tensor owned by the caller, with a copy of `data` (may be NULL:
 * zero-filled). The bytes come from the session's allocator. For STRING,
 * `data` points to `numel` keel_string entries whose bytes are copied. */
KEEL_API keel_status keel_tensor_create(keel_session_t *s, keel_dtype dtype, int rank,
                               const int64_t *shape, const void *data,
                               keel_value_t **out);

/* Create a tensor over caller memory, without copying. The memory must stay
 * valid and unchanged until every value that refers to it is released;
 * `on_release(ud)` (may be NULL) is called then. Not for STRING. */
KEEL_API keel_status keel_tensor_wrap(keel_session_t *s, keel_dtype dtype, int rank,
                             const int64_t *shape, void *data,
                             void (*on_release)(void *ud), void *ud,
                             keel_value_t **out);

/* Sequences and optionals for models that take them as inputs. `items` are
 * borrowed (keel takes its own references). elem_dtype may be UNDEFINED for
 * an empty sequence. */
KEEL_API keel_status keel_sequence_create(keel_session_t *s, keel_dtype elem_dtype,
                                 keel_value_t *const *items, size_t n,
                                 keel_value_t **out);
KEEL_API keel_status keel_none_create(keel_session_t *s, keel_value_t **out);

/* A map (ONNX map(int64|string, T), as ai.onnx.ml's DictVectorizer takes
 * and ZipMap makes): n keys (meant to be unique; not checked), int64_t[n] for KEEL_INT64 or
 * keel_string[n] for KEEL_STRING, and n values of value_dtype (keel_string
 * entries for STRING); both copied into the session's allocator. A
 * sequence of maps is made by keel_sequence_create from map values
 * (elem_dtype then names the maps' value type). */
KEEL_API keel_status keel_map_create(keel_session_t *s, keel_dtype key_dtype,
                                     keel_dtype value_dtype, size_t n, const void *keys,
                                     const void *values, keel_value_t **out);
/* Entries of a map (0 if not a map), its key type, and its keys and values
 * in entry order (int64_t / keel_string / the value type; borrowed, valid
 * while the value is; NULL when empty or not a map). keel_value_dtype
 * gives a map's value type. */
KEEL_API size_t keel_map_size(const keel_value_t *v);
KEEL_API keel_dtype keel_map_key_dtype(const keel_value_t *v);
KEEL_API const void *keel_map_keys(const keel_value_t *v);
KEEL_API const void *keel_map_values(const keel_value_t *v);

/* Read a serialized ONNX TensorProto, SequenceProto (of tensors or maps),
 * MapProto or OptionalProto (as in the backend test data sets). `kind_hint`
 * says which message the bytes hold: KEEL_KIND_TENSOR, KEEL_KIND_SEQUENCE,
 * KEEL_KIND_MAP or KEEL_KIND_NONE (OptionalProto). */
KEEL_API keel_status keel_value_from_pb(keel_session_t *s, const void *bytes,
                               size_t len, keel_value_kind kind_hint,
                               keel_value_t **out);
/* Serialize a value as a TensorProto / SequenceProto / MapProto / OptionalProto named
 * `name`. The buffer is malloc'ed; free it with keel_free. */
KEEL_API keel_status keel_value_to_pb(const keel_value_t *v, const char *name,
                             void **bytes, size_t *len);

KEEL_API void keel_value_release(keel_value_t *v);
/* Another reference to the same value (cheap; no data copy). */
KEEL_API keel_value_t *keel_value_retain(keel_value_t *v);

KEEL_API keel_value_kind keel_value_kind_of(const keel_value_t *v);
KEEL_API keel_dtype keel_value_dtype(const keel_value_t *v);   /* elem type for seqs, value type for maps */
KEEL_API int keel_value_rank(const keel_value_t *v);           /* -1 if not a tensor */
KEEL_API const int64_t *keel_value_shape(const keel_value_t *v);
KEEL_API int64_t keel_value_numel(const keel_value_t *v);
/* Element data of a tensor (keel_string* for STRING); NULL if empty. */
KEEL_API const void *keel_value_data(const keel_value_t *v);
/* 1 when `v` is a tensor whose bytes sit in a block of keel's allocator
 * that no other value refers to (not a constant of the model, not caller
 * memory, not shared with another output): writing through
 * keel_value_data then changes nothing anyone else can see. 0 otherwise. */
KEEL_API int keel_value_exclusive(const keel_value_t *v);
/* Element i of a numeric or bool tensor as a double (float16 and bfloat16
 * widened); NaN when out of range or not numeric. */
KEEL_API double keel_value_at(const keel_value_t *v, int64_t i);
KEEL_API size_t keel_sequence_length(const keel_value_t *v);
/* Borrowed: valid while `v` is alive. A tensor, or a map in a sequence of maps. */
KEEL_API const keel_value_t *keel_sequence_at(const keel_value_t *v, size_t i);

/* Free memory keel returned with malloc (keel_value_to_pb, keel_info_json). */
KEEL_API void keel_free(void *p);

/* -------------------------------------------------------------- sessions */

/* Log levels passed to keel_log_fn. */
enum { KEEL_LOG_ERROR = 0, KEEL_LOG_WARN = 1, KEEL_LOG_INFO = 2 };
typedef void (*keel_log_fn)(void *ud, int level, const char *msg);

/* keel_options.flags */
enum {
  /* Blocks carry no owner tags (for measuring what the tags cost; reports
   * then name the session only). */
  KEEL_OPT_NO_OWNER_TAGS = 1,
  /* Run the model exactly as written: no optimizing graph passes (fusion,
   * constant folding); for comparing against the optimized model. */
  KEEL_OPT_NO_GRAPH_PASSES = 2,
  /* Bind every node to its op's reference kernel, never a faster
   * implementation (keel info lists which ones a session uses); the tests
   * compare the two. */
  KEEL_OPT_REFERENCE_KERNELS = 4,
  /* Reserved memory is not returned automatically (only by keel_mem_trim
   * and the cap), as before version 2 of keel_stats. */
  KEEL_OPT_NO_AUTO_TRIM = 8,
  /* No oneDNN: convolutions stay NCHW on keel's own kernels (the layout
   * pass does not run) and matrix products use keel's GEMM; for comparing
   * the two. The environment variable KEEL_NO_ONEDNN=1 does the same for
   * every session of the process. */
  KEEL_OPT_NO_ONEDNN = 16,
  /* Check symbolic shape inference against the run: every value a node
   * reads or writes must have the shape inferred for it at load (README,
   * "Shapes"); a disagreement fails the run. For tests; slower. The
   * environment variable KEEL_CHECK_SHAPES=1 does the same for every
   * session of the process. */
  KEEL_OPT_CHECK_SHAPES = 32,
  /* The same bits at any thread count: every kernel cuts its work into the
   * parts it would cut for KEEL_DETERMINISTIC_SPLITS threads, whatever
   * keel_options.threads is, and runs them alone when the pool is busy or
   * has one thread. Off, the parts follow the thread count and results
   * agree within float rounding (a matrix product cut in other bands
   * rounds otherwise). Costs some speed at few threads (README,
   * "Threads"). Inference kernels; training's weight gradients sum
   * per-worker parts and are not covered. */
  KEEL_OPT_DETERMINISTIC = 64,
  /* With keel_options.device a GPU: the placement is made without opening
   * the device (keel info --device cuda, on any machine), and runs execute
   * every node on the CPU, the copies as host copies: the placed graph
   * checked against the plain one anywhere. */
  KEEL_OPT_PLAN_ONLY = 128
};

/* The parts work is cut into under KEEL_OPT_DETERMINISTIC. */
#define KEEL_DETERMINISTIC_SPLITS 16

/* The defaults of the automatic trim and of the run-context pool (fields
 * of keel_options left 0). README.md "Memory" explains the figures. */
#define KEEL_DEFAULT_TRIM_WINDOW 8
#define KEEL_DEFAULT_TRIM_MARGIN_PCT 25
#define KEEL_DEFAULT_RUN_POOL_CAP 16

typedef struct keel_options {
  size_t size;           /* sizeof(keel_options): lets the struct grow      */
  size_t mem_limit;      /* cap on reserved bytes; 0 = no cap               */
  keel_log_fn log;       /* optional sink for warnings; the library never prints */
  void *log_ud;
  /* Called after each iteration of every Loop and Scan with the session's
   * allocated bytes at that point (depth = nesting depth of the loop). */
  void (*on_iteration)(void *ud, const char *loop_node, int64_t iteration,
                       size_t allocated_bytes);
  void *iteration_ud;
  unsigned flags;        /* KEEL_OPT_*                                      */
  /* Threads that compute one run (the caller plus threads - 1 workers of
   * the session's pool); 0 = the CPUs this process may run on. Concurrent
   * runs on one session share the pool: a run that finds it busy computes
   * on its own thread alone. */
  int threads;
  /* Automatic trim (after each run): free segments that no run used in the
   * last trim_window runs go back to the system, keeping reserved at least
   * trim_margin_pct percent above the highest allocated figure of those
   * runs. A segment needed again soon after such a release doubles the
   * window (hysteresis: a workload that cycles through large shapes stops
   * returning memory after a few cycles). 0 = the defaults above;
   * trim_margin_pct < 0: no margin. KEEL_OPT_NO_AUTO_TRIM turns it off. */
  unsigned trim_window;
  int trim_margin_pct;
  /* Idle run contexts (the frames one run in flight needs) the session
   * keeps for later runs; more are freed when their run ends. 0 = default. */
  size_t run_pool_cap;
  /* Models with collectives (keel_dist.h): the communicator the session
   * runs on, an `MPI_Comm *` (read at session creation), or NULL for
   * MPI_COMM_WORLD. Ignored by models without collectives. */
  void *comm;
  /* Where the session runs: NULL or "cpu" (the default), "cuda" or
   * "cuda:N" (GPU N: each node whose op has a GPU kernel for its types is
   * placed there, the others stay on the CPU, with MemcpyFromHost /
   * MemcpyToHost nodes between; `keel info --device cuda` prints the
   * placement), or "emu" (the same placement on a GPU emulated on the host:
   * device memory the host cannot address, the GPU kernels' reference in
   * C; for testing the device path on a machine without a GPU). Without
   * the device (no driver, no such GPU) the session fails to create with
   * KEEL_ERR_UNSUPPORTED saying why, unless KEEL_OPT_PLAN_ONLY asks for the
   * plan alone (placed, then run on the CPU). keel_stats_get_device gives
   * the device memory's figures; the cap (mem_limit) applies per device. */
  const char *device;
} keel_options;

/* Load a model from a file, mapped into memory: initializer bytes are not
 * copied. `opts` may be NULL. */
KEEL_API keel_status keel_session_create(const char *path, const keel_options *opts,
                                keel_session_t **out);
/* Load a model from bytes in memory. The bytes are copied; the caller may
 * free them after the call. External data is resolved against `base_dir`
 * (may be NULL: external data is then an error). */
KEEL_API keel_status keel_session_create_from_memory(const void *bytes, size_t len,
                                            const char *base_dir,
                                            const keel_options *opts,
                                            keel_session_t **out);
/* Values created from the session stay valid after destroy; the allocator
 * lives until the last of them is released. */
KEEL_API void keel_session_destroy(keel_session_t *s);

/* Description of a graph input or output. Strings are borrowed from the
 * session. dims[i] < 0 means unknown; dim_params[i] is its symbolic name or
 * NULL. rank < 0: unknown rank. For sequences and optionals, dtype/rank/dims
 * describe the element tensor. */
typedef struct keel_io_info {
  const char *name;
  keel_value_kind kind;
  int optional;          /* 1 for optional(...) types                      */
  int has_default;       /* input with an initializer: may be omitted      */
  keel_dtype dtype;
  int rank;
  const int64_t *dims;
  const char *const *dim_params;
} keel_io_info;

KEEL_API size_t keel_session_input_count(const keel_session_t *s);
KEEL_API size_t keel_session_output_count(const keel_session_t *s);
KEEL_API keel_status keel_session_input(const keel_session_t *s, size_t i,
                               keel_io_info *info);
KEEL_API keel_status keel_session_output(const keel_session_t *s, size_t i,
                                keel_io_info *info);

/* Run the model. `names[i]` names the graph input fed by `inputs[i]`.
 * Inputs that have an initializer may be omitted. On success, `outputs` (an
 * array of keel_session_output_count() slots) receives one owned value per
 * graph output. Thread-safe: many threads may run one session at once. */
KEEL_API keel_status keel_run(keel_session_t *s, const char *const *names,
                     keel_value_t *const *inputs, size_t n_inputs,
                     keel_value_t **outputs);

/* The flag type of keel_run_opts.cancel: an atomic int in C (store 1 from
 * any thread with atomic_store); in C++ the same bytes as std::atomic<int>. */
#ifdef __cplusplus
typedef volatile int keel_cancel_flag;
#else
typedef _Atomic int keel_cancel_flag;
#endif

/* The default of keel_run_opts.max_iterations: loop iterations (all loops,
 * all depths) one run may take before it stops with KEEL_ERR_TIMEOUT. At
 * ~100 ns an iteration at the least, that is minutes of work. */
#define KEEL_RUN_DEFAULT_MAX_ITERATIONS ((int64_t)1 << 31)

/* Options of one run. Zero fields mean "none" / the default, so
 * `keel_run_opts o = {.size = sizeof o, .deadline_ms = 50};` is enough.
 * The struct may grow at its end: set size to sizeof(keel_run_opts). */
typedef struct keel_run_opts {
  size_t size;              /* sizeof(keel_run_opts)                          */
  uint64_t deadline_ms;     /* > 0: stop with KEEL_ERR_TIMEOUT once this many
                               milliseconds have passed since the call        */
  keel_cancel_flag *cancel; /* non-NULL: stop with KEEL_ERR_CANCELLED once
                               another thread stores a non-zero value here    */
  int64_t max_iterations;   /* the run's iteration guard: > 0 the limit, 0 the
                               default (KEEL_RUN_DEFAULT_MAX_ITERATIONS), < 0
                               none. A loop whose condition never turns false
                               then ends with KEEL_ERR_TIMEOUT naming it,
                               instead of running until the process dies      */
} keel_run_opts;

/* keel_run with options (opts may be NULL: keel_run). The deadline, the
 * cancel flag and the guard are checked before every node and every loop
 * iteration, at every depth of control flow; a run they stop returns
 * KEEL_ERR_CANCELLED or KEEL_ERR_TIMEOUT with a message that names the
 * node and the iteration of every enclosing loop ("node 'outer' (Loop):
 * iteration 3: ... deadline of 50 ms passed before node 'add' (Add)"). It
 * frees everything it made; the session is ready for the next run. A node
 * is not interrupted: the stop comes when it returns. */
KEEL_API keel_status keel_run_ex(keel_session_t *s, const char *const *names,
                                 keel_value_t *const *inputs, size_t n_inputs,
                                 keel_value_t **outputs, const keel_run_opts *opts);

/* 1 when the model holds ops that draw random numbers (Bernoulli,
 * RandomUniform, ...): its results differ between runtimes and, for nodes
 * without a seed, between runs. */
KEEL_API int keel_session_is_random(const keel_session_t *s);

/* A description of the model: producer, IR version, opsets, inputs and
 * outputs, node counts by op type, the kernels bound, the control-flow tree
 * (which node holds which sub-graph, at what depth), what the load-time
 * passes folded, and weight bytes; as text (json = 0) or as a JSON object
 * (json = KEEL_DESCRIBE_JSON). KEEL_DESCRIBE_NODES (or-ed in) adds every
 * node after the passes with its graph and the kernel bound to it (an
 * implementation's name, or "reference"). KEEL_DESCRIBE_SHAPES adds every
 * value's shape as symbolic shape inference gives it after the passes
 * ("[batch, seq+1, 768]", "?" for a dim it cannot know, "rank ?") and the
 * counts of fully known, symbolic and unknown values. Free *out with
 * keel_free. */
#define KEEL_DESCRIBE_JSON 1
#define KEEL_DESCRIBE_NODES 2
#define KEEL_DESCRIBE_SHAPES 4
KEEL_API keel_status keel_session_describe(const keel_session_t *s, int json, char **out);

/* What the model file says about itself (ModelProto and the main graph).
 * Strings are borrowed from the session and never NULL ("" when absent).
 * metadata_props are in file order. */
typedef struct keel_model_meta {
  size_t size;           /* sizeof(keel_model_meta): lets the struct grow   */
  const char *producer_name, *producer_version, *domain;
  const char *description;        /* ModelProto.doc_string                  */
  const char *graph_name, *graph_description;
  int64_t ir_version, model_version;
  size_t n_props;
  const char *const *prop_keys, *const *prop_values;
} keel_model_meta;

/* Fill `meta` (meta->size must be set). */
KEEL_API keel_status keel_session_meta(const keel_session_t *s, keel_model_meta *meta);

/* --------------------------------------------------------- operators */

/* One row of keel's kernel registry: op `name` of `domain` ("" = ai.onnx)
 * for opset versions since..until, on the element types in `types` (bit d
 * set for keel_dtype d: the main input's types; 0 when the row does not
 * say). */
typedef struct keel_op_desc {
  const char *domain, *name;
  int since, until;
  uint64_t types;
  int random;            /* draws random numbers                           */
} keel_op_desc;

KEEL_API size_t keel_op_count(void);
KEEL_API keel_status keel_op_get(size_t i, keel_op_desc *d);

#ifdef __cplusplus
}
#endif
#endif /* KEEL_H */
