#!/bin/bash
# device: build + run the awg harness
set -x; export PATH=/usr/local/cuda/bin:$PATH; which nvcc
cd dist/awg
K=../../crates/stapes-cuda/kernels
cp $K/common.cuh $K/attention.cu $K/attn_wg.cu .
nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -Xptxas -v -o awg main.cu -lcuda 2>&1 | grep -E "error|awg64|registers|spill|flash64_w4m2s2" | head -40
for s in 3 4; do ./awg $s; done 2>&1 | tee $OUT/awg.txt
