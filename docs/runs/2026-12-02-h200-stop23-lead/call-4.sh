#!/usr/bin/env bash
# Stop 23 call 4: the code that lands (7d3f99e = build v18) beside PyTorch+graph in one call
# (gpu_compare.sh, no whisper.cpp: its figures are stop 21's); then, for planning, 16 parakeet
# clips with 32 cuBLASLt candidates timed against the default 8 (fresh tuning each run; stop 13
# tried 32 on single encodes only), and ncu's stall sections on one launch of each attention form.
# Stage: as call 3; carry dist/v18 dist/au dist/f1.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c4 B=/tmp/b4
mkdir -p $B $STAPES_CACHE /tmp/t4
tar -xJf dist/v18/bins.tar.xz -C $B && tar -xJf dist/v18/cache.tar.xz -C $STAPES_CACHE && tar -xJf dist/au/audio.tar.xz -C $STAPES_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/f1/tools bash tools/bench/gpu_compare.sh
cd $O/cmp && tar -cJf $O/cmp.tar.xz * && cd - > /dev/null && rm -rf $O/cmp
date -u
ab() { # label model
  timeout 120 $B/stapes bench --synthetic $2 --device cuda --lane f16 --audio samples/jfk.wav --iters 10 --batch 16 --json 2>/tmp/t4/err.txt | python3 -c '
import json,sys
r=json.load(sys.stdin)["report"]
print(sys.argv[1], {k:round(v["median_ms"],3) for k,v in r.items() if isinstance(v,dict) and "median_ms" in v})' "$1 $2" || tail -3 /tmp/t4/err.txt
}
for rep in 1 2; do
  for n in 8 32; do STAPES_CUDA_LT_CACHE=0 STAPES_CUDA_LT_CANDIDATES=$n ab "candidates=$n" parakeet-tdt-0.6b-v2; done
done
date -u
for k in rel_attn_d128:0 rel_attn_ks_d128:30; do
  name=${k%%:*}; skip=${k##*:}
  timeout 100 ncu --kernel-name "regex:^${name}\$" --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats --section InstructionStats \
    $B/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-$name.txt 2>&1
  echo "ncu $name rc=$?"; grep -E "Grid Size|Duration|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Compute \(SM\)|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|Stall" $O/ncu-$name.txt | head -24
done
date -u
