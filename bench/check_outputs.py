#!/usr/bin/python3
"""check_outputs.py: keel's outputs against ONNX Runtime's (and PyTorch's)
on the benchmark model set.

    /usr/bin/python3 bench/check_outputs.py [MODELS_DIR] [--keel build/keel]
                                           [--tol 1e-3] [--only NAME,...]

For each MODELS_DIR/NAME (bench/models/gen.py's output): `keel run --data
test_data_set_0 --out DIR`, `node bench/ort_bench.js --dump DIR` (one run,
NODE_PATH must find onnxruntime-node) and the data set's output_K.pb
(PyTorch's results). The error of an output is max|a - b| / max|b|, with b
ONNX Runtime's (or PyTorch's) output; every output must be within --tol.
Exit status 1 if any is not. Needs numpy and onnx (python3-onnx).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import numpy_helper, TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ORT_TYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64,
             "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def load_pb(path):
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    return float(np.max(np.abs(a - b))) / scale if a.size else 0.0


def keel_outputs(keel, model_dir, tmp):
    out = os.path.join(tmp, "keel")
    ds = os.path.join(model_dir, "test_data_set_0")
    subprocess.run([keel, "run", os.path.join(model_dir, "model.onnx"), "--data", ds, "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    n = len([f for f in os.listdir(out) if f.startswith("output_")])
    return [load_pb(os.path.join(out, f"output_{k}.pb")) for k in range(n)]


def ort_outputs(model_dir, tmp):
    out = os.path.join(tmp, "ort")
    ds = os.path.join(model_dir, "test_data_set_0")
    subprocess.run(["node", os.path.join(HERE, "ort_bench.js"), os.path.join(model_dir, "model.onnx"),
                    ds, "--iters", "1", "--warmup", "0", "--dump", out],
                   check=True, stdout=subprocess.DEVNULL)
    meta = json.load(open(os.path.join(out, "outputs.json")))
    res = []
    for k, m in enumerate(meta):
        raw = np.fromfile(os.path.join(out, f"output_{k}.bin"), dtype=ORT_TYPES[m["type"]])
        res.append(raw.reshape(m["dims"]))
    return res


def check(name, model_dir, keel, tol):
    ds = os.path.join(model_dir, "test_data_set_0")
    with tempfile.TemporaryDirectory() as tmp:
        k = keel_outputs(keel, model_dir, tmp)
        o = ort_outputs(model_dir, tmp)
    # models written without PyTorch (gen_paddle.py) have no output_K.pb
    torch_out = [load_pb(os.path.join(ds, f"output_{i}.pb"))
                 if os.path.exists(os.path.join(ds, f"output_{i}.pb")) else None for i in range(len(k))]
    ok = len(k) == len(o)
    parts = []
    for i in range(min(len(k), len(o))):
        e_ort = rel_err(k[i], o[i])
        e_torch = rel_err(k[i], torch_out[i]) if torch_out[i] is not None else 0.0
        ok = ok and e_ort <= tol and e_torch <= tol
        vs_torch = f" vs PyTorch {e_torch:.1e}" if torch_out[i] is not None else ""
        parts.append(f"out{i} {list(k[i].shape)} vs ORT {e_ort:.1e}{vs_torch}")
    print(f"{'ok  ' if ok else 'FAIL'} {name:14s} " + "; ".join(parts), flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="?", default=os.path.join(ROOT, "build", "bench-models"))
    ap.add_argument("--keel", default=os.path.join(ROOT, "build", "keel"))
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    names = sorted(d for d in os.listdir(a.models)
                   if os.path.isfile(os.path.join(a.models, d, "model.onnx")) and (not only or d in only))
    if not names:
        print(f"no models in {a.models} (run bench/models/gen.py)", file=sys.stderr)
        return 1
    bad = [n for n in names if not check(n, os.path.join(a.models, n), a.keel, a.tol)]
    print(f"{len(names) - len(bad)} of {len(names)} models within {a.tol:g} of ONNX Runtime and PyTorch")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
