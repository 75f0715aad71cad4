"""bench_python.py: what sess.run costs from Python above keel's own
keel_run, on a one-node model (Relu over float [1, 16]); and, for
comparison, ONNX Runtime's node binding above ONNX Runtime's own run time.
Not a test: it prints medians measured in the same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_python.py [N]
    (NODE_PATH=/work/ort/node_modules for the ONNX Runtime figures)

keel_run: build/bench_run wraps the input and calls keel_run, as the
binding does. ONNX Runtime: per-call time of session.run in node, against
the model_run durations in ONNX Runtime's own profile of the same calls.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import keel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "tests", "python", "models", "one_node.onnx")
BUILD = os.environ.get("KEEL_BUILD_DIR", os.path.join(ROOT, "build"))

NODE_SCRIPT = r"""
const ort = require('onnxruntime-node'); const fs = require('fs');
(async () => {
  const [model, n, prefix] = [process.argv[1], +process.argv[2], process.argv[3]];
  const s = await ort.InferenceSession.create(model, {enableProfiling: true, profileFilePrefix: prefix});
  const x = new ort.Tensor('float32', new Float32Array(16), [1, 16]);
  const t = [];
  for (let k = -Math.floor(n / 10); k < n; k++) {
    const t0 = process.hrtime.bigint();
    await s.run({x});
    if (k >= 0) t.push(Number(process.hrtime.bigint() - t0));
  }
  t.sort((a, b) => a - b);
  s.endProfiling();
  console.log(JSON.stringify({median_ns: t[n >> 1]}));
})();
"""


def median_python(n):
    s = keel.InferenceSession(MODEL)
    run = s.run
    feed = {"x": np.zeros((1, 16), np.float32)}
    t = []
    for k in range(-n // 10, n):
        t0 = time.perf_counter_ns()
        run(None, feed)
        if k >= 0:
            t.append(time.perf_counter_ns() - t0)
    raw = s._sess.run
    t_raw = []
    for k in range(-n // 10, n):
        t0 = time.perf_counter_ns()
        raw(None, feed)
        if k >= 0:
            t_raw.append(time.perf_counter_ns() - t0)
    return statistics.median(t), statistics.median(t_raw)


def median_c(n):
    out = subprocess.run([os.path.join(BUILD, "bench_run"), MODEL, str(n)], check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def ort_node(n):
    if not os.environ.get("NODE_PATH"):
        return None
    with tempfile.TemporaryDirectory() as d:
        try:
            out = subprocess.run(["node", "-e", NODE_SCRIPT, MODEL, str(n), os.path.join(d, "p")],
                                 check=True, capture_output=True, text=True, cwd=d).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
        r = json.loads(out.strip().splitlines()[-1])
        files = [f for f in os.listdir(d) if f.startswith("p") and f.endswith(".json")]
        prof = json.load(open(os.path.join(d, files[0]))) if files else []
        runs = [e["dur"] * 1000 for e in prof if e.get("name") == "model_run"]
        return r["median_ns"], statistics.median(runs[len(runs) // 10:]) if runs else None


def cpu_model():
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"one-node model (Relu, float [1,16]), median of {n} calls, CPU: {cpu_model()}")
    rounds = []
    for _ in range(3):    # alternate, on a shared machine
        c = median_c(n)
        py, raw = median_python(n)
        rounds.append((c, py, raw))
    c = statistics.median(r[0] for r in rounds)
    py = statistics.median(r[1] for r in rounds)
    raw = statistics.median(r[2] for r in rounds)
    over = statistics.median(r[1] - r[0] for r in rounds)
    print(f"keel C keel_run (wrap input, run, release):  {c / 1000:8.2f} us")
    print(f"keel Python InferenceSession.run:            {py / 1000:8.2f} us")
    print(f"keel Python keel._keel.Session.run:          {raw / 1000:8.2f} us")
    print(f"keel Python overhead above keel_run:         {over / 1000:8.2f} us (median of 3 rounds)")
    o = ort_node(min(n, 5000))
    if o:
        total, inner = o
        print(f"ONNX Runtime node session.run:               {total / 1000:8.2f} us")
        if inner:
            print(f"ONNX Runtime model_run (its own profile):    {inner / 1000:8.2f} us")
            print(f"ONNX Runtime node overhead above model_run:  {(total - inner) / 1000:8.2f} us")
    else:
        print("ONNX Runtime: not measured (set NODE_PATH to onnxruntime-node's node_modules)")


if __name__ == "__main__":
    main()
