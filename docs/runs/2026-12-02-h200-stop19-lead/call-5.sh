#!/usr/bin/env bash
# Stop 19 call 5: the split attention's merge fused into its last block per tile (attn_wg.cu):
# its tests (bit-identical to flash64 and to the merge pass, graph replay, batched == alone,
# real tiny.en), the merge pass vs fused A/B (tiny/base, base split 2 ways), then the one-lease
# peer comparison at this code: stapes every family f16/q8 and 16 at once, PyTorch+graph
# (torch_anchor.py), whisper.cpp 233fe1f (CUDA, sm_90, built here in the background), real
# tiny.en jfk whole process beside whisper-cli. Stage: dist/stage2.sh v5 "attention graphs
# cuda_whisper cuda_batch f16_activations ops pdl"; carry dist/v5 dist/au dist/f1
# dist/tiny.bin.xz. No bare `wait` (output goes through tee).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c6 B=/tmp/b6
mkdir -p $B $STAPES_CACHE /tmp/t6 /tmp/m /tmp/w
tar -xJf dist/f1/wcpp.tar.xz -C /tmp/w
setsid nohup bash -c 'cd /tmp/w/wcpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/w/cfg.log 2>&1 && nice -n 19 timeout 420 cmake --build build -j 12 --target whisper-bench whisper-cli > /tmp/w/build.log 2>&1; echo "wcpp build rc=$? at $(date -u +%T)" > /tmp/w/done' > /dev/null 2>&1 < /dev/null &
tar -xJf dist/v5/bins.tar.xz -C $B && tar -xJf dist/v5/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
export STAPES_GPU_MODEL=/tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
for t in attention graphs cuda_whisper cuda_batch f16_activations ops pdl; do s=$(date +%s); timeout 200 $B/$t --test-threads=1 > /tmp/t6/$t.log 2>&1; echo "=== $t rc=$? $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t6/$t.log | tail -1)"; grep -E "panicked|SKIPPED" -A4 /tmp/t6/$t.log | head -10; done
ab() { # label model env...
  local label=$1 m=$2; shift 2
  for l in f16 q8; do env "$@" $B/stapes bench --synthetic $m --device cuda --lane $l --iters 20 --batch 16 --json 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m $l"; done
}
for rep in 1 2; do
  ab pass whisper-tiny STAPES_CUDA_SPLIT_MERGE=0; ab fused whisper-tiny STAPES_CUDA_SPLIT_MERGE=1
  ab base-unsplit whisper-base STAPES_CUDA_ATTN_SPLIT=auto; ab base-split2-pass whisper-base STAPES_CUDA_ATTN_SPLIT=2 STAPES_CUDA_SPLIT_MERGE=0; ab base-split2-fused whisper-base STAPES_CUDA_ATTN_SPLIT=2 STAPES_CUDA_SPLIT_MERGE=1
done
date -u
T=dist/f1/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t6/cmp.txt 2>&1
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t6/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/t6/jfk.txt; done
for i in $(seq 1 60); do [ -f /tmp/w/done ] && break; sleep 5; done
cat /tmp/w/done 2>/dev/null || echo "wcpp build not done"; tail -2 /tmp/w/build.log
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t6/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t6/w.txt
  for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t6/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process (after the build) $(( (e-s)/1000000 )) ms"; done; done
fi
cd /tmp/t6 && tar -cJf $O/logs.tar.xz *.log *.txt 2>/dev/null
date -u
