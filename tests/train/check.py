#!/usr/bin/env /usr/bin/python3
"""Checks `keel train` against PyTorch on the models of tests/train (issue
11, "what it must show"): for each NAME it runs

  KEEL train tests/train/NAME/model.onnx $(cat tests/train/NAME/args) \
       --log L --save S

from the repository root and compares
  - the per-step losses of the --log with expected.json (rtol 1e-3),
  - every trained initializer of the --save model, read with the onnx
    package, with expected_params.npz (|got - want| <= 1e-4 + 1e-3 |want|),
  - every other initializer and the graph's nodes with the exported model
    (unchanged),
  - `allocated` in the log: identical from step 2 to the last step,
  - the saved model under `keel run` and, where onnxruntime-node is
    installed (KEEL_ORT_NODE_PATH, default /work/ort/node_modules), under
    ONNX Runtime: PyTorch's trained loss on two batches (rtol 1e-3),
and prints a diff of whatever does not match. Exit status 0 when every
model matches, 1 otherwise.

--forward checks inference only (no trainer needed): `keel run` on every
batch at the exported weights must give PyTorch's loss (rtol 1e-4).

Run: /usr/bin/python3 tests/train/check.py [--keel build/keel] [--forward]
         [--threads N] [--keep DIR] [NAME...]
     (default: the issue's four and mlp_plain, a straight-line smoke model)
On a mismatch it also runs one step (--steps 1) and names the parameters
whose first update, i.e. whose gradient, differs from PyTorch's.
"""
import argparse
import json
import re
import os
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NAMES = ["mlp_plain", "mlp_if", "rnn_loop", "cnn_branch", "transformer_lm"]
LOG_KEYS = ("step", "loss", "allocated", "reserved", "peak")


def run_keel(keel, name, threads, work, steps=None, tag=""):
    d = os.path.join("tests", "train", name)
    with open(os.path.join(ROOT, d, "args")) as f:
        args = f.read().split()
    if steps is not None:
        args[args.index("--steps") + 1] = str(steps)
    log = os.path.join(work, f"log{tag}.jsonl")
    save = os.path.join(work, f"trained{tag}.onnx")
    cmd = shlex.split(keel) + ["train", os.path.join(d, "model.onnx")] + args
    cmd += ["--log", log, "--save", save]
    if threads:
        cmd += ["--threads", str(threads)]
    t0 = time.time()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return cmd, out, time.time() - t0, log, save


def read_log(path, errors):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                errors.append(f"log line {i} is not JSON ({e}): {line.strip()[:120]}")
    for i, r in enumerate(rows):
        missing = [k for k in LOG_KEYS if k not in r]
        if missing:
            errors.append(f"log line {i + 1} lacks {missing}: {r}")
            return []
    return rows


def check_losses(rows, want, errors):
    steps = [r["step"] for r in rows]
    if steps != list(range(1, len(want) + 1)):
        errors.append(f"log steps are {steps[:5]}...{steps[-3:]} ({len(steps)} lines), "
                      f"expected 1..{len(want)}")
    bad = []
    for r in rows:
        s = r["step"]
        if not isinstance(s, int) or not 1 <= s <= len(want):
            continue
        got, exp = float(r["loss"]), want[s - 1]
        if not abs(got - exp) <= 1e-3 * abs(exp):
            bad.append((s, got, exp))
    if bad:
        errors.append(f"loss differs from PyTorch's at {len(bad)} of {len(want)} steps "
                      "(rtol 1e-3):")
        errors += [f"  step {s:4d}: keel {g:.7g}  torch {e:.7g}  rel {abs(g - e) / abs(e):.2e}"
                   for s, g, e in bad[:12]]
    return max((abs(float(r["loss"]) - want[r["step"] - 1]) / abs(want[r["step"] - 1])
                for r in rows if isinstance(r["step"], int) and 1 <= r["step"] <= len(want)),
               default=float("nan"))


def check_allocated(rows, errors):
    later = [(r["step"], r["allocated"]) for r in rows if r["step"] >= 2]
    if not later:
        errors.append("no log line from step 2 on")
        return None
    base = later[0][1]
    moved = [(s, a) for s, a in later if a != base]
    if moved:
        errors.append(f"allocated moves after step 2 ({base} bytes at step 2): " +
                      ", ".join(f"step {s}: {a} ({a - base:+d})" for s, a in moved[:8]) +
                      (f", ... ({len(moved)} steps)" if len(moved) > 8 else ""))
    return base


