/* test_train.c: the trainer (keel_train.h) on a small MLP made of ops that
 * have derivative rules today (MatMul, Add, Sub, Mul, Tanh, Reshape,
 * Shape), checked against a reference written here in plain C: forward and
 * backward in double, the optimizers from torch.optim's formulas in float.
 *
 *   h = Tanh(x W1 + b1); o = h W2 + b2; d = o - t
 *   loss = Reshape(r (d * d) c, Shape(s0))     r: [1,N] row weights (data),
 *                                              c: [3,1] ones (frozen),
 *                                              s0: a float scalar only Shape reads
 * Checks: which initializers are trained; loss and parameters after N steps
 * with every optimizer, batches changing shape; allocated bytes identical
 * from step 2; checkpoint + resume equals straight training bit for bit; the
 * saved model holds the trained values; mapped pages given back (RSS);
 * bad input gives clear errors and the trainer stays usable; a planted leak
 * is named; zero bytes at the end. */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "keel_train.h"
#include "mb.h"

#define NI 4
#define NH 8
#define NO 3

static const float W1_0[NI * NH] = {0.12f, -0.31f, 0.25f, 0.07f, -0.18f, 0.29f, -0.05f, 0.33f,
                                    -0.22f, 0.14f, 0.09f, -0.27f, 0.31f, -0.12f, 0.2f, -0.08f,
                                    0.05f, 0.23f, -0.3f, 0.11f, -0.02f, 0.17f, -0.25f, 0.28f,
                                    0.19f, -0.06f, 0.13f, 0.26f, -0.21f, -0.15f, 0.08f, -0.33f};
static const float b1_0[NH] = {0.01f, -0.02f, 0.03f, 0.0f, -0.01f, 0.02f, 0.015f, -0.025f};
static const float W2_0[NH * NO] = {0.3f, -0.2f, 0.1f, -0.15f, 0.25f, 0.05f, 0.2f, -0.1f,
                                    -0.3f, 0.12f, 0.18f, -0.22f, -0.05f, 0.28f, 0.16f, 0.21f,
                                    -0.19f, 0.07f, -0.11f, 0.09f, 0.27f, 0.14f, -0.24f, 0.02f};
static const float b2_0[NO] = {0.05f, -0.05f, 0.1f};

/* The model; act: the activation op ("Tanh", or one without a rule);
 * w2_input: W2 is listed as a graph input too (IR < 4 exporters), and
 * d goes through a Mul by a float Constant node 1 (not trainable). */
static uint8_t *mlp_ex(const char *act, bool w2_input, size_t *len) {
  mb_graph *g = mb_graph_new("main");
  if (w2_input) mb_input(g, "W2", KEEL_FLOAT, 2, (int64_t[]){NH, NO});
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){-1, NI});
  mb_input(g, "t", KEEL_FLOAT, 2, (int64_t[]){-1, NO});
  mb_input(g, "r", KEEL_FLOAT, 2, (int64_t[]){1, -1});
  mb_init(g, "W1", KEEL_FLOAT, 2, (int64_t[]){NI, NH}, W1_0);
  mb_init(g, "b1", KEEL_FLOAT, 1, (int64_t[]){NH}, b1_0);
  mb_init(g, "W2", KEEL_FLOAT, 2, (int64_t[]){NH, NO}, W2_0);
  mb_init(g, "b2", KEEL_FLOAT, 1, (int64_t[]){NO}, b2_0);
  float ones[NO] = {1, 1, 1}, s0 = 0;
  mb_init(g, "c", KEEL_FLOAT, 2, (int64_t[]){NO, 1}, ones);
  mb_init(g, "s0", KEEL_FLOAT, 0, NULL, &s0);
  mb_add(g, "MatMul", "x,W1", "xw");
  mb_add(g, "Add", "xw,b1", "h2");
  mb_add(g, act, "h2", "h");
  mb_add(g, "MatMul", "h,W2", "hw");
  mb_add(g, "Add", "hw,b2", "o");
  if (w2_input) {
    float one = 1;
    mb_attr_t(mb_add(g, "Constant", "", "one"), "value", KEEL_FLOAT, 0, NULL, &one);
    mb_add(g, "Sub", "o,t", "d0");
    mb_add(g, "Mul", "d0,one", "d");
  } else {
    mb_add(g, "Sub", "o,t", "d");
  }
  mb_add(g, "Mul", "d,d", "sq");
  mb_add(g, "MatMul", "r,sq", "rs");
  mb_add(g, "MatMul", "rs,c", "s11");
  mb_add(g, "Shape", "s0", "shp");
  mb_add(g, "Reshape", "s11,shp", "loss");
  mb_output(g, "loss", KEEL_FLOAT, -1, NULL);
  mb_output(g, "sq", KEEL_FLOAT, -1, NULL);
  return mb_model(g, 13, len);
}

