#!/usr/bin/env bash
# Stop 19 call 6: the fused split merge again, a thread a half row (call 5's warp-a-row merge in
# the last block cost ~20 µs a tiny layer): its tests, then pass vs fused, tiny and base split 2.
# Stage: dist/stage2.sh v6 "attention graphs cuda_whisper cuda_batch"; carry dist/v6 dist/au
# dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c7 B=/tmp/b7
mkdir -p $B $STAPES_CACHE /tmp/t7 /tmp/m
tar -xJf dist/v6/bins.tar.xz -C $B && tar -xJf dist/v6/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
ab() { # label model env...
  local label=$1 m=$2; shift 2
  for l in f16 q8; do env "$@" $B/stapes bench --synthetic $m --device cuda --lane $l --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l"; done
}
for rep in 1 2; do
  ab pass whisper-tiny STAPES_CUDA_SPLIT_MERGE=0; ab fused whisper-tiny STAPES_CUDA_SPLIT_MERGE=1
  ab base-unsplit whisper-base STAPES_CUDA_ATTN_SPLIT=auto; ab base-split2-fused whisper-base STAPES_CUDA_ATTN_SPLIT=2 STAPES_CUDA_SPLIT_MERGE=1
done
for t in attention graphs cuda_whisper cuda_batch; do s=$(date +%s); timeout 100 $B/$t --test-threads=1 > /tmp/t7/$t.log 2>&1; echo "=== $t rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t7/$t.log | tail -1)"; grep -E "panicked" -A4 /tmp/t7/$t.log | head -10; done
