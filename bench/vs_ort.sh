#!/usr/bin/env bash
# vs_ort.sh: keel and ONNX Runtime side by side on the benchmark model set.
#
#   bench/vs_ort.sh [--quick] [--check] [--rounds N] [--seconds S] [--threads "1 2"]
#                   [--models "detector gpt ..." | --models held-out | --models all]
#                   [--build DIR] [--out DIR]
#                   [--label TEXT]   (names keel's build in the table)
#                   [--ort node|python]  (which ONNX Runtime package times it)
#
# On a clean clone it builds keel if build/keel is missing (cmake, Release),
# installs onnxruntime-node into build/ort/ if NODE_PATH does not already
# find it (ONNXRUNTIME_NODE_INSTALL=skip npm install onnxruntime-node), and
# writes the model set with bench/models/gen.py if build/bench-models/ lacks
# a model. Then for each model and thread count it alternates the two
# runtimes in rounds (keel, ORT, keel, ORT, ...), each a fresh process:
#   keel:  build/keel bench MODEL --data test_data_set_0 --threads N --json
#          (keel_options.threads = N: the session's pool; no environment)
#   ORT:   node bench/ort_bench.js MODEL test_data_set_0 --threads N --json
#          (intraOpNumThreads N, interOpNumThreads 1, optimization 'all'),
#          or, with --ort python or where onnxruntime-node is not found but
#          python3 imports onnxruntime (the accelerator machine: no npm
#          registry), python3 bench/ort_bench.py with the same arguments
# Both take the same inputs and the same number of timed runs per round
# (sized from a first keel run to about S seconds). Medians are over every
# timed run of every round; peak RSS is the median over rounds of each
# process's VmHWM (ORT's minus the node host's baseline before loading ORT).
# Prints the CPU model and flags, one row per model and thread count (with
# the spread of the per-round ratios, keel's peak RSS over issue 8's bound,
# and both runtimes' median process CPU time per run, which a shared machine
# disturbs less than wall time), and the geometric means of keel/ORT per
# thread count (wall, and CPU time); writes the table and
# every JSON file under --out (default build/bench-results/).
# --models held-out: the exporter-style set of bench/models/gen_exporters.py
# and gen_paddle.py (paddle2onnx, tf2onnx, PyTorch at opsets 9-17, dynamic
# axes, onnx.version_converter); --models all: that and the default set.
# --quick: 2 rounds of ~0.5 s each (default: 5 rounds of ~2 s).
# --check: first compare keel's outputs with ORT's and PyTorch's
# (bench/check_outputs.py, 1e-3 relative); stop if one differs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
ROUNDS=5
SECONDS_PER_ROUND=2
THREADS="1 2"
MODELS="mobilenet_v3 resnet50 detector gpt bert lstm"
OUT=""
CHECK=0
LABEL=""
ORT_RUNNER=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) ROUNDS=2; SECONDS_PER_ROUND=0.5 ;;
    --check) CHECK=1 ;;
    --rounds) ROUNDS=$2; shift ;;
    --seconds) SECONDS_PER_ROUND=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --build) BUILD=$(cd "$2" && pwd); shift ;;
    --out) OUT=$2; shift ;;
    --label) LABEL=$2; shift ;;
    --ort) ORT_RUNNER=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "vs_ort.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
HELD_OUT="paddle_mobilenet paddle_ocr_rec x_squeezenet_o9 x_shufflenet_o11 x_efficientnet_o13 x_regnet_o17
x_vit_o14 x_gpt_dyn_o17 x_bert_dyn_o11 x_bert_vc17 x_gru_o9 x_conv1d_o13 x_tf_mobilenet x_paddle_det
x_paddle_crnn"
case $MODELS in
  held-out) MODELS=$(echo $HELD_OUT) ;;
  all) MODELS="mobilenet_v3 resnet50 detector gpt bert lstm $(echo $HELD_OUT)" ;;
