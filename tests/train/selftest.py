#!/usr/bin/env /usr/bin/python3
"""Tests check.py (ctest train_check_selftest) with fake_keel.py standing
in for `keel train`: a trainer that matches PyTorch passes; one that is off
by 2e-3 in one step's loss, off in one parameter entry, whose allocated
bytes move from step 5, that leaves a parameter untrained, writes one step
too few or fails must each make check.py exit non-zero, naming the problem.
Then tools/train_10k.sh on the same stand-in (2,000 steps, RSS from step
200): steady passes; 4 MB and 64 allocated bytes more from step 1,000 fail.

`keel run` on the saved model goes to the real keel (argument, default
build/keel).

Run: /usr/bin/python3 tests/train/selftest.py [KEEL]
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [("exact", 0, "5/5 models match"), ("loss", 1, "loss differs"),
         ("param", 1, "parameters differ"), ("param", 1, "1 of 8 parameters' first update"), ("nan", 1, "fc1.bias: 1/16 entries off"), ("alloc", 1, "allocated moves"), ("peak", 1, "above 1.25"),
         ("untrained", 1, "not trained at all"), ("steps", 1, "log steps"),
         ("crash", 1, "exited with")]


def main():
    real = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(HERE, "..", "..", "build", "keel"))
    os.environ["KEEL_FAKE_RUN"] = real
    fake = f"{sys.executable} {os.path.join(HERE, 'fake_keel.py')}"
    failures = 0
    for mode, rc_want, needle in CASES:
        names = [] if mode == "exact" else ["mlp_if"]
        with tempfile.TemporaryDirectory(prefix="keel-train-selftest-") as keep:
            out = subprocess.run([sys.executable, os.path.join(HERE, "check.py"), "--keel", fake,
                                  "--keep", keep] + names, capture_output=True, text=True,
                                 env=dict(os.environ, KEEL_FAKE_MODE=mode))
        ok = (out.returncode != 0) == (rc_want != 0) and needle in out.stdout
        print(f"{'ok  ' if ok else 'FAIL'} {mode}: rc {out.returncode}, "
              f"{'found' if needle in out.stdout else 'missing'} '{needle}'")
        if not ok:
            failures += 1
            print(out.stdout[-2000:], out.stderr[-2000:])
    script = os.path.join(HERE, "..", "..", "tools", "train_10k.sh")
    for mode, rc_want, needles in [("exact", 0, ["ok: steady over 2000 steps"]),
                                   ("leak", 1, ["allocated is not identical",
                                                "FAIL: RSS grew"])]:
        with tempfile.TemporaryDirectory(prefix="keel-train-10k-selftest-") as out_dir:
            env = dict(os.environ, KEEL=fake, KEEL_FAKE_MODE=mode, KEEL_FAKE_STEP_US="500",
                       KEEL_FAKE_LEAK_STEP="1000", STEPS="2000", FROM="200", OUT=out_dir)
            out = subprocess.run(["bash", script], capture_output=True, text=True, env=env)
        ok = (out.returncode != 0) == (rc_want != 0) and all(n in out.stdout for n in needles)
        print(f"{'ok  ' if ok else 'FAIL'} train_10k.sh {mode}: rc {out.returncode}")
        if not ok:
            failures += 1
            print(out.stdout[-2000:], out.stderr[-2000:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
