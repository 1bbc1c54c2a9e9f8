#!/usr/bin/env bash
# scripts/openblas-coretype.sh, sourced as the run scripts do (under set -euo pipefail).
#   test_openblas_coretype.sh SOURCE_DIR                 fake cpuinfo files (FL_CPUINFO)
#   test_openblas_coretype.sh SOURCE_DIR --lib CORENAME  the real library on this CPU
# Without --lib: AVX-512 flags give SkylakeX, AVX2+FMA give Haswell, SSE only, AVX2 without
# FMA, a missing file, a file without flags and a non-x86 machine give nothing; a user's
# OPENBLAS_CORETYPE is kept; FL_OPENBLAS_CORETYPE=off does nothing and an explicit value is
# exported; the value reaches child processes; one line on stderr, nothing on stdout, and the
# caller goes on. With --lib CORENAME (tests/scripts/openblas_corename.c): the type the
# script picks for this machine, and Haswell below SkylakeX, are what openblas_get_corename()
# reports once set, after a checked sgemm on those kernels. Exit 77 (skip) when CORENAME is
# empty (no OpenBLAS in the build) or the script picks nothing here.
# shellcheck disable=SC1090,SC2030,SC2031,SC2181 # sources a run-time path in subshells; $?
# is read after $(...) on purpose: in an || list bash ignores set -e inside the sourcing.
set -uo pipefail
src=$1
shift
script=$src/scripts/openblas-coretype.sh
work=$(mktemp -d /tmp/flotilla-blas-coretype-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -r "$script" ] || fail "$script missing"

# Sources the script in a clean subshell with the given VAR=VALUE settings exported and
# prints what a child process then sees as OPENBLAS_CORETYPE ("unset" when it has none).
# The script's stdout and stderr go to $work/out and $work/err.
pick() {
    (
        unset OPENBLAS_CORETYPE FL_OPENBLAS_CORETYPE FL_CPUINFO FL_CPU_ARCH
        for kv in "$@"; do
            export "${kv?}"
        done
        set -euo pipefail
        . "$script" >"$work/out" 2>"$work/err"
        bash -c 'echo "${OPENBLAS_CORETYPE-unset}"'
    )
}

# expect WANT VAR=VALUE...: pick must give WANT, print one line on stderr and none on stdout.
expect() {
    local want=$1 got
    shift
    local rc
    # Not in an || list: bash would ignore set -e inside pick then.
    got=$(pick "$@")
    rc=$?
    [ "$rc" -eq 0 ] || fail "sourcing with $* made the caller (set -euo pipefail) exit $rc"
    [ "$got" = "$want" ] || fail "with $*: OPENBLAS_CORETYPE '$got', expected '$want'"
    [ ! -s "$work/out" ] || fail "with $*: wrote to stdout: $(cat "$work/out")"
    [ "$(wc -l <"$work/err")" -eq 1 ] || fail "with $*: stderr is not one line: $(cat "$work/err")"
    echo "ok   $want <- $* : $(cat "$work/err")"
}

# fake_cpuinfo NAME FLAGS: a two-processor x86 cpuinfo as Linux writes it.
fake_cpuinfo() {
    local p
    for p in 0 1; do
        printf 'processor\t: %s\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n' "$p"
        printf 'model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: %s\n' "$2"
        printf 'vmx flags\t: vnmi avx512f avx2 fma\nbugs\t\t: spectre_v1\n\n'
    done >"$work/$1"
}

if [ "${1:-}" = --lib ]; then
    corename=${2:-}
    if [ -z "$corename" ]; then
        echo "no OpenBLAS in this build: skipped"
        exit 77
    fi
    [ -x "$corename" ] || fail "$corename was not built"
    mine=$(pick)
    [ $? -eq 0 ] || fail "sourcing the script failed"
    echo "script: $(cat "$work/err")"
    if [ "$mine" = unset ]; then
        echo "the script picks no type on this machine: skipped"
        exit 77
    fi
    dflt=$(env -u OPENBLAS_CORETYPE "$corename") || fail "corename failed without OPENBLAS_CORETYPE"
    echo "OpenBLAS's own choice here: $dflt"
    types=$mine
    [ "$mine" = SkylakeX ] && types="SkylakeX Haswell"
    for t in $types; do
        got=$(OPENBLAS_CORETYPE=$t "$corename" 2>"$work/blas-err") ||
            fail "OPENBLAS_CORETYPE=$t: corename failed: $(cat "$work/blas-err")"
        [ "${got,,}" = "${t,,}" ] ||
            fail "OPENBLAS_CORETYPE=$t: openblas_get_corename() says '$got' $(cat "$work/blas-err")"
        echo "ok   OPENBLAS_CORETYPE=$t: openblas_get_corename() = $got, sgemm checked"
    done
    echo "scripts_openblas_coretype_lib: passed"
    exit 0
