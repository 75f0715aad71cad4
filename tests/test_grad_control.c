/* test_grad_control.c: reverse mode through If, Loop and Scan
 * (autodiff/grad_control.c) against float64 central differences
 * (tests/gradcheck.h):
 *  - If taken both ways, with the condition an input and computed from
 *    data; branches reading outer values and their own constants;
 *  - Loop with a fixed trip count: carried values, scan outputs and outer
 *    reads; counts 0, 1 and 5; a while loop whose condition the body
 *    computes (M omitted), carrying an int64 counter that takes no gradient;
 *  - Scan (opset 9+) with a reversed scan input on axis 1 and a reversed
 *    scan output on axis 1, with and without gradients at the scan output;
 *  - nesting: If inside Loop, Loop inside Loop, Loop inside If, If inside
 *    Scan (the branch changes per iteration), Scan inside Loop, If inside
 *    If, Loop > If > Loop > If; an RNN cell (MatMul) in a Loop; a Gradient
 *    node inside a Loop body;
 *  - repeated runs of a derivative model allocate the same bytes and hold
 *    none afterwards (and the test-only leak switch is seen); the backward
 *    Loop releases each iteration's saved values as it goes;
 *  - a body op without a derivative rule is refused at load, naming the op,
 *    the graph path and the node; so are a Scan of opset 8 and a Gradient
 *    fed other tensors through control flow;
 *  - fault injection: each system request of such a load failing in turn
 *    gives KEEL_ERR_OUT_OF_MEMORY and leaks nothing.
 */
#include "gradcheck.h"
#include "base/sysmem.h"

static const double X3[3] = {0.4, -0.7, 0.9}, W3[3] = {0.8, 1.3, -0.6};

/* ============================================================== If */

/* then: Tanh(x * w); else: Exp(x) * two (two: the branch's constant). */
static void if_branches(mb_node *n) {
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "t_y", KEEL_DOUBLE, -1, NULL);
  mb_add(t, "Mul", "x,w", "t_m");
  mb_add(t, "Tanh", "t_m", "t_y");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "e_y", KEEL_DOUBLE, -1, NULL);
  double two = 2;
  mb_init(e, "e_two", KEEL_DOUBLE, 0, NULL, &two);
  mb_add(e, "Exp", "x", "e_x");
  mb_add(e, "Mul", "e_x,e_two", "e_y");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
}

static void if_input_cond(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_node *n = mb_add(g, "If", "c", "y");
  mb_name(n, "branch");
  if_branches(n);
}

/* c = ReduceSum(x) > 0: computed from data, no gradient through it. */
static void if_data_cond(mb_graph *g, void *ctx) {
  (void)ctx;
  double zero = 0;
  mb_init(g, "zero", KEEL_DOUBLE, 0, NULL, &zero);
  mb_attr_i(mb_add(g, "ReduceSum", "x", "sx"), "keepdims", 0);
  mb_add(g, "Greater", "sx,zero", "c");
  mb_node *n = mb_add(g, "If", "c", "y");
  mb_name(n, "branch");
  if_branches(n);
}

/* Branches reading values of the outer graph: a = x * w; then: a * a + w,
 * else: Sigmoid(a) * x; the If's output is multiplied by a again. */
static void if_outer(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_add(g, "Mul", "x,w", "a");
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "t_y", KEEL_DOUBLE, -1, NULL);
  mb_add(t, "Mul", "a,a", "t_aa");
  mb_add(t, "Add", "t_aa,w", "t_y");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "e_y", KEEL_DOUBLE, -1, NULL);
  mb_add(e, "Sigmoid", "a", "e_s");
  mb_add(e, "Mul", "e_s,x", "e_y");
  mb_node *n = mb_add(g, "If", "c", "r");
  mb_name(n, "branch");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
  mb_add(g, "Mul", "r,a", "y");
}

/* Shadowing: the then branch has its own constant named w (the outer w
 * is not read there), the else branch reads the outer w. */
static void if_shadow(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_graph *t = mb_graph_new("then");
  mb_output(t, "t_y", KEEL_DOUBLE, -1, NULL);
  double own[3] = {2, 3, 4};
  mb_init(t, "w", KEEL_DOUBLE, 1, (int64_t[]){3}, own);
  mb_add(t, "Mul", "x,w", "t_y");
  mb_graph *e = mb_graph_new("else");
  mb_output(e, "e_y", KEEL_DOUBLE, -1, NULL);
  mb_add(e, "Mul", "x,w", "e_xw");
  mb_add(e, "Tanh", "e_xw", "e_y");
  mb_node *n = mb_add(g, "If", "c", "y");
  mb_name(n, "branch");
  mb_attr_g(n, "then_branch", t);
  mb_attr_g(n, "else_branch", e);
}

static void if_tests(void) {
  for (int way = 0; way < 2; way++) {
    uint8_t c = (uint8_t)!way;
    gc_input in[3] = {{"x", 1, {3}, X3, true},
                      {"w", 1, {3}, W3, true},
                      {"c", 0, {0}, NULL, false, KEEL_BOOL, &c}};
    gc_check(way ? "If input cond, else" : "If input cond, then", if_input_cond, NULL, in, 3, 13,
             1e-6);
    gc_check(way ? "If outer reads, else" : "If outer reads, then", if_outer, NULL, in, 3, 13,
             1e-6);
    gc_check(way ? "If shadowed capture, else" : "If shadowed capture, then", if_shadow, NULL, in,
             3, 13, 1e-6);
    double xneg[3] = {-0.4, -0.7, 0.2};
    gc_input d[2] = {{"x", 1, {3}, way ? xneg : X3, true}, {"w", 1, {3}, W3, true}};
    gc_check(way ? "If data cond, else" : "If data cond, then", if_data_cond, NULL, d, 2, 13,
             1e-6);
  }
}

