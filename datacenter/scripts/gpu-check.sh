#!/usr/bin/env bash
# GPU check of the datacenter trainer, in one call of at most ~8 minutes on one GPU:
#   1. builds the datacenter library + tests/datacenter/gpu/gpu_check.c with nvcc/gcc
#      directly (the GPU machine may lack the SDK's other dependencies, so no CMake);
#   2. runs gpu_check: CUDA vs CPU backend (FP32 1e-5 L2 / 1e-4 max; TF32, BF16 loose),
#      dumps a 5-step AdamW run, times training steps and the same GEMMs via cuBLAS alone;
#   3. runs tests/datacenter/gpu/torch_ref.py: replays the 5 steps in PyTorch (FP32) and
#      compares, and times PyTorch eager steps of the same model and batch;
#   4. if mpicc/mpirun are there, a 1-rank NCCL smoke run of flotilla-train's code path.
# Results: $OUT/gpu-check.log (and stdout); paste the TIME/CHECK lines into docs/results.md.
# Usage: datacenter/scripts/gpu-check.sh        (from anywhere; $OUT optional)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/fl-gpu-check}
B=/tmp/fl-gpu-build
mkdir -p "$OUT" "$B"
LOG=$OUT/gpu-check.log
exec > >(tee "$LOG") 2>&1
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
command -v "$NVCC" >/dev/null || NVCC=nvcc
echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$NVCC" --version | tail -1

# ---- dependencies that may be missing on the GPU image ----
CFLAGS="-std=c11 -O2 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Wall -Wextra -Wno-unused-parameter"
INC="-I$ROOT/core/include -I$ROOT/core/src -I$ROOT/datacenter/include -I$ROOT/datacenter/src -I$CUDA/include"
LIBS="-L$CUDA/lib64 -lcublas -lcudart -lstdc++ -lm -lpthread -ldl"
mkdir -p "$B/shim"
if ! echo '#include <zlib.h>' | gcc -E - >/dev/null 2>&1; then
  echo "note: zlib.h missing: using a declaration shim against libz.so.1"
  cat >"$B/shim/zlib.h" <<'H'
typedef struct gzFile_s *gzFile;
gzFile gzopen(const char *path, const char *mode);
int gzread(gzFile file, void *buf, unsigned len);
int gzclose(gzFile file);
const char *gzerror(gzFile file, int *errnum);
H
  INC="$INC -I$B/shim"
  ZLIB=$(ls /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib64/libz.so.1 2>/dev/null | head -1)
  LIBS="$LIBS ${ZLIB:-$(python3 -c 'import zlib,os;print(zlib.__file__)' 2>/dev/null)}"
else
  LIBS="$LIBS -lz"
fi
CORE="alloc.c err.c status.c memzero.c version.c"
if echo '#include <jansson.h>' | gcc -E - >/dev/null 2>&1; then
  for f in "$ROOT"/core/src/tensor.c "$ROOT"/core/src/safetensors_*.c; do CORE="$CORE $(basename "$f")"; done
  LIBS="$LIBS -ljansson"
else
  echo "note: jansson missing: safetensors calls are stubbed (gpu_check does not use them)"
  CORE="$CORE"; EXTRA_STUB=1
fi
if [ "${EXTRA_STUB:-0}" = 1 ]; then
  cat >"$B/st_stub.c" <<'C'
