"""gen_train_unreached.py: parameters a step's backward does not reach
(issue 22, part 2), trained by PyTorch as the reference.

  /usr/bin/python3 tools/gen_train_unreached.py   # writes tests/train_unreached/

PyTorch's optimizers skip a parameter whose .grad is None: the parameters
of an `if` branch the batch did not take. After zero_grad(set_to_none=True)
(PyTorch >= 2.0's default) that holds at every such step; after
zero_grad(set_to_none=False) (1.x's default) only until the parameter's
first gradient, then it gets zeros and is updated (moments decay, Adam's
step advances, weight decay applies). `keel train --zero-grad none|zeros`
must do the same.

The model (onnx.helper, opset 13), with the same module in PyTorch:
  h = Tanh(x W1 + b1)
  if mean(x) > 0:                       # outer If
      o = h Wa + ba
      if mean(t) > 0.5: o = o + h Wn    # inner If, inside the then branch
  else:
      o = Tanh(h Wb) Wc + bc
  loss = mean((o * s - t)^2)
W1, b1, s are reached at every step, Wa, ba on outer-then steps, Wn on
outer-then-and-inner-then steps, Wb, Wc, bc on outer-else steps. The
branches follow the batches: the else branch is first taken at step 3, the
inner then branch at step 2. Every batch keeps its statistics at least 0.1
from the thresholds, so rounding cannot flip a branch.

Written: model.onnx, data_0..data_7 (input_0.pb x, input_1.pb t), and
expected.json: per optimizer and zero-grad mode, the 30 per-step losses
and the trained parameters.
"""
import json
import os

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "train_unreached")
NI, NH, NO = 4, 8, 3
STEPS = 30
# outer branch per batch (True: then), inner branch per batch (then steps)
OUTER = [True, True, False, True, False, False, True, False]
INNER = [False, True, False, False, False, False, True, False]
OPTIMIZERS = {
    "sgd": dict(args=["--optimizer", "sgd", "--lr", "0.1", "--weight-decay", "0.01"]),
    "momentum": dict(args=["--optimizer", "momentum", "--lr", "0.05", "--momentum", "0.9",
                           "--weight-decay", "0.01"]),
    "adam": dict(args=["--optimizer", "adam", "--lr", "0.01"]),
    "adamw": dict(args=["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.01"]),
}

rng = np.random.default_rng(22)
INIT = {
    "W1": rng.standard_normal((NI, NH)) * 0.4, "b1": rng.standard_normal(NH) * 0.1,
    "Wa": rng.standard_normal((NH, NO)) * 0.4, "ba": rng.standard_normal(NO) * 0.1,
    "Wn": rng.standard_normal((NH, NO)) * 0.4,
    "Wb": rng.standard_normal((NH, NH)) * 0.4, "Wc": rng.standard_normal((NH, NO)) * 0.4,
    "bc": rng.standard_normal(NO) * 0.1, "s": 1 + rng.standard_normal(NO) * 0.1,
}
INIT = {k: v.astype(np.float32) for k, v in INIT.items()}


def batches():
    out = []
    for k, (outer, inner) in enumerate(zip(OUTER, INNER)):
        n = 3 + k % 4
        while True:
            x = rng.uniform(-1, 1, (n, NI)).astype(np.float32) + (0.3 if outer else -0.3)
            t = rng.uniform(0, 1, (n, NO)).astype(np.float32) + (0.25 if inner else -0.25)
            if (x.mean() > 0.1 if outer else x.mean() < -0.1) and \
               (t.mean() > 0.6 if inner else t.mean() < 0.4):
                break
        out.append((x, t))
    return out


