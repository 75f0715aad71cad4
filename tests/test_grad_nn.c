/* test_grad_nn.c: the rules of autodiff/grad_nn.c (and the kernels of
 * ops/nn/conv/conv_backward.c, ops/nn/pool/pool_backward.c,
 * ops/nn/norm/norm_backward.c, ops/image/resize_backward.c and DropoutGrad's
 * in ops/math/math_backward.c) against finite differences in float64
 * (tests/gradcheck.h):
 * Conv and ConvTranspose with their attributes, the pools, BatchNorm
 * (inference and training, opsets 9/14/15), LayerNorm, InstanceNorm,
 * GroupNorm, Dropout, Resize.
 * The float32 conv kernels are checked against the float64 result, and
 * cases a rule refuses against their load-time error. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "gradcheck.h"

/* ------------------------------------------------------------ a case */

typedef struct nn_attr {
  const char *name;
  int n;                       /* ints: count; 0 with s: a string; -1: int */
  int64_t v[8];
  const char *s;
  float f;                     /* kind 'f' when name starts with '%'      */
} nn_attr;

typedef struct nn_case {
  const char *op, *ins, *outs; /* outs: NULL = "y"                         */
  nn_attr a[6];
  const char *post;            /* a second node: "Op:ins:outs"              */
} nn_case;

static void nn_body(mb_graph *g, void *ctx) {
  const nn_case *c = ctx;
  mb_node *n = mb_add(g, c->op, c->ins, c->outs ? c->outs : "y");
  for (int i = 0; i < 6 && c->a[i].name; i++) {
    const nn_attr *a = &c->a[i];
    if (a->name[0] == '%') mb_attr_f(n, a->name + 1, a->f);
    else if (a->s) mb_attr_s(n, a->name, a->s);
    else if (a->n < 0) mb_attr_i(n, a->name, a->v[0]);
    else mb_attr_ints(n, a->name, a->n, a->v);
  }
  if (c->post) {
    char buf[256], *op = buf, *ins, *outs;
    snprintf(buf, sizeof buf, "%s", c->post);
    ins = strchr(op, ':'), *ins++ = 0;
    outs = strchr(ins, ':'), *outs++ = 0;
    mb_add(g, op, ins, outs);
  }
}

#define I1(nm, x) {nm, -1, {x}, NULL, 0}
#define IS(nm, k, ...) {nm, k, {__VA_ARGS__}, NULL, 0}
#define S(nm, str) {nm, 0, {0}, str, 0}
#define F(nm, x) {"%" nm, 0, {0}, NULL, x}

/* Smooth, distinct values (no ties: max pooling stays away from kinks). */
static double *vals(int64_t n, int seed) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    v[i] = 0.9 * sin(0.7 * (double)i + 1.3 * seed) + 0.01 * (double)((i * 37 + seed) % 101) / 101.0;
  return v;
}

static int64_t prod(int r, const int64_t *d) {
  int64_t p = 1;
  for (int i = 0; i < r; i++) p *= d[i];
  return p;
}

/* x, w and (when b_len > 0) b, all differentiated. */
static void check3(const char *label, const nn_case *c, int xr, const int64_t *xd, int wr,
                   const int64_t *wd, int64_t b_len, int opset) {
  double *x = vals(prod(xr, xd), 1), *w = vals(prod(wr, wd), 2), *b = vals(b_len ? b_len : 1, 3);
  gc_input in[3] = {{"x", xr, {0}, x, true}, {"w", wr, {0}, w, true}, {"b", 1, {b_len}, b, true}};
  memcpy(in[0].dims, xd, sizeof(int64_t) * (size_t)xr);
  memcpy(in[1].dims, wd, sizeof(int64_t) * (size_t)wr);
  gc_check(label, nn_body, (void *)c, in, b_len ? 3 : 2, opset, 1e-6);
  free(x), free(w), free(b);
}

/* ------------------------------------------------------------- conv */

static void conv_cases(void) {
  nn_case basic = {"Conv", "x,w,b", NULL, {IS("pads", 4, 1, 1, 1, 1)}};
  check3("conv 2-D pads 1", &basic, 4, (int64_t[]){2, 3, 5, 5}, 4, (int64_t[]){4, 3, 3, 3}, 4, 13);
  nn_case strided = {"Conv", "x,w,b", NULL,
                     {IS("strides", 2, 2, 2), IS("pads", 4, 0, 1, 1, 0), IS("dilations", 2, 2, 1)}};
  check3("conv strides, odd pads, dilations", &strided, 4, (int64_t[]){1, 2, 7, 6}, 4,
         (int64_t[]){3, 2, 2, 3}, 3, 13);
  nn_case grouped = {"Conv", "x,w,b", NULL, {I1("group", 2), IS("pads", 4, 1, 0, 1, 0)}};
  check3("conv group 2", &grouped, 4, (int64_t[]){1, 4, 5, 5}, 4, (int64_t[]){6, 2, 3, 3}, 6, 13);
  nn_case depth = {"Conv", "x,w,b", NULL, {I1("group", 4), IS("strides", 2, 2, 2), S("auto_pad", "SAME_UPPER")}};
  check3("conv depthwise SAME_UPPER stride 2", &depth, 4, (int64_t[]){2, 4, 6, 5}, 4,
         (int64_t[]){4, 1, 3, 3}, 4, 13);
  nn_case lower = {"Conv", "x,w", NULL, {S("auto_pad", "SAME_LOWER"), IS("kernel_shape", 2, 2, 2)}};
  check3("conv SAME_LOWER, no bias", &lower, 4, (int64_t[]){1, 2, 4, 5}, 4, (int64_t[]){3, 2, 2, 2}, 0, 13);
  nn_case valid = {"Conv", "x,w,b", NULL, {S("auto_pad", "VALID"), IS("strides", 2, 2, 1)}};
  check3("conv VALID", &valid, 4, (int64_t[]){2, 2, 6, 5}, 4, (int64_t[]){2, 2, 3, 2}, 2, 11);
  nn_case one = {"Conv", "x,w,b", NULL, {IS("strides", 1, 2), IS("pads", 2, 1, 2)}};
  check3("conv 1-D", &one, 3, (int64_t[]){2, 3, 8}, 3, (int64_t[]){2, 3, 3}, 2, 13);
  nn_case three = {"Conv", "x,w,b", NULL, {IS("pads", 6, 1, 0, 0, 0, 1, 0)}};
  check3("conv 3-D", &three, 5, (int64_t[]){1, 2, 3, 4, 3}, 5, (int64_t[]){2, 2, 2, 2, 2}, 2, 13);
  nn_case point = {"Conv", "x,w,b", NULL, {{0}}};
  check3("conv 1x1", &point, 4, (int64_t[]){2, 3, 3, 4}, 4, (int64_t[]){5, 3, 1, 1}, 5, 13);
}

