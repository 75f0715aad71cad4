"""unreached.py KEEL: `keel train` on tests/train_unreached
(tools/gen_train_unreached.py) against PyTorch: parameters that a step's
backward does not reach (an If branch not taken, an If inside a branch)
are skipped as torch.optim skips a parameter whose .grad is None.

For sgd (with weight decay), momentum (with weight decay), adam and adamw,
each with --zero-grad none (zero_grad(set_to_none=True)) and zeros
(set_to_none=False), 30 steps: per-step losses within rtol 1e-4 and the
trained parameters within atol 1e-5. Then 20 steps + checkpoint + resume +
20 steps equals 40 steps bit for bit (losses and saved model), in both
modes, and the mode changed at the resume takes effect from there on.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = os.path.join(HERE, "..", "train_unreached")
KEEL = sys.argv[1]
failures = []
checks = [0]


def train(args, tmp, tag, steps):
    log, save = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".onnx")
    data = []
    for k in range(8):
        data += ["--data", os.path.join(DIR, f"data_{k}")]
    cmd = [KEEL, "train", os.path.join(DIR, "model.onnx"), "--loss", "loss", *data,
           "--steps", str(steps), "--log", log, "--save", save, *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        first = [l for l in r.stderr.splitlines() if l.startswith("keel")][:1]
        failures.append(f"{tag}: exit {r.returncode}: {first[0] if first else r.stderr[-300:]}")
        return None, None, None
    with open(log) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    m = onnx.load(save)
    params = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    with open(save, "rb") as f:
        saved = f.read()
    return losses, params, saved


def against_torch(exp, tmp):
    for key, run in exp["runs"].items():
        opt, mode = key.split("/")
        losses, params, _ = train(run["args"] + ["--zero-grad", mode], tmp, f"{opt}_{mode}", exp["steps"])
        if losses is None:
            continue
        want = np.array(run["losses"])
        got = np.array(losses)
        rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-6)
        worst_p, where = 0.0, ""
        for name, ref in run["params"].items():
            d = np.abs(params[name].astype(np.float64) - np.array(ref)).max()
            if d > worst_p:
                worst_p, where = d, name
        checks[0] += 1
        ok = len(got) == len(want) and rel.max() <= 1e-4 and worst_p <= 1e-5
        print(f"{'ok' if ok else 'FAIL'}: {key}: losses within {rel.max():.2e} (rtol 1e-4), "
              f"parameters within {worst_p:.2e} (atol 1e-5, worst {where})")
        if not ok:
            k = int(np.argmax(rel))
            failures.append(f"{key}: step {k + 1}: keel {got[k]:.7f} torch {want[k]:.7f}; "
                            f"parameter {where} off by {worst_p:.2e}")


def resume(tmp):
    args = ["--optimizer", "adam", "--lr", "0.01"]
    for mode in ("none", "zeros"):
        a = args + ["--zero-grad", mode]
        full, _, full_bytes = train(a, tmp, f"full_{mode}", 40)
        ck = os.path.join(tmp, f"ck_{mode}")
        first, _, _ = train(a + ["--checkpoint", ck], tmp, f"first_{mode}", 20)
        second, _, second_bytes = train(a + ["--resume", ck], tmp, f"second_{mode}", 20)
        if full is None or first is None or second is None:
            continue
        checks[0] += 1
        same = full == first + second and full_bytes == second_bytes
        print(f"{'ok' if same else 'FAIL'}: {mode}: 20 steps + resume + 20 steps equals 40 bit for bit")
        if not same:
            failures.append(f"resume ({mode}): 20 + 20 differs from 40")
    # the checkpoint keeps each parameter's own steps: resuming a 'none' run
    # in 'zeros' mode differs from resuming it in 'none' mode (the else
    # branch's parameters had gradients, so zeros mode updates them at
    # every step from then on), and a run that was 'zeros' throughout
    # differs from both
    n, _, _ = train(args + ["--zero-grad", "none", "--resume", os.path.join(tmp, "ck_none")], tmp, "n2", 20)
    z, _, _ = train(args + ["--zero-grad", "zeros", "--resume", os.path.join(tmp, "ck_none")], tmp, "z2", 20)
    if n is not None and z is not None:
        checks[0] += 1
        differ = n[0] == z[0] and n != z
        print(f"{'ok' if differ else 'FAIL'}: the mode given at the resume applies from then on")
        if not differ:
            failures.append("resume: switching --zero-grad at the resume changed nothing (or step 1)")


def bad_mode(tmp):
    r = subprocess.run([KEEL, "train", os.path.join(DIR, "model.onnx"), "--loss", "loss", "--data",
                        os.path.join(DIR, "data_0"), "--steps", "1", "--optimizer", "sgd", "--lr", "0.1",
                        "--zero-grad", "maybe"], capture_output=True, text=True)
    checks[0] += 1
    ok = r.returncode == 2 and "--zero-grad: none or zeros" in r.stderr
    print(f"{'ok' if ok else 'FAIL'}: --zero-grad maybe is refused")
    if not ok:
        failures.append(f"--zero-grad maybe: exit {r.returncode}: {r.stderr.splitlines()[:1]}")


def main():
    with open(os.path.join(DIR, "expected.json")) as f:
        exp = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        against_torch(exp, tmp)
        resume(tmp)
        bad_mode(tmp)
    for f in failures:
        print("FAIL:", f)
    n = max(checks[0], len(failures))
    print(f"{n - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
