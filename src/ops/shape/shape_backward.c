/* shape_backward.c: the backward kernels of the shape, index and sequence
 * ops (forward kernels in gather_scatter.c, shape.c, sequence.c; rules in
 * autodiff/grad_shape.c) and the driver's GradAdd (autodiff/autodiff.c), in
 * the domain "ai.keel.internal":
 *   GradAdd(a, b)                       a + b: tensors of one shape, or
 *                                       sequences element by element (the
 *                                       driver sums gradients with it)
 *   GatherGrad(gy, x, indices; axis)    gy added into zeros shaped as x at
 *                                       the gathered rows (Gather's gradient)
 *   SliceGrad(gy, x, starts, ends[, axes, steps])
 *                                       zeros shaped as x, gy where Slice
 *                                       took it from
 *   SequenceAtGrad(s, pos, g)           zeros shaped as s's elements, g at pos
 *   ConcatFromSequenceGrad(gy, s; axis, new_axis)
 *                                       gy cut back into pieces shaped as s's
 *                                       elements
 * float32 runs split over the session's threads; float64 (the finite
 * difference tests) and the half types take the same paths element-wise. */
#include "base/pool.h"
#include "ops/kernel.h"

/* ============================================================ helpers */

static keel_status float_tensor(const keel_tensor *t, const char *what) {
  if (!keel_dtype_is_float(t->dtype))
    return keel_err(KEEL_ERR_SHAPE, "%s must be a float tensor, got %s", what,
                    keel_dtype_name((keel_dtype)t->dtype));
  return KEEL_OK;
}

