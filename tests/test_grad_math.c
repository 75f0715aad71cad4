/* test_grad_math.c: the rules of autodiff/grad_math.c against finite differences
 * (tests/gradcheck.h) in float64: every rule with its attribute variants
 * (broadcasting, axes as attribute or input, keepdims, negative axes, the
 * opset forms, omitted optional inputs); the documented tie choices; the
 * refused Einsum diagonal; and one float32 run per helper kernel
 * (UnaryGrad, MatMulGrad, NegativeLogLikelihoodLossGrad, SumToShape)
 * against the float64 result. */
#include "gradcheck.h"
#include "grad_math_torch.h"

/* One node "op(ins) -> outs" with attributes; "y" is what L reads. */
typedef struct spec {
  const char *op, *ins, *outs;
  const char *iname[3];
  int64_t ival[3];
  const char *fname[3];
  float fval[3];
  const char *sname, *sval;
  const char *vname;          /* an ints attribute                    */
  int nv;
  int64_t v[6];
} spec;

static void node(mb_graph *g, void *ctx) {
  const spec *s = ctx;
  mb_node *n = mb_add(g, s->op, s->ins, s->outs ? s->outs : "y");
  for (int i = 0; i < 3; i++) {
    if (s->iname[i]) mb_attr_i(n, s->iname[i], s->ival[i]);
    if (s->fname[i]) mb_attr_f(n, s->fname[i], s->fval[i]);
  }
  if (s->sname) mb_attr_s(n, s->sname, s->sval);
  if (s->vname) mb_attr_ints(n, s->vname, s->nv, s->v);
}

static const double X6[6] = {0.3, -0.8, 0.5, 1.2, -0.45, 0.7};
static const double P6[6] = {0.3, 0.8, 0.5, 1.2, 0.45, 0.7};
static double X24[24], P24[24];

static void unary_ops(void) {
  struct { const char *op; int opset; const double *x; spec s; } u[] = {
      {"Sqrt", 13, P6, {0}}, {"Reciprocal", 13, P6, {0}}, {"Abs", 13, X6, {0}},
      {"Erf", 13, X6, {0}}, {"Sin", 13, X6, {0}}, {"Cos", 13, X6, {0}},
      {"Softsign", 13, X6, {0}}, {"Elu", 13, X6, {0}},
      {"Elu alpha", 13, X6, {.op = "Elu", .fname = {"alpha"}, .fval = {0.7f}}},
      {"Selu", 13, X6, {0}},
      {"Selu attrs", 13, X6, {.op = "Selu", .fname = {"alpha", "gamma"}, .fval = {1.3f, 0.9f}}},
      {"LeakyRelu", 13, X6, {0}},
      {"LeakyRelu alpha", 13, X6, {.op = "LeakyRelu", .fname = {"alpha"}, .fval = {0.3f}}},
      {"Gelu", 20, X6, {0}},
      {"Gelu tanh", 20, X6, {.op = "Gelu", .sname = "approximate", .sval = "tanh"}},
      {"Gelu none", 20, X6, {.op = "Gelu", .sname = "approximate", .sval = "none"}},
      {"HardSigmoid", 13, X6, {0}},
      {"HardSigmoid attrs", 13, X6, {.op = "HardSigmoid", .fname = {"alpha", "beta"}, .fval = {0.9f, 0.4f}}},
      {"HardSwish", 14, X24, {0}}, {"Softplus", 13, X6, {0}}, {"Mish", 18, X6, {0}},
      {"Clip 6 attrs", 6, X6, {.op = "Clip", .fname = {"min", "max"}, .fval = {-0.5f, 0.6f}}},
      {"Clip 6 none", 6, X6, {.op = "Clip"}},
  };
  for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
    spec s = u[i].s;
    if (!s.op) s.op = u[i].op;
    s.ins = "x";
    int n = u[i].x == X24 ? 24 : 6;
    gc_input in[1] = {{"x", 2, {n / 3, 3}, u[i].x, true}};
    gc_check(u[i].op, node, &s, in, 1, u[i].opset, 1e-6);
  }
  /* Clip 11+: min/max inputs (any may be omitted); they get no gradient. */
  double lo = -0.5, hi = 0.6;
  const char *clips[] = {"x,lo,hi", "x,,hi", "x,lo", "x"};
  for (int i = 0; i < 4; i++) {
    spec s = {.op = "Clip", .ins = clips[i]};
    gc_input in[3] = {{"x", 2, {2, 3}, X6, true}, {"lo", 0, {0}, &lo, false}, {"hi", 0, {0}, &hi, false}};
    gc_check(clips[i], node, &s, in, 3, 13, 1e-6);
  }
}

