/* collective.c: the com.microsoft collectives of ONNX Runtime's
 * distributed inference, over MPI: AllReduce (sum), AllGather (group_size,
 * axis) and AllToAll (group_size), each variadic (input i -> output i).
 * float, double, float16, bfloat16 and int64; AllGather and AllToAll also
 * move bool. ORT's kernels default AllGather's axis to 0; so does keel.
 *
 * Every call follows one protocol so that no rank can wait alone:
 *   1. local checks and the output buffer (keel_k_out / keel_k_reuse:
 *      owner-tagged blocks of the session's allocator), any failure kept;
 *   2. agree(): one MPI_Allreduce (MAXLOC over a signature of the element
 *      type and shape, and its negation) tells every rank whether all
 *      ranks passed step 1 with the same type and shape; if not, every rank
 *      returns an error naming the rank that differs;
 *   3. the data collective, in place (MPI_IN_PLACE) when the input dies
 *      here and its buffer can be the output.
 * float16 / bfloat16 sums are MPI user ops that add in float and round
 * once per step; MPI has no such types. Counts above INT_MAX elements are
 * refused (MPI's int counts). Built without MPI, each kernel returns
 * KEEL_ERR_UNSUPPORTED (and sessions refuse such models at creation). */
#include <limits.h>
#include <stdio.h>

#include "ops/kernel.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "dist/comm.h"

#ifdef KEEL_HAVE_MPI

/* ================================================= types and sum ops */

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = keel_f32_to_f16(keel_f16_to_f32(a[i]) + keel_f16_to_f32(b[i]));
}

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = keel_f32_to_bf16(keel_bf16_to_f32(a[i]) + keel_bf16_to_f32(b[i]));
}

static MPI_Op g_sum_f16 = MPI_OP_NULL, g_sum_bf16 = MPI_OP_NULL;

void keel_dist_free_ops(void) {
  if (g_sum_f16 != MPI_OP_NULL) MPI_Op_free(&g_sum_f16);
  if (g_sum_bf16 != MPI_OP_NULL) MPI_Op_free(&g_sum_bf16);
}

/* MPI datatype of a keel dtype, or MPI_DATATYPE_NULL. */
static MPI_Datatype mpi_type(int dtype) {
  switch (dtype) {
  case KEEL_FLOAT: return MPI_FLOAT;
  case KEEL_DOUBLE: return MPI_DOUBLE;
  case KEEL_INT64: return MPI_INT64_T;
  case KEEL_FLOAT16:
  case KEEL_BFLOAT16: return MPI_UINT16_T;
  case KEEL_BOOL: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

/* The sum for dtype (call under the lock: creates the user ops once). */
static MPI_Op sum_op(int dtype) {
  if (dtype == KEEL_FLOAT16) {
    if (g_sum_f16 == MPI_OP_NULL) MPI_Op_create(sum_f16, 1, &g_sum_f16);
    return g_sum_f16;
  }
  if (dtype == KEEL_BFLOAT16) {
    if (g_sum_bf16 == MPI_OP_NULL) MPI_Op_create(sum_bf16, 1, &g_sum_bf16);
    return g_sum_bf16;
  }
  return MPI_SUM;
}

/* ========================================================= agreement */

/* A 52-bit signature of type and shape (>= 1; 0 means "failed here"),
 * exact in a double. */
static double signature(const keel_tensor *t) {
  uint64_t h = 1469598103934665603ull;
  int64_t v[KEEL_MAX_RANK + 2] = {t->dtype, t->rank};
  for (int i = 0; i < t->rank; i++) v[i + 2] = t->shape[i];
  for (int i = 0; i < t->rank + 2; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
  h &= (1ull << 52) - 1;
  return (double)(h ? h : 1);
}

static void describe(const keel_tensor *t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "%s[", keel_dtype_name((keel_dtype)t->dtype));
  for (int i = 0; i < t->rank && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Step 2 of the protocol. `local` is this rank's status from step 1 (its
 * message still in the error buffer), returned as is when not OK. */
static keel_status agree(keel_kctx *k, MPI_Comm c, keel_status local, const keel_tensor *x,
                         int idx) {
  int me = 0;
  double sig = local ? 0.0 : signature(x);
  struct {
    double v;
    int r;
  } in[2], out[2];
  keel_dist_lock();
  MPI_Comm_rank(c, &me);
  in[0].v = sig, in[0].r = me, in[1].v = -sig, in[1].r = me;
  int rc = MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MAXLOC, c);
  keel_dist_unlock();
  if (local) return local;
  KEEL_TRY(keel_dist_check(rc, c, "MPI_Allreduce (type and shape check)"));
  double lo = -out[1].v;
  if (lo == 0.0)
    return keel_err(KEEL_ERR_INVALID_ARG,
                    "%s input %d: rank %d failed before the collective (its own error says "
                    "why); this rank (%d) stops too", k->node->op_type, idx, out[1].r, me);
  if (lo != out[0].v) {
    char d[256];
    describe(x, d, sizeof d);
    int other = out[0].v != sig ? out[0].r : out[1].r;
    return keel_err(KEEL_ERR_SHAPE,
                    "%s input %d: the ranks disagree on its type or shape: this rank (%d) has "
                    "%s, rank %d has another; every rank must pass the same",
                    k->node->op_type, idx, me, d, other);
  }
  return KEEL_OK;
}

/* ====================================================== the kernels */

static MPI_Comm kernel_comm(const keel_kctx *k) {
  return keel_dist_comm(k->svc && k->svc->comm ? k->svc->comm(k) : NULL);
}

/* Step-1 checks common to every collective: a tensor of a type MPI can
 * move, at most INT_MAX elements (per rank). */
static keel_status check_input(keel_kctx *k, int i, bool sum, const keel_tensor **x) {
  KEEL_TRY(keel_k_in(k, i, x));
  int dt = (*x)->dtype;
  if (mpi_type(dt) == MPI_DATATYPE_NULL || (sum && dt == KEEL_BOOL))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s input %d: element type %s is not supported",
                    k->node->op_type, i, keel_dtype_name((keel_dtype)dt));
  if (keel_tensor_numel(*x) > INT_MAX)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s input %d: %lld elements exceed MPI's int count",
                    k->node->op_type, i, (long long)keel_tensor_numel(*x));
  return KEEL_OK;
}

