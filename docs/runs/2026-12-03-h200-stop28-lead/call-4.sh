#!/usr/bin/env bash
# Stop 28 call 4: batched transcription on the GPU taking turns (build v31: whisper/batch.rs's
# threads hold a turn on the device between their encoder calls, so the decoder keeps its step
# chains) against v30 (threads side by side, which turned the step chains off for good), real
# tiny.en q8_0 ggml, 32 inputs (cuda_batch: batched results must equal transcribe alone), two
# alternating rounds; then v31's cuda_whisper.
# Carry dist/v31 dist/v30b dist/au2 dist/tiny.bin.xz dist/run28.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p /tmp/b30 /tmp/b31 $STAPES_CACHE /tmp/m
date -u
tar -xJf dist/v30b/bins.tar.xz -C /tmp/b30 && tar -xJf dist/v31/bins.tar.xz -C /tmp/b31 && tar -xJf dist/v31/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  for v in 30 31; do
    echo "=== v$v round $r"
    STAPES_BATCH_REPORT=$O/batch-v$v-r$r.json timeout 200 /tmp/b$v/cuda_batch --test-threads=1 --nocapture 2>&1 | grep -E "batch|encoder|test result|panicked" | head -12
  done
done
echo "=== v31 cuda_whisper"
timeout 150 /tmp/b31/cuda_whisper --test-threads=1 2>&1 | grep -E "test result|panicked|SKIPPED" | head
date -u
