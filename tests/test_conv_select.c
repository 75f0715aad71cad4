/* test_conv_select.c: the convolutions' selection (src/ops/nn/conv/select.c).
 *
 * keel_conv_select_path on the shapes each rule was written for (ResNet-50's
 * and MobileNet's layers), on a first run and on later shapes of a node
 * that already chose; keel_conv_layout_nhwc's answers. The kernels that
 * need AVX-512 (streamed, keel's Winograd) are expected exactly where this
 * CPU has it, so the test passes on any x86 CPU and checks the other
 * branch of each rule there.
 */
#include <string.h>

#include "check.h"
#include "ops/common/gemv.h"
#include "ops/dnnl/dnnl_glue.h"
#include "ops/nn/conv/select.h"

static bool avx512(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

/* n images of c channels, h x w, into m channels by a k x k window of
 * stride s and pads k/2 (same size at stride 1), one group. */
static keel_nhwc_geom geom(int64_t n, int64_t c, int64_t m, int64_t h, int64_t w, int64_t k,
                           int64_t s) {
  keel_nhwc_geom g;
  memset(&g, 0, sizeof g);
  g.w.nd = 2;
  int64_t in[2] = {h, w};
  for (int i = 0; i < 2; i++) {
    g.w.in[i] = in[i], g.w.k[i] = k, g.w.s[i] = s, g.w.d[i] = 1;
    g.w.pb[i] = g.w.pe[i] = k / 2;
    g.w.out[i] = (in[i] + 2 * (k / 2) - k) / s + 1;
  }
  g.w.in_size = h * w, g.w.out_size = g.w.out[0] * g.w.out[1], g.w.k_size = k * k;
  g.n = n, g.c = c, g.m = m, g.group = 1, g.cg = c, g.mg = m;
  return g;
}

static keel_conv_facts facts(const keel_nhwc_geom *g, bool wino, int threads) {
  return (keel_conv_facts){g, g->w.k[0], g->w.k[1], 1, g->m, false, false, wino, threads};
}

static void check_paths(void) {
  bool fast = avx512();
  /* ResNet-50's 64-channel 3x3 on 56x56: oneDNN's Winograd where the node
   * kept its state, else bands (56 rows split evenly over 2 threads) */
  keel_nhwc_geom g = geom(1, 64, 64, 56, 56, 3, 1);
  keel_conv_facts f = facts(&g, true, 2);
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == KEEL_CONV_DNNL_WINO);
  f.dnnl_wino = false;
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == KEEL_CONV_BANDS);
  /* ... and a node that chose bands keeps them, Winograd or not */
  f.dnnl_wino = true;
  CHECK(keel_conv_select_path(KEEL_CONV_BANDS, &f) == KEEL_CONV_BANDS);
  /* a residual or a broadcasting Z rules oneDNN's Winograd out */
  f.has_z = true;
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == KEEL_CONV_BANDS);
  f.has_z = false, f.bare = true;
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == KEEL_CONV_BANDS);

  /* 256 channels on 14x14: keel's Winograd on AVX-512 or AVX2+FMA (the
   * overlap of the two Winograd rules goes to keel's), else oneDNN's */
  g = geom(1, 256, 256, 14, 14, 3, 1);
  f = facts(&g, true, 2);
  bool wg_isa = fast || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == (wg_isa ? KEEL_CONV_WG : KEEL_CONV_DNNL_WINO));
  CHECK(keel_conv_dnnl_wino_fits(&g, false) && !keel_conv_dnnl_wino_fits(&g, true));

  /* 512 -> 512 3x3 on 7x7 (W 9.4 MB, 49 pixels): streamed on AVX-512;
   * else windows as rows on oneDNN's matmul */
  g = geom(1, 512, 512, 7, 7, 3, 1);
  f = facts(&g, true, 2);
  keel_conv_path first = keel_conv_select_path(KEEL_CONV_UNDECIDED, &f);
  CHECK(first == (fast ? KEEL_CONV_STREAM : KEEL_CONV_LOWERED));
  CHECK(!keel_conv_dnnl_wino_fits(&g, false)); /* 7x7: fewer than 14x14 outputs */
  /* a later, larger shape of that node stays on the path chosen */
  keel_nhwc_geom big = geom(4, 512, 512, 28, 28, 3, 1);
  keel_conv_facts fb = facts(&big, true, 2);
  CHECK(keel_conv_select_path(first, &fb) == first);
  f.splits = 8;
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == (fast ? KEEL_CONV_STREAM : KEEL_CONV_LOWERED));
  /* channel parts (where neither takes it) need 2-4 threads and a batch of one */
  CHECK(keel_conv_oc_parts_win(&f) == false);
  f.splits = 2;
  CHECK(keel_conv_oc_parts_win(&f));
  f.splits = 2;
  g.n = 2;
  CHECK(!keel_conv_oc_parts_win(&f));

  /* windows as rows (without AVX-512): deep strided KxK convs and those
   * on 7x7 maps or less; not 64 channels, 1x1, groups, NCHW edges, or a
   * 3x3 stride 1 on a larger map */
  g = geom(1, 128, 128, 56, 56, 3, 2);
  f = facts(&g, false, 1);
  CHECK(keel_conv_lowered_fits(&f) == !fast);
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == (fast ? KEEL_CONV_BANDS : KEEL_CONV_LOWERED));
  g.in_nchw = true;
  CHECK(!keel_conv_lowered_fits(&f));
  g = geom(1, 64, 64, 56, 56, 3, 2);
  f = facts(&g, false, 1);
  CHECK(!keel_conv_lowered_fits(&f));
  g = geom(1, 256, 256, 14, 14, 1, 2);
  f = facts(&g, false, 1);
  CHECK(!keel_conv_lowered_fits(&f));
  g = geom(1, 256, 256, 14, 14, 3, 1);
  f = facts(&g, false, 1);
  CHECK(!keel_conv_lowered_fits(&f));
  g = geom(1, 256, 256, 7, 7, 3, 1);
  f = facts(&g, true, 1);
  CHECK(keel_conv_lowered_fits(&f) == !fast);
  /* a node on this path keeps it for a larger shape, Winograd state or not */
  keel_nhwc_geom big2 = geom(2, 256, 256, 28, 28, 3, 1);
  keel_conv_facts fb2 = facts(&big2, true, 1);
  CHECK(keel_conv_select_path(KEEL_CONV_LOWERED, &fb2) == KEEL_CONV_LOWERED);
  f.group = 2;
  CHECK(!keel_conv_lowered_fits(&f));

  /* on AVX-512 at one thread, 1x1 convs on at most 256 pixels with 128+
   * channels both ways and W of at most 1 MiB: EfficientNet's 7x7 192 ->
   * 1152; not at 2 threads, not SqueezeNet's 13x13 64 -> 256 (few input
   * channels) or its 512 -> 1000 classifier (W 2 MB), not 28x28 */
  g = geom(1, 192, 1152, 7, 7, 1, 1);
  f = facts(&g, false, 1);
  CHECK(keel_conv_pointwise_mm_fits(&f) == fast);
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == (fast ? KEEL_CONV_LOWERED : KEEL_CONV_BANDS));
  f.splits = 2;
  CHECK(!keel_conv_pointwise_mm_fits(&f));
  g = geom(1, 64, 256, 13, 13, 1, 1);
  f = facts(&g, false, 1);
  CHECK(!keel_conv_pointwise_mm_fits(&f));
  g = geom(1, 512, 1000, 13, 13, 1, 1);
  f = facts(&g, false, 1);
  CHECK(!keel_conv_pointwise_mm_fits(&f));
  g = geom(1, 256, 256, 28, 28, 1, 1);
  f = facts(&g, false, 1);
  CHECK(!keel_conv_pointwise_mm_fits(&f));
  g = geom(1, 208, 208, 14, 14, 1, 1); /* W 173 KB: under 512 KiB */
  f = facts(&g, false, 1);
  CHECK(!keel_conv_pointwise_mm_fits(&f));
  g = geom(1, 1024, 256, 14, 14, 1, 1); /* ResNet-50's, W exactly 1 MiB */
  f = facts(&g, false, 1);
  CHECK(keel_conv_pointwise_mm_fits(&f) == fast);

  /* a squeeze-excite block's 1x1 on a pooled 1x1 map: the product by W
   * where keel_gemv has its vector kernel; a later larger shape of that
   * node goes to oneDNN's bands */
  g = geom(1, 72, 24, 1, 1, 1, 1);
  f = facts(&g, false, 2);
  bool gemv = keel_gemv_fast();
  CHECK(keel_conv_gemv_fits(&f) == gemv);
  CHECK(keel_conv_select_path(KEEL_CONV_UNDECIDED, &f) == (gemv ? KEEL_CONV_GEMV : KEEL_CONV_BANDS));
  if (gemv) {
    keel_nhwc_geom g2 = geom(1, 72, 24, 1, 1, 1, 1);
    keel_conv_facts f2 = facts(&g2, false, 2);
    CHECK(keel_conv_select_path(KEEL_CONV_GEMV, &f2) == KEEL_CONV_GEMV);
    g2 = geom(1, 72, 24, 8, 8, 1, 1);
    f2 = facts(&g2, false, 2);
    CHECK(keel_conv_select_path(KEEL_CONV_GEMV, &f2) == KEEL_CONV_BANDS);
  }
  CHECK(!strcmp(keel_conv_path_name(KEEL_CONV_STREAM), "streamed"));
}

