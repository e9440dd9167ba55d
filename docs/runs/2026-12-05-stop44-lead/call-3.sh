#!/usr/bin/env bash
# Stop 44, call 3 (bundle v97): ncu full sets of one f8wg launch of fc1 (SiLU, 128 blocks) and
# one of q|k|v (96 blocks) in a parakeet encode, to see why fc1 takes 2x q|k|v.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O" /tmp/o
exec > >(tee -a "$O/log.txt") 2>&1
S0=$(date +%s); el() { echo $(( $(date +%s) - S0 )); }
V=v97
export STAPES_CACHE=/tmp/c2; mkdir -p $STAPES_CACHE /tmp/x /tmp/t2
tar -xJf dist/$V.tar.xz -C /tmp/x && cp -r /tmp/x/$V/audio $STAPES_CACHE/
B=/tmp/x/$V
P=parakeet-tdt-0.6b-v2
f() { # tag skip
  STAPES_CUDA_F8WG=1 STAPES_CUDA_F8WG_PLAIN=$3 timeout 150 ncu --set full --import-source yes -k "regex:f8wg" -s $2 -c $4 -o /tmp/$1 -f \
    $B/stapes bench --synthetic $P --device cuda --lane q8 --audio samples/jfk.wav --iters 1 > /tmp/t2/$1.out 2>&1
  echo "ncu $1 rc=$? elapsed $(el)"
  ncu -i /tmp/$1.ncu-rep --print-details all > /tmp/o/$1.txt 2>&1
  ncu -i /tmp/$1.ncu-rep --page source --print-source sass --csv > /tmp/o/$1-sass.csv 2>&1 || echo "no source page"
  grep -E "Grid Size|Duration|Registers Per|Local Memory|Dynamic Shared|Achieved Occupancy|Theoretical Occ|DRAM Throughput|L2 Cache Through|Compute \(SM\) Th|Memory Throughput|One or More Eligible|No Eligible|Warp Cycles Per Issued" /tmp/o/$1.txt | head -60; }
# with plain off, f8wg launches are fc1 only; 200 is well past the warm-up encode
f fc1 200 0 1
f all4 200 1 4
tar -C /tmp/o -cJf $O/out.tar.xz .
echo "done, elapsed $(el) s"
