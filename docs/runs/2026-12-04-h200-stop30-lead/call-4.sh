#!/usr/bin/env bash
# Stop 30 call 4: build v42 = main ebd13d9 + the rel-attention kernels issuing the first key tile's
# cp.async loads before the query loads (the two global round trips overlap), and the split-keys
# merge with each warp's weight computed once a row (16 threads, one more barrier) instead of an
# exp2 per output and warp. Tests (the CUDA-side ones besides the FastConformer's, the first GPU
# run of ebd13d9's allow_dyn_smem change for the attention and int8 kernels); then v40 (=
# ebd13d9's code) against v42, alternating three rounds on one STAPES_CACHE (one tuning cache):
# parakeet one clip on the device and 16 clips, canary; ncu of the split kernel.
# Carry dist/v42 dist/v40s dist/au2 dist/run30.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b40
mkdir -p $B $A $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v42/bins.tar.xz -C $B && tar -xJf dist/v42/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v40s/stapes.tar.xz -C $A && tar -xJf dist/v40s/cache.tar.xz -C $STAPES_CACHE
for t in conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs attention ops cuda_whisper i8gemm q8_accuracy cuda_label_loop transducer_ops step_fused; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
b() { $1/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(b $A $m) / $(b $B $m)"; done
for r in 1 2 3; do
  for m in $M; do
    echo "$m f16 v40 round $r (encode, encode_device, 16): $(b $A $m)"
    echo "$m f16 v42 round $r (encode, encode_device, 16): $(b $B $m)"
  done
done
date -u
for v in A B; do
  timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --kernel-name regex:"rel_attn" --launch-count 48 \
    ${!v}/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 1 --batch 16 --decode-tokens 2 > $O/ncu-rel-$v.csv 2>/tmp/t2/ncu.err; echo "ncu $v rc=$?"
  python3 - $O/ncu-rel-$v.csv <<'PY'
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
xz -9 $O/ncu-rel-*.csv
date -u
