#!/usr/bin/env bash
# Stop 53, prepared (stop 51 h3, same warm H200): where turbo's f16 window goes (the missed 4.5 ms target): ncu's
# time of every kernel of one bench run, one window and 16, and the clock and power the encodes
# run at. Carry a dist/rwN (stage_real_weights.sh), kept in /tmp/rw.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
V=vM; B=/tmp/x/vM; export STAPES_CACHE=/tmp/c2
source <(sed -n '/^w() {/,/^}/p' tools/bench/device_env.sh)
T=whisper-large-v3-turbo
for b in 1 16; do
  w $B/stapes bench --synthetic $T --device cuda --lane f16 --iters 20 --batch $b > /tmp/t2/b$b.txt 2>&1; grep -i "encode" /tmp/t2/b$b.txt | head -3
  timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    $B/stapes bench --synthetic $T --device cuda --lane f16 --iters 1 --batch $b > /tmp/t2/ncu-$b.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
  xz -c /tmp/t2/ncu-$b.csv > $O/ncu-turbo-f16-b$b.csv.xz
  python3 tools/bench/ncu_kernels.py /tmp/t2/ncu-$b.csv --marker awg64 --back 3 --top 12 | tail -14
done
echo "done, elapsed $(el) s"
