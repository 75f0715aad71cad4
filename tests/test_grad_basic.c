/* test_grad_basic.c: the rules of autodiff/grad_basic.c against finite
 * differences (tests/gradcheck.h), broadcasting included. */
#include "gradcheck.h"

static void binary(mb_graph *g, void *ctx) { mb_add(g, (const char *)ctx, "a,b", "y"); }
static void unary(mb_graph *g, void *ctx) { mb_add(g, (const char *)ctx, "a", "y"); }

static void view(mb_graph *g, void *ctx) {
  (void)ctx;
  int64_t shape[2] = {3, 2};
  mb_init(g, "shape", KEEL_INT64, 1, (int64_t[]){2}, shape);
  mb_add(g, "Reshape", "a,shape", "r");
  mb_add(g, "Exp", "r", "y");
}

int main(void) {
  double a[6] = {0.3, -0.8, 0.5, 1.2, -0.1, 0.7}, b[3] = {0.9, -1.4, 0.6};
  double pa[6] = {0.3, 0.8, 0.5, 1.2, 0.1, 0.7};
  const char *bin[] = {"Add", "Sub", "Mul", "Div", "MatMul"};
  for (int i = 0; i < 5; i++) {
    gc_input in[2] = {{"a", 2, {2, 3}, a, true}, {"b", 1, {3}, b, true}};
    if (i == 4) in[1] = (gc_input){"b", 2, {3, 1}, b, true};
    gc_check(bin[i], binary, (void *)bin[i], in, 2, 13, 1e-6);
  }
  const char *un[] = {"Neg", "Identity", "Exp", "Relu", "Sigmoid", "Tanh"};
  for (int i = 0; i < 6; i++) {
    gc_input in[1] = {{"a", 2, {2, 3}, a, true}};
    gc_check(un[i], unary, (void *)un[i], in, 1, 13, 1e-6);
  }
  gc_input pin[1] = {{"a", 2, {2, 3}, pa, true}};
  gc_check("Log", unary, "Log", pin, 1, 13, 1e-6);
  gc_input vin[1] = {{"a", 2, {2, 3}, a, true}};
  gc_check("Reshape", view, NULL, vin, 1, 13, 1e-6);
  return check_report();
}
