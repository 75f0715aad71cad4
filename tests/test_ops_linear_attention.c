/* test_ops_linear_attention.c: LinearAttention (every update rule, GQA,
 * per-head and per-key decay, scalar and per-head beta, with and without
 * past state) and CausalConvWithState (kernel sizes 1..4, bias, past
 * state, SiLU) through real sessions, against recurrences written here
 * in double, in float and float16; then the error cases. */
#include "opcase.h"

/* =================================================== LinearAttention */

static void lin_case(void) {
  static const char *rules[] = {"linear", "gated", "delta", "gated_delta"};
  int rule = rnd(4), dt = rnd(4) ? KEEL_FLOAT : KEEL_FLOAT16;
  bool gated = rule & 1, delta = rule & 2;
  int64_t B = 1 + rnd(2), T = 1 + rnd(5), Hkv = 1 + rnd(3), Hq = Hkv * (1 + rnd(3));
  int64_t Dk = 1 + rnd(5), Dv = 1 + rnd(5), grp = Hq / Hkv;
  bool past = rnd(2), gfull = rnd(2), bscalar = rnd(2), has_scale = rnd(3) == 0;
  double scale = has_scale ? 0.3 : 1 / sqrt((double)Dk);
  tv q = tv_new("q", dt, 3, (int64_t[]){B, T, Hq * Dk});
  tv kk = tv_new("k", dt, 3, (int64_t[]){B, T, Hkv * Dk});
  tv v = tv_new("v", dt, 3, (int64_t[]){B, T, Hkv * Dv});
  tv ps = tv_new("past", dt, 4, (int64_t[]){B, Hkv, Dk, Dv});
  tv g = tv_new("decay", dt, 3, (int64_t[]){B, T, gfull ? Hkv * Dk : Hkv});
  tv be = tv_new("beta", dt, 3, (int64_t[]){B, T, bscalar ? 1 : Hkv});
  tv_rand(&q, 1), tv_rand(&kk, 0.7), tv_rand(&v, 1), tv_rand(&ps, 0.5);
  for (int64_t i = 0; i < numel(3, g.dims); i++) g.v[i] = as_dtype(dt, -0.5 * fabs(frand()));
  for (int64_t i = 0; i < numel(3, be.dims); i++) be.v[i] = as_dtype(dt, fabs(frand()));
  tv out = tv_new("out", dt, 3, (int64_t[]){B, T, Hq * Dv}), st = tv_new("state", dt, 4, ps.dims);
  double *S = st.v, *vt = malloc(sizeof(double) * (size_t)(2 * Dv + 1));
  for (int64_t i = 0; i < numel(4, ps.dims); i++) S[i] = past ? ps.v[i] : 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t h = 0; h < Hkv; h++) {
        double *Sh = S + (b * Hkv + h) * Dk * Dv;
        const double *kr = kk.v + (b * T + t) * Hkv * Dk + h * Dk;
        for (int64_t d = 0; d < Dk && gated; d++)
          for (int64_t m = 0; m < Dv; m++)
            Sh[d * Dv + m] *= exp(g.v[(b * T + t) * g.dims[2] + (gfull ? h * Dk + d : h)]);
        for (int64_t m = 0; m < Dv; m++) {
          double x = v.v[(b * T + t) * Hkv * Dv + h * Dv + m], r = 0;
          for (int64_t d = 0; d < Dk; d++) r += Sh[d * Dv + m] * kr[d];
          vt[m] = delta ? be.v[(b * T + t) * be.dims[2] + (bscalar ? 0 : h)] * (x - r) : x;
        }
        for (int64_t d = 0; d < Dk; d++)
          for (int64_t m = 0; m < Dv; m++) Sh[d * Dv + m] += kr[d] * vt[m];
        for (int64_t j = 0; j < grp; j++) {
          int64_t hq = h * grp + j;
          for (int64_t m = 0; m < Dv; m++) {
            double o = 0;
            for (int64_t d = 0; d < Dk; d++)
              o += q.v[(b * T + t) * Hq * Dk + hq * Dk + d] * Sh[d * Dv + m];
            out.v[(b * T + t) * Hq * Dv + hq * Dv + m] = scale * o;
          }
        }
      }
  free(vt);
  tv in[6] = {q, kk, v, ps, g, be};
  if (!past) in[3].name = NULL;
  if (!gated) in[4].name = NULL;
  if (!delta) in[5].name = NULL;
  attr at[] = {{"q_num_heads", 'i', Hq, 0, NULL},
               {"kv_num_heads", 'i', Hkv, 0, NULL},
               {"update_rule", 's', 0, 0, rules[rule]},
               {has_scale ? "scale" : NULL, 'f', 0, (float)scale, NULL},
               {0}};
  tv want[2] = {out, st};
  oc_check("", "LinearAttention", 27, in, 6, "out,state", at, want, 2, 2e-4);
  tv *all[] = {&q, &kk, &v, &ps, &g, &be, &out, &st};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

