"""gen_train_cli.py: the small model and data of tests/test_train_cli.sh,
with PyTorch's losses for the same training as expected figures.

  /usr/bin/python3 tools/gen_train_cli.py      # writes tests/train_cli/

The model (ONNX opset 13, ops with derivative rules today):
  h = Tanh(x W1 + b1); o = h W2 + b2; d = o - t
  loss = Reshape(r (d * d) c, Shape(s0))
r is a data input [1, N] (1/N each: the mean over the batch), c a [3, 1]
initializer of ones (frozen with --freeze c), s0 a float scalar that only
Shape reads (not trainable). Two data folders with batches of 5 and 3 rows.
PyTorch trains the same module from the same weights on the same batches
(steps cycle through the folders) and the per-step losses are written to
torch_<optimizer>.txt, one per line.
"""
import os

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper, TensorProto

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "train_cli")
NI, NH, NO = 4, 8, 3
rng = np.random.default_rng(7)
W1 = (rng.standard_normal((NI, NH)) * 0.3).astype(np.float32)
b1 = (rng.standard_normal(NH) * 0.05).astype(np.float32)
W2 = (rng.standard_normal((NH, NO)) * 0.3).astype(np.float32)
b2 = (rng.standard_normal(NO) * 0.05).astype(np.float32)


def model():
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(W1, "W1"), (b1, "b1"), (W2, "W2"), (b2, "b2"),
              (np.ones((NO, 1), np.float32), "c"), (np.array(0, np.float32), "s0")]]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["xw"]),
             helper.make_node("Add", ["xw", "b1"], ["h2"]),
             helper.make_node("Tanh", ["h2"], ["h"]),
             helper.make_node("MatMul", ["h", "W2"], ["hw"]),
             helper.make_node("Add", ["hw", "b2"], ["o"]),
             helper.make_node("Sub", ["o", "t"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["sq"]),
             helper.make_node("MatMul", ["r", "sq"], ["rs"]),
             helper.make_node("MatMul", ["rs", "c"], ["s11"]),
             helper.make_node("Shape", ["s0"], ["shp"]),
             helper.make_node("Reshape", ["s11", "shp"], ["loss"])]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", NI]),
                           helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", NO]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, "N"])],
                          [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="gen_train_cli")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def batches():
    out = []
    for n in (5, 3):
        x = rng.uniform(-1, 1, (n, NI)).astype(np.float32)
        t = rng.uniform(0, 1, (n, NO)).astype(np.float32)
        r = np.full((1, n), 1.0 / n, np.float32)
        out.append((x, t, r))
    return out


def torch_losses(data, make_opt, steps=40):
    ps = [torch.nn.Parameter(torch.tensor(a)) for a in (W1, b1, W2, b2)]
    opt = make_opt(ps)
    losses = []
    for k in range(steps):
        x, t, r = (torch.tensor(a) for a in data[k % len(data)])
        h = torch.tanh(x @ ps[0] + ps[1])
        d = h @ ps[2] + ps[3] - t
        loss = (r @ (d * d)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    os.makedirs(OUT, exist_ok=True)
    onnx.save(model(), os.path.join(OUT, "model.onnx"))
    data = batches()
    for i, arrays in enumerate(data):
        d = os.path.join(OUT, "data_%d" % i)
        os.makedirs(d, exist_ok=True)
        for k, a in enumerate(arrays):
            with open(os.path.join(d, "input_%d.pb" % k), "wb") as f:
                f.write(numpy_helper.from_array(a).SerializeToString())
    opts = {"adam": lambda p: torch.optim.Adam(p, lr=0.01),
            "momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.01)}
    for name, mk in opts.items():
        with open(os.path.join(OUT, "torch_%s.txt" % name), "w") as f:
            f.write("".join("%.9g\n" % v for v in torch_losses(data, mk)))


if __name__ == "__main__":
    main()
