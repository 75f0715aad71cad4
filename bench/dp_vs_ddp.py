#!/usr/bin/env python3
"""keel train --data-parallel against PyTorch's DistributedDataParallel (issue 26).

The transformer of tests/train (transformer_lm: AdamW) from the same initial
weights (model.onnx's initializers, mapped to the module's parameters by
expected.json's param_names) on the same batches: each of the first K
batches of tests/train/transformer_lm cut in N parts, rank r taking part r.
keel: `mpirun -np N keel train --data-parallel --threads 1`; PyTorch: N
processes (torch.multiprocessing) with the gloo backend, one thread each,
DDP over the module, zero_grad(set_to_none=True), AdamW.

Prints per-step losses (the ranks' mean) and trained parameters against
each other (bar: losses rtol 1e-3, parameters atol 1e-4 + rtol 1e-3), then
the step time: R rounds, keel and DDP alternating, each round's median over
steps 3.. of rank 0's step (forward, backward, gradient exchange, update;
not reading the batch), and the median over rounds of keel/DDP.

    /usr/bin/python3 bench/dp_vs_ddp.py [--keel build/keel] [--ranks 2] [--steps 40] [--rounds 3]
Needs python3-torch (with torch.distributed), python3-onnx and mpirun.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
NAME = "transformer_lm"


def load_part(d, torch, onnx, numpy_helper):
    out = []
    for f in sorted(x for x in os.listdir(d) if x.startswith("input_")):
        t = onnx.TensorProto()
        with open(os.path.join(d, f), "rb") as fh:
            t.ParseFromString(fh.read())
        out.append(torch.from_numpy(numpy_helper.to_array(t).copy()))
    return out


def ddp_worker(rank, size, parts, steps, store, out):
    import numpy as np
    import onnx
    import torch
    import torch.distributed as dist
    from onnx import numpy_helper
    from torch.nn.parallel import DistributedDataParallel
    import models
    import time
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=size)
    spec = models.MODELS[NAME]
    module = spec["cls"]()
    with open(os.path.join(ROOT, "tests", "train", NAME, "expected.json")) as f:
        names = json.load(f)["param_names"]
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(ROOT, "tests", "train", NAME, "model.onnx")).graph.initializer}
    params = dict(module.named_parameters())
    with torch.no_grad():
        for oname, m in names.items():
            a = init[oname].T if m["transposed"] else init[oname]
            params[m["torch"]].copy_(torch.from_numpy(np.array(a, copy=True)))
    model = DistributedDataParallel(module)
    opt = models.make_optimizer(spec["optimizer"], spec["hyper"], model.parameters())
    mine = parts[rank::size]
    batches = [load_part(d, torch, onnx, numpy_helper) for d in mine]
    losses, times = [], []
    for k in range(steps):
        x = batches[k % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(*x)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        l = loss.detach().clone()
        dist.all_reduce(l)
        losses.append(float(l) / size)
    if rank == 0:
        trained = {}
        for oname, m in names.items():
            a = params[m["torch"]].detach().numpy()
            trained[oname] = (a.T if m["transposed"] else a).copy()
        np.savez(out + ".npz", **trained)
        with open(out + ".json", "w") as f:
            json.dump({"losses": losses, "step_ms": times}, f)
    dist.destroy_process_group()


def run_ddp(a, parts, tmp, tag):
    import torch.multiprocessing as mp
    store = os.path.join(tmp, f"store-{tag}")
    if os.path.exists(store):
        os.remove(store)
    out = os.path.join(tmp, f"ddp-{tag}")
    mp.spawn(ddp_worker, args=(a.ranks, parts, a.steps, store, out), nprocs=a.ranks, join=True)
    import numpy as np
    with open(out + ".json") as f:
        r = json.load(f)
    return r["losses"], r["step_ms"], dict(np.load(out + ".npz"))


def run_keel(a, launcher, parts, tmp, tag):
    import dp_check
    log, save = os.path.join(tmp, f"keel-{tag}.jsonl"), os.path.join(tmp, f"keel-{tag}.onnx")
    cmd = launcher + ["-np", str(a.ranks), a.keel, "train", os.path.join(ROOT, "tests", "train", NAME, "model.onnx")] + \
        dp_check.read_args(NAME, a.steps) + sum((["--data", d] for d in parts), []) + \
        ["--data-parallel", "--threads", "1", "--log", log, "--save", save]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        sys.exit(f"keel failed:\n{p.stdout[-3000:]}")
    rows = [json.loads(x) for x in open(log)]
    import onnx
    from onnx import numpy_helper
    trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(save).graph.initializer}
    return [r["loss"] for r in rows], [r["step_ms"] for r in rows], trained


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", default=os.path.join(ROOT, "build", "keel"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import dp_check
    launcher = dp_check.mpi_launcher()
    if not launcher:
        sys.exit("mpirun not found")
    tmp = tempfile.mkdtemp(prefix="keel-ddp-")
    try:
        _, parts = dp_check.make_batches(NAME, 0, a.ranks, a.batches, tmp, onnx, numpy_helper)
        kt, dt = [], []
        for r in range(a.rounds):
            kl, ks, kp = run_keel(a, launcher, parts, tmp, str(r))
            dl, ds, dpar = run_ddp(a, parts, tmp, str(r))
            kt.append(statistics.median(ks[2:]))
            dt.append(statistics.median(ds[2:]))
            if r == 0:
                kl, dl = np.array(kl), np.array(dl)
                rel = float(np.max(np.abs(kl - dl) / np.abs(dl)))
                worst = max(float(np.max(np.abs(kp[k] - dpar[k]) / (1e-4 + 1e-3 * np.abs(dpar[k])))) for k in dpar)
                ok = rel <= 1e-3 and worst <= 1.0
                print(f"{'ok  ' if ok else 'FAIL'} {a.ranks} ranks, {a.steps} steps of {NAME} (AdamW): losses within "
                      f"{rel:.2e} of DDP's (rtol 1e-3); parameters at most {worst:.3f} of atol 1e-4 + rtol 1e-3")
            print(f"round {r + 1}: step time (median of steps 3..{a.steps}) keel {kt[-1]:.3f} ms, DDP {dt[-1]:.3f} ms, "
                  f"keel/DDP {kt[-1] / dt[-1]:.2f}")
        ratios = [k / d for k, d in zip(kt, dt)]
        print(f"keel/DDP step time: median {statistics.median(ratios):.2f} over {a.rounds} alternating rounds "
              f"(range {min(ratios):.2f}-{max(ratios):.2f}); {a.ranks} ranks x 1 thread on {cpu_name()}, "
              f"{os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
