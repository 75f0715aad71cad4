/* select.c: which implementation runs a convolution, and why (select.h). */
#include "ops/nn/conv/select.h"

#include "ops/common/conv_util.h"
#include "ops/common/gemv.h"
#include "ops/dnnl/dnnl_glue.h"
#include "ops/nn/conv/cpu/conv_stream.h"
#include "ops/nn/conv/cpu/conv_wg.h"
#include "ops/nn/conv/conv_gpu.h"

/* The rules measured only without AVX-512 leave AVX-512 CPUs as they were. */
#if defined(__x86_64__) || defined(__i386__)
#define KEEL_CPU_AVX512() __builtin_cpu_supports("avx512f")
#else
#define KEEL_CPU_AVX512() 0
#endif

/* ============================================ 2. binding: the lists */

/* Conv, channels-first (what stays NCHW: oneDNN absent or disabled, or a
 * Conv the layout pass left): the depthwise kernel where group == C (one
 * plane at a time, W in registers), then the dense kernel for one group
 * (blocked products over a packed W); else the reference (im2col + GEMM),
 * which takes every case the op allows. A Conv placed on the GPU binds to
 * the device's (conv_gpu.c), the one GPU implementation. */
const keel_impl *const keel_conv_impls[] = {&keel_conv_dw, &keel_conv_dense, &keel_gpu_conv, NULL};

/* NhwcConv, channels-last. keel's kernels first, each for the narrow
 * shapes it wins on: 1-4 input channels (a stem: oneDNN's kernels vectorize
 * over input channels, which a stem does not have), 1x1 convolutions of
 * few input channels, depthwise 5x5; where no oneDNN runs, 3x3 convs of
 * 128+ channels on keel's Winograd kernel from binding; then oneDNN's,
 * which takes every other case and decides the rest on the first run
 * (section 3). */
#if KEEL_HAVE_DNNL
const keel_impl *const keel_nhwc_conv_impls[] = {&keel_conv_nhwc_stem, &keel_conv_nhwc_pw,
                                                 &keel_conv_nhwc_dw,   &keel_conv_nhwc_wg,
                                                 &keel_conv_nhwc_dnnl, NULL};
#else
const keel_impl *const keel_nhwc_conv_impls[] = {&keel_conv_nhwc_stem, &keel_conv_nhwc_pw,
                                                 &keel_conv_nhwc_dw, &keel_conv_nhwc_wg, NULL};
#endif

/* Whether oneDNN runs this session's convolutions: built in, usable on
 * this CPU (AVX2+FMA), not turned off (KEEL_NO_ONEDNN=1, or
 * KEEL_OPT_NO_ONEDNN: no_library). */
static bool library_runs(bool no_library) { return !no_library && keel_dnnl_available(); }

bool keel_conv_wg_at_binding(const keel_prep_ctx *p) {
  const keel_node *n = p->node;
  return !library_runs(p->no_library) && n->n_in > 1 && keel_wg_takes(n, p->consts[1]);
}

/* =========================================== 1. the layout decision */

bool keel_conv_layout_wants_size(bool no_library) { return !library_runs(no_library); }

