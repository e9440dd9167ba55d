#!/usr/bin/env bash
# Stop 22 call 1. (a) main at 6f5c5ce (stop 21's tuner rule: graph-timed under 2 G multiply-adds,
# eager above; the gpu_ms helper refactor) on the GPU: the Whisper / FastConformer / graph tests.
# (b) every encoder with that rule, fresh tuning, twice (f16) and once q8.
# (c) a 16-clip parakeet encode's kernels under ncu (no cache flush, clocks untouched).
# Stage: dist/stage2.sh v10 "cuda_whisper cuda_parakeet cuda_canary graphs cuda_batch
# parakeet_batch q8_accuracy"; carry dist/v10 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c1 B=/tmp/b1
mkdir -p $B $STAPES_CACHE /tmp/t1 /tmp/m
tar -xJf dist/v10/bins.tar.xz -C $B && tar -xJf dist/v10/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in cuda_whisper cuda_parakeet cuda_canary graphs cuda_batch parakeet_batch q8_accuracy; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t1/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
date -u
ab() { # label model lane env...
  local label=$1 m=$2 l=$3; shift 3
  env STAPES_CUDA_LT_CACHE=0 "$@" timeout 90 $B/stapes bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l" || tail -3 /tmp/t1/err.txt
}
for rep in 1 2; do
  for m in whisper-tiny whisper-base whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash; do ab rule $m f16; done
done
for m in whisper-tiny whisper-large-v3-turbo parakeet-tdt-0.6b-v2; do ab rule $m q8; done
date -u
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv --launch-count 4000 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-parakeet16-nocf.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-parakeet16-nocf.csv
date -u
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
