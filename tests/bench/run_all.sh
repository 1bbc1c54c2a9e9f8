#!/usr/bin/env bash
# Runs every component's benchmark at modest sizes and writes docs/benchmarks.md: the machine
# (lscpu, memory, load, date), then each benchmark's own output, which carries its
# references measured in the same run (ratios are only meaningful within one run: the dev VM
# is shared and loaded). About 15-20 minutes on a 2-core VM.
#
#   tests/bench/run_all.sh [--build DIR] [--out DIR] [--only NAME[,NAME...]] [--no-build]
#                          [--doc FILE]
#
# NAME: secagg secagg_prg secagg_norm dp_sampler dp_accountant client_train client_heap
#       client_libsize coord_round coord_checkin coord_flower coord_flower_secagg storage_registry
#       storage_audit core_safetensors
# Builds DIR (default build-bench: Release, FL_BUILD_BENCH=ON, CUDA off, -j2) unless
# --no-build. Each benchmark runs under a time limit; one that fails or is missing a tool
# (wrk, torch, flwr) is recorded as such and the rest still run. Python benchmarks use
# /work/main/.venv (their scripts install what they need there, or skip).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-bench out="" only="" do_build=1 doc=$root/docs/benchmarks.md
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --no-build) do_build=0; shift ;;
        --doc) doc=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "run_all.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
build=$(mkdir -p "$build" && cd "$build" && pwd)
out=${out:-$build/bench-results}
mkdir -p "$out"
py=$root/.venv/bin/python
[ -x "$py" ] || py=python3
B=$build/tests/bench

if [ $do_build = 1 ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFL_WITH_CUDA=OFF -DFL_WERROR=OFF \
        -DFL_BUILD_TESTS=ON -DFL_BUILD_BENCH=ON >/dev/null || exit 1
    cmake --build "$build" -j2 --target bench_secagg bench_prg bench_norm bench_sampler \
        bench_accountant bench_train bench_round_heap bench_coord_round bench_registry bench_audit \
        core_bench_safetensors_load flotilla-coordinator fl_client_sdk >/dev/null || exit 1
fi

# OpenBLAS kernels for this CPU (OPENBLAS_CORETYPE; FL_OPENBLAS_CORETYPE=off to opt out),
# for every benchmark below.
. "$root/scripts/openblas-coretype.sh"

# name | time limit (s) | command (run in $root)
steps=(
"secagg|300|$B/secagg/bench_secagg --n 100 --d 10000 --drop 0.1"
"secagg_prg|120|$B/secagg/bench_prg --size 16K,1M --min-time 0.3"
"secagg_norm|600|for d in 16 64 256; do for m in 8 16; do $B/secagg/bench_norm --dim \$d --bits-per-coord \$m --reps 2 || exit; done; done"
"dp_sampler|300|$py tests/bench/dp/bench_sampler.py --bin $B/dp/bench_sampler --no-install"
"dp_accountant|120|$B/dp/bench_accountant --rounds 1000"
"client_train|300|$py tests/bench/client/bench_train_vs_torch.py --bench-train $B/client/bench_train --epochs 1 --samples 10000 --repeat 2 --no-install"
"client_heap|120|$B/client/bench_round_heap --d 10000 --d 100000"
"client_libsize|60|sh tests/bench/client/lib_size.sh $(ls -t "$build"/client-sdk/libflotilla-client-sdk.so* 2>/dev/null | head -1)"
"coord_round|300|for c in 1 16; do for s in 0 1; do $B/coordinator/bench_coord_round --n 100 --d 10000 --rounds 5 --secagg \$s --concurrency \$c || exit; done; done"
"coord_checkin|120|bash tests/bench/coordinator/checkin_wrk.sh $build --seconds 10 --connections 32"
"coord_flower|420|$py tests/bench/coordinator/flower_round.py --build $build --n 100 --d 10000 --secagg 0 --reps 7"
"coord_flower_secagg|600|$py tests/bench/coordinator/flower_round.py --build $build --secagg 1 --n 20,50 --d 10000 --reps 3 --flotilla-rounds 2"
"storage_registry|300|$B/storage/bench_registry --count 200"
"storage_audit|300|$B/storage/bench_audit --entries 20000 --batch 1000 --rounds 50 --proofs 200 --dir $out"
"core_safetensors|120|$B/core/core_bench_safetensors_load --size-mb 64 --reps 3 --dir $out"
)

printf '%s\n' "${steps[@]}" | sed "s|$root/||g" >"$out/_steps"
selected() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
for s in "${steps[@]}"; do
    IFS='|' read -r name limit cmd <<<"$s"
    selected "$name" || continue
    echo "== $name: $cmd"
    t0=$(date +%s)
    (cd "$root" && timeout "$limit" bash -c "$cmd") >"$out/$name.txt" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - t0 )) $cmd" >"$out/$name.status"
    echo "   exit $rc, $(( $(date +%s) - t0 )) s"
done
bash "$root/tests/bench/report/write_benchmarks_md.sh" "$out" "$doc" "$root"
