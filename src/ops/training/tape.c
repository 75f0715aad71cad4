/* grad_tape.c: the tape a differentiated Loop keeps its per-iteration
 * values on (autodiff/grad_control.c), in the domain "ai.keel.internal":
 *
 *   TapeNew()                  -> tape       an empty sequence of any tensors
 *   TapePush(tape, x1..xn)     -> tape'      x1..xn appended (references)
 *   TapePop(tape)              -> tape', x1..xn   the last n taken off, in
 *                                            the order they were pushed
 *   TapeNotEmpty(tape)         -> bool      whether anything is left on it
 *
 * A value that is itself a tape (a Loop nested in the Loop keeps its own;
 * attribute `tapes`, ints, marks them) goes on as its elements and their
 * count, and comes off as a tape again.
 *
 * A tape that was never pushed to (a Loop that ran no iteration carries
 * its omitted initial value through) is none: TapePush starts a tape from
 * it, TapeNotEmpty finds it empty. A backward
 * Loop runs while its tape is not empty: as many iterations as the forward
 * Loop ran, whatever stopped that one.
 *
 * A tape is a sequence value whose elements may differ in type and shape
 * from one iteration to the next (an If in the body saves a value or an
 * empty placeholder). Push updates the tape in place when it dies at the
 * node and nobody else holds it (a carried tape always does), Pop always
 * (below), so a loop of T iterations costs O(T) and each popped value is
 * released as soon as its iteration of the backward is done with it.
 */
#include "ops/kernel.h"

/* Output 0 = the tape of input 0, ready to change (in place when this node
 * holds its last reference, else a copy of the list). */
static keel_status tape_for_update(keel_kctx *k, keel_seq **out) {
  if (!strcmp(k->node->op_type, "TapePush") &&
      (!keel_k_has_in(k, 0) || k->in[0]->kind == KEEL_V_NONE))
    return keel_k_out_seq(k, 0, KEEL_UNDEFINED, out); /* the first push */
  if (!keel_k_has_in(k, 0) || k->in[0]->kind != KEEL_V_SEQUENCE || k->in[0]->seq->of_maps)
    return keel_err(KEEL_ERR_SHAPE, "%s: input 0 must be a tape (a sequence)", k->node->op_type);
  keel_seq *s = k->in[0]->seq;
  if ((k->node->last_use & 1) && atomic_load(&s->refs) == 1) keel_seq_retain(s);
  else KEEL_TRY(keel_seq_copy(k->in[0]->seq, &s));
  k->out[0]->kind = KEEL_V_SEQUENCE;
  k->out[0]->seq = s;
  *out = s;
  return KEEL_OK;
}

static keel_status op_tape_new(keel_kctx *k) {
  keel_seq *s;
  return keel_k_out_seq(k, 0, KEEL_UNDEFINED, &s);
}

/* Whether value i (1-based among the pushed/popped ones) is a tape: the
 * attribute `tapes` (ints, one per value) says; default none. */
static bool is_tape(keel_kctx *k, int i) {
  int n = 0;
  const int64_t *t = keel_k_attr_ints(k, "tapes", &n);
  return t && i - 1 < n && t[i - 1];
}

static keel_status push_ref(keel_seq *s, const keel_tensor *t) {
  keel_tensor r;
  keel_tensor_ref(t, &r);
  keel_status st = keel_seq_insert(s, s->n, &r);
  if (st) keel_tensor_release(&r);
  s->elem_dtype = KEEL_UNDEFINED; /* any tensor may follow */
  return st;
}

/* A tape value goes on as its elements then their count (int64): 0 for a
 * placeholder or none (a branch or loop that made no tape). */
static keel_status push_tape(keel_kctx *k, keel_seq *s, const keel_val *v) {
  int64_t n = 0;
  if (v && v->kind == KEEL_V_SEQUENCE) {
    n = (int64_t)v->seq->n;
    for (int64_t i = 0; i < n; i++) KEEL_TRY(push_ref(s, &v->seq->items[i]));
  }
  keel_tensor c;
  KEEL_TRY(keel_tensor_alloc(k->heap, KEEL_INT64, 0, NULL, k->owner, &c));
  *(int64_t *)c.data = n;
  keel_status st = keel_seq_insert(s, s->n, &c);
  if (st) keel_tensor_release(&c);
  s->elem_dtype = KEEL_UNDEFINED;
  return st;
}

