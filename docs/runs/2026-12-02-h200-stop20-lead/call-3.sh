#!/usr/bin/env bash
# Stop 20 call 3 (call 2 never got a machine; its plan is in here). Three changes: the TMA int8
# GEMM's form chosen by grid (tma_p128s3x2 above a wave, else tma_n128s6); flash64_combine loading
# every split before using any; im2col_1d a row a block and a channel a thread. Tests: attention
# (split == unsplit bitwise), ops and f16_activations (conv1d), real tiny.en (cuda_whisper,
# cuda_batch) and graphs; then the combine and im2col under ncu (tiny) and whole tiny / turbo
# encodes (1 and 16 windows), f16 and q8. (Trimmed to fit the device time left after the
# refused starts: the i8 whole-model runs and the 16-clip parakeet profile were dropped.) Stage: dist/stage2.sh v4 "i8gemm q8_accuracy attention
# cuda_whisper cuda_batch graphs ops f16_activations"; carry dist/v4 dist/au dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/t3
tar -xJf dist/v4/bins.tar.xz -C $B && tar -xJf dist/v4/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
mkdir -p /tmp/m && xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
for t in attention ops f16_activations cuda_whisper cuda_batch graphs; do s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t3/$t.log 2>&1; rc=$?; echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t3/$t.log | tail -1)"; grep -E "panicked|SKIPPED" -A4 /tmp/t3/$t.log | head -10; [ $rc -ne 0 ] && cp /tmp/t3/$t.log $O/; done
# flash64_combine loading every split before using any (tiny: 3 splits), under ncu
timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --kernel-name regex:"flash64_combine|awg64s|im2col" --launch-count 30 $B/stapes bench --synthetic whisper-tiny --device cuda --lane f16 --iters 2 --batch 0 2>/dev/null | grep -E "combine|awg64s|im2col" | awk -F'","' '{print $5, $NF}' | tail -10
j() { python3 -c "import json,sys;r=json.load(sys.stdin)['report'];print({k:round(v['median_ms'],3) for k,v in r.items() if isinstance(v,dict) and 'median_ms' in v})"; }
bn() { timeout 90 $B/stapes bench --synthetic $1 --device cuda --lane $2 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/dev/null | j; }
for m in whisper-tiny whisper-large-v3-turbo; do
  echo "--- $m f16"; bn $m f16
  echo "--- $m q8 default"; bn $m q8
done
cd /tmp/t3 && tar -cJf $O/logs.tar.xz *.log 2>/dev/null
