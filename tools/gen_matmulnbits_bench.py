#!/usr/bin/env python3
"""gen_matmulnbits_bench.py: writes MatMulNBits benchmark models (4-bit,
K = N = 4096, packed zero points, block sizes 32 and 128, 1 and 16 rows of
A) to a folder, default /tmp/nbbench: nb_<block>_<rows>.onnx. Time them with
  build/keel run /tmp/nbbench/nb_32_1.onnx --iters 30
(perf stat -e task-clock gives CPU time on a loaded machine). Not committed:
each model is about 10 MB.

  PYTHONPATH=/work/shared/onnx-py /usr/bin/python3 tools/gen_matmulnbits_bench.py [dir]
"""
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_contrib_tests as G  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/nbbench"
os.makedirs(out, exist_ok=True)
K = N = 4096
rng = np.random.default_rng(0)
for bs in (32, 128):
    for M in (1, 16):
        nb = K // bs
        q = rng.integers(0, 16, size=(N, nb, bs)).astype(np.uint8)
        ins = [("A", rng.uniform(-1, 1, (M, K)).astype(np.float32)),
               ("B", G.pack_nbits(q, 4)),
               ("scales", rng.uniform(0.01, 0.1, N * nb).astype(np.float32)),
               ("zero_points", G.pack_zp(rng.integers(0, 16, (N, nb)), 4))]
        c = dict(name="bench", op="MatMulNBits", inputs=ins, outputs=["Y"],
                 attrs=dict(K=K, N=N, bits=4, block_size=bs), domain=G.MS,
                 inits={"B", "scales", "zero_points"}, opset=17, ms_opset=1, ref=None)
        onnx.save(G.make_model(c), os.path.join(out, "nb_%d_%d.onnx" % (bs, M)))
        print("wrote", os.path.join(out, "nb_%d_%d.onnx" % (bs, M)))
