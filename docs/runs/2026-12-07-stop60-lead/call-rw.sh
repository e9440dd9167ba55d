#!/usr/bin/env bash
# Stop 60, on the warm machine of call 1: the real tiny.en and base weights (ggml f16 files that
# `stapes convert` wrote, tools/bench/stage_real_weights.sh; four parts, one carried a call with
# crates/*/tests/fixtures moved aside for run's 64 MiB). Each call keeps its part in /tmp/rw; the
# call that brings the last one joins them, checks their sha256, and on vG (call 1's bundle) runs
# the Whisper GPU tests on each model (f16 ids == CPU f32, q8 text equal, the step graph;
# cuda_batch: batched ids == one at a time), then jfk's transcript and whole-process time, stapes
# f16 / q8 beside whisper-cli (CUDA, flash attention on, call 1's build), 5 runs each.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
ls /tmp/rw
[ $(ls /tmp/rw | wc -l) -ge 4 ] || { echo "parts so far: $(ls /tmp/rw | tr '\n' ' ')"; exit 0; }
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p /tmp/m && cat $(ls /tmp/rw/* | sort -V) | xz -dc | tar -C /tmp/m -xf - && (cd /tmp/m && sha256sum -c SUMS) ||
  { echo "weights incomplete"; ls -la /tmp/rw; exit 3; }
B=/tmp/x/vG; export STAPES_CACHE=/tmp/c2; mkdir -p /tmp/t2
cat $B/COMMIT
# cuda_batch reads jfk from its build tree's path
[ -f /work/main/samples/jfk.wav ] || { mkdir -p /work/main/samples && cp samples/jfk.wav /work/main/samples/; }
W=/tmp/w/build/bin
for m in tiny.en base; do
  f=/tmp/m/ggml-$m.bin
  for tb in cuda_whisper cuda_batch; do
    STAPES_GPU_MODEL=$f timeout 150 $B/$tb --test-threads=1 --nocapture > /tmp/t2/$tb-$m.log 2>&1
    echo "=== $tb $m rc=$? $(grep -E '^test result' /tmp/t2/$tb-$m.log)"
    grep -E "panicked|SKIPPED|FAILED|windows/s" /tmp/t2/$tb-$m.log | head -6
    cp /tmp/t2/$tb-$m.log $O/
  done
  for l in f16 q8; do for i in 1 2 3 4 5; do s=$(date +%s%N); $B/stapes transcribe -m $f --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk $m stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
  if [ -x $W/whisper-cli ]; then
    for i in 1 2 3 4 5; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m $f -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "jfk $m whisper-cli whole process $(( (e-s)/1000000 )) ms"; done
    grep -E "^\[|total time|flash" /tmp/t2/w.txt | head -4
  else echo "no whisper-cli build on this machine"; fi
done
echo "done, elapsed $(el) s"