bool keel_conv_layout_nhwc(const keel_node *n, const keel_tensor *w, bool no_library,
                           const int64_t *hw, const char **why) {
  if (!w || w->dtype != KEEL_FLOAT || w->rank != 4 || keel_tensor_numel(w) == 0) {
    *why = "not a 2-D float convolution by a constant W";
    return false;
  }
  if (library_runs(no_library)) {
    *why = "oneDNN present: channels-last";
    return true;
  }
  /* Without oneDNN the channels-last kernels are keel's own: a Conv goes
   * channels-last only where one of them takes it and wins, since each
   * such conv between NCHW neighbours costs two Transposes. Measured on
   * an AVX2 Zen 3 (no AVX-512): keel's Winograd against the NCHW
   * reference (im2col + OpenBLAS) on ResNet-50's 3x3 layers of 128 and
   * 256 channels (README, "Without oneDNN"). The AVX-512 kernels (stem,
   * pointwise, depthwise, streamed) were measured only beside oneDNN and
   * are not chosen without it. */
  if (!keel_wg_takes(n, w)) {
    *why = "oneDNN absent or disabled, and keel's Winograd kernel does not take it: NCHW";
    return false;
  }
  keel_win win;
  if (!hw || !keel_nhwc_node_win(n, 3, 3, &win)) {
    *why = "oneDNN absent or disabled, and the input's size is not known at load: NCHW";
    return false;
  }
  win.in[0] = hw[0], win.in[1] = hw[1];
  if (keel_win_forward(&win, false) || win.out[0] * win.out[1] < 14 * 14) {
    keel_err_clear();
    *why = "oneDNN absent or disabled, and the output is under 14x14: NCHW";
    return false;
  }
  *why = "oneDNN absent or disabled: keel's Winograd kernel, channels-last";
  return true;
}

bool keel_conv_takes_edges(bool no_library) { return library_runs(no_library); }

/* A 1-D conv audio classifier (bench/models/gen_exporters.py, x_conv1d_o13:
 * five Conv1d of 40-256 channels over 400 samples): 0.373 ms a run as 1-D
 * convs (im2col + oneDNN's sgemm), 0.243 ms as 2-D convs of height 1
 * channels-last on oneDNN's kernels (Intel Xeon, Emerald Rapids, one
 * thread, `keel bench`). keel's AVX-512 dense kernel (conv_dense.c) was
 * slower than either on those shapes. */
bool keel_conv_lift_1d(bool no_library) { return library_runs(no_library); }

/* SqueezeNet's fire modules (x_squeezenet_o9): each squeeze conv of the
 * Concat of the previous module's expand convs; YOLO C2f blocks (the
 * detector): a 1x1 conv of the Concat of its branches. Measured in
 * passes/pass_catconv.c's commit (README, "Threads, passes and faster
 * kernels"). */
bool keel_conv_split_concat(bool no_library) { return library_runs(no_library); }

/* oneDNN 2.6 has no channels-last AVX2 kernel for a strided 1x1 conv: its
 * generic direct kernel made ResNet-50's downsample convs at 21-33
 * GFLOP/s (1024 -> 2048 channels, 14x14 -> 7x7: 9.8 ms of a 105 ms run),
 * against 70-84 for its stride-1 1x1 kernel on the same layers' sizes
 * (AMD EPYC Zen 3, one thread, DNNL_VERBOSE's times in one run). A
 * subsample is a copy of 1 / (s0 s1) of the input. */
bool keel_conv_subsample_first(const keel_node *n, const keel_tensor *w, int64_t s[2]) {
  keel_win win;
  if (!w || w->rank != 4 || w->shape[2] != 1 || w->shape[3] != 1 ||
      !keel_nhwc_node_win(n, 1, 1, &win))
    return false;
  for (int i = 0; i < 2; i++)
    if (win.pb[i] || win.pe[i]) return false; /* with auto_pad a 1x1 window has none */
  s[0] = win.s[0], s[1] = win.s[1];
  return (s[0] > 1 || s[1] > 1) && !KEEL_CPU_AVX512();
}

/* ==================================== 3. the first run, in "onednn" */

bool keel_conv_gemv_fits(const keel_conv_facts *f) {
  const keel_nhwc_geom *g = f->g;
  const keel_win *w = &g->w;
  bool one = w->in[0] * w->in[1] == 1;
  return keel_win_is_pointwise(w) && f->group == 1 && (one || (!g->in_nchw && !g->out_nchw)) &&
         g->n * w->out[0] * w->out[1] <= KEEL_CONV_GEMV_PIXELS && keel_gemv_fast();
}

/* Output-channel parts instead of row bands: on a batch of one whose few
 * output rows split unevenly over the pool (ResNet-50's 7x7 layers: 4 and
 * 3 rows) and whose channels are many, each thread makes all rows of its
 * own channels, reading its part of W instead of all of it. Threads 2-4
 * (conv_dnnl.c keeps at most 4 primitives), one group, no residual,
 * channels-last both sides, rows fewer than 4 per thread and not a
 * multiple of the threads, at least 32 output channels per thread by 16s,
 * and not a small conv (which stays one band). */
