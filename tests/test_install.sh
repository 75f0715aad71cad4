#!/usr/bin/env bash
# test_install.sh BUILD_DIR MODEL [CC [SANITIZER_FLAGS]]: install keel from
# BUILD_DIR into a temporary prefix, then build tests/install/hello.c against
# that tree twice, with pkg-config and with find_package(keel), and run both
# on MODEL. CC and the flags are the build's compiler and sanitizer flags (an
# ASan libkeel.so needs the same compiler's runtime in the program too).
set -euo pipefail
build=$(cd "$1" && pwd)
model=$2
cc=${3:-cc}
san=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/keel.h include/keel_stats.h bin/keel; do
  [[ -e $prefix/$f ]] || { echo "not installed: $f"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libkeel.so.*' -type f | head -1)")
[[ -n $libdir && -e $libdir/libkeel.so && -e $libdir/libkeel.a ]] || { echo "libkeel not installed"; exit 1; }

echo "== pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046,SC2086
"$cc" $san -o "$tmp/hello_pc" "$here/install/hello.c" $(pkg-config --cflags --libs keel) -Wl,-rpath,"$libdir"
"$tmp/hello_pc" "$model"

echo "== find_package"
cmake -S "$here/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/hello" "$model"
# the installed command runs too
"$prefix/bin/keel" info "$model" >/dev/null
echo "installed tree OK"
