#!/usr/bin/env bash
# Stop 34 call 6: v62 (FP8 q8 lane, producers writing e4m3) other CUDA tests: FastConformer chains,
# graphs, norms), then ncu of one turbo q8 window. Carry dist/v61a dist/v62b dist/au dist/run34.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b62
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v62b/bins.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout ${T:-150} $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|failed" -A3 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in graphs f16_activations ops linear_add_norms ln_pair conformer_ops cuda_parakeet cuda_canary parakeet_batch; do t $x; done

date -u
date -u
