/* ir.h: the model as keel holds it after loading: graphs, nodes, attributes,
 * value references and constants, all in one arena that dies with the model.
 *
 * Values are referred to by keel_ref, never by name, once loading is done
 * (DESIGN rule 1). A ref is one of:
 *   LOCAL  slot s of the current graph's frame;
 *   CONST  constant c of the model (an initializer or a folded Constant);
 *   OUTER  slot s of the frame `levels` graphs up (a sub-graph capture,
 *          resolved at load time).
 * Names stay in the IR for messages, reports and `keel info`.
 *
 * The plan (ir/plan.c) adds to each graph a topological order and to each
 * node the list of slots whose last use it is.
 */
#ifndef KEEL_IR_H
#define KEEL_IR_H

#include "base/arena.h"
#include "base/prim.h"
#include "tensor/tensor.h"

/* ------------------------------------------------------------- refs */

typedef uint32_t keel_ref;
#define KEEL_REF_NONE UINT32_MAX
enum { KEEL_REF_LOCAL = 0, KEEL_REF_CONST = 1, KEEL_REF_OUTER = 2 };
#define KEEL_REF_MAX_SLOT 0xFFFFFFu
#define KEEL_REF_MAX_LEVELS 63u
#define KEEL_REF_MAX_CONST 0x3FFFFFFFu

static inline keel_ref keel_ref_local(uint32_t slot) { return slot; }
static inline keel_ref keel_ref_const(uint32_t c) { return (1u << 30) | c; }
static inline keel_ref keel_ref_outer(uint32_t levels, uint32_t slot) {
  return (2u << 30) | (levels << 24) | slot;
}
static inline unsigned keel_ref_kind(keel_ref r) { return r >> 30; }
static inline uint32_t keel_ref_slot(keel_ref r) { return r & 0xFFFFFFu; }
static inline uint32_t keel_ref_levels(keel_ref r) { return (r >> 24) & 0x3Fu; }
static inline uint32_t keel_ref_const_index(keel_ref r) { return r & 0x3FFFFFFFu; }

/* ------------------------------------------------------------- types */

/* A declared type (graph inputs/outputs, value_info). A hint only: keel
 * never sizes a buffer from it. */
enum { KEEL_TYPE_UNKNOWN = 0, KEEL_TYPE_TENSOR, KEEL_TYPE_SEQUENCE,
       KEEL_TYPE_OPTIONAL, KEEL_TYPE_MAP, KEEL_TYPE_SPARSE };

typedef struct keel_type {
  int32_t kind;
  int32_t dtype;               /* tensor element type                     */
  int32_t rank;                /* -1: unknown                             */
  int64_t *dims;               /* -1: unknown                             */
  const char **dim_params;     /* symbolic names, NULL when not symbolic  */
  struct keel_type *elem;      /* sequence / optional element; map value  */
  int32_t key_dtype;           /* map: INT64 or STRING                    */
} keel_type;

/* -------------------------------------------------------- attributes */

/* Numbered as ONNX's AttributeProto.AttributeType. */
enum { KEEL_ATTR_UNDEFINED = 0, KEEL_ATTR_FLOAT = 1, KEEL_ATTR_INT = 2,
       KEEL_ATTR_STRING = 3, KEEL_ATTR_TENSOR = 4, KEEL_ATTR_GRAPH = 5,
       KEEL_ATTR_FLOATS = 6, KEEL_ATTR_INTS = 7, KEEL_ATTR_STRINGS = 8,
       KEEL_ATTR_TENSORS = 9, KEEL_ATTR_GRAPHS = 10,
       KEEL_ATTR_SPARSE_TENSOR = 11, KEEL_ATTR_SPARSE_TENSORS = 12,
       KEEL_ATTR_TYPE_PROTO = 13, KEEL_ATTR_TYPE_PROTOS = 14 };

struct keel_graph;

typedef struct keel_attr {
  const char *name;
  int32_t type;
  int32_t n;                   /* element count of list types             */
  float f;
  int64_t i;
  const char *s;               /* STRING (NUL-terminated; slen bytes)     */
  size_t slen;
  keel_tensor *t;              /* TENSOR / SPARSE_TENSOR (densified)      */
  struct keel_graph *g;        /* GRAPH                                   */
  float *floats;
  int64_t *ints;
  const char **strings;
  size_t *string_lens;
  keel_tensor *tensors;
  struct keel_graph **graphs;
  keel_type *tp;               /* TYPE_PROTO                              */
  const char *ref;             /* ref_attr_name (function bodies only)    */
} keel_attr;

