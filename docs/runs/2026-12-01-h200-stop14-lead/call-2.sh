#!/usr/bin/env bash
# Stop 14 call 2: the TMA-fed wgmma int8 GEMM (i8gemm_tma_*): bitwise tests, micro-bench, whole models.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2
tar -xJf dist/d2/bins.tar.xz -C $B && tar -xJf dist/d2/cache.tar.xz -C $STAPES_CACHE
date -u
run1() { local t=$1; local s=$(date +%s); timeout ${TO:-120} "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t2/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t2/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t2/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || { grep -A6 "panicked" "/tmp/t2/$t${TAG:-}.log" | head -14; tail -5 "/tmp/t2/$t${TAG:-}.log"; }; return $rc; }
export -f run1
# a hang (TMA never completing) would eat the call: the first test runs alone, short
TO=60 run1 i8gemm || { echo "STOP: i8gemm failed"; tail -30 /tmp/t2/i8gemm.log; exit 0; }
printf '%s\n' ln_pair q8_accuracy | STAPES_CUDA_I8GEMM=1 TAG=-i8 xargs -P 2 -I{} bash -c 'run1 {}'
date -u
timeout 100 $B/i8gemm --ignored --nocapture i8gemm_bench 2>&1 | grep -E "^\||device" > $O/i8bench.txt; cut -d'|' -f1-4,15-23 $O/i8bench.txt
date -u
bj() { timeout 60 "$B/stapes" bench --synthetic "$1" --device cuda --lane "$2" --audio samples/jfk.wav --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
d={k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v}
print(sys.argv[1], d)' "$3 $1 $2" || echo "$3 $1 $2 FAILED"; }
for m in whisper-large-v3-turbo whisper-tiny parakeet-tdt-0.6b-v2 canary-1b-flash; do
  bj $m q8 q8-default
  STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_I8GEMM=1 bj $m q8 q8-tma128
  STAPES_CUDA_Q8_MIX=0 STAPES_CUDA_I8GEMM=1 STAPES_CUDA_I8GEMM_TILE=tma_n256s4 bj $m q8 q8-tma256
done
date -u
cd /tmp/t2 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