static uint8_t *mlp(const char *act, size_t *len) { return mlp_ex(act, false, len); }

/* ====================================================== the reference */

typedef struct ref {
  float W1[NI * NH], b1[NH], W2[NH * NO], b2[NO];
  float st[4][2][NI * NH];
  int64_t step;
} ref;

typedef struct batch {
  int n;
  float x[8 * NI], t[8 * NO], r[8];
} batch;

/* Loss and gradients in double at the current parameters. */
static double ref_grads(const ref *m, const batch *b, double *gW1, double *gb1, double *gW2,
                        double *gb2) {
  double loss = 0;
  memset(gW1, 0, sizeof(double) * NI * NH), memset(gb1, 0, sizeof(double) * NH);
  memset(gW2, 0, sizeof(double) * NH * NO), memset(gb2, 0, sizeof(double) * NO);
  for (int n = 0; n < b->n; n++) {
    double h[NH], dd[NO], dh[NH];
    for (int j = 0; j < NH; j++) {
      double a = m->b1[j];
      for (int i = 0; i < NI; i++) a += (double)b->x[n * NI + i] * m->W1[i * NH + j];
      h[j] = tanh(a);
    }
    for (int k = 0; k < NO; k++) {
      double o = m->b2[k];
      for (int j = 0; j < NH; j++) o += h[j] * m->W2[j * NO + k];
      double d = o - b->t[n * NO + k];
      loss += b->r[n] * d * d;
      dd[k] = 2 * b->r[n] * d;
      gb2[k] += dd[k];
    }
    for (int j = 0; j < NH; j++) {
      double a = 0;
      for (int k = 0; k < NO; k++) a += dd[k] * m->W2[j * NO + k], gW2[j * NO + k] += h[j] * dd[k];
      dh[j] = a * (1 - h[j] * h[j]);
      gb1[j] += dh[j];
      for (int i = 0; i < NI; i++) gW1[i * NH + j] += b->x[n * NI + i] * dh[j];
    }
  }
  return loss;
}

/* torch.optim's update, written out again (not optim.c's code). */
static void ref_update(const keel_train_options *o, int64_t step, float *w, const double *gd,
                       float *s0, float *s1, int n) {
  for (int i = 0; i < n; i++) {
    float g = (float)gd[i];
    if (o->optimizer <= KEEL_OPTIM_MOMENTUM) {
      if (o->weight_decay != 0) g += (float)o->weight_decay * w[i];
      if (o->momentum != 0) g = s0[i] = step == 1 ? g : s0[i] * (float)o->momentum + g;
      w[i] += (float)-o->lr * g;
      continue;
    }
    if (o->optimizer == KEEL_OPTIM_ADAMW) w[i] *= (float)(1 - o->lr * o->weight_decay);
    else if (o->weight_decay != 0) g += (float)o->weight_decay * w[i];
    float b1w = (float)(1 - o->beta1);
    s0[i] = s0[i] + b1w * (g - s0[i]);
    s1[i] = s1[i] * (float)o->beta2 + (float)(1 - o->beta2) * g * g;
    double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
    float denom = sqrtf(s1[i]) / (float)sqrt(bc2) + (float)o->eps;
    w[i] += (float)-(o->lr / bc1) * (s0[i] / denom);
  }
}

static double ref_step(ref *m, const keel_train_options *o, const batch *b) {
  double gW1[NI * NH], gb1[NH], gW2[NH * NO], gb2[NO];
  double loss = ref_grads(m, b, gW1, gb1, gW2, gb2);
  m->step++;
  ref_update(o, m->step, m->W1, gW1, m->st[0][0], m->st[0][1], NI * NH);
  ref_update(o, m->step, m->b1, gb1, m->st[1][0], m->st[1][1], NH);
  ref_update(o, m->step, m->W2, gW2, m->st[2][0], m->st[2][1], NH * NO);
  ref_update(o, m->step, m->b2, gb2, m->st[3][0], m->st[3][1], NO);
  return loss;
}

