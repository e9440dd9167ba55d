#!/usr/bin/env bash
# Stop 23 call 1. Build v16 = ad850c8 + (a) the plain rel-attention kernel with 1-4 warps a
# block chosen by occupancy (16 parakeet clips: 3 warps, one wave, 144 query rows instead of
# 4 warps, 1.5 waves, 192 rows) and a test hook forcing each form; (b) glu_dw_act's GLU sigmoid
# and SiLU on the MUFU exp and reciprocal where the output is f16. Tests first (ad850c8's
# review pass never ran on a GPU: fc_subsample, conformer_ops, the FastConformer models), then
# v14 (stop 22's landed build) against v16 on one shared tuning cache, alternating, then ncu of
# the two kernels in both builds.
# Stage: dist/stage2.sh v16 "conformer_ops fc_subsample cuda_parakeet cuda_canary
# parakeet_batch cuda_fc_shapes f16_activations graphs pdl"; carry dist/v14s dist/v16 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c1 B=/tmp/b1 A=/tmp/a1
mkdir -p $B $A $STAPES_CACHE /tmp/t1
tar -xJf dist/v16/bins.tar.xz -C $B && tar -xJf dist/v16/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v14s/bins.tar.xz -C $A && tar -xJf dist/v14s/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in conformer_ops fc_subsample f16_activations cuda_parakeet cuda_canary parakeet_batch cuda_fc_shapes graphs; do
  s=$(date +%s); timeout 90 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t1/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
ab() { # label bin model
  timeout 90 $2 bench --synthetic $3 --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $3" || tail -3 /tmp/t1/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab warm $A/stapes $m > /dev/null; done
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab v14 $A/stapes $m; ab v16 $B/stapes $m; done
done
date -u
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__occupancy_limit_registers
for v in v14:$A v16:$B; do
  bin=${v#*:}/stapes; tag=${v%%:*}
  timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^rel_attn_(ks_)?d128$" --launch-count 48 --metrics $M --csv \
    $bin bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-attn-$tag.csv 2>/tmp/t1/ncu.err; echo "ncu attn $tag rc=$?"
  timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^glu_dw_act$" --launch-count 48 --metrics $M --csv \
    $bin bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-glu-$tag.csv 2>/tmp/t1/ncu.err; echo "ncu glu $tag rc=$?"
done
python3 - $O <<'PY'
import csv, sys, glob, statistics, collections
for f in sorted(glob.glob(sys.argv[1] + "/ncu-*.csv")):
    rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
    if not rows: print(f, "empty"); continue
    h = rows[0]; ix = {k: h.index(k) for k in ("Kernel Name", "Metric Name", "Metric Value", "ID")}
    by = collections.defaultdict(dict)
    for r in rows[1:]:
        by[(r[ix["ID"]], r[ix["Kernel Name"]])][r[ix["Metric Name"]]] = r[ix["Metric Value"]]
    groups = collections.defaultdict(list)
    for (i, k), m in by.items():
        groups[(k, m.get("launch__grid_size"), m.get("launch__block_size"), m.get("launch__registers_per_thread"), m.get("launch__occupancy_limit_registers"))].append(float(m["gpu__time_duration.sum"].replace(",", "")))
    for g, v in groups.items():
        print(f.split("/")[-1], g, "n", len(v), "median ns", statistics.median(v), "sum", sum(v))
PY
date -u
