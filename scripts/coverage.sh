#!/usr/bin/env bash
# Line and branch coverage of the test suite, per component (gcc --coverage + gcovr).
#
#   scripts/coverage.sh [-b BUILD_DIR] [-j JOBS] [--no-build] [--no-test] [-- CTEST_ARGS...]
#     -b  build directory (default build-cov; configured here with gcc, Debug, --coverage)
#     -j  parallel build and ctest jobs (default 2)
#     --no-build / --no-test  reuse what is there (e.g. to print the table again)
#     CTEST_ARGS  extra ctest arguments (default: -LE slow)
#
# Prints one row per component: lines covered/total (%), branches covered/total (%).
# "audit verifier" is the offline verifier: storage/src/audit*.c, storage/src/merkle.c and
# the flotilla-audit tool (storage/tools/). Writes <build>/coverage/summary.json (gcovr's
# per-file JSON summary) and <build>/coverage/index.html (per-line detail).
# Needs gcovr: scripts/pydeps.sh puts it in .venv (or apt-get install gcovr).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=build-cov
jobs=2
do_build=1
do_test=1
ctest_args=()
while [ $# -gt 0 ]; do
    case $1 in
        -b) build=$2; shift 2 ;;
        -j) jobs=$2; shift 2 ;;
        --no-build) do_build=0; shift ;;
        --no-test) do_test=0; shift ;;
        --) shift; ctest_args=("$@"); break ;;
        *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
[ ${#ctest_args[@]} -gt 0 ] || ctest_args=(-LE slow)
case $build in /*) ;; *) build=$root/$build ;; esac

gcovr=$root/.venv/bin/gcovr
[ -x "$gcovr" ] || gcovr=$(command -v gcovr || true)
if [ -z "$gcovr" ]; then
    echo "coverage.sh: gcovr not found; run scripts/pydeps.sh" >&2
    exit 1
fi

if [ "$do_build" = 1 ]; then
    if [ ! -f "$build/CMakeCache.txt" ]; then
        CC=gcc cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DFL_WITH_CUDA=OFF \
            -DFL_BUILD_TESTS=ON -DFL_BUILD_BENCH=OFF -DFL_WERROR=ON \
            -DCMAKE_C_FLAGS=--coverage -DCMAKE_EXE_LINKER_FLAGS=--coverage \
            -DCMAKE_SHARED_LINKER_FLAGS=--coverage >/dev/null
    fi
    cmake --build "$build" -j "$jobs"
fi
if [ "$do_test" = 1 ]; then
    find "$build" -name '*.gcda' -delete
    # A failing test still leaves its coverage; the table is printed either way.
    ctest --test-dir "$build" -j "$jobs" --output-on-failure "${ctest_args[@]}" || \
        echo "coverage.sh: some tests failed (coverage below includes what they ran)" >&2
fi

out=$build/coverage
mkdir -p "$out"
# gcov runs in parallel; --exclude-unreachable-branches drops branches gcc marks as never
# taken by construction (e.g. in assert expansions), not real decisions. The search path is
# the build directory: gcovr's default (the root) would also read the .gcda files of every
# other coverage build in the tree and merge or reject them. A source compiled twice with
# different preprocessor branches (secagg's normproof.c: the libsodium build and the SDK's
# mbedTLS-only profile) defines a function on two lines: keep both.
"$gcovr" -r "$root" --object-directory "$build" -j "$jobs" --merge-mode-functions=separate \
    --filter "$root/(core|storage|secagg|dp|coordinator|client-sdk|datacenter)/" \
    --exclude-directories "$build/CMakeFiles" --gcov-ignore-errors=source_not_found \
    --gcov-ignore-errors=no_working_dir_found \
    --exclude-unreachable-branches --gcov-ignore-parse-errors=negative_hits.warn \
    --json-summary "$out/summary.json" --json-summary-pretty \
    --html-details "$out/index.html" "$build" >/dev/null

python3 - "$out/summary.json" <<'EOF'
import json, re, sys
files = json.load(open(sys.argv[1]))["files"]
groups = [
    ("core", r"^core/src/"),
    ("storage", r"^storage/src/"),
    ("secagg", r"^secagg/src/"),
    ("dp", r"^dp/src/"),
    ("coordinator", r"^coordinator/src/"),
    ("client-sdk", r"^client-sdk/src/"),
    ("datacenter", r"^datacenter/src/"),
    ("audit verifier", r"^storage/src/(audit[^/]*|merkle)\.c$|^storage/tools/"),
]
def pct(c, t):
    return f"{100.0 * c / t:5.1f}%" if t else "   n/a"
print(f"{'component':<16}{'lines':>22}{'branches':>22}")
for name, rx in groups:
    sel = [f for f in files if re.search(rx, f["filename"])]
    lc = sum(f["line_covered"] for f in sel); lt = sum(f["line_total"] for f in sel)
    bc = sum(f["branch_covered"] for f in sel); bt = sum(f["branch_total"] for f in sel)
    print(f"{name:<16}{lc:>8}/{lt:<6} {pct(lc, lt)}{bc:>8}/{bt:<6} {pct(bc, bt)}")
print()
print("least-covered files by uncovered branches:")
rows = sorted(files, key=lambda f: f["branch_covered"] - f["branch_total"])[:12]
for f in rows:
    print(f"  {f['filename']:<44} {f['branch_total'] - f['branch_covered']:>5} uncovered of "
          f"{f['branch_total']:<5} ({pct(f['branch_covered'], f['branch_total']).strip()})")
EOF
