#!/usr/bin/python3
"""gen_exporters.py: the held-out model set (issue 24), in the styles of
exporters other than the one gen.py uses, so that keel's passes and speed
are judged on graphs nobody here shaped.

    /usr/bin/python3 bench/models/gen_exporters.py [OUT_DIR] [--only NAME,...]

OUT_DIR (default build/bench-models) gets NAME/model.onnx and
NAME/test_data_set_0/input_K.pb, plus output_K.pb where PyTorch made the
model (its own results). Weights are random and seeded.

PyTorch's TorchScript exporter (torch 1.13, Debian), several opsets, some
with dynamic axes:
  x_squeezenet_o9    torchvision SqueezeNet 1.1, opset 9 (MaxPool ceil_mode,
                     Concat, Dropout left out by eval)
  x_shufflenet_o11   torchvision ShuffleNetV2 x1.0, opset 11 (channel
                     shuffle as Reshape/Transpose/Reshape, Split)
  x_efficientnet_o13 torchvision EfficientNet-B0, opset 13 (SiLU as
                     Sigmoid + Mul, squeeze-excite)
  x_regnet_o17       torchvision RegNetX-400MF, opset 17 (grouped convs)
  x_vit_o14          a small ViT (patch 16, dim 192, 4 layers, 3 heads) on
                     224x224, opset 14, nn.MultiheadAttention as exported
  x_gpt_dyn_o17      a GPT whose causal mask comes from the input length
                     (torch.triu over torch.full((T, T), -inf)), dynamic
                     batch and length, LayerNormalization op (opset 17)
  x_bert_dyn_o11     a BERT with dynamic batch and length at opset 11
                     (Unsqueeze with attributes, LayerNorm spelled out)
  x_gru_o9           a small recurrent model run many times a second: GRU
                     (input 40, hidden 128) over 20 steps + a linear head,
                     opset 9
  x_conv1d_o13       a 1-D conv audio classifier (Conv1d + BN + ReLU stacks,
                     global average, linear), 1x40x400, opset 13
onnx.version_converter:
  x_bert_vc17        gen.py's BERT exported at opset 11, converted to 17
                     (the newest this onnx, 1.12, converts to: Unsqueeze,
                     Squeeze and Split take their axes as inputs)
onnx.helper, following tf2onnx:
  x_tf_mobilenet     NHWC input 1x224x224x3 and a Transpose to NCHW, Conv
                     with bias (BatchNormalization already folded), Relu6 as
                     Clip(0, 6), explicit Pad before each stride-2 conv
                     ('SAME'), depthwise convs, ReduceMean head, MatMul + Add,
                     Softmax (opset 13)
onnx.helper, following paddle2onnx (Constant-node weights, BN separate):
  x_paddle_det       a DB-style text detector, 1x3x320x320: conv/BN/relu
                     backbone, an FPN with Resize (nearest, scales) and
                     Concat, ConvTranspose x2 and Sigmoid (opset 11)
  x_paddle_crnn      a CRNN text recognizer, 1x3x32x320: conv backbone,
                     Squeeze of the height, Transpose to [T, N, C], a
                     bidirectional LSTM (hidden 96), MatMul + Add, Softmax
                     (opset 11)
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, helper, numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402  (write_pb, randomize_bn, the transformer blocks)

SEED = 2424
rng = np.random.default_rng(SEED)


# ------------------------------------------------------- PyTorch models

class DynCausalAttention(gen.Attention):
    """GPT attention with the mask PyTorch users write from the length."""

    def __init__(self, d, heads):
        super().__init__(d, heads, False)

    def forward(self, x, mask_add=None):
        t = x.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        return super().forward(x, mask)


class DynGPT(gen.GPT):
    def __init__(self):
        super().__init__()
        for b in self.blocks:
            b.att = DynCausalAttention(256, 4)


class ViT(nn.Module):
    def __init__(self, d=192, heads=3, layers=4, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, d, 16, 16)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 197, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.enc(x))[:, 0])


class SmallGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(40, 128)
        self.fc = nn.Linear(128, 16)

    def forward(self, x, h0):
        y, h = self.gru(x, h0)
        return self.fc(y[-1]), h


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [], 40
        for cout, k, s in [(64, 5, 2), (64, 3, 1), (128, 3, 2), (128, 3, 1), (256, 3, 2)]:
            layers += [nn.Conv1d(c, cout, k, s, k // 2, bias=False), nn.BatchNorm1d(cout), nn.ReLU()]
            c = cout
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(c, 12)

    def forward(self, x):
        return self.fc(self.body(x).mean(2))


def torch_models():
    img = lambda h: torch.randn(1, 3, h, h)
    tv = torchvision.models
    yield "x_squeezenet_o9", lambda: tv.squeezenet1_1(weights=None), lambda: (img(224),), \
        ["input"], ["logits"], 9, None
    yield "x_shufflenet_o11", lambda: tv.shufflenet_v2_x1_0(weights=None), lambda: (img(224),), \
        ["input"], ["logits"], 11, None
    yield "x_efficientnet_o13", lambda: tv.efficientnet_b0(weights=None), lambda: (img(224),), \
        ["input"], ["logits"], 13, None
    yield "x_regnet_o17", lambda: tv.regnet_x_400mf(weights=None), lambda: (img(224),), \
        ["input"], ["logits"], 17, None
    yield "x_vit_o14", ViT, lambda: (img(224),), ["input"], ["logits"], 14, None
    yield "x_gpt_dyn_o17", DynGPT, lambda: (torch.randint(0, 2048, (1, 128)),), ["input_ids"], \
        ["logits"], 17, {"input_ids": {0: "batch", 1: "T"}, "logits": {0: "batch", 1: "T"}}

    def bert_inputs():
        ids = torch.randint(0, 8192, (1, 128))
        mask = torch.ones(1, 128, dtype=torch.int64)
        mask[:, 100:] = 0
        return ids, mask
    dyn = {"input_ids": {0: "batch", 1: "T"}, "attention_mask": {0: "batch", 1: "T"},
           "hidden": {0: "batch", 1: "T"}, "pooled": {0: "batch"}}
    yield "x_bert_dyn_o11", gen.BERT, bert_inputs, ["input_ids", "attention_mask"], \
        ["hidden", "pooled"], 11, dyn
    yield "x_gru_o9", SmallGRU, lambda: (torch.randn(20, 1, 40), torch.zeros(1, 1, 128)), \
        ["x", "h0"], ["y", "h"], 9, None
    yield "x_conv1d_o13", Conv1dNet, lambda: (torch.randn(1, 40, 400),), ["features"], \
        ["logits"], 13, None
    yield "x_bert_vc17", gen.BERT, bert_inputs, ["input_ids", "attention_mask"], \
        ["hidden", "pooled"], 11, "convert:17"


def data_dir(out_dir, name):
    ds = os.path.join(out_dir, name, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    return os.path.join(out_dir, name), ds


def export_torch(name, make, inputs, in_names, out_names, opset, dyn, out_dir):
    torch.manual_seed(SEED)
    model = make()
    gen.randomize_bn(model)
    model.eval()
    torch.manual_seed(SEED + 2)
    args = inputs()
    d, ds = data_dir(out_dir, name)
    path = os.path.join(d, "model.onnx")
    convert = isinstance(dyn, str)
    with torch.no_grad():
        outs = model(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.onnx.export(model, args, path, input_names=in_names, output_names=out_names,
                          opset_version=opset, do_constant_folding=True,
                          dynamic_axes=None if convert else dyn)
    m = onnx.load(path)
    if convert:
        m = onnx.version_converter.convert_version(m, int(dyn.split(":")[1]))
        onnx.save(m, path)
    onnx.checker.check_model(m)
    for i, (n, a) in enumerate(zip(in_names, args)):
        gen.write_pb(os.path.join(ds, f"input_{i}.pb"), n, a.numpy())
    for i, (n, o) in enumerate(zip(out_names, outs)):
        gen.write_pb(os.path.join(ds, f"output_{i}.pb"), n, o.numpy())
    return path, m.opset_import[0].version


# ------------------------------------------------- onnx.helper models

class Graph:
    """Nodes and weights, written in one exporter's style."""

    def __init__(self, constant_nodes):
        self.nodes, self.inits, self.n, self.cn = [], [], 0, constant_nodes

    def name(self, hint):
        self.n += 1
        return f"{hint}_{self.n}"

    def w(self, arr, hint="w", dtype=np.float32):
        out = self.name(hint)
        t = numpy_helper.from_array(np.asarray(arr, dtype=dtype), out)
        if self.cn:
            self.nodes.append(helper.make_node("Constant", [], [out], value=t))
        else:
            self.inits.append(t)
        return out

    def op(self, op, ins, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def save(self, name, out_dir, inputs, outputs, opset):
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                                 for n, s, _ in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="keel gen_exporters.py")
        m.ir_version = 7
        onnx.checker.check_model(m)
        d, ds = data_dir(out_dir, name)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        for i, (n, _, a) in enumerate(inputs):
            gen.write_pb(os.path.join(ds, f"input_{i}.pb"), n, a)
        return path, opset