static void convtr_cases(void) {
  nn_case basic = {"ConvTranspose", "x,w,b", NULL,
                   {IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 1, 1), IS("output_padding", 2, 1, 0)}};
  check3("convT stride 2, pads, output_padding", &basic, 4, (int64_t[]){2, 2, 3, 3}, 4,
         (int64_t[]){2, 3, 3, 3}, 3, 13);
  nn_case grouped = {"ConvTranspose", "x,w,b", NULL, {I1("group", 2), IS("dilations", 2, 2, 1)}};
  check3("convT group 2, dilations", &grouped, 4, (int64_t[]){1, 4, 3, 4}, 4,
         (int64_t[]){4, 2, 2, 3}, 4, 13);
  nn_case shape = {"ConvTranspose", "x,w", NULL, {IS("strides", 2, 3, 2), IS("output_shape", 2, 9, 8)}};
  check3("convT output_shape", &shape, 4, (int64_t[]){1, 2, 3, 3}, 4, (int64_t[]){2, 2, 3, 3}, 0, 13);
  nn_case same = {"ConvTranspose", "x,w,b", NULL, {IS("strides", 2, 2, 2), S("auto_pad", "SAME_UPPER")}};
  check3("convT SAME_UPPER", &same, 4, (int64_t[]){1, 2, 3, 3}, 4, (int64_t[]){2, 1, 3, 3}, 1, 13);
  nn_case lower = {"ConvTranspose", "x,w", NULL, {IS("strides", 2, 2, 2), S("auto_pad", "SAME_LOWER")}};
  check3("convT SAME_LOWER", &lower, 4, (int64_t[]){1, 2, 3, 2}, 4, (int64_t[]){2, 2, 2, 3}, 0, 13);
  nn_case one = {"ConvTranspose", "x,w,b", NULL, {IS("strides", 1, 3), IS("pads", 2, 0, 1)}};
  check3("convT 1-D", &one, 3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){3, 2, 4}, 2, 13);
  nn_case point = {"ConvTranspose", "x,w,b", NULL, {{0}}};
  check3("convT 1x1", &point, 4, (int64_t[]){2, 3, 3, 2}, 4, (int64_t[]){3, 4, 1, 1}, 4, 13);
  nn_case three = {"ConvTranspose", "x,w", NULL, {IS("strides", 3, 2, 1, 1)}};
  check3("convT 3-D", &three, 5, (int64_t[]){1, 2, 2, 3, 2}, 5, (int64_t[]){2, 1, 2, 2, 2}, 0, 13);
}

/* ------------------------------------------------------------ pools */

static void check1(const char *label, const nn_case *c, int xr, const int64_t *xd, int opset) {
  double *x = vals(prod(xr, xd), 4);
  gc_input in[1] = {{"x", xr, {0}, x, true}};
  memcpy(in[0].dims, xd, sizeof(int64_t) * (size_t)xr);
  gc_check(label, nn_body, (void *)c, in, 1, opset, 1e-6);
  free(x);
}