static keel_status op_tape_push(keel_kctx *k) {
  keel_seq *s;
  KEEL_TRY(tape_for_update(k, &s));
  for (int i = 1; i < k->n_in; i++) {
    if (is_tape(k, i)) {
      KEEL_TRY(push_tape(k, s, keel_k_has_in(k, i) ? k->in[i] : NULL));
      continue;
    }
    const keel_tensor *t;
    KEEL_TRY(keel_k_in(k, i, &t));
    KEEL_TRY(push_ref(s, t));
  }
  return KEEL_OK;
}

/* Output i = the tape that push_tape put on the end of s, taken off. */
static keel_status pop_tape(keel_kctx *k, keel_seq *s, int i) {
  if (!s->n || s->items[s->n - 1].dtype != KEEL_INT64)
    return keel_err(KEEL_ERR_RUNTIME, "TapePop: no tape count on the tape");
  int64_t n = *(const int64_t *)s->items[s->n - 1].data;
  keel_seq_erase(s, s->n - 1);
  if (n < 0 || (size_t)n > s->n)
    return keel_err(KEEL_ERR_RUNTIME, "TapePop: a tape of %lld on a tape of %zu", (long long)n, s->n);
  keel_seq *t;
  KEEL_TRY(keel_k_out_seq(k, i, KEEL_UNDEFINED, &t));
  for (size_t j = s->n - (size_t)n; j < s->n; j++) KEEL_TRY(push_ref(t, &s->items[j]));
  for (int64_t j = 0; j < n; j++) keel_seq_erase(s, s->n - 1);
  return KEEL_OK;
}

/* A tape has one reader, the backward Loop, and what it pops is gone for
 * good: TapePop takes from the tape itself even while the value that fed
 * the Loop still holds it, so each value is released when its iteration's
 * backward is done with it, not when the backward Loop ends. */
static keel_status op_tape_pop(keel_kctx *k) {
  if (!keel_k_has_in(k, 0) || k->in[0]->kind != KEEL_V_SEQUENCE || k->in[0]->seq->of_maps)
    return keel_err(KEEL_ERR_SHAPE, "TapePop: input 0 must be a tape (a sequence)");
  keel_seq *s = k->in[0]->seq;
  keel_seq_retain(s);
  k->out[0]->kind = KEEL_V_SEQUENCE;
  k->out[0]->seq = s;
  for (int i = k->n_out - 1; i >= 1; i--) {
    if (is_tape(k, i)) {
      KEEL_TRY(pop_tape(k, s, i));
      continue;
    }
    if (!s->n) return keel_err(KEEL_ERR_RUNTIME, "TapePop: the tape is empty");
    keel_val v = {.kind = KEEL_V_TENSOR, .t = s->items[s->n - 1]};
    KEEL_TRY(keel_k_out_ref(k, i, &v));
    keel_seq_erase(s, s->n - 1);
  }
  return KEEL_OK;
}

static keel_status op_tape_not_empty(keel_kctx *k) {
  bool any = false;
  if (keel_k_has_in(k, 0) && k->in[0]->kind == KEEL_V_SEQUENCE) any = k->in[0]->seq->n > 0;
  else if (keel_k_has_in(k, 0) && k->in[0]->kind != KEEL_V_NONE)
    return keel_err(KEEL_ERR_SHAPE, "TapeNotEmpty: input 0 must be a tape (a sequence)");
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, KEEL_BOOL, 0, NULL, &o));
  *(uint8_t *)o->data = any;
  return KEEL_OK;
}

#define D "ai.keel.internal"
const keel_opdef keel_ops_grad_tape[] = {
    {D, "TapeNew", 1, KEEL_OPSET_MAX, op_tape_new, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {D, "TapePush", 1, KEEL_OPSET_MAX, op_tape_push, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {D, "TapeNotEmpty", 1, KEEL_OPSET_MAX, op_tape_not_empty, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {D, "TapePop", 1, KEEL_OPSET_MAX, op_tape_pop, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {0},
};
#undef D
