/* control.c: If, Loop, Scan and SequenceMap: kernels that run sub-graphs.
 *
 * Each runs its body's plan in the body's frame (one per graph per run,
 * reused across iterations and runs). A body reads outer values through
 * OUTER refs resolved at load time; nothing is copied in. What crosses the
 * boundary is moved (DESIGN rule 2):
 *   - a branch's results move to the If's outputs;
 *   - a Loop body's carried outputs move to the next iteration's inputs, and
 *     after the last iteration to the Loop's outputs;
 *   - per-iteration scan outputs are copied into their final buffer and
 *     released at once.
 * So when a body returns, its frame is empty, and nothing an iteration made
 * outlives it unless it is carried on.
 *
 * Scan outputs of a Loop go into one buffer that grows geometrically when
 * the trip count is unknown (amortized O(n) instead of a buffer per
 * iteration and a concat at the end). Loop-carried values may change shape
 * every iteration; nothing here trusts value_info shapes.
 *
 * A Loop whose body passes its condition through unchanged cannot stop
 * early: it runs its whole trip count. Its scan outputs are then sized for
 * all iterations at once (a count past the memory cap fails at once), and
 * a trip count above what the run's iteration guard still allows (or none
 * at all) is refused at once with KEEL_ERR_TIMEOUT.
 *
 * Every iteration of every loop first counts against the run's iteration
 * guard and checks its deadline and cancel flag (keel_exec_iteration), so
 * a loop at any depth stops within one iteration of being told to.
 *
 * The values in flight live in the frame's `ctl` array (sized at run
 * creation), so control flow itself allocates no bookkeeping per iteration.
 */
#include "exec/exec.h"

/* ================================================================ helpers */

static void clear_vals(keel_val *v, int32_t n) {
  for (int32_t i = 0; i < n; i++) keel_val_clear(&v[i]);
}

static keel_status ctl_slots(keel_kctx *k, int32_t need, keel_val **out) {
  keel_frame *f = k->frame;
  if (need > f->n_ctl)
    return keel_err(KEEL_ERR_INTERNAL, "control-flow scratch too small (%d > %d)", need,
                    f->n_ctl);
  *out = f->ctl;
  return KEEL_OK;
}

static keel_status read_bool(const keel_val *v, const char *what, bool *out) {
  if (!v || v->kind != KEEL_V_TENSOR || keel_tensor_numel(&v->t) != 1 ||
      v->t.dtype == KEEL_STRING)
    return keel_err(KEEL_ERR_SHAPE, "%s must be a tensor with one element", what);
  *out = keel_elem_get_f64(v->t.dtype, v->t.data, 0) != 0;
  return KEEL_OK;
}

static keel_status scalar_tensor(keel_kctx *k, int dtype, int64_t v, keel_val *out) {
  KEEL_TRY(keel_tensor_alloc(k->heap, dtype, 0, NULL, k->owner, &out->t));
  out->kind = KEEL_V_TENSOR;
  keel_elem_set_i64(dtype, out->t.data, 0, v);
  return KEEL_OK;
}

/* The test-only leak switch (keel_debug_leak_subgraph_results) keeps an
 * extra reference to every sub-graph result, the way the detector-training
 * bug kept branch results alive. */
static void maybe_leak(keel_kctx *k, const keel_val *v, int32_t n) {
  if (!k->run->s->debug_leak_branch_results) return;
  for (int32_t i = 0; i < n; i++)
    if (v[i].kind != KEEL_V_EMPTY) keel_exec_debug_leak(k->run, &v[i]);
}

static const keel_graph *graph_attr(const keel_kctx *k, const char *name) {
  const keel_attr *a = keel_k_attr(k, name);
  return a && a->type == KEEL_ATTR_GRAPH ? a->g : NULL;
}

/* ===================================================================== If */

static keel_status op_if(keel_kctx *k) {
  bool cond;
  KEEL_TRY(read_bool(k->in[0], "If condition", &cond));
  const keel_graph *g = graph_attr(k, cond ? "then_branch" : "else_branch");
  if (!g) return keel_err(KEEL_ERR_INVALID_MODEL, "If without %s", cond ? "then_branch" : "else_branch");
  if (g->n_out != k->n_out)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s has %d outputs, the If node %d",
                    cond ? "then_branch" : "else_branch", g->n_out, k->n_out);
  keel_val *res;
  KEEL_TRY(ctl_slots(k, g->n_out, &res));
  KEEL_TRY(keel_exec_graph(k->run, g, k->frame, NULL, 0, res, k->frame->iter));
  maybe_leak(k, res, g->n_out);
  for (int32_t i = 0; i < g->n_out; i++) keel_val_move(k->out[i], &res[i]);
  return KEEL_OK;
}

