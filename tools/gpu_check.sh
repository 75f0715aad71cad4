#!/usr/bin/env bash
# gpu_check.sh: the GPU checks, on a machine with an NVIDIA GPU and no build
# tools (the lent accelerator machine). Build here first, then carry the
# binaries and a tarball of their shared libraries there:
#
#   cmake --build build -j2
#   ldd build/keel build/test_gpu | awk '/=>/ {print $3}' | sort -u |
#     grep -vE 'libc.so|libm.so|ld-linux|libpthread|libdl.so|librt.so' > libs.txt
#   mkdir -p .devcarry && tar cJhf .devcarry/libs.tar.xz -C / $(sed 's|^/||' libs.txt)
#   # there:  tools/gpu_check.sh [OUTDIR]
#
# It unpacks the libraries onto LD_LIBRARY_PATH, prints the machine (GPU,
# driver, CPU), runs every test binary of the `gpu` label that was carried
# (build/test_gpu), and writes each one's output and a summary under OUTDIR
# ($OUT, else ./gpu-check). Exits non-zero when a test fails.
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
fails=0
for t in build/test_gpu; do
  [[ -x $t ]] || { echo "missing $t"; fails=$((fails + 1)); continue; }
  name=$(basename "$t")
  timeout 300 "$t" > "$OUTDIR/$name.txt" 2>&1
  rc=$?
  echo "== $name: exit $rc"
  tail -40 "$OUTDIR/$name.txt"
  [[ $rc -eq 0 ]] || fails=$((fails + 1))
done
echo "gpu_check: $fails failed" | tee "$OUTDIR/summary.txt"
exit $((fails > 0))
