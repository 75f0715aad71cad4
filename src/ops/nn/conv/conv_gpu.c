/* conv_gpu.c: Conv and ConvTranspose on a device (device/dev_conv.h), for
 * the nodes the place pass put there (passes/pass_place.c, gpu_takes_conv:
 * float32 X of rank 3 or 4, W and B float32, a fused activation the
 * device has; none for ConvTranspose).
 *
 * The geometry is the CPU kernel's (conv.c, conv_setup and conv_float):
 * W's kernel checked against kernel_shape, the channels against group,
 * pads, strides, dilations and auto_pad through keel_win_read and
 * keel_win_forward, so the output shape and the errors are the same. A
 * 1-D Conv runs as a 2-D one of height 1. The fused activation
 * (keel.activation, ops/common/activation.h) is applied by the kernel,
 * after the bias. */
#include "ops/nn/conv/conv_gpu.h"

#include "base/status.h"
#include "device/dev_conv.h"
#include "ops/common/activation.h"
#include "ops/common/conv_util.h"

/* activation.h's kind as the device's (dev_conv.h); false for one the
 * device does not have (the Gelus: the place pass keeps those on the CPU) */
static bool dev_act(const keel_act *a, int32_t *kind) {
  switch (a->kind) {
    case KEEL_ACT_NONE: *kind = KEEL_DEV_ACT_NONE; return true;
    case KEEL_ACT_RELU: *kind = KEEL_DEV_ACT_RELU; return true;
    case KEEL_ACT_LEAKY: *kind = KEEL_DEV_ACT_LEAKY; return true;
    case KEEL_ACT_CLIP: *kind = KEEL_DEV_ACT_CLIP; return true;
    case KEEL_ACT_HSIGMOID: *kind = KEEL_DEV_ACT_HSIGMOID; return true;
    case KEEL_ACT_HSWISH: *kind = KEEL_DEV_ACT_HSWISH; return true;
    case KEEL_ACT_SIGMOID: *kind = KEEL_DEV_ACT_SIGMOID; return true;
    case KEEL_ACT_TANH: *kind = KEEL_DEV_ACT_TANH; return true;
    case KEEL_ACT_SILU: *kind = KEEL_DEV_ACT_SILU; return true;
    case KEEL_ACT_HSIGMOID_MUL: *kind = KEEL_DEV_ACT_HSIGMOID_MUL; return true;
    default: return false;
  }
}

/* The window of a 1-D or 2-D keel_win as the device's 2-D one. */
static keel_dev_win2 win2_of(const keel_win *w) {
  int o = w->nd == 2 ? 1 : 0; /* the width's index */
  keel_dev_win2 v = {.ih = 1, .oh = 1, .kh = 1, .sh = 1, .dh = 1};
  if (w->nd == 2)
    v.ih = w->in[0], v.oh = w->out[0], v.kh = w->k[0], v.sh = w->s[0], v.dh = w->d[0],
    v.ph = w->pb[0], v.peh = w->pe[0];
  v.iw = w->in[o], v.ow = w->out[o], v.kw = w->k[o], v.sw = w->s[o], v.dw = w->d[o];
  v.pw = w->pb[o], v.pew = w->pe[o];
  return v;
}

keel_dev_win2 keel_gpu_win2(const keel_win *w) { return win2_of(w); }

/* Conv, or ConvTranspose (tr: W (C, M / group, k...), the window the
 * adjoint one, keel_win_transposed's output size and pads). */
