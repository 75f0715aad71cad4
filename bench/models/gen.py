#!/usr/bin/python3
"""gen.py: writes keel's benchmark model set, as a user would export it.

    /usr/bin/python3 bench/models/gen.py [OUT_DIR] [--only NAME,...]

For each model, OUT_DIR/NAME/ (default build/bench-models/) gets model.onnx
(torch.onnx.export, do_constant_folding=True) and test_data_set_0/ with
input_K.pb (random, seeded) and output_K.pb (PyTorch's own results, so
`keel test OUT_DIR/NAME` checks them). Weights are random and seeded; every
model is in eval mode. Needs torch 1.13 and torchvision 0.14 (Debian's
python3-torch, python3-torchvision) and onnx (python3-onnx).

The set (issue 8):
  mobilenet_v3   torchvision MobileNetV3-Large, 1x3x224x224: depthwise convs,
                 hardswish, squeeze-excite (opset 13)
  resnet50       torchvision ResNet-50, 1x3x224x224 (opset 13)
  detector       a small YOLO-like net at 1x3x640x640: Conv+BN+SiLU, CSP
                 blocks, an FPN with nearest Upsample (Resize) and Concat,
                 three heads (opset 13)
  gpt            a GPT-style causal decoder: 4 blocks, hidden 256, 4 heads,
                 sequence 128, vocabulary 2048; LayerNorm and GELU as
                 PyTorch 1.13 decomposes them at opset 14
  bert           a BERT-style encoder: 4 layers, hidden 256, 4 heads,
                 sequence 128, input_ids + attention_mask (opset 14)
  lstm           a small recurrent model meant to run many times a second:
                 one LSTM layer (input 64, hidden 128) over 16 steps and a
                 linear head (opset 13)
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SEED = 1234


# ------------------------------------------------------------ detector

class ConvBNAct(nn.Module):
    def __init__(self, cin, cout, k=3, s=1, act="silu"):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.SiLU() if act == "silu" else nn.Hardswish()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = ConvBNAct(c, c, 1)
        self.b = ConvBNAct(c, c, 3)

    def forward(self, x):
        return x + self.b(self.a(x))


class CSP(nn.Module):
    """Split in two 1x1 branches, bottlenecks on one, concat, 1x1."""

    def __init__(self, cin, cout, n=1, act="silu"):
        super().__init__()
        h = cout // 2
        self.a = ConvBNAct(cin, h, 1, act=act)
        self.b = ConvBNAct(cin, h, 1, act=act)
        self.m = nn.Sequential(*[Bottleneck(h) for _ in range(n)])
        self.out = ConvBNAct(2 * h, cout, 1, act=act)

    def forward(self, x):
        return self.out(torch.cat([self.m(self.a(x)), self.b(x)], 1))


class Detector(nn.Module):
    """YOLO-like: stride-32 backbone, FPN top-down with upsampling, heads
    at strides 8, 16 and 32 (80 classes + 4 box + 1 objectness, 3 anchors)."""

    def __init__(self, w=16, no=3 * 85):
        super().__init__()
        self.stem = ConvBNAct(3, w, 3, 2)                               # /2
        self.s1 = nn.Sequential(ConvBNAct(w, 2 * w, 3, 2), CSP(2 * w, 2 * w, 1))      # /4
        self.s2 = nn.Sequential(ConvBNAct(2 * w, 4 * w, 3, 2), CSP(4 * w, 4 * w, 2))  # /8
        self.s3 = nn.Sequential(ConvBNAct(4 * w, 8 * w, 3, 2), CSP(8 * w, 8 * w, 2))  # /16
        self.s4 = nn.Sequential(ConvBNAct(8 * w, 16 * w, 3, 2), CSP(16 * w, 16 * w, 1, act="hswish"))  # /32
        self.lat4 = ConvBNAct(16 * w, 8 * w, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top3 = CSP(16 * w, 8 * w, 1)
        self.lat3 = ConvBNAct(8 * w, 4 * w, 1)
        self.top2 = CSP(8 * w, 4 * w, 1)
        self.head2 = nn.Conv2d(4 * w, no, 1)
        self.head3 = nn.Conv2d(8 * w, no, 1)
        self.head4 = nn.Conv2d(16 * w, no, 1)

    def forward(self, x):
        x = self.s1(self.stem(x))
        c2 = self.s2(x)
        c3 = self.s3(c2)
        c4 = self.s4(c3)
        p4 = self.lat4(c4)
        p3 = self.top3(torch.cat([self.up(p4), c3], 1))
        q3 = self.lat3(p3)
        p2 = self.top2(torch.cat([self.up(q3), c2], 1))
        return self.head2(p2), self.head3(p3), self.head4(c4)


# ------------------------------------------------------- transformers

class Attention(nn.Module):
    def __init__(self, d, heads, causal):
        super().__init__()
        self.h, self.dk, self.causal = heads, d // heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask_add=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.h, self.dk).transpose(1, 2)
        k = k.view(b, t, self.h, self.dk).transpose(1, 2)
        v = v.view(b, t, self.h, self.dk).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dk))
        if self.causal:
            tri = torch.tril(torch.ones(t, t, dtype=torch.bool))
            att = att.masked_fill(~tri, float("-inf"))
        if mask_add is not None:
            att = att + mask_add
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d, heads, causal, pre_norm):
        super().__init__()
        self.pre = pre_norm
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.att = Attention(d, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask_add=None):
        if self.pre:  # GPT-2
            x = x + self.att(self.ln1(x), mask_add)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.att(x, mask_add))  # BERT
        return self.ln2(x + self.mlp(x))


class GPT(nn.Module):
    def __init__(self, vocab=2048, d=256, heads=4, layers=4, ctx=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads, True, True) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t).unsqueeze(0))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class BERT(nn.Module):
    def __init__(self, vocab=8192, d=256, heads=4, layers=4, ctx=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([Block(d, heads, False, False) for _ in range(layers)])
        self.pool = nn.Linear(d, d)

    def forward(self, ids, mask):
        t = ids.shape[1]
        x = self.ln(self.tok(ids) + self.pos(torch.arange(t).unsqueeze(0)))
        mask_add = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for b in self.blocks:
            x = b(x, mask_add)
        return x, torch.tanh(self.pool(x[:, 0]))


# ----------------------------------------------------------- recurrent

class SmallLSTM(nn.Module):
    def __init__(self, inp=64, hidden=128, out=32):
        super().__init__()
        self.lstm = nn.LSTM(inp, hidden, batch_first=False)
        self.fc = nn.Linear(hidden, out)

    def forward(self, x, h0, c0):
        y, (h, c) = self.lstm(x, (h0, c0))
        return self.fc(y[-1]), h, c


# ------------------------------------------------------------- the set

def randomize_bn(model):
    """Running statistics off their defaults, so folding them matters."""
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.copy_(torch.randn(m.num_features) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features) * 0.5 + 0.75)


def models():
    img = lambda h: torch.randn(1, 3, h, h)
    yield ("mobilenet_v3", lambda: torchvision.models.mobilenet_v3_large(weights=None),
           lambda: (img(224),), ["input"], ["logits"], 13)
    yield ("resnet50", lambda: torchvision.models.resnet50(weights=None),
           lambda: (img(224),), ["input"], ["logits"], 13)
    yield ("detector", Detector, lambda: (img(640),), ["images"],
           ["p8", "p16", "p32"], 13)
    yield ("gpt", GPT, lambda: (torch.randint(0, 2048, (1, 128)),),
           ["input_ids"], ["logits"], 14)

    def bert_inputs():
        ids = torch.randint(0, 8192, (1, 128))
        mask = torch.ones(1, 128, dtype=torch.int64)
        mask[:, 100:] = 0  # padded tail
        return ids, mask
    yield ("bert", BERT, bert_inputs, ["input_ids", "attention_mask"],
           ["hidden", "pooled"], 14)
    yield ("lstm", SmallLSTM,
           lambda: (torch.randn(16, 1, 64), torch.zeros(1, 1, 128),
                    torch.zeros(1, 1, 128)),
           ["x", "h0", "c0"], ["y", "h", "c"], 13)


def write_pb(path, name, array):
    t = numpy_helper.from_array(np.ascontiguousarray(array), name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


def generate(name, make, inputs, in_names, out_names, opset, out_dir):
    torch.manual_seed(SEED)
    model = make()
    randomize_bn(model)
    model.eval()
    torch.manual_seed(SEED + 2)  # inputs: the same whichever models are made
    args = inputs()
    d = os.path.join(out_dir, name)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    with torch.no_grad():
        outs = model(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.onnx.export(model, args, path, input_names=in_names, output_names=out_names,
                          opset_version=opset, do_constant_folding=True)
    onnx.checker.check_model(onnx.load(path))
    for i, (n, a) in enumerate(zip(in_names, args)):
        write_pb(os.path.join(ds, f"input_{i}.pb"), n, a.numpy())
    for i, (n, o) in enumerate(zip(out_names, outs)):
        write_pb(os.path.join(ds, f"output_{i}.pb"), n, o.numpy())
    size = os.path.getsize(path)
    print(f"{name:14s} {size / 1e6:7.1f} MB  opset {opset}  -> {d}", flush=True)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?",
                    default=os.path.join(here, "..", "..", "build", "bench-models"))
    ap.add_argument("--only", default="", help="comma-separated model names")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    torch.set_num_threads(1)
    for spec in models():
        if not only or spec[0] in only:
            generate(*spec, os.path.normpath(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
