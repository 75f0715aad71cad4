/* grad_control.c: reverse mode through If, Loop and Scan (opset 9+).
 *
 * Design. A node with sub-graphs is on the path when an explicit input that
 * takes gradients, or a value its sub-graphs capture (at any depth, by
 * name), depends on a variable (autodiff.c, depends). Its rule builds the
 * backward of each sub-graph with the same driver (ad_sub_backward), into a
 * new graph held by a new backward node; rules inside those graphs may be
 * control-flow rules again, so nesting works to any depth. A backward
 * graph reads the forward sub-graph's values by name; the rule makes each
 * of those reach it explicitly, so that nothing inside a body is kept alive
 * behind its node's outputs:
 *
 *  - If: the forward If gets one extra output per value a branch's backward
 *    reads (the other branch outputs an empty placeholder for it). The
 *    backward is an If on the same condition; its branches start with
 *    `v = Identity(<extra output>)` and output the gradient of every
 *    active capture of either branch (zeros where a branch does not read
 *    it).
 *  - Loop: the forward Loop carries one more value, a tape (ops/training/tape.c,
 *    a sequence of any tensors): its body pushes every value its backward
 *    reads (inputs included: the iteration number, carried values) each
 *    iteration. The backward is a Loop that runs while the tape is not
 *    empty (as many iterations as the forward ran, whatever stopped it, so
 *    while loops work) and pops one iteration's values at the start of its
 *    body under their forward names: each is released as soon as that
 *    iteration of the backward is done with it. Its state: the gradients
 *    of the active carried values, the sums of the captures' gradients,
 *    the tape; the gradients reaching scan outputs are read per iteration
 *    (Gather at the saved iteration number). Values may change shape or be
 *    placeholders from one iteration to the next (If in the body), and a
 *    Loop inside the body saves its own tape on the outer tape (nesting).
 *  - Scan: the same tape, as one more state (starting from a TapeNew node
 *    appended to the Scan's graph: a Scan state cannot be omitted). The
 *    backward is a Scan in reverse, axes and directions mirrored: the
 *    gradients of the scan outputs are its scan inputs (or, when none
 *    reaches them, one forward scan input it ignores, for the count), the
 *    gradients of the scan inputs its scan outputs; its body pops as the
 *    Loop's does.
 *
 * Carried values take gradients when their initial value depends on a
 * variable, or the body makes them depend on one (a fixed point), and they
 * are not declared non-float. M and cond get none.
 */
#include <stdio.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "autodiff/ad_driver.h"

#define MAX_IO 256

static keel_status oom(void) { return ad_oom(); }

static keel_graph *graph_of(const keel_node *n, const char *attr) {
  const keel_attr *a = keel_node_attr(n, attr);
  return a && a->type == KEEL_ATTR_GRAPH ? a->g : NULL;
}

static const char *node_tag(const keel_node *n) { return n->name[0] ? n->name : n->op_type; }

bool ad_control_diff(const keel_node *n, int32_t i) {
  if (n->domain[0]) return true;
  if (!strcmp(n->op_type, "If")) return false;
  if (!strcmp(n->op_type, "Loop")) return i >= 2;
  return true; /* Scan: state and scan inputs; other ops: the rule reports */
}

/* The captures of n's sub-graphs that depend on a variable. */
static keel_status active_captures(ad_builder *b, const keel_node *n, ad_names *w) {
  ad_names fr = {0};
  keel_status st = ad_node_free(n, &fr);
  for (int32_t i = 0; !st && i < fr.n; i++)
    if (ad_active(b, fr.v[i])) st = ad_names_add(w, fr.v[i]);
  ad_names_free(&fr);
  return st;
}

static const char **names_alloc(ad_builder *b, int32_t n) {
  return keel_arena_array(ad_arena(b), (size_t)n + 1, sizeof(char *));
}

static keel_status zeros_like(ad_builder *b, const char *x, const char **out) {
  return ad_op(b, "ZerosLike", AD_INTERNAL, x, NULL, out, NULL);
}

/* Names the backward graph bwd reads that forward graph fwd defines. */
static keel_status reads_of(const keel_graph *bwd, const keel_graph *fwd, ad_names *need) {
  ad_names fr = {0};
  keel_status st = ad_graph_free(bwd, &fr);
  for (int32_t i = 0; !st && i < fr.n; i++)
    if (ad_graph_defines(fwd, fr.v[i])) st = ad_names_add(need, fr.v[i]);
  ad_names_free(&fr);
  return st;
}

/* ==================================================================== If */

/* Whether a branch's backward reaches capture i: always (when the If's
 * gradients exist), never (zeros), or as a bool value of the branch says. */
enum { REACH_ALWAYS, REACH_NEVER, REACH_VALUE };

typedef struct branch {
  keel_graph *fwd, *bwd;
  ad_builder *sb;              /* emits into bwd                          */
  ad_names need;               /* values of fwd that bwd reads            */
  const char **grads;          /* per capture: its gradient in bwd        */
  const char **reach;          /* per capture: REACH_VALUE's bool in bwd  */
  uint8_t *how;                /* per capture: REACH_*                    */
} branch;

/* bwd's nodes: the gradients of the captures w given gy at the If's
 * outputs (its inputs and outputs are set by branch_finish). */
