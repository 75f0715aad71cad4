#!/usr/bin/env bash
# scaling.sh: keel against ONNX Runtime as threads grow (issue 27).
#
#   bench/scaling.sh [--threads "1 2 4 8 16"] [--rounds N] [--seconds S]
#                    [--models "resnet50 gpt ..."] [--build DIR] [--out DIR]
#                    [--ort node|python] [--quick]
#
# Runs bench/vs_ort.sh (keel and ONNX Runtime alternating, each a fresh
# process, keel_options.threads = T against intra_op_num_threads = T) at
# 1, 2, 4, 8 and 16 threads, those up to nproc unless --threads says
# otherwise, then prints per model and thread count: keel/ORT on wall time
# (median over every timed run of every round, and the spread of the
# rounds' ratios), each runtime's parallel efficiency T1 / (T x TT), and
# each one's process CPU time per run against its own 1-thread CPU time.
# Last, the issue's bars: geometric mean keel/ORT at most 0.8 at every
# thread count with no model above 1.0, no model slower at 16 threads than
# at 8, keel's CPU time at 16 threads at most 2x its 1-thread CPU time.
# ONNX Runtime is onnxruntime-node, or its Python package where Node's is
# missing (vs_ort.sh --ort). Writes OUT/scaling.md beside vs_ort.sh's files.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
THREADS=""
OUT=""
PASS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) THREADS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --build) BUILD=$(cd "$2" && pwd); PASS+=(--build "$BUILD"); shift ;;
    --rounds|--seconds|--models|--ort|--label) PASS+=("$1" "$2"); shift ;;
    --quick) PASS+=(--quick) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "scaling.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$BUILD/scaling-results}
if [[ -z $THREADS ]]; then
  n=$(nproc)
  for t in 1 2 4 8 16; do ((t <= n)) && THREADS+="$t "; done
  THREADS=${THREADS% }
fi
[[ $THREADS == 1* ]] || { echo "scaling.sh: the thread counts must start at 1 (efficiency is against 1 thread)" >&2; exit 2; }

"$ROOT/bench/vs_ort.sh" --threads "$THREADS" --out "$OUT" "${PASS[@]}"

python3 - "$OUT" "$THREADS" <<'PY' | tee "$OUT/scaling.md"
import glob, json, math, os, re, statistics, sys
out, threads = sys.argv[1], [int(t) for t in sys.argv[2].split()]
runs = {}
for f in glob.glob(os.path.join(out, "runs", "*_t*_r*.json")):
    m = re.match(r"(keel|ort)_(.+)_t(\d+)_r(\d+)\.json$", os.path.basename(f))
    if m:
        runs.setdefault((m[1], m[2], int(m[3])), []).append((int(m[4]), json.load(open(f))))
models = sorted({k[1] for k in runs})
def med(rt, m, t, key="times_ms"):
    xs = [x for _, j in runs.get((rt, m, t), []) for x in j.get(key, [])]
    return statistics.median(xs) if xs else float("nan")
print(f"CPU: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
      f"{os.cpu_count()} CPUs; threads {' '.join(map(str, threads))}\n")
print("| model | threads | keel ms | ORT ms | keel/ORT | per round | keel eff. | ORT eff. | "
      "keel CPU ms | keel CPU / 1-thread | ORT CPU ms | ORT CPU / 1-thread |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
geo, fails = {}, []
for m in models:
    k1, o1 = med("keel", m, 1), med("ort", m, 1)
    kc1, oc1 = med("keel", m, 1, "cpu_times_ms"), med("ort", m, 1, "cpu_times_ms")
    for t in threads:
        k, o = med("keel", m, t), med("ort", m, t)
        kc, oc = med("keel", m, t, "cpu_times_ms"), med("ort", m, t, "cpu_times_ms")
        kr, orr = dict(runs.get(("keel", m, t), [])), dict(runs.get(("ort", m, t), []))
        per = sorted(kr[r]["median_ms"] / orr[r]["median_ms"] for r in kr if r in orr)
        spread = f"{per[0]:.2f}-{per[-1]:.2f}" if per else "-"
        geo.setdefault(t, []).append(k / o)
        print(f"| {m} | {t} | {k:.3f} | {o:.3f} | {k / o:.2f} | {spread} | {k1 / (t * k):.2f} | "
              f"{o1 / (t * o):.2f} | {kc:.3f} | {kc / kc1:.2f} | {oc:.3f} | {oc / oc1:.2f} |")
        if k / o > 1.0:
            fails.append(f"{m} at {t} threads: keel/ORT {k / o:.2f} > 1.0")
        if t == 16 and kc / kc1 > 2.0:
            fails.append(f"{m}: keel's CPU time at 16 threads is {kc / kc1:.2f}x its 1-thread CPU time (bar 2)")
    if 8 in threads and 16 in threads and med("keel", m, 16) > med("keel", m, 8):
        fails.append(f"{m}: keel slower at 16 threads ({med('keel', m, 16):.3f} ms) than at 8 "
                     f"({med('keel', m, 8):.3f} ms)")
print()
for t in threads:
    g = math.exp(sum(math.log(r) for r in geo[t]) / len(geo[t]))
    print(f"geometric mean keel/ORT at {t} thread(s): {g:.2f} over {len(geo[t])} models")
    if g > 0.8:
        fails.append(f"geometric mean at {t} threads {g:.2f} > 0.8")
print("\nper round: the lowest and highest ratio of one round's medians; "
      "eff.: T1 / (T x TT); CPU: median process CPU time per run, every thread")
print("\nissue 27's bars: " + ("all met" if not fails else "not met:\n- " + "\n- ".join(fails)))
PY