/* y = x ** 3 with the exponent a Constant node (its gradient skipped). */
static void pow_const(mb_graph *g, void *ctx) {
  (void)ctx;
  double three = 3.0;
  mb_attr_t(mb_add(g, "Constant", "", "e"), "value", KEEL_DOUBLE, 0, NULL, &three);
  mb_add(g, "Pow", "x,e", "y");
}

static void pow_ops(void) {
  double y3[3] = {1.5, 2.0, -0.7}, ys = 2.0, yi = 3.0;
  spec s = {.op = "Pow", .ins = "x,e"};
  gc_input in[2] = {{"x", 2, {2, 3}, P6, true}, {"e", 1, {3}, y3, true}};
  gc_check("Pow broadcast", node, &s, in, 2, 13, 1e-6);
  double x3[3] = {1.5, 2.0, 0.7};
  gc_input in2[2] = {{"x", 1, {3}, x3, true}, {"e", 2, {2, 3}, X6, true}};
  gc_check("Pow x broadcast", node, &s, in2, 2, 13, 1e-6);
  gc_input in3[2] = {{"x", 2, {2, 3}, X6, true}, {"e", 0, {0}, &ys, false}};
  gc_check("Pow negative x", node, &s, in3, 2, 13, 1e-6);
  int64_t ie = 3;
  gc_input in4[2] = {{"x", 2, {2, 3}, X6, true}, {"e", 0, {0}, &yi, false, KEEL_INT64, &ie}};
  gc_check("Pow int exponent", node, &s, in4, 2, 15, 1e-6);
  gc_check("Pow constant exponent", pow_const, NULL, in3, 1, 13, 1e-6);
}

static void variadic_ops(void) {
  double a[6] = {0.3, -0.8, 0.5, 1.2, -0.45, 0.7}, b[3] = {0.9, -1.4, 0.6}, c[2] = {0.1, 0.8};
  const char *ops[] = {"Max", "Min", "Mean"};
  for (int i = 0; i < 3; i++) {
    spec s = {.op = ops[i], .ins = "a,b,c"};
    gc_input in[3] = {{"a", 2, {2, 3}, a, true}, {"b", 1, {3}, b, true}, {"c", 2, {2, 1}, c, true}};
    gc_check(ops[i], node, &s, in, 3, 13, 1e-6);
    spec s1 = {.op = ops[i], .ins = "a"};
    gc_check("one input", node, &s1, in, 1, 13, 1e-6);
  }
  /* Ties: the first maximal input takes the whole gradient. */
  double t1[3] = {1.0, 2.0, 3.0}, t2[3] = {1.0, 5.0, 3.0};
  spec s = {.op = "Max", .ins = "a,b"};
  gc_input in[2] = {{"a", 1, {3}, t1, true}, {"b", 1, {3}, t2, true}};
  double *gr[2] = {0};
  if (gc_gradients(node, &s, in, 2, 13, gr)) {
    CHECK(gr[0][0] != 0 && gr[1][0] == 0); /* tie at 0: a only */
    CHECK(gr[0][1] == 0 && gr[1][1] != 0);
    CHECK(gr[0][2] != 0 && gr[1][2] == 0);
  }
  free(gr[0]), free(gr[1]);
  /* Where: the condition gets nothing; X and Y broadcast. */
  bool cond[6] = {true, false, true, false, false, true};
  spec w = {.op = "Where", .ins = "c,a,b"};
  gc_input win[3] = {{"c", 2, {2, 3}, NULL, false, KEEL_BOOL, cond}, {"a", 2, {2, 3}, a, true},
                     {"b", 1, {3}, b, true}};
  gc_check("Where", node, &w, win, 3, 13, 1e-6);
}

/* y = x * Cast(Cast(x, int64), double): the int cast passes nothing. */
static void cast_body(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_attr_i(mb_add(g, "Cast", "x", "xi"), "to", KEEL_INT64);
  mb_attr_i(mb_add(g, "Cast", "xi", "xd"), "to", KEEL_DOUBLE);
  mb_attr_i(mb_add(g, "Cast", "x", "xx"), "to", KEEL_DOUBLE);
  mb_add(g, "CastLike", "xx,x", "xl");
  mb_add(g, "Mul", "xl,xd", "y");
}

static void cast_ops(void) {
  double x[6] = {0.3, -1.8, 2.5, 1.2, -0.45, 3.7};
  gc_input in[1] = {{"x", 2, {2, 3}, x, true}};
  gc_check("Cast", cast_body, NULL, in, 1, 15, 1e-6);
}

/* ---------------------------------------------------------- reductions */

