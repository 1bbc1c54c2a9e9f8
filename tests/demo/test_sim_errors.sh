#!/usr/bin/env bash
# flotilla-sim's early exits: every way the command line can make it stop before the rounds
# (a refused flag, Fashion-MNIST missing, partial or corrupt, a bad --model spec, a bad
# --coordinator-key, an existing or unopenable --db, a coordinator that will not start, a
# population the coordinator refuses or cannot be reached for) exits with its documented
# status (2 bad command line, 77 data not found, 1 failure) and says why on stderr.
#   test_sim_errors.sh BUILD_DIR
# Under ASan+UBSan (the asan preset) a leak on any of these paths turns the exit status into
# LeakSanitizer's 23, so this also checks that each exit frees what the run had built (the
# valgrind finding in docs/reliability.md: only the refused-flag exit used to). The data
# sets are small IDX files written here, so the test needs no Fashion-MNIST download and
# no network beyond 127.0.0.1.
set -uo pipefail
bin=$1
sim=$bin/examples/flotilla-sim/flotilla-sim
work=$(mktemp -d /tmp/flotilla-sim-errors-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$sim" ] || fail "$sim was not built"
command -v gzip >/dev/null || { echo "no gzip: skipped"; exit 77; }

# ---- tiny IDX data sets (28x28 images, labels 0..9) ----
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))"
         printf "\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }
# idx DIR PREFIX N [CLAIMED]: images and labels of N examples, headers claiming CLAIMED (N).
idx() {
    local d=$1 pre=$2 n=$3 claim=${4:-$3}
    mkdir -p "$d"
    { be32 2051; be32 "$claim"; be32 28; be32 28; head -c $((n * 784)) /dev/zero | tr '\0' '\200'
    } | gzip -c >"$d/$pre-images-idx3-ubyte.gz"
    { be32 2049; be32 "$claim"; for ((i = 0; i < n; i++)); do printf "\\x0$((i % 10))"; done
    } | gzip -c >"$d/$pre-labels-idx1-ubyte.gz"
}
idx "$work/data" train 40
idx "$work/data" t10k 10
idx "$work/trainonly" train 40                  # the test set is missing
idx "$work/corrupt" train 40
idx "$work/corrupt" t10k 10
echo "not an IDX file" | gzip -c >"$work/corrupt/t10k-images-idx3-ubyte.gz"
idx "$work/truncated" train 40
idx "$work/truncated" t10k 10 1000              # header claims more images than it holds
touch "$work/exists.db"

small=(--clients 4 --per-round 3 --rounds 1 --timeout-s 60 --data "$work/data")
zero_key=0000000000000000000000000000000000000000000000000000000000000000
n=0
# expect STATUS STDERR_PATTERN ARGS...: flotilla-sim ARGS exits STATUS and its stderr
# matches the pattern (grep -E); no sanitizer report.
expect() {
    local want=$1 pat=$2
    shift 2
    n=$((n + 1))
    "$sim" "$@" >"$work/out.$n" 2>"$work/err.$n"
    local got=$?
    local what="flotilla-sim $*"
    if grep -q -E "LeakSanitizer|AddressSanitizer|runtime error" "$work/err.$n"; then
        sed -n '1,60p' "$work/err.$n" >&2
        fail "$what: sanitizer report (exit $got)"
    fi
    [ "$got" -eq "$want" ] ||
        fail "$what: exit $got, expected $want; stderr: $(tail -n 5 "$work/err.$n")"
    grep -q -E -e "$pat" "$work/err.$n" ||
        fail "$what: stderr lacks /$pat/: $(tail -n 5 "$work/err.$n")"
    echo "ok $n: exit $got: $(grep -m1 -E -e "$pat" "$work/err.$n")"
}

# Refused command lines (parse_opts).
expect 2 "unknown or incomplete option --no-such-flag" --no-such-flag
expect 2 "unknown or incomplete option --clients" --clients
expect 2 "bad option values" --clients 1 --data "$work/data"
expect 2 "--per-round must be 3 or more with --secagg on" --clients 4 --per-round 2 \
    --data "$work/data"
# Fashion-MNIST: missing, only half there, corrupt, truncated.
expect 77 "Fashion-MNIST not found in $work/none" --data "$work/none"
expect 77 "Fashion-MNIST not found in $work/trainonly" --data "$work/trainonly"
expect 77 "Fashion-MNIST not found in $work/corrupt" --data "$work/corrupt"
expect 77 "Fashion-MNIST not found in $work/truncated" --data "$work/truncated"
# --model is a layer-size spec, 784-...-10 (there is no model file to give).
expect 2 "--model must be 784-\.\.\.-10" "${small[@]}" --model 784-10-9
expect 2 "--model must be 784-\.\.\.-10" "${small[@]}" --model no-such-model.safetensors
expect 2 "--model must be 784-\.\.\.-10" "${small[@]}" --model 784-0-10
# A running coordinator's key, and a --db to create.
expect 2 "--coordinator-key: 64 hex characters" "${small[@]}" --url http://127.0.0.1:1 \
    --coordinator-key abc
expect 2 "--db $work/exists.db exists" "${small[@]}" --db "$work/exists.db"
[ -f "$work/exists.db" ] && [ ! -s "$work/exists.db" ] || fail "the existing --db was touched"
# The in-process coordinator cannot be created.
expect 1 "coordinator: .*cannot open '$work/nodir/coord.db'" "${small[@]}" \
    --db "$work/nodir/coord.db"
expect 1 "coordinator: config.threads" "${small[@]}" --coord-threads 0
# The coordinator runs (HTTP server, ticker thread) but refuses the population.
expect 1 "creating the population failed: 400 .*strategy.name" "${small[@]}" --strategy bogus
expect 1 "creating the population failed: 400 .*training.epochs" "${small[@]}" --epochs 0
# --url with nothing listening.
expect 1 "creating the population failed: -1" "${small[@]}" --url http://127.0.0.1:1 \
    --coordinator-key "$zero_key"
echo "ok: $n early exits, each with its status and message"
