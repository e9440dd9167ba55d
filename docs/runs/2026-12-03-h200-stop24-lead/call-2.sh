#!/usr/bin/env bash
# Stop 24 call 2. Build v20 = v19 + the few-row f16 GEMM (hgemm_sk.cu: yᵀ = W·xᵀ on wgmma, K split
# over a cluster, partial sums added through distributed shared memory; bias / activation /
# residual in its epilogue). (a) tests (skinny new; the Whisper ones with real tiny.en);
# (b) one shared tuning cache, STAPES_CUDA_SKINNY=0 against the default, parakeet / canary /
# tiny, alternating; (c) forced splits on parakeet; (d) one parakeet clip's kernels under ncu.
# Stage: dist/stage2.sh v20 "skinny linear_add conformer_ops cuda_parakeet cuda_canary
# parakeet_batch graphs cuda_whisper cuda_batch"; carry dist/v20 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
tar -xJf dist/v20/bins.tar.xz -C $B && tar -xJf dist/v20/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in skinny linear_add conformer_ops cuda_parakeet cuda_canary parakeet_batch graphs cuda_whisper cuda_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A6 /tmp/t2/$t.log | head -14; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
ab() { # label model env...
  local label=$1 m=$2; shift 2
  env "$@" timeout 90 $B/stapes bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --json 2>/tmp/t2/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m" || tail -3 /tmp/t2/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny; do ab warm $m STAPES_CUDA_SKINNY=0 > /dev/null; ab warm $m > /dev/null; done
for rep in 1 2 3; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-tiny; do ab "off" $m STAPES_CUDA_SKINNY=0; ab "on" $m; done
done
for s in 1 2 4 8; do ab "split$s" parakeet-tdt-0.6b-v2 STAPES_CUDA_SKINNY_SPLIT=$s; done
date -u
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --csv --launch-count 1500 \
  $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 > $O/ncu-parakeet-skinny.csv 2>/tmp/t2/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/t2/ncu.err
xz -9 $O/ncu-parakeet-skinny.csv
date -u
cd /tmp/t2 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
