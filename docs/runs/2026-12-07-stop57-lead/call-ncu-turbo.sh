#!/usr/bin/env bash
# Stop 57, ncu of turbo f16 (stop 56's call-2.sh with the bundle named by V) (same warm machine as call 1: /tmp/x/vM): where turbo's f16 window goes, for
# issue 4's missed f16 target. ncu times every kernel of one bench run at the card's own clocks
# (no clock control), and ncu_kernels.py prints one encoder layer (between two launches of the
# layer's attention kernel) and the whole run by kernel name (call 1 read the SM clock and power
# under the window, `w`). Carry dist/tools and a dist/rwN part.
set -uo pipefail
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o /tmp/t2; exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
export STAPES_CACHE=/tmp/c2
B=/tmp/x/${V:-vH}
[ -x $B/stapes ] || { echo "call 2: no $B (not call 1's machine)"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
which ncu nsys
M=whisper-large-v3-turbo
$B/stapes bench --synthetic $M --device cuda --lane f16 --iters 2 --json > /dev/null 2>&1  # tunes, caches
timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  $B/stapes bench --synthetic $M --device cuda --lane f16 --iters 1 > /tmp/o/ncu-turbo-f16.csv 2>/tmp/t2/ncu.err
echo "ncu rc=$? elapsed $(el)"; tail -2 /tmp/t2/ncu.err
xz -9c /tmp/o/ncu-turbo-f16.csv > $O/ncu-turbo-f16.csv.xz
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-turbo-f16.csv --marker awg64 --back 3 --top 25
echo "done, elapsed $(el) s"
