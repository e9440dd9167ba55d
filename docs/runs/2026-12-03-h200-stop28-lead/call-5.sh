#!/usr/bin/env bash
# Stop 28 call 5: build v32 = 5cb1301, the device turn made the model's (a round's encode takes
# it too); call 4 ran c4da795's turn per batch. cuda_batch with real tiny.en q8_0 ggml, 32 inputs
# (batched results must equal transcribe alone), against v30 (no turns), two alternating rounds.
# Carry dist/v32 dist/v30b dist/au2 dist/tiny.bin.xz dist/run28.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p /tmp/b30 /tmp/b32 $STAPES_CACHE /tmp/m
date -u
tar -xJf dist/v30b/bins.tar.xz -C /tmp/b30 && tar -xJf dist/v32/bins.tar.xz -C /tmp/b32 && tar -xJf dist/v32/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  for v in 30 32; do
    echo "=== v$v round $r"
    STAPES_BATCH_REPORT=$O/batch-v$v-r$r.json timeout 200 /tmp/b$v/cuda_batch --test-threads=1 --nocapture 2>&1 | grep -E "batch|encoder|test result|panicked" | head -12
  done
done
date -u
