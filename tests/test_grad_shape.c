/* test_grad_shape.c: the rules of autodiff/grad_shape.c (and the view rules of
 * grad_basic.c) against finite differences (tests/gradcheck.h), each
 * attribute and opset form; the sequence rules through SequenceConstruct,
 * Insert, Erase, At, ConcatFromSequence and SplitToSequence; one chain of
 * these ops differentiated in float32 against float64; a refusal at load.
 * The helper kernels themselves: test_grad_shape_kernels.c. */
#include "gradcheck.h"

typedef struct nodecase {
  const char *op, *ins;        /* the node reads these, writes "t"       */
  int n_ints;                  /* an ints attribute                      */
  const char *ints_name;
  int64_t ints[8];
  const char *i_name;          /* an int attribute (NULL: none)          */
  int64_t i;
  const char *i2_name;
  int64_t i2;
  const char *s_name, *s;      /* a string attribute                     */
  const char *ints2_name;      /* a second and a third ints attribute    */
  int n_ints2;
  int64_t ints2[8];
  const char *ints3_name;
  int n_ints3;
  int64_t ints3[8];
} nodecase;

static int64_t I1[] = {1}, I0[] = {0};

/* Initializers the cases read by name. */
static void consts(mb_graph *g) {
  mb_init(g, "one", KEEL_INT64, 1, (int64_t[]){1}, I1);
  mb_init(g, "zero", KEEL_INT64, 1, (int64_t[]){1}, I0);
  mb_init(g, "shape234", KEEL_INT64, 1, (int64_t[]){3}, (int64_t[]){2, 3, 4});
  mb_init(g, "rep23", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, 3});
  mb_init(g, "rep122", KEEL_INT64, 1, (int64_t[]){3}, (int64_t[]){1, 2, 2});
  mb_init(g, "idx", KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){1, -1, 0, 1});
  mb_init(g, "idx2d", KEEL_INT64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, -3, 2});
  mb_init(g, "ge_idx", KEEL_INT64, 2, (int64_t[]){2, 3}, (int64_t[]){2, 2, 0, 1, -1, 1});
  mb_init(g, "nd_idx", KEEL_INT64, 2, (int64_t[]){3, 2}, (int64_t[]){0, 1, 1, 2, 0, 1});
  mb_init(g, "nd_idx_b", KEEL_INT64, 2, (int64_t[]){2, 1}, (int64_t[]){2, 0});
  mb_init(g, "sc_idx", KEEL_INT64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 1, 2});
  mb_init(g, "snd_idx", KEEL_INT64, 2, (int64_t[]){2, 2}, (int64_t[]){1, 0, 0, 2});
  mb_init(g, "split12", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 2});
  mb_init(g, "st", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){-1, 1});
  mb_init(g, "en", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){-100, 100});
  mb_init(g, "ax01", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){0, -1});
  mb_init(g, "steps", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){-2, 2});
  mb_init(g, "st1", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){1});
  mb_init(g, "en1", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){3});
  mb_init(g, "pads", KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){1, 2, 1, 0});
  mb_init(g, "pads_neg", KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){0, -1, 1, 2});
  mb_init(g, "pads_ax", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){2, 1});
  mb_init(g, "ax1", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){1});
  mb_init(g, "pval", KEEL_DOUBLE, 0, NULL, (double[]){0.75});
}

static void one_node(mb_graph *g, void *ctx) {
  const nodecase *c = ctx;
  consts(g);
  mb_node *n = mb_add(g, c->op, c->ins, "t");
  if (c->ints_name) mb_attr_ints(n, c->ints_name, c->n_ints, c->ints);
  if (c->i_name) mb_attr_i(n, c->i_name, c->i);
  if (c->i2_name) mb_attr_i(n, c->i2_name, c->i2);
  if (c->s_name) mb_attr_s(n, c->s_name, c->s);
  if (c->ints2_name) mb_attr_ints(n, c->ints2_name, c->n_ints2, c->ints2);
  if (c->ints3_name) mb_attr_ints(n, c->ints3_name, c->n_ints3, c->ints3);
  mb_add(g, "Tanh", "t", "y"); /* a non-linear head: gy differs per element */
}