static bool same_shape(const keel_tensor *a, const keel_tensor *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

/* A tensor of zeros shaped as `like`, of type dtype, from the kernel's heap. */
static keel_status zeros_tensor(keel_kctx *k, int dtype, const keel_tensor *like, keel_tensor *t) {
  KEEL_TRY(keel_tensor_alloc(k->heap, dtype, like->rank, like->shape, keel_k_owner(k, 0), t));
  if (t->data) memset(t->data, 0, keel_tensor_nbytes(t));
  return KEEL_OK;
}

static keel_status in_seq(keel_kctx *k, int i, const keel_seq **s) {
  if (!keel_k_has_in(k, i) || k->in[i]->kind != KEEL_V_SEQUENCE || k->in[i]->seq->of_maps)
    return keel_err(KEEL_ERR_SHAPE, "input %d must be a sequence of tensors", i);
  *s = k->in[i]->seq;
  return KEEL_OK;
}

/* ============================================================ GradAdd */

typedef struct add_job {
  const keel_tensor *a, *b;
  keel_tensor *o;
} add_job;

static keel_status add_range(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const add_job *j = ctx;
  if (j->o->dtype == KEEL_FLOAT) {
    const float *a = j->a->data, *b = j->b->data;
    float *o = j->o->data;
    for (int64_t i = lo; i < hi; i++) o[i] = a[i] + b[i];
  } else if (j->o->dtype == KEEL_DOUBLE) {
    const double *a = j->a->data, *b = j->b->data;
    double *o = j->o->data;
    for (int64_t i = lo; i < hi; i++) o[i] = a[i] + b[i];
  } else {
    for (int64_t i = lo; i < hi; i++)
      keel_elem_set_f64(j->o->dtype, j->o->data, (size_t)i,
                        keel_elem_get_f64(j->a->dtype, j->a->data, (size_t)i) +
                            keel_elem_get_f64(j->b->dtype, j->b->data, (size_t)i));
  }
  return KEEL_OK;
}

static keel_status check_addends(const keel_tensor *a, const keel_tensor *b) {
  KEEL_TRY(float_tensor(a, "GradAdd: input 0"));
  if (a->dtype != b->dtype || !same_shape(a, b)) {
    char sa[96], sb[96];
    return keel_err(KEEL_ERR_SHAPE, "GradAdd: the gradients differ (%s %s and %s %s)",
                    keel_dtype_name((keel_dtype)a->dtype), keel_shape_str(a->rank, a->shape, sa, sizeof sa),
                    keel_dtype_name((keel_dtype)b->dtype), keel_shape_str(b->rank, b->shape, sb, sizeof sb));
  }
  return KEEL_OK;
}

static keel_status add_seqs(keel_kctx *k, const keel_seq *a, const keel_seq *b) {
  if (a->n != b->n)
    return keel_err(KEEL_ERR_SHAPE, "GradAdd: sequences of %zu and %zu elements", a->n, b->n);
  keel_seq *s;
  KEEL_TRY(keel_k_out_seq(k, 0, a->elem_dtype, &s));
  for (size_t i = 0; i < a->n; i++) {
    KEEL_TRY(check_addends(&a->items[i], &b->items[i]));
    keel_tensor t;
    KEEL_TRY(keel_tensor_alloc(k->heap, a->items[i].dtype, a->items[i].rank, a->items[i].shape,
                               keel_k_owner(k, 0), &t));
    add_job j = {&a->items[i], &b->items[i], &t};
    keel_status st = add_range(&j, 0, keel_tensor_numel(&t), 0);
    if (!st) st = keel_seq_insert(s, s->n, &t);
    if (st) {
      keel_tensor_release(&t);
      return st;
    }
  }
  return KEEL_OK;
}

static keel_status op_grad_add(keel_kctx *k) {
  if (keel_k_has_in(k, 0) && k->in[0]->kind == KEEL_V_SEQUENCE) {
    const keel_seq *a, *b;
    KEEL_TRY(in_seq(k, 0, &a));
    KEEL_TRY(in_seq(k, 1, &b));
    return add_seqs(k, a, b);
  }
  const keel_tensor *a, *b;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  KEEL_TRY(check_addends(a, b));
  keel_tensor *o;
  KEEL_TRY(keel_k_reuse(k, 0, 0, a->dtype, a->rank, a->shape, &o));
  add_job j = {a, b, o};
  return keel_pool_for(k->pool, keel_tensor_numel(o), 1 << 15, add_range, &j);
}

/* ========================================================= GatherGrad */

typedef struct gather_job {
  const keel_tensor *gy;
  keel_tensor *gx;
  const int64_t *idx;          /* normalized, ni of them                  */
  int64_t outer, dim, ni, inner, chunk, chunks;
} gather_job;

/* Task t: outer row t / chunks, inner columns of chunk t % chunks. Tasks
 * never share an output element, so they run without locks. */
static keel_status gather_task(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const gather_job *j = ctx;
  for (int64_t t = lo; t < hi; t++) {
    int64_t o = t / j->chunks, c0 = (t % j->chunks) * j->chunk;
    int64_t c1 = KEEL_MIN(c0 + j->chunk, j->inner);
    for (int64_t i = 0; i < j->ni; i++) {
      int64_t src = (o * j->ni + i) * j->inner, dst = (o * j->dim + j->idx[i]) * j->inner;
      if (j->gx->dtype == KEEL_FLOAT) {
        const float *g = (const float *)j->gy->data + src;
        float *x = (float *)j->gx->data + dst;
        for (int64_t c = c0; c < c1; c++) x[c] += g[c];
      } else if (j->gx->dtype == KEEL_DOUBLE) {
        const double *g = (const double *)j->gy->data + src;
        double *x = (double *)j->gx->data + dst;
        for (int64_t c = c0; c < c1; c++) x[c] += g[c];
      } else {
        for (int64_t c = c0; c < c1; c++) {
          size_t xi = (size_t)(dst + c);
          keel_elem_set_f64(j->gx->dtype, j->gx->data, xi,
                            keel_elem_get_f64(j->gx->dtype, j->gx->data, xi) +
                                keel_elem_get_f64(j->gy->dtype, j->gy->data, (size_t)(src + c)));
        }
      }
    }
  }
  return KEEL_OK;
}

static keel_status gather_indices(keel_kctx *k, const keel_tensor *ind, int64_t dim,
                                  int64_t **out) {
  if (ind->dtype != KEEL_INT64 && ind->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "GatherGrad: indices must be int32 or int64");
  int64_t n = keel_tensor_numel(ind), *idx;
  KEEL_TRY(keel_k_scratch_n(k, n ? n : 1, sizeof(int64_t), (void **)&idx));
  for (int64_t i = 0; i < n; i++) {
    int64_t v = keel_elem_get_i64(ind->dtype, ind->data, (size_t)i);
    if (v < -dim || v >= dim)
      return keel_err(KEEL_ERR_RUNTIME, "GatherGrad: index %lld is out of range for an axis of %lld",
                      (long long)v, (long long)dim);
    idx[i] = v < 0 ? v + dim : v;
  }
  *out = idx;
  return KEEL_OK;
}

static keel_status op_gather_grad(keel_kctx *k) {
  const keel_tensor *gy, *x, *ind;
  KEEL_TRY(keel_k_in(k, 0, &gy));
  KEEL_TRY(keel_k_in(k, 1, &x));
  KEEL_TRY(keel_k_in(k, 2, &ind));
  KEEL_TRY(float_tensor(gy, "GatherGrad: the gradient"));
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x->rank, "axis", &axis));
  gather_job j = {.gy = gy, .outer = 1, .dim = x->shape[axis], .inner = 1,
                  .ni = keel_tensor_numel(ind)};
  for (int d = 0; d < axis; d++) j.outer *= x->shape[d];
  for (int d = axis + 1; d < x->rank; d++) j.inner *= x->shape[d];
  bool fits = gy->rank == x->rank - 1 + ind->rank;
  for (int d = 0; fits && d < gy->rank; d++)
    fits = gy->shape[d] == (d < axis ? x->shape[d]
                            : d < axis + ind->rank ? ind->shape[d - axis]
                                                   : x->shape[d - ind->rank + 1]);
  if (!fits) return keel_err(KEEL_ERR_SHAPE, "GatherGrad: the gradient is not shaped as Gather's output");
  KEEL_TRY(gather_indices(k, ind, j.dim, (int64_t **)&j.idx));
  KEEL_TRY(keel_k_out(k, 0, gy->dtype, x->rank, x->shape, &j.gx));
  if (j.gx->data) memset(j.gx->data, 0, keel_tensor_nbytes(j.gx));
  if (!keel_tensor_numel(j.gx) || !j.ni) return KEEL_OK;
  int threads = keel_pool_threads(k->pool);
  j.chunks = j.outer >= threads ? 1 : KEEL_MAX(1, KEEL_MIN(threads, j.inner / 64));
  j.chunk = (j.inner + j.chunks - 1) / j.chunks;
  int64_t grain = KEEL_MAX(1, (1 << 14) / KEEL_MAX(1, j.ni * j.chunk));
  return keel_pool_for(k->pool, j.outer * j.chunks, grain, gather_task, &j);
}

