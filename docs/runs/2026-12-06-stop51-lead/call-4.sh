#!/usr/bin/env bash
# Stop 51 call 4: on an H200, call-h1.sh (whisper.cpp built beside main's GPU tests; h2-h3 follow
# on the same machine). On an H100: main (vM = 70ab7a4) beside PyTorch + graph in one run
# (tools/bench/gpu_compare.sh without whisper.cpp). Carry dist/vM.tar.xz dist/tools dist/wcpp.tar.xz.
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/runs/2026-12-06-stop51-lead/call-h1.sh
fi
V=vM source tools/bench/device_env.sh
STAPES=$B/stapes OUT=$O/cmp ITERS=20 TOOLS=dist/tools timeout 500 bash tools/bench/gpu_compare.sh > $O/cmp.txt 2>&1
tail -32 $O/cmp.txt
echo "done, elapsed $(el) s"