static keel_status branch_backward(ad_builder *b, const keel_node *n, const char *attr,
                                   const char *const *gy, const ad_names *w, branch *br) {
  KEEL_TRY(ad_new_graph(b, node_tag(n), attr, &br->bwd));
  ad_graph_share_inits(br->bwd, br->fwd);
  KEEL_TRY(ad_sub_open(b, br->bwd, &br->sb));
  const char **seeds = names_alloc(b, n->n_out), **sg = names_alloc(b, n->n_out);
  br->grads = names_alloc(b, w->n);
  br->reach = names_alloc(b, w->n);
  br->how = keel_arena_alloc(ad_arena(b), (size_t)w->n + 1, 1);
  if (!seeds || !sg || !br->grads || !br->reach || !br->how) return oom();
  for (int32_t k = 0; k < n->n_out; k++) seeds[k] = br->fwd->out_names[k], sg[k] = gy[k];
  KEEL_TRY(ad_sub_backward(br->sb, br->fwd, w->v, w->n, seeds, sg, n->n_out, br->grads, br->reach));
  for (int32_t i = 0; i < w->n; i++) {
    br->how[i] = !br->grads[i] ? REACH_NEVER : br->reach[i] ? REACH_VALUE : REACH_ALWAYS;
    if (!br->grads[i]) KEEL_TRY(zeros_like(br->sb, w->v[i], &br->grads[i]));
  }
  return KEEL_OK;
}

/* A bool constant in the graph sb emits into (Cast of an int64 Constant). */
static keel_status bool_const(ad_builder *sb, bool v, const char **out) {
  keel_node *c;
  const char *i64 = ad_fresh(sb, "reach");
  if (!i64) return oom();
  KEEL_TRY(ad_emit(sb, "Constant", "", 0, NULL, 1, &i64, &c));
  KEEL_TRY(ad_attr_i(sb, c, "value_int", v ? 1 : 0));
  KEEL_TRY(ad_op(sb, "Cast", "", i64, NULL, out, &c));
  return ad_attr_i(sb, c, "to", KEEL_BOOL);
}

/* bwd's outputs: the gradients, then for each capture flagged in `general`
 * a bool saying whether this branch reached it; and the values of fwd it
 * reads. */
static keel_status branch_finish(ad_builder *b, const ad_names *w, const uint8_t *general,
                                 int32_t n_general, branch *br) {
  const char **outs = names_alloc(b, w->n + n_general);
  if (!outs) return oom();
  int32_t k = w->n;
  for (int32_t i = 0; i < w->n; i++) {
    outs[i] = br->grads[i];
    if (!general[i]) continue;
    if (br->how[i] == REACH_VALUE) outs[k++] = br->reach[i];
    else KEEL_TRY(bool_const(br->sb, br->how[i] == REACH_ALWAYS, &outs[k++]));
  }
  KEEL_TRY(ad_sub_install(br->sb, false));
  KEEL_TRY(ad_graph_set_io(br->sb, br->bwd, 0, NULL, w->n + n_general, outs));
  return reads_of(br->bwd, br->fwd, &br->need);
}

/* An empty float tensor as output of graph g (the branch that does not
 * make a value the other branch hands to the backward). */
static keel_status placeholder(ad_builder *b, keel_graph *g) {
  ad_builder *pb;
  KEEL_TRY(ad_sub_open(b, g, &pb));
  keel_node *c;
  const char *o = ad_fresh(pb, "placeholder");
  keel_status st = o ? ad_emit(pb, "Constant", "", 0, NULL, 1, &o, &c) : oom();
  if (!st) st = ad_attr_floats(pb, c, "value_floats", 0, NULL);
  if (!st) st = ad_sub_install(pb, false);
  if (!st) st = ad_graph_add_output(pb, g, o, NULL);
  ad_sub_close(pb);
  return st;
}

/* Makes the values br's backward reads reach it: an If output that already
 * carries the value, or a new output of the If (and of both branches). */
static keel_status export_reads(ad_builder *b, keel_node *n, branch *br, keel_graph *other) {
  for (int32_t i = 0; i < br->need.n; i++) {
    const char *v = br->need.v[i], *src = NULL;
    for (int32_t k = 0; k < n->n_out && k < br->fwd->n_out && !src; k++)
      if (!strcmp(br->fwd->out_names[k], v) && n->out_names[k][0]) src = n->out_names[k];
    if (!src) {
      if (!(src = ad_fresh(b, v))) return oom();
      KEEL_TRY(ad_graph_add_output(b, br->fwd, v, NULL));
      KEEL_TRY(placeholder(b, other));
      KEEL_TRY(ad_node_add_output(b, n, src));
    }
    if (ad_tape_is(b, v)) KEEL_TRY(ad_tape_mark(b, src));
    KEEL_TRY(ad_emit(br->sb, "Identity", "", 1, &src, 1, &v, NULL));
  }
  return ad_sub_install(br->sb, true);
}

/* The backward If. A capture's gradient exists (autodiff.c, gmap) when
 * the branch taken reaches it: always when both do, `cond` when only the
 * then branch does, Not(cond) when only the else branch does; otherwise
 * (a branch reaches it through an If of its own) each branch outputs a
 * bool more, and so does the backward If. */
