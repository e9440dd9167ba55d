#!/bin/bash
export PATH=/usr/local/cuda/bin:$PATH
cd dist/gv
K=../../crates/stapes-cuda/kernels
cp $K/common.cuh $K/step.cu .
nvcc -O3 -std=c++17 -arch=sm_90 -Xptxas -v -o gv main.cu 2>&1 | grep -E "error|gemv_reg|registers" | grep -B1 -E "error|Used" | grep -E "error|Used|Function" | head -20
./gv 2>&1 | tee $OUT/gv.txt
