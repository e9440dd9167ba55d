#!/bin/bash
export PATH=/usr/local/cuda/bin:$PATH
cd dist/ln
cp ../../crates/stapes-cuda/kernels/common.cuh ../../crates/stapes-cuda/kernels/norm.cu .
nvcc -O3 -std=c++17 -arch=sm_90 -o ln main.cu 2>&1 | grep -E "error" | head
./ln | tee $OUT/ln.txt
ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"layer_norm_rows|ln16" -c 8 ./ln 2>&1 | grep -E "layer_norm_rows|ln16|duration" | head -20