static keel_status check_group(keel_kctx *k, MPI_Comm c, int *size) {
  keel_dist_lock();
  MPI_Comm_size(c, size);
  keel_dist_unlock();
  int64_t g = keel_k_attr_i(k, "group_size", 1);
  if (g != *size)
    return keel_err(KEEL_ERR_INVALID_ARG,
                    "attribute group_size is %lld but the communicator has %d ranks",
                    (long long)g, *size);
  return KEEL_OK;
}

static keel_status allreduce_one(keel_kctx *k, MPI_Comm c, int i) {
  const keel_tensor *x = NULL;
  keel_tensor *y = NULL;
  keel_status st = check_input(k, i, true, &x);
  if (!st) st = keel_k_reuse(k, i, i, x->dtype, x->rank, x->shape, &y);
  KEEL_TRY(agree(k, c, st, x, i));
  int n = (int)keel_tensor_numel(x);
  if (!n) return KEEL_OK;
  keel_dist_lock();
  int rc = MPI_Allreduce(y->data == x->data ? MPI_IN_PLACE : x->data, y->data, n,
                         mpi_type(x->dtype), sum_op(x->dtype), c);
  keel_dist_unlock();
  return keel_dist_check(rc, c, "MPI_Allreduce");
}

static keel_status op_allreduce(keel_kctx *k) {
  MPI_Comm c = kernel_comm(k);
  for (int i = 0; i < k->n_in; i++) KEEL_TRY(allreduce_one(k, c, i));
  return KEEL_OK;
}

/* AllGather along `axis`: MPI gathers rank-major ([g][outer][inner]);
 * unless outer is 1 that lands in scratch and is interleaved into
 * [outer][g][inner]. */
static keel_status gather_steps(keel_kctx *k, int i, int g, const keel_tensor **xo,
                                keel_tensor **yo, int64_t *outer, void **stage) {
  const keel_tensor *x;
  KEEL_TRY(check_input(k, i, false, &x));
  *xo = x;
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x->rank, "attribute axis", &axis));
  int64_t shape[KEEL_MAX_RANK];
  memcpy(shape, x->shape, sizeof shape);
  shape[axis] *= g;
  if (keel_shape_numel(x->rank, shape) > INT_MAX)
    return keel_err(KEEL_ERR_UNSUPPORTED, "AllGather output exceeds MPI's int count");
  *outer = keel_shape_numel(axis, x->shape);
  KEEL_TRY(keel_k_out(k, i, x->dtype, x->rank, shape, yo));
  if (*outer > 1)
    KEEL_TRY(keel_k_scratch_n(k, keel_tensor_numel(x) * g, keel_dtype_size((keel_dtype)x->dtype), stage));
  return KEEL_OK;
}

