#!/usr/bin/env bash
# Stop 19 call 1 (written in stop 18 as next-call-1.sh): the GPU tests of this stop's
# start-up changes (weight_from of f16 bytes, the q8 re-layout), then the whole-process start-up
# of real tiny.en, f16 and q8, with the --verbose phase profile. Stage first:
#   dist/stage2.sh v2 "ops cuda_whisper cuda_batch linear_add q8_accuracy q8_mix graphs"
# and carry dist/v2, dist/au, dist/tiny.bin.xz. No bare `wait` in a script whose output goes
# through `exec > >(tee ...)`: it waits for the tee too (stop 18 call 1 hung on it).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3 /tmp/m
tar -xJf dist/v2/bins.tar.xz -C $B && tar -xJf dist/v2/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
run1() { local t=$1; local s=$(date +%s); timeout 250 "$B/$t" --test-threads=1 > "/tmp/t3/$t.log" 2>&1; local rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' "/tmp/t3/$t.log" | tail -1)"; grep -E "FAILED|panicked|SKIPPED" "/tmp/t3/$t.log" | head -4; [ $rc = 0 ] || grep -A8 "panicked" "/tmp/t3/$t.log" | head -16; }
export -f run1
ls $B | grep -v -x -e stapes | xargs -P 4 -I{} bash -c 'run1 {}'
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/jfk.txt; done
for l in f16 q8; do $B/stapes --verbose transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav 2>&1 | sed -n '/profile (wall ms/,$p' | head -40; done
(cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log)
# where a parakeet encode's time goes now (stop-15 form of the profile, stop-18 defaults)
timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 1500 $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --audio samples/jfk.wav --iters 2 --batch 0 > $O/ncu-parakeet-f16.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-parakeet-f16.csv
