#!/usr/bin/env bash
# Stop 28 call 1: build v30 = main's engine (stop 24's kernels) + `stapes bench`'s encode_device
# figure (the encoder on features already on the device, as torch_anchor.py times PyTorch; the
# `encode` figure keeps uploading the host features each time) and Canary::encode on a device
# tensor. In one lease: 8 CUDA test binaries (real tiny.en via STAPES_GPU_MODEL), then
# tools/bench/gpu_compare.sh (every family f16/q8, 16 at once; torch_anchor.py), whisper.cpp
# 233fe1f (CUDA sm_90, built here in the background) whisper-bench on ggml files of the same
# shapes, real tiny.en jfk whole process beside whisper-cli; and, while whisper.cpp builds, turbo
# f16 with STAPES_CUDA_PDL=all against the default, alternating.
# Carry dist/v30 dist/au dist/f1 dist/tiny.bin.xz dist/run28.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m /tmp/w
date -u
tar -xJf dist/f1/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 420 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v30/bins.tar.xz -C $B && tar -xJf dist/v30/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in attention graphs ops q8_accuracy cuda_batch cuda_canary cuda_parakeet cuda_whisper; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
T=dist/f1/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
date -u
q() { python3 -c 'import json,sys; r=json.load(sys.stdin)["report"]; print(r["encode"]["median_ms"], r["encode_device"]["median_ms"], r.get("encode_batched",{}).get("median_ms"))'; }
for r in 1 2 3; do
  for p in steps all; do
    echo "turbo f16 PDL=$p round $r (encode, encode_device, 16 windows): $(STAPES_CUDA_PDL=$p $B/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane f16 --iters 20 --batch 16 --decode-tokens 2 --json 2>/dev/null | q)"
  done
done
date -u
for i in $(seq 1 60); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || { echo "wcpp build not done"; tail -3 /tmp/w/build.log; }
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/t2/jfk.txt; done
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t2/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
