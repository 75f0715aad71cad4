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

echo "$fails failure(s)"
[[ $fails -eq 0 ]]