/* ========================================================== SliceGrad */

/* One axis of numpy slicing (as ops/shape/shape.c's Slice): first index and
 * count; negative indices count from the end, others are clamped. */
static void slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first,
                       int64_t *len) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  uint64_t astep = step < 0 ? 0 - (uint64_t)step : (uint64_t)step;
  int64_t span;
  if (step > 0) {
    start = KEEL_MAX(0, KEEL_MIN(start, dim));
    end = KEEL_MAX(0, KEEL_MIN(end, dim));
    span = end - start;
  } else {
    start = KEEL_MAX(0, KEEL_MIN(start, dim - 1));
    end = KEEL_MAX(-1, KEEL_MIN(end, dim - 1));
    span = start - end;
  }
  *first = start;
  *len = (dim == 0 || span <= 0) ? 0 : (int64_t)(((uint64_t)span - 1) / astep + 1);
}

typedef struct slice_job {
  const keel_tensor *gy;
  keel_tensor *gx;
  int r;
  int64_t xst[KEEL_MAX_RANK];  /* gx strides times the steps (elements)   */
  int64_t base;                /* gx offset of gy's first element          */
  size_t es;                   /* element bytes                            */
} slice_job;

/* gy rows lo..hi (all axes but the last) written to their places in gx. */
static keel_status slice_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const slice_job *j = ctx;
  int64_t last = j->r ? j->gy->shape[j->r - 1] : 1, ls = j->r ? j->xst[j->r - 1] : 1;
  for (int64_t row = lo; row < hi; row++) {
    int64_t rem = row, off = j->base;
    for (int d = j->r - 2; d >= 0; d--) {
      off += (rem % j->gy->shape[d]) * j->xst[d];
      rem /= j->gy->shape[d];
    }
    const char *src = (const char *)j->gy->data + (size_t)(row * last) * j->es;
    char *dst = (char *)j->gx->data;
    if (ls == 1) memcpy(dst + (size_t)off * j->es, src, (size_t)last * j->es);
    else
      for (int64_t c = 0; c < last; c++)
        memcpy(dst + (size_t)(off + c * ls) * j->es, src + (size_t)c * j->es, j->es);
  }
  return KEEL_OK;
}