static double A24[24], B24[24], C24[24];

static void fill(void) {
  for (int i = 0; i < 24; i++) {
    A24[i] = 0.1 * i - 1.1 + 0.05 * sin(3.0 * i);
    B24[i] = 0.7 - 0.13 * i + 0.02 * cos(i);
    C24[i] = 0.3 + 0.07 * i;
  }
}

typedef struct tcase {
  const char *label;
  nodecase n;
  int opset;
  int rank[3];
  int64_t dims[3][4];
  int n_in;                    /* inputs a, b, c of rank[i], dims[i]     */
  uint8_t nodiff;              /* bit i: input i not differentiated       */
} tcase;

static void run_case(const tcase *t) {
  const char *names[3] = {"a", "b", "c"};
  const double *data[3] = {A24, B24, C24};
  gc_input in[3];
  for (int i = 0; i < t->n_in; i++) {
    in[i] = (gc_input){names[i], t->rank[i], {0}, data[i], !((t->nodiff >> i) & 1)};
    memcpy(in[i].dims, t->dims[i], sizeof t->dims[i]);
  }
  gc_check(t->label, one_node, (void *)&t->n, in, t->n_in, t->opset, 1e-6);
}

#define R1(a) 1, {{a}}
static const tcase CASES[] = {
    {"Transpose perm", {"Transpose", "a", 3, "perm", {2, 0, 1}}, 13, {3}, {{2, 3, 4}}, 1},
    {"Transpose reversed", {"Transpose", "a"}, 13, {3}, {{2, 3, 4}}, 1},
    {"Expand", {"Expand", "a,shape234"}, 13, {2}, {{3, 1}}, 1},
    {"Expand rank-1", {"Expand", "a,shape234"}, 8, {1}, {{4}}, 1},
    {"Tile 2-D", {"Tile", "a,rep23"}, 13, {2}, {{2, 3}}, 1},
    {"Tile 3-D", {"Tile", "a,rep122"}, 7, {3}, {{2, 1, 3}}, 1},
    {"Concat axis 1", {"Concat", "a,b", .i_name = "axis", .i = 1}, 13, {2, 2}, {{2, 3}, {2, 1}}, 2},
    {"Concat with an empty input", {"Concat", "a,b", .i_name = "axis", .i = 1}, 13, {2, 2},
     {{2, 0}, {2, 3}}, 2},
    {"Concat axis -2, 3 inputs", {"Concat", "a,b,a", .i_name = "axis", .i = -2}, 11, {2, 2},
     {{1, 3}, {2, 3}}, 2},
    {"Slice attrs opset 9", {"Slice", "a", 2, "starts", {1, 0}, .ints2_name = "ends", .n_ints2 = 2,
                             .ints2 = {3, -1}}, 9, {2}, {{3, 4}}, 1},
    {"Slice steps, clamps", {"Slice", "a,st,en,ax01,steps"}, 13, {2}, {{3, 4}}, 1},
    {"Slice axes omitted", {"Slice", "a,st1,en1"}, 10, {2}, {{4, 3}}, 1},
    {"Slice attrs with axes, opset 1", {"Slice", "a", 1, "starts", {-2}, .ints2_name = "ends",
                                        .n_ints2 = 1, .ints2 = {1000}, .ints3_name = "axes",
                                        .n_ints3 = 1, .ints3 = {1}}, 1, {3}, {{2, 3, 4}}, 1},
    {"Gather axis 0", {"Gather", "a,idx"}, 13, {2}, {{3, 4}}, 1},
    {"Gather axis 1, 2-D indices", {"Gather", "a,idx2d", .i_name = "axis", .i = -1}, 13, {3},
     {{2, 3, 3}}, 1},
    {"GatherElements", {"GatherElements", "a,ge_idx", .i_name = "axis", .i = 1}, 13, {2}, {{2, 3}}, 1},
    {"GatherND", {"GatherND", "a,nd_idx"}, 13, {3}, {{2, 3, 2}}, 1},
    {"GatherND batch_dims 1", {"GatherND", "a,nd_idx_b", .i_name = "batch_dims", .i = 1}, 13, {2},
     {{2, 3}}, 1},
    {"Pad constant", {"Pad", "a,pads,pval"}, 13, {2}, {{2, 3}}, 1},
    {"Pad reflect", {"Pad", "a,pads", .s_name = "mode", .s = "reflect"}, 13, {2}, {{3, 4}}, 1},
    {"Pad edge", {"Pad", "a,pads", .s_name = "mode", .s = "edge"}, 11, {2}, {{2, 3}}, 1},
    {"Pad wrap", {"Pad", "a,pads", .s_name = "mode", .s = "wrap"}, 19, {2}, {{3, 4}}, 1},
    {"Pad negative pads", {"Pad", "a,pads_neg"}, 13, {2}, {{2, 3}}, 1},
    {"Pad axes 18", {"Pad", "a,pads_ax,,ax1", .s_name = "mode", .s = "edge"}, 18, {2}, {{2, 3}}, 1},
    {"Pad attr opset 2", {"Pad", "a", 4, "pads", {0, 1, 1, 2}, .s_name = "mode", .s = "reflect"}, 2,
     {2}, {{2, 3}}, 1},
    {"Flatten", {"Flatten", "a", .i_name = "axis", .i = 2}, 13, {3}, {{2, 3, 2}}, 1},
    {"Squeeze attr 11", {"Squeeze", "a", 1, "axes", {-2}}, 11, {3}, {{2, 1, 3}}, 1},
    {"Squeeze input 13", {"Squeeze", "a,one"}, 13, {3}, {{2, 1, 3}}, 1},
    {"Unsqueeze attr 11", {"Unsqueeze", "a", 1, "axes", {0}}, 11, {2}, {{2, 3}}, 1},
    {"Unsqueeze input 13", {"Unsqueeze", "a,zero"}, 13, {2}, {{2, 3}}, 1},
    {"DepthToSpace DCR", {"DepthToSpace", "a", .i_name = "blocksize", .i = 2}, 13, {4}, {{1, 4, 2, 3}}, 1},
    {"DepthToSpace CRD", {"DepthToSpace", "a", .i_name = "blocksize", .i = 2, .s_name = "mode", .s = "CRD"},
     13, {4}, {{1, 8, 1, 3}}, 1},
    {"SpaceToDepth", {"SpaceToDepth", "a", .i_name = "blocksize", .i = 2}, 13, {4}, {{1, 2, 2, 4}}, 1},
    {"ScatterElements", {"ScatterElements", "a,sc_idx,b", .i_name = "axis", .i = 1}, 13, {2, 0, 2},
     {{2, 3}, {0}, {2, 2}}, 0},
    {"Scatter opset 9", {"Scatter", "a,sc_idx,b", .i_name = "axis", .i = 1}, 9, {2, 0, 2},
     {{2, 3}, {0}, {2, 2}}, 0},
    {"ScatterND", {"ScatterND", "a,snd_idx,b"}, 13, {2, 0, 1}, {{2, 3}, {0}, {2}}, 0},
};

