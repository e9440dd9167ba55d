#!/usr/bin/env bash
# Stop 15 final call: every CUDA test binary at the final tree, then the peer comparison
# (ours + PyTorch+graph, one lease), then real tiny.en jfk whole process.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; L=$O/log.txt
exec > >(tee -a "$L") 2>&1
export STAPES_CACHE=/tmp/scache-f1 B=/tmp/b-f1
mkdir -p $B $STAPES_CACHE /tmp/t-f1 /tmp/m /tmp/cmp
tar -xJf dist/f1/bins.tar.xz -C $B && tar -xJf dist/f1/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/d9/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
run1() { local t=$1; local s=$(date +%s); timeout 200 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t-f1/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t-f1/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t-f1/$t.log" | head -4; [ $rc = 0 ] || grep -A6 "panicked" "/tmp/t-f1/$t.log" | head -14; }
export -f run1
ls $B | grep -v -x -e stapes -e whisper_select -e nvrtc_compile -e cubin | xargs -P 4 -I{} bash -c 'run1 {}'
ARGS="cuda" run1 whisper_select
date -u
(cd /tmp/t-f1 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null)
STAPES=$B/stapes OUT=/tmp/cmp ITERS=${ITERS:-10} TOOLS=dist/c2/tools bash tools/bench/gpu_compare.sh
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/jfk.txt; done
tar -cJf $O/cmp.tar.xz -C /tmp cmp
date -u
