#!/usr/bin/env bash
# The main job, end to end: sets up a fresh Debian machine (scripts/setup.sh installs only
# what is missing), builds the Release preset, and runs flotilla-sim: 1,000 real SDK clients
# against the real coordinator started in-process on its embedded SQLite database.
# Fashion-MNIST, MLP 784-128-10, Dirichlet alpha = 0.5 non-IID split, 100 clients per round,
# SecAgg+ and central DP (discrete Gaussian, noise multiplier 1.0, budget epsilon 8 at
# delta 1e-5), FedAvgM (server momentum 0.9). One progress line per round; at the end the
# final accuracy, the privacy spent, and the audit verdict (flotilla-audit verify on the
# audit bundle exported from the run's database) with the HTML report's path.
#
#   bash scripts/demo.sh [options] [-- flotilla-sim options]
#
# Exit status: 0 the run completed its rounds, 1 it did not (or the audit log failed
# verification), 2 bad usage. docs/results.md has the measured figures.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
usage: bash scripts/demo.sh [options] [-- flotilla-sim options]
  --rounds N          rounds to run (48); with DP the run ends earlier if the accountant
                      refuses a round because the epsilon budget is spent
  --clients N         simulated devices (1000)
  --per-round K       clients per round (100)
  --dp on|off         central DP with the accountant enforcing epsilon 8 at delta 1e-5 (on)
  --noise Z           DP noise multiplier (1.0)
  --epsilon E         DP budget epsilon at delta 1e-5 (8); the coordinator refuses rounds past it
  --strategy S        server strategy: fedavgm (momentum 0.9), fedavg, fedadam, ... (fedavgm)
  --summary-json F    write the run's summary (rounds, clients, final_accuracy, epsilon,
                      delta, audit_verdict, wall_time_s, ...) as one JSON object to F
  --out DIR           keep the run's files here (database, log, audit bundle and report);
                      default: a new directory under /tmp
  --bin-dir DIR       use flotilla-sim and flotilla-audit already built in DIR (a CMake build
                      directory); skips setup and build
  -h, --help          this text
Anything after -- goes to flotilla-sim unchanged (see its --help), e.g. -- --seed 7.
EOF
}

rounds=48 clients=1000 per_round=100 dp=on noise=1.0 budget=8 strategy=fedavgm summary="" out="" bin_dir=""
sim_extra=()
need() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "demo.sh: $1 needs a value" >&2; usage >&2; exit 2; }; }
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "demo.sh: $1 must be a positive integer" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need "$@"; posint "$1" "$2"; rounds=$2; shift 2 ;;
        --clients) need "$@"; posint "$1" "$2"; clients=$2; shift 2 ;;
        --per-round) need "$@"; posint "$1" "$2"; per_round=$2; shift 2 ;;
        --dp) need "$@"
              case "$2" in on|off) dp=$2 ;; *) echo "demo.sh: --dp on|off" >&2; exit 2 ;; esac
              shift 2 ;;
        --noise) need "$@"; noise=$2; shift 2 ;;
        --epsilon) need "$@"; budget=$2; shift 2 ;;
        --strategy) need "$@"; strategy=$2; shift 2 ;;
        --summary-json) need "$@"; summary=$2; shift 2 ;;
        --out) need "$@"; out=$2; shift 2 ;;
        --bin-dir) need "$@"; bin_dir=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; sim_extra=("$@"); break ;;
        *) echo "demo.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
if [ "$per_round" -gt "$clients" ]; then
    echo "demo.sh: --per-round must not exceed --clients" >&2
    exit 2
fi

t0=$(date +%s.%N)
if [ -z "$bin_dir" ]; then
    bash scripts/setup.sh
    echo "demo.sh: building (Release preset, build/release)"
    cmake --preset release -DFL_BUILD_TESTS=OFF -DFL_WITH_CUDA=OFF >/dev/null
    cmake --build --preset release -j "$(nproc 2>/dev/null || echo 2)" \
        --target flotilla-sim flotilla-audit >/dev/null
    bin_dir=build/release
fi
sim=$bin_dir/examples/flotilla-sim/flotilla-sim
audit=$bin_dir/storage/tools/flotilla-audit
for b in "$sim" "$audit"; do
    [ -x "$b" ] || { echo "demo.sh: $b was not built" >&2; exit 1; }
done

