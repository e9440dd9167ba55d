#!/usr/bin/env bash
# Stop 33 call 4: the CUDA tests outside Whisper's decoder that go through the changed selection
# (one select path now waits on an event after the answer's copy instead of the stream) or sit
# near it, on v55 = e72c403's code. Carry dist/v55 dist/au2 dist/tiny.bin.xz dist/run33.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b55
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v55/bins.tar.xz -C $B && tar -xJf dist/v55/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au2/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for x in cuda_canary ops attention cross_f16 cuda_label_loop transducer_ops q8_accuracy; do
  s=$(date +%s); timeout 150 $B/$x --test-threads=1 > /tmp/t2/$x.log 2>&1; rc=$?
  echo "=== $x rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$x.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$x.log | head -12; [ $rc -ne 0 ] && cp /tmp/t2/$x.log $O/
done
for l in f16 q8; do for bs in 1 5; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l --beam-size $bs samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en $l beam $bs whole process $(( (e-s)/1000000 )) ms: $(tr '\n' ' ' < /tmp/t2/jfk.txt)"; done; done
date -u