/* Split: the pieces joined again with one left out (its gradient: zeros). */
typedef struct splitcase_t {
  const char *label, *ins;
  const char *outs, *used;     /* Split's outputs; Concat's inputs        */
  const char *attr;            /* "split" (ints), "num_outputs" or NULL   */
  int64_t v[2];
  int64_t axis;
  int opset;
} splitcase_t;

static void split_body(mb_graph *g, void *ctx) {
  const splitcase_t *c = ctx;
  consts(g);
  mb_node *n = mb_add(g, "Split", c->ins, c->outs);
  mb_attr_i(n, "axis", c->axis);
  if (c->attr && !strcmp(c->attr, "split")) mb_attr_ints(n, "split", 2, c->v);
  else if (c->attr) mb_attr_i(n, c->attr, c->v[0]);
  mb_attr_i(mb_add(g, "Concat", c->used, "t"), "axis", c->axis);
  mb_add(g, "Tanh", "t", "y");
}

static const splitcase_t SPLITS[] = {
    {"Split attr opset 11", "a", "p,q", "q,p,q", "split", {1, 2}, 1, 11},
    {"Split input opset 13", "a,split12", "p,q", "q", NULL, {0}, -1, 13},
    {"Split num_outputs 18", "a", "p,q,r", "r,p", "num_outputs", {3}, 0, 18},
    {"Split equal parts 13", "a", "p,q", "p,q", NULL, {0}, 0, 13},
};

