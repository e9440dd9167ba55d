#!/usr/bin/env bash
# Stop 38 call 2: the one-lease run. BUILD (argument 1) = the stapes binary of the head that
# lands (dist/BUILD.tar.xz: stapes and the cuda_gigaam test). whisper.cpp 233fe1f built here in the background; every
# family beside PyTorch+graph (tools/bench/gpu_compare.sh, torch_anchor.py) and whisper.cpp
# (whisper-bench on ggml files of the turbo/tiny/base shapes); GigaAM beside the package's own
# encoder (tools/bench/gigaam_torch_gpu.py); real tiny.en jfk whole process, stapes (f16, q8)
# beside whisper-cli. First the build's cuda_gigaam (the chain per length, the q8 bar with its
# planted fault). Carry dist/BUILD.tar.xz dist/wc dist/tools dist/tiny.bin.xz dist/au dist/giga.
set -uo pipefail
BUILD=$1
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2 B=/tmp/bF
mkdir -p $B $STAPES_CACHE /tmp/t2 /tmp/m /tmp/w
S0=$(date +%s); date -u
tar -xJf dist/wc/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 380 cmake --build build -j 8 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/$BUILD.tar.xz -C $B && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
[ -f dist/tiny.bin.xz ] && xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
s=$(date +%s); timeout 150 $B/cuda_gigaam --test-threads=1 --nocapture > /tmp/t2/g.log 2>&1; rc=$?
echo "=== cuda_gigaam rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/g.log | tail -1)"
grep -E "panicked|SKIPPED|planted|worst|published|q8: |f16: " -A1 /tmp/t2/g.log | head -30; cp /tmp/t2/g.log $O/cuda_gigaam.log
T=dist/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T timeout 330 bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
date -u
for l in q8 f16; do
  $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 20 --json > $O/cmp/ours-gigaam-v3-ctc-$l.json 2>/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["report"]; print(sys.argv[2], "gigaam-v3-ctc encode_device %.3f ms" % r["encode_device"]["median_ms"])' $O/cmp/ours-gigaam-v3-ctc-$l.json $l
done
timeout 120 python3 tools/bench/gigaam_torch_gpu.py --gigaam-src dist/giga 2>&1 | tee $O/cmp/torch-gigaam.jsonl | tail -4
date -u
for i in $(seq 1 60); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || { echo "wcpp build not done"; tail -3 /tmp/w/build.log; }
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
[ -f /tmp/m/tiny.bin ] && for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
if [ -x $W/whisper-cli ] && [ -f /tmp/m/tiny.bin ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t2/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
