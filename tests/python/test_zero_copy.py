"""Zero-copy in both directions: inputs read in place when their layout
allows, copied when it does not, refused when the dtype differs; outputs
over keel's buffers that outlive the session; aliasing outputs copied."""
import gc

import numpy as np
import pytest

import keel
from conftest import model


def addr(a):
    return a.__array_interface__["data"][0]


def test_contiguous_input_is_read_in_place():
    s = keel.InferenceSession(model("stateful.onnx"))
    x = np.ones((3, 4), np.float32)
    h = np.zeros((3, 8), np.float32)
    p = s._sess._feed_pointers({"x": x, "h": h})
    assert p == {"x": addr(x), "h": addr(h)}
    # the run reads the same memory: writing the array changes the result
    y1 = s.run(["y"], {"x": x, "h": h})[0]
    x[:] = 0
    y2 = s.run(["y"], {"x": x, "h": h})[0]
    assert not np.array_equal(y1, y2)


def test_strided_and_swapped_inputs_are_copied_correctly():
    s = keel.InferenceSession(model("one_node.onnx"))
    base = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 32)
    strided = base[:, ::2]
    assert not strided.flags.c_contiguous
    assert s._sess._feed_pointers({"x": strided})["x"] != addr(strided)
    np.testing.assert_array_equal(s.run(None, {"x": strided})[0], np.maximum(strided, 0))
    swapped = np.ascontiguousarray(strided).astype(">f4")
    np.testing.assert_array_equal(s.run(None, {"x": swapped})[0], np.maximum(strided, 0))
    fortran = np.asfortranarray(np.ones((1, 16), np.float32))
    assert s.run(None, {"x": fortran})[0].sum() == 16


def test_lists_are_converted_to_the_declared_dtype():
    s = keel.InferenceSession(model("one_node.onnx"))
    (y,) = s.run(None, {"x": [[-1.0] * 8 + [2.0] * 8]})
    assert y.dtype == np.float32 and y.sum() == 16


def test_other_dtype_is_refused_not_misread():
    s = keel.InferenceSession(model("one_node.onnx"))
    for bad in (np.ones((1, 16), np.float64), np.ones((1, 16), np.int32), np.ones((1, 16), np.float16)):
        with pytest.raises(keel.InvalidArgument, match=r"input 'x'.*expected tensor\(float\)"):
            s.run(None, {"x": bad})


def test_outputs_are_over_keel_buffers_and_outlive_the_session():
    s = keel.InferenceSession(model("one_node.onnx"))
    x = np.arange(16, dtype=np.float32).reshape(1, 16) - 8
    (y,) = s.run(None, {"x": x})
    assert type(y.base).__name__ == "Buffer"
    assert y.flags.writeable and y.flags.c_contiguous
    del s
    gc.collect()
    assert keel.process_bytes() > 0      # y still holds its block
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    y += 1                               # writable, nobody else sees it
    del y
    gc.collect()
    assert keel.process_bytes() == 0


def test_aliasing_outputs_are_copies():
    s = keel.InferenceSession(model("alias.onnx"))
    x = np.array([1, 2, 3, 4], np.float32)
    same, twice, const_out, c = s.run(None, {"x": x})
    assert addr(same) != addr(x)          # aliases the input: copied
    same[:] = -1
    np.testing.assert_array_equal(x, [1, 2, 3, 4])
    const_out[:] = 99                     # a constant of the model: copied
    c[:] = 98
    again = s.run(["const_out", "c"], {"x": x})
    np.testing.assert_array_equal(again[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(again[1], [0, 1, 2, 3])
    assert type(twice.base).__name__ == "Buffer"


def test_input_array_lives_while_keel_needs_it():
    s = keel.InferenceSession(model("alias.onnx"))
    outs = s.run(["same"], {"x": np.array([5, 6, 7, 8], np.float32)})  # the array dies here
    gc.collect()
    np.testing.assert_array_equal(outs[0], [5, 6, 7, 8])