static void pool_cases(void) {
  nn_case mp = {"MaxPool", "x", NULL, {IS("kernel_shape", 2, 3, 3), IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 1, 1)}};
  check1("maxpool 3x3 s2 p1", &mp, 4, (int64_t[]){2, 2, 6, 7}, 13);
  nn_case mpc = {"MaxPool", "x", "y,idx",
                 {IS("kernel_shape", 2, 2, 2), IS("strides", 2, 2, 2), I1("ceil_mode", 1),
                  IS("dilations", 2, 1, 2), I1("storage_order", 1)}};
  check1("maxpool ceil_mode, dilations, Indices", &mpc, 4, (int64_t[]){1, 2, 5, 7}, 12);
  nn_case mp1 = {"MaxPool", "x", NULL, {IS("kernel_shape", 1, 3), S("auto_pad", "SAME_UPPER"), IS("strides", 1, 2)}};
  check1("maxpool 1-D SAME_UPPER", &mp1, 3, (int64_t[]){2, 3, 7}, 11);
  nn_case gmp = {"GlobalMaxPool", "x", NULL, {{0}}};
  check1("globalmaxpool", &gmp, 4, (int64_t[]){2, 3, 3, 4}, 13);
  nn_case ap = {"AveragePool", "x", NULL, {IS("kernel_shape", 2, 3, 2), IS("pads", 4, 1, 0, 1, 1)}};
  check1("averagepool pads", &ap, 4, (int64_t[]){2, 2, 5, 4}, 13);
  nn_case api = {"AveragePool", "x", NULL,
                 {IS("kernel_shape", 2, 3, 3), IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 1, 1),
                  I1("count_include_pad", 1), I1("ceil_mode", 1)}};
  check1("averagepool count_include_pad, ceil_mode", &api, 4, (int64_t[]){1, 2, 6, 5}, 13);
  nn_case ap3 = {"AveragePool", "x", NULL, {IS("kernel_shape", 3, 2, 2, 2), S("auto_pad", "SAME_LOWER")}};
  check1("averagepool 3-D SAME_LOWER", &ap3, 5, (int64_t[]){1, 2, 3, 3, 2}, 13);
  nn_case gap = {"GlobalAveragePool", "x", NULL, {{0}}};
  check1("globalaveragepool", &gap, 4, (int64_t[]){2, 3, 3, 4}, 13);
  nn_case gap1 = {"GlobalAveragePool", "x", NULL, {{0}}};
  check1("globalaveragepool 1-D", &gap1, 3, (int64_t[]){2, 3, 5}, 13);

  /* ties: the whole gradient goes to the first maximal element */
  double flat[8] = {1, 1, 1, 1, 2, 2, 0, 2};
  gc_input in[1] = {{"x", 4, {1, 1, 2, 4}, flat, true}};
  nn_case tie = {"MaxPool", "x", NULL, {IS("kernel_shape", 2, 2, 2), IS("strides", 2, 2, 2)}};
  double *gr[1] = {0};
  if (gc_gradients(nn_body, &tie, in, 1, 13, gr)) {
    /* windows {0,1,4,5} and {2,3,6,7}: maxima first at 4 and 7 */
    double R0 = 0.5 + 0.37 * sin(0.2), R1 = 0.5 + 0.37 * sin(1.5);
    for (int i = 0; i < 8; i++) CHECK(fabs(gr[0][i] - (i == 4 ? R0 : i == 7 ? R1 : 0)) < 1e-12);
  }
  free(gr[0]);
}

/* ------------------------------------------------------------ norms */

/* BatchNormalization: x, scale, B differentiated; mean, var fed. */
static void bn_check(const char *label, const nn_case *c, int opset) {
  int64_t xd[4] = {3, 2, 3, 2};
  double *x = vals(36, 5), *s = vals(2, 6), *b = vals(2, 7);
  double mean[2] = {0.1, -0.2}, var[2] = {0.8, 1.3};
  gc_input in[5] = {{"x", 4, {0}, x, true}, {"s", 1, {2}, s, true}, {"b", 1, {2}, b, true},
                    {"mean", 1, {2}, mean, false}, {"var", 1, {2}, var, false}};
  memcpy(in[0].dims, xd, sizeof xd);
  gc_check(label, nn_body, (void *)c, in, 5, opset, 1e-6);
  free(x), free(s), free(b);
}

static void norm_cases(void) {
  nn_case inf = {"BatchNormalization", "x,s,b,mean,var", NULL, {F("epsilon", 1e-3f)}};
  bn_check("batchnorm inference opset 9", &inf, 9);
  bn_check("batchnorm inference opset 14", &inf, 14);
  bn_check("batchnorm inference opset 15", &inf, 15);
  nn_case tr = {"BatchNormalization", "x,s,b,mean,var", "y,rm,rv", {I1("training_mode", 1), F("momentum", 0.8f)}};
  bn_check("batchnorm training opset 14", &tr, 14);
  bn_check("batchnorm training opset 15", &tr, 15);
  nn_case tr1 = {"BatchNormalization", "x,s,b,mean,var", "y", {I1("training_mode", 1)}};
  bn_check("batchnorm training opset 15, Y only", &tr1, 15);
  nn_case tr9 = {"BatchNormalization", "x,s,b,mean,var", "y,rm,rv,sm,sv", {{0}}};
  bn_check("batchnorm training opset 9", &tr9, 9);

  double *x = vals(24, 8), *s = vals(12, 9), *b = vals(12, 10), *s2 = vals(4, 11);
  gc_input in[3] = {{"x", 3, {2, 3, 4}, x, true}, {"s", 2, {3, 4}, s, true}, {"b", 2, {3, 4}, b, true}};
  nn_case ln = {"LayerNormalization", "x,s,b", NULL, {I1("axis", 1), F("epsilon", 1e-3f)}};
  gc_check("layernorm axis 1", nn_body, &ln, in, 3, 17, 1e-6);
  gc_input in2[2] = {{"x", 3, {2, 3, 4}, x, true}, {"s", 1, {4}, s2, true}};
  nn_case lnb = {"LayerNormalization", "x,s", NULL, {{0}}};
  gc_check("layernorm axis -1, no B", nn_body, &lnb, in2, 2, 17, 1e-6);
  gc_input in3[3] = {{"x", 3, {2, 3, 4}, x, true}, {"s", 1, {4}, s2, true}, {"b", 2, {1, 4}, b, true}};
  nn_case lns = {"LayerNormalization", "x,s,b", "y0,mean,inv", {I1("axis", -2), I1("stash_type", KEEL_DOUBLE)},
                 "Sum:y0,mean,inv:y"};
  in3[1] = (gc_input){"s", 2, {3, 1}, s2, true};
  gc_check("layernorm axis -2, Mean and InvStdDev used, broadcast Scale and B", nn_body, &lns,
           in3, 3, 17, 1e-6);
  free(x), free(s), free(b), free(s2);

  double *xi = vals(2 * 4 * 3 * 2, 14), *si = vals(4, 15), *bi = vals(4, 16);
  gc_input ii[3] = {{"x", 4, {2, 4, 3, 2}, xi, true}, {"s", 1, {4}, si, true}, {"b", 1, {4}, bi, true}};
  nn_case inst = {"InstanceNormalization", "x,s,b", NULL, {F("epsilon", 1e-2f)}};
  gc_check("instancenorm", nn_body, &inst, ii, 3, 13, 1e-6);
  nn_case gn21 = {"GroupNormalization", "x,s,b", NULL, {I1("num_groups", 2), F("epsilon", 1e-3f)}};
  gc_check("groupnorm opset 21 (per channel)", nn_body, &gn21, ii, 3, 21, 1e-6);
  ii[1].dims[0] = ii[2].dims[0] = 2;
  gc_check("groupnorm opset 18 (per group)", nn_body, &gn21, ii, 3, 18, 1e-6);
  ii[0] = (gc_input){"x", 3, {2, 4, 3}, xi, true};
  ii[1].dims[0] = ii[2].dims[0] = 1;
  nn_case gn1 = {"GroupNormalization", "x,s,b", NULL, {I1("num_groups", 1)}};
  gc_check("groupnorm one group, 3-D", nn_body, &gn1, ii, 3, 18, 1e-6);
  free(xi), free(si), free(bi);
}