def check_params(save, model_path, expected, errors):
    """Trained initializers against expected, the rest unchanged."""
    if not os.path.exists(save):
        errors.append(f"--save wrote no {save}")
        return float("nan")
    got_m, ref_m = onnx.load(save), onnx.load(model_path)
    got = {i.name: numpy_helper.to_array(i) for i in got_m.graph.initializer}
    ref = {i.name: numpy_helper.to_array(i) for i in ref_m.graph.initializer}
    if [n.op_type for n in got_m.graph.node] != [n.op_type for n in ref_m.graph.node]:
        errors.append("the saved graph's nodes differ from the exported model's")
    if set(got) != set(ref):
        errors.append(f"saved initializers differ in names: missing {sorted(set(ref) - set(got))}"
                      f", extra {sorted(set(got) - set(ref))}")
    worst, lines = 0.0, []
    for name in sorted(expected.files):
        want = expected[name].astype(np.float64)
        if name not in got:
            continue
        g = got[name].astype(np.float64)
        if g.shape != want.shape:
            errors.append(f"{name}: saved shape {g.shape}, expected {want.shape}")
            continue
        ratio = np.abs(g - want) / (1e-4 + 1e-3 * np.abs(want))
        bad = ~(ratio <= 1)  # NaN counts as off
        worst = max(worst, float(np.nanmax(np.where(np.isnan(ratio), np.inf, ratio))))
        n_bad = int(bad.sum())
        if n_bad:
            i = np.unravel_index(int(np.argmax(np.where(bad, np.nan_to_num(ratio, nan=np.inf),
                                                        -1))), ratio.shape)
            unmoved = np.array_equal(g, ref[name].astype(np.float64)) if name in ref else False
            lines.append(f"  {name}: {n_bad}/{g.size} entries off; worst at {list(i)}: keel "
                         f"{g[i]:.7g} torch {want[i]:.7g} (initial {ref[name][i]:.7g})"
                         + ("  [not trained at all]" if unmoved else ""))
    if lines:
        errors.append(f"{len(lines)} of {len(expected.files)} parameters differ from PyTorch's "
                      "(atol 1e-4 + rtol 1e-3):")
        errors += lines
    for name in sorted(set(ref) - set(expected.files)):
        if name in got and not np.array_equal(got[name], ref[name]):
            errors.append(f"{name} is no parameter of the module but was changed")
    return worst


def check_model(keel, name, threads, keep):
    d = os.path.join(ROOT, "tests", "train", name)
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    expected = np.load(os.path.join(d, exp["params"]))
    work = keep or tempfile.mkdtemp(prefix=f"keel-train-{name}-")
    os.makedirs(work, exist_ok=True)
    print(f"== {name}: {exp['steps']} steps, {exp['optimizer']}", flush=True)
    errors = []
    try:
        compare(keel, name, threads, work, exp, expected, errors)
    finally:
        if not keep and not errors:
            for p in ("log.jsonl", "trained.onnx", "log_step1.jsonl", "trained_step1.onnx"):
                if os.path.exists(os.path.join(work, p)):
                    os.remove(os.path.join(work, p))
        if not keep and not os.listdir(work):
            os.rmdir(work)
        elif errors:
            print(f"   files kept in {work}")
    return errors


PEAK_BOUND = 1.25


def check_peak_bound(stdout, errors):
    """The issue's bound: a step's peak at most 1.25 x (activations kept for
    the backward + parameters + gradients + optimizer state), as keel train's
    closing line reports it."""
    m = re.search(r"memory peak of the last step .* = ([0-9.]+) x \(activations", stdout)
    if not m:
        errors.append("keel train printed no 'memory peak of the last step' line")
        return None
    r = float(m.group(1))
    if r > PEAK_BOUND:
        errors.append(f"peak of a step is {r} x (kept activations + parameters + gradients + "
                      f"optimizer state), above {PEAK_BOUND}")
    return r


