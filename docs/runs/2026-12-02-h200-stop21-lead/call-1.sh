#!/usr/bin/env bash
# Stop 21 call 1. (a) 889f0c9's int8 TMA template (LEAN flag instead of a second kernel copy) on
# the GPU: the i8gemm tests. (b) cuBLASLt split-K candidates (this stop: the tuner also times
# split-K forms of the heuristic's first four picks when a GEMM has < 132 output tiles of
# 128 x 128): every test binary whose GEMMs it can change, then an A/B of whole encoders with
# STAPES_CUDA_LT_SPLITK=0 / default, fresh tuning each run (STAPES_CUDA_LT_CACHE=0), twice.
# (c) the whole-model int8 GEMM runs (q8 lane, STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_I8GEMM=1).
# Stage: dist/stage2.sh v5 "i8gemm cuda_whisper cuda_batch cuda_parakeet cuda_canary
# cuda_fc_shapes cuda_label_loop graphs linear_add q8_accuracy q8_mix parakeet_batch";
# carry dist/v5 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c1 B=/tmp/b1
mkdir -p $B $STAPES_CACHE /tmp/t1 /tmp/m
tar -xJf dist/v5/bins.tar.xz -C $B && tar -xJf dist/v5/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in i8gemm cuda_whisper cuda_batch cuda_parakeet cuda_canary cuda_fc_shapes cuda_label_loop graphs linear_add q8_accuracy q8_mix parakeet_batch; do
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
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny whisper-base whisper-large-v3-turbo; do
    ab off $m f16 STAPES_CUDA_LT_SPLITK=0; ab on $m f16
  done
done
date -u
ab on-q8 parakeet-tdt-0.6b-v2 q8; ab on-q8 whisper-large-v3-turbo q8
ab i8-whole whisper-large-v3-turbo q8 STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_I8GEMM=1
ab i8-shape whisper-large-v3-turbo q8 STAPES_CUDA_Q8_MIX=shape STAPES_CUDA_I8GEMM=1
# which split each GEMM got (the tuner's choice at debug level)
for m in parakeet-tdt-0.6b-v2 whisper-large-v3-turbo; do
  STAPES_CUDA_LT_CACHE=0 timeout 60 $B/stapes -v bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0 2>&1 >/dev/null | grep "algorithm chosen" | sed 's/.*key=//' > $O/chosen-$m.txt; grep -c "split=[2-9]" $O/chosen-$m.txt
done
date -u
# one parakeet clip's kernels without ncu's cache flush (closer to their time inside the graph)
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-count 1500 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0 > $O/ncu-parakeet-nocf.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-parakeet-nocf.csv
date -u
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
