#!/usr/bin/env bash
# Stop 43 call 2 (v92 = d3a3c59 + the split-K partial products through cuBLASLt, switch
# STAPES_CUDA_SPLIT_GEMM = blas (main's cuBLAS call) | lt (tuned cuBLASLt, f16) | fp8 (e4m3
# operands for q8 weights whose input's writer left them)). Tests under each new mode, then
# alternating A/B on one tuning cache, then every kernel of one q8 clip in fp8 mode, and the
# text of call 1's rel-attention report. Carry dist/v92.tar.xz dist/rel-parakeet-q8.ncu-rep.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/v92.tar.xz -C /tmp/x
B=/tmp/x/v92
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); STAPES_CUDA_SPLIT_GEMM=$2 timeout 150 $B/$1 --test-threads=1 --nocapture > /tmp/o/$1-$2.log 2>&1; rc=$?
  echo "=== $1 [$2] rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1-$2.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|rel L2" /tmp/o/$1-$2.log | head -12; }
t linear_add_norms lt; t cuda_parakeet fp8; t cuda_canary fp8; t fp8 fp8; t cuda_parakeet blas
echo "elapsed $(el) s"
e() { # mode model lane batch
  STAPES_CUDA_SPLIT_GEMM=$1 $B/stapes bench --synthetic $2 --device cuda --lane $3 --audio samples/jfk.wav --iters 20 --batch $4 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; b=sys.argv[4]
k="encode_batched" if b!="1" else "encode_device"
print(sys.argv[1], sys.argv[2], sys.argv[3], "batch", b, "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
# warm every mode's tuning once
for m in blas lt fp8; do e $m parakeet-tdt-0.6b-v2 q8 1 > /dev/null; e $m canary-1b-flash q8 1 > /dev/null; done
for r in 1 2 3; do
  for m in blas lt fp8; do e $m parakeet-tdt-0.6b-v2 q8 1; done
  for m in blas lt fp8; do e $m canary-1b-flash q8 1; done
  [ $r -le 2 ] && for m in blas lt; do e $m parakeet-tdt-0.6b-v2 f16 1; done
done
echo "elapsed $(el) s"
N="ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv"
STAPES_CUDA_SPLIT_GEMM=fp8 timeout 120 $N --launch-count 2500 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane q8 --audio samples/jfk.wav --iters 1 --batch 1 > /tmp/o/ncu-parakeet-q8-fp8.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? elapsed $(el)"
ncu -i dist/rel-parakeet-q8.ncu-rep --print-details all > /tmp/o/rel-parakeet-q8.txt 2>&1
ncu -i dist/rel-parakeet-q8.ncu-rep --page source --print-source sass --csv > /tmp/o/rel-parakeet-q8-sass.csv 2>&1
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
