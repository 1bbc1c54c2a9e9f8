# shellcheck shell=bash
# Sourced, not run:   . scripts/openblas-coretype.sh
#
# Picks OpenBLAS's kernels for the processes this shell starts next. Debian 12's OpenBLAS
# 0.3.21 chooses them by CPU model when it is loaded and does not know recent Xeons: on the
# build box (AVX2 + AVX-512) it says "Prescott" (openblas_get_corename()) and runs SSE3
# kernels, 2-3x slower on sgemm (docs/client-sdk.md, "OpenBLAS kernel choice"). Only the
# environment before the process starts can change that (OPENBLAS_CORETYPE), so the
# project's run scripts source this file. From the CPU flags in /proc/cpuinfo it exports:
#   avx512f avx512bw avx512vl avx512dq  -> OPENBLAS_CORETYPE=SkylakeX
#   avx2 fma                            -> OPENBLAS_CORETYPE=Haswell
#   otherwise                           -> nothing (OpenBLAS's own choice)
# on x86_64 only (the flags are what the kernel enabled, so a type is never picked whose
# instructions would fault). 0.3.21 accepts both names (case-insensitive); an unknown name
# makes it print "Core not found" and fall back to its own detection.
#
# Never overrides an OPENBLAS_CORETYPE already set (non-empty) in the environment.
# FL_OPENBLAS_CORETYPE=auto (default) as above; off: do nothing; any other value: export
# it as OPENBLAS_CORETYPE. Prints one line to stderr saying what it did and why. Never fails
# and is safe under set -euo pipefail; defines nothing but the exported variable.
# Test hooks: FL_CPUINFO (a cpuinfo file to read instead of /proc/cpuinfo) and FL_CPU_ARCH
# (instead of `uname -m`); tests/scripts/test_openblas_coretype.sh uses them.
#
# Not sourced by scripts/test.sh (the tests also run on OpenBLAS's default kernels) nor by
# scripts/valgrind.sh (valgrind does not emulate AVX-512).

fl__openblas_coretype() {
    local mode=${FL_OPENBLAS_CORETYPE:-auto}
    local cpuinfo=${FL_CPUINFO:-/proc/cpuinfo}
    local arch=${FL_CPU_ARCH:-} line="" flags="" f pick="" why="" have=""

    if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
        echo "openblas-coretype: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE kept (already set)" >&2
        return 0
    fi
    case "$mode" in
        off)
            echo "openblas-coretype: OPENBLAS_CORETYPE left unset (FL_OPENBLAS_CORETYPE=off)" >&2
            return 0 ;;
        auto) ;;
        *)
            export OPENBLAS_CORETYPE="$mode"
            echo "openblas-coretype: OPENBLAS_CORETYPE=$mode (from FL_OPENBLAS_CORETYPE)" >&2
            return 0 ;;
    esac

    if [ -z "$arch" ]; then
        arch=$(uname -m 2>/dev/null) || arch=""
    fi
    if [ "$arch" != x86_64 ]; then
        echo "openblas-coretype: OPENBLAS_CORETYPE left unset (machine '${arch:-unknown}'," \
             "not x86_64)" >&2
        return 0
    fi
    if [ ! -r "$cpuinfo" ]; then
        echo "openblas-coretype: OPENBLAS_CORETYPE left unset ($cpuinfo not readable)" >&2
        return 0
    fi
    # The first "flags : ..." line; every core of one machine reports the same set.
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in
            flags*:*) flags=" ${line#*:} "; break ;;
        esac
    done <"$cpuinfo"
    if [ -z "$flags" ]; then
        echo "openblas-coretype: OPENBLAS_CORETYPE left unset (no flags line in $cpuinfo)" >&2
        return 0
    fi
    flags=${flags//$'\t'/ }
    for f in avx512f avx512bw avx512vl avx512dq avx2 fma; do
        case "$flags" in
            *" $f "*) have="$have $f" ;;
        esac
    done
    case "$have" in
        *avx512f*avx512bw*avx512vl*avx512dq*avx2*fma)
            pick=SkylakeX why="avx512f/bw/vl/dq avx2 fma" ;;
        *avx2*fma)
            pick=Haswell why="avx2 fma, not all of avx512f/bw/vl/dq" ;;
    esac
    if [ -z "$pick" ]; then
        echo "openblas-coretype: OPENBLAS_CORETYPE left unset (CPU flags lack avx2+fma:" \
             "OpenBLAS picks its own kernels)" >&2
        return 0
    fi
    export OPENBLAS_CORETYPE="$pick"
    echo "openblas-coretype: OPENBLAS_CORETYPE=$pick (CPU flags $why;" \
         "FL_OPENBLAS_CORETYPE=off to opt out)" >&2
    return 0
}
fl__openblas_coretype || true
unset -f fl__openblas_coretype
