#!/usr/bin/env bash
# Stop 24 call 3. Build v21 = v20 with the few-row GEMM's split-K reduction rewritten: call 2's
# read each peer's partial sums one distributed-shared-memory round trip after another (the sum
# used each load at once), 2 columns an item; now 4 columns an item and every peer's load issued
# before any is used. (a) tests; (b) STAPES_CUDA_SKINNY=0 against the default, one shared tuning
# cache, alternating; (c) forced splits; (d) one parakeet clip's kernels under ncu.
# Stage: dist/stage2.sh v21 "skinny cuda_parakeet cuda_canary parakeet_batch"; carry dist/v21 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3
tar -xJf dist/v21/bins.tar.xz -C $B && tar -xJf dist/v21/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in skinny cuda_parakeet cuda_canary parakeet_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t3/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t3/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A6 /tmp/t3/$t.log | head -14; [ $rc -ne 0 ] && cp /tmp/t3/$t.log $O/
done
date -u
ab() { # label model env...
  local label=$1 m=$2; shift 2
  env "$@" timeout 90 $B/stapes bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --json 2>/tmp/t3/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m" || tail -3 /tmp/t3/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab warm $m STAPES_CUDA_SKINNY=0 > /dev/null; ab warm $m > /dev/null; done
for rep in 1 2; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab "off" $m STAPES_CUDA_SKINNY=0; ab "on" $m; done
done
for s in 2 4 8; do ab "split$s" parakeet-tdt-0.6b-v2 STAPES_CUDA_SKINNY_SPLIT=$s; done
date -u
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv --launch-count 1500 \
  $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 > $O/ncu-parakeet-skinny.csv 2>/tmp/t3/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/t3/ncu.err
xz -9 $O/ncu-parakeet-skinny.csv
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,launch__grid_size
timeout 100 ncu --clock-control none --cache-control none --kernel-name "regex:^hgsk" --launch-count 10 --metrics $M --csv \
  $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 > $O/ncu-hgsk-metrics.csv 2>/tmp/t3/ncu.err; echo "ncu2 rc=$?"
date -u
cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
