"""Bad input: the error names the input and says what was expected; the
session stays usable."""
import numpy as np
import pytest

import keel
from conftest import ROOT, model


def session():
    """Not a fixture: pytest keeps fixture values until after the autouse
    check that keel holds nothing."""
    return keel.InferenceSession(model("stateful.onnx"))


def good():
    return {"x": np.ones((2, 4), np.float32), "h": np.zeros((2, 8), np.float32)}


def test_unknown_input_name():
    s = session()
    feed = good()
    feed["hh"] = feed.pop("h")
    with pytest.raises(keel.InvalidArgument, match=r"Invalid input name: 'hh'.*\['x', 'h'\]"):
        s.run(None, feed)


def test_missing_input():
    s = session()
    with pytest.raises(keel.InvalidArgument, match=r"Required inputs \(\['h'\]\) are missing"):
        s.run(None, {"x": good()["x"]})


def test_wrong_dtype():
    s = session()
    feed = good()
    feed["h"] = feed["h"].astype(np.float64)
    with pytest.raises(keel.InvalidArgument, match=r"input 'h': got a float64 array, expected tensor\(float\)"):
        s.run(None, feed)


def test_wrong_rank_and_dims():
    s = session()
    feed = good()
    feed["x"] = np.ones((2, 5), np.float32)
    with pytest.raises(keel.InvalidArgument, match=r"input 'x': got shape \[2, 5\], expected \['batch', 4\]"):
        s.run(None, feed)
    feed["x"] = np.ones((8,), np.float32)
    with pytest.raises(keel.InvalidArgument, match=r"input 'x': got shape \[8\]"):
        s.run(None, feed)


def test_symbolic_dims_that_disagree_are_keel_errors():
    s = session()
    feed = good()
    feed["h"] = np.zeros((3, 8), np.float32)   # batch 2 vs 3: MatMul/Add cannot broadcast
    with pytest.raises(keel.KeelError, match="add0|broadcast|shape"):
        s.run(None, feed)
    assert s.run(None, good())[0].shape == (2, 8)     # still usable


def test_not_a_dict_and_bad_values():
    s = session()
    with pytest.raises(keel.InvalidArgument, match="dict"):
        s.run(None, [good()["x"]])
    feed = good()
    feed["x"] = object()
    with pytest.raises(keel.InvalidArgument, match="input 'x'"):
        s.run(None, feed)
    feed["x"] = None
    with pytest.raises(keel.InvalidArgument, match=r"input 'x': got None, expected tensor\(float\)"):
        s.run(None, feed)


def test_sequence_input_needs_a_list():
    path = "/usr/share/libonnx-testdata/data/node/test_identity_sequence/model.onnx"
    s = keel.InferenceSession(path)
    assert s.get_inputs()[0].type == "seq(tensor(float))"
    with pytest.raises(keel.InvalidArgument, match=r"input 'x': got numpy.ndarray, expected a list"):
        s.run(None, {"x": np.ones(3, np.float32)})
    with pytest.raises(keel.InvalidArgument, match=r"input 'x'.*expected tensor\(float\)"):
        s.run(None, {"x": [np.ones(3, np.float32), np.ones(3, np.int64)]})
    (y,) = s.run(None, {"x": [np.ones(3, np.float32), np.zeros(2, np.float32)]})
    assert [list(a) for a in y] == [[1, 1, 1], [0, 0]]


def test_output_names_must_be_names():
    s = session()
    with pytest.raises(keel.InvalidArgument, match="Invalid output name: 'z'"):
        s.run(["z"], good())
    with pytest.raises(TypeError):
        s.run(5, good())