/* Where each axis of x starts and steps; gy's shape checked against it. */
static keel_status slice_plan(keel_kctx *k, const keel_tensor *x, const keel_tensor *gy,
                              slice_job *j) {
  int64_t st[KEEL_MAX_RANK], en[KEEL_MAX_RANK], ax[KEEL_MAX_RANK], sp[KEEL_MAX_RANK];
  int ns, ne, na = 0, nsp = 0;
  KEEL_TRY(keel_k_in_ints(k, 2, st, KEEL_MAX_RANK, &ns));
  KEEL_TRY(keel_k_in_ints(k, 3, en, KEEL_MAX_RANK, &ne));
  if (keel_k_has_in(k, 4)) KEEL_TRY(keel_k_in_ints(k, 4, ax, KEEL_MAX_RANK, &na));
  if (keel_k_has_in(k, 5)) KEEL_TRY(keel_k_in_ints(k, 5, sp, KEEL_MAX_RANK, &nsp));
  if (ne != ns || (keel_k_has_in(k, 4) && na != ns) || (keel_k_has_in(k, 5) && nsp != ns))
    return keel_err(KEEL_ERR_SHAPE, "SliceGrad: starts, ends, axes and steps differ in length");
  int64_t first[KEEL_MAX_RANK] = {0}, len[KEEL_MAX_RANK], step[KEEL_MAX_RANK], xs = 1;
  bool seen[KEEL_MAX_RANK] = {0};
  for (int d = 0; d < x->rank; d++) len[d] = x->shape[d], step[d] = 1;
  for (int i = 0; i < ns; i++) {
    int a;
    KEEL_TRY(keel_k_axis(keel_k_has_in(k, 4) ? ax[i] : i, x->rank, "SliceGrad axis", &a));
    if (seen[a]) return keel_err(KEEL_ERR_INVALID_MODEL, "SliceGrad: axis %d is listed twice", a);
    seen[a] = true;
    step[a] = keel_k_has_in(k, 5) ? sp[i] : 1;
    if (!step[a]) return keel_err(KEEL_ERR_RUNTIME, "SliceGrad: step for axis %d is 0", a);
    slice_axis(x->shape[a], st[i], en[i], step[a], &first[a], &len[a]);
  }
  bool fits = gy->rank == x->rank;
  for (int d = 0; fits && d < x->rank; d++) fits = gy->shape[d] == len[d];
  if (!fits) return keel_err(KEEL_ERR_SHAPE, "SliceGrad: the gradient is not shaped as Slice's output");
  j->base = 0;
  for (int d = x->rank - 1; d >= 0; d--) {
    j->xst[d] = xs * step[d];
    j->base += first[d] * xs;
    xs *= x->shape[d];
  }
  j->r = x->rank;
  return KEEL_OK;
}

/* SliceGrad(gy, x, starts, ends[, axes, steps]): zeros shaped as x with gy
 * where Slice took it from. */
static keel_status op_slice_grad(keel_kctx *k) {
  const keel_tensor *gy, *x;
  KEEL_TRY(keel_k_in(k, 0, &gy));
  KEEL_TRY(keel_k_in(k, 1, &x));
  KEEL_TRY(float_tensor(gy, "SliceGrad: the gradient"));
  slice_job j = {.gy = gy, .es = keel_dtype_nbytes((keel_dtype)gy->dtype, 1)};
  KEEL_TRY(slice_plan(k, x, gy, &j));
  KEEL_TRY(keel_k_out(k, 0, gy->dtype, x->rank, x->shape, &j.gx));
  if (j.gx->data) memset(j.gx->data, 0, keel_tensor_nbytes(j.gx));
  int64_t n = keel_tensor_numel(gy);
  if (!n) return KEEL_OK;
  int64_t last = gy->rank ? gy->shape[gy->rank - 1] : 1;
  return keel_pool_for(k->pool, n / last, KEEL_MAX(1, 16384 / last), slice_rows, &j);
}

/* ===================================================== SequenceAtGrad */

static keel_status op_sequence_at_grad(keel_kctx *k) {
  const keel_seq *s;
  const keel_tensor *g;
  int64_t p;
  KEEL_TRY(in_seq(k, 0, &s));
  KEEL_TRY(keel_k_in_scalar_i64(k, 1, &p));
  KEEL_TRY(keel_k_in(k, 2, &g));
  KEEL_TRY(float_tensor(g, "SequenceAtGrad: the gradient"));
  int64_t n = (int64_t)s->n;
  if (p < -n || p >= n)
    return keel_err(KEEL_ERR_RUNTIME, "SequenceAtGrad: position %lld is out of range for %lld elements",
                    (long long)p, (long long)n);
  if (p < 0) p += n;
  if (!same_shape(g, &s->items[p]))
    return keel_err(KEEL_ERR_SHAPE, "SequenceAtGrad: the gradient is not shaped as element %lld",
                    (long long)p);
  keel_seq *o;
  KEEL_TRY(keel_k_out_seq(k, 0, g->dtype, &o));
  for (int64_t i = 0; i < n; i++) {
    keel_tensor t;
    if (i == p) keel_tensor_ref(g, &t);
    else KEEL_TRY(zeros_tensor(k, g->dtype, &s->items[i], &t));
    keel_status st = keel_seq_insert(o, o->n, &t);
    if (st) {
      keel_tensor_release(&t);
      return st;
    }
  }
  return KEEL_OK;
}