static keel_status gpu_conv_any(keel_kctx *k, bool tr) {
  const char *op = tr ? "ConvTranspose" : "Conv";
  const keel_tensor *x, *wt, *b;
  KEEL_TRY(keel_k_in(k, 0, &x));
  KEEL_TRY(keel_k_in(k, 1, &wt));
  KEEL_TRY(keel_k_in_opt(k, 2, &b));
  if (x->dtype != KEEL_FLOAT || wt->dtype != KEEL_FLOAT || (b && b->dtype != KEEL_FLOAT))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: float32 X, W and B only", op);
  if (x->rank != 3 && x->rank != 4)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: 1-D and 2-D convolutions only, X has rank %d", op,
                    x->rank);
  if (wt->rank != x->rank)
    return keel_err(KEEL_ERR_SHAPE, "W has rank %d but X has rank %d", wt->rank, x->rank);
  keel_dev_conv2 g = {.n = x->shape[0], .c = x->shape[1], .m = wt->shape[0]};
  g.group = keel_k_attr_i(k, "group", 1);
  if (g.group < 1 || g.group > INT32_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL, "group %lld is out of range", (long long)g.group);
  if (tr) { /* W (C, M / group, k...) */
    if (wt->shape[0] != g.c)
      return keel_err(KEEL_ERR_SHAPE, "X has %lld channels but W has %lld", (long long)g.c,
                      (long long)wt->shape[0]);
    if (g.c % g.group)
      return keel_err(KEEL_ERR_SHAPE, "X has %lld channels, not a multiple of group %lld",
                      (long long)g.c, (long long)g.group);
    if (keel_mul64_ovf(wt->shape[1], g.group, &g.m))
      return keel_err(KEEL_ERR_SHAPE, "output channels overflow");
  } else if (wt->shape[1] * g.group != g.c) {
    return keel_err(KEEL_ERR_SHAPE, "X has %lld channels, W expects %lld per group x group %lld",
                    (long long)g.c, (long long)wt->shape[1], (long long)g.group);
  }
  if (g.m % g.group)
    return keel_err(KEEL_ERR_SHAPE, "W has %lld output channels, not a multiple of group %lld",
                    (long long)g.m, (long long)g.group);
  keel_win w = {.nd = x->rank - 2};
  int nk;
  const int64_t *ks = keel_k_attr_ints(k, "kernel_shape", &nk);
  if (nk && nk != w.nd)
    return keel_err(KEEL_ERR_INVALID_MODEL, "kernel_shape has %d values for %d spatial dims", nk, w.nd);
  for (int i = 0; i < w.nd; i++) {
    w.in[i] = x->shape[i + 2], w.k[i] = wt->shape[i + 2];
    if (w.k[i] < 1 || w.k[i] > KEEL_WIN_ATTR_MAX)
      return keel_err(KEEL_ERR_SHAPE, "W's kernel dim %d is %lld", i, (long long)w.k[i]);
    if (nk && ks[i] != w.k[i])
      return keel_err(KEEL_ERR_INVALID_MODEL, "kernel_shape[%d] = %lld but W's kernel has %lld", i,
                      (long long)ks[i], (long long)w.k[i]);
  }
  KEEL_TRY(keel_win_read(k, &w));
  KEEL_TRY(tr ? keel_win_transposed(k, &w) : keel_win_forward(&w, false));
  if (b && (b->rank != 1 || b->shape[0] != g.m))
    return keel_err(KEEL_ERR_SHAPE, "B has %lld values, expected %lld", (long long)keel_tensor_numel(b),
                    (long long)g.m);
  keel_act a;
  KEEL_TRY(keel_act_of(k->node, &a));
  if (!dev_act(&a, &g.act))
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU %s: fused activation %d is not on the device", op,
                    (int)a.kind);
  if (tr && a.kind != KEEL_ACT_NONE)
    return keel_err(KEEL_ERR_UNSUPPORTED, "GPU ConvTranspose: no fused activation on the device");
  g.act_a = a.a, g.act_b = a.b;
  g.w = win2_of(&w);
  int64_t shape[4] = {g.n, g.m, w.out[0], w.out[1]};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank, shape, &y));
  if (!keel_tensor_numel(y)) return KEEL_OK;
  if (!k->dev || !k->dev->conv)
    return keel_err(KEEL_ERR_UNSUPPORTED, "%s: %s has no conv kernels", op,
                    k->dev ? k->dev->name : "no device");
  return (tr ? k->dev->conv->conv_transpose2d : k->dev->conv->conv2d)(
      k->dev, &g, x->data, wt->data, b ? b->data : NULL, y->data);
}

static keel_status gpu_conv(keel_kctx *k) { return gpu_conv_any(k, false); }
static keel_status gpu_conv_transpose(keel_kctx *k) { return gpu_conv_any(k, true); }

const keel_impl keel_gpu_conv = {
    "gpu", keel_prep_on_gpu, NULL, NULL, gpu_conv,
    "placed on the GPU (float32, 1-D or 2-D; direct convolution)", KEEL_NODE_GPU};
static const keel_impl gpu_conv_transpose_impl = {
    "gpu", keel_prep_on_gpu, NULL, NULL, gpu_conv_transpose,
    "placed on the GPU (float32, 1-D or 2-D; direct transposed convolution)", KEEL_NODE_GPU};
const keel_impl *const keel_gpu_conv_transpose_impls[] = {&gpu_conv_transpose_impl, NULL};