/* ------------------------------------------------------------- nodes */

struct keel_opdef; /* ops/kernel.h */

enum { KEEL_NODE_CPU = 0, KEEL_NODE_GPU = 1 };

typedef struct keel_node {
  const char *name;            /* never NULL; "" when the file has none   */
  const char *op_type;
  const char *domain;          /* "" for ai.onnx                          */
  int64_t opset;               /* version of its domain in the model      */
  int32_t index;               /* position in its graph's node array      */
  struct keel_graph *graph;    /* the graph that holds the node           */
  int32_t n_in, n_out, n_attr;
  const char **in_names;       /* "" for an omitted optional input        */
  const char **out_names;
  keel_ref *in;                /* KEEL_REF_NONE when omitted              */
  int32_t *out;                /* local slot; -1 when omitted             */
  keel_attr *attrs;
  /* nodes of the file a pass folded into this one ("'Relu_4' (Relu)"):
   * labels, reports and traces name them too */
  int32_t n_fused;
  const char **fused;
  int32_t n_subs;              /* sub-graphs held in attributes           */
  struct keel_graph **subs;
  /* outer values the node's sub-graphs read, at any depth below: they stay
   * alive until this node is done (local or further-out refs) */
  int32_t n_implicit;
  keel_ref *implicit;
  /* -- bound at session creation */
  uint8_t device;              /* KEEL_NODE_CPU, or KEEL_NODE_GPU (passes/
                                  pass_place.c)                           */
  uint32_t dev_consts;         /* bit i: input i is a constant the node
                                  reads as its device copy (set when the
                                  session copies it there; 0 on the CPU)  */
  const struct keel_opdef *op;
  const struct keel_impl *impl; /* a faster implementation, or NULL: op->fn */
  void *prep;                  /* impl's prepared state (session-owned)    */
  uint32_t site;               /* owner-tag site of output 0; +i for output i */
  uint32_t prep_site;          /* owner-tag site of its prepared state     */
  /* -- plan */
  int32_t n_release;
  int32_t *release;            /* slots to drop right after the node runs  */
  uint64_t last_use;           /* bit i: input i (i < 64) dies here, may be
                                  reused in place when nobody else holds it */
} keel_node;

/* ------------------------------------------------------------ graphs */

typedef struct keel_graph {
  const char *name;
  const char *doc;             /* doc_string; NULL when absent            */
  const char *path;            /* "main/Loop_3/body/If_7/then"            */
  int32_t id;                  /* index in keel_model.graphs              */
  int32_t depth;               /* 0 for the main graph                    */
  struct keel_graph *parent;
  keel_node *owner;            /* the node whose attribute holds it       */
  const char *owner_attr;      /* "body", "then_branch", ...              */
  int32_t n_nodes;
  keel_node *nodes;
  int32_t n_slots;
  const char **slot_names;
  keel_type **slot_types;      /* value_info hints; NULL when unknown     */
  int32_t n_in;
  int32_t *in;                 /* slot of each input                      */
  const char **in_names;
  keel_type *in_types;
  int32_t *in_default;         /* constant index giving a default, or -1  */
  int32_t n_out;
  keel_ref *out;               /* may be LOCAL, CONST or OUTER             */
  const char **out_names;
  keel_type *out_types;
  /* -- plan */
  int32_t *order;              /* node indices in execution order          */
  uint8_t *out_move;           /* output i moves its slot out (else: ref)  */
  int32_t n_drop_in;
  int32_t *drop_in;            /* input slots nobody reads: dropped at entry */
  /* -- load time: what the scope pass resolves into slots and refs */
  struct {
    int32_t n_init;            /* initializers and folded Constants       */
    const char **init_names;
    int32_t *init_consts;
    uint8_t *init_is_node;     /* 1: a Constant node of the file (folded) */
    int32_t *init_node_at;     /* folded Constant: the node index it came
                                  before in the file (for the writer)     */
    int32_t n_vinfo;
    const char **vinfo_names;
    keel_type *vinfo_types;
    int32_t n_folded;          /* Constant nodes turned into constants     */
  } ld;
} keel_graph;