bool keel_conv_oc_parts_win(const keel_conv_facts *f) {
  const keel_nhwc_geom *g = f->g;
  int64_t oh = g->w.out[0], t = f->splits;
  int64_t macs = oh * g->w.out[1] * g->m * g->cg * f->kh * f->kw;
  return t >= 2 && t <= 4 && g->n == 1 && f->group == 1 && !f->has_z && !g->in_nchw &&
         !g->out_nchw && oh % t != 0 && oh < 4 * t && f->m % 16 == 0 && f->m >= 32 * t &&
         macs >= KEEL_CONV_SMALL;
}

bool keel_conv_dnnl_wino_fits(const keel_nhwc_geom *g, bool has_z) {
  const keel_win *w = &g->w;
  for (int i = 0; i < 2; i++)
    if (w->k[i] != 3 || w->s[i] != 1 || w->d[i] != 1) return false;
  return !has_z && g->group == 1 && g->c % 16 == 0 && g->m % 16 == 0 && g->c >= 64 &&
         g->m >= 64 && w->out[0] * w->out[1] >= 14 * 14;
}

/* A 1x1 conv (stride 1, no pads) on few pixels and many channels both
 * ways is the product [P, C] x [C, M] of its pixels by W: on AVX-512 oneDNN
 * 2.6's matmul (gemm:jit, which it picks for a B whose rows are padded:
 * pack_lowered) made these faster than its brgconv_1x1: x_efficientnet_o13's
 * 7x7 expansions (192 -> 1152) 0.85, ResNet-50's 14x14 layers (1024 <-> 256)
 * 0.93-0.95, MobileNetV3's 7x7 960 <-> 160 0.89-0.94 of their time (one
 * thread, min of 30-60 runs of each node in alternating rounds, `keel run
 * --trace`): W of 0.5 to 1 MiB. With a smaller W (x_regnet_o17's 14x14
 * 208 -> 208, 1.05-1.14; MobileNetV2's 7x7 576 -> 160 and 14x14 64 -> 384,
 * SqueezeNet's 13x13 64 -> 256) or one past 1 MiB (SqueezeNet's
 * classifier, 512 -> 1000, which waits on W from memory) it was as fast
 * or slower. Work in one part only: cut into bands of rows for 2 threads
 * its products were 6-20% slower than oneDNN's convolution in bands
 * (x_regnet_o17's 14x14 and 7x7 layers). Intel Xeon (Emerald Rapids). */
#define PW_MM_MAX_PX 256
#define PW_MM_MIN_CH 128
#define PW_MM_MIN_W ((int64_t)1 << 19)
#define PW_MM_MAX_W ((int64_t)1 << 20)

bool keel_conv_pointwise_mm_fits(const keel_conv_facts *f) {
  const keel_nhwc_geom *g = f->g;
  const keel_win *w = &g->w;
  return f->splits == 1 && KEEL_CPU_AVX512() && f->group == 1 && keel_win_is_pointwise(w) &&
         !g->in_nchw &&
         !g->out_nchw && g->n * w->out[0] * w->out[1] <= PW_MM_MAX_PX && g->c >= PW_MM_MIN_CH &&
         f->m >= PW_MM_MIN_CH && f->m * g->c * (int64_t)sizeof(float) >= PW_MM_MIN_W &&
         f->m * g->c * (int64_t)sizeof(float) <= PW_MM_MAX_W;
}

