#!/usr/bin/env bash
# awg64 ping-pong (named-barrier turns between the two warpgroups, hoisted descriptors, rescale
# skipped where no max moved) against the stop-17 kernel (renamed awo64 in the harness)
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
cd dist/awg2
nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -Xptxas -v -o awg main.cu -lcuda 2>&1 | grep -E "error|registers" | head
for s in 4; do ./awg $s; ./awg $s; done 2>&1 | tee $O/awg.txt
timeout 120 ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats -k regex:awg64_s4 -c 1 ./awg 4 turbo 2>&1 | grep -v -E "^\s*$|----" | grep -v "^==PROF" | head -60
