#!/usr/bin/env bash
# Stop 14 call 6: split-keys attention on 64-row blocks (flash64s_w4m1s2): tests, A/B, then the
# peer comparison (ours + PyTorch+graph) with every new default, nothing else on the machine.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache6 B=/tmp/b6
mkdir -p $B $STAPES_CACHE /tmp/t6 /tmp/m /tmp/cmp
tar -xJf dist/d6/bins.tar.xz -C $B && tar -xJf dist/d6/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d6/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
run1() { local t=$1; local s=$(date +%s); timeout ${TO:-200} "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t6/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t6/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t6/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || { grep -A6 "panicked" "/tmp/t6/$t${TAG:-}.log" | head -14; }; return 0; }
export -f run1
printf '%s\n' attention cuda_whisper cuda_batch ops graphs | xargs -P 3 -I{} bash -c 'run1 {}'
STAPES_CUDA_ATTN_SPLIT_KERNEL=w4m2s2 TAG=-w4m2 run1 attention
date -u
bj() { timeout 90 "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
for m in whisper-tiny whisper-base; do for l in f16 q8; do
  bj $m $l split-w4m1
  STAPES_CUDA_ATTN_SPLIT_KERNEL=w4m2s2 bj $m $l split-w4m2
  STAPES_CUDA_ATTN_SPLIT=off bj $m $l split-off
done; done
date -u
STAPES=$B/stapes OUT=/tmp/cmp ITERS=20 TOOLS=dist/d6/tools bash tools/bench/gpu_compare.sh
date -u
for l in f16 q8; do $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav 2>&1 | tail -1 | sed "s/^/$l: /"; done
cd /tmp/t6 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
tar -cJf $O/cmp.tar.xz -C /tmp cmp
date -u
