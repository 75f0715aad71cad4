#!/usr/bin/env python3
"""Compares two TensorProto files (as keel run --out writes them: dims,
data_type, raw_data) with numpy only: no onnx package needed (CI).

  python3 tools/pb_compare.py A.pb B.pb ATOL     exit 0 when |a - b| <= ATOL
  everywhere (integers: equal), else 1; prints the worst difference.
"""
import sys

import numpy as np

TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def read(path):
    b = open(path, "rb").read()
    i, dims, dtype, raw = 0, [], 0, b""
    while i < len(b):
        tag, i = varint(b, i)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = varint(b, i)
            if f == 1:
                dims.append(v)
            elif f == 2:
                dtype = v
        elif wt == 2:
            n, i = varint(b, i)
            if f == 9:
                raw = b[i:i + n]
            elif f == 1:  # packed dims
                j = i
                while j < i + n:
                    v, j = varint(b, j)
                    dims.append(v)
            i += n
        elif wt == 5:
            i += 4
        elif wt == 1:
            i += 8
    return np.frombuffer(raw, dtype=TYPES[dtype]).reshape(dims)


def main():
    a, b, atol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    if a.shape != b.shape or a.dtype != b.dtype:
        print(f"shape/type differ: {a.shape} {a.dtype} vs {b.shape} {b.dtype}")
        return 1
    if a.dtype.kind in "iub":
        ok = np.array_equal(a, b)
        print(f"{sys.argv[1]}: {'equal' if ok else 'differ'} ({a.size} values)")
        return 0 if ok else 1
    worst = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
    print(f"{sys.argv[1]}: max |diff| {worst:.3g} (atol {atol:g}, {a.size} values)")
    return 0 if worst <= atol else 1


if __name__ == "__main__":
    sys.exit(main())
