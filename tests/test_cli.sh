#!/usr/bin/env bash
# test_cli.sh KEEL: the command's contract: usage errors exit 2, a
# truncated model is an ERROR (exit 1, no crash), run/info/memcheck work.
set -u
KEEL=$1
DATA=/usr/share/libonnx-testdata/data/node
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect_rc() { # want_rc description command...
  local want=$1 what=$2
  shift 2
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: $what: exit $rc, expected $want"; sed 's/^/  | /' "$tmp/out" | head -20
    fails=$((fails + 1))
  else
    echo "ok: $what"
  fi
}
expect_out() { # pattern description
  if ! grep -q -- "$1" "$tmp/out"; then
    echo "FAIL: $2: output lacks '$1'"; sed 's/^/  | /' "$tmp/out" | head -20
    fails=$((fails + 1))
  fi
}

expect_rc 2 "no command" "$KEEL"
expect_rc 2 "unknown command" "$KEEL" frobnicate
expect_rc 2 "unknown flag" "$KEEL" run "$DATA/test_add/model.onnx" --bogus
expect_out "unknown or incomplete option" "unknown flag"
expect_rc 2 "missing model file" "$KEEL" run /nonexistent/model.onnx
expect_rc 2 "missing test folder" "$KEEL" test /nonexistent
expect_rc 2 "info without model" "$KEEL" info

# a truncated copy of a model: ERROR line, exit 1, no crash
mkdir -p "$tmp/suite/test_truncated"
cp -r "$DATA/test_add/test_data_set_0" "$tmp/suite/test_truncated/"
size=$(stat -c %s "$DATA/test_add/model.onnx")
head -c $((size / 2)) "$DATA/test_add/model.onnx" >"$tmp/suite/test_truncated/model.onnx"
cp -r "$DATA/test_add" "$tmp/suite/test_add"
expect_rc 1 "truncated model" "$KEEL" test "$tmp/suite"
expect_out "ERROR test_truncated" "truncated model"
expect_out "PASS test_add" "truncated model beside a good one"
expect_out "1 passed, 1 failed" "truncated model summary"

# run: outputs, --out files, memory figures
expect_rc 0 "run with --data and --out" "$KEEL" run "$DATA/test_add/model.onnx" \
  --data "$DATA/test_add/test_data_set_0" --out "$tmp/out_dir" --iters 3
expect_out "output sum: float32 \[3,4,5\]" "run prints outputs"
expect_out "after destroy: keel holds 0 bytes" "run leaves nothing"
[[ -f "$tmp/out_dir/output_0.pb" ]] || { echo "FAIL: --out wrote nothing"; fails=$((fails + 1)); }
cmp -s "$tmp/out_dir/output_0.pb" /dev/null && { echo "FAIL: empty output file"; fails=$((fails + 1)); }
# the written output is a valid expected file: test against it
mkdir -p "$tmp/rt/test_rt/test_data_set_0"
cp "$DATA/test_add/model.onnx" "$tmp/rt/test_rt/"
cp "$DATA/test_add/test_data_set_0/"input_*.pb "$tmp/rt/test_rt/test_data_set_0/"
cp "$tmp/out_dir/output_0.pb" "$tmp/rt/test_rt/test_data_set_0/"
expect_rc 0 "round trip of --out through keel test" "$KEEL" test "$tmp/rt"

# maps (ai.onnx.ml): printed, written with --out, read back by keel test
ML="$(dirname "$0")/ml"
expect_rc 0 "run a ZipMap model" "$KEEL" run "$ML/zipmap_after_linear_classifier/model.onnx" \
  --data "$ML/zipmap_after_linear_classifier/test_data_set_0" --out "$tmp/ml_out"
