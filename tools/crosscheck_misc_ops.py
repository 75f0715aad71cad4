#!/usr/bin/python3
"""crosscheck_misc_ops.py OUT_DIR [SEED]: random cases of the ops added for issue 9's
"remaining ops" part, with expected outputs from ONNX 1.23's reference evaluator, as
backend-test folders for `keel test OUT_DIR`. Not run by CI (it needs onnx 1.23):

    PYTHONPATH=../shared/onnx-py /usr/bin/python3 tools/crosscheck_misc_ops.py /tmp/xc
    build/keel test /tmp/xc
"""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

rs = np.random.RandomState(int(sys.argv[2]) if len(sys.argv) > 2 else 0)


def save(out, name, op, inputs, attrs, opset, n_out=1):
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    vi = [helper.make_tensor_value_info(nm, helper.np_dtype_to_tensor_dtype(a.dtype), None)
          for nm, a in zip(names, inputs)]
    g = helper.make_graph([node], name, vi, [helper.make_tensor_value_info(o, 0, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    try:
        res = ReferenceEvaluator(m).run(None, dict(zip(names, inputs)))
    except Exception as e:  # the reference refuses the case: skip it
        return print(f"skip {name}: {e}")
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, a in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, names[k]).SerializeToString())
    for k, a in enumerate(res):
        with open(os.path.join(d, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a), outs[k]).SerializeToString())