/* ============================================================ Loop */

static mb_graph *loop_body_begin(const char *name, const char *i, const char *c, const char *v) {
  mb_graph *b = mb_graph_new(name);
  mb_input(b, i, KEEL_INT64, 0, NULL);
  mb_input(b, c, KEEL_BOOL, 0, NULL);
  mb_input(b, v, KEEL_DOUBLE, -1, NULL);
  return b;
}

/* Loop(3): v' = Tanh(v * w) (w read from outside), scan s = v' * v'.
 * y = v_final * s (both outputs take gradients). */
static void loop_fixed(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t three = 3;
  uint8_t t = 1;
  mb_init(g, "M", KEEL_INT64, 0, NULL, &three);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_output(b, "s", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "Mul", "v,w", "vw");
  mb_add(b, "Tanh", "vw", "v_out");
  mb_add(b, "Mul", "v_out,v_out", "s");
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,x", "vf,ss");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
  mb_add(g, "Mul", "vf,ss", "y");
}

/* A while loop (M omitted): v' = v * a + x (x read from outside),
 * k' = k + 1 (int64, no gradient), until ReduceSum(v') >= 6. */
static void loop_while(mb_graph *g, void *ctx) {
  (void)ctx;
  uint8_t t = 1;
  int64_t k0 = 0, one = 1;
  double six = 6;
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_init(g, "k0", KEEL_INT64, 0, NULL, &k0);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_input(b, "k", KEEL_INT64, 0, NULL);
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_output(b, "k_out", KEEL_INT64, 0, NULL);
  mb_init(b, "one", KEEL_INT64, 0, NULL, &one);
  mb_init(b, "six", KEEL_DOUBLE, 0, NULL, &six);
  mb_add(b, "Mul", "v,a", "va");
  mb_add(b, "Add", "va,x", "v_out");
  mb_add(b, "Add", "k,one", "k_out");
  mb_attr_i(mb_add(b, "ReduceSum", "v_out", "sv"), "keepdims", 0);
  mb_add(b, "Less", "sv,six", "c_out");
  mb_node *n = mb_add(g, "Loop", ",true,x,k0", "vf,kf");
  mb_name(n, "while");
  mb_attr_g(n, "body", b);
  mb_add(g, "Identity", "vf", "y");
}

/* Loop(M) without scan outputs; M = *(int64_t *)ctx, 0 included (the
 * backward then runs no iteration either and dvf/dx passes through). */
static void loop_count(mb_graph *g, void *ctx) {
  uint8_t t = 1;
  mb_init(g, "M", KEEL_INT64, 0, NULL, ctx);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "Mul", "v,w", "vw");
  mb_add(b, "Sigmoid", "vw", "v_out");
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,x", "vf");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
  mb_add(g, "Mul", "vf,vf", "y");
}

static void loop_tests(void) {
  gc_input in[2] = {{"x", 1, {3}, X3, true}, {"w", 1, {3}, W3, true}};
  gc_check("Loop fixed count", loop_fixed, NULL, in, 2, 13, 1e-6);
  int64_t counts[3] = {0, 1, 5};
  for (int i = 0; i < 3; i++) gc_check("Loop count 0, 1, 5", loop_count, &counts[i], in, 2, 13, 1e-6);
  double xs[3] = {0.5, 0.3, 0.4}, a[3] = {1.4, 1.2, 1.3};
  gc_input wi[2] = {{"x", 1, {3}, xs, true}, {"a", 1, {3}, a, true}};
  gc_check("Loop while", loop_while, NULL, wi, 2, 13, 1e-6);
}

/* ============================================================ Scan */

/* State h [2], scan input X [2, 4] along axis 1, reversed; body:
 * h' = Tanh(h * w + x_t), y_t = h' * x_t; scan output along axis 1,
 * reversed. y = Y * Unsqueeze(h_final, 1). */
