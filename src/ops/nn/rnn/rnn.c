/* rnn.c: the recurrent family: RNN, GRU and LSTM at every opset (1, 3, 7,
 * 14): forward, reverse and bidirectional; optional bias, per-batch
 * sequence_lens, initial states and LSTM peepholes; clip, input_forget,
 * linear_before_reset, the eleven ONNX activations and both layouts
 * (opset 14's layout=1 is batch-major X, Y, initial_*, Y_*).
 *
 * One driver runs all three ops. Per direction it first projects every
 * time step at once, proj = X·Wᵀ + bias, one GEMM over all seq*batch rows
 * (X is read in its own layout: rows are found by index, never moved).
 * Each step then makes one GEMM of the batch's hidden state with Rᵀ and
 * runs the gate math row by row. A batch entry whose sequence is shorter
 * just stops: its state stays put, its Y rows are zero, and the reverse
 * direction starts at its own last step. GRU without linear_before_reset
 * needs (r ⊙ H)·Rhᵀ, so it makes a second GEMM per step between its gate
 * rows and its candidate rows.
 *
 * The typed parts (GEMM, activations, gate rows) exist in float and double,
 * written once by the DEF_* macros and reached through a table (rnn_vt); the
 * driver is type-blind and moves rows by byte size. float16 and bfloat16
 * run in float on staged copies and round once at the end.
 *
 * Nodes bound to rnn_fast.c's "packed" implementation (float, constant W
 * and R) arrive with k->prep: the driver is the same, but both products go
 * through keel_panel_gemm on the weights packed at bind, and Tanh
 * through vmath's keel_vm_tanh; RNN and LSTM steps split their units
 * across the session's pool (step_parts) where a step is big enough.
 * Without it (KEEL_OPT_REFERENCE_KERNELS and every other node) this file
 * is the reference: keel_gemm_f32, libm tanh, one thread.
 *
 * Where ONNX is silent keel does what onnxruntime does: activation_alpha
 * and activation_beta are consumed, in order, only by the activations that
 * take them; clip bounds the inputs of the gate activations (not the cell
 * state fed to h); input_forget couples f = 1 - i; a sequence of length 0
 * gives zeros in Y_h and Y_c. Every opset reads R transposed (the opset 1
 * and 3 docs drop the ᵀ; the shapes and every runtime say otherwise).
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>

#include "base/pool.h"
#include "ops/common/bcast.h"
#include "ops/common/conv_util.h"
#include "ops/nn/rnn/rnn_fast.h"
#include "ops/nn/rnn/select.h"
#include "ops/common/vmath.h"

enum { K_RNN = 0, K_GRU = 1, K_LSTM = 2 };

/* ======================================================= activations */

enum {
  ACT_RELU,
  ACT_TANH,
  ACT_SIGMOID,
  ACT_AFFINE,
  ACT_LEAKY_RELU,
  ACT_THRESHOLDED_RELU,
  ACT_SCALED_TANH,
  ACT_HARD_SIGMOID,
  ACT_ELU,
  ACT_SOFTSIGN,
  ACT_SOFTPLUS
};

typedef struct rnn_act {
  int fn;                      /* ACT_*                                    */
  float alpha, beta;
} rnn_act;

/* Which of alpha and beta each activation takes, and their defaults: those
 * of the ONNX operator of the same name (Affine and ScaledTanh: the old
 * experimental ops). Names match without case, as in onnxruntime. */
typedef struct act_info {
  const char *name;
  int fn;
  bool takes_alpha, takes_beta;
  float alpha, beta;
} act_info;

static const act_info g_acts[] = {
    {"Relu", ACT_RELU, false, false, 0, 0},
    {"Tanh", ACT_TANH, false, false, 0, 0},
    {"Sigmoid", ACT_SIGMOID, false, false, 0, 0},
    {"Affine", ACT_AFFINE, true, true, 1.0f, 0.0f},
    {"LeakyRelu", ACT_LEAKY_RELU, true, false, 0.01f, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, true, false, 1.0f, 0},
    {"ScaledTanh", ACT_SCALED_TANH, true, true, 1.0f, 1.0f},
    {"HardSigmoid", ACT_HARD_SIGMOID, true, true, 0.2f, 0.5f},
    {"Elu", ACT_ELU, true, false, 1.0f, 0},
    {"Softsign", ACT_SOFTSIGN, false, false, 0, 0},
    {"Softplus", ACT_SOFTPLUS, false, false, 0, 0},
};

static const act_info *act_find(const char *s, size_t n) {
  for (size_t i = 0; i < KEEL_COUNTOF(g_acts); i++) {
    const char *name = g_acts[i].name;
    if (strlen(name) != n) continue;
    size_t j = 0;
    while (j < n && (name[j] | 0x20) == (s[j] | 0x20)) j++; /* ASCII letters only */
    if (j == n) return &g_acts[i];
  }
  return NULL;
}

/* ===================================================== typed kernels */

/* What one gate row needs besides its data. */
typedef struct rnn_cell {
  int64_t hid;                 /* hidden_size: the stride of gate blocks  */
  int64_t n;                   /* RNN, LSTM: units this call computes (hid,
                                  or a part's on the parallel path)       */
  bool has_clip, lbr, couple;
  bool fast;                   /* prepared: vmath's tanh (float)          */
  double clip;
  const rnn_act *act;          /* this direction's f, g, h               */
  const void *peep;            /* LSTM: P[iof] of this direction, or NULL */
  const void *rbh;             /* GRU, linear_before_reset: Rbh, or NULL  */
} rnn_cell;

/* One batch entry's gate math for one step. x: its projection row (with
 * bias), g: its recurrent row from the step's GEMM (overwritten), h: its
 * hidden state (updated), aux: LSTM's cell state (updated) or GRU's r ⊙ H
 * row (written). */
typedef void (*rnn_row_fn)(const rnn_cell *c, const void *x, void *g, void *h, void *aux);

typedef struct rnn_vt {
  size_t es;                   /* element size                            */
  /* C (M x N) = A (M x K) · Bᵀ (B is N x K), plus C when acc */
  void (*gemm)(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, const void *B,
               int64_t ldb, bool acc, void *C, int64_t ldc);
  void (*add)(const void *a, const void *b, void *o, int64_t n);
  rnn_row_fn row[3];           /* first pass, by kind (K_RNN, K_GRU, K_LSTM) */
  rnn_row_fn gru_h;            /* GRU's second pass: candidate and state  */
} rnn_vt;

