/* sequence.c: sequence and optional values as run-time values:
 * SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
 * SequenceErase, SequenceLength, ConcatFromSequence, SplitToSequence,
 * Optional, OptionalHasElement, OptionalGetElement.
 *
 * A sequence holds one reference per element (tensor.h); reading an element
 * (SequenceAt) hands out another reference to the same bytes, erasing or
 * dropping one releases its reference. Insert and Erase return a new
 * sequence, but when the input sequence dies at this node and nobody else
 * holds it (the planner's last-use bit plus a reference count of one) the
 * kernel updates it in place: a loop that appends to a carried sequence is
 * then O(1) per iteration instead of a copy of the whole list.
 */
#include "ops/kernel.h"

/* ============================================================ helpers */

static keel_status in_seq(keel_kctx *k, int i, const keel_seq **s) {
  if (!keel_k_has_in(k, i) || k->in[i]->kind != KEEL_V_SEQUENCE)
    return keel_err(KEEL_ERR_SHAPE, "input %d must be a sequence", i);
  if (k->in[i]->seq->of_maps)
    return keel_err(KEEL_ERR_UNSUPPORTED, "input %d is a sequence of maps; %s takes sequences of tensors",
                    i, k->node->op_type);
  *s = k->in[i]->seq;
  return KEEL_OK;
}

/* Output 0 = input sequence 0, ready to change: the same object when this
 * node holds the last reference, else a copy (new references to the same
 * element tensors). */
static keel_status seq_for_update(keel_kctx *k, keel_seq **out) {
  const keel_seq *src;
  KEEL_TRY(in_seq(k, 0, &src));
  keel_seq *s = (keel_seq *)src;
  if ((k->node->last_use & 1) && atomic_load(&s->refs) == 1) keel_seq_retain(s);
  else KEEL_TRY(keel_seq_copy(src, &s));
  k->out[0]->kind = KEEL_V_SEQUENCE;
  k->out[0]->seq = s;
  *out = s;
  return KEEL_OK;
}

/* Position input `i` (a scalar) checked against [lo, hi]; negative values
 * count from the end (n). */
static keel_status position(keel_kctx *k, int i, int64_t n, int64_t lo, int64_t hi,
                            int64_t def, int64_t *pos) {
  int64_t p = def;
  if (keel_k_has_in(k, i)) KEEL_TRY(keel_k_in_scalar_i64(k, i, &p));
  if (p < lo || p > hi)
    return keel_err(KEEL_ERR_RUNTIME, "position %lld is out of range [%lld, %lld] for a sequence of %lld",
                    (long long)p, (long long)lo, (long long)hi, (long long)n);
  *pos = p < 0 ? p + n : p;
  return KEEL_OK;
}

static keel_status check_elem(const keel_seq *s, const keel_tensor *t) {
  if (s->elem_dtype != KEEL_UNDEFINED && s->elem_dtype != t->dtype)
    return keel_err(KEEL_ERR_SHAPE, "a %s tensor cannot join a sequence of %s",
                    keel_dtype_name((keel_dtype)t->dtype), keel_dtype_name((keel_dtype)s->elem_dtype));
  return KEEL_OK;
}

/* ========================================================== building */

static keel_status op_sequence_empty(keel_kctx *k) {
  keel_seq *s;
  int dt = (int)keel_k_attr_i(k, "dtype", KEEL_FLOAT);
  if (!keel_dtype_valid(dt)) return keel_err(KEEL_ERR_INVALID_MODEL, "dtype %d is not a type", dt);
  return keel_k_out_seq(k, 0, dt, &s);
}

