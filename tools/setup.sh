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
# overflow, which gcc's does not
PACKAGES=(build-essential cmake libopenblas-dev libonnx-testdata python3 librsvg2-bin
          clang libclang-rt-14-dev)
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

demo() {
  build build -DCMAKE_BUILD_TYPE=Release
  ./build/keel info tests/models/greedy_decode/model.onnx
  ./build/keel run tests/models/greedy_decode/model.onnx --data tests/models/greedy_decode/test_data_set_0
}

test_all() {
  build build -DCMAKE_BUILD_TYPE=Release
  echo "== tests: release"
  (cd build && ctest --output-on-failure -j "$JOBS")
  build build-asan -DCMAKE_BUILD_TYPE=Debug -DKEEL_DEBUG=2 \
    -DKEEL_SANITIZE_ADDRESS=ON -DKEEL_SANITIZE_UNDEFINED=ON
  echo "== tests: AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer, KEEL_DEBUG=2"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$JOBS")
  build build-clang -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DKEEL_DEBUG=2 \
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
