#!/usr/bin/env bash
# Stop 51 call 7: a second probe for an H200, sized to the device time left (~620 s): there,
# whisper.cpp (233fe1fc9, CUDA, sm_90, from dist/wcpp.tar.xz) is built with every core, then
# tools/bench/gpu_compare.sh runs ours (main, vM = 70ab7a4), PyTorch + graph and whisper.cpp in
# one run (10 iterations). On an H100 it only names the card. Carry dist/vM.tar.xz dist/tools
# dist/wcpp.tar.xz.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || exit 0
V=vM source tools/bench/device_env.sh
W=/tmp/w; mkdir -p $W && xz -dc dist/wcpp.tar.xz | tar -C $W -xf -
(cd $W && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF \
   -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/wcmake.log 2>&1 &&
 timeout 330 cmake --build build -j 16 --target whisper-bench whisper-cli >> /tmp/wcmake.log 2>&1)
echo "whisper.cpp build rc $?, elapsed $(el) s"; tail -3 /tmp/wcmake.log; cp /tmp/wcmake.log $O/
STAPES=$B/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools WCPP_BIN=$W/build/bin \
  timeout $(( 570 - $(el) )) bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
tail -30 $O/cmp.txt
(cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
echo "done, elapsed $(el) s"
