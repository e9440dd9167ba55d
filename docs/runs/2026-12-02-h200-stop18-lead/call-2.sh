#!/usr/bin/env bash
# call 1 hung on a bare `wait` (it waits for the tee process substitution too); its tests had all
# passed. This call: the awg harness and ncu --set full of awg64 on the turbo shape
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
cd dist/awg2 && K=../../crates/stapes-cuda/kernels && cp $K/common.cuh $K/attention.cu $K/attn_wg.cu .
nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -o awg main.cu -lcuda 2>&1 | grep error | head
./awg 4 2>&1 | tee $O/awg.txt
timeout 200 ncu --set full -k regex:awg64 -c 1 -o $O/awg-turbo ./awg 4 turbo > /dev/null 2>&1; echo "ncu rc=$?"
ncu --import $O/awg-turbo.ncu-rep --page details > $O/details.txt 2>&1
grep -v -E "^\s*$|----" $O/details.txt | head -250
date -u
