#!/usr/bin/env bash
# Stop 29 call 6: build v38 = main (4cc7168) + linear_act's split form (the feed-forwards' fc1:
# K slices into f32 partials, then splitk_act16 sums them with the bias and applies SiLU, so the
# activation pass after the GEMM is gone; STAPES_CUDA_SPLIT_ACT=0 turns it off). Tests, then
# one round, SPLIT_ACT 0 against 1 (the device time left after a refused start: allowed no more), parakeet, canary. Carry dist/v38 dist/au2 dist/run29.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v38/bins.tar.xz -C $B && tar -xJf dist/v38/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
for t in linear_add_norms cuda_parakeet cuda_canary; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 --nocapture > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
grep -E "^ok .*linear_act" /tmp/t2/linear_add_norms.log
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
run() { STAPES_CUDA_SPLIT_ACT=$1 $B/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do echo "warm $m: $(run 1 $m)"; done
for r in 1; do for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do for s in 0 1; do
  echo "$m f16 split_act=$s round $r (encode, encode_device, 16): $(run $s $m)"
done; done; done
date -u