def he(cout, cin, k):
    return rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))


def tf_mobilenet(out_dir):
    """tf2onnx: NHWC in, Transpose, conv+bias, Relu6 as Clip, explicit Pads."""
    g = Graph(False)
    lo, hi = g.w(0.0, "clip_min"), g.w(6.0, "clip_max")
    x = g.op("Transpose", ["input"], perm=[0, 3, 1, 2])

    def conv(x, cin, cout, k, s=1, group=1, act=True):
        if s == 2:  # TF 'SAME' on an even size: all of the padding after, as a Pad node
            extra = k - 2
            pads_l = g.w(np.array([0, 0, 0, 0, 0, 0, extra, extra], dtype=np.int64), "pads", np.int64)
            x = g.op("Pad", [x, pads_l], mode="constant")
            p = [0, 0, 0, 0]
        else:
            p = [k // 2] * 4
        y = g.op("Conv", [x, g.w(he(cout, cin // group, k)), g.w(rng.standard_normal(cout) * 0.05)],
                 kernel_shape=[k, k], strides=[s, s], pads=p, group=group, dilations=[1, 1])
        return g.op("Clip", [y, lo, hi]) if act else y

    x = conv(x, 3, 32, 3, 2)
    c = 32
    for cout, s, t in [(16, 1, 1), (24, 2, 6), (24, 1, 6), (32, 2, 6), (32, 1, 6), (64, 2, 6),
                       (64, 1, 6), (96, 1, 6), (160, 2, 6), (320, 1, 6)]:
        h = conv(x, c, c * t, 1) if t != 1 else x
        h = conv(h, c * t, c * t, 3, s, group=c * t)
        h = conv(h, c * t, cout, 1, act=False)
        x = g.op("Add", [x, h]) if s == 1 and c == cout else h
        c = cout
    x = conv(x, c, 1280, 1)
    x = g.op("ReduceMean", [x], axes=[2, 3], keepdims=0)
    x = g.op("MatMul", [x, g.w(rng.standard_normal((1280, 1000)) * 0.02)])
    x = g.op("Add", [x, g.w(rng.standard_normal(1000) * 0.01)])
    y = g.op("Softmax", [x], axis=-1)
    inp = rng.standard_normal((1, 224, 224, 3)).astype(np.float32)
    return g.save("x_tf_mobilenet", out_dir, [("input", [1, 224, 224, 3], inp)], [(y, [1, 1000])], 13)


def paddle_conv_bn(g, x, cin, cout, k, s=1, act="Relu"):
    y = g.op("Conv", [x, g.w(he(cout, cin, k))], kernel_shape=[k, k], strides=[s, s],
             pads=[k // 2] * 4, group=1, dilations=[1, 1])
    y = g.op("BatchNormalization", [y, g.w(rng.uniform(0.8, 1.2, cout)), g.w(rng.standard_normal(cout) * 0.1),
                                    g.w(rng.standard_normal(cout) * 0.1), g.w(rng.uniform(0.5, 1.5, cout))],
             epsilon=1e-5, momentum=0.9)
    return g.op(act, [y]) if act else y


def paddle_det(out_dir):
    """A DB-style detector as paddle2onnx writes it (opset 11)."""
    g = Graph(True)
    x, c, feats = "x", 3, []
    for cout, n in [(16, 1), (32, 2), (64, 2), (128, 2), (256, 2)]:
        x = paddle_conv_bn(g, x, c, cout, 3, 2)
        for _ in range(n - 1):
            x = paddle_conv_bn(g, x, cout, cout, 3)
        c = cout
        feats.append((x, cout))
    feats = feats[1:]  # strides 4, 8, 16, 32
    lat = [paddle_conv_bn(g, f, cf, 64, 1, act=None) for f, cf in feats]
    roi = g.w(np.zeros(0, np.float32), "roi")
    scales = g.w(np.array([1, 1, 2, 2], np.float32), "scales")
    up = lat[-1]
    outs = [up]
    for l in reversed(lat[:-1]):
        up = g.op("Add", [l, g.op("Resize", [up, roi, scales], mode="nearest",
                                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")])
        outs.append(up)
    outs = outs[::-1]  # strides 4, 8, 16, 32
    ups = []
    for i, o in enumerate(outs):
        o = paddle_conv_bn(g, o, 64, 16, 3, act=None)
        for _ in range(i):
            o = g.op("Resize", [o, roi, scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")
        ups.append(o)
    f = g.op("Concat", ups, axis=1)
    h = paddle_conv_bn(g, f, 64, 16, 3)
    h = g.op("ConvTranspose", [h, g.w(rng.standard_normal((16, 16, 2, 2)) * 0.2),
                               g.w(rng.standard_normal(16) * 0.05)], kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("Relu", [h])
    h = g.op("ConvTranspose", [h, g.w(rng.standard_normal((16, 1, 2, 2)) * 0.2), g.w(np.zeros(1))],
             kernel_shape=[2, 2], strides=[2, 2])
    y = g.op("Sigmoid", [h])
    inp = rng.standard_normal((1, 3, 320, 320)).astype(np.float32)
    return g.save("x_paddle_det", out_dir, [("x", [1, 3, 320, 320], inp)], [(y, [1, 1, 320, 320])], 11)


def paddle_crnn(out_dir):
    """A CRNN recognizer as paddle2onnx writes it (opset 11)."""
    g = Graph(True)
    x, c = "x", 3
    for cout, pool in [(32, (2, 2)), (64, (2, 2)), (128, (2, 1)), (256, (2, 1)), (256, (2, 1))]:
        x = paddle_conv_bn(g, x, c, cout, 3)
        x = g.op("MaxPool", [x], kernel_shape=list(pool), strides=list(pool), pads=[0, 0, 0, 0])
        c = cout
    x = g.op("Squeeze", [x], axes=[2])                     # [N, C, T]
    x = g.op("Transpose", [x], perm=[2, 0, 1])             # [T, N, C]
    hdim = 96
    W = g.w(rng.standard_normal((2, 4 * hdim, c)) * 0.05)
    R = g.w(rng.standard_normal((2, 4 * hdim, hdim)) * 0.05)
    B = g.w(rng.standard_normal((2, 8 * hdim)) * 0.05)
    y = g.op("LSTM", [x, W, R, B], hidden_size=hdim, direction="bidirectional")  # [T, 2, N, H]
    y = g.op("Transpose", [y], perm=[0, 2, 1, 3])          # [T, N, 2, H]
    shape = g.w(np.array([0, 0, 2 * hdim], np.int64), "shape", np.int64)
    y = g.op("Reshape", [y, shape])                        # [T, N, 2H]
    y = g.op("Transpose", [y], perm=[1, 0, 2])             # [N, T, 2H]
    y = g.op("MatMul", [y, g.w(rng.standard_normal((2 * hdim, 97)) * 0.05)])
    y = g.op("Add", [y, g.w(rng.standard_normal(97) * 0.01)])
    y = g.op("Softmax", [y], axis=2)
    inp = rng.standard_normal((1, 3, 32, 320)).astype(np.float32)
    return g.save("x_paddle_crnn", out_dir, [("x", [1, 3, 32, 320], inp)], [(y, [1, 80, 97])], 11)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default=os.path.join(HERE, "..", "..", "build", "bench-models"))
    ap.add_argument("--only", default="", help="comma-separated model names")
    a = ap.parse_args()
    out = os.path.normpath(a.out)
    only = set(filter(None, a.only.split(",")))
    torch.set_num_threads(1)
    jobs = [(s[0], lambda s=s: export_torch(*s, out)) for s in torch_models()]
    jobs += [(f.__name__.replace("tf_", "x_tf_").replace("paddle_", "x_paddle_"), lambda f=f: f(out))
             for f in (tf_mobilenet, paddle_det, paddle_crnn)]
    for name, job in jobs:
        if only and name not in only:
            continue
        path, opset = job()
        print(f"{name:20s} {os.path.getsize(path) / 1e6:7.1f} MB  opset {opset}  -> {os.path.dirname(path)}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