/* ========================================================= scan buffers */

/* One output stacked along a new leading axis: [count, elem...]. The
 * buffer holds `cap` elements and is replaced by one twice as large when it
 * fills up (when the count is not known in advance). */
typedef struct stack {
  keel_val v;                 /* the buffer tensor (shape [cap, elem...])  */
  int64_t count, cap;
  size_t elem_bytes;
  int32_t dtype, rank;        /* of one element                            */
  int64_t shape[KEEL_MAX_RANK];
} stack;

static keel_status stack_alloc(keel_kctx *k, stack *s, int64_t cap, int out_i) {
  int64_t shape[KEEL_MAX_RANK];
  shape[0] = cap;
  memcpy(shape + 1, s->shape, sizeof(int64_t) * (size_t)s->rank);
  keel_owner o = keel_k_owner(k, out_i);
  keel_val nv = {.kind = KEEL_V_TENSOR};
  KEEL_TRY(keel_tensor_alloc(k->heap, s->dtype, s->rank + 1, shape, o, &nv.t));
  if (s->dtype == KEEL_STRING) { /* move the strings themselves */
    keel_string *dst = nv.t.data, *src = s->v.kind ? s->v.t.data : NULL;
    size_t n = (size_t)(s->count * (int64_t)(s->elem_bytes / sizeof(keel_string)));
    for (size_t i = 0; i < n && src; i++) dst[i] = src[i], src[i] = (keel_string){0};
  } else if (s->count && nv.t.data) {
    memcpy(nv.t.data, s->v.t.data, (size_t)s->count * s->elem_bytes);
  }
  keel_val_clear(&s->v);
  s->v = nv;
  s->cap = cap;
  return KEEL_OK;
}

/* Appends t at position `at` (at == count for a plain append). */
static keel_status stack_put(keel_kctx *k, stack *s, const keel_val *e, int64_t at,
                             int64_t cap_hint, int out_i, const char *what) {
  if (e->kind != KEEL_V_TENSOR)
    return keel_err(KEEL_ERR_SHAPE, "%s must be a tensor", what);
  const keel_tensor *t = &e->t;
  if (keel_dtype_is_packed(t->dtype)) /* rows are stacked by whole bytes */
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s is %s: stacking packed sub-byte tensors is not supported",
                    what, keel_dtype_name((keel_dtype)t->dtype));
  if (s->count == 0 && s->v.kind == KEEL_V_EMPTY) {
    s->dtype = t->dtype;
    s->rank = t->rank;
    memcpy(s->shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
    s->elem_bytes = keel_tensor_nbytes(t);
    KEEL_TRY(stack_alloc(k, s, cap_hint > 0 ? cap_hint : 4, out_i));
  } else if (t->dtype != s->dtype || t->rank != s->rank ||
             memcmp(t->shape, s->shape, sizeof(int64_t) * (size_t)t->rank)) {
    char a[128], b[128];
    return keel_err(KEEL_ERR_SHAPE, "%s changed from %s %s to %s %s", what,
                    keel_dtype_name((keel_dtype)s->dtype), keel_shape_str(s->rank, s->shape, a, sizeof a),
                    keel_dtype_name((keel_dtype)t->dtype), keel_shape_str(t->rank, t->shape, b, sizeof b));
  }
  if (at >= s->cap) KEEL_TRY(stack_alloc(k, s, KEEL_MAX(s->cap * 2, at + 1), out_i));
  int64_t n = keel_tensor_numel(t);
  KEEL_TRY(keel_tensor_copy_elems(&s->v.t, at * n, t, 0, n));
  if (at + 1 > s->count) s->count = at + 1;
  return KEEL_OK;
}

/* The stacked result as a value of shape [count, elem...] (a view of the
 * buffer when it is larger), moved to *out. An empty stack takes its
 * element type from the declared type of the body output. */
