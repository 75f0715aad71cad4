/* shape.c: the ops that move, copy or describe elements without doing
 * arithmetic on them: Reshape, Flatten, Squeeze, Unsqueeze and Identity
 * (zero-copy: a view or a new reference), Transpose, DepthToSpace,
 * SpaceToDepth, Concat, Split, Slice, CenterCropPad, Expand, Tile, Pad, Trilu and
 * ReverseSequence (copies). Shape, Size, ConstantOfShape, Range and EyeLike
 * (new data from shapes and scalars) are in shape_gen.c.
 *
 * Almost every copy here is an affine map from output index to input
 * index, so one engine (sh_copy) does them all: a plan lists the
 * iteration dims with a source and a destination stride for each, the
 * engine drops size-1 dims, merges dims that are contiguous in both, and
 * copies the innermost dim as one run (memcpy when dense). Transpose is a
 * permutation of the strides (but a view when only size-1 dims move, and
 * tiled kernels when it simplifies to a batched 2-D transpose, such as
 * NCHW <-> NHWC), Slice scales them by the steps, Tile
 * interleaves a stride-0 "repeat" dim before every axis, Concat and Split
 * offset one side. Pad's edge/reflect/wrap modes are not affine: they go
 * through per-axis index tables instead.
 *
 * Kernels never look at element values, only at element sizes, so every
 * dtype works, float16/bfloat16 and bool included. STRING elements own
 * their bytes: they are copied with keel_tensor_set_string, never by
 * memcpy of the keel_string struct. Static helpers carry an sh_ prefix so
 * a single-TU build (all sources in one file) cannot collide with other families.
 */
#include <math.h>

#include "base/pool.h"
#include "device/dev_move.h"
#include "ops/common/bcast.h"
#include "ops/common/transpose.h"
#include "ops/shape/shape_gpu.h"

/* Iteration dims of a copy plan: Tile needs two per axis. */
#define SH_XMAX (2 * KEEL_MAX_RANK)

/* ===================================================== copy engine */

/* dims[i] with element strides ss[i] (source) and ds[i] (destination). */
typedef struct sh_plan {
  int r;
  int64_t dims[SH_XMAX];
  int64_t ss[SH_XMAX], ds[SH_XMAX];
} sh_plan;

/* Row-major strides (in elements) of a dense tensor of this shape. */
static void sh_strides(int r, const int64_t *shape, int64_t *st) {
  int64_t s = 1;
  for (int i = r - 1; i >= 0; i--) {
    st[i] = s;
    s *= shape[i];
  }
}

/* Drops size-1 dims (their strides never move) and merges a dim into the
 * previous one when both sides are contiguous across the pair, so dense
 * copies become a single memcpy. */
static void sh_plan_simplify(sh_plan *p) {
  int r = 0;
  for (int i = 0; i < p->r; i++) {
    if (p->dims[i] == 1) continue;
    if (r > 0 && p->ss[r - 1] == p->ss[i] * p->dims[i] &&
        p->ds[r - 1] == p->ds[i] * p->dims[i]) {
      p->dims[r - 1] *= p->dims[i];
      p->ss[r - 1] = p->ss[i];
      p->ds[r - 1] = p->ds[i];
      continue;
    }
    p->dims[r] = p->dims[i];
    p->ss[r] = p->ss[i];
    p->ds[r] = p->ds[i];
    r++;
  }
  if (r == 0) { /* a single element */
    p->dims[0] = 1;
    p->ss[0] = p->ds[0] = 1;
    r = 1;
  }
  p->r = r;
}

#define SH_STRIDED(T)                                                   \
  do {                                                                  \
    T *dd = (T *)(void *)d;                                             \
    const T *s = (const T *)(const void *)sp;                           \
    for (int64_t i = 0; i < n; i++) dd[i * ds] = s[i * ss];             \
  } while (0)

/* n elements: dst[di + i*ds] = src[si + i*ss]. */
static keel_status sh_run(keel_tensor *dst, int64_t di, int64_t ds, const keel_tensor *src,
                          int64_t si, int64_t ss, int64_t n) {
  if (src->dtype == KEEL_STRING) {
    const keel_string *s = src->data;
    for (int64_t i = 0; i < n; i++) {
      const keel_string *e = &s[si + i * ss];
      KEEL_TRY(keel_tensor_set_string(dst, (size_t)(di + i * ds), e->data, e->len));
    }
    return KEEL_OK;
  }
  if (keel_dtype_is_packed(src->dtype)) { /* 4- and 2-bit codes, one at a time */
    for (int64_t i = 0; i < n; i++)
      keel_small_put(src->dtype, dst->data, (size_t)(di + i * ds),
                     keel_small_get(src->dtype, src->data, (size_t)(si + i * ss)));
    return KEEL_OK;
  }
  size_t es = keel_dtype_size((keel_dtype)src->dtype);
  uint8_t *d = (uint8_t *)dst->data + (size_t)di * es;
  const uint8_t *sp = (const uint8_t *)src->data + (size_t)si * es;
  if (ds == 1 && ss == 1) {
    memcpy(d, sp, (size_t)n * es);
    return KEEL_OK;
  }
  switch (es) { /* typed loops: a memcpy call per element is slow */
    case 1: SH_STRIDED(uint8_t); break;
    case 2: SH_STRIDED(uint16_t); break;
    case 4: SH_STRIDED(uint32_t); break;
    case 8: SH_STRIDED(uint64_t); break;
    default:
      for (int64_t i = 0; i < n; i++)
        memcpy(d + (size_t)(i * ds) * es, sp + (size_t)(i * ss) * es, es);
  }
  return KEEL_OK;
}

/* Copies along plan p, starting at element soff of src and doff of dst.
 * src and dst have the same dtype; the caller made the plan fit both. */
static keel_status sh_copy(keel_tensor *dst, int64_t doff, const keel_tensor *src,
                           int64_t soff, const sh_plan *p0) {
  sh_plan p = *p0;
  int64_t total = 1;
  for (int i = 0; i < p.r; i++) total *= p.dims[i];
  if (total == 0) return KEEL_OK;
  sh_plan_simplify(&p);
  int last = p.r - 1;
  int64_t n = p.dims[last], idx[SH_XMAX] = {0}, so = soff, dof = doff;
  for (int64_t done = 0; done < total; done += n) {
    KEEL_TRY(sh_run(dst, dof, p.ds[last], src, so, p.ss[last], n));
    for (int d = last - 1; d >= 0; d--) { /* odometer over the outer dims */
      so += p.ss[d];
      dof += p.ds[d];
      if (++idx[d] < p.dims[d]) break;
      so -= p.ss[d] * p.dims[d];
      dof -= p.ds[d] * p.dims[d];
      idx[d] = 0;
    }
  }
  return KEEL_OK;
}

/* A plan over `shape` that reads src with strides `ss` and writes a dense
 * destination of the same shape. */
static void sh_plan_dense(sh_plan *p, int r, const int64_t *shape, const int64_t *ss) {
  p->r = r;
  memcpy(p->dims, shape, sizeof(int64_t) * (size_t)r);
  memcpy(p->ss, ss, sizeof(int64_t) * (size_t)r);
  sh_strides(r, shape, p->ds);
}

/* ============================================== small shared helpers */

static const char *sh_str(int r, const int64_t *shape, char *buf, size_t cap) {
  return keel_shape_str(r, shape, buf, cap);
}

/* Product of shape[from..to) with overflow check. */
static keel_status sh_prod(const int64_t *shape, int from, int to, int64_t *out) {
  int64_t n = 1;
  for (int i = from; i < to; i++)
    if (keel_mul64_ovf(n, shape[i], &n))
      return keel_err(KEEL_ERR_SHAPE, "dimension product overflows");
  *out = n;
  return KEEL_OK;
}

/* An INTS attribute copied into buf (cap entries); *present says whether
 * the attribute exists. */
