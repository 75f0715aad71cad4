#!/usr/bin/env /usr/bin/python3
"""Exports the control-flow models of tests/models/ from PyTorch with
torch.jit.script and records PyTorch's outputs as the expected results.

Layout is the ONNX backend-test layout, so `keel test tests/models` runs
them: <name>/model.onnx and <name>/test_data_set_0/{input,output}_K.pb.

Run: /usr/bin/python3 tools/gen_torch_models.py  (needs python3-torch,
python3-onnx from Debian). Deterministic: fixed seeds.
"""
import os
import sys

import onnx
import torch
from onnx import numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models")
VOCAB, HIDDEN = 11, 8


class GRUCell(torch.nn.Module):
    """torch.nn.GRUCell's math, written out (the exporter has no
    aten::gru_cell): r, z gates and the candidate state."""

    def __init__(self, inp: int, hidden: int):
        super().__init__()
        self.ih = torch.nn.Linear(inp, 3 * hidden)
        self.hh = torch.nn.Linear(hidden, 3 * hidden)

    def forward(self, x, h):
        i_r, i_z, i_n = self.ih(x).chunk(3, 1)
        h_r, h_z, h_n = self.hh(h).chunk(3, 1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


class GreedyDecoder(torch.nn.Module):
    """Greedy decoding with an EOS stop: a GRU cell language model appends
    its argmax token to a growing token list until it emits EOS."""

    def __init__(self, eos: int):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, HIDDEN)
        self.cell = GRUCell(HIDDEN, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, VOCAB)
        self.eos = eos

    def forward(self, h0, start, max_len: int):
        tokens = start
        tok = start
        h = h0
        for _ in range(max_len):
            h = self.cell(self.emb(tok), h)
            tok = self.out(h).argmax(dim=1)
            tokens = torch.cat([tokens, tok], 0)
            if bool(tok[0] == self.eos):
                break
        return tokens, h


class GrowCat(torch.nn.Module):
    """A loop that grows a tensor with cat: the carried value changes shape
    every iteration."""

    def forward(self, x, n: int):
        y = x
        for i in range(n):
            y = torch.cat([y, x * float(i) + y[-1:]], 0)
        return y


class GRUUnrolled(torch.nn.Module):
    """A GRU unrolled over time with a cell in a loop; the outputs of every
    step are collected in a list (a sequence in ONNX) and stacked."""

    def __init__(self):
        super().__init__()
        self.cell = GRUCell(4, HIDDEN)

    def forward(self, x, h0):
        h = h0
        outs = []
        for t in range(x.size(0)):
            h = self.cell(x[t], h)
            outs.append(h)
        return torch.stack(outs, 0), h


class NestedLoopIf(torch.nn.Module):
    """Loop > Loop > If: branches produce different shapes."""

    def forward(self, x, n: int, m: int):
        acc = x
        for i in range(n):
            for j in range(m):
                if (i + j) % 2 == 0:
                    acc = acc + x * float(j)
                else:
                    acc = torch.cat([acc, x], 1)[:, : x.size(1)] - x
        return acc


def save(name, module, args, input_names, output_names):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    scripted = torch.jit.script(module)
    with torch.no_grad():
        expected = scripted(*args)
    if not isinstance(expected, tuple):
        expected = (expected,)
    torch.onnx.export(scripted, args, os.path.join(d, "model.onnx"), opset_version=13,
                      input_names=input_names, output_names=output_names)
    for i, a in enumerate(args):
        t = a if isinstance(a, torch.Tensor) else torch.tensor(a)
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), input_names[i]).SerializeToString())
    for i, e in enumerate(expected):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(e.numpy(), output_names[i]).SerializeToString())
    model = onnx.load(os.path.join(d, "model.onnx"))
    onnx.checker.check_model(model)
    print(f"{name}: {[n.op_type for n in model.graph.node]}, outputs {[tuple(e.shape) for e in expected]}")


def greedy():
    torch.manual_seed(4)
    probe = GreedyDecoder(eos=-1).eval()
    for p in probe.parameters():  # wide weights: a varied token stream
        p.data.normal_(0, 1.0)
    h0 = torch.randn(1, HIDDEN)
    start = torch.tensor([1])
    with torch.no_grad():
        tokens, _ = torch.jit.script(probe)(h0, start, 12)
    # EOS: the first token that is new from the fourth step on, so decoding
    # stops mid-way, before max_len
    seen = tokens[:4].tolist()
    eos = next((t for t in tokens[4:].tolist() if t not in seen), int(tokens[-1]))
    model = GreedyDecoder(eos=eos).eval()
    model.load_state_dict(probe.state_dict())
    save("greedy_decode", model, (h0, start, 12), ["h0", "start", "max_len"], ["tokens", "h"])


def main():
    torch.manual_seed(0)
    greedy()
    save("grow_cat", GrowCat(), (torch.randn(2, 3), 7), ["x", "n"], ["y"])
    torch.manual_seed(1)
    save("gru_unrolled", GRUUnrolled().eval(), (torch.randn(6, 2, 4), torch.zeros(2, HIDDEN)),
         ["x", "h0"], ["outs", "h"])
    save("nested_loop_if", NestedLoopIf(), (torch.randn(2, 3), 4, 3), ["x", "n", "m"], ["acc"])


if __name__ == "__main__":
    sys.exit(main())