/* BLAS rejects K == 0 (input_size 0): that product is done here. */
/* Through keel's GEMM layer (a batch of one becomes a matrix-vector
 * product there); on the calling thread: the steps of a recurrence are
 * too small to split. */
#define DEF_GEMM(T, KGEMM)                                                               \
  static void gemm_##T(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,     \
                       const void *B, int64_t ldb, bool acc, void *C, int64_t ldc) {    \
    KGEMM(NULL, false, true, M, N, K, (T)1, A, lda, B, ldb, acc ? (T)1 : (T)0, C, ldc);  \
  }

#define ACT_EACH(T, expr)                  \
  for (int64_t i = 0; i < n; i++) {        \
    T v = x[i];                            \
    x[i] = (T)(expr);                      \
  }                                        \
  break

/* Softplus is log1p(e^-|v|) + max(v, 0): e^v alone overflows for v > 88. */
#define DEF_ACT(T, EXP, TANH, LOG1P)                                                      \
  static void act_##T(bool fast, const rnn_act *a, T *x, int64_t n) {                     \
    T al = (T)a->alpha, be = (T)a->beta;                                                  \
    switch (a->fn) {                                                                      \
      case ACT_RELU: ACT_EACH(T, v > 0 ? v : 0);                                          \
      case ACT_TANH:                                                                      \
        if (sizeof(T) == sizeof(float) && fast) { /* prepared path, ops/common/vmath.c */        \
          keel_vm_tanh((float *)(void *)x, (float *)(void *)x, n);                        \
          break;                                                                          \
        }                                                                                 \
        ACT_EACH(T, TANH(v));                                                             \
      case ACT_SIGMOID:                                                                   \
        if (sizeof(T) == sizeof(float)) { /* vectorized, ops/common/vmath.c */                   \
          keel_vm_sigmoid((float *)(void *)x, (float *)(void *)x, n);                     \
          break;                                                                          \
        }                                                                                 \
        ACT_EACH(T, 1 / (1 + EXP(-v)));                                                   \
      case ACT_AFFINE: ACT_EACH(T, al * v + be);                                          \
      case ACT_LEAKY_RELU: ACT_EACH(T, v >= 0 ? v : al * v);                              \
      case ACT_THRESHOLDED_RELU: ACT_EACH(T, v >= al ? v : 0);                            \
      case ACT_SCALED_TANH: ACT_EACH(T, al * TANH(be * v));                               \
      case ACT_HARD_SIGMOID: ACT_EACH(T, KEEL_MIN(KEEL_MAX(al * v + be, (T)0), (T)1));    \
      case ACT_ELU: ACT_EACH(T, v >= 0 ? v : al * (EXP(v) - 1));                          \
      case ACT_SOFTSIGN: ACT_EACH(T, v / (1 + (v < 0 ? -v : v)));                         \
      case ACT_SOFTPLUS: ACT_EACH(T, LOG1P(EXP(v < 0 ? v : -v)) + (v > 0 ? v : 0));       \
      default: break;                                                                     \
    }                                                                                     \
  }

/* clip bounds what goes into an activation; NaN passes through. */
#define DEF_BASICS(T)                                                          \
  static void clip_##T(const rnn_cell *c, T *x, int64_t n) {                   \
    if (!c->has_clip) return;                                                  \
    T lim = (T)c->clip;                                                        \
    for (int64_t i = 0; i < n; i++)                                            \
      x[i] = x[i] > lim ? lim : x[i] < -lim ? -lim : x[i];                     \
  }                                                                            \
  static void add_##T(const void *pa, const void *pb, void *po, int64_t n) {   \
    const T *a = pa, *b = pb;                                                  \
    T *o = po;                                                                 \
    for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];                        \
  }

/* RNN: H = f(x + g). */
#define DEF_RNN_ROW(T)                                                                   \
  static void rnn_row_##T(const rnn_cell *c, const void *px, void *pg, void *ph,         \
                          void *aux) {                                                   \
    const T *x = px;                                                                     \
    T *g = pg;                                                                           \
    (void)aux;                                                                           \
    for (int64_t j = 0; j < c->n; j++) g[j] += x[j];                                     \
    clip_##T(c, g, c->n);                                                                \
    act_##T(c->fast, &c->act[0], g, c->n);                                               \
    memcpy(ph, g, (size_t)c->n * sizeof(T));                                             \
  }

/* GRU, gates z r h. First pass: z and r (both through f), and r ⊙ H for
 * the second GEMM. Second pass: the candidate through g, then the state.
 * With linear_before_reset, g's h part already holds H·Rhᵀ and Rbh is
 * added inside the product with r. */
#define DEF_GRU_ROWS(T)                                                                  \
  static void gru_zr_##T(const rnn_cell *c, const void *px, void *pg, void *ph,          \
                         void *prh) {                                                    \
    const T *x = px, *h = ph;                                                            \
    T *g = pg, *rh = prh;                                                                \
    int64_t n = c->hid;                                                                  \
    for (int64_t j = 0; j < 2 * n; j++) g[j] += x[j];                                    \
    clip_##T(c, g, 2 * n);                                                               \
    act_##T(c->fast, &c->act[0], g, 2 * n);                                              \
    if (!c->lbr)                                                                         \
      for (int64_t j = 0; j < n; j++) rh[j] = g[n + j] * h[j];                           \
  }                                                                                      \
  static void gru_h_##T(const rnn_cell *c, const void *px, void *pg, void *ph,           \
                        void *aux) {                                                     \
    int64_t n = c->hid;                                                                  \
    const T *xh = (const T *)px + 2 * n, *rb = c->rbh;                                   \
    T *z = pg, *r = z + n, *gh = z + 2 * n, *h = ph;                                     \
    (void)aux;                                                                           \
    for (int64_t j = 0; j < n; j++)                                                      \
      gh[j] = c->lbr ? xh[j] + r[j] * (gh[j] + (rb ? rb[j] : 0)) : xh[j] + gh[j];        \
    clip_##T(c, gh, n);                                                                  \
    act_##T(c->fast, &c->act[1], gh, n);                                                 \
    for (int64_t j = 0; j < n; j++) h[j] = (1 - z[j]) * gh[j] + z[j] * h[j];             \
  }

/* LSTM, gates i o f c; peepholes P[iof] see the old cell state for i and f
 * and the new one for o. g's c block ends up holding h(C). The n units from
 * x, g, h, C and P as given, gate blocks hid apart. */