static keel_status stack_finish(keel_kctx *k, stack *s, const keel_type *decl, int out_i,
                                keel_val *out) {
  if (s->v.kind == KEEL_V_EMPTY) {
    int dt = decl && decl->dtype ? decl->dtype : KEEL_FLOAT;
    int64_t shape[KEEL_MAX_RANK] = {0};
    int rank = 1;
    if (decl && decl->rank >= 0 && decl->rank < KEEL_MAX_RANK) {
      for (int i = 0; i < decl->rank; i++) shape[1 + i] = decl->dims[i] > 0 ? decl->dims[i] : 0;
      rank += decl->rank;
    }
    keel_owner o = keel_k_owner(k, out_i);
    KEEL_TRY(keel_tensor_alloc(k->heap, dt, rank, shape, o, &out->t));
    out->kind = KEEL_V_TENSOR;
    return KEEL_OK;
  }
  int64_t shape[KEEL_MAX_RANK];
  shape[0] = s->count;
  memcpy(shape + 1, s->shape, sizeof(int64_t) * (size_t)s->rank);
  out->kind = KEEL_V_TENSOR;
  keel_tensor_view(&s->v.t, s->rank + 1, shape, &out->t);
  keel_val_clear(&s->v);
  return KEEL_OK;
}

/* =================================================================== Loop */

typedef struct loop_io {
  keel_val *carried;   /* N values moved from iteration to iteration       */
  keel_val *body_in;   /* 2 + N                                             */
  keel_val *body_out;  /* 1 + N + K                                         */
} loop_io;

static keel_status loop_check(keel_kctx *k, const keel_graph *g, int32_t *n, int32_t *kk) {
  int32_t N = k->n_in - 2;
  if (N < 0 || g->n_in != N + 2)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Loop body takes %d inputs; the node gives %d state values",
                    g->n_in, N);
  int32_t K = g->n_out - 1 - N;
  if (K < 0 || k->n_out != N + K)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "Loop body has %d outputs for %d state values; the node has %d outputs",
                    g->n_out, N, k->n_out);
  *n = N;
  *kk = K;
  return KEEL_OK;
}

/* True when the body's condition output is its condition input, directly
 * or through Identity nodes (the pattern of expanded functions such as
 * Range): such a loop runs all of its trip count unless it fails. */
static bool cond_passes_through(const keel_graph *g) {
  if (g->n_in < 2 || g->n_out < 1) return false;
  keel_ref r = g->out[0];
  for (int32_t hops = 0; hops <= g->n_nodes; hops++) {
    if (keel_ref_kind(r) != KEEL_REF_LOCAL) return false;
    int32_t slot = (int32_t)keel_ref_slot(r);
    if (slot == g->in[1]) return true;
    const keel_node *p = NULL;
    for (int32_t n = 0; n < g->n_nodes && !p; n++)
      for (int32_t j = 0; j < g->nodes[n].n_out && !p; j++)
        if (g->nodes[n].out[j] == slot) p = &g->nodes[n];
    if (!p || strcmp(p->op_type, "Identity") || p->n_in < 1) return false;
    r = p->in[0];
  }
  return false;
}

/* One iteration: moves state in, runs the body, moves state out, stacks
 * the scan outputs. `exact`: the loop runs all `trip` iterations, so the
 * stacks are sized for all of them at once. */
static keel_status loop_step(keel_kctx *k, const keel_graph *g, loop_io *io, int32_t N,
                             int32_t K, stack *stacks, int64_t i, int64_t trip, bool exact,
                             bool *cond) {
  KEEL_TRY(scalar_tensor(k, KEEL_INT64, i, &io->body_in[0]));
  keel_status st = scalar_tensor(k, KEEL_BOOL, *cond, &io->body_in[1]);
  for (int32_t j = 0; j < N; j++) keel_val_move(&io->body_in[2 + j], &io->carried[j]);
  if (!st) st = keel_exec_graph(k->run, g, k->frame, io->body_in, g->n_in, io->body_out, (uint32_t)i);
  else clear_vals(io->body_in, g->n_in);
  if (st) return keel_err_prefix(st, "iteration %lld", (long long)i);
  maybe_leak(k, io->body_out, g->n_out);
  st = read_bool(&io->body_out[0], "Loop body condition output", cond);
  keel_val_clear(&io->body_out[0]);
  for (int32_t j = 0; j < N; j++) keel_val_move(&io->carried[j], &io->body_out[1 + j]);
  for (int32_t j = 0; j < K && !st; j++)
    st = stack_put(k, &stacks[j], &io->body_out[1 + N + j], stacks[j].count,
                   exact || trip < (1 << 20) ? trip : 0, N + j, "Loop scan output");
  clear_vals(io->body_out + 1 + N, K);
  if (st) return keel_err_prefix(st, "iteration %lld", (long long)i);
  keel_exec_iteration_hook(k->run, k->node, i);
  return KEEL_OK;
}

