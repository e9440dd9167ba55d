#!/usr/bin/env bash
# Stop 36 call 5: build v72 = main 06407ac. In one lease: whisper.cpp 233fe1f built here in the
# background; the Whisper tests on real tiny.en (STAPES_GPU_MODEL); tools/bench/gpu_compare.sh
# (every family f16/q8, 16 at once; torch_anchor.py beside it); whisper-bench on ggml files of the
# turbo/tiny/base shapes; real tiny.en jfk whole process, stapes beside whisper-cli.
# Carry dist/v72.tar.xz dist/wc dist/tools dist/tiny.bin.xz dist/au dist/run36.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b72
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m /tmp/w
S0=$(date +%s); date -u
tar -xJf dist/wc/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 400 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v72.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
for t in cuda_whisper cuda_batch; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 --nocapture > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED|rel L2" -A1 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
T=dist/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
date -u
for i in $(seq 1 80); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || { echo "wcpp build not done"; tail -3 /tmp/w/build.log; }
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t2/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
