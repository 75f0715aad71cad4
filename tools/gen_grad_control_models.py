#!/usr/bin/env /usr/bin/python3
"""Writes tests/models/grad_rnn_if: a model whose Gradient node
(ai.onnx.preview.training) differentiates through a while Loop (a
computed condition stops it before its trip count) holding an If (Tanh on
even iterations, Sigmoid on odd ones) and an RNN cell (MatMul with a weight
read from outside the body). Its outputs are the gradients of
y = sum(hs * R + hf * hf) (hf broadcast over the iterations) with respect to h0, W and x; the expected
values come from PyTorch autograd on the same computation.

Run: /usr/bin/python3 tools/gen_grad_control_models.py"""
import os

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper, TensorProto

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "grad_rnn_if")
F = TensorProto.FLOAT
M, THR = 6, 1.4

rng = np.random.RandomState(7)
h0 = rng.uniform(-0.5, 0.5, (1, 4)).astype(np.float32)
W = rng.uniform(-0.6, 0.6, (4, 4)).astype(np.float32)
x = rng.uniform(0.0, 0.4, (4,)).astype(np.float32)


def reference():
    th = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (h0, W, x)]
    h, hs = th[0], []
    for i in range(M):
        pre = h @ th[1] + th[2]
        h = torch.tanh(pre) if i % 2 == 0 else torch.sigmoid(pre)
        hs.append(h)
        if not bool(h.sum() < THR):
            break
    R = torch.tensor(np.linspace(0.5, 1.5, len(hs) * 4).reshape(len(hs), 1, 4))
    y = (torch.stack(hs) * R + h * h).sum()  # the Gradient sums y (broadcast: T times h*h)
    y.backward()
    return len(hs), R.numpy().astype(np.float32), [t.grad.numpy().astype(np.float32) for t in th]


def body():
    then = helper.make_graph([helper.make_node("Tanh", ["pre"], ["t_h"])], "then", [],
                             [helper.make_tensor_value_info("t_h", F, None)])
    els = helper.make_graph([helper.make_node("Sigmoid", ["pre"], ["e_h"])], "else", [],
                            [helper.make_tensor_value_info("e_h", F, None)])
    nodes = [
        helper.make_node("Mod", ["i", "two"], ["r"]),
        helper.make_node("Equal", ["r", "zero"], ["even"]),
        helper.make_node("MatMul", ["h", "W"], ["hW"]),
        helper.make_node("Add", ["hW", "x"], ["pre"]),
        helper.make_node("If", ["even"], ["h_out"], name="cell", then_branch=then, else_branch=els),
        helper.make_node("Identity", ["h_out"], ["h_scan"]),
        helper.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
        helper.make_node("Less", ["s", "thr"], ["c_out"]),
    ]
    inits = [numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(THR, np.float32), "thr")]
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", F, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", F, None),
         helper.make_tensor_value_info("h_scan", F, None)], inits)


def main():
    T, R, grads = reference()
    nodes = [
        helper.make_node("Loop", ["M", "true", "h0"], ["hf", "hs"], name="rnn", body=body()),
        helper.make_node("Mul", ["hs", "R"], ["a"]),
        helper.make_node("Mul", ["hf", "hf"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
        helper.make_node("Gradient", ["h0", "W", "x"], ["d_h0", "d_W", "d_x"], name="grad",
                         domain="ai.onnx.preview.training", xs=["h0", "W", "x"], y="y"),
    ]
    inits = [numpy_helper.from_array(np.array(M, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(R, "R")]
    graph = helper.make_graph(
        nodes, "grad_rnn_if",
        [helper.make_tensor_value_info("h0", F, [1, 4]), helper.make_tensor_value_info("W", F, [4, 4]),
         helper.make_tensor_value_info("x", F, [4])],
        [helper.make_tensor_value_info(n, F, None) for n in ("d_h0", "d_W", "d_x")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("ai.onnx.preview.training", 1)])
    model.ir_version = 7
    data = os.path.join(OUT, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(OUT, "model.onnx"))
    for k, (name, a) in enumerate((("h0", h0), ("W", W), ("x", x))):
        with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, name).SerializeToString())
    for k, (name, g) in enumerate(zip(("d_h0", "d_W", "d_x"), grads)):
        with open(os.path.join(data, "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(g, name).SerializeToString())
    print("iterations run: %d of %d" % (T, M))


main()
