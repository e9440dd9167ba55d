#!/usr/bin/env bash
# Stop 23 call 3. Build v18 = v17 with rel_attn_d128 capped at 168 registers (call 2: at 224
# the driver still allowed 2 blocks a SM: a sub-partition's 16384 registers hold 2 warps of 224,
# 3 of 168). Tests, then v16 (the 254-register kernel) against v18 on one shared tuning cache,
# alternating; one clip with the plain kernel forced (STAPES_CUDA_REL_ATTN_KS=0) against the
# split-keys default; ncu of the batched attention.
# Stage: dist/stage2.sh v18 "conformer_ops cuda_parakeet parakeet_batch"; carry dist/v16
# dist/v18 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3 A=/tmp/a3
mkdir -p $B $A $STAPES_CACHE /tmp/t3
tar -xJf dist/v18/bins.tar.xz -C $B && tar -xJf dist/v18/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v16/bins.tar.xz -C $A ./stapes && tar -xJf dist/v16/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in conformer_ops cuda_parakeet parakeet_batch; do
  s=$(date +%s); timeout 90 $B/$t --test-threads=1 > /tmp/t3/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t3/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t3/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t3/$t.log $O/
done
ab() { # label bin model
  timeout 90 $2 bench --synthetic $3 --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t3/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $3" || tail -3 /tmp/t3/err.txt
}
m=parakeet-tdt-0.6b-v2
ab warm $A/stapes $m > /dev/null
for rep in 1 2 3 4; do ab v16 $A/stapes $m; ab v18 $B/stapes $m; done
for rep in 1 2; do STAPES_CUDA_REL_ATTN_KS=0 ab "v18 plain" $B/stapes $m; ab "v18 auto" $B/stapes $m; done
date -u
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__waves_per_multiprocessor
timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^rel_attn_d128$" --launch-count 24 --metrics $M --csv \
  $B/stapes bench --synthetic $m --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-attn16-v18.csv 2>/tmp/t3/ncu.err; echo "ncu rc=$?"
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
        key = (k,) + tuple(m.get(x) for x in ("launch__grid_size", "launch__block_size", "launch__registers_per_thread", "launch__occupancy_limit_registers", "launch__waves_per_multiprocessor"))
        groups[key].append(float(m["gpu__time_duration.sum"].replace(",", "")))
    for g, v in groups.items():
        print(f.split("/")[-1], g, "n", len(v), "median ns", statistics.median(v), "sum", sum(v))
PY
date -u