def compare(keel, name, threads, work, exp, expected, errors):
    d = os.path.join(ROOT, "tests", "train", name)
    cmd, out, secs, log, save = run_keel(keel, name, threads, work)
    print("   " + " ".join(shlex.quote(c) for c in cmd))
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()
        if len(tail) > 15:  # a usage text: its first lines say why
            tail = tail[:4] + ["..."] + tail[-10:]
        errors.append(f"keel train exited with {out.returncode}:")
        errors += ["  " + t for t in tail]
        return
    rows = read_log(log, errors) if os.path.exists(log) else []
    if not rows and not errors:
        errors.append(f"--log wrote nothing to {log}")
    loss_rel = check_losses(rows, exp["losses"], errors) if rows else float("nan")
    alloc = check_allocated(rows, errors) if rows else None
    worst = check_params(save, os.path.join(d, "model.onnx"), expected, errors)
    runners = check_saved_runs(keel, save, name, exp, work, errors)
    bound = check_peak_bound(out.stdout, errors)
    print(f"   {secs:.1f} s; worst loss rel {loss_rel:.2e}; worst parameter error "
          f"{worst:.3f} of the tolerance; allocated from step 2: {alloc}; peak {bound} x the "
          f"bound's sum; saved model run by {', '.join(sorted(runners)) or 'nothing'}")
    if errors and "params_after_step1" in exp:
        errors += diagnose_step1(keel, name, threads, work, exp)


def diagnose_step1(keel, name, threads, work, exp):
    """After a mismatch: one step of keel train (--steps 1 --save) against
    PyTorch's parameters after step 1, to say which parameters' first update
    (so which gradients) differ. For sgd/momentum the update is -lr * grad."""
    _, out, _, _, save = run_keel(keel, name, threads, work, steps=1, tag="_step1")
    if out.returncode != 0 or not os.path.exists(save):
        return [f"diagnosis: keel train --steps 1 failed ({out.returncode})"]
    d = os.path.join(ROOT, "tests", "train", name)
    want = np.load(os.path.join(d, exp["params_after_step1"]))
    init = {i.name: numpy_helper.to_array(i).astype(np.float64)
            for i in onnx.load(os.path.join(d, "model.onnx")).graph.initializer}
    got = {i.name: numpy_helper.to_array(i).astype(np.float64)
           for i in onnx.load(save).graph.initializer}
    lr = exp["hyper"]["lr"]
    sgd = exp["optimizer"] in ("sgd", "momentum")
    lines = []
    for p in sorted(want.files):
        if p not in got or got[p].shape != want[p].shape:
            lines.append(f"  {p}: missing or reshaped in the 1-step save")
            continue
        u_t, u_k = want[p].astype(np.float64) - init[p], got[p] - init[p]
        scale = float(np.abs(u_t).max())
        err = np.nan_to_num(np.abs(u_k - u_t), nan=np.inf)
        off = ~(err <= 1e-7 + 1e-3 * scale)
        if off.any():
            i = np.unravel_index(int(np.argmax(err)), u_t.shape)
            what = (f"grad keel {-u_k[i] / lr:.6g} torch {-u_t[i] / lr:.6g}" if sgd else
                    f"update keel {u_k[i]:.6g} torch {u_t[i]:.6g}")
            lines.append(f"  {p}: {int(off.sum())}/{off.size} entries; worst at {list(i)}: "
                         f"{what}" + ("  [not updated]" if not u_k.any() else ""))
    if not lines:
        return ["diagnosis: step 1 matches PyTorch for every parameter: the difference "
                "starts later (optimizer state, or a batch of another shape/branch)"]
    return [f"diagnosis: after step 1, {len(lines)} of {len(want.files)} parameters' first "
            "update differs from PyTorch's (so their gradient):"] + lines