/* oneDNN 2.6's AVX2 direct kernel (jit:avx2) made ResNet-50's strided 3x3
 * convs (128 and 256 channels) and its 512-channel 3x3 convs on 7x7 maps at
 * 57-63 GFLOP/s (3.7-4.1 ms each of a 85 ms run, `keel run --trace`); the
 * same products as one matrix each, [OH*OW, 9C] x [9C, M], ran at 78-93 on
 * its matmul (build/gemm_ld 784 1152 128, 196 2304 256, 49 4608 512), the
 * copy of the windows being a small part (a 9C row per pixel). AMD EPYC
 * Zen 3, one thread. Its 64-channel 3x3 convs on 56x56 ran at 89 direct
 * and stay there. */
bool keel_conv_lowered_fits(const keel_conv_facts *f) {
  const keel_nhwc_geom *g = f->g;
  const keel_win *w = &g->w;
  if (keel_conv_pointwise_mm_fits(f)) return true;
  if (KEEL_CPU_AVX512() || f->group != 1 || f->kh * f->kw < 2 || g->c < 128 ||
      g->in_nchw || g->out_nchw)
    return false;
  bool strided = w->s[0] > 1 || w->s[1] > 1;
  return strided || w->out[0] * w->out[1] <= 7 * 7;
}

/* In order:
 *  - the product by W (path 4) for a tiny pointwise conv, on the first
 *    run or on any later shape of a node that took it;
 *  - keel's streamed kernel (5) where W is large and the pixels few
 *    (ResNet-50's 7x7 layers: oneDNN's kernel waits on W from memory);
 *  - keel's Winograd (6) for 3x3 stride-1 convs of 128+ channels on 14x14
 *    or more; oneDNN's Winograd (2) for those of 64+ channels it leaves
 *    (the two rules overlap from 128 channels on: keel's measured faster
 *    there, conv_wg.h);
 *  - without AVX-512, windows as rows on oneDNN's matmul (7) for the deep
 *    strided or small-map KxK convs oneDNN's AVX2 direct kernel is slow on;
 *  - oneDNN's direct kernel in parts of output channels (3) where bands of
 *    rows would leave threads idle, else in bands (1). */
keel_conv_path keel_conv_select_path(keel_conv_path so_far, const keel_conv_facts *f) {
  const keel_nhwc_geom *g = f->g;
  bool first = so_far == KEEL_CONV_UNDECIDED;
  if ((first || so_far == KEEL_CONV_GEMV) && keel_conv_gemv_fits(f)) return KEEL_CONV_GEMV;
  if (so_far == KEEL_CONV_STREAM || (first && f->group == 1 && keel_stream_fits(g, f->kh, f->kw)))
    return KEEL_CONV_STREAM;
  if (so_far == KEEL_CONV_WG || (first && keel_wg_fits(g, f->kh, f->kw))) return KEEL_CONV_WG;
  if (f->dnnl_wino && so_far != KEEL_CONV_BANDS && so_far != KEEL_CONV_OC_PARTS &&
      so_far != KEEL_CONV_LOWERED && !f->bare &&
      !g->in_nchw && !g->out_nchw &&
      (so_far == KEEL_CONV_DNNL_WINO || keel_conv_dnnl_wino_fits(g, f->has_z)))
    return KEEL_CONV_DNNL_WINO;
  if (so_far == KEEL_CONV_LOWERED || (first && keel_conv_lowered_fits(f))) return KEEL_CONV_LOWERED;
  if (so_far == KEEL_CONV_OC_PARTS || (first && !f->bare && keel_conv_oc_parts_win(f)))
    return KEEL_CONV_OC_PARTS;
  return KEEL_CONV_BANDS;
}

const char *keel_conv_path_name(keel_conv_path p) {
  switch (p) {
    case KEEL_CONV_UNDECIDED: return "undecided";
    case KEEL_CONV_BANDS: return "onednn direct, bands of rows";
    case KEEL_CONV_DNNL_WINO: return "onednn winograd";
    case KEEL_CONV_OC_PARTS: return "onednn direct, parts of output channels";
    case KEEL_CONV_GEMV: return "product by W (gemv)";
    case KEEL_CONV_STREAM: return "streamed";
    case KEEL_CONV_WG: return "winograd";
    case KEEL_CONV_LOWERED: return "windows as rows, onednn matmul";
  }
  return "?";
}
