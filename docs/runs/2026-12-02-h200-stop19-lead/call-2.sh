#!/usr/bin/env bash
# Stop 19 call 2: the few-rows f16 GEMM (kernels/skinny.cu, K split over a cluster, epilogue
# fused): its GPU tests and every FastConformer / Whisper CUDA test binary, then parakeet and
# canary encoders with it off (STAPES_CUDA_SKINNY=0) and on, f16 and q8, same binary; an ncu
# pass over one parakeet encode with it on. Stage: dist/stage2.sh v3 "<tests>"; carry dist/v3,
# dist/au. No bare `wait` (output goes through tee).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c4 B=/tmp/b4
mkdir -p $B $STAPES_CACHE /tmp/t4
tar -xJf dist/v3/bins.tar.xz -C $B && tar -xJf dist/v3/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
run1() { local t=$1; local s=$(date +%s); timeout 280 "$B/$t" --test-threads=1 > "/tmp/t4/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t4/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t4/$t.log" | head -4; [ $rc = 0 ] || grep -A12 "panicked" "/tmp/t4/$t.log" | head -24; }
export -f run1
(timeout 20 $B/skinny --test-threads=1 --nocapture 2>&1 | tail -30) 
ls $B | grep -v -x -e stapes | xargs -P 4 -I{} bash -c 'run1 {}'
bench() { # label env...
  local label=$1; shift
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do for l in f16 q8; do
    env "$@" $B/stapes bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 20 --batch 0 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l"; done; done
}
bench off STAPES_CUDA_SKINNY=0
bench on STAPES_CUDA_SKINNY=1
bench off STAPES_CUDA_SKINNY=0
bench on STAPES_CUDA_SKINNY=1
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 1500 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0 > $O/ncu-parakeet-skinny.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-parakeet-skinny.csv
(cd /tmp/t4 && tar -cJf $O/logs.tar.xz *.log)
