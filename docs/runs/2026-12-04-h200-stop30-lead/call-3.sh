#!/usr/bin/env bash
# Stop 30 call 3: build v40 (= main ebd13d9's code). Tests; two more alternating rounds of the
# split-keys kernel at 8 warps against the default (9 for 140 frames); then gpu_compare.sh for
# parakeet and canary (f16 and q8, ITERS=10, torch_anchor.py beside, one lease).
# Carry dist/v40 dist/au2 dist/f1/tools dist/run30.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v40/bins.tar.xz -C $B && tar -xJf dist/v40/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in conformer_ops cuda_parakeet cuda_canary parakeet_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { $B/stapes bench --synthetic $1 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(b $m)"; done
for r in 1 2; do
  for m in $M; do
    echo "$m f16 ks_warps=8 round $r (encode, encode_device, 16): $(STAPES_CUDA_REL_KS_WARPS=8 b $m)"
    echo "$m f16 ks_warps=auto round $r (encode, encode_device, 16): $(b $m)"
  done
done
date -u
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools MODELS="parakeet-tdt-0.6b-v2 canary-1b-flash" bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
grep -iE "parakeet|canary|ceiling|torch" /tmp/t2/cmp.txt | head -30
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
