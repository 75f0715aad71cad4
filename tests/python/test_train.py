"""keel.Trainer: keel's trainer from Python, against PyTorch's recorded
training of tests/train/mlp_plain (tests/train/gen.py), checkpoints, bad
input, and data-parallel training under mpirun against one process."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keel

from conftest import ROOT

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

MLP = os.path.join(ROOT, "tests", "train", "mlp_plain")


def batch(d):
    out = []
    for f in sorted(x for x in os.listdir(d) if x.startswith("input_")):
        t = onnx.TensorProto()
        with open(os.path.join(d, f), "rb") as fh:
            t.ParseFromString(fh.read())
        out.append(numpy_helper.to_array(t))
    return out


BATCHES = [batch(os.path.join(MLP, f"data_{i}")) for i in range(32)]


def trainer(**kw):
    return keel.Trainer(os.path.join(MLP, "model.onnx"), loss="loss", optimizer="sgd", lr=0.1, **kw)


def test_matches_pytorch(tmp_path):
    with open(os.path.join(MLP, "expected.json")) as f:
        want = json.load(f)
    t = trainer()
    assert t.inputs() == ["x", "y"]
    losses = [t.step(BATCHES[k % 32]) for k in range(40)]
    np.testing.assert_allclose(losses, want["losses"], rtol=1e-3)
    params = np.load(os.path.join(MLP, "expected_params.npz"))
    for name in t.param_names():
        np.testing.assert_allclose(t.param(name), params[name], atol=1e-4, rtol=1e-3)
    s = t.stats()
    assert s["steps"] == 40 and s["ranks"] == 1 and s["allocated"] == s["param_bytes"] + s["state_bytes"]
    t.save(str(tmp_path / "trained.onnx"))
    saved = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "trained.onnx")).graph.initializer}
    assert np.array_equal(saved["w1"], t.param("w1"))
    del t


def test_checkpoint_resumes_bit_for_bit(tmp_path):
    a = keel.Trainer(os.path.join(MLP, "model.onnx"), loss="loss", optimizer="adam", lr=0.01)
    for k in range(20):
        a.step(BATCHES[k])
    a.checkpoint_save(str(tmp_path / "ck"))
    rest = [a.step(BATCHES[k]) for k in range(20, 30)]
    b = keel.Trainer(os.path.join(MLP, "model.onnx"), loss="loss", optimizer="adam", lr=0.01)
    b.checkpoint_load(str(tmp_path / "ck"))
    assert b.stats()["steps"] == 20
    assert [b.step(BATCHES[k]) for k in range(20, 30)] == rest
    assert all(np.array_equal(a.param(n), b.param(n)) for n in a.param_names())
    del a, b


def test_bad_input_leaves_it_usable():
    t = trainer()
    with pytest.raises(keel.InvalidArgument, match="float64"):
        t.step([BATCHES[0][0].astype(np.float64), BATCHES[0][1]])
    with pytest.raises(keel.InvalidArgument, match="1 inputs given"):
        t.step([BATCHES[0][0]])
    with pytest.raises(keel.InvalidArgument, match="'y' is missing"):
        t.step({"x": BATCHES[0][0]})
    with pytest.raises(keel.KeelError):
        t.step([BATCHES[0][0][:, :3], BATCHES[0][1]])  # a wrong shape
    assert np.isfinite(t.step({"x": BATCHES[0][0], "y": BATCHES[0][1]}))
    with pytest.raises(keel.InvalidArgument, match="optimizer 'lamb'"):
        keel.Trainer(os.path.join(MLP, "model.onnx"), loss="loss", optimizer="lamb", lr=0.1)
    with pytest.raises(keel.KeelError, match="nope"):
        keel.Trainer(os.path.join(MLP, "model.onnx"), loss="nope", optimizer="sgd", lr=0.1)
    with pytest.raises(keel.KeelError):
        t.param("not_a_parameter")
    del t


SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import keel
    from test_train import batch
    parts = json.loads(sys.argv[2])
    t = keel.Trainer(sys.argv[3], loss="loss", optimizer="momentum", lr=0.05, data_parallel=True,
                     bucket_mb=0.0005, shard_optimizer=True)
    s = t.stats()
    mine = [batch(p) for p in parts[s["rank"]::s["ranks"]]]
    losses = [t.step(mine[k % len(mine)]) for k in range(8)]
    if s["rank"] == 0:
        print(json.dumps({"losses": losses, "w1": t.param("w1").tolist(), "stats": t.stats()}))
    del t
""")


def test_data_parallel_under_mpirun(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
    import dp_check
    launcher = dp_check.mpi_launcher()
    if not launcher:
        pytest.skip("mpirun not found")
    if os.environ.get("LD_PRELOAD"):
        pytest.skip("a sanitizer runtime is preloaded: MPI's own allocations are not keel's")
    whole, parts = dp_check.make_batches("mlp_plain", 0, 2, 4, str(tmp_path), onnx, numpy_helper)
    one = keel.Trainer(os.path.join(MLP, "model.onnx"), loss="loss", optimizer="momentum", lr=0.05)
    want = [one.step(batch(whole[k % len(whole)])) for k in range(8)]
    w1 = one.param("w1")
    del one
    script = tmp_path / "dp.py"
    script.write_text(SCRIPT)
    p = subprocess.run([*launcher, "-np", "2", sys.executable, str(script), os.path.dirname(__file__),
                        json.dumps(parts), os.path.join(MLP, "model.onnx")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    assert p.returncode == 0, p.stdout[-3000:]
    got = json.loads([x for x in p.stdout.splitlines() if x.startswith("{")][-1])
    np.testing.assert_allclose(got["losses"], want, rtol=1e-4)
    np.testing.assert_allclose(np.array(got["w1"], np.float32), w1, atol=1e-5, rtol=1e-4)
    assert got["stats"]["ranks"] == 2 and got["stats"]["buckets"] > 1