#define DEF_LSTM_ROW(T)                                                                  \
  static void lstm_row_##T(const rnn_cell *c, const void *px, void *pg, void *ph,        \
                           void *pcs) {                                                  \
    int64_t n = c->n, hs = c->hid;                                                       \
    const T *x = px, *p = c->peep;                                                       \
    T *gi = pg, *go = gi + hs, *gf = gi + 2 * hs, *gc = gi + 3 * hs, *h = ph, *cs = pcs; \
    for (int64_t q = 0; q < 4; q++)                                                      \
      for (int64_t j = 0; j < n; j++) gi[q * hs + j] += x[q * hs + j];                   \
    for (int64_t j = 0; p && j < n; j++) {                                               \
      gi[j] += p[j] * cs[j];                                                             \
      gf[j] += p[2 * hs + j] * cs[j];                                                    \
    }                                                                                    \
    clip_##T(c, gi, n);                                                                  \
    act_##T(c->fast, &c->act[0], gi, n);                                                 \
    if (c->couple)                                                                       \
      for (int64_t j = 0; j < n; j++) gf[j] = 1 - gi[j];                                 \
    else {                                                                               \
      clip_##T(c, gf, n);                                                                \
      act_##T(c->fast, &c->act[0], gf, n);                                               \
    }                                                                                    \
    clip_##T(c, gc, n);                                                                  \
    act_##T(c->fast, &c->act[1], gc, n);                                                 \
    for (int64_t j = 0; j < n; j++) cs[j] = gf[j] * cs[j] + gi[j] * gc[j];               \
    for (int64_t j = 0; p && j < n; j++) go[j] += p[hs + j] * cs[j];                     \
    clip_##T(c, go, n);                                                                  \
    act_##T(c->fast, &c->act[0], go, n);                                                 \
    memcpy(gc, cs, (size_t)n * sizeof(T));                                               \
    act_##T(c->fast, &c->act[2], gc, n);                                                 \
    for (int64_t j = 0; j < n; j++) h[j] = go[j] * gc[j];                                \
  }

#define DEF_TYPED(T, BLAS, EXP, TANH, LOG1P) \
  DEF_GEMM(T, BLAS)                          \
  DEF_ACT(T, EXP, TANH, LOG1P)               \
  DEF_BASICS(T)                              \
  DEF_RNN_ROW(T)                             \
  DEF_GRU_ROWS(T)                            \
  DEF_LSTM_ROW(T)                            \
  static const rnn_vt vt_##T = {sizeof(T), gemm_##T, add_##T,                   \
                                {rnn_row_##T, gru_zr_##T, lstm_row_##T}, gru_h_##T};

DEF_TYPED(float, keel_gemm_f32, expf, tanhf, log1pf)
DEF_TYPED(double, keel_gemm_f64, exp, tanh, log1p)
#undef DEF_TYPED
#undef DEF_LSTM_ROW
#undef DEF_GRU_ROWS
#undef DEF_RNN_ROW
#undef DEF_BASICS
#undef DEF_ACT
#undef ACT_EACH
#undef DEF_GEMM

/* ============================================================== plan */

/* a * b for non-negative sizes, saturating at INT64_MAX (which every size
 * check then rejects). */
static int64_t mul_sat(int64_t a, int64_t b) { return a && b > INT64_MAX / a ? INT64_MAX : a * b; }

typedef struct rnn_plan {
  int kind;                    /* K_RNN, K_GRU, K_LSTM                     */
  const char *op;              /* the op's name, for messages              */
  int gates;                   /* blocks of hidden_size rows in W and R    */
  int nact;                    /* activations per direction               */
  int dirs;                    /* num_directions                           */
  bool reverse;                /* direction = reverse                      */
  bool batch_major;            /* layout = 1                               */
  bool lbr, couple;            /* GRU linear_before_reset, LSTM input_forget */
  bool has_clip;
  float clip;
  int64_t seq, batch, in, hid;
  rnn_act act[2][3];           /* per direction: f, g, h                   */
} rnn_plan;

/* activations lists the functions of each direction in turn, or one
 * direction's that then serve both. RNN's schema default names two (Tanh,
 * Tanh) even for one direction, so such a list is accepted and its second
 * entry unused. */
static keel_status acts_count(const rnn_plan *p, int n) {
  if (n == p->nact * p->dirs || (p->dirs == 2 && n == p->nact) ||
      (p->kind == K_RNN && p->dirs == 1 && n == 2))
    return KEEL_OK;
  return keel_err(KEEL_ERR_INVALID_MODEL,
                  "%s: activations lists %d functions, expected %d (or %d when bidirectional)",
                  p->op, n, p->nact, 2 * p->nact);
}

static keel_status read_acts(keel_kctx *k, rnn_plan *p) {
  static const int defaults[3][3] = {
      {ACT_TANH}, {ACT_SIGMOID, ACT_TANH}, {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
  for (int d = 0; d < 2; d++)
    for (int j = 0; j < 3; j++) p->act[d][j] = (rnn_act){defaults[p->kind][j], 0, 0};
  const keel_attr *a = keel_k_attr(k, "activations");
  if (!a) return KEEL_OK;
  if (a->type != KEEL_ATTR_STRINGS)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: activations must be a list of strings", p->op);
  KEEL_TRY(acts_count(p, a->n));
  int na, nb, ia = 0, ib = 0;
  const float *al = keel_k_attr_floats(k, "activation_alpha", &na);
  const float *be = keel_k_attr_floats(k, "activation_beta", &nb);
  for (int i = 0; i < a->n; i++) {
    const act_info *f = act_find(a->strings[i], a->string_lens[i]);
    if (!f)
      return keel_err(KEEL_ERR_INVALID_MODEL, "%s: unknown activation '%s'", p->op, a->strings[i]);
    rnn_act r = {f->fn, f->alpha, f->beta};
    if (f->takes_alpha && ia < na) r.alpha = al[ia++];
    if (f->takes_beta && ib < nb) r.beta = be[ib++];
    if (i / p->nact < p->dirs) p->act[i / p->nact][i % p->nact] = r;
  }
  if (a->n == p->nact) memcpy(p->act[1], p->act[0], sizeof p->act[0]);
  return KEEL_OK;
}

static keel_status read_direction(keel_kctx *k, rnn_plan *p) {
  const char *dir = keel_k_attr_s(k, "direction", "forward");
  p->dirs = 1;
  p->reverse = false;
  /* GRU-1's schema spells its default "foward" */
  if (!strcmp(dir, "forward") || (keel_k_opset(k) < 7 && !strcmp(dir, "foward"))) return KEEL_OK;
  if (!strcmp(dir, "reverse")) p->reverse = true;
  else if (!strcmp(dir, "bidirectional")) p->dirs = 2;
  else
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "%s: direction '%s' is not forward, reverse or bidirectional", p->op, dir);
  return KEEL_OK;
}

static keel_status read_attrs(keel_kctx *k, int kind, rnn_plan *p) {
  static const int gates[3] = {1, 3, 4}, nact[3] = {1, 2, 3};
  int64_t opset = keel_k_opset(k);
  memset(p, 0, sizeof *p);
  p->kind = kind;
  p->op = k->node->op_type;
  p->gates = gates[kind];
  p->nact = nact[kind];
  KEEL_TRY(read_direction(k, p));
  int64_t layout = opset >= 14 ? keel_k_attr_i(k, "layout", 0) : 0;
  if (layout != 0 && layout != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: layout must be 0 or 1, got %lld", p->op,
                    (long long)layout);
  p->batch_major = layout == 1;
  /* linear_before_reset arrived with GRU-3 */
  p->lbr = kind == K_GRU && opset >= 3 && keel_k_attr_i(k, "linear_before_reset", 0) != 0;
  p->couple = kind == K_LSTM && keel_k_attr_i(k, "input_forget", 0) != 0;
  p->has_clip = keel_k_attr(k, "clip") != NULL;
  p->clip = keel_k_attr_f(k, "clip", 0.0f);
  if (p->has_clip && !(p->clip > 0))
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: clip must be positive, got %g", p->op,
                    (double)p->clip);
  return read_acts(k, p);
}

/* ============================================================ inputs */

typedef struct rnn_io {
  const keel_tensor *x, *w, *r, *b, *lens, *h0, *c0, *p; /* NULL: omitted    */
  keel_tensor *y, *yh, *yc;    /* NULL: not requested                      */
  int dt;                      /* element type of X and the others         */
} rnn_io;

/* t must have shape `want` (rank n); the message names every expected dim:
 * "W has shape [1,16,3], expected [num_directions=2, 4*hidden_size=16, ...]". */
static keel_status want_shape(const rnn_plan *p, const keel_tensor *t, const char *what, int n,
                              const int64_t *want, const char *const *names) {
  bool ok = t->rank == n;
  for (int i = 0; ok && i < n; i++) ok = t->shape[i] == want[i];
  if (ok) return KEEL_OK;
  char got[128], dims[256];
  size_t o = 0;
  dims[0] = 0;
  for (int i = 0; i < n && o < sizeof dims; i++)
    o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%s=%lld", i ? ", " : "", names[i],
                          (long long)want[i]);
  return keel_err(KEEL_ERR_SHAPE, "%s: %s has shape %s, expected [%s]", p->op, what,
                  keel_shape_str(t->rank, t->shape, got, sizeof got), dims);
}