static keel_status sh_attr_ints(keel_kctx *k, const char *name, int64_t *buf, int cap,
                                int *n, bool *present) {
  const int64_t *v = keel_k_attr_ints(k, name, n);
  *present = keel_k_attr(k, name) != NULL;
  if (*n > cap)
    return keel_err(KEEL_ERR_INVALID_MODEL, "attribute '%s' has %d values, at most %d allowed",
                    name, *n, cap);
  if (*n) memcpy(buf, v, sizeof(int64_t) * (size_t)*n);
  return KEEL_OK;
}

/* An optional int list input: *present is false when it was omitted. */
static keel_status sh_in_ints_opt(keel_kctx *k, int i, int64_t *buf, int cap, int *n,
                                  bool *present) {
  *n = 0;
  *present = keel_k_has_in(k, i);
  return *present ? keel_k_in_ints(k, i, buf, cap, n) : KEEL_OK;
}

/* An axes list (attribute before opset `since`, input `in_i` from it). */
static keel_status sh_axes(keel_kctx *k, int64_t since, int in_i, int64_t *buf, int cap,
                           int *n, bool *present) {
  if (keel_k_opset(k) < since) return sh_attr_ints(k, "axes", buf, cap, n, present);
  return sh_in_ints_opt(k, in_i, buf, cap, n, present);
}

/* Normalizes a list of axes against `rank` into mark[] (true = listed);
 * a repeated axis is an error. */
static keel_status sh_mark_axes(const int64_t *axes, int n, int rank, const char *op,
                                bool *mark) {
  memset(mark, 0, sizeof(bool) * (size_t)(rank > 0 ? rank : 1));
  for (int i = 0; i < n; i++) {
    int a;
    KEEL_TRY(keel_k_axis(axes[i], rank, "axis", &a));
    if (mark[a])
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: axis %lld is listed twice", op,
                      (long long)axes[i]);
    mark[a] = true;
  }
  return KEEL_OK;
}

/* ================================================ on a device */

/* The device the node runs on, when it runs on one: its tensors (but the
 * inputs it reads on the host, passes/place.h) are then device memory,
 * which the copies below move with the device's strided copy
 * (device/dev_move.h) and the host never reads. NULL on the host, and for
 * a placed graph run on the host (KEEL_OPT_PLAN_ONLY). */
static keel_device *sh_dev(const keel_kctx *k) {
  return k->dev && k->node->device == KEEL_NODE_GPU ? k->dev : NULL;
}

/* sh_copy for node k: on its device when it has one. The plan, simplified,
 * has the rank of the tensors or less (Tile's doubled dims are not
 * placed). */
static keel_status sh_copy_k(keel_kctx *k, keel_tensor *dst, int64_t doff, const keel_tensor *src,
                             int64_t soff, const sh_plan *p0) {
  keel_device *d = sh_dev(k);
  if (!d) return sh_copy(dst, doff, src, soff, p0);
  sh_plan p = *p0;
  int64_t total = 1;
  for (int i = 0; i < p.r; i++) total *= p.dims[i];
  if (total == 0) return KEEL_OK;
  sh_plan_simplify(&p);
  size_t es = keel_dtype_size((keel_dtype)src->dtype);
  if (src->dtype == KEEL_STRING || keel_dtype_is_packed(src->dtype) || p.r > KEEL_DEV_MAX_RANK ||
      !d->move)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s on %s: %s elements, a copy of rank %d", k->node->op_type,
                    d->name, keel_dtype_name((keel_dtype)src->dtype), p.r);
  return d->move->copy(d, es, p.r, p.dims, (const char *)src->data + (size_t)soff * es, p.ss,
                       (char *)dst->data + (size_t)doff * es, p.ds);
}

/* ================================================ views: Reshape ... */

/* Resolves a Reshape target: 0 copies the input dim (unless allowzero),
 * one -1 takes what is left. */
static keel_status sh_reshape_dims(const keel_tensor *x, const int64_t *want, int n,
                                   bool allowzero, int64_t *out) {
  char a[160], b[160];
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < n; i++) {
    int64_t v = want[i];
    if (v == 0 && !allowzero) {
      if (i >= x->rank)
        return keel_err(KEEL_ERR_SHAPE, "Reshape: shape %s copies dim %d (0) but input has rank %d",
                        sh_str(n, want, a, sizeof a), i, x->rank);
      v = x->shape[i];
    } else if (v == -1) {
      if (infer >= 0)
        return keel_err(KEEL_ERR_SHAPE, "Reshape: shape %s has more than one -1",
                        sh_str(n, want, a, sizeof a));
      infer = i;
      continue;
    } else if (v < 0) {
      return keel_err(KEEL_ERR_SHAPE, "Reshape: shape %s has a negative dim %lld",
                      sh_str(n, want, a, sizeof a), (long long)v);
    }
    if (keel_mul64_ovf(known, v, &known))
      return keel_err(KEEL_ERR_SHAPE, "Reshape: shape %s overflows", sh_str(n, want, a, sizeof a));
    out[i] = v;
  }
  int64_t numel = keel_tensor_numel(x);
  if (infer >= 0 && known != 0 && numel % known == 0) out[infer] = numel / known;
  else if (infer >= 0 || known != numel)
    return keel_err(KEEL_ERR_SHAPE, "Reshape: cannot reshape %lld elements %s into %s",
                    (long long)numel, sh_str(x->rank, x->shape, b, sizeof b),
                    sh_str(n, want, a, sizeof a));
  return KEEL_OK;
}

static keel_status op_reshape(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t want[KEEL_MAX_RANK], out[KEEL_MAX_RANK];
  int n;
  if (keel_k_opset(k) < 5) { /* shape was an attribute until opset 5 */
    bool present;
    KEEL_TRY(sh_attr_ints(k, "shape", want, KEEL_MAX_RANK, &n, &present));
    if (!present) return keel_err(KEEL_ERR_INVALID_MODEL, "Reshape: attribute 'shape' is missing");
  } else {
    KEEL_TRY(keel_k_in_ints(k, 1, want, KEEL_MAX_RANK, &n));
  }
  bool allowzero = keel_k_opset(k) >= 14 && keel_k_attr_i(k, "allowzero", 0) != 0;
  KEEL_TRY(sh_reshape_dims(x, want, n, allowzero, out));
  return keel_k_view(k, 0, x, n, out);
}

static keel_status op_flatten(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t axis = keel_k_attr_i(k, "axis", 1);
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis > x->rank)
    return keel_err(KEEL_ERR_SHAPE, "Flatten: axis %lld is out of range for rank %d",
                    (long long)keel_k_attr_i(k, "axis", 1), x->rank);
  int64_t out[2];
  KEEL_TRY(sh_prod(x->shape, 0, (int)axis, &out[0]));
  KEEL_TRY(sh_prod(x->shape, (int)axis, x->rank, &out[1]));
  return keel_k_view(k, 0, x, 2, out);
}

static keel_status op_squeeze(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t axes[KEEL_MAX_RANK], out[KEEL_MAX_RANK];
  int n, r = 0;
  bool present, mark[KEEL_MAX_RANK];
  KEEL_TRY(sh_axes(k, 13, 1, axes, KEEL_MAX_RANK, &n, &present));
  KEEL_TRY(sh_mark_axes(axes, n, x->rank, "Squeeze", mark));
  for (int i = 0; i < x->rank; i++) {
    bool drop = n ? mark[i] : x->shape[i] == 1; /* no axes: every 1 goes */
    if (drop && x->shape[i] != 1) {
      char a[160];
      return keel_err(KEEL_ERR_SHAPE, "Squeeze: axis %d of shape %s is %lld, not 1", i,
                      sh_str(x->rank, x->shape, a, sizeof a), (long long)x->shape[i]);
    }
    if (!drop) out[r++] = x->shape[i];
  }
  return keel_k_view(k, 0, x, r, out);
}

