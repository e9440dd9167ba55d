#!/usr/bin/env bash
# The profile issue 4 asks for where a target is missed, on the warm machine of a call that
# unpacked bundle V into /tmp/x (device_env.sh): ncu times every kernel of one turbo f16 bench
# run (one window) at the card's own clocks and ncu_kernels.py prints one encoder layer and the
# run by kernel name; then 16 parakeet q8 clips the same way (issue 5's missed batch); then the
# SM clock and power of 400 turbo windows in each lane under nvidia-smi (`w`). ~250 s.
#
#   V=vO bash tools/bench/ncu_call.sh        # carry dist/tools
set -uo pipefail
V=${V:?the bundle name, e.g. V=vO}
[ -x "/tmp/x/$V/stapes" ] || { echo "no /tmp/x/$V (not the warm machine of the call that unpacked it)"; exit 3; }
source tools/bench/device_env.sh
export PATH=$PATH:/usr/local/cuda/bin
ncu_run() { timeout "$1" ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
         "$B/stapes" bench --synthetic "$2" --device cuda --lane "$3" --iters 1 --batch "$4" > "$5" 2>/tmp/t2/ncu.err
       echo "ncu $2 $3 batch $4 rc=$? elapsed $(el)"; tail -2 /tmp/t2/ncu.err
       xz -9c "$5" > "$O/$(basename "$5").xz"; }
M=whisper-large-v3-turbo
ncu_run 240 $M f16 1 /tmp/o/ncu-turbo-f16.csv
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-turbo-f16.csv --marker awg64 --back 3 --top 25
ncu_run 200 parakeet-tdt-0.6b-v2 q8 16 /tmp/o/ncu-parakeet-q8-b16.csv
python3 tools/bench/ncu_kernels.py /tmp/o/ncu-parakeet-q8-b16.csv --marker rel_attn --back 8 --top 25
for l in f16 q8; do
  w "$B/stapes" bench --synthetic $M --device cuda --lane $l --iters 400 > "/tmp/t2/b-$l.txt" 2>&1
  grep -iE "encode" "/tmp/t2/b-$l.txt" | head -2
done
echo "done, elapsed $(el) s"