static keel_status op_sequence_construct(keel_kctx *k) {
  const keel_tensor *t0;
  KEEL_TRY(keel_k_in(k, 0, &t0));
  keel_seq *s;
  KEEL_TRY(keel_k_out_seq(k, 0, t0->dtype, &s));
  for (int i = 0; i < k->n_in; i++) {
    const keel_tensor *t;
    KEEL_TRY(keel_k_in(k, i, &t));
    KEEL_TRY(check_elem(s, t));
    keel_tensor r;
    keel_tensor_ref(t, &r);
    keel_status st = keel_seq_insert(s, s->n, &r);
    if (st) {
      keel_tensor_release(&r);
      return st;
    }
  }
  return KEEL_OK;
}

static keel_status op_sequence_insert(keel_kctx *k) {
  const keel_tensor *t;
  KEEL_TRY(keel_k_in(k, 1, &t));
  keel_seq *s;
  KEEL_TRY(seq_for_update(k, &s));
  KEEL_TRY(check_elem(s, t));
  int64_t n = (int64_t)s->n, pos;
  KEEL_TRY(position(k, 2, n, -n, n, n, &pos));
  keel_tensor r;
  keel_tensor_ref(t, &r);
  keel_status st = keel_seq_insert(s, (size_t)pos, &r);
  if (st) keel_tensor_release(&r);
  return st;
}

static keel_status op_sequence_erase(keel_kctx *k) {
  keel_seq *s;
  KEEL_TRY(seq_for_update(k, &s));
  int64_t n = (int64_t)s->n, pos;
  if (n == 0) return keel_err(KEEL_ERR_RUNTIME, "SequenceErase on an empty sequence");
  KEEL_TRY(position(k, 1, n, -n, n - 1, n - 1, &pos));
  keel_seq_erase(s, (size_t)pos);
  return KEEL_OK;
}

/* =========================================================== reading */

static keel_status op_sequence_at(keel_kctx *k) {
  const keel_seq *s;
  KEEL_TRY(in_seq(k, 0, &s));
  int64_t n = (int64_t)s->n, pos;
  if (!keel_k_has_in(k, 1)) return keel_err(KEEL_ERR_INVALID_MODEL, "SequenceAt needs a position");
  KEEL_TRY(position(k, 1, n, -n, n - 1, 0, &pos));
  keel_val v = {.kind = KEEL_V_TENSOR, .t = s->items[pos]};
  return keel_k_out_ref(k, 0, &v);
}

static keel_status op_sequence_length(keel_kctx *k) {
  const keel_seq *s;
  KEEL_TRY(in_seq(k, 0, &s));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, KEEL_INT64, 0, NULL, &o));
  *(int64_t *)o->data = (int64_t)s->n;
  return KEEL_OK;
}

/* ========================================================== concat/split */

/* Copies `rows` runs of `run` elements from src (row stride src_row) into
 * dst (row stride dst_row). */
static keel_status copy_rows(keel_tensor *dst, int64_t dst_off, int64_t dst_row,
                             const keel_tensor *src, int64_t src_off, int64_t src_row,
                             int64_t rows, int64_t run) {
  for (int64_t r = 0; r < rows; r++)
    KEEL_TRY(keel_tensor_copy_elems(dst, dst_off + r * dst_row, src, src_off + r * src_row, run));
  return KEEL_OK;
}

static keel_status concat_shape(const keel_seq *s, int axis, bool new_axis, int *rank,
                                int64_t *shape) {
  const keel_tensor *t0 = &s->items[0];
  int r = t0->rank;
  for (size_t i = 1; i < s->n; i++) {
    const keel_tensor *t = &s->items[i];
    bool ok = t->rank == r && t->dtype == t0->dtype;
    for (int d = 0; ok && d < r; d++) ok = d == axis && !new_axis ? true : t->shape[d] == t0->shape[d];
    if (!ok) return keel_err(KEEL_ERR_SHAPE, "ConcatFromSequence: item %zu does not fit item 0", i);
  }
  int o = 0;
  for (int d = 0; d <= r; d++) {
    if (new_axis && d == axis) shape[o++] = (int64_t)s->n;
    if (d == r) break;
    shape[o] = t0->shape[d];
    if (!new_axis && d == axis) {
      shape[o] = 0;
      for (size_t i = 0; i < s->n; i++) shape[o] += s->items[i].shape[d];
    }
    o++;
  }
  *rank = o;
  return KEEL_OK;
}

