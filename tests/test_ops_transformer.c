/* test_ops_transformer.c: RMSNormalization, RotaryEmbedding, Gelu, Swish
 * and SwiGLU through real sessions against naive references written here
 * in double: random shapes, axes, scale broadcasts, 3-D and 4-D rotary
 * inputs with and without position_ids, interleaved, partial rotary dims,
 * heads that are not powers of two, float, double, float16 and bfloat16;
 * then the error cases. */
#include "opcase.h"

static int float_dt(void) {
  static const int d[] = {KEEL_FLOAT, KEEL_DOUBLE, KEEL_FLOAT16, KEEL_FLOAT, KEEL_BFLOAT16};
  return d[rnd(5)];
}

/* ================================================== RMSNormalization */

static void rms_case(void) {
  int dt = float_dt(), rank = 1 + rnd(4);
  int64_t dims[4];
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(5);
  int axis = rnd(rank);
  /* scale: the trailing dims from axis on, some broadcast to 1, some
   * leading ones dropped */
  int srank = rank - axis - rnd(rank - axis);
  if (srank < 1) srank = 1;
  int64_t sdims[4];
  for (int d = 0; d < srank; d++) sdims[d] = rnd(3) == 0 ? 1 : dims[rank - srank + d];
  tv x = tv_new("X", dt, rank, dims), s = tv_new("scale", dt, srank, sdims);
  tv_rand(&x, 2);
  tv_rand(&s, 1.5);
  double eps = rnd(2) ? 1e-5 : 0.1;
  tv y = tv_new("Y", dt, rank, dims);
  int64_t inner = numel(rank - axis, dims + axis), outer = numel(axis, dims);
  for (int64_t r = 0; r < outer; r++) {
    double ss = 0;
    for (int64_t j = 0; j < inner; j++) ss += x.v[r * inner + j] * x.v[r * inner + j];
    double inv = 1 / sqrt(ss / (double)inner + eps);
    for (int64_t j = 0; j < inner; j++) {
      /* scale index: j's coordinates in the trailing srank dims */
      int64_t rem = j, off = 0, mul = 1;
      for (int d = rank - 1; d >= rank - srank; d--) {
        int64_t c = rem % dims[d];
        rem /= dims[d];
        int sd = d - (rank - srank);
        off += (sdims[sd] == 1 ? 0 : c) * mul;
        mul *= sdims[sd];
      }
      y.v[r * inner + j] = x.v[r * inner + j] * inv * s.v[off];
    }
  }
  tv in[2] = {x, s};
  attr at[] = {{"axis", 'i', axis - (rnd(2) ? rank : 0), 0, NULL},
               {"epsilon", 'f', 0, (float)eps, NULL},
               {0}};
  oc_check("", "RMSNormalization", 23, in, 2, "Y", at, &y, 1, 1e-4);
  tv_free(&x), tv_free(&s), tv_free(&y);
}

/* ==================================================== RotaryEmbedding */

static void rope_case(void) {
  static const int64_t heads[] = {1, 2, 3, 5};
  int dt = float_dt(), rank = 3 + rnd(2);
  int64_t B = 1 + rnd(2), H = heads[rnd(4)], S = 1 + rnd(5), D = 2 * (1 + rnd(5));
  int64_t rd = rnd(2) ? D : 2 * (1 + rnd((int)D / 2)), half = rd / 2, P = S + rnd(4);
  bool inter = rnd(2), with_pos = rnd(2), cache3 = !with_pos && rnd(2);
  int64_t d4[4] = {B, H, S, D}, d3[3] = {B, S, H * D};
  tv x = tv_new("X", dt, rank, rank == 4 ? d4 : d3);
  tv_rand(&x, 2);
  int64_t cd3[3] = {B, S, half}, cd2[2] = {with_pos ? P : S, half};
  tv c = tv_new("cos", dt, cache3 ? 3 : 2, cache3 ? cd3 : cd2);
  tv s = tv_new("sin", dt, cache3 ? 3 : 2, cache3 ? cd3 : cd2);
  for (int64_t i = 0; i < numel(c.rank, c.dims); i++) {
    double a = frand() * 3;
    c.v[i] = as_dtype(dt, cos(a)), s.v[i] = as_dtype(dt, sin(a));
  }
  tv pos = tv_new("pos", KEEL_INT64, 2, (int64_t[]){B, S});
  for (int64_t i = 0; i < B * S; i++) pos.v[i] = rnd((int)P);
  tv y = tv_new("Y", dt, rank, x.dims);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < S; t++)
      for (int64_t h = 0; h < H; h++) {
        int64_t row = with_pos ? (int64_t)pos.v[b * S + t] : cache3 ? b * S + t : t;
        int64_t o = rank == 4 ? ((b * H + h) * S + t) * D : (b * S + t) * H * D + h * D;
        for (int64_t i = 0; i < D; i++) y.v[o + i] = x.v[o + i];
        for (int64_t i = 0; i < half; i++) {
          int64_t i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + half;
          double cv = c.v[row * half + i], sv = s.v[row * half + i];
          y.v[o + i1] = cv * x.v[o + i1] - sv * x.v[o + i2];
          y.v[o + i2] = sv * x.v[o + i1] + cv * x.v[o + i2];
        }
      }
  tv in[4] = {x, c, s, pos};
  attr at[4] = {{"interleaved", 'i', inter, 0, NULL},
                {"rotary_embedding_dim", 'i', rd == D && rnd(2) ? 0 : rd, 0, NULL},
                {rank == 3 ? "num_heads" : NULL, 'i', H, 0, NULL},
                {0}};
  oc_check("", "RotaryEmbedding", 23, in, with_pos ? 4 : 3, "Y", at, &y, 1, 1e-4);
  tv_free(&x), tv_free(&c), tv_free(&s), tv_free(&pos), tv_free(&y);
}

