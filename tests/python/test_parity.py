"""Parity: a script written for ONNX Runtime gives ONNX Runtime's outputs
(ref/ort_parity.json, from onnxruntime-node); and sess.run over the suite
models gives the outputs `keel test` checks (the backend-test data sets,
with keel test's tolerance)."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keel
from conftest import HERE, MODELS, ROOT

ONNX_DATA = "/usr/share/libonnx-testdata/data"


def close(got, want):
    """keel test's rule: floats |a-b| <= 1e-5 + 1e-3|b| (NaN matches NaN),
    everything else exactly."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "fc":
        return bool(np.all(np.isclose(got, want, rtol=1e-3, atol=1e-5, equal_nan=True)))
    return bool(np.array_equal(got, want))


def same_value(got, want):
    if want is None or got is None:
        return got is None and want is None
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            close(g, w) for g, w in zip(got, want))
    return close(got, want)


# ------------------------------------------------ the ONNX Runtime script
def test_ort_script_gives_onnx_runtime_outputs():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, os.path.join(HERE, "ort_script.py"), MODELS], env=env,
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    ref = json.load(open(os.path.join(HERE, "ref", "ort_parity.json")))
    assert len(got["steps"]) == len(ref["steps"]) == 6
    for t, (g, r) in enumerate(zip(got["steps"], ref["steps"])):
        # the state fed back: every step depends on the ones before
        np.testing.assert_allclose(g["h"], r["h"], rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
        np.testing.assert_allclose(g["y"], r["y"], rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
    assert got["relu"] == ref["relu"]
    assert got["alias"] == ref["alias"]
    assert got["meta"]["custom_metadata_map"] == {"author": "keel", "purpose": "state fed back"}
    assert got["inputs"][0] == ["x", "tensor(float)", ["batch", 4]]


# ------------------------------------------------------- the suite models
def suite_cases():
    """tests/models, the control-flow list and the node tests keel passes
    (every 10th with KEEL_PY_QUICK=1, as in the sanitizer build)."""
    cases = sorted(glob.glob(os.path.join(ROOT, "tests/models/*/")))
    conf = os.path.join(ROOT, "tests/conformance")
    step = 10 if os.environ.get("KEEL_PY_QUICK") else 1
    node = [line.strip() for line in open(os.path.join(conf, "node.pass")) if line.strip()]
    cases += [os.path.join(ONNX_DATA, "node", n) for n in node[::step]]
    for line in open(os.path.join(conf, "control_flow.list")):
        c = os.path.join(ONNX_DATA, line.strip())
        if line.strip() and c not in cases:
            cases.append(c)
    return [c.rstrip("/") for c in cases]


def pb_kind(desc):
    kind, optional = desc[3], desc[4]
    return 3 if optional else kind


@pytest.mark.parametrize("case", suite_cases(), ids=lambda c: os.path.relpath(c, ROOT) if c.startswith(ROOT) else os.path.relpath(c, ONNX_DATA))
def test_suite_model(case):
    if not os.path.isdir(case):
        pytest.skip(f"{case} not installed")
    sess = keel._keel.Session(os.path.join(case, "model.onnx"), log_level=4)
    if sess.is_random():
        pytest.skip("random ops: checked by property in keel test")
    ins, outs = sess.inputs(), sess.outputs()
    if any(d[6] == 16 for d in ins):
        pytest.skip("bfloat16 inputs: numpy has no bfloat16")
    for ds in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
        feed = {}
        for k in range(n_in):
            data = open(os.path.join(ds, f"input_{k}.pb"), "rb").read()
            feed[ins[k][0]] = sess._from_pb(data, pb_kind(ins[k]))
        got = sess.run(None, feed)
        for k, desc in enumerate(outs):
            data = open(os.path.join(ds, f"output_{k}.pb"), "rb").read()
            want = sess._from_pb(data, pb_kind(desc))
            assert same_value(got[k], want), f"{os.path.basename(ds)}: output {desc[0]}"
    del sess