def model():
    f = TensorProto.FLOAT

    def vi(name, shape):
        return helper.make_tensor_value_info(name, f, shape)

    inner_then = helper.make_graph(
        [helper.make_node("MatMul", ["h", "Wn"], ["hn"]), helper.make_node("Add", ["o1", "hn"], ["o2t"])],
        "inner_then", [], [vi("o2t", None)])
    inner_else = helper.make_graph([helper.make_node("Identity", ["o1"], ["o2e"])], "inner_else", [],
                                   [vi("o2e", None)])
    then = helper.make_graph(
        [helper.make_node("MatMul", ["h", "Wa"], ["ha"]), helper.make_node("Add", ["ha", "ba"], ["o1"]),
         helper.make_node("ReduceMean", ["t"], ["tm"], keepdims=0),
         helper.make_node("Greater", ["tm", "half"], ["c2"]),
         helper.make_node("If", ["c2"], ["ot"], then_branch=inner_then, else_branch=inner_else)],
        "then", [], [vi("ot", None)])
    els = helper.make_graph(
        [helper.make_node("MatMul", ["h", "Wb"], ["hb"]), helper.make_node("Tanh", ["hb"], ["tb"]),
         helper.make_node("MatMul", ["tb", "Wc"], ["hc"]), helper.make_node("Add", ["hc", "bc"], ["oe"])],
        "else", [], [vi("oe", None)])
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["xw"]), helper.make_node("Add", ["xw", "b1"], ["h0"]),
        helper.make_node("Tanh", ["h0"], ["h"]),
        helper.make_node("ReduceMean", ["x"], ["xm"], keepdims=0),
        helper.make_node("Greater", ["xm", "zero"], ["c1"]),
        helper.make_node("If", ["c1"], ["o"], then_branch=then, else_branch=els),
        helper.make_node("Mul", ["o", "s"], ["os"]), helper.make_node("Sub", ["os", "t"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in INIT.items()]
    inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"),
              numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, "unreached", [vi("x", ["N", NI]), vi("t", ["N", NO])],
                          [vi("loss", [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="gen_train_unreached")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for k, v in INIT.items():
            setattr(self, k, torch.nn.Parameter(torch.tensor(v)))

    def forward(self, x, t):
        h = torch.tanh(x @ self.W1 + self.b1)
        if x.mean() > 0:
            o = h @ self.Wa + self.ba
            if t.mean() > 0.5:
                o = o + h @ self.Wn
        else:
            o = torch.tanh(h @ self.Wb) @ self.Wc + self.bc
        return ((o * self.s - t) ** 2).mean()


def optimizer(name, params):
    a = OPTIMIZERS[name]["args"]
    hp = {a[i]: float(a[i + 1]) for i in range(2, len(a), 2)}
    wd = hp.get("--weight-decay", 0.0)
    if name in ("sgd", "momentum"):
        return torch.optim.SGD(params, lr=hp["--lr"], momentum=hp.get("--momentum", 0.0), weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=hp["--lr"], weight_decay=wd)
    return torch.optim.AdamW(params, lr=hp["--lr"], weight_decay=wd)


def train(name, mode, data):
    net = Net()
    opt = optimizer(name, net.parameters())
    losses = []
    for k in range(STEPS):
        x, t = (torch.tensor(a) for a in data[k % len(data)])
        opt.zero_grad(set_to_none=(mode == "none"))
        loss = net(x, t)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, {k: v.detach().numpy().astype(np.float64).round(9).tolist()
                    for k, v in net.named_parameters()}


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    onnx.save(model(), os.path.join(OUT, "model.onnx"))
    data = batches()
    for k, (x, t) in enumerate(data):
        d = os.path.join(OUT, f"data_{k}")
        os.makedirs(d, exist_ok=True)
        for j, (a, nm) in enumerate(((x, "x"), (t, "t"))):
            with open(os.path.join(d, f"input_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(a, nm).SerializeToString())
    expected = {"steps": STEPS, "torch": torch.__version__,
                "branches": [[OUTER[k % 8], OUTER[k % 8] and INNER[k % 8]] for k in range(STEPS)],
                "runs": {}}
    for name, spec in OPTIMIZERS.items():
        for mode in ("none", "zeros"):
            losses, params = train(name, mode, data)
            expected["runs"][f"{name}/{mode}"] = {"args": spec["args"], "losses": losses, "params": params}
            print(f"{name:8s} {mode:5s}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
