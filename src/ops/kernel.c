/* kernel.c: the helpers kernels use to read inputs and attributes and to
 * produce outputs (see kernel.h for the contract). */
#include "ops/kernel.h"

/* ============================================================ inputs */

static const char *in_name(const keel_kctx *k, int i) {
  return i < k->node->n_in ? k->node->in_names[i] : "";
}

keel_status keel_k_in_opt(keel_kctx *k, int i, const keel_tensor **t) {
  *t = NULL;
  if (!keel_k_has_in(k, i)) return KEEL_OK;
  const keel_val *v = k->in[i];
  if (v->kind != KEEL_V_TENSOR)
    return keel_err(KEEL_ERR_SHAPE, "input %d '%s' is a %s, expected a tensor", i,
                    in_name(k, i), v->kind == KEEL_V_SEQUENCE ? "sequence" : v->kind == KEEL_V_MAP ? "map" : "empty optional");
  *t = &v->t;
  return KEEL_OK;
}

keel_status keel_k_in(keel_kctx *k, int i, const keel_tensor **t) {
  if (!keel_k_has_in(k, i)) return keel_err(KEEL_ERR_INVALID_MODEL, "input %d is missing", i);
  return keel_k_in_opt(k, i, t);
}

keel_status keel_k_in_ints(keel_kctx *k, int i, int64_t *buf, int cap, int *n) {
  const keel_tensor *t;
  KEEL_TRY(keel_k_in(k, i, &t));
  if (t->dtype != KEEL_INT64 && t->dtype != KEEL_INT32)
    return keel_err(KEEL_ERR_SHAPE, "input %d '%s' must be int32 or int64, got %s", i,
                    in_name(k, i), keel_dtype_name((keel_dtype)t->dtype));
  if (t->rank > 1)
    return keel_err(KEEL_ERR_SHAPE, "input %d '%s' must be a 1-D list, got rank %d", i,
                    in_name(k, i), t->rank);
  int64_t cnt = keel_tensor_numel(t);
  if (cnt > cap)
    return keel_err(KEEL_ERR_SHAPE, "input %d '%s' has %lld values, at most %d allowed", i,
                    in_name(k, i), (long long)cnt, cap);
  for (int64_t j = 0; j < cnt; j++) buf[j] = keel_elem_get_i64(t->dtype, t->data, (size_t)j);
  *n = (int)cnt;
  return KEEL_OK;
}

static keel_status scalar(keel_kctx *k, int i, const keel_tensor **t) {
  KEEL_TRY(keel_k_in(k, i, t));
  if (keel_tensor_numel(*t) != 1)
    return keel_err(KEEL_ERR_SHAPE, "input %d '%s' must hold one value, it holds %lld", i,
                    in_name(k, i), (long long)keel_tensor_numel(*t));
  if ((*t)->dtype == KEEL_STRING)
    return keel_err(KEEL_ERR_SHAPE, "input %d '%s' must be numeric", i, in_name(k, i));
  return KEEL_OK;
}

keel_status keel_k_in_scalar_i64(keel_kctx *k, int i, int64_t *v) {
  const keel_tensor *t;
  KEEL_TRY(scalar(k, i, &t));
  *v = keel_elem_get_i64(t->dtype, t->data, 0);
  return KEEL_OK;
}

keel_status keel_k_in_scalar_f64(keel_kctx *k, int i, double *v) {
  const keel_tensor *t;
  KEEL_TRY(scalar(k, i, &t));
  *v = keel_elem_get_f64(t->dtype, t->data, 0);
  return KEEL_OK;
}

bool keel_k_can_reuse(const keel_kctx *k, int i) {
  if (i >= 64 || !((k->node->last_use >> i) & 1) || !keel_k_has_in(k, i)) return false;
  const keel_val *v = k->in[i];
  return v->kind == KEEL_V_TENSOR && keel_buffer_exclusive(v->t.buf) &&
         v->t.dtype != KEEL_STRING;
}

/* =========================================================== outputs */

