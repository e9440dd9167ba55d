#!/usr/bin/env bash
# Stop 34 call 4: v61's other CUDA tests with FP8 as the q8 default (FastConformer chains, ops,
# graphs, norms), then ncu of one turbo q8 window. Carry dist/v61a dist/v61b dist/au dist/run34.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b61
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v61b/bins.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout ${T:-150} $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|failed" -A3 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in graphs f16_activations ops linear_add_norms ln_pair conformer_ops cuda_parakeet cuda_canary parakeet_batch; do t $x; done
T=200 t pdl
date -u
# ncu: one turbo q8 (FP8) window, every kernel's duration (v61a's stapes)
mkdir -p /tmp/ba && tar -xJf dist/v61a/bins.tar.xz -C /tmp/ba stapes
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-count 2500 \
  /tmp/ba/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane q8 --iters 2 --batch 1 --decode-tokens 2 > /tmp/t2/ncu.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? rows $(grep -c gpu__time_duration /tmp/t2/ncu.csv)"; tail -3 /tmp/t2/ncu.err
xz -c /tmp/t2/ncu.csv > $O/ncu-turbo-q8.csv.xz
date -u
