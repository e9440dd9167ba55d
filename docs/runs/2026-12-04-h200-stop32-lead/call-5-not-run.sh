#!/usr/bin/env bash
# NOT RUN: the start was refused twice and then the device time left (285 s) was too little to
# start a machine. Kept with act-two-accesses-untested.diff.txt for the next stop.
# Stop 32 call 5: build v51 = v50 + the `act` kernel taking two 4-value accesses a thread per
# step with both loads ahead of the math (16 parakeet clips' SiLU passes sit at the grid cap with
# ~2 accesses a thread) + ops' new activations_past_the_grid_cap test. Tests; v50 against v51 on
# one STAPES_CACHE alternating two rounds (parakeet one and 16; trimmed to the device time left); ncu of the batched
# SiLU passes in both. Carry dist/v50 dist/v51 dist/au2 dist/run32.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b50
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v51/bins.tar.xz -C $B && tar -xJf dist/v51/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v50/bins.tar.xz -C $A stapes && tar -xJf dist/v50/cache.tar.xz -C $STAPES_CACHE
for t in ops f16_activations cuda_parakeet parakeet_batch; do
  s=$(date +%s); timeout 60 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode_device"), g("encode_batched"))'; }
b() { timeout 40 $1/stapes bench --synthetic $2 --device cuda --lane f16 --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
P=parakeet-tdt-0.6b-v2 C=canary-1b-flash
echo "warm: $(b $A $P) / $(b $B $P)"
for r in 1 2; do
  for m in $P; do
    echo "$m v50 round $r (encode_device, 16): $(b $A $m)"
    echo "$m v51 round $r (encode_device, 16): $(b $B $m)"
  done
done
date -u
for v in $A $B; do
  timeout 40 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --kernel-name act --launch-skip 300 --launch-count 40 \
    $v/stapes bench --synthetic $P --device cuda --lane f16 --iters 1 --batch 16 --decode-tokens 2 > /tmp/t2/ncu.csv 2>/dev/null
  echo "ncu act $v: $(grep -c '"act"' /tmp/t2/ncu.csv) launches; grid 4224 durations (us): $(grep gpu__time_duration /tmp/t2/ncu.csv | grep '"(4224, 1, 1)"' | awk -F'","' '{print $NF}' | tr -d '"' | sort -n | tr '\n' ' ' | cut -c1-400)"
done
date -u