static keel_status op_concat_from_sequence(keel_kctx *k) {
  const keel_seq *s;
  KEEL_TRY(in_seq(k, 0, &s));
  if (s->n == 0) return keel_err(KEEL_ERR_RUNTIME, "ConcatFromSequence of an empty sequence");
  bool new_axis = keel_k_attr_i(k, "new_axis", 0) != 0;
  int r0 = s->items[0].rank, axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), r0 + (new_axis ? 1 : 0), "axis", &axis));
  int rank;
  int64_t shape[KEEL_MAX_RANK + 1];
  if (r0 + (new_axis ? 1 : 0) > KEEL_MAX_RANK) return keel_err(KEEL_ERR_UNSUPPORTED, "rank too high");
  KEEL_TRY(concat_shape(s, axis, new_axis, &rank, shape));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, s->items[0].dtype, rank, shape, &o));
  int64_t outer = 1, out_row = 1;
  for (int d = 0; d < axis; d++) outer *= shape[d];
  for (int d = axis; d < rank; d++) out_row *= shape[d];
  int64_t at = 0;
  for (size_t i = 0; i < s->n; i++) {
    const keel_tensor *t = &s->items[i];
    int64_t run = outer ? keel_tensor_numel(t) / KEEL_MAX(outer, 1) : 0;
    KEEL_TRY(copy_rows(o, at, out_row, t, 0, run, outer, run));
    at += run;
  }
  return KEEL_OK;
}

/* Sizes of the pieces SplitToSequence cuts along an axis of length L. */
static keel_status split_sizes(keel_kctx *k, int64_t L, int64_t *sizes, int64_t cap, int64_t *n,
                               bool *given) {
  *given = keel_k_has_in(k, 1);
  if (!*given) {
    if (L > cap) return keel_err(KEEL_ERR_UNSUPPORTED, "SplitToSequence into more than %lld pieces", (long long)cap);
    for (int64_t i = 0; i < L; i++) sizes[i] = 1;
    *n = L;
    return KEEL_OK;
  }
  const keel_tensor *sp;
  KEEL_TRY(keel_k_in(k, 1, &sp));
  if (sp->rank == 0) {
    int64_t c = keel_elem_get_i64(sp->dtype, sp->data, 0);
    if (c <= 0) return keel_err(KEEL_ERR_RUNTIME, "split size %lld must be positive", (long long)c);
    *n = 0;
    for (int64_t at = 0; at < L; at += c) {
      if (*n == cap) return keel_err(KEEL_ERR_UNSUPPORTED, "too many pieces");
      sizes[(*n)++] = KEEL_MIN(c, L - at);
    }
    return KEEL_OK;
  }
  int cnt;
  KEEL_TRY(keel_k_in_ints(k, 1, sizes, (int)cap, &cnt));
  int64_t sum = 0;
  for (int i = 0; i < cnt; i++) {
    if (sizes[i] < 0) return keel_err(KEEL_ERR_RUNTIME, "split size %lld is negative", (long long)sizes[i]);
    if (sizes[i] > L - sum) /* compared before adding: the sum of huge sizes overflows */
      return keel_err(KEEL_ERR_RUNTIME, "split sizes sum past the axis length %lld", (long long)L);
    sum += sizes[i];
  }
  if (sum != L) return keel_err(KEEL_ERR_RUNTIME, "split sizes sum to %lld, the axis has %lld", (long long)sum, (long long)L);
  *n = cnt;
  return KEEL_OK;
}

#define MAX_PIECES 65536

