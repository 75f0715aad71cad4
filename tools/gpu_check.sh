#!/usr/bin/env bash
# gpu_check.sh: the GPU checks, on a machine with an NVIDIA GPU and no build
# tools (the lent accelerator machine). Build here first, then carry the
# binaries and a tarball of their shared libraries there:
#
#   cmake --build build -j2
#   ldd build/keel build/test_gpu* build/test_device* | awk '/=>/ {print $3}' | sort -u |
#     grep -vE 'libc.so|libm.so|ld-linux|libpthread|libdl.so|librt.so' > libs.txt
#   mkdir -p .devcarry && tar cJhf .devcarry/libs.tar.xz -C / $(sed 's|^/||' libs.txt)
#   # there:  tools/gpu_check.sh [OUTDIR]
#
# It unpacks the libraries onto LD_LIBRARY_PATH, prints the machine (GPU,
# driver, CPU), then runs, each with a time limit, its output under OUTDIR
# ($OUT, else ./gpu-check):
#   1. test_gpu and test_gpu_<group>: the driver layer, the allocator on
#      device memory, every kernel against a host reference;
#   2. test_device and test_device_<group> with KEEL_TEST_DEVICE=cuda:0:
#      sessions on the GPU against the CPU, steady device bytes, a planted
#      leak, the cap, 0 bytes after;
#   3. the ONNX node tests with --device cuda (onnx's own copy, from the
#      Python package there) against the pass list;
#   4. memcheck --device cuda --iters 1000 on the control-flow models;
#   5. keel train --device cuda against the CPU's losses (tests/train_cli),
#      and the seeds' detector case (tests/train/cnn_branch, an If per batch,
#      Adam): device bytes identical from step 2.
# Exits non-zero when a step fails; summary.txt lists each step's result.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-${OUT:-gpu-check}}
mkdir -p "$OUTDIR"
LIBDIR=/tmp/keel-libs
mkdir -p "$LIBDIR"
if [[ -f .devcarry/libs.tar.xz ]]; then
  tar xJf .devcarry/libs.tar.xz -C "$LIBDIR"
  export LD_LIBRARY_PATH=$LIBDIR/lib/x86_64-linux-gnu:$LIBDIR/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
{
  echo "== machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -4
  lscpu | grep -E "^Model name|^CPU\(s\)|^Flags" | cut -c1-200
  echo "nproc $(nproc)"
  python3 -c "import onnxruntime, onnx, torch, numpy; print(\"python:\", onnxruntime.__version__, onnx.__version__, torch.__version__, numpy.__version__)" 2>&1 | tail -1
  which mpirun node 2>&1 | head -2
} > "$OUTDIR/machine.txt" 2>&1
cat "$OUTDIR/machine.txt"
: > "$OUTDIR/summary.txt"
fails=0
# KEEL_CHECK_DEVICE=emu rehearses the script where there is no GPU
DEV=${KEEL_CHECK_DEVICE:-cuda}
[[ $DEV == emu ]] && TDEV=emu:0 || TDEV=cuda:0

# step NAME LIMIT_S COMMAND...: runs it, keeps its output, records the result
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUTDIR/$name.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc ($((SECONDS - t0)) s)" | tee -a "$OUTDIR/summary.txt"
  tail -25 "$OUTDIR/$name.txt"
  [[ $rc -eq 0 || $rc -eq 77 ]] || fails=$((fails + 1)) # 77: skipped (no GPU)
}

# every test of the gpu label (test_gpu, test_gpu_<group>), then the device
# tests (test_device, test_device_<group>) on the GPU
for t in build/test_gpu build/test_gpu_*; do
  [[ -x $t ]] && step "$(basename "$t")" 120 "$t"
done
for t in build/test_device build/test_device_*; do
  [[ -x $t ]] && step "$(basename "$t")" 120 env KEEL_TEST_DEVICE=$TDEV "$t"
done

