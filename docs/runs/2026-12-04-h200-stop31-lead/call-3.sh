#!/usr/bin/env bash
# Stop 31 call 3: build v46 = main 55caa70 (the landed code). Tests that need the LibriVox clips
# or real tiny.en (cuda_whisper, cuda_batch, parakeet_batch) and the FastConformer ones; jfk on
# CUDA; then gpu_compare.sh for all five synthetic models (f16 and q8, ITERS=10) with
# torch_anchor.py beside in the same lease. Carry dist/v46 dist/au2 dist/f1/tools
# dist/tiny.bin.xz dist/run31.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v46/bins.tar.xz -C $B && tar -xJf dist/v46/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in cuda_whisper cuda_batch parakeet_batch cuda_parakeet cuda_canary ln_pair; do
  s=$(date +%s); timeout 240 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
grep -E "^test " /tmp/t2/cuda_whisper.log | head -10
for l in f16 q8; do echo "jfk $l: $($B/stapes transcribe samples/jfk.wav --model /tmp/m/tiny.bin --device cuda --lane $l 2>/tmp/t2/tr.err | tr '\n' ' ')"; tail -1 /tmp/t2/tr.err; done
date -u
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools bash tools/bench/gpu_compare.sh > $O/cmp-table.txt 2>&1
cat $O/cmp-table.txt | head -60
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
