#!/usr/bin/env bash
# Stop 33 call 1: stop 32's untested work. v52 = main (04bd24b), v53 = main + the two-accesses
# `act` trial (docs/runs/2026-12-04-h200-stop32-lead/act-two-accesses-untested.diff.txt).
# ops (with activations_past_the_grid_cap) on both kernels; the FastConformer tests on the trial;
# v52 against v53 on one STAPES_CACHE, alternating three rounds (parakeet one clip and 16);
# ncu of the 16-clip SiLU passes in both. Carry dist/v52 dist/v53 dist/au2 dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b53 A=/tmp/b52
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar -xJf dist/v53/bins.tar.xz -C $B && tar -xJf dist/v53/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v52/bins.tar.xz -C $A && tar -xJf dist/v52/cache.tar.xz -C $STAPES_CACHE
t() { s=$(date +%s); timeout 90 $1/$2 --test-threads=1 > /tmp/t2/$2.log 2>&1; rc=$?
  echo "=== $1 $2 rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$2.log | tail -1)"
  grep -E "activations_past|panicked" -A3 /tmp/t2/$2.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$2.log $O/$(basename $1)-$2.log; }
t $A ops
for x in ops f16_activations cuda_parakeet parakeet_batch; do t $B $x; done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode_device"), g("encode_batched"))'; }
b() { timeout 40 $1/stapes bench --synthetic $2 --device cuda --lane f16 --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
P=parakeet-tdt-0.6b-v2
echo "warm: $(b $A $P) / $(b $B $P)"
for r in 1 2 3; do
  echo "$P v52 round $r (encode_device, 16): $(b $A $P)"
  echo "$P v53 round $r (encode_device, 16): $(b $B $P)"
done
date -u
for v in $A $B; do
  timeout 60 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --kernel-name act --launch-skip 300 --launch-count 40 \
    $v/stapes bench --synthetic $P --device cuda --lane f16 --iters 1 --batch 16 --decode-tokens 2 > /tmp/t2/ncu.csv 2>/dev/null
  cp /tmp/t2/ncu.csv $O/ncu-act-$(basename $v).csv
  echo "ncu act $v: $(grep -c '"act"' /tmp/t2/ncu.csv) rows; grid 4224 durations (us): $(grep gpu__time_duration /tmp/t2/ncu.csv | grep '"(4224, 1, 1)"' | awk -F'","' '{print $NF}' | tr -d '"' | sort -n | tr '\n' ' ' | cut -c1-400)"
done
date -u
