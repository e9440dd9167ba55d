#!/usr/bin/env bash
# Stop 22 call 7: what binds the two element-wise passes left in a 16-clip parakeet encode
# (landed code, build v14): glu_dw_act (23 us a block) and the SiLU act (16 us, twice a block),
# full ncu sections on one batched launch of each (the 4 single-clip encodes' 96 glu_dw_act and
# 196 act launches come first and are skipped).
# Carry dist/v14s dist/au.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/log.txt") 2>&1
export STAPES_CACHE=/tmp/c7 A=/tmp/a7
mkdir -p $A $STAPES_CACHE
tar -xJf dist/v14s/bins.tar.xz -C $A && tar -xJf dist/v14s/cache.tar.xz -C $STAPES_CACHE
date -u
run() { $A/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 --decode-tokens 1; }
run > /dev/null 2>&1  # tuning saved, so the profiled runs choose the same
for k in glu_dw_act:96 act:196; do
  name=${k%%:*}; skip=${k##*:}
  timeout 100 ncu --kernel-name "regex:^${name}\$" --launch-skip $skip --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
    $A/stapes bench --synthetic parakeet-tdt-0.6b-v2 --device cuda --lane f16 --iters 1 --batch 16 > $O/ncu-$name.txt 2>&1
  echo "ncu $name rc=$?"; grep -E "Grid Size|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Compute \(SM\)|Registers Per|Warp Cycles Per Issued|Theoretical Occ" $O/ncu-$name.txt | head -20
done
date -u
