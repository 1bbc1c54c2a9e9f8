#!/bin/sh
# Kill-and-resume: a job killed (SIGKILL) between checkpoints and restarted with --resume
# must end with exactly the same model file as an uninterrupted run.
#   kill_resume.sh <flotilla-train> <mpiexec> <np> "<grid options>"
set -eu
train=$1; mpiexec=$2; np=$3; grid=$4
dir=$(mktemp -d /tmp/fl_dc_kill_XXXXXX)
trap 'rm -rf "$dir"' EXIT
run() { "$mpiexec" --oversubscribe -np "$np" "$train" --limit 300 --layers 784,32,10 \
          --batch 32 --steps 10 --ckpt-every 3 --log-every 0 $grid "$@"; }

run --ckpt "$dir/a" --ckpt-keep 2 --out "$dir/full.safetensors"
# retention: checkpoints at steps 3, 6 and 9; the two newest stay
kept=$(cd "$dir/a" && ls -d step-* | tr '\n' ' ')
[ "$kept" = "step-00000006 step-00000009 " ] || { echo "FAIL: --ckpt-keep 2 left: $kept"; exit 1; }
if run --ckpt "$dir/b" --kill-at 7 >"$dir/killed.log" 2>&1; then
  echo "FAIL: the job was not killed"; exit 1
fi
grep -q '^step-00000006$' "$dir/b/latest" || { echo "FAIL: latest is $(cat "$dir/b/latest")"; exit 1; }
# debris of a checkpoint that was being written when the job died
mkdir -p "$dir/b/step-00000009" && echo garbage >"$dir/b/step-00000009/rank-00000.safetensors.tmp"
run --ckpt "$dir/b" --resume --out "$dir/resumed.safetensors" | grep -q 'resumed from .* at step 6'
cmp "$dir/full.safetensors" "$dir/resumed.safetensors"
echo "kill-and-resume ($np ranks, $grid): identical final model"