static keel_status op_unsqueeze(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t axes[KEEL_MAX_RANK], out[KEEL_MAX_RANK];
  int n;
  bool present, mark[KEEL_MAX_RANK];
  KEEL_TRY(sh_axes(k, 13, 1, axes, KEEL_MAX_RANK, &n, &present));
  if (!present) return keel_err(KEEL_ERR_INVALID_MODEL, "Unsqueeze: axes are missing");
  int r = x->rank + n;
  if (r > KEEL_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "Unsqueeze: output rank %d is above keel's limit of %d",
                    r, KEEL_MAX_RANK);
  KEEL_TRY(sh_mark_axes(axes, n, r, "Unsqueeze", mark));
  for (int i = 0, j = 0; i < r; i++) out[i] = mark[i] ? 1 : x->shape[j++];
  return keel_k_view(k, 0, x, r, out);
}

/* Identity passes any value through (tensor; sequence from opset 14,
 * optional from 16) as a new reference: no bytes move. */
static keel_status op_identity(keel_kctx *k) {
  if (!keel_k_has_in(k, 0)) return keel_err(KEEL_ERR_INVALID_MODEL, "%s: input is missing", k->node->op_type);
  return keel_k_out_ref(k, 0, k->in[0]);
}

/* ===================================================== reordering */

/* ------------------------------------------- Transpose: tiled kernels
 *
 * Transpose plans that simplify (sh_plan_simplify) to a batched 2-D
 * transpose, src [B][R][C] -> dst [B][C][R] of elements of 1, 2, 4 or 8
 * bytes, skip the copy engine: the matrix is cut into blocks of about 64
 * KB, the blocks are split across the session's pool, and each block goes
 * in square tiles (8x8 of 4-byte elements with AVX2, 4x4 with SSE2, 8x8
 * plain loops else) with scalar loops for the edges. The tiles walk along
 * the rows of whichever side has the longer rows (8 of them open at a
 * time): many open rows a power-of-two-ish stride apart would fight over
 * the same cache sets. NCHW <-> NHWC is [C][HW] <-> [HW][C] per image; a
 * thin side (C of 2 to 4) has its own loops that stream whole lines. */

/* The block kernels are ops/common/transpose.c's (keel_tr_pick). */
typedef keel_tr_fn sh_tr_fn;
#define sh_tr_pick keel_tr_pick

typedef struct sh_tr_job {
  const uint8_t *src;
  uint8_t *dst;
  int64_t R, C, br, bc, nrb, ncb; /* block rows, columns; blocks per side */
  size_t es;
  sh_tr_fn fn;
} sh_tr_job;

static keel_status sh_tr_blocks(void *ctx, int64_t begin, int64_t end, int worker) {
  const sh_tr_job *j = ctx;
  int64_t per = j->nrb * j->ncb;
  size_t mat = (size_t)(j->R * j->C) * j->es;
  for (int64_t i = begin; i < end; i++) {
    int64_t b = i / per, rb = i % per / j->ncb, cb = i % j->ncb;
    int64_t r0 = rb * j->br, c0 = cb * j->bc;
    j->fn(j->src + (size_t)b * mat, j->dst + (size_t)b * mat, j->R, j->C, r0,
          KEEL_MIN(r0 + j->br, j->R), c0, KEEL_MIN(c0 + j->bc, j->C));
  }
  return KEEL_OK;
}

/* dst [B][C][R] = src [B][R][C] transposed per batch, es-byte elements. */
static keel_status sh_transpose_2d(keel_kctx *k, const void *src, void *dst, int64_t B,
                                   int64_t R, int64_t C, size_t es) {
  sh_tr_job j = {.src = src, .dst = dst, .R = R, .C = C, .es = es};
  j.fn = sh_tr_pick(es);
  /* blocks of 256 x 64 elements, the 256 along the rows the tiles walk;
   * a side shorter than its share goes whole and the other side grows
   * to keep the block near 64 KB */
  int64_t want = (int64_t)(65536 / es);
  j.br = R >= C ? 256 : 64;
  j.bc = R >= C ? 64 : 256;
  if (R < j.br) j.br = R, j.bc = KEEL_MAX(j.bc, (want / R + 7) / 8 * 8);
  if (C < j.bc) j.bc = C, j.br = KEEL_MAX(j.br, (want / C + 7) / 8 * 8);
  j.br = KEEL_MIN(j.br, R);
  j.bc = KEEL_MIN(j.bc, C);
  j.nrb = (R + j.br - 1) / j.br;
  j.ncb = (C + j.bc - 1) / j.bc;
  /* a block is read and written once */
  int64_t grain = keel_pool_grain(2.0 * (double)(j.br * j.bc) * (double)es, 0);
  return keel_pool_for(k->pool, B * j.nrb * j.ncb, grain, sh_tr_blocks, &j);
}

/* When plan p (simplified) is a batched 2-D transpose of es-byte elements,
 * or of runs of E of them that stay together (p's last dim, dense on both
 * sides: the element is then E * es bytes), gives its figures and returns
 * true when that element has 1, 2, 4 or 8 bytes. */
static bool sh_tr_batched(const sh_plan *p, size_t es, int64_t *B, int64_t *R, int64_t *C,
                          size_t *ees) {
  int m = p->r;
  int64_t E = 1;
  if (m >= 2 && p->ss[m - 1] == 1 && p->ds[m - 1] == 1) E = p->dims[--m];
  if (m == 2 && p->ss[0] == E && p->ss[1] == p->dims[0] * E) {
    *B = 1, *C = p->dims[0], *R = p->dims[1];
  } else if (m == 3 && p->ss[1] == E && p->ss[2] == p->dims[1] * E &&
             p->ss[0] == p->dims[1] * p->dims[2] * E) {
    *B = p->dims[0], *C = p->dims[1], *R = p->dims[2];
  } else {
    return false;
  }
  *ees = es * (size_t)E;
  return *ees == 1 || *ees == 2 || *ees == 4 || *ees == 8;
}

static keel_status op_transpose(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int r = x->rank, n;
  int64_t perm[KEEL_MAX_RANK], xs[KEEL_MAX_RANK], shape[KEEL_MAX_RANK];
  bool present, seen[KEEL_MAX_RANK] = {0};
  KEEL_TRY(sh_attr_ints(k, "perm", perm, KEEL_MAX_RANK, &n, &present));
  if (!present) /* default: reverse the dims */
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  else if (n != r)
    return keel_err(KEEL_ERR_SHAPE, "Transpose: perm has %d entries for an input of rank %d", n, r);
  for (int i = 0; i < r; i++) {
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]])
      return keel_err(KEEL_ERR_INVALID_MODEL, "Transpose: perm is not a permutation of 0..%d",
                      r - 1);
    seen[perm[i]] = true;
  }
  sh_strides(r, x->shape, xs);
  sh_plan p = {.r = r};
  for (int i = 0; i < r; i++) {
    shape[i] = p.dims[i] = x->shape[perm[i]];
    p.ss[i] = xs[perm[i]];
  }
  sh_strides(r, shape, p.ds);
  sh_plan q = p;
  sh_plan_simplify(&q);
  int64_t numel = keel_tensor_numel(x), B, R, C;
  /* only size-1 dims move: the same elements in the same order */
  if (q.r == 1 && numel > 0) return keel_k_view(k, 0, x, r, shape);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, shape, &o));
  size_t es = keel_dtype_size((keel_dtype)x->dtype), ees;
  if (numel > 0 && x->dtype != KEEL_STRING && !keel_dtype_is_packed(x->dtype) && !sh_dev(k) &&
      sh_tr_batched(&q, es, &B, &R, &C, &ees) && (uintptr_t)x->data % ees == 0)
    return sh_transpose_2d(k, x->data, o->data, B, R, C, ees);
  return sh_copy_k(k, o, 0, x, 0, &p);
}

/* DepthToSpace / SpaceToDepth are a reshape to 6-D, a transpose and a
 * reshape back. `view` is the 6-D input view; output element order is
 * view dims taken in `perm` order. */
