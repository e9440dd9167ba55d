#!/usr/bin/env bash
# Stop 22 call 6. Trial: SiLU as v / (1 + __expf(-v)) (the MUFU exp2 without expf's range
# fix-ups) in act_apply, every kernel's activation code 2 (build v15 = main + that line). Call 3
# showed the f16 act pass over 16 clips (764 us) is not bound by its access width. Tests of the
# ops it touches, then v14 (call 5's build) against v15 sharing one tuning cache (so both run
# the same cuBLASLt algorithms), alternating.
# Stage: dist/stage2.sh v15 "ops f16_activations conformer_ops cuda_parakeet cuda_canary
# parakeet_batch"; carry dist/v14s (v14's stapes) dist/v15 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c6 B=/tmp/b6 A=/tmp/a6
mkdir -p $B $A $STAPES_CACHE /tmp/t6
tar -xJf dist/v15/bins.tar.xz -C $B && tar -xJf dist/v15/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v14s/bins.tar.xz -C $A && tar -xJf dist/v14s/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in ops f16_activations conformer_ops cuda_parakeet cuda_canary parakeet_batch; do
  s=$(date +%s); timeout 60 $B/$t --test-threads=1 > /tmp/t6/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t6/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t6/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t6/$t.log $O/
done
ab() { # label bin model
  timeout 90 $2 bench --synthetic $3 --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t6/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $3" || tail -3 /tmp/t6/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab warm $A/stapes $m > /dev/null; done
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab v14 $A/stapes $m; ab v15 $B/stapes $m; done
done
date -u
