#!/usr/bin/env bash
# test_exports.sh LIBKEEL.so HEADER...: the shared library exports exactly
# the functions declared KEEL_API in the public headers, nothing more (the
# library is built with hidden visibility) and nothing less.
set -euo pipefail
lib=$1
shift
want=$(grep -h '^KEEL_API' "$@" | grep -o 'KEEL_API[^(]*(' | sed 's/($//; s/.*[ *]//' | sort -u)
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sed 's/@.*//' | sort -u)
if [[ "$want" != "$have" ]]; then
  echo "exports of $lib differ from the KEEL_API declarations (< declared, > exported):"
  diff <(echo "$want") <(echo "$have") || true
  exit 1
fi
soname=$(objdump -p "$lib" | awk '$1 == "SONAME" {print $2}')
[[ "$soname" == libkeel.so.[0-9]* ]] || { echo "bad soname '$soname'"; exit 1; }
echo "$(echo "$want" | wc -l) KEEL_API functions exported, soname $soname"