static void ref_init(ref *m) {
  memset(m, 0, sizeof *m);
  memcpy(m->W1, W1_0, sizeof W1_0), memcpy(m->b1, b1_0, sizeof b1_0);
  memcpy(m->W2, W2_0, sizeof W2_0), memcpy(m->b2, b2_0, sizeof b2_0);
}

/* ============================================================ batches */

static void make_batch(batch *b, int n, unsigned seed) {
  b->n = n;
  unsigned s = seed;
  for (int i = 0; i < n * NI; i++) s = s * 1103515245u + 12345u, b->x[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
  for (int i = 0; i < n * NO; i++) s = s * 1103515245u + 12345u, b->t[i] = (float)((s >> 8) % 1001) / 1000.0f;
  for (int i = 0; i < n; i++) b->r[i] = 1.0f / (float)n;
}

typedef struct feed {
  keel_value_t *v[3];
} feed;

static feed make_feed(keel_session_t *s, const batch *b) {
  feed f = {{mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){b->n, NI}, b->x),
             mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){b->n, NO}, b->t),
             mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, b->n}, b->r)}};
  return f;
}

static void free_feed(feed *f) {
  for (int i = 0; i < 3; i++) keel_value_release(f->v[i]);
}

static const char *FREEZE[] = {"c"};

static keel_trainer_t *trainer(const uint8_t *bytes, size_t len, const keel_train_options *o) {
  keel_trainer_t *t = NULL;
  CHECK_OK(keel_trainer_create_from_memory(bytes, len, NULL, o, &t));
  return t;
}

static void options(keel_train_options *o, keel_optimizer opt, double lr) {
  keel_train_options_init(o, opt, lr);
  o->loss = "loss";
  o->freeze = FREEZE;
  o->n_freeze = 1;
}

/* The first occurrence of string s in the n bytes at p, or NULL. */
static const char *find(const char *p, size_t n, const char *s) {
  size_t k = strlen(s);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(p + i, s, k)) return p + i;
  return NULL;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-5 * (1 + fabs(b)); }

static void check_params(keel_trainer_t *t, const ref *m) {
  const char *names[4] = {"W1", "b1", "W2", "b2"};
  const float *want[4] = {m->W1, m->b1, m->W2, m->b2};
  int sizes[4] = {NI * NH, NH, NH * NO, NO};
  for (int p = 0; p < 4; p++) {
    float got[NI * NH];
    CHECK_OK(keel_trainer_param_copy(t, names[p], got, NI * NH));
    int bad = 0;
    for (int i = 0; i < sizes[p]; i++) bad += !close_to(got[i], want[p][i]);
    if (bad) fprintf(stderr, "parameter %s: %d of %d elements differ from the reference\n", names[p], bad, sizes[p]);
    CHECK(bad == 0);
  }
}

/* ============================================================== tests */

static void trains_the_right_initializers(const uint8_t *bytes, size_t len) {
  keel_train_options o;
  options(&o, KEEL_OPTIM_SGD, 0.1);
  keel_trainer_t *t = trainer(bytes, len, &o);
  if (!t) return;
  CHECK(keel_trainer_param_count(t) == 4);
  const char *want[4] = {"W1", "b1", "W2", "b2"};
  for (size_t i = 0; i < 4; i++) CHECK(keel_trainer_param_name(t, i) && !strcmp(keel_trainer_param_name(t, i), want[i]));
  CHECK(keel_trainer_input_count(t) == 3);
  keel_io_info io;
  CHECK_OK(keel_trainer_input(t, 2, &io));
  CHECK(!strcmp(io.name, "r"));
  const keel_value_t *v;
  CHECK_STATUS(keel_trainer_param(t, "s0", &v), KEEL_ERR_INVALID_ARG); /* read only by Shape */
  CHECK_STATUS(keel_trainer_param(t, "c", &v), KEEL_ERR_INVALID_ARG);  /* frozen */
  CHECK_OK(keel_trainer_param(t, "W2", &v));
  CHECK(keel_value_numel(v) == NH * NO && keel_value_at(v, 1) == (double)W2_0[1]);
  keel_trainer_destroy(t);
  /* an initializer that is also a graph input is trained, not a data input */
  size_t l2;
  uint8_t *b2 = mlp_ex("Tanh", true, &l2);
  t = trainer(b2, l2, &o);
  if (t) {
    CHECK(keel_trainer_param_count(t) == 4 && keel_trainer_input_count(t) == 3);
    CHECK_OK(keel_trainer_input(t, 0, &io));
    CHECK(!strcmp(io.name, "x"));
    CHECK_OK(keel_trainer_param(t, "W2", &v));
    CHECK_STATUS(keel_trainer_param(t, "one", &v), KEEL_ERR_INVALID_ARG);
    /* it saves (the Constant node written back) and the file loads */
    batch bt;
    make_batch(&bt, 2, 3);
    feed f = make_feed(keel_trainer_session(t), &bt);
    CHECK_OK(keel_trainer_step(t, f.v, 3, NULL));
    free_feed(&f);
    char path[] = "/tmp/keel_test_saved2_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK_OK(keel_trainer_save(t, path));
    /* the Constant node is written back where the file had it: after
     * Tanh, before Sub (op_type strings in the saved bytes) */
    FILE *sf = fopen(path, "rb");
    static char saved[1 << 16];
    size_t ns = sf ? fread(saved, 1, sizeof saved, sf) : 0;
    if (sf) fclose(sf);
    const char *pt = find(saved, ns, "Tanh"), *pc = find(saved, ns, "Constant"), *ps = find(saved, ns, "Sub");
    CHECK(pt && pc && ps && pt < pc && pc < ps);
    keel_trainer_t *t2 = NULL;
    CHECK_OK(keel_trainer_create(path, &o, &t2));
    float w1[NI * NH], w2[NI * NH];
    CHECK_OK(keel_trainer_param_copy(t, "W2", w1, NI * NH));
    if (t2) CHECK_OK(keel_trainer_param_copy(t2, "W2", w2, NI * NH));
    CHECK(t2 && !memcmp(w1, w2, sizeof(float) * NH * NO) && keel_trainer_param_count(t2) == 4);
    keel_trainer_destroy(t2);
    unlink(path);
  }
  keel_trainer_destroy(t);
  free(b2);
}

