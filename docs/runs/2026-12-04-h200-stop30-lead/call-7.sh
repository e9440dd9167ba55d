#!/usr/bin/env bash
# Stop 30 call 7: build v43 = main 3df9a95 + element-wise kernels (act, affine, binary) launched
# with a thread a 4-value access where they take 4 at a time (one clip's SiLU pass: 560 blocks
# instead of 2240, three quarters of which found nothing to do). Tests; then v42 (= 78c3aeb's
# code) against v43 on one STAPES_CACHE, alternating three rounds: parakeet and canary on the
# device; ncu of the act launches both ways. Carry dist/v43 dist/v42w dist/run30.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b42
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v43/bins.tar.xz -C $B && tar -xJf dist/v43/cache.tar.xz -C $STAPES_CACHE
tar -xJf dist/v42w/bins.tar.xz -C $A stapes && tar -xJf dist/v42w/cache.tar.xz -C $STAPES_CACHE
for t in ops f16_activations graphs cuda_parakeet cuda_whisper; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { $1/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(b $A $m) / $(b $B $m)"; done
for r in 1 2 3; do
  for m in $M; do
    echo "$m f16 v42 round $r (encode, encode_device, 16): $(b $A $m)"
    echo "$m f16 v43 round $r (encode, encode_device, 16): $(b $B $m)"
  done
done
date -u
for v in A B; do
  timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --kernel-name regex:"^act$" --launch-count 40 \
    ${!v}/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 1 --decode-tokens 2 > $O/ncu-act-$v.csv 2>/tmp/t2/ncu.err; echo "ncu $v rc=$?"
  python3 - $O/ncu-act-$v.csv <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
h=rows[0]; ki=h.index("Kernel Name"); mi=h.index("Metric Name"); vi=h.index("Metric Value"); idi=h.index("ID")
d=collections.defaultdict(dict)
for r in rows[1:]: d[(r[idi],r[ki])][r[mi]]=r[vi].replace(",","")
agg=collections.defaultdict(list)
for (i,k),m in d.items(): agg[(k,m.get("launch__grid_size"))].append(float(m["gpu__time_duration.sum"]))
for (k,g),v in sorted(agg.items()): v.sort(); print(f"{k} grid {g}: n {len(v)} median {v[len(v)//2]/1000:.2f} us min {v[0]/1000:.2f}")
PY
done
xz -9 $O/ncu-act-*.csv
date -u