fi

sse="fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx lm constant_tsc pni ssse3 cx16 sse4_1 sse4_2 popcnt hypervisor"
avx2="$sse avx f16c fma avx2 bmi1 bmi2"
avx512="$avx2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni"
fake_cpuinfo avx512 "$avx512"
fake_cpuinfo avx2 "$avx2"
fake_cpuinfo sse "$sse"
fake_cpuinfo avx2-nofma "${sse} avx avx2"
# AVX-512 without BW/VL/DQ (Knights Landing), and words that only contain the flag names.
fake_cpuinfo knl "$avx2 avx512f avx512cd avx512er avx512pf"
fake_cpuinfo lookalike "$sse avx avx2x fmax avx512fx avx512bwx avx512vlx avx512dqx avx512_fp16"
printf 'processor\t: 0\nvendor_id\t: GenuineIntel\n' >"$work/noflags"
printf 'flags\t\t: %s' "$avx512" >"$work/no-newline"
x86=FL_CPU_ARCH=x86_64

echo "-- picks from the CPU flags"
expect SkylakeX FL_CPUINFO="$work/avx512" $x86
expect Haswell FL_CPUINFO="$work/avx2" $x86
expect unset FL_CPUINFO="$work/sse" $x86
expect unset FL_CPUINFO="$work/avx2-nofma" $x86
expect Haswell FL_CPUINFO="$work/knl" $x86
expect unset FL_CPUINFO="$work/lookalike" $x86
expect SkylakeX FL_CPUINFO="$work/no-newline" $x86
expect SkylakeX FL_CPUINFO="$work/avx512" $x86 FL_OPENBLAS_CORETYPE=auto
expect SkylakeX FL_CPUINFO="$work/avx512" $x86 FL_OPENBLAS_CORETYPE=
echo "-- nothing to read"
expect unset FL_CPUINFO="$work/does-not-exist" $x86
expect unset FL_CPUINFO="$work/noflags" $x86
expect unset FL_CPUINFO=/dev/null $x86
echo "-- other machines"
expect unset FL_CPUINFO="$work/avx512" FL_CPU_ARCH=aarch64
expect unset FL_CPUINFO="$work/avx512" FL_CPU_ARCH=i686
echo "-- the user's choice"
expect Nehalem FL_CPUINFO="$work/avx512" $x86 OPENBLAS_CORETYPE=Nehalem
expect Prescott FL_CPUINFO="$work/avx512" $x86 OPENBLAS_CORETYPE=Prescott FL_OPENBLAS_CORETYPE=off
expect Zen FL_CPUINFO="$work/avx2" $x86 OPENBLAS_CORETYPE=Zen FL_OPENBLAS_CORETYPE=SkylakeX
expect unset FL_CPUINFO="$work/avx512" $x86 FL_OPENBLAS_CORETYPE=off
expect Haswell FL_CPUINFO="$work/avx512" $x86 FL_OPENBLAS_CORETYPE=Haswell
expect Cooperlake FL_CPUINFO="$work/sse" FL_CPU_ARCH=aarch64 FL_OPENBLAS_CORETYPE=Cooperlake
expect SkylakeX FL_CPUINFO="$work/avx512" $x86 OPENBLAS_CORETYPE=

echo "-- the caller's shell"
# Sourced twice (a run script sourcing it after another): the first value is kept.
got=$(unset OPENBLAS_CORETYPE FL_OPENBLAS_CORETYPE
      export FL_CPUINFO="$work/avx2" FL_CPU_ARCH=x86_64
      set -euo pipefail
      . "$script" 2>/dev/null
      export FL_CPUINFO="$work/avx512"
      . "$script" 2>/dev/null
      echo "$OPENBLAS_CORETYPE")
[ $? -eq 0 ] || fail "sourcing twice failed"
[ "$got" = Haswell ] || fail "sourced twice: '$got', expected the first value Haswell"
# Leaves no function or variable behind other than OPENBLAS_CORETYPE (names compared).
leftover=$(unset OPENBLAS_CORETYPE
           export FL_CPUINFO="$work/avx512" FL_CPU_ARCH=x86_64
           before=$(compgen -v; declare -F)
           set -euo pipefail
           . "$script" 2>/dev/null
           after=$(compgen -v; declare -F)
           diff <(echo "$before" | grep -v -x -E 'before|BASH_.*|_') \
                <(echo "$after" | grep -v -x -E 'before|after|BASH_.*|_') | grep '^[<>]' || true)
[ "$leftover" = '> OPENBLAS_CORETYPE' ] || fail "the script left behind: $leftover"
echo "ok   sourced twice keeps the first value; only OPENBLAS_CORETYPE is left behind"
echo "scripts_openblas_coretype: passed"