/* Output targets exist up to max(n_out, KEEL_K_MIN_OUTS). */
static keel_status out_index(const keel_kctx *k, int i) {
  if (i < 0 || i >= KEEL_MAX(k->n_out, KEEL_K_MIN_OUTS))
    return keel_err(KEEL_ERR_INTERNAL, "kernel wrote output %d of %d", i, k->n_out);
  return KEEL_OK;
}

/* The narrow types (float8, float4, int4, int2; numbered after bfloat16)
 * reach only kernels whose row lists them: others would misread them (a
 * packed tensor has no byte stride per element). */
static keel_status refuse_type(const keel_node *n, const char *what, int i, int dtype) {
  return keel_err(KEEL_ERR_UNSUPPORTED, "%s %d is %s: op %s (domain %s, opset %lld) does not support "
                  "that element type", what, i, keel_dtype_name((keel_dtype)dtype), n->op_type,
                  n->domain[0] ? n->domain : "ai.onnx", (long long)n->opset);
}

static bool type_ok(const keel_node *n, int dtype) {
  return dtype <= KEEL_BFLOAT16 || !n->op || (n->op->types & KEEL_T(dtype)) != 0;
}

keel_status keel_k_check_in_types(const keel_node *n, const keel_val *const *in, int n_in) {
  for (int i = 0; i < n_in; i++)
    if (in[i] && in[i]->kind == KEEL_V_TENSOR && KEEL_UNLIKELY(!type_ok(n, in[i]->t.dtype)))
      return refuse_type(n, "input", i, in[i]->t.dtype);
  return KEEL_OK;
}

keel_status keel_k_out(keel_kctx *k, int i, int dtype, int rank, const int64_t *shape,
                       keel_tensor **t) {
  KEEL_TRY(out_index(k, i));
  if (KEEL_UNLIKELY(!type_ok(k->node, dtype))) return refuse_type(k->node, "output", i, dtype);
  keel_val *v = k->out[i];
  keel_assert(v->kind == KEEL_V_EMPTY);
  KEEL_TRY(keel_tensor_alloc(k->heap, dtype, rank, shape, keel_k_owner(k, i), &v->t));
  v->kind = KEEL_V_TENSOR;
  *t = &v->t;
  return KEEL_OK;
}

keel_status keel_k_view(keel_kctx *k, int i, const keel_tensor *src, int rank,
                        const int64_t *shape) {
  KEEL_TRY(out_index(k, i));
  int64_t numel; /* checked like an allocation: an empty view may still not overflow */
  KEEL_TRY(keel_shape_check(src->dtype, rank, shape, &numel));
  if (numel != keel_tensor_numel(src))
    return keel_err(KEEL_ERR_INTERNAL, "view changes the element count");
  keel_val *v = k->out[i];
  keel_tensor_view(src, rank, shape, &v->t);
  v->kind = KEEL_V_TENSOR;
  return KEEL_OK;
}

keel_status keel_k_reuse(keel_kctx *k, int i, int in_i, int dtype, int rank,
                         const int64_t *shape, keel_tensor **t) {
  KEEL_TRY(out_index(k, i));
  if (keel_k_can_reuse(k, in_i)) {
    const keel_tensor *src = &k->in[in_i]->t;
    int64_t numel;
    KEEL_TRY(keel_shape_check(dtype, rank, shape, &numel));
    bool packed = keel_dtype_is_packed(dtype) || keel_dtype_is_packed(src->dtype);
    if ((!packed || keel_dtype_bits((keel_dtype)dtype) == keel_dtype_bits((keel_dtype)src->dtype)) &&
        keel_dtype_nbytes((keel_dtype)dtype, numel) == keel_tensor_nbytes(src) && numel > 0) {
      keel_val *v = k->out[i];
      keel_tensor_view(src, rank, shape, &v->t);
      v->t.dtype = dtype;
      v->kind = KEEL_V_TENSOR;
      if (k->owner.site) /* it holds output i now */
        keel_heap_retag(src->buf->block, keel_k_owner(k, i));
      *t = &v->t;
      return KEEL_OK;
    }
  }
  return keel_k_out(k, i, dtype, rank, shape, t);
}

keel_status keel_k_out_ref(keel_kctx *k, int i, const keel_val *v) {
  KEEL_TRY(out_index(k, i));
  keel_val_ref(k->out[i], v);
  return KEEL_OK;
}