static keel_status if_backward(ad_builder *b, keel_node *n, const char *const *gy,
                               const ad_names *w, branch *bt, branch *be) {
  KEEL_TRY(branch_backward(b, n, "then_grad", gy, w, bt));
  KEEL_TRY(branch_backward(b, n, "else_grad", gy, w, be));
  uint8_t *general = keel_arena_alloc(ad_arena(b), (size_t)w->n + 1, 1);
  const char **reach = names_alloc(b, w->n);
  if (!general || !reach) return oom();
  const char *cond = n->in_names[0];
  int32_t n_general = 0;
  for (int32_t i = 0; i < w->n; i++) {
    int t = bt->how[i], e = be->how[i];
    general[i] = 0;
    if (t == REACH_ALWAYS && e == REACH_ALWAYS) reach[i] = NULL;
    else if (t == REACH_ALWAYS && e == REACH_NEVER) reach[i] = cond;
    else if (t == REACH_NEVER && e == REACH_ALWAYS) KEEL_TRY(ad_op(b, "Not", "", cond, NULL, &reach[i], NULL));
    else general[i] = 1, n_general++;
  }
  KEEL_TRY(branch_finish(b, w, general, n_general, bt));
  KEEL_TRY(branch_finish(b, w, general, n_general, be));
  KEEL_TRY(export_reads(b, n, bt, be->fwd));
  KEEL_TRY(export_reads(b, n, be, bt->fwd));
  const char **outs = names_alloc(b, w->n + n_general);
  if (!outs) return oom();
  for (int32_t i = 0, k = w->n; i < w->n; i++) {
    if (!(outs[i] = ad_fresh(b, w->v[i]))) return oom();
    if (general[i] && !(reach[i] = outs[k++] = ad_fresh(b, "reached"))) return oom();
  }
  keel_node *bi;
  KEEL_TRY(ad_emit(b, "If", "", 1, (const char *const *)n->in_names, w->n + n_general, outs, &bi));
  KEEL_TRY(ad_attr_graph(b, bi, "then_branch", bt->bwd));
  KEEL_TRY(ad_attr_graph(b, bi, "else_branch", be->bwd));
  for (int32_t i = 0; i < w->n; i++) KEEL_TRY(ad_grad_add_reach(b, w->v[i], outs[i], reach[i]));
  return KEEL_OK;
}

static keel_status if_vjp(ad_builder *b, keel_node *n, const char *const *gy) {
  branch bt = {graph_of(n, "then_branch")}, be = {graph_of(n, "else_branch")};
  char lb[256];
  if (!bt.fwd || !be.fwd || n->n_in < 1 || bt.fwd->n_out != n->n_out || be.fwd->n_out != n->n_out)
    return keel_err(KEEL_ERR_INVALID_MODEL, "If %s: branches and outputs do not match",
                    keel_node_label(n, lb, sizeof lb));
  ad_names w = {0};
  keel_status st = active_captures(b, n, &w);
  if (!st && w.n) st = if_backward(b, n, gy, &w, &bt, &be);
  ad_sub_close(bt.sb);
  ad_sub_close(be.sb);
  ad_names_free(&bt.need);
  ad_names_free(&be.need);
  ad_names_free(&w);
  return st;
}

/* ========================================================= Loop and Scan */

/* A forward Loop or Scan as the reverse scan sees it. Body inputs: Loop
 * (i, cond, v_in[N]), Scan (v_in[N], x_in[M]); body outputs: Loop (cond,
 * v_out[N], y_out[K]), Scan (v_out[N], y_out[K]); node outputs (fin[N],
 * stacked y[K]). */
typedef struct rscan {
  keel_node *n;
  keel_graph *B;
  bool is_loop;
  int32_t N, M, K;
  const char **init, **v_in, **v_out, **fin;       /* N                    */
  const keel_type **v_type;
  const char **x_outer, **x_in;                    /* M                    */
  int64_t *x_axis;
  bool *x_rev;
  const char **y_out, **y_grad;                    /* K (y_grad NULL: none) */
  const char *const *gy;       /* gradients reaching the node's outputs     */
  int64_t *y_axis;
  bool *y_rev;
  bool *act, *xact;            /* carried / scanned values taking gradients */
  ad_names w;                  /* active captures                          */
  const char **gin, **acc, **gys; /* backward body inputs (fresh)          */
  int32_t n_act, n_xact, n_gys;
  ad_names saved;              /* values of B the backward reads           */
  const char **outs;           /* backward body results: carried, sums, slices */
  int32_t n_outs;
} rscan;

static keel_status rs_alloc(ad_builder *b, rscan *r) {
  keel_arena *a = ad_arena(b);
  size_t n = (size_t)r->N + 1, m = (size_t)r->M + 1, k = (size_t)r->K + 1;
  r->init = names_alloc(b, r->N), r->v_in = names_alloc(b, r->N);
  r->v_out = names_alloc(b, r->N), r->fin = names_alloc(b, r->N);
  r->v_type = keel_arena_array(a, n, sizeof(keel_type *));
  r->x_outer = names_alloc(b, r->M), r->x_in = names_alloc(b, r->M);
  r->x_axis = keel_arena_array(a, m, sizeof(int64_t));
  r->x_rev = keel_arena_array(a, m, sizeof(bool));
  r->y_out = names_alloc(b, r->K), r->y_grad = names_alloc(b, r->K);
  r->y_axis = keel_arena_array(a, k, sizeof(int64_t));
  r->y_rev = keel_arena_array(a, k, sizeof(bool));
  r->act = keel_arena_array(a, n, sizeof(bool));
  r->xact = keel_arena_array(a, m, sizeof(bool));
  r->gin = names_alloc(b, r->N), r->acc = NULL, r->gys = names_alloc(b, r->K);
  if (!r->init || !r->v_in || !r->v_out || !r->fin || !r->v_type || !r->x_outer || !r->x_in ||
      !r->x_axis || !r->x_rev || !r->y_out || !r->y_grad || !r->y_axis || !r->y_rev || !r->act ||
      !r->xact || !r->gin || !r->gys)
    return oom();
  return KEEL_OK;
}