static void scan_model(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "h", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_input(b, "xt", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_output(b, "h_out", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_output(b, "yt", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_add(b, "Mul", "h,w", "hw");
  mb_add(b, "Add", "hw,xt", "pre");
  mb_add(b, "Tanh", "pre", "h_out");
  mb_add(b, "Mul", "h_out,xt", "yt");
  mb_node *n = mb_add(g, "Scan", "h0,X", "hf,Y");
  mb_name(n, "scan");
  mb_attr_i(n, "num_scan_inputs", 1);
  mb_attr_ints(n, "scan_input_axes", 1, (int64_t[]){1});
  mb_attr_ints(n, "scan_input_directions", 1, (int64_t[]){1});
  mb_attr_ints(n, "scan_output_axes", 1, (int64_t[]){1});
  mb_attr_ints(n, "scan_output_directions", 1, (int64_t[]){1});
  mb_attr_g(n, "body", b);
  int64_t ax[1] = {1};
  mb_init(g, "ax1", KEEL_INT64, 1, (int64_t[]){1}, ax);
  mb_add(g, "Unsqueeze", "hf,ax1", "hcol");
  if (ctx) mb_add(g, "Mul", "hf,hf", "y"); /* no gradient reaches Y */
  else mb_add(g, "Mul", "Y,hcol", "y");
}

/* Scan whose body holds If(ReduceSum(x_t) > 0): then Tanh(h * w + x_t),
 * else h * x_t; the branch changes from one iteration to the next. */
static void if_in_scan(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_graph *b = mb_graph_new("body");
  mb_input(b, "h", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_input(b, "xt", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_output(b, "h_out", KEEL_DOUBLE, -1, NULL);
  mb_output(b, "yt", KEEL_DOUBLE, -1, NULL);
  double zero = 0;
  mb_init(b, "zero", KEEL_DOUBLE, 0, NULL, &zero);
  mb_attr_i(mb_add(b, "ReduceSum", "xt", "sx"), "keepdims", 0);
  mb_add(b, "Greater", "sx,zero", "pos");
  mb_graph *th = mb_graph_new("then");
  mb_output(th, "t_y", KEEL_DOUBLE, -1, NULL);
  mb_add(th, "Mul", "h,w", "t_hw");
  mb_add(th, "Add", "t_hw,xt", "t_pre");
  mb_add(th, "Tanh", "t_pre", "t_y");
  mb_graph *el = mb_graph_new("else");
  mb_output(el, "e_y", KEEL_DOUBLE, -1, NULL);
  mb_add(el, "Mul", "h,xt", "e_y");
  mb_node *f = mb_add(b, "If", "pos", "h_out");
  mb_name(f, "branch");
  mb_attr_g(f, "then_branch", th);
  mb_attr_g(f, "else_branch", el);
  mb_add(b, "Identity", "h_out", "yt");
  mb_node *n = mb_add(g, "Scan", "h0,X", "hf,Y");
  mb_name(n, "scan");
  mb_attr_i(n, "num_scan_inputs", 1);
  mb_attr_g(n, "body", b);
  mb_add(g, "Mul", "Y,hf", "y");
}

/* Loop(2) whose body scans X with state v: v' = Scan(v, X) s' = s * w + x_t. */
static void scan_in_loop(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t two = 2;
  uint8_t t = 1;
  mb_init(g, "M", KEEL_INT64, 0, NULL, &two);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *sb = mb_graph_new("scan_body");
  mb_input(sb, "s", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_input(sb, "xt", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_output(sb, "s_out", KEEL_DOUBLE, 1, (int64_t[]){2});
  mb_add(sb, "Mul", "s,w", "sw");
  mb_add(sb, "Add", "sw,xt", "sa");
  mb_add(sb, "Tanh", "sa", "s_out");
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_node *sc = mb_add(b, "Scan", "v,X", "v_out");
  mb_name(sc, "scan");
  mb_attr_i(sc, "num_scan_inputs", 1);
  mb_attr_g(sc, "body", sb);
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,h0", "y");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
}

static void scan_tests(void) {
  double h0[2] = {0.2, -0.5}, w[2] = {0.9, 0.7};
  double X[8] = {0.1, -0.3, 0.5, 0.7, -0.2, 0.4, 0.6, -0.8};
  gc_input in[3] = {{"h0", 1, {2}, h0, true}, {"X", 2, {2, 4}, X, true}, {"w", 1, {2}, w, true}};
  gc_check("Scan axes and directions", scan_model, NULL, in, 3, 13, 1e-6);
  gc_check("Scan, final state only", scan_model, "state", in, 3, 13, 1e-6);
  double X2[8] = {0.1, -0.3, -0.5, 0.2, 0.6, 0.4, -0.2, -0.7}; /* rows [4, 2] */
  gc_input si[3] = {{"h0", 1, {2}, h0, true}, {"X", 2, {4, 2}, X2, true}, {"w", 1, {2}, w, true}};
  gc_check("If inside Scan", if_in_scan, NULL, si, 3, 13, 1e-6);
  gc_check("Scan inside Loop", scan_in_loop, NULL, si, 3, 13, 1e-6);
}

/* ========================================================== nesting */

/* Loop(4) whose body holds If(i % 2 == 0): then v * w, else Tanh(v) + w. */
static void if_in_loop(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t four = 4, two = 2, zero = 0;
  uint8_t t = 1;
  mb_init(g, "M", KEEL_INT64, 0, NULL, &four);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_init(b, "two", KEEL_INT64, 0, NULL, &two);
  mb_init(b, "zero", KEEL_INT64, 0, NULL, &zero);
  mb_add(b, "Mod", "i,two", "r");
  mb_add(b, "Equal", "r,zero", "even");
  mb_graph *th = mb_graph_new("then");
  mb_output(th, "t_y", KEEL_DOUBLE, -1, NULL);
  mb_add(th, "Mul", "v,w", "t_y");
  mb_graph *el = mb_graph_new("else");
  mb_output(el, "e_y", KEEL_DOUBLE, -1, NULL);
  mb_add(el, "Tanh", "v", "e_t");
  mb_add(el, "Add", "e_t,w", "e_y");
  mb_node *f = mb_add(b, "If", "even", "v_out");
  mb_name(f, "branch");
  mb_attr_g(f, "then_branch", th);
  mb_attr_g(f, "else_branch", el);
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,x", "y");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
}

/* Loop(2) > Loop(3): inner u' = Tanh(u * w), scan u'; outer
 * v' = inner_final + v * x, scan of the inner stack. */
static void loop_in_loop(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t two = 2, three = 3;
  uint8_t t = 1;
  mb_init(g, "M2", KEEL_INT64, 0, NULL, &two);
  mb_init(g, "M3", KEEL_INT64, 0, NULL, &three);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *in = loop_body_begin("inner", "j", "c2", "u");
  mb_output(in, "c2_out", KEEL_BOOL, 0, NULL);
  mb_output(in, "u_out", KEEL_DOUBLE, -1, NULL);
  mb_output(in, "u_scan", KEEL_DOUBLE, -1, NULL);
  mb_add(in, "Mul", "u,w", "uw");
  mb_add(in, "Tanh", "uw", "u_out");
  mb_add(in, "Identity", "u_out", "u_scan");
  mb_add(in, "Identity", "c2", "c2_out");
  mb_graph *out = loop_body_begin("outer", "i", "c", "v");
  mb_output(out, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(out, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_output(out, "stack", KEEL_DOUBLE, -1, NULL);
  mb_node *il = mb_add(out, "Loop", "M3,true,v", "uf,stack");
  mb_name(il, "inner_loop");
  mb_attr_g(il, "body", in);
  mb_add(out, "Mul", "v,x", "vx");
  mb_add(out, "Add", "uf,vx", "v_out");
  mb_add(out, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M2,true,x", "vf,stacks");
  mb_name(n, "outer_loop");
  mb_attr_g(n, "body", out);
  mb_add(g, "Mul", "stacks,vf", "y");
}

/* If(c): then Loop(3) u' = u * w + x; else Exp(x * w). */
static void loop_in_if(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t three = 3;
  uint8_t t = 1;
  mb_init(g, "M3", KEEL_INT64, 0, NULL, &three);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "j", "c2", "u");
  mb_output(b, "c2_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "u_out", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "Mul", "u,w", "uw");
  mb_add(b, "Add", "uw,x", "u_out");
  mb_add(b, "Identity", "c2", "c2_out");
  mb_graph *th = mb_graph_new("then");
  mb_output(th, "t_y", KEEL_DOUBLE, -1, NULL);
  mb_node *l = mb_add(th, "Loop", "M3,true,x", "t_y");
  mb_name(l, "inner_loop");
  mb_attr_g(l, "body", b);
  mb_graph *el = mb_graph_new("else");
  mb_output(el, "e_y", KEEL_DOUBLE, -1, NULL);
  mb_add(el, "Mul", "x,w", "e_xw");
  mb_add(el, "Exp", "e_xw", "e_y");
  mb_node *n = mb_add(g, "If", "c", "y");
  mb_name(n, "branch");
  mb_attr_g(n, "then_branch", th);
  mb_attr_g(n, "else_branch", el);
}

/* An RNN cell in a Loop(4): h' = Tanh(MatMul(h, W) + x) with W [3, 3]
 * read from outside (its gradient sums over iterations), scan of h'. */
static void rnn_loop(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t four = 4;
  uint8_t t = 1;
  mb_init(g, "M", KEEL_INT64, 0, NULL, &four);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "i", "c", "h");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "h_out", KEEL_DOUBLE, -1, NULL);
  mb_output(b, "hs", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "MatMul", "h,W", "hW");
  mb_add(b, "Add", "hW,x", "pre");
  mb_add(b, "Tanh", "pre", "h_out");
  mb_add(b, "Identity", "h_out", "hs");
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,h0", "hf,hstack");
  mb_name(n, "rnn");
  mb_attr_g(n, "body", b);
  mb_add(g, "Mul", "hstack,hf", "y");
}

/* The carried value starts from a constant (no gradient there) and the
 * body makes it depend on w: v' = v * x + w (the fixed point finds it). */
static void carried_by_body(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t three = 3;
  uint8_t t = 1;
  double z[3] = {0.1, 0.2, 0.3};
  mb_init(g, "M", KEEL_INT64, 0, NULL, &three);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_init(g, "v0", KEEL_DOUBLE, 1, (int64_t[]){3}, z);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "Mul", "v,x", "vx");
  mb_add(b, "Add", "vx,w", "v_out");
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,v0", "vf");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
  mb_add(g, "Tanh", "vf", "y");
}

/* If(c) > If(d): then (then Exp(x * w) else x * w) else Tanh(x). */
static void if_in_if(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_graph *tt = mb_graph_new("tt");
  mb_output(tt, "tt_y", KEEL_DOUBLE, -1, NULL);
  mb_add(tt, "Mul", "x,w", "tt_xw");
  mb_add(tt, "Exp", "tt_xw", "tt_y");
  mb_graph *te = mb_graph_new("te");
  mb_output(te, "te_y", KEEL_DOUBLE, -1, NULL);
  mb_add(te, "Mul", "x,w", "te_y");
  mb_graph *th = mb_graph_new("then");
  mb_output(th, "t_y", KEEL_DOUBLE, -1, NULL);
  mb_node *in = mb_add(th, "If", "d", "t_y");
  mb_name(in, "inner");
  mb_attr_g(in, "then_branch", tt);
  mb_attr_g(in, "else_branch", te);
  mb_graph *el = mb_graph_new("else");
  mb_output(el, "e_y", KEEL_DOUBLE, -1, NULL);
  mb_add(el, "Tanh", "x", "e_y");
  mb_node *n = mb_add(g, "If", "c", "y");
  mb_name(n, "outer");
  mb_attr_g(n, "then_branch", th);
  mb_attr_g(n, "else_branch", el);
}

/* Four levels: Loop(2) > If(i even) > Loop(2) > If(j even), innermost
 * branches Tanh(u * w) and u * x, the others pass values through. */
static void four_levels(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t two = 2, zero = 0;
  uint8_t t = 1;
  mb_init(g, "M2", KEEL_INT64, 0, NULL, &two);
  mb_init(g, "two", KEEL_INT64, 0, NULL, &two);
  mb_init(g, "zero", KEEL_INT64, 0, NULL, &zero);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *it = mb_graph_new("it");
  mb_output(it, "it_y", KEEL_DOUBLE, -1, NULL);
  mb_add(it, "Mul", "u,w", "it_uw");
  mb_add(it, "Tanh", "it_uw", "it_y");
  mb_graph *ie = mb_graph_new("ie");
  mb_output(ie, "ie_y", KEEL_DOUBLE, -1, NULL);
  mb_add(ie, "Mul", "u,x", "ie_y");
  mb_graph *ib = loop_body_begin("inner_body", "j", "c2", "u");
  mb_output(ib, "c2_out", KEEL_BOOL, 0, NULL);
  mb_output(ib, "u_out", KEEL_DOUBLE, -1, NULL);
  mb_add(ib, "Mod", "j,two", "jr");
  mb_add(ib, "Equal", "jr,zero", "j_even");
  mb_node *f2 = mb_add(ib, "If", "j_even", "u_out");
  mb_name(f2, "inner_if");
  mb_attr_g(f2, "then_branch", it);
  mb_attr_g(f2, "else_branch", ie);
  mb_add(ib, "Identity", "c2", "c2_out");
  mb_graph *ot = mb_graph_new("ot");
  mb_output(ot, "ot_y", KEEL_DOUBLE, -1, NULL);
  mb_node *l2 = mb_add(ot, "Loop", "M2,true,v", "ot_y");
  mb_name(l2, "inner_loop");
  mb_attr_g(l2, "body", ib);
  mb_graph *oe = mb_graph_new("oe");
  mb_output(oe, "oe_y", KEEL_DOUBLE, -1, NULL);
  mb_add(oe, "Sigmoid", "v", "oe_y");
  mb_graph *ob = loop_body_begin("outer_body", "i", "c", "v");
  mb_output(ob, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(ob, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_add(ob, "Mod", "i,two", "ir");
  mb_add(ob, "Equal", "ir,zero", "i_even");
  mb_node *f1 = mb_add(ob, "If", "i_even", "v_out");
  mb_name(f1, "outer_if");
  mb_attr_g(f1, "then_branch", ot);
  mb_attr_g(f1, "else_branch", oe);
  mb_add(ob, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M2,true,x", "y");
  mb_name(n, "outer_loop");
  mb_attr_g(n, "body", ob);
}

static void nesting_tests(void) {
  gc_input in[2] = {{"x", 1, {3}, X3, true}, {"w", 1, {3}, W3, true}};
  gc_check("If inside Loop", if_in_loop, NULL, in, 2, 13, 1e-6);
  gc_check("Loop inside Loop", loop_in_loop, NULL, in, 2, 13, 1e-6);
  gc_check("carried made active by the body", carried_by_body, NULL, in, 2, 13, 1e-6);
  gc_check("Loop > If > Loop > If", four_levels, NULL, in, 2, 13, 1e-6);
  double h0[3] = {0.1, -0.2, 0.3}, Wm[9] = {0.5, -0.3, 0.2, 0.1, 0.4, -0.6, 0.3, 0.2, 0.1};
  gc_input rn[3] = {{"h0", 2, {1, 3}, h0, true}, {"W", 2, {3, 3}, Wm, true}, {"x", 1, {3}, X3, true}};
  gc_check("RNN cell in a Loop (MatMul)", rnn_loop, NULL, rn, 3, 13, 1e-6);
  for (int k = 0; k < 4; k++) {
    uint8_t c = (uint8_t)(k & 1), d = (uint8_t)(k >> 1);
    gc_input ii[4] = {{"x", 1, {3}, X3, true},
                      {"w", 1, {3}, W3, true},
                      {"c", 0, {0}, NULL, false, KEEL_BOOL, &c},
                      {"d", 0, {0}, NULL, false, KEEL_BOOL, &d}};
    gc_check("If inside If", if_in_if, NULL, ii, 4, 13, 1e-6);
  }
  for (int way = 0; way < 2; way++) {
    uint8_t c = (uint8_t)!way;
    gc_input ci[3] = {{"x", 1, {3}, X3, true},
                      {"w", 1, {3}, W3, true},
                      {"c", 0, {0}, NULL, false, KEEL_BOOL, &c}};
    gc_check(way ? "Loop inside If, else" : "Loop inside If, then", loop_in_if, NULL, ci, 3, 13,
             1e-6);
  }
}

/* ================================================== memory, errors */

/* One run of a derivative model: allocated bytes at the end of the run
 * (outputs released) and the run's peak. */
static bool measure(keel_session_t *s, const gc_input *in, int n_in, double *const *vals,
                    uint64_t *after, uint64_t *peak) {
  keel_value_t *out[8] = {0};
  keel_stats_reset_peaks(s);
  bool ok = run(s, in, n_in, vals, out);
  for (int i = 0; i < 8; i++) keel_value_release(out[i]);
  keel_stats st = {.size = sizeof st};
  keel_stats_get(s, &st);
  *after = st.allocated;
  *peak = st.allocated_peak;
  return ok;
}

/* Repeated runs allocate the same bytes and hold none after; with the
 * test-only leak switch on (branch results kept alive) the check fails. */
static void steady(const char *label, gc_body_fn body, const gc_input *in, int n_in) {
  int rank = 0;
  int64_t dims[GC_MAX_RANK * 2];
  double **vals = copy_inputs(in, n_in);
  double *R = make_R(body, NULL, in, n_in, 13, vals, &rank, dims);
  keel_session_t *s = R ? build(body, NULL, in, n_in, 13, rank, dims, R, true) : NULL;
  CHECK(s != NULL);
  uint64_t after[4] = {0}, peak[4] = {0};
  for (int r = 0; s && r < 4; r++) CHECK(measure(s, in, n_in, vals, &after[r], &peak[r]));
  for (int r = 1; s && r < 4; r++) {
    CHECK(after[r] == 0);
    CHECK(peak[r] == peak[1]);
  }
  if (s && (after[3] || peak[3] != peak[1]))
    fprintf(stderr, "%s: allocated %llu after, peaks %llu %llu\n", label,
            (unsigned long long)after[3], (unsigned long long)peak[1], (unsigned long long)peak[3]);
  if (s) {
    keel_debug_leak_subgraph_results(s, 1);
    uint64_t a = 0, p = 0;
    CHECK(measure(s, in, n_in, vals, &a, &p));
    CHECK(a > 0); /* the check above would see the leak */
    keel_debug_leak_subgraph_results(s, 0);
  }
  keel_session_destroy(s);
  free(R);
  free_inputs(vals, n_in);
}

static void memory_tests(void) {
  gc_input in[2] = {{"x", 1, {3}, X3, true}, {"w", 1, {3}, W3, true}};
  steady("If inside Loop", if_in_loop, in, 2);
  steady("Loop inside Loop", loop_in_loop, in, 2);
  uint8_t c = 1;
  gc_input ci[3] = {{"x", 1, {3}, X3, true},
                    {"w", 1, {3}, W3, true},
                    {"c", 0, {0}, NULL, false, KEEL_BOOL, &c}};
  steady("If outer reads", if_outer, ci, 3);
}

/* The backward Loop releases each iteration's saved values as it goes:
 * allocated bytes seen by the iteration hook fall from one backward
 * iteration to the next (Loop(10) over 1000 doubles). */
typedef struct bw_log {
  int n;
  uint64_t bytes[64];
} bw_log;

static void on_iter(void *ud, const char *loop, int64_t it, size_t bytes) {
  bw_log *l = ud;
  (void)it;
  if (strcmp(loop, "loop") && l->n < 64) l->bytes[l->n++] = bytes;
}

/* Loop(10): v' = Tanh(v * w) over `len` doubles; Gradient dx of vf. */
static uint8_t *popped_model(int64_t len, size_t *size) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_DOUBLE, 1, (int64_t[]){len});
  mb_output(g, "dx", KEEL_DOUBLE, -1, NULL);
  double *w = malloc(sizeof(double) * (size_t)len);
  for (int64_t i = 0; i < len; i++) w[i] = 0.5 + 0.001 * (double)(i % 1000);
  int64_t ten = 10;
  uint8_t t = 1;
  mb_init(g, "w", KEEL_DOUBLE, 1, (int64_t[]){len}, w);
  free(w);
  mb_init(g, "M", KEEL_INT64, 0, NULL, &ten);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "Mul", "v,w", "vw");
  mb_add(b, "Tanh", "vw", "v_out");
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,x", "vf");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
  mb_node *gr = mb_add(g, "Gradient", "x", "dx");
  mb_domain(gr, TRAIN);
  mb_attr_s(gr, "y", "vf");
  mb_attr_strs(gr, "xs", 1, (const char *[]){"x"});
  return mb_model_domains(g, 13, TRAIN, 1, size);
}

/* One run of the popped model on x = 0.3; its status. */
static keel_status popped_run(keel_session_t *s, int64_t len) {
  double *x = malloc(sizeof(double) * (size_t)len);
  for (int64_t i = 0; i < len; i++) x[i] = 0.3;
  keel_value_t *in = mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){len}, x), *out = NULL;
  free(x);
  keel_status st = in ? keel_run(s, (const char *[]){"x"}, &in, 1, &out) : KEEL_ERR_OUT_OF_MEMORY;
  keel_value_release(in);
  keel_value_release(out);
  return st;
}

static void released_as_popped(void) {
  enum { L = 1000 };
  size_t len;
  uint8_t *bytes = popped_model(L, &len);
  bw_log log = {0};
  keel_options o = {.size = sizeof o, .on_iteration = on_iter, .iteration_ud = &log};
  keel_session_t *s = NULL;
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, &o, &s));
  free(bytes);
  if (!s) return;
  CHECK_OK(popped_run(s, L));
  CHECK(log.n == 10);
  for (int i = 1; i < log.n; i++) CHECK(log.bytes[i] < log.bytes[i - 1]);
  if (log.n == 10) /* at least one saved vector (8000 bytes) less each time */
    CHECK(log.bytes[0] - log.bytes[9] >= 9 * 8000);
  keel_session_destroy(s);
}

/* Under a memory cap the derivative run stops with KEEL_ERR_OUT_OF_MEMORY
 * wherever the cap is met (the forward pushing, the backward popping) and
 * holds nothing afterwards; with room enough it runs. */
static void capped_runs(void) {
  enum { L = 200000 }; /* 1.6 MB a vector, ten saved */
  size_t len;
  uint8_t *bytes = popped_model(L, &len);
  int ok = 0, oom = 0;
  for (size_t mb = 4; mb <= 48; mb += 4) {
    keel_options o = {.size = sizeof o, .mem_limit = mb << 20};
    keel_session_t *s = NULL;
    if (keel_session_create_from_memory(bytes, len, NULL, &o, &s)) continue;
    keel_status st = popped_run(s, L);
    ok += st == KEEL_OK;
    oom += st == KEEL_ERR_OUT_OF_MEMORY;
    if (st && st != KEEL_ERR_OUT_OF_MEMORY) CHECK_OK(st);
    keel_stats k = {.size = sizeof k};
    keel_stats_get(s, &k);
    CHECK(k.allocated == 0);
    keel_session_destroy(s);
  }
  CHECK(ok > 0 && oom > 0);
  if (getenv("KEEL_TEST_VERBOSE")) fprintf(stderr, "capped runs: %d ran, %d out of memory\n", ok, oom);
  free(bytes);
}

/* A Gradient node inside a Loop body, its region holding an If:
 * g = d(sum q)/dw with q = If(flag) then v * w else Tanh(v * w), w read
 * from outside; v carried unchanged, so each iteration gives the same g. */
static void gradient_in_body(void) {
  for (int way = 0; way < 2; way++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_DOUBLE, 1, (int64_t[]){3});
    mb_output(g, "gs", KEEL_DOUBLE, -1, NULL);
    int64_t two = 2;
    uint8_t t = 1, flag = (uint8_t)!way;
    mb_init(g, "w", KEEL_DOUBLE, 1, (int64_t[]){3}, W3);
    mb_init(g, "M", KEEL_INT64, 0, NULL, &two);
    mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
    mb_init(g, "flag", KEEL_BOOL, 0, NULL, &flag);
    mb_graph *b = loop_body_begin("body", "i", "c", "v");
    mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
    mb_output(b, "v", KEEL_DOUBLE, -1, NULL);
    mb_output(b, "gw", KEEL_DOUBLE, -1, NULL);
    mb_graph *th = mb_graph_new("then");
    mb_output(th, "t_y", KEEL_DOUBLE, -1, NULL);
    mb_add(th, "Mul", "v,w", "t_y");
    mb_graph *el = mb_graph_new("else");
    mb_output(el, "e_y", KEEL_DOUBLE, -1, NULL);
    mb_add(el, "Mul", "v,w", "e_vw");
    mb_add(el, "Tanh", "e_vw", "e_y");
    mb_node *f = mb_add(b, "If", "flag", "q");
    mb_name(f, "branch");
    mb_attr_g(f, "then_branch", th);
    mb_attr_g(f, "else_branch", el);
    mb_node *gr = mb_add(b, "Gradient", "w", "gw");
    mb_domain(gr, TRAIN);
    mb_attr_s(gr, "y", "q");
    mb_attr_strs(gr, "xs", 1, (const char *[]){"w"});
    mb_add(b, "Identity", "c", "c_out");
    mb_node *n = mb_add(g, "Loop", "M,true,x", "vf,gs");
    mb_name(n, "loop");
    mb_attr_g(n, "body", b);
    size_t len;
    uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
    keel_session_t *s = NULL;
    CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, NULL, &s));
    free(bytes);
    if (!s) continue;
    keel_value_t *in = mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){3}, X3), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"x"}, &in, 1, &out));
    CHECK(out && keel_value_numel(out) == 6);
    for (int it = 0; out && it < 2; it++)
      for (int k = 0; k < 3; k++) {
        double th2 = tanh(X3[k] * W3[k]), want = way ? X3[k] * (1 - th2 * th2) : X3[k];
        CHECK(fabs(keel_value_at(out, it * 3 + k) - want) < 1e-12);
      }
    keel_value_release(in);
    keel_value_release(out);
    keel_session_destroy(s);
  }
}

