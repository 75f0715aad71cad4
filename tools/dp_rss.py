#!/usr/bin/env python3
"""Memory of a long data-parallel run (issue 26): `mpirun -np N keel train
--data-parallel` on tests/train/transformer_lm for S steps; every rank's
allocated bytes after each step (from the --log files) and each rank's RSS
(VmRSS, sampled from /proc while the job runs) at step 100 and at the end.

    /usr/bin/python3 tools/dp_rss.py [--keel build/keel] [--ranks 2] [--steps 1000]
Not a test: RSS depends on the machine and the MPI library.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "train"))
import dp_check  # noqa: E402


def rss_kb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def last_step(log):
    try:
        with open(log, "rb") as f:
            lines = f.read().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, KeyError, IndexError):
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", default=os.path.join(ROOT, "build", "keel"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1000)
    a = ap.parse_args()
    launcher = dp_check.mpi_launcher()
    if not launcher:
        sys.exit("mpirun not found")
    tmp = tempfile.mkdtemp(prefix="keel-dp-rss-")
    try:
        model, data = dp_check.private_job(tmp, "transformer_lm", 32, "model")
        log = os.path.join(tmp, "log.jsonl")
        cmd = launcher + ["-np", str(a.ranks), a.keel, "train", model] + dp_check.read_args("transformer_lm", a.steps) + \
            data + ["--data-parallel", "--threads", "1", "--log", log]
        out_path = os.path.join(tmp, "out.txt")  # a file: a pipe nobody reads would stop mpirun
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=open(out_path, "w"), stderr=subprocess.STDOUT)
        at100, last = {}, {}
        while p.poll() is None:
            step = last_step(log)
            pids = {r: dp_check.rank_pids(model, r) for r in range(a.ranks)}
            for r, ps in pids.items():
                if ps:
                    kb = rss_kb(ps[0])
                    if kb:
                        if step >= 100 and r not in at100:
                            at100[r] = (step, kb)
                        last[r] = (step, kb)
            time.sleep(0.02)
        out = open(out_path).read()
        for r in range(a.ranks):
            f = log if r == 0 else f"{log}.rank{r}"
            rows = [json.loads(x) for x in open(f)]
            alloc = {x["allocated"] for x in rows[1:]}
            s100, k100 = at100.get(r, (None, None))
            sl, kl = last.get(r, (None, None))
            print(f"rank {r}: allocated after steps 2-{rows[-1]['step']}: {sorted(alloc)} B; RSS {k100} kB at step "
                  f"{s100}, {kl} kB at step {sl}: {'+' if kl and k100 and kl >= k100 else ''}"
                  f"{(kl - k100) if kl and k100 else '?'} kB")
        print("\n".join(x for x in out.splitlines() if "verdict" in x))
        return p.returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