esac
OUT=${OUT:-$BUILD/bench-results}
MODELS_DIR=$BUILD/bench-models
KEEL=$BUILD/keel
mkdir -p "$OUT/runs"

# ------------------------------------------------------------ prerequisites
if [[ ! -x $KEEL ]]; then
  echo "== building keel in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target keel_cli fma_peak >/dev/null
fi
if [[ -z $ORT_RUNNER ]]; then
  ORT_RUNNER=node
  if ! node -e "require('onnxruntime-node')" 2>/dev/null && [[ ! -d $BUILD/ort/node_modules/onnxruntime-node ]] &&
     python3 -c "import onnxruntime" 2>/dev/null; then
    ORT_RUNNER=python
  fi
fi
if [[ $ORT_RUNNER == node ]] && ! node -e "require('onnxruntime-node')" 2>/dev/null; then
  if [[ ! -d $BUILD/ort/node_modules/onnxruntime-node ]]; then
    echo "== installing onnxruntime-node into $BUILD/ort"
    mkdir -p "$BUILD/ort"
    (cd "$BUILD/ort" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-save --no-audit --no-fund onnxruntime-node >/dev/null)
  fi
  export NODE_PATH=$BUILD/ort/node_modules${NODE_PATH:+:$NODE_PATH}
fi
for m in $MODELS; do
  if [[ ! -f $MODELS_DIR/$m/model.onnx ]]; then
    echo "== generating the model set in $MODELS_DIR"
    /usr/bin/python3 "$ROOT/bench/models/gen.py" "$MODELS_DIR" 2>/dev/null
    /usr/bin/python3 "$ROOT/bench/models/gen_paddle.py" "$MODELS_DIR" >/dev/null
    /usr/bin/python3 "$ROOT/bench/models/gen_exporters.py" "$MODELS_DIR" >/dev/null 2>&1
    break
  fi
done

if [[ $CHECK -eq 1 ]]; then
  echo "== outputs against ONNX Runtime and PyTorch"
  /usr/bin/python3 "$ROOT/bench/check_outputs.py" "$MODELS_DIR" --keel "$KEEL" --only "${MODELS// /,}"
fi

# ---------------------------------------------------------------- the runs
cpu_model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512[a-z_0-9]*)$' | tr '\n' ' ')
if [[ $ORT_RUNNER == python ]]; then
  ort_version="$(python3 -c "import onnxruntime; print(onnxruntime.__version__)") (Python)"
else
  ort_version=$(node -e "console.log(require('onnxruntime-node/package.json').version)")
fi
keel_version=${LABEL:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)}

# Timed runs per round: about SECONDS_PER_ROUND of keel's time, 5..2000.
iters_for() { # model threads
  local j=$OUT/runs/calib.json
  "$KEEL" bench "$MODELS_DIR/$1/model.onnx" \
    --data "$MODELS_DIR/$1/test_data_set_0" --threads "$2" --iters 3 --warmup 1 \
    --profile-runs 0 --json "$j" >/dev/null
  python3 -c "import json,sys; m=json.load(open('$j'))['median_ms']; \
print(max(5, min(2000, int($SECONDS_PER_ROUND * 1000 / max(m, 1e-3)))))"
}

run_keel() { # model threads iters json
  "$KEEL" bench "$MODELS_DIR/$1/model.onnx" \
    --data "$MODELS_DIR/$1/test_data_set_0" --threads "$2" --iters "$3" --warmup 3 \
    --profile-runs 0 --json "$4" >/dev/null
}
run_ort() { # model threads iters json
  local runner=(node "$ROOT/bench/ort_bench.js")
  [[ $ORT_RUNNER == python ]] && runner=(python3 "$ROOT/bench/ort_bench.py")
  "${runner[@]}" "$MODELS_DIR/$1/model.onnx" "$MODELS_DIR/$1/test_data_set_0" \
    --threads "$2" --iters "$3" --warmup 3 --json "$4" >/dev/null
}

