"""`pip install --no-build-isolation ./python` into a venv, offline, gives
the same package (with libkeel inside it): what the README documents."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = """
import os, sys, numpy as np, keel
assert keel.__file__.startswith(sys.prefix), keel.__file__
s = keel.InferenceSession(sys.argv[1])
(y,) = s.run(None, {"x": np.arange(16, dtype=np.float32).reshape(1, 16) - 8})
print(keel.__version__, int(y.sum()), keel.get_available_providers()[0])
"""


@pytest.mark.skipif(os.environ.get("KEEL_PRELOAD") is not None, reason="release build only")
@pytest.mark.skipif(not os.environ.get("KEEL_BUILD_DIR"), reason="run by ctest (KEEL_BUILD_DIR)")
def test_pip_install_into_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD")}
    env["KEEL_LIB_DIR"] = os.environ["KEEL_BUILD_DIR"]   # reuse this build's libkeel.so
    env["PIP_NO_INDEX"] = "1"                              # offline
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation",
                          os.path.join(ROOT, "python")], env=env, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    run = subprocess.run([str(venv / "bin" / "python"), "-c", SCRIPT,
                          os.path.join(ROOT, "tests/python/models/one_node.onnx")],
                         env=env, cwd=str(tmp_path), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    import keel
    assert run.stdout.split() == [keel.__version__, str(sum(range(8))), "CPUExecutionProvider"]