static keel_status sh_block_move(keel_kctx *k, const keel_tensor *x, const int64_t *view,
                                 const int *perm, const int64_t *oshape) {
  int64_t vs[6];
  sh_strides(6, view, vs);
  sh_plan p = {.r = 6};
  for (int i = 0; i < 6; i++) {
    p.dims[i] = view[perm[i]];
    p.ss[i] = vs[perm[i]];
  }
  sh_strides(6, p.dims, p.ds);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, 4, oshape, &o));
  return sh_copy(o, 0, x, 0, &p);
}

static keel_status sh_block_input(keel_kctx *k, const char *op, const keel_tensor **x,
                                  int64_t *b) {
  KEEL_TRY(keel_k_in(k, 0, x));
  *b = keel_k_attr_i(k, "blocksize", 0);
  if (*b <= 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: blocksize must be positive, got %lld", op,
                    (long long)*b);
  if ((*x)->rank != 4)
    return keel_err(KEEL_ERR_SHAPE, "%s: input must have rank 4 (N,C,H,W), got %d", op,
                    (*x)->rank);
  return KEEL_OK;
}

static keel_status op_depth_to_space(keel_kctx *k) {
  const keel_tensor *x;
  int64_t b, bb, hb, wb;
  KEEL_TRY(sh_block_input(k, "DepthToSpace", &x, &b));
  const int64_t *s = x->shape; /* (N, C, H, W) */
  if (keel_mul64_ovf(b, b, &bb) || s[1] % bb)
    return keel_err(KEEL_ERR_SHAPE, "DepthToSpace: channels %lld are not divisible by %lld^2",
                    (long long)s[1], (long long)b);
  if (keel_mul64_ovf(s[2], b, &hb) || keel_mul64_ovf(s[3], b, &wb))
    return keel_err(KEEL_ERR_SHAPE, "DepthToSpace: output size overflows");
  int64_t c = s[1] / bb, oshape[4] = {s[0], c, hb, wb};
  const char *mode = keel_k_attr_s(k, "mode", "DCR");
  if (!strcmp(mode, "DCR")) { /* channel = (b1, b2, c) */
    int64_t view[6] = {s[0], b, b, c, s[2], s[3]};
    return sh_block_move(k, x, view, (const int[]){0, 3, 4, 1, 5, 2}, oshape);
  }
  if (!strcmp(mode, "CRD")) { /* channel = (c, b1, b2) */
    int64_t view[6] = {s[0], c, b, b, s[2], s[3]};
    return sh_block_move(k, x, view, (const int[]){0, 1, 4, 2, 5, 3}, oshape);
  }
  return keel_err(KEEL_ERR_INVALID_MODEL, "DepthToSpace: mode must be DCR or CRD, got '%s'", mode);
}

static keel_status op_space_to_depth(keel_kctx *k) {
  const keel_tensor *x;
  int64_t b, cb;
  KEEL_TRY(sh_block_input(k, "SpaceToDepth", &x, &b));
  const int64_t *s = x->shape; /* (N, C, H, W) */
  if (s[2] % b || s[3] % b)
    return keel_err(KEEL_ERR_SHAPE, "SpaceToDepth: H %lld and W %lld must be divisible by %lld",
                    (long long)s[2], (long long)s[3], (long long)b);
  if (keel_mul64_ovf(s[1], b, &cb) || keel_mul64_ovf(cb, b, &cb))
    return keel_err(KEEL_ERR_SHAPE, "SpaceToDepth: output channels overflow");
  int64_t view[6] = {s[0], s[1], s[2] / b, b, s[3] / b, b};
  int64_t oshape[4] = {s[0], cb, s[2] / b, s[3] / b};
  return sh_block_move(k, x, view, (const int[]){0, 3, 5, 1, 2, 4}, oshape);
}

/* ================================================ Concat and Split */

/* Checks every input against the first and sums the concat axis. */
static keel_status sh_concat_shape(keel_kctx *k, int axis, const keel_tensor *t0,
                                   int64_t *shape) {
  memcpy(shape, t0->shape, sizeof(int64_t) * (size_t)t0->rank);
  shape[axis] = 0;
  for (int i = 0; i < k->n_in; i++) {
    const keel_tensor *t;
    KEEL_TRY(keel_k_in(k, i, &t));
    if (t->dtype != t0->dtype || t->rank != t0->rank)
      return keel_err(KEEL_ERR_SHAPE, "Concat: input %d is %s rank %d, input 0 is %s rank %d", i,
                      keel_dtype_name((keel_dtype)t->dtype), t->rank,
                      keel_dtype_name((keel_dtype)t0->dtype), t0->rank);
    for (int d = 0; d < t->rank; d++)
      if (d != axis && t->shape[d] != t0->shape[d]) {
        char a[160], b[160];
        return keel_err(KEEL_ERR_SHAPE, "Concat: input %d has shape %s, input 0 %s (axis %d)", i,
                        sh_str(t->rank, t->shape, a, sizeof a),
                        sh_str(t0->rank, t0->shape, b, sizeof b), axis);
      }
    if (__builtin_add_overflow(shape[axis], t->shape[axis], &shape[axis]))
      return keel_err(KEEL_ERR_SHAPE, "Concat: output size overflows");
  }
  return KEEL_OK;
}

/* Concat of big byte-sized tensors, rows on the pool: an outer index o
 * (the dims before the axis) is one row of the output, made of each
 * input's row o in turn (contiguous runs of bytes). A channels-last
 * Concat (the detector's, 160x160 pixels of 16 + 16 channels) is 25600
 * such rows. */
typedef struct cat_job {
  int n;
  const uint8_t *const *src;    /* each input's bytes                      */
  const size_t *run;            /* each input's bytes per row              */
  uint8_t *dst;
  size_t row;                   /* the output's bytes per row              */
} cat_job;

static keel_status cat_rows(void *ctx, int64_t r0, int64_t r1, int worker) {
  const cat_job *j = ctx;
  (void)worker;
  for (int64_t r = r0; r < r1; r++) {
    uint8_t *d = j->dst + (size_t)r * j->row;
    for (int i = 0; i < j->n; i++) {
      if (!j->run[i]) continue; /* an empty input (its data may be NULL) */
      memcpy(d, j->src[i] + (size_t)r * j->run[i], j->run[i]);
      d += j->run[i];
    }
  }
  return KEEL_OK;
}

/* true when the fast path applies and ran (*st its status): fixed-size
 * elements, at most 16 inputs, 64 KB or more in runs of 16 bytes or more
 * (shorter runs copy faster through sh_copy's loops). */
static bool cat_fast(keel_kctx *k, int axis, keel_tensor *o, keel_status *st) {
  if (o->dtype == KEEL_STRING || keel_dtype_is_packed(o->dtype) || k->n_in > 16 ||
      keel_tensor_nbytes(o) < ((size_t)64 << 10))
    return false;
  const uint8_t *src[16];
  size_t run[16], row = 0;
  int64_t outer = 1;
  for (int d = 0; d < axis; d++) outer *= o->shape[d];
  for (int i = 0; i < k->n_in; i++) {
    const keel_tensor *t = &k->in[i]->t;
    run[i] = outer ? keel_tensor_nbytes(t) / (size_t)outer : 0;
    src[i] = t->data, row += run[i];
    if (run[i] && run[i] < 16) return false;
  }
  if (!outer || !row) return false;
  cat_job j = {k->n_in, src, run, o->data, row};
  int64_t grain = keel_pool_grain(2.0 * (double)row, 0); /* a row read and written */
  *st = keel_pool_for(k->pool, outer, grain, cat_rows, &j);
  return true;
}