static void reduce_ops(void) {
  const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                       "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceLogSum",
                       "ReduceSumSquare"};
  int64_t ax1[1] = {1}, axn[2] = {-1, 0}, none[1] = {0};
  for (int i = 0; i < 10; i++) {
    const double *x = i == 8 ? P24 : X24;
    int in_at = i == 0 ? 13 : 18;
    for (int keep = 0; keep <= 1; keep++) {
      char label[96];
      /* axes as an attribute (the opset before in_at) */
      spec s = {.op = ops[i], .ins = "x", .iname = {"keepdims"}, .ival = {keep},
                .vname = "axes", .nv = 1, .v = {1}};
      gc_input in[2] = {{"x", 3, {2, 3, 4}, x, true}, {"axes", 1, {1}, NULL, false, KEEL_INT64, ax1}};
      snprintf(label, sizeof label, "%s attr axes keep %d", ops[i], keep);
      gc_check(label, node, &s, in, 1, in_at - 2, 1e-6);
      s.v[0] = -1, s.v[1] = 0, s.nv = 2;
      snprintf(label, sizeof label, "%s attr axes -1,0 keep %d", ops[i], keep);
      gc_check(label, node, &s, in, 1, in_at - 2, 1e-6);
      /* axes as an input */
      spec si = {.op = ops[i], .ins = "x,axes", .iname = {"keepdims"}, .ival = {keep}};
      snprintf(label, sizeof label, "%s input axes keep %d", ops[i], keep);
      gc_check(label, node, &si, in, 2, in_at, 1e-6);
      in[1] = (gc_input){"axes", 1, {2}, NULL, false, KEEL_INT64, axn};
      snprintf(label, sizeof label, "%s input axes -1,0 keep %d", ops[i], keep);
      gc_check(label, node, &si, in, 2, in_at, 1e-6);
      /* no axes: all of them, in both opset forms */
      spec sa = {.op = ops[i], .ins = "x", .iname = {"keepdims"}, .ival = {keep}};
      snprintf(label, sizeof label, "%s all keep %d", ops[i], keep);
      gc_check(label, node, &sa, in, 1, in_at, 1e-6);
      gc_check(label, node, &sa, in, 1, in_at - 2, 1e-6);
      /* empty axes input: all axes, or none with noop_with_empty_axes */
      in[1] = (gc_input){"axes", 1, {0}, NULL, false, KEEL_INT64, none};
      snprintf(label, sizeof label, "%s empty axes keep %d", ops[i], keep);
      gc_check(label, node, &si, in, 2, in_at, 1e-6);
    }
    spec sn = {.op = ops[i], .ins = "x", .iname = {"noop_with_empty_axes"}, .ival = {1}};
    gc_input in[1] = {{"x", 3, {2, 3, 4}, x, true}};
    gc_check("noop_with_empty_axes", node, &sn, in, 1, in_at, 1e-6);
  }
  /* ReduceProd through zeros: none, one and two in a slice. */
  double z[8] = {0.5, 0.0, 1.5, -2.0, 0.0, 0.0, 0.7, 1.1};
  spec p = {.op = "ReduceProd", .ins = "x", .iname = {"keepdims"}, .ival = {0}, .vname = "axes",
            .nv = 1, .v = {1}};
  gc_input pin[1] = {{"x", 2, {4, 2}, z, true}};
  gc_check("ReduceProd zeros", node, &p, pin, 1, 13, 1e-6);
  /* ReduceMax, two-way tie: each gets half (central differences agree). */
  double t[6] = {1.0, 3.0, 3.0, -1.0, 2.0, 0.5};
  spec m = {.op = "ReduceMax", .ins = "x", .vname = "axes", .nv = 1, .v = {1}};
  gc_input tin[1] = {{"x", 2, {2, 3}, t, true}};
  gc_check("ReduceMax tie", node, &m, tin, 1, 13, 1e-6);
  m.op = "ReduceMin";
  t[3] = 0.5;
  gc_check("ReduceMin tie", node, &m, tin, 1, 13, 1e-6);
}

/* --------------------------------------------------------- softmax, losses */

static void softmax_ops(void) {
  const char *ops[] = {"Softmax", "LogSoftmax"};
  for (int i = 0; i < 2; i++) {
    gc_input in[1] = {{"x", 3, {2, 3, 4}, X24, true}};
    spec d = {.op = ops[i], .ins = "x"};
    gc_check("default 13", node, &d, in, 1, 13, 1e-6);
    gc_check("default 11 (axis 1, flattened)", node, &d, in, 1, 11, 1e-6);
    int64_t axes[] = {0, 1, 2, -1, -2};
    for (int a = 0; a < 5; a++) {
      spec s = {.op = ops[i], .ins = "x", .iname = {"axis"}, .ival = {axes[a]}};
      gc_check(ops[i], node, &s, in, 1, 13, 1e-6);
      gc_check(ops[i], node, &s, in, 1, 11, 1e-6);
    }
  }
}