static keel_status op_split_to_sequence(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x->rank, "axis", &axis));
  int64_t L = x->shape[axis], n, *sizes;
  bool given;
  KEEL_TRY(keel_k_scratch(k, sizeof(int64_t) * MAX_PIECES, (void **)&sizes));
  KEEL_TRY(split_sizes(k, L, sizes, MAX_PIECES, &n, &given));
  bool squeeze = !given && keel_k_attr_i(k, "keepdims", 1) == 0;
  keel_seq *s;
  KEEL_TRY(keel_k_out_seq(k, 0, x->dtype, &s));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->shape[d];
  for (int d = axis + 1; d < x->rank; d++) inner *= x->shape[d];
  int64_t at = 0;
  for (int64_t p = 0; p < n; p++) {
    int64_t shape[KEEL_MAX_RANK];
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
      if (d == axis && squeeze) continue;
      shape[r++] = d == axis ? sizes[p] : x->shape[d];
    }
    keel_tensor t;
    KEEL_TRY(keel_tensor_alloc(k->heap, x->dtype, r, shape, k->owner, &t));
    keel_status st = copy_rows(&t, 0, sizes[p] * inner, x, at * inner, L * inner, outer, sizes[p] * inner);
    if (!st) st = keel_seq_insert(s, s->n, &t);
    if (st) {
      keel_tensor_release(&t);
      return st;
    }
    at += sizes[p];
  }
  return KEEL_OK;
}

/* ========================================================== optionals */

static keel_status op_optional(keel_kctx *k) {
  if (keel_k_has_in(k, 0)) return keel_k_out_ref(k, 0, k->in[0]);
  k->out[0]->kind = KEEL_V_NONE;
  return KEEL_OK;
}

static keel_status op_optional_has_element(keel_kctx *k) {
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, KEEL_BOOL, 0, NULL, &o));
  *(uint8_t *)o->data = keel_k_has_in(k, 0) && k->in[0]->kind != KEEL_V_NONE;
  return KEEL_OK;
}

static keel_status op_optional_get_element(keel_kctx *k) {
  if (!keel_k_has_in(k, 0) || k->in[0]->kind == KEEL_V_NONE)
    return keel_err(KEEL_ERR_RUNTIME, "OptionalGetElement of an empty optional");
  return keel_k_out_ref(k, 0, k->in[0]);
}

/* ============================================================== table */

/* types: of the tensors the sequences and optionals hold, any type
 * (SequenceEmpty's dtype attribute). */
const keel_opdef keel_ops_sequence[] = {
    {"", "SequenceEmpty", 11, KEEL_OPSET_MAX, op_sequence_empty, 0, KEEL_TS_ALL},
    {"", "SequenceConstruct", 11, KEEL_OPSET_MAX, op_sequence_construct, 0, KEEL_TS_ALL},
    {"", "SequenceInsert", 11, KEEL_OPSET_MAX, op_sequence_insert, 0, KEEL_TS_ALL},
    {"", "SequenceAt", 11, KEEL_OPSET_MAX, op_sequence_at, 0, KEEL_TS_ALL},
    {"", "SequenceErase", 11, KEEL_OPSET_MAX, op_sequence_erase, 0, KEEL_TS_ALL},
    {"", "SequenceLength", 11, KEEL_OPSET_MAX, op_sequence_length, 0, KEEL_TS_ALL},
    {"", "ConcatFromSequence", 11, KEEL_OPSET_MAX, op_concat_from_sequence, 0, KEEL_TS_ALL},
    {"", "SplitToSequence", 11, KEEL_OPSET_MAX, op_split_to_sequence, 0, KEEL_TS_ALL},
    {"", "Optional", 15, KEEL_OPSET_MAX, op_optional, 0, KEEL_TS_ALL},
    {"", "OptionalHasElement", 15, KEEL_OPSET_MAX, op_optional_has_element, 0, KEEL_TS_ALL},
    {"", "OptionalGetElement", 15, KEEL_OPSET_MAX, op_optional_get_element, 0, KEEL_TS_ALL},
    {0},
};