static keel_status op_concat(keel_kctx *k) {
  if (k->n_in < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "Concat: needs at least one input");
  if (keel_k_opset(k) >= 4 && !keel_k_attr(k, "axis"))
    return keel_err(KEEL_ERR_INVALID_MODEL, "Concat: attribute 'axis' is missing");
  const keel_tensor *t0;
  KEEL_TRY(keel_k_in(k, 0, &t0));
  if (t0->rank == 0) return keel_err(KEEL_ERR_SHAPE, "Concat: inputs must have rank >= 1");
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 1), t0->rank, "Concat axis", &axis));
  int64_t shape[KEEL_MAX_RANK], os[KEEL_MAX_RANK], off = 0;
  KEEL_TRY(sh_concat_shape(k, axis, t0, shape));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, t0->dtype, t0->rank, shape, &o));
  keel_status st;
  if (!sh_dev(k) && cat_fast(k, axis, o, &st)) return st;
  sh_strides(o->rank, shape, os);
  for (int i = 0; i < k->n_in; i++) {
    const keel_tensor *t = &k->in[i]->t;
    sh_plan p = {.r = t->rank};
    memcpy(p.dims, t->shape, sizeof(int64_t) * (size_t)t->rank);
    sh_strides(t->rank, t->shape, p.ss);
    memcpy(p.ds, os, sizeof(int64_t) * (size_t)t->rank);
    KEEL_TRY(sh_copy_k(k, o, off * os[axis], t, 0, &p));
    off += t->shape[axis];
  }
  return KEEL_OK;
}

/* The split list, wherever this opset keeps it: attribute `split` (1, 2,
 * 11; opset 1 also takes it as input 1) or input 1 (13+). */
static keel_status sh_split_list(keel_kctx *k, int64_t *sizes, int *n, bool *present) {
  if (keel_k_opset(k) >= 13 || (keel_k_opset(k) == 1 && keel_k_has_in(k, 1)))
    return sh_in_ints_opt(k, 1, sizes, k->n_out, n, present);
  return sh_attr_ints(k, "split", sizes, k->n_out, n, present);
}

/* Sizes of the n_out parts of a dim of length `dim`. */
static keel_status sh_split_sizes(keel_kctx *k, int64_t dim, int64_t *sizes) {
  int nout = k->n_out, n;
  bool present;
  KEEL_TRY(sh_split_list(k, sizes, &n, &present));
  if (present) {
    int64_t sum = 0;
    bool bad = false;
    for (int i = 0; i < n && !bad; i++)
      bad = sizes[i] < 0 || __builtin_add_overflow(sum, sizes[i], &sum);
    if (bad || n != nout || sum != dim)
      return keel_err(KEEL_ERR_SHAPE, "Split: split lists %d sizes summing to %lld; expected %d "
                      "sizes summing to %lld", n, (long long)sum, nout, (long long)dim);
    return KEEL_OK;
  }
  int64_t parts = keel_k_opset(k) >= 18 ? keel_k_attr_i(k, "num_outputs", nout) : nout;
  if (parts != nout)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Split: num_outputs is %lld but the node has %d outputs",
                    (long long)parts, nout);
  /* opset 18: ceil-sized chunks, the last one smaller; before: equal parts */
  int64_t chunk = keel_k_opset(k) >= 18 ? (dim + parts - 1) / parts : dim / parts;
  if (chunk * (parts - 1) > dim || (keel_k_opset(k) < 18 && dim % parts))
    return keel_err(KEEL_ERR_SHAPE, "Split: a dim of %lld cannot be split into %d parts",
                    (long long)dim, nout);
  for (int i = 0; i < nout; i++) sizes[i] = i < nout - 1 ? chunk : dim - chunk * (parts - 1);
  return KEEL_OK;
}

static keel_status op_split(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (k->n_out < 1) return keel_err(KEEL_ERR_INVALID_MODEL, "Split: needs at least one output");
  int axis;
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "axis", 0), x->rank, "Split axis", &axis));
  /* the sizes on the stack up to 64 outputs: a node placed on a device
   * has its scratch on the device too (k->heap), and such a node has at
   * most 64 outputs (pass_place.c) */
  void *mem;
  int64_t few[64];
  if (k->n_out <= 64) mem = few;
  else KEEL_TRY(keel_k_scratch(k, sizeof(int64_t) * (size_t)k->n_out, &mem));
  int64_t *sizes = mem, xs[KEEL_MAX_RANK], shape[KEEL_MAX_RANK], off = 0;
  KEEL_TRY(sh_split_sizes(k, x->shape[axis], sizes));
  sh_strides(x->rank, x->shape, xs);
  memcpy(shape, x->shape, sizeof shape);
  for (int i = 0; i < k->n_out; i++) {
    shape[axis] = sizes[i];
    keel_tensor *o;
    KEEL_TRY(keel_k_out(k, i, x->dtype, x->rank, shape, &o));
    sh_plan p;
    sh_plan_dense(&p, x->rank, shape, xs);
    KEEL_TRY(sh_copy_k(k, o, 0, x, off * xs[axis], &p));
    off += sizes[i];
  }
  return KEEL_OK;
}

/* ============================================================ Slice */

static int64_t sh_clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* numpy slicing of one axis of length dim: first index and count.
 * Negative indices count from the end; out-of-range ones are clamped
 * (to [0, dim] going forward, [-1, dim-1] going backward). */
static void sh_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step,
                          int64_t *first, int64_t *len) {
  if (start < 0) start += dim; /* no overflow: dim >= 0 */
  if (end < 0) end += dim;
  uint64_t astep = step < 0 ? 0 - (uint64_t)step : (uint64_t)step;
  int64_t span;
  if (step > 0) {
    start = sh_clamp(start, 0, dim);
    end = sh_clamp(end, 0, dim);
    span = end - start;
  } else {
    start = sh_clamp(start, 0, dim - 1);
    end = sh_clamp(end, -1, dim - 1);
    span = start - end;
  }
  *first = start;
  *len = (dim == 0 || span <= 0) ? 0 : (int64_t)(((uint64_t)span - 1) / astep + 1);
}

/* starts, ends, axes, steps: attributes before opset 10, inputs after. */
typedef struct sh_slice_args {
  int64_t starts[KEEL_MAX_RANK], ends[KEEL_MAX_RANK], axes[KEEL_MAX_RANK],
      steps[KEEL_MAX_RANK];
  int ns, ne, na, nst;
  bool has_axes, has_steps;
} sh_slice_args;

static keel_status sh_slice_read(keel_kctx *k, sh_slice_args *a) {
  bool p1, p2;
  const int cap = KEEL_MAX_RANK;
  if (keel_k_opset(k) < 10) {
    KEEL_TRY(sh_attr_ints(k, "starts", a->starts, cap, &a->ns, &p1));
    KEEL_TRY(sh_attr_ints(k, "ends", a->ends, cap, &a->ne, &p2));
    KEEL_TRY(sh_attr_ints(k, "axes", a->axes, cap, &a->na, &a->has_axes));
    a->has_steps = false;
    if (!p1 || !p2)
      return keel_err(KEEL_ERR_INVALID_MODEL, "Slice: attributes starts and ends are required");
  } else {
    KEEL_TRY(keel_k_in_ints(k, 1, a->starts, cap, &a->ns));
    KEEL_TRY(keel_k_in_ints(k, 2, a->ends, cap, &a->ne));
    KEEL_TRY(sh_in_ints_opt(k, 3, a->axes, cap, &a->na, &a->has_axes));
    KEEL_TRY(sh_in_ints_opt(k, 4, a->steps, cap, &a->nst, &a->has_steps));
  }
  if (a->ne != a->ns || (a->has_axes && a->na != a->ns) || (a->has_steps && a->nst != a->ns))
    return keel_err(KEEL_ERR_SHAPE, "Slice: starts, ends, axes and steps differ in length "
                    "(%d, %d, %d, %d)", a->ns, a->ne, a->has_axes ? a->na : a->ns,
                    a->has_steps ? a->nst : a->ns);
  return KEEL_OK;
}