/* ======================================================= activations */

static void act_case(void) {
  int dt = float_dt(), rank = rnd(4), kind = rnd(4);
  int64_t dims[3];
  for (int d = 0; d < rank; d++) dims[d] = 1 + rnd(6);
  tv a = tv_new("A", dt, rank, dims), b = tv_new("B", dt, rank, dims), y = tv_new("Y", dt, rank, dims);
  tv_rand(&a, 4);
  tv_rand(&b, 2);
  double alpha = rnd(2) ? 1.0 : 0.5 + fabs(frand());
  for (int64_t i = 0; i < numel(rank, dims); i++) {
    double x = a.v[i];
    if (kind == 0) y.v[i] = 0.5 * x * (1 + erf(x / sqrt(2.0)));
    else if (kind == 1) y.v[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    else if (kind == 2) y.v[i] = x / (1 + exp(-alpha * x));
    else y.v[i] = x / (1 + exp(-alpha * x)) * b.v[i];
  }
  tv in[2] = {a, b};
  attr gel[] = {{"approximate", 's', 0, 0, kind ? "tanh" : "none"}, {0}};
  attr al[] = {{"alpha", 'f', 0, (float)alpha, NULL}, {0}};
  if (kind < 2) oc_check("", "Gelu", 20, in, 1, "Y", rnd(2) || kind ? gel : NULL, &y, 1, 1e-5);
  else if (kind == 2) oc_check("", "Swish", 24, in, 1, "Y", al, &y, 1, 1e-5);
  else oc_check("", "SwiGLU", 28, in, 2, "Y", al, &y, 1, 1e-5);
  tv_free(&a), tv_free(&b), tv_free(&y);
}

/* ============================================================ errors */

static void error_cases(void) {
  tv x = tv_new("X", KEEL_FLOAT, 4, (int64_t[]){1, 2, 3, 4});
  tv c = tv_new("cos", KEEL_FLOAT, 2, (int64_t[]){3, 3}), s = tv_new("sin", KEEL_FLOAT, 2, (int64_t[]){3, 3});
  tv in[4] = {x, c, s};
  /* caches of 3 columns for a head of 4 (2 wanted) */
  oc_fails("", "RotaryEmbedding", 23, in, 3, "Y", NULL, KEEL_ERR_SHAPE);
  tv c2 = tv_new("cos", KEEL_FLOAT, 2, (int64_t[]){4, 2}), s2 = tv_new("sin", KEEL_FLOAT, 2, (int64_t[]){4, 2});
  tv pos = tv_new("pos", KEEL_INT64, 2, (int64_t[]){1, 3});
  pos.v[1] = 9; /* outside the cache */
  tv in2[4] = {x, c2, s2, pos};
  oc_fails("", "RotaryEmbedding", 23, in2, 4, "Y", NULL, KEEL_ERR_SHAPE);
  attr odd[] = {{"rotary_embedding_dim", 'i', 3, 0, NULL}, {0}};
  oc_fails("", "RotaryEmbedding", 23, in2, 3, "Y", odd, KEEL_ERR_INVALID_MODEL);
  tv w = tv_new("scale", KEEL_FLOAT, 1, (int64_t[]){3}); /* 4 normalized values */
  tv rin[2] = {x, w};
  oc_fails("", "RMSNormalization", 23, rin, 2, "Y", NULL, KEEL_ERR_SHAPE);
  tv b = tv_new("B", KEEL_FLOAT, 4, (int64_t[]){1, 2, 3, 5});
  tv gin[2] = {x, b};
  oc_fails("", "SwiGLU", 28, gin, 2, "Y", NULL, KEEL_ERR_SHAPE);
  attr bad[] = {{"approximate", 's', 0, 0, "erf"}, {0}};
  oc_fails("", "Gelu", 20, gin, 1, "Y", bad, KEEL_ERR_INVALID_MODEL);
  tv *all[] = {&x, &c, &s, &c2, &s2, &pos, &w, &b};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

/* Empty inputs give empty outputs (no reads through NULL data). */
static void empty_cases(void) {
  tv x = tv_new("X", KEEL_FLOAT16, 2, (int64_t[]){0, 4}), w = tv_new("scale", KEEL_FLOAT16, 1, (int64_t[]){4});
  tv y = tv_new("Y", KEEL_FLOAT16, 2, (int64_t[]){0, 4});
  tv rin[2] = {x, w};
  oc_check("", "RMSNormalization", 23, rin, 2, "Y", NULL, &y, 1, 0);
  tv a = tv_new("A", KEEL_FLOAT, 3, (int64_t[]){2, 0, 3}), b = tv_new("B", KEEL_FLOAT, 3, (int64_t[]){2, 0, 3});
  tv ya = tv_new("Y", KEEL_FLOAT, 3, (int64_t[]){2, 0, 3});
  tv gin[2] = {a, b};
  oc_check("", "SwiGLU", 28, gin, 2, "Y", NULL, &ya, 1, 0);
  oc_check("", "Gelu", 20, gin, 1, "Y", NULL, &ya, 1, 0);
  tv *all[] = {&x, &w, &y, &a, &b, &ya};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tv_free(all[i]);
}

int main(void) {
  for (int i = 0; i < 300; i++) rms_case();
  for (int i = 0; i < 300; i++) rope_case();
  for (int i = 0; i < 300; i++) act_case();
  error_cases();
  empty_cases();
  return check_report();
}
