/* test_gpu_attn.c: on a GPU, the kernels this work added against their
 * naive references on the emulated device:
 *   - the unary kernel (kernels/ew.cu, keel_ew_unary) for every op code of
 *     device.h's keel_dev_unop, with parameters, over 100003 values in
 *     [-20, 20] and edge values (+-0, tiny, +-inf, NaN), against emu.c's
 *     libm formulas: |gpu - emu| <= 1e-6 + 1e-5 |emu|, NaN where emu has
 *     NaN; each op's worst relative error (|emu| >= 1e-3) is printed;
 *   - the attn group's masked softmax (kernels/attn.cu through
 *     cuda_attn.c) against emu_attn.c: rows of 1, 37, 300 and 1000 keys,
 *     masks none, add, where, where_not, broadcast over heads, rows and
 *     keys, fills -inf and finite, fully masked rows (NaN), NaN scores.
 * Whole FusedAttention sessions on the GPU are test_device_attn's (run
 * with KEEL_TEST_DEVICE=cuda:0 by tools/gpu_check.sh). ctest label `gpu`;
 * without a GPU it says so and exits 77 (skipped). The pair of devices and
 * heaps are tests/gpupair.h's; the comparison here is its own (absolute
 * and relative bounds, infinities, the worst error printed). */
#include "device/dev_attn.h"
#include "gpupair.h"

/* gpupair.h's source, in [lo, hi) */
static float urand(float lo, float hi) { return lo + (hi - lo) * (frand() + 1.0f) * 0.5f; }

/* The two sides' n floats agree: |a - b| <= atol + rtol |b|, NaN where
 * the other is NaN, infinities equal. Returns the worst relative error
 * where |b| >= 1e-3. */
static double agree(const char *what, keel_block *const *y, int64_t n, double atol, double rtol) {
  float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
  CHECK_OK(keel_device_to_host(g_d[0], a, y[0]->ptr, (size_t)n * sizeof(float)));
  CHECK_OK(keel_device_to_host(g_d[1], b, y[1]->ptr, (size_t)n * sizeof(float)));
  double worst = 0, rel = 0;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    bool ok;
    if (isnan(a[i]) || isnan(b[i])) ok = isnan(a[i]) && isnan(b[i]);
    else if (isinf(a[i]) || isinf(b[i])) ok = a[i] == b[i];
    else {
      double d = fabs((double)a[i] - b[i]);
      ok = d <= atol + rtol * fabs((double)b[i]);
      worst = fmax(worst, d / (atol + rtol * fabs((double)b[i])));
      if (fabs(b[i]) >= 1e-3) rel = fmax(rel, d / fabs((double)b[i]));
    }
    if (!ok && first < 0) first = i;
    bad += !ok;
  }
  if (bad)
    fprintf(stderr, "  %s: %lld of %lld off (first at %lld: %.9g, want %.9g)\n", what, (long long)bad,
            (long long)n, (long long)first, a[first], b[first]);
  CHECK(bad == 0);
  free(a), free(b);
  return rel;
}

/* ---------------------------------------------------------- unary */

