#!/usr/bin/env python3
"""gen_dist_tests.py: the model-parallel test folders under tests/dist/.

Each folder holds rank_0.onnx ... rank_{N-1}.onnx (one model per MPI rank,
split by hand) and test_data_set_0 with the inputs and rank 0's expected
outputs, computed by numpy from the unsplit weights (never by keel):

  np{N}/mlp         tensor-parallel MLP: the first MatMul column-parallel
                    (each rank keeps hidden/N columns of W1 and b1), Relu,
                    the second MatMul row-parallel, AllReduce, then the bias;
                    unsplit.onnx beside it is the one-process model
  np{N}/allreduce   variadic AllReduce of float, float16, bfloat16 and int64
                    (rank r adds r + 1 first; exact small integers)
  np{N}/allgather   AllGather on axis 0 (float) and axis 1 (int64, the
                    interleaving path)
  np{N}/alltoall    AllToAll of float16 blocks (rank r adds 10 r first)
  np{N}/loop        a Loop whose body holds an AllReduce (rank r scales the
                    carried state by 0.5 + r/4 first) and whose condition is
                    computed from the reduced sum: every rank runs the same
                    trip count (20 at N=2, 4 at N=4), frames reused each time
  fail/mismatch     rank 1 reduces a [3,2] tensor, rank 0 a [2,3]: every rank
                    must fail with a message naming the rank
  fail/rank1_error  rank 1 fails (a bad Reshape) before the AllReduce its
                    peer waits in: the job must end, not hang

Run with Debian's python3 (onnx 1.12, numpy): tools/gen_dist_tests.py
"""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "dist")
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even (values here are exact)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def tensor(name, a, bf16=False):
    if bf16:
        t = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(a.shape))
        t.raw_data = bf16_bits(a).tobytes()
        return t
    return numpy_helper.from_array(np.ascontiguousarray(a), name)


def save_model(path, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, os.path.basename(os.path.dirname(path)), inputs, outputs,
                          list(inits))
    m = helper.make_model(g, opset_imports=OPSETS, producer_name="gen_dist_tests")
    m.ir_version = 8
    onnx.save(m, path)


def save_data(d, ins, outs):
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    for k, t in enumerate(ins):
        open(os.path.join(ds, "input_%d.pb" % k), "wb").write(t.SerializeToString())
    for k, t in enumerate(outs):
        open(os.path.join(ds, "output_%d.pb" % k), "wb").write(t.SerializeToString())


def vi(name, et, shape):
    return helper.make_tensor_value_info(name, et, shape)


def folder(*parts):
    d = os.path.join(ROOT, *parts)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def gen_mlp(n, rng):
    d = folder("np%d" % n, "mlp")
    B, H, F = 4, 16, 32
    x = rng.standard_normal((B, H)).astype(np.float32)
    w1 = (rng.standard_normal((H, F)) / np.sqrt(H)).astype(np.float32)
    b1 = rng.standard_normal(F).astype(np.float32) * 0.1
    w2 = (rng.standard_normal((F, H)) / np.sqrt(F)).astype(np.float32)
    b2 = rng.standard_normal(H).astype(np.float32) * 0.1
    y = (np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2 + b2).astype(np.float32)
    io_in, io_out = [vi("x", TensorProto.FLOAT, [B, H])], [vi("y", TensorProto.FLOAT, [B, H])]
    f = F // n
    for r in range(n):
        cols = slice(r * f, (r + 1) * f)
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]),
                 helper.make_node("Add", ["h0", "b1"], ["h1"]),
                 helper.make_node("Relu", ["h1"], ["h2"]),
                 helper.make_node("MatMul", ["h2", "w2"], ["z"]),
                 helper.make_node("AllReduce", ["z"], ["zs"], domain="com.microsoft"),
                 helper.make_node("Add", ["zs", "b2"], ["y"])]
        inits = [tensor("w1", w1[:, cols]), tensor("b1", b1[cols]), tensor("w2", w2[cols, :]),
                 tensor("b2", b2)]
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes, io_in, io_out, inits)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]),
             helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]),
             helper.make_node("MatMul", ["h2", "w2"], ["z"]),
             helper.make_node("Add", ["z", "b2"], ["y"])]
    inits = [tensor("w1", w1), tensor("b1", b1), tensor("w2", w2), tensor("b2", b2)]
    save_model(os.path.join(d, "unsplit.onnx"), nodes, io_in, io_out, inits)
    save_data(d, [tensor("x", x)], [tensor("y", y)])


def gen_allreduce(n, rng):
    d = folder("np%d" % n, "allreduce")
    x = rng.integers(-8, 8, (3, 5)).astype(np.float32)
    types = [("f32", TensorProto.FLOAT), ("f16", TensorProto.FLOAT16),
             ("bf16", TensorProto.BFLOAT16), ("i64", TensorProto.INT64)]
    total = n * x + sum(r + 1 for r in range(n))
    for r in range(n):
        nodes = [helper.make_node("Add", ["x", "c"], ["a"])]
        for s, et in types:
            nodes.append(helper.make_node("Cast", ["a"], ["a_" + s], to=et))
        nodes.append(helper.make_node("AllReduce", ["a_" + s for s, _ in types],
                                      ["y_" + s for s, _ in types], domain="com.microsoft"))
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes,
                   [vi("x", TensorProto.FLOAT, [3, 5])],
                   [vi("y_" + s, et, [3, 5]) for s, et in types],
                   [tensor("c", np.array(r + 1, np.float32))])
    outs = [tensor("y_f32", total.astype(np.float32)), tensor("y_f16", total.astype(np.float16)),
            tensor("y_bf16", total, bf16=True), tensor("y_i64", total.astype(np.int64))]
    save_data(d, [tensor("x", x)], outs)


