#!/usr/bin/env bash
# Stop 44, call 4 (bundle v98 = v97 with the epilogue activation a constant, wgmma groups overlapped, a swizzled staging tile and the tensor maps prefetched; f8wg off by
# default): its test, the families with it on, one-clip encodes off / on alternating, ncu.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=v98
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { s=$(date +%s); timeout 150 $B/$1 --test-threads=1 --nocapture ${3:-} > /tmp/o/$1${2:-}.log 2>&1; rc=$?
  echo "=== $1${2:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/o/$1${2:-}.log | tail -1)"
  grep -E "panicked|FAILED|SKIPPED|^ok m" /tmp/o/$1${2:-}.log | head -40; }
t fp8 "" few_row
STAPES_CUDA_F8WG=1 t cuda_parakeet _f8wg
STAPES_CUDA_F8WG=1 t cuda_canary _f8wg
echo "elapsed $(el) s"
e() { # f8wg plain model
  STAPES_CUDA_F8WG=$1 STAPES_CUDA_F8WG_PLAIN=$2 $B/stapes bench --synthetic $3 --device cuda --lane q8 --audio samples/jfk.wav --iters 20 --json 2>/tmp/t2/e.err | python3 -c '
import json,sys; r=json.load(sys.stdin)["report"]; k="encode_device"
print("f8wg", sys.argv[1], "plain", sys.argv[2], sys.argv[3], "%.3f ms (min %.3f)" % (r[k]["median_ms"], r[k]["min_ms"]))' $1 $2 $3 || tail -3 /tmp/t2/e.err; }
P=parakeet-tdt-0.6b-v2; C=canary-1b-flash
for f in 0 1; do e $f 1 $P > /dev/null; done
for r in 1 2 3; do e 0 1 $P; e 1 1 $P; e 1 0 $P; done
for r in 1 2; do e 0 1 $C; e 1 1 $C; e 1 0 $C; done
echo "elapsed $(el) s"
STAPES_CUDA_F8WG=1 timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --launch-count 2500 $B/stapes bench --synthetic $P --device cuda \
  --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/o/ncu-parakeet-f8wg.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? elapsed $(el)"
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-parakeet-f8wg.csv --marker rel_attn --top 12
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
