#!/usr/bin/env bash
# One device call of the real tiny.en / base run (issue 4's acceptance), on the warm machine of
# a call that unpacked bundle V into /tmp/x (device_env.sh) and, on an H200, built whisper.cpp
# (`wcpp_bg`). The weights come as stage_real_weights.sh's parts, one a call (carry one dist/rwN,
# with crates/*/tests/fixtures moved aside for run's 64 MiB); each call keeps its part in /tmp/rw,
# and the call that brings the last one joins them, checks their sha256, and on /tmp/x/V runs
# `cuda_whisper` (f16 ids == CPU f32, q8 text equal, the step graph) and `cuda_batch` (batched
# ids == one at a time) on each model, then jfk's transcript and whole-process time: stapes f16
# and q8 beside whisper-cli (CUDA, flash attention on), 5 runs each.
#
#   V=vO bash tools/bench/rw_call.sh        # carry dist/rw1, then dist/rw2, …
set -uo pipefail
V=${V:?the bundle name, e.g. V=vO}
[ -x "/tmp/x/$V/stapes" ] || { echo "no /tmp/x/$V (not the warm machine of the call that unpacked it)"; exit 3; }
source tools/bench/device_env.sh
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
ls /tmp/rw
[ "$(ls /tmp/rw | wc -l)" -ge "${RW_PARTS:-4}" ] || { echo "parts so far: $(ls /tmp/rw | tr '\n' ' ')"; exit 0; }
mkdir -p /tmp/m && cat $(ls /tmp/rw/* | sort -V) | xz -dc | tar -C /tmp/m -xf - && (cd /tmp/m && sha256sum -c SUMS) ||
  { echo "weights incomplete"; ls -la /tmp/rw; exit 3; }
cat "$B/COMMIT"
# cuda_batch reads jfk from its build tree's path
[ -f /work/main/samples/jfk.wav ] || { mkdir -p /work/main/samples && cp samples/jfk.wav /work/main/samples/; }
W=/tmp/w/build/bin
for m in tiny.en base; do
  f=/tmp/m/ggml-$m.bin
  for tb in cuda_whisper cuda_batch; do
    STAPES_GPU_MODEL=$f timeout 150 "$B/$tb" --test-threads=1 --nocapture > "/tmp/t2/$tb-$m.log" 2>&1
    echo "=== $tb $m rc=$? $(grep -E '^test result' "/tmp/t2/$tb-$m.log")"
    grep -E "panicked|SKIPPED|FAILED|windows/s" "/tmp/t2/$tb-$m.log" | head -6
    cp "/tmp/t2/$tb-$m.log" "$O/"
  done
  for l in f16 q8; do
    for i in 1 2 3 4 5; do
      s=$(date +%s%N); "$B/stapes" transcribe -m "$f" --device cuda --lane $l samples/jfk.wav > /tmp/t2/jfk.txt 2>&1; e=$(date +%s%N)
      echo "jfk $m stapes $l whole process $(( (e - s) / 1000000 )) ms"
    done
    tail -2 /tmp/t2/jfk.txt
  done
  if [ -x $W/whisper-cli ]; then
    for i in 1 2 3 4 5; do
      s=$(date +%s%N); timeout 30 $W/whisper-cli -m "$f" -f samples/jfk.wav -fa > /tmp/t2/w.txt 2>&1; e=$(date +%s%N)
      echo "jfk $m whisper-cli whole process $(( (e - s) / 1000000 )) ms"
    done
    grep -E "^\[|total time|flash" /tmp/t2/w.txt | head -4
  else echo "no whisper-cli build on this machine"; fi
done
echo "done, elapsed $(el) s"
