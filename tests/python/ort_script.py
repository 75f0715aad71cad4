"""ort_script.py MODEL_DIR: a script written against ONNX Runtime's
documented Python API; the import line is the only change. It prints its
results as JSON; test_parity.py compares them with ONNX Runtime's own
(ref/ort_parity.json, from ort_reference.js with onnxruntime-node).

Session options with thread counts, get_inputs()[0].name, run(None, feed),
and a stateful model whose state output is fed back into the next call.
"""
import json
import os
import sys

import numpy as np

import keel as onnxruntime  # was: import onnxruntime


def inputs(t, n, batch):
    """Exact in float32: ((t*n + i) % 7 - 3) / 4 for element i."""
    i = np.arange(batch * n, dtype=np.int64)
    return (((t * n + i) % 7 - 3) / 4).astype(np.float32).reshape(batch, n)


def main(model_dir):
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = onnxruntime.InferenceSession(os.path.join(model_dir, "stateful.onnx"), so,
                                        providers=["CPUExecutionProvider"])
    x_name = sess.get_inputs()[0].name
    h_name = sess.get_inputs()[1].name
    state_index = [o.name for o in sess.get_outputs()].index("h_out")
    h = np.zeros((2, 8), dtype=np.float32)
    steps = []
    for t in range(6):
        outs = sess.run(None, {x_name: inputs(t, 4, 2), h_name: h})
        h = outs[state_index]          # the state goes back in
        steps.append({"y": outs[0].tolist(), "h": h.tolist()})

    relu = onnxruntime.InferenceSession(os.path.join(model_dir, "one_node.onnx"))
    x = inputs(3, 16, 1) * 2
    (y,) = relu.run([relu.get_outputs()[0].name], {relu.get_inputs()[0].name: x})

    alias = onnxruntime.InferenceSession(os.path.join(model_dir, "alias.onnx"))
    names = [o.name for o in alias.get_outputs()]
    outs = alias.run(names, {"x": np.array([1, -2, 3.5, 0.25], np.float32)})
    meta = sess.get_modelmeta()
    return {"steps": steps, "relu": y.tolist(), "alias": dict(zip(names, (o.tolist() for o in outs))),
            "meta": {"producer_name": meta.producer_name, "graph_name": meta.graph_name,
                     "domain": meta.domain, "description": meta.description,
                     "version": meta.version, "custom_metadata_map": meta.custom_metadata_map},
            "inputs": [[i.name, i.type, i.shape] for i in sess.get_inputs()],
            "outputs": [[o.name, o.type, o.shape] for o in sess.get_outputs()]}


if __name__ == "__main__":
    json.dump(main(sys.argv[1]), sys.stdout, indent=1)
    print()
