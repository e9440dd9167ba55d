#!/usr/bin/env bash
# Stop 21 call 6: the code that lands (call 5 traced calls 3-4's slowdown to build v7; its L1
# prefetch of the norms' gamma/beta is reverted, and the tuner times every shape's candidates in a
# CUDA graph, as build v6 did, without split-K candidates). Real tiny.en and parakeet tests, then
# gpu_compare.sh without whisper.cpp (no time left to build it): stapes beside PyTorch+graph.
# Stage: dist/stage2.sh v8 "cuda_whisper cuda_parakeet graphs"; carry dist/v8 dist/au dist/f1
# dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c6 B=/tmp/b6
mkdir -p $B $STAPES_CACHE /tmp/t6 /tmp/m
tar -xJf dist/v8/bins.tar.xz -C $B && tar -xJf dist/v8/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in cuda_whisper cuda_parakeet graphs; do
  s=$(date +%s); timeout 60 $B/$t --test-threads=1 > /tmp/t6/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t6/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t6/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t6/$t.log $O/
done
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools bash tools/bench/gpu_compare.sh
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd / && rm -rf $O/cmp
date -u
