#!/usr/bin/env bash
# Stop 24 call 4: the landed code (8eab000 = build v19) beside PyTorch+graph in one lease. Two
# refused starts left too little device time to build whisper.cpp (~5.5 min), so its figures stay
# stop 21's. First, for planning, the encoders with PDL on inside encoder chains too
# (STAPES_CUDA_PDL=all) against the default (stop 13 measured it slower; much has changed
# since), one shared tuning cache; then gpu_compare.sh (stapes every family f16/q8 and 16 at
# once, PyTorch+graph) and real tiny.en jfk whole process. Stage: as call 1; carry dist/v19
# dist/au dist/f1 dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c4 B=/tmp/b4
mkdir -p $B $STAPES_CACHE /tmp/t4 /tmp/m /tmp/w
tar -xJf dist/v19/bins.tar.xz -C $B && tar -xJf dist/v19/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
ab() { # label model env...
  local label=$1 m=$2; shift 2
  env "$@" timeout 90 $B/stapes bench --synthetic $m --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --json 2>/tmp/t4/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$label $m" || tail -3 /tmp/t4/err.txt
}
for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-large-v3-turbo whisper-tiny; do ab warm $m > /dev/null; done
for rep in 1; do
  for m in parakeet-tdt-0.6b-v2 canary-1b-flash whisper-large-v3-turbo whisper-tiny; do ab "pdl-steps" $m; ab "pdl-all" $m STAPES_CUDA_PDL=all; done
done
date -u
T=dist/f1/tools
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=$T bash tools/bench/gpu_compare.sh > /tmp/t4/cmp.txt 2>&1
date -u
W=/tmp/w/wcpp/build/bin
if [ -x $W/whisper-bench ]; then
  for s in turbo tiny base; do python3 $T/make_ggml_whisper.py $s /tmp/g-$s.bin > /dev/null && timeout 60 $W/whisper-bench -m /tmp/g-$s.bin -t 4 > $O/cmp/wcpp-$s.log 2>&1; grep -E "encode time|decode time" $O/cmp/wcpp-$s.log; done
fi
python3 tools/bench/gpu_table.py $O/cmp
for l in f16 q8; do for i in 1 2 3; do s=$(date +%s%N); $B/stapes transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > /tmp/t4/jfk.txt 2>&1; e=$(date +%s%N); echo "jfk tiny.en stapes $l whole process $(( (e-s)/1000000 )) ms"; done; tail -1 /tmp/t4/jfk.txt; done
if [ -x $W/whisper-cli ]; then
  for i in 1 2 3; do s=$(date +%s%N); timeout 30 $W/whisper-cli -m /tmp/m/tiny.bin -f samples/jfk.wav -fa > /tmp/t4/w.txt 2>&1; e=$(date +%s%N); echo "whisper-cli tiny.en whole process $(( (e-s)/1000000 )) ms"; done; grep -E "^\[|total time" /tmp/t4/w.txt
fi
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
cd /tmp/t4 && tar -cJf $O/logs.tar.xz *.txt 2>/dev/null
date -u
