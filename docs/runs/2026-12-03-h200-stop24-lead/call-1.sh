#!/usr/bin/env bash
# Stop 24 call 1. Build v19 = 31bbc6b + the split-keys rel-attention with up to 8 warps a block
# (a warp a 16-key tile; dynamic shared memory). (a) tests; (b) one shared tuning cache, split
# warps 4 (the old count, STAPES_CUDA_REL_KS_WARPS=4) against the default, parakeet and canary one
# clip, alternating; (c) ncu of the split kernel at 4 and 8 warps; (d) one parakeet clip's and one
# turbo window's kernels under ncu (no cache flush, clocks untouched), for where the time goes.
# Stage: dist/stage2.sh v19 "conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs";
# carry dist/v19 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c1 B=/tmp/b1
mkdir -p $B $STAPES_CACHE /tmp/t1
tar -xJf dist/v19/bins.tar.xz -C $B && tar -xJf dist/v19/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs; do
  s=$(date +%s); timeout 120 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t1/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
ab() { # label model env...
  local label=$1 m=$2; shift 2
  env "$@" timeout 90 $B/stapes bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --json 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m" || tail -3 /tmp/t1/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-large-v3-turbo; do ab warm $m > /dev/null; done
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab "ks4" $m STAPES_CUDA_REL_KS_WARPS=4; ab "ks-auto" $m; done
done
date -u
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
for w in 4 8; do
  STAPES_CUDA_REL_KS_WARPS=$w timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^rel_attn_ks_d128$" --launch-count 24 --metrics $M --csv \
    $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 > $O/ncu-ks$w.csv 2>/tmp/t1/ncu.err; echo "ncu ks$w rc=$?"
done
python3 - $O <<'PY'
import csv, sys, glob, statistics
for f in sorted(glob.glob(sys.argv[1] + "/ncu-ks*.csv")):
    rows = [r for r in csv.reader(l for l in open(f) if l.startswith('"'))]
    h = rows[0]; i = {k: h.index(k) for k in ("Metric Name", "Metric Value")}
    v = [float(r[i["Metric Value"]].replace(",", "")) for r in rows[1:] if r[i["Metric Name"]] == "gpu__time_duration.sum"]
    b = [r[i["Metric Value"]] for r in rows[1:] if r[i["Metric Name"]] == "launch__block_size"][:1]
    print(f.split("/")[-1], "block", b, "n", len(v), "median ns", statistics.median(v) if v else None)
PY
date -u
for m in parakeet-tdt-0.6b-v2 whisper-large-v3-turbo; do
  timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv --launch-count 3000 \
    $B/stapes bench --synthetic $m --device cuda --lane f16 --iters 1 > $O/ncu-$m.csv 2>/tmp/t1/ncu.err; echo "ncu $m rc=$?"; tail -2 /tmp/t1/ncu.err
  xz -9 $O/ncu-$m.csv
done
date -u
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
