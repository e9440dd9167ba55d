#!/usr/bin/env bash
# Stop 22 call 4. Build v13 = d612c86 + (a) the cuBLASLt tuner times every candidate in two
# rounds and keeps each one's faster figure (call 3: one fresh tuning put fc2 of 16 parakeet
# clips on a 36 us algorithm where call 2's chose a 13.5 us one for the same role... the
# choice moves between runs), (b) rel_attention's split-keys form only where the whole batch's
# plain blocks would not fill the SMs (call 3: 16 clips 9.2-9.3 -> 8.8 ms with it off).
# Tests, then fresh tuning (STAPES_CUDA_LT_CACHE=0) three times per build, v12 (call 3's build)
# and v13 alternating, to see how far the choice moves the encodes.
# Stage: dist/stage2.sh v13 "cuda_parakeet cuda_canary parakeet_batch graphs cuda_whisper
# cuda_batch"; carry dist/v12s (v12's stapes) dist/v13 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b1
mkdir -p $B $A $STAPES_CACHE /tmp/c1 /tmp/t1 /tmp/m
tar -xJf dist/v13/bins.tar.xz -C $B && tar -xJf dist/v13/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v12s/bins.tar.xz -C $A && tar -xJf dist/v12s/cache.tar.xz -C /tmp/c1 && tar -xJf dist/au/audio.tar.xz -C /tmp/c1
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in cuda_parakeet cuda_canary parakeet_batch graphs cuda_whisper cuda_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t1/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
date -u
ab() { # label bin cache model lane env...
  local label=$1 bin=$2 cache=$3 m=$4 l=$5; shift 5
  env STAPES_CACHE=$cache STAPES_CUDA_LT_CACHE=0 "$@" timeout 120 $bin bench --synthetic $m --device cuda --lane $l --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l" || tail -3 /tmp/t1/err.txt
}
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 whisper-large-v3-turbo; do ab v12 $A/stapes /tmp/c1 $m f16; ab v13 $B/stapes $STAPES_CACHE $m f16; done
done
for rep in 1 2; do
  for m in canary-1b-flash whisper-tiny; do ab v12 $A/stapes /tmp/c1 $m f16; ab v13 $B/stapes $STAPES_CACHE $m f16; done
done
date -u
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