static keel_status loop_run(keel_kctx *k, const keel_graph *g, loop_io *io, int32_t N,
                            int32_t K, stack *stacks) {
  int64_t trip = INT64_MAX;
  bool cond = true;
  if (keel_k_has_in(k, 0)) KEEL_TRY(keel_k_in_scalar_i64(k, 0, &trip));
  if (keel_k_has_in(k, 1)) KEEL_TRY(read_bool(k->in[1], "Loop condition", &cond));
  for (int32_t j = 0; j < N; j++) {
    if (keel_k_has_in(k, 2 + j)) keel_val_ref(&io->carried[j], k->in[2 + j]);
    else io->carried[j].kind = KEEL_V_NONE;
  }
  /* A loop that cannot stop early runs `trip` iterations (INT64_MAX when
   * M is omitted). Its scan outputs need trip elements each: sizing the
   * stacks in the first iteration refuses a count past the memory cap at
   * once, instead of after millions of iterations that fill the cap by
   * doubling; and a count no run could finish is refused outright, as
   * iterations that make empty or no outputs never reach the cap. */
  bool fixed = cond && trip > 0 && cond_passes_through(g), exact = fixed && K > 0;
  int64_t left = keel_exec_iterations_left(k->run);
  if (fixed && trip > left)
    return keel_err(KEEL_ERR_TIMEOUT,
                    "iteration guard: the body passes its condition through, so all %lld "
                    "iterations would run, more than the %lld the run may still take "
                    "(keel_run_opts.max_iterations)",
                    (long long)trip, (long long)left);
  for (int64_t i = 0; i < trip && cond; i++) {
    KEEL_TRY(keel_exec_iteration(k->run, k->node, i));
    KEEL_TRY(loop_step(k, g, io, N, K, stacks, i, trip, exact, &cond));
  }
  for (int32_t j = 0; j < N; j++) keel_val_move(k->out[j], &io->carried[j]);
  for (int32_t j = 0; j < K; j++) {
    keel_ref r = g->out[1 + N + j];
    const keel_type *decl = keel_ref_kind(r) == KEEL_REF_LOCAL ? g->slot_types[keel_ref_slot(r)] : NULL;
    if (!decl) decl = &g->out_types[1 + N + j];
    KEEL_TRY(stack_finish(k, &stacks[j], decl, N + j, k->out[N + j]));
  }
  return KEEL_OK;
}

#define MAX_SCAN_OUTS 64

static keel_status op_loop(keel_kctx *k) {
  const keel_graph *g = graph_attr(k, "body");
  if (!g) return keel_err(KEEL_ERR_INVALID_MODEL, "Loop without a body");
  int32_t N, K;
  KEEL_TRY(loop_check(k, g, &N, &K));
  if (K > MAX_SCAN_OUTS) return keel_err(KEEL_ERR_UNSUPPORTED, "Loop with more than %d scan outputs", MAX_SCAN_OUTS);
  keel_val *ctl;
  KEEL_TRY(ctl_slots(k, N + g->n_in + g->n_out, &ctl));
  loop_io io = {ctl, ctl + N, ctl + N + g->n_in};
  stack stacks[MAX_SCAN_OUTS];
  memset(stacks, 0, sizeof(stack) * (size_t)K);
  keel_status st = loop_run(k, g, &io, N, K, stacks);
  clear_vals(ctl, N + g->n_in + g->n_out);
  for (int32_t j = 0; j < K; j++) keel_val_clear(&stacks[j].v);
  return st;
}

/* =================================================================== Scan */

typedef struct scan_cfg {
  int32_t N, M, K;               /* state, scan inputs, scan outputs       */
  int64_t len;                   /* iterations                             */
  int64_t in_axis[MAX_SCAN_OUTS], out_axis[MAX_SCAN_OUTS];
  bool in_rev[MAX_SCAN_OUTS], out_rev[MAX_SCAN_OUTS];
} scan_cfg;

