#!/usr/bin/env bash
# Stop 22 call 5: the code that lands (80022d1: the subsampling stem, the FastConformer kernels of
# call 3 without the act trial, the rel_attention batch rule, stop 21's tuner as it was). The
# FastConformer and Whisper tests (real tiny.en), then gpu_compare.sh without whisper.cpp (its
# figures are stop 21's, same commit 233fe1f): stapes beside PyTorch+graph in one call.
# Stage: dist/stage2.sh v14 "cuda_parakeet cuda_canary parakeet_batch cuda_whisper graphs";
# carry dist/v14 dist/au dist/f1 dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c5 B=/tmp/b5
mkdir -p $B $STAPES_CACHE /tmp/t5 /tmp/m
tar -xJf dist/v14/bins.tar.xz -C $B && tar -xJf dist/v14/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in cuda_parakeet cuda_canary parakeet_batch cuda_whisper graphs; do
  s=$(date +%s); timeout 60 $B/$t --test-threads=1 > /tmp/t5/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t5/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t5/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t5/$t.log $O/
done
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools bash tools/bench/gpu_compare.sh
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd / && rm -rf $O/cmp
date -u
