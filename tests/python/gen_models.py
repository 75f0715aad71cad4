"""gen_models.py: writes the small models the Python tests use into
tests/python/models (run once; the .onnx files are committed).

    PYTHONPATH=/work/shared/onnx-py /usr/bin/python3 tests/python/gen_models.py
    (Debian's onnx 1.12 works too: /usr/bin/python3 tests/python/gen_models.py)

stateful.onnx  an RNN cell: h' = tanh(x W + h U + b), y = 2 h'; its state
               output h_out is fed back as h (with metadata to read back)
one_node.onnx  one Relu over float [1, 16] (the per-call overhead benchmark)
alias.onnx     outputs that alias the input (Identity), a constant, and the
               same value twice, beside a fresh one
seq_opt.onnx   a sequence output, an optional input and an empty optional
strings.onnx   Identity over a string tensor
matmul.onnx    MatMul of a [m, k] and b [k, n] (the GIL test)
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


def save(model, name):
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, name))


def stateful():
    rng = np.random.default_rng(7)
    W = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32) * 0.5, "W")
    U = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.5, "U")
    b = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32) * 0.1, "b")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="xw"),
        helper.make_node("MatMul", ["h", "U"], ["hu"], name="hu"),
        helper.make_node("Add", ["xw", "hu"], ["s0"], name="add0"),
        helper.make_node("Add", ["s0", "b"], ["s1"], name="add1"),
        helper.make_node("Tanh", ["s1"], ["h_out"], name="tanh"),
        helper.make_node("Mul", ["h_out", "two"], ["y"], name="scale"),
    ]
    g = helper.make_graph(
        nodes, "rnn_cell",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["batch", 8])],
        [W, U, b, two], doc_string="one step of an RNN cell")
    m = helper.make_model(g, producer_name="keel-tests", producer_version="1.0",
                          domain="ai.keel.test", model_version=3,
                          doc_string="stateful model for the parity script",
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    helper.set_model_props(m, {"author": "keel", "purpose": "state fed back"})
    save(m, "stateful.onnx")


def one_node():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "one_node",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    save(m, "one_node.onnx")


def alias():
    c = numpy_helper.from_array(np.arange(4, dtype=np.float32), "c")
    nodes = [helper.make_node("Identity", ["x"], ["same"], name="same"),
             helper.make_node("Add", ["x", "x"], ["twice"], name="twice"),
             helper.make_node("Identity", ["c"], ["const_out"], name="const_out")]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    g = helper.make_graph(nodes, "alias", [vi("x")],
                          [vi("same"), vi("twice"), vi("const_out"), vi("c")], [c])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    save(m, "alias.onnx")


def seq_opt():
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="seq"),
             helper.make_node("OptionalHasElement", ["o"], ["has"], name="has"),
             helper.make_node("Optional", [], ["empty"], name="empty",
                              type=helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))]
    g = helper.make_graph(
        nodes, "seq_opt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]), helper.make_value_info("o", opt_t)],
        [helper.make_value_info("seq", seq_t),
         helper.make_tensor_value_info("has", TensorProto.BOOL, []),
         helper.make_value_info("empty", opt_t)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    m.ir_version = 8
    save(m, "seq_opt.onnx")


def strings():
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.STRING, ["n"])  # noqa: E731
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["t"], name="id")], "strings",
                          [vi("s")], [vi("t")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    save(m, "strings.onnx")


def matmul():
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], "matmul",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", "k"]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["k", "n"])],
                          [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["m", "n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    save(m, "matmul.onnx")


if __name__ == "__main__":
    os.makedirs(HERE, exist_ok=True)
    for f in (stateful, one_node, alias, seq_opt, strings, matmul):
        f()
    print("models written to", HERE)
