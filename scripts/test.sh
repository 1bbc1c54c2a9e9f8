#!/usr/bin/env bash
# Sets up a fresh machine and runs the whole test suite: a dev build (gcc, warnings as
# errors) and an ASan+UBSan build, each through ctest, and between them a clang build of
# everything (warnings as errors) whose meta checks run (clang's warnings and what its
# libraries export differ from gcc's); then the tests that run threads of their own
# (label "threads": the coordinator's, the SDK's worker, secagg's parallel unmask) under
# ThreadSanitizer. Usage: scripts/test.sh [--quick] (dev only).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --tests
bash scripts/pydeps.sh

jobs=$(nproc 2>/dev/null || echo 2)
run_preset() {
  local p=$1
  echo "==== flotilla: $p build ===="
  cmake --preset "$p" >/dev/null
  cmake --build --preset "$p" -j "$jobs"
  echo "==== flotilla: $p tests ===="
  ctest --preset "$p"
}

run_preset dev
if [ "${1:-}" != "--quick" ]; then
  run_preset clang
  run_preset asan
  run_preset tsan
fi
echo "flotilla: all test suites passed"
