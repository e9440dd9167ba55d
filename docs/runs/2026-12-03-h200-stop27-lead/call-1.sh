#!/usr/bin/env bash
# Stop 27 call 1: build v28 = main + awg64p (the softmax of tile it+1 overlapping P·V of tile it in
# each warpgroup, Q in shared memory; STAPES_CUDA_AWG_PIPE=0 gives main's awg64, =2 awg64p with
# the two warpgroups taking turns to issue their MMAs). Tests with the
# new form on, then awg64 timing and the turbo/tiny/base encoders, old form against new, alternating.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c B=/tmp/b; mkdir -p $B $STAPES_CACHE /tmp/t /tmp/m
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
tar -xJf dist/v28/bins.tar.xz -C $B && tar -xJf dist/v28/cache.tar.xz -C $STAPES_CACHE

for t in attention graphs cuda_batch; do
  s=$(date +%s); timeout 200 $B/$t --test-threads=1 > /tmp/t/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t/$t.log | tail -1)"
  grep -E "panicked|SKIPPED|^ok   .*awg64" -A3 /tmp/t/$t.log | head -12; cp /tmp/t/$t.log $O/
done
s=$(date +%s); STAPES_CUDA_AWG_PIPE=2 timeout 120 $B/attention --test-threads=1 wg_kernels split_keys > /tmp/t/att2.log 2>&1; rc=$?
echo "=== attention (pipe=2) rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t/att2.log | tail -1)"; grep -E "panicked" -A3 /tmp/t/att2.log | head; cp /tmp/t/att2.log $O/
date -u
for p in 0 1 2 0 1 2; do
  STAPES_CUDA_AWG_PIPE=$p timeout 50 $B/attention flash64_timing --test-threads=1 --nocapture 2>&1 | grep -E "awg64 where it runs, (unsplit|split auto)" | sed "s/^/pipe=$p /"
done
date -u
for r in 1 2 3; do
  for p in 0 1 2; do
    j=$(STAPES_CUDA_AWG_PIPE=$p timeout 100 $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 10 --batch 16 --decode-tokens 2 --json 2>/dev/null)
    echo "turbo f16 pipe=$p round $r: $(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(r["encode"]["median_ms"], r.get("encode_batched",{}).get("median_ms"))' 2>&1)"
  done
done
for m in whisper-tiny whisper-base; do
  for p in 0 1 2 0 1 2; do
    j=$(STAPES_CUDA_AWG_PIPE=$p timeout 60 $B/stapes bench --synthetic $m --device cuda --lane f16 --iters 20 --decode-tokens 2 --json 2>/dev/null)
    echo "$m f16 pipe=$p: $(echo "$j" | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(r["encode"]["median_ms"])' 2>&1)"
  done
done
date -u