/* y = loss + sum(log_prob * W): both outputs of SoftmaxCrossEntropyLoss. */
static void sce_both(mb_graph *g, void *ctx) {
  spec *s = ctx;
  s->outs = "l,lp";
  node(g, s);
  s->outs = NULL;
  double w[24];
  for (int i = 0; i < 24; i++) w[i] = 0.3 + 0.1 * (i % 7);
  mb_init(g, "W", KEEL_DOUBLE, 2, (int64_t[]){6, 4}, w);
  mb_add(g, "Mul", "lp,W", "lpw");
  mb_attr_i(mb_add(g, "ReduceSum", "lpw", "s"), "keepdims", 0);
  mb_add(g, "Add", "l,s", "y");
}

/* PyTorch's other export of cross_entropy: LogSoftmax then NLL. */
static void ls_nll(mb_graph *g, void *ctx) {
  mb_attr_i(mb_add(g, "LogSoftmax", "x", "lp"), "axis", 1);
  spec *s = ctx;
  const char *keep = s->ins;
  s->ins = strstr(keep, ",w") ? "lp,t,w" : "lp,t";
  s->op = "NegativeLogLikelihoodLoss";
  node(g, s);
  s->ins = keep;
}

/* Both exports of PyTorch's cross_entropy against PyTorch's own gradients
 * (tests/grad_math_torch.h, tools/gen_grad_math_torch.py). */
static void torch_cross_entropy(void) {
  int64_t t6[6] = {1, 0, 3, 2, 3, 1}, t4[4] = {2, 0, 1, 2};
  double w4[4] = {0.7, 1.3, 0.9, 1.6};
  for (size_t c = 0; c < sizeof TORCH_CE / sizeof TORCH_CE[0]; c++) {
    const torch_ce *e = &TORCH_CE[c];
    for (int form = 0; form < 2; form++) {
      spec s = {.op = "SoftmaxCrossEntropyLoss", .ins = e->weight ? "x,t,w" : "x,t",
                .sname = "reduction", .sval = e->reduction};
      if (e->ignore != -100) s.iname[0] = "ignore_index", s.ival[0] = e->ignore;
      gc_input in[3] = {{"x", 2, {6, 4}, X24, true}, {"t", 1, {6}, NULL, false, KEEL_INT64, t6},
                        {"w", 1, {4}, w4, false}};
      if (e->nd == 3) {
        in[0] = (gc_input){"x", 3, {2, 3, 2}, X24, true};
        in[1] = (gc_input){"t", 2, {2, 2}, NULL, false, KEEL_INT64, t4};
        in[2].dims[0] = 3;
      }
      double *gr[1] = {0};
      if (gc_gradients(form ? ls_nll : node, &s, in, e->weight ? 3 : 2, 13, gr)) {
        double worst = 0;
        for (int i = 0; i < 24 / (e->nd == 3 ? 2 : 1); i++) worst = fmax(worst, fabs(gr[0][i] - e->dx[i]));
        if (worst > 1e-12)
          fprintf(stderr, "torch cross_entropy case %zu form %d: off by %g\n", c, form, worst);
        CHECK(worst <= 1e-12);
      }
      free(gr[0]);
    }
  }
}

