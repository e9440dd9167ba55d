#!/usr/bin/env bash
# Stop 60, on call 1's warm machine (/tmp/x/vG): the profile issue 4 asks for where a target is
# missed (turbo f16, one window): ncu times every kernel of one bench run at the card's own
# clocks, and ncu_kernels.py prints one encoder layer and the run by kernel name; then 16
# parakeet q8 clips the same way (issue 5's missed batch), and the clock and power of 400 turbo
# windows in each lane under nvidia-smi. Carry dist/tools and, if parts remain, a dist/rwN.
set -uo pipefail
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o /tmp/t2; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2
B=/tmp/x/vG
[ -x $B/stapes ] || { echo "no $B (not call 1's machine)"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
source <(sed -n '/^w() {/,/^}/p' tools/bench/device_env.sh)
export PATH=$PATH:/usr/local/cuda/bin
M=whisper-large-v3-turbo
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  $B/stapes bench --synthetic $M --device cuda --lane f16 --iters 1 > /tmp/o/ncu-turbo-f16.csv 2>/tmp/t2/ncu.err
echo "ncu turbo rc=$? elapsed $(el)"; tail -2 /tmp/t2/ncu.err
xz -9c /tmp/o/ncu-turbo-f16.csv > $O/ncu-turbo-f16.csv.xz
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-turbo-f16.csv --marker awg64 --back 3 --top 25
P=parakeet-tdt-0.6b-v2
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 > /tmp/o/ncu-pk16.csv 2>/tmp/t2/ncu.err
echo "ncu parakeet rc=$? elapsed $(el)"; tail -2 /tmp/t2/ncu.err
xz -9c /tmp/o/ncu-pk16.csv > $O/ncu-parakeet-q8-b16.csv.xz
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-pk16.csv --marker rel_attn --back 8 --top 25
for l in f16 q8; do
  w $B/stapes bench --synthetic $M --device cuda --lane $l --iters 400 > /tmp/t2/b-$l.txt 2>&1
  grep -iE "encode" /tmp/t2/b-$l.txt | head -2
done
echo "done, elapsed $(el) s"
