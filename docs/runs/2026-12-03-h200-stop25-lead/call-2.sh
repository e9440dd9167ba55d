#!/usr/bin/env bash
# Stop 25 call 2: main's code (46389e9 = stop 24's 8eab000 kernels; build v23) in one lease beside
# PyTorch+graph and whisper.cpp: every CUDA test binary (24, real tiny.en via STAPES_GPU_MODEL),
# then tools/bench/gpu_compare.sh (stapes every family f16/q8 and 16 at once; torch_anchor.py),
# whisper.cpp (fetched tree as in stop 21, CUDA sm_90, built here in the background while the
# tests and our benches run) whisper-bench on ggml files of the same shapes, and real tiny.en jfk
# whole process, stapes beside whisper-cli. Stage: dist/stage2.sh v23 "<the 24 binaries>"; carry
# dist/v23 dist/au dist/f1 dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/b2
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m /tmp/w
date -u
tar -xJf dist/f1/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 420 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v23/bins.tar.xz -C $B && tar -xJf dist/v23/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for t in attention conformer_ops cross_f16 f16_activations fc_subsample graphs i8gemm linear_add ln_pair open ops pdl q8_accuracy q8_mix select step_fused transducer_ops cuda_batch cuda_canary cuda_fc_kernels cuda_fc_shapes cuda_label_loop cuda_parakeet cuda_whisper whisper_select; do
  s=$(date +%s); timeout 150 $B/$t --test-threads=1 > /tmp/t2/$t.log 2>&1; rc=$?
  echo "=== $t rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$t.log | tail -1)"
  grep -E "panicked|SKIPPED" -A3 /tmp/t2/$t.log | head -8; [ $rc -ne 0 ] && cp /tmp/t2/$t.log $O/
done
date -u
T=dist/f1/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
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
