#!/usr/bin/env bash
# run_pytest.sh PYTHON BUILD_DIR [pytest args...]: the Python tests against
# BUILD_DIR/python (ctest: python_tests). The summary line is kept in
# BUILD_DIR/python-tests.log for tools/setup.sh to print. In a sanitizer
# build, ASan's runtime is preloaded into the interpreter (leak checking
# off: the interpreter's own allocations are not keel's).
set -uo pipefail
py=$1
build=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
export KEEL_BUILD_DIR=$build
if [[ -n ${KEEL_PRELOAD:-} ]]; then
  export LD_PRELOAD=$KEEL_PRELOAD
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fi
cd "$here"
"$py" -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$build/python-tests.full.log"
rc=${PIPESTATUS[0]}
grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)" "$build/python-tests.full.log" | tail -1 >"$build/python-tests.log"
exit "$rc"