static keel_status scan_cfg_read(keel_kctx *k, const keel_graph *g, int32_t first_state,
                                 scan_cfg *c) {
  int64_t m = keel_k_attr_i(k, "num_scan_inputs", -1);
  c->M = m < 1 || m > MAX_SCAN_OUTS ? -1 : (int32_t)m;
  c->N = k->n_in - first_state - c->M;
  c->K = g->n_out - c->N;
  /* N is bounded too: opset 8 stacks N + K outputs in 2 * MAX_SCAN_OUTS */
  if (c->M < 1 || c->N < 0 || c->K < 0 || g->n_in != c->N + c->M || k->n_out != c->N + c->K ||
      c->N > MAX_SCAN_OUTS || c->K > MAX_SCAN_OUTS)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "Scan: %d inputs, num_scan_inputs %d, body %d inputs / %d outputs, node %d outputs do not fit",
                    k->n_in, c->M, g->n_in, g->n_out, k->n_out);
  /* each list keeps its own count: a list shorter than M (or K) must not be
   * read past its end */
  int nax, ndir, noax, nodir;
  const int64_t *ax = keel_k_attr_ints(k, "scan_input_axes", &nax);
  const int64_t *dir = keel_k_attr_ints(k, "scan_input_directions", &ndir);
  if (!dir) dir = keel_k_attr_ints(k, "directions", &ndir); /* opset 8 */
  const int64_t *oax = keel_k_attr_ints(k, "scan_output_axes", &noax);
  const int64_t *odir = keel_k_attr_ints(k, "scan_output_directions", &nodir);
  if ((ax && nax != c->M) || (dir && ndir != c->M) || (oax && noax != c->K) ||
      (odir && nodir != c->K))
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "Scan: axes/directions lists need %d (inputs) and %d (outputs) values",
                    c->M, c->K);
  for (int32_t i = 0; i < c->M; i++) {
    c->in_axis[i] = ax ? ax[i] : 0;
    c->in_rev[i] = dir ? dir[i] != 0 : false;
  }
  for (int32_t i = 0; i < c->K; i++) {
    c->out_axis[i] = oax ? oax[i] : 0;
    c->out_rev[i] = odir ? odir[i] != 0 : false;
  }
  return KEEL_OK;
}

/* Slice t of `src` along `axis` into *out: a view when axis is 0 (the slice
 * is contiguous), a copy otherwise. */
