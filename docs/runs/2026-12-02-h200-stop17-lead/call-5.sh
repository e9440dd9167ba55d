#!/usr/bin/env bash
# final rule (wide unless norm-less, <= 2 rows, N < 16384; by rows, not rows a block): the step
# tests, GEMV shapes, turbo decode old (b9a983e) / new
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m /tmp/old /tmp/c0
tar -xJf dist/s5/bins.tar.xz -C $B && tar -xJf dist/s5/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/s0/stapes.xz > /tmp/old/stapes && chmod +x /tmp/old/stapes
tar -xJf dist/s0/cache.tar.xz -C /tmp/c0 && tar -xJf dist/au/audio.tar.xz -C /tmp/c0
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
printf "%s\n" step_fused cuda_whisper cuda_batch cuda_canary | xargs -P 4 -I{} bash -c "run1 {}"
ARGS="cuda" run1 whisper_select
(cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log)
$B/step_fused --ignored --nocapture step_gemv_bandwidth 2>&1 | grep "step_gemv "
bench() { STAPES_CACHE=$3 $1 bench --synthetic $2 --device cuda --lane ${4:-f16} --audio samples/jfk.wav --iters 20 --batch 0 --decode-tokens 20 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]; e=r.get("extra",{})
print(sys.argv[1], "decode/token", round(r["decode_token"]["median_ms"],3), "encode", round(r["encode"]["median_ms"],3), "jfk29", round(e.get("end_to_end_29_tokens_ms",-1),2))' "$5 $2 ${4:-f16}"; }
for rep in 1 2; do bench /tmp/old/stapes whisper-large-v3-turbo /tmp/c0 f16 old; bench $B/stapes whisper-large-v3-turbo /tmp/c3 f16 new; done
bench $B/stapes whisper-large-v3-turbo /tmp/c3 q8 new
date -u
