/* test_ops_rnn.c: RNN, GRU and LSTM through real sessions against a
 * per-element reference: plain loops in double, one batch entry at a time,
 * no BLAS. Random shapes cover every direction, both layouts, opsets 1 to
 * 14, sequence_lens (zero lengths included), initial states, bias, clip,
 * peepholes, input_forget, linear_before_reset, custom activations with
 * alpha/beta, output subsets, input_size 0, and float, double and float16.
 * Then the errors: bad shapes, types and attributes, out-of-range
 * sequence_lens, each followed by a good run on the same session. */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static double uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(next() >> 11) / 9007199254740992.0;
}

/* ====================================================== test cases */

enum { RNN = 0, GRU = 1, LSTM = 2 };
static const char *const OPS[3] = {"RNN", "GRU", "LSTM"};
static const int GATES[3] = {1, 3, 4}, NACT[3] = {1, 2, 3};

typedef struct tcase {
  int kind, opset, dtype;
  int dirs, layout;
  bool reverse;
  int64_t seq, batch, in, hid;
  bool has_b, has_lens, has_h0, has_c0, has_p;
  bool lbr, couple, hid_attr;
  double clip;                 /* 0: none                                  */
  int nacts;                   /* 0: the defaults                          */
  const char *acts[6];
  double alpha[6], beta[6];    /* what each activation uses                */
  bool want[3];                /* Y, Y_h, Y_c                              */
  bool no_params;              /* write no activation_alpha / _beta        */
  bool write_lbr;              /* write linear_before_reset=1 even if !lbr */
  const char *dir_name;        /* the direction attribute, if not derived  */
  /* inputs, already rounded to dtype */
  double *x, *w, *r, *b, *h0, *c0, *p;
  int32_t lens[8];
} tcase;

typedef struct act_def {
  const char *name;
  int takes;                   /* 0: nothing, 1: alpha, 2: alpha and beta  */
  double alpha, beta;          /* defaults                                 */
} act_def;

static const act_def ACTS[] = {
    {"Relu", 0, 0, 0},         {"Tanh", 0, 0, 0},         {"Sigmoid", 0, 0, 0},
    {"Affine", 2, 1, 0},       {"LeakyRelu", 1, 0.01, 0}, {"ThresholdedRelu", 1, 1, 0},
    {"ScaledTanh", 2, 1, 1},   {"HardSigmoid", 2, 0.2, 0.5}, {"Elu", 1, 1, 0},
    {"Softsign", 0, 0, 0},     {"Softplus", 0, 0, 0},
};

/* ASCII names without case (strcasecmp is POSIX, not C11). */
static bool same_name(const char *a, const char *b) {
  while (*a && *b && (*a | 0x20) == (*b | 0x20)) a++, b++;
  return !*a && !*b;
}

static const act_def *act_def_of(const char *name) {
  for (size_t i = 0; i < sizeof ACTS / sizeof ACTS[0]; i++)
    if (same_name(ACTS[i].name, name)) return &ACTS[i];
  return NULL;
}

/* ========================================================= reference */