/* ---------------------------------------------------------- Dropout */

static void dropout_cases(void) {
  double *x = vals(40, 12), ratio = 0.3;
  uint8_t on = 1, off = 0;
  gc_input in[3] = {{"x", 2, {5, 8}, x, true}, {"r", 0, {0}, &ratio, false},
                    {"t", 0, {0}, NULL, false, KEEL_BOOL, &on}};
  nn_case inf = {"Dropout", "x", NULL, {{0}}};
  gc_check("dropout inference opset 13", nn_body, &inf, in, 1, 13, 1e-6);
  nn_case inf10 = {"Dropout", "x", "y,mask", {F("ratio", 0.4f)}};
  gc_check("dropout opset 10 (inference)", nn_body, &inf10, in, 1, 10, 1e-6);
  nn_case tr = {"Dropout", "x,r,t", "y,mask", {I1("seed", 3)}};
  gc_check("dropout training, mask output", nn_body, &tr, in, 3, 13, 1e-6);
  nn_case trn = {"Dropout", "x,r,t", NULL, {I1("seed", 5)}};
  gc_check("dropout training, no mask output", nn_body, &trn, in, 3, 13, 1e-6);
  nn_case trd = {"Dropout", "x,,t", NULL, {{0}}};
  gc_check("dropout training, default ratio", nn_body, &trd, (gc_input[]){in[0], in[2]}, 2, 13, 1e-6);
  nn_case tr6 = {"Dropout", "x", "y,mask", {I1("is_test", 0), F("ratio", 0.25f)}};
  gc_check("dropout opset 6, is_test 0 (training)", nn_body, &tr6, in, 1, 6, 1e-6);
  in[2].idata = &off;
  gc_check("dropout training_mode false", nn_body, &tr, in, 3, 13, 1e-6);
  /* the rule is not the identity in training: some gradients are 0 */
  in[2].idata = &on;
  double *gr[1] = {0};
  int zeros = 0;
  if (gc_gradients(nn_body, &tr, in, 3, 13, gr))
    for (int i = 0; i < 40; i++) zeros += gr[0][i] == 0;
  CHECK(zeros > 3 && zeros < 37);
  free(gr[0]);
  free(x);
}

/* ----------------------------------------------------------- Resize */

static void resize_check(const char *label, const char *mode, const char *ctm, const char *nm,
                         const double *scales, const int64_t *sizes, int opset) {
  nn_case c = {"Resize", sizes ? "x,,,sizes" : "x,,scales", NULL,
               {S("mode", mode), S("coordinate_transformation_mode", ctm), S("nearest_mode", nm)}};
  if (opset < 11) c = (nn_case){"Resize", "x,scales", NULL, {S("mode", mode)}};
  double *x = vals(2 * 3 * 4 * 5, 13);
  float fs[4] = {0};
  for (int i = 0; scales && i < 4; i++) fs[i] = (float)scales[i];
  gc_input in[2] = {{"x", 4, {2, 3, 4, 5}, x, true}, {"scales", 1, {4}, NULL, false, KEEL_FLOAT, fs}};
  if (sizes) in[1] = (gc_input){"sizes", 1, {4}, NULL, false, KEEL_INT64, sizes};
  gc_check(label, nn_body, &c, in, 2, opset, 1e-6);
  free(x);
}

static void resize_cases(void) {
  double up[4] = {1, 1, 2, 1.5}, down[4] = {1, 1, 0.5, 0.6};
  int64_t sz[4] = {2, 3, 7, 3};
  resize_check("resize nearest asymmetric floor", "nearest", "asymmetric", "floor", up, NULL, 13);
  resize_check("resize nearest half_pixel round_prefer_floor", "nearest", "half_pixel",
               "round_prefer_floor", up, NULL, 13);
  resize_check("resize nearest sizes", "nearest", "pytorch_half_pixel", "round_prefer_ceil", NULL, sz, 13);
  resize_check("resize linear half_pixel", "linear", "half_pixel", "floor", up, NULL, 13);
  resize_check("resize linear pytorch_half_pixel down", "linear", "pytorch_half_pixel", "floor",
               down, NULL, 13);
  resize_check("resize linear align_corners sizes", "linear", "align_corners", "floor", NULL, sz, 19);
  resize_check("resize linear asymmetric", "linear", "asymmetric", "floor", up, NULL, 11);
  resize_check("resize opset 10 nearest", "nearest", "", "", up, NULL, 10);
  resize_check("resize opset 10 linear", "linear", "", "", down, NULL, 10);
}

