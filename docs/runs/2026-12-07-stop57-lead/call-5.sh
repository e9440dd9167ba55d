#!/usr/bin/env bash
# Stop 57, call 5: ncu's full sections for one 16-clip launch each of the passes left beside the
# GEMMs (glu_dw_act, act8_e4m3, layer_norm_rows16, rel_attn_d128), vJ (main's code, the e4m3
# hidden on). The launch-skip counts come from call 1's per-kernel CSV of the same bench command
# (ncu-16-lut.csv.xz): each lands in the last batched encode. Carry dist/c3 dist/tools.
set -uo pipefail
PACK=dist/c3/all.tar.xz V=vJ source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
$B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /dev/null 2>&1  # tunes, caches
for ks in glu_dw_act:250 act8_e4m3:60 layer_norm_rows16:120 rel_attn_d128:30; do
  k=${ks%%:*}; s=${ks##*:}
  timeout 120 ncu --set full -k "$k" --launch-skip $s --launch-count 1 $B/stapes bench --synthetic $P --device cuda --lane q8 --batch 16 --iters 1 > /tmp/o/ncu-$k.txt 2>&1
  echo "=== ncu $k (skip $s) rc=$? elapsed $(el)"; cp /tmp/o/ncu-$k.txt $O/
  grep -E "^  [a-z_0-9]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|Eligible Warps|No Eligible|Block Size|Grid Size|Waves Per SM|L2 Hit|L1/TEX Hit|Dynamic Shared|Static Shared" /tmp/o/ncu-$k.txt | head -24
done
echo "done, elapsed $(el) s"
