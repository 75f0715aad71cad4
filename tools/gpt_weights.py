#!/usr/bin/env python3
"""Weights of the test GPT (tools/gen_gpt.py), from a seeded numpy generator.

tests/gpt/<model>/model.onnx keeps its weights as external data in
weights.bin, which is not committed: this script writes it, with numpy
only (no torch, no onnx), from tests/gpt/<model>/weights.txt (one line per
initializer, in file order: onnx-name torch-name transposed dims...).

  python3 tools/gpt_weights.py tests/gpt/plain/weights.txt OUT/weights.bin
"""
import sys
import zlib

import numpy as np


def param(torch_name, shape):
    """The value of a torch parameter: seeded by its name, small normal
    weights (std 0.1 for matrices; LayerNorm weights near 1)."""
    rng = np.random.default_rng(zlib.crc32(torch_name.encode()))
    v = rng.standard_normal(shape).astype(np.float32)
    if torch_name.endswith("ln1.weight") or torch_name.endswith("ln2.weight") or torch_name == "ln_f.weight":
        return (1.0 + 0.1 * v).astype(np.float32)
    if len(shape) == 1:
        return (0.05 * v).astype(np.float32)
    return (0.1 * v).astype(np.float32)


def write(listing, out):
    with open(listing) as f, open(out, "wb") as o:
        for line in f:
            onnx_name, torch_name, transposed, *dims = line.split()
            shape = [int(d) for d in dims]
            tshape = shape[::-1] if transposed == "1" else shape
            v = param(torch_name, tshape)
            if transposed == "1":
                v = np.ascontiguousarray(v.T)
            o.write(v.astype("<f4").tobytes())


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2])
