#!/usr/bin/env bash
# Stop 14 call 5: new defaults (GELU epilogue, conv1d_act, split-keys attention per window):
# tests, then A/B benches.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache5 B=/tmp/b5
mkdir -p $B $STAPES_CACHE /tmp/t5 /tmp/m
tar -xJf dist/d5/bins.tar.xz -C $B && tar -xJf dist/d5/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d5/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout ${TO:-200} "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t5/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t5/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t5/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || { grep -A6 "panicked" "/tmp/t5/$t${TAG:-}.log" | head -14; }; return 0; }
export -f run1
printf '%s\n' ops attention cuda_whisper cuda_batch linear_add i8gemm q8_accuracy f16_activations graphs | xargs -P 3 -I{} bash -c 'run1 {}'
date -u
bj() { timeout 90 "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
for m in whisper-tiny whisper-base whisper-large-v3-turbo; do for l in f16 q8; do
  bj $m $l defaults
  STAPES_CUDA_ATTN_SPLIT=off bj $m $l split-off
  STAPES_CUDA_ATTN_SPLIT=off STAPES_CUDA_GELU_EPILOGUE=0 bj $m $l split-off-erf-pass
done; done
for m in whisper-tiny whisper-base; do STAPES_CUDA_ATTN_SPLIT=2 bj $m f16 split2; STAPES_CUDA_ATTN_SPLIT=3 bj $m f16 split3; bj $m f16 defaults-again; done
date -u
for l in f16 q8; do $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav 2>&1 | tail -1 | sed "s/^/$l: /"; done
cd /tmp/t5 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
date -u
