#!/usr/bin/env python3
"""make_seeds.py: edge-value seeds for fuzz_run from the ONNX backend tests.

Byte mutation rarely turns a valid model into one with an attribute of
INT64_MAX, an input dimension of 0 or an older opset while keeping the rest
valid; those are where kernels overflow, form NULL + 0 or loop for minutes.
This script writes such models directly, one change per file:

  - the test's inputs baked in as initializers (fuzz_run then runs the real
    data instead of bytes of the model), "...__baked.onnx";
  - every INT / INTS element / FLOAT / FLOATS element pushed to an extreme;
  - every element (first 6) of every baked input pushed to an extreme;
  - every baked input made empty along one dim, and every declared input
    dim set to 0, 1, 64 or 100;
  - the baked model under other opset versions (the legacy kernel paths).

Usage (python3 with the onnx package):
  python3 fuzz/make_seeds.py OUT_DIR /usr/share/libonnx-testdata/data/node/*/
  build-fuzz/fuzz_run -merge=1 CORPUS OUT_DIR      # keep what adds coverage
  build-fuzz/fuzz_run OUT_DIR/*                    # or run them all once
"""
import copy
import glob
import os
import sys

import numpy as np
import onnx
from onnx import AttributeProto as A
from onnx import numpy_helper

INTS = [-1, 0, 2**31 - 1, 2**40, -(2**40), 2**62, -(2**63), 2**63 - 1]
FLOATS = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 3e9, -3e9]
DIMS = [0, 1, 64, 100]
OPSETS = [1, 5, 6, 7, 9, 10, 11, 12, 13, 16, 18, 20]


class Out:
    def __init__(self, folder):
        self.folder, self.n = folder, 0

    def write(self, base, tag, m):
        name = f"{base}__{tag}.onnx".replace("/", "_")
        with open(os.path.join(self.folder, name), "wb") as f:
            f.write(m.SerializeToString())
        self.n += 1


def test_inputs(folder, m):
    """The test's inputs as (name, array), or None when they cannot be baked."""
    files = sorted(glob.glob(os.path.join(folder, "test_data_set_0", "input_*.pb")))
    inits = {t.name for t in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    if len(files) != len(names):
        return None
    arrs = []
    for path, name in zip(files, names):
        t = onnx.TensorProto()
        try:
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            a = numpy_helper.to_array(t)
        except Exception:  # sequences, optionals: left as inputs
            return None
        if a.dtype == object:
            return None
        arrs.append((name, a))
    return arrs


def baked(m, arrs, name=None, value=None):
    """m with arrs as initializers, `name` replaced by `value`."""
    m = copy.deepcopy(m)
    for n, a in arrs:
        m.graph.initializer.append(numpy_helper.from_array(value if n == name else a, n))
    return m


def attr_variants(out, base, m0):
    for ni, node in enumerate(m0.graph.node):
        for ai, a in enumerate(node.attribute):
            if a.type in (A.INT, A.FLOAT):
                for v in INTS if a.type == A.INT else FLOATS:
                    m = copy.deepcopy(m0)
                    setattr(m.graph.node[ni].attribute[ai], "i" if a.type == A.INT else "f", v)
                    out.write(base, f"n{ni}a{ai}v{v}", m)
            elif a.type in (A.INTS, A.FLOATS):
                field = "ints" if a.type == A.INTS else "floats"
                for j in range(len(getattr(a, field))):
                    for v in INTS if a.type == A.INTS else FLOATS:
                        m = copy.deepcopy(m0)
                        getattr(m.graph.node[ni].attribute[ai], field)[j] = v
                        out.write(base, f"n{ni}a{ai}e{j}v{v}", m)


def dim_variants(out, base, m0):
    for ii, inp in enumerate(m0.graph.input):
        if not inp.type.HasField("tensor_type"):
            continue
        for di in range(len(inp.type.tensor_type.shape.dim)):
            for v in DIMS:
                m = copy.deepcopy(m0)
                m.graph.input[ii].type.tensor_type.shape.dim[di].dim_value = v
                out.write(base, f"in{ii}d{di}v{v}", m)


def data_variants(out, base, m0, arrs):
    for k, (name, a) in enumerate(arrs):
        if a.size <= 4096 and a.dtype.kind in "iuf":
            exts = FLOATS if a.dtype.kind == "f" else INTS
            if a.dtype.kind == "u":
                exts = [0, int(np.iinfo(a.dtype).max)]
            for j in range(min(a.size, 6)):
                for v in exts:
                    b = a.copy().reshape(-1)
                    if a.dtype.kind != "f":
                        info = np.iinfo(a.dtype)
                        v = max(min(v, int(info.max)), int(info.min))
                    with np.errstate(all="ignore"):  # 1e30 in float16 is inf: fine
                        b[j] = v
                    out.write(base, f"x{k}e{j}v{v}", baked(m0, arrs, name, b.reshape(a.shape)))
        for d in range(a.ndim):
            shape = list(a.shape)
            shape[d] = 0
            out.write(base, f"x{k}d{d}empty", baked(m0, arrs, name, np.zeros(shape, a.dtype)))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = Out(sys.argv[1])
    os.makedirs(out.folder, exist_ok=True)
    for folder in sys.argv[2:]:
        base = os.path.basename(folder.rstrip("/"))
        try:
            m0 = onnx.load(os.path.join(folder, "model.onnx"))
        except Exception:
            continue
        attr_variants(out, base, m0)
        dim_variants(out, base, m0)
        arrs = test_inputs(folder, m0)
        if arrs is None:
            continue
        mb = baked(m0, arrs)
        out.write(base, "baked", mb)
        attr_variants(out, base + "__baked", mb)
        data_variants(out, base, m0, arrs)
        for v in OPSETS:
            m = copy.deepcopy(mb)
            for o in m.opset_import:
                if o.domain in ("", "ai.onnx"):
                    o.version = v
            out.write(base, f"opset{v}", m)
    print(f"{out.n} models in {out.folder}")


if __name__ == "__main__":
    main()
