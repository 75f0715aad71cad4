#!/usr/bin/env python3
"""Helper of gen.py, run under the ONNX 1.23 reference evaluator
(PYTHONPATH=../shared/onnx-py): the loss of MODEL_DIR/model.onnx on each of
its first N data_K batches, with the exported (initial) initializers and
with those of MODEL_DIR/.trained.npz. Prints {"initial": [...],
"trained": [...]} as JSON.

Run: PYTHONPATH=/work/shared/onnx-py python3 tests/train/ref_eval.py DIR N
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator


def losses(model, d, n):
    ev = ReferenceEvaluator(model)
    names = [i.name for i in model.graph.input]
    out = []
    for k in range(n):
        feeds = {}
        for j, nm in enumerate(names):
            t = onnx.TensorProto()
            with open(os.path.join(d, f"data_{k}", f"input_{j}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            feeds[nm] = numpy_helper.to_array(t)
        out.append(float(ev.run(["loss"], feeds)[0]))
    return out


def main():
    d, n = sys.argv[1], int(sys.argv[2])
    model = onnx.load(os.path.join(d, "model.onnx"))
    res = {"initial": losses(model, d, n)}
    trained = np.load(os.path.join(d, ".trained.npz"))
    for init in model.graph.initializer:
        if init.name in trained.files:
            init.CopyFrom(numpy_helper.from_array(trained[init.name], init.name))
    res["trained"] = losses(model, d, n)
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