static bool wg_isa(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return avx512() || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
  return false;
#endif
}

static void check_layout(void) {
  static float wf[8 * 4 * 3 * 3];
  keel_tensor w = {.dtype = KEEL_FLOAT, .rank = 4, .shape = {8, 4, 3, 3}, .data = wf};
  keel_node n;
  memset(&n, 0, sizeof n);
  n.op_type = "Conv", n.domain = "";
  const char *why = NULL;
  const int64_t big[2] = {28, 28}, small[2] = {7, 7};
  CHECK(keel_conv_layout_nhwc(&n, &w, false, NULL, &why) == keel_dnnl_available());
  CHECK(why && why[0]);
  CHECK(!keel_conv_layout_nhwc(&n, &w, true, big, &why));
  CHECK(strstr(why, "oneDNN") != NULL);
  keel_tensor d = w;
  d.dtype = KEEL_DOUBLE;
  CHECK(!keel_conv_layout_nhwc(&n, &d, false, NULL, &why));
  CHECK(!keel_conv_layout_nhwc(&n, NULL, false, NULL, &why));
  /* without oneDNN: channels-last only where keel's Winograd kernel takes
   * the conv (3x3, stride 1, 128+ channels by 16s, outputs by 64s) and the
   * output is 14x14 or more */
  static float wb[128 * 128 * 9];
  keel_tensor w128 = {.dtype = KEEL_FLOAT, .rank = 4, .shape = {128, 128, 3, 3}, .data = wb};
  int64_t pads[4] = {1, 1, 1, 1};
  keel_attr pa = {.name = "pads", .type = KEEL_ATTR_INTS, .n = 4, .ints = pads};
  n.attrs = &pa, n.n_attr = 1;
  CHECK(keel_conv_layout_nhwc(&n, &w128, true, big, &why) == wg_isa());
  CHECK(strstr(why, wg_isa() ? "Winograd kernel, channels-last" : "does not take it"));
  CHECK(!keel_conv_layout_nhwc(&n, &w128, true, small, &why));
  CHECK(!keel_conv_layout_nhwc(&n, &w128, true, NULL, &why));
  keel_tensor w64 = w128;
  w64.shape[1] = 64;
  CHECK(!keel_conv_layout_nhwc(&n, &w64, true, big, &why));
  int64_t strides[2] = {2, 2};
  keel_attr two[2] = {pa, {.name = "strides", .type = KEEL_ATTR_INTS, .n = 2, .ints = strides}};
  n.attrs = two, n.n_attr = 2;
  CHECK(!keel_conv_layout_nhwc(&n, &w128, true, (const int64_t[]){56, 56}, &why));
  CHECK(keel_conv_layout_wants_size(true));
  CHECK(keel_conv_layout_wants_size(false) == !keel_dnnl_available());
  CHECK(!keel_conv_takes_edges(true));
  CHECK(keel_conv_takes_edges(false) == keel_dnnl_available());
}

int main(void) {
  check_paths();
  check_layout();
  return check_report();
}
