#!/usr/bin/env bash
# Model quality in the demo setting (docs/results.md): flotilla-sim with the in-process
# coordinator, Fashion-MNIST, MLP 784-128-10, 1,000 clients, 100 per round (130 selected:
# over-selection 1.3), Dirichlet alpha = 0.5, SecAgg+ on, local SGD lr 0.05 momentum 0.9
# batch 16. One run per configuration; each run's per-round log is kept and parsed into
# accuracy-vs-rounds and accuracy-vs-epsilon plots (docs/img/) and a Markdown table.
#
#   tests/bench/quality/run_quality.sh [--bin-dir DIR] [--out DIR] [--rounds R] [--seed S]
#       [--epochs E] [--no-plot] [CONFIG...]
#
# CONFIG: fedavg fedavgm fedadam fedprox (no DP: flotilla-sim's no-DP defaults, update clip
# 50 and example weighting; E local epochs, 5 by default), dp0.7 dp1.0 dp1.5 (FedAvgM with
# central DP at that noise multiplier, the demo's recipe: 2 local epochs, clip 1, uniform
# weighting, budget epsilon 8 at delta 1e-5, run until the accountant refuses a round or R
# rounds). Default: all. Each run takes 3-10 s per round on a 2-core VM. Plotting uses
# matplotlib from the repository's .venv (installed there if missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=$root/build-demo out=$root/build-demo/quality rounds=100 seed=1 epochs=5 plot=1
configs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --no-plot) plot=0; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        -*) echo "run_quality.sh: unknown option $1" >&2; exit 2 ;;
        *) configs+=("$1"); shift ;;
    esac
done
[ ${#configs[@]} -gt 0 ] || configs=(fedavg fedavgm fedadam fedprox dp0.7 dp1.0 dp1.5)
sim=$bin/examples/flotilla-sim/flotilla-sim
[ -x "$sim" ] || { echo "run_quality.sh: build flotilla-sim first ($sim)" >&2; exit 2; }
mkdir -p "$out"
. "$root/scripts/openblas-coretype.sh"

common=(--clients 1000 --per-round 100 --alpha 0.5 --model 784-128-10 --secagg on
        --lr 0.05 --local-momentum 0.9 --batch 16 --seed "$seed" --timeout-s 3000)
nodp=(--epochs "$epochs" --dp none)
for c in "${configs[@]}"; do
    case "$c" in
        fedavg) args=(--strategy fedavg "${nodp[@]}") ;;
        fedavgm) args=(--strategy fedavgm --momentum 0.9 "${nodp[@]}") ;;
        fedadam) args=(--strategy fedadam --server-lr 0.01 "${nodp[@]}") ;;
        fedprox) args=(--strategy fedprox "${nodp[@]}") ;;
        dp*) args=(--strategy fedavgm --momentum 0.9 --epochs 2 --dp central --noise "${c#dp}"
                   --epsilon 8 --delta 1e-5 --clip 1.0) ;;
        *) echo "run_quality.sh: unknown config $c" >&2; exit 2 ;;
    esac
    cmd=("$sim" "${common[@]}" --rounds "$rounds" "${args[@]}" --summary-json "$out/$c.json")
    echo "== $c: ${cmd[*]#$root/}"
    echo "${cmd[*]#$root/}" >"$out/$c.cmd"
    "${cmd[@]}" 2>&1 | grep --line-buffered -v '\[coordinator\]' | tee "$out/$c.log" |
        grep -E '^(round|done|privacy)' || true
done
[ "$plot" = 1 ] || exit 0

py=$root/.venv/bin/python
if [ ! -x "$py" ]; then python3 -m venv "$root/.venv"; fi
"$py" -c 'import matplotlib' 2>/dev/null || "$py" -m pip install -q matplotlib
"$py" "$here/plot_quality.py" "$out" "$root/docs/img"