expect_out 'output probabilities: sequence<map<string,float32>> of 5; item 0: map<string,float32> of 3: {"setosa": ' "run prints a sequence of maps"
mkdir -p "$tmp/mlrt/zm/test_data_set_0"
cp "$ML/zipmap_after_linear_classifier/model.onnx" "$tmp/mlrt/zm/"
cp "$ML/zipmap_after_linear_classifier/test_data_set_0/input_0.pb" "$tmp/mlrt/zm/test_data_set_0/"
cp "$tmp/ml_out/"output_*.pb "$tmp/mlrt/zm/test_data_set_0/"
expect_rc 0 "round trip of a sequence of maps through --out and keel test" "$KEEL" test "$tmp/mlrt"
expect_rc 0 "info on a map input" "$KEEL" info "$ML/dict_vectorizer_int64_double/model.onnx"
expect_out "map<int64,float64" "info shows the map type"
expect_rc 0 "info on a sequence output" "$KEEL" info "$(dirname "$0")/python/models/seq_opt.onnx"
expect_out "seq  *sequence<float32 \[3\]>" "info shows the sequence type"
expect_rc 0 "run a map input" "$KEEL" run "$ML/dict_vectorizer_int64_double/model.onnx" \
  --data "$ML/dict_vectorizer_int64_double/test_data_set_0"
expect_out "output Y: float64 \[1,5\]" "DictVectorizer's row"

expect_rc 0 "run with generated inputs" "$KEEL" run "$DATA/test_relu/model.onnx"
expect_out "generated" "generated inputs are announced"
expect_rc 0 "info" "$KEEL" info "$DATA/test_loop11/model.onnx"
expect_out "Loop" "info shows the loop"
expect_out "depth 1" "info shows the control-flow tree"
expect_rc 0 "memcheck" "$KEEL" memcheck "$DATA/test_loop11/model.onnx" \
  --data "$DATA/test_loop11/test_data_set_0" --iters 5
expect_out "run 5: allocated" "memcheck prints every run"
expect_out "verdict: steady" "memcheck verdict"

# the steady-state checks catch a leak: the test-only switch keeps every
# sub-graph result alive (the If-branch bug), and both checks must fail
expect_rc 1 "repeat catches a leak" "$KEEL" test --repeat 5 --debug-leak-subgraphs "$DATA/test_loop11"
expect_out "allocated bytes changed" "repeat names the growth"
expect_rc 0 "repeat is quiet on a healthy model" "$KEEL" test --repeat 5 "$DATA/test_loop11"
expect_rc 1 "memcheck catches a leak" "$KEEL" memcheck "$DATA/test_loop11/model.onnx" \
  --data "$DATA/test_loop11/test_data_set_0" --iters 5 --debug-leak-subgraphs
expect_out "verdict: LEAK" "memcheck leak verdict"

# --mem-report and --trace; the trace is valid JSON with node events and
# both memory counters
M=$(dirname "$0")/models
expect_rc 0 "run --mem-report --trace" "$KEEL" run "$M/greedy_decode/model.onnx" \
  --data "$M/greedy_decode/test_data_set_0" --mem-report --mem-top 5 --trace "$tmp/trace.json"
expect_out "memory by node (top 5" "mem-report header"
expect_out "all nodes" "mem-report totals"
if command -v python3 >/dev/null; then
  expect_rc 0 "trace loads as JSON with node events and counters" python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
ev = d['traceEvents']
nodes = [e for e in ev if e.get('ph') == 'X']
mem = [e for e in ev if e.get('ph') == 'C']
assert nodes and all('dur' in e and 'ts' in e for e in nodes), 'no node events'
assert any(e['cat'] == 'Loop' for e in nodes) and any('body' in e['args']['graph'] for e in nodes)
assert mem and all('allocated' in e['args'] and 'reserved' in e['args'] for e in mem)
" "$tmp/trace.json"
fi

# memcheck names exactly a planted leak, draws a plot that renders, and is
# silent on every healthy control-flow model
expect_rc 1 "memcheck names a planted leak" "$KEEL" memcheck "$M/greedy_decode/model.onnx" \
  --data "$M/greedy_decode/test_data_set_0" --iters 4 --loop /Loop \
  --debug-plant-leak /cell/Add_2_output_0 --plot "$tmp/leak.svg"
expect_out "verdict: LEAK: allocated memory grew after the first run" "planted leak verdict"
expect_out "verdict: LEAK: allocated memory grew across the iterations of loop '/Loop'" "planted leak, loop verdict"
if grep -E "^ +[0-9.]+ [KMG]?B in" "$tmp/out" | grep -v "node '/cell/Add_2' (Add) value '/cell/Add_2_output_0' iteration" >/dev/null; then
  echo "FAIL: memcheck named a value other than the planted one"; fails=$((fails + 1))