static keel_status loop_read(ad_builder *b, keel_node *n, const char *const *gy, rscan *r) {
  char lb[256];
  r->B = graph_of(n, "body");
  r->is_loop = true;
  r->N = n->n_in - 2;
  r->K = r->B ? r->B->n_out - 1 - r->N : -1;
  if (!r->B || r->N < 0 || r->K < 0 || r->B->n_in != r->N + 2 || n->n_out != r->N + r->K ||
      r->N > MAX_IO || r->K > MAX_IO)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Loop %s: body and node inputs/outputs do not match",
                    keel_node_label(n, lb, sizeof lb));
  KEEL_TRY(rs_alloc(b, r));
  for (int32_t j = 0; j < r->N; j++) {
    r->init[j] = n->in_names[2 + j], r->v_in[j] = r->B->in_names[2 + j];
    r->v_out[j] = r->B->out_names[1 + j], r->fin[j] = n->out_names[j];
    r->v_type[j] = &r->B->in_types[2 + j];
  }
  for (int32_t k = 0; k < r->K; k++)
    r->y_out[k] = r->B->out_names[1 + r->N + k], r->y_grad[k] = gy[r->N + k];
  return KEEL_OK;
}

static const int64_t *ints_attr(const keel_node *n, const char *name, int32_t want,
                                keel_status *st) {
  const keel_attr *a = keel_node_attr(n, name);
  if (!a) return NULL;
  if (a->type != KEEL_ATTR_INTS || a->n != want)
    *st = keel_err(KEEL_ERR_INVALID_MODEL, "Scan: attribute %s needs %d values", name, want);
  return a->ints;
}

static keel_status scan_read(ad_builder *b, keel_node *n, const char *const *gy, rscan *r) {
  char lb[256];
  const keel_attr *ns = keel_node_attr(n, "num_scan_inputs");
  r->B = graph_of(n, "body");
  r->M = ns && ns->type == KEEL_ATTR_INT ? (int32_t)ns->i : -1;
  r->N = n->n_in - r->M;
  r->K = r->B ? r->B->n_out - r->N : -1;
  if (!r->B || r->M < 1 || r->N < 0 || r->K < 0 || r->B->n_in != r->N + r->M ||
      n->n_out != r->N + r->K || r->M > MAX_IO || r->N > MAX_IO || r->K > MAX_IO)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Scan %s: body and node inputs/outputs do not match",
                    keel_node_label(n, lb, sizeof lb));
  KEEL_TRY(rs_alloc(b, r));
  keel_status st = KEEL_OK;
  const int64_t *ia = ints_attr(n, "scan_input_axes", r->M, &st);
  const int64_t *id = ints_attr(n, "scan_input_directions", r->M, &st);
  const int64_t *oa = ints_attr(n, "scan_output_axes", r->K, &st);
  const int64_t *od = ints_attr(n, "scan_output_directions", r->K, &st);
  KEEL_TRY(st);
  for (int32_t j = 0; j < r->N; j++) {
    r->init[j] = n->in_names[j], r->v_in[j] = r->B->in_names[j];
    r->v_out[j] = r->B->out_names[j], r->fin[j] = n->out_names[j];
    r->v_type[j] = &r->B->in_types[j];
  }
  for (int32_t m = 0; m < r->M; m++) {
    r->x_outer[m] = n->in_names[r->N + m], r->x_in[m] = r->B->in_names[r->N + m];
    r->x_axis[m] = ia ? ia[m] : 0, r->x_rev[m] = id && id[m];
  }
  for (int32_t k = 0; k < r->K; k++) {
    r->y_out[k] = r->B->out_names[r->N + k], r->y_grad[k] = gy[r->N + k];
    r->y_axis[k] = oa ? oa[k] : 0, r->y_rev[k] = od && od[k];
  }
  return KEEL_OK;
}

static bool float_type(const keel_type *t) {
  if (t->kind != KEEL_TYPE_UNKNOWN && t->kind != KEEL_TYPE_TENSOR) return false;
  return !t->dtype || keel_dtype_is_float(t->dtype);
}

/* The body's variables as the gradients flow: active carried inputs,
 * active scan slices, active captures. */
static keel_status rs_vars(ad_builder *b, const rscan *r, const char ***vars, int32_t *nv) {
  const char **v = names_alloc(b, r->N + r->M + r->w.n);
  if (!v) return oom();
  int32_t c = 0;
  for (int32_t j = 0; j < r->N; j++)
    if (r->act[j]) v[c++] = r->v_in[j];
  for (int32_t m = 0; m < r->M; m++)
    if (r->xact[m]) v[c++] = r->x_in[m];
  for (int32_t i = 0; i < r->w.n; i++) v[c++] = r->w.v[i];
  *vars = v;
  *nv = c;
  return KEEL_OK;
}

/* Which carried values take gradients: a fixed point over the body. */
static keel_status rs_active(ad_builder *b, rscan *r) {
  KEEL_TRY(active_captures(b, r->n, &r->w));
  for (int32_t m = 0; m < r->M; m++) r->xact[m] = ad_active(b, r->x_outer[m]);
  for (int32_t j = 0; j < r->N; j++)
    r->act[j] = r->init[j][0] && float_type(r->v_type[j]) && ad_active(b, r->init[j]);
  for (bool changed = true; changed;) {
    changed = false;
    const char **vars;
    int32_t nv;
    KEEL_TRY(rs_vars(b, r, &vars, &nv));
    for (int32_t j = 0; j < r->N; j++) {
      bool d = false;
      if (r->act[j] || !float_type(r->v_type[j]) || !nv) continue;
      KEEL_TRY(ad_depends(b, r->B, vars, nv, r->v_out[j], &d));
      if (d) r->act[j] = changed = true;
    }
  }
  r->n_act = r->n_xact = 0;
  for (int32_t j = 0; j < r->N; j++) r->n_act += r->act[j];
  for (int32_t m = 0; m < r->M; m++) r->n_xact += r->xact[m];
  return KEEL_OK;
}