ORT_MODULES = os.environ.get("KEEL_ORT_NODE_PATH", "/work/ort/node_modules")
ORT_DTYPES = {np.float32: "float32", np.int64: "int64"}


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def ort_loss(model_path, data_dir, work):
    """The model's loss on one batch under ONNX Runtime (tools/ort_run.js,
    onnxruntime-node); None when node or onnxruntime-node is missing."""
    if not os.path.isdir(os.path.join(ORT_MODULES, "onnxruntime-node")):
        return None
    names = [i.name for i in onnx.load(model_path, load_external_data=False).graph.input]
    inputs = []
    for j, nm in enumerate(names):
        arr = read_pb(os.path.join(data_dir, f"input_{j}.pb"))
        raw = os.path.join(work, f"ort_in_{j}.bin")
        arr.tofile(raw)
        inputs.append({"name": nm, "type": ORT_DTYPES[arr.dtype.type], "dims": list(arr.shape),
                       "file": raw})
    job = os.path.join(work, "ort_job.json")
    with open(job, "w") as f:
        json.dump({"model": os.path.abspath(model_path), "inputs": inputs, "out": work}, f)
    out = subprocess.run(["node", os.path.join(ROOT, "tools", "ort_run.js"), job],
                         env=dict(os.environ, NODE_PATH=ORT_MODULES), capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("onnxruntime: " + out.stderr.strip()[-400:])
    with open(os.path.join(work, "outputs.json")) as f:
        meta = json.load(f)
    i = [m["name"] for m in meta].index("loss")
    loss = float(np.fromfile(os.path.join(work, f"{i}.bin"), dtype=np.float32)[0])
    for x in [job, os.path.join(work, "outputs.json")] + [i["file"] for i in inputs] + \
             [os.path.join(work, f"{k}.bin") for k in range(len(meta))]:
        os.remove(x)
    return loss


def keel_run_loss(keel, model_path, data_dir, work):
    """The model's loss on one batch from `keel run --out`."""
    out_dir = os.path.join(work, "run_out")
    os.makedirs(out_dir, exist_ok=True)
    cmd = shlex.split(keel) + ["run", model_path, "--data", data_dir, "--out", out_dir]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    path = os.path.join(out_dir, "output_0.pb")
    if out.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"keel run exited with {out.returncode}: "
                           + " / ".join((out.stderr or out.stdout).strip().splitlines()[-3:]))
    loss = float(read_pb(path))
    os.remove(path)
    os.rmdir(out_dir)
    return loss


def check_saved_runs(keel, save, name, exp, work, errors):
    """The --save model under keel run and ONNX Runtime: PyTorch's trained
    loss on the first batch and on the last step's batch (rtol 1e-3)."""
    used = set()
    if not os.path.exists(save):
        return used
    for k in sorted({0, (exp["steps"] - 1) % exp["batches"]}):
        data = os.path.join(ROOT, "tests", "train", name, f"data_{k}")
        want = exp["trained_forward_losses"][k]
        for who, fn in [("keel run", lambda: keel_run_loss(keel, save, data, work)),
                        ("onnxruntime", lambda: ort_loss(save, data, work))]:
            try:
                got = fn()
            except (RuntimeError, OSError) as e:
                errors.append(f"saved model, batch {k}: {who} failed: {e}")
                continue
            if got is None:
                continue
            used.add(who)
            if not abs(got - want) <= 1e-3 * abs(want):
                errors.append(f"saved model, batch {k}: {who} loss {got:.7g}, PyTorch's trained "
                              f"model {want:.7g}")
    return used


def check_forward(keel, name, work):
    """keel run on each batch with the untrained weights against PyTorch."""
    d = os.path.join("tests", "train", name)
    with open(os.path.join(ROOT, d, "expected.json")) as f:
        want = json.load(f)["forward_losses"]
    errors, worst = [], 0.0
    for k, exp in enumerate(want):
        try:
            got = keel_run_loss(keel, os.path.join(d, "model.onnx"), os.path.join(d, f"data_{k}"),
                                work)
        except RuntimeError as e:
            errors.append(f"batch {k}: {e}")
            continue
        rel = abs(got - exp) / abs(exp)
        worst = max(worst, rel)
        if not rel <= 1e-4:
            errors.append(f"batch {k}: keel loss {got:.7g}, PyTorch {exp:.7g} (rel {rel:.1e})")
    print(f"== {name}: keel run on {len(want)} batches: worst rel {worst:.1e}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keel", default=os.path.join(ROOT, "build", "keel"),
                    help="keel binary (or a command prefix)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--keep", help="keep log and saved model in DIR/NAME")
    ap.add_argument("--forward", action="store_true",
                    help="check keel run's loss on every batch (inference only)")
    ap.add_argument("names", nargs="*", default=NAMES)
    a = ap.parse_args()
    failed = []
    for name in a.names:
        keep = os.path.join(a.keep, name) if a.keep else None
        if a.forward:
            work = tempfile.mkdtemp(prefix=f"keel-forward-{name}-")
            errors = check_forward(a.keel, name, work)
            if not os.listdir(work):
                os.rmdir(work)
        else:
            errors = check_model(a.keel, name, a.threads, keep)
        if errors:
            failed.append(name)
            print(f"   FAIL {name}:")
            for e in errors:
                print("   " + e)
        else:
            print(f"   ok {name}")
    what = "models' forward losses" if a.forward else "models"
    print(f"{len(a.names) - len(failed)}/{len(a.names)} {what} match PyTorch"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