static void loss_ops(void) {
  int64_t t6[6] = {1, 0, 3, 2, 3, 1}, t4[4] = {2, 0, 1, 2};
  double w4[4] = {0.7, 1.3, 0.9, 1.6};
  const char *reds[] = {"none", "sum", "mean"};
  const char *ops[] = {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"};
  for (int o = 0; o < 2; o++)
    for (int r = 0; r < 3; r++)
      for (int v = 0; v < 4; v++) { /* plain, weights, ignore_index, both */
        spec s = {.op = ops[o], .ins = v & 1 ? "x,t,w" : "x,t", .sname = "reduction", .sval = reds[r]};
        if (v & 2) s.iname[0] = "ignore_index", s.ival[0] = 3;
        gc_input in[3] = {{"x", 2, {6, 4}, X24, true}, {"t", 1, {6}, NULL, false, KEEL_INT64, t6},
                          {"w", 1, {4}, w4, false}};
        char label[128];
        snprintf(label, sizeof label, "%s %s variant %d", ops[o], reds[r], v);
        gc_check(label, node, &s, in, 3, 13, 1e-6);
        /* [N, C, d]: x [2, 3, 2] (C = 3), targets [2, 2] */
        gc_input in3[3] = {{"x", 3, {2, 3, 2}, X24, true}, {"t", 2, {2, 2}, NULL, false, KEEL_INT64, t4},
                           {"w", 1, {3}, w4, false}};
        if (v & 2) s.ival[0] = 0;
        gc_check(label, node, &s, in3, 3, 13, 1e-6);
        if (o == 0) {
          if (v & 2) s.ival[0] = 3;
          gc_check("with log_prob", sce_both, &s, in, 3, 13, 1e-6);
        } else if (v & 1) {
          if (v & 2) s.ival[0] = 3;
          gc_check("LogSoftmax + NLL", ls_nll, &s, in, 3, 13, 1e-6);
        }
      }
  int32_t t32[6] = {1, 0, 3, 2, 3, 1};
  spec s = {.op = "SoftmaxCrossEntropyLoss", .ins = "x,t"};
  gc_input in[2] = {{"x", 2, {6, 4}, X24, true}, {"t", 1, {6}, NULL, false, KEEL_INT32, t32}};
  gc_check("int32 labels", node, &s, in, 2, 12, 1e-6);
}

/* Operands that are Constant nodes get no gradient (nothing computed):
 * the others must still be right. */
typedef struct cspec {
  spec s;
  int rank;
  int64_t dims[4];
} cspec;

static void with_const(mb_graph *g, void *ctx) {
  cspec *c = ctx;
  double k[8] = {0.4, -1.1, 0.35, 0.8, -0.6, 1.4, 0.25, -0.9};
  mb_attr_t(mb_add(g, "Constant", "", "k"), "value", KEEL_DOUBLE, c->rank, c->dims, k);
  node(g, &c->s);
}

static void constant_operands(void) {
  bool cond[6] = {true, false, true, false, false, true};
  double a[8] = {0.3, -0.8, 0.5, 1.2, -0.45, 0.7, 0.15, -0.2}, w[8], cc[4] = {0.1, 0.2, -0.3, 0.4};
  for (int i = 0; i < 8; i++) w[i] = cos(0.8 * i);
  struct { cspec c; gc_input in[3]; int n; } t[] = {
      {{{.op = "MatMul", .ins = "a,k"}, 2, {3, 2}}, {{"a", 2, {2, 3}, a, true}}, 1},
      {{{.op = "MatMul", .ins = "k,a"}, 2, {2, 3}}, {{"a", 2, {3, 2}, a, true}}, 1},
      {{{.op = "Gemm", .ins = "a,k,c"}, 2, {2, 4}}, {{"a", 2, {3, 2}, a, true}, {"c", 1, {4}, cc, true}}, 2},
      {{{.op = "Gemm", .ins = "a,w,k", .iname = {"transB"}, .ival = {1}}, 1, {4}},
       {{"a", 2, {3, 2}, a, true}, {"w", 2, {4, 2}, w, true}}, 2},
      {{{.op = "Where", .ins = "c,a,k"}, 1, {3}},
       {{"c", 2, {2, 3}, NULL, false, KEEL_BOOL, cond}, {"a", 2, {2, 3}, a, true}}, 2},
      {{{.op = "Where", .ins = "c,k,a"}, 1, {3}},
       {{"c", 2, {2, 3}, NULL, false, KEEL_BOOL, cond}, {"a", 2, {2, 3}, a, true}}, 2},
      {{{.op = "Max", .ins = "a,k"}, 1, {3}}, {{"a", 2, {2, 3}, a, true}}, 1},
      {{{.op = "Min", .ins = "k,a"}, 1, {3}}, {{"a", 2, {2, 3}, a, true}}, 1},
      {{{.op = "Mean", .ins = "a,k"}, 1, {3}}, {{"a", 2, {2, 3}, a, true}}, 1},
      {{{.op = "Einsum", .ins = "a,k", .sname = "equation", .sval = "ij,jk->ik"}, 2, {3, 2}},
       {{"a", 2, {2, 3}, a, true}}, 1},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    char label[64];
    snprintf(label, sizeof label, "%s(%s), k constant", t[i].c.s.op, t[i].c.s.ins);
    gc_check(label, with_const, &t[i].c, t[i].in, t[i].n, 13, 1e-6);
  }
}

/* ------------------------------------------------------------ products */

static void matmul_ops(void) {
  static double a[128], b[128];
  for (int i = 0; i < 128; i++) a[i] = sin(0.7 * i + 0.1), b[i] = cos(0.45 * i + 0.3);
  struct { int ra; int64_t da[4]; int rb; int64_t db[4]; } c[] = {
      {1, {3}, 1, {3}},           {1, {3}, 2, {3, 2}},        {2, {2, 3}, 1, {3}},
      {2, {2, 3}, 2, {3, 4}},     {3, {2, 2, 3}, 2, {3, 4}},  {2, {2, 3}, 3, {2, 3, 4}},
      {4, {2, 1, 2, 3}, 3, {3, 3, 2}}, {3, {1, 2, 3}, 3, {2, 3, 2}}, {1, {3}, 3, {2, 3, 2}},
      {3, {2, 2, 3}, 1, {3}},     {3, {64, 1, 2}, 3, {64, 2, 1}}, {3, {4, 2, 3}, 3, {4, 3, 2}},
  };
  spec s = {.op = "MatMul", .ins = "a,b"};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    gc_input in[2] = {{"a", c[i].ra, {0}, a, true}, {"b", c[i].rb, {0}, b, true}};
    memcpy(in[0].dims, c[i].da, sizeof c[i].da);
    memcpy(in[1].dims, c[i].db, sizeof c[i].db);
    char label[64];
    snprintf(label, sizeof label, "MatMul case %zu", i);
    gc_check(label, node, &s, in, 2, 13, 1e-6);
  }
}

