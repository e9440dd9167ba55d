#!/usr/bin/env bash
# awg64 (stop-17 kernel): where its warps stall (ncu source counters, SASS level), and FA4's
# polynomial exp2 for a share of the exponentials on top of the real kernel (stop 16 tried it
# only on a slower variant). Harness only.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
cd dist/awg3
K=../../crates/stapes-cuda/kernels
cp $K/common.cuh $K/attention.cu $K/attn_wg.cu .
nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -o awg_base main.cu -lcuda 2>&1 | grep error
timeout 150 ncu --section WarpStateStats --section SourceCounters -k regex:awg64_s4 -c 1 -o $O/awg-src ./awg_base 4 turbo > /dev/null 2>&1; echo "ncu rc=$?"
ncu --import $O/awg-src.ncu-rep --page details 2>&1 | grep -v -E "^\s*$|----" | head -60
ncu --import $O/awg-src.ncu-rep --page source --csv --print-source sass > $O/awg-src-sass.csv 2>&1; echo "src rc=$? $(wc -l < $O/awg-src-sass.csv)"
ncu --import $O/awg-src.ncu-rep --page raw --csv 2>/dev/null | python3 -c '
import csv,sys
r=list(csv.reader(sys.stdin)); h,u,v=r[0],r[1],r[2]
for i,n in enumerate(h):
    if "stall" in n and ("ratio" in n or "pct" in n): print(n, v[i])' | sort -k2 -g -r | head -40
for v in 0x88 0xaa; do
  cp $K/attn_wg.cu . && python3 poly.py $v && nvcc -O3 -std=c++17 -arch=sm_90a -o awg_$v main.cu -lcuda 2>&1 | grep error
  echo "== poly $v"; ./awg_$v 4 2>&1 | grep -E "turbo|tiny |base "
done
date -u
