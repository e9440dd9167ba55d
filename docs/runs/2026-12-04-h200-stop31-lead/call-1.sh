#!/usr/bin/env bash
# Stop 31 call 1: build v44 = main 1617ba0 (chain slots keep their masks when the lengths repeat)
# + fc1's SiLU pass in place on the GEMM's output (STAPES_CUDA_ACT_INPLACE=0: a second buffer as
# before) + the norms' gamma/beta loads issued with the row's loads (splitk_add_ln16) or
# prefetched into L1 at kernel start (layer_norm_rows16, ln_pair_rows16). Tests; then v43
# (= aeddfd2's code) against v44 and v44 with ACT_INPLACE=0 on one STAPES_CACHE, alternating
# three rounds. Carry dist/v44 dist/v43 dist/run31.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b43
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v44/bins.tar.xz -C $B && tar -xJf dist/v44/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/v43/bins.tar.xz -C $A stapes && tar -xJf dist/v43/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in ops linear_add_norms ln_pair f16_activations graphs conformer_ops cuda_parakeet cuda_canary cuda_whisper; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { STAPES_CUDA_ACT_INPLACE=$3 timeout 60 $1/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M whisper-large-v3-turbo; do echo "warm $m: $(b $A $m 1) / $(b $B $m 1)"; done
for r in 1 2 3; do
  for m in $M; do
    echo "$m f16 v43 round $r (encode, encode_device, 16): $(b $A $m 1)"
    echo "$m f16 v44 round $r (encode, encode_device, 16): $(b $B $m 1)"
    echo "$m f16 v44 inplace=0 round $r (encode, encode_device, 16): $(b $B $m 0)"
  done
  echo "turbo f16 v43 round $r (encode, encode_device, 16): $(b $A whisper-large-v3-turbo 1)"
  echo "turbo f16 v44 round $r (encode, encode_device, 16): $(b $B whisper-large-v3-turbo 1)"
done
date -u