static void gemm_ops(void) {
  static double a[12], b[20], cc[20];
  for (int i = 0; i < 20; i++) b[i] = cos(0.45 * i + 0.3), cc[i] = 0.1 * i - 0.5;
  for (int i = 0; i < 12; i++) a[i] = sin(0.7 * i + 0.1);
  struct { int r; int64_t d[2]; } cs[] = {{2, {3, 4}}, {1, {4}}, {2, {3, 1}}, {2, {1, 4}}, {0, {0}}};
  for (int ta = 0; ta <= 1; ta++)
    for (int tb = 0; tb <= 1; tb++)
      for (int ci = 0; ci <= 5; ci++) {
        spec s = {.op = "Gemm", .ins = ci < 5 ? "a,b,c" : "a,b", .iname = {"transA", "transB"},
                  .ival = {ta, tb}, .fname = {"alpha", "beta"}, .fval = {0.7f, ci == 0 ? 1.0f : -1.3f}};
        gc_input in[3] = {{"a", 2, {0}, a, true}, {"b", 2, {0}, b, true}, {"c", 0, {0}, cc, true}};
        in[0].dims[0] = ta ? 2 : 3, in[0].dims[1] = ta ? 3 : 2;   /* M 3, K 2, N 4 */
        in[1].dims[0] = tb ? 4 : 2, in[1].dims[1] = tb ? 2 : 4;
        if (ci < 5) {
          in[2].rank = cs[ci].r;
          memcpy(in[2].dims, cs[ci].d, sizeof cs[ci].d);
        }
        char label[64];
        snprintf(label, sizeof label, "Gemm transA %d transB %d C %d", ta, tb, ci);
        gc_check(label, node, &s, in, ci < 5 ? 3 : 2, 13, 1e-6);
      }
}

static void einsum_ops(void) {
  static double a[64], b[64], c[64];
  for (int i = 0; i < 64; i++)
    a[i] = sin(0.7 * i + 0.1), b[i] = cos(0.45 * i + 0.3), c[i] = sin(0.3 * i - 0.2);
  struct { const char *eq; int n; int r[3]; int64_t d[3][4]; } e[] = {
      {"bij,bjk->bik", 2, {3, 3}, {{2, 2, 3}, {2, 3, 4}}},
      {"bhqd,bhkd->bhqk", 2, {4, 4}, {{2, 2, 3, 2}, {2, 2, 4, 2}}},
      {"ij->ji", 1, {2}, {{2, 3}}},
      {"ij->i", 1, {2}, {{2, 3}}},
      {"ij->", 1, {2}, {{2, 3}}},
      {"i,j->ij", 2, {1, 1}, {{3}, {4}}},
      {"ij,jk", 2, {2, 2}, {{2, 3}, {3, 4}}},
      {"ij,j->i", 2, {2, 1}, {{2, 3}, {3}}},
      {"ij,jk,kl->il", 3, {2, 2, 2}, {{2, 3}, {3, 2}, {2, 3}}},
      {"ij,k->i", 2, {2, 1}, {{2, 3}, {4}}},
      {"ij,kj->ikj", 2, {2, 2}, {{2, 3}, {4, 3}}},
      {"...ij,...jk->...ik", 2, {3, 3}, {{2, 2, 3}, {2, 3, 4}}},
      {"...ij,...jk->...ik", 2, {4, 2}, {{2, 2, 2, 3}, {3, 4}}},
      {"...ij,jk->...ik", 2, {3, 2}, {{2, 2, 3}, {3, 4}}},
      {"...ij,...jk->...ik", 2, {3, 3}, {{1, 2, 3}, {2, 3, 4}}},
      {"...i->...", 1, {3}, {{2, 2, 3}}},
      {"...i,...i", 2, {2, 1}, {{2, 3}, {3}}},
      {" b i j , b j k -> b i k ", 2, {3, 3}, {{2, 2, 3}, {2, 3, 4}}},
  };
  const char *names[3] = {"a", "b", "c"};
  const double *data[3] = {a, b, c};
  for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
    spec s = {.op = "Einsum", .ins = e[i].n == 1 ? "a" : e[i].n == 2 ? "a,b" : "a,b,c",
              .sname = "equation", .sval = e[i].eq};
    gc_input in[3];
    for (int k = 0; k < e[i].n; k++) {
      in[k] = (gc_input){names[k], e[i].r[k], {0}, data[k], true};
      memcpy(in[k].dims, e[i].d[k], sizeof e[i].d[k]);
    }
    gc_check(e[i].eq, node, &s, in, e[i].n, 13, 1e-6);
  }
}

