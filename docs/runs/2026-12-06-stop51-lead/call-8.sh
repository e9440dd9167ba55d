#!/usr/bin/env bash
# Stop 51 call 8 (~400 s of device time left: too little to build whisper.cpp): `fp8` after
# b37da49 (vT: its fed/plain tests now run their chains through one helper); on an H200 also
# main (vM = 70ab7a4) beside PyTorch + graph, every family (tools/bench/gpu_compare.sh, no
# whisper.cpp). Carry dist/vM.tar.xz dist/vT.tar.xz dist/tools.
set -uo pipefail
V=vT source tools/bench/device_env.sh
t fp8
grep -E "^test " /tmp/o/fp8.log | head -20
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  tar -xJf dist/vM.tar.xz -C /tmp/x
  STAPES=/tmp/x/vM/stapes OUT=$O/cmp ITERS=20 TOOLS=dist/tools timeout 300 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
  tail -30 $O/cmp.txt
  (cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
fi
echo "done, elapsed $(el) s"
