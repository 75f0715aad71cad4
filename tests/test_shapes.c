/* test_shapes.c: symbolic shape inference (src/ir/shapes.c, shape_rules.c)
 * and the session's shape check (src/exec/shapecheck.c).
 *
 * Models are built as exporters write them, with symbolic input dims
 * (mb.h writes dim i of an input as the dim_param "d<i>"):
 *   - PyTorch's dynamic attention: the head split as Reshape by
 *     Concat(Unsqueeze(Gather(Shape(x), i)), ...), the scores' causal mask
 *     as Trilu(ConstantOfShape(Concat(T, T))) (the GPT of issue 24);
 *   - arithmetic on symbols: T+1 and 2*T (Concat), T-1 (Slice), 8*T and
 *     4*T (Reshape with -1), T/8 (Div of a Shape element), Pad;
 *   - data-dependent dims: NonZero, an If whose branches disagree, and a
 *     greedy-decoding Loop whose token row grows by one each iteration;
 *   - what must stay unknown: a stride over a symbol, an input without a
 *     shape, a Reshape whose target is computed from data.
 * Each inferred shape is compared as text ("[d0, d1+1, 8]"). The same
 * models then run with KEEL_OPT_CHECK_SHAPES on several input sizes: every
 * value agrees, the counts are right, and a run whose input is not of the
 * declared shape is counted as not checked rather than failed.
 */
#include <string.h>

#include "check.h"
#include "exec/shapecheck.h"
#include "ir/shapes.h"
#include "mb.h"
#include "onnx/onnx.h"

static const int64_t g_minus1[] = {-1};

static keel_model *load(mb_graph *g, int opset) {
  size_t len;
  uint8_t *bytes = mb_model(g, opset, &len);
  keel_model *m = NULL;
  if (keel_onnx_load_memory(bytes, len, NULL, &m)) {
    fprintf(stderr, "load: %s\n", keel_last_error());
    m = NULL;
  }
  free(bytes);
  return m;
}

/* The inferred shape of `name` in graph g as text equals `want`. */
static bool shape_is(const keel_shapes *S, const keel_graph *g, const char *name, const char *want) {
  char buf[256];
  keel_sshape_text(S, keel_shapes_find(S, g, name), buf, sizeof buf);
  if (!strcmp(buf, want)) return true;
  fprintf(stderr, "  '%s': inferred %s, want %s\n", name, buf, want);
  return false;
}

static const keel_graph *sub_graph(const keel_model *m, const char *path) {
  for (int32_t i = 0; i < m->n_graphs; i++)
    if (!strcmp(m->graphs[i]->path, path)) return m->graphs[i];
  return NULL;
}

/* x [B, T, 8] (dims "d0", "d1"): attention over 2 heads of 4 with a
 * causal mask built from T, PyTorch's dynamic-axes export. */
