#!/usr/bin/env bash
# Stop 23 call 2. Build v17 = v16 + the plain rel-attention kernel with its (q+v) fragments in
# shared memory (read back by ldmatrix each key tile) and at most 224 registers (__maxnreg__,
# ptxas: no spills; was 254): 3 blocks of 3 warps a SM, so 16 parakeet clips' 384 blocks make
# one wave. Call 1 showed 254 registers, 2 blocks a SM. Tests, then v16 against v17 on one
# shared tuning cache, alternating, turbo with its self-attention split 2 ways, then ncu of the
# batched attention in both.
# Stage: dist/stage2.sh v17 "conformer_ops cuda_parakeet cuda_canary parakeet_batch
# cuda_fc_shapes graphs"; carry dist/v16 dist/v17 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/a2
mkdir -p $B $A $STAPES_CACHE /tmp/t2
tar -xJf dist/v17/bins.tar.xz -C $B && tar -xJf dist/v17/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v16/bins.tar.xz -C $A ./stapes && tar -xJf dist/v16/cache.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in conformer_ops cuda_parakeet cuda_canary parakeet_batch cuda_fc_shapes graphs; do
  s=$(date +%s); timeout 90 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t2/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
ab() { # label bin model
  timeout 90 $2 bench --synthetic $3 --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t2/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $3" || tail -3 /tmp/t2/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab warm $A/stapes $m > /dev/null; done
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab v16 $A/stapes $m; ab v17 $B/stapes $m; done
done
date -u
# turbo's self-attention split 2 ways (240 blocks of the unsplit kernel fill 0.91 of a wave)
for rep in 1 2; do
  for sp in auto 2; do STAPES_CUDA_ATTN_SPLIT=$sp ab "v17 split=$sp" $B/stapes whisper-large-v3-turbo; done
done
date -u
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__waves_per_multiprocessor
for v in v16:$A v17:$B; do
  bin=${v#*:}/stapes; tag=${v%%:*}
  timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^rel_attn_d128$" --launch-count 24 --metrics $M --csv \
    $bin bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-attn16-$tag.csv 2>/tmp/t2/ncu.err; echo "ncu attn $tag rc=$?"
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
        key = (k,) + tuple(m.get(x) for x in ("launch__grid_size", "launch__block_size", "launch__registers_per_thread", "launch__occupancy_limit_registers", "launch__waves_per_multiprocessor"))
        groups[key].append(float(m["gpu__time_duration.sum"].replace(",", "")))
    for g, v in groups.items():
        print(f.split("/")[-1], g, "n", len(v), "median ns", statistics.median(v), "sum", sum(v))
PY
date -u
