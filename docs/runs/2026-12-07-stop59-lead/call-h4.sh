#!/usr/bin/env bash
# Stop 59 h4 (after call 1 on the same warm machine, bundle vA): the real tiny.en and base weights (ggml files `stapes convert`
# wrote from fetch-models.sh's CTranslate2 models; every part joined): the Whisper GPU tests on
# each (f16 ids == CPU f32, q8 text equal, step graph), then jfk's transcript and whole-process
# time, stapes f16 / q8 beside whisper-cli (CUDA, flash attention on), 5 runs each. Carry the last dist/rwN.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
mkdir -p /tmp/m && cat $(ls /tmp/rw/* | sort -V) | xz -dc | tar -C /tmp/m -xf - && (cd /tmp/m && sha256sum -c SUMS) ||
  { echo "h4: weights incomplete"; ls -la /tmp/rw; exit 3; }
B=/tmp/x/vA; export STAPES_CACHE=/tmp/c2
W=/tmp/w/build/bin
for m in tiny.en base; do
  f=/tmp/m/ggml-$m.bin
  STAPES_GPU_MODEL=$f timeout 150 $B/cuda_whisper --test-threads=1 --nocapture > /tmp/t2/cw-$m.log 2>&1
  echo "=== cuda_whisper $m rc=$? $(grep -E '^test result' /tmp/t2/cw-$m.log)"; grep -E "panicked|SKIPPED|text|ids" /tmp/t2/cw-$m.log | head -6
  cp /tmp/t2/cw-$m.log $O/
  for l in f16 q8; do for i in 1 2 3 4 5; do s=$(date +%s%N); $B/stapes transcribe -m $f --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk $m stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -2 /tmp/t2/jfk.txt; done
  if [ -x $W/whisper-cli ]; then
    for i in 1 2 3 4 5; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m $f -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N); echo "jfk $m whisper-cli whole process $(( (e-s)/1000000 )) ms"; done
    grep -E "^\[|total time|flash" /tmp/t2/w.txt | head -4
  fi
done
echo "done, elapsed $(el) s"
