#!/bin/sh
# Stripped size of libflotilla-client-sdk.so and of its dynamic dependencies.
#
# usage: lib_size.sh [--json] [PATH/TO/libflotilla-client-sdk.so]
# Without a path, the newest build*/client-sdk/ copy of this checkout is used. The library
# is stripped into a temporary file (strip --strip-unneeded: what an app would ship); the
# direct dependencies come from readelf -d (DT_NEEDED), their files and the full closure from
# ldd, and each dependency's stripped size is measured the same way. The C library and the
# dynamic loader are listed but left out of the "extra" total (every app has them).
set -eu
json=0
lib=""
for a in "$@"; do
  case "$a" in
    --json) json=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) lib="$a" ;;
  esac
done
root=$(cd "$(dirname "$0")/../../.." && pwd)
if [ -z "$lib" ]; then
  lib=$(ls -t "$root"/build*/client-sdk/libflotilla-client-sdk.so "$root"/build/*/client-sdk/libflotilla-client-sdk.so 2>/dev/null | head -n 1 || true)
fi
[ -n "$lib" ] && [ -f "$lib" ] || { echo "lib_size.sh: libflotilla-client-sdk.so not found (pass its path)" >&2; exit 1; }
lib=$(readlink -f "$lib")
for t in readelf ldd strip; do
  command -v $t >/dev/null 2>&1 || { echo "lib_size.sh: $t missing" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stripped() { # file -> stripped size in bytes
  cp "$1" "$tmp/s" && strip --strip-unneeded "$tmp/s" 2>/dev/null && wc -c < "$tmp/s" | tr -d ' '
}

raw=$(wc -c < "$lib" | tr -d ' ')
lib_stripped=$(stripped "$lib")
exports=$(readelf --dyn-syms -W "$lib" | awk '$5 == "GLOBAL" && $7 != "UND" {print $8}' | grep -c '^fl_' || true)
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
ldd "$lib" | awk '/=>/ && $3 ~ /^\// {print $1, $3} !/=>/ && $1 ~ /^\// {print $1, $1}' > "$tmp/closure"

is_base() { case "$(basename "$1")" in libc.so*|ld-linux*|libm.so*|libpthread.so*|libdl.so*|librt.so*|linux-vdso*) return 0 ;; esac; return 1; }

extra_direct=0
extra_all=0
rows=""
while read -r name path; do
  size=$(stripped "$path")
  direct=false
  for n in $needed; do [ "$n" = "$name" ] && direct=true; done
  base=false
  if is_base "$name"; then base=true; else
    extra_all=$((extra_all + size))
    $direct && extra_direct=$((extra_direct + size))
  fi
  rows="$rows$name $path $size $direct $base
"
done < "$tmp/closure"

if [ $json = 1 ]; then
  printf '{"bench":"client_lib_size","library":"%s","file_bytes":%s,"stripped_bytes":%s,"exported_fl_symbols":%s,' \
    "$lib" "$raw" "$lib_stripped" "$exports"
  printf '"needed":['
  first=1
  for n in $needed; do [ $first = 1 ] || printf ','; printf '"%s"' "$n"; first=0; done
  printf '],"dependencies":['
  first=1
  printf '%s' "$rows" | while read -r name path size direct base; do
    [ -n "$name" ] || continue
    [ $first = 1 ] || printf ','
    printf '{"name":"%s","path":"%s","stripped_bytes":%s,"direct":%s,"libc_or_loader":%s}' \
      "$name" "$path" "$size" "$direct" "$base"
    first=0
  done
  printf '],"direct_deps_stripped_bytes":%s,"all_deps_stripped_bytes":%s,"total_with_all_deps_bytes":%s}\n' \
    "$extra_direct" "$extra_all" $((lib_stripped + extra_all))
else
  echo "libflotilla-client-sdk.so: $lib"
  echo "  file $raw B, stripped $lib_stripped B, $exports exported fl_ symbols"
  echo "  DT_NEEDED: $(echo $needed)"
  echo "  dependency closure (ldd), stripped sizes:"
  printf '%s' "$rows" | while read -r name path size direct base; do
    [ -n "$name" ] || continue
    tag=""; $direct && tag=" [direct]"; $base && tag="$tag [libc/loader, not counted]"
    printf '    %-28s %10s B%s\n' "$name" "$size" "$tag"
  done
  echo "  direct deps (without libc/loader): $extra_direct B; whole closure: $extra_all B"
  echo "  SDK + whole closure: $((lib_stripped + extra_all)) B"
fi