static keel_status op_slice(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  sh_slice_args a;
  KEEL_TRY(sh_slice_read(k, &a));
  int r = x->rank;
  int64_t xs[KEEL_MAX_RANK], first[KEEL_MAX_RANK] = {0}, step[KEEL_MAX_RANK], soff = 0;
  bool seen[KEEL_MAX_RANK] = {0};
  sh_plan p = {.r = r};
  for (int i = 0; i < r; i++) p.dims[i] = x->shape[i], step[i] = 1;
  for (int j = 0; j < a.ns; j++) {
    int ax;
    KEEL_TRY(keel_k_axis(a.has_axes ? a.axes[j] : j, r, "Slice axis", &ax));
    if (seen[ax]) return keel_err(KEEL_ERR_INVALID_MODEL, "Slice: axis %d is listed twice", ax);
    seen[ax] = true;
    step[ax] = a.has_steps ? a.steps[j] : 1;
    if (step[ax] == 0) return keel_err(KEEL_ERR_RUNTIME, "Slice: step for axis %d is 0", ax);
    sh_slice_axis(x->shape[ax], a.starts[j], a.ends[j], step[ax], &first[ax], &p.dims[ax]);
  }
  sh_strides(r, x->shape, xs);
  for (int i = 0; i < r; i++) {
    /* a step is only ever multiplied out when the axis has >= 2 elements,
     * and then |step| < dim: no overflow */
    p.ss[i] = p.dims[i] > 1 ? xs[i] * step[i] : 0;
    soff += first[i] * xs[i];
  }
  sh_strides(r, p.dims, p.ds);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, p.dims, &o));
  return sh_copy_k(k, o, 0, x, soff, &p);
}

/* ===================================================== CenterCropPad */

/* Per listed axis: a larger input is cropped to a centered window (start
 * rounded down), a smaller one is centered in zeros (the odd pixel goes
 * to the end). The kept box is one affine copy into a zeroed output. */
static keel_status op_center_crop_pad(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int r = x->rank, n, na;
  int64_t want[KEEL_MAX_RANK], axes[KEEL_MAX_RANK], out[KEEL_MAX_RANK];
  bool has_axes, mark[KEEL_MAX_RANK];
  KEEL_TRY(keel_k_in_ints(k, 1, want, KEEL_MAX_RANK, &n));
  KEEL_TRY(sh_attr_ints(k, "axes", axes, KEEL_MAX_RANK, &na, &has_axes));
  if (!has_axes)
    for (na = 0; na < r; na++) axes[na] = na;
  if (n != na)
    return keel_err(KEEL_ERR_SHAPE, "CenterCropPad: shape has %d values for %d axes", n, na);
  KEEL_TRY(sh_mark_axes(axes, na, r, "CenterCropPad", mark));
  memcpy(out, x->shape, sizeof(int64_t) * (size_t)r);
  int64_t xs[KEEL_MAX_RANK], os[KEEL_MAX_RANK], crop[KEEL_MAX_RANK] = {0}, pad[KEEL_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
    if (want[i] < 0)
      return keel_err(KEEL_ERR_SHAPE, "CenterCropPad: target size %lld for axis %d is negative",
                      (long long)want[i], a);
    out[a] = want[i];
    if (x->shape[a] > want[i]) crop[a] = (x->shape[a] - want[i]) / 2;
    else pad[a] = (want[i] - x->shape[a]) / 2;
  }
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, out, &o));
  if (x->dtype != KEEL_STRING && o->data) memset(o->data, 0, keel_tensor_nbytes(o)); /* strings start "" */
  sh_strides(r, x->shape, xs);
  sh_strides(r, out, os);
  sh_plan p = {.r = r};
  int64_t soff = 0, doff = 0;
  for (int i = 0; i < r; i++) {
    p.dims[i] = KEEL_MIN(x->shape[i], out[i]);
    p.ss[i] = xs[i], p.ds[i] = os[i];
    soff += crop[i] * xs[i], doff += pad[i] * os[i];
  }
  return sh_copy(o, doff, x, soff, &p);
}

/* ==================================================== Expand, Tile */

static keel_status op_expand(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t want[KEEL_MAX_RANK], shape[KEEL_MAX_RANK];
  int n, r;
  KEEL_TRY(keel_k_in_ints(k, 1, want, KEEL_MAX_RANK, &n));
  for (int i = 0; i < n; i++)
    if (want[i] < 0)
      return keel_err(KEEL_ERR_SHAPE, "Expand: shape[%d] is negative (%lld)", i, (long long)want[i]);
  KEEL_TRY(keel_broadcast_shape(x->rank, x->shape, n, want, &r, shape));
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, shape, &o));
  if (!sh_dev(k)) return keel_bcast_copy(x, o);
  sh_plan p; /* on a device: x read with stride 0 on its broadcast axes */
  int64_t xs[KEEL_MAX_RANK];
  keel_broadcast_strides(x->rank, x->shape, r, shape, xs);
  sh_plan_dense(&p, r, shape, xs);
  return sh_copy_k(k, o, 0, x, 0, &p);
}

/* Repeats per axis: input `repeats` (opset 6+), or opset 1's scalar
 * `tiles` along the scalar `axis`. */
static keel_status sh_tile_repeats(keel_kctx *k, const keel_tensor *x, int64_t *rep) {
  if (keel_k_opset(k) >= 6) {
    int n;
    KEEL_TRY(keel_k_in_ints(k, 1, rep, KEEL_MAX_RANK, &n));
    if (n != x->rank)
      return keel_err(KEEL_ERR_SHAPE, "Tile: repeats has %d values for an input of rank %d", n,
                      x->rank);
  } else {
    int64_t tiles, axis;
    int ax;
    KEEL_TRY(keel_k_in_scalar_i64(k, 1, &tiles));
    KEEL_TRY(keel_k_in_scalar_i64(k, 2, &axis));
    KEEL_TRY(keel_k_axis(axis, x->rank, "Tile axis", &ax));
    for (int i = 0; i < x->rank; i++) rep[i] = i == ax ? tiles : 1;
  }
  for (int i = 0; i < x->rank; i++)
    if (rep[i] < 0)
      return keel_err(KEEL_ERR_SHAPE, "Tile: repeat %lld for axis %d is negative",
                      (long long)rep[i], i);
  return KEEL_OK;
}

/* Output axis i is (repeat, dim) flattened: plan dims (rep0, d0, rep1, d1,
 * ...) read with strides (0, s0, 0, s1, ...) and written densely. */
static keel_status op_tile(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int64_t rep[KEEL_MAX_RANK], xs[KEEL_MAX_RANK], shape[KEEL_MAX_RANK];
  KEEL_TRY(sh_tile_repeats(k, x, rep));
  sh_strides(x->rank, x->shape, xs);
  sh_plan p = {.r = 2 * x->rank};
  for (int i = 0; i < x->rank; i++) {
    if (keel_mul64_ovf(x->shape[i], rep[i], &shape[i]))
      return keel_err(KEEL_ERR_SHAPE, "Tile: output size overflows");
    p.dims[2 * i] = rep[i];
    p.ss[2 * i] = 0;
    p.dims[2 * i + 1] = x->shape[i];
    p.ss[2 * i + 1] = xs[i];
  }
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, shape, &o));
  /* after the output's size check: each axis may fit while the product of
   * all repeats overflows */
  sh_strides(p.r, p.dims, p.ds);
  return sh_copy(o, 0, x, 0, &p);
}

/* ============================================================== Pad */

enum { SH_PAD_CONSTANT, SH_PAD_REFLECT, SH_PAD_EDGE, SH_PAD_WRAP };

/* One element of any dtype, to fill with. */
typedef union sh_elem {
  uint8_t b[16];
  uint64_t u;
  keel_string s;
} sh_elem;

/* Input coordinate for output coordinate i (already shifted by the begin
 * pad) on an axis of length n; -1 means "the constant". Reflect and wrap
 * repeat periodically, as numpy.pad does, when a pad exceeds the axis. */
static int64_t sh_pad_src(int mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case SH_PAD_EDGE: return i < 0 ? 0 : n - 1;
    case SH_PAD_WRAP: return ((i % n) + n) % n;
    case SH_PAD_REFLECT: {
      if (n == 1) return 0;
      int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
    default: return -1;
  }
}