/* N steps on alternating batches of 5 and 3 rows against the reference;
 * allocated bytes identical from step 2. */
static void matches_reference(const uint8_t *bytes, size_t len, keel_optimizer opt, double lr,
                              double momentum, double wd) {
  keel_train_options o;
  options(&o, opt, lr);
  if (momentum >= 0) o.momentum = momentum;
  if (wd >= 0) o.weight_decay = wd;
  keel_trainer_t *t = trainer(bytes, len, &o);
  if (!t) return;
  batch b[2];
  make_batch(&b[0], 5, 1), make_batch(&b[1], 3, 2);
  ref m;
  ref_init(&m);
  uint64_t alloc2 = 0;
  int loss_bad = 0, alloc_bad = 0, exact_bad = 0;
  for (int k = 1; k <= 12; k++) {
    float loss = NAN;
    feed f = make_feed(keel_trainer_session(t), &b[k % 2]);
    CHECK_OK(keel_trainer_step(t, f.v, 3, &loss));
    free_feed(&f);
    double want = ref_step(&m, &o, &b[k % 2]);
    loss_bad += !close_to(loss, want);
    keel_train_stats st = {.size = sizeof st};
    CHECK_OK(keel_trainer_stats(t, &st));
    if (k == 2) alloc2 = st.allocated;
    if (k > 2) alloc_bad += st.allocated != alloc2;
    /* with the inputs released: exactly the parameters and the state */
    exact_bad += st.allocated != st.param_bytes + st.state_bytes;
    CHECK(st.peak > st.allocated);
  }
  CHECK(exact_bad == 0);
  if (loss_bad || alloc_bad) fprintf(stderr, "optimizer %d: %d losses off, %d allocated figures moved\n", (int)opt, loss_bad, alloc_bad);
  CHECK(loss_bad == 0);
  CHECK(alloc_bad == 0);
  CHECK(keel_trainer_steps(t) == 12);
  check_params(t, &m);
  if (opt == KEEL_OPTIM_ADAM && wd < 0) { /* what the allocated bytes are, by owner */
    char *rep = NULL;
    CHECK_OK(keel_mem_live_report(keel_trainer_session(t), NULL, 0, &rep, NULL));
    fprintf(stderr, "live after 12 Adam steps:\n%s", rep ? rep : "");
    keel_free(rep);
  }
  keel_trainer_destroy(t);
}

