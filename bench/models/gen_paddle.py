#!/usr/bin/python3
"""gen_paddle.py: models in paddle2onnx's style (issue 24), written with
onnx.helper because paddle2onnx is not at hand here.

    /usr/bin/python3 bench/models/gen_paddle.py [OUT_DIR]   # default build/bench-models

What paddle2onnx writes at opset 9-11, and what these models keep:
  - every weight as a Constant node (no initializers);
  - Conv without bias, then a separate BatchNormalization (scale, bias,
    mean, variance as Constant nodes, epsilon 1e-5);
  - hardswish as Add(x, 3) -> Clip(0, 6) -> Mul(x, .) -> Div(., 6), the
    Mul before the Div; hardsigmoid (squeeze-excite gates) as HardSigmoid
    with alpha 1/6 (Paddle's slope 0.2 is written as its own attribute);
  - Clip with min/max attributes (opset 9), Flatten + MatMul + Add heads.

Models (OUT_DIR/NAME/model.onnx and test_data_set_0/input_0.pb):
  paddle_mobilenet   a MobileNetV3-small-like classifier, 1x3x224x224:
                     stem 3x3/2 conv + BN + hardswish, 3x3/2 MaxPool,
                     eleven inverted-residual blocks (1x1 expand + BN + act,
                     depthwise 3x3 or 5x5 + BN + act, squeeze-excite on
                     some, 1x1 project + BN, residual Add where the shape
                     allows), 1x1 conv + BN + hardswish, global average
                     pool, two FC layers, 1000 classes (opset 9)
  paddle_ocr_rec     a text recogniser's backbone, 1x3x48x320: conv/BN/
                     relu stages, MaxPool on height, then a sequence head
                     (Reshape/Transpose, MatMul + Add, Softmax) (opset 11)
Weights are random (numpy, seeded).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(24)


class Builder:
    def __init__(self, opset):
        self.nodes, self.n, self.opset = [], 0, opset

    def name(self, hint):
        self.n += 1
        return f"{hint}_{self.n}"

    def const(self, arr, hint="w"):
        """A weight as paddle2onnx writes it: a Constant node."""
        out = self.name(hint)
        self.nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(
            np.asarray(arr, dtype=np.float32), out)))
        return out

    def op(self, op, ins, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride=1, groups=1):
        w = self.const(rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / (cin // groups * k * k)))
        c = self.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=groups)
        p = [self.const(1 + 0.1 * rng.standard_normal(cout)), self.const(0.1 * rng.standard_normal(cout)),
             self.const(0.1 * rng.standard_normal(cout)), self.const(0.5 + rng.random(cout))]
        return self.op("BatchNormalization", [c] + p, epsilon=1e-5)

    def hardswish(self, x):
        three, six = self.const(3.0, "three"), self.const(6.0, "six")
        a = self.op("Add", [x, three])
        if self.opset < 11:
            c = self.op("Clip", [a], min=0.0, max=6.0)
        else:
            c = self.op("Clip", [a, self.const(0.0, "zero"), six])
        m = self.op("Mul", [x, c])
        return self.op("Div", [m, six])

    def act(self, x, kind):
        return self.hardswish(x) if kind == "hs" else self.op("Relu", [x])

    def se(self, x, c):
        mid = max(8, c // 4)
        p = self.op("GlobalAveragePool", [x])
        w1 = self.const(rng.standard_normal((mid, c, 1, 1)) * np.sqrt(2.0 / c))
        b1 = self.const(0.05 * rng.standard_normal(mid))
        r = self.op("Relu", [self.op("Conv", [p, w1, b1], kernel_shape=[1, 1])])
        w2 = self.const(rng.standard_normal((c, mid, 1, 1)) * np.sqrt(1.0 / mid))
        b2 = self.const(0.05 * rng.standard_normal(c))
        g = self.op("HardSigmoid", [self.op("Conv", [r, w2, b2], kernel_shape=[1, 1])], alpha=1.0 / 6, beta=0.5)
        return self.op("Mul", [x, g])

    def fc(self, x, cin, cout):
        w = self.const(rng.standard_normal((cin, cout)) * np.sqrt(1.0 / cin))
        b = self.const(0.01 * rng.standard_normal(cout))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def model(self, name, x_shape, out, out_shape):
        g = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="paddle2onnx-style")
        m.ir_version = 6
        onnx.checker.check_model(m)
        return m


def mobilenet():
    b = Builder(9)
    x = b.act(b.conv_bn("x", 3, 16, 3, 2), "hs")
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    # (kernel, expand, out, se, act, stride) as MobileNetV3-small, after the pool
    cfg = [(3, 16, 16, True, "relu", 1), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
           (5, 96, 40, True, "hs", 2), (5, 240, 40, True, "hs", 1), (5, 240, 40, True, "hs", 1),
           (5, 120, 48, True, "hs", 1), (5, 144, 48, True, "hs", 1), (5, 288, 96, True, "hs", 2),
           (5, 576, 96, True, "hs", 1), (5, 576, 96, True, "hs", 1)]
    c = 16
    for k, e, o, se, a, s in cfg:
        y = b.act(b.conv_bn(x, c, e, 1), a) if e != c else x
        y = b.act(b.conv_bn(y, e, e, k, s, groups=e), a)
        if se:
            y = b.se(y, e)
        y = b.conv_bn(y, e, o, 1)
        x = b.op("Add", [x, y]) if s == 1 and c == o else y
        c = o
    x = b.act(b.conv_bn(x, c, 576, 1), "hs")
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    x = b.hardswish(b.fc(x, 576, 1024))
    return b.model("paddle_mobilenet", [1, 3, 224, 224], b.fc(x, 1024, 1000), [1, 1000]), (1, 3, 224, 224)


def ocr_rec():
    b = Builder(11)
    x, c = "x", 3
    for o, pool in ((32, True), (64, True), (128, False), (128, True), (256, False), (256, True)):
        x = b.act(b.conv_bn(x, c, o, 3), "relu")
        c = o
        if pool:
            x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 1] if c >= 128 else [2, 2],
                     pads=[0, 0, 0, 0] if c < 128 else [0, 0, 0, 1])
    # [1, 256, 3, W'] -> mean over height -> [1, W', 256]
    x = b.op("ReduceMean", [x], axes=[2], keepdims=0)
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    x = b.op("Relu", [b.fc(x, 256, 256)])
    x = b.op("Softmax", [b.fc(x, 256, 97)], axis=2)
    return b.model("paddle_ocr_rec", [1, 3, 48, 320], x, [1, "T", 97]), (1, 3, 48, 320)


def main(argv):
    out_dir = argv[0] if argv else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "build", "bench-models")
    for name, fn in (("paddle_mobilenet", mobilenet), ("paddle_ocr_rec", ocr_rec)):
        m, shape = fn()
        d = os.path.join(out_dir, name)
        os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        x = rng.standard_normal(shape).astype(np.float32)
        with open(os.path.join(d, "test_data_set_0", "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "x").SerializeToString())
        n_bn = sum(n.op_type == "BatchNormalization" for n in m.graph.node)
        print(f"{name}: {len(m.graph.node)} nodes ({n_bn} BatchNormalization), {os.path.getsize(os.path.join(d, 'model.onnx')) / 1e6:.1f} MB")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