NODE=${KEEL_NODE_TESTS:-$(python3 -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend/test/data/node'))" 2>/dev/null)}
if [[ -d ${NODE:-/nonexistent} ]]; then
  # onnx's copy there may be newer than ours: the list of what passes here
  # is the bar, tests it does not name are reported, not judged
  step node_suite_cuda 240 build/keel test --device "$DEV" "$NODE" --expect tests/conformance/onnx-node-current.pass
  grep -E "^FAIL" "$OUTDIR/node_suite_cuda.txt" | head -40
else
  echo "== node_suite_cuda: no onnx node tests on this machine" | tee -a "$OUTDIR/summary.txt"
fi

for m in tests/models/*/model.onnx; do
  name=memcheck_$(basename "$(dirname "$m")")
  step "$name" 60 build/keel memcheck "$m" --device "$DEV" --iters 1000
done

D=tests/train_cli
TRAIN=(build/keel train "$D/model.onnx" --loss loss --data "$D/data_0" --data "$D/data_1" --freeze c
       --steps 40 --optimizer adam --lr 0.01)
"${TRAIN[@]}" > "$OUTDIR/train_cpu.txt" 2>&1
step train_cuda 60 "${TRAIN[@]}" --device "$DEV"
# the same losses within 1e-4 (relative): the GPU's exp and log are the
# hardware's approximations
paste <(grep -E "^step" "$OUTDIR/train_cpu.txt" | awk '{print $4}') \
      <(grep -E "^step" "$OUTDIR/train_cuda.txt" | awk '{print $4}') > "$OUTDIR/train_losses.txt"
if awk 'BEGIN {bad = 0; n = 0} {n++; d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1;
        if (d > 1e-4 * (s > 1 ? s : 1)) bad++} END {exit !(n == 40 && bad == 0)}' "$OUTDIR/train_losses.txt"; then
  echo "== train losses: $TDEV within 1e-4 of the CPU's over 40 steps" | tee -a "$OUTDIR/summary.txt"
else
  echo "== train losses: differ or missing (train_losses.txt: cpu, cuda)" | tee -a "$OUTDIR/summary.txt"
  fails=$((fails + 1))
fi

# the seeds' detector case: tests/train/cnn_branch (an If per batch), Adam,
# 40 steps: the CPU's losses within 1e-4 and device bytes identical from
# step 2 (the steady verdict covers the device)
B=tests/train/cnn_branch
if [[ -f $B/model.onnx ]]; then
  read -r -a BARGS <<< "$(tr "\n" " " < "$B/args")"
  build/keel train "$B/model.onnx" "${BARGS[@]}" --log "$OUTDIR/branch_cpu.jsonl" > "$OUTDIR/branch_cpu.txt" 2>&1
  step train_branch_cuda 120 build/keel train "$B/model.onnx" "${BARGS[@]}" --device "$DEV" \
    --log "$OUTDIR/branch_cuda.jsonl"
  paste <(grep -o '"loss": [-0-9.e]*' "$OUTDIR/branch_cpu.jsonl" | cut -d' ' -f2) \
        <(grep -o '"loss": [-0-9.e]*' "$OUTDIR/branch_cuda.jsonl" | cut -d' ' -f2) > "$OUTDIR/branch_losses.txt"
  if awk 'BEGIN {bad = 0; n = 0} {n++; d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1;
          if (d > 1e-4 * (s > 1 ? s : 1)) bad++} END {exit !(n == 40 && bad == 0)}' "$OUTDIR/branch_losses.txt" &&
     [[ $(sed -n '2,$p' "$OUTDIR/branch_cuda.jsonl" | grep -o '"device_allocated": [0-9]*' | sort -u | wc -l) -eq 1 ]]; then
    echo "== cnn_branch: $TDEV's losses within 1e-4 of the CPU's, device bytes identical from step 2" | tee -a "$OUTDIR/summary.txt"
  else
    echo "== cnn_branch: losses or device bytes off (branch_losses.txt, branch_cuda.jsonl)" | tee -a "$OUTDIR/summary.txt"
    fails=$((fails + 1))
  fi
fi

echo "gpu_check: $fails failed" | tee -a "$OUTDIR/summary.txt"
exit $((fails > 0))
