#!/usr/bin/env python3
"""ort_bench.py: times ONNX Runtime's Python package on one model, as
bench/ort_bench.js does with onnxruntime-node, for machines that have the
Python package and no Node.js package (the accelerator machine). Same
command line, same JSON fields, so bench/vs_ort.sh takes either.

    python3 bench/ort_bench.py MODEL DATA_DIR [--threads N] [--iters N]
            [--warmup N] [--json FILE]

The session: intra_op_num_threads = N, inter_op_num_threads = 1,
ORT_ENABLE_ALL, sequential execution, CPUExecutionProvider. Inputs are the
input_K.pb files of DATA_DIR, matched to the model's inputs by the
TensorProto's name, else in order. Prints (and with --json writes) the
median and p90 of session.run over the timed runs, the median process CPU
time per run (every thread), and the peak RSS (VmHWM) minus the baseline
read before onnxruntime is imported.
"""
import argparse
import json
import os
import statistics
import sys
import time


try:  # read the inputs' library before the baseline: only ORT's own pages count
    import onnx
    from onnx import numpy_helper
except ImportError:
    onnx = None


def vm_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


BASELINE = vm_hwm()


def quantile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))
    return sorted_values[i]


def load_inputs(sess, data_dir):
    if onnx is None:
        sys.exit("ort_bench.py: the onnx Python package is needed to read the inputs")
    files = sorted((f for f in os.listdir(data_dir) if f.startswith("input_") and f.endswith(".pb")),
                   key=lambda f: int(f[len("input_"):-len(".pb")]))
    names = [i.name for i in sess.get_inputs()]
    feeds = {}
    for k, f in enumerate(files):
        t = onnx.TensorProto()
        with open(os.path.join(data_dir, f), "rb") as fh:
            t.ParseFromString(fh.read())
        name = t.name if t.name in names else names[k]
        feeds[name] = numpy_helper.to_array(t)
    return feeds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        sys.exit("ort_bench.py: the onnxruntime Python package is not installed")
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = load_inputs(sess, a.data)
    for _ in range(a.warmup):
        sess.run(None, feeds)
    times, cpu = [], []
    for _ in range(a.iters):
        c0, t0 = time.process_time(), time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    st = sorted(times)
    peak = vm_hwm()
    r = {"runtime": "onnxruntime-python", "version": ort.__version__, "threads": a.threads, "iters": a.iters,
         "median_ms": quantile(st, 0.5), "p90_ms": quantile(st, 0.9), "runs_per_s": 1000 / quantile(st, 0.5),
         "times_ms": times, "cpu_median_ms": statistics.median(cpu), "cpu_times_ms": cpu,
         "peak_rss": peak, "baseline_rss": BASELINE, "peak_rss_net": peak - BASELINE}
    print(f"onnxruntime {r['version']} (Python), {a.threads} thread(s): median {r['median_ms']:.3f} ms, "
          f"p90 {r['p90_ms']:.3f} ms over {a.iters} runs, CPU {r['cpu_median_ms']:.3f} ms per run; "
          f"peak RSS {peak / 1048576:.1f} MB ({r['peak_rss_net'] / 1048576:.1f} MB over the interpreter's "
          f"{BASELINE / 1048576:.1f} MB)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