/* Fresh names for what the backward body receives (the carried values'
 * gradients, the sums, the scan outputs' gradient slices) and the seeds
 * they are: gradients of the forward body's outputs. */
static keel_status rs_seeds(ad_builder *sb, rscan *r, const char **seeds, const char **sg,
                            int32_t *ns) {
  for (int32_t j = 0; j < r->N; j++) {
    if (!r->act[j]) continue;
    if (!(r->gin[j] = ad_fresh(sb, r->v_out[j]))) return oom();
    seeds[*ns] = r->v_out[j], sg[(*ns)++] = r->gin[j];
  }
  for (int32_t k = 0; k < r->K; k++) {
    if (!r->y_grad[k]) continue;
    if (!(r->gys[k] = ad_fresh(sb, r->y_out[k]))) return oom();
    seeds[*ns] = r->y_out[k], sg[(*ns)++] = r->gys[k];
    r->n_gys++;
  }
  for (int32_t i = 0; i < r->w.n; i++)
    if (!(r->acc[i] = ad_fresh(sb, "sum"))) return oom();
  return KEEL_OK;
}

/* grads (in the order of vars: carried, slices, captures) completed with
 * zeros and sums, then ordered as the backward body's results: state
 * (carried, sums) then scan outputs (slices). */
static keel_status rs_results(ad_builder *sb, rscan *r, const char **grads, int32_t nv) {
  int32_t c = 0, o = 0;
  for (int32_t j = 0; j < r->N; j++) {
    if (!r->act[j]) continue;
    if (!grads[c]) KEEL_TRY(zeros_like(sb, r->gin[j], &grads[c]));
    c++;
  }
  for (int32_t m = 0; m < r->M; m++) {
    if (!r->xact[m]) continue;
    if (!grads[c]) KEEL_TRY(zeros_like(sb, r->x_in[m], &grads[c]));
    c++;
  }
  for (int32_t i = 0; i < r->w.n; i++, c++) {
    if (!grads[c]) grads[c] = r->acc[i];
    else KEEL_TRY(ad_op(sb, "Add", "", r->acc[i], grads[c], &grads[c], NULL));
  }
  const char **outs = names_alloc(sb, nv);
  if (!outs) return oom();
  for (int32_t j = 0; j < r->n_act; j++) outs[o++] = grads[j];
  for (int32_t i = 0; i < r->w.n; i++) outs[o++] = grads[r->n_act + r->n_xact + i];
  for (int32_t m = 0; m < r->n_xact; m++) outs[o++] = grads[r->n_act + m];
  r->outs = outs;
  r->n_outs = nv;
  return KEEL_OK;
}

/* The backward body's nodes: the forward body differentiated. */
static keel_status rs_body(ad_builder *sb, rscan *r) {
  const char **vars;
  int32_t nv, ns = 0;
  KEEL_TRY(rs_vars(sb, r, &vars, &nv));
  const char **seeds = names_alloc(sb, r->N + r->K), **sg = names_alloc(sb, r->N + r->K);
  const char **grads = names_alloc(sb, nv);
  r->acc = names_alloc(sb, r->w.n);
  if (!seeds || !sg || !r->acc || !grads) return oom();
  KEEL_TRY(rs_seeds(sb, r, seeds, sg, &ns));
  KEEL_TRY(ad_sub_backward(sb, r->B, vars, nv, seeds, sg, ns, grads, NULL));
  KEEL_TRY(rs_results(sb, r, grads, nv));
  return ad_sub_install(sb, false);
}

/* The backward node's initial state: the gradients reaching the final
 * carried values (zeros where none does) and zero sums. */
static keel_status rs_state0(ad_builder *b, const rscan *r, const char **ins, int32_t *c) {
  for (int32_t j = 0; j < r->N; j++) {
    if (!r->act[j]) continue;
    const char *g = r->fin[j][0] ? r->gy[j] : NULL;
    if (!g) KEEL_TRY(zeros_like(b, r->fin[j][0] ? r->fin[j] : r->init[j], &g));
    ins[(*c)++] = g;
  }
  for (int32_t i = 0; i < r->w.n; i++) KEEL_TRY(zeros_like(b, r->w.v[i], &ins[(*c)++]));
  return KEEL_OK;
}

/* ---------------------------------------------------- Loop: a tape */

/* Which saved values are tapes themselves (of a Loop inside the body). */
static keel_status tapes_attr(ad_builder *b, keel_node *n, const rscan *r) {
  int64_t *t = keel_arena_array(ad_arena(b), (size_t)r->saved.n + 1, sizeof(int64_t));
  if (!t) return oom();
  bool any = false;
  for (int32_t s = 0; s < r->saved.n; s++) any |= (t[s] = ad_tape_is(b, r->saved.v[s])) != 0;
  return any ? ad_attr_ints(b, n, "tapes", r->saved.n, t) : KEEL_OK;
}

/* A backward body starts by taking its iteration's values off the tape
 * (TapePop, last pushed first); a Loop's then says whether more are left
 * (its condition) and, for each scan output with a gradient, takes that
 * gradient's slice at the forward iteration number. */