/* ------------------------------------------------------------- model */

typedef struct keel_opset {
  const char *domain;          /* "" for ai.onnx                          */
  int64_t version;
} keel_opset;

/* What the training pass (passes/pass_train.c) needs, set on a loaded model by
 * the trainer (src/train/) before the passes run; NULL for inference. The
 * pass fills the `out` fields (arena memory). */
typedef struct keel_train_spec {
  const char *loss;            /* in: the main graph output to minimize    */
  const char *const *freeze;   /* in: initializers not to train            */
  int32_t n_freeze;
  int32_t n_params;            /* out: trainable initializers, file order  */
  const char **params;         /* out: their names (now graph inputs)      */
  int32_t *param_consts;       /* out: the constant each was loaded into   */
  const char **param_via;      /* out: NULL, or the label of the control-flow
                                  node whose sub-graphs alone connect the
                                  parameter to the loss (for messages)     */
  int32_t first_param_input;   /* out: main inputs [first, first+n) are the
                                  parameters, the ones before the data     */
  int32_t loss_output;         /* out: index of the loss in main outputs   */
  int32_t first_grad_output;   /* out: outputs [first, first+n) are the
                                  gradients, in parameter order            */
  int32_t *reach_output;       /* out (autodiff/autodiff.c): NULL when every
                                  gradient exists at every step; else per
                                  parameter -1 (it does) or the index of a
                                  bool main output that says whether this
                                  step's backward reached the parameter
                                  (an If's branch not taken does not)      */
} keel_train_spec;

/* The name of the Gradient node the training pass adds. */
#define KEEL_TRAIN_GRADIENT_NODE "keel.train/Gradient"

typedef struct keel_model {
  keel_arena *arena;
  keel_train_spec *train;      /* training spec, or NULL                   */
  keel_mapping map;            /* the model file (or a copy of the bytes) */
  bool map_is_copy;
  int32_t n_ext;
  struct keel_ext_file *ext;   /* mapped external-data files              */
  const char *path;            /* for messages                            */
  const char *base_dir;
  int64_t ir_version, model_version;
  const char *producer_name, *producer_version, *domain, *doc;
  int32_t n_props;             /* metadata_props, in file order           */
  const char **prop_keys, **prop_values;
  int32_t n_opsets;
  keel_opset *opsets;
  keel_graph *main;
  int32_t n_graphs;
  keel_graph **graphs;
  int32_t n_consts;
  keel_tensor *consts;         /* STATIC tensors                          */
  const char **const_names;
  uint64_t weight_bytes;       /* initializer and Constant-node bytes     */
  uint64_t weight_bytes_copied; /* of which keel had to copy or decode    */
  struct {                     /* fold-constants, cse, remove-dead (keel info) */
    int32_t folded;            /* nodes computed at load into constants    */
    uint64_t folded_bytes;     /* the bytes of the constants they made     */
    int32_t over_cap;          /* all-constant nodes left to run: outputs
                                  over the cap (passes/pass_fold.c)       */
    int32_t dead;              /* nodes removed: nothing read their outputs */
    int32_t merged;            /* nodes removed as the same as an earlier one
                                  (passes/pass_cse.c)                     */
    int32_t causal;            /* attention masks turned into the causal
                                  flag (passes/pass_causal.c)             */
  } fold;
  struct keel_shard_cfg *shard; /* set only by `keel shard` (passes/shard.h)  */
  bool no_library;             /* set by the session (KEEL_OPT_NO_ONEDNN)
                                  before the passes: no layout pass        */
  int32_t gpu;                 /* set by the session before the passes: 0,
                                  or the ordinal + 1 of the GPU the place
                                  pass places nodes on                    */
  char gpu_name[16];           /* "cuda:N" or "emu:N" when gpu is set      */
  bool gpu_uses_blas;          /* set by the place pass: a node on the
                                  device runs the BLAS (MatMul, Gemm,
                                  FusedMatMul, FusedAttention), so the
                                  session gives the BLAS its workspace  */
  bool gpu_no_blas;            /* set by the session with gpu: the opened
                                  device has no BLAS (cuBLAS not found), so
                                  the place pass keeps MatMul and Gemm on
                                  the CPU                                 */
} keel_model;

/* Opset version of `domain` in the model; 0 when not imported. */
KEEL_INTERNAL int64_t keel_model_opset(const keel_model *m, const char *domain);

