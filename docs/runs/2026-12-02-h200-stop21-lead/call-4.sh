#!/usr/bin/env bash
# Stop 21 call 4: call 3's peer comparison ran stapes while whisper.cpp compiled beside it (12 nvcc
# jobs on 16 cores) and every stapes figure came out 2-20 % above calls 1-2 (turbo 5.22 vs 4.7-4.8,
# tiny 0.38 vs 0.31-0.35). Here whisper.cpp 233fe1f is built first, alone, then the comparison runs
# on an idle host: stapes (same build as call 3, dist/v7), PyTorch+graph, whisper-bench, and real
# tiny.en jfk whole process beside whisper-cli. Carry dist/v7 dist/au dist/f1 dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c4 B=/tmp/b4
mkdir -p $B $STAPES_CACHE /tmp/t4 /tmp/m /tmp/w
date -u
tar -xJf dist/f1/wcpp.tar.xz -C /tmp/w
(cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && timeout 300 cmake --build build -j 16 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)")
tail -1 /tmp/w/build.log
tar -xJf dist/v7/bins.tar.xz -C $B && tar -xJf dist/v7/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
W=/tmp/w/wcpp/build/bin
T=dist/f1/tools
WCPP_BIN=$W STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t4/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/t4/jfk.txt; done
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t4/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t4/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd / && rm -rf $O/cmp
date -u