/* 3 steps, checkpoint, a new trainer resumes for 3: equals 6 straight. */
static void checkpoint_resumes_exactly(const uint8_t *bytes, size_t len) {
  keel_train_options o;
  options(&o, KEEL_OPTIM_ADAM, 0.01);
  keel_trainer_t *a = trainer(bytes, len, &o), *b = trainer(bytes, len, &o), *c = trainer(bytes, len, &o);
  if (!a || !b || !c) return;
  batch bt[2];
  make_batch(&bt[0], 5, 7), make_batch(&bt[1], 3, 8);
  feed fa[2] = {make_feed(keel_trainer_session(a), &bt[0]), make_feed(keel_trainer_session(a), &bt[1])};
  feed fb[2] = {make_feed(keel_trainer_session(b), &bt[0]), make_feed(keel_trainer_session(b), &bt[1])};
  feed fc[2] = {make_feed(keel_trainer_session(c), &bt[0]), make_feed(keel_trainer_session(c), &bt[1])};
  char dir[] = "/tmp/keel_test_ckpt_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  for (int k = 1; k <= 6; k++) CHECK_OK(keel_trainer_step(a, fa[k % 2].v, 3, NULL));
  for (int k = 1; k <= 3; k++) CHECK_OK(keel_trainer_step(b, fb[k % 2].v, 3, NULL));
  CHECK_OK(keel_trainer_checkpoint_save(b, dir));
  CHECK_OK(keel_trainer_checkpoint_load(c, dir));
  CHECK(keel_trainer_steps(c) == 3);
  for (int k = 4; k <= 6; k++) CHECK_OK(keel_trainer_step(c, fc[k % 2].v, 3, NULL));
  for (size_t p = 0; p < keel_trainer_param_count(a); p++) {
    float x[NI * NH], y[NI * NH];
    const char *nm = keel_trainer_param_name(a, p);
    const keel_value_t *v;
    CHECK_OK(keel_trainer_param(a, nm, &v));
    CHECK_OK(keel_trainer_param_copy(a, nm, x, NI * NH));
    CHECK_OK(keel_trainer_param_copy(c, nm, y, NI * NH));
    CHECK(!memcmp(x, y, sizeof(float) * (size_t)keel_value_numel(v)));
  }
  /* a checkpoint of another optimizer is refused, nothing changes */
  keel_train_options os;
  options(&os, KEEL_OPTIM_SGD, 0.1);
  keel_trainer_t *d = trainer(bytes, len, &os);
  if (d) CHECK_STATUS(keel_trainer_checkpoint_load(d, dir), KEEL_ERR_INVALID_ARG);
  if (d) CHECK(keel_trainer_steps(d) == 0 && strstr(keel_last_error(), "optimizer"));
  keel_trainer_destroy(d);
  char path[128];
  snprintf(path, sizeof path, "%s/trainer.ckpt", dir);
  unlink(path);
  rmdir(dir);
  for (int i = 0; i < 2; i++) free_feed(&fa[i]), free_feed(&fb[i]), free_feed(&fc[i]);
  keel_trainer_destroy(a), keel_trainer_destroy(b), keel_trainer_destroy(c);
}

/* The saved model holds the trained values and computes the loss the
 * trainer computes next. */
static void saved_model_runs(const uint8_t *bytes, size_t len) {
  keel_train_options o;
  options(&o, KEEL_OPTIM_MOMENTUM, 0.05);
  keel_trainer_t *t = trainer(bytes, len, &o);
  if (!t) return;
  batch b;
  make_batch(&b, 4, 11);
  feed f = make_feed(keel_trainer_session(t), &b);
  for (int k = 0; k < 5; k++) CHECK_OK(keel_trainer_step(t, f.v, 3, NULL));
  char path[] = "/tmp/keel_test_saved_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  CHECK_OK(keel_trainer_save(t, path));
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create(path, NULL, &s));
  if (s) {
    feed g = make_feed(s, &b);
    keel_value_t *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x", "t", "r"}, g.v, 3, out));
    float next = NAN;
    CHECK_OK(keel_trainer_step(t, f.v, 3, &next));
    if (out[0]) CHECK_NEAR(keel_value_at(out[0], 0), next, 1e-6);
    keel_value_release(out[0]), keel_value_release(out[1]);
    free_feed(&g);
  }
  keel_session_destroy(s);
  unlink(path);
  free_feed(&f);
  keel_trainer_destroy(t);
}

