#!/usr/bin/env bash
# Stop 38 call 3: the Whisper GPU tests on the real tiny.en weights (q8_0 ggml file,
# STAPES_GPU_MODEL) at main ece62ed, which calls 1-2 could not carry beside their builds:
# cuda_whisper (f16 ids = CPU f32, q8 text, step graphs) and cuda_batch (batched = single).
# Carry dist/v76.tar.xz dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p $STAPES_CACHE /tmp/t2 /tmp/m /tmp/x
date -u
tar -xJf dist/v76.tar.xz -C /tmp/x && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for n in cuda_whisper cuda_batch; do
  s=$(date +%s); timeout 150 /tmp/x/v76/$n --test-threads=1 --nocapture > /tmp/t2/$n.log 2>&1; rc=$?
  echo "=== $n rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$n.log | tail -1)"
  grep -E "panicked|SKIPPED|rel L2|text|ids" /tmp/t2/$n.log | head -16; cp /tmp/t2/$n.log $O/
done
date -u