out=${out:-${FLOTILLA_DEMO_DIR:-$(mktemp -d /tmp/flotilla-demo-XXXXXX)}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/coord.db" "$out/coord.db-wal" "$out/coord.db-shm" "$out/sim-summary.json" \
      "$out/audit-bundle.jsonl" "$out/audit-report.html"

sim_args=(--clients "$clients" --per-round "$per_round" --rounds "$rounds" --alpha 0.5
          --model 784-128-10 --secagg on --strategy "$strategy" --momentum 0.9
          --epochs 2 --lr 0.05 --batch 16 --timeout-s 900
          --db "$out/coord.db" --audit-bundle "$out/audit-bundle.jsonl"
          --summary-json "$out/sim-summary.json")
if [ "$dp" = on ]; then
    sim_args+=(--dp central --noise "$noise" --epsilon "$budget" --delta 1e-5 --clip 1.0)
else
    sim_args+=(--dp none)
fi
# OpenBLAS kernels for this CPU (OPENBLAS_CORETYPE; FL_OPENBLAS_CORETYPE=off to opt out).
. scripts/openblas-coretype.sh
echo "demo.sh: flotilla-sim ${sim_args[*]} ${sim_extra[*]:-}"
sim_rc=0
"$sim" "${sim_args[@]}" "${sim_extra[@]}" || sim_rc=$?
if [ ! -s "$out/sim-summary.json" ]; then
    echo "demo.sh: flotilla-sim failed (exit $sim_rc) before writing its summary" >&2
    exit 1
fi

# One field of the sim's one-line JSON summary.
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" "$out/sim-summary.json"; }
done_rounds=$(field rounds)
acc=$(field final_accuracy)
eps=$(field epsilon)
delta=$(field delta)
sim_wall=$(field wall_time_s)
audit_state=$(field audit)
budget_out=$(field budget_exhausted)
audit_entries=$(field audit_entries)

# Audit: verify the bundle exported from the run's database. Until the coordinator appends
# audit entries there is nothing to verify, and the summary says so.
report=""
case "$audit_state" in
    exported)
        if "$audit" verify "$out/audit-bundle.jsonl"; then verdict=verified; else verdict=failed; fi
        "$audit" report "$out/audit-bundle.jsonl" -o "$out/audit-report.html" >/dev/null || true
        [ -s "$out/audit-report.html" ] && report=$out/audit-report.html
        ;;
    no_entries)
        verdict=not_available
        audit_note="the coordinator does not append audit entries yet (integration pending), so there is no round log to verify; nothing was verified"
        ;;
    no_checkpoint)
        verdict=not_available
        audit_note="the database holds $audit_entries audit entries but no signed checkpoint, so no bundle can be exported; nothing was verified"
        ;;
    *)
        verdict=error
        audit_note="the audit log could not be read from $out/coord.db"
        ;;
esac
t1=$(date +%s.%N)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

echo
echo "==== Flotilla demo: result ===="
printf 'setting          %s clients, %s per round, Fashion-MNIST Dirichlet(0.5), MLP 784-128-10,\n' \
    "$clients" "$per_round"
printf '                 %s, SecAgg+ on, DP %s\n' \
    "$([ "$strategy" = fedavgm ] && echo "FedAvgM (server momentum 0.9)" || echo "$strategy")" \
    "$([ "$dp" = on ] && echo "central (noise $noise, budget epsilon $budget at delta 1e-5)" || echo off)"
printf 'rounds           %s of %s completed%s\n' "$done_rounds" "$rounds" \
    "$([ "$budget_out" = true ] && echo " (then the accountant refused the next round: budget spent)")"
printf 'final accuracy   %s on the Fashion-MNIST test set\n' \
    "$(awk -v a="$acc" 'BEGIN { printf "%.2f%%", 100 * a }')"
if [ "$dp" = on ]; then
    printf 'privacy spent    epsilon %s at delta %s (RDP accountant of the coordinator)\n' \
        "$(awk -v e="$eps" 'BEGIN { printf "%.3f", e }')" "$delta"
else
    printf 'privacy spent    none claimed: DP off\n'
fi
case "$verdict" in
    verified) printf 'audit log        VERIFIED (%s entries): flotilla-audit verify %s\n' \
                  "$audit_entries" "$out/audit-bundle.jsonl" ;;
    failed) printf 'audit log        FAILED verification: flotilla-audit verify %s\n' \
                "$out/audit-bundle.jsonl" ;;
    *) printf 'audit log        NOT VERIFIED: %s\n' "$audit_note" ;;
esac
if [ -n "$report" ]; then
    printf 'audit report     %s (flotilla-audit report)\n' "$report"
else
    printf 'audit report     none (no bundle to report on)\n'
fi
printf 'wall time        %s s total (simulation %s s); files in %s\n' "$wall" "$sim_wall" "$out"

if [ -n "$summary" ]; then
    cat >"$summary" <<EOF
{"rounds":$done_rounds,"rounds_requested":$rounds,"clients":$clients,"per_round":$per_round,"dp":"$([ "$dp" = on ] && echo central || echo none)","noise_multiplier":$([ "$dp" = on ] && echo "$noise" || echo 0),"strategy":"$strategy","final_accuracy":$acc,"epsilon":$eps,"delta":$delta,"budget_exhausted":${budget_out:-false},"audit_verdict":"$verdict","audit_entries":$audit_entries,"audit_bundle":$([ "$audit_state" = exported ] && echo "\"$out/audit-bundle.jsonl\"" || echo null),"audit_report":$([ -n "$report" ] && echo "\"$report\"" || echo null),"wall_time_s":$wall,"sim_wall_time_s":$sim_wall,"out_dir":"$out"}
EOF
    echo "summary written to $summary"
fi
[ "$sim_rc" -eq 0 ] && [ "$verdict" != failed ]