echo "== keel $keel_version vs onnxruntime $ort_version ($ORT_RUNNER): $ROUNDS round(s) of ~${SECONDS_PER_ROUND}s each"
for m in $MODELS; do
  for t in $THREADS; do
    it=$(iters_for "$m" "$t")
    printf '   %-14s %s thread(s), %4d runs per round: ' "$m" "$t" "$it"
    for r in $(seq 1 "$ROUNDS"); do
      run_keel "$m" "$t" "$it" "$OUT/runs/keel_${m}_t${t}_r$r.json"
      run_ort "$m" "$t" "$it" "$OUT/runs/ort_${m}_t${t}_r$r.json"
      printf '%s ' "$r"
    done
    echo
  done
done

# --------------------------------------------------------------- the table
python3 - "$OUT" "$ROUNDS" "$cpu_model" "$cpu_flags" "$keel_version" "$ort_version" \
  "$MODELS" "$THREADS" <<'PY' | tee "$OUT/table.md"
import json, math, os, statistics, sys
out, rounds, cpu, flags, kv, ov, models, threads = sys.argv[1:]
rounds, models, threads = int(rounds), models.split(), threads.split()
def load(rt, m, t):
    return [json.load(open(os.path.join(out, "runs", f"{rt}_{m}_t{t}_r{r}.json")))
            for r in range(1, rounds + 1)]
mb = lambda b: b / 1048576
print(f"CPU: {cpu}; flags: {flags.strip()}")
print(f"keel {kv} vs onnxruntime {ov}; {rounds} round(s), alternating; medians over all timed runs;")
print(f"per-round: the lowest and highest ratio of one round's medians; bound: issue 8's "
      f"1.1 x weights + allocated peak + 16 MB; CPU: median process CPU time per run, every "
      f"thread (ORT's waiting workers spin); load average at the end: {os.getloadavg()[0]:.1f}\n")
print("| model | threads | keel median ms | ORT median ms | keel/ORT | per-round keel/ORT | "
      "keel peak RSS MB | ORT peak RSS MB (net) | keel RSS / bound | keel CPU ms | ORT CPU ms | CPU keel/ORT |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
geo, geo_cpu = {}, {}
def cpu_median(runs):
    c = [x for j in runs for x in j.get("cpu_times_ms", [])]
    return statistics.median(c) if c else float("nan")
for t in threads:
    for m in models:
        k, o = load("keel", m, t), load("ort", m, t)
        km = statistics.median([x for j in k for x in j["times_ms"]])
        om = statistics.median([x for j in o for x in j["times_ms"]])
        krss = statistics.median([j["peak_rss"] for j in k])
        orss = statistics.median([j["peak_rss_net"] for j in o])
        per = sorted(a["median_ms"] / b["median_ms"] for a, b in zip(k, o))
        bound = statistics.median([j["peak_rss"] / j["rss_bound"] for j in k if j.get("rss_bound")] or [0])
        kc, oc = cpu_median(k), cpu_median(o)
        geo.setdefault(t, []).append(km / om)
        geo_cpu.setdefault(t, []).append(kc / oc)
        print(f"| {m} | {t} | {km:.3f} | {om:.3f} | {km / om:.2f} | {per[0]:.2f}-{per[-1]:.2f} | "
              f"{mb(krss):.1f} | {mb(orss):.1f} | {bound:.2f} | {kc:.3f} | {oc:.3f} | {kc / oc:.2f} |")
print()
for t in threads:
    g = math.exp(sum(math.log(r) for r in geo[t]) / len(geo[t]))
    gc = math.exp(sum(math.log(r) for r in geo_cpu[t]) / len(geo_cpu[t]))
    print(f"geometric mean keel/ORT at {t} thread(s): {g:.2f} over {len(geo[t])} models "
          f"(worst {max(geo[t]):.2f}, best {min(geo[t]):.2f}); on CPU time {gc:.2f}")
PY
echo "(table in $OUT/table.md; every run's JSON in $OUT/runs/)"
