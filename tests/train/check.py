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
and prints a diff of whatever does not match. Exit status 0 when every
model matches, 1 otherwise.

--forward checks inference only (no trainer needed): `keel run` on every
batch at the exported weights must give PyTorch's loss (rtol 1e-4).

Run: /usr/bin/python3 tests/train/check.py [--keel build/keel] [--forward]
         [--threads N] [--keep DIR] [NAME...]      (default: all four)
"""
import argparse
import json
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
NAMES = ["mlp_if", "rnn_loop", "cnn_branch", "transformer_lm"]
LOG_KEYS = ("step", "loss", "allocated", "reserved", "peak")


def run_keel(keel, name, threads, work):
    d = os.path.join("tests", "train", name)
    with open(os.path.join(ROOT, d, "args")) as f:
        args = f.read().split()
    log, save = os.path.join(work, "log.jsonl"), os.path.join(work, "trained.onnx")
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
        worst = max(worst, float(ratio.max()))
        n_bad = int((ratio > 1).sum())
        if n_bad:
            i = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
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
    cmd, out, secs, log, save = run_keel(keel, name, threads, work)
    errors = []
    print(f"== {name}: {' '.join(shlex.quote(c) for c in cmd[:3])} ... ({exp['steps']} steps, "
          f"{exp['optimizer']})")
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-15:]
        errors.append(f"keel train exited with {out.returncode}:")
        errors += ["  " + t for t in tail]
        return errors
    rows = read_log(log, errors) if os.path.exists(log) else []
    if not rows and not errors:
        errors.append(f"--log wrote nothing to {log}")
    loss_rel = check_losses(rows, exp["losses"], errors) if rows else float("nan")
    alloc = check_allocated(rows, errors) if rows else None
    worst = check_params(save, os.path.join(d, "model.onnx"), expected, errors)
    print(f"   {secs:.1f} s; worst loss rel {loss_rel:.2e}; worst parameter error "
          f"{worst:.3f} of the tolerance; allocated from step 2: {alloc}")
    if not keep and not errors:
        for p in (log, save):
            if os.path.exists(p):
                os.remove(p)
        os.rmdir(work) if not os.listdir(work) else None
    elif errors:
        print(f"   files kept in {work}")
    return errors


def check_forward(keel, name, work):
    """keel run on each batch with the untrained weights against PyTorch."""
    d = os.path.join("tests", "train", name)
    with open(os.path.join(ROOT, d, "expected.json")) as f:
        want = json.load(f)["forward_losses"]
    errors, worst = [], 0.0
    for k, exp in enumerate(want):
        out_dir = os.path.join(work, f"out_{k}")
        os.makedirs(out_dir, exist_ok=True)
        cmd = shlex.split(keel) + ["run", os.path.join(d, "model.onnx"), "--data",
                                   os.path.join(d, f"data_{k}"), "--out", out_dir]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        path = os.path.join(out_dir, "output_0.pb")
        if out.returncode != 0 or not os.path.exists(path):
            errors.append(f"batch {k}: keel run exited with {out.returncode}: "
                          + " / ".join((out.stderr or out.stdout).strip().splitlines()[-3:]))
            continue
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        got = float(numpy_helper.to_array(t))
        os.remove(path)
        os.rmdir(out_dir)
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
