#!/usr/bin/env bash
# Stop 14 call 1: the wgmma int8 GEMM (i8gemm_wg_*): bitwise tests, micro-bench, whole models.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache B=/tmp/b
mkdir -p /tmp/b /tmp/scache /tmp/m /tmp/t
tar -xJf dist/d1/bins.tar.xz -C /tmp/b && tar -xJf dist/d1/cache.tar.xz -C /tmp/scache


nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || grep -A6 "panicked" "/tmp/t/$t${TAG:-}.log" | head -14; }
export -f run1
run1 i8gemm
printf '%s\n' q8_mix linear_add ln_pair q8_accuracy | xargs -P 4 -I{} bash -c 'run1 {}'
printf '%s\n' linear_add ln_pair q8_accuracy q8_mix | STAPES_CUDA_I8GEMM=1 TAG=-i8 xargs -P 4 -I{} bash -c 'run1 {}'
date -u
timeout 120 $B/i8gemm --ignored --nocapture i8gemm_bench 2>&1 | grep -E "^\||device" > $O/i8bench.txt; cat $O/i8bench.txt | cut -c1-400
date -u
bj() { "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
d.update({k:round(v,3) for k,v in r.get("extra",{}).items() if "encode" in k or "decode" in k})
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
for m in whisper-large-v3-turbo whisper-tiny whisper-base parakeet-tdt-0.6b-v2 canary-1b-flash; do
  bj $m f16 f16
  bj $m q8 q8-default
  STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_I8GEMM=1 bj $m q8 q8-wg
  STAPES_CUDA_Q8_MIX=shape STAPES_CUDA_I8GEMM=1 bj $m q8 q8-wg-shape
done
date -u
cd /tmp/t && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
