#!/usr/bin/env bash
# Writes docs/benchmarks.md from run_all.sh's results directory: the machine, then one
# section per benchmark that ran (its command, exit status, time, and its own output, which
# holds the in-run references and ratios), then its notes from notes/NAME.md if there are
# any. Benchmarks that did not run are listed with the command that runs them.
#   write_benchmarks_md.sh RESULTS_DIR DOC [ROOT]   (ROOT is stripped from paths)
set -uo pipefail
res=$1 doc=$2 root=${3:-/nonexistent}
notes=$(cd "$(dirname "$0")" && pwd)/notes
{
    echo "# Benchmarks"
    echo
    echo "Written by \`tests/bench/run_all.sh\` ($(date -u '+%Y-%m-%d %H:%M UTC')). Every"
    echo "benchmark measures its references in the same run (raw SQLite, OpenSSL, NumPy, PyTorch,"
    echo "Flower, ...): compare ratios within a section, not absolute times across machines or"
    echo "runs. The machine is a shared 2-core VM on which other engineers build and benchmark"
    echo "at the same time; the load average below is from the end of the run."
    echo
    echo "Run it all (about 15-20 minutes): \`bash tests/bench/run_all.sh\`; one part:"
    echo "\`bash tests/bench/run_all.sh --only dp_accountant,storage_audit\`."
    echo
    echo "## Machine"
    echo
    echo '```'
    lscpu 2>/dev/null | grep -E '^(Architecture|CPU\(s\)|Model name|Thread|Core|Socket|L2|L3|Flags)' |
        sed 's/^\(Flags: *\)\(.\{0,120\}\).*/\1\2 .../'
    free -h 2>/dev/null | head -2
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "kernel: $(uname -sr)"
    echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-unset, the library detects the CPU}"
    echo '```'
    ran=() missing=()
    for st in "$res"/*.status; do
        [ -e "$st" ] || continue
        ran+=("$(basename "$st" .status)")
    done
    for name in "${ran[@]}"; do
        read -r rc secs cmd <"$res/$name.status"
        echo
        echo "## $name"
        echo
        echo "\`${cmd//$root\//}\` — exit $rc$([ "$rc" = 124 ] && echo " (time limit)"), ${secs} s"
        echo
        echo '```'
        # Without colour codes and the Python frameworks' own log chatter (Flower, Ray).
        sed 's/\x1b\[[0-9;]*m//g' "$res/$name.txt" | grep -v '^\s*$' |
            grep -v -E '^(INFO|WARNING|DEBUG) |^\t|warnings\.warn|Warning: |INFO worker\.py|deprecated feature|in future versions of Flower' |
            grep -v "$(printf '^\t')" | tail -n 60 | sed "s|$root/||g"
        echo '```'
        # A benchmark's standing notes (full-size figures from a longer run, caveats), kept
        # in tests/bench/report/notes/NAME.md so that a regenerated document keeps them.
        if [ -f "$notes/$name.md" ]; then
            echo
            cat "$notes/$name.md"
        fi
    done
    if [ -f "$res/_steps" ]; then
        first=1
        while IFS='|' read -r name limit cmd; do
            [ -e "$res/$name.status" ] && continue
            if [ $first = 1 ]; then
                echo
                echo "## Not run in this pass"
                echo
                echo "Run with \`bash tests/bench/run_all.sh --only NAME\` (commands as run_all.sh runs them):"
                echo
                first=0
            fi
            echo "* \`$name\` (limit ${limit} s): \`$cmd\`"
        done <"$res/_steps"
    fi
} >"$doc"
echo "wrote $doc"
