#!/usr/bin/env bash
# Stop 31 call 5: build v48 = main f069800 + ReLU in cuBLASLt's epilogue (EpiAct: the GEMM plans'
# key and cache word gain +R; linear_act(Relu) asks for it) and the FastConformer stem's last
# pointwise conv through linear_act(Relu), so the ReLU pass before the subsampling linear goes.
# Tests (linear_add now also with ReLU, and that it adds no launch to a plain linear); then v46
# (= 55caa70) against v48 on one STAPES_CACHE, alternating three rounds. Carry dist/v48 dist/v46
# dist/au2 dist/run31.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b46
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v48/bins.tar.xz -C $B && tar -xJf dist/v48/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v46/bins.tar.xz -C $A stapes && tar -xJf dist/v46/cache.tar.xz -C $STAPES_CACHE
for t in linear_add graphs conformer_ops cuda_parakeet cuda_canary parakeet_batch cuda_whisper; do
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
    echo "$m v48 round $r (encode, encode_device, 16): $(b $B $m)"
  done
done
date -u
