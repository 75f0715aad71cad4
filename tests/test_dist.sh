#!/usr/bin/env bash
# test_dist.sh KEEL [DIST_COMM]: model parallelism over MPI (tests/dist, written by
# tools/gen_dist_tests.py). Under mpirun -np 2 and -np 4: every shard folder
# passes `keel test` (rank 0 compared with numpy's outputs of the unsplit
# model) and stays steady over 50 runs on every rank (keel test --repeat 50,
# and keel memcheck --iters 50 with one verdict per rank); `keel run DIR` prints
# on rank 0 alone what a one-process `keel run unsplit.onnx` prints; a type
# or shape mismatch between ranks, a rank that fails and a rank killed with
# SIGKILL each end every rank non-zero within 10 s; DIST_COMM (tests/dist_comm.c)
# runs keel on communicators of its own. Exit 77 (skip) when
# mpirun (or $KEEL_MPIRUN) is missing or keel was built without MPI.
set -uo pipefail
keel=$1
here=$(cd "$(dirname "$0")" && pwd)
dist=$here/dist
launcher=${KEEL_MPIRUN:-mpirun}   # e.g. KEEL_MPIRUN=mpirun.mpich for an MPICH build
if ! command -v "$launcher" >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
  exit 77
fi
probe=$("$keel" run "$dist/np2/mlp" 2>&1 </dev/null)
if grep -q "built without MPI" <<<"$probe"; then
  echo "SKIP: keel was built without MPI (cmake -DKEEL_MPI=OFF)"
  exit 77
fi
if "$launcher" --version 2>&1 | grep -q "Open MPI"; then
  mpi=("$launcher" --oversubscribe --allow-run-as-root)
else
  mpi=("$launcher")   # MPICH's Hydra: oversubscribes, runs as root
fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for n in 2 4; do
  out=$(timeout 120 "${mpi[@]}" -np $n "$keel" test "$dist/np$n" 2>&1) ||
    fail "np$n: keel test: $out"
  grep -q "5 passed, 0 failed" <<<"$out" || fail "np$n: keel test summary: $out"
  out=$(timeout 120 "${mpi[@]}" -np $n "$keel" test --repeat 50 "$dist/np$n" 2>&1) ||
    fail "np$n: keel test --repeat 50 (steady memory on every rank): $out"
  ds=$dist/np$n/mlp/test_data_set_0
  want=$("$keel" run "$dist/np$n/mlp/unsplit.onnx" --data "$ds" | grep '^output')
  got=$(timeout 60 "${mpi[@]}" -np $n "$keel" run "$dist/np$n/mlp" --data "$ds" --iters 50 2>/dev/null)
  [[ $? == 0 ]] || fail "np$n: keel run --iters 50"
  [[ "$(grep '^output' <<<"$got")" == "$want" ]] ||
    fail "np$n: rank 0 printed '$(grep '^output' <<<"$got")', one process '$want'"
  [[ $(grep -c '^after destroy' <<<"$got") == 1 ]] || fail "np$n: ranks other than 0 printed"
  for m in mlp loop; do   # every rank's own verdict over 50 runs
    out=$(timeout 60 "${mpi[@]}" -np $n "$keel" memcheck "$dist/np$n/$m" --iters 50 \
          --data "$dist/np$n/$m/test_data_set_0" 2>&1) || fail "np$n: memcheck $m: $out"
    [[ $(grep -c "verdict: steady" <<<"$out") == "$n" ]] || fail "np$n: memcheck $m verdicts: $out"
  done
  echo "np$n: ok"
done

# A rank count that differs from the folder's: a clear error, no hang.
out=$(timeout 30 "${mpi[@]}" -np 2 "$keel" run "$dist/np4/mlp" 2>&1) && fail "np 2 on a 4-rank folder passed"
grep -q "start it with mpirun -np 4" <<<"$out" || fail "rank-count message: $out"

# expect_fail NAME SECONDS CMD...: CMD exits non-zero (not by timeout) within SECONDS.
expect_fail() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  out=$(timeout 30 "$@" 2>&1)
  local rc=$? el=$((SECONDS - t0))
  if [[ $rc == 0 || $rc == 124 || $el -gt $limit ]]; then
    fail "$name: exit $rc after ${el}s (want non-zero within ${limit}s): $out"
    return 1
  fi
  echo "$name: exit $rc after ${el}s"
}
fd=$dist/fail
expect_fail mismatch 10 "${mpi[@]}" -np 2 "$keel" run "$fd/mismatch" --data "$fd/mismatch/test_data_set_0" &&
  { grep -q "this rank (1) has float32\[3,2\], rank 0 has another" <<<"$out" &&
    grep -q "this rank (0) has float32\[2,3\], rank 1 has another" <<<"$out" ||
    fail "mismatch message: $out"; }
expect_fail rank1_error 10 "${mpi[@]}" -np 2 "$keel" run "$fd/rank1_error" \
  --data "$fd/rank1_error/test_data_set_0" &&
  { grep -q "rank 1: run: .*Reshape" <<<"$out" || fail "rank1_error message: $out"; }
# Rank 1 is killed (SIGKILL) 2 s into a long run; rank 0 waits in AllReduce.
expect_fail killed 12 "${mpi[@]}" -np 2 bash -c \
  'if [[ ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}} == 1 ]]; then (sleep 2; kill -9 $$) & fi
   exec "$0" run "$1" --data "$1/test_data_set_0" --iters 100000000' "$keel" "$dist/np2/mlp"

# --mem-report: every rank's report (with its collective time) printed by
# rank 0; --trace: one file per rank, each its own pid.
tr=$(mktemp -d)
out=$(timeout 60 "${mpi[@]}" -np 2 "$keel" run "$dist/np2/mlp" --data "$dist/np2/mlp/test_data_set_0" \
      --iters 3 --mem-report --trace "$tr/t.json" 2>&1) || fail "per-rank reports: $out"
for r in 0 1; do
  grep -q "^collectives on rank $r of 2: 3 calls" <<<"$out" || fail "rank $r collective line: $out"
  grep -q "\"pid\": $((r + 1)), \"args\": {\"name\": \"keel rank $r\"}" "$tr/t.rank$r.json" ||
    fail "trace of rank $r"
done
grep -c "^memory of this rank" <<<"$out" | grep -qx 2 || fail "per-rank memory lines: $out"
rm -rf "$tr"
echo "per-rank reports: ok"

# A program that owns MPI hands keel its own communicator (two groups of 2).
if [[ -n ${2:-} ]]; then
  out=$(timeout 60 "${mpi[@]}" -np 4 "$2" "$dist" 2>&1) || fail "dist_comm: $out"
  grep -q "dist_comm: two groups" <<<"$out" && echo "dist_comm: ok"
fi

[[ $fails == 0 ]] && echo "all distributed tests passed" || echo "$fails failure(s)"
[[ $fails == 0 ]]