static mb_graph *attention(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){-1, -1, 8});
  int64_t zero = 0, one = 1, heads[] = {2}, hd[] = {4};
  mb_init(g, "i0", KEEL_INT64, 0, NULL, &zero);
  mb_init(g, "i1", KEEL_INT64, 0, NULL, &one);
  mb_init(g, "ax0", KEEL_INT64, 1, (int64_t[]){1}, &zero);
  mb_init(g, "heads", KEEL_INT64, 1, (int64_t[]){1}, heads);
  mb_init(g, "hd", KEEL_INT64, 1, (int64_t[]){1}, hd);
  mb_add(g, "Shape", "x", "sx");
  mb_add(g, "Gather", "sx,i0", "B");
  mb_add(g, "Gather", "sx,i1", "T");
  mb_add(g, "Unsqueeze", "B,ax0", "B1");
  mb_add(g, "Unsqueeze", "T,ax0", "T1");
  mb_attr_i(mb_add(g, "Concat", "B1,T1,heads,hd", "qshape"), "axis", 0);
  mb_add(g, "Reshape", "x,qshape", "q");
  mb_attr_ints(mb_add(g, "Transpose", "q", "qt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  mb_attr_ints(mb_add(g, "Transpose", "q", "kt"), "perm", 4, (int64_t[]){0, 2, 3, 1});
  mb_add(g, "MatMul", "qt,kt", "scores");
  mb_attr_i(mb_add(g, "Concat", "T1,T1", "mshape"), "axis", 0);
  float ninf = -1e9f;
  mb_attr_t(mb_add(g, "ConstantOfShape", "mshape", "full"), "value", KEEL_FLOAT, 1, (int64_t[]){1}, &ninf);
  mb_attr_i(mb_add(g, "Trilu", "full,i1", "mask"), "upper", 1);
  mb_add(g, "Add", "scores,mask", "masked");
  mb_attr_i(mb_add(g, "Softmax", "masked", "p"), "axis", -1);
  mb_add(g, "MatMul", "p,qt", "ctx");
  mb_attr_ints(mb_add(g, "Transpose", "ctx", "ctx_t"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  int64_t back[] = {0, 0, -1};
  mb_init(g, "back", KEEL_INT64, 1, (int64_t[]){3}, back);
  mb_add(g, "Reshape", "ctx_t,back", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_attention(void) {
  keel_model *m = load(attention(), 14);
  CHECK(m != NULL);
  if (!m) return;
  keel_shapes *S;
  CHECK(!keel_shapes_infer(m, &S));
  const keel_graph *g = m->main;
  CHECK(shape_is(S, g, "x", "[d0, d1, 8]"));
  CHECK(shape_is(S, g, "sx", "[3]"));
  CHECK(shape_is(S, g, "q", "[d0, d1, 2, 4]"));
  CHECK(shape_is(S, g, "qt", "[d0, 2, d1, 4]"));
  CHECK(shape_is(S, g, "scores", "[d0, 2, d1, d1]"));
  CHECK(shape_is(S, g, "mask", "[d1, d1]"));
  CHECK(shape_is(S, g, "masked", "[d0, 2, d1, d1]"));
  CHECK(shape_is(S, g, "ctx", "[d0, 2, d1, 4]"));
  CHECK(shape_is(S, g, "y", "[d0, d1, 8]"));
  CHECK(keel_sshape_class(keel_shapes_find(S, g, "y")) == 1);
  CHECK(keel_sshape_class(keel_shapes_find(S, g, "sx")) == 0);
  keel_shapes_free(S);
  keel_onnx_free(m);
}

/* Arithmetic on symbols. */
static mb_graph *arithmetic(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_FLOAT, 3, (int64_t[]){-1, -1, 8});
  int64_t one = 1, eight = 8, big = INT64_MAX, ax1 = 1, zero = 0;
  mb_attr_i(mb_add(g, "Concat", "x,x", "cat"), "axis", 1);             /* 2*T */
  mb_init(g, "s1", KEEL_INT64, 1, (int64_t[]){1}, &one);
  mb_init(g, "e1", KEEL_INT64, 1, (int64_t[]){1}, &big);
  mb_init(g, "a1", KEEL_INT64, 1, (int64_t[]){1}, &ax1);
  mb_add(g, "Slice", "x,s1,e1,a1", "tail");                            /* T-1 */
  mb_attr_i(mb_add(g, "Concat", "cat,tail", "cat3"), "axis", 1);       /* 3*T-1 */
  int64_t flat[] = {0, -1}, split2[] = {0, -1, 2};
  mb_init(g, "flat", KEEL_INT64, 1, (int64_t[]){2}, flat);
  mb_init(g, "split2", KEEL_INT64, 1, (int64_t[]){3}, split2);
  mb_add(g, "Reshape", "x,flat", "xf");                                 /* [B, 8*T] */
  mb_add(g, "Reshape", "xf,split2", "xs");                              /* [B, 4*T, 2] */
  int64_t pads[] = {0, 1, 0, 0, 2, 0};
  mb_init(g, "pads", KEEL_INT64, 1, (int64_t[]){6}, pads);
  mb_add(g, "Pad", "x,pads", "padded");                                 /* T+3 */
  /* T/8 from the shape: Reshape x to [B, T/8, 64] */
  mb_init(g, "i1", KEEL_INT64, 0, NULL, &one);
  mb_init(g, "i8", KEEL_INT64, 0, NULL, &eight);
  mb_init(g, "ax0", KEEL_INT64, 1, (int64_t[]){1}, &zero);
  int64_t rest[] = {64};
  mb_init(g, "rest", KEEL_INT64, 1, (int64_t[]){1}, rest);
  mb_init(g, "b0", KEEL_INT64, 1, (int64_t[]){1}, &zero);
  mb_add(g, "Shape", "x", "sx");
  mb_add(g, "Gather", "sx,i1", "T");
  mb_add(g, "Div", "T,i8", "T8");
  mb_add(g, "Unsqueeze", "T8,ax0", "T81");
  mb_attr_i(mb_add(g, "Concat", "b0,T81,rest", "shp8"), "axis", 0);
  mb_add(g, "Reshape", "x,shp8", "x8");
  /* PyTorch's expand(b, n, 3, t, d): the target's -1s kept as the input's
   * dims by Where(s == -1, 1, s) over ConstantOfShape(Shape(s)) */
  int64_t ax2 = 2, three = 3, m1 = -1, one1 = 1;
  mb_init(g, "ax2", KEEL_INT64, 1, (int64_t[]){1}, &ax2);
  mb_init(g, "rep3", KEEL_INT64, 1, (int64_t[]){1}, &three);
  mb_init(g, "i0", KEEL_INT64, 0, NULL, &zero);
  mb_init(g, "m1", KEEL_INT64, 0, NULL, &m1);
  mb_init(g, "flat1", KEEL_INT64, 1, (int64_t[]){1}, &m1);
  mb_add(g, "Unsqueeze", "x,ax2", "xu");                                /* [B, T, 1, 8] */
  mb_add(g, "Gather", "sx,i0", "B");
  mb_add(g, "Unsqueeze", "B,ax0", "B1");
  mb_add(g, "Unsqueeze", "T,ax0", "T1");
  mb_add(g, "Gather", "sx,ax2", "C1");                                  /* [8] */
  mb_attr_i(mb_add(g, "Concat", "B1,T1,rep3,C1", "es"), "axis", 0);
  mb_add(g, "Reshape", "es,flat1", "esr");
  mb_add(g, "Shape", "esr", "ess");
  mb_attr_t(mb_add(g, "ConstantOfShape", "ess", "ones"), "value", KEEL_INT64, 1, (int64_t[]){1}, &one1);
  mb_add(g, "Mul", "ones,m1", "negs");
  mb_add(g, "Equal", "esr,negs", "eq");
  mb_add(g, "Where", "eq,ones,esr", "target");
  mb_add(g, "Expand", "xu,target", "xe");                               /* [B, T, 3, 8] */
  /* what stays unknown: a stride over a symbol */
  static float w[4 * 8 * 3];
  for (int i = 0; i < 4 * 8 * 3; i++) w[i] = (float)(i % 5) * 0.25f;
  mb_init(g, "w", KEEL_FLOAT, 3, (int64_t[]){4, 8, 3}, w);
  mb_attr_ints(mb_add(g, "Transpose", "x", "xc"), "perm", 3, (int64_t[]){0, 2, 1});
  mb_node *c1 = mb_add(g, "Conv", "xc,w", "conv1");
  mb_attr_ints(c1, "pads", 2, (int64_t[]){1, 1});
  mb_node *c2 = mb_add(g, "Conv", "xc,w", "conv2");
  mb_attr_ints(c2, "strides", 1, (int64_t[]){2});
  /* an input without a shape */
  mb_input(g, "u", KEEL_FLOAT, -1, NULL);
  mb_add(g, "Relu", "u", "ru");
  /* a data-dependent dim */
  mb_add(g, "NonZero", "x", "nz");
  const char *outs[] = {"cat3", "xs", "padded", "x8", "conv1", "conv2", "ru", "nz", "xe"};
  for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) mb_output(g, outs[i], KEEL_FLOAT, -1, NULL);
  (void)g_minus1;
  return g;
}

static void check_arithmetic(void) {
  keel_model *m = load(arithmetic(), 13);
  CHECK(m != NULL);
  if (!m) return;
  keel_shapes *S;
  CHECK(!keel_shapes_infer(m, &S));
  const keel_graph *g = m->main;
  CHECK(shape_is(S, g, "cat", "[d0, 2*d1, 8]"));
  CHECK(shape_is(S, g, "tail", "[d0, d1-1, 8]"));
  CHECK(shape_is(S, g, "cat3", "[d0, 3*d1-1, 8]"));
  CHECK(shape_is(S, g, "xf", "[d0, 8*d1]"));
  CHECK(shape_is(S, g, "xs", "[d0, 4*d1, 2]"));
  CHECK(shape_is(S, g, "padded", "[d0, d1+3, 8]"));
  CHECK(shape_is(S, g, "x8", "[d0, d1/8, 64]"));
  CHECK(shape_is(S, g, "xe", "[d0, d1, 3, 8]"));
  CHECK(shape_is(S, g, "ones", "[4]"));
  CHECK(shape_is(S, g, "conv1", "[d0, 4, d1]"));
  CHECK(shape_is(S, g, "conv2", "[d0, 4, ?]"));
  CHECK(shape_is(S, g, "ru", "rank ?"));
  const keel_sshape *nz = keel_shapes_find(S, g, "nz");
  CHECK(nz && nz->rank == 2 && nz->d[0].sym == KEEL_SYM_KNOWN && nz->d[0].add == 3 && nz->d[1].sym >= 0);
  CHECK(keel_sshape_class(keel_shapes_find(S, g, "conv2")) == 2);
  CHECK(keel_sshape_class(keel_shapes_find(S, g, "ru")) == 2);
  /* the check's arithmetic: d0 is bound by the first value, d1+1 follows */
  const keel_sshape *p = keel_shapes_find(S, g, "padded");
  int64_t bind[64];
  for (int i = 0; i < 64; i++) bind[i] = -1;
  CHECK(keel_shapes_n_syms(S) < 64);
  CHECK(keel_sshape_agrees(S, p, 3, (int64_t[]){2, 8, 8}, bind));  /* binds d0 = 2, d1 = 5 */
  CHECK(keel_sshape_agrees(S, p, 3, (int64_t[]){2, 8, 8}, bind));
  CHECK(!keel_sshape_agrees(S, p, 3, (int64_t[]){2, 9, 8}, bind)); /* d1 is 5 */
  CHECK(!keel_sshape_agrees(S, p, 3, (int64_t[]){3, 8, 8}, bind)); /* d0 is 2 */
  CHECK(!keel_sshape_agrees(S, p, 2, (int64_t[]){2, 8}, bind));    /* the rank */
  CHECK(!keel_sshape_agrees(S, keel_shapes_find(S, g, "x8"), 3, (int64_t[]){2, 1, 64}, bind)); /* 5/8 */
  keel_shapes_free(S);
  keel_onnx_free(m);
}

/* Greedy decoding: tokens [1, T] grow by one per iteration; an If inside
 * picks between two shapes. */
static mb_graph *decode(void) {
  mb_graph *body = mb_graph_new("body");
  mb_input(body, "it", KEEL_INT64, 0, NULL);
  mb_input(body, "cond_in", KEEL_BOOL, 0, NULL);
  mb_input(body, "tok", KEEL_INT64, -1, NULL);
  int64_t axis[] = {1};
  mb_init(body, "next", KEEL_INT64, 2, (int64_t[]){1, 1}, (int64_t[]){7});
  mb_attr_i(mb_add(body, "Concat", "tok,next", "tok_out"), "axis", 1);
  mb_add(body, "Identity", "cond_in", "cond_out");
  mb_attr_ints(mb_add(body, "ReduceSum", "tok_out", "score"), "axes", 1, axis); /* opset 11 */
  mb_output(body, "cond_out", KEEL_BOOL, -1, NULL);
  mb_output(body, "tok_out", KEEL_INT64, -1, NULL);
  mb_output(body, "score", KEEL_INT64, -1, NULL);

  mb_graph *then_g = mb_graph_new("then");
  mb_add(then_g, "Identity", "x", "tb");
  mb_output(then_g, "tb", KEEL_FLOAT, -1, NULL);
  mb_graph *else_g = mb_graph_new("else");
  mb_attr_i(mb_add(else_g, "Concat", "x,x", "eb"), "axis", 0);
  mb_output(else_g, "eb", KEEL_FLOAT, -1, NULL);

  mb_graph *g = mb_graph_new("main");
  mb_input(g, "tokens", KEEL_INT64, 2, (int64_t[]){1, -1});
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){-1, 3});
  mb_input(g, "flag", KEEL_BOOL, 0, NULL);
  int64_t steps = 4;
  mb_init(g, "M", KEEL_INT64, 0, NULL, &steps);
  mb_attr_g(mb_add(g, "Loop", "M,,tokens", "final,scores"), "body", body);
  mb_node *iff = mb_add(g, "If", "flag", "picked");
  mb_attr_g(iff, "then_branch", then_g);
  mb_attr_g(iff, "else_branch", else_g);
  mb_output(g, "final", KEEL_INT64, -1, NULL);
  mb_output(g, "scores", KEEL_INT64, -1, NULL);
  mb_output(g, "picked", KEEL_FLOAT, -1, NULL);
  return g;
}

static void check_decode(void) {
  keel_model *m = load(decode(), 11);
  CHECK(m != NULL);
  if (!m) return;
  keel_shapes *S;
  CHECK(!keel_shapes_infer(m, &S));
  const keel_graph *g = m->main, *body = NULL;
  for (int32_t i = 0; i < m->n_graphs; i++)
    if (m->graphs[i]->depth == 1 && !strcmp(m->graphs[i]->owner->op_type, "Loop")) body = m->graphs[i];
  CHECK(body != NULL);
  (void)sub_graph;
  if (body) {
    /* in the body the row is [1, L] for a symbol L of the body; out L+1 */
    const keel_sshape *tok = keel_shapes_find(S, body, "tok"), *out = keel_shapes_find(S, body, "tok_out");
    CHECK(tok && tok->rank == 2 && tok->d[1].sym >= 0 && keel_shapes_sym_graph(S, tok->d[1].sym) == body->id);
    CHECK(out && out->rank == 2 && out->d[1].sym == tok->d[1].sym && out->d[1].add == 1);
    CHECK(shape_is(S, body, "score", "[1, 1]"));
  }
  /* the final row: a fresh symbol of the main graph, not T; the scan
   * output: [4 (the trip count), 1, 1] */
  const keel_sshape *fin = keel_shapes_find(S, g, "final");
  CHECK(fin && fin->rank == 2 && fin->d[0].add == 1 && fin->d[1].sym >= 0 &&
        keel_shapes_sym_graph(S, fin->d[1].sym) == 0 &&
        fin->d[1].sym != keel_shapes_find(S, g, "tokens")->d[1].sym);
  CHECK(shape_is(S, g, "scores", "[4, 1, 1]"));
  /* If: [d0, 3] against [2*d0, 3]: a fresh symbol, then 3 */
  const keel_sshape *pk = keel_shapes_find(S, g, "picked");
  CHECK(pk && pk->rank == 2 && pk->d[0].sym >= 0 && pk->d[1].sym == KEEL_SYM_KNOWN && pk->d[1].add == 3);
  keel_shapes_free(S);
  keel_onnx_free(m);
}

/* Runs a model with the shape check on: every run must succeed. */
static keel_session_t *checked(mb_graph *g, int opset) {
  keel_options o = {.size = sizeof o, .flags = KEEL_OPT_CHECK_SHAPES};
  return mb_session_opts(g, opset, &o);
}

static keel_status run1(keel_session_t *s, const char *const *names, keel_value_t **in, size_t n_in,
                        size_t n_out) {
  keel_value_t *out[16] = {0};
  keel_status st = keel_run(s, names, in, n_in, out);
  for (size_t i = 0; i < n_out; i++) keel_value_release(out[i]);
  return st;
}

static void check_runs(void) {
  /* attention at (B, T) = (1, 3), (2, 5), (3, 8): d0, d1 rebound per run */
  keel_session_t *s = checked(attention(), 14);
  CHECK(s != NULL);
  for (int k = 0; s && k < 3; k++) {
    int64_t B = 1 + k, T = (int64_t[]){3, 5, 8}[k];
    float x[3 * 8 * 8] = {0};
    for (int i = 0; i < B * T * 8; i++) x[i] = (float)(i % 7) * 0.1f;
    keel_value_t *in = mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){B, T, 8}, x);
    keel_status st = run1(s, (const char *[]){"x"}, &in, 1, 1);
    if (st) fprintf(stderr, "  attention run: %s\n", keel_last_error());
    CHECK(st == KEEL_OK);
    keel_value_release(in);
  }
  if (s) { /* every value was compared (39 a run: canon-reshape gave q's
             * Reshape a constant shape and its chain went), 25 of each run
             * symbolic */
    keel_shapecheck_counts c = keel_shapecheck_get(s);
    CHECK(c.checked >= 3 * 39 && c.symbolic >= 3 * 20 && c.unknown == 0 && c.runs_off == 0);
  }
  keel_session_destroy(s);

  /* the arithmetic model at T = 16 (T/8 exact); u of any shape */
  s = checked(arithmetic(), 13);
  CHECK(s != NULL);
  if (s) {
    float x[2 * 16 * 8], u[6] = {1, -1, 2, -2, 3, -3};
    for (int i = 0; i < 2 * 16 * 8; i++) x[i] = (float)(i % 3);
    keel_value_t *in[2] = {mb_tensor(s, KEEL_FLOAT, 3, (int64_t[]){2, 16, 8}, x),
                           mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, 3}, u)};
    keel_status st = run1(s, (const char *[]){"x", "u"}, in, 2, 9);
    if (st) fprintf(stderr, "  arithmetic run: %s\n", keel_last_error());
    CHECK(st == KEEL_OK);
    keel_value_release(in[0]), keel_value_release(in[1]);
  }
  keel_session_destroy(s);

  /* decoding (both If branches); then a run with x not of the declared
   * [?, 3]: not checked, counted, and the session still runs */
  s = checked(decode(), 11);
  CHECK(s != NULL);
  for (int k = 0; s && k < 3; k++) {
    int64_t tok[5] = {1, 2, 3, 4, 5};
    float x[8] = {0};
    bool flag = k == 0;
    int64_t xd = k == 2 ? 4 : 3;
    keel_value_t *in[3] = {mb_tensor(s, KEEL_INT64, 2, (int64_t[]){1, 5}, tok),
                           mb_tensor(s, KEEL_FLOAT, 2, (int64_t[]){2, xd}, x),
                           mb_tensor(s, KEEL_BOOL, 0, NULL, &flag)};
    keel_status st = run1(s, (const char *[]){"tokens", "x", "flag"}, in, 3, 3);
    if (st) fprintf(stderr, "  decode run: %s\n", keel_last_error());
    CHECK(st == KEEL_OK);
    for (int i = 0; i < 3; i++) keel_value_release(in[i]);
  }
  if (s) CHECK(keel_shapecheck_get(s).runs_off == 1 && keel_shapecheck_get(s).checked > 10);
  keel_session_destroy(s);
}

int main(void) {
  check_attention();
  check_arithmetic();
  check_decode();
  check_runs();
  return check_report();
}
