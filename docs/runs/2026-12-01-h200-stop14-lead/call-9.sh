#!/usr/bin/env bash
# Stop 14 call 9: the split rule limited to square attention: attention, cuda_whisper, cuda_batch; tiny/base encode.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache9 B=/tmp/b9
mkdir -p $B $STAPES_CACHE /tmp/t9 /tmp/m
tar -xJf dist/d9/bins.tar.xz -C $B && tar -xJf dist/d9/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d9/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 150 "$B/$t" --test-threads=1 > "/tmp/t9/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t9/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t9/$t.log" | head -4; }
export -f run1
printf '%s\n' attention cuda_whisper cuda_batch | xargs -P 3 -I{} bash -c 'run1 {}'
for m in whisper-tiny whisper-base; do $B/stapes bench --synthetic $m --device cuda --lane f16 --iters 20 --batch 0 --decode-tokens 5 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' $m; done
date -u