static keel_status sh_pad_mode(keel_kctx *k, int *mode) {
  const char *m = keel_k_attr_s(k, "mode", "constant");
  static const char *names[] = {"constant", "reflect", "edge", "wrap"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(m, names[i])) {
      *mode = i;
      return KEEL_OK;
    }
  return keel_err(KEEL_ERR_INVALID_MODEL,
                  "Pad: mode must be constant, reflect, edge or wrap, got '%s'", m);
}

/* pads as [begin_0..begin_{r-1}, end_0..end_{r-1}] over all r axes:
 * attribute `paddings` (opset 1) or `pads` (2-10), input 1 (11+), with
 * opset 18's optional `axes` input naming the axes the pads are for. */
static keel_status sh_pad_list(keel_kctx *k, int r, int64_t *pads) {
  int64_t got[2 * KEEL_MAX_RANK], axes[KEEL_MAX_RANK];
  int n, na = r;
  bool present, has_axes = false, mark[KEEL_MAX_RANK];
  int64_t ver = keel_k_opset(k);
  if (ver < 11) {
    KEEL_TRY(sh_attr_ints(k, ver < 2 ? "paddings" : "pads", got, 2 * KEEL_MAX_RANK, &n, &present));
    if (!present) return keel_err(KEEL_ERR_INVALID_MODEL, "Pad: attribute 'pads' is missing");
  } else {
    KEEL_TRY(keel_k_in_ints(k, 1, got, 2 * KEEL_MAX_RANK, &n));
    if (ver >= 18) KEEL_TRY(sh_in_ints_opt(k, 3, axes, KEEL_MAX_RANK, &na, &has_axes));
  }
  if (!has_axes) { /* omitted (or listed as ""): every axis */
    na = r;
    for (int i = 0; i < r; i++) axes[i] = i;
  }
  if (n != 2 * na)
    return keel_err(KEEL_ERR_SHAPE, "Pad: %d pads for %d axes (need %d)", n, na, 2 * na);
  KEEL_TRY(sh_mark_axes(axes, na, r, "Pad", mark));
  memset(pads, 0, sizeof(int64_t) * 2 * (size_t)r);
  for (int j = 0; j < na; j++) {
    int a = (int)(axes[j] < 0 ? axes[j] + r : axes[j]);
    pads[a] = got[j];
    pads[r + a] = got[na + j];
  }
  return KEEL_OK;
}

/* The fill element: attribute `value` (float, before opset 11) or the
 * optional scalar input 2, which has the data's type. */
static keel_status sh_pad_value(keel_kctx *k, const keel_tensor *x, sh_elem *v) {
  memset(v, 0, sizeof *v);
  if (x->dtype == KEEL_STRING) v->s.data = (char *)""; /* only ever read */
  if (keel_k_opset(k) < 11) {
    if (x->dtype != KEEL_STRING)
      keel_elem_set_f64(x->dtype, v->b, 0, keel_k_attr_f(k, "value", 0.0f));
    return KEEL_OK;
  }
  const keel_tensor *c;
  KEEL_TRY(keel_k_in_opt(k, 2, &c));
  if (!c || keel_tensor_numel(c) == 0) return KEEL_OK;
  if (c->dtype != x->dtype)
    return keel_err(KEEL_ERR_SHAPE, "Pad: constant_value is %s, data is %s",
                    keel_dtype_name((keel_dtype)c->dtype), keel_dtype_name((keel_dtype)x->dtype));
  if (c->dtype == KEEL_STRING) v->s = *(const keel_string *)c->data; /* borrowed, read only */
  else if (keel_dtype_is_packed(c->dtype)) v->b[0] = (uint8_t)keel_small_get(c->dtype, c->data, 0);
  else memcpy(v->b, c->data, keel_dtype_size((keel_dtype)c->dtype));
  return KEEL_OK;
}

/* Per-axis index tables (input coordinate per output coordinate, or -1),
 * laid out one after another in `tab`. */
static keel_status sh_pad_tables(const keel_tensor *x, const int64_t *pads, const int64_t *shape,
                                 int mode, int64_t *tab) {
  for (int d = 0; d < x->rank; d++) {
    int64_t n = x->shape[d];
    if (n == 0 && mode != SH_PAD_CONSTANT && shape[d] > 0)
      return keel_err(KEEL_ERR_SHAPE, "Pad: axis %d is empty and cannot be padded in this mode", d);
    for (int64_t j = 0; j < shape[d]; j++) tab[j] = sh_pad_src(mode, j - pads[d], n);
    tab += shape[d];
  }
  return KEEL_OK;
}

/* n fill elements at o[oi..]. */
static keel_status sh_pad_const(keel_tensor *o, int64_t oi, int64_t n, const sh_elem *v) {
  if (o->dtype == KEEL_STRING) {
    for (int64_t j = 0; j < n; j++)
      KEEL_TRY(keel_tensor_set_string(o, (size_t)(oi + j), v->s.data, v->s.len));
    return KEEL_OK;
  }
  if (keel_dtype_is_packed(o->dtype)) { /* the code sits in the low bits of b[0] */
    for (int64_t j = 0; j < n; j++) keel_small_put(o->dtype, o->data, (size_t)(oi + j), v->b[0]);
    return KEEL_OK;
  }
  size_t es = keel_dtype_size((keel_dtype)o->dtype);
  for (int64_t j = 0; j < n; j++) memcpy((uint8_t *)o->data + (size_t)(oi + j) * es, v->b, es);
  return KEEL_OK;
}

/* One output row of n elements: row[j] = x[base + map[j]], or the fill
 * where map[j] < 0 or the whole row is outside (base < 0). Runs of
 * consecutive source indices (the interior, wrap blocks) go as one copy. */
static keel_status sh_pad_row(keel_tensor *o, int64_t oi, const keel_tensor *x, int64_t base,
                              const int64_t *map, int64_t n, const sh_elem *v) {
  if (base < 0) return sh_pad_const(o, oi, n, v);
  for (int64_t j = 0, e; j < n; j = e) {
    e = j + 1;
    if (map[j] < 0) {
      while (e < n && map[e] < 0) e++;
      KEEL_TRY(sh_pad_const(o, oi + j, e - j, v));
      continue;
    }
    while (e < n && map[e] == map[e - 1] + 1) e++;
    KEEL_TRY(sh_run(o, oi + j, 1, x, base + map[j], 1, e - j));
  }
  return KEEL_OK;
}

/* Walks the output row by row; each row's input base is the sum of the
 * outer axes' table entries (or -1 when any of them is the fill). */
static keel_status sh_pad_fill(keel_tensor *o, const keel_tensor *x, const int64_t *tab,
                               const sh_elem *v) {
  int r = x->rank;
  int64_t total = keel_tensor_numel(o);
  if (total == 0) return KEEL_OK;
  int64_t xs[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0};
  const int64_t *maps[KEEL_MAX_RANK];
  sh_strides(r, x->shape, xs);
  for (int d = 0; d < r; d++) {
    maps[d] = tab;
    tab += o->shape[d];
  }
  static const int64_t scalar_map = 0; /* rank 0: one row of one element */
  int64_t n = r ? o->shape[r - 1] : 1;
  const int64_t *last = r ? maps[r - 1] : &scalar_map;
  for (int64_t done = 0; done < total; done += n) {
    int64_t base = 0;
    for (int d = 0; d < r - 1 && base >= 0; d++) {
      int64_t m = maps[d][idx[d]];
      base = m < 0 ? -1 : base + m * xs[d];
    }
    KEEL_TRY(sh_pad_row(o, done, x, base, last, n, v));
    for (int d = r - 2; d >= 0; d--) {
      if (++idx[d] < o->shape[d]) break;
      idx[d] = 0;
    }
  }
  return KEEL_OK;
}

