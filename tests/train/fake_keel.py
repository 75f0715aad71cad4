#!/usr/bin/env /usr/bin/python3
"""A stand-in for `keel train` that tests check.py itself (selftest.py):
it parses the issue's command line, checks that every --data folder holds
the model's inputs, and writes the log and saved model that a trainer
matching PyTorch would write, from expected.json and expected_params.npz,
damaged as KEEL_FAKE_MODE asks: exact, loss, param, nan, alloc,
untrained, steps, crash. For tools/train_10k.sh and bench/train_vs_torch.py it also
runs longer than expected.json (losses repeat), flushing each log line;
KEEL_FAKE_MODE=leak then grows its memory by 4 MB and allocated by 64
bytes from step KEEL_FAKE_LEAK_STEP (5,000) on, KEEL_FAKE_STEP_US sleeps
per step. `run` is passed to the real keel named by KEEL_FAKE_RUN.

Run: KEEL_FAKE_MODE=exact /usr/bin/python3 tests/train/fake_keel.py train MODEL ARGS...
"""
import json
import os
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

HOG = []  # the planted leak (global: kept until the process ends)


def parse(argv):
    if not argv or argv[0] != "train":
        sys.exit("usage: fake_keel.py train MODEL --loss NAME --data DIR ... --steps N ...")
    opts, data, i = {"model": argv[1]}, [], 2
    while i < len(argv):
        key, val = argv[i], argv[i + 1]
        if key == "--data":
            data.append(val)
        else:
            opts[key] = val
        i += 2
    opts["data"] = data
    return opts


def main():
    if sys.argv[1:2] == ["run"]:  # `keel run` on the saved model: the real keel's
        real = os.environ.get("KEEL_FAKE_RUN")
        if not real:
            sys.exit("fake_keel.py: run needs KEEL_FAKE_RUN (a real keel)")
        os.execv(real, [real] + sys.argv[1:])
    mode = os.environ.get("KEEL_FAKE_MODE", "exact")
    o = parse(sys.argv[1:])
    d = os.path.dirname(o["model"])
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    model = onnx.load(o["model"])
    n_in = len(model.graph.input)
    for folder in o["data"]:
        for j in range(n_in):
            if not os.path.exists(os.path.join(folder, f"input_{j}.pb")):
                sys.exit(f"{folder}: no input_{j}.pb")
    steps = int(o["--steps"])
    assert o["--loss"] == "loss" and len(o["data"]) == exp["batches"]
    if mode == "crash":
        sys.exit("keel: train: something went wrong")
    pause = float(os.environ.get("KEEL_FAKE_STEP_US", "0")) * 1e-6
    log = open(o["--log"], "w") if "--log" in o else open(os.devnull, "w")
    leak_at = int(os.environ.get("KEEL_FAKE_LEAK_STEP", "5000"))
    for s in range(1, steps + 1 - (mode == "steps")):
        loss = exp["losses"][(s - 1) % len(exp["losses"])]
        loss *= 1.002 if mode == "loss" and s == 7 else 1.0
        alloc = 4096 + (64 if mode == "alloc" and s >= 5 else 0) + (512 if s == 1 else 0)
        if mode == "leak" and s >= leak_at:
            alloc += 64
            if s == leak_at:
                HOG.append(bytearray(b"x" * (4 << 20)))
        log.write(json.dumps({"step": s, "loss": loss, "allocated": alloc,
                              "reserved": 8192, "peak": 6000}) + "\n")
        log.flush()
        if pause:
            time.sleep(pause)
    log.close()
    ratio = 1.31 if mode == "peak" else 1.0
    print(f"memory peak of the last step 6.0 KB = {ratio:.3f} x (activations kept for the "
          "backward 1.0 KB + parameters 1.0 KB + gradients 1.0 KB + optimizer state 0 B)")
    if "--save" not in o:
        return
    params = np.load(os.path.join(d, exp["params"] if steps != 1 else exp["params_after_step1"]))
    first = sorted(params.files)[0]
    for init in model.graph.initializer:
        if init.name in params.files and not (mode == "untrained" and init.name == first):
            v = params[init.name].copy()
            if mode == "param" and init.name == first:
                v.flat[0] += 1e-3 + 2e-3 * abs(v.flat[0])
            if mode == "nan" and init.name == first:
                v.flat[-1] = np.nan
            init.CopyFrom(numpy_helper.from_array(v, init.name))
    onnx.save(model, o["--save"])


if __name__ == "__main__":
    main()
