#!/usr/bin/env bash
# Stop 30 call 5: build v42 (= main 78c3aeb's code): cuda_whisper on real tiny.en (q8_0 ggml
# written by stapes convert): f16 greedy ids == CPU f32, q8 text, step graphs; the first run on
# real weights of ebd13d9's ln_out8 (the f16 layer norms' output stage, shared) and
# allow_dyn_smem; then jfk transcribed with it on cuda, f16 and q8.
# Carry dist/v42w dist/tiny.bin.xz dist/run30.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m
date -u
tar -xJf dist/v42w/bins.tar.xz -C $B && tar -xJf dist/v42w/cache.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
s=$(date +%s); timeout 240 $B/cuda_whisper --test-threads=1 > /tmp/t2/cw.log 2>&1; rc=$?
echo "=== cuda_whisper (real tiny.en) rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/cw.log | tail -1)"
grep -E "^test |panicked|SKIPPED" /tmp/t2/cw.log | head -20; [ $rc -ne 0 ] && cp /tmp/t2/cw.log $O/
for l in f16 q8; do echo "jfk $l: $($B/stapes transcribe samples/jfk.wav --model /tmp/m/tiny.bin --device cuda --lane $l 2>/tmp/t2/tr.err | tail -2)"; tail -2 /tmp/t2/tr.err; done
date -u
