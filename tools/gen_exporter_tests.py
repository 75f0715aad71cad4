#!/usr/bin/env /usr/bin/python3
"""Writes tests/exporters/: models as other tools export them, with
PyTorch's outputs as the expected results (`keel test tests/exporters`
checks them with the passes and without). 1-D convolution networks (the
lift-conv1d pass, src/passes/pass_conv1d.c, runs them as 2-D convolutions
of height 1) and small transformers with a dynamic batch and length (the
canon-reshape and cse passes, src/passes/pass_reshape.c and pass_cse.c,
rewrite their computed shapes and repeated masks).

  conv1d_ts9, conv1d_ts11, conv1d_ts13, conv1d_ts17
      torch.onnx.export (TorchScript) at opsets 9, 11, 13 and 17 of Net
      below: Conv1d + BatchNorm1d (folded by the exporter) + ReLU, a
      strided Conv1d, MaxPool1d, a residual Add, PReLU (slope [C, 1]),
      Concat on channels, AvgPool1d, a dilated and grouped Conv1d,
      LeakyReLU, a bias added as a [C, 1] tensor, AdaptiveAvgPool1d(1),
      Linear; the length axis dynamic from opset 11 on (inputs of two
      lengths: test_data_set_0 and _1)
  conv1d_paddle9
      onnx.helper in paddle2onnx's opset-9 style: every weight a Constant
      node, BatchNormalization left separate, hardswish as
      Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(., 6), Squeeze of the
      pooled length; expected outputs from torch.nn.functional on the same
      weights
  conv1d_tail
      a lifted value read outside the region twice (a graph output and a
      ReduceMean) and a Conv1d whose W is also read by another node (an
      Add with a second input): the Squeeze back and the copied W

  gpt_dyn_o14, gpt_dyn_o17
      a 2-block GPT (vocab 64, width 32, 2 heads) whose causal mask each
      block builds from the input length (torch.triu over torch.full((T, T),
      -inf)), batch and length dynamic, at opsets 14 (Trilu's first) and
      17 (LayerNormalization); runs of
      [1, 7] and [2, 12] tokens
  bert_dyn_o11
      a 2-block BERT with an attention mask input, dynamic batch and length
      at opset 11 (Unsqueeze with attributes); runs of [1, 9] and [2, 5]

Run: /usr/bin/python3 tools/gen_exporter_tests.py  (python3-torch and
python3-onnx from Debian). Deterministic: fixed seeds. Small: channels of
8-32, so the files stay a few KB each.
"""
import math
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "exporters")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(6, 12, 5, padding=2)
        self.bn1 = nn.BatchNorm1d(12)
        self.c2 = nn.Conv1d(12, 16, 3, stride=2, padding=1)
        self.c3 = nn.Conv1d(16, 16, 3, padding=1)
        self.act3 = nn.PReLU(16)
        self.c4 = nn.Conv1d(32, 24, 3, padding=2, dilation=2, groups=4)
        self.c5 = nn.Conv1d(24, 8, 1)
        self.bias = nn.Parameter(torch.randn(8, 1) * 0.1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn1(self.c1(x)))
        y = F.max_pool1d(y, 2, 2)
        y = F.relu(self.c2(y))
        z = self.act3(self.c3(y)) + y
        y = torch.cat([z, y], 1)
        y = F.avg_pool1d(y, 3, 1, 1)
        y = F.leaky_relu(self.c4(y), 0.1)
        y = self.c5(y) + self.bias
        y = F.adaptive_avg_pool1d(y, 1).flatten(1)
        return self.fc(y)


def randomize(model):
    g = torch.Generator().manual_seed(3)
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm1d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.2)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
        if isinstance(mod, nn.PReLU):
            mod.weight.data.copy_(torch.rand(mod.num_parameters, generator=g) * 0.3)


