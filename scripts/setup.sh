#!/usr/bin/env bash
# Installs the Debian packages Flotilla needs. Idempotent: only missing packages are
# installed, and `apt-get update` runs once (only when something is missing).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang llvm
  libsodium-dev libssl-dev openssl libmbedtls-dev libgcrypt20-dev
  libsqlite3-dev sqlite3 libmicrohttpd-dev libjansson-dev zlib1g-dev
  libcurl4-openssl-dev libcmocka-dev libopenblas-dev libopenblas0-serial
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist
)
# Extra packages used only by tests (--tests) and benchmarks (--bench).
TEST_PKGS=(python3 valgrind prometheus chromium slowhttptest nftables)
BENCH_PKGS=(wrk)

want=("${PKGS[@]}")
for a in "$@"; do
  case "$a" in
    --tests) want+=("${TEST_PKGS[@]}") ;;
    --bench) want+=("${TEST_PKGS[@]}" "${BENCH_PKGS[@]}") ;;
    *) echo "setup.sh: unknown option '$a' (use --tests or --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  # python3 may come from pyenv rather than Debian; accept any python3 on PATH.
  if [ "$p" = python3 ] && command -v python3 >/dev/null 2>&1; then continue; fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup.sh: system packages ready"
