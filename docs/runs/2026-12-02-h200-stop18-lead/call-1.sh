#!/usr/bin/env bash
# verify bb4046c (shared key rounds of attn_one / attn_split) on the GPU; ncu --set full of awg64
# on the turbo shape (harness) to see what bounds it
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3 PATH=/usr/local/cuda/bin:$PATH
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m
tar -xJf dist/v1/bins.tar.xz -C $B && tar -xJf dist/v1/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
( cd dist/awg2 && K=../../crates/stapes-cuda/kernels && cp $K/common.cuh $K/attention.cu $K/attn_wg.cu . && nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -Xptxas -v -o awg main.cu -lcuda 2>&1 | grep -A2 -E "error|awg64" | head -20 ) &
run1() { local t=$1; local s=$(date +%s); timeout 250 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
printf "%s\n" ops step_fused cuda_whisper cross_f16 attention cuda_batch graphs cuda_canary pdl | xargs -P 4 -I{} bash -c "run1 {}"
ARGS="cuda" run1 whisper_select
(cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log)
wait
date -u
cd dist/awg2 && ./awg 4
timeout 200 ncu --set full -k regex:awg64 -c 1 -o $O/awg-turbo ./awg 4 turbo > /dev/null 2>&1; echo "ncu rc=$?"
ncu --import $O/awg-turbo.ncu-rep --page details 2>&1 | head -400
ncu --import $O/awg-turbo.ncu-rep --page raw --csv 2>/dev/null | xz > $O/awg-turbo-raw.csv.xz
date -u
