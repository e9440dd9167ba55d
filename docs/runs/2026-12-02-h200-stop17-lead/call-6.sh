#!/usr/bin/env bash
# the CUDA test binaries this stop's calls had not run, at the final tree (6046b61)
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m
tar -xJf dist/s6/bins.tar.xz -C $B && tar -xJf dist/s6/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
date -u
run1() { local t=$1; local s=$(date +%s); timeout 100 "$B/$t" --test-threads=1 ${ARGS:-} > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
ls $B | grep -v -x -e stapes | xargs -P 6 -I{} bash -c 'run1 {}'
(cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log)
date -u