/* ------------------------------------------------- refused at load */

static void refused(const char *label, const nn_case *c, int xr, const int64_t *xd,
                    const char *want) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "x", KEEL_DOUBLE, xr, xd);
  mb_init(g, "scales", KEEL_FLOAT, 1, (int64_t[]){4}, (float[]){1, 1, 2, 2});
  nn_body(g, (void *)c);
  mb_output(g, "y", KEEL_DOUBLE, -1, NULL);
  mb_output(g, "dx", KEEL_DOUBLE, -1, NULL);
  mb_node *n = mb_add(g, "Gradient", "x", "dx");
  mb_domain(n, TRAIN);
  mb_attr_s(n, "y", "y");
  mb_attr_strs(n, "xs", 1, (const char *[]){"x"});
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 13, TRAIN, 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  CHECK(st == KEEL_ERR_UNSUPPORTED);
  if (st != KEEL_ERR_UNSUPPORTED || !strstr(keel_last_error(), want))
    fprintf(stderr, "%s: %s\n", label, st ? keel_last_error() : "accepted");
  CHECK(st && strstr(keel_last_error(), want));
  keel_session_destroy(s);
}

static void refused_cases(void) {
  int64_t xd[4] = {1, 1, 2, 2};
  nn_case cubic = {"Resize", "x,,scales", NULL, {S("mode", "cubic")}};
  refused("resize cubic", &cubic, 4, xd, "cubic");
  nn_case crop = {"Resize", "x,,scales", NULL, {S("mode", "linear"),
                  S("coordinate_transformation_mode", "tf_crop_and_resize")}};
  refused("resize tf_crop_and_resize", &crop, 4, xd, "tf_crop_and_resize");
  nn_case ceil = {"Resize", "x,,scales", NULL, {S("nearest_mode", "weird")}};
  refused("resize nearest_mode", &ceil, 4, xd, "weird");
}

/* The kernels called directly (a model importing ai.keel.internal) with
 * inputs that do not fit: an error naming the problem, no crash. */
static void bad_call(const char *op, int n_in, const int64_t (*dims)[4], const int *ranks,
                     const char *want) {
  mb_graph *g = mb_graph_new("main");
  const char *names[6] = {"a", "b", "c", "d", "e", "f"};
  char ins[32] = "";
  for (int i = 0; i < n_in; i++) {
    mb_input(g, names[i], KEEL_FLOAT, ranks[i], dims[i]);
    snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%s", i ? "," : "", names[i]);
  }
  mb_node *n = mb_add(g, op, ins, "y");
  mb_domain(n, "ai.keel.internal");
  if (!strcmp(op, "MaxPoolGrad")) mb_attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  size_t len;
  uint8_t *bytes = mb_model_domains(g, 13, "ai.keel.internal", 1, &len);
  keel_session_t *s = NULL;
  keel_status st = keel_session_create_from_memory(bytes, len, NULL, NULL, &s);
  free(bytes);
  CHECK(st == KEEL_OK);
  keel_value_t *v[6] = {0}, *out = NULL;
  for (int i = 0; s && i < n_in; i++) v[i] = mb_tensor(s, KEEL_FLOAT, ranks[i], dims[i], NULL);
  st = s ? keel_run(s, names, v, (size_t)n_in, &out) : KEEL_ERR_INVALID_MODEL;
  CHECK(st != KEEL_OK && strstr(keel_last_error(), want));
  if (st == KEEL_OK || !strstr(keel_last_error(), want))
    fprintf(stderr, "%s: %s\n", op, st ? keel_last_error() : "accepted");
  for (int i = 0; i < n_in; i++) keel_value_release(v[i]);
  keel_value_release(out);
  keel_session_destroy(s);
}

static void bad_calls(void) {
  bad_call("ConvGradX", 3, (const int64_t[][4]){{1, 2, 4, 4}, {1, 3, 5, 5}, {2, 3, 3, 3}},
           (int[]){4, 4, 4}, "the gradient has shape");
  bad_call("ConvGradW", 3, (const int64_t[][4]){{1, 2, 3, 3}, {1, 4, 5, 5}, {2, 3, 3, 3}},
           (int[]){4, 4, 4}, "channels");
  bad_call("MaxPoolGrad", 2, (const int64_t[][4]){{1, 1, 2, 2}, {1, 1, 4, 4}}, (int[]){4, 4},
           "the gradient has shape");
  bad_call("BatchNormGrad", 5, (const int64_t[][4]){{2, 3}, {2, 3}, {4}, {3}, {3}},
           (int[]){2, 2, 1, 1, 1}, "scale has shape");
  bad_call("LayerNormGrad", 3, (const int64_t[][4]){{2, 3}, {2, 3}, {4}}, (int[]){2, 2, 1},
           "do not broadcast");
  bad_call("ResizeGrad", 2, (const int64_t[][4]){{1, 1, 2, 2}, {1, 1, 2, 2}}, (int[]){4, 4},
           "4 scales or 4 sizes");
}

/* ------------------------------------------- float32 against float64 */

/* Gradients of L = sum(conv(x, w, b) * R) in `dt` for inputs of the given
 * shapes (values from vals()); grads[i] gets doubles. */
/* Gradients of L = sum(y * y) with respect to the `diff` inputs, with the
 * double inputs given in `dt`, on a session of `threads` threads; grads[k]
 * gets doubles, *ms the time of the last of three runs. */
