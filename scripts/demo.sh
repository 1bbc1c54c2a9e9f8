#!/usr/bin/env bash
# The main job: sets up a fresh machine, builds, and runs it. Until the coordinator and the
# SDK exist this is the storage round trip through the model registry.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release -DFL_BUILD_TESTS=OFF >/dev/null
cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
work=${FLOTILLA_DEMO_DIR:-$(mktemp -d)}
exec build/release/examples/registry-demo/registry-demo "$work/flotilla.db" "$@"