def gen_allgather(n, rng):
    d = folder("np%d" % n, "allgather")
    x = rng.standard_normal((2, 3)).astype(np.float32)
    for r in range(n):
        nodes = [helper.make_node("Add", ["x", "c"], ["a"]),
                 helper.make_node("Cast", ["a"], ["ai"], to=TensorProto.INT64),
                 helper.make_node("AllGather", ["a"], ["g0"], domain="com.microsoft",
                                  group_size=n, axis=0),
                 helper.make_node("AllGather", ["ai"], ["g1"], domain="com.microsoft",
                                  group_size=n, axis=1)]
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes,
                   [vi("x", TensorProto.FLOAT, [2, 3])],
                   [vi("g0", TensorProto.FLOAT, [2 * n, 3]), vi("g1", TensorProto.INT64, [2, 3 * n])],
                   [tensor("c", np.array(10 * r, np.float32))])
    parts = [x + 10 * r for r in range(n)]
    g0 = np.concatenate(parts, 0).astype(np.float32)
    g1 = np.concatenate([p.astype(np.int64) for p in parts], 1)  # Cast truncates toward 0
    save_data(d, [tensor("x", x)], [tensor("g0", g0), tensor("g1", g1)])


def gen_alltoall(n, rng):
    d = folder("np%d" % n, "alltoall")
    x = rng.integers(-4, 4, (2 * n, 3)).astype(np.float32)
    for r in range(n):
        nodes = [helper.make_node("Add", ["x", "c"], ["a"]),
                 helper.make_node("Cast", ["a"], ["ah"], to=TensorProto.FLOAT16),
                 helper.make_node("AllToAll", ["ah"], ["y"], domain="com.microsoft",
                                  group_size=n)]
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes,
                   [vi("x", TensorProto.FLOAT, [2 * n, 3])],
                   [vi("y", TensorProto.FLOAT16, [2 * n, 3])],
                   [tensor("c", np.array(10 * r, np.float32))])
    # rank 0 receives block 0 of every rank s, in rank order
    y0 = np.concatenate([x[0:2] + 10 * s for s in range(n)], 0).astype(np.float16)
    save_data(d, [tensor("x", x)], [tensor("y", y0)])


def gen_loop(n, rng):
    d = folder("np%d" % n, "loop")
    x = (np.arange(1, 5, dtype=np.float32) * 0.1)
    limit, trips = np.float32(100.0), 20
    body_nodes = [helper.make_node("Mul", ["s_in", "c"], ["m"]),
                  helper.make_node("AllReduce", ["m"], ["s_out"], domain="com.microsoft"),
                  helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
                  helper.make_node("Less", ["tot", "limit"], ["cond_out"]),
                  helper.make_node("Identity", ["tot"], ["tot_scan"])]
    body = helper.make_graph(
        body_nodes, "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("s_in", TensorProto.FLOAT, [4])],
        [vi("cond_out", TensorProto.BOOL, []), vi("s_out", TensorProto.FLOAT, [4]),
         vi("tot_scan", TensorProto.FLOAT, [])])
    for r in range(n):
        nodes = [helper.make_node("Loop", ["M", "cond0", "x"], ["s", "sums"], body=body)]
        inits = [tensor("c", np.array(0.5 + 0.25 * r, np.float32)), tensor("limit", limit),
                 tensor("M", np.array(trips, np.int64)), tensor("cond0", np.array(True))]
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes, [vi("x", TensorProto.FLOAT, [4])],
                   [vi("s", TensorProto.FLOAT, [4]), vi("sums", TensorProto.FLOAT, None)], inits)
    scale = sum(0.5 + 0.25 * r for r in range(n))
    st, sums = x.astype(np.float64), []
    for _ in range(trips):
        st = st * scale
        sums.append(st.sum())
        if not st.sum() < limit:
            break
    save_data(d, [tensor("x", x)], [tensor("s", st.astype(np.float32)),
                                    tensor("sums", np.array(sums, np.float32))])


def gen_fail():
    d = folder("fail", "mismatch")
    for r, shape in enumerate([[2, 3], [3, 2]]):
        nodes = [helper.make_node("Reshape", ["x", "s"], ["a"]),
                 helper.make_node("AllReduce", ["a"], ["y"], domain="com.microsoft")]
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes, [vi("x", TensorProto.FLOAT, [6])],
                   [vi("y", TensorProto.FLOAT, None)], [tensor("s", np.array(shape, np.int64))])
    d = folder("fail", "rank1_error")
    for r, shape in enumerate([[2, 3], [7]]):
        nodes = [helper.make_node("Reshape", ["x", "s"], ["a"]),
                 helper.make_node("AllReduce", ["a"], ["y"], domain="com.microsoft")]
        save_model(os.path.join(d, "rank_%d.onnx" % r), nodes, [vi("x", TensorProto.FLOAT, [6])],
                   [vi("y", TensorProto.FLOAT, None)], [tensor("s", np.array(shape, np.int64))])
    x = np.arange(6, dtype=np.float32)
    for sub in ("mismatch", "rank1_error"):
        ds = os.path.join(ROOT, "fail", sub)
        save_data(ds, [tensor("x", x)], [])


def main():
    rng = np.random.default_rng(12)
    for n in (2, 4):
        gen_mlp(n, rng)
        gen_allreduce(n, rng)
        gen_allgather(n, rng)
        gen_alltoall(n, rng)
        gen_loop(n, rng)
    gen_fail()


if __name__ == "__main__":
    main()