static void check_split(void) {
  for (int i = 0; i < 4; i++) {
    gc_input in[1] = {{"a", 2, {6, 3}, A24, true}};
    if (SPLITS[i].axis) in[0].dims[0] = 2;
    gc_check(SPLITS[i].label, split_body, (void *)&SPLITS[i], in, 1, SPLITS[i].opset, 1e-6);
  }
}

/* The Scatter cases read b as updates (input 2): a, updates named b. */
static void scatter_case(const tcase *t) {
  gc_input in[2] = {{"a", t->rank[0], {0}, A24, true}, {"b", t->rank[2], {0}, B24, true}};
  memcpy(in[0].dims, t->dims[0], sizeof t->dims[0]);
  memcpy(in[1].dims, t->dims[2], sizeof t->dims[2]);
  gc_check(t->label, one_node, (void *)&t->n, in, 2, t->opset, 1e-6);
}

/* ========================================================= sequences */

static void seq_consts(mb_graph *g) {
  mb_init(g, "p0", KEEL_INT64, 0, NULL, (int64_t[]){0});
  mb_init(g, "p1", KEEL_INT64, 0, NULL, (int64_t[]){1});
  mb_init(g, "pm1", KEEL_INT64, 0, NULL, (int64_t[]){-1});
  mb_init(g, "pm2", KEEL_INT32, 0, NULL, (int32_t[]){-2});
  mb_init(g, "two", KEEL_INT64, 0, NULL, (int64_t[]){2});
  mb_init(g, "sp13", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 3});
}

/* s = [a, b] + c at the end, read by ConcatFromSequence. */
static void seq_insert_concat(mb_graph *g, void *ctx) {
  (void)ctx;
  seq_consts(g);
  mb_add(g, "SequenceConstruct", "a,b", "s");
  mb_add(g, "SequenceInsert", "s,c", "s2");
  mb_add(g, "ConcatFromSequence", "s2", "t");
  mb_add(g, "Tanh", "t", "y");
}

/* Insert at -2 (int32), two SequenceAt reads (negative positions), one
 * sequence used twice: the driver sums sequence gradients (GradAdd). */
static void seq_insert_at(mb_graph *g, void *ctx) {
  (void)ctx;
  seq_consts(g);
  mb_add(g, "SequenceConstruct", "a,b", "s");
  mb_add(g, "SequenceInsert", "s,c,pm2", "s2");
  mb_add(g, "SequenceAt", "s2,pm1", "u");
  mb_add(g, "SequenceAt", "s2,p0", "v");
  mb_add(g, "SequenceAt", "s2,p1", "w");
  mb_add(g, "Mul", "u,v", "uv");
  mb_add(g, "Mul", "uv,w", "t");
  mb_add(g, "Tanh", "t", "y");
}

/* Erase with and without a position, stacked on a new axis. */
static void seq_erase(mb_graph *g, void *ctx) {
  (void)ctx;
  seq_consts(g);
  mb_add(g, "SequenceConstruct", "a,b,c,a", "s");
  mb_add(g, "SequenceErase", "s,pm2", "s2");
  mb_add(g, "SequenceErase", "s2", "s3");
  mb_node *n = mb_add(g, "ConcatFromSequence", "s3", "t");
  mb_attr_i(n, "axis", -1);
  mb_attr_i(n, "new_axis", 1);
  mb_add(g, "Tanh", "t", "y");
}

typedef struct splitcase {
  const char *ins;
  int keepdims;                /* -1: attribute absent                    */
  int64_t axis;
} splitcase;

/* SplitToSequence, then the pieces back through SequenceAt and
 * ConcatFromSequence (the first one read twice). */
