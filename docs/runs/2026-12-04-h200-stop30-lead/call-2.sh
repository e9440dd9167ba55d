#!/usr/bin/env bash
# Stop 30 call 2: build v40 = call 1's staged position rows as the only form (the global-load
# path removed) + the split-keys kernel with its (q+v) operands in shared memory (160 registers,
# __launch_bounds__(288)) and up to 9 warps: a 140-frame clip's 9 key tiles one a warp (8 warps:
# the first walked two). Tests; A/B 9 vs 8 warps (STAPES_CUDA_REL_KS_WARPS=8) alternating three
# rounds; then the q8 lane on our int8 GEMM (existing switches: STAPES_CUDA_I8GEMM=1 with
# Q8_MIX=0 or shape, LN_Q8=1: fc1's SiLU in the int8 epilogue, the norms writing int8 input)
# against the default (the f16 copy), parakeet and turbo, one and 16; ncu of one parakeet encode.
# Carry dist/v40 dist/au2 dist/run30.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v40/bins.tar.xz -C $B && tar -xJf dist/v40/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
for t in conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs linear_add_norms; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 --nocapture > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { $B/stapes bench --synthetic $1 --device cuda --lane $2 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(b $m f16)"; done
for r in 1 2 3; do
  for m in $M; do
    echo "$m f16 ks_warps=8 round $r (encode, encode_device, 16): $(STAPES_CUDA_REL_KS_WARPS=8 b $m f16)"
    echo "$m f16 ks_warps=auto round $r (encode, encode_device, 16): $(b $m f16)"
  done
done
date -u
for m in parakeet-tdt-0.6b-v2 whisper-large-v3-turbo; do
  echo "warm q8 $m: $(b $m q8)"
  for r in 1 2; do
    echo "$m q8 default round $r: $(b $m q8)"
    echo "$m q8 int8 all round $r: $(STAPES_CUDA_I8GEMM=1 STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_LN_Q8=1 b $m q8)"
    echo "$m q8 int8 K>=4096 round $r: $(STAPES_CUDA_I8GEMM=1 STAPES_CUDA_Q8_MIX=shape STAPES_CUDA_LN_Q8=1 b $m q8)"
  done
done
date -u
timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --launch-count 700 \
  $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 1 --decode-tokens 2 > $O/ncu-parakeet.csv 2>/tmp/t2/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/t2/ncu.err
xz -9 $O/ncu-parakeet.csv
date -u
