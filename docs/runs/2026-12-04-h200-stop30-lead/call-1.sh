#!/usr/bin/env bash
# Stop 30 call 1: build v39 = main 28ec2ef + the fused rel-attention kernels with each key
# tile's position rows staged in shared memory (cp.async beside K/V, ldmatrix B operands:
# rel_attn_ps_*, rel_attn_ks_ps_*; STAPES_CUDA_REL_PS=0 loads them from global memory as before),
# + review mends (norm_params helper, the split form's K bound as backend state, ln_out8 shared by
# ln16_pass and ln_block8). Tests, then an A/B in one binary on one tuning cache (REL_PS 0 / 1),
# alternating three rounds: parakeet one 11 s clip on the device and 16 clips, canary; then ncu of
# the attention kernels both ways. Carry dist/v39 dist/au2 dist/run30.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
date -u
tar -xJf dist/v39/bins.tar.xz -C $B && tar -xJf dist/v39/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in conformer_ops linear_add_norms ln_pair f16_activations pdl cuda_parakeet cuda_canary parakeet_batch cuda_fc_shapes graphs; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 --nocapture > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; g=lambda k: (r.get(k) or {}).get("median_ms"); print(g("encode"), g("encode_device"), g("encode_batched"))'; }
run() { STAPES_CUDA_REL_PS=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch 16 --decode-tokens 2 --json 2>/tmp/t2/err.txt | q || tail -3 /tmp/t2/err.txt; }
M="parakeet-tdt-0.6b-v2 canary-1b-flash"
for m in $M; do echo "warm $m: $(run 1 $m f16) / $(run 0 $m f16)"; done
for r in 1 2 3; do
  for m in $M; do
    for s in 0 1; do
      echo "$m f16 rel_ps=$s round $r (encode, encode_device, 16): $(run $s $m f16)"
    done
  done
done
for s in 0 1; do echo "parakeet q8 rel_ps=$s (encode, encode_device, 16): $(run $s parakeet-tdt-0.6b-v2 q8)"; done
date -u
for s in 0 1; do
  STAPES_CUDA_REL_PS=$s timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread --csv --kernel-name regex:"rel_attn" --launch-count 60 \
    $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 1 --batch 16 --decode-tokens 2 > $O/ncu-rel-ps$s.csv 2>/tmp/t2/ncu.err; echo "ncu $s rc=$?"; tail -2 /tmp/t2/ncu.err
  python3 - $O/ncu-rel-ps$s.csv <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
h=rows[0]; ki=h.index("Kernel Name"); mi=h.index("Metric Name"); vi=h.index("Metric Value"); idi=h.index("ID")
d=collections.defaultdict(dict)
for r in rows[1:]: d[(r[idi],r[ki])][r[mi]]=r[vi]
agg=collections.defaultdict(list)
for (i,k),m in d.items(): agg[(k,m.get("launch__grid_size"))].append(float(m["gpu__time_duration.sum"]))
for (k,g),v in sorted(agg.items()): v.sort(); print(f"{k} grid {g}: n {len(v)} median {v[len(v)//2]/1000:.2f} us min {v[0]/1000:.2f}")
PY
done
xz -9 $O/ncu-rel-ps*.csv
date -u