/* Two Gradient nodes over the same Loop (the second sees the Loop, and the
 * If in it, as the first rewrote them) agree with one Gradient taking both. */
static void two_gradients(gc_body_fn body) {
  double got[2][6];
  for (int twice = 0; twice < 2; twice++) {
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "x", KEEL_DOUBLE, 1, (int64_t[]){3});
    mb_input(g, "w", KEEL_DOUBLE, 1, (int64_t[]){3});
    mb_output(g, "dx", KEEL_DOUBLE, -1, NULL);
    mb_output(g, "dw", KEEL_DOUBLE, -1, NULL);
    body(g, NULL);
    const char *xs[2] = {"x", "w"};
    for (int k = 0; k < (twice ? 2 : 1); k++) {
      mb_node *gr = mb_add(g, "Gradient", twice ? xs[k] : "x,w", twice ? (k ? "dw" : "dx") : "dx,dw");
      mb_domain(gr, TRAIN);
      mb_attr_s(gr, "y", "y");
      mb_attr_strs(gr, "xs", twice ? 1 : 2, twice ? &xs[k] : xs);
    }
    size_t len;
    uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
    keel_session_t *s = NULL;
    CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, NULL, &s));
    free(bytes);
    if (!s) return;
    keel_value_t *in[2] = {mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){3}, X3),
                           mb_tensor(s, KEEL_DOUBLE, 1, (int64_t[]){3}, W3)};
    keel_value_t *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"x", "w"}, in, 2, out));
    for (int k = 0; k < 6; k++) got[twice][k] = out[0] && out[1] ? keel_value_at(out[k / 3], k % 3) : NAN;
    for (int k = 0; k < 2; k++) keel_value_release(in[k]), keel_value_release(out[k]);
    keel_session_destroy(s);
  }
  for (int k = 0; k < 6; k++) CHECK(fabs(got[0][k] - got[1][k]) < 1e-12);
}