static double ref_act(const tcase *c, int d, int j, double v) {
  int n = NACT[c->kind], i = c->nacts == n * c->dirs ? d * n + j : j;
  static const char *const defaults[3][3] = {
      {"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  const char *name = c->nacts ? c->acts[i] : defaults[c->kind][j];
  double a = c->nacts ? c->alpha[i] : 0, b = c->nacts ? c->beta[i] : 0;
  if (c->clip > 0 && j < 2) v = v > c->clip ? c->clip : v < -c->clip ? -c->clip : v;
  if (same_name(name, "Relu")) return v > 0 ? v : 0;
  if (same_name(name, "Tanh")) return tanh(v);
  if (same_name(name, "Sigmoid")) return 1 / (1 + exp(-v));
  if (same_name(name, "Affine")) return a * v + b;
  if (same_name(name, "LeakyRelu")) return v >= 0 ? v : a * v;
  if (same_name(name, "ThresholdedRelu")) return v >= a ? v : 0;
  if (same_name(name, "ScaledTanh")) return a * tanh(b * v);
  if (same_name(name, "HardSigmoid")) return fmin(fmax(a * v + b, 0), 1);
  if (same_name(name, "Elu")) return v >= 0 ? v : a * (exp(v) - 1);
  if (same_name(name, "Softsign")) return v / (1 + fabs(v));
  return log(1 + exp(v)); /* Softplus */
}

/* Row j of gate block k of W (times x) or of R (times h), plus its bias. */
static double ref_dot(const tcase *c, int d, int k, int64_t j, const double *v, bool rec) {
  int64_t H = c->hid, G = GATES[c->kind], n = rec ? H : c->in;
  const double *m = (rec ? c->r : c->w) + ((d * G + k) * H + j) * n;
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += v[i] * m[i];
  if (c->has_b) s += c->b[d * 2 * G * H + (rec ? G * H : 0) + k * H + j];
  return s;
}

/* Unit j's pre-activation of gate k: X·Wᵀ + H·Rᵀ + both biases. */
static double ref_gate(const tcase *c, int d, int k, int64_t j, const double *x, const double *h) {
  return ref_dot(c, d, k, j, x, false) + ref_dot(c, d, k, j, h, true);
}

/* LSTM unit j (gates i o f c, peepholes i o f): new h, and the cell in *cj. */
static double ref_lstm(const tcase *c, int d, int64_t j, const double *x, const double *h,
                       const double *cs, double *cj) {
  int64_t H = c->hid;
  const double *p = c->has_p ? c->p + d * 3 * H : NULL;
  double i = ref_act(c, d, 0, ref_gate(c, d, 0, j, x, h) + (p ? p[j] * cs[j] : 0));
  double f = c->couple ? 1 - i : ref_gate(c, d, 2, j, x, h) + (p ? p[2 * H + j] * cs[j] : 0);
  if (!c->couple) f = ref_act(c, d, 0, f);
  *cj = f * cs[j] + i * ref_act(c, d, 1, ref_gate(c, d, 3, j, x, h));
  double o = ref_act(c, d, 0, ref_gate(c, d, 1, j, x, h) + (p ? p[H + j] * *cj : 0));
  return o * ref_act(c, d, 2, *cj);
}

/* GRU unit j (gates z r h): the new h. */
static double ref_gru(const tcase *c, int d, int64_t j, const double *x, const double *h) {
  double z = ref_act(c, d, 0, ref_gate(c, d, 0, j, x, h)), hh;
  if (c->lbr) { /* r ⊙ (H·Rhᵀ + Rbh) */
    hh = ref_dot(c, d, 2, j, x, false) +
         ref_act(c, d, 0, ref_gate(c, d, 1, j, x, h)) * ref_dot(c, d, 2, j, h, true);
  } else { /* (r ⊙ H)·Rhᵀ + Rbh */
    double rh[64];
    for (int64_t i = 0; i < c->hid; i++)
      rh[i] = ref_act(c, d, 0, ref_gate(c, d, 1, i, x, h)) * h[i];
    hh = ref_dot(c, d, 2, j, x, false) + ref_dot(c, d, 2, j, rh, true);
  }
  return (1 - z) * ref_act(c, d, 1, hh) + z * h[j];
}

/* One step of one batch entry: h (and cs) updated in place. */
static void ref_step(const tcase *c, int d, const double *x, double *h, double *cs) {
  double nh[64], ncs[64];
  for (int64_t j = 0; j < c->hid; j++)
    nh[j] = c->kind == RNN   ? ref_act(c, d, 0, ref_gate(c, d, 0, j, x, h))
            : c->kind == GRU ? ref_gru(c, d, j, x, h)
                             : ref_lstm(c, d, j, x, h, cs, &ncs[j]);
  memcpy(h, nh, sizeof(double) * (size_t)c->hid);
  if (c->kind == LSTM) memcpy(cs, ncs, sizeof(double) * (size_t)c->hid);
}

static int64_t y_at(const tcase *c, int64_t t, int d, int64_t b) {
  return (c->layout ? (b * c->seq + t) * c->dirs + d : (t * c->dirs + d) * c->batch + b) * c->hid;
}
static int64_t s_at(const tcase *c, int d, int64_t b) {
  return (c->layout ? b * c->dirs + d : d * c->batch + b) * c->hid;
}

/* Y, Y_h, Y_c of the whole case, each batch entry on its own. */
static void ref_run(const tcase *c, double *y, double *yh, double *yc) {
  int64_t H = c->hid;
  for (int d = 0; d < c->dirs; d++)
    for (int64_t b = 0; b < c->batch; b++) {
      double h[64] = {0}, cs[64] = {0};
      int64_t L = c->has_lens ? c->lens[b] : c->seq, o = s_at(c, d, b);
      if (c->has_h0) memcpy(h, c->h0 + o, sizeof(double) * (size_t)H);
      if (c->has_c0) memcpy(cs, c->c0 + o, sizeof(double) * (size_t)H);
      for (int64_t t = 0; t < c->seq; t++)
        memset(y + y_at(c, t, d, b), 0, sizeof(double) * (size_t)H);
      for (int64_t s = 0; s < L; s++) {
        int64_t t = c->reverse || d == 1 ? L - 1 - s : s;
        ref_step(c, d, c->x + (c->layout ? b * c->seq + t : t * c->batch + b) * c->in, h, cs);
        memcpy(y + y_at(c, t, d, b), h, sizeof(double) * (size_t)H);
      }
      for (int64_t j = 0; j < H; j++) {
        yh[o + j] = L ? h[j] : 0;
        yc[o + j] = L ? cs[j] : 0;
      }
    }
}

/* ================================================= model and values */

static void add_attrs(const tcase *c, mb_node *n) {
  static const char *const dirs[3] = {"forward", "reverse", "bidirectional"};
  if (c->hid_attr) mb_attr_i(n, "hidden_size", c->hid);
  mb_attr_s(n, "direction", c->dir_name ? c->dir_name : dirs[c->dirs == 2 ? 2 : c->reverse]);
  if (c->opset >= 14) mb_attr_i(n, "layout", c->layout);
  if (c->clip > 0) mb_attr_f(n, "clip", (float)c->clip);
  if (c->lbr || c->write_lbr) mb_attr_i(n, "linear_before_reset", 1);
  if (c->couple) mb_attr_i(n, "input_forget", 1);
  if (!c->nacts) return;
  mb_attr_strs(n, "activations", c->nacts, c->acts);
  float al[6], be[6];
  int na = 0, nb = 0;
  for (int i = 0; i < c->nacts; i++) { /* consumed only by those that take them */
    const act_def *a = act_def_of(c->acts[i]);
    if (a && a->takes >= 1) al[na++] = (float)c->alpha[i];
    if (a && a->takes >= 2) be[nb++] = (float)c->beta[i];
  }
  if (na && !c->no_params) mb_attr_floats(n, "activation_alpha", na, al);
  if (nb && !c->no_params) mb_attr_floats(n, "activation_beta", nb, be);
}

static const char *const IN_NAMES[8] = {"X", "W", "R", "B", "sequence_lens",
                                        "initial_h", "initial_c", "P"};

static bool has_input(const tcase *c, int i) {
  bool has[8] = {true, true, true, c->has_b, c->has_lens, c->has_h0, c->has_c0, c->has_p};
  return has[i];
}

static keel_session_t *build(const tcase *c) {
  mb_graph *g = mb_graph_new("main");
  char ins[128] = "", outs[64] = "";
  int last = 0;
  for (int i = 0; i < 8; i++)
    if (has_input(c, i)) last = i;
  for (int i = 0; i <= last; i++) {
    if (i) strcat(ins, ",");
    if (!has_input(c, i)) continue;
    strcat(ins, IN_NAMES[i]);
    mb_input(g, IN_NAMES[i], i == 4 ? KEEL_INT32 : c->dtype, -1, NULL);
  }
  static const char *const out_names[3] = {"Y", "Y_h", "Y_c"};
  for (int i = 0; i < 3; i++) {
    if (i) strcat(outs, ",");
    if (!c->want[i]) continue;
    strcat(outs, out_names[i]);
    mb_output(g, out_names[i], c->dtype, -1, NULL);
  }
  add_attrs(c, mb_add(g, OPS[c->kind], ins, outs));
  size_t len;
  uint8_t *m = mb_model(g, c->opset, &len);
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(m, len, NULL, NULL, &s));
  free(m);
  return s;
}

/* Rounds v to the case's type (the reference must see the fed values). */
static double round_to(int dtype, double v) {
  if (dtype == KEEL_FLOAT) return (float)v;
  if (dtype == KEEL_FLOAT16) return keel_f16_to_f32(keel_f32_to_f16((float)v));
  return v;
}

static double *random_data(const tcase *c, int64_t n, double scale) {
  double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) d[i] = round_to(c->dtype, uniform(-scale, scale));
  return d;
}

