#!/usr/bin/env bash
# The last of the device time on the chance of an H200 (the targets' card): main (vA) beside
# PyTorch + graph there. On an H100 it stops at once (call 2 already has that card's table).
# Carry dist/c49b and dist/tools.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: nothing run"; exit 0; }
mkdir -p /tmp/stage
xz -dc dist/c49b/all.tar.xz | tar -C /tmp/stage -xf - vA
tar -C /tmp/stage -cf - vA | xz -0 -T0 > dist/vA.tar.xz
V=vA source tools/bench/device_env.sh
MODELS="whisper-large-v3-turbo parakeet-tdt-0.6b-v2 canary-1b-flash" STAPES=$B/stapes \
  OUT=/tmp/o/cmp ITERS=20 TOOLS=dist/tools timeout 150 bash tools/bench/gpu_compare.sh
tar -C /tmp/o -cJf $O/cmp.tar.xz cmp
echo "done, elapsed $(el) s"