/* TfIdfVectorizer on the path inside a Loop body: no rule, refused at load
 * with the op, the graph path and the node named. */
static void no_rule_in_body(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t three = 3;
  uint8_t t = 1;
  mb_init(g, "M", KEEL_INT64, 0, NULL, &three);
  mb_init(g, "true", KEEL_BOOL, 0, NULL, &t);
  mb_graph *b = loop_body_begin("body", "i", "c", "v");
  mb_output(b, "c_out", KEEL_BOOL, 0, NULL);
  mb_output(b, "v_out", KEEL_DOUBLE, -1, NULL);
  mb_add(b, "Mul", "v,w", "vw");
  mb_name(mb_add(b, "TfIdfVectorizer", "vw", "v_out"), "odd_one");
  mb_add(b, "Identity", "c", "c_out");
  mb_node *n = mb_add(g, "Loop", "M,true,x", "y");
  mb_name(n, "loop");
  mb_attr_g(n, "body", b);
}

static void error_tests(void) {
  gc_input in[2] = {{"x", 1, {3}, X3, true}, {"w", 1, {3}, W3, true}};
  int64_t d[1] = {3};
  double R[3] = {1, 1, 1};
  keel_session_t *s = build(no_rule_in_body, NULL, in, 2, 13, 1, d, R, true);
  CHECK(s == NULL);
  const char *e = keel_last_error();
  CHECK(strstr(e, "TfIdfVectorizer") != NULL);
  CHECK(strstr(e, "'main/loop/body'") != NULL);
  CHECK(strstr(e, "'odd_one'") != NULL);
  keel_session_destroy(s);
  /* a Scan of opset 8 (batch axis, sequence_lens) is refused by name */
  double h0[2] = {0.2, -0.5}, w[2] = {0.9, 0.7}, X[8] = {0};
  gc_input si[3] = {{"h0", 1, {2}, h0, true}, {"X", 2, {2, 4}, X, true}, {"w", 1, {2}, w, true}};
  s = build(scan_model, NULL, si, 3, 8, 2, (int64_t[]){2, 4}, X, true);
  CHECK(s == NULL);
  CHECK(strstr(keel_last_error(), "'scan' (Scan)") && strstr(keel_last_error(), "opset 9+"));
  keel_session_destroy(s);
}

