#!/usr/bin/env bash
# Stop 39 call 3 (call 2, the same on call 1's machine with whisper.cpp beside it, got the machine
# taken back before it finished). v79 = 71a5b7d + 64-row flash64 blocks for unsplit grids that
# leave SMs idle: stapes, cuda_gigaam, cuda_whisper, cuda_batch. The Whisper GPU tests on the
# real tiny.en weights (STAPES_GPU_MODEL); GigaAM's encode with the 64-row blocks against the
# 128-row kernel forced (STAPES_CUDA_ATTN=flash64_w4m2s2), alternating; every family beside
# PyTorch + graph (tools/bench/gpu_compare.sh, torch_anchor.py); GigaAM beside its package; real
# tiny.en jfk whole process. Carry dist/v79.tar.xz dist/tiny.bin.xz dist/au dist/tools dist/giga.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
mkdir -p $STAPES_CACHE /tmp/t2 /tmp/x /tmp/m
S0=$(date +%s); date -u
tar -xJf dist/v79.tar.xz -C /tmp/x && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
B=/tmp/x/v79
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { n=$1; s=$(date +%s); timeout 150 $B/$n --test-threads=1 --nocapture > /tmp/t2/$n.log 2>&1; rc=$?
  echo "=== $n rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$n.log | tail -1)"
  grep -E "panicked|SKIPPED|rel L2|text|planted" /tmp/t2/$n.log | head -16; cp /tmp/t2/$n.log $O/; }
t cuda_gigaam
t cuda_whisper
t cuda_batch
date -u
g() { $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $1 --audio samples/jfk.wav --iters 20 --json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(sys.argv[1], sys.argv[2], "gigaam-v3-ctc encode_device %.3f ms" % r["encode_device"]["median_ms"])' "$2" $1; }
for r in 1 2 3; do for l in q8 f16; do
  g $l "64-row"; STAPES_CUDA_ATTN=flash64_w4m2s2 g $l "128-row forced"
done; done
date -u
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools timeout 300 bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
cat /tmp/t2/cmp.txt | tail -40
date -u
for l in q8 f16; do
  $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 20 --json > $O/cmp/ours-gigaam-v3-ctc-$l.json 2>/dev/null
done
timeout 100 python3 tools/bench/gigaam_torch_gpu.py --gigaam-src dist/giga 2>&1 | tee $O/cmp/torch-gigaam.jsonl | tail -4
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
