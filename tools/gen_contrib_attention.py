#!/usr/bin/env python3
"""gen_contrib_attention.py: backend-test folders for keel's com.microsoft
attention ops, with ONNX Runtime's results as the expected outputs.

    NODE_PATH=/work/ort/node_modules tools/gen_contrib_attention.py [OUT]

For every case it writes OUT/<op>_<case>/model.onnx (one node, domain
com.microsoft, opset 1) and test_data_set_0/input_K.pb, then runs all
models through onnxruntime-node (ORT's CPU provider) and writes ORT's
outputs as test_data_set_0/output_K.pb. OUT defaults to tests/contrib.
Inputs come from a fixed seed, so reruns give the same files. Needs
python3-onnx and numpy (Debian's python3 has both) and node with
onnxruntime-node; `keel test tests/contrib` then needs neither.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(20261201)
CASES = []  # (folder, model, {name: array}, [output names])

NP2ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
           np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}


def rand(*shape, dtype=np.float32, amp=1.0):
    return (RNG.uniform(-amp, amp, size=shape)).astype(dtype)


def case(op, name, inputs, outputs, **attrs):
    """inputs: list of (name, array or None); outputs: output names ('' skips)."""
    node_in = [n if a is not None else "" for n, a in inputs]
    while node_in and node_in[-1] == "":
        node_in.pop()
    node = helper.make_node(op, node_in, outputs, domain="com.microsoft", **attrs)
    gin = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype.type], a.shape)
           for n, a in inputs if a is not None]
    t = NP2ONNX[inputs[0][1].dtype.type]  # every output has the query's type
    gout = [helper.make_tensor_value_info(n, t, None) for n in outputs if n]
    graph = helper.make_graph([node], f"{op}_{name}", gin, gout)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    CASES.append((f"{op}_{name}", model, {n: a for n, a in inputs if a is not None},
                  [n for n in outputs if n]))


# ------------------------------------------------------------- RotaryEmbedding

def rotary_cases():
    for name, (B, S, N, H, rd, inter, rank, scalar_pos, dt) in {
        "3d": (2, 3, 2, 8, 0, 0, 3, False, np.float32),
        "3d_interleaved": (2, 3, 3, 8, 0, 1, 3, False, np.float32),
        "4d_bnsh": (1, 4, 2, 6, 0, 0, 4, False, np.float32),
        "partial_dim": (2, 3, 2, 8, 4, 0, 3, False, np.float32),
        "partial_dim_interleaved": (1, 5, 2, 8, 4, 1, 3, False, np.float32),
        "scalar_position": (2, 3, 2, 8, 0, 0, 3, True, np.float32),
        "3d_fp16": (2, 3, 2, 8, 0, 0, 3, False, np.float16),
    }.items():
        half = (rd or H) // 2
        x = rand(B, S, N * H, dtype=dt) if rank == 3 else rand(B, N, S, H, dtype=dt)
        maxp = 16
        ang = RNG.uniform(0, 3, size=(maxp, half)).astype(np.float32)
        pos = np.array([3], np.int64) if scalar_pos else RNG.integers(0, maxp - 1, (B, S)).astype(np.int64)
        attrs = {"interleaved": inter}
        if rd:
            attrs["rotary_embedding_dim"] = rd
        if rank == 3:
            attrs["num_heads"] = N
        case("RotaryEmbedding", name,
             [("input", x), ("position_ids", pos), ("cos_cache", np.cos(ang).astype(dt)),
              ("sin_cache", np.sin(ang).astype(dt))],
             ["output"], **attrs)


# ---------------------------------------------------------- MultiHeadAttention

def mha_cases():
    def go(name, B=2, S=3, L=4, N=2, H=4, Hv=None, bias=False, kpm=None, ab=None, past=0,
           uni=0, scale=None, qk=False, kv_bnsh=False, dt=np.float32):
        Hv = Hv or H
        q = rand(B, S, N * H, dtype=dt)
        if kv_bnsh:
            k, v = rand(B, N, L, H, dtype=dt), rand(B, N, L, Hv, dtype=dt)
        else:
            k, v = rand(B, L, N * H, dtype=dt), rand(B, L, N * Hv, dtype=dt)
        T = past + L
        ins = [("query", q), ("key", k), ("value", v),
               ("bias", rand(2 * N * H + N * Hv, dtype=dt) if bias else None)]
        mask = None
        if kpm == "2d":
            mask = np.ones((B, T), np.int32)
            mask[0, -1] = 0
            mask[-1, 0] = 0
        elif kpm == "1d":
            mask = np.array([T, T - 2][:B], np.int32)
        elif kpm == "3d":
            mask = (RNG.uniform(size=(B, S, T)) > 0.3).astype(np.int32)
            mask[:, :, 0] = 1
        ins.append(("key_padding_mask", mask))
        abias = None
        if ab:
            abias = rand(*[{"B": B, "1": 1, "N": N}[c] for c in ab], S, T)
        ins.append(("attention_bias", abias))
        ins.append(("past_key", rand(B, N, past, H, dtype=dt) if past else None))
        ins.append(("past_value", rand(B, N, past, Hv, dtype=dt) if past else None))
        attrs = {"num_heads": N, "unidirectional": uni}
        if scale:
            attrs["scale"] = scale
        outs = ["output", "present_key" if past else "", "present_value" if past else ""]
        if qk:
            outs = ["output", "present_key", "present_value", "qk"]
        while outs[-1] == "":
            outs.pop()
        case("MultiHeadAttention", name, ins, outs, **attrs)

    go("basic")
    go("cross_lengths", S=1, L=5, N=3, H=2)
    go("bias", bias=True)
    go("v_head_size", Hv=6, bias=True)
    go("key_padding_mask", kpm="2d")
    go("attention_bias", ab="1N")
    go("attention_bias_batch", ab="B1")
    go("past", past=3, L=1, S=1)
    go("past_unidirectional", past=3, L=2, S=2, uni=1)
    go("unidirectional", S=4, L=4, uni=1)
    go("scale", scale=0.3)
    go("kv_bnsh", kv_bnsh=True, N=3)
    go("key_lengths", kpm="1d")
    go("key_padding_mask_3d", kpm="3d")
    go("past_fp16", past=3, L=1, S=1, bias=True, dt=np.float16)


# ------------------------------------------------- Attention (com.microsoft)

def attention_cases():
    def go(name, B=2, S=3, Din=6, N=2, H=4, Hv=None, bias=True, mask=None, past=0, uni=0,
           ab=False, scale=None):
        Hv = Hv or H
        wc = 2 * N * H + N * Hv
        T = past + S
        ins = [("input", rand(B, S, Din)), ("weights", rand(Din, wc, amp=0.5)),
               ("bias", rand(wc) if bias else None)]
        m = None
        if mask == "lengths":
            m = np.array([T, T - 1][:B], np.int32)
        elif mask == "end_start":
            m = np.array([T, T - 1, 0, 1][: 2 * B], np.int32)
        elif mask == "raw2d":
            m = np.ones((B, T), np.int32)
            m[1, 0] = 0
        elif mask == "raw3d":
            m = (RNG.uniform(size=(B, S, T)) > 0.3).astype(np.int32)
            m[:, :, 0] = 1
        ins.append(("mask_index", m))
        ins.append(("past", rand(2, B, N, past, H) if past else None))
        ins.append(("attention_bias", rand(B, 1, S, T) if ab else None))
        attrs = {"num_heads": N, "unidirectional": uni}
        if Hv != H:
            attrs["qkv_hidden_sizes"] = [N * H, N * H, N * Hv]
        if scale:
            attrs["scale"] = scale
        case("Attention", name, ins, ["output", "present"] if past else ["output"], **attrs)

    go("basic")
    # no bias: ONNX Runtime 1.30's CPU kernel crashes (SIGSEGV) without one
    go("v_hidden_size", Hv=6)
    go("mask_lengths", mask="lengths")
    go("mask_end_start", mask="end_start")
    go("mask_raw2d", mask="raw2d")
    go("mask_raw3d", mask="raw3d")
    go("unidirectional", uni=1, S=4)
    go("past_unidirectional", past=3, S=1, uni=1)
    go("past_prefill", past=2, S=3, uni=1, mask="raw2d")
    go("attention_bias", ab=True)
    go("scale", scale=0.25, N=3)


# ------------------------------------------------------- GroupQueryAttention

def gqa_cases():
    def go(name, B=2, S=3, N=4, Nkv=2, H=8, past=0, rotary=False, inter=0, window=-1,
           softcap=None, scale=None, seqlens=None, packed=False, dt=np.float32):
        T = past + S
        q, k, v = rand(B, S, N * H, dtype=dt), rand(B, S, Nkv * H, dtype=dt), rand(B, S, Nkv * H, dtype=dt)
        ins = []
        if packed:
            ins += [("query", np.concatenate([q, k, v], axis=2)), ("key", None), ("value", None)]
        else:
            ins += [("query", q), ("key", k), ("value", v)]
        ins.append(("past_key", rand(B, Nkv, past, H, dtype=dt)))
        ins.append(("past_value", rand(B, Nkv, past, H, dtype=dt)))
        sk = np.full((B,), T - 1, np.int32) if seqlens is None else np.array(seqlens, np.int32)
        ins.append(("seqlens_k", sk))
        ins.append(("total_sequence_length", np.array(T, np.int32)))
        attrs = {"num_heads": N, "kv_num_heads": Nkv}
        if rotary:
            ang = RNG.uniform(0, 3, size=(32, H // 2)).astype(np.float32)
            ins += [("cos_cache", np.cos(ang).astype(dt)), ("sin_cache", np.sin(ang).astype(dt))]
            attrs["do_rotary"] = 1
            attrs["rotary_interleaved"] = inter
        if window > 0:
            attrs["local_window_size"] = window
        if softcap:
            attrs["softcap"] = softcap
        if scale:
            attrs["scale"] = scale
        case("GroupQueryAttention", name, ins, ["output", "present_key", "present_value"], **attrs)

    go("prompt")
    go("prompt_mha", N=2, Nkv=2)
    go("prompt_mqa", N=3, Nkv=1)
    go("decode", S=1, past=5)
    go("decode_gqa_3x", S=1, past=4, N=6, Nkv=2, H=8)
    go("continue_prefill", B=1, S=3, past=4)
    go("rotary_prompt", rotary=True, H=16)
    go("rotary_decode_interleaved", S=1, past=6, rotary=True, inter=1, H=16)
    go("local_window", S=6, window=3)
    go("local_window_decode", S=1, past=7, window=4)
    go("softcap", softcap=2.0)
    go("scale", scale=0.2)
    go("packed_qkv", packed=True)
    go("decode_fp16", S=1, past=5, dt=np.float16)
    go("rotary_prompt_fp16", rotary=True, H=16, dt=np.float16)


# ------------------------------------------------------------------ ORT run

NODE_RUNNER = r"""
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');
const ctor = {float32: Float32Array, float16: Uint16Array, int32: Int32Array, int64: BigInt64Array};
(async () => {
  const jobs = JSON.parse(fs.readFileSync(process.argv[2]));
  for (const job of jobs) {
    if (process.env.GEN_VERBOSE) console.error(job.model);
    const s = await ort.InferenceSession.create(job.model, {graphOptimizationLevel: 'disabled'});
    const feeds = {};
    for (const i of job.inputs) {
      const buf = fs.readFileSync(i.file);
      const C = ctor[i.dtype];
      const data = new C(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length));
      feeds[i.name] = new ort.Tensor(i.dtype, data, i.shape);
    }
    const res = await s.run(feeds);
    const outs = [];
    for (const n of job.outputs) {
      const t = res[n];
      const f = path.join(job.dir, n + '.bin');
      fs.writeFileSync(f, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      outs.push({name: n, dtype: t.type, shape: t.dims, file: f});
    }
    fs.writeFileSync(path.join(job.dir, 'outputs.json'), JSON.stringify(outs));
  }
})().catch(e => { console.error(e); process.exit(1); });
"""

NPT = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "contrib")
    rotary_cases()
    attention_cases()
    mha_cases()
    gqa_cases()
    tmp = tempfile.mkdtemp(prefix="gen_contrib_")
    jobs = []
    for folder, model, feeds, outs in CASES:
        d = os.path.join(out, folder)
        data = os.path.join(d, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        onnx.save(model, os.path.join(d, "model.onnx"))
        jd = os.path.join(tmp, folder)
        os.makedirs(jd)
        ins = []
        for k, (n, a) in enumerate(feeds.items()):
            t = numpy_helper.from_array(a, n)
            with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
                f.write(t.SerializeToString())
            fn = os.path.join(jd, n + ".bin")
            a.tofile(fn)
            ins.append({"name": n, "dtype": str(a.dtype),
                        "shape": list(a.shape), "file": fn})
        jobs.append({"model": os.path.join(d, "model.onnx"), "inputs": ins, "outputs": outs, "dir": jd})
    with open(os.path.join(tmp, "jobs.json"), "w") as f:
        json.dump(jobs, f)
    with open(os.path.join(tmp, "run.js"), "w") as f:
        f.write(NODE_RUNNER)
    subprocess.run(["node", os.path.join(tmp, "run.js"), os.path.join(tmp, "jobs.json")], check=True)
    for (folder, _, _, outs), job in zip(CASES, jobs):
        with open(os.path.join(job["dir"], "outputs.json")) as f:
            res = json.load(f)
        for k, r in enumerate(res):
            a = np.fromfile(r["file"], dtype=NPT[r["dtype"]]).reshape(r["shape"])
            t = numpy_helper.from_array(a, r["name"])
            with open(os.path.join(out, folder, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
                f.write(t.SerializeToString())
    print(f"{len(CASES)} cases in {out}")


if __name__ == "__main__":
    main()
