#!/usr/bin/env bash
# Stop 19 call 3: the few-rows GEMM with its partials pushed by remote stores (call 2's remote
# loads cost ~10 µs a launch): the kernel's bench against cuBLASLt over every (columns, split),
# its tests, parakeet/canary encoders off/on. Stage: dist/stage2.sh v4 "skinny cuda_fc_kernels
# cuda_parakeet cuda_canary"; carry dist/v4, dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c5 B=/tmp/b5
mkdir -p $B $STAPES_CACHE /tmp/t5
tar -xJf dist/v4/bins.tar.xz -C $B && tar -xJf dist/v4/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
timeout 120 $B/skinny --ignored skinny_bench --nocapture --test-threads=1 2>&1 | grep -E "^\||panicked|error" 
for t in skinny cuda_fc_kernels cuda_parakeet cuda_canary; do timeout 200 $B/$t --test-threads=1 > /tmp/t5/$t.log 2>&1; echo "=== $t rc=$? $(grep -E '^test result' /tmp/t5/$t.log | tail -1)"; grep -E "panicked|launches per" -A3 /tmp/t5/$t.log | head -12; done
bench() { # label env...
  local label=$1; shift
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do for l in f16; do
    env "$@" $B/stapes bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 20 --batch 0 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l"; done; done
}
bench off STAPES_CUDA_SKINNY=0
bench on STAPES_CUDA_SKINNY=1
bench off STAPES_CUDA_SKINNY=0
bench on STAPES_CUDA_SKINNY=1