/* =============================================== CausalConvWithState */

static void ccs_case(void) {
  int dt = rnd(4) ? KEEL_FLOAT : KEEL_FLOAT16;
  int64_t B = 1 + rnd(2), C = 1 + rnd(4), L = 1 + rnd(6), K = 1 + rnd(4);
  bool bias = rnd(2), past = rnd(2), silu = rnd(2);
  tv x = tv_new("x", dt, 3, (int64_t[]){B, C, L}), w = tv_new("w", dt, 3, (int64_t[]){C, 1, K});
  tv b = tv_new("b", dt, 1, (int64_t[]){C}), ps = tv_new("past", dt, 3, (int64_t[]){B, C, K - 1});
  tv_rand(&x, 2), tv_rand(&w, 1), tv_rand(&b, 1), tv_rand(&ps, 2);
  tv y = tv_new("y", dt, 3, x.dims), st = tv_new("state", dt, 3, ps.dims);
  double *pad = malloc(sizeof(double) * (size_t)(K + L));
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t c = 0; c < C; c++) {
      int64_t r = bb * C + c;
      for (int64_t j = 0; j < K - 1; j++) pad[j] = past ? ps.v[r * (K - 1) + j] : 0;
      for (int64_t j = 0; j < L; j++) pad[K - 1 + j] = x.v[r * L + j];
      for (int64_t i = 0; i < L; i++) {
        double a = bias ? b.v[c] : 0;
        for (int64_t j = 0; j < K; j++) a += w.v[c * K + j] * pad[i + j];
        a = as_dtype(dt, a);
        y.v[r * L + i] = silu ? a / (1 + exp(-a)) : a;
      }
      for (int64_t j = 0; j < K - 1; j++) st.v[r * (K - 1) + j] = pad[L + j];
    }
  free(pad);
  tv in[4] = {x, w, b, ps};
  if (!bias) in[2].name = NULL;
  if (!past) in[3].name = NULL;
  attr at[] = {{"activation", 's', 0, 0, silu ? (rnd(2) ? "silu" : "swish") : "none"}, {0}};
  tv want[2] = {y, st};
  oc_check("", "CausalConvWithState", 27, in, 4, "y,state", at, want, 2, 1e-4);
  tv *all[] = {&x, &w, &b, &ps, &y, &st};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

/* ============================================================ errors */

static void error_cases(void) {
  tv q = tv_new("q", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4}), kk = tv_new("k", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4});
  tv v = tv_new("v", KEEL_FLOAT, 3, (int64_t[]){1, 2, 4});
  tv in[6] = {q, kk, v};
  attr lin[] = {{"q_num_heads", 'i', 2, 0, NULL}, {"kv_num_heads", 'i', 2, 0, NULL},
                {"update_rule", 's', 0, 0, "linear"}, {0}};
  oc_check("", "LinearAttention", 27, in, 3, "o,s", lin, NULL, 0, 0);
  attr gated[] = {{"q_num_heads", 'i', 2, 0, NULL}, {"kv_num_heads", 'i', 2, 0, NULL}, {0}};
  oc_fails("", "LinearAttention", 27, in, 3, "o,s", gated, KEEL_ERR_INVALID_MODEL); /* no decay */
  attr bad[] = {{"q_num_heads", 'i', 3, 0, NULL}, {"kv_num_heads", 'i', 2, 0, NULL},
                {"update_rule", 's', 0, 0, "linear"}, {0}};
  oc_fails("", "LinearAttention", 27, in, 3, "o,s", bad, KEEL_ERR_INVALID_MODEL);
  tv x = tv_new("x", KEEL_FLOAT, 3, (int64_t[]){1, 2, 5}), w = tv_new("w", KEEL_FLOAT, 3, (int64_t[]){3, 1, 2});
  tv cin[2] = {x, w};
  oc_fails("", "CausalConvWithState", 27, cin, 2, "y,s", NULL, KEEL_ERR_SHAPE);
  tv *all[] = {&q, &kk, &v, &x, &w};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

int main(void) {
  for (int i = 0; i < 300; i++) lin_case();
  for (int i = 0; i < 300; i++) ccs_case();
  error_cases();
  return check_report();
}