def deform(out, i):
    g, og = rs.randint(1, 3), rs.randint(1, 3)
    c, m = g * og * rs.randint(1, 3), g * rs.randint(1, 3)
    h, w, kh, kw = rs.randint(3, 7), rs.randint(3, 7), rs.randint(1, 4), rs.randint(1, 4)
    s, d, p = list(rs.randint(1, 3, 2)), list(rs.randint(1, 3, 2)), list(rs.randint(0, 2, 4))
    oh = (h + p[0] + p[2] - ((kh - 1) * d[0] + 1)) // s[0] + 1
    ow = (w + p[1] + p[3] - ((kw - 1) * d[1] + 1)) // s[1] + 1
    if oh < 1 or ow < 1:
        return
    x = rs.randn(1, c, h, w).astype(np.float32)
    wt = rs.randn(m, c // g, kh, kw).astype(np.float32)
    off = (rs.randn(1, og * kh * kw * 2, oh, ow) * 1.5).astype(np.float32)
    b = rs.randn(m).astype(np.float32)
    mask = rs.rand(1, og * kh * kw, oh, ow).astype(np.float32)
    save(out, f"xc_deform_conv_{i}", "DeformConv", [x, wt, off, b, mask],
         dict(group=int(g), offset_group=int(og), strides=[int(v) for v in s], dilations=[int(v) for v in d],
              pads=[int(v) for v in p], kernel_shape=[int(kh), int(kw)]), 22)


def col2im(out, i):
    nd = rs.randint(1, 4)
    img, blk = rs.randint(2, 6, nd), rs.randint(1, 3, nd)
    s, d, p = rs.randint(1, 3, nd), rs.randint(1, 3, nd), rs.randint(0, 2, 2 * nd)
    nb = [(img[j] + p[j] + p[nd + j] - ((blk[j] - 1) * d[j] + 1)) // s[j] + 1 for j in range(nd)]
    if min(nb) < 1:
        return
    c = rs.randint(1, 3)
    x = rs.randn(2, c * int(np.prod(blk)), int(np.prod(nb))).astype(np.float32)
    save(out, f"xc_col2im_{i}", "Col2Im", [x, img.astype(np.int64), blk.astype(np.int64)],
         dict(strides=s.tolist(), dilations=d.tolist(), pads=p.tolist()), 18)


def gridsample3d(out, i):
    mode, pad, align = ["linear", "nearest"][i % 2], ["zeros", "border", "reflection"][(i // 2) % 3], (i // 6) % 2
    x = rs.randn(1, 2, rs.randint(2, 5), rs.randint(2, 5), rs.randint(2, 5)).astype(np.float32)
    grid = (rs.rand(1, 2, 3, 2, 3) * 3.2 - 1.6).astype(np.float32)
    save(out, f"xc_gridsample_3d_{i}", "GridSample", [x, grid],
         dict(mode=mode, padding_mode=pad, align_corners=align), 22)


def affine(out, i):
    nd = 2 + i % 2
    size = [2, 1] + list(rs.randint(1, 5, nd))
    theta = rs.randn(2, nd, nd + 1).astype(np.float32)
    save(out, f"xc_affine_grid_{i}", "AffineGrid", [theta, np.array(size, np.int64)],
         dict(align_corners=(i // 2) % 2), 20)


def crop(out, i):
    r = rs.randint(1, 4)
    x = rs.randn(*rs.randint(1, 7, r)).astype(np.float32)
    save(out, f"xc_center_crop_pad_{i}", "CenterCropPad", [x, rs.randint(1, 9, r).astype(np.int64)], {}, 18)


def groupnorm(out, i):
    opset, g = [18, 21][i % 2], rs.randint(1, 4)
    c = g * rs.randint(1, 3)
    x = rs.randn(2, c, 3, 2).astype(np.float32)
    n = g if opset == 18 else c
    save(out, f"xc_group_norm_{opset}_{i}", "GroupNormalization",
         [x, rs.randn(n).astype(np.float32), rs.randn(n).astype(np.float32)], dict(num_groups=int(g)), opset)


def tscatter(out, i):
    b, s, u = 2, 5, rs.randint(1, 4)
    circ = i % 2
    past = rs.randn(b, 2, s, 3).astype(np.float32)
    upd = rs.randn(b, 2, u, 3).astype(np.float32)
    wi = rs.randint(0, s if circ else s - u + 1, b).astype(np.int64)
    save(out, f"xc_tensorscatter_{i}", "TensorScatter", [past, upd, wi],
         dict(mode="circular" if circ else "linear"), 24)


def split(out, i):
    words = ["", "a", "bb", " ", "  c d ", "x,y,,z", "é,ü", "a--b"]
    x = np.array([words[k] for k in rs.randint(0, len(words), 6)], dtype=object).reshape(2, 3)
    attrs = {}
    if i % 3:
        attrs["delimiter"] = [",", "--", "b"][i % 3]
    if i % 2:
        attrs["maxsplit"] = int(rs.randint(0, 3))
    save(out, f"xc_string_split_{i}", "StringSplit", [x], attrs, 20, n_out=2)


def cumprod(out, i):
    x = rs.randint(-3, 4, (3, 4)).astype([np.float32, np.int64, np.float64][i % 3])
    save(out, f"xc_cumprod_{i}", "CumProd", [x, np.array(i % 2, np.int64)],
         dict(exclusive=(i // 2) % 2, reverse=(i // 4) % 2), 26)


def concat(out, i):
    words = np.array(["", "a", "bc", "é", "κλ"], dtype=object)
    a = words[rs.randint(0, 5, (2, 3))]
    b = words[rs.randint(0, 5, [(3,), (2, 1), (1,)][i % 3])]
    save(out, f"xc_string_concat_{i}", "StringConcat", [a, b], {}, 20)


def bnot(out, i):
    dt = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64][i % 8]
    info = np.iinfo(dt)
    x = rs.randint(info.min, int(info.max) + 1 if info.max < 2**62 else 2**62, 7, dtype=np.int64 if info.min < 0 else np.uint64).astype(dt)
    save(out, f"xc_bitwise_not_{i}", "BitwiseNot", [x], {}, 18)


def regex(out, i):
    pats = [r"[a-z]+\d*", r"(ab|cd)+", r"\w+@\w+\.com", r"x?y{2,3}", r"[^aeiou]*", r"(?i)Hello"]
    words = ["abc1", "ab", "abcd", "cdab", "a@b.com", "yy", "xyyy", "xyyyy", "bcd", "hello", "HELLO", ""]
    x = np.array([words[k] for k in rs.randint(0, len(words), 5)], dtype=object)
    save(out, f"xc_regex_{i}", "RegexFullMatch", [x], dict(pattern=pats[i % len(pats)]), 20)


def main(out):
    for i in range(24):
        for f in (deform, col2im, gridsample3d, affine, crop, groupnorm, tscatter, split, cumprod, concat,
                  bnot, regex):
            f(out, i)


if __name__ == "__main__":
    main(sys.argv[1])
