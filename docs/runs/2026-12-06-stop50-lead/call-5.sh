#!/usr/bin/env bash
# Stop 50, call 5: every kernel of the last 16-clip encode under ncu, in launch order, so each
# cuBLASLt launch is named by the kernels around it (call 4 timed the GEMMs alone: some take
# 13.6–18.2 µs where their shape's tuning timed ~9 µs). vG on its defaults, tuned outside ncu.
# Carry dist/c50d.
set -uo pipefail
V=vG PACK=dist/c50d/all.tar.xz source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
$B/stapes --verbose bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 --json 2>$O/tune.log >/dev/null
timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum --csv \
  $B/stapes bench --synthetic $P --device cuda --lane q8 --iters 1 --batch 16 > /tmp/o/ncu.csv 2>/tmp/t2/ncu.err || tail -2 /tmp/t2/ncu.err
xz -9c /tmp/o/ncu.csv > $O/ncu-all.csv.xz
echo "done, elapsed $(el) s"
