#!/usr/bin/env bash
# Stop 56, call 3 (an H200 if one comes; the session's last ~320 s): main's head (vM) on the
# H200 beside PyTorch + graph (gpu_compare.sh without whisper.cpp, which would not build in the
# time left), then 16 parakeet clips three times. Carry dist/c1 dist/tools.
set -uo pipefail
PACK=dist/c1/all.tar.xz V=vM source tools/bench/device_env.sh
P=parakeet-tdt-0.6b-v2
STAPES=/tmp/x/vM/stapes OUT=$O/cmp ITERS=10 TOOLS=dist/tools timeout 200 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
tail -40 $O/cmp.txt
(cd $O && tar -cJf cmp.tar.xz cmp && rm -rf cmp)
for r in 1 2 3; do e vM $P q8 16; done
echo "done, elapsed $(el) s"