/* A Gradient fed other tensors than the ones xs names would evaluate the
 * region again on those; through control flow it is refused, by name. */
static void clone_refused(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_DOUBLE, 1, (int64_t[]){3});
  mb_input(g, "x2", KEEL_DOUBLE, 1, (int64_t[]){3});
  mb_input(g, "w", KEEL_DOUBLE, 1, (int64_t[]){3});
  mb_output(g, "dx", KEEL_DOUBLE, -1, NULL);
  loop_count(g, &(int64_t){2});
  mb_node *gr = mb_add(g, "Gradient", "x2", "dx");
  mb_domain(gr, TRAIN);
  mb_attr_s(gr, "y", "y");
  mb_attr_strs(gr, "xs", 1, (const char *[]){"x"});
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  CHECK_STATUS(keel_session_create_from_memory(bytes, len, NULL, NULL, &s), KEEL_ERR_UNSUPPORTED);
  CHECK(strstr(keel_last_error(), "'loop' (Loop)") != NULL);
  free(bytes);
  keel_session_destroy(s);
}

static void plain(mb_graph *g, void *ctx) {
  (void)ctx;
  mb_add(g, "Mul", "x,w", "y");
}

/* The model gradcheck's build() makes (y * R differentiated), as bytes. */
static uint8_t *grad_model(gc_body_fn body, const gc_input *in, int n_in, size_t *len) {
  mb_graph *g = mb_graph_new("main");
  const char *xs[8];
  char outs[256] = "", ins[256] = "";
  int nx = 0;
  for (int i = 0; i < n_in; i++) mb_input(g, in[i].name, KEEL_DOUBLE, in[i].rank, in[i].dims);
  body(g, NULL);
  double R[3] = {0.5, 1, 1.5};
  mb_init(g, "gc_R", KEEL_DOUBLE, 1, (int64_t[]){3}, R);
  mb_add(g, "Mul", "y,gc_R", "gc_L");
  for (int i = 0; i < n_in; i++) {
    char o[64];
    snprintf(o, sizeof o, "d_%s", in[i].name);
    mb_output(g, o, KEEL_DOUBLE, -1, NULL);
    snprintf(outs + strlen(outs), sizeof outs - strlen(outs), "%s%s", nx ? "," : "", o);
    snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%s", nx ? "," : "", in[i].name);
    xs[nx++] = in[i].name;
  }
  mb_node *n = mb_add(g, "Gradient", ins, outs);
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "gc_L");
  mb_attr_strs(n, "xs", nx, xs);
  return mb_model_domains(g, 13, TRAIN, 1, len);
}

