#!/usr/bin/env bash
# decode-step kernels (split cross-attention, combine, select, one-wave logits GEMV): tests,
# then decode per token and jfk end to end, new vs the previous binary (dist/p1), ncu of a step
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c5 B=/tmp/b5
mkdir -p $B $STAPES_CACHE /tmp/t5 /tmp/m /tmp/old /tmp/c0
tar -xJf dist/h5/bins.tar.xz -C $B && tar -xJf dist/h5/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/h3o/stapes.xz > /tmp/old/stapes && chmod +x /tmp/old/stapes
tar -xJf dist/h3o/cache.tar.xz -C /tmp/c0 && tar -xJf dist/au/audio.tar.xz -C /tmp/c0
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 250 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t5/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t5/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t5/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t5/$t.log" | head -16; }
export -f run1
printf '%s\n' ops step_fused select cross_f16 cuda_whisper cuda_batch pdl graphs cuda_canary | xargs -P 4 -I{} bash -c 'run1 {}'
ARGS="cuda" run1 whisper_select
grep -h "attention_decode\|m1 k1280 n51866\|m5 k384 n51865" /tmp/t5/ops.log /tmp/t5/step_fused.log | head -30
(cd /tmp/t5 && tar -cJf $O/logs.tar.xz *.log)


date -u
bench() { STAPES_CACHE=$3 $1 bench --synthetic $2 --device cuda --lane ${4:-f16} --audio samples/jfk.wav --iters 20 --batch 0 --decode-tokens 20 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]; e=r.get("extra",{})
print(sys.argv[1], "decode/token", round(r["decode_token"]["median_ms"],3), "encode", round(r["encode"]["median_ms"],3), "jfk29", round(e.get("end_to_end_29_tokens_ms",-1),2))' "$5 $2 ${4:-f16}"; }
for m in whisper-large-v3-turbo whisper-large-v3-turbo whisper-tiny whisper-base; do
  for rep in 1; do
  bench /tmp/old/stapes $m /tmp/c0 f16 before
  bench $B/stapes $m /tmp/c5 f16 after
  done
done
bench /tmp/old/stapes whisper-large-v3-turbo /tmp/c0 q8 before
bench $B/stapes whisper-large-v3-turbo /tmp/c5 q8 after
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/jfk.txt; done
date -u
