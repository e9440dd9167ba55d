#!/usr/bin/env bash
# Stop 22 call 2. The subsampling stem rewritten (fc_sub_stem: k3 s2 p1 only, a channel a
# thread, taps in registers, a left-to-right walk over f2; fc_dw_cl: a block per output pixel ×
# 128 channels, 32-bit index math). (a) the subsampling / FastConformer tests; (b) parakeet and
# canary encodes, 1 and 16 clips, A/B against call 1's build v10 in the same lease; (c) a 16-clip
# parakeet encode's kernels under ncu (tuning cache warmed first, so the profile holds the encode).
# Stage: dist/stage2.sh v11 "fc_subsample cuda_parakeet cuda_canary parakeet_batch conformer_ops
# cuda_fc_shapes"; carry dist/v10 dist/v11 dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2 A=/tmp/b1
mkdir -p $B $A $STAPES_CACHE /tmp/c1 /tmp/t1
tar -xJf dist/v11/bins.tar.xz -C $B && tar -xJf dist/v11/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
tar -xJf dist/v10/bins.tar.xz -C $A && tar -xJf dist/v10/cache.tar.xz -C /tmp/c1 && tar -xJf dist/au/audio.tar.xz -C /tmp/c1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in fc_subsample conformer_ops cuda_parakeet cuda_canary parakeet_batch cuda_fc_shapes; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t1/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t1/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A4 /tmp/t1/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t1/$t.log $O/
done
date -u
ab() { # label bin cache model lane
  STAPES_CACHE=$3 timeout 90 $2 bench --synthetic $4 --device cuda --lane $5 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t1/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $4 $5" || tail -3 /tmp/t1/err.txt
}
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash; do ab v10 $A/stapes /tmp/c1 $m f16; ab v11 $B/stapes $STAPES_CACHE $m f16; done
done
ab v11 $B/stapes $STAPES_CACHE parakeet-tdt-0.6b-v2 q8
date -u
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv --launch-count 3000 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-parakeet16-nocf.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-parakeet16-nocf.csv
date -u
cd /tmp/t1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
