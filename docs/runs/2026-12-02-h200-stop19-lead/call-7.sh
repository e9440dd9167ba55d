#!/usr/bin/env bash
# Stop 19 call 7: the cross K/V projections written f16 by the GEMM (Backend::linear_compact):
# its test and every Whisper CUDA test binary (real tiny.en ids, batched == alone, step graphs),
# then real tiny.en whole process f16/q8 and the start-up profile's cuBLASLt lines. Stage:
# dist/stage2.sh v7 "cuda_whisper cuda_batch cross_f16 step_fused graphs whisper_select";
# carry dist/v7 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c8 B=/tmp/b8
mkdir -p $B $STAPES_CACHE /tmp/t8 /tmp/m
tar -xJf dist/v7/bins.tar.xz -C $B && tar -xJf dist/v7/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
for t in cross_f16 cuda_whisper cuda_batch step_fused graphs whisper_select; do s=$(date +%s); timeout 100 $B/$t --test-threads=1 > /tmp/t8/$t.log 2>&1; echo "=== $t rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t8/$t.log | tail -1)"; grep -E "panicked|SKIPPED" -A4 /tmp/t8/$t.log | head -10; done
for l in f16 q8; do for i in 1 2 3 4; do s=$(date +%s%N); $B/stapes --verbose transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t8/prof-$l-$i.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; grep -E "ask what|cuda.lt_warm|cublaslt.warm|model.upload|transcribe audio|total .* since" /tmp/t8/prof-$l-4.txt | head -12; done
cd /tmp/t8 && tar -cJf $O/logs.tar.xz *.log *.txt 2>/dev/null