static void bad_input_is_refused(const uint8_t *bytes, size_t len) {
  keel_train_options o;
  options(&o, KEEL_OPTIM_SGD, 0.1);
  keel_trainer_t *t = NULL;
  o.loss = "nope";
  CHECK_STATUS(keel_trainer_create_from_memory(bytes, len, NULL, &o, &t), KEEL_ERR_INVALID_ARG);
  CHECK(strstr(keel_last_error(), "no output 'nope'"));
  o.loss = "loss";
  const char *fz[] = {"c", "W9"};
  o.freeze = fz, o.n_freeze = 2;
  CHECK_STATUS(keel_trainer_create_from_memory(bytes, len, NULL, &o, &t), KEEL_ERR_INVALID_ARG);
  CHECK(strstr(keel_last_error(), "'W9'"));
  o.freeze = FREEZE, o.n_freeze = 1;
  o.lr = -1;
  CHECK_STATUS(keel_trainer_create_from_memory(bytes, len, NULL, &o, &t), KEEL_ERR_INVALID_ARG);
  o.lr = 0.1;
  size_t dlen;
  uint8_t *det = mlp("Det", &dlen);
  CHECK_STATUS(keel_trainer_create_from_memory(det, dlen, NULL, &o, &t), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "Det"));
  free(det);
  /* a loss that is not a scalar: refused at the step */
  o.loss = "sq";
  t = trainer(bytes, len, &o);
  batch b, wide;
  make_batch(&b, 3, 5);
  make_batch(&wide, 3, 6);
  if (t) {
    feed f = make_feed(keel_trainer_session(t), &b);
    CHECK_STATUS(keel_trainer_step(t, f.v, 3, NULL), KEEL_ERR_INVALID_ARG);
    CHECK(strstr(keel_last_error(), "not a float scalar"));
    free_feed(&f);
    keel_trainer_destroy(t);
  }
  o.loss = "loss";
  t = trainer(bytes, len, &o);
  if (!t) return;
  keel_session_t *s = keel_trainer_session(t);
  feed f = make_feed(s, &b);
  float before[NI * NH], after[NI * NH];
  CHECK_OK(keel_trainer_param_copy(t, "W1", before, NI * NH));
  CHECK_STATUS(keel_trainer_step(t, f.v, 2, NULL), KEEL_ERR_INVALID_ARG);
  CHECK(strstr(keel_last_error(), "3 data input(s)"));
  keel_value_t *x5 = mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){3, 5}, wide.x);
  keel_value_t *bad[3] = {x5, f.v[1], f.v[2]};
  keel_status st = keel_trainer_step(t, bad, 3, NULL);
  CHECK(st == KEEL_ERR_SHAPE || st == KEEL_ERR_INVALID_ARG);
  CHECK(strstr(keel_last_error(), "training step 1"));
  CHECK_OK(keel_trainer_param_copy(t, "W1", after, NI * NH));
  CHECK(!memcmp(before, after, sizeof before) && keel_trainer_steps(t) == 0);
  float loss = NAN;
  CHECK_OK(keel_trainer_step(t, f.v, 3, &loss)); /* still usable */
  CHECK(isfinite(loss) && keel_trainer_steps(t) == 1);
  keel_value_release(x5);
  free_feed(&f);
  keel_trainer_destroy(t);
}

/* A planted surviving reference makes allocated bytes grow; the live
 * report since step 2 names the value. */
static void planted_leak_is_named(const uint8_t *bytes, size_t len) {
  keel_train_options o;
  options(&o, KEEL_OPTIM_SGD, 0.1);
  keel_trainer_t *t = trainer(bytes, len, &o);
  if (!t) return;
  keel_session_t *s = keel_trainer_session(t);
  CHECK_OK(keel_debug_plant_leak(s, "h2"));
  batch b;
  make_batch(&b, 3, 9);
  feed f = make_feed(s, &b);
  keel_train_stats s2 = {.size = sizeof s2}, s5 = {.size = sizeof s5};
  for (int k = 1; k <= 5; k++) {
    CHECK_OK(keel_trainer_step(t, f.v, 3, NULL));
    if (k == 2) CHECK_OK(keel_trainer_stats(t, &s2));
  }
  CHECK_OK(keel_trainer_stats(t, &s5));
  CHECK(s5.allocated > s2.allocated);
  char *rep = NULL;
  keel_live_filter flt = {.size = sizeof flt};
  CHECK_OK(keel_mem_live_report(s, &flt, 0, &rep, NULL));
  CHECK(rep && strstr(rep, "value 'h2'") && strstr(rep, "param 'W1'"));
  keel_free(rep);
  /* a gradient kept alive is named after its parameter */
  CHECK_OK(keel_debug_plant_leak(s, "W2.keel_grad"));
  uint64_t mark = keel_mem_mark(s);
  CHECK_OK(keel_trainer_step(t, f.v, 3, NULL));
  flt.since = mark;
  CHECK_OK(keel_mem_live_report(s, &flt, 0, &rep, NULL));
  CHECK(rep && strstr(rep, "grad of 'W2'"));
  if (rep && !strstr(rep, "grad of 'W2'")) fprintf(stderr, "%s", rep);
  keel_free(rep);
  keel_debug_plant_leak(s, NULL);
  free_feed(&f);
  keel_trainer_destroy(t);
}