static keel_value_t *value_of(keel_session_t *s, const tcase *c, const double *d, int rank,
                              const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  void *buf = malloc((size_t)(n ? n : 1) * 8);
  for (int64_t i = 0; i < n; i++)
    if (c->dtype == KEEL_FLOAT) ((float *)buf)[i] = (float)d[i];
    else if (c->dtype == KEEL_DOUBLE) ((double *)buf)[i] = d[i];
    else ((uint16_t *)buf)[i] = keel_f32_to_f16((float)d[i]);
  keel_value_t *v = mb_tensor(s, c->dtype, rank, shape, buf);
  free(buf);
  return v;
}

/* ========================================================== checking */

typedef struct shapes {
  int64_t x[3], w[3], r[3], b[2], st[3], p[2], y[4];
} shapes;

static void shapes_of(const tcase *c, shapes *s) {
  int64_t G = GATES[c->kind], H = c->hid;
  int64_t x0[3] = {c->seq, c->batch, c->in}, x1[3] = {c->batch, c->seq, c->in};
  int64_t s0[3] = {c->dirs, c->batch, H}, s1[3] = {c->batch, c->dirs, H};
  int64_t y0[4] = {c->seq, c->dirs, c->batch, H}, y1[4] = {c->batch, c->seq, c->dirs, H};
  memcpy(s->x, c->layout ? x1 : x0, sizeof s->x);
  memcpy(s->st, c->layout ? s1 : s0, sizeof s->st);
  memcpy(s->y, c->layout ? y1 : y0, sizeof s->y);
  memcpy(s->w, (int64_t[]){c->dirs, G * H, c->in}, sizeof s->w);
  memcpy(s->r, (int64_t[]){c->dirs, G * H, H}, sizeof s->r);
  memcpy(s->b, (int64_t[]){c->dirs, 2 * G * H}, sizeof s->b);
  memcpy(s->p, (int64_t[]){c->dirs, 3 * H}, sizeof s->p);
}

