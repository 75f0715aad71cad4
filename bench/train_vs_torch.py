#!/usr/bin/env /usr/bin/python3
"""Training step time: `keel train` against PyTorch CPU (issue 11, "Speed")
on the small CNN (cnn_branch) and the transformer LM (transformer_lm) of
tests/train, same model, same initial weights, same batches, same thread
count (keel --threads N, torch.set_num_threads(N)).

keel's time per step is the difference of two `keel train` runs, --steps
SHORT and --steps LONG, divided by LONG - SHORT, so process start, model
load and the backward-graph pass are excluded. PyTorch's is measured the
same way inside one process: the time of steps SHORT+1..LONG of a fresh
module and optimizer, divided by LONG - SHORT. Each round runs keel (both
lengths) and PyTorch once, alternating which goes first; the medians over
the rounds and their ratio (keel / torch; below 1 means keel is faster)
are printed with the CPU model and flags (lscpu).

Run: /usr/bin/python3 bench/train_vs_torch.py [--keel build/keel]
        [--threads 1] [--rounds 5] [--short 20] [--long 220] [--json FILE]
        [NAME...]
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import torch
from onnx import numpy_helper

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
TRAIN = os.path.join(ROOT, "tests", "train")
sys.path.insert(0, TRAIN)
from models import MODELS, make_optimizer  # noqa: E402


def lscpu():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "unknown", ""
    info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return info.get("Model name", "unknown").strip(), info.get("Flags", "").strip()


def load_batches(name, n):
    batches = []
    for k in range(n):
        folder, batch, j = os.path.join(TRAIN, name, f"data_{k}"), [], 0
        while os.path.exists(os.path.join(folder, f"input_{j}.pb")):
            t = onnx.TensorProto()
            with open(os.path.join(folder, f"input_{j}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            batch.append(torch.from_numpy(numpy_helper.to_array(t).copy()))
            j += 1
        batches.append(tuple(batch))
    return batches


def initial_state(name, exp):
    """The module's state from the exported model's initializers, so both
    sides start from the same weights."""
    model = onnx.load(os.path.join(TRAIN, name, "model.onnx"))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    state = {}
    for oname, m in exp["param_names"].items():
        v = inits[oname]
        state[m["torch"]] = torch.from_numpy((v.T if m["transposed"] else v).copy())
    return state


def torch_step_time(name, exp, batches, short, long):
    spec = MODELS[name]
    module = spec["cls"]()
    module.load_state_dict(initial_state(name, exp))
    opt = make_optimizer(spec["optimizer"], spec["hyper"], module.parameters())
    t0 = None
    for step in range(long):
        if step == short:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = module(*batches[step % len(batches)])
        if step == 0 and abs(float(loss) - exp["losses"][0]) > 1e-5 * abs(exp["losses"][0]):
            raise SystemExit(f"{name}: PyTorch's first loss {float(loss)} is not "
                             f"expected.json's {exp['losses'][0]}: not the same model")
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / (long - short)


def keel_args(name, steps, threads):
    with open(os.path.join(TRAIN, name, "args")) as f:
        args = f.read().split()
    i = args.index("--steps")
    args[i + 1] = str(steps)
    return args + ["--threads", str(threads)]


def keel_run(keel, name, steps, threads):
    cmd = shlex.split(keel) + ["train", os.path.join("tests", "train", name, "model.onnx")]
    cmd += keel_args(name, steps, threads)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if out.returncode != 0:
        msg = (out.stderr or out.stdout).strip().splitlines()
        raise RuntimeError(f"keel train exited with {out.returncode}: {msg[0] if msg else ''}")
    return secs


def bench_model(a, name):
    with open(os.path.join(TRAIN, name, "expected.json")) as f:
        exp = json.load(f)
    batches = load_batches(name, exp["batches"])
    keel_t, torch_t, keel_err = [], [], None
    for r in range(a.rounds):
        order = ["keel", "torch"] if r % 2 == 0 else ["torch", "keel"]
        for side in order:
            if side == "torch":
                torch_t.append(torch_step_time(name, exp, batches, a.short, a.long))
            elif keel_err is None:
                try:
                    t_short = keel_run(a.keel, name, a.short, a.threads)
                    t_long = keel_run(a.keel, name, a.long, a.threads)
                    keel_t.append((t_long - t_short) / (a.long - a.short))
                except (RuntimeError, OSError) as e:
                    keel_err = str(e)
    res = {"model": name, "torch_ms": [t * 1e3 for t in torch_t],
           "keel_ms": [t * 1e3 for t in keel_t], "keel_error": keel_err}
    tm = statistics.median(torch_t) * 1e3
    line = f"{name:15s} torch {tm:8.3f} ms/step"
    res["torch_median_ms"] = tm
    if keel_t:
        km = statistics.median(keel_t) * 1e3
        res.update(keel_median_ms=km, ratio=km / tm)
        line += f"  keel {km:8.3f} ms/step  ratio keel/torch {km / tm:.2f}"
    else:
        line += f"  keel: {keel_err}"
    print(line, flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keel", default=os.path.join(ROOT, "build", "keel"),
                    help="keel binary (or a command prefix)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--short", type=int, default=20)
    ap.add_argument("--long", type=int, default=220)
    ap.add_argument("--json")
    ap.add_argument("names", nargs="*", default=["cnn_branch", "transformer_lm"])
    a = ap.parse_args()
    if a.long <= a.short:
        ap.error("--long must exceed --short")
    torch.set_num_threads(a.threads)
    model, flags = lscpu()
    print(f"CPU: {model}")
    print(f"flags: {flags}")
    print(f"threads {a.threads} (keel --threads, torch.set_num_threads); torch "
          f"{torch.__version__}; {a.rounds} rounds alternating; per step = time of steps "
          f"{a.short + 1}..{a.long} / {a.long - a.short}; medians over rounds")
    results = [bench_model(a, n) for n in a.names]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": model, "flags": flags, "threads": a.threads,
                       "torch": torch.__version__, "results": results}, f, indent=1)
    return 0 if all(r["keel_error"] is None for r in results) else 2


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
