#!/bin/bash
# device: build + run the awg harness: the repo's kernel, then poly-exp variants (harness only)
export PATH=/usr/local/cuda/bin:$PATH
cd dist/awg
K=../../crates/stapes-cuda/kernels
for v in base 0x88 0xaa 0x92; do
  cp $K/common.cuh $K/attention.cu $K/attn_wg.cu .
  [ $v != base ] && python3 poly.py $v
  nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -Xptxas -v -o awg_$v main.cu -lcuda 2>&1 | grep -E "error|registers|spill" | grep -B1 -A0 -E "error|awg64" | head -8
  echo "== variant $v"; ./awg_$v 4 2>&1 | tee $OUT/awg_$v.txt
done