static keel_status tape_prologue(ad_builder *sb, rscan *r, const char *tape_in,
                               const char *tape_out, const char *cond_out) {
  const char **outs = names_alloc(sb, r->saved.n + 1);
  if (!outs) return oom();
  outs[0] = tape_out;
  for (int32_t s = 0; s < r->saved.n; s++) outs[1 + s] = r->saved.v[s];
  keel_node *pop;
  KEEL_TRY(ad_emit(sb, "TapePop", AD_INTERNAL, 1, &tape_in, r->saved.n + 1, outs, &pop));
  KEEL_TRY(tapes_attr(sb, pop, r));
  if (!r->is_loop) return ad_sub_install(sb, true);
  KEEL_TRY(ad_emit(sb, "TapeNotEmpty", AD_INTERNAL, 1, &tape_out, 1, &cond_out, NULL));
  for (int32_t k = 0; k < r->K; k++) {
    if (!r->y_grad[k]) continue;
    const char *ins[2] = {r->y_grad[k], r->B->in_names[0]};
    KEEL_TRY(ad_emit(sb, "Gather", "", 2, ins, 1, &r->gys[k], NULL));
  }
  return ad_sub_install(sb, true);
}

/* Inserts `name` at position `at` of a name array of n (arena copy). */
static keel_status insert_name(ad_builder *b, const char ***arr, int32_t n, int32_t at,
                               const char *name) {
  const char **v = names_alloc(b, n + 1);
  if (!v) return oom();
  for (int32_t i = 0, k = 0; i <= n; i++) v[i] = i == at ? name : (*arr)[k++];
  *arr = v;
  return KEEL_OK;
}

/* Graph io: `name` (type unknown) inserted at `at`. */
static keel_status insert_io(ad_builder *b, const char ***names, keel_type **types, int32_t *n,
                             int32_t at, const char *name) {
  keel_type *t = keel_arena_array(ad_arena(b), (size_t)*n + 2, sizeof(keel_type));
  if (!t) return oom();
  for (int32_t i = 0, k = 0; i <= *n; i++)
    if (i != at) t[i] = (*types)[k++];
  KEEL_TRY(insert_name(b, names, *n, at, name));
  *types = t;
  (*n)++;
  return KEEL_OK;
}

/* The forward node carries a tape: its body pushes every saved value each
 * iteration. Loop: the tape is carried value N (initial value omitted: the
 * first push starts it); Scan: state N, starting from `tape0`. */
static keel_status tape_save(ad_builder *b, rscan *r, const char *tape0, const char **tape_fin) {
  keel_graph *B = r->B;
  keel_node *n = r->n;
  const char *t_in = ad_fresh(b, "tape"), *t_out = ad_fresh(b, "tape"), *fin = ad_fresh(b, "tape");
  const char **push = names_alloc(b, r->saved.n + 1);
  if (!t_in || !t_out || !fin || !push) return oom();
  push[0] = t_in;
  for (int32_t s = 0; s < r->saved.n; s++) push[1 + s] = r->saved.v[s];
  ad_builder *pb;
  KEEL_TRY(ad_sub_open(b, B, &pb));
  keel_node *pn;
  keel_status st = ad_emit(pb, "TapePush", AD_INTERNAL, r->saved.n + 1, push, 1, &t_out, &pn);
  if (!st) st = tapes_attr(pb, pn, r);
  if (!st) st = ad_sub_install(pb, false);
  if (!st) st = ad_tape_mark(b, fin);
  ad_sub_close(pb);
  KEEL_TRY(st);
  /* Loop body: (i, cond, v[N], tape) -> (cond, v[N], tape, y[K]);
   * Scan body: (v[N], tape, x[M]) -> (v[N], tape, y[K]) */
  int32_t at_in = r->is_loop ? B->n_in : r->N, at_out = r->is_loop ? 1 + r->N : r->N;
  KEEL_TRY(insert_io(b, &B->in_names, &B->in_types, &B->n_in, at_in, t_in));
  KEEL_TRY(insert_io(b, &B->out_names, &B->out_types, &B->n_out, at_out, t_out));
  int32_t node_at = r->is_loop ? n->n_in : r->N;
  KEEL_TRY(insert_name(b, (const char ***)&n->in_names, n->n_in, node_at, tape0));
  KEEL_TRY(insert_name(b, (const char ***)&n->out_names, n->n_out, r->N, fin));
  n->n_in++;
  n->n_out++;
  *tape_fin = fin;
  return KEEL_OK;
}

/* The backward Loop in b: it runs while the tape is not empty, state
 * (carried gradients, sums, tape). */
static keel_status lp_emit(ad_builder *b, rscan *r, keel_graph *bb, const char *tape_fin) {
  int32_t nin = 2 + r->n_act + r->w.n + 1, nout = r->n_act + r->w.n + 1, c = 2, o = 0;
  const char **ins = names_alloc(b, nin), **outs = names_alloc(b, nout);
  if (!ins || !outs) return oom();
  ins[0] = "";
  KEEL_TRY(ad_op(b, "TapeNotEmpty", AD_INTERNAL, tape_fin, NULL, &ins[1], NULL));
  KEEL_TRY(rs_state0(b, r, ins, &c));
  ins[c++] = tape_fin;
  for (int32_t i = 0; i < nout; i++)
    if (!(outs[i] = ad_fresh(b, "d"))) return oom();
  keel_node *lp;
  KEEL_TRY(ad_emit(b, "Loop", "", nin, ins, nout, outs, &lp));
  KEEL_TRY(ad_attr_graph(b, lp, "body", bb));
  for (int32_t j = 0; j < r->N; j++)
    if (r->act[j]) KEEL_TRY(ad_grad_add(b, r->init[j], outs[o++]));
  for (int32_t i = 0; i < r->w.n; i++) KEEL_TRY(ad_grad_add(b, r->w.v[i], outs[o++]));
  return KEEL_OK;
}

