#!/usr/bin/env bash
# Runs libFuzzer targets (ASan + UBSan) one after another, each from a copy of its committed
# seed corpus, then merges the inputs that add coverage back into tests/fuzz/corpus/<name>/
# (libFuzzer -merge=1 keeps only inputs with new features, so the committed corpora stay
# small). One line of figures per target goes to <build>/fuzz-results.tsv.
#
#   scripts/fuzz.sh [-b BUILD_DIR] [-n RUNS] [-t MAX_SECONDS] [-N NICE] [-m] [TARGET...]
#     -b  build directory (default build-fuzz; configured here if missing, with clang and
#         -DFL_BUILD_FUZZERS=ON)
#     -n  executions per target (default 10000000)
#     -t  wall-time cap per target in seconds (default 0 = none)
#     -N  nice level of the builds, fuzzers and merges (default 19; FUZZ_NICE in the
#         environment sets the default)
#     -m  merge new coverage into the committed corpus (default: leave it alone)
#     TARGET  names without the fuzz_ prefix (default: every target, secagg ones last)
#
# The fuzzers run under `nice -n 19` (or -N) with stdin from /dev/null (the config target
# may name any file, /dev/stdin included). A crash leaves crash-* files in
# <build>/fuzz-work/<name>/ and makes the script exit 1 after the remaining targets ran.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=build-fuzz
runs=10000000
max_time=0
merge=0
nice_level=${FUZZ_NICE:-19}
while getopts "b:n:t:N:m" opt; do
    case $opt in
        b) build=$OPTARG ;;
        n) runs=$OPTARG ;;
        t) max_time=$OPTARG ;;
        N) nice_level=$OPTARG ;;
        m) merge=1 ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
case $nice_level in
    ''|*[!0-9-]*) echo "fuzz.sh: -N wants a nice level (an integer), got '$nice_level'" >&2; exit 2 ;;
esac
case $build in /*) ;; *) build=$root/$build ;; esac

all=(safetensors coord_bodies coord_config client_task client_protocol audit_bundle
     audit_proofs dc_checkpoint secagg_server_msg secagg_client_msg secagg_norm_proof
     secagg_ed25519_diff)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DFL_BUILD_FUZZERS=ON -DFL_BUILD_BENCH=OFF -DFL_WITH_CUDA=OFF >/dev/null
fi
nice -n "$nice_level" cmake --build "$build" -j2 --target $(printf 'fuzz_%s ' "${targets[@]}")

results=$build/fuzz-results.tsv
[ -f "$results" ] || printf 'date\ttarget\truns\texec_per_s\twall_s\tcov\tft\tcorpus\tcrashes\n' \
    >"$results"
status=0
for t in "${targets[@]}"; do
    bin=$build/tests/fuzz/fuzz_$t
    seeds=$root/tests/fuzz/corpus/$t
    work=$build/fuzz-work/$t
    mkdir -p "$work/corpus"
    cp -n "$seeds"/* "$work/corpus/" 2>/dev/null || true
    rm -f "$work/README"
    [ -f "$work/corpus/README" ] && rm -f "$work/corpus/README"
    log=$work/fuzz.log
    echo "== fuzz_$t: $runs runs (cap ${max_time}s), log $log"
    start=$(date +%s)
    rc=0
    (cd "$work" && nice -n "$nice_level" "$bin" -runs="$runs" -max_total_time="$max_time" \
        -max_len=65536 -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 corpus \
        </dev/null >"$log" 2>&1) || rc=$?
    wall=$(( $(date +%s) - start ))
    done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    crashes=$(find "$work" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' \
        -o -maxdepth 1 -name 'timeout-*' -o -maxdepth 1 -name 'oom-*' | wc -l)
    ncorp=$(find "$work/corpus" -type f | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "${done_runs:-?}" \
        "${eps:-?}" "$wall" "${cov:-?}" "${ft:-?}" "$ncorp" "$crashes" >>"$results"
    tail -1 "$results"
    if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        echo "fuzz_$t: exit $rc, $crashes finding(s) in $work" >&2
        status=1
        continue
    fi
    if [ "$merge" = 1 ]; then
        before=$(find "$seeds" -type f | wc -l)
        (cd "$work" && nice -n "$nice_level" "$bin" -merge=1 -max_len=65536 "$seeds" corpus \
            </dev/null >"$work/merge.log" 2>&1)
        echo "fuzz_$t: committed corpus $before -> $(find "$seeds" -type f | wc -l) files," \
            "$(du -sh "$seeds" | cut -f1)"
    fi
done
exit $status
