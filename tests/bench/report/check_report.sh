#!/usr/bin/env bash
# Smoke check of write_benchmarks_md.sh on a made-up results directory: it must exit 0 and
# write the machine block (with the OpenBLAS core type), a section per benchmark that ran
# (command without the root, exit status, output) and the "Not run" list.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/fl_bench_report_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
res=$tmp/res
mkdir -p "$res"
printf '0 3 /root/x/build/bench_a --n 5\n' >"$res/alpha.status"
printf 'row 1\n\nrow 2\n' >"$res/alpha.txt"
printf 'alpha|60|build/bench_a --n 5\nbeta|30|build/bench_b\n' >"$res/_steps"
OPENBLAS_CORETYPE=Haswell bash "$here/write_benchmarks_md.sh" "$res" "$tmp/doc.md" /root/x \
    >"$tmp/out.txt"
doc=$tmp/doc.md
fail() { echo "FAIL: $1"; cat "$doc"; exit 1; }
grep -q '^# Benchmarks' "$doc" || fail "title"
grep -q '^OPENBLAS_CORETYPE: Haswell$' "$doc" || fail "core type line"
grep -q '^## alpha$' "$doc" || fail "section"
grep -qF '`build/bench_a --n 5` — exit 0, 3 s' "$doc" || fail "command line"
grep -q '^row 2$' "$doc" || fail "output"
grep -q '^## Not run in this pass$' "$doc" || fail "not-run list"
grep -qF '* `beta` (limit 30 s)' "$doc" || fail "not-run entry"
unset OPENBLAS_CORETYPE
bash "$here/write_benchmarks_md.sh" "$res" "$doc" /root/x >/dev/null
grep -q '^OPENBLAS_CORETYPE: unset' "$doc" || fail "unset core type"
echo "write_benchmarks_md.sh: ok"