#include "flotilla/tensor.h"
fl_status fl_safetensors_create(fl_safetensors **o, const fl_allocator *a) { (void)a; *o = 0; return FL_ERR_UNSUPPORTED; }
void fl_safetensors_destroy(fl_safetensors *s) { (void)s; }
fl_status fl_safetensors_parse(fl_safetensors *s, const void *b, size_t l) { (void)s; (void)b; (void)l; return FL_ERR_UNSUPPORTED; }
fl_status fl_safetensors_load(fl_safetensors *s, const char *p) { (void)s; (void)p; return FL_ERR_UNSUPPORTED; }
const char *fl_safetensors_errmsg(const fl_safetensors *s) { (void)s; return "stub"; }
fl_status fl_safetensors_find(const fl_safetensors *s, fl_tensor_view *o, const char *n) { (void)s; (void)o; (void)n; return FL_ERR_UNSUPPORTED; }
const char *fl_safetensors_metadata_get(const fl_safetensors *s, const char *k) { (void)s; (void)k; return 0; }
fl_status fl_safetensors_writer_create(fl_safetensors_writer **o, const fl_allocator *a) { (void)a; *o = 0; return FL_ERR_UNSUPPORTED; }
void fl_safetensors_writer_destroy(fl_safetensors_writer *w) { (void)w; }
const char *fl_safetensors_writer_errmsg(const fl_safetensors_writer *w) { (void)w; return "stub"; }
fl_status fl_safetensors_writer_add(fl_safetensors_writer *w, const char *n, fl_dtype d, size_t nd, const uint64_t *s, const void *p, size_t b) { (void)w; (void)n; (void)d; (void)nd; (void)s; (void)p; (void)b; return FL_ERR_UNSUPPORTED; }
fl_status fl_safetensors_writer_set_metadata(fl_safetensors_writer *w, const char *k, const char *v) { (void)w; (void)k; (void)v; return FL_ERR_UNSUPPORTED; }
fl_status fl_safetensors_writer_write_file(fl_safetensors_writer *w, const char *p) { (void)w; (void)p; return FL_ERR_UNSUPPORTED; }
C
fi

# ---- build (2 nvcc jobs in parallel with the C files) ----
set -e
t0=$(date +%s)
DCSRC="comm.c ops_cpu.c data.c model.c train.c ckpt.c"
DEFS="-DFL_DC_WITH_CUDA -DFL_BUILDING_LIBRARY"
"$NVCC" -O2 -std=c++17 -arch=sm_90 $DEFS $INC -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter \
  -c "$ROOT/datacenter/src/ops_cuda.cu" -o "$B/ops_cuda.o" &
pids=$!
OBJS="$B/ops_cuda.o"
for f in $CORE; do gcc $CFLAGS $INC -c "$ROOT/core/src/$f" -o "$B/core_$f.o" & pids="$pids $!"; OBJS="$OBJS $B/core_$f.o"; done
for f in $DCSRC; do gcc $CFLAGS $DEFS $INC -c "$ROOT/datacenter/src/$f" -o "$B/dc_$f.o" & pids="$pids $!"; OBJS="$OBJS $B/dc_$f.o"; done
if [ "${EXTRA_STUB:-0}" = 1 ]; then gcc $CFLAGS $INC -c "$B/st_stub.c" -o "$B/st_stub.o"; OBJS="$OBJS $B/st_stub.o"; fi
for p in $pids; do wait "$p"; done   # not a bare wait: the tee above is a child too
gcc $CFLAGS $DEFS $INC "$ROOT/tests/datacenter/gpu/gpu_check.c" $OBJS $LIBS -o "$B/gpu_check"
echo "== built in $(( $(date +%s) - t0 )) s"
set +e

# ---- run ----
status=0
mkdir -p "$OUT/dump"
timeout 240 "$B/gpu_check" "$OUT/dump" || status=1
PYTHONUNBUFFERED=1 timeout 180 python3 "$ROOT/tests/datacenter/gpu/torch_ref.py" "$OUT/dump" || status=1
rm -f "$OUT"/dump/x.bin   # large; the rest comes back for inspection

# ---- optional: the NCCL communicator through the MPI bootstrap, 1 rank ----
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  echo "== NCCL path (mpirun -np 1)"
  MDEFS="$DEFS -DFL_DC_WITH_MPI"
  MOBJS=$(echo $OBJS | tr ' ' '\n' | grep -v -e dc_comm.c.o -e dc_train.c.o | tr '\n' ' ')
  for f in comm.c comm_mpi.c comm_nccl.c train.c; do
    mpicc $CFLAGS $MDEFS $INC -c "$ROOT/datacenter/src/$f" -o "$B/mpi_$f.o" || status=1
    MOBJS="$MOBJS $B/mpi_$f.o"
  done
  mpicc $CFLAGS $MDEFS $INC "$ROOT/tests/datacenter/gpu/gpu_check.c" $MOBJS $LIBS -lnccl \
    -o "$B/gpu_check_mpi" &&
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 \
    mpirun -np 1 "$B/gpu_check_mpi" "$OUT/dump" --nccl || status=1
else
  echo "== no MPI on this machine: the NCCL communicator is not exercised (compile-checked in CI)"
fi
echo "== gpu-check: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
