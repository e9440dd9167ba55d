#!/usr/bin/env bash
# Stop 52 call 2: fc_dw_cl_h8 (vD = main b697903 + the 16-byte depthwise kernel of the stem's
# second stage) against main (vM): its tests, the 16-clip and one-clip encodes alternating, the
# stem kernels' ncu times in both, and ncu's sections for one fc_sub_stem launch (the next
# candidate). Carry dist/vM.tar.xz dist/vD.tar.xz.
set -uo pipefail
V=vD source tools/bench/device_env.sh
tar -xJf dist/vM.tar.xz -C /tmp/x
P=parakeet-tdt-0.6b-v2
TEST_LIMIT=150
for b in fc_subsample conformer_ops cuda_parakeet cuda_canary parakeet_batch pdl; do t $b; done
echo "tests done, elapsed $(el) s"
for r in 1 2 3; do for v in vM vD; do e $v $P q8 16; done; done
for v in vM vD; do e $v $P q8; done
for v in vM vD; do E_ITERS=10 e $v canary-1b-flash q8; done
for v in vM vD; do
  /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 --json >/dev/null 2>&1
  timeout 120 ncu --clock-control none --kernel-name regex:"fc_sub_stem|fc_dw_cl" --launch-skip 2 --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active --csv \
    /tmp/x/$v/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 2>/dev/null > /tmp/t2/n.csv
  python3 - $v /tmp/t2/n.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[2]) if l.startswith('"'))]
h = rows[0]; k, m, v = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
for r in rows[1:]: print(sys.argv[1], r[0], r[k], r[m], r[v])
PY
done
echo "ncu times done, elapsed $(el) s"
timeout 150 ncu --clock-control none --kernel-name fc_sub_stem --launch-skip 2 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats \
  /tmp/x/vD/stapes bench --synthetic $P --device cuda --lane q8 --iters 2 --batch 16 > $O/ncu-stem.txt 2>&1
grep -E "Duration|Throughput|Occupancy|Registers|Issue|Stall|Executed Ipc|Pipe|Warp Cycles|Block Size|Grid Size|Eligible" $O/ncu-stem.txt | head -40
echo "done, elapsed $(el) s"
