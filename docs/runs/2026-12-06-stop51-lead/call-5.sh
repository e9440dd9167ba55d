#!/usr/bin/env bash
# Stop 51 call 5: on an H200, call-h1.sh (whisper.cpp built beside main's GPU tests; h2-h3
# follow on the same machine). On an H100: what the norms' f16 copies still cost at 16 clips now
# that the pair writes e4m3 too: vX = main + stop 49's ablation-norm-no-f16-copy.diff.txt (the
# 16-byte norms store no f16 where they store e4m3; results wrong where f16 is read, timing
# only) against vM (main), alternating. Carry dist/vM.tar.xz dist/vX.tar.xz dist/tools
# dist/wcpp.tar.xz.
set -uo pipefail
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/runs/2026-12-06-stop51-lead/call-h1.sh
fi
V=vM source tools/bench/device_env.sh
tar -xJf dist/vX.tar.xz -C /tmp/x
P=parakeet-tdt-0.6b-v2
for v in vM vX; do E_ITERS=2 e $v $P q8 16 > /dev/null; done
for r in 1 2 3; do e vM $P q8 16; e vX $P q8 16; done
for r in 1 2; do e vM $P; e vX $P; done
echo "done, elapsed $(el) s"