static keel_status want_type(const rnn_plan *p, const keel_tensor *t, const char *what, int dt) {
  if (!t || t->dtype == dt) return KEEL_OK;
  return keel_err(KEEL_ERR_SHAPE, "%s: %s is %s but X is %s", p->op, what,
                  keel_dtype_name((keel_dtype)t->dtype), keel_dtype_name((keel_dtype)dt));
}

static keel_status read_x(keel_kctx *k, rnn_plan *p, rnn_io *io) {
  KEEL_TRY(keel_k_in(k, 0, &io->x));
  const keel_tensor *x = io->x;
  io->dt = x->dtype;
  if (io->dt != KEEL_FLOAT && io->dt != KEEL_DOUBLE && !keel_is_half(io->dt))
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s does not support %s", p->op,
                    keel_dtype_name((keel_dtype)io->dt));
  if (x->rank != 3) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "%s: X has shape %s, expected rank 3 (%s)", p->op,
                    keel_shape_str(x->rank, x->shape, s, sizeof s),
                    p->batch_major ? "[batch_size, seq_length, input_size]"
                                   : "[seq_length, batch_size, input_size]");
  }
  p->seq = x->shape[p->batch_major ? 1 : 0];
  p->batch = x->shape[p->batch_major ? 0 : 1];
  p->in = x->shape[2];
  return KEEL_OK;
}

