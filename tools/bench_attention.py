#!/usr/bin/env python3
"""bench_attention.py: models and inputs for timing keel's Attention kernel.

    PYTHONPATH=../shared/onnx-py /usr/bin/python3 tools/bench_attention.py DIR

writes into DIR:
  prefill.onnx   Attention-23, causal GQA: Q [1,16,512,64], K/V [1,4,512,64]
  prefill_expanded.onnx  the same computed by ONNX's function body (MatMul,
                 Softmax, masks: what a runtime without the op runs)
  decode.onnx    Attention-23, one query over a 2047-token past:
                 Q [1,32,1,128], K/V [1,8,1,128], past [1,8,2047,128]
  *.pb           the inputs, and run.sh with the keel command lines.
The expanded model is the function body of test_attention_4d_gqa_causal
from ../shared/onnx-tests/node with its fixed shapes removed.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save_inputs(d, arrays):
    for n, a in arrays.items():
        with open(os.path.join(d, n + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())


def attention_model(path, inputs, outputs, **attrs):
    node = helper.make_node("Attention", inputs, outputs, **attrs)
    g = helper.make_graph([node], "bench",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs if n],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    onnx.save(m, path)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "bench"
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(0)
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
    save_inputs(d, {"Q": u(1, 16, 512, 64), "K": u(1, 4, 512, 64), "V": u(1, 4, 512, 64)})
    attention_model(os.path.join(d, "prefill.onnx"), ["Q", "K", "V"], ["Y"], is_causal=1)
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, "..", "..", "shared", "onnx-tests", "node",
                       "test_attention_4d_gqa_causal_expanded", "model.onnx")
    if os.path.exists(src):
        m = onnx.load(src)
        for vi in list(m.graph.input) + list(m.graph.output):
            vi.type.tensor_type.ClearField("shape")
        del m.graph.value_info[:]
        onnx.save(m, os.path.join(d, "prefill_expanded.onnx"))
    save_inputs(d, {"q": u(1, 32, 1, 128), "k": u(1, 8, 1, 128), "v": u(1, 8, 1, 128),
                    "pk": u(1, 8, 2047, 128), "pv": u(1, 8, 2047, 128)})
    attention_model(os.path.join(d, "decode.onnx"), ["q", "k", "v", "", "pk", "pv"],
                    ["Y", "PK", "PV"], is_causal=1)
    keel = os.path.join(here, "..", "build", "keel")
    pre = " ".join(f"--input {n}={d}/{n}.pb" for n in "QKV")
    dec = " ".join(f"--input {n}={d}/{n}.pb" for n in ["q", "k", "v", "pk", "pv"])
    with open(os.path.join(d, "run.sh"), "w") as f:
        f.write("#!/bin/sh\n# CPU seconds for 101 runs (one warm-up), one BLAS thread\n")
        for m, a in [("prefill", pre), ("prefill_expanded", pre), ("decode", dec)]:
            f.write(f"OPENBLAS_NUM_THREADS=1 /usr/bin/time -f '{m}: %U s user' "
                    f"{keel} run {d}/{m}.onnx {a} --iters 100 2>&1 | grep -E '^time|user'\n")
    print(f"wrote {d}; sh {d}/run.sh times them")


if __name__ == "__main__":
    main()