static bool typed_grads(const nn_case *c, int dt, const gc_input *in, int n_in, int opset,
                        int threads, double **grads, double *ms) {
  mb_graph *g = mb_graph_new("main");
  const char *names[8], *xs[8];
  char ins[256] = "", outs[256] = "";
  int nx = 0;
  for (int i = 0; i < n_in; i++) {
    names[i] = in[i].name;
    mb_input(g, in[i].name, in[i].dtype ? in[i].dtype : dt, in[i].rank, in[i].dims);
  }
  nn_body(g, (void *)c);
  mb_add(g, "Mul", "y,y", "L");
  mb_output(g, "L", dt, -1, NULL);
  for (int i = 0; i < n_in; i++) {
    if (!in[i].diff) continue;
    char o[64];
    snprintf(o, sizeof o, "d_%s", in[i].name);
    mb_output(g, o, dt, -1, NULL);
    snprintf(ins + strlen(ins), sizeof ins - strlen(ins), "%s%s", nx ? "," : "", in[i].name);
    snprintf(outs + strlen(outs), sizeof outs - strlen(outs), "%s%s", nx ? "," : "", o);
    xs[nx++] = in[i].name;
  }
  mb_node *gn = mb_add(g, "Gradient", ins, outs);
  mb_domain(gn, TRAIN);
  mb_attr_s(gn, "y", "L");
  mb_attr_strs(gn, "xs", nx, xs);
  size_t len;
  uint8_t *bytes = mb_model_domains(g, opset, TRAIN, 1, &len);
  keel_options o = {.size = sizeof o, .threads = threads};
  keel_session_t *s = NULL;
  bool ok = keel_session_create_from_memory(bytes, len, NULL, &o, &s) == KEEL_OK;
  free(bytes);
  keel_value_t *v[8] = {0}, *out[9] = {0};
  for (int i = 0; ok && i < n_in; i++) {
    int64_t n = numel(&in[i]);
    if (in[i].dtype) {
      v[i] = mb_tensor(s, in[i].dtype, in[i].rank, in[i].dims, in[i].idata);
      continue;
    }
    void *buf = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t j = 0; j < n; j++)
      if (dt == KEEL_FLOAT) ((float *)buf)[j] = (float)in[i].data[j];
      else ((double *)buf)[j] = in[i].data[j];
    v[i] = mb_tensor(s, dt, in[i].rank, in[i].dims, buf);
    free(buf);
  }
  for (int rep = 0; ok && rep < 3; rep++) { /* the last of three runs is timed */
    for (int i = 0; i < 9; i++) keel_value_release(out[i]), out[i] = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ok = keel_run(s, names, v, (size_t)n_in, out) == KEEL_OK;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  }
  if (!ok) fprintf(stderr, "typed_grads: %s\n", keel_last_error());
  for (int i = 0, k = 0; ok && i < n_in; i++) {
    if (!in[i].diff) continue;
    grads[k] = malloc(sizeof(double) * (size_t)numel(&in[i]));
    for (int64_t j = 0; j < numel(&in[i]); j++) grads[k][j] = keel_value_at(out[k + 1], j);
    k++;
  }
  for (int i = 0; i < 9; i++) keel_value_release(out[i]);
  for (int i = 0; i < n_in; i++) keel_value_release(v[i]);
  keel_session_destroy(s);
  return ok;
}

/* typed_grads for (x, w, b) of the given shapes, values from vals(). */
static bool conv_grads(const nn_case *c, int dt, int xr, const int64_t *xd, const int64_t *wd,
                       int64_t m, int threads, double **grads, double *ms) {
  int64_t nx = prod(xr, xd), nw = prod(xr, wd);
  double *v[3] = {vals(nx, 1), vals(nw, 2), vals(m, 3)};
  gc_input in[3] = {{"x", xr, {0}, v[0], true}, {"w", xr, {0}, v[1], true}, {"b", 1, {m}, v[2], true}};
  memcpy(in[0].dims, xd, sizeof(int64_t) * (size_t)xr);
  memcpy(in[1].dims, wd, sizeof(int64_t) * (size_t)xr);
  bool ok = typed_grads(c, dt, in, 3, 13, threads, grads, ms);
  for (int i = 0; i < 3; i++) free(v[i]);
  return ok;
}

/* The other kernels: float32 against float64 on a mid-sized input. */
static void f32_other(const char *label, const nn_case *c, const gc_input *in, int n_in, int opset) {
  double *g32[8] = {0}, *g64[8] = {0}, t32 = 0, t64 = 0;
  bool ok = typed_grads(c, KEEL_FLOAT, in, n_in, opset, 2, g32, &t32) &&
            typed_grads(c, KEEL_DOUBLE, in, n_in, opset, 2, g64, &t64);
  CHECK(ok);
  for (int i = 0, k = 0; ok && i < n_in; i++) {
    if (!in[i].diff) continue;
    double worst = 0, scale = 0;
    for (int64_t j = 0; j < numel(&in[i]); j++) scale = fmax(scale, fabs(g64[k][j]));
    for (int64_t j = 0; j < numel(&in[i]); j++) worst = fmax(worst, fabs(g32[k][j] - g64[k][j]));
    if (!(worst <= 1e-4 * (1 + scale)))
      fprintf(stderr, "%s: float32 gradient of %s differs by %g (scale %g)\n", label, in[i].name,
              worst, scale);
    CHECK(worst <= 1e-4 * (1 + scale));
    k++;
  }
  printf("%s: float32 %.2f ms, float64 %.2f ms per forward+backward\n", label, t32, t64);
  for (int i = 0; i < 8; i++) free(g32[i]), free(g64[i]);
}

