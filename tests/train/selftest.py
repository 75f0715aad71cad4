#!/usr/bin/env /usr/bin/python3
"""Tests check.py (ctest train_check_selftest) with fake_keel.py standing
in for `keel train`: a trainer that matches PyTorch passes; one that is off
by 2e-3 in one step's loss, off in one parameter entry, whose allocated
bytes move from step 5, that leaves a parameter untrained, writes one step
too few or fails must each make check.py exit non-zero, naming the problem.

Run: /usr/bin/python3 tests/train/selftest.py
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [("exact", 0, "4/4 models match"), ("loss", 1, "loss differs"),
         ("param", 1, "parameters differ"), ("alloc", 1, "allocated moves"),
         ("untrained", 1, "not trained at all"), ("steps", 1, "log steps"),
         ("crash", 1, "exited with")]


def main():
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
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