/* A diagonal in one operand is refused at load with a clear error. */
static void einsum_diagonal(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "a", KEEL_DOUBLE, 2, (int64_t[]){3, 3});
  mb_output(g, "da", KEEL_DOUBLE, -1, NULL);
  mb_attr_s(mb_add(g, "Einsum", "a", "y"), "equation", "ii->i");
  mb_attr_i(mb_add(g, "ReduceSum", "y", "L"), "keepdims", 0);
  mb_node *n = mb_add(g, "Gradient", "a", "da");
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "L");
  mb_attr_strs(n, "xs", 1, (const char *[]){"a"});
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  CHECK(st == KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "diagonal") != NULL);
  keel_session_destroy(s);
}

/* ------------------------------------------------ float32 against float64 */

/* Gradient of sum(body(x...) * R) with every input of type dt; grads[i]
 * gets numel doubles. */
static bool typed_grads(gc_body_fn body, void *ctx, const gc_input *in, int n_in, int opset,
                        int dt, int yr, const int64_t *yd, double **grads) {
  mb_graph *g = mb_graph_new("main");
  int64_t yn = 1;
  for (int d = 0; d < yr; d++) yn *= yd[d];
  float Rf[4096];
  double Rd[4096];
  for (int64_t i = 0; i < yn; i++) Rd[i] = 0.5 + 0.37 * sin(1.3 * (double)i + 0.2), Rf[i] = (float)Rd[i];
  for (int i = 0; i < n_in; i++) mb_input(g, in[i].name, in[i].dtype ? in[i].dtype : dt, in[i].rank, in[i].dims);
  body(g, ctx);
  mb_init(g, "R", dt, yr, yd, dt == KEEL_FLOAT ? (const void *)Rf : (const void *)Rd);
  mb_add(g, "Mul", "y,R", "L");
  char ins[512] = "", outs[512] = "";
  const char *xs[8];
  int nx = 0;
  for (int i = 0; i < n_in; i++) {
    if (!in[i].diff) continue;
    snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%s", nx ? "," : "", in[i].name);
    snprintf(outs + strlen(outs), sizeof outs - strlen(outs), "%sd_%s", nx ? "," : "", in[i].name);
    char o[64];
    snprintf(o, sizeof o, "d_%s", in[i].name);
    mb_output(g, o, dt, -1, NULL);
    xs[nx++] = in[i].name;
  }
  mb_node *n = mb_add(g, "Gradient", ins, outs);
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "L");
  mb_attr_strs(n, "xs", nx, xs);
  size_t len;
  uint8_t *bytes = mb_model_domains(g, opset, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  CHECK_OK(st);
  keel_value_t *v[8] = {0}, *out[8] = {0};
  const char *names[8];
  for (int i = 0; s && i < n_in; i++) {
    int64_t cnt = numel(&in[i]);
    float *f = malloc(sizeof(float) * (size_t)(cnt ? cnt : 1));
    for (int64_t j = 0; j < cnt && !in[i].dtype; j++) f[j] = (float)in[i].data[j];
    names[i] = in[i].name;
    v[i] = mb_tensor(s, in[i].dtype ? in[i].dtype : dt, in[i].rank, in[i].dims,
                     in[i].dtype ? in[i].idata : dt == KEEL_FLOAT ? (const void *)f : (const void *)in[i].data);
    free(f);
  }
  bool ok = s && keel_run(s, names, v, (size_t)n_in, out) == KEEL_OK;
  CHECK(ok);
  for (int i = 0; ok && i < nx; i++) {
    int64_t cnt = keel_value_numel(out[i]);
    grads[i] = malloc(sizeof(double) * (size_t)(cnt ? cnt : 1));
    for (int64_t j = 0; j < cnt; j++) grads[i][j] = keel_value_at(out[i], j);
  }
  for (int i = 0; i < 8; i++) keel_value_release(v[i]), keel_value_release(out[i]);
  keel_session_destroy(s);
  return ok;
}

