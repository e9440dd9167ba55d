#!/usr/bin/env bash
# Stop 33 call 5: v56 = the selection's copies held by an InFlight guard (drains the stream if a
# pending selection is dropped unwaited or an error returns early). The selection and Whisper /
# Canary decoding tests again (real tiny.en), and the turbo decode figure ahead / off once more.
# Carry dist/v56 dist/au2 dist/tiny.bin.xz dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b56
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v56/bins.tar.xz -C $B && tar -xJf dist/v56/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for x in select cuda_whisper cuda_canary step_fused cuda_batch; do
  s=$(date +%s); timeout 150 $B/$x --test-threads=1 > /tmp/t2/$x.log 2>&1; rc=$?
  echo "=== $x rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$x.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$x.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$x.log $O/
done
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); x=r.get("extra") or {}; print("decode/token", g("decode_token"), "e2e29", x.get("end_to_end_29_tokens_ms"), "ahead", x.get("decode_token_queued_ahead"))'; }
b() { timeout 90 $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane $1 --audio samples/jfk.wav --iters 10 --batch 1 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
b f16 > /dev/null
for r in 1 2; do for l in f16 q8; do
  echo "turbo $l round $r off: $(STAPES_DECODE_AHEAD=0 b $l)"
  echo "turbo $l round $r ahead: $(b $l)"
done; done
date -u