/* A parameter read only inside an If branch: the If's backward trains it
 * (a step moves it by lr * x), and the seed failure planted behind the If
 * output is named by the live report. */
static void parameter_inside_a_branch(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "cond", KEEL_BOOL, 0, NULL);
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){1, 1});
  float w = 0.5f, s0 = 0;
  mb_init(g, "Wb", KEEL_FLOAT, 2, (int64_t[]){1, 1}, &w);
  mb_init(g, "s0", KEEL_FLOAT, 0, NULL, &s0);
  mb_graph *th = mb_graph_new("then");
  mb_output(th, "yt", KEEL_FLOAT, -1, NULL);
  mb_add(th, "MatMul", "x,Wb", "yt");
  mb_graph *el = mb_graph_new("else");
  mb_output(el, "ye", KEEL_FLOAT, -1, NULL);
  mb_add(el, "Identity", "x", "ye");
  mb_node *n = mb_add(g, "If", "cond", "y");
  mb_name(n, "branch");
  mb_attr_g(n, "then_branch", th);
  mb_attr_g(n, "else_branch", el);
  mb_add(g, "Shape", "s0", "shp");
  mb_add(g, "Reshape", "y,shp", "loss");
  mb_output(g, "loss", KEEL_FLOAT, -1, NULL);
  size_t len;
  uint8_t *bytes = mb_model(g, 13, &len);
  keel_train_options o;
  keel_train_options_init(&o, KEEL_OPTIM_SGD, 0.1);
  o.loss = "loss";
  keel_trainer_t *t = NULL;
  keel_status st = keel_trainer_create_from_memory(bytes, len, NULL, &o, &t);
  CHECK_OK(st); /* the If's backward trains a parameter read only in a branch */
  if (!st) {
    keel_session_t *s = keel_trainer_session(t);
    bool c = true;
    float xv = 2;
    keel_value_t *in[2] = {mb_tensor(s, KEEL_BOOL, 0, NULL, &c), mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){1, 1}, &xv)};
    CHECK_OK(keel_trainer_step(t, in, 2, NULL));
    float after = 0;
    CHECK_OK(keel_trainer_param_copy(t, "Wb", &after, 1));
    CHECK_NEAR(after, 0.5 - 0.1 * 2, 1e-6);
    /* the seed failure (branch results kept alive behind the If output)
     * makes allocated bytes grow, and the report names the branch */
    keel_train_stats a = {.size = sizeof a}, b = {.size = sizeof b};
    CHECK_OK(keel_trainer_step(t, in, 2, NULL));
    CHECK_OK(keel_trainer_stats(t, &a));
    uint64_t mark = keel_mem_mark(s);
    keel_debug_leak_subgraph_results(s, 1);
    for (int k = 0; k < 3; k++) CHECK_OK(keel_trainer_step(t, in, 2, NULL));
    CHECK_OK(keel_trainer_stats(t, &b));
    CHECK(b.allocated > a.allocated);
    keel_live_filter f = {.size = sizeof f, .since = mark};
    char *rep = NULL;
    CHECK_OK(keel_mem_live_report(s, &f, 0, &rep, NULL));
    CHECK(rep && strstr(rep, "main/branch/then"));
    keel_free(rep);
    keel_debug_leak_subgraph_results(s, 0);
    /* a step that takes the else branch does not reach Wb: as in PyTorch
     * (.grad None), SGD leaves it as it is and its own step count stays */
    int64_t n_wb = keel_trainer_param_steps(t, "Wb"), n_all = keel_trainer_steps(t);
    CHECK(n_wb == n_all && n_all == 5);
    float before = 0, now = 0;
    bool cf = false;
    keel_value_t *in_else[2] = {mb_tensor(s, KEEL_BOOL, 0, NULL, &cf), in[1]};
    CHECK_OK(keel_trainer_param_copy(t, "Wb", &before, 1));
    CHECK_OK(keel_trainer_step(t, in_else, 2, NULL));
    CHECK_OK(keel_trainer_param_copy(t, "Wb", &now, 1));
    CHECK(now == before);
    CHECK(keel_trainer_param_steps(t, "Wb") == n_wb && keel_trainer_steps(t) == n_all + 1);
    CHECK(keel_trainer_param_steps(t, "no such") == -1);
    keel_value_release(in_else[0]);
    keel_value_release(in[0]), keel_value_release(in[1]);
  }
  keel_trainer_destroy(t);
  free(bytes);
}