keel_status keel_k_out_seq(keel_kctx *k, int i, int elem_dtype, keel_seq **s) {
  KEEL_TRY(out_index(k, i));
  keel_val *v = k->out[i];
  KEEL_TRY(keel_seq_new(k->heap, elem_dtype, 0, &v->seq));
  v->kind = KEEL_V_SEQUENCE;
  *s = v->seq;
  return KEEL_OK;
}

keel_status keel_k_scratch(keel_kctx *k, size_t bytes, void **p) {
  if (k->n_scratch == KEEL_K_MAX_SCRATCH)
    return keel_err(KEEL_ERR_INTERNAL, "kernel asked for more than %d scratch buffers",
                    KEEL_K_MAX_SCRATCH);
  keel_owner o = k->owner;
  keel_block *b = keel_heap_alloc(k->heap, bytes ? bytes : 1, o);
  if (!b) {
    keel_oom_info i = keel_heap_oom_info(k->heap);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY,
                    "cannot allocate %zu bytes of scratch (allocated %llu, reserved %llu%s)",
                    bytes, (unsigned long long)i.allocated, (unsigned long long)i.reserved,
                    i.by_cap ? ", cap reached" : "");
  }
  k->scratch[k->n_scratch++] = b;
  *p = b->ptr;
  return KEEL_OK;
}

/* ======================================================== attributes */

const keel_attr *keel_k_attr(const keel_kctx *k, const char *name) {
  return keel_node_attr(k->node, name);
}

int64_t keel_k_attr_i(const keel_kctx *k, const char *name, int64_t def) {
  const keel_attr *a = keel_node_attr(k->node, name);
  if (!a) return def;
  if (a->type == KEEL_ATTR_FLOAT) { /* saturating: a cast of NaN or a huge float is UB */
    float f = a->f;
    if (!(f == f)) return 0;
    if (f >= 9.2e18f) return INT64_MAX;
    if (f <= -9.2e18f) return INT64_MIN;
    return (int64_t)f;
  }
  return a->i;
}

float keel_k_attr_f(const keel_kctx *k, const char *name, float def) {
  const keel_attr *a = keel_node_attr(k->node, name);
  if (!a) return def;
  if (a->type == KEEL_ATTR_INT) return (float)a->i;
  return a->f;
}

const char *keel_k_attr_s(const keel_kctx *k, const char *name, const char *def) {
  const keel_attr *a = keel_node_attr(k->node, name);
  return a && a->s ? a->s : def;
}

const int64_t *keel_k_attr_ints(const keel_kctx *k, const char *name, int *n) {
  const keel_attr *a = keel_node_attr(k->node, name);
  if (!a || a->type != KEEL_ATTR_INTS) {
    *n = 0;
    return NULL;
  }
  *n = a->n;
  return a->ints;
}

const float *keel_k_attr_floats(const keel_kctx *k, const char *name, int *n) {
  const keel_attr *a = keel_node_attr(k->node, name);
  if (!a || a->type != KEEL_ATTR_FLOATS) {
    *n = 0;
    return NULL;
  }
  *n = a->n;
  return a->floats;
}

/* ========================================================= utilities */

keel_status keel_k_axis(int64_t axis, int rank, const char *what, int *out) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank || (rank == 0 && axis != 0))
    return keel_err(KEEL_ERR_SHAPE, "%s %lld is out of range for rank %d", what,
                    (long long)axis, rank);
  *out = (int)a;
  return KEEL_OK;
}

keel_status keel_broadcast_shape(int ra, const int64_t *a, int rb, const int64_t *b,
                                 int *rout, int64_t *out) {
  int r = KEEL_MAX(ra, rb);
  for (int i = 0; i < r; i++) {
    int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
    int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
    if (da != db && da != 1 && db != 1) {
      char sa[128], sb[128];
      return keel_err(KEEL_ERR_SHAPE, "shapes %s and %s do not broadcast",
                      keel_shape_str(ra, a, sa, sizeof sa), keel_shape_str(rb, b, sb, sizeof sb));
    }
    out[i] = da == 1 ? db : da;
  }
  *rout = r;
  return KEEL_OK;
}

