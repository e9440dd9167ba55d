#!/usr/bin/env bash
# Stop 15 call e1: awg64 (warpgroup attention): tests + A/B encode benches.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache-e1 B=/tmp/b-e1
mkdir -p $B $STAPES_CACHE /tmp/t-e1 /tmp/m
tar -xJf dist/e1/bins.tar.xz -C $B && tar -xJf dist/e1/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d9/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 --nocapture > "/tmp/t-e1/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t-e1/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t-e1/$t.log" | head -6; cp /tmp/t-e1/$t.log $OUT/; }
export -f run1
printf '%s\n' attention cuda_whisper cuda_batch graphs q8_accuracy f16_activations cubin nvrtc_compile | xargs -P 4 -I{} bash -c 'run1 {}'
grep -E "packed, (awg|flash64)" /tmp/t-e1/attention.log | head -60
bench() { $B/stapes bench --synthetic $1 --device cuda --lane $2 --iters ${3:-20} --batch 0 --decode-tokens 5 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $2 wg=${STAPES_CUDA_ATTN_WG:-1}"; }
for m in whisper-tiny whisper-base whisper-large-v3-turbo; do
  for wg in 1 0 1; do STAPES_CUDA_ATTN_WG=$wg bench $m f16; done
  STAPES_CUDA_ATTN_WG=1 bench $m q8
done
date -u
