#!/usr/bin/env bash
# flotilla-sim's no-DP training recipe at CI size (docs/results.md, "Why plain FedAvg stopped
# near 80%"): without DP the update clip defaults to 50, not the DP sensitivity 1, and updates
# are weighted by example count; with DP the defaults stay clip 1 and uniform weights.
#   test_sim_nodp.sh BUILD_DIR
# Checks: bad values of --clip, --weighting and --local-momentum, example weighting asked
# together with DP, and --secagg-reveal with --secagg off, are refused; a
# 20-device FedAvg run without DP (3 rounds, 4,000 training images, SecAgg+ on with
# --secagg-reveal) passes an accuracy floor, and the population it created holds clip_norm
# 50, "examples" weighting and reveal_pair_seeds; a DP run's population holds clip_norm 1,
# "uniform" and no revealed seeds. Exit 77 (skip) without Fashion-MNIST or the sqlite3 shell.
set -uo pipefail
bin=$1
sim=$bin/examples/flotilla-sim/flotilla-sim
work=$(mktemp -d /tmp/flotilla-sim-nodp-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    echo "Fashion-MNIST not installed (scripts/setup.sh): skipped"
    exit 77
fi
command -v sqlite3 >/dev/null || { echo "no sqlite3 shell: skipped"; exit 77; }
[ -x "$sim" ] || fail "$sim was not built"

# ---- bad values are refused before anything starts ----
for bad in "--clip 0" "--clip -2" "--clip 20000" "--weighting sometimes" \
           "--local-momentum 1" "--local-momentum -0.1" "--dp central --weighting examples" \
           "--secagg off --secagg-reveal"; do
    # shellcheck disable=SC2086
    "$sim" $bad >"$work/bad" 2>&1 && fail "'$bad' was accepted"
    grep -q -e "--clip\|--weighting\|--local-momentum\|--secagg-reveal" "$work/bad" ||
        fail "'$bad': the message does not name the flag: $(head -c 200 "$work/bad")"
done
echo "ok: bad --clip / --weighting / --local-momentum / --secagg-reveal values refused"

# The population's training config as the coordinator stored it.
config() { sqlite3 "$1" "SELECT config_json FROM populations"; }
# The time limit and the phase deadlines (flotilla-sim's defaults: 10, 60, 3 s) are times
# FL_TEST_TIME_SCALE (scripts/valgrind.sh: the devices are that much slower).
ts=${FL_TEST_TIME_SCALE:-1}
small=(--clients 20 --per-round 10 --train-examples 4000 --test-examples 2000 --secagg on
       --rest-s 1 --epochs 2 --lr 0.05 --seed 3 --timeout-s $((240 * ts))
       --deadline-s $((10 * ts)) --masked-s $((60 * ts)) --forming-s $((3 * ts)))

# ---- without DP: clip 50, example weights, and it learns ----
"$sim" "${small[@]}" --rounds 3 --dp none --secagg-reveal --min-accuracy 0.5 \
    --db "$work/nodp.db" \
    --summary-json "$work/nodp.json" >"$work/nodp.log" 2>&1 ||
    fail "no-DP run exited $?: $(grep -v '\[coordinator\]' "$work/nodp.log" | tail -n 5)"
grep -q '"rounds":3' "$work/nodp.json" || fail "no-DP run: not 3 rounds: $(cat "$work/nodp.json")"
c=$(config "$work/nodp.db")
echo "$c" | grep -q '"clip_norm": *50[,}.]' || fail "no-DP population clip is not 50: $c"
echo "$c" | grep -q '"weighting": *"examples"' || fail "no-DP population is not example-weighted: $c"
echo "$c" | grep -q '"reveal_pair_seeds": *true' ||
    fail "no-DP population has no revealed seeds: $c"
grep '^round' "$work/nodp.log"
echo "ok: no-DP run (clip 50, example weights) above the 0.5 floor"

# ---- with DP the defaults stay the DP ones (one round is enough to see the config) ----
"$sim" "${small[@]}" --rounds 1 --dp central --noise 0.3 --epsilon 1000 --db "$work/dp.db" \
    >"$work/dp.log" 2>&1 || fail "DP run exited $?: $(tail -n 5 "$work/dp.log")"
c=$(config "$work/dp.db")
echo "$c" | grep -q '"clip_norm": *1[,}.]' || fail "DP population clip is not 1: $c"
echo "$c" | grep -q '"weighting": *"uniform"' || fail "DP population is not uniform: $c"
echo "$c" | grep -q '"reveal_pair_seeds": *false' || fail "DP population reveals seeds: $c"
echo "ok: DP run keeps clip 1 and uniform weights"