def write_pb(d, k, kind, arr, name):
    os.makedirs(os.path.join(d, f"test_data_set_{k}"), exist_ok=True)
    with open(os.path.join(d, f"test_data_set_{k}", f"{kind}_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(np.ascontiguousarray(arr), name).SerializeToString())


def torch_case(opset):
    name = f"conv1d_ts{opset}"
    torch.manual_seed(10 + opset)
    model = Net()
    randomize(model)
    model.eval()
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    xs = [torch.randn(2, 6, 40), torch.randn(1, 6, 29)]
    dyn = None if opset < 11 else {"x": {0: "n", 2: "len"}, "y": {0: "n"}}
    with torch.no_grad():
        torch.onnx.export(model, (xs[0],), os.path.join(d, "model.onnx"), opset_version=opset,
                          input_names=["x"], output_names=["y"], dynamic_axes=dyn,
                          do_constant_folding=True)
        for k, x in enumerate(xs if dyn else xs[:1]):
            write_pb(d, k, "input", x.numpy(), "x")
            write_pb(d, k, "output", model(x).numpy(), "y")
    m = onnx.load(os.path.join(d, "model.onnx"))
    onnx.checker.check_model(m)
    print(f"{name}: {[n.op_type for n in m.graph.node]}")


def const_node(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name + "_v"))


def paddle_case():
    """paddle2onnx's opset 9: Constant-node weights, BN separate, hardswish
    spelled out, Squeeze of the pooled length."""
    rng = np.random.default_rng(7)
    f32 = np.float32
    w1 = (rng.standard_normal((8, 4, 3)) * 0.3).astype(f32)
    w2 = (rng.standard_normal((12, 8, 3)) * 0.2).astype(f32)
    b2 = (rng.standard_normal(12) * 0.1).astype(f32)
    bn = [(rng.random(8) + 0.5).astype(f32), (rng.standard_normal(8) * 0.1).astype(f32),
          (rng.standard_normal(8) * 0.1).astype(f32), (rng.random(8) + 0.5).astype(f32)]
    nodes = [const_node("w1", w1), const_node("w2", w2), const_node("b2", b2)]
    for n, v in zip(["bn_s", "bn_b", "bn_m", "bn_v"], bn):
        nodes.append(const_node(n, v))
    for n, v in [("three", 3.0), ("six", 6.0)]:
        nodes.append(const_node(n, np.array(v, f32)))
    nodes += [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv2d_0", pads=[1, 1],
                         kernel_shape=[3], strides=[1], dilations=[1], group=1),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"],
                         name="batch_norm_0", epsilon=1e-5),
        helper.make_node("Add", ["n1", "three"], ["a1"], name="hs_add"),
        helper.make_node("Clip", ["a1"], ["r1"], name="hs_clip", min=0.0, max=6.0),
        helper.make_node("Mul", ["n1", "r1"], ["m1"], name="hs_mul"),
        helper.make_node("Div", ["m1", "six"], ["h1"], name="hs_div"),
        helper.make_node("Conv", ["h1", "w2", "b2"], ["c2"], name="conv2d_1", pads=[0, 0],
                         kernel_shape=[3], strides=[2]),
        helper.make_node("Sigmoid", ["c2"], ["s2"], name="sigmoid_0"),
        helper.make_node("GlobalAveragePool", ["s2"], ["p2"], name="pool_0"),
        helper.make_node("Squeeze", ["p2"], ["y"], name="squeeze_0", axes=[2]),
    ]
    g = helper.make_graph(nodes, "paddle_conv1d",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 4, -1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 12])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], producer_name="paddle2onnx")
    m.ir_version = 4
    onnx.checker.check_model(m)
    d = os.path.join(OUT, "conv1d_paddle9")
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    t = lambda a: torch.from_numpy(a)
    for k, shape in enumerate([(2, 4, 33), (1, 4, 16)]):
        x = rng.standard_normal(shape).astype(f32)
        with torch.no_grad():
            c1 = F.conv1d(t(x), t(w1), padding=1)
            n1 = F.batch_norm(c1, t(bn[2]), t(bn[3]), t(bn[0]), t(bn[1]), False, 0.0, 1e-5)
            h1 = n1 * torch.clamp(n1 + 3, 0, 6) / 6
            c2 = torch.sigmoid(F.conv1d(h1, t(w2), t(b2), stride=2))
            y = c2.mean(2)
        write_pb(d, k, "input", x, "x")
        write_pb(d, k, "output", y.numpy(), "y")
    print(f"conv1d_paddle9: {[n.op_type for n in m.graph.node]}")


