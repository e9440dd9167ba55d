#!/usr/bin/env bash
# Stop 28 call 2: cuda_batch of build v30 again, with audio/beckett.wav carried this time (call 1
# carried only the LibriVox clips, and the test stopped at the missing file).
# Carry dist/v30b dist/au2 dist/tiny.bin.xz dist/run28.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/m
date -u
tar -xJf dist/v30b/bins.tar.xz -C $B && tar -xJf dist/v30b/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 $B/cuda_batch --test-threads=1 --nocapture 2>&1 | tail -25
date -u