/* Fault injection: each of the requests a load of a derivative model with
 * nested control flow makes to the system hook fails in turn; each time
 * the load gives KEEL_ERR_OUT_OF_MEMORY and leaks nothing. */
static void load_out_of_memory(const char *label, gc_body_fn body, const gc_input *in, int n_in) {
  size_t len;
  uint8_t *bytes = grad_model(body, in, n_in, &len);
  keel_session_t *s = NULL;
  keel_sys_fail_after(0);
  CHECK_OK(keel_session_create_from_memory(bytes, len, NULL, NULL, &s));
  int64_t total = keel_sys_fail_after(0), refused = 0, other = 0;
  keel_session_destroy(s);
  uint64_t base = keel_process_bytes();
  for (int64_t n = 1; n <= total; n++) {
    s = NULL;
    keel_sys_fail_after(n);
    keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
    keel_sys_fail_after(0);
    keel_session_destroy(s);
    refused += st == KEEL_ERR_OUT_OF_MEMORY;
    if (st && st != KEEL_ERR_OUT_OF_MEMORY && other++ < 3)
      fprintf(stderr, "%s: request %lld: %s: %s\n", label, (long long)n, keel_status_str(st),
              keel_last_error());
    if (keel_process_bytes() != base) {
      fprintf(stderr, "%s: leak after failing request %lld\n", label, (long long)n);
      break;
    }
  }
  CHECK(refused == total);
  CHECK(other == 0);
  CHECK(keel_process_bytes() == base);
  if (getenv("KEEL_TEST_VERBOSE"))
    fprintf(stderr, "%s: %lld of %lld failing requests refused the load\n", label,
            (long long)refused, (long long)total);
  free(bytes);
}

int main(void) {
  if_tests();
  loop_tests();
  scan_tests();
  nesting_tests();
  memory_tests();
  released_as_popped();
  capped_runs();
  gradient_in_body();
  two_gradients(loop_fixed);
  two_gradients(if_in_loop);
  error_tests();
  clone_refused();
  {
    gc_input in[2] = {{"x", 1, {3}, X3, true}, {"w", 1, {3}, W3, true}};
    load_out_of_memory("no control flow", plain, in, 2);
    load_out_of_memory("If inside Loop", if_in_loop, in, 2);
    load_out_of_memory("Loop inside Loop", loop_in_loop, in, 2);
    double h0[2] = {0.2, -0.5}, w[2] = {0.9, 0.7}, X[8] = {0};
    gc_input si[3] = {{"h0", 1, {2}, h0, true}, {"X", 2, {2, 4}, X, true}, {"w", 1, {2}, w, true}};
    load_out_of_memory("Scan", scan_model, si, 3);
  }
  return check_report();
}
