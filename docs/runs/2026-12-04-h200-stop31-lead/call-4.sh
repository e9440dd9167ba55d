#!/usr/bin/env bash
# Stop 31 call 4: build v47 = main 55caa70 + splitk_add_ln16's block sums with one barrier each
# (block_sum_1bar: two scratch halves taken in turn, the warp sums added by every thread in
# warp_sum's pairing). nvcc check of block_sum_1bar against block_sum bit for bit; tests; then v46
# (= 55caa70) against v47 on one STAPES_CACHE, alternating three rounds. Carry dist/v47 dist/v46
# dist/run31.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b46
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
cat crates/stapes-cuda/kernels/common.cuh crates/stapes-cuda/kernels/norm.cu dist/run31/bsum_check.cu > /tmp/t2/bs.cu
# (this check printed nothing in the run: no nvcc on the PATH there; the trial lost on time anyway)
NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
$NVCC -arch=sm_90 -O3 -o /tmp/t2/bs /tmp/t2/bs.cu 2>&1 | grep -v "warning" | head -5 && /tmp/t2/bs
tar -xJf dist/v47/bins.tar.xz -C $B && tar -xJf dist/v47/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/v46/bins.tar.xz -C $A stapes && tar -xJf dist/v46/cache.tar.xz -C $STAPES_CACHE
for t in linear_add_norms ln_pair conformer_ops cuda_parakeet cuda_canary; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { timeout 60 $1/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
P=parakeet-tdt-0.6b-v2 C=canary-1b-flash
for m in $P $C; do echo "warm $m: $(b $A $m) / $(b $B $m)"; done
for r in 1 2 3; do
  for m in $P $C; do
    echo "$m v46 round $r (encode, encode_device, 16): $(b $A $m)"
    echo "$m v47 round $r (encode, encode_device, 16): $(b $B $m)"
  done
done
date -u
