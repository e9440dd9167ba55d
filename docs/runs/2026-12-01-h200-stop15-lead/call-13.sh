#!/usr/bin/env bash
# Stop 15 call 13: decoder-step GEMV norm and attn_combine: tests, then decode per token, new vs call-11 binary.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m /tmp/cold
tar -xJf dist/g3/bins.tar.xz -C $B && tar -xJf dist/g3/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d9/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/g1/stapes.xz > /tmp/cold/stapes && chmod +x /tmp/cold/stapes
mkdir -p /tmp/c-old && tar -xJf dist/f1/cache.tar.xz -C /tmp/c-old && tar -xJf dist/d9/audio.tar.xz -C /tmp/c-old
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
printf '%s\n' step_fused cuda_whisper cuda_batch pdl cuda_canary graphs | xargs -P 3 -I{} bash -c 'run1 {}'
date -u
bench() { STAPES_CACHE=$3 $1 bench --synthetic $2 --device cuda --lane ${4:-f16} --audio samples/jfk.wav --iters 20 --batch 0 --decode-tokens 20 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$5 $2 ${4:-f16}"; }
for m in whisper-large-v3-turbo whisper-tiny whisper-base canary-1b-flash; do
  bench /tmp/cold/stapes $m /tmp/c-old f16 before
  bench $B/stapes $m /tmp/c3 f16 after
  bench /tmp/cold/stapes $m /tmp/c-old f16 before
  bench $B/stapes $m /tmp/c3 f16 after
done
bench $B/stapes whisper-large-v3-turbo /tmp/c3 q8 after
for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda samples/jfk.wav > /tmp/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes q8 whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/jfk.txt
date -u
