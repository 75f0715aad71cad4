#!/usr/bin/env python3
"""Data-parallel `keel train` against one process (issue 26).

For each model, each of the first K batches of tests/train/NAME is cut to
a multiple of N along its batch axis and split into N equal parts. One
process trains on the whole batches; `mpirun -np N keel train
--data-parallel` trains on the parts (rank r gets part r of every batch:
the --data list interleaves them). With a loss that is a mean over the
batch, both must give the same losses at every step (rtol 1e-4; the ranks'
mean against the whole batch's) and the same trained parameters
(atol 1e-5 + rtol 1e-4 for all but 1 in 10^4 elements, within twice that
for every one: see the note on Adam in check()).

mlp_if and cnn_branch pick their If branch from x.mean() and x.std() of
the batch, which may differ between a part and the whole (as BatchNorm's
statistics differ per rank under DDP without SyncBatchNorm): a batch whose
parts would not all take the whole batch's branch is left out.

    tests/train/dp_check.py --keel build/keel [--ranks 2] [--steps 12]
Exit 0 pass, 1 fail, 77 skip (no mpirun, no onnx, keel without MPI).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# model -> the batch axis of every data input
MODELS = {"mlp_plain": 0, "mlp_if": 0, "rnn_loop": 1, "cnn_branch": 0, "transformer_lm": 0}
# the If condition of the models that branch on a statistic of the batch
# (tests/train/models.py), on input 0
BRANCH = {"mlp_if": lambda x: bool(x.mean() > 0.0), "cnn_branch": lambda x: bool(x.std(ddof=1) > 1.0)}


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def read_args(name, steps):
    with open(os.path.join(ROOT, "tests", "train", name, "args")) as f:
        args = f.read().split()
    out, i = [], 0
    while i < len(args):
        if args[i] == "--data":
            i += 2
            continue
        if args[i] == "--steps":
            args[i + 1] = str(steps)
        out += args[i:i + 2]
        i += 2
    return out


def make_batches(name, axis, ranks, k, tmp, onnx, numpy_helper, trim=None, tag="part"):
    """tmp/whole/b_i and tmp/<tag>/b_i_r; returns the two --data lists.
    Batches are cut to a multiple of `trim` (default: ranks)."""
    whole, parts = [], []
    for b in range(k):
        src = os.path.join(ROOT, "tests", "train", name, f"data_{b}")
        files = sorted(f for f in os.listdir(src) if f.startswith("input_"))
        arrays = []
        for f in files:
            t = onnx.TensorProto()
            with open(os.path.join(src, f), "rb") as fh:
                t.ParseFromString(fh.read())
            arrays.append(numpy_helper.to_array(t))
        n = arrays[0].shape[axis] // (trim or ranks) * (trim or ranks)
        if n == 0:
            continue
        dirs = [os.path.join(tmp, "whole", f"b{b}")] + [os.path.join(tmp, tag, f"b{b}_{r}") for r in range(ranks)]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        for f, a in zip(files, arrays):
            a = a.take(range(n), axis=axis)
            with open(os.path.join(dirs[0], f), "wb") as fh:
                fh.write(numpy_helper.from_array(a).SerializeToString())
            for r, piece in enumerate(__import__("numpy").split(a, ranks, axis=axis)):
                with open(os.path.join(dirs[1 + r], f), "wb") as fh:
                    fh.write(numpy_helper.from_array(piece).SerializeToString())
        if name in BRANCH:  # a part must take its whole batch's branch, or the runs cannot agree
            x = arrays[0].take(range(n), axis=axis)
            if len({BRANCH[name](p) for p in __import__("numpy").split(x, ranks, axis=axis)} | {BRANCH[name](x)}) > 1:
                for d in dirs:
                    shutil.rmtree(d)
                continue
        whole.append(dirs[0])
        parts += dirs[1:]
    return whole, parts


def mpi_launcher():
    """mpirun (or $KEEL_MPIRUN) as a list, with Open MPI's flags for a
    root user on a machine with fewer cores than ranks; None if missing."""
    launcher = os.environ.get("KEEL_MPIRUN", "mpirun").split()
    if not shutil.which(launcher[0]):
        return None
    v = subprocess.run(launcher + ["--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return launcher + (["--oversubscribe", "--allow-run-as-root"] if "Open MPI" in v.stdout else [])


def private_job(tmp, name, n, stem):
    """The model of tests/train/NAME copied to tmp/STEM.onnx (a path only
    this job's command lines hold, to find its processes) and --data flags
    for its first n folders."""
    model = os.path.join(tmp, stem + ".onnx")
    shutil.copy(os.path.join(ROOT, "tests", "train", name, "model.onnx"), model)
    return model, sum((["--data", os.path.join(ROOT, "tests", "train", name, f"data_{i}")] for i in range(n)), [])


def report(ok, line, p):
    """Prints `line` as ok or FAIL, and on a failure the end of the job's
    output (p: a CompletedProcess, or None when the job hung)."""
    print(f"{'ok  ' if ok else 'FAIL'} {line}")
    if not ok:
        print(p.stdout[-3000:] if p else "the job hung (60 s)")
    return ok


def losses(log):
    with open(log) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def params(path, onnx, numpy_helper):
    m = onnx.load(path)
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def run(cmd):
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode:
        print(" ".join(cmd))
        print(p.stdout[-3000:])
    return p.returncode, p.stdout


def check(name, axis, a, launcher, onnx, numpy_helper, np):
    tmp = tempfile.mkdtemp(prefix=f"keel-dp-{name}-")
    try:
        whole, parts = make_batches(name, axis, a.ranks, a.batches, tmp, onnx, numpy_helper)
        model = os.path.join(ROOT, "tests", "train", name, "model.onnx")
        base = [a.keel, "train", model] + read_args(name, a.steps) + ["--threads", "1"]
        one = base + sum((["--data", d] for d in whole), []) + [
            "--log", os.path.join(tmp, "one.jsonl"), "--save", os.path.join(tmp, "one.onnx")]
        dp = launcher + ["-np", str(a.ranks)] + base + sum((["--data", d] for d in parts), []) + [
            "--data-parallel", "--bucket-mb", str(a.bucket_mb),
            "--log", os.path.join(tmp, "dp.jsonl"), "--save", os.path.join(tmp, "dp.onnx")]
        rc1, _ = run(one)
        rc2, out = run(dp)
        if rc2 and "built without MPI" in out:
            skip("keel was built without MPI (cmake -DKEEL_MPI=OFF)")
        if rc1 or rc2:
            print(f"FAIL {name}: exit {rc1} (one process), {rc2} ({a.ranks} ranks)")
            return False
        l1, l2 = np.array(losses(os.path.join(tmp, "one.jsonl"))), np.array(losses(os.path.join(tmp, "dp.jsonl")))
        p1, p2 = params(os.path.join(tmp, "one.onnx"), onnx, numpy_helper), params(os.path.join(tmp, "dp.onnx"), onnx, numpy_helper)
        ok = len(l1) == len(l2) == a.steps and np.allclose(l2, l1, rtol=1e-4, atol=0)
        if p1.keys() != p2.keys():
            print(f"FAIL {name}: the saved models' initializers differ")
            return False
        over = sum(int(np.sum(np.abs(p2[k] - p1[k]) > 1e-5 + 1e-4 * np.abs(p1[k]))) for k in p1)
        total = sum(p1[k].size for k in p1)
        worst, worst_name = max((float(np.max(np.abs(p2[k] - p1[k]) / (1e-5 + 1e-4 * np.abs(p1[k])))), k)
                                for k in p1 if p1[k].dtype == np.float32)
        # Adam divides by sqrt(v) + eps: where a gradient is near eps (1e-8)
        # the sum's order (two halves, or one batch) moves its update by up
        # to lr / eps times the difference. One element of the transformer's
        # 30080 lands at 1.16x the bar in the clang -O0 build (0.2x in
        # release): at most 1 in 10^4 elements may exceed it, none 2x.
        ok = ok and worst <= 2.0 and over <= total // 10000
        dl = float(np.max(np.abs(l2 - l1) / np.abs(l1))) if len(l1) == len(l2) else float("nan")
        ranks_steady = out.count("verdict: steady") == a.ranks
        import re
        early = [float(x) for x in re.findall(r"([0-9.]+) of them a step started during the backward", out)]
        overlapped = len(early) == a.ranks and all(x > 0 for x in early)
        if not overlapped:
            print(f"FAIL {name}: no gradient bucket's sum started during the backward ({early})")
            return False
        ok = ok and ranks_steady
        if name == "mlp_plain":  # the same parts named per rank (--rank-data R:DIR): the same run
            rd = launcher + ["-np", str(a.ranks)] + base + sum((["--rank-data", f"{i % a.ranks}:{d}"] for i, d in enumerate(parts)), []) + [
                "--data-parallel", "--bucket-mb", str(a.bucket_mb), "--log", os.path.join(tmp, "rd.jsonl")]
            rc3, _ = run(rd)
            same = rc3 == 0 and [x["loss"] for x in map(json.loads, open(os.path.join(tmp, "rd.jsonl")))] == list(l2)
            print(f"{'ok  ' if same else 'FAIL'} {name}: --rank-data R:DIR gives the losses of the interleaved --data list")
            ok = ok and same
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {a.ranks} ranks on {len(parts)} parts against one process on "
              f"{len(whole)} batches, {a.steps} steps: loss rel. diff at most {dl:.2e} (rtol 1e-4), parameters "
              f"at most {worst:.3f} of atol 1e-5 + rtol 1e-4 ({worst_name}; {over} of {total} elements over it); every rank's memory steady: {ranks_steady}")
        return ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_bad_batch(a, launcher, onnx, numpy_helper, np):
    """Rank 1's second batch is float64: every rank stops at that step,
    non-zero, and the message names rank 1; nothing hangs (timeout)."""
    tmp = tempfile.mkdtemp(prefix="keel-dp-bad-")
    try:
        _, parts = make_batches("mlp_plain", 0, 2, 2, tmp, onnx, numpy_helper)
        bad = os.path.join(parts[3], "input_0.pb")  # batch 1, rank 1
        t = onnx.TensorProto()
        with open(bad, "rb") as fh:
            t.ParseFromString(fh.read())
        with open(bad, "wb") as fh:
            fh.write(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64)).SerializeToString())
        model = os.path.join(ROOT, "tests", "train", "mlp_plain", "model.onnx")
        cmd = launcher + ["-np", "2", a.keel, "train", model] + read_args("mlp_plain", 4) + \
            sum((["--data", d] for d in parts), []) + ["--data-parallel", "--threads", "1"]
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        named = "rank 1" in p.stdout and "step 2" in p.stdout
        return report(p.returncode != 0 and named and "step 1/4" in p.stdout,
                      f"a float64 batch on rank 1 at step 2: exit {p.returncode}, the error names rank 1 and "
                      f"step 2: {named}", p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_shard_and_resume(a, launcher, onnx, numpy_helper, np):
    """transformer_lm (AdamW) at 4 ranks with --shard-optimizer against 4
    ranks without: the same losses and parameters, bit for bit, and each
    rank's optimizer state at most 1.1 x a quarter of the whole. Then a
    checkpoint written by the sharded job after 5 steps, resumed at 2
    ranks (each step the same batches, cut in 2 instead of 4) for 10 more
    steps, against the 4-rank job's 15 steps."""
    tmp = tempfile.mkdtemp(prefix="keel-dp-zero-")
    try:
        name = "transformer_lm"
        _, p4 = make_batches(name, 0, 4, 4, tmp, onnx, numpy_helper, trim=4, tag="p4")
        _, p2 = make_batches(name, 0, 2, 4, tmp, onnx, numpy_helper, trim=4, tag="p2")
        model = os.path.join(ROOT, "tests", "train", name, "model.onnx")

        def job(ranks, parts, steps, tag, extra):
            cmd = launcher + ["-np", str(ranks), a.keel, "train", model] + read_args(name, steps) + \
                sum((["--data", d] for d in parts), []) + ["--data-parallel", "--threads", "1", "--bucket-mb", "0.05",
                                                          "--log", os.path.join(tmp, tag + ".jsonl"),
                                                          "--save", os.path.join(tmp, tag + ".onnx")] + extra
            rc, _ = run(cmd)
            return rc

        ck = os.path.join(tmp, "ck")
        rcs = [job(4, p4, 15, "full", []), job(4, p4, 15, "zero", ["--shard-optimizer"]),
               job(4, p4, 5, "first", ["--shard-optimizer", "--checkpoint", ck]),
               job(2, p2, 10, "resumed", ["--resume", ck])]
        if any(rcs):
            print(f"FAIL --shard-optimizer / resume: exits {rcs}")
            return False
        full, zero = [json.loads(x) for x in open(os.path.join(tmp, "full.jsonl"))], \
            [json.loads(x) for x in open(os.path.join(tmp, "zero.jsonl"))]
        shards = [zero[-1]["state_bytes"]] + [json.loads(open(os.path.join(tmp, f"zero.jsonl.rank{r}")).readlines()[-1])["state_bytes"]
                                               for r in range(1, 4)]
        whole = full[-1]["state_bytes"]
        same_loss = [x["loss"] for x in full] == [x["loss"] for x in zero]
        pf, pz = params(os.path.join(tmp, "full.onnx"), onnx, numpy_helper), params(os.path.join(tmp, "zero.onnx"), onnx, numpy_helper)
        same_params = pf.keys() == pz.keys() and all(np.array_equal(pf[k], pz[k]) for k in pf)
        ratio = max(shards) / (whole / 4)
        ok1 = same_loss and same_params and ratio <= 1.1
        print(f"{'ok  ' if ok1 else 'FAIL'} --shard-optimizer at 4 ranks: losses identical {same_loss}, parameters "
              f"identical {same_params}; optimizer state per rank {shards} B against {whole} B unsharded: "
              f"at most {ratio:.3f} x a quarter (bar 1.1)")
        pr = params(os.path.join(tmp, "resumed.onnx"), onnx, numpy_helper)
        lf = np.array([x["loss"] for x in full][5:])
        lr = np.array([json.loads(x)["loss"] for x in open(os.path.join(tmp, "resumed.jsonl"))])
        steps_ok = [json.loads(x)["step"] for x in open(os.path.join(tmp, "resumed.jsonl"))] == list(range(6, 16))
        dl = float(np.max(np.abs(lr - lf) / np.abs(lf))) if len(lr) == len(lf) else float("inf")
        over = sum(int(np.sum(np.abs(pr[k] - pf[k]) > 1e-5 + 1e-4 * np.abs(pf[k]))) for k in pf)
        worst = max(float(np.max(np.abs(pr[k] - pf[k]) / (1e-5 + 1e-4 * np.abs(pf[k])))) for k in pf)
        total = sum(pf[k].size for k in pf)
        ok2 = steps_ok and dl <= 1e-4 and worst <= 2.0 and over <= total // 10000
        print(f"{'ok  ' if ok2 else 'FAIL'} checkpoint of the sharded 4-rank job after step 5, resumed at 2 ranks for "
              f"steps 6-15: losses within {dl:.2e} of the 4-rank job's (rtol 1e-4), parameters at most {worst:.3f} "
              f"of atol 1e-5 + rtol 1e-4 ({over} of {total} elements over it)")
        return ok1 and ok2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_fewer_steps(a, launcher):
    """Rank 0 trains 3 steps, rank 1 5 (mpirun's MPMD form, A : B): rank 1's
    step 4 fails naming rank 0 instead of waiting for it for ever."""
    data = sum((["--data", os.path.join(ROOT, "tests", "train", "mlp_plain", f"data_{i}")] for i in range(4)), [])
    base = [a.keel, "train", os.path.join(ROOT, "tests", "train", "mlp_plain", "model.onnx")] + data + \
        ["--data-parallel", "--threads", "1"]
    cmd = launcher + ["-np", "1"] + base + read_args("mlp_plain", 3) + [":", "-np", "1"] + base + read_args("mlp_plain", 5)
    # Open MPI 4.1's mpirun sometimes never exits after rank 1's MPI_Abort
    # when rank 0 has already finalized (seen about once in 15 jobs on a
    # loaded 2-core machine: both keel processes gone, mpirun waiting, deaf
    # to SIGTERM). What keel owes is rank 1's error naming rank 0 and both
    # ranks ending; so on a timeout mpirun is killed, and the job passes
    # when its output closed (every rank had exited) with that error.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    launcher_hung = False
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        launcher_hung = True
        proc.kill()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            print("FAIL rank 0 stopping after 3 steps of 5: the job hung (60 s) and a rank is still running")
            return False
    p = subprocess.CompletedProcess(cmd, proc.returncode, out)
    named = "rank 0 of 2 stopped training" in out and "step 4" in out
    how = "mpirun did not exit after MPI_Abort (killed after 60 s; every rank had ended)" if launcher_hung \
        else f"exit {p.returncode}"
    return report((launcher_hung or p.returncode != 0) and named,
                  f"rank 0 stops after 3 steps, rank 1 goes on: {how}, rank 1's step 4 names rank 0: {named}", p)


def check_rank_differs(a, launcher):
    """MPMD jobs (A : B) whose ranks differ: another model (parameter set)
    on rank 1 stops both at creation; a 2 MB --mem-limit on rank 1 (the
    transformer's gradient bucket does not fit) fails step 1 on both ranks,
    rank 0 naming rank 1. Neither hangs."""
    def job(name0, name1, extra1):
        def rank(name, extra):
            d = os.path.join(ROOT, "tests", "train", name)
            return [a.keel, "train", os.path.join(d, "model.onnx"), "--data", os.path.join(d, "data_0"), "--data",
                    os.path.join(d, "data_1"), "--data-parallel", "--threads", "1"] + read_args(name, 3) + extra
        cmd = launcher + ["-np", "1"] + rank(name0, []) + [":", "-np", "1"] + rank(name1, extra1)
        try:
            return subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return None
    p1 = job("mlp_plain", "mlp_if", [])
    ok1 = p1 is not None and p1.returncode != 0 and p1.stdout.count("ranks disagree on the trainable parameters") >= 1
    p2 = job("transformer_lm", "transformer_lm", ["--mem-limit", "2M"])
    ok2 = p2 is not None and p2.returncode != 0 and "rank 1 of 2 failed this step" in p2.stdout and \
        "out of memory" in p2.stdout
    ok1 = report(ok1, f"another model on rank 1: exit {p1 and p1.returncode}, the ranks disagree on the "
                 f"parameters: {ok1}", p1)
    ok2 = report(ok2, f"a 2 MB cap on rank 1: exit {p2 and p2.returncode}, step 1 fails on both, rank 0 naming "
                 f"rank 1: {ok2}", p2)
    return ok1 and ok2


def check_planted_leak(a, launcher):
    """A reference kept alive on rank 1 only (--debug-plant-leak): rank 1's
    verdict names the value, rank 0's is steady, the job exits non-zero."""
    data = sum((["--data", os.path.join(ROOT, "tests", "train", "mlp_plain", f"data_{i}")] for i in range(4)), [])
    cmd = launcher + ["-np", "2", a.keel, "train", os.path.join(ROOT, "tests", "train", "mlp_plain", "model.onnx")] + \
        read_args("mlp_plain", 6) + data + ["--data-parallel", "--threads", "1",
                                            "--debug-plant-leak", "/Tanh_output_0", "--debug-plant-rank", "1"]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    named = "rank 1: verdict: LEAK" in p.stdout and "'/Tanh_output_0'" in p.stdout
    steady0 = "rank 0: verdict: steady" in p.stdout
    return report(p.returncode != 0 and named and steady0, f"a leak planted on rank 1: exit {p.returncode}, "
                  f"rank 1's verdict names the value: {named}, rank 0's is steady: {steady0}", p)


def rank_pids(marker, rank):
    """Pids of processes whose command line holds `marker` and whose
    environment says MPI rank `rank` (Open MPI's or MPICH's variable)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env or f"PMI_RANK={rank}".encode() in env:
            pids.append(int(pid))
    return pids


def check_kill(a, launcher):
    """kill -9 of rank 1 in the middle of a run: the job ends, non-zero,
    within 10 s; rank 0 does not wait for it forever."""
    import signal
    import time
    tmp = tempfile.mkdtemp(prefix="keel-dp-kill-")
    try:
        model, data = private_job(tmp, "mlp_plain", 4, "victim")
        log = os.path.join(tmp, "steps.jsonl")
        cmd = launcher + ["-np", "2", a.keel, "train", model] + read_args("mlp_plain", 10 ** 8) + data + \
            ["--data-parallel", "--threads", "1", "--log", log]
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        victims, t0 = [], time.monotonic()
        while time.monotonic() - t0 < 60 and p.poll() is None:
            if os.path.exists(log) and os.path.getsize(log) > 0:
                victims = rank_pids(model, 1)
                if victims:
                    break
            time.sleep(0.1)
        if not victims:
            p.kill()
            p.wait()
            print("FAIL kill -9: rank 1's process was not found running")
            return False
        for v in victims:
            os.kill(v, signal.SIGKILL)
        killed = time.monotonic()
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        took = time.monotonic() - killed
        left = rank_pids(model, 0)
        for v in left:
            os.kill(v, signal.SIGKILL)
        ok = rc not in (None, 0) and took <= 10 and not left
        print(f"{'ok  ' if ok else 'FAIL'} kill -9 of rank 1: the job ended {took:.1f} s later with exit {rc}, "
              f"rank 0 left running: {bool(left)}")
        return ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keel", default=os.path.join(ROOT, "build", "keel"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--bucket-mb", type=float, default=0.05)  # several buckets even on these models
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    a = ap.parse_args()
    try:
        import numpy as np
        import onnx
        from onnx import numpy_helper
    except ImportError:
        skip("python3-onnx and numpy are needed")
    launcher = mpi_launcher()
    if not launcher:
        skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
    probe = subprocess.run([a.keel, "train"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "--data-parallel" not in probe.stdout:
        print("FAIL: keel train's usage does not name --data-parallel")
        return 1
    ok = all([check(m, MODELS.get(m, 0), a, launcher, onnx, numpy_helper, np) for m in a.models] +
             [check_bad_batch(a, launcher, onnx, numpy_helper, np), check_kill(a, launcher),
              check_shard_and_resume(a, launcher, onnx, numpy_helper, np), check_planted_leak(a, launcher),
              check_fewer_steps(a, launcher), check_rank_differs(a, launcher)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
