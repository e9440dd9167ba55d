#!/usr/bin/env bash
# Stop 14 call 8: every CUDA test binary at the final tree (de07af9's code), real tiny.en included.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache8 B=/tmp/b8
mkdir -p $B $STAPES_CACHE /tmp/t8 /tmp/m
tar -xJf dist/d8/bins.tar.xz -C $B && tar -xJf dist/d8/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d8/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t8/$t${TAG:-}.log" 2>&1; local rc=$?; echo "=== $t${TAG:-} rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t8/$t${TAG:-}.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t8/$t${TAG:-}.log" | head -4; [ $rc = 0 ] || grep -A6 "panicked" "/tmp/t8/$t${TAG:-}.log" | head -14; }
export -f run1
ls $B | grep -v -x -e stapes -e whisper_select -e nvrtc_compile -e cubin | xargs -P 4 -I{} bash -c 'run1 {}'
ARGS="cuda" run1 whisper_select
date -u
cd /tmp/t8 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
