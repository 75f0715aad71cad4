#!/usr/bin/env /usr/bin/python3
"""Writes tests/models/local_functions: a model whose graph calls
model-local functions (ModelProto.functions), one of them calling another,
with an attribute passed by reference (ref_attr_name) and one left to its
absence. Expected outputs come from numpy.

Run: /usr/bin/python3 tools/gen_function_models.py"""
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "local_functions")
DOM = "custom.functions"

# ScaledLeaky(x) = LeakyRelu(x * s, alpha=@alpha) -- alpha by reference
scale_node = helper.make_node("Mul", ["x", "s"], ["xs"])
leaky = helper.make_node("LeakyRelu", ["xs"], ["y"])
ref = helper.make_attribute_ref("alpha", TensorProto.FLOAT) if hasattr(helper, "make_attribute_ref") else None
if ref is None:
    ref = onnx.AttributeProto()
    ref.name = "alpha"
    ref.ref_attr_name = "alpha"
    ref.type = onnx.AttributeProto.FLOAT
leaky.attribute.append(ref)
scaled_leaky = helper.make_function(DOM, "ScaledLeaky", ["x", "s"], ["y"], [scale_node, leaky],
                                    [helper.make_opsetid("", 13)], attributes=["alpha"])

# Block(a, b) = ScaledLeaky(a + b, 2) - b  (a function calling a function)
two = helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np.float32)))
add = helper.make_node("Add", ["a", "b"], ["ab"])
call = helper.make_node("ScaledLeaky", ["ab", "two"], ["l"], domain=DOM)
ref2 = onnx.AttributeProto()
ref2.name = "alpha"
ref2.ref_attr_name = "slope"
ref2.type = onnx.AttributeProto.FLOAT
call.attribute.append(ref2)
sub = helper.make_node("Sub", ["l", "b"], ["out"])
block = helper.make_function(DOM, "Block", ["a", "b"], ["out"], [two, add, call, sub],
                             [helper.make_opsetid("", 13), helper.make_opsetid(DOM, 1)],
                             attributes=["slope"])

# main: y1 = Block(x, w; slope=0.1); y2 = Block(y1, w; slope=0.3); y3 = ScaledLeaky(y2, w) (alpha absent -> 0.01)
n1 = helper.make_node("Block", ["x", "w"], ["y1"], domain=DOM, slope=0.1)
n2 = helper.make_node("Block", ["y1", "w"], ["y2"], domain=DOM, slope=0.3)
n3 = helper.make_node("ScaledLeaky", ["y2", "w"], ["y3"], domain=DOM)
graph = helper.make_graph([n1, n2, n3], "calls",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y3", TensorProto.FLOAT, [2, 3])])
model = helper.make_model(graph, functions=[scaled_leaky, block],
                          opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(DOM, 1)])
model.ir_version = 8
onnx.checker.check_model(model)


def leaky_np(v, alpha):
    return np.where(v >= 0, v, v * alpha)


def block_np(a, b, slope):
    return leaky_np((a + b) * 2.0, slope) - b


rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3)).astype(np.float32)
w = rng.standard_normal(3).astype(np.float32)
y3 = leaky_np(block_np(block_np(x, w, 0.1), w, 0.3) * w, 0.01).astype(np.float32)

os.makedirs(os.path.join(OUT, "test_data_set_0"), exist_ok=True)
onnx.save(model, os.path.join(OUT, "model.onnx"))
for i, (name, arr) in enumerate([("x", x), ("w", w)]):
    with open(os.path.join(OUT, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
        f.write(numpy_helper.from_array(arr, name).SerializeToString())
with open(os.path.join(OUT, "test_data_set_0", "output_0.pb"), "wb") as f:
    f.write(numpy_helper.from_array(y3, "y3").SerializeToString())
print("local_functions:", y3.ravel()[:4])