/* Backward body io: (j, cond, carried, sums, tape) -> (cond, ..., tape). */
static keel_status lp_body_io(ad_builder *sb, rscan *r, const char *t_in, const char *t_out,
                              const char *cond_out) {
  int32_t nin = 2 + r->n_act + r->w.n + 1, c = 0;
  const char **ins = names_alloc(sb, nin), **outs = names_alloc(sb, r->n_outs + 2);
  if (!ins || !outs) return oom();
  if (!(ins[c++] = ad_fresh(sb, "j")) || !(ins[c++] = ad_fresh(sb, "cond"))) return oom();
  for (int32_t j = 0; j < r->N; j++)
    if (r->act[j]) ins[c++] = r->gin[j];
  for (int32_t i = 0; i < r->w.n; i++) ins[c++] = r->acc[i];
  ins[c++] = t_in;
  outs[0] = cond_out;
  for (int32_t i = 0; i < r->n_outs; i++) outs[1 + i] = r->outs[i];
  outs[1 + r->n_outs] = t_out;
  return ad_graph_set_io(sb, ad_graph(sb), nin, ins, r->n_outs + 2, outs);
}

static keel_status lp_build(ad_builder *b, rscan *r) {
  KEEL_TRY(rs_active(b, r));
  if (!r->n_act && !r->w.n) return KEEL_OK;
  keel_graph *bb;
  KEEL_TRY(ad_new_graph(b, node_tag(r->n), "body_grad", &bb));
  ad_graph_share_inits(bb, r->B);
  ad_builder *sb;
  KEEL_TRY(ad_sub_open(b, bb, &sb));
  const char *t_in = ad_fresh(b, "tape"), *t_out = ad_fresh(b, "tape"), *fin = NULL;
  const char *more = ad_fresh(b, "more");
  keel_status st = t_in && t_out && more ? rs_body(sb, r) : oom();
  if (!st) st = lp_body_io(sb, r, t_in, t_out, more);
  if (!st) st = reads_of(bb, r->B, &r->saved);
  /* the iteration number: for the scan outputs' slices, and so that every
   * iteration pushes something */
  if (!st && (r->n_gys || !r->saved.n)) st = ad_names_add(&r->saved, r->B->in_names[0]);
  if (!st) st = tape_prologue(sb, r, t_in, t_out, more);
  ad_sub_close(sb);
  if (!st) st = tape_save(b, r, "", &fin);
  if (!st) st = lp_emit(b, r, bb, fin);
  return st;
}

/* ------------------------------------------------------- Scan: a tape */

/* Backward body io: (carried, sums, tape, scan inputs) -> (carried, sums,
 * tape, slice gradients). The scan inputs are the gradients of the scan
 * outputs, or one unused slice of a forward scan input when there are
 * none (a Scan needs one to count its iterations). */
static keel_status sc_body_io(ad_builder *sb, rscan *r, const char *t_in, const char *t_out) {
  int32_t nin = r->n_act + r->w.n + 1 + (r->n_gys ? r->n_gys : 1), c = 0, o = 0;
  const char **ins = names_alloc(sb, nin), **outs = names_alloc(sb, r->n_outs + 1);
  if (!ins || !outs) return oom();
  for (int32_t j = 0; j < r->N; j++)
    if (r->act[j]) ins[c++] = r->gin[j];
  for (int32_t i = 0; i < r->w.n; i++) ins[c++] = r->acc[i];
  ins[c++] = t_in;
  for (int32_t k = 0; k < r->K; k++)
    if (r->y_grad[k]) ins[c++] = r->gys[k];
  if (!r->n_gys && !(ins[c++] = ad_fresh(sb, "unused"))) return oom();
  for (int32_t i = 0; i < r->n_act + r->w.n; i++) outs[o++] = r->outs[i];
  outs[o++] = t_out;
  for (int32_t i = r->n_act + r->w.n; i < r->n_outs; i++) outs[o++] = r->outs[i];
  return ad_graph_set_io(sb, ad_graph(sb), nin, ins, o, outs);
}

/* Scan attributes: the gradients of the scan outputs are read in reverse
 * along their axes, those of the scan inputs written so. */
static keel_status sc_attrs(ad_builder *b, const rscan *r, keel_node *sc, keel_graph *bb) {
  int32_t M2 = r->n_gys ? r->n_gys : 1, c = 0, o = 0;
  int64_t *iax = keel_arena_array(ad_arena(b), (size_t)M2 + 1, sizeof(int64_t));
  int64_t *idir = keel_arena_array(ad_arena(b), (size_t)M2 + 1, sizeof(int64_t));
  int64_t *oax = keel_arena_array(ad_arena(b), (size_t)r->n_xact + 1, sizeof(int64_t));
  int64_t *odir = keel_arena_array(ad_arena(b), (size_t)r->n_xact + 1, sizeof(int64_t));
  if (!iax || !idir || !oax || !odir) return oom();
  for (int32_t k = 0; k < r->K; k++)
    if (r->y_grad[k]) iax[c] = r->y_axis[k], idir[c++] = !r->y_rev[k];
  if (!r->n_gys) iax[c] = r->x_axis[0], idir[c++] = !r->x_rev[0];
  for (int32_t m = 0; m < r->M; m++)
    if (r->xact[m]) oax[o] = r->x_axis[m], odir[o++] = !r->x_rev[m];
  KEEL_TRY(ad_attr_graph(b, sc, "body", bb));
  KEEL_TRY(ad_attr_i(b, sc, "num_scan_inputs", M2));
  KEEL_TRY(ad_attr_ints(b, sc, "scan_input_axes", M2, iax));
  KEEL_TRY(ad_attr_ints(b, sc, "scan_input_directions", M2, idir));
  KEEL_TRY(ad_attr_ints(b, sc, "scan_output_axes", o, oax));
  return ad_attr_ints(b, sc, "scan_output_directions", o, odir);
}

