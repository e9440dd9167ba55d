#!/usr/bin/env bash
# Stop 29 call 1: build v33 = main + weights prefetched into L2 on a side branch of captured
# encoder chains (Backend::prefetch_weight hints before each GEMM's preceding op;
# STAPES_CUDA_L2_PREFETCH=0 turns it off). Tests (real tiny.en via STAPES_GPU_MODEL), then an
# A/B in one binary on one tuning cache, prefetch off/on alternating, three rounds: parakeet
# (one 11 s clip on the device, 16 clips), canary, turbo (one window on the device, 16), tiny.
# Carry dist/v33 dist/au2 dist/tiny.bin.xz dist/run29.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v33/bins.tar.xz -C $B && tar -xJf dist/v33/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
ls $STAPES_CACHE | head; ls $STAPES_CACHE/audio 2>/dev/null | head
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in graphs cuda_parakeet cuda_canary cuda_whisper cuda_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED|edges without" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
run() { STAPES_CUDA_L2_PREFETCH=$1 $B/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash whisper-large-v3-turbo whisper-tiny"
for m in $M; do echo "warm $m: $(run 1 $m)"; done
for r in 1 2 3; do
  for m in $M; do
    for p in 0 1; do
      echo "$m prefetch=$p round $r (encode, encode_device, 16): $(run $p $m)"
    done
  done
done
date -u