static void describe(const tcase *c) {
  fprintf(stderr,
          "  case: %s opset %d dtype %d dirs %d reverse %d layout %d seq %lld batch %lld in "
          "%lld hid %lld B %d lens %d h0 %d c0 %d P %d lbr %d couple %d clip %g acts %d\n",
          OPS[c->kind], c->opset, c->dtype, c->dirs, c->reverse, c->layout, (long long)c->seq,
          (long long)c->batch, (long long)c->in, (long long)c->hid, c->has_b, c->has_lens,
          c->has_h0, c->has_c0, c->has_p, c->lbr, c->couple, c->clip, c->nacts);
}

static double tolerance(int dtype) {
  return dtype == KEEL_DOUBLE ? 1e-10 : dtype == KEEL_FLOAT ? 2e-5 : 4e-3;
}

static void compare(const tcase *c, const keel_value_t *v, const double *ref, int rank,
                    const int64_t *shape, const char *what) {
  bool ok = v && keel_value_rank(v) == rank && keel_value_dtype(v) == (keel_dtype)c->dtype;
  for (int i = 0; ok && i < rank; i++) ok = keel_value_shape(v)[i] == shape[i];
  double worst = 0;
  int64_t n = ok ? keel_value_numel(v) : 0, at = -1;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs(keel_value_at(v, i) - ref[i]) / (1 + fabs(ref[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  CHECK(ok && worst <= tolerance(c->dtype));
  if (!ok || worst > tolerance(c->dtype)) {
    fprintf(stderr, "  %s: %s, worst relative error %g at %lld (got %.9g, want %.9g)\n", what,
            ok ? "values differ" : "wrong type or shape", worst, (long long)at,
            at >= 0 ? keel_value_at(v, at) : 0.0, at >= 0 ? ref[at] : 0.0);
    describe(c);
  }
}

/* Runs the session on the case's inputs; input `swap` (when >= 0) is
 * replaced by `with` (borrowed). */
static keel_status run_swapped(keel_session_t *s, const tcase *c, keel_value_t **out, int swap,
                               keel_value_t *with) {
  shapes sh;
  shapes_of(c, &sh);
  const double *data[8] = {c->x, c->w, c->r, c->b, NULL, c->h0, c->c0, c->p};
  const int64_t *shp[8] = {sh.x, sh.w, sh.r, sh.b, &c->batch, sh.st, sh.st, sh.p};
  const int ranks[8] = {3, 3, 3, 2, 1, 3, 3, 2};
  keel_value_t *in[8];
  const char *names[8];
  size_t n = 0;
  for (int i = 0; i < 8; i++) {
    if (!has_input(c, i)) continue;
    names[n] = IN_NAMES[i];
    in[n++] = i == swap ? keel_value_retain(with)
              : i == 4  ? mb_tensor(s, KEEL_INT32, 1, &c->batch, c->lens)
                        : value_of(s, c, data[i], ranks[i], shp[i]);
  }
  keel_status st = keel_run(s, names, in, n, out);
  for (size_t i = 0; i < n; i++) keel_value_release(in[i]);
  return st;
}

static keel_status run_values(keel_session_t *s, const tcase *c, keel_value_t **out) {
  return run_swapped(s, c, out, -1, NULL);
}

/* Runs the case and compares every requested output with the reference. */
static void check_case(const tcase *c) {
  keel_session_t *s = build(c);
  if (!s) return describe(c);
  shapes sh;
  shapes_of(c, &sh);
  int64_t ny = sh.y[0] * sh.y[1] * sh.y[2] * sh.y[3], ns = sh.st[0] * sh.st[1] * sh.st[2];
  double *y = malloc(sizeof(double) * (size_t)(ny + 1));
  double *yh = malloc(sizeof(double) * (size_t)(ns + 1));
  double *yc = malloc(sizeof(double) * (size_t)(ns + 1));
  ref_run(c, y, yh, yc);
  keel_value_t *out[3] = {0};
  keel_status st = run_values(s, c, out);
  CHECK_OK(st);
  if (st) describe(c);
  const double *refs[3] = {y, yh, yc};
  const char *what[3] = {"Y", "Y_h", "Y_c"};
  for (int i = 0, o = 0; !st && i < 3; i++)
    if (c->want[i]) compare(c, out[o++], refs[i], i ? 3 : 4, i ? sh.st : sh.y, what[i]);
  for (int i = 0; i < 3; i++) keel_value_release(out[i]);
  free(y), free(yh), free(yc);
  keel_session_destroy(s);
}

/* ===================================================== random cases */

static void fill_data(tcase *c) {
  int64_t G = GATES[c->kind], H = c->hid, D = c->dirs;
  shapes sh;
  shapes_of(c, &sh);
  c->x = random_data(c, sh.x[0] * sh.x[1] * sh.x[2], 1.0);
  c->w = random_data(c, D * G * H * c->in, 0.8);
  c->r = random_data(c, D * G * H * H, 0.8);
  c->b = random_data(c, c->has_b ? D * 2 * G * H : 0, 0.5);
  c->h0 = random_data(c, c->has_h0 ? D * c->batch * H : 0, 1.0);
  c->c0 = random_data(c, c->has_c0 ? D * c->batch * H : 0, 1.0);
  c->p = random_data(c, c->has_p ? D * 3 * H : 0, 0.5);
  for (int64_t b = 0; b < c->batch; b++) c->lens[b] = (int32_t)(next() % (uint64_t)(c->seq + 1));
}

static void free_data(tcase *c) {
  free(c->x), free(c->w), free(c->r), free(c->b), free(c->h0), free(c->c0), free(c->p);
}

/* Random activations for one or both directions, random alpha/beta. */
static void random_acts(tcase *c) {
  int n = NACT[c->kind];
  c->nacts = c->dirs == 2 && next() % 2 ? n : n * c->dirs;
  for (int i = 0; i < c->nacts; i++) {
    const act_def *a = &ACTS[next() % (sizeof ACTS / sizeof ACTS[0])];
    c->acts[i] = a->name;
    c->alpha[i] = a->takes >= 1 ? (float)uniform(0.1, 1.5) : 0; /* float attributes */
    c->beta[i] = a->takes >= 2 ? (float)uniform(-0.5, 0.5) : 0;
  }
}

static void random_case(int kind, int dtype) {
  static const int opsets[4] = {1, 3, 7, 14};
  tcase c = {.kind = kind, .dtype = dtype, .opset = opsets[next() % 4]};
  if (next() % 2) c.opset = 14;
  c.dirs = 1 + (int)(next() % 2);
  c.reverse = c.dirs == 1 && next() % 2;
  c.layout = c.opset >= 14 ? (int)(next() % 2) : 0;
  c.seq = 1 + (int64_t)(next() % 5), c.batch = 1 + (int64_t)(next() % 4);
  c.in = (int64_t)(next() % 6), c.hid = 1 + (int64_t)(next() % 5);
  c.has_b = next() % 4, c.has_lens = next() % 2, c.has_h0 = next() % 2;
  c.has_c0 = kind == LSTM && next() % 2, c.has_p = kind == LSTM && next() % 2;
  c.lbr = kind == GRU && c.opset >= 3 && next() % 2;
  c.couple = kind == LSTM && next() % 4 == 0;
  c.hid_attr = next() % 4;
  c.clip = next() % 3 == 0 ? (float)uniform(0.3, 1.5) : 0; /* a float attribute */
  if (next() % 3 == 0) random_acts(&c);
  do {
    for (int i = 0; i < 3; i++) c.want[i] = next() % 2;
    if (kind != LSTM) c.want[2] = false;
  } while (!c.want[0] && !c.want[1] && !c.want[2]);
  fill_data(&c);
  check_case(&c);
  free_data(&c);
}

/* Sizes past BLAS's small-matrix paths, each op both ways at once. */
static void big_case(int kind, int dtype) {
  tcase c = {.kind = kind, .dtype = dtype, .opset = 14, .dirs = 2, .layout = 1, .seq = 7,
             .batch = 6, .in = 33, .hid = 37, .has_b = true, .has_lens = true, .has_h0 = true,
             .has_c0 = kind == LSTM, .has_p = kind == LSTM, .hid_attr = true,
             .want = {true, true, kind == LSTM}};
  fill_data(&c);
  check_case(&c);
  free_data(&c);
}

/* Activation names in any case, with no alpha/beta attributes: the
 * kernel must fall back to each function's default. */
static void default_params_case(void) {
  tcase c = {.kind = LSTM, .dtype = KEEL_FLOAT, .opset = 7, .dirs = 2, .seq = 3, .batch = 2,
             .in = 2, .hid = 3, .has_b = true, .hid_attr = true, .want = {true, true, true},
             .nacts = 6, .no_params = true,
             .acts = {"hardsigmoid", "LEAKYRELU", "Elu", "Sigmoid", "Softsign", "ScaledTanh"}};
  for (int i = 0; i < 6; i++) {
    c.alpha[i] = (float)act_def_of(c.acts[i])->alpha;
    c.beta[i] = (float)act_def_of(c.acts[i])->beta;
  }
  fill_data(&c);
  check_case(&c);
  free_data(&c);
}

/* Opset quirks: GRU-1 has no linear_before_reset (ignored) and spells its
 * default direction "foward"; RNN accepts its schema default's two
 * activations for one direction (the first applies). */
static void old_opset_cases(void) {
  tcase c = {.kind = GRU, .dtype = KEEL_FLOAT, .opset = 1, .dirs = 1, .seq = 4, .batch = 2,
             .in = 3, .hid = 3, .has_b = true, .has_lens = true, .hid_attr = true,
             .want = {true, true, false}, .write_lbr = true, .dir_name = "foward"};
  fill_data(&c);
  check_case(&c);
  c.opset = 3, c.lbr = true, c.dir_name = NULL; /* from GRU-3 on it counts */
  check_case(&c);
  free_data(&c);
  tcase r = {.kind = RNN, .dtype = KEEL_FLOAT, .opset = 7, .dirs = 1, .seq = 3, .batch = 2,
             .in = 2, .hid = 4, .has_b = true, .want = {true, true, false}, .nacts = 2,
             .acts = {"Relu", "Tanh"}};
  fill_data(&r);
  check_case(&r);
  free_data(&r);
}

/* Empty dims: seq_length 0 (Y empty, Y_h zero), batch 0, input_size 0. */
static void edge_cases(void) {
  int64_t dims[3][3] = {{0, 2, 3}, {3, 0, 2}, {2, 3, 0}};
  for (int k = 0; k < 3; k++)
    for (int e = 0; e < 3; e++) {
      tcase c = {.kind = k, .dtype = KEEL_FLOAT, .opset = 14, .dirs = 2, .seq = dims[e][0],
                 .batch = dims[e][1], .in = dims[e][2], .hid = 3, .has_b = true,
                 .has_h0 = true, .has_c0 = k == LSTM, .hid_attr = true,
                 .want = {true, true, k == LSTM}};
      fill_data(&c);
      check_case(&c);
      free_data(&c);
    }
}

/* ============================================================ errors */

/* The base for the input errors: a bidirectional batch-major LSTM, batch
 * 3, hidden 4, input 3. */
static tcase error_base(void) {
  tcase c = {.kind = LSTM, .dtype = KEEL_FLOAT, .opset = 14, .dirs = 2, .layout = 1, .seq = 3,
             .batch = 3, .in = 3, .hid = 4, .has_b = true, .has_lens = true, .has_h0 = true,
             .hid_attr = true, .want = {true, true, true}};
  fill_data(&c);
  return c;
}

/* Feeds `bad` in place of input `which`: `want` and a message holding
 * `msg`; then the good inputs run on the same session. */
static void check_bad_input(keel_session_t *s, const tcase *c, int which, keel_value_t *bad,
                            keel_status want, const char *msg) {
  keel_value_t *out[3] = {0};
  CHECK_STATUS(run_swapped(s, c, out, which, bad), want);
  CHECK(strstr(keel_last_error(), msg) != NULL);
  if (!strstr(keel_last_error(), msg)) fprintf(stderr, "  message: %s\n", keel_last_error());
  for (int i = 0; i < 3; i++) keel_value_release(out[i]), out[i] = NULL;
  CHECK_OK(run_values(s, c, out));
  for (int i = 0; i < 3; i++) keel_value_release(out[i]);
  keel_value_release(bad);
}

static void check_input_errors(void) {
  tcase c = error_base();
  keel_session_t *s = build(&c);
  CHECK(s != NULL);
  if (!s) return free_data(&c);
  double zeros[256] = {0};
  check_bad_input(s, &c, 1, value_of(s, &c, zeros, 3, (int64_t[]){1, 16, 3}), KEEL_ERR_SHAPE,
                  "LSTM: W has shape [1,16,3], expected [num_directions=2, "
                  "4*hidden_size=16, input_size=3]");
  check_bad_input(s, &c, 2, value_of(s, &c, zeros, 3, (int64_t[]){2, 16, 3}), KEEL_ERR_SHAPE,
                  "R has shape [2,16,3], expected [num_directions=2, 4*hidden_size=16, "
                  "hidden_size=4]");
  check_bad_input(s, &c, 3, value_of(s, &c, zeros, 2, (int64_t[]){2, 16}), KEEL_ERR_SHAPE,
                  "B has shape [2,16], expected [num_directions=2, 8*hidden_size=32]");
  check_bad_input(s, &c, 5, value_of(s, &c, zeros, 3, (int64_t[]){2, 3, 4}), KEEL_ERR_SHAPE,
                  "initial_h has shape [2,3,4], expected [batch_size=3, num_directions=2, "
                  "hidden_size=4]"); /* layout 0's shape under layout 1 */
  check_bad_input(s, &c, 0, value_of(s, &c, zeros, 2, (int64_t[]){2, 3}), KEEL_ERR_SHAPE,
                  "X has shape [2,3], expected rank 3");
  int64_t three = 3, two = 2;
  check_bad_input(s, &c, 4, mb_tensor(s, KEEL_INT32, 1, &three, (int32_t[]){1, 4, 2}),
                  KEEL_ERR_RUNTIME, "sequence_lens[1] = 4 is outside [0, seq_length=3]");
  check_bad_input(s, &c, 4, mb_tensor(s, KEEL_INT32, 1, &three, (int32_t[]){-1, 2, 2}),
                  KEEL_ERR_RUNTIME, "sequence_lens[0] = -1");
  check_bad_input(s, &c, 4, mb_tensor(s, KEEL_INT32, 1, &two, (int32_t[]){1, 1}),
                  KEEL_ERR_SHAPE, "sequence_lens has shape [2], expected [batch_size=3]");
  keel_session_destroy(s);
  free_data(&c);
}

/* A one-node model over good inputs with attributes from `set`: `want`,
 * from loading or from running. */
static void check_bad_attr(int kind, int opset, void (*set)(mb_node *), keel_status want,
                           const char *msg) {
  int64_t G = GATES[kind], x[3] = {2, 1, 3}, w[3] = {1, G * 2, 3}, r[3] = {1, G * 2, 2};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 3, x);
  mb_init(g, "W", KEEL_FLOAT, 3, w, (float[24]){0});
  mb_init(g, "R", KEEL_FLOAT, 3, r, (float[16]){0});
  mb_output(g, "Y_h", KEEL_FLOAT, -1, NULL);
  set(mb_add(g, OPS[kind], "X,W,R", ",Y_h"));
  keel_session_t *s = mb_session(g, opset);
  keel_status st = s ? KEEL_OK : KEEL_ERR_INVALID_MODEL;
  keel_value_t *in = s ? mb_tensor(s, KEEL_FLOAT, 3, x, (float[6]){0}) : NULL, *out = NULL;
  if (s) st = keel_run(s, (const char *[]){"X"}, &in, 1, &out);
  CHECK_STATUS(st, want);
  CHECK(strstr(keel_last_error(), msg) != NULL);
  if (!strstr(keel_last_error(), msg)) fprintf(stderr, "  message: %s\n", keel_last_error());
  keel_value_release(in);
  keel_value_release(out);
  keel_session_destroy(s);
}

/* W an initializer of another type than X (graph inputs are checked by
 * the session; initializers reach the kernel). */
static void check_type_mismatch(void) {
  int64_t x[3] = {2, 1, 3}, w[3] = {1, 2, 3}, r[3] = {1, 2, 2};
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_FLOAT, 3, x);
  mb_init(g, "W", KEEL_DOUBLE, 3, w, (double[6]){0});
  mb_init(g, "R", KEEL_FLOAT, 3, r, (float[4]){0});
  mb_output(g, "Y_h", KEEL_FLOAT, -1, NULL);
  mb_add(g, "RNN", "X,W,R", ",Y_h");
  keel_session_t *s = mb_session(g, 14);
  keel_status st = s ? KEEL_OK : KEEL_ERR_SHAPE;
  keel_value_t *in = s ? mb_tensor(s, KEEL_FLOAT, 3, x, (float[6]){0}) : NULL, *out = NULL;
  if (s) st = keel_run(s, (const char *[]){"X"}, &in, 1, &out);
  CHECK_STATUS(st, KEEL_ERR_SHAPE);
  CHECK(!s || strstr(keel_last_error(), "RNN: W is float64 but X is float32") != NULL);
  keel_value_release(in);
  keel_value_release(out);
  keel_session_destroy(s);
}

static void set_direction(mb_node *n) { mb_attr_s(n, "direction", "sideways"); }
static void set_layout(mb_node *n) { mb_attr_i(n, "layout", 2); }
static void set_clip(mb_node *n) { mb_attr_f(n, "clip", -1.0f); }
static void set_hidden(mb_node *n) { mb_attr_i(n, "hidden_size", 3); }
static void set_hidden_neg(mb_node *n) { mb_attr_i(n, "hidden_size", -2); }
static void set_acts_string(mb_node *n) { mb_attr_s(n, "activations", "Tanh"); }

/* Activation lists: an unknown name, a wrong count. */
static void check_bad_acts(int kind, int nacts, const char *name, const char *msg) {
  tcase c = {.kind = kind, .dtype = KEEL_FLOAT, .opset = 7, .dirs = 1, .seq = 2, .batch = 1,
             .in = 2, .hid = 2, .hid_attr = true, .want = {false, true, false}, .nacts = nacts,
             .acts = {name, name, name, name, name, name}};
  fill_data(&c);
  keel_session_t *s = build(&c);
  keel_value_t *out[3] = {0};
  keel_status st = s ? run_values(s, &c, out) : KEEL_ERR_INVALID_MODEL;
  CHECK_STATUS(st, KEEL_ERR_INVALID_MODEL);
  CHECK(strstr(keel_last_error(), msg) != NULL);
  for (int i = 0; i < 3; i++) keel_value_release(out[i]);
  keel_session_destroy(s);
  free_data(&c);
}

static void check_attr_errors(void) {
  check_bad_attr(RNN, 14, set_direction, KEEL_ERR_INVALID_MODEL,
                 "direction 'sideways' is not forward, reverse or bidirectional");
  check_bad_attr(GRU, 14, set_layout, KEEL_ERR_INVALID_MODEL, "layout must be 0 or 1");
  check_bad_attr(LSTM, 7, set_clip, KEEL_ERR_INVALID_MODEL, "clip must be positive");
  check_bad_attr(LSTM, 14, set_hidden, KEEL_ERR_SHAPE,
                 "LSTM: W has shape [1,8,3], expected [num_directions=1, 4*hidden_size=12, "
                 "input_size=3]");
  check_bad_attr(RNN, 7, set_hidden_neg, KEEL_ERR_INVALID_MODEL, "hidden_size is -2");
  check_bad_attr(GRU, 7, set_acts_string, KEEL_ERR_INVALID_MODEL, "list of strings");
  check_bad_acts(GRU, 2, "Swish", "unknown activation 'Swish'");
  check_bad_acts(LSTM, 2, "Tanh", "activations lists 2 functions, expected 3");
  check_type_mismatch();
}

int main(void) {
  for (int i = 0; i < 120; i++) random_case(i % 3, KEEL_FLOAT);
  for (int i = 0; i < 30; i++) random_case(i % 3, KEEL_DOUBLE);
  for (int i = 0; i < 15; i++) random_case(i % 3, KEEL_FLOAT16);
  for (int k = 0; k < 3; k++) big_case(k, KEEL_FLOAT);
  big_case(LSTM, KEEL_DOUBLE);
  default_params_case();
  edge_cases();
  old_opset_cases();
  check_input_errors();
  check_attr_errors();
  return check_report();
}
