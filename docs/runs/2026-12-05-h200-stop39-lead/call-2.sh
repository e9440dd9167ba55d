#!/usr/bin/env bash
# Stop 39 call 2, on call 1's warm machine (v77 under /tmp/x, the tools and GigaAM's source under
# /tmp/keep, whisper.cpp built in wcpp/): the one-lease run. The Whisper GPU tests on the real
# tiny.en weights (cuda_whisper, cuda_batch with STAPES_GPU_MODEL); every family beside
# PyTorch + graph (tools/bench/gpu_compare.sh) and whisper.cpp (whisper-bench on ggml files of
# the turbo/tiny/base shapes); GigaAM beside its package; real tiny.en jfk whole process, stapes
# (f16, q8) beside whisper-cli. Carry dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c2
B=/tmp/x/v77; T=/tmp/keep/tools; W=$PWD/wcpp/wcpp/build/bin
[ -x $B/stapes ] || { echo "not call 1's machine: $B missing"; exit 3; }
mkdir -p /tmp/m /tmp/t2; date -u
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin && export STAPES_GPU_MODEL=/tmp/m/tiny.bin
ls $W 2>/dev/null | tr '\n' ' '; echo
for n in cuda_whisper cuda_batch; do
  s=$(date +%s); timeout 150 $B/$n --test-threads=1 --nocapture > /tmp/t2/$n.log 2>&1; rc=$?
  echo "=== $n rc=$rc $(( $(date +%s)-s ))s $(grep -E '^test result' /tmp/t2/$n.log | tail -1)"
  grep -E "panicked|SKIPPED|rel L2|text" /tmp/t2/$n.log | head -16; cp /tmp/t2/$n.log $O/
done
date -u
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T WCPP_BIN=$W timeout 330 bash tools/bench/gpu_compare.sh > /tmp/t2/cmp.txt 2>&1
cat /tmp/t2/cmp.txt | tail -40
date -u
for l in q8 f16; do
  $B/stapes bench --synthetic gigaam-v3-ctc --device cuda --lane $l --audio samples/jfk.wav --iters 20 --json > $O/cmp/ours-gigaam-v3-ctc-$l.json 2>/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["report"]; print(sys.argv[2], "gigaam-v3-ctc encode_device %.3f ms" % r["encode_device"]["median_ms"])' $O/cmp/ours-gigaam-v3-ctc-$l.json $l
done
timeout 100 python3 tools/bench/gigaam_torch_gpu.py --gigaam-src /tmp/keep/giga 2>&1 | tee $O/cmp/torch-gigaam.jsonl | tail -4
date -u
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time|encode time" /tmp/t2/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