static void f32_others(void) {
  int64_t n = 4 * 8 * 16 * 16;
  double *x = vals(n, 21), *s = vals(8, 22), *b = vals(8, 23), *ln_s = vals(256, 24);
  double mean[8] = {0}, var[8] = {1, 1, 1, 1, 2, 2, 2, 2};
  gc_input x1[1] = {{"x", 4, {4, 8, 16, 16}, x, true}};
  nn_case mp = {"MaxPool", "x", NULL, {IS("kernel_shape", 2, 3, 3), IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 1, 1)}};
  f32_other("float32 maxpool", &mp, x1, 1, 13);
  nn_case ap = {"AveragePool", "x", NULL, {IS("kernel_shape", 2, 2, 2), IS("strides", 2, 2, 2)}};
  f32_other("float32 averagepool", &ap, x1, 1, 13);
  nn_case gap = {"GlobalAveragePool", "x", NULL, {{0}}};
  f32_other("float32 globalaveragepool", &gap, x1, 1, 13);
  gc_input bn[5] = {x1[0], {"s", 1, {8}, s, true}, {"b", 1, {8}, b, true}, {"mean", 1, {8}, mean, false},
                    {"var", 1, {8}, var, false}};
  nn_case bnt = {"BatchNormalization", "x,s,b,mean,var", NULL, {I1("training_mode", 1)}};
  f32_other("float32 batchnorm training", &bnt, bn, 5, 15);
  gc_input ln[2] = {x1[0], {"s", 2, {16, 16}, ln_s, true}};
  nn_case lnc = {"LayerNormalization", "x,s", NULL, {I1("axis", 2)}};
  f32_other("float32 layernorm", &lnc, ln, 2, 17);
  nn_case gn = {"GroupNormalization", "x,s,b", NULL, {I1("num_groups", 4)}};
  f32_other("float32 groupnorm", &gn, bn, 3, 21);
  float sc[4] = {1, 1, 2, 2};
  gc_input rs[2] = {x1[0], {"scales", 1, {4}, NULL, false, KEEL_FLOAT, sc}};
  nn_case rl = {"Resize", "x,,scales", NULL, {S("mode", "linear")}};
  f32_other("float32 resize linear", &rl, rs, 2, 13);
  free(x), free(s), free(b), free(ln_s);
}

/* A naive 2-D Conv (pads top/left pt, pl; the output sizes given) and its
 * gradients for L = sum(y * y): gy = 2y, then dX, dW, dB by direct loops. */
typedef struct naive2d {
  int64_t n, c, h, w, m, kh, kw, g, s, pt, pl, dh, dw, oh, ow;
} naive2d;

static void naive_grads(const naive2d *q, double **ref) {
  int64_t cg = q->c / q->g, mg = q->m / q->g, ny = q->n * q->m * q->oh * q->ow;
  double *x = vals(q->n * q->c * q->h * q->w, 1), *w = vals(q->m * cg * q->kh * q->kw, 2);
  double *b = vals(q->m, 3), *gy = calloc((size_t)ny, sizeof(double));
  ref[0] = calloc((size_t)(q->n * q->c * q->h * q->w), sizeof(double));
  ref[1] = calloc((size_t)(q->m * cg * q->kh * q->kw), sizeof(double));
  ref[2] = calloc((size_t)q->m, sizeof(double));
  for (int pass = 0; pass < 2; pass++) /* 0: y (into gy), 1: the gradients */
    for (int64_t n = 0; n < q->n; n++)
      for (int64_t m = 0; m < q->m; m++)
        for (int64_t oy = 0; oy < q->oh; oy++)
          for (int64_t ox = 0; ox < q->ow; ox++) {
            int64_t yi = ((n * q->m + m) * q->oh + oy) * q->ow + ox, gi = m / mg;
            double acc = b[m];
            if (pass) ref[2][m] += gy[yi];
            for (int64_t c = 0; c < cg; c++)
              for (int64_t ky = 0; ky < q->kh; ky++)
                for (int64_t kx = 0; kx < q->kw; kx++) {
                  int64_t iy = oy * q->s - q->pt + ky * q->dh, ix = ox * q->s - q->pl + kx * q->dw;
                  if (iy < 0 || iy >= q->h || ix < 0 || ix >= q->w) continue;
                  int64_t xi = ((n * q->c + gi * cg + c) * q->h + iy) * q->w + ix;
                  int64_t wi = ((m * cg + c) * q->kh + ky) * q->kw + kx;
                  if (!pass) acc += w[wi] * x[xi];
                  else ref[0][xi] += gy[yi] * w[wi], ref[1][wi] += gy[yi] * x[xi];
                }
            if (!pass) gy[yi] = 2 * acc;
          }
  free(x), free(w), free(b), free(gy);
}

static void compare(const char *label, const char *what, double *const *got, double *const *want,
                    const int64_t *n3, double tol) {
  for (int i = 0; i < 3; i++) {
    double worst = 0, scale = 0;
    for (int64_t j = 0; j < n3[i]; j++) scale = fmax(scale, fabs(want[i][j]));
    for (int64_t j = 0; j < n3[i]; j++) worst = fmax(worst, fabs(got[i][j] - want[i][j]));
    if (!(worst <= tol * (1 + scale)))
      fprintf(stderr, "%s: %s gradient %d differs by %g (scale %g)\n", label, what, i, worst, scale);
    CHECK(worst <= tol * (1 + scale));
  }
}

/* float32 against float64 (and both against the naive loops when q is
 * given: a plain 2-D Conv). */
