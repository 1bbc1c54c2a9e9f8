#!/bin/sh
# flotilla-train against the model registry: publish a version, then train from it on two
# ranks and publish a child whose parent is the first version.
#   registry.sh <flotilla-train> <mpiexec>
set -eu
train=$1; mpiexec=$2
dir=$(mktemp -d /tmp/fl_dc_reg_XXXXXX)
trap 'rm -rf "$dir"' EXIT
common="--limit 200 --layers 784,16,10 --batch 20 --steps 3 --log-every 0 --registry $dir/store.db"
"$train" $common --publish --tag dc/test --out "$dir/v1.safetensors" | tee "$dir/a.log"
grep -q '^published version 1 (parent 0' "$dir/a.log"
"$mpiexec" --oversubscribe -np 2 "$train" $common --dp 2 --from dc/test --publish --tag dc/test \
  | tee "$dir/b.log"
grep -q '^published version 2 (parent 1' "$dir/b.log"
echo "registry round trip with lineage: ok"