static void unary_ops(void) {
  enum { N = 100003 };
  static const char *const names[KEEL_DEV_UNOP_COUNT] = {
      "Relu", "Neg", "Abs", "Sqrt", "Exp", "Sigmoid", "Tanh", "Log", "Erf", "Gelu", "GeluTanh", "Reciprocal",
      "Floor", "Ceil", "Softplus", "LeakyRelu", "Elu", "HardSigmoid", "HardSwish", "Clip", "Cos", "Sin",
      "SiLU", "HardSigmoidMul"};
  static const float edges[] = {0.0f, -0.0f, 1e-7f, -1e-7f, 1e-3f, -1e-3f, 0.5f, -0.5f, 3.0f, -3.0f,
                                INFINITY, -INFINITY, NAN};
  float *x = malloc(sizeof(float) * N);
  for (int op = 0; op < KEEL_DEV_UNOP_COUNT; op++) {
    bool positive = op == KEEL_DEV_SQRT || op == KEEL_DEV_LOG;
    for (int i = 0; i < N; i++) x[i] = positive ? urand(1e-3f, 50.0f) : urand(-20.0f, 20.0f);
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) x[i] = positive ? fabsf(edges[i]) : edges[i];
    float a = 0, b = 0;
    if (op == KEEL_DEV_LEAKY || op == KEEL_DEV_ELU) a = 0.3f;
    if (op == KEEL_DEV_HSIGMOID || op == KEEL_DEV_HSIGMOID_MUL) a = 0.2f, b = 0.5f;
    if (op == KEEL_DEV_CLIP) a = -2.5f, b = 4.0f;
    keel_block *xb[2], *yb[2];
    for (int s = 0; s < 2; s++) {
      xb[s] = put(s, x, sizeof(float) * N), yb[s] = put(s, NULL, sizeof(float) * N);
      CHECK_OK(keel_device_unary_p(g_d[s], (keel_dev_unop)op, a, b, N, (float *)xb[s]->ptr, (float *)yb[s]->ptr));
    }
    double rel = agree(names[op], yb, N, 1e-6, 1e-5);
    fprintf(stderr, "unary %-15s worst relative error %.2e\n", names[op], rel);
    for (int s = 0; s < 2; s++) keel_heap_free(g_h[s], xb[s]), keel_heap_free(g_h[s], yb[s]);
  }
  free(x);
  /* an op code past the table is an error, not a launch */
  CHECK_STATUS(keel_device_unary_p(g_d[0], KEEL_DEV_UNOP_COUNT, 0, 0, 1, NULL, NULL), KEEL_ERR_INTERNAL);
}

/* ------------------------------------------------- masked softmax */

static void masked_softmax(void) {
  static const int64_t widths[] = {1, 37, 300, 1000};
  const int64_t H = 3, Sq = 5;
  for (int w = 0; w < 4; w++) {
    int64_t Skv = widths[w], n = H * Sq * Skv;
    float *s = malloc(sizeof(float) * (size_t)n), *madd = malloc(sizeof(float) * (size_t)n);
    uint8_t *mc = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
      s[i] = urand(-8.0f, 8.0f);
      int64_t row = i / Skv % Sq, j = i % Skv;
      madd[i] = row == 2 ? -INFINITY : j % 4 == 1 ? -INFINITY : urand(-2.0f, 2.0f);
      mc[i] = row == 3 ? 1 : (uint8_t)(urand(0, 1) < 0.3f);
    }
    if (Skv > 3) s[Skv + 2] = NAN; /* row 1 of head 0: NaN */
    for (int kind = 0; kind < 4; kind++)
      for (int form = 0; form < 4; form++) {
        /* strides: full [H, Sq, Skv]; [Sq, Skv] over heads; one value per
         * row ([H, Sq, 1]); full and causal (keys past the row's index) */
        keel_dev_mask m = {(keel_dev_mask_kind)kind, NULL, Sq * Skv, Skv, 1, form == 1 ? -INFINITY : -1e4f,
                           form == 3};
        if (form == 1) m.sh = 0;
        if (form == 2) m.sh = Sq, m.ss = 1, m.sk = 0;
        keel_block *sb[2], *mb[2];
        for (int s2 = 0; s2 < 2; s2++) {
          sb[s2] = put(s2, s, sizeof(float) * (size_t)n);
          mb[s2] = kind == KEEL_DEV_MASK_ADD ? put(s2, madd, sizeof(float) * (size_t)n) : put(s2, mc, (size_t)n);
          keel_dev_mask mm = m;
          mm.p = kind ? mb[s2]->ptr : NULL;
          CHECK_OK(g_d[s2]->attn->masked_softmax(g_d[s2], H, Sq, Skv, &mm, (float *)sb[s2]->ptr));
        }
        char what[96];
        snprintf(what, sizeof what, "masked softmax, %lld keys, kind %d, form %d", (long long)Skv, kind, form);
        agree(what, sb, n, 1e-6, 1e-5);
        for (int s2 = 0; s2 < 2; s2++) keel_heap_free(g_h[s2], sb[s2]), keel_heap_free(g_h[s2], mb[s2]);
      }
    free(s), free(madd), free(mc);
  }
}

int main(void) {
  g_seed = 2024;
  int rc = gpupair_open();
  if (rc) return rc;
  for (int s = 0; s < 2; s++) CHECK(g_d[s]->attn != NULL);
  unary_ops();
  masked_softmax();
  return gpupair_close();
}
