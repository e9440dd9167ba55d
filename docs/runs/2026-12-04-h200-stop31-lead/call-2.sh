#!/usr/bin/env bash
# Stop 31 call 2: build v45 = v44 without the L1 prefetch (call 1: turbo 4.78 -> 5.07 ms), and
# instead layer_norm_rows16_gb (the lane's gamma/beta loaded beside its row, ~120 registers)
# where the norm's grid is one wave, layer_norm_rows16 (~63 registers) elsewhere; the warp-row
# norms instantiated per chunk count. Tests; then v43 (= aeddfd2's code) against v45 (and v45
# with ACT_INPLACE=0) on one STAPES_CACHE, alternating three rounds; ncu of turbo's norms both
# builds. Carry dist/v45 dist/v43 dist/run31.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b43
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v45/bins.tar.xz -C $B && tar -xJf dist/v45/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/v43/bins.tar.xz -C $A stapes && tar -xJf dist/v43/cache.tar.xz -C $STAPES_CACHE
for t in ln_pair f16_activations ops linear_add_norms pdl graphs attention conformer_ops cuda_parakeet cuda_canary parakeet_batch cuda_whisper; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { STAPES_CUDA_ACT_INPLACE=$3 timeout 60 $1/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
P=parakeet-tdt-0.6b-v2 C=canary-1b-flash T=whisper-large-v3-turbo
for m in $P $C $T; do echo "warm $m: $(b $A $m 1) / $(b $B $m 1)"; done
for r in 1 2 3; do
  echo "parakeet v43 round $r (encode, encode_device, 16): $(b $A $P 1)"
  echo "parakeet v45 round $r (encode, encode_device, 16): $(b $B $P 1)"
  echo "parakeet v45 inplace=0 round $r (encode, encode_device, 16): $(b $B $P 0)"
  echo "canary v43 round $r (encode, encode_device): $(b $A $C 1)"
  echo "canary v45 round $r (encode, encode_device): $(b $B $C 1)"
  echo "turbo v43 round $r (encode, encode_device, 16): $(b $A $T 1)"
  echo "turbo v45 round $r (encode, encode_device, 16): $(b $B $T 1)"
done
date -u
for v in A B; do
  timeout 90 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --kernel-name regex:"layer_norm_rows16" --launch-count 130 \
    ${!v}/stapes bench --synthetic $T --device cuda --lane f16 --iters 1 --batch 0 --decode-tokens 2 > $O/ncu-ln-$v.csv 2>/tmp/t2/ncu.err; echo "ncu $v rc=$?"
  python3 - $O/ncu-ln-$v.csv <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
h=rows[0]; ki=h.index("Kernel Name"); mi=h.index("Metric Name"); vi=h.index("Metric Value"); idi=h.index("ID")
d=collections.defaultdict(dict)
for r in rows[1:]: d[(r[idi],r[ki])][r[mi]]=r[vi].replace(",","")
agg=collections.defaultdict(list)
for (i,k),m in d.items(): agg[(k,m.get("launch__grid_size"),m.get("launch__registers_per_thread"))].append(float(m["gpu__time_duration.sum"]))
for (k,g,rg),v in sorted(agg.items()): v.sort(); print(f"{k} grid {g} regs {rg}: n {len(v)} median {v[len(v)//2]/1000:.2f} us min {v[0]/1000:.2f}")
PY
done
xz -9 $O/ncu-ln-*.csv
date -u