static keel_status take_slice(keel_kctx *k, const keel_tensor *src, int axis, int64_t t,
                              keel_val *out) {
  int64_t shape[KEEL_MAX_RANK];
  int r = 0;
  for (int d = 0; d < src->rank; d++)
    if (d != axis) shape[r++] = src->shape[d];
  if (keel_dtype_is_packed(src->dtype))
    return keel_err(KEEL_ERR_UNSUPPORTED, "scan input is %s: slicing packed sub-byte tensors is not supported",
                    keel_dtype_name((keel_dtype)src->dtype));
  size_t es = keel_dtype_size((keel_dtype)src->dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= src->shape[d];
  for (int d = axis + 1; d < src->rank; d++) inner *= src->shape[d];
  out->kind = KEEL_V_TENSOR;
  if (axis == 0 && src->dtype != KEEL_STRING) {
    keel_tensor_view(src, r, shape, &out->t);
    if (out->t.data) out->t.data = (uint8_t *)out->t.data + (size_t)(t * inner) * es;
    return KEEL_OK;
  }
  KEEL_TRY(keel_tensor_alloc(k->heap, src->dtype, r, shape, k->owner, &out->t));
  int64_t L = src->shape[axis];
  for (int64_t o = 0; o < outer; o++)
    KEEL_TRY(keel_tensor_copy_elems(&out->t, o * inner, src, (o * L + t) * inner, inner));
  return KEEL_OK;
}

/* Moves axis 0 of `v` (shape [L, ...]) to position `axis`, in a new tensor. */
static keel_status move_axis0(keel_kctx *k, keel_val *v, int axis, int out_i) {
  if (axis == 0 || v->kind != KEEL_V_TENSOR) return KEEL_OK;
  const keel_tensor *s = &v->t;
  int64_t shape[KEEL_MAX_RANK], L = s->shape[0], inner = 1, outer = 1;
  for (int d = 1; d <= axis; d++) shape[d - 1] = s->shape[d], outer *= s->shape[d];
  shape[axis] = L;
  for (int d = axis + 1; d < s->rank; d++) shape[d] = s->shape[d], inner *= s->shape[d];
  keel_owner o = keel_k_owner(k, out_i);
  keel_val nv = {.kind = KEEL_V_TENSOR};
  KEEL_TRY(keel_tensor_alloc(k->heap, s->dtype, s->rank, shape, o, &nv.t));
  for (int64_t l = 0; l < L; l++)
    for (int64_t b = 0; b < outer; b++) {
      keel_status st = keel_tensor_copy_elems(&nv.t, (b * L + l) * inner, s, (l * outer + b) * inner, inner);
      if (st) {
        keel_val_clear(&nv);
        return st;
      }
    }
  keel_val_clear(v);
  *v = nv;
  return KEEL_OK;
}

/* Runs the Scan body over `scans` (M tensors) with `state` (N values, moved
 * in and back out); stacks the K outputs in `stacks`. */
static keel_status scan_body(keel_kctx *k, const keel_graph *g, const scan_cfg *c,
                             const keel_tensor *const *scans, keel_val *state, keel_val *bin,
                             keel_val *bout, stack *stacks) {
  for (int64_t t = 0; t < c->len; t++) {
    KEEL_TRY(keel_exec_iteration(k->run, k->node, t));
    for (int32_t j = 0; j < c->N; j++) keel_val_move(&bin[j], &state[j]);
    keel_status st = KEEL_OK;
    for (int32_t j = 0; j < c->M && !st; j++)
      st = take_slice(k, scans[j], (int)c->in_axis[j], c->in_rev[j] ? c->len - 1 - t : t, &bin[c->N + j]);
    if (!st) st = keel_exec_graph(k->run, g, k->frame, bin, g->n_in, bout, (uint32_t)t);
    else clear_vals(bin, g->n_in);
    if (st) return keel_err_prefix(st, "Scan iteration %lld", (long long)t);
    maybe_leak(k, bout, g->n_out);
    for (int32_t j = 0; j < c->N; j++) keel_val_move(&state[j], &bout[j]);
    for (int32_t j = 0; j < c->K && !st; j++)
      st = stack_put(k, &stacks[j], &bout[c->N + j], c->out_rev[j] ? c->len - 1 - t : t, c->len,
                     c->N + j, "Scan output");
    clear_vals(bout + c->N, c->K);
    if (st) return st;
    keel_exec_iteration_hook(k->run, k->node, t);
  }
  return KEEL_OK;
}

/* Normalizes the scan axes against the inputs and finds the length. */
static keel_status scan_prepare(scan_cfg *c, const keel_tensor *const *scans, int batch) {
  c->len = -1;
  for (int32_t j = 0; j < c->M; j++) {
    int r = scans[j]->rank - batch;
    int64_t a = c->in_axis[j] < 0 ? c->in_axis[j] + r : c->in_axis[j];
    if (a < 0 || a >= r) return keel_err(KEEL_ERR_SHAPE, "Scan input %d: axis %lld out of range", j, (long long)c->in_axis[j]);
    c->in_axis[j] = a + batch;
    int64_t L = scans[j]->shape[a + batch];
    if (c->len >= 0 && L != c->len)
      return keel_err(KEEL_ERR_SHAPE, "Scan inputs have different lengths (%lld and %lld)", (long long)c->len, (long long)L);
    c->len = L;
  }
  return KEEL_OK;
}

static keel_status scan_outputs(keel_kctx *k, const keel_graph *g, const scan_cfg *c,
                                stack *stacks) {
  for (int32_t j = 0; j < c->K; j++) {
    keel_val *o = k->out[c->N + j];
    KEEL_TRY(stack_finish(k, &stacks[j], &g->out_types[c->N + j], c->N + j, o));
    int r = o->t.rank;
    int64_t a = c->out_axis[j] < 0 ? c->out_axis[j] + r : c->out_axis[j];
    if (a < 0 || a >= r) return keel_err(KEEL_ERR_SHAPE, "Scan output %d: axis %lld out of range", j, (long long)c->out_axis[j]);
    KEEL_TRY(move_axis0(k, o, (int)a, c->N + j));
  }
  return KEEL_OK;
}

static keel_status op_scan9(keel_kctx *k, const keel_graph *g) {
  scan_cfg c;
  KEEL_TRY(scan_cfg_read(k, g, 0, &c));
  const keel_tensor *scans[MAX_SCAN_OUTS];
  for (int32_t j = 0; j < c.M; j++) KEEL_TRY(keel_k_in(k, c.N + j, &scans[j]));
  for (int32_t j = 0; j < c.N; j++) /* state has no default: "" is not allowed */
    if (!keel_k_has_in(k, j))
      return keel_err(KEEL_ERR_INVALID_MODEL, "Scan: state input %d is omitted", j);
  KEEL_TRY(scan_prepare(&c, scans, 0));
  keel_val *ctl;
  KEEL_TRY(ctl_slots(k, c.N + g->n_in + g->n_out, &ctl));
  keel_val *state = ctl, *bin = ctl + c.N, *bout = bin + g->n_in;
  for (int32_t j = 0; j < c.N; j++) keel_val_ref(&state[j], k->in[j]);
  stack stacks[MAX_SCAN_OUTS];
  memset(stacks, 0, sizeof(stack) * (size_t)c.K);
  keel_status st = scan_body(k, g, &c, scans, state, bin, bout, stacks);
  for (int32_t j = 0; j < c.N && !st; j++) keel_val_move(k->out[j], &state[j]);
  if (!st) st = scan_outputs(k, g, &c, stacks);
  clear_vals(ctl, c.N + g->n_in + g->n_out);
  for (int32_t j = 0; j < c.K; j++) keel_val_clear(&stacks[j].v);
  return st;
}

/* Opset 8: a leading batch axis on every input and output, and an optional
 * sequence_lens input first. Each batch entry is an independent opset-9
 * scan over its slice; results are stacked back along the batch axis. */
static keel_status scan8_batch(keel_kctx *k, const keel_graph *g, scan_cfg c, int64_t b,
                               keel_val *ctl, stack *outs) {
  keel_val *slices = ctl, *state = slices + c.M, *bin = state + c.N, *bout = bin + g->n_in;
  const keel_tensor *scans[MAX_SCAN_OUTS];
  keel_status st = KEEL_OK;
  for (int32_t j = 0; j < c.M && !st; j++) {
    const keel_tensor *x;
    st = keel_k_in(k, 1 + c.N + j, &x);
    if (!st) st = take_slice(k, x, 0, b, &slices[j]);
    scans[j] = &slices[j].t;
  }
  for (int32_t j = 0; j < c.N && !st; j++) {
    const keel_tensor *x;
    st = keel_k_in(k, 1 + j, &x);
    if (!st) st = take_slice(k, x, 0, b, &state[j]);
  }
  if (!st) st = scan_prepare(&c, scans, 0);
  if (!st && keel_k_has_in(k, 0)) {
    const keel_tensor *sl;
    st = keel_k_in(k, 0, &sl);
    int64_t n = st ? 0 : keel_elem_get_i64(sl->dtype, sl->data, (size_t)b);
    if (!st && (n < 0 || n > c.len)) st = keel_err(KEEL_ERR_RUNTIME, "Scan sequence_lens[%lld] = %lld out of range", (long long)b, (long long)n);
    if (!st) c.len = n;
  }
  stack inner[MAX_SCAN_OUTS];
  memset(inner, 0, sizeof(stack) * (size_t)c.K);
  if (!st) st = scan_body(k, g, &c, scans, state, bin, bout, inner);
  for (int32_t j = 0; j < c.N && !st; j++) st = stack_put(k, &outs[j], &state[j], b, 0, j, "Scan state");
  for (int32_t j = 0; j < c.K && !st; j++) {
    keel_val v = {0};
    st = stack_finish(k, &inner[j], &g->out_types[c.N + j], c.N + j, &v);
    if (!st) st = stack_put(k, &outs[c.N + j], &v, b, 0, c.N + j, "Scan output");
    keel_val_clear(&v);
  }
  for (int32_t j = 0; j < c.K; j++) keel_val_clear(&inner[j].v);
  clear_vals(ctl, c.M + c.N + g->n_in + g->n_out);
  return st;
}

static keel_status op_scan8(keel_kctx *k, const keel_graph *g) {
  scan_cfg c;
  KEEL_TRY(scan_cfg_read(k, g, 1, &c));
  const keel_tensor *x0;
  KEEL_TRY(keel_k_in(k, 1 + c.N, &x0));
  if (x0->rank < 1) return keel_err(KEEL_ERR_SHAPE, "Scan (opset 8) inputs need a batch axis");
  int64_t batch = x0->shape[0];
  /* every state and scan input is sliced along its batch axis, and
   * sequence_lens read at each batch index: all must have `batch` entries */
  for (int32_t j = 1; j < k->n_in; j++) {
    const keel_tensor *x;
    KEEL_TRY(keel_k_in(k, j, &x));
    if (x->rank < 1 || x->shape[0] != batch)
      return keel_err(KEEL_ERR_SHAPE, "Scan (opset 8) input %d has no batch axis of %lld", j,
                      (long long)batch);
  }
  if (keel_k_has_in(k, 0)) {
    const keel_tensor *sl;
    KEEL_TRY(keel_k_in(k, 0, &sl));
    if (keel_tensor_numel(sl) != batch || sl->dtype == KEEL_STRING)
      return keel_err(KEEL_ERR_SHAPE, "Scan sequence_lens must hold %lld numbers", (long long)batch);
  }
  keel_val *ctl;
  KEEL_TRY(ctl_slots(k, c.M + c.N + g->n_in + g->n_out, &ctl));
  stack outs[2 * MAX_SCAN_OUTS];
  memset(outs, 0, sizeof(stack) * (size_t)(c.N + c.K));
  keel_status st = KEEL_OK;
  for (int64_t b = 0; b < batch && !st; b++) st = scan8_batch(k, g, c, b, ctl, outs);
  for (int32_t j = 0; j < c.N + c.K && !st; j++)
    st = stack_finish(k, &outs[j], &g->out_types[j], j, k->out[j]);
  for (int32_t j = 0; j < c.N + c.K; j++) keel_val_clear(&outs[j].v);
  return st;
}

static keel_status op_scan(keel_kctx *k) {
  const keel_graph *g = graph_attr(k, "body");
  if (!g) return keel_err(KEEL_ERR_INVALID_MODEL, "Scan without a body");
  return keel_k_opset(k) < 9 ? op_scan8(k, g) : op_scan9(k, g);
}

/* ============================================================ SequenceMap */

/* out_j[i] = body(seq_0[i], seq_1[i] or tensor_1, ...)_j for each i. */
static keel_status op_sequence_map(keel_kctx *k) {
  const keel_graph *g = graph_attr(k, "body");
  if (!g) return keel_err(KEEL_ERR_INVALID_MODEL, "SequenceMap without a body");
  if (g->n_in != k->n_in || g->n_out != k->n_out)
    return keel_err(KEEL_ERR_INVALID_MODEL, "SequenceMap body has %d inputs / %d outputs for %d / %d",
                    g->n_in, g->n_out, k->n_in, k->n_out);
  if (!keel_k_has_in(k, 0) || k->in[0]->kind != KEEL_V_SEQUENCE)
    return keel_err(KEEL_ERR_SHAPE, "SequenceMap input 0 must be a sequence");
  for (int32_t j = 0; j < k->n_in; j++)
    if (keel_k_has_in(k, j) && k->in[j]->kind == KEEL_V_SEQUENCE && k->in[j]->seq->of_maps)
      return keel_err(KEEL_ERR_UNSUPPORTED, "SequenceMap over a sequence of maps");
  size_t n = k->in[0]->seq->n;
  for (int32_t j = 1; j < k->n_in; j++)
    if (keel_k_has_in(k, j) && k->in[j]->kind == KEEL_V_SEQUENCE && k->in[j]->seq->n != n)
      return keel_err(KEEL_ERR_SHAPE, "SequenceMap input %d has %zu items, input 0 has %zu", j,
                      k->in[j]->seq->n, n);
  for (int32_t j = 0; j < k->n_out; j++) {
    keel_seq *s;
    KEEL_TRY(keel_k_out_seq(k, j, KEEL_UNDEFINED, &s));
  }
  keel_val *ctl;
  KEEL_TRY(ctl_slots(k, g->n_in + g->n_out, &ctl));
  keel_val *bin = ctl, *bout = ctl + g->n_in;
  keel_status st = KEEL_OK;
  for (size_t i = 0; i < n && !st; i++) {
    if ((st = keel_exec_iteration(k->run, k->node, (int64_t)i))) break;
    for (int32_t j = 0; j < k->n_in; j++) {
      const keel_val *v = k->in[j];
      if (v->kind == KEEL_V_SEQUENCE) {
        bin[j].kind = KEEL_V_TENSOR;
        keel_tensor_ref(&v->seq->items[i], &bin[j].t);
      } else {
        keel_val_ref(&bin[j], v);
      }
    }
    st = keel_exec_graph(k->run, g, k->frame, bin, g->n_in, bout, (uint32_t)i);
    for (int32_t j = 0; j < k->n_out && !st; j++) {
      if (bout[j].kind != KEEL_V_TENSOR) st = keel_err(KEEL_ERR_SHAPE, "SequenceMap body output %d is not a tensor", j);
      else st = keel_seq_insert(k->out[j]->seq, k->out[j]->seq->n, &bout[j].t);
    }
    clear_vals(bout, g->n_out);
    if (!st) keel_exec_iteration_hook(k->run, k->node, (int64_t)i);
  }
  clear_vals(ctl, g->n_in + g->n_out);
  return st;
}

/* =================================================================== table */

/* types: If's condition (any one-element number or bool); the values Loop
 * carries, Scan scans and SequenceMap maps, which may be of any type. */
#define NUM_BOOL (KEEL_TS_NUM | KEEL_T(KEEL_BOOL))
const keel_opdef keel_ops_control[] = {
    /* values pass through by reference; packed (4-, 2-bit) scan inputs and
     * scan outputs are refused where they are sliced or stacked */
    {"", "If", 1, KEEL_OPSET_MAX, op_if, 0, NUM_BOOL | KEEL_TS_SMALL},
    {"", "Loop", 1, KEEL_OPSET_MAX, op_loop, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {"", "Scan", 8, KEEL_OPSET_MAX, op_scan, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {"", "SequenceMap", 17, KEEL_OPSET_MAX, op_sequence_map, 0, KEEL_TS_ALL},
    {0},
};
#undef NUM_BOOL
