#!/usr/bin/env bash
# Stop 52 call 1 (stop 51's call-h1.sh, main = b697903): first of the back-to-back calls on one warm H200 (h1, h2, h3, call-h-part.sh as often
# as parts are left, h4: the real tiny.en and base ggml files, ~197 MB as xz, travel as the parts
# tools/bench/stage_real_weights.sh cuts, dist/rwN/part, one or two a call beside the rest;
# /tmp keeps them between calls). On another card this call only runs main's GPU tests.
# vM = main (b697903) with its test binaries.
# h1: whisper.cpp (ggml-org/whisper.cpp 233fe1fc9, public tree without models/ bindings/ media/
# samples/ tests/) built with CUDA for sm_90 in the background while main's GPU tests run.
# Carry dist/vM.tar.xz dist/tools dist/wcpp.tar.xz (and a dist/rwN where the tree leaves room).
set -uo pipefail
V=vM source tools/bench/device_env.sh
H200=0; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && H200=1
mkdir -p /tmp/rw; for d in dist/rw[0-9]*; do [ -f "$d/part" ] && cp "$d/part" "/tmp/rw/${d#dist/rw}"; done
W=/tmp/w
if [ $H200 = 1 ] && [ ! -x $W/build/bin/whisper-bench ]; then
  mkdir -p $W && xz -dc dist/wcpp.tar.xz | tar -C $W -xf -
  (cd $W && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DWHISPER_BUILD_TESTS=OFF \
     -DWHISPER_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/wcmake.log 2>&1 &&
   timeout 500 cmake --build build -j 12 --target whisper-bench whisper-cli >> /tmp/wcmake.log 2>&1; echo "cmake rc $?" >> /tmp/wcmake.log) &
  WB=$!
fi
# cuda_batch needs real weights (STAPES_GPU_MODEL): h4 runs it with the parts
TEST_LIMIT=150
for b in fp8 ln_pair conformer_ops graphs cuda_parakeet cuda_canary parakeet_batch q8_accuracy cuda_whisper pdl; do t $b; done
grep -h "fp8_norm_pair" /tmp/o/fp8.log
mkdir -p $O/tests; cp /tmp/o/*.log $O/tests/
echo "tests done, elapsed $(el) s"
if [ $H200 = 1 ]; then
  wait $WB; tail -3 /tmp/wcmake.log; cp /tmp/wcmake.log $O/
  ls -la $W/build/bin/ | grep whisper
fi
echo "done, elapsed $(el) s"
