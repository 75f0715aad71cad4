#!/usr/bin/env bash
# det_cost.sh: what KEEL_OPT_DETERMINISTIC costs. For each model and
# thread count, `keel bench` (median ms of --iters runs) without and with
# --deterministic, alternating, ROUNDS rounds; prints both series.
#
#   bench/det_cost.sh [-r ROUNDS] [-t "1 2"] [-i ITERS] MODEL_DIR...
#   bench/det_cost.sh build/bench-models/{gpt,bert,resnet50,mobilenet_v3,lstm}
set -euo pipefail
rounds=3 threads="1 2" iters=20
while getopts "r:t:i:" o; do
  case $o in
    r) rounds=$OPTARG ;; t) threads=$OPTARG ;; i) iters=$OPTARG ;;
    *) sed -n 2,8p "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -gt 0 ]] || { sed -n 2,8p "$0"; exit 2; }
keel=${KEEL:-$(dirname "$0")/../build/keel}
median() { "$keel" bench "$1/model.onnx" --iters "$iters" --threads "$2" ${3:-} 2>/dev/null |
             awk '/^latency/{print $3}'; }
grep -m1 "model name" /proc/cpuinfo | sed 's/.*: /cpu: /'
printf "%-16s %3s  %-28s %-28s\n" model T "default ms" "deterministic ms"
for m in "$@"; do
  for t in $threads; do
    a="" b=""
    for ((r = 0; r < rounds; r++)); do
      a="$a $(median "$m" "$t")"
      b="$b $(median "$m" "$t" --deterministic)"
    done
    printf "%-16s %3s %-28s %-28s\n" "$(basename "$m")" "$t" "$a" "$b"
  done
done
