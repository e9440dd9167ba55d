#!/usr/bin/env bash
# Stop 34 calls 9-10: ncu of one turbo q8 window on v62 (the landed FP8 form), every kernel's
# duration. Carry dist/v62a dist/run34.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
mkdir -p /tmp/ba && tar -xJf dist/v62a/bins.tar.xz -C /tmp/ba stapes
export STAPES_CACHE=/tmp/c9
# the tuner times cuBLASLt's candidates at a shape's first use: outside ncu, or it ranks them
# by ncu's replays (call 9 without this picked an out projection of 25 µs instead of 10)
timeout 60 /tmp/ba/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane q8 --iters 5 --batch 1 --decode-tokens 2 > /dev/null 2>&1
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --launch-count 2500 \
  /tmp/ba/stapes bench --synthetic whisper-large-v3-turbo --device cuda --lane q8 --iters 2 --batch 1 --decode-tokens 2 > /tmp/ncu.csv 2>/tmp/ncu.err
echo "ncu rc=$? rows $(grep -c gpu__time_duration /tmp/ncu.csv)"; tail -3 /tmp/ncu.err
xz -c /tmp/ncu.csv > $O/ncu-turbo-q8-v62.csv.xz