static keel_status op_pad(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  int mode, r = x->rank;
  int64_t pads[2 * KEEL_MAX_RANK], shape[KEEL_MAX_RANK], ntab = 0;
  sh_elem v;
  KEEL_TRY(sh_pad_mode(k, &mode));
  KEEL_TRY(sh_pad_list(k, r, pads));
  KEEL_TRY(sh_pad_value(k, x, &v));
  for (int d = 0; d < r; d++) {
    if (__builtin_add_overflow(x->shape[d], pads[d], &shape[d]) ||
        __builtin_add_overflow(shape[d], pads[r + d], &shape[d]) || shape[d] < 0)
      return keel_err(KEEL_ERR_SHAPE, "Pad: pads %lld, %lld do not fit axis %d of length %lld",
                      (long long)pads[d], (long long)pads[r + d], d, (long long)x->shape[d]);
    if (__builtin_add_overflow(ntab, shape[d], &ntab) || (uint64_t)ntab > SIZE_MAX / 8)
      return keel_err(KEEL_ERR_SHAPE, "Pad: output dims are too large");
  }
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, r, shape, &o));
  if (keel_tensor_numel(o) == 0) return KEEL_OK;
  void *tab;
  KEEL_TRY(keel_k_scratch(k, sizeof(int64_t) * (size_t)ntab, &tab));
  KEEL_TRY(sh_pad_tables(x, pads, shape, mode, tab));
  return sh_pad_fill(o, x, tab, &v);
}

/* ============================================================ Trilu */

/* Keeps j - i >= k (upper) or j - i <= k (lower) in each of the last two
 * dims' matrices; the rest becomes zero (empty strings). */
static keel_status op_trilu(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->rank < 2) return keel_err(KEEL_ERR_SHAPE, "Trilu: input must have rank >= 2, got %d", x->rank);
  int64_t kk = 0;
  if (keel_k_has_in(k, 1)) KEEL_TRY(keel_k_in_scalar_i64(k, 1, &kk));
  bool upper = keel_k_attr_i(k, "upper", 1) != 0;
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o));
  int64_t rows = x->shape[x->rank - 2], cols = x->shape[x->rank - 1], total = keel_tensor_numel(x);
  if (total == 0) return KEEL_OK;
  if (x->dtype != KEEL_STRING) memset(o->data, 0, keel_tensor_nbytes(o));
  kk = sh_clamp(kk, -rows - 1, cols + 1); /* beyond this nothing changes */
  for (int64_t m = 0; m < total; m += rows * cols)
    for (int64_t i = 0; i < rows; i++) {
      int64_t lo = upper ? sh_clamp(i + kk, 0, cols) : 0;
      int64_t hi = upper ? cols : sh_clamp(i + kk + 1, 0, cols);
      int64_t at = m + i * cols + lo;
      if (hi > lo) KEEL_TRY(sh_run(o, at, 1, x, at, 1, hi - lo));
    }
  return KEEL_OK;
}

/* ================================================== ReverseSequence */

static keel_status sh_revseq_axes(keel_kctx *k, const keel_tensor *x, int *bax, int *tax) {
  if (x->rank < 2)
    return keel_err(KEEL_ERR_SHAPE, "ReverseSequence: input must have rank >= 2, got %d", x->rank);
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "batch_axis", 1), x->rank, "batch_axis", bax));
  KEEL_TRY(keel_k_axis(keel_k_attr_i(k, "time_axis", 0), x->rank, "time_axis", tax));
  if (*bax > 1 || *tax > 1 || *bax == *tax)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order");
  return KEEL_OK;
}

/* Each batch entry b reverses its first lens[b] time steps; the slab
 * under one (batch, time) pair is contiguous since both axes lead. */
static keel_status op_reverse_sequence(keel_kctx *k) {
  const keel_tensor *x, *lens;
  int bax, tax;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &lens));
  KEEL_TRY(sh_revseq_axes(k, x, &bax, &tax));
  int64_t B = x->shape[bax], T = x->shape[tax], inner = 1, xs[KEEL_MAX_RANK];
  if ((lens->dtype != KEEL_INT64 && lens->dtype != KEEL_INT32) || lens->rank != 1 ||
      lens->shape[0] != B)
    return keel_err(KEEL_ERR_SHAPE, "ReverseSequence: sequence_lens must be 1-D int64 of length %lld",
                    (long long)B);
  for (int d = 2; d < x->rank; d++) inner *= x->shape[d];
  sh_strides(x->rank, x->shape, xs);
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, x->dtype, x->rank, x->shape, &o));
  for (int64_t b = 0; b < B; b++) {
    int64_t len = keel_elem_get_i64(lens->dtype, lens->data, (size_t)b);
    if (len < 0 || len > T)
      return keel_err(KEEL_ERR_RUNTIME, "ReverseSequence: sequence_lens[%lld] = %lld is outside [0, %lld]",
                      (long long)b, (long long)len, (long long)T);
    for (int64_t t = 0; t < T && inner > 0; t++) {
      int64_t from = t < len ? len - 1 - t : t;
      int64_t oi = b * xs[bax] + t * xs[tax], si = b * xs[bax] + from * xs[tax];
      KEEL_TRY(sh_run(o, oi, 1, x, si, 1, inner));
    }
  }
  return KEEL_OK;
}

/* ============================================================ table */

/* types: the data input's */
const keel_opdef keel_ops_shape[] = {
    /* views and shape readers take the narrow types (their bytes are not touched) */
    {"", "Reshape", 1, KEEL_OPSET_MAX, op_reshape, 0, KEEL_TS_ALL | KEEL_TS_SMALL, keel_gpu_move_impls},
    {"", "Flatten", 1, KEEL_OPSET_MAX, op_flatten, 0, KEEL_TS_ALL | KEEL_TS_SMALL, keel_gpu_move_impls},
    {"", "Squeeze", 1, KEEL_OPSET_MAX, op_squeeze, 0, KEEL_TS_ALL | KEEL_TS_SMALL, keel_gpu_move_impls},
    {"", "Unsqueeze", 1, KEEL_OPSET_MAX, op_unsqueeze, 0, KEEL_TS_ALL | KEEL_TS_SMALL, keel_gpu_move_impls},
    {"", "Identity", 1, KEEL_OPSET_MAX, op_identity, 0, KEEL_TS_ALL | KEEL_TS_SMALL, keel_gpu_move_impls},
    {"", "Transpose", 1, KEEL_OPSET_MAX, op_transpose, 0, KEEL_TS_ALL | KEEL_TS_SMALL, keel_gpu_move_impls},
    {"", "DepthToSpace", 1, KEEL_OPSET_MAX, op_depth_to_space, 0, KEEL_TS_ALL},
    {"", "SpaceToDepth", 1, KEEL_OPSET_MAX, op_space_to_depth, 0, KEEL_TS_ALL},
    {"", "Concat", 1, KEEL_OPSET_MAX, op_concat, 0, KEEL_TS_ALL, keel_gpu_move_impls},
    {"", "Split", 1, KEEL_OPSET_MAX, op_split, 0, KEEL_TS_ALL, keel_gpu_move_impls},
    {"", "Slice", 1, KEEL_OPSET_MAX, op_slice, 0, KEEL_TS_ALL, keel_gpu_move_impls},
    {"", "CenterCropPad", 18, KEEL_OPSET_MAX, op_center_crop_pad, 0, KEEL_TS_ALL},
    {"", "Expand", 8, KEEL_OPSET_MAX, op_expand, 0, KEEL_TS_ALL, keel_gpu_move_impls},
    {"", "Tile", 1, KEEL_OPSET_MAX, op_tile, 0, KEEL_TS_ALL},
    {"", "Pad", 1, KEEL_OPSET_MAX, op_pad, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {"", "Trilu", 14, KEEL_OPSET_MAX, op_trilu, 0, KEEL_TS_ALL},
    {"", "ReverseSequence", 10, KEEL_OPSET_MAX, op_reverse_sequence, 0, KEEL_TS_ALL},
    {0},
};
