#!/usr/bin/env bash
# Model quality in the demo setting (docs/results.md): flotilla-sim with the in-process
# coordinator, Fashion-MNIST, MLP 784-128-10, 1,000 clients, 100 per round (130 selected:
# over-selection 1.3), Dirichlet alpha = 0.5, SecAgg+ on, E = 2 local epochs, lr 0.05,
# batch 16, seed 1. One run per configuration; each run's per-round log is kept and parsed
# into accuracy-vs-rounds and accuracy-vs-epsilon plots (docs/img/) and a Markdown table.
#
#   tests/bench/quality/run_quality.sh [--bin-dir DIR] [--out DIR] [--rounds R] [CONFIG...]
#
# CONFIG: fedavg fedavgm fedadam fedprox (no DP), dp0.7 dp1.0 dp1.5 (FedAvgM with central
# DP at that noise multiplier, budget epsilon 8 at delta 1e-5, run until the accountant
# refuses a round or R rounds). Default: all. Each run takes 3-6 s per round on a 2-core VM.
# Plotting uses matplotlib from /work/main/.venv (installed there if missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=$root/build-demo out=$root/build-demo/quality rounds=40
configs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        -*) echo "run_quality.sh: unknown option $1" >&2; exit 2 ;;
        *) configs+=("$1"); shift ;;
    esac
done
[ ${#configs[@]} -gt 0 ] || configs=(fedavg fedavgm fedadam fedprox dp0.7 dp1.0 dp1.5)
sim=$bin/examples/flotilla-sim/flotilla-sim
[ -x "$sim" ] || { echo "run_quality.sh: build flotilla-sim first ($sim)" >&2; exit 2; }
mkdir -p "$out"

common=(--clients 1000 --per-round 100 --alpha 0.5 --model 784-128-10 --secagg on
        --epochs 2 --lr 0.05 --batch 16 --seed 1 --timeout-s 1500)
for c in "${configs[@]}"; do
    case "$c" in
        fedavg) args=(--strategy fedavg --dp none) ;;
        fedavgm) args=(--strategy fedavgm --momentum 0.9 --dp none) ;;
        fedadam) args=(--strategy fedadam --server-lr 0.01 --dp none) ;;
        fedprox) args=(--strategy fedprox --dp none) ;;
        dp*) args=(--strategy fedavgm --momentum 0.9 --dp central --noise "${c#dp}"
                   --epsilon 8 --delta 1e-5 --clip 1.0) ;;
        *) echo "run_quality.sh: unknown config $c" >&2; exit 2 ;;
    esac
    cmd=("$sim" "${common[@]}" --rounds "$rounds" "${args[@]}" --summary-json "$out/$c.json")
    echo "== $c: ${cmd[*]#$root/}"
    echo "${cmd[*]#$root/}" >"$out/$c.cmd"
    "${cmd[@]}" 2>&1 | grep -v '\[coordinator\]' | tee "$out/$c.log" | grep -E '^(round|done|privacy)' || true
done

py=$root/.venv/bin/python
if [ ! -x "$py" ]; then python3 -m venv "$root/.venv"; fi
"$py" -c 'import matplotlib' 2>/dev/null || "$py" -m pip install -q matplotlib
"$py" "$here/plot_quality.py" "$out" "$root/docs/img"
