#!/usr/bin/env bash
# Stop 21 call 2. Call 1 showed the cuBLASLt tuner timing few-microsecond GEMMs by eager
# launches, i.e. ranking cuBLASLt's host cost (~10-14 us a call at parakeet's 140 rows, above
# the kernels' own 4-9 us). This build times each candidate as 10 runs captured in a CUDA graph
# (STAPES_CUDA_LT_TIMING=eager: the old way), split-K candidates still behind
# STAPES_CUDA_LT_SPLITK. Tests touched by the GEMM choice, then an A/B of whole encoders, fresh
# tuning each run (STAPES_CUDA_LT_CACHE=0), twice; the choices logged for parakeet.
# Stage: dist/stage2.sh v6 "cuda_whisper cuda_batch cuda_parakeet cuda_canary cuda_fc_shapes
# graphs linear_add q8_accuracy q8_mix parakeet_batch"; carry dist/v6 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
tar -xJf dist/v6/bins.tar.xz -C $B && tar -xJf dist/v6/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in cuda_whisper cuda_batch cuda_parakeet cuda_canary cuda_fc_shapes graphs linear_add q8_accuracy q8_mix parakeet_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t2/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
ab() { # label model lane env...
  local label=$1 m=$2 l=$3; shift 3
  env STAPES_CUDA_LT_CACHE=0 "$@" timeout 90 $B/stapes bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t2/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l" || tail -3 /tmp/t2/err.txt
}
for rep in 1 2; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny whisper-base whisper-large-v3-turbo; do
    ab eager $m f16 STAPES_CUDA_LT_TIMING=eager STAPES_CUDA_LT_SPLITK=0
    ab graph $m f16 STAPES_CUDA_LT_SPLITK=0
    ab graph+splitk $m f16
  done
done
date -u
for v in "eager STAPES_CUDA_LT_TIMING=eager STAPES_CUDA_LT_SPLITK=0" "graph STAPES_CUDA_LT_SPLITK=0" "graph+splitk STAPES_CUDA_LT_SPLITK=1"; do
  set -- $v; n=$1; shift
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny; do
    env STAPES_CUDA_LT_CACHE=0 "$@" timeout 60 $B/stapes -v bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0 2>&1 >/dev/null | sed 's/\x1b\[[0-9;]*m//g' | grep "algorithm chosen" | grep -o "Key {[^}]*} ms_per_run=[0-9.]* split=[0-9]*" > $O/chosen-$n-$m.txt
  done
done
date -u
cd /tmp/t2 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
