#!/usr/bin/env bash
# Stop 19 call 4: where a real tiny.en whole-process run spends its ~0.7 s (the whole --verbose
# profile, f16 and q8, three runs each, cold and warm page cache), and where a tiny encode goes
# (ncu). Main's code (dist/v2 = 1ce7adf's binaries). Carry dist/v2, dist/au, dist/tiny.bin.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c3 B=/tmp/b3
mkdir -p $B $STAPES_CACHE /tmp/m
tar -xJf dist/v2/bins.tar.xz -C $B && tar -xJf dist/v2/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
xz -dc dist/tiny.bin.xz > /tmp/m/tiny.bin
nproc; free -g | head -2
for l in f16 q8; do for i in 1 2 3; do
  s=$(date +%s%N); $B/stapes --verbose transcribe -m /tmp/m/tiny.bin --device cuda --lane $l samples/jfk.wav > $O/prof-$l-$i.txt 2>&1; e=$(date +%s%N)
  echo "tiny.en $l run $i whole process $(( (e-s)/1000000 )) ms"; done; done
sed -n '/profile (wall ms/,$p' $O/prof-f16-3.txt | head -150
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 400 $B/stapes bench --synthetic whisper-tiny --device cuda --lane f16 --iters 2 --batch 0 > $O/ncu-tiny-f16.csv 2> /tmp/ncu.err; echo "ncu rc=$?"; tail -2 /tmp/ncu.err
xz -9 $O/ncu-tiny-f16.csv