def tail_case():
    """A lifted value read outside the region (graph output and a
    ReduceMean) and a W read by an Add too (copied, not reshaped)."""
    rng = np.random.default_rng(9)
    f32 = np.float32
    w = (rng.standard_normal((8, 3, 3)) * 0.3).astype(f32)
    w2 = (rng.standard_normal((8, 8, 1)) * 0.3).astype(f32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv_a", pads=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu_a"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv_b"),
        helper.make_node("ReduceMean", ["r"], ["m"], name="mean_r", axes=[2], keepdims=0),
        helper.make_node("Add", ["w", "d"], ["ws"], name="add_w"),
    ]
    g = helper.make_graph(
        nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10]),
                        helper.make_tensor_value_info("d", TensorProto.FLOAT, [8, 3, 3])],
        [helper.make_tensor_value_info("c2", TensorProto.FLOAT, [2, 8, 10]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("ws", TensorProto.FLOAT, [8, 3, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    d = os.path.join(OUT, "conv1d_tail")
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    x = rng.standard_normal((2, 3, 10)).astype(f32)
    dv = rng.standard_normal((8, 3, 3)).astype(f32)
    with torch.no_grad():
        r = F.relu(F.conv1d(torch.from_numpy(x), torch.from_numpy(w), padding=1))
        outs = [F.conv1d(r, torch.from_numpy(w2)).numpy(), r.mean(2).numpy(),
                w + dv]
    write_pb(d, 0, "input", x, "x")
    with open(os.path.join(d, "test_data_set_0", "input_1.pb"), "wb") as f:
        f.write(numpy_helper.from_array(dv, "d").SerializeToString())
    for i, (o, n) in enumerate(zip(outs, ["c2", "m", "ws"])):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(o, n).SerializeToString())
    print(f"conv1d_tail: {[n.op_type for n in m.graph.node]}")


class DynAttention(nn.Module):
    """Causal attention whose mask comes from the length: triu of a
    [T, T] tensor of -inf, built again in every block."""

    def __init__(self, d, heads):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask_add=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.h, self.dk).transpose(1, 2)
        k = k.view(b, t, self.h, self.dk).transpose(1, 2)
        v = v.view(b, t, self.h, self.dk).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.dk)
        if mask_add is None:
            att = att + torch.triu(torch.full((t, t), float("-inf")), 1)
        else:
            att = att + mask_add
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d, heads, pre):
        super().__init__()
        self.pre = pre
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.att = DynAttention(d, heads)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask_add=None):
        if self.pre:
            x = x + self.att(self.ln1(x), mask_add)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.att(x, mask_add))
        return self.ln2(x + self.mlp(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=2, layers=2, ctx=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads, True) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]).unsqueeze(0))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class TinyBERT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=2, layers=2, ctx=32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([Block(d, heads, False) for _ in range(layers)])

    def forward(self, ids, mask):
        x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1]).unsqueeze(0)))
        mask_add = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for b in self.blocks:
            x = b(x, mask_add)
        return x


def transformer_case(name, model, opset, runs, names, dyn):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, runs[0], os.path.join(d, "model.onnx"), opset_version=opset,
                          input_names=names, output_names=["y"], dynamic_axes=dyn,
                          do_constant_folding=True)
        for k, args in enumerate(runs):
            os.makedirs(os.path.join(d, f"test_data_set_{k}"), exist_ok=True)
            for i, (a, n) in enumerate(zip(args, names)):
                with open(os.path.join(d, f"test_data_set_{k}", f"input_{i}.pb"), "wb") as f:
                    f.write(numpy_helper.from_array(a.numpy(), n).SerializeToString())
            write_pb(d, k, "output", model(*args).numpy(), "y")
    m = onnx.load(os.path.join(d, "model.onnx"))
    onnx.checker.check_model(m)
    print(f"{name}: {len(m.graph.node)} nodes")


def transformers():
    g = torch.Generator().manual_seed(21)
    ids = lambda b, t: torch.randint(0, 64, (b, t), generator=g)
    for opset in (14, 17):  # Trilu (torch.triu) from opset 14
        torch.manual_seed(30 + opset)
        transformer_case(f"gpt_dyn_o{opset}", TinyGPT(), opset, [(ids(1, 7),), (ids(2, 12),)],
                         ["input_ids"], {"input_ids": {0: "batch", 1: "T"}, "y": {0: "batch", 1: "T"}})
    torch.manual_seed(44)
    mask = torch.ones(2, 5, dtype=torch.int64)
    mask[1, 3:] = 0
    transformer_case("bert_dyn_o11", TinyBERT(), 11,
                     [(ids(1, 9), torch.ones(1, 9, dtype=torch.int64)), (ids(2, 5), mask)],
                     ["input_ids", "attention_mask"],
                     {"input_ids": {0: "batch", 1: "T"}, "attention_mask": {0: "batch", 1: "T"},
                      "y": {0: "batch", 1: "T"}})


def main():
    for opset in (9, 11, 13, 17):
        torch_case(opset)
    paddle_case()
    tail_case()
    transformers()


if __name__ == "__main__":
    sys.exit(main())
