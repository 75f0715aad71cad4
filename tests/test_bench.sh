#!/usr/bin/env bash
# test_bench.sh KEEL: `keel bench`'s output format and figures that do not
# depend on timing: the lines it prints, a valid JSON file with one time per
# run, the op table, FLOP counts of a Conv, a MatMul and a Gemm (exact, from
# the recorded shapes), usage errors.
set -u
KEEL=$1
DATA=/usr/share/libonnx-testdata/data/node
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # description command...
  local what=$1
  shift
  if "$@" >"$tmp/check" 2>&1; then echo "ok: $what"; else
    echo "FAIL: $what"; sed 's/^/  | /' "$tmp/check" | head -20; fails=$((fails + 1))
  fi
}
has() { grep -q -- "$1" "$tmp/out"; }
bench() { # model-test json-file extra-args...
  local t=$1 j=$2
  shift 2
  "$KEEL" bench "$DATA/$t/model.onnx" --data "$DATA/$t/test_data_set_0" --json "$j" "$@" >"$tmp/out" 2>&1
}

check "bench runs 3 iterations" bench test_conv_with_strides_padding "$tmp/conv.json" \
  --iters 3 --warmup 1 --flops --threads 1
cat "$tmp/out"
for pat in "^model " "^threads   1" "^latency   median [0-9.]* ms   p90 [0-9.]* ms" \
           "over 3 timed run(s) after 1 warmup run(s)" "^rate      [0-9.]* runs/s" \
           "^cpu       median [0-9.]* ms per run" \
           "^memory    peak RSS [0-9.]* [KMG]*B   allocated peak .*reserved peak" \
           "^bound     1.1 x weights .* = .*: peak RSS is [0-9.]* of it" \
           "^time by op type (3 profiled run(s)" "^  Conv  *1  *1 .*100.0%" \
           "(outside nodes)" "^  Conv dense KxK  *1 "; do
  check "output has '$pat'" has "$pat"
done

json_ok() { # file expected-iters op-name expected-flops
  python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n, op, flops = int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
assert d["runtime"] == "keel" and d["iters"] == n, d
assert len(d["times_ms"]) == n and all(t > 0 for t in d["times_ms"]), d["times_ms"]
assert len(d["cpu_times_ms"]) == n and d["cpu_median_ms"] >= 0, d
assert min(d["times_ms"]) <= d["median_ms"] <= d["p90_ms"] <= max(d["times_ms"]), d
assert d["peak_rss"] > 0 and d["reserved_peak"] >= d["allocated_peak"] > 0, d
assert d["weight_bytes"] >= 0 and d["rss_bound"] >= 1.1 * d["weight_bytes"] + 16 * 2**20, d
ops = {o["name"]: o for o in d["ops"]}
assert ops[op]["nodes"] == 1 and abs(sum(o["share"] for o in d["ops"]) - 1) < 1e-3, d["ops"]
got = sum(f["flop_per_run"] for f in d["flops"])
assert got == flops, f"FLOPs {got}, expected {flops}"
PY
}
# Conv X[1,1,7,5] W[1,1,3,3] stride 2 pad 1 -> Y[1,1,4,3]: 2*12*9
check "conv JSON and FLOPs" json_ok "$tmp/conv.json" 3 Conv 216
check "matmul bench" bench test_matmul_2d "$tmp/mm.json" --iters 3 --flops
check "matmul FLOPs ([3,4]x[4,3])" json_ok "$tmp/mm.json" 3 MatMul 72
check "gemm bench" bench test_gemm_default_no_bias "$tmp/gemm.json" --iters 3 --flops
check "gemm FLOPs ([2,10]x[10,3])" json_ok "$tmp/gemm.json" 3 Gemm 120

# without --data: generated inputs; without profiled runs: no op table
check "generated inputs, no profile" "$KEEL" bench "$DATA/test_add/model.onnx" --iters 3 --profile-runs 0
"$KEEL" bench "$DATA/test_add/model.onnx" --iters 3 --profile-runs 0 >"$tmp/out" 2>&1
check "generated input noted" has "generated float32"
check "no op table without profiled runs" bash -c "! grep -q 'time by op type' '$tmp/out'"

usage() { "$KEEL" bench "$@" >/dev/null 2>&1; [[ $? -eq 2 ]]; }
check "no model: usage" usage
check "bad --iters: usage" usage "$DATA/test_add/model.onnx" --iters 0
check "bad --threads: usage" usage "$DATA/test_add/model.onnx" --threads 100000
check "unknown flag: usage" usage "$DATA/test_add/model.onnx" --bogus
check "missing file: usage" usage /nonexistent/model.onnx

[[ $fails -eq 0 ]] && echo "all bench checks passed" || echo "$fails bench check(s) failed"
exit $((fails > 0))