/* ----------------------------------------------------- mapped pages */

/* A 16 MB parameter from a file: copied once, its mapped pages given back
 * (the process's file-backed RSS does not keep them). */
static void mapped_pages_are_dropped(void) {
  enum { R = 1024, C = 4096 };
  float *w = calloc((size_t)R * C, sizeof(float));
  for (size_t i = 0; i < (size_t)R * C; i++) w[i] = (float)(i % 7) * 0.01f;
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){1, R});
  mb_init(g, "W", KEEL_FLOAT, 2, (int64_t[]){R, C}, w);
  mb_add(g, "MatMul", "x,W", "y");
  mb_add(g, "Mul", "y,y", "y2");
  mb_add(g, "MatMul", "y2,Wc", "s");
  float col[C];
  for (int i = 0; i < C; i++) col[i] = 1;
  mb_init(g, "Wc", KEEL_FLOAT, 2, (int64_t[]){C, 1}, col);
  mb_output(g, "s", KEEL_FLOAT, -1, NULL);
  size_t len;
  uint8_t *bytes = mb_model(g, 13, &len);
  char path[] = "/tmp/keel_test_big_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, bytes, len) == (ssize_t)len);
  close(fd);
  keel_train_options o;
  keel_train_options_init(&o, KEEL_OPTIM_SGD, 0.0);
  o.loss = "s";
  const char *fz[] = {"Wc"};
  o.freeze = fz, o.n_freeze = 1;
  long file0 = check_status_kb("RssFile:"), anon0 = check_status_kb("RssAnon:");
  keel_trainer_t *t = NULL;
  CHECK_OK(keel_trainer_create(path, &o, &t));
  long file1 = check_status_kb("RssFile:"), anon1 = check_status_kb("RssAnon:");
  keel_train_stats st = {.size = sizeof st};
  if (t) CHECK_OK(keel_trainer_stats(t, &st));
  fprintf(stderr, "16 MB parameter: %llu bytes of the mapping and %llu of the loader's copy given back; "
          "RSS file-backed %ld -> %ld KB, anonymous %ld -> %ld KB\n", (unsigned long long)st.mapped_dropped,
          (unsigned long long)st.copy_dropped, file0, file1, anon0, anon1);
  CHECK(st.mapped_dropped >= (uint64_t)R * C * 4 - 8192);
  CHECK(file1 - file0 < 2048);          /* the 16 MB of mapped pages are not kept */
  /* one copy: the parameter's block, in keel's own accounting */
  CHECK(st.param_bytes >= (uint64_t)R * C * 4 && st.param_bytes <= (uint64_t)R * C * 4 + 65536);
  /* and in the process's anonymous pages, where no sanitizer's allocator
   * keeps freed memory of its own (ASan's quarantine: tens of MB, more or
   * less by machine) */
  if (!KEEL_TEST_SANITIZED) CHECK(anon1 - anon0 < 16384 + 4096);
  keel_trainer_destroy(t);
  unlink(path);
  free(bytes);
  free(w);
}

int main(void) {
  size_t len;
  uint8_t *bytes = mlp("Tanh", &len);
  trains_the_right_initializers(bytes, len);
  matches_reference(bytes, len, KEEL_OPTIM_SGD, 0.1, -1, -1);
  matches_reference(bytes, len, KEEL_OPTIM_SGD, 0.1, 0.8, 0.01);
  matches_reference(bytes, len, KEEL_OPTIM_MOMENTUM, 0.05, -1, -1);
  matches_reference(bytes, len, KEEL_OPTIM_ADAM, 0.01, -1, -1);
  matches_reference(bytes, len, KEEL_OPTIM_ADAM, 0.01, -1, 0.1);
  matches_reference(bytes, len, KEEL_OPTIM_ADAMW, 0.01, -1, -1);
  checkpoint_resumes_exactly(bytes, len);
  saved_model_runs(bytes, len);
  bad_input_is_refused(bytes, len);
  planted_leak_is_named(bytes, len);
  parameter_inside_a_branch();
  mapped_pages_are_dropped();
  free(bytes);
  return check_report();
}
