#!/usr/bin/env bash
# Stop 44, call 1 (bundle v96 = c02ce6e + the few-row FP8 GEMM `f8mm`, off by default):
# main's GPU tests (c02ce6e's split operand choice had never run on a GPU), the new fp8 test,
# the families with f8mm on, then one-clip encodes with f8mm off / on alternating, and ncu of
# one parakeet encode with it on.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=v96
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 $B/$1 --test-threads=1 --nocapture > /tmp/o/$1${2:-}.log 2>&1; rc=$?
  echo "=== $1${2:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1${2:-}.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|^ok " /tmp/o/$1${2:-}.log | head -30; }
t fp8
for b in linear_add_norms pdl cuda_parakeet cuda_canary; do t $b; done
echo "elapsed $(el) s"
STAPES_CUDA_F8MM=1 t cuda_parakeet _f8mm
STAPES_CUDA_F8MM=1 t cuda_canary _f8mm
echo "elapsed $(el) s"
e() { # f8mm plain pdl model
  STAPES_CUDA_F8MM=$1 STAPES_CUDA_F8MM_PLAIN=$2 STAPES_CUDA_PDL=$3 $B/stapes bench --synthetic $4 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_device"
print("f8mm", sys.argv[1], "plain", sys.argv[2], "pdl", sys.argv[3], sys.argv[4], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 $4 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2; C=canary-1b-flash
for f in 0 1; do e $f 1 steps $P > /dev/null; done
for r in 1 2 3; do
  e 0 1 steps $P; e 1 1 steps $P; e 1 0 steps $P; e 1 1 all $P; e 0 1 all $P
done
for r in 1 2; do e 0 1 steps $C; e 1 1 steps $C; e 1 1 all $C; done
echo "elapsed $(el) s"
STAPES_CUDA_F8MM=1 timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --launch-count 2500 $B/stapes bench --synthetic $P --device cuda \
  --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/o/ncu-parakeet-f8mm.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? elapsed $(el)"
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-parakeet-f8mm.csv --marker rel_attn --top 20
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
