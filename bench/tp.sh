#!/usr/bin/env bash
# tp.sh: the test GPT (tests/gpt, tools/gen_gpt.py) at TP = 1 (one process)
# and TP = 2 (mpirun -np 2, keel shard), one thread per rank, same inputs:
# median time per run of `keel run --iters N --threads 1` (rank 0 reports).
#
#   bench/tp.sh [--build DIR] [--iters N] [--rounds R] [--model plain|loop] [--tp "2 4"] [--tokens T]
#
# --tokens T (plain model, 1..64) feeds T tokens instead of the test's 16:
# more work per collective.
# The configurations alternate for R rounds (default 3); each reports the
# best of its R medians (a shared machine's noise only ever adds time).
# Prints one line per configuration and the speed-up over TP = 1. Timing
# only: nothing is asserted (a shared machine disturbs it; see the figures
# in the report that ran it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build iters=50 model=plain tps="2" tokens=0 rounds=3
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --tp) tps=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    *) echo "usage: bench/tp.sh [--build DIR] [--iters N] [--model plain|loop] [--tp \"2 4\"]"; exit 2 ;;
  esac
done
keel=$build/keel
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/tests/gpt/$model" "$work/m"
/usr/bin/python3 "$here/tools/gpt_weights.py" "$work/m/weights.txt" "$work/m/weights.bin"
ds=$work/m/test_data_set_0
if ((tokens > 0)); then # a TensorProto int64 [1, T] by hand: dims 1, 1; data_type 2; raw_data 9
  /usr/bin/python3 - "$ds/input_0.pb" "$tokens" <<'PY'
import struct, sys
t = int(sys.argv[2]); raw = b"".join(struct.pack("<q", (i * 37 + 3) % 256) for i in range(t))
def v(x):
    o = b""
    while True:
        b = x & 0x7F; x >>= 7
        o += bytes([b | (0x80 if x else 0)])
        if not x: return o
msg = b"\x08\x01" + b"\x08" + v(t) + b"\x10\x07" + b"\x42\x06tokens" + b"\x4a" + v(len(raw)) + raw
open(sys.argv[1], "wb").write(msg)
PY
fi
if mpirun --version 2>&1 | grep -q "Open MPI"; then
  mpi=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
else
  mpi=(mpirun)
fi
ms() { # the median line of keel run, in ms
  awk '/^time/ { v = $2; u = $3; if (u == "us") v /= 1000; if (u == "ns") v /= 1e6; if (u == "s") v *= 1000; print v }'
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for n in $tps; do "$keel" shard "$work/m/model.onnx" --tp "$n" --out "$work/tp$n" >/dev/null; done
best() { sort -g | head -1; }
declare -A times
for ((r = 0; r < rounds; r++)); do
  times[1]+="$("$keel" run "$work/m/model.onnx" --data "$ds" --iters "$iters" --threads 1 2>/dev/null | ms) "
  for n in $tps; do
    times[$n]+="$("${mpi[@]}" -np "$n" "$keel" run "$work/tp$n" --data "$ds" --iters "$iters" \
                 --threads 1 2>/dev/null | ms) "
  done
done
t1=$(tr ' ' '\n' <<<"${times[1]}" | grep . | best)
printf "%-28s %10.3f ms   (medians of %s rounds: %s)\n" "TP=1 (one process)" "$t1" "$rounds" "${times[1]}"
for n in $tps; do
  tn=$(tr ' ' '\n' <<<"${times[$n]}" | grep . | best)
  printf "%-28s %10.3f ms   speed-up %.2fx (ideal %dx; medians: %s)\n" "TP=$n (mpirun -np $n)" "$tn" \
         "$(awk -v a="$t1" -v b="$tn" 'BEGIN { print a / b }')" "$n" "${times[$n]}"
done