fi
if command -v rsvg-convert >/dev/null; then
  expect_rc 0 "the memcheck plot renders" rsvg-convert "$tmp/leak.svg" -o "$tmp/leak.png"
  [[ -s "$tmp/leak.png" ]] || { echo "FAIL: empty plot render"; fails=$((fails + 1)); }
fi
healthy=0
for t in $(cat "$(dirname "$0")/conformance/control_flow.list"); do
  d=/usr/share/libonnx-testdata/data/$t
  if ! "$KEEL" memcheck "$d/model.onnx" --data "$d/test_data_set_0" --iters 3 >"$tmp/mc" 2>&1; then
    echo "FAIL: memcheck not silent on healthy $t"; sed 's/^/  | /' "$tmp/mc" | tail -5
    fails=$((fails + 1))
  else
    healthy=$((healthy + 1))
  fi
done
for m in "$M"/*/; do
  if ! "$KEEL" memcheck "$m/model.onnx" --data "$m/test_data_set_0" --iters 1000 --loop /Loop >"$tmp/mc" 2>&1; then
    echo "FAIL: memcheck not silent on healthy $m"; fails=$((fails + 1))
  else
    healthy=$((healthy + 1))
  fi
done
echo "ok: memcheck silent on $healthy healthy control-flow models"

# a Loop that never ends: --timeout stops it (exit 1, naming the loop and
# its iteration), and so does the iteration guard, reported on stderr
ENDLESS=$(dirname "$0")/data/endless_loop.onnx
expect_rc 1 "run --timeout on an endless loop" timeout 20 "$KEEL" run "$ENDLESS" --timeout 50
expect_out "timed out: node 'forever' (Loop): .*deadline of 50 ms passed before" "run --timeout"
expect_out "after destroy: keel holds 0 bytes" "run --timeout frees everything"
expect_rc 1 "run --max-iterations on an endless loop" timeout 20 "$KEEL" run "$ENDLESS" --max-iterations 500
expect_out "warning: node 'forever' (Loop): iteration guard: the run reached 500 loop iterations" "iteration guard reported"
expect_rc 2 "run --timeout 0" "$KEEL" run "$ENDLESS" --timeout 0

# a model that runs in microseconds prints its time in us or ns, not as
# "0.000 ms"
expect_rc 0 "run a tiny model" "$KEEL" run "$DATA/test_add/model.onnx" --data "$DATA/test_add/test_data_set_0" --iters 200
if ! grep -Eq "^time   [0-9]+(\.[0-9]{3})? (us|ns) median over 200 run" "$tmp/out"; then
  echo "FAIL: tiny model time not in us/ns"; grep "^time" "$tmp/out"; fails=$((fails + 1))
fi

# the run-context pool is counted: keel info gives a context's bytes and the
# cap, keel run the pool's figures and the trim policy's
# --nodes lists every node of every graph with the kernel bound to it
expect_rc 0 "info --nodes" "$KEEL" info "$(dirname "$0")/models/nested_loop_if/model.onnx" --nodes
expect_out "node list (graph, node, kernel)" "info --nodes heading"
expect_out "main/[^ ]* .*\\[reference\\]: the op's kernel" "info --nodes lists sub-graph nodes, their kernel and its rule"
expect_rc 0 "info --nodes --json" "$KEEL" info "$(dirname "$0")/models/nested_loop_if/model.onnx" --nodes --json
expect_out '"node_list": \[{"graph": "main"' "info --nodes --json"
expect_out '"kernel": "reference", "rule": "the op.s kernel"' "info --nodes --json: the rule that chose the kernel"
# --shapes: every value's inferred shape (a Loop body's growing row is a symbol) and the counts
expect_rc 0 "info --shapes" "$KEEL" info "$(dirname "$0")/models/greedy_decode/model.onnx" --shapes
expect_out "main             h0  *float32  *\\[1, 8\\]" "info --shapes lists a graph input and its element type"
expect_out "main/Loop/body   tokens.9  *int64  *\\[s[0-9]*\\]" "info --shapes: the carried row is a symbol of the body, int64"
expect_out "shapes     [0-9]* value(s): [0-9]* fully known, [1-9][0-9]* symbolic, 0 unknown" "info --shapes counts"
expect_rc 0 "info --shapes --json" "$KEEL" info "$(dirname "$0")/models/greedy_decode/model.onnx" --shapes --json
expect_out '"shape_counts": {"known": [0-9]*, "symbolic": [1-9]' "info --shapes --json counts"
# --device: the placement on a GPU, on any machine (info); run refuses with the reason
expect_rc 0 "info --device cuda" "$KEEL" info "$(dirname "$0")/models/greedy_decode/model.onnx" --device cuda --nodes
expect_out "placement  cuda:0: [1-9][0-9]* of [0-9]* nodes on the GPU" "info --device cuda: the placement"
expect_out "main/Loop/body   gpu '/cell/Tanh' (Tanh)" "info --device cuda --nodes: a body node on the GPU"
expect_out "(MemcpyFromHost)" "info --device cuda: the copies"
expect_rc 0 "info --device cuda --json" "$KEEL" info "$(dirname "$0")/models/greedy_decode/model.onnx" --device cuda --json
expect_out '"placement": {"device": "cuda:0", "gpu_nodes": [1-9]' "info --device cuda --json"
expect_rc 1 "run --device cuda refused" "$KEEL" run "$(dirname "$0")/models/greedy_decode/model.onnx" --device cuda
expect_out "device cuda:0: " "run --device cuda: the reason, naming the device"
expect_rc 1 "run --device bogus" "$KEEL" run "$(dirname "$0")/models/greedy_decode/model.onnx" --device tpu
expect_out "device 'tpu': expected cpu, cuda, cuda:N or emu" "run --device bogus: the message"
expect_rc 0 "run --device cpu" "$KEEL" run "$(dirname "$0")/models/greedy_decode/model.onnx" --device cpu
expect_rc 0 "info shows the run context" "$KEEL" info "$(dirname "$0")/models/nested_loop_if/model.onnx"
expect_out "run context [0-9]* bytes per run in flight (frames of 5 graphs); at most 16 kept idle" "info run context"
expect_rc 0 "run shows the pool" "$KEEL" run "$(dirname "$0")/models/nested_loop_if/model.onnx" --iters 3 --trim-window 4
expect_out "run pool   1 idle + 0 in use of cap 16" "run pool figures"
expect_out "auto trim  0 segment(s) returned (0 B), floor .*, window 4 run(s)" "auto trim figures"
# The canonical graph of a PyTorch export with dynamic axes (tools/gen_exporter_tests.py):
# canon-reshape and cse leave one causal mask and constant view shapes, causal-mask makes the
# mask each attention's flag (its ConstantOfShape, Trilu and shape arithmetic go), fold-identity
# drops the Cast of an int64 length to int64, attention-qkv has each attention read its q, k, v
# from the projection (its Split and three Reshapes go): 25 of its 183 nodes
expect_rc 0 "info gpt_dyn_o17" "$KEEL" info "$(dirname "$0")/exporters/gpt_dyn_o17/model.onnx"
expect_out "^nodes      25 in 1 graph(s)" "info gpt_dyn_o17: the nodes after the passes"
expect_out "FusedAttention 2, Reshape 2, " "info gpt_dyn_o17: no Split left"
expect_out "2 causal mask(s) made the attention's flag" "info gpt_dyn_o17: both masks the causal flag"
expect_out "[1-9][0-9]* duplicate(s) merged" "info gpt_dyn_o17: duplicates merged"
expect_rc 0 "info gpt_dyn_o17 --json" "$KEEL" info "$(dirname "$0")/exporters/gpt_dyn_o17/model.onnx" --json
expect_out '"merged_nodes": [1-9]' "info --json: merged_nodes"
expect_out '"causal_masks": 2' "info --json: causal_masks"

echo "$fails failure(s)"
[[ $fails -eq 0 ]]
