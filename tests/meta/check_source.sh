#!/usr/bin/env bash
# check_source.sh ROOT: the mechanical part of docs' house style (STYLE.md rule 20) over every
# C and CUDA source the project owns (components, examples, tests):
#   - no call of strcpy, sprintf, strtok, atoi, gets or strcat (unbounded or error-blind;
#     snprintf, strtol and memcpy with a checked length are the replacements);
#   - no line longer than 100 characters (the .clang-format column limit);
#   - in the libraries (<component>/src), no abort, exit, printf-to-the-console or signal call
#     (STYLE.md rule 8: errors go back as fl_status, logs through the log callback).
# Prints each offending line as FILE:LINE: reason and exits 1 if there is any.
set -uo pipefail
root=${1:?usage: check_source.sh ROOT}
cd "$root" || exit 2
export LC_ALL=C.UTF-8 # count characters, not bytes

mapfile -d '' files < <(find core storage secagg dp client-sdk coordinator datacenter \
    examples tests -path '*/corpus' -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
[ "${#files[@]}" -gt 100 ] || { echo "only ${#files[@]} sources found under $root" >&2; exit 2; }

bad=0
banned='(^|[^A-Za-z0-9_.>])(std::)?(strcpy|sprintf|strtok|atoi|gets|strcat)[[:space:]]*\('
if grep -nHE "$banned" "${files[@]}" | sed 's/$/  <- banned function/'; then bad=1; fi
if grep -nHE '^.{101,}$' "${files[@]}" | cut -c1-160 | sed 's/$/  <- over 100 columns/'; then
    bad=1
fi
mapfile -d '' libs < <(find core/src storage/src secagg/src dp/src client-sdk/src \
    coordinator/src datacenter/src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) \
    -print0 | sort -z)
[ "${#libs[@]}" -gt 20 ] || { echo "only ${#libs[@]} library sources found" >&2; exit 2; }
lib_banned='(^|[^A-Za-z0-9_.>])(abort|exit|_Exit|quick_exit|printf|puts|putchar|perror|signal|'
lib_banned+='raise|sigaction)[[:space:]]*\(|fprintf[[:space:]]*\([[:space:]]*(stdout|stderr)'
# Lines that are comment text ("... the signal (x)") are not calls.
if grep -nHE "$lib_banned" "${libs[@]}" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(\*|/\*|//)' |
    sed 's/$/  <- no abort\/exit\/console output\/signals in a library/'; then
    bad=1
fi
[ "$bad" -eq 0 ] && echo "ok: ${#files[@]} sources, no banned calls, none over 100 columns;" \
    "${#libs[@]} library sources without abort/exit/console output/signals"
exit "$bad"