void keel_broadcast_strides(int r, const int64_t *shape, int rout, const int64_t *out,
                            int64_t *strides) {
  int64_t s = 1;
  for (int i = rout - 1; i >= 0; i--) {
    int j = i - (rout - r);
    if (j < 0) {
      strides[i] = 0;
      continue;
    }
    strides[i] = (shape[j] == 1 && out[i] != 1) ? 0 : s;
    s *= shape[j];
  }
}

/* ================================================= prepared state */

/* Every block of prepared state: `bytes` after a one-cache-line header
 * that keeps the block, so the state pointer alone releases it. */
static keel_status prep_block(keel_heap *h, keel_owner owner, size_t bytes, void **state) {
  keel_block *b = keel_heap_alloc_kept(h, bytes + KEEL_ALIGN, owner);
  if (!b) {
    keel_oom_info o = keel_heap_oom_info(h);
    return keel_err(KEEL_ERR_OUT_OF_MEMORY,
                    "cannot allocate %zu bytes of prepared state (allocated %llu, reserved %llu%s)",
                    bytes, (unsigned long long)o.allocated, (unsigned long long)o.reserved,
                    o.by_cap ? ", the cap is reached" : "");
  }
  memcpy(b->ptr, &b, sizeof b);
  *state = b->ptr + KEEL_ALIGN;
  return KEEL_OK;
}

static keel_block *prep_block_of(void *state) {
  keel_block *b;
  memcpy(&b, (uint8_t *)state - KEEL_ALIGN, sizeof b);
  return b;
}

keel_status keel_prep_alloc(const keel_prep_ctx *p, size_t bytes, void **state) {
  KEEL_TRY(prep_block(p->heap, p->owner, bytes, state));
  atomic_fetch_add(p->bytes, prep_block_of(*state)->size);
  return KEEL_OK;
}

keel_status keel_prep_alloc_counted(keel_heap *heap, keel_owner owner, _Atomic uint64_t *counter,
                                    size_t bytes, void **state) {
  KEEL_TRY(prep_block(heap, owner, bytes, state));
  atomic_fetch_add(counter, prep_block_of(*state)->size);
  return KEEL_OK;
}

void keel_prep_free_counted(void *state, keel_heap *heap, _Atomic uint64_t *counter) {
  if (!state) return;
  keel_block *b = prep_block_of(state);
  atomic_fetch_sub(counter, b->size);
  keel_heap_free(heap, b);
}

keel_status keel_k_prep_block(keel_kctx *k, size_t bytes, void **state) {
  return prep_block(k->heap, k->owner, bytes, state);
}

keel_status keel_prep_from_attrs(const keel_prep_ctx *p, keel_prepare_fn fn, void **state) {
  keel_kctx k = {.node = p->node, .heap = p->heap, .owner = p->owner};
  size_t bytes = 0;
  void *st = NULL;
  keel_status s = fn(&k, &st, &bytes);
  for (int32_t j = 0; j < k.n_scratch; j++) keel_heap_free(p->heap, k.scratch[j]);
  if (s) return s;
  if (st) atomic_fetch_add(p->bytes, prep_block_of(st)->size);
  *state = st;
  return KEEL_OK;
}

void keel_prep_block_release(void *state, keel_heap *heap) {
  if (state) keel_heap_free(heap, prep_block_of(state));
}

bool keel_prep_always(const keel_prep_ctx *p) {
  (void)p;
  return true;
}

bool keel_prep_never(const keel_prep_ctx *p) {
  (void)p;
  return false;
}

bool keel_prep_on_gpu(const keel_prep_ctx *p) { return p->node->device == KEEL_NODE_GPU; }

keel_status keel_k_in_f32(keel_kctx *k, int i, bool optional, const keel_tensor **t) {
  KEEL_TRY(optional ? keel_k_in_opt(k, i, t) : keel_k_in(k, i, t));
  if (*t && (*t)->dtype != KEEL_FLOAT)
    return keel_err(KEEL_ERR_SHAPE, "GPU kernel: input %d is %s, the placement expected float32", i,
                    keel_dtype_name((keel_dtype)(*t)->dtype));
  return KEEL_OK;
}
