#!/usr/bin/env bash
# update_pass_lists.sh [KEEL]: adds the tests that pass now to
# tests/conformance/<folder>.pass. Lists only grow: a test that stops
# passing stays listed, and CI fails until it passes again.
set -euo pipefail
cd "$(dirname "$0")/.."
KEEL=${1:-build/keel}
DATA=/usr/share/libonnx-testdata/data
for folder in node pytorch-converted pytorch-operator simple; do
  list=tests/conformance/$folder.pass
  touch "$list"
  out=$("$KEEL" test "$DATA/$folder" || true)  # exits 1 while some tests fail
  sed -n 's/^PASS \(.*\)$/\1/p' <<<"$out" | cat - "$list" | sort -u > "$list.new"
  mv "$list.new" "$list"
  echo "$folder: $(wc -l < "$list") tests listed"
done
# current ONNX's node tests (../shared/onnx-tests/node), when present
CURRENT=../shared/onnx-tests/node
if [[ -d $CURRENT ]]; then
  list=tests/conformance/onnx-node-current.pass
  out=$("$KEEL" test "$CURRENT" || true)
  sed -n 's/^PASS \(.*\)$/\1/p' <<<"$out" | cat - "$list" | sort -u > "$list.new"
  mv "$list.new" "$list"
  echo "onnx-tests/node: $(wc -l < "$list") tests listed"
fi
