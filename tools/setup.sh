#!/usr/bin/env bash
# setup.sh: install what keel needs on Debian 12, build, and run.
#
#   tools/setup.sh demo   build (release) and run the bundled example model
#   tools/setup.sh test   build release, ASan/UBSan (gcc and clang), a
#                         KEEL_DEBUG=3 and a TSan variant and run every test
#
# As root it installs missing Debian packages with apt-get; otherwise it
# prints the apt-get line to run and stops if something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# python3 and librsvg2-bin: the CLI test checks the trace JSON and renders
# the memcheck SVG; clang: its UBSan also reports NULL+0 and float-to-int
# overflow, which gcc's does not; python3-dev, python3-numpy: the Python
# package (build/python); python3-pytest, python3-venv: its tests (one
# installs it into a venv with pip); pkg-config: the installed-tree test;
# libre2-dev: RegexFullMatch (RE2 syntax, as the ONNX spec says); the image
# libraries: ImageDecoder (JPEG, PNG, WebP, TIFF, JPEG 2000); python3-onnx:
# tests/train/check.py reads the models and tensors of the training tests;
# libdnnl-dev: oneDNN, the convolutions and matrix products (src/ops/dnnl)
PACKAGES=(build-essential cmake libopenblas-dev libonnx-testdata python3 python3-onnx librsvg2-bin
          clang libclang-rt-14-dev python3-dev python3-numpy python3-pytest python3-venv
          pkg-config libre2-dev libjpeg62-turbo-dev libpng-dev libwebp-dev
          libtiff-dev libopenjp2-7-dev openmpi-bin libopenmpi-dev libdnnl-dev)
JOBS=$(nproc 2>/dev/null || echo 2)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "== installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# build DIR [cmake options...]
build() {
  local dir=$1
  shift
  echo "== building $dir $*"
  cmake -S . -B "$dir" -DKEEL_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS" >/dev/null
}

# The interpreter CMake built the Python package for (Debian's python3).
build_python() {
  sed -n 's/^KEEL_PYTHON_EXECUTABLE:INTERNAL=//p' "$1/CMakeCache.txt"
}

# pytest's summary line of a build's python_tests (run by ctest).
python_summary() {
  [[ -f $1/python-tests.log ]] && echo "== python tests ($1, pytest): $(cat "$1/python-tests.log")"
  return 0
}

demo() {
  build build -DCMAKE_BUILD_TYPE=Release
  ./build/keel info tests/models/greedy_decode/model.onnx
  ./build/keel run tests/models/greedy_decode/model.onnx --data tests/models/greedy_decode/test_data_set_0
  local py
  py=$(build_python build)
  if [[ -z $py ]]; then echo "python: the package was not built (python3-dev, python3-numpy)"; return; fi
  PYTHONPATH=build/python "$py" -c \
    'import keel; print("python: keel", keel.__version__, "in build/python (PYTHONPATH=build/python)")'
}

test_all() {
  build build -DCMAKE_BUILD_TYPE=Release
  echo "== tests: release"
  rm -f build/python-tests.log
  (cd build && ctest --output-on-failure -j "$JOBS")
  python_summary build
  build build-asan -DCMAKE_BUILD_TYPE=Debug -DKEEL_DEBUG=2 \
    -DKEEL_SANITIZE_ADDRESS=ON -DKEEL_SANITIZE_UNDEFINED=ON
  echo "== tests: AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer, KEEL_DEBUG=2"
  rm -f build-asan/python-tests.log
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$JOBS")
  python_summary build-asan
  build build-clang -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DKEEL_DEBUG=2 \
    -DKEEL_SANITIZE_ADDRESS=ON -DKEEL_SANITIZE_UNDEFINED=ON
  echo "== tests: clang AddressSanitizer + UndefinedBehaviorSanitizer, KEEL_DEBUG=2"
  (cd build-clang && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$JOBS")
  build build-debug3 -DCMAKE_BUILD_TYPE=Debug -DKEEL_DEBUG=3
  echo "== tests: KEEL_DEBUG=3 (expensive checks: the whole heap after every run)"
  (cd build-debug3 && ctest --output-on-failure -j "$JOBS")
  build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKEEL_SANITIZE_THREAD=ON
  echo "== tests: ThreadSanitizer (label: thread)"
  (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -L thread)
  echo "== all tests passed"
}

install_missing
case "${1:-}" in
  demo) demo ;;
  test) test_all ;;
  *) echo "usage: tools/setup.sh demo|test" >&2; exit 2 ;;
esac
