#!/usr/bin/env python3
"""gen_service_models.py: small models for the service tests (issue 13).

tests/data/endless_loop.onnx: a Loop without a trip count whose condition
(v < limit, limit = +inf) never turns false: `keel run --timeout` and the
iteration guard must stop it.  Run with Debian's python3 (onnx 1.12):
    /usr/bin/python3 tools/gen_service_models.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def endless_loop():
    body = helper.make_graph(
        [helper.make_node("Add", ["v", "one"], ["v_out"]),
         helper.make_node("Less", ["v_out", "limit"], ["c_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1, np.float32), "one")])
    g = helper.make_graph(
        [helper.make_node("Loop", ["", "go", "v0"], ["v"], name="forever", body=body)],
        "main", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(True), "go"),
         numpy_helper.from_array(np.array(np.inf, np.float32), "limit")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="gen_service_models")
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


if __name__ == "__main__":
    out = os.path.join(HERE, "..", "tests", "data", "endless_loop.onnx")
    onnx.save(endless_loop(), out)
    print(out)