/* The backward Scan in b and the gradients it gives. */
static keel_status sc_emit(ad_builder *b, rscan *r, keel_graph *bb, const char *tape_fin) {
  int32_t M2 = r->n_gys ? r->n_gys : 1, nin = r->n_act + r->w.n + 1 + M2, c = 0;
  int32_t nout = r->n_act + r->w.n + 1 + r->n_xact, o = 0;
  const char **ins = names_alloc(b, nin), **outs = names_alloc(b, nout);
  if (!ins || !outs) return oom();
  KEEL_TRY(rs_state0(b, r, ins, &c));
  ins[c++] = tape_fin;
  for (int32_t k = 0; k < r->K; k++)
    if (r->y_grad[k]) ins[c++] = r->y_grad[k];
  if (!r->n_gys) ins[c++] = r->x_outer[0];
  for (int32_t i = 0; i < nout; i++)
    if (!(outs[i] = ad_fresh(b, "d"))) return oom();
  keel_node *sc;
  KEEL_TRY(ad_emit(b, "Scan", "", nin, ins, nout, outs, &sc));
  if (sc->opset < 11) sc->opset = 11;
  KEEL_TRY(sc_attrs(b, r, sc, bb));
  for (int32_t j = 0; j < r->N; j++)
    if (r->act[j]) KEEL_TRY(ad_grad_add(b, r->init[j], outs[o++]));
  for (int32_t i = 0; i < r->w.n; i++) KEEL_TRY(ad_grad_add(b, r->w.v[i], outs[o++]));
  o++; /* the emptied tape */
  for (int32_t m = 0; m < r->M; m++)
    if (r->xact[m]) KEEL_TRY(ad_grad_add(b, r->x_outer[m], outs[o++]));
  return KEEL_OK;
}

/* The empty tape a Scan starts from (a Scan state cannot be omitted): a
 * TapeNew node appended to the forward node's graph, last, as it moves the
 * graph's node array (the planner orders it before the Scan). */
static keel_status sc_tape0(ad_builder *b, keel_graph *g, const char *tape0) {
  ad_builder *nb;
  KEEL_TRY(ad_sub_open(b, g, &nb));
  keel_status st = ad_emit(nb, "TapeNew", AD_INTERNAL, 0, NULL, 1, &tape0, NULL);
  if (!st) st = ad_sub_install(nb, false);
  ad_sub_close(nb);
  return st;
}

static keel_status sc_build(ad_builder *b, rscan *r) {
  KEEL_TRY(rs_active(b, r));
  if (!r->n_act && !r->n_xact && !r->w.n) return KEEL_OK;
  keel_graph *bb, *g = r->n->graph;
  KEEL_TRY(ad_new_graph(b, node_tag(r->n), "body_grad", &bb));
  ad_graph_share_inits(bb, r->B);
  ad_builder *sb;
  KEEL_TRY(ad_sub_open(b, bb, &sb));
  const char *t_in = ad_fresh(b, "tape"), *t_out = ad_fresh(b, "tape"), *fin = NULL;
  const char *tape0 = ad_fresh(b, "tape");
  keel_status st = t_in && t_out && tape0 ? rs_body(sb, r) : oom();
  if (!st) st = sc_body_io(sb, r, t_in, t_out);
  if (!st) st = reads_of(bb, r->B, &r->saved);
  if (!st) st = tape_prologue(sb, r, t_in, t_out, NULL);
  ad_sub_close(sb);
  if (!st) st = tape_save(b, r, tape0, &fin);
  if (!st) st = sc_emit(b, r, bb, fin);
  if (!st) st = sc_tape0(b, g, tape0); /* r->n is stale after this */
  return st;
}

static keel_status loop_vjp(ad_builder *b, keel_node *n, const char *const *gy, bool scan) {
  rscan r = {.n = n, .gy = gy};
  keel_status st = scan ? scan_read(b, n, gy, &r) : loop_read(b, n, gy, &r);
  if (!st) st = scan ? sc_build(b, &r) : lp_build(b, &r);
  ad_names_free(&r.w);
  ad_names_free(&r.saved);
  return st;
}

/* ================================================================ entry */

/* No gradient flows through the tape itself: a second Gradient over a Loop
 * already rewritten for a first one keeps a tape of its own. */
const ad_rule ad_rules_control[] = {
    {"TapeNew", AD_INTERNAL, 0, NULL, 0},
    {"TapePush", AD_INTERNAL, 0, NULL, 0},
    {"TapePop", AD_INTERNAL, 0, NULL, 0},
    {"TapeNotEmpty", AD_INTERNAL, 0, NULL, 0},
    {0},
};

keel_status ad_control_vjp(ad_builder *b, keel_node *n, const char *const *gy) {
  char lb[256];
  keel_status st;
  if (!n->domain[0] && !strcmp(n->op_type, "If")) st = if_vjp(b, n, gy);
  else if (!n->domain[0] && !strcmp(n->op_type, "Loop")) st = loop_vjp(b, n, gy, false);
  else if (!n->domain[0] && !strcmp(n->op_type, "Scan") && n->opset >= 9) st = loop_vjp(b, n, gy, true);
  else
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "no derivative rule for node %s (domain '%s', opset %lld) in graph '%s': "
                    "of the ops with sub-graphs, If, Loop and Scan (opset 9+) are differentiated",
                    keel_node_label(n, lb, sizeof lb), n->domain[0] ? n->domain : "ai.onnx",
                    (long long)n->opset, n->graph ? n->graph->path : "?");
  if (st) st = keel_err_prefix(st, "gradient of node %s in graph '%s'", keel_node_label(n, lb, sizeof lb),
                               n->graph ? n->graph->path : "?");
  return st;
}