static void seq_split(mb_graph *g, void *ctx) {
  const splitcase *c = ctx;
  seq_consts(g);
  mb_node *n = mb_add(g, "SplitToSequence", c->ins, "s");
  mb_attr_i(n, "axis", c->axis);
  if (c->keepdims >= 0) mb_attr_i(n, "keepdims", c->keepdims);
  mb_add(g, "SequenceAt", "s,p1", "u");
  mb_add(g, "SequenceAt", "s,pm1", "v");
  mb_add(g, "Mul", "u,v", "t");
  mb_add(g, "Tanh", "t", "y");
}

/* SequenceLength stops the gradient; SequenceEmpty + Insert starts one. */
static void seq_empty(mb_graph *g, void *ctx) {
  (void)ctx;
  seq_consts(g);
  mb_node *e = mb_add(g, "SequenceEmpty", "", "s0");
  mb_attr_i(e, "dtype", KEEL_DOUBLE);
  mb_add(g, "SequenceInsert", "s0,a", "s1");
  mb_add(g, "SequenceInsert", "s1,b,p0", "s2");
  mb_add(g, "SequenceLength", "s2", "len");
  mb_attr_i(mb_add(g, "Cast", "len", "lenf"), "to", KEEL_DOUBLE);
  mb_add(g, "ConcatFromSequence", "s2", "c2");
  mb_add(g, "Mul", "c2,lenf", "t");
  mb_add(g, "Tanh", "t", "y");
}

static void check_sequences(void) {
  gc_input in3[3] = {{"a", 2, {2, 3}, A24, true}, {"b", 2, {1, 3}, B24, true}, {"c", 2, {2, 3}, C24, true}};
  gc_check("SequenceInsert + ConcatFromSequence", seq_insert_concat, NULL, in3, 3, 13, 1e-6);
  gc_input sq[3] = {{"a", 2, {2, 3}, A24, true}, {"b", 2, {2, 3}, B24, true}, {"c", 2, {2, 3}, C24, true}};
  gc_check("SequenceInsert at -2 + SequenceAt", seq_insert_at, NULL, sq, 3, 13, 1e-6);
  gc_check("SequenceErase + stack", seq_erase, NULL, sq, 3, 13, 1e-6);
  gc_input x[1] = {{"a", 2, {4, 3}, A24, true}};
  splitcase sc[] = {{"a,two", -1, 0}, {"a,sp13", 1, 0}, {"a", 0, 1}, {"a", 1, -2}, {"a", -1, 1}};
  const char *labels[] = {"SplitToSequence scalar", "SplitToSequence list",
                          "SplitToSequence omitted keepdims 0", "SplitToSequence omitted keepdims 1",
                          "SplitToSequence omitted default keepdims"};
  for (int i = 0; i < 5; i++) gc_check(labels[i], seq_split, &sc[i], x, 1, 13, 1e-6);
  gc_input e[2] = {{"a", 2, {2, 3}, A24, true}, {"b", 2, {1, 3}, B24, true}};
  gc_check("SequenceEmpty/Length", seq_empty, NULL, e, 2, 13, 1e-6);
}

/* ============================================================ float32 */

/* A chain through most rules, differentiated in `dtype`. */
static keel_session_t *chain(int dtype) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", dtype, 2, (int64_t[]){3, 4});
  mb_input(g, "b", dtype, 2, (int64_t[]){2, 4});
  consts(g);
  mb_init(g, "pd", KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){1, 0, 1, 0});
  mb_init(g, "s5", KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){5});
  mb_init(g, "gi", KEEL_INT64, 1, (int64_t[]){4}, (int64_t[]){0, 2, 2, -1});
  mb_init(g, "r12", KEEL_INT64, 1, (int64_t[]){2}, (int64_t[]){1, 2});
  mb_attr_s(mb_add(g, "Pad", "a,pd", "p"), "mode", "reflect");
  mb_add(g, "Slice", "p,one,s5,zero", "s");
  mb_attr_i(mb_add(g, "Concat", "s,b", "c"), "axis", 0);
  mb_add(g, "Transpose", "c", "t");
  mb_add(g, "Gather", "t,gi", "gt");
  mb_add(g, "Tile", "gt,r12", "tl");
  mb_attr_i(mb_add(g, "Split", "tl", "u,v"), "axis", 1);
  mb_add(g, "Mul", "u,v", "m");
  mb_add(g, "Tanh", "m", "y");
  mb_output(g, "da", dtype, -1, NULL);
  mb_output(g, "db", dtype, -1, NULL);
  mb_node *n = mb_add(g, "Gradient", "a,b", "da,db");
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "y");
  mb_attr_strs(n, "xs", 2, (const char *[]){"a", "b"});
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  if (keel_session_create_from_memory(bytes, len, NULL, NULL, &s))
    fprintf(stderr, "chain: %s\n", keel_last_error());
  free(bytes);
  return s;
}

