#!/usr/bin/env bash
# Stop 33 call 2: build v54 = main + greedy steps queued ahead (select_feed writes the chosen id
# into the next step's parameters on the device; the host queues that step before it reads the
# answer). Tests (real tiny.en via STAPES_GPU_MODEL), then one binary, one tuning cache,
# STAPES_DECODE_AHEAD=0 against the default, alternating three rounds: turbo f16 and q8 decode
# per token and the jfk end to end; tiny and base decode. Carry dist/v54 dist/au2 dist/tiny.bin.xz dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b54
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v54/bins.tar.xz -C $B && tar -xJf dist/v54/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for x in cuda_whisper select whisper_select step_fused graphs cuda_batch; do
  s=$(date +%s); timeout 120 $B/$x --test-threads=1 --nocapture > /tmp/t2/$x.log 2>&1; rc=$?
  echo "=== $x rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$x.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$x.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$x.log $O/
done
grep -E "^(F16|Q8|f16|q8) (jfk|librivox)" /tmp/t2/cuda_whisper.log | head -8
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); x=r.get("extra") or {}; print("decode/token", g("decode_token"), "e2e29", x.get("end_to_end_29_tokens_ms"), "windows", x.get("end_to_end_29_tokens_windows"), "encode", g("encode_device"))'; }
b() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --audio samples/jfk.wav --iters 10 --batch 1 --json 2>/tmp/t2/err.txt | tee $O/$1-$2-$3.json | q || tail -3 /tmp/t2/err.txt; }
T=whisper-large-v3-turbo
b $T f16 warm > /dev/null
for r in 1 2 3; do
  for l in f16 q8; do
    echo "$T $l round $r off: $(STAPES_DECODE_AHEAD=0 b $T $l off$r)"
    echo "$T $l round $r ahead: $(b $T $l on$r)"
  done
done
for m in whisper-tiny whisper-base; do
  for r in 1 2; do
    echo "$m f16 round $r off: $(STAPES_DECODE_AHEAD=0 b $m f16 off$r)"
    echo "$m f16 round $r ahead: $(b $m f16 on$r)"
  done
done
date -u
for a in 0 1; do for i in 1 2 3; do s=$(date +%s%N); STAPES_DECODE_AHEAD=$a $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane f16 --beam-size 1 samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en greedy ahead=$a whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
date -u