/* hidden_size comes from the attribute, or from R when it is absent. */
static keel_status read_hidden(keel_kctx *k, rnn_plan *p, const keel_tensor *r) {
  const keel_attr *a = keel_k_attr(k, "hidden_size");
  if (!a && r->rank != 3) {
    char s[128];
    return keel_err(KEEL_ERR_SHAPE, "%s: R has shape %s, expected rank 3 ([num_directions, "
                    "%d*hidden_size, hidden_size])", p->op,
                    keel_shape_str(r->rank, r->shape, s, sizeof s), p->gates);
  }
  p->hid = a ? keel_k_attr_i(k, "hidden_size", 0) : r->shape[2];
  if (a && p->hid < 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s: hidden_size is %lld", p->op, (long long)p->hid);
  /* BLAS indexes with int; this also keeps every product below from overflowing */
  int64_t rows = mul_sat(p->seq, p->batch); /* X may be empty: its dims need not multiply */
  if (p->hid > INT_MAX / 4 || p->in > INT_MAX || rows > INT_MAX)
    return keel_err(KEEL_ERR_UNSUPPORTED,
                    "%s: seq_length*batch_size %lld, input_size %lld or hidden_size %lld is "
                    "too large for BLAS",
                    p->op, (long long)rows, (long long)p->in, (long long)p->hid);
  return KEEL_OK;
}

static keel_status read_weights(keel_kctx *k, rnn_plan *p, rnn_io *io) {
  KEEL_TRY(keel_k_in(k, 1, &io->w));
  KEEL_TRY(keel_k_in(k, 2, &io->r));
  KEEL_TRY(keel_k_in_opt(k, 3, &io->b));
  KEEL_TRY(read_hidden(k, p, io->r));
  char g1[32], g2[32];
  if (p->gates == 1) snprintf(g1, sizeof g1, "hidden_size");
  else snprintf(g1, sizeof g1, "%d*hidden_size", p->gates);
  snprintf(g2, sizeof g2, "%d*hidden_size", 2 * p->gates);
  int64_t gh = p->gates * p->hid;
  KEEL_TRY(want_shape(p, io->w, "W", 3, (int64_t[]){p->dirs, gh, p->in},
                      (const char *[]){"num_directions", g1, "input_size"}));
  KEEL_TRY(want_shape(p, io->r, "R", 3, (int64_t[]){p->dirs, gh, p->hid},
                      (const char *[]){"num_directions", g1, "hidden_size"}));
  if (io->b)
    KEEL_TRY(want_shape(p, io->b, "B", 2, (int64_t[]){p->dirs, 2 * gh},
                        (const char *[]){"num_directions", g2}));
  if (p->kind == K_LSTM) KEEL_TRY(keel_k_in_opt(k, 7, &io->p));
  if (io->p)
    KEEL_TRY(want_shape(p, io->p, "P", 2, (int64_t[]){p->dirs, 3 * p->hid},
                        (const char *[]){"num_directions", "3*hidden_size"}));
  return KEEL_OK;
}

/* sequence_lens (its values are read with the scratch), initial_h and
 * initial_c. */
static keel_status read_states(keel_kctx *k, const rnn_plan *p, rnn_io *io) {
  KEEL_TRY(keel_k_in_opt(k, 4, &io->lens));
  KEEL_TRY(keel_k_in_opt(k, 5, &io->h0));
  if (p->kind == K_LSTM) KEEL_TRY(keel_k_in_opt(k, 6, &io->c0));
  if (io->lens && io->lens->dtype != KEEL_INT32 && io->lens->dtype != KEEL_INT64)
    return keel_err(KEEL_ERR_SHAPE, "%s: sequence_lens must be int32 (or int64), got %s", p->op,
                    keel_dtype_name((keel_dtype)io->lens->dtype));
  if (io->lens)
    KEEL_TRY(want_shape(p, io->lens, "sequence_lens", 1, &p->batch,
                        (const char *[]){"batch_size"}));
  int64_t s0[3] = {p->dirs, p->batch, p->hid}, s1[3] = {p->batch, p->dirs, p->hid};
  const char *n0[3] = {"num_directions", "batch_size", "hidden_size"};
  const char *n1[3] = {"batch_size", "num_directions", "hidden_size"};
  const int64_t *s = p->batch_major ? s1 : s0;
  const char *const *n = p->batch_major ? n1 : n0;
  if (io->h0) KEEL_TRY(want_shape(p, io->h0, "initial_h", 3, s, n));
  if (io->c0) KEEL_TRY(want_shape(p, io->c0, "initial_c", 3, s, n));
  return KEEL_OK;
}

static keel_status read_inputs(keel_kctx *k, rnn_plan *p, rnn_io *io) {
  memset(io, 0, sizeof *io);
  KEEL_TRY(read_x(k, p, io));
  KEEL_TRY(read_weights(k, p, io));
  KEEL_TRY(read_states(k, p, io));
  const keel_tensor *same[] = {io->w, io->r, io->b, io->h0, io->c0, io->p};
  const char *names[] = {"W", "R", "B", "initial_h", "initial_c", "P"};
  for (int i = 0; i < 6; i++) KEEL_TRY(want_type(p, same[i], names[i], io->dt));
  return KEEL_OK;
}

static keel_status make_outputs(keel_kctx *k, const rnn_plan *p, rnn_io *io) {
  int64_t y0[4] = {p->seq, p->dirs, p->batch, p->hid};
  int64_t y1[4] = {p->batch, p->seq, p->dirs, p->hid};
  int64_t s0[3] = {p->dirs, p->batch, p->hid}, s1[3] = {p->batch, p->dirs, p->hid};
  const int64_t *ys = p->batch_major ? y1 : y0, *ss = p->batch_major ? s1 : s0;
  if (keel_k_has_out(k, 0)) KEEL_TRY(keel_k_out(k, 0, io->dt, 4, ys, &io->y));
  if (keel_k_has_out(k, 1)) KEEL_TRY(keel_k_out(k, 1, io->dt, 3, ss, &io->yh));
  if (p->kind == K_LSTM && keel_k_has_out(k, 2))
    KEEL_TRY(keel_k_out(k, 2, io->dt, 3, ss, &io->yc));
  return KEEL_OK;
}

/* ==================================================== working memory */

/* Everything a call needs, in the compute type (float or double). Inputs
 * point at the tensors or at staged float copies; outputs at the tensors or
 * at float buffers stored at the end. NULL: omitted, or no elements. */
typedef struct rnn_work {
  const rnn_vt *vt;
  const keel_rnn_prep *prep;   /* packed Wᵀ and Rᵀ (float), or NULL      */
  void *x;                     /* (seq*batch rows in X's layout, in)       */
  void *w;                     /* (dirs, G*hid, in)                        */
  void *r;                     /* (dirs, G*hid, hid)                       */
  void *b;                     /* (dirs, 2*G*hid)                          */
  void *p;                     /* (dirs, 3*hid)                            */
  void *h0, *c0;               /* (dirs, batch, hid) or (batch, dirs, hid) */
  void *y;                     /* Y's shape                                */
  void *yh, *yc;               /* initial_h's shape                        */
  int64_t *lens;               /* (batch)                                  */
  int64_t maxlen;              /* the longest sequence                     */
  void *proj;                  /* (seq*batch, G*hid): X·Wᵀ + bias          */
  void *gates;                 /* (batch, G*hid): one step's H·Rᵀ          */
  void *h, *c, *rh;            /* (batch, hid): H, LSTM's C, GRU's r ⊙ H   */
  void *h_next;                /* (batch, hid): the parallel steps' new H  */
  struct keel_pool *pool;      /* the session's threads                    */
  int parts;                   /* > 1: steps split by units (step_parts)   */
  void *bias;                  /* (G*hid): one direction's Wb + Rb         */
} rnn_work;

/* One scratch block carved into 64-byte aligned parts: sizes first, then a
 * single allocation (a call may hold only 8 scratch blocks). */
typedef struct carve {
  size_t total;
  bool overflow;
  int n;
  void **dst[24];
  size_t off[24];
} carve;

static void carve_add(carve *c, void **dst, int64_t count, size_t es) {
  keel_assert_internal(c->n < 24);
  *dst = NULL;
  if (count < 0 || c->total > SIZE_MAX / 2 || (uint64_t)count > (SIZE_MAX / 2 - c->total) / es) {
    c->overflow = true;
    return;
  }
  c->dst[c->n] = dst;
  c->off[c->n++] = c->total;
  c->total += ((size_t)count * es + 63) & ~(size_t)63;
}

static keel_status carve_commit(keel_kctx *k, const rnn_plan *p, carve *c) {
  if (c->overflow)
    return keel_err(KEEL_ERR_OUT_OF_MEMORY, "%s: working memory for these sizes overflows",
                    p->op);
  void *base;
  KEEL_TRY(keel_k_scratch(k, c->total ? c->total : 64, &base));
  for (int i = 0; i < c->n; i++) *c->dst[i] = (char *)base + c->off[i];
  return KEEL_OK;
}

static int64_t count_of(const keel_tensor *t) { return t ? keel_tensor_numel(t) : 0; }

/* float16 inputs and outputs get float buffers in the carve. */
static void carve_staging(carve *c, const rnn_io *io, rnn_work *w) {
  carve_add(c, &w->x, count_of(io->x), sizeof(float));
  carve_add(c, &w->w, count_of(io->w), sizeof(float));
  carve_add(c, &w->r, count_of(io->r), sizeof(float));
  carve_add(c, &w->b, count_of(io->b), sizeof(float));
  carve_add(c, &w->p, count_of(io->p), sizeof(float));
  carve_add(c, &w->h0, count_of(io->h0), sizeof(float));
  carve_add(c, &w->c0, count_of(io->c0), sizeof(float));
  carve_add(c, &w->y, count_of(io->y), sizeof(float));
  carve_add(c, &w->yh, count_of(io->yh), sizeof(float));
  carve_add(c, &w->yc, count_of(io->yc), sizeof(float));
}

static void *elems_of(const keel_tensor *t) { return t && keel_tensor_numel(t) ? t->data : NULL; }

static void stage_in(const keel_tensor *t, float *dst) {
  if (!t) return;
  const uint16_t *h = t->data;
  int64_t n = keel_tensor_numel(t);
  for (int64_t i = 0; i < n; i++)
    dst[i] = t->dtype == KEEL_FLOAT16 ? keel_f16_to_f32(h[i]) : keel_bf16_to_f32(h[i]);
}

/* Points w at the inputs and outputs, staging float16 through float. */
static void bind_io(const rnn_io *io, rnn_work *w, bool half) {
  const keel_tensor *in[7] = {io->x, io->w, io->r, io->b, io->p, io->h0, io->c0};
  void **to[7] = {&w->x, &w->w, &w->r, &w->b, &w->p, &w->h0, &w->c0};
  const keel_tensor *out[3] = {io->y, io->yh, io->yc};
  void **res[3] = {&w->y, &w->yh, &w->yc};
  for (int i = 0; i < 7; i++) {
    if (half && in[i]) stage_in(in[i], *to[i]);
    else *to[i] = elems_of(in[i]);
    if (!count_of(in[i])) *to[i] = NULL;
  }
  for (int i = 0; i < 3; i++)
    if (!half || !count_of(out[i])) *res[i] = elems_of(out[i]);
}

static keel_status read_lens(const rnn_plan *p, const keel_tensor *t, rnn_work *w) {
  w->maxlen = t ? 0 : p->seq;
  for (int64_t b = 0; b < p->batch; b++) {
    int64_t v = t ? keel_elem_get_i64(t->dtype, t->data, (size_t)b) : p->seq;
    if (v < 0 || v > p->seq)
      return keel_err(KEEL_ERR_RUNTIME,
                      "%s: sequence_lens[%lld] = %lld is outside [0, seq_length=%lld]", p->op,
                      (long long)b, (long long)v, (long long)p->seq);
    w->lens[b] = v;
    w->maxlen = KEEL_MAX(w->maxlen, v);
  }
  return KEEL_OK;
}

static keel_status make_work(keel_kctx *k, const rnn_plan *p, const rnn_io *io, rnn_work *w) {
  memset(w, 0, sizeof *w);
  bool half = keel_is_half(io->dt);
  w->vt = io->dt == KEEL_DOUBLE ? &vt_double : &vt_float;
  size_t es = w->vt->es;
  int64_t gh = p->gates * p->hid, bh = mul_sat(p->batch, p->hid);
  carve c = {0};
  void *lens;
  carve_add(&c, &lens, p->batch, sizeof(int64_t));
  carve_add(&c, &w->proj, mul_sat(p->seq * p->batch, gh), es);
  carve_add(&c, &w->gates, mul_sat(p->batch, gh), es);
  carve_add(&c, &w->h, bh, es);
  carve_add(&c, &w->c, p->kind == K_LSTM ? bh : 0, es);
  carve_add(&c, &w->rh, p->kind == K_GRU ? bh : 0, es);
  carve_add(&c, &w->h_next, bh, es);
  carve_add(&c, &w->bias, gh, es);
  if (half) carve_staging(&c, io, w);
  KEEL_TRY(carve_commit(k, p, &c));
  w->lens = lens;
  KEEL_TRY(read_lens(p, io->lens, w));
  bind_io(io, w, half);
  return KEEL_OK;
}

/* ============================================================ driver */

static void *elem_at(void *base, int64_t i, size_t es) { return (char *)base + (size_t)i * es; }

/* Row of X (and proj) holding step t of batch entry b. */
static int64_t x_row(const rnn_plan *p, int64_t t, int64_t b) {
  return p->batch_major ? b * p->seq + t : t * p->batch + b;
}
/* Element offset of (t, direction d, b) in Y. */
static int64_t y_off(const rnn_plan *p, int64_t t, int d, int64_t b) {
  return (p->batch_major ? (b * p->seq + t) * p->dirs + d : (t * p->dirs + d) * p->batch + b) *
         p->hid;
}
/* Element offset of (direction d, b) in initial_h, initial_c, Y_h, Y_c. */
static int64_t s_off(const rnn_plan *p, int d, int64_t b) {
  return (p->batch_major ? b * p->dirs + d : d * p->batch + b) * p->hid;
}
/* The time step batch entry b is at after s steps of direction d. */
static int64_t step_time(const rnn_plan *p, const rnn_work *w, int d, int64_t b, int64_t s) {
  return p->reverse || d == 1 ? w->lens[b] - 1 - s : s;
}

/* proj = bias + X·W_dᵀ for every step at once. */
static void project_inputs(const rnn_plan *p, rnn_work *w, int d) {
  const rnn_vt *vt = w->vt;
  size_t es = vt->es;
  int64_t hid = p->hid, gh = p->gates * hid, rows = p->seq * p->batch;
  if (w->b) {
    char *b = elem_at(w->b, d * 2 * gh, es); /* Wb then Rb */
    vt->add(b, b + (size_t)gh * es, w->bias, gh);
    if (p->lbr) /* Rbh belongs inside r ⊙ (H·Rhᵀ + Rbh) */
      memcpy(elem_at(w->bias, 2 * hid, es), b + (size_t)(2 * hid) * es, (size_t)hid * es);
    for (int64_t r = 0; r < rows; r++)
      memcpy(elem_at(w->proj, r * gh, es), w->bias, (size_t)gh * es);
  }
  const keel_rnn_prep *s = w->prep;
  for (int q = 0; s && q < s->nparts; q++)
    keel_panel_gemm(rows, s->part_n[q], p->in, w->x, p->in, s->w[d][q], w->b != NULL,
                    (float *)w->proj + s->part_col[q], gh);
  if (!s)
    vt->gemm(rows, gh, p->in, w->x, p->in, w->w ? elem_at(w->w, d * gh * p->in, es) : NULL,
             p->in, w->b != NULL, w->proj, gh);
}

/* H and C from initial_h and initial_c, or zeros. */
static void init_state(const rnn_plan *p, rnn_work *w, int d) {
  size_t es = w->vt->es, row = (size_t)p->hid * es;
  for (int64_t b = 0; b < p->batch; b++) {
    int64_t o = s_off(p, d, b);
    void *h = elem_at(w->h, b * p->hid, es);
    void *c = p->kind == K_LSTM ? elem_at(w->c, b * p->hid, es) : NULL;
    if (w->h0) memcpy(h, elem_at(w->h0, o, es), row);
    else memset(h, 0, row);
    if (c && w->c0) memcpy(c, elem_at(w->c0, o, es), row);
    else if (c) memset(c, 0, row);
  }
  if (p->kind == K_GRU) /* the second GEMM reads every row, finished entries too */
    memset(w->rh, 0, (size_t)(p->batch * p->hid) * es);
}

/* Runs fn on the row of every batch entry still inside its sequence. */
static void each_row(const rnn_plan *p, rnn_work *w, const rnn_cell *c, int d, int64_t s,
                     rnn_row_fn fn) {
  size_t es = w->vt->es;
  int64_t hid = p->hid, gh = p->gates * hid;
  void *aux = p->kind == K_LSTM ? w->c : p->kind == K_GRU ? w->rh : NULL;
  for (int64_t b = 0; b < p->batch; b++) {
    if (s >= w->lens[b]) continue;
    int64_t t = step_time(p, w, d, b, s);
    fn(c, elem_at(w->proj, x_row(p, t, b) * gh, es), elem_at(w->gates, b * gh, es),
       elem_at(w->h, b * hid, es), aux ? elem_at(aux, b * hid, es) : NULL);
  }
}

/* The parallel form of a step (RNN and LSTM on packed weights): part q of
 * w->parts takes the units [u0, u1) (multiples of 16): their columns of
 * every gate block of H·Rᵀ, then their gate math for every batch entry.
 * Every part reads all of H, so the new H goes to w->h_next (the two swap
 * after the step); an entry whose sequence has ended keeps its units. On
 * a batch of one, each thread reads its own 1/parts of R, from its own
 * cache, so a step costs about 1/parts of the serial one plus a wake-up. */
typedef struct step_job {
  const rnn_plan *p;
  const rnn_work *w;
  const rnn_cell *c;
  int d;
  int64_t s;
} step_job;

static keel_status step_parts(void *ctx, int64_t q0, int64_t q1, int worker) {
  const step_job *j = ctx;
  const rnn_plan *p = j->p;
  const rnn_work *w = j->w;
  int64_t hid = p->hid, gh = p->gates * hid, units = hid / 16;
  (void)worker;
  for (int64_t q = q0; q < q1; q++) {
    int64_t u0 = 16 * (units * q / w->parts), u1 = 16 * (units * (q + 1) / w->parts);
    if (u1 == u0) continue;
    for (int g = 0; g < p->gates; g++)
      keel_panel_gemm_cols(p->batch, g * hid + u0, u1 - u0, hid, w->h, hid,
                           w->prep->r[j->d][0], w->gates, gh);
    rnn_cell cell = *j->c;
    cell.n = u1 - u0;
    if (cell.peep) cell.peep = (const float *)cell.peep + u0;
    for (int64_t b = 0; b < p->batch; b++) {
      float *hn = (float *)w->h_next + b * hid + u0;
      if (j->s >= w->lens[b]) {
        memcpy(hn, (const float *)w->h + b * hid + u0, (size_t)(u1 - u0) * sizeof(float));
        continue;
      }
      int64_t t = step_time(p, w, j->d, b, j->s);
      w->vt->row[p->kind](&cell, (const float *)w->proj + x_row(p, t, b) * gh + u0,
                          (float *)w->gates + b * gh + u0, hn,
                          w->c ? (float *)w->c + b * hid + u0 : NULL);
    }
  }
  return KEEL_OK;
}

/* One time step of direction d for the whole batch. */
static void run_step(const rnn_plan *p, rnn_work *w, const rnn_cell *c, int d, int64_t s) {
  const rnn_vt *vt = w->vt;
  size_t es = vt->es;
  int64_t hid = p->hid, gh = p->gates * hid;
  char *R = elem_at(w->r, d * gh * hid, es);
  bool split = p->kind == K_GRU && !p->lbr; /* the h block waits for r ⊙ H */
  const keel_rnn_prep *pp = w->prep;
  if (w->parts > 1) { /* RNN, LSTM: products and gate math by parts */
    step_job j = {p, w, c, d, s};
    keel_status st = keel_pool_for(w->pool, w->parts, 1, step_parts, &j);
    keel_assert_internal(!st); /* the parts cannot fail */
    (void)st;
    void *h = w->h;
    w->h = w->h_next, w->h_next = h;
  } else {
    if (pp) /* GRU's h columns are part 1: now with H unless split */
      for (int q = 0; q < (split ? 1 : pp->nparts); q++)
        keel_panel_gemm(p->batch, pp->part_n[q], hid, w->h, hid, pp->r[d][q], false,
                        (float *)w->gates + pp->part_col[q], gh);
    else
      vt->gemm(p->batch, split ? 2 * hid : gh, hid, w->h, hid, R, hid, false, w->gates, gh);
    each_row(p, w, c, d, s, vt->row[p->kind]);
  }
  if (p->kind == K_GRU) {
    if (split && pp)
      keel_panel_gemm(p->batch, pp->part_n[1], hid, w->rh, hid, pp->r[d][1], false,
                      (float *)w->gates + pp->part_col[1], gh);
    else if (split)
      vt->gemm(p->batch, hid, hid, w->rh, hid, R + (size_t)(2 * hid * hid) * es, hid, false,
               elem_at(w->gates, 2 * hid, es), gh);
    each_row(p, w, c, d, s, vt->gru_h);
  }
  for (int64_t b = 0; w->y && b < p->batch; b++) {
    if (s >= w->lens[b]) continue;
    int64_t t = step_time(p, w, d, b, s);
    memcpy(elem_at(w->y, y_off(p, t, d, b), es), elem_at(w->h, b * hid, es), (size_t)hid * es);
  }
}

/* Zeros Y past each sequence's end; the final states into Y_h and Y_c
 * (zeros for an empty sequence, as onnxruntime does). */
static void finish_direction(const rnn_plan *p, rnn_work *w, int d) {
  size_t es = w->vt->es, row = (size_t)p->hid * es;
  for (int64_t b = 0; b < p->batch; b++) {
    for (int64_t t = w->lens[b]; w->y && t < p->seq; t++)
      memset(elem_at(w->y, y_off(p, t, d, b), es), 0, row);
    bool empty = w->lens[b] == 0;
    int64_t o = s_off(p, d, b);
    if (w->yh && empty) memset(elem_at(w->yh, o, es), 0, row);
    else if (w->yh) memcpy(elem_at(w->yh, o, es), elem_at(w->h, b * p->hid, es), row);
    if (w->yc && empty) memset(elem_at(w->yc, o, es), 0, row);
    else if (w->yc) memcpy(elem_at(w->yc, o, es), elem_at(w->c, b * p->hid, es), row);
  }
}

static void run_direction(const rnn_plan *p, rnn_work *w, int d) {
  size_t es = w->vt->es;
  int64_t gh = p->gates * p->hid;
  rnn_cell c = {.hid = p->hid, .n = p->hid, .has_clip = p->has_clip, .lbr = p->lbr,
                .couple = p->couple, .fast = w->prep != NULL, .clip = p->clip, .act = p->act[d]};
  if (w->p) c.peep = elem_at(w->p, d * 3 * p->hid, es);
  if (w->b && p->lbr) c.rbh = elem_at(w->b, d * 2 * gh + gh + 2 * p->hid, es);
  project_inputs(p, w, d);
  init_state(p, w, d);
  for (int64_t s = 0; s < w->maxlen; s++) run_step(p, w, &c, d, s);
  finish_direction(p, w, d);
}

/* ========================================================= operators */


/* The node's packed weights (rnn_fast.c) when they fit this call: float,
 * the same sizes (the checks above passed against X and the attributes). */
static const keel_rnn_prep *prep_for(const keel_kctx *k, const rnn_plan *p, const rnn_io *io) {
  const keel_rnn_prep *s = k->prep;
  if (!s || io->dt != KEEL_FLOAT) return NULL;
  if (s->dirs != p->dirs || s->gh != p->gates * p->hid || s->in != p->in || s->hid != p->hid)
    return NULL;
  if (s->nparts != (p->kind == K_GRU ? 2 : 1)) return NULL;
  return s;
}


/* Both directions at once, one per thread (keel_rnn_dirs_parallel). */
typedef struct dir_job {
  const rnn_plan *p;
  rnn_work *w[2];
} dir_job;

static keel_status dir_task(void *ctx, int64_t d0, int64_t d1, int worker) {
  const dir_job *j = ctx;
  (void)worker;
  for (int64_t d = d0; d < d1; d++) run_direction(j->p, j->w[d], (int)d);
  return KEEL_OK;
}

static keel_status rnn_run(keel_kctx *k, int kind) {
  rnn_plan p;
  rnn_io io;
  rnn_work w;
  KEEL_TRY(read_attrs(k, kind, &p));
  KEEL_TRY(read_inputs(k, &p, &io));
  KEEL_TRY(make_outputs(k, &p, &io));
  KEEL_TRY(make_work(k, &p, &io, &w));
  w.prep = prep_for(k, &p, &io);
  w.pool = k->pool;
  keel_rnn_facts f = {w.prep != NULL, p.kind == K_GRU, io.dt == KEEL_FLOAT,
                      p.dirs, p.batch, p.gates, p.hid};
  w.parts = keel_rnn_step_parts(&f, keel_pool_splits(k->pool));
  if (p.batch == 0 || p.hid == 0) return KEEL_OK; /* every output is empty */
  if (keel_rnn_dirs_parallel(&f, keel_pool_splits(k->pool))) {
    rnn_work w2; /* direction 1's own buffers; the same inputs and outputs */
    KEEL_TRY(make_work(k, &p, &io, &w2));
    w2.prep = w.prep, w2.pool = w.pool;
    w.parts = w2.parts = 1;
    dir_job j = {&p, {&w, &w2}};
    return keel_pool_for(k->pool, 2, 1, dir_task, &j);
  }
  for (int d = 0; d < p.dirs; d++) run_direction(&p, &w, d);
  if (keel_is_half(io.dt)) {
    if (w.y && io.y) keel_f32_store(w.y, io.y);
    if (w.yh && io.yh) keel_f32_store(w.yh, io.yh);
    if (w.yc && io.yc) keel_f32_store(w.yc, io.yc);
  }
  return KEEL_OK;
}

static keel_status op_rnn(keel_kctx *k) { return rnn_run(k, K_RNN); }
static keel_status op_gru(keel_kctx *k) { return rnn_run(k, K_GRU); }
static keel_status op_lstm(keel_kctx *k) { return rnn_run(k, K_LSTM); }

/* ============================================================= table */

/* One kernel per op: the versions differ only in attributes (output_sequence
 * before 7, linear_before_reset from GRU-3, layout from 14), read above. */
const keel_opdef keel_ops_rnn[] = {
    {"", "RNN", 1, KEEL_OPSET_MAX, op_rnn, 0, KEEL_TS_FLOAT, keel_rnn_impls},
    {"", "GRU", 1, KEEL_OPSET_MAX, op_gru, 0, KEEL_TS_FLOAT, keel_rnn_impls},
    {"", "LSTM", 1, KEEL_OPSET_MAX, op_lstm, 0, KEEL_TS_FLOAT, keel_rnn_impls},
    {0},
};