static void check_float32(void) {
  keel_session_t *s[2] = {chain(KEEL_FLOAT), chain(KEEL_DOUBLE)};
  keel_value_t *out[2][2] = {{0}};
  float af[12], bf[8];
  double ad[12], bd[8];
  for (int i = 0; i < 12; i++) ad[i] = af[i] = (float)A24[i];
  for (int i = 0; i < 8; i++) bd[i] = bf[i] = (float)B24[i];
  for (int k = 0; k < 2 && s[k]; k++) {
    int dt = k ? KEEL_DOUBLE : KEEL_FLOAT;
    keel_value_t *in[2] = {mb_tensor(s[k], dt, 2, (int64_t[]){3, 4}, k ? (void *)ad : (void *)af),
                           mb_tensor(s[k], dt, 2, (int64_t[]){2, 4}, k ? (void *)bd : (void *)bf)};
    CHECK_OK(keel_run(s[k], (const char *[]){"a", "b"}, in, 2, out[k]));
    keel_value_release(in[0]), keel_value_release(in[1]);
  }
  CHECK(s[0] && s[1]);
  double worst = 0, mass = 0;
  for (int o = 0; o < 2 && out[0][o] && out[1][o]; o++) {
    CHECK(keel_value_numel(out[0][o]) == keel_value_numel(out[1][o]));
    for (int64_t i = 0; i < keel_value_numel(out[1][o]); i++)
      worst = fmax(worst, fabs(keel_value_at(out[0][o], i) - keel_value_at(out[1][o], i))),
      mass += fabs(keel_value_at(out[1][o], i));
  }
  CHECK(out[1][0] && out[1][1] && worst < 1e-5 && mass > 1);
  for (int k = 0; k < 2; k++) {
    keel_value_release(out[k][0]), keel_value_release(out[k][1]);
    keel_session_destroy(s[k]);
  }
}

/* A rule that cannot handle a case says so at load, naming it. */
static void expect_unsupported(const char *op, const char *ins, int opset, const char *reduction,
                               const char *says) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_DOUBLE, 2, (int64_t[]){2, 3});
  mb_input(g, "b", KEEL_DOUBLE, 2, (int64_t[]){2, 2});
  consts(g);
  mb_node *n = mb_add(g, op, ins, "y");
  if (reduction) mb_attr_s(n, "reduction", reduction);
  mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  mb_output(g, "da", KEEL_DOUBLE, -1, NULL);
  n = mb_add(g, "Gradient", "a", "da");
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "y");
  mb_attr_strs(n, "xs", 1, (const char *[]){"a"});
  size_t len;
  uint8_t *bytes = mb_model_domains(g, opset, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  CHECK_STATUS(keel_session_create_from_memory(bytes, len, NULL, NULL, &s), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), says) != NULL);
  if (!strstr(keel_last_error(), says)) fprintf(stderr, "%s: %s\n", op, keel_last_error());
  free(bytes);
  keel_session_destroy(s);
}

static void check_unsupported(void) {
  expect_unsupported("ScatterElements", "a,sc_idx,b", 18, "add", "reduction 'add'");
  expect_unsupported("ScatterND", "a,snd_idx,b", 18, "mul", "reduction 'mul'");
  expect_unsupported("Tile", "a,one,zero", 5, NULL, "Tile: opset 5");
}

int main(void) {
  fill();
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    if (!strncmp(CASES[i].n.op, "Scatter", 7)) scatter_case(&CASES[i]);
    else run_case(&CASES[i]);
  }
  check_split();
  check_sequences();
  check_float32();
  check_unsupported();
  return check_report();
}