/* ============================================= ConcatFromSequenceGrad */

/* gy's expected shape: the concatenation (or stack) of s's elements. */
static keel_status concat_fits(const keel_seq *s, const keel_tensor *gy, int axis, bool new_axis) {
  const keel_tensor *t0 = &s->items[0];
  int64_t along = 0;
  for (size_t i = 0; i < s->n; i++) along += new_axis ? 1 : s->items[i].shape[axis];
  bool ok = gy->rank == t0->rank + (new_axis ? 1 : 0);
  for (int d = 0, e = 0; ok && d < gy->rank; d++) {
    if (d == axis) {
      ok = gy->shape[d] == along;
      if (!new_axis) e++;
      continue;
    }
    ok = gy->shape[d] == t0->shape[e++];
  }
  for (size_t i = 1; ok && i < s->n; i++) ok = s->items[i].rank == t0->rank;
  if (!ok) return keel_err(KEEL_ERR_SHAPE, "ConcatFromSequenceGrad: the gradient does not fit the sequence");
  return KEEL_OK;
}

static keel_status op_concat_from_sequence_grad(keel_kctx *k) {
  const keel_tensor *gy;
  const keel_seq *s;
  KEEL_TRY(keel_k_in(k, 0, &gy));
  KEEL_TRY(in_seq(k, 1, &s));
  KEEL_TRY(float_tensor(gy, "ConcatFromSequenceGrad: the gradient"));
  if (!s->n) return keel_err(KEEL_ERR_RUNTIME, "ConcatFromSequenceGrad of an empty sequence");
  bool new_axis = keel_k_attr_i(k, "new_axis", 0) != 0;
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), s->items[0].rank + (new_axis ? 1 : 0), "axis", &axis));
  KEEL_TRY(concat_fits(s, gy, axis, new_axis));
  int64_t outer = 1, row = 1, at = 0;
  for (int d = 0; d < axis; d++) outer *= gy->shape[d];
  for (int d = axis; d < gy->rank; d++) row *= gy->shape[d];
  keel_seq *o;
  KEEL_TRY(keel_k_out_seq(k, 0, gy->dtype, &o));
  for (size_t i = 0; i < s->n; i++) {
    keel_tensor t;
    KEEL_TRY(keel_tensor_alloc(k->heap, gy->dtype, s->items[i].rank, s->items[i].shape,
                               keel_k_owner(k, 0), &t));
    int64_t run = outer ? keel_tensor_numel(&t) / outer : 0;
    keel_status st = KEEL_OK;
    for (int64_t r = 0; !st && r < outer && run; r++)
      st = keel_tensor_copy_elems(&t, r * run, gy, r * row + at, run);
    if (!st) st = keel_seq_insert(o, o->n, &t);
    if (st) {
      keel_tensor_release(&t);
      return st;
    }
    at += run;
  }
  return KEEL_OK;
}

/* ============================================================== table */

#define D "ai.keel.internal"
const keel_opdef keel_ops_grad_shape[] = {
    {D, "GradAdd", 1, KEEL_OPSET_MAX, op_grad_add, 0, KEEL_TS_FLOAT},
    {D, "GatherGrad", 1, KEEL_OPSET_MAX, op_gather_grad, 0, KEEL_TS_FLOAT},
    {D, "SliceGrad", 1, KEEL_OPSET_MAX, op_slice_grad, 0, KEEL_TS_FLOAT},
    {D, "SequenceAtGrad", 1, KEEL_OPSET_MAX, op_sequence_at_grad, 0, KEEL_TS_FLOAT},
    {D, "ConcatFromSequenceGrad", 1, KEEL_OPSET_MAX, op_concat_from_sequence_grad, 0, KEEL_TS_FLOAT},
    {0},
};