static void f32_vs_f64(const char *label, gc_body_fn body, void *ctx, const gc_input *in, int n_in,
                       int opset, int yr, const int64_t *yd, double tol) {
  double *g32[8] = {0}, *g64[8] = {0};
  if (typed_grads(body, ctx, in, n_in, opset, KEEL_FLOAT, yr, yd, g32) &&
      typed_grads(body, ctx, in, n_in, opset, KEEL_DOUBLE, yr, yd, g64)) {
    for (int i = 0, k = 0; i < n_in; i++) {
      if (!in[i].diff) continue;
      double worst = 0;
      for (int64_t j = 0; j < numel(&in[i]); j++)
        worst = fmax(worst, fabs(g32[k][j] - g64[k][j]) / (1 + fabs(g64[k][j])));
      if (worst > tol) fprintf(stderr, "%s: float32 differs from float64 by %g in d%s\n", label, worst, in[i].name);
      CHECK(worst <= tol);
      k++;
    }
  }
  for (int i = 0; i < 8; i++) free(g32[i]), free(g64[i]);
}

static void float32_runs(void) {
  static double a[8 * 16 * 24], b[8 * 24 * 8], x[64 * 10];
  for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) a[i] = sin(0.37 * (double)i);
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) b[i] = cos(0.21 * (double)i);
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = 3 * sin(0.13 * (double)i + 0.4);
  spec mm = {.op = "MatMul", .ins = "a,b"};
  gc_input min[2] = {{"a", 3, {6, 16, 24}, a, true}, {"b", 2, {24, 8}, b, true}};
  f32_vs_f64("MatMulGrad stacked", node, &mm, min, 2, 13, 3, (int64_t[]){6, 16, 8}, 1e-4);
  gc_input pin[2] = {{"a", 3, {8, 16, 24}, a, true}, {"b", 3, {8, 24, 8}, b, true}};
  f32_vs_f64("MatMulGrad batched", node, &mm, pin, 2, 13, 3, (int64_t[]){8, 16, 8}, 1e-4);
  gc_input bin[2] = {{"a", 4, {2, 1, 16, 24}, a, true}, {"b", 3, {3, 24, 8}, b, true}};
  f32_vs_f64("MatMulGrad broadcast", node, &mm, bin, 2, 13, 4, (int64_t[]){2, 3, 16, 8}, 1e-4);
  const char *un[] = {"Gelu", "Mish", "Erf", "Softplus", "Elu"};
  for (int i = 0; i < 5; i++) {
    spec s = {.op = un[i], .ins = "x"};
    gc_input in[1] = {{"x", 2, {64, 10}, x, true}};
    f32_vs_f64(un[i], node, &s, in, 1, 20, 2, (int64_t[]){64, 10}, 1e-5);
  }
  spec gt = {.op = "Gelu", .ins = "x", .sname = "approximate", .sval = "tanh"};
  gc_input gin[1] = {{"x", 2, {64, 10}, x, true}};
  f32_vs_f64("Gelu tanh", node, &gt, gin, 1, 20, 2, (int64_t[]){64, 10}, 1e-5);
  static int64_t t[64];
  for (int i = 0; i < 64; i++) t[i] = (i * 7) % 10;
  spec ce = {.op = "SoftmaxCrossEntropyLoss", .ins = "x,t", .iname = {"ignore_index"}, .ival = {3}};
  gc_input cin[2] = {{"x", 2, {64, 10}, x, true}, {"t", 1, {64}, NULL, false, KEEL_INT64, t}};
  f32_vs_f64("SoftmaxCrossEntropyLoss", node, &ce, cin, 2, 13, 0, NULL, 1e-5);
  spec add = {.op = "Add", .ins = "x,c"};
  gc_input ain[2] = {{"x", 3, {4, 16, 10}, x, true}, {"c", 2, {16, 1}, b, true}};
  f32_vs_f64("SumToShape", node, &add, ain, 2, 13, 3, (int64_t[]){4, 16, 10}, 1e-5);
  gc_input ain2[2] = {{"x", 3, {4, 16, 10}, x, true}, {"c", 3, {4, 1, 10}, b, true}};
  f32_vs_f64("SumToShape middle", node, &add, ain2, 2, 13, 3, (int64_t[]){4, 16, 10}, 1e-5);
}

int main(void) {
  for (int i = 0; i < 24; i++) X24[i] = 2.9 * sin(0.9 * i + 0.3) + 0.01 * i, P24[i] = 0.2 + fabs(X24[i]);
  unary_ops();
  pow_ops();
  variadic_ops();
  cast_ops();
  reduce_ops();
  softmax_ops();
  loss_ops();
  torch_cross_entropy();
  matmul_ops();
  gemm_ops();
  einsum_ops();
  einsum_diagonal();
  constant_operands();
  float32_runs();
  return check_report();
}
