#!/usr/bin/env bash
# Python packages the tests use (format and accountant cross-checks; cryptography: an
# independent Ed25519 device authority for the binding's identity test), into a project venv
# at .venv so the system Python stays untouched. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv 2>/dev/null || { "$PY" -m pip install -q virtualenv && "$PY" -m virtualenv -q .venv; }
fi
want="numpy safetensors dp-accounting pytest gcovr cryptography"
missing=""
for p in $want; do
  .venv/bin/python -m pip show -q "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "pydeps.sh: installing$missing"
  .venv/bin/python -m pip install -q $missing
fi
echo "pydeps.sh: python packages ready"
