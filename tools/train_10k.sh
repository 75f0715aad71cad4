#!/usr/bin/env bash
# train_10k.sh: the long run of issue 11 ("what it must show"): `keel train`
# on the transformer LM of tests/train for 10,000 steps with --log, its
# resident memory sampled from /proc/<pid>/status while it runs (nothing is
# added to keel). Reports, and fails (exit 1) unless both hold:
#   - allocated (bytes after each step, from the log) identical from step 2
#     to the last step;
#   - RSS growth from step 1,000 to the end under 1 MB: the RSS of the last
#     sample taken during training (last logged step below STEPS; after the
#     last step keel tears down and frees) minus that of the first sample
#     at or after step 1,000.
#
# Run:  tools/train_10k.sh                          (build/keel, 10,000 steps)
#       KEEL=build/keel STEPS=10000 THREADS=1 OUT=/tmp/t10k tools/train_10k.sh
#       tools/train_10k.sh --parse LOG RSS          (judge saved files again)
# OUT keeps log.jsonl (keel's --log) and rss.txt ("step rss_kB" samples).
# KEEL may be a command prefix (tests/train/fake_keel.py tests this script).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=tests/train/transformer_lm
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

# judge LOG RSS STEPS FROM: prints the figures, exits 1 when one fails
judge() {
  "$PY" - "$@" <<'EOF'
import json, sys
log, rss, steps, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(log) if l.strip()]
bad = []
got = [r["step"] for r in rows]
if got != list(range(1, steps + 1)):
    bad.append(f"log has {len(rows)} lines, steps {got[:2]}...{got[-2:]}; expected 1..{steps}")
later = [(r["step"], r["allocated"]) for r in rows if r["step"] >= 2]
base = later[0][1] if later else None
moved = [(s, a) for s, a in later if a != base]
print(f"allocated at step 2: {base} bytes; steps 2..{got[-1] if got else 0} where it differs: "
      f"{len(moved)}" + (f" (first: step {moved[0][0]}, {moved[0][1]} bytes)" if moved else ""))
if moved or base is None:
    bad.append("allocated is not identical from step 2")
peaks = [r["peak"] for r in rows if r["step"] >= 2]
if peaks:
    print(f"peak during a step (from step 2): {min(peaks)}..{max(peaks)} bytes; reserved at the"
          f" end {rows[-1]['reserved']} bytes")
samples = []
for line in open(rss):
    parts = line.split()
    if len(parts) == 2:
        samples.append((int(parts[0]), int(parts[1])))
after = [(s, k) for s, k in samples if start <= s < steps]
if len(after) < 2:
    bad.append(f"fewer than 2 RSS samples at or after step {start} ({len(samples)} in all):"
               " the run was too short to measure")
else:
    (s0, k0), (s1, k1) = after[0], after[-1]
    grow = k1 - k0
    print(f"RSS {k0} kB at step {s0}, {k1} kB at step {s1}: growth {grow:+d} kB "
          f"({len(after)} samples, max {max(k for _, k in after)} kB)")
    if grow >= 1024:
        bad.append(f"RSS grew {grow} kB (limit: under 1024 kB) from step {s0} to {s1}")
for b in bad:
    print("FAIL: " + b)
print("ok: steady over %d steps" % steps if not bad else "FAIL")
sys.exit(1 if bad else 0)
EOF
}

if [[ ${1:-} == --parse ]]; then
  judge "$2" "$3" "${STEPS:-10000}" "${FROM:-1000}"
  exit $?
fi

KEEL=${KEEL:-build/keel}
STEPS=${STEPS:-10000}
FROM=${FROM:-1000}
THREADS=${THREADS:-1}
OUT=${OUT:-$(mktemp -d /tmp/keel-train-10k.XXXXXX)}
mkdir -p "$OUT"
LOG=$OUT/log.jsonl
RSS=$OUT/rss.txt
: > "$LOG"
: > "$RSS"
# the model's flags with --steps replaced
read -r -a ARGS <<<"$(sed "s/^--steps .*/--steps $STEPS/" $MODEL/args | tr '\n' ' ')"
# shellcheck disable=SC2086  # KEEL may be a command prefix
$KEEL train $MODEL/model.onnx "${ARGS[@]}" --threads "$THREADS" --log "$LOG" > "$OUT/stdout.txt" 2>&1 &
pid=$!
echo "keel train pid $pid: $STEPS steps of $MODEL, threads $THREADS, files in $OUT"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  last=$(tail -n 1 "$LOG" 2>/dev/null || true)
  [[ $last == *"}" ]] || last=""  # a line still being written
  step=$(sed -n 's/.*"step": *\([0-9][0-9]*\).*/\1/p' <<<"$last")
  [[ -n $rss && -n $step ]] && echo "$step $rss" >> "$RSS"
  sleep 0.1
done
rc=0
wait "$pid" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: keel train exited with $rc:"
  tail -n 5 "$OUT/stdout.txt"
  exit 1
fi
tail -n 1 "$OUT/stdout.txt"
judge "$LOG" "$RSS" "$STEPS" "$FROM"