static void f32_case(const char *label, const nn_case *c, int xr, const int64_t *xd,
                     const int64_t *wd, int64_t m, int threads, const naive2d *q) {
  double *g32[3] = {0}, *g64[3] = {0}, *ref[3] = {0}, t32 = 0, t64 = 0;
  bool ok = conv_grads(c, KEEL_FLOAT, xr, xd, wd, m, threads, g32, &t32) &&
            conv_grads(c, KEEL_DOUBLE, xr, xd, wd, m, threads, g64, &t64);
  CHECK(ok);
  int64_t n3[3] = {prod(xr, xd), prod(xr, wd), m};
  if (ok) compare(label, "float32", g32, g64, n3, 1e-4);
  if (ok && q) {
    naive_grads(q, ref);
    compare(label, "float64 (naive loops)", g64, ref, n3, 1e-10);
    compare(label, "float32 (naive loops)", g32, ref, n3, 1e-4);
  }
  printf("%s (%d threads): float32 %.2f ms, float64 %.2f ms per forward+backward\n", label,
         threads, t32, t64);
  for (int i = 0; i < 3; i++) free(g32[i]), free(g64[i]), free(ref[i]);
}

static void f32_cases(void) {
  nn_case point = {"Conv", "x,w,b", NULL, {{0}}};
  nn_case conv = {"Conv", "x,w,b", NULL, {IS("pads", 4, 1, 1, 1, 1), IS("strides", 2, 1, 1)}};
  f32_case("float32 conv 3x3", &conv, 4, (int64_t[]){4, 16, 20, 20}, (int64_t[]){24, 16, 3, 3}, 24, 2,
           &(naive2d){4, 16, 20, 20, 24, 3, 3, 1, 1, 1, 1, 1, 1, 20, 20});
  f32_case("float32 conv 3x3", &conv, 4, (int64_t[]){1, 8, 9, 9}, (int64_t[]){8, 8, 3, 3}, 8, 4,
           &(naive2d){1, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 9, 9});
  /* a column matrix over the 4 MB budget in float64 (chunks), not in float32 */
  nn_case big = {"Conv", "x,w,b", NULL, {I1("group", 2), IS("pads", 4, 2, 1, 2, 1), IS("dilations", 2, 2, 1)}};
  f32_case("float32 conv grouped, dilated, chunked", &big, 4, (int64_t[]){1, 32, 64, 64},
           (int64_t[]){16, 16, 3, 3}, 16, 2, &(naive2d){1, 32, 64, 64, 16, 3, 3, 2, 1, 2, 1, 2, 1, 64, 64});
  /* 16 workers: float32's dW partial sums fit the budget, float64's do not
   * (one part, each product split over the pool) */
  f32_case("float32 conv large W, 16 threads", &point, 4, (int64_t[]){2, 64, 12, 12},
           (int64_t[]){72, 64, 8, 8}, 72, 16, &(naive2d){2, 64, 12, 12, 72, 8, 8, 1, 1, 0, 0, 1, 1, 5, 5});
  nn_case sd = {"Conv", "x,w,b", NULL, {IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 0, 0)}};
  f32_case("float32 conv stride 2", &sd, 4, (int64_t[]){3, 8, 15, 15}, (int64_t[]){12, 8, 3, 3}, 12, 2,
           &(naive2d){3, 8, 15, 15, 12, 3, 3, 1, 2, 1, 1, 1, 1, 7, 7});
  nn_case dw = {"Conv", "x,w,b", NULL, {I1("group", 8), IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 1, 1)}};
  f32_case("float32 depthwise conv", &dw, 4, (int64_t[]){2, 8, 12, 12}, (int64_t[]){8, 1, 3, 3}, 8, 2,
           &(naive2d){2, 8, 12, 12, 8, 3, 3, 8, 2, 1, 1, 1, 1, 6, 6});
  nn_case pw = {"Conv", "x,w,b", NULL, {{0}}};
  f32_case("float32 conv 1x1", &pw, 4, (int64_t[]){2, 16, 10, 10}, (int64_t[]){32, 16, 1, 1}, 32, 2,
           &(naive2d){2, 16, 10, 10, 32, 1, 1, 1, 1, 0, 0, 1, 1, 10, 10});
  nn_case tr = {"ConvTranspose", "x,w,b", NULL, {IS("strides", 2, 2, 2), IS("pads", 4, 1, 1, 1, 1),
                                                IS("output_padding", 2, 1, 1)}};
  f32_case("float32 convT", &tr, 4, (int64_t[]){2, 16, 8, 8}, (int64_t[]){16, 8, 3, 3}, 8, 2, NULL);
  /* ConvTranspose's columns (Mg * k rows over X's positions) over budget in float64 */
  f32_case("float32 convT chunked", &tr, 4, (int64_t[]){1, 16, 62, 62}, (int64_t[]){16, 16, 3, 3}, 16,
           2, NULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bench")) { /* training-sized layers, timed */
    int th = argc > 2 ? atoi(argv[2]) : 0;
    nn_case conv = {"Conv", "x,w,b", NULL, {IS("pads", 4, 1, 1, 1, 1)}};
    f32_case("bench conv 32x64x32x32 -> 64, 3x3", &conv, 4, (int64_t[]){32, 64, 32, 32},
             (int64_t[]){64, 64, 3, 3}, 64, th, NULL);
    nn_case dw = {"Conv", "x,w,b", NULL, {IS("pads", 4, 1, 1, 1, 1), I1("group", 64)}};
    f32_case("bench depthwise 32x64x32x32, 3x3", &dw, 4, (int64_t[]){32, 64, 32, 32},
             (int64_t[]){64, 1, 3, 3}, 64, th, NULL);
    return check_report();
  }
  conv_cases();
  convtr_cases();
  pool_cases();
  norm_cases();
  dropout_cases();
  resize_cases();
  refused_cases();
  bad_calls();
  f32_cases();
  f32_others();
  return check_report();
}