static keel_status allgather_one(keel_kctx *k, MPI_Comm c, int g, keel_status gs, int i) {
  const keel_tensor *x = NULL;
  keel_tensor *y = NULL;
  int64_t outer = 1;
  void *stage = NULL;
  keel_status st = gs ? gs : gather_steps(k, i, g, &x, &y, &outer, &stage);
  KEEL_TRY(agree(k, c, st, x, i));
  int n = (int)keel_tensor_numel(x);
  if (!n) return KEEL_OK;
  MPI_Datatype dt = mpi_type(x->dtype);
  keel_dist_lock();
  int rc = MPI_Allgather(x->data, n, dt, stage ? stage : y->data, n, dt, c);
  keel_dist_unlock();
  KEEL_TRY(keel_dist_check(rc, c, "MPI_Allgather"));
  if (!stage) return KEEL_OK;
  size_t row = (size_t)(n / outer) * keel_dtype_size((keel_dtype)x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int r = 0; r < g; r++)
      memcpy((char *)y->data + ((size_t)o * g + r) * row,
             (const char *)stage + ((size_t)r * outer + o) * row, row);
  return KEEL_OK;
}

static keel_status op_allgather(keel_kctx *k) {
  MPI_Comm c = kernel_comm(k);
  int g = 1;
  keel_status gs = check_group(k, c, &g);
  for (int i = 0; i < k->n_in; i++) KEEL_TRY(allgather_one(k, c, g, gs, i));
  return KEEL_OK;
}

/* AllToAll: input split along axis 0 into g blocks, block r to rank r;
 * the output (same shape) holds the block from rank r at position r. */
static keel_status alltoall_one(keel_kctx *k, MPI_Comm c, int g, keel_status gs, int i) {
  const keel_tensor *x = NULL;
  keel_tensor *y = NULL;
  keel_status st = gs ? gs : check_input(k, i, false, &x);
  if (!st && (x->rank < 1 || x->shape[0] % g))
    st = keel_err(KEEL_ERR_SHAPE, "AllToAll input %d: dimension 0 (%lld) is not a multiple of "
                  "group_size %d", i, x->rank ? (long long)x->shape[0] : 0LL, g);
  if (!st) st = keel_k_reuse(k, i, i, x->dtype, x->rank, x->shape, &y);
  KEEL_TRY(agree(k, c, st, x, i));
  int n = (int)(keel_tensor_numel(x) / g);
  if (!n) return KEEL_OK;
  MPI_Datatype dt = mpi_type(x->dtype);
  keel_dist_lock();
  int rc = y->data == x->data ? MPI_Alltoall(MPI_IN_PLACE, n, dt, y->data, n, dt, c)
                              : MPI_Alltoall(x->data, n, dt, y->data, n, dt, c);
  keel_dist_unlock();
  return keel_dist_check(rc, c, "MPI_Alltoall");
}

static keel_status op_alltoall(keel_kctx *k) {
  MPI_Comm c = kernel_comm(k);
  int g = 1;
  keel_status gs = check_group(k, c, &g);
  for (int i = 0; i < k->n_in; i++) KEEL_TRY(alltoall_one(k, c, g, gs, i));
  return KEEL_OK;
}

#else /* no MPI */

static keel_status op_allreduce(keel_kctx *k) { return keel_dist_no_mpi(k->node); }
static keel_status op_allgather(keel_kctx *k) { return keel_dist_no_mpi(k->node); }
static keel_status op_alltoall(keel_kctx *k) { return keel_dist_no_mpi(k->node); }

#endif

bool keel_dist_is_collective(const keel_node *n) {
  return n->op && (n->op->fn == op_allreduce || n->op->fn == op_allgather ||
                   n->op->fn == op_alltoall);
}

#define COLL_TYPES                                                                          \
  (KEEL_T(KEEL_FLOAT) | KEEL_T(KEEL_DOUBLE) | KEEL_T(KEEL_FLOAT16) | KEEL_T(KEEL_BFLOAT16) | \
   KEEL_T(KEEL_INT64))

const keel_opdef keel_ops_collective[] = {
    {"com.microsoft", "AllReduce", 1, KEEL_OPSET_MAX, op_allreduce, 0, COLL_TYPES},
    {"com.microsoft", "AllGather", 1, KEEL_OPSET_MAX, op_allgather, 0, COLL_TYPES | KEEL_T(KEEL_BOOL)},
    {"com.microsoft", "AllToAll", 1, KEEL_OPSET_MAX, op_alltoall, 0, COLL_TYPES | KEEL_T(KEEL_BOOL)},
    {0},
};