/* "'Conv_3' (Conv)", or "#4 (Conv)" for a node without a name: how every
 * message names a node. Returns buf. */
KEEL_INTERNAL const char *keel_node_label(const keel_node *n, char *buf, size_t cap);

/* Replaces node `at` of g with n_with copies of `with`, in order (`with`
 * may point into g's nodes); indexes renumbered and sub-graph owners
 * re-pointed. With n_with 0 or 1 the node array is edited in place (the
 * nodes after `at` move: re-fetch pointers into it); with more it is
 * reallocated in the arena. */
KEEL_INTERNAL keel_status keel_graph_replace_node(keel_arena *a, keel_graph *g, int32_t at,
                                                  const keel_node *with, int32_t n_with);

/* Installs a copy of nodes[0..n) (one arena array) as g's nodes: indexes,
 * graph and sub-graph owners re-pointed. For a pass that edits a working
 * array many times and installs it once (keel_graph_replace_node makes a
 * whole new array in the arena at every call that adds nodes). */
KEEL_INTERNAL keel_status keel_graph_set_nodes(keel_arena *a, keel_graph *g, const keel_node *nodes,
                                               int32_t n);

/* A pass folded node `taken` into `into`: its label ("'Relu_4' (Relu)",
 * with what it had taken itself) is appended to into->fused, so messages,
 * reports and traces still name it. The one way every fusing pass records
 * it: the owner tags of into's blocks (exec/session.c, number_sites) and
 * keel info print keel_node_label, which lists into->fused. */
KEEL_INTERNAL keel_status keel_ir_fuse_label(keel_arena *a, keel_node *into, const keel_node *taken);

/* Before resolution (passes): how many times `name` is read in g (node
 * inputs at any depth below, graph outputs); the constant a name denotes
 * as seen from g (an initializer or folded Constant of g or of a graph
 * around it, not shadowed), or -1. */
KEEL_INTERNAL int32_t keel_ir_uses(const keel_graph *g, const char *name);
KEEL_INTERNAL int32_t keel_ir_const_of(const keel_model *m, const keel_graph *g, const char *name);

/* The node of g that writes `name` (index), or -1. */
KEEL_INTERNAL int32_t keel_ir_producer(const keel_graph *g, const char *name);
/* The one node of g that reads `name`, when nothing else does (no other
 * input, no graph output, no sub-graph); else -1. */
KEEL_INTERNAL int32_t keel_ir_only_reader(const keel_graph *g, const char *name);
/* A float32 scalar constant (one element, any rank) named `name` as seen
 * from g. */
KEEL_INTERNAL bool keel_ir_const_f32(const keel_model *m, const keel_graph *g, const char *name,
                                     float *v);
/* Drops the nodes of g with drop[i] set (renumbering the rest). */
KEEL_INTERNAL keel_status keel_graph_remove_nodes(keel_arena *a, keel_graph *g, const bool *drop);

/* Adds a constant (an initializer) named `name` to graph g: appended to
 * the model's constants and to g's initializer list (t's bytes must live
 * as long as the model: the arena or the mapping). Its index in *index
 * when not NULL. */
KEEL_INTERNAL keel_status keel_ir_add_const(keel_model *m, keel_graph *g, const char *name,
                                            const keel_tensor *t, int32_t *index);
/* The same for n constants at once (one copy of the arrays, not n): the
 * first one's index in *first when not NULL. */
KEEL_INTERNAL keel_status keel_ir_add_consts(keel_model *m, keel_graph *g, int32_t n,
                                             const char *const *names, const keel_tensor *ts,
                                             int32_t *first);
/* The header of a STATIC buffer over `data` (bytes that live as long as
 * the model: the mapping or the arena), itself in arena a; NULL on OOM.
 * Every constant has one when it has bytes. */
KEEL_INTERNAL keel_buffer *keel_ir_static_buffer(keel_arena *a, void *data, size_t nbytes);
/* Drops g's initializer `name` from its list (the constant itself stays in
 * the model's array, unused). */
KEEL_INTERNAL void keel_ir_drop_init(keel_graph *g, const char *name);

/* Find an attribute by name, or NULL. */
KEEL_INTERNAL const keel_attr *keel_node_attr(const keel_node *n,
                                              const char *name);

#endif /* KEEL_IR_H */
