#!/usr/bin/env bash
# Stop 36 call 1: stop 35's review head (ccca098 = build v68) on the GPU: its CUDA tests, the
# Whisper ones on real tiny.en (q8_0 ggml from `stapes convert`); then ncu of one turbo f16
# window (every kernel's duration, after a tuning run outside ncu).
# Carry dist/v69a.tar.xz dist/v68.tar.xz dist/tiny.bin.xz dist/au dist/run36.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b68
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v68.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
t() { s=$(date +%s); timeout ${T:-240} $B/$1 --test-threads=1 --nocapture > /tmp/t2/$1.log 2>&1; rc=$?
  echo "=== $1 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$1.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|rel L2|^ok " -A2 /tmp/t2/$1.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/$1.log $O/; }
for x in fp8 attention graphs linear_add_norms cuda_whisper cuda_batch cuda_parakeet cuda_canary; do t $x; done
cp /tmp/t2/cuda_whisper.log /tmp/t2/fp8.log $O/ 2>/dev/null
date -u
# build v69a: the working tree's linear_add_norms test binary (the cluster form gemm_ln16_*)
mkdir -p /tmp/b69a && tar -xJf dist/v69a.tar.xz -C /tmp/b69a
B=/tmp/b69a T=120 t linear_add_norms
grep -E "µs|cluster" /tmp/t2/linear_add_norms.log | head -20
cp /tmp/t2/linear_add_norms.log $O/linear_add_norms-v69a.log
date -u
