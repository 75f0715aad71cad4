"""ONNX Runtime's API over keel: options, providers, descriptions,
metadata, run variants, values of every kind, profiling."""
import json
import os
import pathlib
import warnings

import numpy as np
import pytest

import keel
from conftest import ROOT, model


GPUS = keel._keel.gpu_count()


def test_providers_and_device():
    cuda = ["CUDAExecutionProvider"] if GPUS else []
    assert keel.get_available_providers() == cuda + ["CPUExecutionProvider"]
    assert keel.get_device() == ("GPU" if GPUS else "CPU")
    assert keel.get_all_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    s = keel.InferenceSession(model("one_node.onnx"), providers=["CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]
    assert keel.__version__.count(".") == 2


@pytest.mark.skipif(GPUS > 0, reason="a GPU is there: CUDAExecutionProvider is available")
def test_unavailable_provider_warns_and_falls_back():
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        s = keel.InferenceSession(model("one_node.onnx"),
                                  providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    x = np.ones((1, 16), np.float32)
    assert s.run(None, {"x": x})[0].sum() == 16


@pytest.mark.skipif(GPUS == 0, reason="no NVIDIA GPU")
def test_cuda_provider_runs_on_the_gpu():
    s = keel.InferenceSession(model("one_node.onnx"),
                              providers=[("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"])
    assert s.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    x = np.ones((1, 16), np.float32)
    assert s.run(None, {"x": x})[0].sum() == 16
    assert "allocated_bytes.all.current" in s.memory_stats("cuda:0")


def test_device_session_through_the_extension():
    """The emulated device (no GPU needed): the same outputs as the CPU,
    device memory figures of their own, nothing held afterwards."""
    path = model("one_node.onnx")
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(1, 16)
    cpu = keel.InferenceSession(path).run(None, {"x": x})[0]
    s = keel._keel.Session(path, device="emu")
    out = s.run(None, {"x": x})[0]
    np.testing.assert_allclose(out, cpu, rtol=1e-6, atol=1e-7)
    st = s.stats(device=True)
    assert st["device"] == "emu:0" and st["allocated"] == 0 and st["allocated_peak"] > 0
    assert s.stats()["device"] == "cpu"
    del s
    assert keel._keel.process_device_bytes() == 0
    with pytest.raises(keel.InvalidArgument):
        keel._keel.Session(path).stats(device=True)
    with pytest.raises(Exception, match="emu:3"):
        keel._keel.Session(path, device="emu:3")


def test_malformed_providers_are_refused():
    with pytest.raises(ValueError):
        keel.InferenceSession(model("one_node.onnx"), providers=[42])
    with pytest.raises(ValueError):
        keel.InferenceSession(model("one_node.onnx"), providers=["CPUExecutionProvider"],
                              provider_options=[{}, {}])


def test_session_options():
    so = keel.SessionOptions()
    so.intra_op_num_threads = 4
    so.inter_op_num_threads = 2
    so.graph_optimization_level = keel.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.log_severity_level = 3
    so.mem_limit = 1 << 30
    assert so.graph_optimization_level == 2 and so.intra_op_num_threads == 4
    with pytest.raises(AttributeError):
        so.no_such_option = 1           # ONNX Runtime refuses unknown attributes
    with pytest.raises(AttributeError):
        so.no_such_option
    with pytest.raises(TypeError):
        so.intra_op_num_threads = "four"
    so.add_session_config_entry("session.use_env_allocators", "1")
    assert so.get_session_config_entry("session.use_env_allocators") == "1"
    s = keel.InferenceSession(model("one_node.onnx"), sess_options=so)
    assert s.get_session_options() is so
    assert s.memory_stats()["keel.mem_limit"] == 1 << 30
    with pytest.raises(TypeError):
        keel.InferenceSession(model("one_node.onnx"), sess_options={"threads": 1})


def test_deterministic_compute():
    """use_deterministic_compute: the same bits at 1 and 8 threads (a
    product split in bands of rows, and with a tail, would round otherwise)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = rng.standard_normal((768, 64)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [100, 768])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.standard_normal((100, 768)).astype(np.float32)
    ys = []
    for threads in (1, 8):
        so = keel.SessionOptions()
        so.intra_op_num_threads = threads
        so.use_deterministic_compute = True
        ys.append(keel.InferenceSession(m, sess_options=so).run(None, {"x": x})[0])
    assert np.array_equal(ys[0], ys[1])
    np.testing.assert_allclose(ys[0], x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_unknown_keyword_warns():
    with pytest.warns(RuntimeWarning, match="disabled_optimizers"):
        keel.InferenceSession(model("one_node.onnx"), disabled_optimizers=["X"])


def test_unknown_config_entry_warns():
    so = keel.SessionOptions()
    so.add_session_config_entry("my.own.key", "x")
    with pytest.warns(RuntimeWarning, match="my.own.key"):
        keel.InferenceSession(model("one_node.onnx"), so)


def test_inputs_outputs_and_metadata():
    s = keel.InferenceSession(model("stateful.onnx"))
    ins, outs = s.get_inputs(), s.get_outputs()
    assert [(i.name, i.type, i.shape) for i in ins] == [
        ("x", "tensor(float)", ["batch", 4]), ("h", "tensor(float)", ["batch", 8])]
    assert [(o.name, o.type, o.shape) for o in outs] == [
        ("y", "tensor(float)", ["batch", 8]), ("h_out", "tensor(float)", ["batch", 8])]
    m = s.get_modelmeta()
    assert (m.producer_name, m.graph_name, m.domain, m.version) == (
        "keel-tests", "rnn_cell", "ai.keel.test", 3)
    assert m.description == "stateful model for the parity script"
    assert m.graph_description == "one step of an RNN cell"
    assert m.custom_metadata_map == {"author": "keel", "purpose": "state fed back"}


def test_sequence_and_optional_types():
    s = keel.InferenceSession(model("seq_opt.onnx"))
    assert [(i.name, i.type) for i in s.get_inputs()] == [
        ("x", "tensor(float)"), ("o", "optional(tensor(float))")]
    assert [(o.name, o.type) for o in s.get_outputs()] == [
        ("seq", "seq(tensor(float))"), ("has", "tensor(bool)"), ("empty", "optional(tensor(float))")]
    x = np.array([1, 2, 3], np.float32)
    seq, has, empty = s.run(None, {"x": x, "o": None})
    assert isinstance(seq, list) and len(seq) == 2
    np.testing.assert_array_equal(seq[1], x)
    assert has.dtype == np.bool_ and not bool(has)
    assert empty is None
    _, has, _ = s.run(None, {"x": x, "o": x})
    assert bool(has)


def test_strings():
    s = keel.InferenceSession(model("strings.onnx"))
    (t,) = s.run(None, {"s": np.array(["a", "héllo", ""], dtype=object)})
    assert t.dtype == object and list(t) == ["a", "héllo", ""]
    (t,) = s.run(None, {"s": np.array(["x", "yz"])})          # numpy unicode array
    assert list(t) == ["x", "yz"]


def test_run_output_names_and_order():
    s = keel.InferenceSession(model("alias.onnx"))
    x = np.array([1, 2, 3, 4], np.float32)
    twice, same = s.run(["twice", "same"], {"x": x})
    np.testing.assert_array_equal(twice, 2 * x)
    np.testing.assert_array_equal(same, x)
    assert len(s.run([], {"x": x})) == 4          # empty: all, as ONNX Runtime
    a, b = s.run(["twice", "twice"], {"x": x})
    assert a is not b and np.array_equal(a, b)
    with pytest.raises(keel.InvalidArgument, match="nope"):
        s.run(["nope"], {"x": x})


def test_model_from_bytes_and_pathlike():
    data = open(model("one_node.onnx"), "rb").read()
    x = -np.ones((1, 16), np.float32)
    for src in (data, bytearray(data), pathlib.Path(model("one_node.onnx"))):
        assert keel.InferenceSession(src).run(None, {"x": x})[0].max() == 0


def test_load_errors():
    with pytest.raises(keel.FileError):
        keel.InferenceSession("/no/such/model.onnx")
    with pytest.raises(keel.InvalidModel):
        keel.InferenceSession(b"\x08\x07\x12\xff\xff\xff\xff garbage")
    with pytest.raises(TypeError):
        keel.InferenceSession(12)
    assert issubclass(keel.InvalidArgument, keel.KeelError)
    assert issubclass(keel.InvalidArgument, ValueError)
    assert issubclass(keel.OutOfMemory, MemoryError)


def test_run_options():
    s = keel.InferenceSession(model("one_node.onnx"))
    ro = keel.RunOptions()
    ro.log_severity_level = 3
    x = np.ones((1, 16), np.float32)
    assert s.run(None, {"x": x}, ro)[0].sum() == 16
    ro.terminate = True
    with pytest.raises(keel.KeelError, match="terminate"):
        s.run(None, {"x": x}, ro)
    with pytest.raises(AttributeError):
        ro.bogus = 1


def test_end_profiling_writes_chrome_trace(tmp_path):
    so = keel.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    s = keel.InferenceSession(os.path.join(ROOT, "tests/models/nested_loop_if/model.onnx"), so)
    feed = {"x": np.ones((2, 3), np.float32), "n": np.array(3, np.int64), "m": np.array(2, np.int64)}
    s.run(None, feed)
    path = s.end_profiling()
    assert path.startswith(str(tmp_path / "prof")) and path.endswith(".json")
    trace = json.load(open(path))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("ph") == "X" for e in events)
    assert keel.InferenceSession(model("one_node.onnx")).end_profiling() == ""


def test_describe():
    s = keel.InferenceSession(model("stateful.onnx"))
    assert "rnn_cell" in s.describe() or "MatMul" in s.describe()
    counts = s.describe(as_json=True)["op_counts"]  # the graph as run: products by
    assert counts.get("MatMul", 0) + counts.get("FusedMatMul", 0) == 2  # constants are fused


def test_warnings_filter_does_not_break_runs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = keel.InferenceSession(model("one_node.onnx"))
        s.run(None, {"x": np.ones((1, 16), np.float32)})
