#!/usr/bin/env bash
# Stop 32 call 1: build v49 = main ae7feb9 (the gb norm's dispatch through LN16_DISPATCH, not yet
# run on a GPU) + glu_dw_act with two channels a thread (4/8-byte pair accesses, 8 row groups)
# + im2col_1d with 4 columns a thread and its loads ahead of one store. Tests; then v48 (stop 31's
# landed code) against v49 on one STAPES_CACHE, alternating three rounds (parakeet, canary,
# turbo; one and 16); then ncu of one turbo encode and of 16 parakeet clips.
# Carry dist/v49 dist/v48s dist/au2 dist/run32.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b48
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v49/bins.tar.xz -C $B && tar -xJf dist/v49/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v48s/bins.tar.xz -C $A stapes && tar -xJf dist/v48s/cache.tar.xz -C $STAPES_CACHE
for t in ln_pair pdl conformer_ops ops graphs f16_activations cuda_parakeet cuda_canary parakeet_batch cuda_whisper; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { timeout 60 $1/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
P=parakeet-tdt-0.6b-v2 C=canary-1b-flash W=whisper-large-v3-turbo
for m in $P $C $W; do echo "warm $m: $(b $A $m) / $(b $B $m)"; done
for r in 1 2 3; do
  for m in $P $C $W; do
    echo "$m v48 round $r (encode, encode_device, 16): $(b $A $m)"
    echo "$m v49 round $r (encode, encode_device, 16): $(b $B $m)"
  done
done
date -u
timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --launch-count 400 \
  $B/stapes bench --synthetic $W --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 2 > $O/ncu-turbo.csv 2>/tmp/t2/ncu.err; echo "ncu turbo rc=$?"; tail -2 /tmp/t2/ncu.err
timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --launch-count 2500 \
  $B/stapes bench --synthetic $P --device cuda --lane f16 --iters 1 --batch 16 --decode-tokens 2 > $O/ncu-parakeet16.csv 2>/tmp/t2/ncu2.err; echo "ncu parakeet16 rc=$?"; tail -2 /tmp/t2/ncu2.err
xz -9 $O/*.csv
date -u
